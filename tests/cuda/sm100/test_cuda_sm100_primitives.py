"""The datacenter Blackwell primitives (gg_primitives_sm100.cuh) on the CPU
emulator (arch sm_100a) against NumPy, the bugs the emulator must catch, and
the nvcc build of the kernels for sm_100a (tests/cuda_src/sm100_primitives.cu).

The operand images in shared memory, the descriptors' fields and the
accumulator's TMEM layout are written here from the PTX ISA (the canonical
layouts of "Shared Memory Matrix Layout", Swizzle<B,4,3> / Swizzle<2,5,2> on
byte addresses, the "Shared Memory Descriptor" and "Instruction descriptor"
tables, the "Data path layout organization" figures for M = 128 and 64), not
from the emulator."""

import ctypes

import ml_dtypes
import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC

from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError, EmuModule

BF16, F16 = ml_dtypes.bfloat16, np.float16
E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
TYPES = {"f16": (0, F16), "bf16": (1, BF16), "e4m3": (2, E4M3), "e5m2": (3, E5M2)}  # gg::umma::Type
SWIZZLE = {0: 0, 32: 6, 64: 4, 128: 2, "128b32": 1}  # span -> the descriptor's layout type (bits 61-63)
ARCH = "sm_100a"
POISON = 0xFFFFFFFF  # a TMEM cell never written (the emulator's allocation poison, NaN)


@pytest.fixture(scope="module")
def sm100() -> EmuModule:
    # -Wall -Wextra -Werror: the header will be part of generated kernels, which compile so.
    return EmuModule.from_file(CUDA_SRC / "sm100_primitives.cu", warnings=True)


# ---------------------------------------------------------------------------
# Operand images (PTX ISA, "Shared Memory Matrix Layout").


