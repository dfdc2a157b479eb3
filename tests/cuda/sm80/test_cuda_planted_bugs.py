"""Planted bugs in generated kernels: one mutant per class the emulator's
checks exist for (docs/cuda-emulation.md), each caught in every mode (one
worker, two workers, the reverse warp schedule) with the same verdict, next
to the unmutated kernel, which passes in the same modes with no report.

- a race between blocks: a grouped GEMM whose blocks also store the rows of
  later groups (the upper row bound is m instead of the group's end). The
  later group's block writes the right values over them, so with one worker
  running the blocks in order the output is right;
- an uninitialised accumulator: the tile GEMM without `acc = 0`;
- a misaligned access: quantize storing its 8-byte uint2 slices 4 bytes on;
- bank conflicts: the tile GEMM with unpadded A rows in shared memory, a
  pure performance bug (the values stay right) that only the counters see.

Each mutation must apply exactly once, so a template change that removes
the mutated line fails the test instead of making it vacuous. The tile GEMM's
body is shared C++ (runtime/cuda/gg_gemm.cuh) that the generated .cu only
configures, so its mutants are compiled against a mutated copy of the runtime
headers (cuda_helpers.with_mutated_runtime).
"""

from __future__ import annotations

import functools
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from cuda_helpers import with_mutated_runtime

from gemmgen.build import render_spec
from gemmgen.cases import Case
from gemmgen.reference import compare, reference
from gemmgen.harness.cuda_emu import EmuMemoryError, EmuRaceError
from gemmgen.harness.runner import load_generated_module
from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR
from gemmgen.harness.verify_cuda import run_launcher

REPO = Path(__file__).resolve().parents[3]
MODES = [("run-ahead", 1), ("run-ahead", 2), ("reverse", 2)]
MODE_IDS = ["1-worker", "2-workers", "reverse"]


@functools.cache
def generated(stem: str) -> tuple[object, Path]:
    rendered = render_spec(REPO / "specs" / f"{stem}.gemm")
    folder = Path(tempfile.mkdtemp(prefix=f"gemmgen-planted-{stem}-"))
    for rel, text in rendered.files.items():
        if rel.parts[0] == "cuda":
            (folder / rel.name).write_text(text)
    return rendered.spec, folder


