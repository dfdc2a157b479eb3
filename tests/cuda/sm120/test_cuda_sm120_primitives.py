"""The block-scaled mma.sync (gg_primitives_sm120.cuh) on the emulator,
against two authorities that are not the emulator:

- NumPy, with the scale selectors as the PTX ISA states them ("Block Scaling
  for mma.sync": SFA of row r from lane 4 * (r % 8) + 2 * thread-id-a + r / 8,
  SFB of column c from lane 4 * c + thread-id-b, byte byte-id of each),
  written out below, on random FP8 operands and random scale bytes in every
  byte of every lane (so a wrong lane or byte changes the result);
- CuTe's SM120 block-scaled traits (cute/atom/mma_traits_sm120.hpp, compiled
  on the host: tests/cuda_src/cute_sm120_mma_oracle.cc): the A, B and C
  fragments and the lanes each scale is read from, observed by running the
  emulator's MMA on scales that name their lane and byte.

W4A8 (e4m3 x e2m1 on the FP8 form) likewise: the packed weights unpacked by
gg::unpack_fp4x4 against NumPy with ml_dtypes' float4_e2m1fn, the fragments
and scale lanes against CuTe's SM120_16x8x32_TN_VS<e4m3, e2m1> traits, the
e2m1 container (bits [5:2]) against what CuTe's fp4_shift_B does to a B
register, and the emulator refusing a container with padding bits set.

Also: the MX scale helpers of gg_scales.cuh (the atom offset against
CUTLASS's Sm1xxBlockScaledConfig, the scale words the body reads) and the
emulator refusing the MMA on a device without it.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC, cutlass_include, layout_table, run_cute_program
from ml_dtypes import float4_e2m1fn, float8_e4m3fn, float8_e5m2

from gemmgen.harness.cuda_emu import EmuError, EmuModule
from gemmgen.reference.blockscale import padded_shape, rows_to_atoms

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TYPES = {"e4m3": float8_e4m3fn, "e5m2": float8_e5m2}
# kernel -> (A type, B type, byte-id-a, thread-id-a, byte-id-b, thread-id-b)
KERNELS = {
    "mx_e4m3_e4m3_0000": ("e4m3", "e4m3", 0, 0, 0, 0),
    "mx_e4m3_e4m3_1132": ("e4m3", "e4m3", 1, 1, 3, 2),
    "mx_e4m3_e4m3_2031": ("e4m3", "e4m3", 2, 0, 3, 1),
    "mx_e4m3_e4m3_3113": ("e4m3", "e4m3", 3, 1, 1, 3),
    "mx_e5m2_e4m3_2101": ("e5m2", "e4m3", 2, 1, 0, 1),
    "mx_e4m3_e5m2_0123": ("e4m3", "e5m2", 0, 1, 2, 3),
    "mx_e5m2_e5m2_3030": ("e5m2", "e5m2", 3, 0, 3, 0),
}


# kernel -> (scales per row: 2 MXFP4 / 4 NVFP4, byte-id-a, thread-id-a, byte-id-b, thread-id-b)
FP4_KERNELS = {
    "fp4_2x_0000": (2, 0, 0, 0, 0),
    "fp4_2x_2123": (2, 2, 1, 2, 3),
    "fp4_2x_0021": (2, 0, 0, 2, 1),
    "fp4_4x_0000": (4, 0, 0, 0, 0),
    "fp4_4x_0102": (4, 0, 1, 0, 2),
}


def ptx_sfa_lane(row: int, tid: int) -> int:
    """PTX ISA: the lane whose scale register holds SFA of row `row`."""
    return 4 * (row % 8) + 2 * tid + row // 8


def ptx_sfb_lane(col: int, tid: int) -> int:
    """PTX ISA: the lane whose scale register holds SFB of column `col`."""
    return 4 * col + tid


def _byte(word: np.ndarray | int, j: int) -> np.ndarray:
    return (np.asarray(word, np.uint64) >> np.uint64(8 * j)) & np.uint64(0xFF)


def _ue8m0(byte: np.ndarray) -> np.ndarray:
    b = np.asarray(byte, np.float64)
    return np.where(b == 255, np.nan, np.exp2(b - 127))


@pytest.fixture(scope="module")
def module() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "sm120_primitives.cu")


def _finite_fp8(rng: np.random.Generator, dtype, shape) -> np.ndarray:
    values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    finite = np.flatnonzero(np.isfinite(values)).astype(np.uint8)
    return rng.choice(finite, size=shape)


def _run(module, kernel, a, b, c, sfa, sfb, arch="sm_120a", schedule="run-ahead") -> np.ndarray:
    (d,) = module.launch(kernel, (1,), (32,), 0,
                         (a, b, c, sfa, sfb, np.full((16, 8), np.nan, np.float32)), (5,),
                         arch=arch, schedule=schedule)
    return d


def _expected(kernel, a, b, c, sfa, sfb) -> tuple[np.ndarray, np.ndarray]:
    ta, tb, ba, ida, bb, idb = KERNELS[kernel]
    a64 = a.view(TYPES[ta]).astype(np.float64)
    b64 = b.view(TYPES[tb]).astype(np.float64)
    sa = _ue8m0([_byte(sfa[ptx_sfa_lane(r, ida)], ba) for r in range(16)])
    sb = _ue8m0([_byte(sfb[ptx_sfb_lane(n, idb)], bb) for n in range(8)])
    exact = (a64 @ b64) * sa[:, None] * sb[None, :]
    bound = 2.0**-20 * (np.abs(a64) @ np.abs(b64) * sa[:, None] * sb[None, :] + np.abs(c))
    return exact + c, bound


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_block_scaled_mma_matches_numpy(module, kernel, schedule):
    rng = np.random.default_rng(abs(hash((kernel, schedule))) % 2**32)
    ta, tb = KERNELS[kernel][:2]
    a = _finite_fp8(rng, TYPES[ta], (16, 32))
    b = _finite_fp8(rng, TYPES[tb], (32, 8))
    c = rng.standard_normal((16, 8)).astype(np.float32)
    # Every byte of every lane a different scale in 2^-20 .. 2^20.
    sfa = rng.integers(107, 148, (32, 4)).astype(np.uint8).view(np.uint32).reshape(32)
    sfb = rng.integers(107, 148, (32, 4)).astype(np.uint8).view(np.uint32).reshape(32)
    d = _run(module, kernel, a, b, c, sfa, sfb, schedule=schedule)
    want, bound = _expected(kernel, a, b, c, sfa, sfb)
    assert np.all(np.abs(d.astype(np.float64) - want) <= bound), (d, want)


def test_nan_scale_byte_only_where_it_is_read(module):
    kernel = "mx_e4m3_e4m3_1132"
    _, _, ba, ida, bb, idb = KERNELS[kernel]
    rng = np.random.default_rng(7)
    a = _finite_fp8(rng, float8_e4m3fn, (16, 32))
    b = _finite_fp8(rng, float8_e4m3fn, (32, 8))
    c = rng.standard_normal((16, 8)).astype(np.float32)
    sfa = np.full((32, 4), 127, np.uint8)
    sfb = np.full((32, 4), 127, np.uint8)
    sfa[ptx_sfa_lane(3, ida), ba] = 255  # row 3's scale: NaN
    sfa[ptx_sfa_lane(5, 1 - ida), ba] = 255  # a byte the selector does not read
    sfb[ptx_sfb_lane(6, idb), (bb + 1) % 4] = 255  # another byte of a read lane
    d = _run(module, kernel, a, b, c, sfa.view(np.uint32).reshape(32), sfb.view(np.uint32).reshape(32))
    nan_rows = sorted(set(np.argwhere(np.isnan(d))[:, 0]))
    assert nan_rows == [3] and np.isnan(d[3]).all()


def test_the_mma_needs_sm_120a_or_sm_121a(module):
    zeros = np.zeros((16, 32), np.uint8)
    args = (zeros, np.zeros((32, 8), np.uint8), np.zeros((16, 8), np.float32),
            np.full(32, 0x7F7F7F7F, np.uint32), np.full(32, 0x7F7F7F7F, np.uint32))
    _run(module, "mx_e4m3_e4m3_0000", *args, arch="sm_121a")
    for arch in ("sm_89", "sm_90a", "sm_120"):
        with pytest.raises(EmuError, match=f"needs sm_120a or sm_121a; the emulated device is {arch}"):
            _run(module, "mx_e4m3_e4m3_0000", *args, arch=arch)


# ---------------------------------------------------------------------------
# The FP4 forms (m16n8k64): MXFP4 (2 ue8m0 scales per row) and NVFP4 (4 ue4m3).

def _fp4_values(nibbles: np.ndarray) -> np.ndarray:
    return nibbles.astype(np.uint8).view(float4_e2m1fn).astype(np.float64)


def _fp4_scales(kernel, sfa, sfb) -> tuple[np.ndarray, np.ndarray]:
    """[16, vec] and [8, vec]: the scale of each row / column's K blocks,
    byte byte-id + v of the lane the PTX ISA names."""
    vec, ba, ida, bb, idb = FP4_KERNELS[kernel]

    def value(byte):
        return (np.asarray(byte, np.uint8).view(float8_e4m3fn).astype(np.float64) if vec == 4
                else _ue8m0(byte))

    sa = np.array([[value(_byte(sfa[ptx_sfa_lane(r, ida)], ba + v)) for v in range(vec)]
                   for r in range(16)])
    sb = np.array([[value(_byte(sfb[ptx_sfb_lane(n, idb)], bb + v)) for v in range(vec)]
                   for n in range(8)])
    return sa, sb


def _run_fp4(module, kernel, a, b, c, sfa, sfb, schedule="run-ahead") -> np.ndarray:
    (d,) = module.launch(kernel, (1,), (32,), 0,
                         (a, b, c, sfa, sfb, np.full((16, 8), np.nan, np.float32)), (5,),
                         arch="sm_120a", schedule=schedule)
    return d


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
@pytest.mark.parametrize("kernel", list(FP4_KERNELS))
def test_fp4_mma_matches_numpy(module, kernel, schedule):
    vec = FP4_KERNELS[kernel][0]
    rng = np.random.default_rng(abs(hash((kernel, schedule))) % 2**32)
    a = rng.integers(0, 16, (16, 64)).astype(np.uint8)
    b = rng.integers(0, 16, (64, 8)).astype(np.uint8)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    if vec == 4:  # ue4m3 bytes: positive normal e4m3 values 2^-6 .. 448
        draw = lambda: rng.integers(0x08, 0x7F, (32, 4)).astype(np.uint8)  # noqa: E731
    else:
        draw = lambda: rng.integers(107, 148, (32, 4)).astype(np.uint8)  # noqa: E731
    sfa, sfb = draw().view(np.uint32).reshape(32), draw().view(np.uint32).reshape(32)
    d = _run_fp4(module, kernel, a, b, c, sfa, sfb, schedule)
    sa, sb = _fp4_scales(kernel, sfa, sfb)
    a64, b64 = _fp4_values(a), _fp4_values(b)
    width = 64 // vec
    want, bound = c.astype(np.float64), 2.0**-20 * np.abs(c.astype(np.float64))
    for v in range(vec):
        ks = slice(v * width, (v + 1) * width)
        s = sa[:, v][:, None] * sb[:, v][None, :]
        want = want + (a64[:, ks] @ b64[ks]) * s
        bound = bound + 2.0**-20 * (np.abs(a64[:, ks]) @ np.abs(b64[ks])) * s
    assert np.all(np.abs(d.astype(np.float64) - want) <= bound), (d, want)


def test_fp4_mma_catches_a_swapped_nibble(module):
    """The nibble order inside a byte matters: swapping the two K elements of
    every packed byte changes the result (element 2i is the low nibble)."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 16, (16, 64)).astype(np.uint8)
    b = rng.integers(0, 16, (64, 8)).astype(np.uint8)
    c = np.zeros((16, 8), np.float32)
    ones = np.full(32, 0x7F7F7F7F, np.uint32)
    d = _run_fp4(module, "fp4_2x_0000", a, b, c, ones, ones)
    swapped = a.reshape(16, 32, 2)[:, :, ::-1].reshape(16, 64)
    want = _fp4_values(a) @ _fp4_values(b)
    assert np.allclose(d, want, rtol=2**-20, atol=0)
    assert not np.allclose(_fp4_values(swapped) @ _fp4_values(b), want)


