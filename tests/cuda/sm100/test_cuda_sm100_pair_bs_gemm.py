"""The block-scaled 2-CTA MMA (tcgen05.mma.cta_group::2 kind::mxf8f6f4 /
mxf4 / mxf4nvf4 .block_scale, tcgen05.cp.cta_group::2.32x128b.warpx4) in a
2-CTA cluster GEMM tile on the emulated sm_100a
(tests/cuda_src/sm100_pair_bs_gemm.cu, launched by its host program through
cudaLaunchKernelEx with a cluster attribute), against NumPy on random
operands and scales with a poisoned output; the bugs the emulator (or the
comparison) must catch; the nvcc build for sm_100a.

The reference is written from docs/semantics.md and the PTX ISA, not from
the emulator: e4m3 / e2m1 values (gemmgen.numerics), e8m0 / ue4m3 scale
bytes (gemmgen.numerics.e8m0_to_float / ue4m3_to_float), the scales in
CUTLASS's Sm1xxBlockScaledConfig atom order (gemmgen.reference.blockscale.
rows_to_atoms), one scale per 32 (MX) or 16 (NV) elements of K."""

import ml_dtypes
import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC

from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError, EmuModule
from gemmgen.numerics import e8m0_to_float, from_fp4_codes, pack_nibbles, ue4m3_to_float
from gemmgen.reference.blockscale import rows_to_atoms

E4M3 = ml_dtypes.float8_e4m3fn
BLOCK = {"mxf8": 32, "mxf4": 32, "nvf4": 16}  # K elements per scale


@pytest.fixture(scope="module")
def module() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "sm100_pair_bs_gemm.cu", warnings=True)


def operand(rng, rows: int, k: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Fresh random values (rows x k, never zero) and their row-major bytes
    (e4m3; or e2m1 two a byte, element 2i in the low nibble)."""
    if kind == "mxf8":
        v = rng.standard_normal((rows, k)) * 2
        v = np.where(np.abs(v) < 0.05, 0.75, v).astype(E4M3)
        return v.astype(np.float64), v.view(np.uint8)
    codes = rng.choice([c for c in range(16) if c not in (0, 8)], (rows, k)).astype(np.uint8)
    return from_fp4_codes(codes), pack_nibbles(codes)


def scales(rng, rows: int, blocks: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Random scale bytes (never all one) and their values."""
    if kind == "nvf4":
        raw = rng.integers(0x28, 0x48, (rows, blocks)).astype(np.uint8)  # ue4m3 0.25 .. 3.75
        return raw, ue4m3_to_float(raw)
    raw = rng.integers(127 - 5, 127 + 6, (rows, blocks)).astype(np.uint8)  # e8m0 2^-5 .. 2^5
    return raw, e8m0_to_float(raw)


def run(module, kernel: str, m: int, n: int, k: int, bug: int = 0, seed: int = 0, schedule: str = "run-ahead",
        plant=None):
    kind = kernel.split("_")[2]
    rng = np.random.default_rng(seed)
    av, a_raw = operand(rng, m, k, kind)
    bv, b_raw = operand(rng, n, k, kind)
    blocks = k // BLOCK[kind]
    sfa_raw, sa = scales(rng, m, blocks, kind)
    sfb_raw, sb = scales(rng, n, blocks, kind)
    if plant is not None:
        plant(sfa_raw, sfb_raw)
    result = module.run_host(
        {"case": kernel.encode(), "dims": np.array([m, n, k, bug], np.int32), "a": a_raw, "b": b_raw,
         "sfa": rows_to_atoms(sfa_raw, 0xEE), "sfb": rows_to_atoms(sfb_raw, 0xEE)},
        arch="sm_100a", schedule=schedule)
    assert result.status == 0, result.log
    assert np.frombuffer(result.outputs["status"], np.int32)[0] == 0
    c = np.frombuffer(result.outputs["c"], np.float32).reshape(m, n)
    a_s = av * np.repeat(sa, BLOCK[kind], axis=1)
    b_s = bv * np.repeat(sb, BLOCK[kind], axis=1)
    return c, a_s @ b_s.T


def check(c, want):
    assert not np.isnan(c).any(), "an element was never written (poison)"
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-3 * np.abs(want).max())


