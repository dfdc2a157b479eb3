"""specs/b200.gemm (the block-scaled GEMMs of sm_100a and their quantizers)
through its CuPy and C++ launchers on the emulator of a B200 (sm_100a,
compute capability 10.0): each GEMM takes the block-scaled tcgen05 path
(its `_sm100` entry) and matches the NumPy reference on fresh random
operands and scales (ragged m / n / k, zero-size groups, group_offset with
existing_out). The Rust, JAX FFI and PyTorch launchers run a b200 kernel in
their own test files (test_rust_launchers.py, test_jax_ffi.py,
test_torch_ops.py), NVRTC builds the files in test_cuda_nvrtc.py. The
kernels with a 2-CTA entry (m >= 512) run here at decode sizes (their 1-CTA
entry); every launcher family runs one at prefill sizes in
test_b200_pair_launchers.py.

The unmarked cases are one per launcher family; every other kernel is
`slow`."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gemmgen.backends import cuda as cuda_backend
from gemmgen.build import render_spec
from gemmgen.cases import Case
from gemmgen.harness import cupy_standin
from gemmgen.harness.runner import load_generated_module
from gemmgen.harness.verify_cuda import run_cpp_launcher
from gemmgen.reference import compare, reference

pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="CuPy is not installed (pip install -e '.[gpu]')")

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "specs" / "b200.gemm"
DTYPE_BITS = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8,
              "float8_e8m0fnu": np.uint8}


@functools.cache
def rendered():
    return render_spec(SPEC)


@functools.cache
def folder() -> Path:
    d = Path(tempfile.mkdtemp(prefix="gemmgen-b200-"))
    for rel, text in rendered().files.items():
        if rel.parts[0] == "cuda":
            (d / rel.name).write_text(text)
    return d


_loaded = iter(range(10**6))


def launcher(name: str):
    return load_generated_module(folder() / f"{name}.py", f"test_b200_{name}_{next(_loaded)}")


def to_device(cupy, x, array: bool):
    """An input on the stand-in device when the launcher takes it as an
    array (a global scale's f32 [] too); scalars as they are."""
    if x is not None and array:
        x = np.asarray(x)
        bits = DTYPE_BITS.get(x.dtype.name)
        return cupy.asarray((x.view(bits) if bits else x).reshape(-1)).reshape(x.shape)
    return x


def host(out, dtype: str) -> np.ndarray:
    import ml_dtypes

    h = out.host().copy()
    return h.view(getattr(ml_dtypes, dtype)) if dtype in DTYPE_BITS else h.view(dtype)


# One case per kernel: ragged dims (k not a multiple of the K tile or of a
# scale atom's 4 blocks), zero-size groups; the sharded one with
# group_offset and existing_out.
CASES = {
    "b200_mxfp8_gemm": Case("ragged", m=130, n=200, k=224),
    "b200_mxfp8_moe_grouped_gemm": Case("groups", m=150, n=160, k=160, group_sizes=(100, 0, 50)),
    "b200_mxfp4_gemm": Case("ragged", m=1, n=136, k=320),
    "b200_mxfp4_moe_grouped_gemm": Case("sharded", m=140, n=128, k=192,
                                        group_sizes=(40, 0, 75, 25), group_offset=1, g_local=2,
                                        existing_out=True),
    "b200_nvfp4_gemm": Case("ragged", m=77, n=136, k=288),
    "b200_nvfp4_moe_grouped_gemm": Case("groups", m=150, n=192, k=320, group_sizes=(100, 0, 50)),
    "b200_nvfp4_moe_gateup_silu": Case("groups", m=90, n=256, k=256, group_sizes=(60, 30)),
    "b200_w4a8_moe_grouped_gemm": Case("groups", m=140, n=136, k=192, group_sizes=(0, 128, 12)),
    # The 2-CTA kernels at decode sizes (their 1-CTA entry; the pair entry's
    # cases are test_b200_pair_launchers.py's).
    "b200_bf16_moe_grouped_gemm": Case("groups", m=70, n=136, k=80, group_sizes=(50, 0, 20)),
    "b200_fp8_moe_grouped_gemm": Case("groups", m=33, n=160, k=208, group_sizes=(0, 33)),
    "b200_bf16_moe_gateup_silu": Case("groups", m=9, n=256, k=72, group_sizes=(1, 8)),
    "b200_fp8_blockscaled_moe_grouped_gemm": Case("groups", m=33, n=160, k=208,
                                                  group_sizes=(0, 33)),
    "b200_w4a16_moe_grouped_gemm": Case("groups", m=70, n=136, k=288, group_sizes=(50, 0, 20)),
    "b200_mxfp8_quant": Case("ragged", m=37, n=128, k=352),
    "b200_mxfp4_quant": Case("ragged", m=37, n=128, k=352),
    "b200_nvfp4_quant": Case("ragged", m=37, n=128, k=352),
}
FAST_CUPY, FAST_CPP = "b200_nvfp4_moe_grouped_gemm", "b200_w4a8_moe_grouped_gemm"


def test_every_kernel_of_the_spec_has_a_case():
    names = {k.name for k in rendered().spec.kernels}
    assert names == set(CASES), names ^ set(CASES)


# The kernels with a 2-CTA entry (an m=256 entry for m >= 512; at the
# decode sizes here their 1-CTA entry, `_t2_sm100`, after the multicast and
# pair entries): the 16-bit and FP8 ones (epilogue scales), FP8 with DeepSeek's
# scales promoted in software, the weight-only W4A16, and the fp4 and W4A8
# ones, block-scaled as every GEMM of the spec but those five.
EPILOGUE_SCALED = ("b200_bf16_moe_grouped_gemm", "b200_fp8_moe_grouped_gemm",
                   "b200_bf16_moe_gateup_silu")
NOT_BLOCK_SCALED = (*EPILOGUE_SCALED, "b200_fp8_blockscaled_moe_grouped_gemm",
                    "b200_w4a16_moe_grouped_gemm")
PAIR = (*NOT_BLOCK_SCALED, "b200_mxfp4_gemm", "b200_mxfp4_moe_grouped_gemm", "b200_nvfp4_gemm",
        "b200_nvfp4_moe_grouped_gemm", "b200_nvfp4_moe_gateup_silu", "b200_w4a8_moe_grouped_gemm")


def test_every_gemm_takes_the_tcgen05_path_on_10_0():
    """The plan of each GEMM on a B200 (148 SMs) ends in its `_sm100` entry
    (the 2-CTA kernels' in their decode entry, `_t2_sm100`), on the block-scaled
    MMA but for the 16-bit and FP8 kernels, and no other device runs the
    spec."""
    spec = rendered().spec
    for k in spec.kernels:
        plan = cuda_backend.plan(k, spec)
        if k.op.value == "quantize":
            continue
        assert k.tcgen05_block_scaled == (k.name not in NOT_BLOCK_SCALED), k.name
        module = launcher(k.name)
        dims = module.validate(**CASES[k.name].inputs(k, 1))
        steps = module.launches(dims, 100, 148)
        entry = f"{k.name}_t2_sm100" if k.name in PAIR else f"{k.name}_sm100"
        assert steps[-1].entry == entry, (k.name, steps)
        assert getattr(steps[-1], "cluster", (1, 1, 1)) == (1, 1, 1), k.name
        assert "older than" in module.arch_error(90) and module.arch_error(100) is None
        assert plan.archs == ("sm_100a",)


def cupy_call(name: str, seed: int):
    spec = rendered().spec
    k = spec.kernel(name)
    case = CASES[name]
    inputs = case.inputs(k, seed)
    module = launcher(name)
    with cupy_standin.install(folder(), "sm_100a") as cupy:
        args = {a: to_device(cupy, v, a in module.DTYPES) for a, v in inputs.items()}
        outs = getattr(module, name)(**args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        got = tuple(host(o, module.DTYPES[n]) for o, n in zip(outs, module.OUTPUTS))
    return k, case, inputs, (got[0] if len(got) == 1 else got), cupy


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n == FAST_CUPY else pytest.mark.slow)
                                  for n in CASES])