# ---------------------------------------------------------------------------
# W4A8: e4m3 x e2m1 on the m16n8k32 kind::mxf8f6f4 form, one e2m1 a byte.

# kernel -> (byte-id-a, thread-id-a, byte-id-b, thread-id-b)
W4A8_KERNELS = {"w4a8_0000": (0, 0, 0, 0), "w4a8_1132": (1, 1, 3, 2), "w4a8_3021": (3, 0, 2, 1)}


def _pack_kn(nibbles_kn: np.ndarray) -> np.ndarray:
    """[k][n] e2m1 codes as gemmgen stores the weights: [n][k / 2], K
    element 2i of a row in the low nibble of byte i."""
    nk = nibbles_kn.T.astype(np.uint8)
    return np.ascontiguousarray(nk[:, 0::2] | (nk[:, 1::2] << 4))


def test_unpack_fp4x4_places_each_element_in_bits_5_to_2(module):
    (got,) = module.launch("unpack_fp4x4_all", (1,), (1,), 0, (np.zeros(65536, np.uint32),), (0,))
    x = np.arange(65536, dtype=np.uint32)
    want = sum(((x >> np.uint32(4 * i)) & np.uint32(15)) << np.uint32(8 * i + 2) for i in range(4))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
@pytest.mark.parametrize("kernel", list(W4A8_KERNELS))
def test_w4a8_mma_matches_numpy(module, kernel, schedule):
    ba, ida, bb, idb = W4A8_KERNELS[kernel]
    rng = np.random.default_rng(abs(hash((kernel, schedule, "w4a8"))) % 2**32)
    a = _finite_fp8(rng, float8_e4m3fn, (16, 32))
    b = rng.integers(0, 16, (32, 8)).astype(np.uint8)  # e2m1 codes, [k][n]
    c = rng.standard_normal((16, 8)).astype(np.float32)
    sfa = rng.integers(107, 148, (32, 4)).astype(np.uint8).view(np.uint32).reshape(32)
    sfb = rng.integers(107, 148, (32, 4)).astype(np.uint8).view(np.uint32).reshape(32)
    d = _run(module, kernel, a, _pack_kn(b), c, sfa, sfb, schedule=schedule)
    a64 = a.view(float8_e4m3fn).astype(np.float64)
    b64 = _fp4_values(b)
    sa = _ue8m0([_byte(sfa[ptx_sfa_lane(r, ida)], ba) for r in range(16)])
    sb = _ue8m0([_byte(sfb[ptx_sfb_lane(n, idb)], bb) for n in range(8)])
    want = (a64 @ b64) * sa[:, None] * sb[None, :] + c
    bound = 2.0**-20 * (np.abs(a64) @ np.abs(b64) * sa[:, None] * sb[None, :] + np.abs(c))
    assert np.all(np.abs(d.astype(np.float64) - want) <= bound), (d, want)
    # The nibble order matters: element 2i is the low nibble.
    swapped = b.reshape(16, 2, 8)[:, ::-1].reshape(32, 8)
    assert not np.allclose((a64 @ _fp4_values(swapped)) * sa[:, None] * sb[None, :] + c, want)


