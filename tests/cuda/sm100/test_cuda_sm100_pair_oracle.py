"""The 2-CTA (cta_group::2) tcgen05 layouts against CuTe: the
SM100_MMA_F16BF16_2x1SM_SS, F8F6F4_2x1SM_SS and MXF8F6F4_2x1SM_SS traits
(which CTA of the pair holds which rows of A and B and of the accumulator)
and UMMA::tmem_frg_2sm (where each CTA's half of the accumulator sits in its
TMEM), printed by tests/cuda_src/cute_umma_2sm_oracle.cc (compiled on the
host by g++ against the nvidia-cutlass wheel's headers), compared entry by
entry with what the emulator does (gg_emu_sm100_pair_d_cell, its cta_group::2
shape check) and with gg::umma's encoders (instr_desc at the pair's M,
pair_d_lane / pair_d_column). The pair GEMM
(test_cuda_sm100_pair_gemm.py) then runs the emulated MMA on this layout
against NumPy."""

import ctypes

import pytest
from cuda_runtime_cases import cutlass_include, run_cute_program

from gemmgen.harness.cuda_emu import EmuModule

needs_cute = pytest.mark.skipif(cutlass_include() is None, reason="the nvidia-cutlass wheel (CuTe) is not installed")

_ENCODERS = r"""
#include "gg_runtime.cuh"
#include "gg_primitives_sm100.cuh"

#define ORACLE_API extern "C" __attribute__((visibility("default")))
ORACLE_API unsigned oracle_instr_desc(int a, int b, int m, int n) {
  return gg::umma::instr_desc(static_cast<gg::umma::Type>(a), static_cast<gg::umma::Type>(b), m, n,
                              gg::umma::Major::K, gg::umma::Major::K);
}
ORACLE_API unsigned oracle_pair_d_lane(int m_total, int n_total, int m, int n) {
  return gg::umma::pair_d_lane(m_total, n_total, m, n);
}
ORACLE_API unsigned oracle_pair_d_column(int m_total, int n_total, int n) {
  return gg::umma::pair_d_column(m_total, n_total, n);
}
extern "C" __global__ void noop() {}
"""
GG_TYPE = {"f16": 1, "f8f6f4": 2}  # gg::umma::Type of the oracle's operands: bf16, e4m3


@pytest.fixture(scope="module")
def cute(tmp_path_factory) -> dict[str, list[list[str]]]:
    if cutlass_include() is None:
        pytest.skip("the nvidia-cutlass wheel (CuTe) is not installed")
    out = run_cute_program("cute_umma_2sm_oracle.cc", tmp_path_factory.mktemp("cute2sm"))
    records: dict[str, list[list[str]]] = {}
    for line in out.splitlines():
        fields = line.split()
        records.setdefault(fields[0], []).append(fields[1:])
    return records


@pytest.fixture(scope="module")
def lib():
    return ctypes.CDLL(str(EmuModule(_ENCODERS, "umma_pair_oracle.cu", memcheck=False).library))


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


@needs_cute
def test_which_cta_holds_which_rows(cute):
    """CTA v of the pair holds A's rows [v M/2, (v + 1) M/2), B's rows
    [v N/2, (v + 1) N/2) and the accumulator's rows [v M/2, (v + 1) M/2),
    all N columns: what the emulator's tcgen05.mma.cta_group::2 reads from
    and writes to each CTA (gg_emu_sm100_pair.cc, mma_pair)."""
    assert len(cute["pair"]) == 15
    for kind, m, n, k, thr, _raw, a, b, c in cute["pair"]:
        m, n, k = int(m), int(n), int(k)
        assert int(thr) == 2 and k == (16 if kind == "f16" else 32), (kind, m, n)
        for name, rows, layout, span in (("A", m, a, k), ("B", n, b, k), ("C", m, c, n)):
            got = _ints(layout)
            half = rows // 2
            want = [(v * half + i % half) + rows * (i // half) for v in range(2) for i in range(half * span)]
            assert got == want, (kind, m, n, name)


@needs_cute
def test_pair_instruction_descriptors(cute, lib):
    """The traits' descriptor at the pair's M is gg::umma::instr_desc's, and
    the emulator's cta_group::2 shape check takes it (and refuses it as a
    cta_group::1 descriptor when M = 256)."""
    lib.oracle_instr_desc.restype = ctypes.c_uint
    check = lib.gg_emu_sm100_pair_idesc_check
    check.argtypes = (ctypes.c_uint, ctypes.c_int, ctypes.c_char_p, ctypes.c_int)
    check1 = lib.gg_emu_sm100_idesc_check
    check1.argtypes = check.argtypes
    why = ctypes.create_string_buffer(512)
    for kind, m, n, _k, _thr, raw, *_ in cute["pair"]:
        if kind == "mxf8f6f4":
            continue  # the block-scaled descriptor: not a cta_group::2 kind the emulator runs yet
        m, n, raw = int(m), int(n), int(raw)
        assert lib.oracle_instr_desc(GG_TYPE[kind], GG_TYPE[kind], m, n) == raw, (kind, m, n)
        code = 0 if kind == "f16" else 1
        assert check(raw, code, why, 512) == 0, why.value
        if m == 256:
            assert check1(raw, code, why, 512) == 1 and b"M = 256 needs cta_group::2" in why.value


def test_emulator_refuses_pair_shapes_the_ptx_isa_forbids(lib):
    check = lib.gg_emu_sm100_pair_idesc_check
    check.argtypes = (ctypes.c_uint, ctypes.c_int, ctypes.c_char_p, ctypes.c_int)
    lib.oracle_instr_desc.restype = ctypes.c_uint
    why = ctypes.create_string_buffer(512)
    for m, n, message in ((64, 128, b"cta_group::2 takes M = 128 or 256"),
                          (256, 8, b"not a multiple of 16 in 16..256"),
                          (256, 264, b"not a multiple of 16 in 16..256")):
        assert check(lib.oracle_instr_desc(1, 1, m, n), 0, why, 512) == 1 and message in why.value, (m, n)


@needs_cute
def test_accumulator_halves_in_tmem(cute, lib):
    """tmem_frg_2sm's address of every element of one CTA's half (M = 256:
    128 rows, the "4x1" atom; M = 128: 64 rows, the "2x2" atom) is where the
    emulator puts it and where gg::umma::pair_d_lane / _column say."""
    cell = lib.gg_emu_sm100_pair_d_cell
    cell.argtypes = (ctypes.c_int,) * 4 + (ctypes.POINTER(ctypes.c_int),) * 2
    lib.oracle_pair_d_lane.restype = lib.oracle_pair_d_column.restype = ctypes.c_uint
    lane, column = ctypes.c_int(), ctypes.c_int()
    assert len(cute["tmem2"]) == 6
    for mh, n, *addrs in cute["tmem2"]:
        mh, n = int(mh), int(n)
        m_total = 2 * mh
        addrs = [int(x) for x in addrs]
        assert len(addrs) == mh * n
        for i, addr in enumerate(addrs):
            m, col = i % mh, i // mh
            want = (addr >> 16, addr & 0xFFFF)
            assert cell(m_total, n, m, col, ctypes.byref(lane), ctypes.byref(column)) == 0
            assert (lane.value, column.value) == want, (m_total, n, m, col)
            assert (lib.oracle_pair_d_lane(m_total, n, m, col), lib.oracle_pair_d_column(m_total, n, col)) == want
