"""The emulator's Hopper layouts against two authorities that are not the
emulator: CuTe (NVIDIA's layout algebra, from the nvidia-cutlass wheel,
compiled on the host by g++: tests/cuda_src/cute_gmma_oracle.cc) and the PTX
ISA's figures of the wgmma register fragments (their rule written out below).

Compared, entry by entry:
- the byte offset of every element of every GMMA shared-memory layout atom
  (K- and MN-major; no swizzle, 32, 64, 128-byte swizzle; 16- and 8-bit
  types) with the emulator's canonical-layout decoding, given the atom's
  strides;
- every element of wgmma operand tiles built with tile_to_shape from those
  atoms: CuTe's own descriptor (make_gmma_desc: LBO, SBO, layout type) and
  start address, decoded by the emulator, against CuTe's address of the
  element;
- the accumulator fragment (CLayout of the SM90 GMMA traits, bf16 and e4m3,
  N = 8 ... 256) and the A register fragment (ALayout of the RS traits).
"""

from __future__ import annotations

import ctypes
import importlib.util
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC

from gemmgen.harness.cuda_emu import EmuModule
from gemmgen.harness.toolchain import cuda_include_dir

DESC_LAYOUT = {0: 0, 128: 1, 64: 2, 32: 3}  # swizzle bytes -> descriptor layout type


def cutlass_include() -> Path | None:
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    include = Path(next(iter(spec.submodule_search_locations))) / "source" / "include"
    return include if (include / "cute" / "tensor.hpp").is_file() else None


needs_cute = pytest.mark.skipif(cutlass_include() is None, reason="nvidia-cutlass (CuTe headers) is not installed")


@pytest.fixture(scope="module")
def cute_records(tmp_path_factory) -> dict[str, list[list[str]]]:
    """Runs the CuTe program; its records by kind."""
    cuda = cuda_include_dir()
    exe = tmp_path_factory.mktemp("cute") / "oracle"
    cmd = ["g++", "-std=c++17", "-O1", f"-I{cutlass_include()}", f"-I{cuda}", f"-I{cuda / 'cccl'}",
           str(CUDA_SRC / "cute_gmma_oracle.cc"), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    records: dict[str, list[list[str]]] = {}
    for line in out.splitlines():
        if line.startswith("ERROR: cast_smem_ptr_to_uint"):
            continue  # CuTe's host fallback for the start address; the program prints it itself
        fields = line.split()
        records.setdefault(fields[0], []).append(fields[1:])
    return records


class Emulator:
    """The emulator's decoding functions (gg_emu_sm90.h), through ctypes."""

    def __init__(self) -> None:
        module = EmuModule('#include "gg_runtime.cuh"\nextern "C" __global__ void noop() {}\n', "noop.cu",
                           memcheck=False)
        lib = ctypes.CDLL(str(module.library))
        self._address = lib.gg_emu_sm90_operand_address
        self._address.restype = ctypes.c_uint
        self._address.argtypes = (ctypes.c_ulonglong, ctypes.c_int, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint)
        self._acc = lib.gg_emu_sm90_accumulator_coord
        self._afrag = lib.gg_emu_sm90_a_fragment_coord
        for f in (self._acc, self._afrag):
            f.argtypes = (ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint))

    def address(self, desc: int, mn_major: bool, elem_bytes: int, mn: int, k: int) -> int:
        return self._address(desc, int(mn_major), elem_bytes, mn, k)

    def _pair(self, f, t: int, i: int) -> tuple[int, int]:
        a, b = ctypes.c_uint(), ctypes.c_uint()
        f(t, i, ctypes.byref(a), ctypes.byref(b))
        return a.value, b.value

    def accumulator(self, t: int, i: int) -> tuple[int, int]:
        return self._pair(self._acc, t, i)

    def a_fragment(self, t: int, j: int) -> tuple[int, int]:
        return self._pair(self._afrag, t, j)


@pytest.fixture(scope="module")
def emu() -> Emulator:
    return Emulator()


def descriptor(start: int, lbo_bytes: int, sbo_bytes: int, layout: int) -> int:
    return (start >> 4) | ((lbo_bytes >> 4) << 16) | ((sbo_bytes >> 4) << 32) | (layout << 62)


# ---------------------------------------------------------------------------


@needs_cute
def test_layout_atoms_match_cute(cute_records, emu):
    """Every element of the 16 atoms: the atom is one repetition of the
    canonical layout, so the strides the decoding needs are the atom's own
    (K-major: 8 rows of S bytes; MN-major: 8 k-columns of S bytes; no
    swizzle: one 8 x 16-byte core matrix)."""
    atoms: dict[tuple[str, int, int], dict[tuple[int, int], int]] = {}
    for major, sw, bits, mn, k, off in cute_records["atom"]:
        atoms.setdefault((major, int(sw), int(bits)), {})[int(mn), int(k)] = int(off)
    assert len(atoms) == 16
    compared = 0
    for (major, sw, bits), offsets in atoms.items():
        eb = bits // 8
        desc = descriptor(0, 16, 8 * max(sw, 16), DESC_LAYOUT[sw])
        for (mn, k), off in offsets.items():
            assert emu.address(desc, major == "MN", eb, mn, k) == off, (major, sw, bits, mn, k)
            compared += 1
    # 16-bit: 8x8, 8x16, 8x32, 8x64 (K) and their transposes (MN); 8-bit twice as wide.
    assert compared == 2 * 3 * (64 + 128 + 256 + 512)


