"""The Hopper primitives (gg_primitives_sm90.cuh) on the CPU emulator against
NumPy, one small kernel per primitive (tests/cuda_src/sm90_primitives.cu), a
warp-specialized TMA + wgmma GEMM pipeline, the bugs the emulator must catch
in it, and the nvcc build of every primitive for sm_90a.

The expected shared-memory images and fragments are written here from the PTX
ISA (the canonical layouts table of "Shared Memory Matrix Layout", Swizzle<B,4,3>
on byte addresses, and the figures of the wgmma register fragments), not from
the emulator; tests/cuda/sm90/test_cuda_sm90_cute_oracle.py checks the same decodings
against CuTe."""

import ml_dtypes
import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC

from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError, EmuModule

BF16, F16 = ml_dtypes.bfloat16, np.float16
E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
CU_DTYPE = {np.dtype(np.uint8): 0, np.dtype(F16): 6, np.dtype(np.float32): 7, np.dtype(BF16): 9}
SPAN = {0: 0, 1: 32, 2: 64, 3: 128}  # CU_TENSOR_MAP_SWIZZLE_* -> bytes
DESC_MODE = {0: 0, 128: 1, 64: 2, 32: 3}  # swizzle bytes -> descriptor layout type
CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED = 0, 1, 801


@pytest.fixture(scope="module")
def sm90() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "sm90_primitives.cu")