@pytest.mark.parametrize(
    "kernel, m, n, k_tiles, schedule",
    [("pair_bs_mxf8_n128", 256, 128, 3, "run-ahead"),
     ("pair_bs_nvf4_n256", 256, 256, 2, "run-ahead"),
     pytest.param("pair_bs_mxf8_n256", 512, 256, 3, "reverse", marks=pytest.mark.slow),
     pytest.param("pair_bs_mxf4_n128", 256, 256, 3, "reverse", marks=pytest.mark.slow),
     pytest.param("pair_bs_nvf4_n128", 512, 128, 3, "run-ahead", marks=pytest.mark.slow)],
)
def test_pair_block_scaled_gemm_matches_numpy(module, kernel, m, n, k_tiles, schedule):
    """M = 256 per pair; one and two clusters along M, one and two tiles
    along N; more K tiles than stages, so the barriers wrap."""
    k = k_tiles * (128 if "mxf8" in kernel else 256)
    c, want = run(module, kernel, m, n, k, schedule=schedule)
    check(c, want)



# Each planted bug (tests/cuda_src/sm100_pair_bs_gemm.cu, Bug) and what the
# emulator reports; None: the descriptor is legal and the comparison fails.
REPORTED = {
    # Each CTA stages only the SFB atom of its own B half (as for B itself):
    # CTA 1's scales of B rows 128..255 land in the columns of rows 0..127,
    # and no CTA has the scales of rows 128..255 where the MMA reads them.
    ("pair_bs_mxf8_n256", 1): (r"tcgen05.mma.cta_group::2.kind::mxf8f6f4.block_scale.scale_vec::1X reads the scale "
                               r"factor B of row 128 \(K block 0\) of CTA rank 0 at its TMEM lane 0 column 276 byte 0, "
                               r"which nothing wrote since its allocation"),
    ("pair_bs_nvf4_n256", 1): (r"tcgen05.mma.cta_group::2.kind::mxf4nvf4.block_scale.scale_vec::4X reads the scale "
                               r"factor B of row 128 \(K block 0\) of CTA rank 0 at its TMEM lane 0 column 276"),
    # The scales copied with tcgen05.cp.cta_group::1 for the pair's MMA.
    ("pair_bs_mxf8_n128", 2): (r"tcgen05.cp.cta_group::1.32x128b.warpx4 into TMEM columns \[0, 256\), which "
                               r"tcgen05.alloc.cta_group::2 allocated \(warp 5\): the scale factors of a CTA pair's MMA "
                               r"are copied with tcgen05.cp.cta_group::2"),
    ("pair_bs_nvf4_n128", 2): r"tcgen05.cp.cta_group::1.32x128b.warpx4 into TMEM columns \[0, 256\)",
    # A scale id one K block off: legal for scale_vec::1X (the comparison
    # fails), not for 4X.
    ("pair_bs_mxf8_n128", 3): None,
    ("pair_bs_nvf4_n128", 3): (r"tcgen05.mma.cta_group::2.kind::mxf4nvf4.block_scale.scale_vec::4X: instruction "
                               r"descriptor 0x[0-9a-f]+: the scale factor A id \(bits 29-30\) is 1: scale_vec::4X "
                               r"takes 0 only"),
    # The scale format bit flipped: ue4m3 for MXFP8 is refused; NVFP4's
    # ue4m3 read as ue8m0 is legal (the comparison fails).
    ("pair_bs_mxf8_n128", 4): (r"tcgen05.mma.cta_group::2.kind::mxf8f6f4.block_scale.scale_vec::1X: instruction "
                               r"descriptor 0x[0-9a-f]+: the scale format \(bit 23\) is 0 \(ue4m3\): "
                               r"kind::mxf8f6f4 takes ue8m0 scales"),
    ("pair_bs_nvf4_n128", 4): None,
    # The odd CTA's stage released before the pair's copies and MMAs (the
    # leader's on time): the odd CTA refills its scale atoms though no
    # commit covering the pair's copy arrived there.
    ("pair_bs_mxf8_n128", 5): (r"a TMA load issued by CTA rank 1 overwrites shared memory of CTA rank 1 that a "
                               r"tcgen05.cp.cta_group::2.32x128b.warpx4 issued by thread 160 read, but no thread of "
                               r"CTA rank 1 waited on a phase of its tcgen05.commit \(its tcgen05.commit arrives on "
                               r"the mbarrier at 0x[0-9a-f]+ phase 0 of CTA rank 0.*; waited on by CTA rank 0\): the "
                               r"stage was released to CTA rank 1 before the pair's op had completed"),
    ("pair_bs_nvf4_n256", 5): (r"a TMA load issued by CTA rank 1 overwrites shared memory of CTA rank 1 that a "
                               r"tcgen05.cp.cta_group::2.32x128b.warpx4"),
    # Both CTAs' stages released before the pair's copies and MMAs: the
    # leader's refill overwrites what the copy still reads.
    ("pair_bs_mxf8_n128", 7): (r"a TMA load overwrites shared memory \[0x[0-9a-f]+, 0x[0-9a-f]+\) that a "
                               r"tcgen05.cp.cta_group::2.32x128b.warpx4 issued by thread 160 still reads \(its "
                               r"tcgen05.commit arrives on the mbarrier at 0x[0-9a-f]+ phase 0 of CTA rank 0, mbarrier "
                               r"at 0x[0-9a-f]+ phase 0 of CTA rank 1\): the stage was released before the copy's"),
    # The odd CTA issues the pair's copies.
    ("pair_bs_mxf4_n128", 6): (r"tcgen05.cp.cta_group::2.32x128b.warpx4 issued by CTA rank 1, an odd CTA: a "
                               r"cta_group::2 op is issued by one thread of the even \(leader\) CTA"),
}


