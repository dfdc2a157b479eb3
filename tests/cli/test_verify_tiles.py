"""`gemmgen verify` covers every tile of a LUT (gemmgen.cases): each
`tile_rule` and the default tile gets a case whose shape picks it, the table
says which tile each case ran, and cases stay small when the spec fixes
large dims or a rule needs large ones (sizes measured with
cases.case_work, not with a clock)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gemmgen import verify
from gemmgen.build import render_spec
from gemmgen.cases import WORK_BUDGET, case_work, lut_entry, standard_cases, tile_label
from gemmgen.cases.case import case_groups
from gemmgen.cli import main
from gemmgen.ir import Cmp
from gemmgen.parse import parse
from gemmgen.validate import validate

REPO = Path(__file__).resolve().parents[2]

LUT3 = """\
target cuda {
  archs sm_80 sm_90a
}

# Three rules and the default: four tiles.
kernel dense_lut {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=128 n=128 k=32
  tile_rule m<=64 -> m=64 n=128 k=32
  tile_rule k>=512 -> m=128 n=64 k=64
  tile_rule n>=1024 -> m=128 n=256 k=32
  stages 3
  backends cuda
}

kernel grouped_lut {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, n, k]
  out bf16
  tile m=128 n=128 k=32
  tile_rule m<=64 -> m=64 n=128 k=32
  tile_rule m>1000 k>=1024 -> m=128 n=128 k=64
  tile_rule n<=128 -> m=64 n=64 k=32
  backends cuda
}

# A rule only a large problem reaches, and large static dims.
kernel dense_big_rule {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=128 n=128 k=32
  tile_rule m>=4096 n>=4096 -> m=128 n=256 k=32
  backends cuda
}

kernel dense_static {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=128 n=128 k=64
  dims n=4096 k=7168
  backends cuda
}