def test_cupy_call_on_an_emulated_b200(name):
    k, case, inputs, got, cupy = cupy_call(name, 31)
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()}:\n{result.detail}"
    assert any("-arch=sm_100a" in " ".join(map(str, o)) for o in cupy.options_seen), cupy.options_seen
    if k.op.value != "quantize":
        entry = f"{name}_t2_sm100" if name in PAIR else f"{name}_sm100"
        assert cupy.launches[-1]["entry"] == entry, cupy.launches
        # 320 threads: the weight-only tile's transform warpgroup.
        assert cupy.launches[-1]["block"] == (320 if "w4a16" in name else 192, 1, 1)


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n == FAST_CPP else pytest.mark.slow)
                                  for n in CASES if not n.endswith("_quant")])
def test_cpp_launcher_on_an_emulated_b200(name):
    spec = rendered().spec
    k = spec.kernel(name)
    case = CASES[name]
    inputs = case.inputs(k, 37)
    got = run_cpp_launcher(cuda_backend.plan(k, spec), folder(), inputs, arch="sm_100a")
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()} (C++ launcher):\n{result.detail}"


def test_explain_bounds_at_the_block_scaled_rates():
    """`gemmgen explain` bounds each GEMM of the spec on a B200 at the rate
    of what its tensor cores multiply: fp4 x fp4 (MXFP4, NVFP4) at the FP4
    rate, MXFP8, W4A8 (kind::mxf8f6f4) and FP8 at the FP8 rate, bf16 at
    the 16-bit rate (gemmgen.devices, the HGX B200 specifications: 9, 4.5
    and 2.25 PFLOP/s dense)."""
    from gemmgen.devices import DEVICES
    from gemmgen.explain.roofline import roofline, tensor_path

    b200 = DEVICES["b200"]
    assert (b200.rate(4), b200.rate(8), b200.rate(16)) == (9000.0, 4500.0, 2250.0)
    for k in rendered().spec.kernels:
        if k.op.value == "quantize":
            continue
        path = tensor_path(k, "sm_100a")
        bits = max(k.lhs.dtype.bits, k.rhs_operand.dtype.bits)
        rate = {4: 9000, 8: 4500, 16: 2250}[bits]
        assert path.tcgen05 and path.rate(b200) == rate, k.name
        lines = roofline(k, 2 * 8192**3, 1, archs=("sm_100a",), device=b200)
        assert any(f"{rate} TFLOP/s {bits}-bit tcgen05.mma" in x for x in lines), (k.name, lines)
