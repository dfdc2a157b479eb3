"""The sample tiled GEMM (bf16 mma.sync + ldmatrix + 2-stage cp.async, partial
tiles) through the whole emulator path against float64 NumPy, and its
deliberately broken variants, which the harness must flag."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuda_runtime_cases import (
    CUDA_SRC,
    GEMM_SHAPES,
    GEMM_SMEM_BYTES,
    GEMM_THREADS,
    gemm_args,
    gemm_case,
    gemm_grid,
    launch,
)
from gemmgen.harness.cuda_emu import EmuKernelError, EmuModule, EmuRaceError


@pytest.fixture(scope="module")
def gemm() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "sample_gemm.cu")


def run(module: EmuModule, kernel: str, m: int, n: int, k: int, **kwargs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    args, expected, bound = gemm_args(m, n, k)
    (c,) = module.launch(kernel, gemm_grid(m, n), GEMM_THREADS, GEMM_SMEM_BYTES, args, [2], **kwargs)
    return c, expected, bound


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
@pytest.mark.parametrize("shape", list(GEMM_SHAPES))
def test_sample_gemm_matches_float64(gemm, shape, schedule):
    case = gemm_case(shape, *GEMM_SHAPES[shape])
    case.check(launch(gemm, case, schedule=schedule))


@given(
    m=st.integers(1, 150),
    n=st.integers(1, 20).map(lambda i: 8 * i),
    k=st.integers(0, 14).map(lambda i: 8 * i),
)
def test_sample_gemm_any_shape(gemm, m, n, k):
    case = gemm_case("any", m, n, k)
    case.check(launch(gemm, case))


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
def test_missing_syncthreads_shows_as_nan(gemm, schedule):
    c, _, _ = run(gemm, "sample_gemm_bf16_bug_no_sync", *GEMM_SHAPES["partial_mnk"], schedule=schedule)
    assert np.isnan(c).any(), "a missing __syncthreads after cp.async.wait_group went unnoticed"


def test_wrong_fragment_index_is_a_mismatch(gemm):
    c, expected, bound = run(gemm, "sample_gemm_bf16_bug_fragment", *GEMM_SHAPES["partial_mnk"])
    assert np.isfinite(c).all()
    assert (np.abs(c - expected) > bound).mean() > 0.5


def test_out_of_bounds_epilogue_is_caught(gemm):
    with pytest.raises(EmuKernelError, match=r"out-of-bounds access at byte offset \d+ of argument #2"):
        run(gemm, "sample_gemm_bf16_bug_oob", *GEMM_SHAPES["partial_mnk"])


def test_tsan_mode_passes_the_gemm_and_catches_the_race():
    tsan = EmuModule.from_file(CUDA_SRC / "sample_gemm.cu", tsan=True)
    c, expected, bound = run(tsan, "sample_gemm_bf16", 64, 64, 64)
    assert np.all(np.abs(c - expected) <= bound)
    with pytest.raises(EmuRaceError, match="data race"):
        run(tsan, "sample_gemm_bf16_bug_no_sync", 64, 64, 64)
