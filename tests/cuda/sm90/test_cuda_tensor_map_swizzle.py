"""Each tensor map's swizzle and element type are its own (TensorMapSpec in
gemmgen/backends/cuda/launch.py): the spec's checks, and a launch plan whose
rhs map is raw bytes (`uint8`) with a 64-byte swizzle, printed into the C++
launcher (the gg_tensor_map call) and the Python launcher (TensorMapArg),
whose maps reach the emulator path (verify_cuda.launch_arguments) and the
CuPy call's encoder (`_tensor_map`, here calling the emulator's
cuTensorMapEncodeTiled in place of libcuda's) with exactly that swizzle,
while the lhs map keeps its 128 bytes.

The plan is dense_gemm_bf16's (specs/dense.gemm) with its Hopper rhs map
replaced; the kernel itself is not run (its body reads B with 128-byte
swizzle), only the launchers' arguments are checked."""

from __future__ import annotations

import ctypes
import dataclasses
import re
import struct
import types
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC

from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda.expr import var
from gemmgen.backends.cuda.launch import (
    TENSOR_MAP_DTYPES,
    TENSOR_MAP_SWIZZLES,
    TensorMapSpec,
    tensor_map,
)
from gemmgen.build import load
from gemmgen.harness import cuda_emu, cuda_gpu
from gemmgen.harness.runner import load_generated_module
from gemmgen.harness.verify_cuda import launch_arguments
from gemmgen.render import header_text, render_template

REPO = Path(__file__).resolve().parents[3]
BF16 = ml_dtypes.bfloat16
K, N = var("k"), var("n")


# ---------------------------------------------------------------------------
# The spec's swizzle and dtype, and their checks.


@pytest.mark.parametrize(("span", "name", "value"), [
    (0, "CU_TENSOR_MAP_SWIZZLE_NONE", 0), (32, "CU_TENSOR_MAP_SWIZZLE_32B", 1),
    (64, "CU_TENSOR_MAP_SWIZZLE_64B", 2), (128, "CU_TENSOR_MAP_SWIZZLE_128B", 3),
])
def test_the_swizzle_span_names_its_cuda_enum(span, name, value):
    t = TensorMapSpec("uint8", (K, N), (K,), (max(span, 16), 8), swizzle=span)
    assert (t.cu_swizzle, t.swizzle_code) == (name, value)
    # cuda.h's values, as the emulator's encoder reads them.
    assert value == cuda_emu.TensorMapSwizzle[name.removeprefix("CU_TENSOR_MAP_SWIZZLE_")
                                              .replace("32B", "B32").replace("64B", "B64")
                                              .replace("128B", "B128")]


def test_the_default_swizzle_is_128_bytes():
    t = TensorMapSpec("bfloat16", (K, N), (K * 2,), (64, 128))
    assert (t.swizzle, t.cu_swizzle, t.swizzle_code) == (128, "CU_TENSOR_MAP_SWIZZLE_128B", 3)


def test_the_dtypes_are_cudas():
    # Name, value and element size as the emulator's cuda.h tables have them.
    for dtype, (name, code, size) in TENSOR_MAP_DTYPES.items():
        member = cuda_emu.TensorMapDataType[name.removeprefix("CU_TENSOR_MAP_DATA_TYPE_")]
        assert (int(member), cuda_emu._ELEMENT_BYTES[member]) == (code, size), dtype
    raw = TensorMapSpec("uint8", (K, N), (K,), (64, 8), swizzle=64)
    assert (raw.cu_dtype, raw.code, raw.element_bytes) == ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 0, 1)
    assert set(TENSOR_MAP_SWIZZLES) == {0, 32, 64, 128}


@pytest.mark.parametrize(("dtype", "box", "swizzle", "message"), [
    ("uint8", (64, 8), 48, r"swizzle 48: the span in bytes is 0 \(none\), 32, 64 or 128"),
    ("uint8", (64, 8), 3, "swizzle 3: the span in bytes"),  # the enum value is not the span
    ("uint8", (64, 8), True, "swizzle True"),
    ("uint8", (128, 8), 64, r"box \(128, 8\): its inner extent, 128 bytes, is more than the 64"),
    ("bfloat16", (64, 8), 64, r"box \(64, 8\): its inner extent, 128 bytes, is more than the 64"),
    ("bfloat16", (32, 8), 32, r"inner extent, 64 bytes, is more than the 32-byte swizzle span"),
    ("uint8", (24, 8), 32, r"inner extent, 24 bytes, is not a multiple of 16 bytes"),
    ("int8", (64, 8), 64, "dtype 'int8': not one of bfloat16, float16, float8_e4m3fn"),
])
def test_a_bad_map_is_refused(dtype, box, swizzle, message):
    with pytest.raises(ValueError, match=message):
        TensorMapSpec(dtype, (K, N), (K,), box, swizzle=swizzle)