def test_w4a8_container_padding_is_refused(module):
    """The e2m1 sits in bits [5:2] of its byte: containers so placed
    multiply; a set padding bit (an unshifted or mis-unpacked nibble) stops
    the emulator."""
    rng = np.random.default_rng(11)
    a = _finite_fp8(rng, float8_e4m3fn, (16, 32))
    codes = rng.integers(0, 16, (32, 8)).astype(np.uint8)
    c = np.zeros((16, 8), np.float32)
    ones = np.full(32, 0x7F7F7F7F, np.uint32)
    d = _run(module, "w4a8_containers", a, codes << 2, c, ones, ones)
    want = a.view(float8_e4m3fn).astype(np.float64) @ _fp4_values(codes)
    assert np.allclose(d, want, rtol=2**-20, atol=0)
    codes[codes == 0] = 1  # every container nonzero: unshifted, bit 0 or 1 is set somewhere
    with pytest.raises(EmuError, match="padding bits set"):
        _run(module, "w4a8_containers", a, codes, c, ones, ones)


def test_w4a8_mma_needs_sm_120a_or_sm_121a(module):
    args = (np.full((16, 32), 0x38, np.uint8), np.full((8, 16), 0x22, np.uint8),
            np.zeros((16, 8), np.float32), np.full(32, 0x7F7F7F7F, np.uint32),
            np.full(32, 0x7F7F7F7F, np.uint32))
    d = _run(module, "w4a8_0000", *args, arch="sm_121a")
    assert (d == 32.0).all()  # 1.0 x 1.0 over k = 32
    for arch in ("sm_89", "sm_100a", "sm_120"):
        with pytest.raises(EmuError, match=f"needs sm_120a or sm_121a; the emulated device is {arch}"):
            _run(module, "w4a8_0000", *args, arch=arch)