@pytest.mark.parametrize("kernel, bug", sorted(REPORTED))
def test_pair_block_scaled_bugs(module, kernel, bug):
    n = 256 if "n256" in kernel else 128
    k = 3 * (128 if "mxf8" in kernel else 256)
    why = REPORTED[(kernel, bug)]
    if why is None:
        c, want = run(module, kernel, 256, n, k, bug=bug)
        with pytest.raises(AssertionError):
            check(c, want)
    else:
        with pytest.raises(EmuKernelError, match=why):
            run(module, kernel, 256, n, k, bug=bug)


def test_a_ue4m3_scale_with_bit_7_in_the_peer_is_reported(module):
    """NVFP4, a ue4m3 byte with the sign bit among the scales of A row 200
    (held by CTA 1, its row 72)."""
    def plant(sfa, _sfb):
        sfa[200, 3] = 0xB8

    with pytest.raises(EmuKernelError, match=r"tcgen05.mma.cta_group::2.kind::mxf4nvf4.block_scale.scale_vec::4X: the "
                                             r"ue4m3 scale factor A of row 72 \(K block 3\) of CTA rank 1 is 0xb8, "
                                             r"which has bit 7 set"):
        run(module, "pair_bs_nvf4_n128", 256, 128, 256, plant=plant)


needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("arch", ["sm_100a", pytest.param("sm_100f", marks=pytest.mark.slow)])
def test_pair_block_scaled_primitives_assemble_to_the_2cta_sass(arch):
    """nvcc 13.5 takes the cta_group::2 block-scaled spellings (scale_vec::NX
    for sm_100a, .block32 / .block16 for sm_100f) and gives the 2-CTA forms
    of UTCQMMA (mxf8f6f4), UTCOMMA (mxf4, mxf4nvf4 .4X) and UTCCP, no
    spills."""
    source = (CUDA_SRC / "sm100_pair_bs_gemm.cu").read_text()
    result = nvcc.compile_check(source, arch, name_for_errors="tests/cuda_src/sm100_pair_bs_gemm.cu")
    assert len(result.kernels) == 5, result.log
    for usage in result.kernels.values():
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
    sass = nvcc.sass_summary(result.cubin)
    mxf8, mxf4, nvf4 = sass["pair_bs_mxf8_n128"], sass["pair_bs_mxf4_n128"], sass["pair_bs_nvf4_n256"]
    assert mxf8.count("UTCQMMA", "2CTA") > 0 and mxf8.count("UTCQMMA") == mxf8.count("UTCQMMA", "2CTA")
    for s in (mxf4, nvf4):
        assert s.count("UTCOMMA", "2CTA") > 0 and s.count("UTCOMMA") == s.count("UTCOMMA", "2CTA")
    assert nvf4.count("UTCOMMA", "4X") > 0
    for s in (mxf8, mxf4, nvf4):
        assert s.count("UTCCP", "2CTA") > 0 and s.count("UTCCP") == s.count("UTCCP", "2CTA")
        assert s.count("UTCBAR", "2CTA", "MULTICAST") >= 2
        assert s.count("HMMA") == s.count("QMMA") == s.count("OMMA") == 0


@needs_nvcc
def test_pair_block_scaled_primitives_before_sm_100a_are_a_compile_error():
    source = (CUDA_SRC / "sm100_pair_bs_gemm.cu").read_text()
    with pytest.raises(nvcc.NvccError, match="needs sm_100a / sm_103a"):
        nvcc.compile_check(source, "sm_90a", name_for_errors="tests/cuda_src/sm100_pair_bs_gemm.cu")