@pytest.mark.parametrize(("dtype", "box", "swizzle"), [
    ("uint8", (64, 8), 64), ("uint8", (32, 8), 32), ("uint8", (16, 8), 64),
    ("bfloat16", (256, 8), 0),  # no swizzle: no span to stay inside
    ("float8_e4m3fn", (128, 128), 128),
])
def test_a_good_map_is_taken(dtype, box, swizzle):
    assert TensorMapSpec(dtype, (K, N), (K,), box, swizzle=swizzle).swizzle == swizzle


# ---------------------------------------------------------------------------
# Through the launchers.

# rhs [n, k] bf16 viewed as bytes: {2k, n}, rows of 2k bytes, a {64, 32}
# box (64 bytes, the whole span) with 64-byte swizzle.
RAW_RHS = TensorMapSpec("uint8", (K * 2, N), (K * 2,), (64, 32), swizzle=64)


@pytest.fixture(scope="module")
def plans():
    """dense_gemm_bf16's launch plan, and the same with RAW_RHS as its rhs map."""
    spec, _ = load(REPO / "specs" / "dense.gemm")
    lp = cuda_backend.plan(spec.kernel("dense_gemm_bf16"), spec)
    assert all(v.path("wgmma") is not None and v.path("tcgen05") is not None
               for v in lp.variants)

    def patch(step):
        args = tuple(tensor_map("rhs", RAW_RHS) if a.tmap is not None and a.name == "rhs" else a
                     for a in step.args)
        return dataclasses.replace(step, args=args)

    variants = tuple(dataclasses.replace(v, paths=tuple(
        dataclasses.replace(p, steps=tuple(map(patch, p.steps))) for p in v.paths))
                     for v in lp.variants)
    return spec, lp, dataclasses.replace(lp, variants=variants)


def test_the_cpp_launcher_passes_each_maps_swizzle(plans):
    spec, lp, raw = plans
    header = header_text(spec.path)
    source = render_template(raw.template, header=header, plan=raw.detail, launch=raw)
    calls = re.findall(r"err = gg_tensor_map\((.*?)\);", source, re.DOTALL)
    # Two maps for each path of each variant (Hopper, sm_100a).
    assert len(calls) == 2 * sum(len(v.paths) for v in raw.variants) == 4 * len(raw.variants)
    for call in calls:
        args = [a.strip() for a in call.split(",")]
        assert len(args) == 13 and args[3].startswith("CU_TENSOR_MAP_SWIZZLE_")
        if args[0] == "&map_lhs":
            assert args[2:5] == ["CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "CU_TENSOR_MAP_SWIZZLE_128B",
                                 "2"]
        else:
            assert args[:5] == ["&map_rhs", "a.rhs", "CU_TENSOR_MAP_DATA_TYPE_UINT8",
                                "CU_TENSOR_MAP_SWIZZLE_64B", "2"]
            assert args[5:] == ["k * 2", "n", "1", "k * 2", "0", "64", "32", "1"]
    # gg_tensor_map hands its swizzle argument to the encoder, and nothing else does.
    helper = source[source.index("inline cudaError_t gg_tensor_map("):]
    helper = helper[:helper.index("\n}\n")]
    assert "CUtensorMapSwizzle swizzle," in helper
    assert "CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle," in helper
    assert "CU_TENSOR_MAP_SWIZZLE_" not in helper
    # The unpatched plan prints 128B for both maps: what generated/ holds.
    original = render_template(lp.template, header=header, plan=lp.detail, launch=lp)
    maps = 2 * sum(len(v.paths) for v in lp.variants)
    assert original.count("CU_TENSOR_MAP_SWIZZLE_128B") == maps
    assert "CU_TENSOR_MAP_SWIZZLE_64B" not in original


@pytest.fixture(scope="module")
def raw_launcher(plans, tmp_path_factory):
    spec, _, raw = plans
    path = tmp_path_factory.mktemp("swizzle") / "dense_gemm_bf16_raw_rhs.py"
    path.write_text(render_template("cuda/launcher.py.j2", header=header_text(spec.path), plan=raw))
    return load_generated_module(path, "test_tensor_map_swizzle_dense_gemm_bf16_raw_rhs")


