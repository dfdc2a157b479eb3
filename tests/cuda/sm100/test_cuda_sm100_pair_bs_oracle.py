"""The block-scaled 2-CTA layouts: CuTe (tests/cuda_src/cute_bs_2sm_oracle.cc,
compiled on the host by g++ against the nvidia-cutlass wheel's headers:
SM100_UTCCP_4x32dp128bit_2cta, SM100_MMA_MXF8F6F4_2x1SM_SS,
SM100_MMA_MXF4_2x1SM_SS and their scale-factor TMEM fragments) against the
PTX ISA restatement (tests/sm100_ptx_tables.py), the emulator's exported
decoders (gg_emu_sm100_pair_sf_cell, _pair_bs_idesc_check) and
gg::umma::instr_desc_block_scaled, entry by entry. The central fact: which
CTA's TMEM holds which scale-factor rows (A: each CTA its own 128 rows; B:
every N row in both CTAs)."""

from __future__ import annotations

import ctypes

import pytest
from cuda_runtime_cases import cutlass_include, run_cute_program
from sm100_ptx_tables import (
    BS_IDS,
    BS_K,
    BS_VEC,
    encode_bs_idesc,
    pair_bs_idesc_problems,
    pair_sf_cell,
)

from gemmgen.harness.cuda_emu import EmuModule

needs_cute = pytest.mark.skipif(cutlass_include() is None,
                                reason="nvidia-cutlass (CuTe headers) is not installed")
KIND = {"mxf8f6f4": 0, "mxf4": 1, "mxf4nvf4": 2}
BSTYPE = {"e4m3": 0, "e5m2": 1, "e2m1": 2}
SCALE = {"ue4m3": 0, "ue8m0": 1}
ALLOC_4BY1, ALLOC_2BY2 = 3, 4  # UMMA::TmemAllocMode

_ENCODERS = r"""
#include "gg_runtime.cuh"
#include "gg_primitives_sm100.cuh"

#define ORACLE_API extern "C" __attribute__((visibility("default")))
ORACLE_API unsigned oracle_bs_idesc(int kind, int a, int b, int sf, int m, int n, unsigned sfa_id,
                                    unsigned sfb_id) {
  using namespace gg::umma;
  return instr_desc_block_scaled(static_cast<BsKind>(kind), static_cast<BsType>(a),
                                 static_cast<BsType>(b), static_cast<ScaleFormat>(sf), m, n, sfa_id,
                                 sfb_id);
}
extern "C" __global__ void noop() {}
"""


class Emulator:
    def __init__(self) -> None:
        lib = ctypes.CDLL(str(EmuModule(_ENCODERS, "pair_bs_oracle.cu", memcheck=False).library))
        c = ctypes
        self._check = lib.gg_emu_sm100_pair_bs_idesc_check
        self._check.argtypes = (c.c_uint, c.c_int, c.c_char_p, c.c_int)
        self._sf = lib.gg_emu_sm100_pair_sf_cell
        self._sf.argtypes = (c.c_int,) * 8 + (c.POINTER(c.c_int),) * 4
        self.idesc = lib.oracle_bs_idesc
        self.idesc.restype = c.c_uint
        self.idesc.argtypes = (c.c_int,) * 6 + (c.c_uint, c.c_uint)

    def check(self, word: int, kind: str) -> str:
        why = ctypes.create_string_buffer(512)
        return why.value.decode() if self._check(word, KIND[kind], why, 512) else ""

    def sf_cell(self, which: str, m: int, n: int, row: int, block: int, sf_id: int, vec: int, q: int):
        out = [ctypes.c_int() for _ in range(4)]
        rc = self._sf(0 if which == "A" else 1, m, n, row, block, sf_id, vec, q, *map(ctypes.byref, out))
        return None if rc else tuple(x.value for x in out)


@pytest.fixture(scope="module")
def emu() -> Emulator:
    return Emulator()


@pytest.fixture(scope="module")
def cute(tmp_path_factory) -> dict[str, list[list[str]]]:
    if cutlass_include() is None:
        pytest.skip("the nvidia-cutlass wheel (CuTe) is not installed")
    records: dict[str, list[list[str]]] = {}
    for line in run_cute_program("cute_bs_2sm_oracle.cc", tmp_path_factory.mktemp("bs2")).splitlines():
        fields = line.split()
        records.setdefault(fields[0], []).append(fields[1:])
    return records


@needs_cute
def test_the_2cta_copy_moves_each_ctas_atom_into_its_own_tmem(cute):
    """SM100_UTCCP_4x32dp128bit_2cta: two threads (the CTAs of the pair), the
    source layout the same in both (stride 0 over the CTA: each copies the
    atom at the descriptor's offset of its own shared memory), the TMEM bit
    addresses those of the one-CTA atom, and the destination the same
    address in both CTAs."""
    assert cute["utccp2thr"] == [["2"]]
    rows = cute["utccp2"]
    assert len(rows) == 2 * 32 * 16 * 4
    for t, r, b, q, src2, val2, src1, val1, dst in (tuple(map(int, x)) for x in rows):
        assert (src2, val2) == (src1, val1), (t, r, b, q)
        assert dst == 0