def swizzle(addr: np.ndarray, span) -> np.ndarray:
    """Swizzle<log2(span/16),4,3> on byte addresses (bits 4.. ^= bits 7..), or
    Swizzle<2,5,2> for the 128-byte swizzle with 32-byte atomicity."""
    if span == 0:
        return addr
    if span == "128b32":
        return addr ^ (((addr >> 7) & 3) << 5)
    return addr ^ (((addr >> 7) & (span // 16 - 1)) << 4)


def operand_offsets(rows: int, k: int, mn_major: bool, span, eb: int, lbo: int, sbo: int) -> np.ndarray:
    """Byte offset of element (mn, k) before the swizzle, T = 16 / eb
    elements per 16 bytes: the canonical layouts of the PTX ISA's table."""
    mn, kk = np.meshgrid(np.arange(rows), np.arange(k), indexing="ij")
    t = 16 // eb
    if not mn_major:
        if span == 0:
            return (mn % 8) * 16 + (mn // 8) * sbo + (kk // t) * lbo + (kk % t) * eb
        return (mn % 8) * span + (mn // 8) * sbo + kk * eb
    if span == 0:
        return (mn % t) * eb + (mn // t) * sbo + (kk % 8) * 16 + (kk // 8) * lbo
    if span == "128b32":
        return (mn % t) * eb + ((mn // t) % 8) * 16 + (mn // (8 * t)) * lbo + (kk % 4) * 128 + (kk // 4) * sbo
    w = span // 16
    return (mn % t) * eb + ((mn // t) % w) * 16 + (mn // (t * w)) * lbo + (kk % 8) * span + (kk // 8) * sbo


def strides_for(rows: int, k: int, mn_major: bool, span, eb: int) -> tuple[int, int]:
    """A compact (LBO, SBO) for an operand of `rows` x `k`."""
    t = 16 // eb

    def blocks(width: int) -> int:  # MN blocks of `width` elements, the last one partial
        return -(-rows // width)

    if not mn_major:
        return (blocks(8) * 128, 128) if span == 0 else (16, 8 * span)
    if span == 0:
        return blocks(t) * 128, 128
    if span == "128b32":
        return 4 * 128, blocks(8 * t) * 4 * 128
    return 8 * span, blocks(t * span // 16) * 8 * span


def k_step_bytes(k: int, mn_major: bool, span, eb: int, lbo: int, sbo: int) -> int:
    """How far the start of a descriptor moves for the next `k` elements of K
    in one image (k a multiple of the 8 (4) K rows of a core matrix / pattern)."""
    if not mn_major:
        return k * eb if span != 0 else (k * eb // 16) * lbo
    if span == 0:
        return (k // 8) * lbo
    return (k // (4 if span == "128b32" else 8)) * sbo


def image(values: np.ndarray, mn_major: bool, span) -> tuple[np.ndarray, int, int]:
    """The shared-memory image (bytes, from a 1024-aligned base) of an
    operand `values` (rows x k), with its LBO and SBO."""
    rows, k = values.shape
    eb = values.dtype.itemsize
    lbo, sbo = strides_for(rows, k, mn_major, span, eb)
    offs = swizzle(operand_offsets(rows, k, mn_major, span, eb, lbo, sbo), span)
    size = (int(offs.max()) + eb + 1023) // 1024 * 1024
    img = np.zeros(size, np.uint8)
    raw = values.view(np.uint8).reshape(rows, k, eb)
    for b in range(eb):
        img[offs + b] = raw[:, :, b]
    return img, lbo, sbo


def d_lane(m_total: int, m: np.ndarray) -> np.ndarray:
    """The TMEM lane of accumulator row m (PTX ISA, "Data path layout
    organization": layout D, M = 128, row m in lane m; layout F, M = 64, rows
    16i..16i+15 in the first 16 lanes of lane quarter i)."""
    return 32 * (m // 16) + m % 16 if m_total == 64 else m


def random_operand(rng, shape, dtype) -> np.ndarray:
    """Fresh random values, none zero."""
    v = rng.standard_normal(shape)
    v = np.where(np.abs(v) < 0.05, 0.5, v)
    return v.astype(dtype)


# The parameters of tc_mma (its enum Param).
PARAMS = ["m", "n", "a_type", "b_type", "a_major", "b_major", "a_lbo", "a_sbo", "a_swizzle", "b_lbo", "b_sbo",
          "b_swizzle", "steps", "a_bytes", "b_bytes", "a_step", "b_step", "accumulate", "bug", "d_lane"]


def run_mma(sm100, *, a_type="bf16", b_type=None, m=128, n=64, a_mn=False, b_mn=False, span=128, b_span=None,
            steps=1, packed=False, accumulate=False, bug=0, seed=0, schedule="run-ahead", d_lane0=0):
    """One tile: D (m x n) = sum over `steps` MMAs of A_s (m x K) B_s (n x K)^T
    (+ C). `packed`: the steps' K slices lie in one image of m x (K steps)
    (the descriptor's start advances by K elements, as a pipelined kernel's
    does: within the swizzled rows when K-major), else each step has an
    image of its own.
    Returns (D from TMEM through the layout, the raw TMEM dump, NumPy's D)."""
    b_type = b_type or a_type
    b_span = span if b_span is None else b_span
    rng = np.random.default_rng(seed)
    (a_code, a_dt), (b_code, b_dt) = TYPES[a_type], TYPES[b_type]
    k = 16 if np.dtype(a_dt).itemsize == 2 else 32
    a = random_operand(rng, (m, k * steps), a_dt)
    b = random_operand(rng, (n, k * steps), b_dt)

    def images(values, mn, sp):
        eb = values.dtype.itemsize
        if packed:
            # K-major swizzled: every step's K slice within one swizzled row.
            assert mn or sp == 0 or values.shape[1] * eb <= (128 if sp == "128b32" else sp)
            img, lbo, sbo = image(values, mn, sp)
            return img, lbo, sbo, k_step_bytes(k, mn, sp, eb, lbo, sbo)
        parts = [image(np.ascontiguousarray(values[:, s * k:(s + 1) * k]), mn, sp) for s in range(steps)]
        assert len({(lbo, sbo) for _, lbo, sbo in parts}) == 1
        return np.concatenate([p[0] for p in parts]), parts[0][1], parts[0][2], parts[0][0].size

    a_img, a_lbo, a_sbo, a_step = images(a, a_mn, span)
    b_img, b_lbo, b_sbo, b_step = images(b, b_mn, b_span)
    c = rng.standard_normal((128, n)).astype(np.float32)
    values = {"m": m, "n": n, "a_type": a_code, "b_type": b_code, "a_major": int(a_mn), "b_major": int(b_mn),
              "a_lbo": a_lbo, "a_sbo": a_sbo, "a_swizzle": SWIZZLE[span], "b_lbo": b_lbo, "b_sbo": b_sbo,
              "b_swizzle": SWIZZLE[b_span], "steps": steps, "a_bytes": a_img.size, "b_bytes": b_img.size,
              "a_step": a_step, "b_step": b_step, "accumulate": int(accumulate), "bug": bug, "d_lane": d_lane0}
    params = np.array([values[p] for p in PARAMS], np.int64)
    r = sm100.run_host({"case": b"mma", "params": params, "a": a_img, "b": b_img, "c": c}, arch=ARCH,
                       schedule=schedule)
    assert r.status == 0, r.log
    dump = np.frombuffer(r.outputs["d"], np.uint32).reshape(128, n)
    rows = d_lane0 + d_lane(m, np.arange(m))
    expected = np.zeros((m, n))
    for s in range(steps):  # the emulator rounds D to f32 after each MMA, as the hardware's D is f32
        sl = slice(s * k, (s + 1) * k)
        expected = expected + a[:, sl].astype(np.float64) @ b[:, sl].astype(np.float64).T
    if accumulate:
        expected = expected + c[rows].astype(np.float64)
    return dump[rows].view(np.float32), dump, expected, c


MMA_CASES = [
    # (a_type, b_type, m, n, a_mn, b_mn, span, steps, packed, accumulate)
    ("bf16", None, 128, 64, False, False, 128, 1, False, False),
    *[("bf16", None, 128, 32, False, False, s, 2, False, True) for s in (0, 32, 64)],
    *[("bf16", None, 128, 64, True, True, s, 2, False, False) for s in (0, 32, 64, 128)],
    ("bf16", None, 128, 64, True, True, "128b32", 1, False, False),
    ("bf16", None, 128, 256, True, False, 128, 4, True, False),
    ("bf16", None, 128, 24, False, True, 32, 2, False, True),
    ("e4m3", None, 128, 8, False, False, 64, 1, False, False),
    ("bf16", None, 64, 8, False, True, 64, 2, False, True),
    ("bf16", None, 64, 40, False, False, 128, 3, True, False),
    ("f16", None, 128, 16, False, False, 32, 2, False, True),
    ("f16", None, 64, 128, True, False, 0, 2, False, False),
    ("e4m3", None, 128, 64, False, False, 128, 4, True, False),
    ("e4m3", None, 128, 48, True, True, 64, 2, False, True),
    ("e5m2", None, 64, 96, False, False, 32, 2, False, False),
    ("e5m2", None, 128, 160, False, True, 0, 1, False, True),
    ("e4m3", "e5m2", 128, 32, False, False, 128, 2, True, False),
]


def mma_id(c):
    a, b, m, n, amn, bmn, span, steps, packed, acc = c
    return (f"{a}{'x' + b if b else ''}-m{m}n{n}-{'MN' if amn else 'K'}{'MN' if bmn else 'K'}-sw{span}-x{steps}"
            f"{'-packed' if packed else ''}{'-acc' if acc else ''}")


@pytest.mark.parametrize("case", MMA_CASES, ids=mma_id)
def test_tcgen05_mma_matches_numpy(sm100, case):
    a_type, b_type, m, n, a_mn, b_mn, span, steps, packed, accumulate = case
    d, dump, expected, c = run_mma(sm100, a_type=a_type, b_type=b_type, m=m, n=n, a_mn=a_mn, b_mn=b_mn, span=span,
                                   steps=steps, packed=packed, accumulate=accumulate, seed=n + steps)
    np.testing.assert_allclose(d, expected, rtol=1e-5, atol=1e-5)
    # The lanes an M = 64 accumulator does not use keep what they held: C, or
    # the allocation's poison.
    unused = np.setdiff1d(np.arange(128), d_lane(m, np.arange(m)))
    if accumulate:
        np.testing.assert_array_equal(dump[unused], c[unused].view(np.uint32))
    else:
        assert (dump[unused] == POISON).all()


@pytest.mark.parametrize("accumulate", [False, True])
def test_an_m64_accumulator_at_lane_16(sm100, accumulate):
    """Layout F from lane 16: rows 16i..16i+15 in lanes 32i + 16 .. 32i + 31,
    the lanes an accumulator at lane 0 leaves alone."""
    d, dump, expected, c = run_mma(sm100, m=64, n=32, steps=2, accumulate=accumulate, d_lane0=16, seed=5)
    np.testing.assert_allclose(d, expected, rtol=1e-5, atol=1e-5)
    below = np.concatenate([np.arange(32 * i, 32 * i + 16) for i in range(4)])
    if accumulate:
        np.testing.assert_array_equal(dump[below], c[below].view(np.uint32))
    else:
        assert (dump[below] == POISON).all()


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
def test_tcgen05_mma_both_schedules(sm100, schedule):
    d, _, expected, _ = run_mma(sm100, n=128, steps=3, packed=True, accumulate=True, schedule=schedule, seed=9)
    np.testing.assert_allclose(d, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("widths", [(1, 128), (128, 1), (2, 64), (64, 2), (4, 32), (32, 4), (8, 16), (16, 8)],
                         ids=lambda w: f"st{w[0]}-ld{w[1]}")
def test_tcgen05_ld_st_every_width(sm100, widths):
    rng = np.random.default_rng(widths[0])
    values = rng.integers(0, 2**32, (128, 256), dtype=np.uint64).astype(np.uint32)
    r = sm100.run_host({"case": b"widths", "widths": np.array([*widths, 1], np.uint8), "in": values}, arch=ARCH)
    assert r.status == 0, r.log
    np.testing.assert_array_equal(np.frombuffer(r.outputs["out"], np.uint32).reshape(128, 256), values)


@pytest.mark.parametrize("num", [1, 2, 4, 8, 16, 32])
def test_tcgen05_ld_16x256b(sm100, num):
    """PTX ISA, the .16x256b figure of "Matrix fragments for tcgen05.ld":
    per .num, 16 lanes x 8 columns; thread t's registers 4i, 4i+1 at lane
    t/4, columns 8i + 2 (t%4) and + 1; registers 4i+2, 4i+3 at lane t/4 + 8."""
    rng = np.random.default_rng(num)
    values = rng.integers(0, 2**32, (128, 256), dtype=np.uint64).astype(np.uint32)
    r = sm100.run_host({"case": b"ld16", "num": np.uint8(num), "in": values}, arch=ARCH)
    assert r.status == 0, r.log
    out = np.frombuffer(r.outputs["out"], np.uint32).reshape(4, 2, 32, 128)
    w, half, t, j = np.meshgrid(np.arange(4), np.arange(2), np.arange(32), np.arange(4 * num), indexing="ij")
    lane = 32 * w + 16 * half + t // 4 + 8 * ((j % 4) // 2)
    col = 8 * (j // 4) + 2 * (t % 4) + j % 2
    np.testing.assert_array_equal(out[..., :4 * num], values[lane, col])


def test_each_block_starts_with_free_tmem_and_its_permit(sm100):
    """Three blocks on one worker, each allocating, relinquishing its permit
    and freeing: the model's state of one block does not leak into the next."""
    rng = np.random.default_rng(3)
    values = rng.integers(0, 2**32, (128, 256), dtype=np.uint64).astype(np.uint32)
    r = sm100.run_host({"case": b"widths", "widths": np.array([8, 32, 3], np.uint8), "in": values}, arch=ARCH,
                       workers=1)
    assert r.status == 0, r.log
    out = np.frombuffer(r.outputs["out"], np.uint32).reshape(3, 128, 256)
    for block in out:
        np.testing.assert_array_equal(block, values)


def test_tmem_alloc_waits_for_columns(sm100):
    """Warp 1 asks for 128 columns while warp 0 holds all 512: its
    allocation waits until warp 0 frees them, then gets column 0."""
    r = sm100.run_host({"case": b"alloc_waits", "never_free": np.uint8(0)}, arch=ARCH)
    assert r.status == 0, r.log
    np.testing.assert_array_equal(np.frombuffer(r.outputs["out"], np.uint32), [0, 0])


def test_tmem_alloc_that_never_gets_columns_is_a_deadlock_naming_tmem(sm100):
    with pytest.raises(EmuKernelError) as e:
        sm100.run_host({"case": b"alloc_waits", "never_free": np.uint8(1)}, arch=ARCH)
    message = str(e.value)
    assert "deadlock in block (0,0,0)" in message
    assert "thread 32: wait at tcgen05.alloc of 128 TMEM columns (512 of 512 columns are allocated: [0, 512) by " \
           "warp 0)" in message
    assert "TMEM: warp 1 waits in tcgen05.alloc for 128 columns" in message


def test_tcgen05_needs_an_sm100_device(sm100):
    with pytest.raises(EmuKernelError, match=r"tcgen05.alloc needs sm_100a or sm_103a; the emulated device is sm_90a"):
        sm100.run_host({"case": b"alloc_waits", "never_free": np.uint8(0)}, arch="sm_90a")


# ---------------------------------------------------------------------------
# The emulator's exported decoders (what the CuTe oracle compares) against
# the PTX ISA's tables written out above.


@pytest.fixture(scope="module")
def decoders(sm100):
    lib = ctypes.CDLL(str(sm100.library))
    lib.gg_emu_sm100_smem_desc_offset.restype = ctypes.c_longlong
    lib.gg_emu_sm100_smem_desc_offset.argtypes = (ctypes.c_ulonglong, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                  ctypes.c_int)
    lib.gg_emu_sm100_smem_desc_check.argtypes = (ctypes.c_ulonglong, ctypes.c_int, ctypes.c_char_p, ctypes.c_int)
    lib.gg_emu_sm100_idesc_check.argtypes = (ctypes.c_uint, ctypes.c_int, ctypes.c_char_p, ctypes.c_int)
    lib.gg_emu_sm100_idesc_decode.argtypes = (ctypes.c_uint, ctypes.POINTER(ctypes.c_int))
    return lib


def smem_descriptor(start: int, lbo: int, sbo: int, layout: int, version: int = 1) -> int:
    """PTX ISA "Shared Memory Descriptor": start, LBO, SBO (>> 4), bits 46-48
    the fixed 0b001, bits 61-63 the swizzling mode."""
    return (start >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | version << 46 | layout << 61


@pytest.mark.parametrize("span", [0, 32, 64, 128, "128b32"])
@pytest.mark.parametrize("mn_major", [False, True], ids=["K", "MN"])
@pytest.mark.parametrize("eb", [1, 2])
def test_exported_descriptor_decoding_follows_the_ptx_layouts(decoders, span, mn_major, eb):
    if span == "128b32" and not mn_major:
        why = ctypes.create_string_buffer(256)
        assert decoders.gg_emu_sm100_smem_desc_check(smem_descriptor(0, 16, 1024, 1), 0, why, 256) == 1
        assert b"MN-major operands only" in why.value
        return
    rows, k = 64, 32 // eb
    lbo, sbo = strides_for(rows, 4 * k, mn_major, span, eb)
    start = 0x2400
    expected = swizzle(start + operand_offsets(rows, k, mn_major, span, eb, lbo, sbo), span)
    desc = smem_descriptor(start, lbo, sbo, SWIZZLE[span])
    got = np.array([[decoders.gg_emu_sm100_smem_desc_offset(desc, int(mn_major), 8 * eb, r, kk) for kk in range(k)]
                    for r in range(rows)])
    np.testing.assert_array_equal(got, expected)


def test_the_documented_worked_examples(decoders):
    """docs/cuda-sm100.md, "The descriptors, worked"."""
    desc = smem_descriptor(0x420, 16, 1024, 2)
    assert desc == 0x4000404000010042
    assert decoders.gg_emu_sm100_smem_desc_offset(desc, 0, 16, 9, 3) == 0x8B6
    fields = (ctypes.c_int * 14)()
    decoders.gg_emu_sm100_idesc_decode(0x08100490, fields)
    # D f32, A bf16, B bf16, no negation, both K-major, N 64, M 128, dense, no saturate / shift, no reserved bits.
    assert list(fields) == [1, 1, 1, 0, 0, 0, 0, 64, 128, 0, 0, 0, 0, 0]
    assert decoders.gg_emu_sm100_idesc_check(0x08100490, 0, None, 0) == 0


@pytest.mark.parametrize(("idesc", "kind", "why"), [
    (0x08100490 | 1 << 23, 0, b"reserved bits are set"),
    (0x08100490 & ~(1 << 4), 0, b"D is f16"),
    ((0x08100490 & ~(0x1F << 24)) | (16 << 24), 0, b"M = 256 (bits 24-28 = 16): cta_group::1 takes M = 64 or 128"),
    (0x08100490 & ~(0x3F << 17), 0, b"N = 0 (bits 17-22 = 0) is not a multiple of 8 in 8..256 (M = 128)"),
    ((0x08100490 & ~(0x1F << 24)) | (4 << 24) | (0x3F << 17), 1, b"N = 504 (bits 17-22 = 63) is not a multiple of 8"),
    ((0x08100490 & ~(0x3F << 17)) | (3 << 17) | (1 << 16), 1,
     b"N = 24 (bits 17-22 = 3) is not a multiple of 16 in 16..256 (M = 128, an 8-bit MN-major B)"),
    (0x08100490 & ~(1 << 7), 0, b"A is f16 and B is bf16: kind::f16 multiplies two operands of one type"),
    ((0x08100490 & ~(0x3F << 7)) | 2 << 7 | 2 << 10, 0, b"(tf32 is kind::tf32)"),
    ((0x08100490 & ~(0x3F << 7)) | 6 << 7, 1, b"the A / B format 6 is not one of kind::f8f6f4's"),
    (0x08100010 | 5 << 7 | 5 << 10, 1, b"e2m1 operands are not modelled"),
    (0x08100490 | 1 << 2, 0, b"sparse MMA is tcgen05.mma.sp"),
])
def test_rejected_instruction_descriptors_say_why(decoders, idesc, kind, why):
    buf = ctypes.create_string_buffer(256)
    assert decoders.gg_emu_sm100_idesc_check(idesc, kind, buf, 256) == 1
    assert why in buf.value, buf.value


def test_exported_accumulator_cells_follow_the_data_path_layouts(decoders):
    lane, column = ctypes.c_int(), ctypes.c_int()
    for m_total, n in ((128, 16), (64, 8)):
        for row in range(m_total):
            for col in (0, n - 1):
                assert decoders.gg_emu_sm100_d_cell(m_total, n, row, col, ctypes.byref(lane), ctypes.byref(column)) == 0
                assert (lane.value, column.value) == (int(d_lane(m_total, np.array(row))), col)
    assert decoders.gg_emu_sm100_d_cell(128, 20, 0, 0, ctypes.byref(lane), ctypes.byref(column)) == -1
    assert decoders.gg_emu_sm100_d_cell(128, 264, 0, 0, ctypes.byref(lane), ctypes.byref(column)) == -1


# ---------------------------------------------------------------------------
# Planted bugs (tc_mma's enum Bug).

PLANTED = {
    1: r"tcgen05.ld.32x32b reads TMEM lane \d+ column 0, which a tcgen05.mma issued by thread 0 still writes \(its "
        r"tcgen05.commit arrives on the mbarrier at 0x[0-9a-f]+ phase 0\): the accumulator is read before a thread "
        r"waited on the mbarrier phase",
    2: r"shared memory at 0x[0-9a-f]+ that a tcgen05.mma issued by thread 0 reads was overwritten before its "
        r"tcgen05.commit's mbarrier phase completed and was waited on",
    3: r"floating-point invalid operation while this thread has a tcgen05.ld outstanding: its destination "
        r"registers were read before tcgen05.wait::ld",
    4: r"tcgen05.ld.32x32b: warp 0 \(position 0 in its warpgroup\) accesses TMEM lanes 32..63, but it reaches "
        r"only lanes 0..31",
    5: r"TMEM leak: columns \[0, 64\) allocated by warp 0 \(tcgen05.alloc\) were never freed",
    6: r"tcgen05.dealloc of TMEM columns \[0, 64\), which were already freed \(allocated by warp 0\): a double "
        r"free",
    7: r"tcgen05.ld.32x32b accesses TMEM column 64 \(columns 64..71\), outside every allocation \(64 of 512 "
        r"columns are allocated: \[0, 64\) by warp 0\)",
    8: r"tcgen05.alloc after tcgen05.relinquish_alloc_permit: the block gave up its right to allocate TMEM",
    9: r"tcgen05.mma.cta_group::1.kind::f16: instruction descriptor 0x[0-9a-f]{8}: M = 256 \(bits 24-28 = 16\): "
        r"cta_group::1 takes M = 64 or 128 \(M = 256 needs cta_group::2\)",
    10: r"tcgen05.mma.cta_group::1.kind::f16: the A matrix descriptor 0x[0-9a-f]{16}: bits 46-48 are 0, not the "
         r"fixed constant 0b001 of an sm_100 matrix descriptor",
    11: r"missing tcgen05.fence::after_thread_sync: tcgen05.ld.32x32b reads TMEM lane \d+ column 0",
    12: r"missing fence.proxy.async: tcgen05.mma.cta_group::1.kind::f16 \(its A operand, 128-byte swizzle\) reads "
        r"shared memory at shared address 0x[0-9a-f]+",
}
PLANTED_NAMES = {1: "no_commit_wait", 2: "overwrite_stage", 3: "read_before_wait_ld", 4: "wrong_lanes", 5: "leak",
                 6: "double_dealloc", 7: "outside_allocation", 8: "alloc_after_relinquish", 9: "bad_instr_desc",
                 10: "sm90_descriptor", 11: "no_fence_after", 12: "no_proxy_fence"}


@pytest.mark.parametrize("bug", list(PLANTED), ids=[PLANTED_NAMES[b] for b in PLANTED])
def test_planted_bug_is_caught(sm100, bug):
    with pytest.raises(EmuKernelError, match=PLANTED[bug]) as e:
        run_mma(sm100, n=64, steps=2, bug=bug)
    assert "in kernel tc_mma, block (0,0,0), thread" in str(e.value)


def test_the_stage_release_rule_holds_in_the_reverse_schedule_too(sm100):
    with pytest.raises(EmuKernelError, match=PLANTED[2]):
        run_mma(sm100, n=64, steps=2, bug=2, schedule="reverse")


# ---------------------------------------------------------------------------
# One accumulator, two rounds (acc_reuse): the epilogue hands the columns back
# through an mbarrier, after tcgen05.fence::before_thread_sync.


def run_acc_reuse(sm100, bug: int = 0, schedule: str = "run-ahead"):
    rng = np.random.default_rng(21)
    a = random_operand(rng, (128, 16), BF16)
    b = random_operand(rng, (64, 16), BF16)
    a_img, a_lbo, a_sbo = image(a, False, 128)
    b_img, b_lbo, b_sbo = image(b, False, 128)
    assert (a_img.size, b_img.size, a_lbo, a_sbo, b_lbo, b_sbo) == (16384, 8192, 16, 1024, 16, 1024)
    r = sm100.run_host({"case": b"acc_reuse", "bug": np.uint8(bug), "a": a_img, "b": b_img}, arch=ARCH,
                       schedule=schedule)
    assert r.status == 0, r.log
    return np.frombuffer(r.outputs["d"], np.float32).reshape(2, 128, 64), a.astype(np.float64) @ b.astype(
        np.float64).T


def test_an_accumulator_reused_after_the_epilogue_released_it(sm100):
    """Round 1 negates A (instruction descriptor bit 13): -A B^T."""
    d, product = run_acc_reuse(sm100)
    np.testing.assert_allclose(d[0], product, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d[1], -product, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
def test_a_missing_fence_before_thread_sync_is_reported(sm100, schedule):
    with pytest.raises(EmuKernelError, match=r"missing tcgen05.fence::before_thread_sync: thread \d+ accessed TMEM "
                                             r"columns \[\d+, \d+\) with tcgen05.ld.32x32b, then arrived on the "
                                             r"mbarrier at 0x[0-9a-f]+ \(phase 0\) without a "
                                             r"tcgen05.fence::before_thread_sync; this thread waited on that phase "
                                             r"and its tcgen05.mma.cta_group::1.kind::f16 writes columns \[0, 64\)"):
        run_acc_reuse(sm100, bug=1, schedule=schedule)


# ---------------------------------------------------------------------------
# A one-stage TMA + tcgen05 pipeline (tma_mma): the stage release rule with TMA.


def run_tma_mma(sm100, k: int, bug: int = 0, schedule: str = "run-ahead"):
    rng = np.random.default_rng(k + bug)
    a = random_operand(rng, (128, k), BF16)
    b = random_operand(rng, (64, k), BF16)
    r = sm100.run_host({"case": b"tma_mma", "k_bug": np.array([k, bug], np.int32), "a": a, "b": b}, arch=ARCH,
                       schedule=schedule)
    assert r.status == 0, r.log
    return np.frombuffer(r.outputs["d"], np.float32).reshape(128, 64), a.astype(np.float64) @ b.astype(np.float64).T


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
def test_tma_fed_tcgen05_pipeline_matches_numpy(sm100, schedule):
    d, expected = run_tma_mma(sm100, 192, schedule=schedule)
    np.testing.assert_allclose(d, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
def test_a_stage_refilled_before_the_commit_completed_is_reported(sm100, schedule):
    with pytest.raises(EmuKernelError, match=r"a TMA load overwrites shared memory \[0x[0-9a-f]+, 0x[0-9a-f]+\) "
                                             r"that a tcgen05.mma issued by thread 0 still reads \(its tcgen05.commit "
                                             r"arrives on the mbarrier at 0x[0-9a-f]+ phase 0\): the stage was "
                                             r"released before the MMA's tcgen05.commit phase was waited on"):
        run_tma_mma(sm100, 128, bug=1, schedule=schedule)


def test_a_descriptor_swizzle_other_than_the_tma_loads_is_reported(sm100):
    with pytest.raises(EmuKernelError, match=r"tcgen05.mma.cta_group::1.kind::f16 \(its A operand, 64-byte "
                                             r"swizzle\): the descriptor says 64-byte swizzle, but a TMA load with "
                                             r"128-byte swizzle filled the shared memory it reads"):
        run_tma_mma(sm100, 64, bug=2)


# ---------------------------------------------------------------------------
# nvcc: the kernels assemble for sm_100a into the tcgen05 SASS.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
def test_sm100_primitives_assemble_to_tcgen05_sass():
    source = (CUDA_SRC / "sm100_primitives.cu").read_text()
    result = nvcc.compile_check(source, ARCH, name_for_errors="tests/cuda_src/sm100_primitives.cu")
    assert set(result.kernels) == {"tc_mma", "tma_mma", "acc_reuse", "tmem_alloc_waits", "tmem_ld_st_widths",
                                   "tmem_ld_16x256b"}, result.log
    for usage in result.kernels.values():
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
    sass = nvcc.sass_summary(result.cubin)
    mma = sass["tc_mma"]
    assert mma.count("UTCHMMA") > 0 and mma.count("UTCQMMA") > 0  # kind::f16 and kind::f8f6f4
    assert mma.count("UTCBAR") == 1 and mma.count("LDTM") > 0 and mma.count("STTM") > 0
    assert mma.count("HMMA") == 0 and mma.count("QMMA") == 0 and mma.count("HGMMA") == 0
    assert mma.count("UTCATOMSWS") > 0 and mma.count("UVIRTCOUNT", "DEALLOC") == 1
    pipeline = sass["tma_mma"]
    assert pipeline.count("UTMALDG") == 2 and pipeline.count("UTCHMMA") > 0 and pipeline.count("UTCBAR") == 2
    widths = sass["tmem_ld_st_widths"]
    assert widths.count("LDTM") > 0 and widths.count("STTM") > 0
    assert sass["tmem_ld_16x256b"].count("LDTM", "16") > 0  # the 16-lane shapes


@needs_nvcc
@needs_cuobjdump
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_103a", "sm_100f", "sm_103f"])
def test_the_other_tcgen05_targets_get_the_primitives(arch):
    """GG_SM100_TCGEN05 covers the B300's arch and the family targets too."""
    source = (CUDA_SRC / "sm100_primitives.cu").read_text()
    result = nvcc.compile_check(source, arch, name_for_errors="tests/cuda_src/sm100_primitives.cu")
    mma = nvcc.sass_summary(result.cubin)["tc_mma"]
    assert mma.count("UTCHMMA") > 0 and mma.count("UTCQMMA") > 0 and mma.count("UTCBAR") == 1


@needs_nvcc
def test_tcgen05_before_sm_100a_is_a_compile_error():
    source = (CUDA_SRC / "sm100_primitives.cu").read_text()
    with pytest.raises(nvcc.NvccError, match="needs sm_100a / sm_103a"):
        nvcc.compile_check(source, "sm_90a", name_for_errors="tests/cuda_src/sm100_primitives.cu")