def hopper_step(launcher, m, n, k):
    """Fresh bf16 inputs of m x n x k, and the Hopper launch of an sm_90a
    device with 132 SMs."""
    rng = np.random.default_rng()
    inputs = {"lhs": rng.standard_normal((m, k)).astype(BF16),
              "rhs": rng.standard_normal((n, k)).astype(BF16)}
    dims = launcher.validate(**inputs)
    (step,) = [s for s in launcher.launches(dims, 90, 132) if s.entry.endswith("_sm90")]
    return inputs, step


def test_the_python_launcher_carries_each_maps_swizzle(raw_launcher):
    m, n, k = 80, 96, 160
    _, step = hopper_step(raw_launcher, m, n, k)
    maps = {a.array: a for a in step.args if isinstance(a, raw_launcher.TensorMapArg)}
    assert maps["lhs"] == raw_launcher.TensorMapArg("lhs", 9, (k, m), (2 * k,), (64, 128), 3)
    assert maps["rhs"] == raw_launcher.TensorMapArg("rhs", 0, (2 * k, n), (2 * k,), (64, 32), 2)
    assert raw_launcher.TENSOR_MAP_MODES == (0, 3, 0)  # interleave, L2 promotion, OOB fill


def test_the_emulator_path_encodes_each_maps_swizzle(raw_launcher):
    inputs, step = hopper_step(raw_launcher, 80, 96, 160)
    arrays = {name: None for name in raw_launcher.DTYPES} | inputs | {"workspace": None}
    args, _, buffers = launch_arguments(step, arrays, written={"out", "workspace"})
    lhs, rhs = (a for a in args if isinstance(a, cuda_emu.TensorMap))
    # Each map over its own array, passed in `buffers` after the arguments.
    assert buffers[lhs.buffer - len(args)] is inputs["lhs"]
    assert buffers[rhs.buffer - len(args)] is inputs["rhs"]
    assert (lhs.dtype, lhs.swizzle) == (cuda_emu.TensorMapDataType.BFLOAT16,
                                        cuda_emu.TensorMapSwizzle.B128)
    assert (rhs.dtype, rhs.swizzle) == (cuda_emu.TensorMapDataType.UINT8,
                                        cuda_emu.TensorMapSwizzle.B64)
    assert (rhs.global_dims, rhs.global_strides_bytes, rhs.box) == ((320, 96), (320,), (64, 32))
    assert (rhs.interleave, rhs.l2_promotion, rhs.oob_fill) == (0, 3, 0)


# The CuPy call's ctypes encode, against the emulator's encoder (the driver's
# signature; gg_emu_sm90.h's MapBits say what arrived).
# magic, dtype, rank, swizzle, element bytes, address, dims, strides, box
MAP_BITS = struct.Struct("<I4BQ5Q5Q5I")


@pytest.fixture(scope="module")
def emu_encoder():
    module = cuda_emu.EmuModule.from_file(CUDA_SRC / "sm90_tensor_map_args.cu")
    library = ctypes.CDLL(str(module.library))
    return cuda_gpu.ENCODE_TILED(("gg_emu_cuTensorMapEncodeTiled", library))


def test_the_cupy_call_encodes_each_maps_swizzle(raw_launcher, emu_encoder, monkeypatch):
    _, step = hopper_step(raw_launcher, 80, 96, 160)
    monkeypatch.setattr(raw_launcher, "_encoder", lambda: emu_encoder)
    address = 0x7F0000001000
    device_array = types.SimpleNamespace(data=types.SimpleNamespace(ptr=address))
    got = {}
    for a in step.args:
        if isinstance(a, raw_launcher.TensorMapArg):
            encoded = raw_launcher._tensor_map(device_array, a)
            assert encoded.size == 1 and encoded.itemsize == 128
            magic, dtype, rank, swizzle, eb, base, *rest = MAP_BITS.unpack_from(encoded.tobytes())
            assert (magic, base, rank) == (0x4D544747, address, 2)
            # dims, strides (strides[0] is the element size), box
            got[a.array] = (dtype, swizzle, eb, rest[0:2], rest[5:7], rest[10:12])
    assert got == {"lhs": (9, 3, 2, [160, 80], [2, 320], [64, 128]),
                   "rhs": (0, 2, 1, [320, 96], [1, 320], [64, 32])}
    # A map the encoder refuses names its swizzle.
    (rhs,) = [a for a in step.args if getattr(a, "array", None) == "rhs"]
    bad = dataclasses.replace(rhs, box=(128, 32))  # 128 bytes over a 64-byte span
    with pytest.raises(ValueError, match=r"map of rhs \(dims \(320, 96\), strides \(320,\), "
                                         r"box \(128, 32\), swizzle 2\)"):
        raw_launcher._tensor_map(device_array, bad)
