"""MXFP8 with rhs [k, n] ([g, k, n] grouped) on the block-scaled tcgen05.mma
of the sm_100a body (issue 30; docs/cuda-sm100.md, "The block-scaled
path"): B is read MN-major from boxes of 128 columns (the transpose bit of
the block-scaled instruction descriptor; 8-bit, so N % 16), the scales of B
per n row either way. DeepSeek's e8m0 scales promoted in hardware take the
same B. What the plan gives them, the generated kernels on the emulator of an
sm_100a device against the NumPy reference (fresh random inputs, outputs
poisoned; m = 1, ragged m / n / k, k not a multiple of the K tile, zero-size
groups, group_offset with existing_out, the masked layout), a planted bug
(B read K-major), the diagnostics, and nvcc for sm_100a (UTCQMMA, no spills).

The unmarked cases are one of each kind; the rest are `slow`."""

from __future__ import annotations

import numpy as np
import pytest
from sm100_helpers import SM100, Sm100Spec

from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.cases import Case
from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, reference

SPEC = """
target cuda {
  archs sm_100a
}

defaults {
  lhs e4m3 [m, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  tile m=128 n=128 k=128
  backends cuda
}

kernel kn_dense {
  op dense
  rhs e4m3 [k, n]
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}

kernel kn_grouped {
  op grouped
  lhs e5m2 [m, k]
  rhs e5m2 [g, k, n]
  out f32
  bias f32 [n]
}

kernel kn_masked {
  op grouped
  lhs e4m3 [g, m, k]
  rhs e4m3 [g, k, n]
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}

kernel kn_deepseek {
  op grouped
  rhs e4m3 [g, k, n]
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=128 k=128 e8m0
}
"""

BODY = Sm100Spec("sm100kn", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check


def seed() -> int:
    return int(np.random.default_rng().integers(1 << 30))


def test_plan_gives_mxfp8_kn_block_scaled_tiles():
    for name in ("kn_dense", "kn_grouped", "kn_masked", "kn_deepseek"):
        k = kernel(name)
        assert k.tcgen05_block_scaled and k.tcgen05_obstacle() is None, name
        (t,) = tile_gemm.plan(k, BODY.spec).body_tiles("tcgen05")
        # One MN-major box of 128 columns; A's atom and B's.
        assert (t.bn, t.block_scaled, t.sf_stage, t.tmem_cols) == (128, True, 1024, 512), name
    assert kernel("kn_deepseek").tcgen05_deepseek_mma


def test_silu_mul_kn_keeps_mma_sync_or_is_an_error_with_mma_tcgen05():
    from gemmgen import backends
    from gemmgen.diagnostics import SpecError
    from gemmgen.parse import parse
    from gemmgen.validate import validate

    gate = SPEC.replace("  bias f32 [n]\n}", "  epilogue silu_mul\n}", 1)
    assert gate != SPEC
    spec = validate(parse(gate, "specs/x.gemm"), diagnose=backends.diagnose)
    k = spec.kernel("kn_grouped")
    assert not k.uses_tcgen05("sm_100a") and "silu_mul tile needs 256" in k.tcgen05_obstacle()
    with pytest.raises(SpecError) as err:
        validate(parse(gate.replace("  epilogue silu_mul\n}", "  epilogue silu_mul\n"
                                    "  mma tcgen05\n}", 1), "specs/x.gemm"),
                 diagnose=backends.diagnose)
    assert "'mma tcgen05' cannot run this kernel on the sm_100a body" in str(err.value)


CASES = [
    ("kn_dense", Case("ragged", 130, 144, 208), 2, False),
    ("kn_dense", Case("m1_k32", 1, 128, 32), 1, False),
    ("kn_dense", Case("k_wraps", 300, 272, 416), 1, False),
    ("kn_grouped", Case("shard", 260, 144, 160, group_sizes=(60, 100, 0, 100), group_offset=1,
                        g_local=2, existing_out=True), 2, True),
    ("kn_grouped", Case("zero_size", 300, 128, 256, group_sizes=(40, 0, 130, 0, 130)), 3, False),
    ("kn_masked", Case("masked", 150, 144, 288, masked_m=(150, 0, 17, 128)), 2, False),
    ("kn_deepseek", Case("shard", 260, 272, 416, group_sizes=(60, 100, 0, 100), group_offset=1,
                         g_local=2, existing_out=True), 2, False),
    ("kn_deepseek", Case("m1", 1, 128, 160, group_sizes=(0, 1)), 1, False),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}", marks=() if fast else pytest.mark.slow)
    for n, c, s, fast in CASES])
def test_mxfp8_kn_on_the_emulator(name, case, num_sms):
    check(name, case, num_sms, seed=seed())


@pytest.mark.slow
def test_b_read_k_major_fails_the_comparison():
    """The transpose bit of B left out of the block-scaled descriptor: the
    MMA reads the MN-major tile as K-major, through the MN-major strides
    (LBO 16 KiB apart), so it reads shared memory past the stage that a TMA
    load still fills: the emulator stops it (were it to run, the comparison
    would fail)."""
    k = kernel("kn_dense")
    case = Case("two_tiles", 200, 144, 256)
    inputs = case.inputs(k, seed())
    modules, key = BODY.planted("kn_dense", [(
        "      T::kRhsNK ? gg::umma::Major::K : gg::umma::Major::MN);",
        "      gg::umma::Major::K);")])
    try:
        actual = run_launcher(launcher("kn_dense"), "", key, inputs, modules=modules, arch=SM100,
                              num_sms=1)
    except EmuKernelError as e:
        assert "kind::mxf8f6f4.block_scale" in str(e) and "B operand" in str(e)
        return
    assert not compare(actual, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(
    nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("name", [
    pytest.param("kn_grouped", marks=pytest.mark.slow),
    pytest.param("kn_dense", marks=pytest.mark.slow),
    pytest.param("kn_masked", marks=pytest.mark.slow),
    pytest.param("kn_deepseek", marks=pytest.mark.slow)])
def test_mxfp8_kn_entries_build_without_spills(name):
    lp = cuda_backend.plan(kernel(name), BODY.spec)
    source = (BODY.folder / f"{name}.cu").read_text()
    result = nvcc.compile_check(source, SM100, name_for_errors=f"{name}.cu",
                                include_dirs=(BODY.folder,),
                                extra_flags=("-Werror", "all-warnings"))
    sass = nvcc.sass_summary(result.cubin)
    for v in lp.variants:
        step = v.path("tcgen05").steps[-1]
        usage = result.kernels[step.entry]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
        assert usage.static_smem + step.smem <= nvcc.shared_memory_limit(SM100)
        code = sass[step.entry]
        assert code.count("UTCQMMA") > 0 and code.count("UTCCP") > 0, step.entry
        assert code.count("HMMA") == 0 and code.count("UTMALDG") > 0, step.entry
