"""The generated CuPy call, `<kernel>(...)` of each launcher's .py, run end to
end on the CPU: its NVRTC build (the real NVRTC), module load and function
lookup (checked against the cubin), the shared-memory opt-in attribute, its
argument packing (pointers, scalars, tensor maps by value through a
driver-signature encoder), workspace and stream handling, and the launches
themselves on the emulator (gemmgen/harness/cupy_standin.py), compared with the NumPy
reference. Planted bugs in the launcher text must be caught.

- one case per kernel kind and path: the Hopper path (wgmma, tensor maps:
  bf16 grouped, FP8 block-scaled, weight-only) on an sm_90a device, the
  mma.sync path on an sm_89 device, tgmm, GEMV, quantize;
- foreign arrays (DLPack and __cuda_array_interface__) used without a copy;
  host arrays, CPU DLPack arrays and wrong dtypes refused with a message;
- a caller's workspace and stream; the arch refusal;
- the signature cache: a repeated call skips the checks, and a call that
  differs from a cached one in anything a check reads (shape, dtype,
  strides, alignment, device, a host array, the workspace, the group count,
  a scalar) is checked again and refused as on a first call.
"""

from __future__ import annotations

import functools
import ctypes
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gemmgen.build import render_spec
from gemmgen.cases import Case
from gemmgen.harness.nvcc import find_cuda_tool, sass_text
from gemmgen.harness.runner import load_generated_module
from gemmgen.reference import compare, reference
from gemmgen.harness import cupy_standin

pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="CuPy is not installed (pip install -e '.[gpu]')")

REPO = Path(__file__).resolve().parents[2]
DTYPE_BITS = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}


@functools.cache
def rendered(stem: str):
    return render_spec(REPO / "specs" / f"{stem}.gemm")


@functools.cache
def folder(stem: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=f"gemmgen-cupy-{stem}-"))
    for rel, text in rendered(stem).files.items():
        if rel.parts[0] == "cuda":
            (d / rel.name).write_text(text)
    return d


_loaded = iter(range(10**6))


def launcher(stem: str, name: str, source: str | None = None):
    """The generated launcher module (a fresh import: its caches are its own);
    `source` replaces its text (a planted bug)."""
    path = folder(stem) / f"{name}.py"
    if source is not None:
        path = Path(tempfile.mkdtemp(prefix="gemmgen-cupy-planted-")) / f"{name}.py"
        for f in folder(stem).iterdir():
            if f.suffix in (".cu", ".h", ".cuh"):
                (path.parent / f.name).write_text(f.read_text())
        path.write_text(source)
    return load_generated_module(path, f"test_cupy_call_{name}_{next(_loaded)}")


def to_device(cupy, x):
    """A host input on the stand-in device (bf16 / FP8 as their bits, as a CuPy user passes them)."""
    if isinstance(x, np.ndarray) and x.ndim:
        bits = DTYPE_BITS.get(x.dtype.name)
        return cupy.asarray(x.view(bits) if bits else x)
    return x


def host(out, dtype: str) -> np.ndarray:
    import ml_dtypes

    h = out.host().copy()
    return h.view(getattr(ml_dtypes, dtype)) if dtype in DTYPE_BITS else h.view(dtype)


def call(stem: str, name: str, case: Case, *, seed: int = 3, arch: str | None = None, module=None, **kwargs):
    """Run the CuPy call on the stand-in device of `arch` (default the
    spec's newest arch); returns (kernel, inputs, host outputs, stand-in)."""
    spec = rendered(stem).spec
    k = spec.kernel(name)
    inputs = case.inputs(k, seed)
    arch = arch or _newest_arch(stem)
    module = module or launcher(stem, name)
    with cupy_standin.install(folder(stem), arch) as cupy:
        args = {a: to_device(cupy, v) for a, v in inputs.items()}
        args.update(kwargs.pop("override", {}))
        outs = getattr(module, name)(**args, **kwargs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        got = tuple(host(o, module.DTYPES[n]) for o, n in zip(outs, module.OUTPUTS))
    return k, inputs, (got[0] if len(got) == 1 else got), cupy


def _newest_arch(stem: str) -> str:
    from gemmgen import ir

    return rendered(stem).spec.target(ir.Backend.CUDA).cuda_archs[-1]


def check(stem, name, case, **kwargs):
    k, inputs, got, cupy = call(stem, name, case, **kwargs)
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()}:\n{result.detail}"
    return cupy


