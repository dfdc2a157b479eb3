"""The sm_100a body's FP32 promotion with e8m0 block scales whose products
leave f32's normal range (docs/cuda-sm100.md, "The sm_100a GEMM"): the
epilogue threads of those rows scale each partial sum exactly (the
mantissas' product, then 2^(the exponents' sum) through f64), the others
multiply at once; both against the reference on the emulator of an sm_100a
device. The exact path has no call: a call with the 128 sums live made
specs/dense.gemm's e8m0 kernels spill on sm_100a (checked by nvcc in the
`slow` case)."""

from __future__ import annotations

import numpy as np
import pytest
from sm100_helpers import SM100, Sm100Spec

from gemmgen.backends import cuda as cuda_backend
from gemmgen.cases import Case
from gemmgen.harness import nvcc
from gemmgen.reference import reference

SPEC = """
target cuda {
  archs sm_100a
}

kernel e8m0_blocks {
  op dense
  lhs e4m3 [m, k]
  rhs e4m3 [n, k]
  out bf16
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=128 k=128 f32
  tile m=128 n=128 k=128
  backends cuda
}
"""

EXACT = Sm100Spec("sm100exact", SPEC)


def test_e8m0_products_below_f32_take_the_exact_path():
    """lhs scales 2^-125 / 2^-124 (bytes 2, 3) times rhs scales 2^-9: below
    f32's normal range, for about half the rows; 2^-7 / 2^3 for the rest."""
    k = EXACT.kernel("e8m0_blocks")
    case = Case("exact", 150, 200, 272)
    inputs = case.inputs(k, 11)
    rng = np.random.default_rng(5)
    m, kb = inputs["lhs_scale"].shape
    inputs["lhs_scale"] = rng.choice(np.array([2, 3, 120, 130], np.uint8), (m, kb))
    nb = inputs["rhs_scale"].shape[0]
    inputs["rhs_scale"] = rng.choice(np.array([2.0**-9, 2.0**-2, 0.75], np.float32),
                                     (nb, kb)).astype(np.float32)
    lm = EXACT.launcher("e8m0_blocks")
    steps = lm.launches(lm.validate(**inputs), 100, 2)
    assert steps[-1].entry == "e8m0_blocks_sm100"
    out = EXACT.run_py("e8m0_blocks", inputs, num_sms=2).astype(np.float64)
    expected = np.asarray(reference(k, **inputs), np.float64)
    # bf16 rounding; results below 2^-126 may flush (docs/semantics.md).
    np.testing.assert_array_less(np.abs(out - expected), 2**-8 * np.abs(expected) + 2.0**-125)
    small = inputs["lhs_scale"] < 10
    assert small.any() and (~small).any()
    assert np.count_nonzero(np.abs(out) > 0) > out.size // 2


needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")


@needs_nvcc
@pytest.mark.slow
def test_the_exact_promotion_builds_without_spills():
    source = (EXACT.folder / "e8m0_blocks.cu").read_text()
    result = nvcc.compile_check(source, SM100, name_for_errors="e8m0_blocks.cu",
                                include_dirs=(EXACT.folder,))
    lp = cuda_backend.plan(EXACT.kernel("e8m0_blocks"), EXACT.spec)
    for v in lp.variants:
        usage = result.kernels[v.path("tcgen05").steps[-1].entry]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