@needs_cute
def test_operand_tiles_through_cute_descriptors_match_cute(cute_records, emu):
    compared = configs = 0
    for fields in cute_records["desc"]:
        major, sw, bits, rows, _kb, start, lbo, sbo, layout = fields[:9]
        offsets = [int(x) for x in fields[9:]]
        eb, rows, sw = int(bits) // 8, int(rows), int(sw)
        assert int(layout) == DESC_LAYOUT[sw], fields[:9]
        desc = descriptor(int(start), int(lbo) * 16, int(sbo) * 16, int(layout))
        kw = 32 // eb  # the k of one wgmma
        assert len(offsets) == rows * kw
        got = [emu.address(desc, major == "MN", eb, mn, k) for mn in range(rows) for k in range(kw)]
        assert got == offsets, fields[:9]
        compared += len(offsets)
        configs += 1
    assert configs == 2 * 23  # per element size: 14 K-major and 9 MN-major k-blocks of 10 tiles
    assert compared > 40000


@needs_cute
@pytest.mark.parametrize("kind", ["clayout", "clayout8"])
def test_accumulator_fragment_matches_cute(cute_records, emu, kind):
    ns = set()
    for n, t, v, m, nn in cute_records[kind]:
        assert emu.accumulator(int(t), int(v)) == (int(m), int(nn)), (kind, n, t, v)
        ns.add(int(n))
    assert ns == {8, 16, 32, 64, 96, 128, 192, 256}


@needs_cute
def test_a_register_fragment_matches_cute(cute_records, emu):
    assert len(cute_records["alayout"]) == 128 * 8
    for t, v, m, k in cute_records["alayout"]:
        assert emu.a_fragment(int(t), int(v)) == (int(m), int(k))


# ---------------------------------------------------------------------------
# The PTX ISA's tables (no CuTe needed).


def ptx_accumulator(t: int, i: int) -> tuple[int, int]:
    """PTX ISA, figures "WGMMA .m64nNk16 / .m64nNk32 register fragment layout
    for accumulator matrix D": the warpgroup's 4 warps own 16 rows each; in a
    warp, the 8 groups of 4 lanes own rows groupID and groupID + 8 (groupID =
    laneid >> 2); each 8-column block j holds d[4j..4j+3]: d[4j], d[4j+1] at
    row groupID, columns 8j + 2 * (laneid % 4) + {0, 1}; d[4j+2], d[4j+3] at
    row groupID + 8, the same columns."""
    warp, lane = divmod(t, 32)
    group, tig = lane >> 2, lane % 4
    j, r = divmod(i, 4)
    return 16 * warp + group + (8 if r >= 2 else 0), 8 * j + 2 * tig + (r & 1)


def ptx_a_fragment(t: int, i: int) -> tuple[int, int]:
    """PTX ISA, figure "WGMMA .m64nNk16 register fragment layout for matrix A":
    per warp the mma.m16n8k16 A layout (row groupID for a0, a1, a4, a5 and
    groupID + 8 for a2, a3, a6, a7; column 2 * (laneid % 4) + (i & 1), + 8 for
    a4..a7), the warp's 16 rows at 16 * warp."""
    warp, lane = divmod(t, 32)
    group, tig = lane >> 2, lane % 4
    row = group + (8 if i in (2, 3, 6, 7) else 0)
    col = 2 * tig + (i & 1) + (8 if i >= 4 else 0)
    return 16 * warp + row, col


@pytest.mark.parametrize("n", [8, 16, 64, 96, 128, 192, 256])
def test_accumulator_fragment_matches_the_ptx_isa(emu, n):
    seen = np.zeros((64, n), np.int32)
    for t in range(128):
        for i in range(n // 2):
            m, col = emu.accumulator(t, i)
            assert (m, col) == ptx_accumulator(t, i), (t, i)
            seen[m, col] += 1
    assert (seen == 1).all()


def test_a_register_fragment_matches_the_ptx_isa(emu):
    for t in range(128):
        for i in range(8):
            assert emu.a_fragment(t, i) == ptx_a_fragment(t, i)


def test_descriptor_examples_of_the_ptx_isa(emu):
    """The PTX ISA's worked examples ("Canonical Layouts"): their exact layouts
    in CuTe notation, element units, evaluated by hand."""
    # MN-major, no swizzle, bf16: ((8,1,2),(8,2)):((1,8,64),(8,128)), LBO 128*2 bytes, SBO 64*2 bytes.
    desc = descriptor(0, 256, 128, 0)
    for mn in range(16):
        for k in range(16):
            elem = (mn % 8) * 1 + (mn // 8) * 64 + (k % 8) * 8 + (k // 8) * 128
            assert emu.address(desc, True, 2, mn, k) == 2 * elem
    # MN-major, 64B swizzle, bf16: Swizzle<2,4,3> o ((8,4,2),(8,2)):((1,8,256),(32,512)), LBO 256*2, SBO 512*2.
    desc = descriptor(0, 512, 1024, 2)
    for mn in range(64):
        for k in range(16):
            elem = (mn % 8) + ((mn // 8) % 4) * 8 + (mn // 32) * 256 + (k % 8) * 32 + (k // 8) * 512
            byte = 2 * elem
            assert emu.address(desc, True, 2, mn, k) == byte ^ (((byte >> 7) & 3) << 4)


def test_worked_example_of_the_docs(emu):
    """docs/cuda-hopper.md: a K-major bf16 tile with 128B swizzle at 0x400,
    k-block 1, element (10, 5) lands at 0x90a (0x92a before the swizzle)."""
    desc = descriptor(0x400 + 32, 16, 1024, 1)
    assert emu.address(desc, False, 2, 10, 5) == 0x90A
    # The same offsets without the swizzle: 0x92a.
