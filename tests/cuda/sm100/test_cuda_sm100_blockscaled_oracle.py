"""The sm_100 block-scaled tcgen05 layouts against two authorities that are
not the emulator: CuTe (the nvidia-cutlass wheel, compiled on the host by
g++: tests/cuda_src/cute_blockscaled_oracle.cc) and the PTX ISA's tables
(restated in tests/sm100_ptx_tables.py), entry by entry:

- the block-scaled instruction descriptors CuTe builds
  (UMMA::make_instr_desc_block_scaled with the scale ids of
  make_runtime_instr_desc_block_scaled), for kind::mxf8f6f4 (e4m3, e5m2,
  e2m1; both majors of the 8-bit types), kind::mxf4 and kind::mxf4nvf4 (ue4m3
  and ue8m0), every scale id the vector size allows, four N: against Tables
  43 / 44, against gg::umma::instr_desc_block_scaled, and through the
  emulator's decoder and check;
- the MMA_Traits of SM100_MMA_MXF8F6F4_SS / SM100_MMA_MXF4_SS: K, the
  scale vector size, the traits' descriptor;
- the tcgen05.cp atom SM100_UTCCP_4x32dp128bit_1cta (.32x128b.warpx4): every
  (row, byte, lane quarter) of its source against the emulator's copy and
  the PTX ISA's data movement shape;
- the scale-factor TMEM fragments of the traits (UMMA::tmem_sf_frg, SFA and
  SFB, one or several MMAs along K, every lane-quarter replica): each scale's
  cell against the emulator's reading rule and the PTX ISA's scale-factor
  layouts.
"""

from __future__ import annotations

import ctypes

import pytest
from cuda_runtime_cases import cutlass_include, run_cute_program
from sm100_ptx_tables import (
    BS_IDS,
    BS_K,
    BS_VEC,
    bs_idesc_problems,
    decode_bs_idesc,
    encode_bs_idesc,
    ptx_cp_cell,
    ptx_sf_cell,
)

from gemmgen.harness.cuda_emu import EmuModule

needs_cute = pytest.mark.skipif(cutlass_include() is None,
                                reason="nvidia-cutlass (CuTe headers) is not installed")
KIND = {"mxf8f6f4": 0, "mxf4": 1, "mxf4nvf4": 2}  # gg::umma::BsKind, the emulator's kind
BSTYPE = {"e4m3": 0, "e5m2": 1, "e2m1": 2}  # gg::umma::BsType
SCALE = {"ue4m3": 0, "ue8m0": 1}  # gg::umma::ScaleFormat

_ENCODERS = r"""
#include "gg_runtime.cuh"
#include "gg_primitives_sm100.cuh"

#define ORACLE_API extern "C" __attribute__((visibility("default")))
ORACLE_API unsigned oracle_bs_idesc(int kind, int a, int b, int sf, int m, int n, unsigned sfa_id,
                                    unsigned sfb_id, int a_mn, int b_mn) {
  using namespace gg::umma;
  return instr_desc_block_scaled(static_cast<BsKind>(kind), static_cast<BsType>(a),
                                 static_cast<BsType>(b), static_cast<ScaleFormat>(sf), m, n, sfa_id,
                                 sfb_id, a_mn ? Major::MN : Major::K, b_mn ? Major::MN : Major::K);
}
ORACLE_API int oracle_mma_k(int kind) { return gg::umma::mma_k(static_cast<gg::umma::BsKind>(kind)); }
ORACLE_API int oracle_scale_vec(int kind) {
  return gg::umma::scale_vec(static_cast<gg::umma::BsKind>(kind));
}
ORACLE_API unsigned oracle_sf_cell(unsigned row, unsigned quarter) {
  return gg::umma::sf_lane(row, quarter) << 16 | gg::umma::sf_column(row);
}
extern "C" __global__ void noop() {}
"""