# ---------------------------------------------------------------------------
# CuTe's traits.

needs_cute = pytest.mark.skipif(cutlass_include() is None,
                                reason="nvidia-cutlass (CuTe headers) is not installed")


@pytest.fixture(scope="module")
def cute(tmp_path_factory) -> dict[str, dict[tuple[int, int], tuple[int, int]]]:
    """CuTe's (thread, value) -> (row, col) map of each operand."""
    out = run_cute_program("cute_sm120_mma_oracle.cc", tmp_path_factory.mktemp("cute_sm120"))
    records: dict[str, dict[tuple[int, int], tuple[int, int]]] = {}
    for line in out.splitlines():
        name, *fields = line.split()
        if name == "SFVEC":
            assert int(fields[0]) == 32
            continue
        if name == "SHIFTB":  # before, after: B registers through fp4_shift_B
            records["SHIFTB"] = {(i, 0): (int(fields[2 * i]), int(fields[2 * i + 1]))
                                 for i in range(2)}
            continue
        t, v, row, col = (int(f) for f in fields)
        records.setdefault(name, {})[(t, v)] = (row, col)
    return records


@needs_cute
@pytest.mark.parametrize("name, ours", [("A", "a_m16n8k32"), ("B", "b_m16n8k32"), ("C", "c_m16n8")])
def test_operand_fragments_match_cute(cute, name, ours):
    """A, B and C of the block-scaled MMA are the m16n8k32 fragments
    (gg::frag, tabulated by cuda_runtime_cases.layout_table): CuTe's value v
    of thread t is element v of our fragment (register v / 4, byte v % 4 for
    the 8-bit operands). layout_table gives B as (k, n); CuTe's B is (n, k)."""
    table = layout_table(ours)
    for (t, v), (row, col) in cute[name].items():
        got = tuple(int(x) for x in table[t, v])
        want = (col, row) if name == "B" else (row, col)
        assert got == want, (name, t, v, got, want)
    assert len(cute[name]) == table.shape[0] * table.shape[1]


