"""The block-scaled tcgen05 primitives (gg_primitives_sm100.cuh) on the CPU
emulator (arch sm_100a) against NumPy: scale factors in the 128 x 4 atom
layout of CUTLASS's Sm1xxBlockScaledConfig copied into TMEM with
tcgen05.cp.32x128b.warpx4, then kind::mxf8f6f4 (MXFP8, W4A8), kind::mxf4
(MXFP4) and kind::mxf4nvf4 (NVFP4) MMAs; the bugs the emulator or the
comparison must catch; the nvcc build for sm_100a
(tests/cuda_src/sm100_block_scaled.cu).

Everything here is written from the PTX ISA and docs/semantics.md, not from
the emulator: the operand images ("Shared Memory Matrix Layout"; fp4 two a
byte, low nibble first, for kind::mxf4*, and 16 to the first 8 bytes of each
16 for kind::mxf8f6f4: "Optional Decompression"), the scale bytes (e8m0:
2^(e-127), 0xFF NaN; ue4m3: the e4m3 code of a non-negative value, 0x7F NaN,
0 zero), and which K block each scale covers (32 elements for MX, 16 for
NVFP4)."""

import re

import ml_dtypes
import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC

from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError, EmuModule

ARCH = "sm_100a"
E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
KIND = {"mxf8f6f4": 0, "mxf4": 1, "mxf4nvf4": 2}  # gg::umma::BsKind
TYPE = {"e4m3": 0, "e5m2": 1, "e2m1": 2}  # gg::umma::BsType
SF = {"ue4m3": 0, "ue8m0": 1}  # gg::umma::ScaleFormat
SWIZZLE = {0: 0, 32: 6, 64: 4, 128: 2}  # span -> the descriptor's layout type (bits 61-63)
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
PARAMS = ["kind", "a_type", "b_type", "sf", "n", "steps", "a_major", "b_major", "a_lbo", "a_sbo", "a_swizzle",
          "b_lbo", "b_sbo", "b_swizzle", "a_bytes", "b_bytes", "a_step", "b_step", "sfa_bytes", "sfb_bytes",
          "atoms", "bug", "negate", "sf_by_st"]
BUGS = {"wrong_sf_columns": 1, "wrong_sf_id": 2, "sf_format_bit": 3, "sf_smem_overwrite": 4,
        "sf_outside_alloc": 5, "sf_overlap_d": 6, "odd_sf_id": 7, "sf_no_proxy_fence": 8,
        "sf_replica_differs": 9, "ld_scales_in_flight": 10, "mma_by_other_thread": 11}


@pytest.fixture(scope="module")
def module() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "sm100_block_scaled.cu", warnings=True)


# ---------------------------------------------------------------------------
# Images (PTX ISA "Shared Memory Matrix Layout": K-major, 1-byte elements).