def mutate(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, f"the mutation must apply exactly once, found {source.count(old)}: {old!r}"
    return source.replace(old, new)



def run(stem: str, name: str, source: str, case: Case, mode, **kw):
    spec, folder = generated(stem)
    kernel = spec.kernel(name)
    launcher = load_generated_module(folder / f"{name}.py", f"planted_{stem}_{name}")
    inputs = case.inputs(kernel, 0)
    schedule, workers = mode
    # The mma.sync path (sm=0) even where the kernel has a Hopper path: the
    # bugs are planted in gg_gemm.cuh's body and the generated mma.sync
    # entries (the Hopper body's: tests/cuda/sm90/test_cuda_sm90_generated.py).
    actual = run_launcher(launcher, source, f"{stem}/cuda/{name}.cu", inputs, schedule=schedule,
                          workers=workers, sm=0, **kw)
    return actual, compare(actual, reference(kernel, **inputs), kernel, k=case.k, inputs=inputs)


def original(stem: str, name: str) -> str:
    return (generated(stem)[1] / f"{name}.cu").read_text()


# ---------------------------------------------------------------------------
# A race between blocks.

# Group 0 owns rows 0-29 and group 1 rows 30-99: both items are m tile 0, so
# blocks (0,0,0) (group 0) and (0,1,0) (group 1) share the tile's rows.
RACE_CASE = Case("two_groups_one_tile", m=100, n=128, k=64, group_sizes=(30, 70))
ROW_BOUND = "gl, lo > m0 ? lo : m0, hi, lhs_global, rhs_global, rhs_zero);"


def race_mutant() -> str:
    return with_mutated_runtime(original("moe", "moe_bf16_grouped_gemm"), "gg_gemm.cuh", ROW_BOUND,
                                "gl, lo > m0 ? lo : m0, m, lhs_global, rhs_global, rhs_zero);")


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_blocks_storing_another_groups_rows_race(mode):
    _, result = run("moe", "moe_bf16_grouped_gemm", original("moe", "moe_bf16_grouped_gemm"), RACE_CASE, mode)
    assert result.passed, result.detail
    # The first byte both write: row 30, column 0 of the bf16 [100, 128] out,
    # 30 * 128 * 2 = 7680 (out is the GEMM's argument #2).
    expected = ("race between blocks in kernel moe_bf16_grouped_gemm: byte offset 7680 of argument #2 `out` "
                "(25600 bytes) was written by block (0,0,0) and by block (0,1,0) in the same launch")
    with pytest.raises(EmuRaceError, match=re.escape(expected)):
        run("moe", "moe_bf16_grouped_gemm", race_mutant(), RACE_CASE, mode)


@pytest.mark.slow
def test_the_race_passes_unchecked_with_one_worker():
    # Why the checker is needed: without it, one worker runs the blocks in
    # order and the later group's block repairs the rows.
    _, result = run("moe", "moe_bf16_grouped_gemm", race_mutant(), RACE_CASE, ("run-ahead", 1), memcheck=False)
    assert result.passed, result.detail


# ---------------------------------------------------------------------------
# An uninitialised accumulator.

ONE_TILE = Case("one_tile", m=16, n=128, k=64)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_uninitialised_accumulator_fails(mode):
    source = original("dense", "dense_gemm_bf16")
    _, result = run("dense", "dense_gemm_bf16", source, ONE_TILE, mode)
    assert result.passed, result.detail
    mutant = with_mutated_runtime(source, "gg_gemm.cuh",
                                  "acc[i][j][e] = 0;\n        if constexpr (kPromote) {",
                                  "if constexpr (kPromote) {")
    actual, result = run("dense", "dense_gemm_bf16", mutant, ONE_TILE, mode)
    assert not result.passed
    # Every output holds the poison: the accumulators start at GCC's 0xFE
    # pattern (-1.7e38 in f32), which no product of the inputs shifts.
    values = np.asarray(actual, np.float64)
    assert (np.isnan(values) | (np.abs(values) > 1e37)).all()


# ---------------------------------------------------------------------------
# A misaligned access.

QUANT = "per_token_group_quant_fp8_out_scale_f32"
QUANT_CASE = Case("rows", m=37, n=384, k=384)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_misaligned_uint2_store_in_quantize_is_reported(mode):
    source = original("dense", QUANT)
    _, result = run("dense", QUANT, source, QUANT_CASE, mode)
    assert result.passed, result.detail
    mutant = mutate(source, "*reinterpret_cast<uint2*>(dst) = v;", "*reinterpret_cast<uint2*>(dst + 4) = v;")
    with pytest.raises(EmuMemoryError) as e:
        run("dense", QUANT, mutant, QUANT_CASE, mode)
    m = re.search(r"misaligned 8-byte store at byte offset (\d+) of argument #1 `out` \(14208 bytes\) "
                  r"\(" + QUANT + r"\.cu:(\d+)\)", str(e.value))
    assert m, str(e.value)
    assert int(m.group(1)) % 8 == 4
    assert "reinterpret_cast<uint2*>(dst + 4)" in mutant.splitlines()[int(m.group(2)) - 1]
    assert f"in kernel {QUANT}, block" in str(e.value)


# ---------------------------------------------------------------------------
# Bank conflicts (counters).

GEMM_CASE = Case("one_block", m=128, n=128, k=64)


def ldmatrix_sites(counters) -> dict[str, tuple[int, int, int]]:
    """(requests, wavefronts, ideal) of the A and B ldmatrix sites, found by
    their lines in the shared tile GEMM body."""
    lines = (RUNTIME_INCLUDE_DIR / "gg_gemm.cuh").read_text().splitlines()
    line_of = {
        "A": 1 + next(i for i, t in enumerate(lines) if "gg::ldmatrix_x4(a[i]" in t),
        "B": 1 + next(i for i, t in enumerate(lines) if "gg::ldmatrix_x4(r, b_tile" in t),
    }
    out = {}
    for name, line in line_of.items():
        sites = [s for c in counters for s in c.sites if s.op == "ldmatrix" and s.where.endswith(f"gg_gemm.cuh:{line}")]
        assert sites, f"no ldmatrix counted at line {line}"
        out[name] = tuple(sum(getattr(s, f) for s in sites) for f in ("requests", "wavefronts", "ideal_wavefronts"))
    return out


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_unpadded_a_tile_shows_ldmatrix_bank_conflicts(mode):
    source = original("dense", "dense_gemm_bf16")
    counters: list = []
    _, result = run("dense", "dense_gemm_bf16", source, GEMM_CASE, mode, counters=counters)
    assert result.passed, result.detail
    padded = ldmatrix_sites(counters)
    # 80-byte rows: the eight rows of a matrix cover all 32 banks once.
    assert padded["A"][1] == padded["A"][2] and padded["B"][1] == padded["B"][2]
    # Unpadded A rows: the tile's numbers, and the rule check_tile holds them to.
    mutant = mutate(source, "kAStride = 80, kAStage = 10240;", "kAStride = 64, kAStage = 8192;")
    mutant = with_mutated_runtime(mutant, "gg_gemm_config.cuh", "T::kAStride != kRowBytes + 16",
                                  "T::kAStride != kRowBytes")
    counters = []
    _, result = run("dense", "dense_gemm_bf16", mutant, GEMM_CASE, mode, counters=counters)
    assert result.passed, result.detail  # right values: only the cost changed
    unpadded = ldmatrix_sites(counters)
    # 64-byte rows: rows r and r + 2 start in the same bank, so each 8-row
    # matrix needs 4 wavefronts instead of 1; B keeps its padding.
    assert unpadded["A"] == (padded["A"][0], 4 * padded["A"][2], padded["A"][2])
    assert unpadded["B"] == padded["B"]
