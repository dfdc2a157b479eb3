"""The sm_100a body's epilogue staging through shared memory (issue 30;
docs/cuda-sm100.md, "The epilogue's shared memory"): each epilogue thread
stores its row of a 32-column chunk as 16-byte pieces into its warp's
padded slice, and each 8 lanes read one piece of 8 rows back, 16 bytes a
lane, for coalesced global stores (the weight-only body's tiles call the
same store_chunk). The emulator's counters (a memory-checked
launch of a generated kernel on an emulated sm_100a device) show both sides
at the minimum a 32-bank shared memory allows: the epilogue's shared stores
and loads need one wavefront per 128 bytes (no bank conflict), and its
global stores one 32-byte sector per 32 bytes. The figures are worked out
from the problem's shape, never read from the code under test; each run
also matches the NumPy reference (fresh random inputs, outputs poisoned),
whole tiles (the 16-byte path) and ragged ones (n not a multiple of 8: the
warp stores a row at a time). A planted regression, the former scalar
stores of a thread's row, shows the counters catch a 4-way conflict. nvcc
for sm_100a: the entries' SASS has the 16-byte shared and global accesses
(STS.128, LDS.128, STG.E.128), no 16-bit shared store, and no spills.

The unmarked case is one of each kind; the rest are `slow`."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sm100_helpers import SM100, Sm100Spec

from gemmgen.backends import cuda as cuda_backend
from gemmgen.cases import Case
from gemmgen.harness import nvcc
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.ir import Activation
from gemmgen.reference import compare, reference
from gemmgen.runtime import RUNTIME_INCLUDE_DIR

SPEC = """
target cuda {
  archs sm_100a
}

defaults {
  lhs bf16 [m, k]
  tile m=128 n=128 k=64
  backends cuda
  mma tcgen05
}

kernel eb_bf16 {
  op dense
  rhs bf16 [n, k]
  out bf16
  bias bf16 [n]
  epilogue gelu alpha=0.75
}

kernel eb_f32 {
  op dense
  rhs bf16 [n, k]
  out f32
  bias f32 [n]
  epilogue relu
}

kernel eb_gateup {
  op grouped
  rhs bf16 [g, n, k]
  out f16
  epilogue silu_mul
}

