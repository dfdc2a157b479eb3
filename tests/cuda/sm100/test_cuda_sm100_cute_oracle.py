"""The sm_100 tcgen05 layouts against two authorities that are not the
emulator: CuTe (NVIDIA's layout algebra, from the nvidia-cutlass wheel,
compiled on the host by g++: tests/cuda_src/cute_umma_oracle.cc) and the PTX
ISA's tables (restated in tests/sm100_ptx_tables.py).

First CuTe against the PTX ISA, entry by entry (no emulator needed; a
disagreement is a misreading of one of them):
- the instruction descriptors UMMA::make_instr_desc builds (bf16, f16, e4m3,
  e5m2 and the mixed FP8 pairs, f32 accumulate, every major combination,
  M = 64 / 128, several N): raw word and CuTe's field view against Table 42;
- the SM100_MMA_F16BF16_SS / SM100_MMA_F8F6F4_SS traits: one thread, K of
  the kind (Table 39), the A / B / C (thread, value) layouts, the shapes
  CuTe accepts (Table 50), their descriptor;
- the accumulator in TMEM (UMMA::tmem_frg_1sm) against the data path
  Layouts D (M = 128) and F (M = 64);
- every element of operand tiles built with tile_to_shape from CuTe's UMMA
  smem layout atoms (K- and MN-major; no swizzle, 32, 64, 128-byte swizzle,
  and 128-byte swizzle with 32-byte atomicity; 8-, 16- and 32-bit types):
  make_umma_desc's descriptor decoded by Table 40 and the strides of
  9.7.16.3, against CuTe's address of the element;
- the (thread, register) -> (lane, column) maps of the TMEM load atoms
  SM100_TMEM_LOAD_32dp32b*, 16dp256b*, 16dp128b*, 16dp64b*, 16dp32b* against
  the tcgen05.ld fragments of .32x32b, .16x256b, .16x128b, .16x64b, .16x32bx2.
"""

from __future__ import annotations

import re

import pytest
from cuda_runtime_cases import cutlass_include, run_cute_program
from sm100_ptx_tables import (
    ATYPES,
    K_OF_KIND,
    LD_NUMS,
    SWIZZLE_MODES,
    decode_idesc,
    decode_smem_desc,
    encode_idesc,
    idesc_problems,
    ptx_d_cell,
    ptx_ld,
    ptx_operand_address,
    smem_desc_problems,
    valid_n,
)

SMEM_BASE = 0x8000  # kSmemBase of cute_umma_oracle.cc: the shared address of its buffer
SWIZZLE_OF = {"0": 0, "32": 6, "64": 4, "128": 2, "128B32": 1}  # record's SW -> Table 40's mode

needs_cute = pytest.mark.skipif(cutlass_include() is None,
                                reason="nvidia-cutlass (CuTe headers) is not installed")


@pytest.fixture(scope="module")
def cute(tmp_path_factory) -> dict[str, list[list[str]]]:
    """Runs the CuTe program once; its records by kind."""
    out = run_cute_program("cute_umma_oracle.cc", tmp_path_factory.mktemp("umma"))
    records: dict[str, list[list[str]]] = {}
    for line in out.splitlines():
        fields = line.split()
        records.setdefault(fields[0], []).append(fields[1:])
    return records


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


# ---------------------------------------------------------------------------
# CuTe against the PTX ISA.


@needs_cute
def test_instruction_descriptors_match_the_ptx_isa(cute):
    """Table 42, field by field, for every descriptor make_instr_desc built;
    CuTe's own view of each field the same as the PTX ISA's."""
    rows = cute["idesc"]
    assert len(rows) == 11 * 6 * 4  # 11 shapes x 6 type pairs x 4 major combinations
    invalid = 0
    for kind, a, b, m, n, am, bm, raw, *view in rows:
        m, n, raw = int(m), int(n), int(raw)
        want = encode_idesc(kind, a, b, "f32", m, n, am == "MN", bm == "MN")
        assert raw == want, (kind, a, b, m, n, am, bm, hex(raw), hex(want))
        f = decode_idesc(raw)
        cf, af, bf, amj, bmj, ndim, mdim, aneg, bneg, sat, sparse, shift = map(int, view)
        assert (cf, af, bf) == (f["dtype"], f["atype"], f["btype"])
        assert (amj, bmj, aneg, bneg) == (f["transpose_a"], f["transpose_b"], f["negate_a"],
                                          f["negate_b"])
        assert (ndim, mdim, sat, sparse, shift) == (f["n"], f["m"], f["saturate"], f["sparsity"],
                                                    f["max_shift"])
        assert (f["m"] << 4, f["n"] << 3) == (m, n)
        assert (f["atype"], f["btype"]) == (ATYPES[kind][a], ATYPES[kind][b])
        problems = idesc_problems(raw, kind)
        # make_instr_desc itself checks no shape: an 8-bit N-major B at an N
        # that is not a multiple of 16 is the one combination Table 50 rejects
        # (the traits below refuse it).
        if kind == "f8f6f4" and bm == "MN" and n % 16:
            assert problems == [f"N = {n} with an 8-bit N-major B (16 .. 256 in steps of 16)"]
            invalid += 1
        else:
            assert problems == [], (kind, m, n, am, bm, problems)
    # (M, N) = (64, 8), (64, 40), (128, 8), (128, 120), (128, 200) x 4 FP8 pairs x 2 A majors
    assert invalid == 5 * 4 * 2


