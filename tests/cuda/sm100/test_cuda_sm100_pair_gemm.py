"""The 2-CTA MMA (tcgen05.mma.cta_group::2) in a cluster GEMM tile with TMA
multicast of the shared operand, on the emulated sm_100a
(tests/cuda_src/sm100_pair_gemm.cu, launched by its host program through
cudaLaunchKernelEx with a cluster attribute), against NumPy on random
operands with a poisoned output, and the bugs of a 2-CTA pipeline the
emulator must report, each with its own report."""

import ml_dtypes
import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC

from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError, EmuModule

BF16, E4M3 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn


@pytest.fixture(scope="module")
def pair() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "sm100_pair_gemm.cu")


def operands(m, n, k, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((n, k)).astype(dtype)
    # no zeros: a missing product cannot hide
    a[a.astype(np.float32) == 0] = dtype(0.5)
    b[b.astype(np.float32) == 0] = dtype(-0.75)
    return a, b


def run(module, kernel, m, n, k, cluster, bug=0, seed=0, schedule="run-ahead"):
    dtype = E4M3 if "e4m3" in kernel else BF16
    a, b = operands(m, n, k, dtype, seed)
    result = module.run_host(
        {"case": kernel.encode(), "dims": np.array([m, n, k, cluster, bug], np.int32),
         "a": a.view(np.uint8 if dtype is E4M3 else np.uint16).tobytes(),
         "b": b.view(np.uint8 if dtype is E4M3 else np.uint16).tobytes()},
        arch="sm_100a", schedule=schedule)
    assert result.status == 0, result.log
    assert np.frombuffer(result.outputs["status"], np.int32)[0] == 0
    c = np.frombuffer(result.outputs["c"], np.float32).reshape(m, n)
    return a, b, c


def check(a, b, c):
    want = a.astype(np.float64) @ b.astype(np.float64).T
    assert not np.isnan(c).any(), "an element was never written (poison)"
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "kernel, cluster, clusters, k_tiles, schedule",
    [("pair_gemm_bf16_n128", 2, 1, 3, "run-ahead"),
     ("pair_gemm_e4m3_n256", 4, 2, 4, "run-ahead"),
     pytest.param("pair_gemm_bf16_n256", 4, 2, 5, "reverse", marks=pytest.mark.slow),
     pytest.param("pair_gemm_e4m3_n128", 2, 2, 4, "reverse", marks=pytest.mark.slow),
     pytest.param("pair_gemm_bf16_n128", 8, 1, 4, "run-ahead", marks=pytest.mark.slow),
     ("pair_gemm_bf16_n128_m128", 2, 2, 3, "run-ahead"),
     pytest.param("pair_gemm_e4m3_n256_m128", 4, 1, 4, "reverse", marks=pytest.mark.slow)],
)
def test_pair_gemm_matches_numpy(pair, kernel, cluster, clusters, k_tiles, schedule):
    """One cluster: one pair (no cross-pair multicast) or several pairs
    sharing A by multicast; two clusters; more K tiles than stages, so the
    full and empty barriers wrap; M = 256 and 128 per pair."""
    bn = 256 if "n256" in kernel else 128
    bk = 128 if "e4m3" in kernel else 64
    pm = 128 if "m128" in kernel else 256  # the pair's M
    m, n, k = pm * clusters, bn * cluster // 2, bk * k_tiles
    a, b, c = run(pair, kernel, m, n, k, cluster, schedule=schedule)
    check(a, b, c)


BUGS = {
    1: r"deadlock in cluster \(0,0,0\) of 4 CTAs(.|\n)*CTA rank 2(.|\n)*16384 transaction bytes missing",
    2: (r"a TMA load overwrites shared memory \[0x[0-9a-f]+, 0x[0-9a-f]+\) that a tcgen05.mma.cta_group::2.kind::f16 "
        r"issued by thread 160 still reads \(its tcgen05.commit arrives on the mbarrier at 0x[0-9a-f]+ phase 0 of CTA "
        r"rank 0, mbarrier at 0x[0-9a-f]+ phase 0 of CTA rank 1\): the stage was released before"),
    3: r"deadlock in cluster(.|\n)*CTA rank 1, block \(1,0,0\):\n  threads 0-127: wait at mbarrier.try_wait.parity",
    4: r"tcgen05.mma.cta_group::2.kind::f16 issued by CTA rank 1, an odd CTA: a cta_group::2 MMA is issued by one "
       r"thread of the even \(leader\) CTA",
    5: r"writes TMEM columns 0..127 of CTA rank 0, which tcgen05.alloc.cta_group::1 allocated",
    7: (r"\(2-CTA TMA multicast load\) into shared memory at 0x[0-9a-f]+ that an earlier TMA load \(mbarrier at "
        r"0x[0-9a-f]+, phase 0\) still fills: no thread waited for it(.|\n)*block \(1,0,0\)"),
    6: r"(the pair peer \(CTA rank 1\) has exited|a TMA load into the shared memory of CTA rank 1 .* lands after "
       r"every thread of that CTA exited)",
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_pair_gemm_bugs(pair, bug):
    cluster = 4 if bug == 1 else 2
    with pytest.raises(EmuKernelError, match=BUGS[bug]):
        run(pair, "pair_gemm_bf16_n128", 256, 64 * cluster, 64 * 4, cluster, bug=bug)


needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
def test_pair_primitives_assemble_to_the_2cta_sass():
    """nvcc 13.5 takes every cta_group::2 spelling of the header for sm_100a
    and gives the 2-CTA forms of the tcgen05 and TMA opcodes."""
    source = (CUDA_SRC / "sm100_pair_gemm.cu").read_text()
    result = nvcc.compile_check(source, "sm_100a", name_for_errors="tests/cuda_src/sm100_pair_gemm.cu")
    assert len(result.kernels) == 6, result.log
    for usage in result.kernels.values():
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
    sass = nvcc.sass_summary(result.cubin)
    bf16, e4m3 = sass["pair_gemm_bf16_n128"], sass["pair_gemm_e4m3_n256"]
    assert bf16.count("UTCHMMA", "2CTA") > 0 and bf16.count("UTCHMMA") == bf16.count("UTCHMMA", "2CTA")
    assert e4m3.count("UTCQMMA", "2CTA") > 0 and e4m3.count("UTCQMMA") == e4m3.count("UTCQMMA", "2CTA")
    assert bf16.count("UTCBAR", "2CTA", "MULTICAST") >= 2  # the stage release and the accumulator
    assert bf16.count("UTCATOMSWS", "2CTA") > 0  # tcgen05.alloc.cta_group::2
    assert bf16.count("UTCATOMSWS", "AND") > 0 and bf16.count("UVIRTCOUNT") == 0  # its dealloc
    assert bf16.count("UTMALDG", "2D", "MULTICAST", "2CTA") == 1 and bf16.count("UTMALDG") == 2
    assert bf16.count("UCGABAR_ARV") > 0 and bf16.count("UCGABAR_WAIT") > 0  # barrier.cluster


@needs_nvcc
def test_pair_primitives_before_sm_100a_are_a_compile_error():
    source = (CUDA_SRC / "sm100_pair_gemm.cu").read_text()
    with pytest.raises(nvcc.NvccError, match="needs sm_100a / sm_103a"):
        nvcc.compile_check(source, "sm_90a", name_for_errors="tests/cuda_src/sm100_pair_gemm.cu")