def swizzle(addr: np.ndarray, span: int) -> np.ndarray:
    """Swizzle<log2(span/16),4,3> on byte addresses (bits 4.. ^= bits 7..)."""
    return addr if span == 0 else addr ^ (((addr >> 7) & (span // 16 - 1)) << 4)


def layout(rows: int, k: int, mn_major: bool, span: int) -> tuple[np.ndarray, int, int]:
    """Byte offsets (after the swizzle) of (row, k) of a rows x k operand of
    1-byte elements, and its LBO, SBO (compact)."""
    mn, kk = np.meshgrid(np.arange(rows), np.arange(k), indexing="ij")
    if not mn_major:
        if span == 0:
            lbo, sbo = -(-rows // 8) * 128, 128
            off = (mn % 8) * 16 + (mn // 8) * sbo + (kk // 16) * lbo + kk % 16
        else:
            lbo, sbo = 16, 8 * span
            off = (mn % 8) * span + (mn // 8) * sbo + kk
    else:
        w = span // 16
        if span == 0:
            lbo, sbo = -(-rows // 16) * 128, 128
            off = mn % 16 + (mn // 16) * sbo + (kk % 8) * 16 + (kk // 8) * lbo
        else:
            lbo, sbo = 8 * span, -(-rows // (16 * w)) * 8 * span
            off = mn % 16 + ((mn // 16) % w) * 16 + (mn // (16 * w)) * lbo + (kk % 8) * span + (kk // 8) * sbo
    return swizzle(off, span), lbo, sbo


def image(data: np.ndarray, mn_major: bool, span: int) -> tuple[np.ndarray, int, int]:
    """The 1024-aligned image of `data` (rows x 32 bytes of K), rest 0xFF."""
    offs, lbo, sbo = layout(*data.shape, mn_major, span)
    img = np.full((int(offs.max()) + 1024) // 1024 * 1024, 0xFF, np.uint8)
    img[offs] = data
    return img, lbo, sbo


def operand(rng, rows: int, k: int, kind: str, t: str) -> tuple[np.ndarray, np.ndarray]:
    """Fresh random values (rows x k) and their shared-memory bytes
    (rows x steps x 32: the byte-K positions of each MMA)."""
    if t == "e2m1":
        codes = rng.integers(0, 16, (rows, k)).astype(np.uint8)
        values = E2M1[codes]
        if kind == "mxf8f6f4":  # 16 elements in the first 8 bytes of each 16, then padding
            c = codes.reshape(rows, k // 16, 8, 2)
            packed = (c[..., 0] | (c[..., 1] << 4)).astype(np.uint8)
            pad = rng.integers(0, 256, packed.shape, dtype=np.uint8)  # never read
            raw = np.concatenate([packed, pad], axis=2).reshape(rows, k)
        else:  # two a byte, element 2i in the low nibble
            c = codes.reshape(rows, k // 2, 2)
            raw = (c[..., 0] | (c[..., 1] << 4)).astype(np.uint8)
        return values, raw
    dt = E4M3 if t == "e4m3" else E5M2
    v = rng.standard_normal((rows, k)) * 2
    v = np.where(np.abs(v) < 0.05, 0.75, v).astype(dt)
    return v.astype(np.float64), v.view(np.uint8)


def scales(rng, rows: int, blocks: int, fmt: str, edges: bool) -> tuple[np.ndarray, np.ndarray]:
    """Random non-trivial scale bytes (rows x blocks; never all one) with, if
    `edges`, the edge bytes planted (e8m0: 0 = 2^-127, 0xFE = 2^127, 0xFF
    NaN; ue4m3: 0 zero, 0x01 = 2^-9, 0x7E = 448, 0x7F NaN), and their values
    (docs/semantics.md)."""
    if fmt == "ue8m0":
        raw = rng.integers(127 - 5, 127 + 6, (rows, blocks)).astype(np.uint8)
        edge = [0x00, 0xFE, 0xFF, 0x01]
    else:
        raw = rng.integers(0x28, 0x48, (rows, blocks)).astype(np.uint8)  # 0.25 .. 4
        edge = [0x00, 0x01, 0x7E, 0x7F]
    if edges:
        for e in edge:
            raw[rng.integers(rows), rng.integers(blocks)] = e
    if fmt == "ue8m0":
        val = np.where(raw == 0xFF, np.nan, np.ldexp(1.0, raw.astype(np.int64) - 127))
    else:
        val = np.where(raw == 0x7F, np.nan, raw.view(E4M3).astype(np.float64))
    return raw, val


def atom_image(raw: np.ndarray, atoms: int) -> np.ndarray:
    """Scale bytes (rows x blocks) in the 128 x 4 atom order of CUTLASS's
    Sm1xxBlockScaledConfig (docs/semantics.md, "The atom layout"): byte
    ((r / 128) * atoms + b / 4) * 512 + (r % 32) * 16 + (r / 32 % 4) * 4 + b % 4;
    padding rows and blocks random."""
    rows, blocks = raw.shape
    rb = -(-rows // 128)
    img = np.random.default_rng(rows * 7 + blocks).integers(0, 256, rb * atoms * 512).astype(np.uint8)
    r, b = np.meshgrid(np.arange(rows), np.arange(blocks), indexing="ij")
    img[((r // 128) * atoms + b // 4) * 512 + (r % 32) * 16 + (r // 32 % 4) * 4 + b % 4] = raw
    return img


def run(module, *, kind: str, a: str, b: str, sf: str, n: int, steps: int, span: int = 128,
        b_span: int | None = None, a_mn: bool = False, b_mn: bool = False, packed: bool = False,
        edges: bool = True, negate: bool = False, bug: int = 0, seed: int = 0, sfa_raw=None,
        sf_by_st: bool = False):
    """One tile of 128 x n through `steps` MMAs; returns (D read back from
    TMEM, the float64 reference rounded to f32 after each MMA, the run)."""
    b_span = span if b_span is None else b_span
    rng = np.random.default_rng(seed)
    mma_k = 32 if kind == "mxf8f6f4" else 64
    bk = 16 if kind == "mxf4nvf4" else 32
    k = mma_k * steps
    blocks = k // bk
    atoms = -(-blocks // 4)
    av, a_raw = operand(rng, 128, k, kind, a)
    bv, b_raw = operand(rng, n, k, kind, b)
    sfa_bytes, sa = scales(rng, 128, blocks, sf, edges)
    if sfa_raw is not None:
        sfa_bytes = sfa_raw(sfa_bytes)
    sfb_bytes, sb = scales(rng, n, blocks, sf, edges)

    def images(raw, mn, sp):
        if packed:  # every MMA's 32 bytes of K within one 128-byte swizzled row
            img, lbo, sbo = image(raw, mn, sp)
            return img, lbo, sbo, 32
        parts = [image(np.ascontiguousarray(raw[:, s * 32:(s + 1) * 32]), mn, sp) for s in range(steps)]
        return np.concatenate([p[0] for p in parts]), parts[0][1], parts[0][2], parts[0][0].size

    a_img, a_lbo, a_sbo, a_step = images(a_raw, a_mn, span)
    b_img, b_lbo, b_sbo, b_step = images(b_raw, b_mn, b_span)
    sfa_img, sfb_img = atom_image(sfa_bytes, atoms), atom_image(sfb_bytes, atoms)
    values = {"kind": KIND[kind], "a_type": TYPE[a], "b_type": TYPE[b], "sf": SF[sf], "n": n, "steps": steps,
              "a_major": int(a_mn), "b_major": int(b_mn), "a_lbo": a_lbo, "a_sbo": a_sbo,
              "a_swizzle": SWIZZLE[span], "b_lbo": b_lbo, "b_sbo": b_sbo, "b_swizzle": SWIZZLE[b_span],
              "a_bytes": a_img.size, "b_bytes": b_img.size, "a_step": a_step, "b_step": b_step,
              "sfa_bytes": sfa_img.size, "sfb_bytes": sfb_img.size, "atoms": atoms, "bug": bug,
              "negate": int(negate), "sf_by_st": int(sf_by_st)}
    params = np.array([values[p] for p in PARAMS], np.int64)
    r = module.run_host({"params": params, "a": a_img, "b": b_img, "sfa": sfa_img, "sfb": sfb_img}, arch=ARCH)
    if r.status != 0:
        return None, None, r
    d = np.frombuffer(r.outputs["d"], np.uint32).reshape(128, n).view(np.float32)
    a_s = av * np.repeat(sa, bk, axis=1)  # negating A and B keeps the product
    b_s = bv * np.repeat(sb, bk, axis=1)
    want = np.zeros((128, n), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for s in range(steps):  # D is f32 after each MMA, as the hardware's
            sl = slice(s * mma_k, (s + 1) * mma_k)
            want = (want.astype(np.float64) + a_s[:, sl] @ b_s[:, sl].T).astype(np.float32)
    return d, want, r


def check(d, want):
    assert d is not None
    np.testing.assert_array_equal(np.isnan(d), np.isnan(want))
    np.testing.assert_allclose(d, want, rtol=1e-6, atol=0, equal_nan=True)


# ---------------------------------------------------------------------------
# Against NumPy.

# (kind, A, B, scale format, N, steps, swizzle, a_mn, b_mn, packed)
FAST = [
    ("mxf8f6f4", "e4m3", "e4m3", "ue8m0", 64, 4, 128, False, False, True),  # MXFP8
    ("mxf8f6f4", "e4m3", "e2m1", "ue8m0", 48, 2, 64, False, False, False),  # W4A8
    ("mxf4", "e2m1", "e2m1", "ue8m0", 96, 2, 128, False, False, False),  # MXFP4
    ("mxf4nvf4", "e2m1", "e2m1", "ue4m3", 128, 2, 32, False, False, False),  # NVFP4
]
SLOW = [
    ("mxf8f6f4", "e5m2", "e5m2", "ue8m0", 256, 6, 0, False, False, False),
    ("mxf8f6f4", "e4m3", "e5m2", "ue8m0", 8, 3, 128, False, False, False),
    ("mxf8f6f4", "e4m3", "e4m3", "ue8m0", 160, 2, 64, True, True, False),
    ("mxf8f6f4", "e2m1", "e2m1", "ue8m0", 136, 5, 32, False, False, False),
    ("mxf8f6f4", "e2m1", "e4m3", "ue8m0", 32, 4, 128, False, True, False),
    ("mxf4", "e2m1", "e2m1", "ue8m0", 256, 3, 0, False, False, False),
    ("mxf4", "e2m1", "e2m1", "ue8m0", 8, 2, 128, False, False, True),
    ("mxf4nvf4", "e2m1", "e2m1", "ue4m3", 200, 3, 64, False, False, False),
    ("mxf4nvf4", "e2m1", "e2m1", "ue8m0", 24, 2, 128, False, False, True),
    ("mxf4nvf4", "e2m1", "e2m1", "ue4m3", 256, 1, 128, False, False, False),
]


def case_id(c):
    kind, a, b, sf, n, steps, span, amn, bmn, packed = c
    return (f"{kind}-{a}x{b}-{sf}-n{n}-x{steps}-sw{span}{'-MN' if amn else ''}{'-BMN' if bmn else ''}"
            f"{'-packed' if packed else ''}")


@pytest.mark.parametrize("case", FAST, ids=case_id)
def test_block_scaled_mma_matches_numpy(module, case):
    kind, a, b, sf, n, steps, span, amn, bmn, packed = case
    d, want, r = run(module, kind=kind, a=a, b=b, sf=sf, n=n, steps=steps, span=span, a_mn=amn, b_mn=bmn,
                     packed=packed, seed=n + steps)
    assert r.status == 0, r.log
    check(d, want)
    assert np.isfinite(d).sum() > d.size // 2  # the edge bytes touch a few rows / columns only


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=case_id)
def test_block_scaled_mma_sweep(module, case):
    kind, a, b, sf, n, steps, span, amn, bmn, packed = case
    d, want, r = run(module, kind=kind, a=a, b=b, sf=sf, n=n, steps=steps, span=span, a_mn=amn, b_mn=bmn,
                     packed=packed, seed=3 * n + steps)
    assert r.status == 0, r.log
    check(d, want)


def test_scales_written_with_tcgen05_st(module):
    """The scales written by each warp into its lane quarter (tcgen05.st)
    instead of copied: the MMA reads the same cells."""
    d, want, r = run(module, kind="mxf4", a="e2m1", b="e2m1", sf="ue8m0", n=160, steps=3, sf_by_st=True)
    assert r.status == 0, r.log
    check(d, want)


def test_negate_bits_are_honoured(module):
    """Negate A and negate B: the product keeps its sign."""
    d, want, r = run(module, kind="mxf8f6f4", a="e4m3", b="e4m3", sf="ue8m0", n=16, steps=1, negate=True,
                     edges=False)
    assert r.status == 0, r.log
    check(d, want)


# ---------------------------------------------------------------------------
# Planted bugs: each caught by the emulator (a report) or by the comparison.


@pytest.mark.parametrize("bug, kind, why", [
    ("wrong_sf_columns", "mxf4nvf4", "nothing wrote since its allocation"),
    ("sf_format_bit", "mxf8f6f4", "kind::mxf8f6f4 takes ue8m0 scales"),
    ("sf_format_bit", "mxf4", "kind::mxf4 takes ue8m0 scales"),
    ("sf_smem_overwrite", "mxf8f6f4", "tcgen05.cp issued by thread 0 reads was overwritten"),
    ("sf_outside_alloc", "mxf4", "outside every allocation"),
    ("sf_overlap_d", "mxf8f6f4", "overlap the accumulator"),
    ("odd_sf_id", "mxf4", "scale factor A id (bits 29-30) is 1"),
    ("sf_no_proxy_fence", "mxf4nvf4", "fence.proxy.async"),
    ("sf_replica_differs", "mxf8f6f4", "scale factors must be duplicated in all 4 lane quarters"),
    ("ld_scales_in_flight", "mxf4", "which a tcgen05.cp issued by thread 0 still writes"),
    ("mma_by_other_thread", "mxf4nvf4", "which a tcgen05.cp of thread 0 still writes"),
])
def test_planted_bug_is_reported(module, bug, kind, why):
    ab = "e4m3" if kind == "mxf8f6f4" else "e2m1"
    sf = "ue4m3" if kind == "mxf4nvf4" else "ue8m0"
    with pytest.raises(EmuKernelError, match=re.escape(why)):
        run(module, kind=kind, a=ab, b=ab, sf=sf, n=64, steps=2, bug=BUGS[bug],
            sf_by_st=bug == "sf_replica_differs")


@pytest.mark.parametrize("bug, kind", [("wrong_sf_id", "mxf8f6f4"), ("sf_format_bit", "mxf4nvf4")])
def test_planted_bug_fails_the_comparison(module, bug, kind):
    """A scale id one K block off (kind::mxf8f6f4) and the scale format bit
    flipped where both formats are legal (ue4m3 read as e8m0, kind::mxf4nvf4)
    run, and the NumPy comparison rejects them."""
    ab = "e4m3" if kind == "mxf8f6f4" else "e2m1"
    sf = "ue4m3" if kind == "mxf4nvf4" else "ue8m0"
    run_args = {"kind": kind, "a": ab, "b": ab, "sf": sf, "n": 32, "steps": 2, "edges": False}
    d, want, r = run(module, **run_args)
    assert r.status == 0, r.log
    check(d, want)  # the same run without the bug passes
    d, want, r = run(module, **run_args, bug=BUGS[bug])
    assert r.status == 0, r.log
    with pytest.raises(AssertionError):
        check(d, want)


def test_a_ue4m3_scale_with_bit_7_is_reported(module):
    def plant(raw):
        raw[5, 1] = 0x85
        return raw

    with pytest.raises(EmuKernelError, match="scale factor A of row 5 .K block 1. is 0x85, which has bit 7 set"):
        run(module, kind="mxf4nvf4", a="e2m1", b="e2m1", sf="ue4m3", n=16, steps=1, sfa_raw=plant)


# ---------------------------------------------------------------------------
# nvcc: the kernel assembles for sm_100a into the block-scaled SASS.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("arch", ["sm_100a", "sm_100f"])
def test_block_scaled_primitives_assemble_to_utcqmma_utcomma_utccp(arch):
    """sm_100a takes the scale_vec::NX spelling, sm_100f the .block32 /
    .block16 one (GG_BS_VEC): both give the same SASS."""
    source = (CUDA_SRC / "sm100_block_scaled.cu").read_text()
    result = nvcc.compile_check(source, arch, name_for_errors="tests/cuda_src/sm100_block_scaled.cu")
    assert set(result.kernels) == {"bs_mma", "bs_tma"}
    for usage in result.kernels.values():
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
    tma = nvcc.sass_summary(result.cubin)["bs_tma"]
    assert tma.count("UTMALDG") == 4 and tma.count("UTCCP") == 2 and tma.count("UTCQMMA") > 0
    sass = nvcc.sass_summary(result.cubin)["bs_mma"]
    assert sass.count("UTCQMMA") == 1  # kind::mxf8f6f4.block_scale
    assert sass.count("UTCOMMA") == 2 and sass.count("UTCOMMA", "4X") == 1  # mxf4, mxf4nvf4 4X
    assert sass.count("UTCCP") > 0 and sass.count("UTCBAR") == 1
    assert sass.count("HMMA") == 0 and sass.count("QMMA") == 0 and sass.count("OMMA") == 0


@needs_nvcc
def test_block_scaled_primitives_before_sm_100a_are_a_compile_error():
    source = (CUDA_SRC / "sm100_block_scaled.cu").read_text()
    with pytest.raises(nvcc.NvccError, match="needs sm_100a / sm_103a"):
        nvcc.compile_check(source, "sm_90a", name_for_errors="tests/cuda_src/sm100_block_scaled.cu")


# ---------------------------------------------------------------------------
# A TMA-fed pipeline: the scale atoms and the operands loaded by TMA into one
# stage, the scales copied into TMEM each K tile (bs_tma).


def run_tma(module, k: int, bug: int = 0, schedule: str = "run-ahead"):
    rng = np.random.default_rng(k + bug)
    blocks = k // 32
    av, a_raw = operand(rng, 128, k, "mxf8f6f4", "e4m3")
    bv, b_raw = operand(rng, 128, k, "mxf8f6f4", "e4m3")
    sfa_raw, sa = scales(rng, 128, blocks, "ue8m0", edges=False)
    sfb_raw, sb = scales(rng, 128, blocks, "ue8m0", edges=False)
    atoms = blocks // 4
    r = module.run_host({"k_bug": np.array([k, bug], np.int32), "a": a_raw, "b": b_raw,
                         "sfa": atom_image(sfa_raw, atoms), "sfb": atom_image(sfb_raw, atoms)}, arch=ARCH,
                        schedule=schedule)
    assert r.status == 0, r.log
    d = np.frombuffer(r.outputs["d"], np.float32).reshape(128, 128)
    a_s, b_s = av * np.repeat(sa, 32, axis=1), bv * np.repeat(sb, 32, axis=1)
    want = np.zeros((128, 128), np.float32)
    for s in range(k // 32):
        sl = slice(32 * s, 32 * s + 32)
        want = (want.astype(np.float64) + a_s[:, sl] @ b_s[:, sl].T).astype(np.float32)
    return d, want


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
def test_tma_fed_block_scaled_pipeline_matches_numpy(module, schedule):
    d, want = run_tma(module, 384, schedule=schedule)
    check(d, want)


@pytest.mark.parametrize("bug, why", [
    (1, "a TMA load overwrites shared memory"),
    (2, ("(or the copy was issued before its data had arrived|tcgen05.cp.cta_group::1.32x128b.warpx4 .its "
         "source, no swizzle. reads shared memory)")),
])
def test_tma_fed_pipeline_planted_bug_is_reported(module, bug, why):
    """1: the stage refilled once the MMAs were issued, not completed: the
    TMA load of the next scales overwrites what the copy still reads; 2: the
    scales copied before the TMA load's barrier was waited on."""
    with pytest.raises(EmuKernelError, match=why):
        run_tma(module, 384, bug)