KINDS = {
    # The Hopper path: wgmma, tensor maps encoded through the stand-in driver.
    "Hopper bf16 grouped": ("moe", "moe_bf16_grouped_gemm", "sm_90a",
                            Case("sharded", m=150, n=128, k=64, group_sizes=(40, 0, 75, 20, 5),
                                 group_offset=1, g_local=3, existing_out=True)),
    "Hopper FP8 block-scaled": ("moe", "moe_fp8_grouped_gemm", "sm_90a",
                                Case("groups", m=40, n=128, k=256, group_sizes=(25, 15))),
    "Hopper weight-only": ("moe", "moe_w8a16_grouped_gemm_rhs_int8", "sm_90a",
                           Case("groups", m=20, n=128, k=128, group_sizes=(12, 8))),
    # The mma.sync path of an sm_89 device.
    "mma.sync dense": ("dense", "dense_gemm_bf16", "sm_89", Case("ragged", m=70, n=256, k=80)),
    "tgmm": ("moe", "moe_bf16_grad_rhs", "sm_90a", Case("ragged", m=100, n=128, k=256, group_sizes=(30, 0, 60, 5))),
    "GEMV": ("dense", "dense_gemv_bf16", "sm_89", Case("gemv", m=1, n=40, k=200)),
    "quantize": ("dense", "per_token_group_quant_fp8_out_scale_e8m0", "sm_89", Case("ragged", m=37, n=384, k=384)),
}


@pytest.mark.parametrize("kind", KINDS)
def test_cupy_call_matches_the_reference(kind):
    stem, name, arch, case = KINDS[kind]
    cupy = check(stem, name, case, arch=arch)
    assert cupy.launches, "nothing was launched"
    # NVRTC compiled the kernel with the launcher's own options, for the device's arch.
    module = launcher(stem, name)
    number = int(arch[3:5])
    assert cupy.options_seen and cupy.options_seen[0] == module.compile_options(number)
    for launch in cupy.launches:
        if launch["smem"] > 48 * 1024:
            assert launch["attribute"] == launch["smem"]


def test_the_hopper_path_is_what_runs_on_9_0():
    cupy = check("moe", "moe_bf16_grouped_gemm", Case("groups", m=40, n=128, k=32, group_sizes=(25, 15)),
                 arch="sm_90a")
    entries = [launch["entry"] for launch in cupy.launches]
    assert any("sm90" in e for e in entries), entries
    assert cupy.maps, "no tensor map was encoded"


# ---------------------------------------------------------------------------
# What the cubin is: the stand-in's reading of its arch against cuobjdump's.