# The second rule can never apply: the first takes every m it would.
kernel dense_shadowed {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=128 n=128 k=32
  tile_rule m<=64 -> m=64 n=128 k=32
  tile_rule m<=32 -> m=64 n=64 k=32
  backends cuda
}
"""


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    root = tmp_path_factory.mktemp("lut")
    (root / "specs").mkdir()
    (root / "specs" / "lut.gemm").write_text(LUT3)
    return render_spec(root / "specs" / "lut.gemm").spec


def entries(kernel) -> set[int]:
    return {lut_entry(kernel, c) for c in standard_cases(kernel)}


@pytest.mark.parametrize("name", ["dense_lut", "grouped_lut", "dense_big_rule"])
def test_every_tile_of_the_lut_gets_a_case(spec, name):
    kernel = spec.kernel(name)
    assert entries(kernel) == set(range(len(kernel.tile_rules) + 1))
    for case in standard_cases(kernel):
        tile = kernel.tile_for(case.m, case.n, case.k, case_groups(case))
        assert tile_label(kernel, case).startswith(str(tile))


def test_cases_respect_each_rules_conditions(spec):
    kernel = spec.kernel("grouped_lut")
    by_entry = {lut_entry(kernel, c): c for c in standard_cases(kernel)}
    assert by_entry[0].m <= 64
    assert by_entry[1].m > 1000 and by_entry[1].k >= 1024 and by_entry[1].m > 64
    assert by_entry[2].n <= 128 and not by_entry[2].m <= 64 and not (by_entry[2].m > 1000 and by_entry[2].k >= 1024)
    # Grouped: the rows the groups own stay few when the rule wants m > 1000.
    assert sum(by_entry[1].group_sizes) < 200


def test_a_large_rule_gets_its_smallest_shape(spec):
    kernel = spec.kernel("dense_big_rule")
    (big,) = [c for c in standard_cases(kernel) if lut_entry(kernel, c) == 0]
    assert (big.m, big.n) == (4096, 4096)
    # Nothing smaller picks that tile: one k tile of 4096 x 4096.
    assert case_work(kernel, big) == 4096 * 4096 * 32


def test_large_static_dims_run_one_row_of_tiles(spec):
    """n and k are fixed; m is the only free dim: every case shrinks to one
    m tile (the old cases ran two), the least work any shape can have."""
    kernel = spec.kernel("dense_static")
    one_row = 128 * 4096 * 7168
    cases = standard_cases(kernel)
    assert cases and all(case_work(kernel, c) == one_row for c in cases)
    assert all(c.m < 128 for c in cases)
    assert any(c.m > 3 for c in cases), "a partial tile with more than a decode's rows"


def test_specs_cases_fit_the_budget():
    """Every case of specs/ fits the budget, unless its tile forces it over:
    a TPU-sized tile (1024 x 1024 x 512) holds more work than the budget once
    a case has a partial tile along each dim (two tiles of each), and then
    the case stays near that smallest shape (K: two whole tiles and a partial
    one)."""
    for stem in ("dense", "moe"):
        for spec_kernel in render_spec(REPO / "specs" / f"{stem}.gemm").spec.kernels:
            for kernel in (spec_kernel.for_backend(b) for b in spec_kernel.backends):
                for case in standard_cases(kernel):
                    if case_work(kernel, case) <= WORK_BUDGET:
                        continue
                    t = kernel.tile_for(case.m, case.n, case.k, case_groups(case))
                    # A rule that fixes n or k (`n==14336`, as the tuned
                    # rules do) forces its cases to that n or k.
                    entry = lut_entry(kernel, case)
                    fixed = {c.dim for c in (kernel.tile_rules[entry].conds
                                             if entry < len(kernel.tile_rules) else ())
                             if c.cmp is Cmp.EQ}
                    if kernel.static_n is not None or kernel.static_k is not None:
                        fixed |= {"n", "k"}  # `dims n= k=` fix every case's n and k too
                    if fixed & {"n", "k"}:
                        continue
                    groups = len(case.masked_m) if case.masked_m else 1  # masked: g x cap rows
                    assert 8 * t.m * t.n * t.k * groups >= WORK_BUDGET, (kernel.name, case)
                    assert case.m <= 3 * t.m and case.n <= 3 * t.n and case.k <= 3 * t.k, (
                        kernel.name, case)


def test_everything_spec_cases_are_over_budget_only_where_the_spec_forces_it():
    spec = validate(parse((REPO / "tests" / "specs" / "everything.gemm").read_text(), "everything.gemm"))
    over = 0
    views = [k.for_backend(b) for k in spec.kernels for b in k.backends]
    for kernel in views:
        for case in standard_cases(kernel):
            if case_work(kernel, case) <= WORK_BUDGET:
                continue
            over += 1
            t = kernel.tile_for(case.m, case.n, case.k, case_groups(case))
            entry = lut_entry(kernel, case)
            forced_by_rule = entry < len(kernel.tile_rules) and any(
                c.cmp in (Cmp.GE, Cmp.GT) for c in kernel.tile_rules[entry].conds)
            forced_by_dims = (kernel.static_n or kernel.static_k) and case.m < t.m
            assert forced_by_rule or forced_by_dims, (kernel.name, case.describe())
    assert over  # dense_all's dims n=4096 k=7168, moe_int8_rhs's m > 4096 k >= 4096


def test_an_unreachable_rule_is_named(spec):
    kernel = spec.kernel("dense_shadowed")
    assert entries(kernel) == {0, 2}
    assert verify._uncovered_tiles(kernel) == [
        "tile_rule 2 (m <= 32 -> 64x64x32) was not run: no shape the kernel accepts picks it"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "lut.gemm").write_text(LUT3)
    shutil.copytree(REPO / "specs", tmp_path / "repo_specs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_verify_runs_every_tile_and_prints_it(project, capsys):
    code = main(["verify", "specs/lut.gemm", "--kernel", "dense_lut", "--backend", "cuda-emu"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[0].split()[:5] == ["kernel", "backend", "case", "shapes", "tile"]
    rows = [line for line in out.splitlines() if line.startswith("dense_lut ")]
    tiles = {t for t in ("128x128x32 (default)", "64x128x32 (m <= 64)", "128x64x64 (k >= 512)",
                         "128x256x32 (n >= 1024)") if any(t in r for r in rows)}
    assert len(tiles) == 4, out
    assert all(r.rstrip().endswith("pass") for r in rows) and len(rows) >= 4
    assert "cuda-emu: emulated sm_80 (the declared arch with the least shared memory)" in out


def test_verify_emulates_the_arch_it_is_told(project, capsys):
    """moe_w4a16_grouped_gemm needs 172032 bytes of shared memory: fine on
    the spec's sm_90a, refused on an sm_89 (101376)."""
    args = ["verify", "repo_specs/moe.gemm", "--kernel", "moe_w4a16_grouped_gemm", "--backend", "cuda-emu"]
    code = main([*args, "--cuda-arch", "sm_89"])
    out = capsys.readouterr().out
    assert code == 1
    assert "cuda-emu: emulated sm_89 (--cuda-arch)" in out
    assert ("cudaFuncSetAttribute(moe_w4a16_grouped_gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, 172032): "
            "over the opt-in limit of 101376 bytes per block of the emulated sm_89") in out


def test_work_estimate_counts_grouped_work_items():
    """The estimate is the kernel's own count: one m tile per (local group,
    m tile it touches)."""
    from gemmgen.cases import Case

    spec = render_spec(REPO / "specs" / "moe.gemm").spec
    kernel = spec.kernel("moe_bf16_grouped_gemm")  # 128x128x32
    case = Case("c", m=300, n=256, k=64, group_sizes=(0, 100, 0, 150, 50))
    # group 1: rows 0..99 (1 tile); group 3: 100..249 (tiles 0, 1); group 4: 250..299 (tiles 1, 2)
    assert case_work(kernel, case) == (1 + 2 + 2) * 128 * 256 * 64
    sharded = Case("c", m=300, n=256, k=64, group_sizes=(0, 100, 0, 150, 50), group_offset=1, g_local=2)
    assert case_work(kernel, sharded) == 1 * 128 * 256 * 64