def swizzle(offsets: np.ndarray, span: int) -> np.ndarray:
    """Swizzle<log2(span/16),4,3> on byte offsets from a 1024-byte aligned base."""
    if span == 0:
        return offsets
    return offsets ^ (((offsets >> 7) & (span // 16 - 1)) << 4)


def map_words(dtype, dims, box, swizzle_code=0, strides=None, offset=0, estrides=None) -> np.ndarray:
    """The "map" input of the host program: dtype, rank, swizzle, dims[5],
    strides[4], box[5], element strides[5], address offset."""
    rank = len(dims)
    esize = np.dtype(dtype).itemsize if not isinstance(dtype, int) else 2
    code = CU_DTYPE[np.dtype(dtype)] if not isinstance(dtype, int) else dtype
    if strides is None:
        strides, s = [], esize
        for d in dims[:-1]:
            s *= d
            strides.append(s)
    w = [code, rank, swizzle_code, *dims, *[1] * (5 - rank), *strides, *[0] * (4 - len(strides)),
         *box, *[1] * (5 - rank), *(estrides or [1] * rank), *[1] * (5 - rank), offset]
    return np.array(w, np.uint64)


def run(module, case, **inputs):
    return module.run_host({"case": case.encode(), **inputs})


# ---------------------------------------------------------------------------
# mbarrier, setmaxnreg


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
def test_mbarrier_phases(sm90, schedule):
    r = sm90.run_host({"case": b"simple", "kernel": b"mbarrier_phases"}, schedule=schedule)
    out = np.frombuffer(r.outputs["out"], np.float32).reshape(3, 64)
    expected = 100 * np.arange(3)[:, None] + (63 - np.arange(64))[None, :]
    np.testing.assert_array_equal(out, expected)


def test_a_missing_arrive_is_a_deadlock_report_naming_the_barrier(sm90):
    with pytest.raises(EmuKernelError) as e:
        sm90.run_host({"case": b"simple", "kernel": b"mbarrier_missing_arrive"})
    message = str(e.value)
    assert "deadlock in block (0,0,0)" in message
    assert "threads 64-127: wait at mbarrier.try_wait.parity (mbarrier at shared address 0x" in message
    assert "phase 0 (parity 0) incomplete: 1 of 64 arrivals missing" in message


def test_setmaxnreg_roles(sm90):
    r = sm90.run_host({"case": b"simple", "kernel": b"setmaxnreg_roles"})
    np.testing.assert_array_equal(np.frombuffer(r.outputs["out"], np.int32), np.arange(384))


# ---------------------------------------------------------------------------
# Tensor maps: the emulated cuTensorMapEncodeTiled checks what the driver documents.

ENCODE_CASES = {
    "ok": ({"dtype": BF16, "dims": [64, 32], "box": [64, 16], "swizzle_code": 3}, CUDA_SUCCESS),
    "ok_3d": ({"dtype": np.float32, "dims": [8, 4, 4], "box": [8, 4, 2]}, CUDA_SUCCESS),
    "misaligned_address": ({"dtype": BF16, "dims": [64, 32], "box": [64, 16], "offset": 8}, CUDA_ERROR_INVALID_VALUE),
    "stride_not_multiple_of_16": ({"dtype": BF16, "dims": [60, 32], "box": [16, 16], "strides": [120]},
                                  CUDA_ERROR_INVALID_VALUE),
    "box_over_256": ({"dtype": np.uint8, "dims": [512, 4], "box": [16, 257]}, CUDA_ERROR_INVALID_VALUE),
    "inner_box_not_16_bytes": ({"dtype": BF16, "dims": [64, 32], "box": [4, 16]}, CUDA_ERROR_INVALID_VALUE),
    "inner_box_over_swizzle_span": ({"dtype": BF16, "dims": [64, 32], "box": [32, 16], "swizzle_code": 1},
                                    CUDA_ERROR_INVALID_VALUE),
    "rank_6": ({"dtype": np.float32, "dims": [4] * 6, "box": [4] * 6}, CUDA_ERROR_INVALID_VALUE),
    "element_stride_9": ({"dtype": np.float32, "dims": [8, 8], "box": [8, 8], "estrides": [1, 9]}, CUDA_ERROR_INVALID_VALUE),
    "not_modelled_element_stride": ({"dtype": np.float32, "dims": [8, 8], "box": [8, 8], "estrides": [1, 2]},
                                    CUDA_ERROR_NOT_SUPPORTED),
}


@pytest.mark.parametrize("name", list(ENCODE_CASES))
def test_tensor_map_encode_checks_like_the_driver(sm90, name):
    kwargs, expected = ENCODE_CASES[name]
    if name == "rank_6":
        # map_words holds 5 dimensions: build the rank-6 request by hand.
        words = map_words(np.float32, [4] * 5, [4] * 5)
        words[1] = 6
    else:
        words = map_words(**kwargs)
    r = run(sm90, "encode", map=words)
    assert int(np.frombuffer(r.outputs["result"], np.int32)[0]) == expected
    if expected != CUDA_SUCCESS:
        assert "cuTensorMapEncodeTiled: " in r.log


# ---------------------------------------------------------------------------
# TMA


def expected_box(g: np.ndarray, coords, box) -> np.ndarray:
    """The box at `coords` (innermost first) of `g` (outermost first), zeros out of bounds."""
    out = np.zeros(tuple(reversed(box)), g.dtype)
    idx = np.indices(out.shape)
    src = [idx[len(box) - 1 - d] + coords[d] for d in range(len(box))]  # per map dimension
    inside = np.ones(out.shape, bool)
    for d, s in enumerate(src):
        inside &= (s >= 0) & (s < g.shape[len(box) - 1 - d])
    gathered = g[tuple(np.clip(src[len(box) - 1 - a], 0, g.shape[a] - 1) for a in range(len(box)))]
    out[inside] = gathered[inside]
    return out


def unswizzle(raw: bytes, shape, dtype, span: int) -> np.ndarray:
    esize = np.dtype(dtype).itemsize
    n = int(np.prod(shape))
    offs = swizzle(np.arange(n) * esize, span)
    data = np.frombuffer(raw, np.uint8)
    elems = data[offs[:, None] + np.arange(esize)[None, :]]
    return elems.reshape(-1).view(dtype).reshape(shape)


@pytest.mark.parametrize("swizzle_code", [0, 1, 2, 3])
@pytest.mark.parametrize("where", ["inside", "ragged"])
def test_tma_load_2d_honours_box_swizzle_and_oob_fill(sm90, swizzle_code, where):
    rng = np.random.default_rng(swizzle_code)
    g = rng.standard_normal((50, 100)).astype(BF16)  # 50 rows of 100 (a row stride of 200 bytes + 8 padding)
    padded = np.zeros((50, 104), BF16)
    padded[:, :100] = g
    inner = {0: 64, 1: 16, 2: 32, 3: 64}[swizzle_code]
    box = [inner, 24]
    coords = [8, 16] if where == "inside" else [100 - inner // 2, 40]
    words = map_words(BF16, [100, 50], box, swizzle_code, strides=[208])
    nbytes = inner * 24 * 2
    r = run(sm90, "tma_load", map=words, coords=np.array([*coords, 0, 2, nbytes], np.int32), **{"global": padded})
    got = unswizzle(r.outputs["smem"], (24, inner), BF16, SPAN[swizzle_code])
    np.testing.assert_array_equal(got.view(np.uint16), expected_box(g, coords, box).view(np.uint16))


def test_tma_load_3d(sm90):
    g = np.arange(4 * 10 * 32, dtype=np.float32).reshape(4, 10, 32)
    box, coords = [8, 4, 2], [28, -2, 3]
    r = run(sm90, "tma_load", map=map_words(np.float32, [32, 10, 4], box),
            coords=np.array([*coords, 3, 8 * 4 * 2 * 4], np.int32), **{"global": g})
    got = np.frombuffer(r.outputs["smem"], np.float32).reshape(2, 4, 8)
    np.testing.assert_array_equal(got, expected_box(g, coords, box))


@pytest.mark.parametrize("rank", [2, 3])
def test_tma_store_writes_the_box_and_skips_out_of_bounds(sm90, rank):
    dims = [40, 12] if rank == 2 else [40, 6, 3]
    box = [16, 8] if rank == 2 else [16, 4, 2]
    coords = [32, 8] if rank == 2 else [32, 4, 2]
    initial = -np.ones(tuple(reversed(dims)), np.float32)
    tile = np.arange(np.prod(box), dtype=np.float32).reshape(tuple(reversed(box))) + 1000
    r = run(sm90, "tma_store", map=map_words(np.float32, dims, box),
            coords=np.array([*coords, *[0] * (3 - rank), rank, tile.nbytes, 0], np.int32),
            smem=tile, **{"global": initial})
    got = np.frombuffer(r.outputs["global"], np.float32).reshape(initial.shape)
    expected = initial.copy()
    sl = tuple(slice(c, min(c + b, d)) for c, b, d in zip(reversed(coords), reversed(box), reversed(dims), strict=True))
    expected[sl] = tile[tuple(slice(0, s.stop - s.start) for s in sl)]
    np.testing.assert_array_equal(got, expected)


def test_tma_store_without_proxy_fence_is_reported(sm90):
    with pytest.raises(EmuKernelError, match=r"missing fence.proxy.async: a TMA store reads shared memory"):
        run(sm90, "tma_store", map=map_words(np.float32, [16, 8], [16, 8]),
            coords=np.array([0, 0, 0, 2, 512, 1], np.int32), smem=np.ones(128, np.float32),
            **{"global": np.zeros(128, np.float32)})


# ---------------------------------------------------------------------------
# wgmma: operand images in shared memory per the PTX ISA canonical layouts.


def operand_offsets(rows: int, k: int, mn_major: bool, span: int, eb: int, lbo: int, sbo: int) -> np.ndarray:
    """Byte offset of element (mn, k) of an operand (the PTX ISA table of
    canonical layouts, "((8,m),(T,2k)):((1T,SBO),(1,LBO))" and the others,
    in bytes; T = 16 / eb), then Swizzle<B,4,3>."""
    mn, kk = np.meshgrid(np.arange(rows), np.arange(k), indexing="ij")
    t = 16 // eb
    if not mn_major:
        if span == 0:
            off = (mn % 8) * 16 + (mn // 8) * sbo + (kk // t) * lbo + (kk % t) * eb
        else:
            off = (mn % 8) * span + (mn // 8) * sbo + kk * eb
    elif span == 0:
        off = (mn % t) * eb + (mn // t) * sbo + (kk % 8) * 16 + (kk // 8) * lbo
    else:
        w = span // 16
        off = (mn % t) * eb + ((mn // t) % w) * 16 + (mn // (t * w)) * lbo + (kk % 8) * span + (kk // 8) * sbo
    return swizzle(off, span)


def strides_for(rows: int, k: int, mn_major: bool, span: int, eb: int) -> tuple[int, int]:
    """A compact (LBO, SBO) for an operand of `rows` x `k`."""
    t = 16 // eb
    if not mn_major:
        return (128, 256) if span == 0 else (16, 8 * span)
    if span == 0:
        return (rows // t) * 128, 128
    return 8 * span, (rows // (t * span // 16)) * 8 * span


def image(values: np.ndarray, mn_major: bool, span: int) -> tuple[np.ndarray, int]:
    rows, k = values.shape
    eb = values.dtype.itemsize
    lbo, sbo = strides_for(rows, k, mn_major, span, eb)
    offs = operand_offsets(rows, k, mn_major, span, eb, lbo, sbo)
    size = (int(offs.max()) + eb + 1023) // 1024 * 1024
    img = np.zeros(size, np.uint8)
    raw = values.view(np.uint8).reshape(rows, k, eb)
    for b in range(eb):
        img[offs + b] = raw[:, :, b]
    packed = lbo | (sbo << 20) | (DESC_MODE[span] << 40) | (int(mn_major) << 44)
    return img, packed


def fragment_coords(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(m, n) of accumulator value i of warpgroup thread t, from the PTX ISA
    figure "WGMMA .m64nNk16 register fragment layout for accumulator matrix
    D": warp w holds rows 16w..16w+15; lane l holds rows l/4 and l/4 + 8 and,
    in each 8-column block j, columns 8j + 2(l%4) and 8j + 2(l%4) + 1, as the
    registers d[4j], d[4j+1] (upper row) and d[4j+2], d[4j+3] (lower row)."""
    t, i = np.meshgrid(np.arange(128), np.arange(n // 2), indexing="ij")
    warp, lane = t // 32, t % 32
    row = 16 * warp + lane // 4 + 8 * ((i % 4) // 2)
    col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
    return row, col


def a_register_fragment(a: np.ndarray) -> np.ndarray:
    """The A fragment of wgmma .m64nNk16 (PTX ISA figure "WGMMA .m64nNk16
    register fragment layout for matrix A"): lane l of warp w holds rows
    16w + l/4 (a0, a1, a4, a5) and 16w + l/4 + 8 (a2, a3, a6, a7), columns
    2(l%4) + {0, 1} (a0-a3) and 8 + 2(l%4) + {0, 1} (a4-a7)."""
    regs = np.zeros((128, 8), np.uint16)
    bits = a.view(np.uint16)
    for t in range(128):
        w, lane = divmod(t, 32)
        for j in range(8):
            regs[t, j] = bits[16 * w + lane // 4 + 8 * ((j // 2) % 2), 2 * (lane % 4) + j % 2 + 8 * (j // 4)]
    return regs.view(np.uint32)


KINDS = {"bf16": (0, BF16, 16), "f16": (1, F16, 16), "bf16_rs": (2, BF16, 16), "e4m3": (3, E4M3, 32),
         "e5m2": (4, E5M2, 32), "f16_rs": (5, F16, 16)}

WGMMA_CASES = [
    # (kind, n, a_mn_major, b_mn_major, swizzle bytes, accumulate)
    *[("bf16", 64, False, False, s, True) for s in (0, 32, 64, 128)],
    *[("bf16", 64, True, True, s, False) for s in (0, 32, 64, 128)],
    ("bf16", 128, True, False, 128, True),
    ("bf16", 256, False, True, 64, True),
    ("bf16", 8, False, False, 0, True),
    ("f16", 128, False, False, 128, True),
    ("bf16_rs", 64, False, False, 128, True),
    ("bf16_rs", 128, False, True, 32, False),
    ("f16_rs", 64, False, False, 0, True),
    *[("e4m3", 64, False, False, s, True) for s in (0, 32, 128)],
    ("e5m2", 128, False, False, 64, True),
    ("e4m3", 256, False, False, 128, False),
]


@pytest.mark.parametrize("case", WGMMA_CASES, ids=lambda c: "-".join(map(str, c)))
def test_wgmma_matches_numpy(sm90, case):
    kind, n, a_mn, b_mn, span, accumulate = case
    code, dtype, k = KINDS[kind]
    rng = np.random.default_rng(n + span)
    a = rng.integers(-4, 5, (64, k)).astype(np.float32).astype(dtype)
    b = rng.integers(-4, 5, (n, k)).astype(np.float32).astype(dtype)
    a_img, a_packed = image(a, a_mn, span)
    b_img, b_packed = image(b, b_mn, span)
    regs = a_register_fragment(a) if kind.endswith("_rs") else np.zeros((128, 4), np.uint32)
    params = np.array([n, code, int(accumulate), a_packed, b_packed], np.uint64)
    r = run(sm90, "wgmma", params=params, a=a_img, b=b_img, a_regs=regs)
    d = np.frombuffer(r.outputs["d"], np.float32).reshape(128, n // 2)
    row, col = fragment_coords(n)
    product = a.astype(np.float64) @ b.astype(np.float64).T
    c = (np.arange(128) % 7 - 3)[:, None] * np.ones((1, n // 2)) if accumulate else 0.0
    np.testing.assert_allclose(d, product[row, col] + c, rtol=0, atol=1e-6)


def test_reading_accumulators_before_wait_group_is_reported(sm90):
    with pytest.raises(EmuKernelError, match="an accumulator was read before wgmma.wait_group retired its wgmma"):
        sm90.run_host({"case": b"simple", "kernel": b"wgmma_early_read"})


RS_TILES = 3  # kRsTiles of the kernel wgmma_rs_reuse


def run_rs_reuse(sm90, mode: int, schedule: str = "run-ahead"):
    """wgmma_rs_reuse: D (64 x 64) = A (64 x 48) * B^T (B: 64 x 48), bf16, A from
    registers one K tile of 16 at a time, the fragment registers reused as
    `mode` says (see the kernel). Returns (d per thread, the NumPy product)."""
    rng = np.random.default_rng(40 + mode)
    a = rng.integers(-4, 5, (64, 16 * RS_TILES)).astype(np.float32).astype(BF16)
    b = rng.integers(-4, 5, (64, 16 * RS_TILES)).astype(np.float32).astype(BF16)
    images = [image(np.ascontiguousarray(b[:, 16 * kt:16 * (kt + 1)]), False, 0) for kt in range(RS_TILES)]
    assert len({packed for _, packed in images}) == 1
    regs = np.stack([a_register_fragment(np.ascontiguousarray(a[:, 16 * kt:16 * (kt + 1)]))
                     for kt in range(RS_TILES)])
    params = np.array([mode, images[0][1]], np.uint64)
    r = sm90.run_host({"case": b"wgmma_rs_reuse", "params": params, "b": np.concatenate([i for i, _ in images]),
                       "a_regs": regs}, schedule=schedule)
    assert r.status == 0, r.log
    d = np.frombuffer(r.outputs["d"], np.float32).reshape(128, 32)
    return d, a.astype(np.float64) @ b.astype(np.float64).T


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
@pytest.mark.parametrize("mode", [0, 1], ids=["double_buffered", "rebuilt_after_wait"])
def test_wgmma_a_registers_reused_only_after_retiring_match_numpy(sm90, mode, schedule):
    d, product = run_rs_reuse(sm90, mode, schedule)
    row, col = fragment_coords(64)
    np.testing.assert_allclose(d, product[row, col], rtol=0, atol=1e-6)


A_REGS_OVERWRITTEN = (r"the A fragment registers of a wgmma.mma_async \(A in registers\) were overwritten before "
                      r"wgmma.wait_group retired it \(thread \d+, warpgroup 0, commit group 0: a\[\d\] was "
                      r"0x[0-9a-f]{8} at issue, 0x[0-9a-f]{8} at %s\): build the next fragment in other registers, "
                      r"or wait first")


@pytest.mark.parametrize(("mode", "seen_at"), [(2, "the next wgmma.fence"), (3, "wgmma.wait_group")],
                         ids=["next_tile_into_the_same_array", "overwritten_before_wait"])
def test_overwriting_wgmma_a_registers_before_wait_group_is_reported(sm90, mode, seen_at):
    with pytest.raises(EmuKernelError, match=A_REGS_OVERWRITTEN % seen_at):
        run_rs_reuse(sm90, mode)


# ---------------------------------------------------------------------------
# The warp-specialized pipeline and its planted bugs.

GEMM_SHAPE = (160, 96, 200)  # ragged in m, n and k: TMA's OOB fill and clipped stores


def run_gemm(sm90, bug: int, schedule: str = "run-ahead"):
    m, n, k = GEMM_SHAPE
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((n, k)).astype(BF16)
    r = sm90.run_host({"case": b"ws_gemm", "shape": np.array([m, n, k, bug], np.int32), "a": a, "b": b},
                      schedule=schedule)
    assert r.status == 0, r.log
    c = np.frombuffer(r.outputs["c"], np.float32).reshape(m, n)
    return c, a.astype(np.float64) @ b.astype(np.float64).T


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
def test_warp_specialized_pipeline_matches_numpy(sm90, schedule):
    c, ref = run_gemm(sm90, 0, schedule)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


PLANTED = {
    1: r"mbarrier at shared address 0x[0-9a-f]+: phase 0 \(parity 0\) incomplete: 0 of 1 arrivals missing, 1024 "
       r"transaction bytes missing \(expect_tx announced 25600, TMA delivered 24576\)",
    # Which report depends on who runs first: the producer refilling a stage
    # nobody waited for, or a wgmma issued before its data arrived.
    2: r"no thread waited (for it|on that phase)|no thread has waited on that barrier phase|the wgmma was issued "
       r"before the data it reads had arrived",
    3: r"a TMA load overwrites shared memory \[0x[0-9a-f]+, 0x[0-9a-f]+\) that a wgmma.mma_async of thread \d+ "
       r"\(warpgroup [12], commit group \d+\) still reads: the stage was released before wgmma.wait_group",
    4: r"wgmma.mma_async: the A descriptor says 64-byte swizzle, but a TMA load with 128-byte swizzle filled",
    5: r"missing fence.proxy.async: a TMA store reads shared memory",
    6: r"missing fence.mbarrier_init: a TMA load signals the mbarrier at shared address 0x[0-9a-f]+, but thread 0 "
       r"initialised it",
    7: r"phase 0 \(parity 0\) incomplete: 128 of 256 arrivals missing",
    8: r"1024 transaction bytes more than announced \(expect_tx announced 23552, TMA delivered 24576\)",
}
PLANTED_NAMES = {1: "expect_tx_too_many", 2: "no_full_wait", 3: "release_before_wgmma_retired", 4: "wrong_swizzle",
                 5: "no_proxy_fence", 6: "no_mbarrier_init_fence", 7: "missing_empty_arrive", 8: "expect_tx_too_few"}


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
@pytest.mark.parametrize("bug", list(PLANTED), ids=[PLANTED_NAMES[b] for b in PLANTED])
def test_planted_bug_is_caught(sm90, bug, schedule):
    with pytest.raises(EmuKernelError, match=PLANTED[bug]):
        run_gemm(sm90, bug, schedule)


# ---------------------------------------------------------------------------
# nvcc: every primitive assembles for sm_90a, without spills.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
def test_every_sm90_primitive_assembles_without_spills():
    source = (CUDA_SRC / "sm90_primitives.cu").read_text()
    result = nvcc.compile_check(source, "sm_90a", name_for_errors="tests/cuda_src/sm90_primitives.cu")
    assert result.kernels, result.log
    for usage in result.kernels.values():
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
    sass = nvcc.sass_summary(result.cubin)
    gemm = sass["ws_gemm"]
    assert gemm.count("UTMALDG") == 2 and gemm.count("UTMASTG") == 2
    assert gemm.count("HGMMA", "64") > 0 and gemm.count("HMMA") == 0
    assert gemm.count("SYNCS", "PHASECHK") > 0 and gemm.count("USETMAXREG") == 2
    assert sass["tma_load_box"].count("UTMALDG", "2D") == 1 and sass["tma_load_box"].count("UTMALDG", "3D") == 1
    assert sass["tma_store_box"].count("UTMASTG", "3D") == 1 and sass["tma_store_box"].count("FENCE", "ASYNC") == 1
    assert sass["wgmma_n64"].count("QGMMA") == 2  # e4m3 and e5m2
    assert sass["wgmma_n256"].count("HGMMA") > 0
    assert sass["setmaxnreg_roles"].count("USETMAXREG") == 2
    assert sass["mbarrier_phases"].count("SYNCS", "PHASECHK", "TRYWAIT") > 0


@needs_nvcc
def test_wgmma_before_sm_90a_is_a_compile_error():
    source = (CUDA_SRC / "sm90_primitives.cu").read_text()
    with pytest.raises(nvcc.NvccError, match="needs sm_90a"):
        nvcc.compile_check(source, "sm_90", name_for_errors="tests/cuda_src/sm90_primitives.cu")