@pytest.mark.skipif(find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90a"])
def test_the_cubin_arch_the_standin_reads_is_cuobjdumps(arch):
    from cupy_backends.cuda.libs import nvrtc

    nvrtc.getVersion()
    program = nvrtc.createProgram('extern "C" __global__ void probe(int* x) { x[0] = 1; }', "probe.cu", (), ())
    nvrtc.compileProgram(program, (f"-arch={arch}",))
    cubin = nvrtc.getCUBIN(program)
    nvrtc.destroyProgram(program)
    with pytest.raises(Exception, match="does not contain device code|invalid ELF"):
        sass_text(cubin)  # CuPy's getCUBIN drops the image's last byte, which the launchers pad back
    cubin += b"\0"
    assert f"code for {arch}\n" in sass_text(cubin)
    assert cupy_standin.cubin_arch(cubin) == int(arch[3:5])
    assert cupy_standin.cubin_functions(cubin) == {"probe"}


# ---------------------------------------------------------------------------
# Planted bugs in the launcher text


def planted(stem: str, name: str, old: str, new: str):
    text = (folder(stem) / f"{name}.py").read_text()
    assert text.count(old) == 1, f"the planted bug's anchor occurs {text.count(old)} times"
    return launcher(stem, name, text.replace(old, new))


GROUPED = ("moe", "moe_bf16_grouped_gemm", Case("groups", m=40, n=128, k=32, group_sizes=(25, 15)))


def test_a_dropped_attribute_call_is_caught():
    from gemmgen.harness.cuda_emu import EmuLaunchError

    stem, name, case = GROUPED
    module = planted(stem, name, "        _cupy().cuda.driver.funcSetAttribute(kernel.ptr, attribute, smem)\n",
                     "        pass\n")
    with pytest.raises(EmuLaunchError, match=r"bytes of dynamic shared memory requested, over the kernel's "
                                             r"limit of 49152"):
        call(stem, name, case, arch="sm_90a", module=module)


def test_a_wrong_encoder_argument_is_caught():
    """The box passed where the global dims go: the map the stand-in's
    encoder makes reaches past the array, which the emulator refuses before
    any thread runs."""
    from gemmgen.harness.cuda_emu import EmuLaunchError

    stem, name, case = GROUPED
    module = planted(stem, name, "        (ctypes.c_uint64 * rank)(*t.dims),\n",
                     "        (ctypes.c_uint64 * rank)(*t.box),\n")
    with pytest.raises(EmuLaunchError, match=r"argument #0 \(a tensor map over buffer #\d+, \d+ bytes\): the map "
                                             r"reaches \d+ bytes past the offset 0 .* beyond the buffer's end"):
        call(stem, name, case, arch="sm_90a", module=module)


def test_a_swapped_argument_pair_is_caught():
    """lhs and rhs swapped in the mma.sync launch: the kernel reads past the
    smaller array (the emulator's memory checker) or computes rhs @ lhs."""
    from gemmgen.harness.cuda_emu import EmuKernelError

    stem, name, case = ("dense", "dense_gemm_bf16", Case("ragged", m=70, n=256, k=80))
    module = planted(stem, name, '("lhs", "rhs", "out", gg_i32(m), gg_i32(n), gg_i32(k))',
                     '("rhs", "lhs", "out", gg_i32(m), gg_i32(n), gg_i32(k))')
    try:
        k, inputs, got, _ = call(stem, name, case, arch="sm_89", module=module)
    except EmuKernelError as e:
        assert "out-of-bounds access" in str(e), e
        return
    assert not compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


# ---------------------------------------------------------------------------
# Foreign arrays, workspace, stream


class DLPackArray:
    """A CUDA array of another library, as DLPack shows it: a capsule named
    "dltensor" holding a DLManagedTensor over stand-in device memory."""

    class _Managed(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                    ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
                    ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]

    def __init__(self, device_array, code: int, bits: int, *, device_type: int = 2, offset: int = 0) -> None:
        shape = device_array.shape
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._managed = self._Managed(device_array.data.ptr - offset, device_type, 0, len(shape), code, bits, 1,
                                      self._shape, None, offset, None, None)
        self.device_type, self.streams = device_type, []

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
        return new(ctypes.addressof(self._managed), b"dltensor", None)


def test_dlpack_arrays_are_used_in_place():
    """bf16 inputs and the output as DLPack arrays (code 4, bf16: what a
    PyTorch CUDA tensor exports): the kernel writes the caller's memory."""
    stem, name = "dense", "dense_gemm_bf16"
    case = Case("ragged", m=33, n=128, k=64)
    k = rendered(stem).spec.kernel(name)
    inputs = case.inputs(k, 5)
    module = launcher(stem, name)
    with cupy_standin.install(folder(stem), "sm_89") as cupy:
        lhs = cupy.asarray(inputs["lhs"].view(np.uint16))
        rhs = cupy.asarray(inputs["rhs"].view(np.uint16))
        out = cupy.empty((33, 128), np.uint16)
        foreign = {n: DLPackArray(a, 4, 16, offset=64 if n == "rhs" else 0)
                   for n, a in (("lhs", lhs), ("rhs", rhs), ("out", out))}
        stream = cupy.cuda.Stream()
        result = module.dense_gemm_bf16(foreign["lhs"], foreign["rhs"], out=foreign["out"], stream=stream)
        assert result.data.ptr == out.data.ptr  # the caller's memory, not a copy
        got = host(out, "bfloat16")
        assert foreign["lhs"].streams == [stream.ptr]
        assert {launch["stream"] for launch in cupy.launches} == {stream.ptr}
    assert compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


def test_cuda_array_interface_arrays_are_used_in_place():
    stem, name = "dense", "dense_gemv_bf16"
    case = Case("gemv", m=1, n=40, k=200)
    k = rendered(stem).spec.kernel(name)
    inputs = case.inputs(k, 6)
    module = launcher(stem, name)

    class Foreign:
        def __init__(self, a):
            self.__cuda_array_interface__ = a.__cuda_array_interface__

    with cupy_standin.install(folder(stem), "sm_89") as cupy:
        args = {a: Foreign(to_device(cupy, v)) if isinstance(v, np.ndarray) and v.ndim else v
                for a, v in inputs.items()}
        got = host(module.dense_gemv_bf16(**args), "bfloat16")
    assert compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


def test_bad_arrays_are_refused_with_a_message():
    stem, name = "dense", "dense_gemm_bf16"
    module = launcher(stem, name)
    k = rendered(stem).spec.kernel(name)
    inputs = Case("small", m=8, n=128, k=64).inputs(k, 1)
    with cupy_standin.install(folder(stem), "sm_89") as cupy:
        rhs = cupy.asarray(inputs["rhs"].view(np.uint16))
        lhs = cupy.asarray(inputs["lhs"].view(np.uint16))
        with pytest.raises(TypeError, match=r"dense_gemm_bf16: lhs is a NumPy array, in host memory"):
            module.dense_gemm_bf16(inputs["lhs"], rhs)
        with pytest.raises(ValueError, match=r"lhs is not in GPU memory \(DLPack device type 1\)"):
            module.dense_gemm_bf16(DLPackArray(lhs, 4, 16, device_type=1), rhs)
        with pytest.raises(ValueError, match=r"lhs must be bfloat16, got DLPack dtype \(2, 16, 1\)"):
            module.dense_gemm_bf16(DLPackArray(lhs, 2, 16), rhs)  # float16
        with pytest.raises(TypeError, match=r"rhs must be a GPU array .*got list"):
            module.dense_gemm_bf16(lhs, [1, 2])
        with pytest.raises(TypeError, match=r"stream must be a CuPy stream or have __cuda_stream__, got int"):
            module.dense_gemm_bf16(lhs, rhs, stream=7)
        assert not cupy.launches


def test_a_callers_workspace_and_external_stream():
    stem, name, case = GROUPED
    module = launcher(stem, name)
    k = rendered(stem).spec.kernel(name)
    inputs = case.inputs(k, 8)
    dims = module.validate(**inputs)
    ints = max(module.workspace_ints(dims), 4)

    class TorchLikeStream:
        def __cuda_stream__(self):
            return (0, 0x7777)

    with cupy_standin.install(folder(stem), "sm_90a") as cupy:
        args = {a: to_device(cupy, v) for a, v in inputs.items()}
        with pytest.raises(ValueError, match=rf"workspace must be a C-contiguous int32 array of at least {ints}"):
            getattr(module, name)(**args, workspace=cupy.empty(ints - 1, np.int32))
        workspace = cupy.empty(ints + 3, np.int32)
        before = workspace.host().copy()
        out = getattr(module, name)(**args, workspace=workspace, stream=TorchLikeStream())
        got = host(out, "bfloat16")
        assert not np.array_equal(workspace.host(), before), "the caller's workspace was not used"
        assert {launch["stream"] for launch in cupy.launches} == {0x7777}
    assert compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


def test_a_device_older_than_the_specs_archs_is_refused():
    stem, name = "dense", "dense_gemm_bf16"  # archs sm_89, sm_90a, sm_100a
    module = launcher(stem, name)
    k = rendered(stem).spec.kernel(name)
    inputs = Case("small", m=8, n=128, k=64).inputs(k, 1)
    with cupy_standin.install(folder(stem), "sm_80") as cupy:
        args = {a: to_device(cupy, v) for a, v in inputs.items()}
        with pytest.raises(RuntimeError, match=r"compute capability 8\.0 \(sm_80\), older than the archs "
                                               r"specs/dense\.gemm declares \(sm_89, sm_90a, sm_100a\)"):
            module.dense_gemm_bf16(**args)
        assert not cupy.launches and not cupy.options_seen


# ---------------------------------------------------------------------------
# The signature cache: a repeated call skips the checks, a changed one does not.


def test_a_repeated_shape_reuses_the_launch_plan_and_maps(monkeypatch):
    stem, name, case = GROUPED
    module = launcher(stem, name)
    k = rendered(stem).spec.kernel(name)
    inputs = case.inputs(k, 9)
    with cupy_standin.install(folder(stem), "sm_90a") as cupy:
        args = {a: to_device(cupy, v) for a, v in inputs.items()}
        first = host(getattr(module, name)(**args), "bfloat16")
        # A repeated signature runs neither validate() nor the planning.
        monkeypatch.setattr(module, "validate", lambda **_: pytest.fail("validate() ran again"))
        monkeypatch.setattr(module, "_prepare", lambda *_: pytest.fail("_prepare() ran again"))
        second = host(getattr(module, name)(**args), "bfloat16")  # a new, poisoned output
    assert len(module._CALLS) == 1 and module._steps.cache_info().misses == 1
    assert module._encoded_map.cache_info().misses == 2  # lhs and rhs, encoded once
    assert len(cupy.options_seen) == 1  # one NVRTC build
    for got in (first, second):
        assert compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


def _at(cupy, x, *, shape=None, dtype=None, strides=None, offset: int = 0, device: int = 0):
    """A stand-in array over x's memory (from `offset` bytes on), as CuPy
    makes one over a MemoryPointer: its shape, dtype, strides and device
    given."""
    memory = cupy.cuda.UnownedMemory(x.data.ptr + offset, x.nbytes - offset, x, device)
    return cupy.ndarray(shape or x.shape, dtype or x.dtype, memptr=cupy.cuda.MemoryPointer(memory, 0),
                        strides=strides)


def test_a_warm_cache_still_refuses_each_bad_call():
    """After a good call of a signature, a call that differs from it in one
    thing a check reads gets the first call's error, and launches nothing;
    the good call still runs and matches the reference."""
    stem, name = "dense", "dense_gemm_bf16"
    case = Case("small", m=8, n=128, k=64)
    module = launcher(stem, name)
    k = rendered(stem).spec.kernel(name)
    inputs = case.inputs(k, 12)
    with cupy_standin.install(folder(stem), "sm_89") as cupy:
        lhs = cupy.asarray(inputs["lhs"].view(np.uint16))
        rhs = cupy.asarray(inputs["rhs"].view(np.uint16))
        out = cupy.empty((8, 128), np.uint16)
        module.dense_gemm_bf16(lhs, rhs, out=out)
        assert compare(host(out, "bfloat16"), reference(k, **inputs), k, k=case.k, inputs=inputs).passed
        wide = cupy.empty((8, 128), np.uint16)  # lhs's rows 128 elements apart: not contiguous
        bad = {
            r"rhs must have shape \[128, 64\], got \[128, 32\]": dict(rhs=_at(cupy, rhs, shape=(128, 32))),
            r"out must have shape \[8, 128\], got \[8, 64\]": dict(out=_at(cupy, out, shape=(8, 64))),
            r"lhs must be bfloat16, got float16": dict(lhs=_at(cupy, lhs, dtype=np.float16)),
            r"lhs must be bfloat16, got int16": dict(lhs=_at(cupy, lhs, dtype=np.int16)),
            r"lhs must be C-contiguous": dict(lhs=_at(cupy, wide, shape=(8, 64), strides=(256, 2))),
            r"rhs must be 16-byte aligned": dict(rhs=_at(cupy, rhs, offset=2)),
            r"lhs is on device 1, not on the current device 0": dict(lhs=_at(cupy, lhs, device=1)),
            r"out is on device 1, not on the current device 0": dict(out=_at(cupy, out, device=1)),
            r"lhs is a NumPy array, in host memory": dict(lhs=inputs["lhs"]),
            r"workspace must be a C-contiguous int32 array": dict(workspace=cupy.empty(4, np.int16)),
        }
        launched = len(cupy.launches)
        for message, change in bad.items():
            call = {"lhs": lhs, "rhs": rhs, "out": out, **change}
            for _ in range(2):  # and again: a refused call is not cached
                with pytest.raises((ValueError, TypeError), match=message):
                    module.dense_gemm_bf16(**call)
        assert len(cupy.launches) == launched, "a refused call launched"
        assert len(module._CALLS) == 1
        poisoned = cupy.empty((8, 128), np.uint16)
        module.dense_gemm_bf16(lhs, rhs, out=poisoned)
        got = host(poisoned, "bfloat16")
    assert compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


def test_the_group_count_and_scalars_are_part_of_the_signature():
    """Grouped GEMM: a call with another group count of the same total rows
    is planned again (its workspace is larger: a caller's workspace sized for
    the first is refused), new group sizes of the same count reuse the plan
    (they are read on the device), and a changed group_offset is checked
    again; every result matches the reference."""
    stem, name = "moe", "moe_bf16_grouped_gemm"
    module = launcher(stem, name)
    k = rendered(stem).spec.kernel(name)
    two = Case("groups", m=40, n=128, k=32, group_sizes=(25, 15))
    three = Case("groups", m=40, n=128, k=32, group_sizes=(10, 15, 15))
    swapped = Case("groups", m=40, n=128, k=32, group_sizes=(15, 25))
    sharded = Case("sharded", m=40, n=128, k=32, group_sizes=(10, 15, 15), group_offset=1, g_local=2)
    with cupy_standin.install(folder(stem), "sm_90a") as cupy:
        def run(case, seed, offset=None, **kwargs):
            inputs = case.inputs(k, seed)
            if offset is not None:  # the call's group_offset; the reference gets its value
                inputs["group_offset"] = np.int32(int(offset))
            args = {a: to_device(cupy, v) for a, v in inputs.items()}
            if offset is not None:
                args["group_offset"] = offset
            got = host(getattr(module, name)(**args, **kwargs), "bfloat16")
            assert compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed, case.describe()
            return args

        dims = module.validate(**two.inputs(k, 1))
        workspace = cupy.empty(max(module.workspace_ints(dims), 4), np.int32)
        run(two, 1, workspace=workspace)
        run(swapped, 2, workspace=workspace)
        assert len(module._CALLS) == 1  # the same signature: group sizes are data on the device
        args = {a: to_device(cupy, v) for a, v in three.inputs(k, 3).items()}
        with pytest.raises(ValueError, match=r"workspace must be a C-contiguous int32 array of at least"):
            getattr(module, name)(**args, workspace=workspace)
        run(three, 3)
        assert len(module._CALLS) == 2
        args = run(sharded, 4)  # group_offset=1 as a NumPy 0-d array
        run(sharded, 5, offset=0)
        assert len(module._CALLS) == 4
        with pytest.raises(ValueError, match=r"group_offset must be a scalar, got shape \(2,\)"):
            getattr(module, name)(**{**args, "group_offset": np.array([1, 1])})
        with pytest.raises(ValueError, match=r"group_offset must fit in int32"):
            getattr(module, name)(**{**args, "group_offset": 2**31})

        class Tensor0d:
            """Another library's 0-d tensor: hashable by identity, changed in place."""

            ndim = 0

            def __init__(self, value: int) -> None:
                self.value = value

            def __int__(self) -> int:
                return self.value

        offset = Tensor0d(1)
        run(sharded, 6, offset=offset)
        offset.value = 0
        run(sharded, 7, offset=offset)  # its new value, not a cached plan's
        assert len(module._CALLS) == 4


def test_without_cupy_a_bad_call_gets_its_message_first(monkeypatch):
    stem, name = "dense", "dense_gemm_bf16"
    module = launcher(stem, name)
    k = rendered(stem).spec.kernel(name)
    inputs = Case("small", m=8, n=128, k=64).inputs(k, 1)
    monkeypatch.setitem(__import__("sys").modules, "cupy", None)  # `import cupy` fails: not installed
    with pytest.raises(ValueError, match=r"dense_gemm_bf16: rhs must have shape \[128, 64\], got \[128, 60\]"):
        module.dense_gemm_bf16(inputs["lhs"], np.ascontiguousarray(inputs["rhs"][:, :60]))
    with pytest.raises(ModuleNotFoundError, match=r"running the kernel needs CuPy, which is not installed"):
        module.dense_gemm_bf16(**inputs)