@needs_cute
def test_mma_traits_match_the_ptx_isa(cute):
    """One thread issues the MMA; A is (M, K), B (N, K), C (M, N), each the
    column-major index of its single thread's values; K is 256 bits (Table
    39: 16 for kind::f16, 32 for kind::f8f6f4); the traits' descriptor is
    Table 42's; CuTe offers an 8-bit N-major B exactly at Table 50's N."""
    seen: dict[tuple[str, int, str, str], set[int]] = {}
    for kind, a, b, m, n, am, bm, k, raw, thr, la, lb, lc in cute["mma"]:
        m, n, k = int(m), int(n), int(k)
        assert k == K_OF_KIND[kind] and int(thr) == 1
        assert int(raw) == encode_idesc(kind, a, b, "f32", m, n, am == "MN", bm == "MN")
        assert _ints(la) == [1, m, k, 0, 1, m], la
        assert _ints(lb) == [1, n, k, 0, 1, n], lb
        assert _ints(lc) == [1, m, n, 0, 1, m], lc
        seen.setdefault((kind, m, am, bm), set()).add(n)
    ns = {8, 16, 24, 32, 40, 48, 56, 64, 96, 128, 136, 192, 248, 256}
    for (kind, m, am, bm), got in seen.items():
        want = ns & set(valid_n(kind, bm == "MN"))
        assert got == want, (kind, m, am, bm, sorted(got ^ want))
    assert len(seen) == 2 * 2 * 4


@needs_cute
def test_accumulator_in_tmem_matches_the_ptx_isa(cute):
    """UMMA::tmem_frg_1sm<float>: element (m, n) at lane << 16 | column, as
    Layout D (M = 128) and Layout F (M = 64, lane alignment 0) place it."""
    shapes = set()
    for m_shape, n_shape, *addrs in cute["tmemc"]:
        mm, nn = int(m_shape), int(n_shape)
        assert len(addrs) == mm * nn
        for i, addr in enumerate(map(int, addrs)):
            n, m = divmod(i, mm)
            assert (addr >> 16, addr & 0xFFFF) == ptx_d_cell(mm, m, n), (mm, nn, m, n)
        shapes.add((mm, nn))
    assert shapes == {(64, 8), (64, 16), (64, 64), (64, 256), (128, 8), (128, 16), (128, 64),
                      (128, 128), (128, 256)}


def _desc_records(cute):
    for major, sw, bits, rows, kb, raw, start, *offsets in cute["desc"]:
        yield major, sw, int(bits), int(rows), int(kb), int(raw), int(start), [int(x) for x in offsets]


@needs_cute
def test_smem_descriptors_match_the_ptx_isa(cute):
    """make_umma_desc's descriptor, decoded by Table 40 and the strides of
    9.7.16.3, reaches the byte CuTe places every element of the operand at."""
    configs = compared = 0
    modes = set()
    for major, sw, bits, rows, kb, raw, start, offsets in _desc_records(cute):
        f = decode_smem_desc(raw)
        assert smem_desc_problems(raw) == [], (major, sw, bits, rows, kb)
        assert f["swizzle"] == SWIZZLE_OF[sw] and f["base_offset"] == 0 and f["lbo_mode"] == 0
        assert f["start_address"] << 4 == SMEM_BASE + start
        kw = 256 // bits
        assert len(offsets) == rows * kw
        got = [ptx_operand_address(raw, major == "MN", bits, mn, k) - SMEM_BASE
               for mn in range(rows) for k in range(kw)]
        assert got == offsets, (major, sw, bits, rows, kb, f)
        compared += len(offsets)
        configs += 1
        modes.add((major, SWIZZLE_MODES[f["swizzle"]]))
    assert modes == {("K", "none"), ("K", "32B"), ("K", "64B"), ("K", "128B"), ("MN", "none"),
                     ("MN", "32B"), ("MN", "64B"), ("MN", "128B"), ("MN", "128B_base32B")}
    assert configs == 61
    assert compared == 157952


_LD_SHAPE = {(32, 32): "32x32b", (16, 256): "16x256b", (16, 128): "16x128b", (16, 64): "16x64b",
             (16, 32): "16x32bx2"}


@needs_cute
def test_tmem_load_atoms_match_the_ptx_isa(cute):
    """Every register of every thread of the SM100_TMEM_LOAD atoms reads one
    whole 32-bit column of one lane, the lane and column of the tcgen05.ld
    fragment figures (.16x32bx2: CuTe puts the second half at immHalfSplitoff
    = .num columns)."""
    atoms = {}
    for name, regs, *cells in cute["tmem"]:
        dp, width, num = map(int, re.fullmatch(r"(\d+)dp(\d+)b(\d+)x", name).groups())
        shape = _LD_SHAPE[dp, width]
        regs = int(regs)
        assert len(cells) == 32 * regs
        for t in range(32):
            for r in range(regs):
                cell = cells[t * regs + r]
                assert not cell.endswith(",BAD"), (name, t, r)
                want = ptx_ld(shape, num, t, r, half_split=num)
                assert cell == f"{want[0]},{want[1]}", (name, t, r, cell, want)
        atoms.setdefault(shape, set()).add(num)
    for shape, nums in atoms.items():
        assert max(nums) == LD_NUMS[shape] and min(nums) == 1, (shape, sorted(nums))
    assert len(atoms) == 5