kernel eb_mx {
  op dense
  lhs e4m3 [m, k]
  rhs e4m3 [n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  tile m=128 n=128 k=128
}

# Weight-only (gg_gemm_sm100_mixed.cuh), whose tiles share store_chunk.
kernel eb_w8a16 {
  op dense
  rhs int8 [n, k]
  out bf16
  rhs_scale per_channel
}

kernel eb_masked {
  op grouped
  lhs e4m3 [g, m, k]
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=128 f32
  rhs_scale block n=128 k=128 f32
  tile m=128 n=128 k=128
}
"""

BODY = Sm100Spec("sm100epibanks", SPEC)
kernel, launcher = BODY.kernel, BODY.launcher


def seed() -> int:
    return int(np.random.default_rng().integers(1 << 30))


def store_chunk_lines(text: str) -> range:
    """The lines of gg_gemm_sm100_epilogue.cuh's store_chunk (the epilogue's shared
    and global stores), from its signature to its closing brace."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "void store_chunk(" in line)
    last = next(i for i in range(first, len(lines)) if lines[i] == "}")
    return range(first + 1, last + 2)  # 1-based


def epilogue_totals(counters, lines: range, header: str = "gg_gemm_sm100_epilogue.cuh") -> dict:
    """Per op, (requests, wavefronts or sectors, their ideal, bytes) summed
    over the epilogue's sites (store_chunk's lines of `header`)."""
    out = {}
    for s in counters.sites:
        m = re.fullmatch(rf"{re.escape(header)}:(\d+)", s.where)
        if not m or int(m.group(1)) not in lines:
            continue
        global_op = s.op.endswith(".global")
        t = out.setdefault(s.op, [0, 0, 0, 0])
        t[0] += s.requests
        t[1] += s.sectors if global_op else s.wavefronts
        t[2] += s.ideal_sectors if global_op else s.ideal_wavefronts
        t[3] += s.bytes
    return {op: tuple(t) for op, t in out.items()}


def run_counted(name: str, case: Case, *, modules=None, source_name=None):
    """One launch of `name` on `case` with the counters: the GEMM's
    LaunchCounters, after checking the output against the reference."""
    k = kernel(name)
    inputs = case.inputs(k, seed())
    path = BODY.folder / f"{name}.cu"
    counted: list = []
    actual = run_launcher(launcher(name), "" if modules else path.read_text(),
                          source_name or str(path), inputs, modules=modules or BODY.modules,
                          arch=SM100, num_sms=2, counters=counted)
    result = compare(actual, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()}:\n{result.detail}"
    assert counted[-1].kernel.endswith("_sm100"), counted[-1].kernel  # the tcgen05 body ran
    return counted[-1]


def out_bytes(name: str) -> int:
    return kernel(name).out.bits // 8


LINES = store_chunk_lines((RUNTIME_INCLUDE_DIR / "gg_gemm_sm100_epilogue.cuh").read_text())


def check_whole_tiles(name: str, case: Case, rows: int):
    """Whole tiles of a 16-byte aligned n, `rows` rows of out in all (every
    one stored): every shared access of the epilogue at one wavefront per
    128 bytes, the global stores at one sector per 32 bytes. Returns the
    launch's counters."""
    silu = kernel(name).epilogue.activation is Activation.SILU_MUL
    n_out = case.n // 2 if silu else case.n
    c = run_counted(name, case)
    t = epilogue_totals(c, LINES)
    staged = rows * n_out * out_bytes(name)  # every row of every tile passes the slice
    st, ld, gl = t["st.shared"], t["ld.shared"], t["st.global"]
    assert st[3] == ld[3] == staged, t
    assert st[1] == st[2] == staged // 128, ("st.shared", st)  # no bank conflict
    assert ld[1] == ld[2] == staged // 128, ("ld.shared", ld)
    assert gl[3] == staged, t
    assert gl[1] == gl[2] == gl[3] // 32, ("st.global", gl)  # coalesced, whole sectors
    # 16 bytes a lane: a warp-wide request moves 512 bytes.
    assert st[0] == ld[0] == gl[0] == staged // 512, t
    return c


def test_bf16_epilogue_is_free_of_bank_conflicts():
    c = check_whole_tiles("eb_bf16", Case("whole", 256, 256, 128), rows=256)
    assert c.total("st.shared").conflicts == 0  # nor anywhere else in the kernel
    # Ragged: m, n and k partial; n % 8 != 0 takes the row-at-a-time stores,
    # whose shared loads are conflict-free too (32 lanes, one row).
    c = run_counted("eb_bf16", Case("ragged", 200, 250, 104))
    t = epilogue_totals(c, LINES)
    for op in ("st.shared", "ld.shared"):
        assert t[op][0] > 0 and t[op][1] == t[op][2], (op, t[op])


@pytest.mark.slow
@pytest.mark.parametrize("name,case,rows", [
    ("eb_f32", Case("whole", 256, 256, 128), 256),
    ("eb_gateup", Case("whole", 256, 512, 128, group_sizes=(128, 128)), 256),
    ("eb_mx", Case("whole", 256, 256, 256), 256),
    ("eb_w8a16", Case("whole", 256, 256, 128), 256),
    # Rows past a count are stored as zeros: all 2 x 256 rows of out.
    ("eb_masked", Case("masked", 256, 256, 256, masked_m=(256, 100)), 512),
])
def test_epilogues_are_free_of_bank_conflicts(name, case, rows):
    check_whole_tiles(name, case, rows)


@pytest.mark.slow
@pytest.mark.parametrize("name,case", [
    ("eb_f32", Case("ragged", 130, 200, 72)),
    ("eb_gateup", Case("shard", 260, 300, 136, group_sizes=(60, 200, 0, 100), group_offset=1,
                       g_local=2, existing_out=True)),
    ("eb_mx", Case("ragged", 1, 136, 160)),
    ("eb_w8a16", Case("ragged", 130, 202, 80)),
    ("eb_masked", Case("masked", 150, 136, 288, masked_m=(150, 0, 17, 128))),
])
def test_ragged_epilogues_match_the_reference_without_conflicts(name, case):
    t = epilogue_totals(run_counted(name, case), LINES)
    for op in ("st.shared", "ld.shared"):
        assert t[op][0] > 0 and t[op][1] == t[op][2], (op, t[op])


# The former epilogue's shared stores: one out_t at a time along the
# thread's row, 80 bytes apart between lanes (4-way conflicts for bf16).
STORE = ("    *reinterpret_cast<uint4*>(slice + lane * kSliceRow + 16 * p) =\n"
         "        make_uint4(word[0], word[1], word[2], word[3]);")
SCALAR_STORES = [(STORE, (
    "    GG_UNROLL\n"
    "    for (int h = 0; h < 8; ++h)\n"
    "      *reinterpret_cast<unsigned short*>(slice + lane * kSliceRow + 16 * p + 2 * h) =\n"
    "          static_cast<unsigned short>(word[h / 2] >> (16 * (h % 2)));"))]


@pytest.mark.slow
def test_the_counters_catch_scalar_row_stores():
    modules, key = BODY.planted("eb_bf16", SCALAR_STORES)
    case = Case("whole", 256, 256, 128)
    st = run_counted("eb_bf16", case, modules=modules, source_name=key).total("st.shared")
    # 2-byte stores, 32 lanes 80 bytes apart: 8 bank groups for 32 lanes,
    # 4 wavefronts where 1 would do, 64 bytes a request.
    assert st.conflicts == 3 * (case.m * case.n * 2 // 64), st


needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(
    nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
@pytest.mark.slow
@pytest.mark.parametrize("name", ["eb_bf16", "eb_f32", "eb_gateup", "eb_masked"])
def test_the_sass_moves_16_bytes_a_lane_without_spills(name):
    lp = cuda_backend.plan(kernel(name), BODY.spec)
    source = (BODY.folder / f"{name}.cu").read_text()
    result = nvcc.compile_check(source, SM100, name_for_errors=f"{name}.cu",
                                include_dirs=(BODY.folder,), extra_flags=("-Werror", "all-warnings"))
    text = nvcc.sass_text(result.cubin)
    for v in lp.variants:
        entry = v.path("tcgen05").steps[-1].entry
        usage = result.kernels[entry]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
        ops = [i.split()[0] for op in ("STS", "LDS", "STG") for i in nvcc.sass_instructions(text, entry, op)]
        for wide in ("STS.128", "LDS.128", "STG.E.128"):
            assert wide in ops, (entry, wide, sorted(set(ops)))
        assert "STS.U16" not in ops, entry  # the element-by-element stores are gone
