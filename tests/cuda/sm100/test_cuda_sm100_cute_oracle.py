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
  the tcgen05.ld fragments of .32x32b, .16x256b, .16x128b, .16x64b, .16x32bx2;
- the epilogue's view, make_tmem_copy over an accumulator, against the
  access restriction, the fragment and Layout D / F composed.

Then the emulator (gg_emu_sm100's exported decoders) and gg_primitives_sm100's
gg::umma encoders against CuTe and the PTX ISA, emulated tcgen05.mma on
operands placed at CuTe's addresses, and (slow) every N from 8 to 256.
"""

from __future__ import annotations

import ctypes
import re
import subprocess

import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC, cutlass_include, run_cute_program
from ml_dtypes import bfloat16, float8_e4m3fn, float8_e5m2
from sm100_ptx_tables import (
    ATYPES,
    K_OF_KIND,
    LD_NUMS,
    SWIZZLE_MODES,
    decode_idesc,
    decode_smem_desc,
    encode_idesc,
    encode_smem_desc,
    idesc_problems,
    ptx_d_cell,
    ptx_ld,
    ptx_operand_address,
    smem_desc_problems,
    valid_n,
)

from gemmgen.harness.cuda_emu import EmuModule
from gemmgen.harness.toolchain import cuda_include_dir

SMEM_BASE = 0x8000  # kSmemBase of cute_umma_oracle.cc: the shared address of its buffer
SWIZZLE_OF = {"0": 0, "32": 6, "64": 4, "128": 2, "128B32": 1}  # record's SW -> Table 40's mode

needs_cute = pytest.mark.skipif(cutlass_include() is None,
                                reason="nvidia-cutlass (CuTe headers) is not installed")


def _records(out: str) -> dict[str, list[list[str]]]:
    records: dict[str, list[list[str]]] = {}
    for line in out.splitlines():
        fields = line.split()
        records.setdefault(fields[0], []).append(fields[1:])
    return records


@pytest.fixture(scope="module")
def cute(tmp_path_factory) -> dict[str, list[list[str]]]:
    """Runs the CuTe program once; its records by kind."""
    return _records(run_cute_program("cute_umma_oracle.cc", tmp_path_factory.mktemp("umma")))


@pytest.fixture(scope="module")
def cute_every_n(tmp_path_factory) -> dict[str, list[list[str]]]:
    """The CuTe program built with -DGG_ORACLE_ALL_N (every N, 8 .. 256; the
    slow cases)."""
    out_dir = tmp_path_factory.mktemp("umma_all_n")
    cuda = cuda_include_dir()
    exe = out_dir / "cute_umma_oracle_all_n"
    subprocess.run(["g++", "-std=c++17", "-O1", "-w", "-DGG_ORACLE_ALL_N", f"-I{cutlass_include()}",
                    f"-I{cuda}", f"-I{cuda / 'cccl'}", str(CUDA_SRC / "cute_umma_oracle.cc"), "-o",
                    str(exe)], check=True, capture_output=True, text=True)
    return _records(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)


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


SAMPLE_N = {8, 16, 24, 32, 40, 48, 56, 64, 96, 128, 136, 192, 248, 256}
SAMPLE_TMEMC = {(64, 8), (64, 16), (64, 64), (64, 256), (128, 8), (128, 16), (128, 64), (128, 128),
                (128, 256)}


@needs_cute
def test_mma_traits_match_the_ptx_isa(cute):
    """One thread issues the MMA; A is (M, K), B (N, K), C (M, N), each the
    column-major index of its single thread's values; K is 256 bits (Table
    39: 16 for kind::f16, 32 for kind::f8f6f4); the traits' descriptor is
    Table 42's; CuTe offers an 8-bit N-major B exactly at Table 50's N."""
    _check_traits(cute, SAMPLE_N)


def _check_traits(cute, ns: set[int]) -> None:
    seen: dict[tuple[str, int, str, str], set[int]] = {}
    for kind, a, b, m, n, am, bm, k, raw, thr, la, lb, lc in cute["mma"]:
        m, n, k = int(m), int(n), int(k)
        assert k == K_OF_KIND[kind] and int(thr) == 1
        assert int(raw) == encode_idesc(kind, a, b, "f32", m, n, am == "MN", bm == "MN")
        assert _ints(la) == [1, m, k, 0, 1, m], la
        assert _ints(lb) == [1, n, k, 0, 1, n], lb
        assert _ints(lc) == [1, m, n, 0, 1, m], lc
        seen.setdefault((kind, m, am, bm), set()).add(n)
    for (kind, m, am, bm), got in seen.items():
        want = ns & set(valid_n(kind, bm == "MN"))
        assert got == want, (kind, m, am, bm, sorted(got ^ want))
    assert len(seen) == 2 * 2 * 4


@needs_cute
def test_accumulator_in_tmem_matches_the_ptx_isa(cute):
    """UMMA::tmem_frg_1sm<float>: element (m, n) at lane << 16 | column, as
    Layout D (M = 128) and Layout F (M = 64, lane alignment 0) place it."""
    assert _check_tmemc(cute) == SAMPLE_TMEMC


def _check_tmemc(cute) -> set[tuple[int, int]]:
    shapes = set()
    for m_shape, n_shape, *addrs in cute["tmemc"]:
        mm, nn = int(m_shape), int(n_shape)
        assert len(addrs) == mm * nn
        for i, addr in enumerate(map(int, addrs)):
            n, m = divmod(i, mm)
            assert (addr >> 16, addr & 0xFFFF) == ptx_d_cell(mm, m, n), (mm, nn, m, n)
        shapes.add((mm, nn))
    return shapes


@needs_cute
@pytest.mark.slow
def test_every_n_matches_the_ptx_isa(cute_every_n):
    """The traits and the accumulator layout at every N from 8 to 256 (the
    fast cases take a sample; about 35 s of compiling)."""
    every = cute_every_n
    all_n = set(range(8, 257, 8))
    _check_traits(every, all_n)
    assert _check_tmemc(every) == {(m, n) for m in (64, 128) for n in all_n}


@needs_cute
def test_second_accumulator_in_tmem_matches_the_ptx_isa(cute):
    """Two accumulators tiled along M: at M = 64 CuTe puts the second in the
    other 16 lanes of each subpartition (Layout F's lane alignment 16), at
    M = 128 N columns on."""
    shapes = set()
    for m_shape, n_shape, *addrs in cute["tmemc2"]:
        mm, nn = int(m_shape), int(n_shape)
        for i, addr in enumerate(map(int, addrs)):
            n, m = divmod(i, mm)
            lane, col = ptx_d_cell(64, m, n, 16) if mm == 64 else ptx_d_cell(128, m, nn + n)
            assert (addr >> 16, addr & 0xFFFF) == (lane, col), (mm, nn, m, n)
        shapes.add((mm, nn))
    assert shapes == {(64, 64), (128, 64)}


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


def _check_tcopy(cute) -> set[str]:
    """make_tmem_copy's epilogue view against the PTX ISA composed: the warp
    of thread t issues each tcgen05.ld at a lane of its own quarter (the
    access restriction), register r of the thread comes from the cell the
    .shape's fragment names (ptx_ld), and that cell holds the accumulator
    element Layout D / F puts there: the element CuTe says the register
    holds. Every element is held exactly once."""
    atoms = set()
    for name, m_shape, n_shape, threads, *rest in cute["tcopy"]:
        mm, nn = int(m_shape), int(n_shape)
        dp, width, num = map(int, re.fullmatch(r"(\d+)dp(\d+)b(\d+)x", name).groups())
        shape = _LD_SHAPE[dp, width]
        cell_of = {ptx_d_cell(mm, m, n): (m, n) for m in range(mm) for n in range(nn)}
        held = np.zeros((mm, nn), np.int32)
        per_thread = " ".join(rest).split("|")[1:]
        assert int(threads) == len(per_thread) == 128
        for t, text in enumerate(per_thread):
            for issue in text.split("@")[1:]:
                base, *values = issue.split()
                lane0, col0 = map(int, base.split(","))
                assert lane0 == 32 * (t // 32 % 4), (name, t, base)
                for r, value in enumerate(values):
                    m, n = map(int, value.split(","))
                    lane, col = ptx_ld(shape, num, t % 32, r, half_split=num)
                    assert cell_of.get((lane0 + lane, col0 + col)) == (m, n), (name, t, r)
                    held[m, n] += 1
        assert (held == 1).all(), name
        atoms.add(name)
    return atoms


@needs_cute
def test_epilogue_tmem_copy_matches_the_ptx_isa(cute):
    assert _check_tcopy(cute) == {"32dp32b8x"}


@needs_cute
@pytest.mark.slow
def test_epilogue_tmem_copies_match_the_ptx_isa(cute_every_n):
    """Six atoms more, M = 64 ones among them (16dp256b, 16dp128b, 16dp64b,
    16dp32b: the half of each subpartition Layout F uses)."""
    assert len(_check_tcopy(cute_every_n)) == 7


# ---------------------------------------------------------------------------
# The emulator's decoding (gg_emu_sm100.h) and the gg::umma encoders
# (gg_primitives_sm100.cuh) against CuTe and the PTX ISA.

_ENCODERS = r"""
#include "gg_runtime.cuh"
#include "gg_primitives_sm100.cuh"

// The constexpr encoders of gg::umma, callable through ctypes (the library
// hides what is not marked visible).
#define ORACLE_API extern "C" __attribute__((visibility("default")))
ORACLE_API unsigned long long oracle_smem_desc(unsigned addr, unsigned lbo, unsigned sbo,
                                               unsigned swizzle) {
  return gg::umma::smem_desc(addr, lbo, sbo, static_cast<gg::umma::Swizzle>(swizzle));
}
ORACLE_API unsigned oracle_instr_desc(int a, int b, int m, int n, int a_mn, int b_mn) {
  return gg::umma::instr_desc(static_cast<gg::umma::Type>(a), static_cast<gg::umma::Type>(b), m,
                              n, a_mn ? gg::umma::Major::MN : gg::umma::Major::K,
                              b_mn ? gg::umma::Major::MN : gg::umma::Major::K);
}
ORACLE_API unsigned oracle_d_lane(int m_total, int m) { return gg::umma::d_lane(m_total, m); }
ORACLE_API int oracle_mma_k(int t) { return gg::umma::mma_k(static_cast<gg::umma::Type>(t)); }
extern "C" __global__ void noop() {}
"""
GG_TYPE = {"f16": 0, "bf16": 1, "e4m3": 2, "e5m2": 3}  # gg::umma::Type
KIND_CODE = {"f16": 0, "f8f6f4": 1}  # the emulator's kind argument


class Emulator:
    """gg_emu_sm100's exported decoders and gg::umma's encoders, through ctypes."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(str(EmuModule(_ENCODERS, "umma_oracle.cu", memcheck=False).library))
        c = ctypes
        self._offset = lib.gg_emu_sm100_smem_desc_offset
        self._offset.restype = c.c_longlong
        self._offset.argtypes = (c.c_ulonglong, c.c_int, c.c_int, c.c_int, c.c_int)
        self._desc_check = lib.gg_emu_sm100_smem_desc_check
        self._desc_check.argtypes = (c.c_ulonglong, c.c_int, c.c_char_p, c.c_int)
        self._idesc_decode = lib.gg_emu_sm100_idesc_decode
        self._idesc_decode.restype = None
        self._idesc_decode.argtypes = (c.c_uint, c.POINTER(c.c_int))
        self._idesc_check = lib.gg_emu_sm100_idesc_check
        self._idesc_check.argtypes = (c.c_uint, c.c_int, c.c_char_p, c.c_int)
        self._d_cell = lib.gg_emu_sm100_d_cell
        self._d_cell.argtypes = (c.c_int, c.c_int, c.c_int, c.c_int, c.POINTER(c.c_int),
                                 c.POINTER(c.c_int))
        self.smem_desc = lib.oracle_smem_desc
        self.smem_desc.restype = c.c_ulonglong
        self.smem_desc.argtypes = (c.c_uint, c.c_uint, c.c_uint, c.c_uint)
        self.instr_desc = lib.oracle_instr_desc
        self.instr_desc.restype = c.c_uint
        self.instr_desc.argtypes = (c.c_int,) * 6
        self.d_lane = lib.oracle_d_lane
        self.d_lane.restype = c.c_uint
        self.d_lane.argtypes = (c.c_int, c.c_int)
        self.mma_k = lib.oracle_mma_k
        self.mma_k.argtypes = (c.c_int,)

    def offset(self, desc: int, mn_major: bool, bits: int, row: int, k: int) -> int:
        return self._offset(desc, int(mn_major), bits, row, k)

    def desc_check(self, desc: int, mn_major: bool) -> str:
        why = ctypes.create_string_buffer(512)
        return why.value.decode() if self._desc_check(desc, int(mn_major), why, 512) else ""

    def idesc_fields(self, idesc: int) -> list[int]:
        out = (ctypes.c_int * 14)()
        self._idesc_decode(idesc, out)
        return list(out)

    def idesc_check(self, idesc: int, kind: str) -> str:
        why = ctypes.create_string_buffer(512)
        return why.value.decode() if self._idesc_check(idesc, KIND_CODE[kind], why, 512) else ""

    def d_cell(self, m_total: int, n: int, row: int, col: int) -> tuple[int, int] | None:
        lane, column = ctypes.c_int(), ctypes.c_int()
        rc = self._d_cell(m_total, n, row, col, ctypes.byref(lane), ctypes.byref(column))
        return None if rc else (lane.value, column.value)


@pytest.fixture(scope="module")
def emu() -> Emulator:
    return Emulator()


@needs_cute
def test_emulator_decodes_cute_smem_descriptors(cute, emu):
    """The emulator's address of every element of every operand CuTe's
    make_umma_desc describes is CuTe's (the 32-bit 128B_base32B tiles too)."""
    compared = 0
    for major, sw, bits, rows, kb, raw, _start, offsets in _desc_records(cute):
        mn_major = major == "MN"
        assert emu.desc_check(raw, mn_major) == "", (major, sw, bits, rows, kb)
        kw = 256 // bits
        got = [emu.offset(raw, mn_major, bits, mn, k) - SMEM_BASE
               for mn in range(rows) for k in range(kw)]
        assert got == offsets, (major, sw, bits, rows, kb)
        compared += len(got)
    assert compared == 157952


def _random_descriptors(rng, count: int):
    """Valid descriptors beyond CuTe's tiles: random strides and starts, the
    start inside a swizzle row (as a K-major k-block advance puts it) or on
    the pattern boundary."""
    for _ in range(count):
        mode = int(rng.choice([0, 2, 4, 6]))
        mn_major = bool(rng.integers(2))
        bits = int(rng.choice([8, 16]))
        s = SWIZZLE_BYTES_OF[mode]
        if mode == 0:
            start = 16 * int(rng.integers(0, 4096))
        elif mn_major:
            start = 1024 * int(rng.integers(0, 128))
        else:
            start = 1024 * int(rng.integers(0, 128)) + 16 * int(rng.integers(0, s // 16))
        lbo = 16 * int(rng.integers(1, 512))
        sbo = 16 * int(rng.integers(1, 512))
        yield encode_smem_desc(start, lbo, sbo, mode), mn_major, bits


SWIZZLE_BYTES_OF = {0: 0, 2: 128, 4: 64, 6: 32}


def test_emulator_decodes_descriptors_as_the_ptx_isa(emu):
    """Random valid descriptors (any LBO / SBO, starts off the tile origin):
    the emulator's address of every third row of a 128-row operand is the
    PTX ISA's."""
    rng = np.random.default_rng(29)
    for desc, mn_major, bits in _random_descriptors(rng, 60):
        assert emu.desc_check(desc, mn_major) == "", hex(desc)
        kw = 256 // bits
        for mn in range(0, 128, 3):
            for k in range(kw):
                want = ptx_operand_address(desc, mn_major, bits, mn, k)
                got = emu.offset(desc, mn_major, bits, mn, k)
                assert got == want, (hex(desc), mn_major, bits, mn, k, got, want)


@needs_cute
def test_emulator_decodes_cute_instruction_descriptors(cute, emu):
    """Every field of every CuTe descriptor, as the emulator reads it; the
    emulator accepts exactly those the PTX ISA allows (all but the 8-bit
    N-major B at N = 8, 40, 120, 200, which Table 50 forbids)."""
    refused = 0
    for kind, a, b, m, n, am, bm, raw, *view in cute["idesc"]:
        raw = int(raw)
        cf, af, bf, amj, bmj, ndim, mdim, aneg, bneg, sat, sparse, shift = map(int, view)
        fields = emu.idesc_fields(raw)
        assert fields == [cf, af, bf, aneg, bneg, amj, bmj, ndim << 3, mdim << 4, sparse, 0, sat,
                          shift, 0], (kind, a, b, m, n, am, bm, fields)
        why = emu.idesc_check(raw, kind)
        assert bool(why) == bool(idesc_problems(raw, kind)), (kind, a, b, m, n, am, bm, why)
        refused += bool(why)
    assert refused == 5 * 4 * 2  # as test_instruction_descriptors_match_the_ptx_isa counts


def test_emulator_shapes_match_the_ptx_isa(emu):
    """Every M in 0 .. 496 (steps of 16) and N in 0 .. 504 (steps of 8), both
    kinds, every B major: the emulator runs exactly the shapes Tables 39 and
    50 allow, and places D's cells as Layouts D and F do for each of them."""
    checked = 0
    for kind, t in (("f16", "bf16"), ("f8f6f4", "e4m3")):
        for b_mn in (False, True):
            for m in range(0, 512, 16):
                for n in range(0, 512, 8):
                    word = encode_idesc(kind, t, t, "f32", m, n, False, b_mn)
                    valid = not idesc_problems(word, kind)
                    assert (emu.idesc_check(word, kind) == "") == valid, (kind, m, n, b_mn)
                    checked += 1
    assert checked == 2 * 2 * 32 * 64
    for m in (64, 128):
        for n in range(8, 257, 8):
            for row in range(0, m, 5):
                for col in (0, n // 2, n - 1):
                    assert emu.d_cell(m, n, row, col) == ptx_d_cell(m, row, col), (m, n, row, col)


def test_emulator_takes_m128_with_n_in_steps_of_8(emu):
    """Table 39 (PTX ISA 9.x) and CuTe: at M = 128 too, N in steps of 8 (the
    oracle's first finding: the emulator took steps of 16 there)."""
    for kind, t in (("f16", "bf16"), ("f8f6f4", "e4m3")):
        for n in (8, 24, 136, 248):
            word = encode_idesc(kind, t, t, "f32", 128, n, False, False)
            assert idesc_problems(word, kind) == []
            assert emu.idesc_check(word, kind) == "", (kind, n)
    assert emu.d_cell(128, 8, 127, 7) == ptx_d_cell(128, 127, 7)


def test_emulator_rejects_8bit_n_major_b_at_odd_multiples_of_8(emu):
    """Table 50 and CuTe: an 8-bit N-major B needs N a multiple of 16 (the
    oracle's second finding: the emulator took it at N = 24)."""
    word = encode_idesc("f8f6f4", "e4m3", "e5m2", "f32", 64, 24, False, True)
    assert idesc_problems(word, "f8f6f4")
    assert emu.idesc_check(word, "f8f6f4") != ""


# Descriptors the PTX ISA forbids for a dense cta_group::1 kind::f16 / f8f6f4
# MMA (Tables 39, 42, 50), each a valid one with one field changed.
_BAD_IDESC = {
    "reserved bit 6": 1 << 6,
    "reserved bit 23": 1 << 23,
    "reserved bit 29": 1 << 29,
    "sparse": 1 << 2,
    "max shift (.ws)": 1 << 30,
}


def test_emulator_rejects_what_the_ptx_isa_forbids(emu):
    good = encode_idesc("f16", "bf16", "bf16", "f32", 128, 128, False, False)
    assert emu.idesc_check(good, "f16") == ""
    cases = {name: good | bit for name, bit in _BAD_IDESC.items()}
    for name, m, n in (("M = 256", 256, 128), ("M = 32", 32, 128), ("N = 0", 128, 0),
                       ("N = 264", 128, 264)):
        word = good & ~((0x3F << 17) | (0x1F << 24))
        cases[name] = word | (((n >> 3) & 0x3F) << 17) | (((m >> 4) & 0x1F) << 24)
    cases["dtype 3 for f8f6f4"] = (encode_idesc("f8f6f4", "e4m3", "e4m3", "f32", 128, 64, False,
                                                False) | (3 << 4))
    cases["B type 2 (tf32)"] = (good & ~(7 << 10)) | (2 << 10)
    for name, word in cases.items():
        kind = "f8f6f4" if "f8f6f4" in name else "f16"
        assert idesc_problems(word, kind), name  # the PTX ISA's statement rejects it
        assert emu.idesc_check(word, kind) != "", name

    good_desc = encode_smem_desc(0x400, 16, 1024, 2)
    assert emu.desc_check(good_desc, False) == ""
    bad_descs = {
        "version 0 (the sm_90 format)": good_desc & ~(7 << 46),
        "bits 46-48 = 0b011": good_desc | (1 << 47),
        "swizzle mode 3": (good_desc & ~(7 << 61)) | (3 << 61),
        "swizzle mode 5": (good_desc & ~(7 << 61)) | (5 << 61),
        "swizzle mode 7": (good_desc & ~(7 << 61)) | (7 << 61),
        "bits 53-60 set": good_desc | (1 << 55),
    }
    for name, desc in bad_descs.items():
        assert smem_desc_problems(desc), name
        assert emu.desc_check(desc, False) != "", name


@needs_cute
def test_emulator_accumulator_cells_match_cute(cute, emu):
    """gg_emu_sm100_d_cell and gg::umma::d_lane against UMMA::tmem_frg_1sm for
    every element of every CuTe accumulator; out-of-range cells refused."""
    for m_shape, n_shape, *addrs in cute["tmemc"]:
        mm, nn = int(m_shape), int(n_shape)
        for i, addr in enumerate(map(int, addrs)):
            n, m = divmod(i, mm)
            want = (addr >> 16, addr & 0xFFFF)
            assert emu.d_cell(mm, nn, m, n) == want, (mm, nn, m, n)
            assert emu.d_lane(mm, m) == want[0]
        assert emu.d_cell(mm, nn, mm, 0) is None and emu.d_cell(mm, nn, 0, nn) is None
    assert emu.d_cell(96, 64, 0, 0) is None and emu.d_cell(128, 264, 0, 0) is None


@needs_cute
def test_gg_encoders_match_cute(cute, emu):
    """gg::umma::instr_desc builds CuTe's make_instr_desc word for every type,
    shape and major; gg::umma::smem_desc packs CuTe's make_umma_desc
    descriptor from its byte strides (start, LBO, SBO, swizzle); mma_k is
    the traits' K."""
    for kind, a, b, m, n, am, bm, raw, *_ in cute["idesc"]:
        got = emu.instr_desc(GG_TYPE[a], GG_TYPE[b], int(m), int(n), am == "MN", bm == "MN")
        assert got == int(raw), (kind, a, b, m, n, am, bm, hex(got), hex(int(raw)))
    for kind, a, *_rest in cute["mma"]:
        assert emu.mma_k(GG_TYPE[a]) == K_OF_KIND[kind]
    for major, sw, bits, rows, kb, raw, start, _ in _desc_records(cute):
        f = decode_smem_desc(raw)
        got = emu.smem_desc(SMEM_BASE + start, f["leading_byte_offset"] << 4,
                            f["stride_byte_offset"] << 4, f["swizzle"])
        assert got == raw, (major, sw, bits, rows, kb, hex(got), hex(raw))


# ---------------------------------------------------------------------------
# One emulated tcgen05.mma on operands at CuTe's addresses, read back through
# tcgen05.ld.32x32b and placed by CuTe's accumulator layout.

# (kind, A type, B type, M, N, A operand (major, swizzle, k-block), B operand
# [, D's first lane]): the operand tiles are cute_umma_oracle.cc's desc records
# with ROWS = M / N; D at lane 16 is the second of CuTe's M = 64 accumulators.
UMMA_CASES = {
    "bf16_m128n64_Ksw128_Ksw32": ("f16", "bf16", "bf16", 128, 64, ("K", "128", 1), ("K", "32", 0)),
    "bf16_m128n256_Ksw64_Ksw128": ("f16", "bf16", "bf16", 128, 256, ("K", "64", 1),
                                   ("K", "128", 3)),
    "bf16_m64n256_MNinter_MNsw128": ("f16", "bf16", "bf16", 64, 256, ("MN", "0", 1),
                                     ("MN", "128", 0)),
    "bf16_m64n8_MNsw32_Kinter": ("f16", "bf16", "bf16", 64, 8, ("MN", "32", 0), ("K", "0", 1)),
    "bf16_m128n8_Ksw64_Ksw128": ("f16", "bf16", "bf16", 128, 8, ("K", "64", 0), ("K", "128", 2)),
    "e4m3_m128n128_MNsw128_MNsw64": ("f8f6f4", "e4m3", "e4m3", 128, 128, ("MN", "128", 0),
                                     ("MN", "64", 1)),
    "e4m3_e5m2_m64n64_Ksw32_MNsw32": ("f8f6f4", "e4m3", "e5m2", 64, 64, ("K", "32", 1),
                                      ("MN", "32", 0)),
    "bf16_m64n64_lane16_Ksw32_MNinter": ("f16", "bf16", "bf16", 64, 64, ("K", "32", 0),
                                         ("MN", "0", 1), 16),
}


NP_TYPE = {"bf16": bfloat16, "e4m3": float8_e4m3fn, "e5m2": float8_e5m2}


def _operand_image(cute, major, sw, bits, rows, kb, values):
    """The shared-memory image of the tile (NaN bytes everywhere but the
    operand), the descriptor fields, and the k-block's start offset."""
    for r_major, r_sw, r_bits, r_rows, r_kb, raw, start, offsets in _desc_records(cute):
        if (r_major, r_sw, r_bits, r_rows, r_kb) == (major, sw, bits, rows, kb):
            break
    else:
        raise AssertionError(f"no CuTe record {major} {sw} {bits} {rows} {kb}")
    eb = bits // 8
    data = values.reshape(-1).view(np.uint8).reshape(-1, eb)  # (mn, k) in mn-major order
    image = np.full(max(offsets) + eb + 64, 0xFF, np.uint8)  # 0xFF..: NaN in bf16, e4m3, e5m2
    for i, off in enumerate(offsets):
        image[off:off + eb] = data[i]
    return image, decode_smem_desc(raw), start


@needs_cute
@pytest.mark.parametrize("case", list(UMMA_CASES))
def test_emulated_mma_on_cute_operands(cute, case):
    """D = A B^T exactly (small integers), every element at the TMEM cell
    CuTe's accumulator layout names; operand bytes outside the MMA's k-block
    are NaN, so an element read from a wrong address shows."""
    kind, ta, tb, m, n, (am, asw, akb), (bm, bsw, bkb), *d_lane = UMMA_CASES[case]
    bits = 16 if kind == "f16" else 8
    k = K_OF_KIND[kind]
    rng = np.random.default_rng(sum(map(ord, case)))
    a = rng.integers(-4, 5, (m, k)).astype(np.float64)
    b = rng.integers(-4, 5, (n, k)).astype(np.float64)
    a_img, fa, a_start = _operand_image(cute, am, asw, bits, m, akb, a.astype(NP_TYPE[ta]))
    b_img, fb, b_start = _operand_image(cute, bm, bsw, bits, n, bkb, b.astype(NP_TYPE[tb]))
    idesc = encode_idesc(kind, ta, tb, "f32", m, n, am == "MN", bm == "MN")
    ncols = max(32, 1 << (n - 1).bit_length())
    geom = np.array([a_start, fa["leading_byte_offset"] << 4, fa["stride_byte_offset"] << 4,
                     fa["swizzle"], a_img.size, b_start, fb["leading_byte_offset"] << 4,
                     fb["stride_byte_offset"] << 4, fb["swizzle"], b_img.size, idesc,
                     KIND_CODE[kind], n, ncols, (d_lane[0] if d_lane else 0) << 16], np.uint32)
    smem = -(-a_img.size // 1024) * 1024 + b_img.size + 1024
    module = EmuModule.from_file(CUDA_SRC / "sm100_umma_oracle.cu")
    (out,) = module.launch("umma_cute_operands", (1,), (128,), smem,
                           (a_img, b_img, geom, np.full((128, n), 0x7FC00BAD, np.uint32)), (3,),
                           arch="sm_100a")
    out = out.view(np.float32)
    want = a @ b.T
    (addrs,) = [r[2:] for r in cute["tmemc2" if d_lane else "tmemc"]
                if (int(r[0]), int(r[1])) == (m, n)]
    for i, addr in enumerate(map(int, addrs)):
        col, row = divmod(i, m)
        assert (addr & 0xFFFF) == col
        assert out[addr >> 16, col] == want[row, col], (case, row, col)