class Emulator:
    """The emulator's exported block-scaled decoders and gg::umma's encoders."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(str(EmuModule(_ENCODERS, "bs_oracle.cu", memcheck=False).library))
        c = ctypes
        self._decode = lib.gg_emu_sm100_bs_idesc_decode
        self._decode.restype = None
        self._decode.argtypes = (c.c_uint, c.c_int, c.POINTER(c.c_int))
        self._check = lib.gg_emu_sm100_bs_idesc_check
        self._check.argtypes = (c.c_uint, c.c_int, c.c_char_p, c.c_int)
        self._sf_cell = lib.gg_emu_sm100_sf_cell
        self._sf_cell.argtypes = (c.c_int,) * 5 + (c.POINTER(c.c_int),) * 3
        self._cp_cell = lib.gg_emu_sm100_cp_cell
        self._cp_cell.argtypes = (c.c_int,) * 3 + (c.POINTER(c.c_int),) * 3
        self.idesc = lib.oracle_bs_idesc
        self.idesc.restype = c.c_uint
        self.idesc.argtypes = (c.c_int,) * 6 + (c.c_uint, c.c_uint, c.c_int, c.c_int)
        self.mma_k, self.scale_vec = lib.oracle_mma_k, lib.oracle_scale_vec
        self.sf_cell_enc = lib.oracle_sf_cell
        self.sf_cell_enc.restype = c.c_uint
        self.sf_cell_enc.argtypes = (c.c_uint, c.c_uint)

    def fields(self, word: int, kind: str) -> list[int]:
        out = (ctypes.c_int * 14)()
        self._decode(word, KIND[kind], out)
        return list(out)

    def check(self, word: int, kind: str) -> str:
        why = ctypes.create_string_buffer(512)
        return why.value.decode() if self._check(word, KIND[kind], why, 512) else ""

    def sf_cell(self, row: int, block: int, sf_id: int, vec: int, quarter: int):
        a, b, c = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        rc = self._sf_cell(row, block, sf_id, vec, quarter, ctypes.byref(a), ctypes.byref(b), ctypes.byref(c))
        return None if rc else (a.value, b.value, c.value)

    def cp_cell(self, row: int, byte: int, quarter: int):
        a, b, c = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        rc = self._cp_cell(row, byte, quarter, ctypes.byref(a), ctypes.byref(b), ctypes.byref(c))
        return None if rc else (a.value, b.value, c.value)


@pytest.fixture(scope="module")
def emu() -> Emulator:
    return Emulator()


@pytest.fixture(scope="module")
def cute(tmp_path_factory) -> dict[str, list[list[str]]]:
    records: dict[str, list[list[str]]] = {}
    out = run_cute_program("cute_blockscaled_oracle.cc", tmp_path_factory.mktemp("bs"))
    for line in out.splitlines():
        fields = line.split()
        records.setdefault(fields[0], []).append(fields[1:])
    return records


def _bsidescs(cute):
    for kind, a, b, sf, n, am, bm, sfa, sfb, raw, *view in cute["bsidesc"]:
        yield kind, a, b, sf, int(n), am == "MN", bm == "MN", int(sfa), int(sfb), int(raw), list(map(int, view))


@needs_cute
def test_block_scaled_descriptors_match_the_ptx_isa(cute):
    """Tables 43 / 44, field by field (and Table 50 for an 8-bit N-major B,
    which CuTe's builder does not check); CuTe's bit-field view the same (its
    m_dim_ field spans bits 24-28 as M >> 4: for M = 128 it is 8, bits 24-26
    zero and bits 27-28 = 1 = M >> 7, Table 43's field)."""
    rows = list(_bsidescs(cute))
    # 4 N x (8 mxf8f6f4 type / major pairs x 16 id pairs + mxf4 x 4 + 2 mxf4nvf4 x 1)
    assert len(rows) == 4 * (8 * 16 + 4 + 2)
    for kind, a, b, sf, n, amn, bmn, sfa, sfb, raw, view in rows:
        want = encode_bs_idesc(kind, a, b, sf, 128, n, amn, bmn, sfa, sfb)
        assert raw == want, (kind, a, b, sf, n, hex(raw), hex(want))
        # make_instr_desc_block_scaled encodes without checking the shape: an
        # 8-bit N-major B at N = 8 is Table 50's (N a multiple of 16).
        expect = [f"N = {n}"] if bmn and n % 16 else []
        assert bs_idesc_problems(raw, kind) == expect, (kind, a, b, sf, n, sfa, sfb)
        f = decode_bs_idesc(raw)
        af, bf, sfmt, mdim, ndim, amj, bmj, asf, bsf, ksize = view
        assert (af, bf, sfmt, ndim, amj, bmj, asf, bsf) == (
            f["atype"], f["btype"], f["scale_type"], f["n"], f["transpose_a"], f["transpose_b"], f["sfa_id"],
            f["sfb_id"])
        assert mdim == 8 and f["m"] == 1 and f["reserved_24"] == 0 and ksize == f["bit_31"] == 0


@needs_cute
def test_block_scaled_traits_match_the_ptx_isa(cute):
    """K of one MMA (Table 39) and the scale vector (Table 54: one scale per
    32 elements for MX, 16 for NVFP4), and the traits' descriptor (ids 0)."""
    rows = cute["traits"]
    assert len(rows) == 4
    for kind, a, b, sf, vs, n, k, sfvec, raw in rows:
        assert int(k) == BS_K[kind] and int(sfvec) == int(vs) == BS_K[kind] // BS_VEC[kind]
        assert int(raw) == encode_bs_idesc(kind, a, b, sf, 128, int(n), False, False)


@needs_cute
def test_gg_block_scaled_encoder_matches_cute(cute, emu):
    """gg::umma::instr_desc_block_scaled builds CuTe's word for every record;
    mma_k and scale_vec are the traits' K and K / SFVecSize."""
    for kind, a, b, sf, n, amn, bmn, sfa, sfb, raw, _ in _bsidescs(cute):
        got = emu.idesc(KIND[kind], BSTYPE[a], BSTYPE[b], SCALE[sf], 128, n, sfa, sfb, int(amn), int(bmn))
        assert got == raw, (kind, a, b, sf, n, sfa, sfb, hex(got), hex(raw))
    for kind, _a, _b, _sf, vs, _n, k, _sfvec, _raw in cute["traits"]:
        if kind != "mxf4nvf4" or vs == "16":
            assert emu.mma_k(KIND[kind]) == int(k) and emu.scale_vec(KIND[kind]) == int(k) // int(vs)


@needs_cute
def test_emulator_decodes_and_runs_cute_block_scaled_descriptors(cute, emu):
    for kind, _a, _b, _sf, n, amn, bmn, sfa, sfb, raw, _ in _bsidescs(cute):
        f = decode_bs_idesc(raw)
        got = emu.fields(raw, kind)
        btype = f["btype"] & (7 if kind == "mxf8f6f4" else 3)
        assert got == [sfb, f["atype"], btype, 0, 0, int(amn), int(bmn), n, f["scale_type"], 128, sfa, 0, 0,
                       0], (kind, hex(raw))
        why = "" if not (bmn and n % 16) else f"N = {n} (bits 17-22 = {n >> 3}) is not a multiple of 16"
        assert emu.check(raw, kind).startswith(why), (kind, hex(raw), emu.check(raw, kind))
        assert (emu.check(raw, kind) == "") == (why == "")


def test_emulator_rejects_what_the_ptx_isa_forbids(emu):
    """Each encoding Tables 39 / 43 / 44 / 54 / 55 forbid (or the emulator
    does not model) is refused with its field named; the PTX restatement
    refuses the same words."""
    good = {k: encode_bs_idesc(k, "e4m3" if k == "mxf8f6f4" else "e2m1", "e4m3" if k == "mxf8f6f4" else "e2m1",
                               "ue4m3" if k == "mxf4nvf4" else "ue8m0", 128, 64, False, False)
            for k in KIND}
    for kind, word in good.items():
        assert emu.check(word, kind) == "" and bs_idesc_problems(word, kind) == []
    cases = [
        ("mxf8f6f4", good["mxf8f6f4"] ^ (1 << 23), "kind::mxf8f6f4 takes ue8m0 scales"),
        ("mxf4", good["mxf4"] ^ (1 << 23), "kind::mxf4 takes ue8m0 scales"),
        ("mxf4", good["mxf4"] | (1 << 29), "scale factor A id (bits 29-30) is 1"),
        ("mxf4nvf4", good["mxf4nvf4"] | (2 << 4), "scale factor B id (bits 4-5) is 2: scale_vec::4X"),
        ("mxf4", good["mxf4"] | (1 << 15), "K-major only"),
        ("mxf8f6f4", encode_bs_idesc("mxf8f6f4", "e2m1", "e4m3", "ue8m0", 128, 64, True, False),
         "4-bit operands are K-major only"),
        ("mxf8f6f4", good["mxf8f6f4"] + (1 << 27), "M = 256 (bits 27-28 = 2) needs cta_group::2"),
        ("mxf8f6f4", good["mxf8f6f4"] - (1 << 27), "M (bits 27-28 = 0) is not 128"),
        ("mxf8f6f4", good["mxf8f6f4"] | (1 << 26), "reserved bits are set"),  # CuTe's m_dim_ for M = 64
        ("mxf8f6f4", good["mxf8f6f4"] | (1 << 31), "reserved bits are set"),
        ("mxf4nvf4", good["mxf4nvf4"] | (1 << 31), "K = 96"),
        ("mxf4", good["mxf4"] | (1 << 12), "reserved bits are set"),
        ("mxf8f6f4", good["mxf8f6f4"] | (1 << 2), "sparsity"),
        ("mxf8f6f4", (good["mxf8f6f4"] & ~(0x3F << 17)), "N = 0"),
        ("mxf8f6f4", encode_bs_idesc("mxf8f6f4", "e4m3", "e4m3", "ue8m0", 128, 24, False, True),
         "not a multiple of 16"),
        ("mxf8f6f4", encode_bs_idesc("mxf8f6f4", "e2m3", "e4m3", "ue8m0", 128, 64, False, False),
         "e2m3 operands are not modelled"),
        ("mxf4", good["mxf4"] & ~(7 << 7) | (5 << 7), "kind::mxf4 takes e2m1, code 1"),
    ]
    for kind, word, why in cases:
        assert why in emu.check(word, kind), (kind, hex(word), emu.check(word, kind))
        if "not modelled" not in why:
            assert bs_idesc_problems(word, kind), (kind, hex(word))


@needs_cute
def test_tcgen05_cp_atom_matches_the_emulator_and_the_ptx_isa(cute, emu):
    """SM100_UTCCP_4x32dp128bit_1cta: source bit (row, bit) is logical bit
    row + 32 bit (SrcLayout, the broadcast copy Q with stride 0), which
    ValID puts in lane row + 32 Q, column bit / 32 (TMEM bit addresses:
    lane * 2^21 + column * 32 + bit)."""
    rows = cute["utccp"]
    assert len(rows) == 32 * 16 * 4
    for r, bit, q, src, dst in (map(int, x) for x in rows):
        assert src == r + 32 * bit
        got = (dst >> 21, (dst & ((1 << 21) - 1)) >> 5, dst & 31)
        assert got == ptx_cp_cell(r, bit, q), (r, bit, q, got)
        lane, column, byte = emu.cp_cell(r, bit // 8, q)
        assert (lane, column, 8 * byte) == got, (r, bit, q)
    assert emu.cp_cell(32, 0, 0) is None and emu.cp_cell(0, 16, 0) is None


@needs_cute
def test_scale_factor_fragments_match_the_emulator_and_the_ptx_isa(cute, emu):
    """UMMA::tmem_sf_frg (SFA, SFB; one MMA and several along K): the cell
    of each scale of each MMA, in each lane-quarter replica, is the one the
    emulator's block-scaled MMA reads (gg_emu_sm100_sf_cell) and the PTX
    ISA's layout names, at the MMA's scale address (the column and scale id
    of its first scale: CuTe's byte offset of row 0, block 0); every id is
    one the vector size allows; the VS elements of a block share one byte."""
    rows = cute["sf"]
    groups: dict[tuple, list] = {}
    for which, kind, vs, nrows, numk, dp, r, k, j, q, off, same in rows:
        groups.setdefault((which, kind, int(vs), int(nrows), int(numk), int(dp)), []).append(
            tuple(map(int, (r, k, j, q, off, same))))
    assert len(groups) == 7
    for (which, kind, vs, nrows, numk, dp), entries in groups.items():
        vec = BS_VEC[kind]
        assert vs * vec == BS_K[kind]
        assert len(entries) == nrows * numk * vec * 4
        base = {k: off for r, k, j, q, off, _ in entries if (r, j, q) == (0, 0, 0)}
        for r, k, j, q, off, same in entries:
            assert same == 1
            lane, byte = divmod(off, dp)
            col0, sf_id = divmod(base[k] % dp, 4)
            assert base[k] // dp == 0 and sf_id in BS_IDS[vec], (which, kind, k, sf_id)
            want = ptx_sf_cell(r, j, sf_id, q)
            assert (lane, byte // 4 - col0, byte % 4) == want, (which, kind, r, k, j, q)
            assert emu.sf_cell(r, j, sf_id, vec, q) == want
            assert emu.sf_cell_enc(r, q) == (want[0] << 16 | want[1])


def test_the_documented_worked_examples(emu):
    """docs/cuda-sm100.md, "Block-scaled tcgen05": the MXFP8 descriptor of
    the third MMA of a K tile, and where the MXFP4 scale of A row 77, K
    elements 96..127 lives in TMEM and in its shared-memory atom."""
    word = 0x48900020
    assert encode_bs_idesc("mxf8f6f4", "e4m3", "e4m3", "ue8m0", 128, 64, False, False, 2, 2) == word
    assert emu.idesc(KIND["mxf8f6f4"], BSTYPE["e4m3"], BSTYPE["e4m3"], SCALE["ue8m0"], 128, 64, 2, 2, 0, 0) == word
    row, k = 77, 96
    block = k // 32  # MX: one scale per 32 elements; MXFP4 has two per MMA (K = 64)
    mma, j = divmod(block, 2)
    sf_id = 2 * (mma % 2)  # two MMAs per 4-block atom: ids 0, 2
    assert (sf_id, j) == (2, 1)
    for q in range(4):
        assert ptx_sf_cell(row, j, sf_id, q) == (13 + 32 * q, 2, 3) == emu.sf_cell(row, j, sf_id, 2, q)
    assert (row % 32) * 16 + (row // 32) * 4 + block % 4 == 219
    # tcgen05.cp of that atom: byte 219 is row 13, byte 11 of the source: lane 13 (+ 32 q), column 2, byte 3
    src_row, src_byte = divmod(219, 16)
    assert [emu.cp_cell(src_row, src_byte, q) for q in range(4)] == [(13 + 32 * q, 2, 3) for q in range(4)]


def test_emulator_check_agrees_with_the_ptx_isa_on_random_words(emu):
    """Valid descriptors with one to three random bits flipped: the emulator
    runs a word exactly when the PTX restatement finds nothing wrong with it
    (e2m3 / e3m2 operands aside: legal, not modelled), and decodes its fields
    as the tables do."""
    import numpy as np

    rng = np.random.default_rng(30)
    seeds = {"mxf8f6f4": [("e4m3", "e4m3"), ("e5m2", "e2m1"), ("e2m1", "e4m3")], "mxf4": [("e2m1", "e2m1")],
             "mxf4nvf4": [("e2m1", "e2m1")]}
    checked, valid = 0, 0
    for kind, pairs in seeds.items():
        for a, b in pairs:
            sf = "ue4m3" if kind == "mxf4nvf4" else "ue8m0"
            for n in (8, 64, 248):
                base = encode_bs_idesc(kind, a, b, sf, 128, n, False, False)
                for _ in range(300):
                    word = base
                    for bit in rng.choice(32, size=rng.integers(1, 4), replace=False):
                        word ^= 1 << int(bit)
                    f = decode_bs_idesc(word)
                    fp6 = kind == "mxf8f6f4" and {f["atype"], f["btype"]} & {3, 4}
                    ptx_ok = not bs_idesc_problems(word, kind)
                    emu_ok = emu.check(word, kind) == ""
                    assert emu_ok == (ptx_ok and not fp6), (kind, hex(word), emu.check(word, kind),
                                                            bs_idesc_problems(word, kind))
                    if emu_ok:
                        valid += 1
                        got = emu.fields(word, kind)
                        assert got[:11] == [f["sfb_id"], f["atype"], f["btype"], f["negate_a"], f["negate_b"],
                                            f["transpose_a"], f["transpose_b"], f["n"] << 3, f["scale_type"],
                                            f["m"] << 7, f["sfa_id"]]
                    checked += 1
    assert checked == 5 * 3 * 300 and 200 < valid < checked - 2000, valid  # both sides exercised