def _cute_scale_rows(records: dict[tuple[int, int], tuple[int, int]], k: int = 32) -> np.ndarray:
    """Thread -> the row (SFA) or column (SFB) its scale is for; every value
    of a thread (one per K element) names the same row, each K once."""
    rows = np.full(32, -1)
    for t in range(32):
        coords = [records[(t, v)] for v in range(k)]
        assert {r for r, _ in coords} == {coords[0][0]} and sorted(c for _, c in coords) == list(range(k))
        rows[t] = coords[0][0]
    return rows


def _observed_lanes(module, kernel: str, side: str) -> dict[int, tuple[int, int]]:
    """Runs the emulator's MMA with scale bytes that name their lane and
    byte (1 + lane + 32 * byte) on one side and 2^0 on the other, A and B all
    ones: D = 32 * scale, so each row (SFA) or column (SFB) of D tells which
    (lane, byte) the MMA read."""
    a = np.full((16, 32), 0x38, np.uint8)  # e4m3 1.0
    b = np.full((32, 8), 0x38 if KERNELS[kernel][1] == "e4m3" else 0x3C, np.uint8)  # 1.0
    a[:] = 0x38 if KERNELS[kernel][0] == "e4m3" else 0x3C
    c = np.zeros((16, 8), np.float32)
    named = (1 + np.arange(32)[:, None] + 32 * np.arange(4)[None, :]).astype(np.uint8)
    one = np.full((32, 4), 127, np.uint8)
    sfa, sfb = (named, one) if side == "SFA" else (one, named)
    d = _run(module, kernel, a, b, c, sfa.view(np.uint32).reshape(32), sfb.view(np.uint32).reshape(32))
    values = d[:, 0] if side == "SFA" else d[0, :]
    out = {}
    for i, x in enumerate(values):
        byte = int(round(np.log2(float(x) / 32.0))) + 127
        out[i] = ((byte - 1) % 32, (byte - 1) // 32)
    return out


@needs_cute
@pytest.mark.parametrize("ours, theirs", [("AW", "A"), ("BW", "B"), ("CW", "C"), ("SFAW", "SFA"),
                                          ("SFBW", "SFB")])
def test_w4a8_traits_are_the_fp8_forms(cute, ours, theirs):
    """CuTe's e4m3 x e2m1 MMA (SM120_16x8x32_TN_VS<e4m3, e2m1, float,
    ue8m0, 32>) has the FP8 form's A, B, C and scale maps value for value,
    which the tests above compare with gg::frag and the emulator: B's e2m1
    elements sit one a byte where the FP8 form's e4m3 do."""
    assert cute[ours] == cute[theirs]


@needs_cute
def test_w4a8_container_matches_cute_fp4_shift(module, cute):
    """CuTe shifts each B register of the e4m3 x e2m1 MMA left by 2 before
    issuing it (fp4_shift_B: ldmatrix's b4x16_p64 leaves the e2m1 in the low
    nibble of each byte, "MMA F8F6F4 expects the four-bit data to be in the
    middle of the eight-bit container"); gg::unpack_fp4x4 puts each element
    where that leaves it."""
    (got,) = module.launch("unpack_fp4x4_all", (1,), (1,), 0, (np.zeros(65536, np.uint32),), (0,))
    for before, after in cute["SHIFTB"].values():
        nibbles = [(before >> (8 * i)) & 0xFF for i in range(4)]
        assert all(n < 16 for n in nibbles)
        packed = sum(n << (4 * i) for i, n in enumerate(nibbles))
        assert int(got[packed]) == after, (hex(before), hex(after), hex(int(got[packed])))


@needs_cute
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_scale_lanes_match_cute(module, cute, kernel):
    """The lanes the emulator reads each scale from, against CuTe: SFA's
    thread layout ((2,2,8)):((8,0,1)) gives lane t row 8 * (t % 2) + t / 4,
    its stride-0 mode (bit 1 of the lane) making lanes t and t ^ 2 copies,
    of which thread-id-a picks one; SFB's ((4,8)):((0,1)) gives lane t
    column t / 4, the four lanes of a quad copies picked by thread-id-b."""
    _, _, ba, ida, bb, idb = KERNELS[kernel]
    sfa_rows, sfb_cols = _cute_scale_rows(cute["SFA"]), _cute_scale_rows(cute["SFB"])
    for t in range(32):  # the copy modes are where CuTe's layouts say
        assert sfa_rows[t] == sfa_rows[t ^ 2] and sfb_cols[t] == sfb_cols[t ^ 1] == sfb_cols[t ^ 3]
    for row, (lane, byte) in _observed_lanes(module, kernel, "SFA").items():
        assert byte == ba and sfa_rows[lane] == row and (lane >> 1) & 1 == ida, (row, lane, byte)
    for col, (lane, byte) in _observed_lanes(module, kernel, "SFB").items():
        assert byte == bb and sfb_cols[lane] == col and lane % 4 == idb, (col, lane, byte)


@needs_cute
@pytest.mark.parametrize("name, ours", [("A64", "a_m16n8k32"), ("B64", "b_m16n8k32"), ("C64", "c_m16n8")])
def test_fp4_fragments_match_cute(cute, name, ours):
    """The FP4 form's fragments: CuTe's value v of thread t (nibble v % 8 of
    register v / 8) is K element 2 * (the byte's K) + v % 2 of byte
    4 * (v / 8) + (v % 8) / 2 of our 8-bit fragment; C is the usual one."""
    table = layout_table(ours)
    for (t, v), (row, col) in cute[name].items():
        if name == "C64":
            assert tuple(int(x) for x in table[t, v]) == (row, col)
            continue
        byte = 4 * (v // 8) + (v % 8) // 2
        r, kbyte = (int(x) for x in table[t, byte])
        if name == "B64":  # layout_table: (k, n); CuTe's B: (n, k)
            kbyte, r = r, kbyte
        assert (r, 2 * kbyte + v % 2) == (row, col), (name, t, v)


@needs_cute
@pytest.mark.parametrize("kernel", list(FP4_KERNELS))
def test_fp4_scale_lanes_and_bytes(module, cute, kernel):
    """Each K block's scale comes from the lane CuTe's SFA / SFB layouts of
    the FP4 form give (the same thread modes as the FP8 form) and from byte
    byte-id + block (CuTe recasts the row's scale bytes, block j in byte j,
    into the register): observed with only block v of B nonzero and scale
    bytes that name their lane and byte."""
    vec, ba, ida, bb, idb = FP4_KERNELS[kernel]
    sfa_rows = _cute_scale_rows(cute["SFA64"], 64)
    sfb_cols = _cute_scale_rows(cute["SFB64"], 64)
    assert (sfa_rows == _cute_scale_rows(cute["SFA"])).all()
    one = 0x38 if vec == 4 else 127  # 1.0 in ue4m3 / ue8m0
    base = 0x40 if vec == 4 else 100  # lane l's code: base + l (distinct, never 1.0)
    width = 64 // vec
    for v in range(vec):
        a = np.full((16, 64), 2, np.uint8)  # e2m1 1.0
        b = np.zeros((64, 8), np.uint8)
        b[v * width:(v + 1) * width] = 2
        for side, byte_id in (("SFA", ba), ("SFB", bb)):
            named = np.full((32, 4), one, np.uint8)
            named[:, byte_id + v] = base + np.arange(32)
            plain = np.full((32, 4), one, np.uint8)
            sfa, sfb = (named, plain) if side == "SFA" else (plain, named)
            d = _run_fp4(module, kernel, a, b, np.zeros((16, 8), np.float32),
                         sfa.view(np.uint32).reshape(32), sfb.view(np.uint32).reshape(32))
            values = d[:, 0] if side == "SFA" else d[0, :]
            codes = (base + np.arange(32)).astype(np.uint8)
            decoded = (codes.view(float8_e4m3fn).astype(np.float64) if vec == 4
                       else np.exp2(codes.astype(np.float64) - 127))
            for i, x in enumerate(values):
                found = np.flatnonzero(decoded == float(x) / width)
                assert found.size == 1, (side, i, x)  # a byte other than byte-id + v reads 1.0
                lane = int(found[0])
                if side == "SFA":
                    assert sfa_rows[lane] == i and (lane >> 1) & 1 == ida, (i, lane)
                else:
                    assert sfb_cols[lane] == i and lane % 4 == idb, (i, lane)


# ---------------------------------------------------------------------------
# The scale helpers the block-scaled body reads with (gg_scales.cuh).

@pytest.mark.parametrize("rows, kblocks", [(128, 4), (200, 7), (384, 12), (1, 1)])
def test_atom_offsets_match_the_reference_atom(module, rows, kblocks):
    """scale_offset<kAtom128x4> places each scale where the reference's
    rows_to_atoms does (itself compared with CUTLASS's
    Sm1xxBlockScaledConfig in tests/reference/test_mx_scale_layout.py)."""
    (got,) = module.launch("atom_offsets", (1,), (1,), 0,
                           (np.int32(rows), np.int32(kblocks), np.full(rows * kblocks, -1, np.int64)), (2,))
    ids = np.arange(rows * kblocks, dtype=np.int64).reshape(rows, kblocks)
    stored = rows_to_atoms(ids, -1).reshape(-1)
    want = np.empty(rows * kblocks, np.int64)
    want[stored[stored >= 0]] = np.flatnonzero(stored >= 0)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("atom", [False, True])
@pytest.mark.parametrize("rows, kblocks", [(130, 6), (33, 4), (5, 1), (128, 9)])
def test_mx_scale_words(module, atom, rows, kblocks):
    """Byte j of the word for (row, kb0) is the scale of K block kb0 + j, or
    127 past the last block and for a row outside the matrix (so zero-filled
    operands stay zeros); NaN bytes (255) where the data has them."""
    rng = np.random.default_rng(rows * 31 + kblocks)
    values = rng.integers(0, 256, (rows, kblocks)).astype(np.uint8)
    values[0, 0] = 255
    stored = rows_to_atoms(values, 255) if atom else values  # padding: NaN bytes
    if atom:
        assert stored.shape == padded_shape(rows, kblocks)
    (words,) = module.launch("mx_scale_words", (1,), (1,), 0,
                             (np.ascontiguousarray(stored).reshape(-1), np.int32(rows), np.int32(kblocks),
                              np.int32(atom), np.zeros((rows + 1) * kblocks, np.uint32)), (4,))
    got = words.view(np.uint8).reshape(rows + 1, kblocks, 4)
    padded = np.concatenate([values, np.full((rows, 4), 127, np.uint8)], axis=1)
    want = np.stack([padded[:, j:j + kblocks] for j in range(4)], axis=-1)
    np.testing.assert_array_equal(got[:rows], want)
    assert (got[rows] == 127).all()