@needs_cute
def test_which_cta_holds_which_scale_rows(cute):
    """The 2x1SM traits at M = 256: A split by M over the CTAs (stride M / 2
    of the CTA mode), B by N (N / 2), the scales in the "4x1" TMEM layout,
    and each CTA's scale tile (MMA_ScaleFactor) 128 rows of A by
    round_up(N, 128) rows of B: a CTA holds the scales of its own A rows and
    of ALL of B's rows. (M = 128 per pair takes the "2x2" layout, which the
    emulator does not model.)"""
    rows = cute["traits2"]
    assert len(rows) == 6
    for kind, _a, _b, _sf, vs, m, n, k, sfvec, alloc, sfm, sfn, athr, bthr, _raw in rows:
        m, n, k, vs, sfvec = int(m), int(n), int(k), int(vs), int(sfvec)
        assert k == BS_K[kind] and sfvec == vs
        assert (int(athr), int(bthr)) == (m // 2, n // 2)
        assert int(sfn) == -(-n // 128) * 128
        if m == 256:
            assert int(alloc) == ALLOC_4BY1 and int(sfm) == 128
        else:
            assert int(alloc) == ALLOC_2BY2


@needs_cute
def test_pair_instruction_descriptors(cute, emu):
    """make_instr_desc_block_scaled at M = 256 against the PTX fields,
    gg::umma::instr_desc_block_scaled and the emulator's cta_group::2 check;
    the traits' words too. The same word at M = 128 is refused (not
    modelled), and at M = 256 the cta_group::1 check refuses it."""
    rows = cute["bsidesc2"]
    assert len(rows) == 3 * (16 + 16 + 4 + 1)  # N = 16, 128, 256; every legal id pair
    for kind, a, b, sf, n, sfa_id, sfb_id, raw in rows:
        n, sfa_id, sfb_id, raw = int(n), int(sfa_id), int(sfb_id), int(raw)
        want = encode_bs_idesc(kind, a, b, sf, 256, n, False, False, sfa_id, sfb_id)
        assert raw == want, (kind, a, b, n, sfa_id, sfb_id)
        assert emu.idesc(KIND[kind], BSTYPE[a], BSTYPE[b], SCALE[sf], 256, n, sfa_id, sfb_id) == raw
        assert pair_bs_idesc_problems(raw, kind) == []
        assert emu.check(raw, kind) == ""
        m128 = encode_bs_idesc(kind, a, b, sf, 128, n, False, False, sfa_id, sfb_id)
        assert "M = 128 per pair" in emu.check(m128, kind)
    for kind, _a, _b, _sf, _vs, m, n, *_rest, raw in cute["traits2"]:
        if int(m) == 256:
            assert emu.check(int(raw), kind) == "", (kind, n)


@needs_cute
def test_pair_scale_factor_cells(cute, emu):
    """Every scale of the M = 256 fragments (SFA: a CTA's 128 rows; SFB: 128
    and 256 rows; 1X / 2X / 4X; all four lane-quarter replicas) where CuTe
    puts it, against the PTX restatement and the emulator's pair_sf_cell:
    the same cell in the CTA that holds it (A: CTA row / 128; B: both)."""
    groups: dict[tuple, list] = {}
    for which, kind, vs, nrows, numk, alloc, dp, r, k, j, q, off, same in cute["sf2"]:
        groups.setdefault((which, kind, int(vs), int(nrows), int(numk), int(alloc), int(dp)), []).append(
            tuple(map(int, (r, k, j, q, off, same))))
    assert len(groups) == 6
    checked = 0
    for (which, kind, vs, nrows, numk, alloc, dp), entries in groups.items():
        vec = BS_VEC[kind]
        assert vs * vec == BS_K[kind] and len(entries) == nrows * numk * vec * 4
        base = {k: off for r, k, j, q, off, _ in entries if (r, j, q) == (0, 0, 0)}
        cells = {}
        for r, k, j, q, off, same in entries:
            assert same == 1
            lane, byte = divmod(off, dp)
            col0, sf_id = divmod(base[k] % dp, 4)
            assert sf_id in BS_IDS[vec]
            cells[(r, k, j, q)] = (lane, byte // 4 - col0, byte % 4)
        if alloc == ALLOC_2BY2:
            # M = 128 per pair: B's rows not at lane row % 32 of each quarter
            # (why the emulator refuses M = 128 rather than guess).
            assert any(cells[(r, 0, 0, 0)][0] != r % 32 for r in range(nrows))
            continue
        for (r, k, j, q), cell in cells.items():
            sf_id = (base[k] % dp) % 4
            for pair_row, cta in ((r, 0), (r + 128, 1)) if which == "A" else ((r, -1),):
                want = pair_sf_cell(which, 256, pair_row, j, sf_id, q)
                assert want == (cta,) + cell, (which, kind, r, k, j, q)
                n = 256 if which == "A" else nrows
                assert emu.sf_cell(which, 256, n, pair_row, j, sf_id, vec, q) == want
                checked += 1
    assert checked > 10000
