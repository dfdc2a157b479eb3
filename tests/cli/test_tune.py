"""`gemmgen tune`: the candidates (legal, within VMEM, pruned with the
baselines kept), the cost model, the winners with a fake timer (no churn
within the noise), rule synthesis, the rewrite of the tuned block, and one
end-to-end run in Pallas interpret mode."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from gemmgen import ir
from gemmgen.backends.pallas import TPU_VMEM, vmem_bytes
from gemmgen.build import load
from gemmgen.cli import main
from gemmgen.devices import lookup
from gemmgen.tune import candidates as cand
from gemmgen.tune import rewrite, session, shapes, winners
from gemmgen.tune.shapes import Shape
from gemmgen.tune.timing import Measurement, Provenance

V5E = lookup("v5e")
PALLAS = ir.Backend.PALLAS_TPU

SPEC = """\
# A small MoE spec. This comment, and every other byte, must survive tune.
target pallas_tpu {
  tpu v5e
}

kernel gmm_small {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, n, k]
  out f32
  tile m=128 n=128 k=128
  backends pallas_tpu
}

kernel dense_small {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out f32
  tile m=128 n=128 k=128
  backends pallas_tpu
}

kernel w8a8_block {
  op dense
  lhs e4m3 [m, k]
  rhs e4m3 [n, k]
  out bf16
  lhs_scale per_token_group k=128 f32
  rhs_scale block n=128 k=128 f32
  tile m=128 n=128 k=128
  backends pallas_tpu
}

kernel w4_packed {
  op dense
  lhs int4 packed [m, k]
  rhs int4 packed [n, k]
  out f32
  tile m=128 n=256 k=256
  backends pallas_tpu
}
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    (tmp_path / "specs").mkdir()
    path = tmp_path / "specs" / "small.gemm"
    path.write_text(SPEC)
    return path


@pytest.fixture
def spec(spec_file: Path) -> ir.Spec:
    return load(spec_file)[0]


def view(spec: ir.Spec, name: str) -> ir.Kernel:
    return spec.kernel(name).for_backend(PALLAS)


# -- shapes -------------------------------------------------------------------


def test_shapes_parse_and_errors():
    assert shapes.parse_shapes("16384,1536,2048,128; 128,1536,2048") == [
        Shape(16384, 1536, 2048, 128), Shape(128, 1536, 2048, 0)]
    for bad, words in (("1,2", "expected m,n,k"), ("a,2,3", "integers"), ("0,128,128", r"in \[1, 2\^31"),
                       ("", "no shapes")):
        with pytest.raises(shapes.ShapeError, match=words):
            shapes.parse_shapes(bad)
    with pytest.raises(shapes.ShapeError, match="did you mean 'mixtral'"):
        shapes.preset("mixtrl")
    sizes = shapes.group_sizes(Shape(16384, 1536, 2048, 128))
    assert sum(sizes) == 16384 and len(sizes) == 128
    assert max(sizes) > 1.5 * 128 > 0.75 * 128 > min(sizes)  # skewed, not uniform
    assert sizes == shapes.group_sizes(Shape(16384, 1536, 2048, 128))  # deterministic


# -- candidates ---------------------------------------------------------------


def test_every_candidate_is_legal_and_within_vmem(spec):
    """Every enumerated tile passes the validator's tile rule and the Pallas
    checks; rows are whole sublane tiles of 32 (64 for packed 4-bit lhs),
    lanes 128 (256 along packed dims); VMEM within the generation's budget,
    so the grouped 1024 x 2048 x 2048 tile (64 MiB with existing_out) is a v5e
    candidate but not a v7x one."""
    shape = Shape(8192, 4096, 4096)
    for name, m_align, k_align in (("dense_small", 32, 128), ("w8a8_block", 32, 128),
                                   ("w4_packed", 64, 256)):
        k = view(spec, name)
        for device in ("v5e", "v7x"):
            tiles = cand.legal_tiles(k, spec, shape, PALLAS, lookup(device))
            assert tiles, (name, device)
            usable = TPU_VMEM[device].usable
            for t in tiles:
                assert t.m % m_align == 0 and t.n % 128 == 0 and t.k % k_align == 0, t
                assert vmem_bytes(k, t) <= usable, (name, device, t)
                assert not cand.problems(cand.with_tile(k, PALLAS, t),
                                         cand.spec_for(spec, lookup(device)), PALLAS)
    big = ir.Tile(1024, 2048, 2048)
    gmm, grouped = view(spec, "gmm_small"), Shape(8192, 4096, 4096, 8)
    assert TPU_VMEM["v7x"].usable < vmem_bytes(gmm, big) <= TPU_VMEM["v5e"].usable
    assert big in cand.legal_tiles(gmm, spec, grouped, PALLAS, V5E)
    assert big not in cand.legal_tiles(gmm, spec, grouped, PALLAS, lookup("v7x"))
    # DeepSeek block scales of k=128: a Pallas K tile divides the block or
    # holds whole blocks (the kernel loops over them), never a part of one.
    ks = {t.k for t in cand.legal_tiles(view(spec, "w8a8_block"), spec, shape, PALLAS, V5E)}
    assert {128, 512} <= ks
    assert all(k % 128 == 0 for k in ks)


def test_tiles_clamp_to_small_shapes(spec):
    """No tile much larger than the shape: a dim's whole extent is one candidate."""
    tiles = cand.legal_tiles(view(spec, "dense_small"), spec, Shape(100, 1536, 384), PALLAS, V5E)
    assert {t.m for t in tiles} == {32, 64, 128}
    assert {t.n for t in tiles} == {128, 256, 512, 1024, 1536}
    assert {t.k for t in tiles} == {128, 256, 384}


def test_pruning_keeps_the_best_predicted_and_the_baselines(spec):
    k = view(spec, "gmm_small")
    shape = Shape(16384, 1536, 2048, 128)
    lut = k.tile_for(shape.m, shape.n, shape.k)
    found = cand.candidates(k, spec, shape, PALLAS, V5E, max_candidates=3,
                            baselines={"LUT": lut, "tuned": ir.Tile(256, 512, 512)})
    assert len(found) == 5
    ranked = sorted(cand.candidates(k, spec, shape, PALLAS, V5E, max_candidates=1000),
                    key=lambda c: c.predicted_s)
    assert [c.tile for c in found[:3]] == [c.tile for c in ranked[:3]]
    assert (found[3].tile, found[3].why) == (lut, "LUT")
    assert (found[4].tile, found[4].why) == (ir.Tile(256, 512, 512), "tuned")
    assert found[3].predicted_s > found[2].predicted_s


def test_cost_model_pads_each_group_to_the_m_tile(spec):
    """Grouped: each group's rows are padded to tm (a tile two groups share
    is visited by both), so a shape of many small groups favours small m tiles."""
    k = view(spec, "gmm_small")
    shape = Shape(1000, 512, 512, 4)
    sizes = shapes.group_sizes(shape)
    starts = [sum(sizes[:i]) for i in range(4)]
    for tm in (32, 128, 512):
        expect = sum((s + c - 1) // tm - s // tm + 1 for s, c in zip(starts, sizes) if c)
        assert cand.work_items(k, shape, tm) == expect
        steps, seconds = cand.predict(k, shape, ir.Tile(tm, 512, 512), V5E)
        assert steps == expect
        flops = 2 * expect * tm * 512 * 512
        moved = 2 * 1000 * 512 + 2 * 512 * 512 * expect + 4 * 1000 * 512
        assert math.isclose(seconds, steps * 0.35e-6 + flops / 197e12 + moved / 819e9)
    many = Shape(16384, 1536, 2048, 128)  # 128 rows per group on average
    assert cand.predict(k, many, ir.Tile(128, 1536, 2048), V5E)[1] < \
        cand.predict(k, many, ir.Tile(1024, 1536, 2048), V5E)[1]


# -- winners, no churn, synthesis (fake timer) ---------------------------------


def measured(times: dict[tuple[int, int, int], float], noise: float = 0.01,
             failing: tuple = ()) -> list[winners.Measured]:
    out = []
    for (m, n, k), t in times.items():
        c = cand.Candidate(ir.Tile(m, n, k), 0, 1, 0.0)
        out.append(winners.Measured(c, Measurement(None, error="boom") if (m, n, k) in failing
                                    else Measurement(t, noise)))
    return out


def test_winner_is_the_fastest_that_passes_the_reference_check():
    ms = measured({(128, 128, 128): 2.0, (256, 128, 128): 1.0, (512, 128, 128): 1.5,
                   (64, 128, 128): 0.5}, failing=((64, 128, 128),))
    r = winners.choose("x", Shape(1024, 128, 128), ms,
                       lambda t: "mismatch" if t.m == 256 else "", previous=None)
    assert r.winner.candidate.tile == ir.Tile(512, 128, 128)
    assert r.runner_up.candidate.tile == ir.Tile(128, 128, 128)
    by_tile = {m.candidate.tile.m: m for m in r.measured}
    assert by_tile[256].check == "mismatch" and not by_tile[256].ok
    assert by_tile[64].measurement.error == "boom"


@pytest.mark.parametrize("old_time, noise, kept", [
    (1.02, 0.01, True),    # within 3 %: keep the previous tile
    (1.05, 0.01, False),   # 5 % slower, noise 1 %: the new winner
    (1.05, 0.08, True),    # 5 % slower but the samples spread 8 %: keep
])
def test_no_churn_within_the_noise(old_time, noise, kept):
    ms = measured({(256, 128, 128): 1.0, (128, 128, 128): old_time}, noise=noise)
    r = winners.choose("x", Shape(1024, 128, 128), ms, lambda t: "",
                       previous=ir.Tile(128, 128, 128))
    assert r.kept_previous is kept
    assert r.winner.candidate.tile == ir.Tile(128 if kept else 256, 128, 128)


def result(kernel: str, shape: Shape, tile: tuple[int, int, int], t: float = 1e-3
           ) -> winners.ShapeResult:
    w = winners.Measured(cand.Candidate(ir.Tile(*tile), 0, 1, 0.0), Measurement(t, 0.01))
    return winners.ShapeResult(kernel, shape, (w,), w, None)


def test_rules_from_point_winners(spec):
    """Per (n, k): sorted by m/g, neighbours with one winner merge, a bound at
    the geometric mean between neighbours whose winners differ, the last
    rule unbounded; dense kernels split on m."""
    g = view(spec, "gmm_small")
    rs = [result("gmm_small", Shape(16384, 1536, 2048, 128), (128, 1536, 1024)),
          result("gmm_small", Shape(1024, 1536, 2048, 128), (32, 1536, 2048)),   # m/g 8
          result("gmm_small", Shape(2048, 1536, 2048, 128), (32, 1536, 2048)),   # m/g 16
          result("gmm_small", Shape(65536, 1536, 2048, 128), (256, 1536, 1024)),  # m/g 512
          result("gmm_small", Shape(8192, 4096, 4096, 8), (512, 1024, 1024))]
    lines = [r.rule.text() for r in winners.synthesize(g, rs)]
    assert lines == [
        f"tile_rule gmm_small m/g<={math.isqrt(16 * 128)} n==1536 k==2048 -> m=32 n=1536 k=2048",
        f"tile_rule gmm_small m/g<={math.isqrt(128 * 512)} n==1536 k==2048 -> m=128 n=1536 k=1024",
        "tile_rule gmm_small n==1536 k==2048 -> m=256 n=1536 k=1024",
        "tile_rule gmm_small n==4096 k==4096 -> m=512 n=1024 k=1024",
    ]
    rules = [r.rule for r in winners.synthesize(g, rs)]
    for r in rs:  # every measured shape gets its winner back from the rules
        got = winners.previous_tile(tuple(rules), "gmm_small", r.shape)
        assert got == r.winner.candidate.tile, r.shape
    d = view(spec, "dense_small")
    dense = [result("dense_small", Shape(128, 4096, 4096), (128, 1024, 1024)),
             result("dense_small", Shape(8192, 4096, 4096), (1024, 1024, 512))]
    assert [r.rule.text() for r in winners.synthesize(d, dense)] == [
        "tile_rule dense_small m<=1024 n==4096 k==4096 -> m=128 n=1024 k=1024",
        "tile_rule dense_small n==4096 k==4096 -> m=1024 n=1024 k=512"]


# -- the rewrite --------------------------------------------------------------

PROV = Provenance("TPU v5 lite", "0.10.2", "0.10.2", "0.0.42.1", "2026-12-07")


def fake_run(spec, text, results, device=V5E, kernels=("gmm_small",)):
    notes: list[str] = []
    ks = [view(spec, k) for k in kernels]
    return session.new_text(spec, text, device, ks, results, PROV, notes), notes


def test_block_is_appended_then_replaced_and_nothing_else_changes(spec):
    text = SPEC
    r1 = [result("gmm_small", Shape(16384, 1536, 2048, 128), (128, 1536, 1024), 0.812e-3)]
    once, _ = fake_run(spec, text, r1)
    assert once.startswith(text) and once[len(text):] == """
# Tiles measured by `gemmgen tune`, which rewrites this block (docs/spec.md, "Tuned tiles").
tuned v5e {
  device "TPU v5 lite"
  jax "0.10.2"
  libtpu "0.0.42.1"
  date "2026-12-07"
  # m=16384 n=1536 k=2048 g=128: 0.812 ms
  tile_rule gmm_small n==1536 k==2048 -> m=128 n=1536 k=1024
}
"""
    # Text after the block (a user's later edit) stays where it is.
    with_tail = once + "\n# a comment after the block\n"
    r2 = [result("gmm_small", Shape(16384, 1536, 2048, 128), (256, 1536, 1024), 0.7e-3)]
    twice, _ = fake_run(spec, with_tail, r2)
    assert twice.count("tuned v5e {") == 1
    assert "m=256 n=1536 k=1024" in twice and "-> m=128 n=1536 k=1024" not in twice
    assert twice.startswith(text) and twice.endswith("}\n\n# a comment after the block\n")
    # Re-running with the same results is a fixed point (byte for byte).
    assert fake_run(spec, twice, r2)[0] == twice


def test_crlf_spec_gets_crlf_block_and_keeps_its_bytes(spec):
    crlf = SPEC.replace("\n", "\r\n")
    r = [result("gmm_small", Shape(4096, 1536, 2048, 8), (256, 1536, 1024))]
    once, _ = fake_run(spec, crlf, r)
    assert once.startswith(crlf) and "\n" not in once.replace("\r\n", "")
    assert fake_run(spec, once, r)[0] == once


def test_another_devices_block_is_kept_and_reported(spec):
    other, _ = fake_run(spec, SPEC, [result("gmm_small", Shape(4096, 1536, 2048, 8),
                                            (512, 1536, 1024))], device=lookup("v6e"))
    both, notes = fake_run(spec, other, [result("gmm_small", Shape(4096, 1536, 2048, 8),
                                                (256, 1536, 1024))])
    assert both.startswith(other)  # the v6e block untouched, the v5e one after it
    assert "tuned v6e {" in both and "tuned v5e {" in both
    assert any("kept the tuned block for v6e" in n for n in notes)


def test_rules_of_kernels_not_measured_are_carried_over(spec):
    first, _ = fake_run(spec, SPEC, [result("dense_small", Shape(4096, 4096, 4096),
                                            (512, 1024, 1024), 1e-3)], kernels=("dense_small",))
    second, _ = fake_run(spec, first, [result("gmm_small", Shape(4096, 1536, 2048, 8),
                                              (256, 1536, 1024))])
    block = second[second.index("tuned v5e"):]
    assert "# m=4096 n=4096 k=4096: 1.000 ms\n  tile_rule dense_small n==4096 k==4096 -> " \
           "m=512 n=1024 k=1024" in block
    assert "tile_rule gmm_small" in block


def test_a_kernels_rules_at_shapes_not_measured_now_are_kept(spec):
    """Re-tuning a kernel at one n, k rewrites its rules for that n, k only:
    the rules an earlier run measured at other shapes stay (a decode-only
    run must not drop the prefill rules)."""
    first, _ = fake_run(spec, SPEC, [
        result("gmm_small", Shape(1024, 1536, 2048, 128), (32, 1536, 2048), 1e-3),
        result("gmm_small", Shape(65536, 1536, 2048, 128), (256, 1536, 1024), 2e-3),
        result("gmm_small", Shape(8192, 4096, 4096, 8), (512, 1024, 1024), 3e-3)])
    second, _ = fake_run(spec, first, [
        result("gmm_small", Shape(128, 4096, 4096, 8), (64, 2048, 4096), 4e-4)])
    block = second[second.index("tuned v5e"):]
    rules = [line.strip() for line in block.splitlines() if "tile_rule" in line]
    assert rules == [
        "tile_rule gmm_small n==4096 k==4096 -> m=64 n=2048 k=4096",
        f"tile_rule gmm_small m/g<={math.isqrt(8 * 512)} n==1536 k==2048 -> m=32 n=1536 k=2048",
        "tile_rule gmm_small n==1536 k==2048 -> m=256 n=1536 k=1024",
    ]
    assert "# m=65536 n=1536 k=2048 g=128: 2.000 ms" in block  # with its provenance
    assert "3.000 ms" not in block  # the n, k measured again: rewritten
    assert fake_run(spec, second, [
        result("gmm_small", Shape(128, 4096, 4096, 8), (64, 2048, 4096), 4e-4)])[0] == second


def test_previous_block_is_read_back(spec):
    text, _ = fake_run(spec, SPEC, [result("gmm_small", Shape(1024, 1536, 2048, 128),
                                           (32, 1536, 2048)),
                                    result("gmm_small", Shape(65536, 1536, 2048, 128),
                                           (256, 1536, 1024))])
    (block,) = rewrite.find_blocks(text)
    assert winners.previous_tile(block.rules, "gmm_small", Shape(1024, 1536, 2048, 128)) == \
        ir.Tile(32, 1536, 2048)
    assert winners.previous_tile(block.rules, "gmm_small", Shape(2 ** 20, 1536, 2048, 8)) == \
        ir.Tile(256, 1536, 1024)
    assert winners.previous_tile(block.rules, "gmm_small", Shape(1024, 512, 2048, 8)) is None
    with pytest.raises(rewrite.RewriteError, match=r"small.gemm:\d+:1: error: .* not closed"):
        rewrite.find_blocks(text.rstrip().removesuffix("}"), "small.gemm")


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "x.gemm"
    path.write_text("old\n")
    os.chmod(path, 0o640)

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        rewrite.write_atomically(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["x.gemm"]  # no temporary left
    monkeypatch.undo()
    rewrite.write_atomically(path, "new\r\n")
    assert path.read_bytes() == b"new\r\n" and path.stat().st_mode & 0o777 == 0o640


# -- the command ----------------------------------------------------------------


def test_dry_run_lists_candidates_and_leaves_the_spec(spec_file, capsys, tmp_path):
    out_json = tmp_path / "plan.json"
    assert main(["tune", str(spec_file), "--dry-run", "--kernel", "gmm_small", "--shapes",
                 "16384,1536,2048,128", "--max-candidates", "3", "--out", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "gmm_small at m=16384 n=1536 k=2048 g=128:" in out
    assert "m=128 n=128 k=128" in out and "(the kernel's LUT tile)" in out
    assert spec_file.read_text() == SPEC
    import json

    (job,) = json.loads(out_json.read_text())["jobs"]
    assert len(job["candidates"]) == 4 and job["candidates"][-1]["baseline"] == "LUT"


def test_dry_run_cuda_and_errors(project, capsys):
    assert main(["tune", "specs/dense.gemm", "--dry-run", "--device", "h100", "--kernel",
                 "dense_gemm_bf16", "--shapes", "4096,4096,4096"]) == 0
    assert "smem KiB" in capsys.readouterr().out
    for argv, words in (
            (["--device", "h100"], "only --dry-run works here"),
            (["--kernel", "nope", "--dry-run"], "is not a kernel"),
            (["--kernel", "dense_gemv_bf16", "--dry-run", "--device", "h100"], "no block tile"),
            (["--shapes", "1,2", "--dry-run"], "expected m,n,k"),
            (["--device", "v9", "--dry-run"], "v9")):
        assert main(["tune", "specs/dense.gemm", *argv]) == 2, argv
        assert words in capsys.readouterr().err, argv


def test_interpret_end_to_end_writes_the_block(spec_file, capsys):
    """The whole flow in Pallas interpret mode at a tiny grouped shape: two
    candidates (the best predicted and the kernel's own), timed, the
    winner checked against the reference, the block written."""
    pytest.importorskip("jax")
    assert main(["tune", str(spec_file), "--interpret", "--kernel", "gmm_small", "--shapes",
                 "64,256,256,2", "--max-candidates", "1", "--samples", "1", "--batch",
                 "1"]) == 0
    captured = capsys.readouterr()
    text = spec_file.read_text()
    assert text.startswith(SPEC)
    (block,) = rewrite.find_blocks(text)
    assert block.name == "v5e"
    (rule,) = block.rules
    assert rule.kernel == "gmm_small" and rule.conds == (("n", ir.Cmp.EQ, 256),
                                                         ("k", ir.Cmp.EQ, 256))
    assert 'device "cpu (interpret mode)"' in text
    assert "# m=64 n=256 k=256 g=2: " in text and "runner-up" in text
    assert "wrote" in captured.out and captured.err.count("gmm_small at m=64 n=256 k=256 g=2, tile ") == 2


def test_dry_run_loads_neither_jax_nor_numpy(spec_file):
    """--dry-run works on a machine with the generator alone."""
    import subprocess
    import sys

    code = ("import sys\nfrom gemmgen.cli import main\n"
            f"assert main(['tune', {str(spec_file)!r}, '--dry-run', '--shapes', "
            "'4096,1536,2048,8']) == 0\n"
            "heavy = sorted(m for m in ('jax', 'numpy', 'ml_dtypes') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "gmm_small at m=4096 n=1536 k=2048 g=8:" in done.stdout
    assert "dense_small at m=4096 n=1536 k=2048 g=8:\n  skipped: a dense kernel has no " \
           "groups" in done.stdout


def test_tiny_shapes_and_empty_groups(spec):
    """m=1, and fewer rows than groups (empty groups get no work item)."""
    dense, gmm = view(spec, "dense_small"), view(spec, "gmm_small")
    (only_m,) = {t.m for t in cand.legal_tiles(dense, spec, Shape(1, 256, 256), PALLAS, V5E)}
    assert only_m == 32
    few = Shape(3, 256, 256, 8)
    sizes = shapes.group_sizes(few)
    assert sum(sizes) == 3 and sizes.count(0) >= 5
    # Every non-empty group lies in m tile 0, and visits it once.
    assert cand.work_items(gmm, few, 32) == sum(1 for s in sizes if s)
    found = cand.candidates(gmm, spec, few, PALLAS, V5E, max_candidates=2,
                            baselines={"LUT": gmm.tile})
    assert [c.tile.m for c in found] == [32, 32, 128] and found[-1].why == "LUT"


def test_a_tuned_candidate_lowers_for_tpu(spec):
    """The module tune times for a candidate (rendered with that tile alone)
    goes through the real Mosaic TPU lowering on the CPU: a tile clamped to
    a non-power-of-two n (1536) and a 32-row m tile."""
    pytest.importorskip("jax")
    from pallas_helpers import lower_for_tpu

    from gemmgen.tune.timing import JaxTimer

    gmm = view(spec, "gmm_small")
    shape = Shape(256, 1536, 512, 4)
    timer = JaxTimer(V5E, interpret=True)
    try:
        fn = timer.function(gmm, spec, ir.Tile(32, 1536, 512))
        exported = lower_for_tpu(fn, timer.inputs(gmm, shape))
    finally:
        timer.close()
    assert "tpu_custom_call" in exported.mlir_module()


def test_written_block_is_a_valid_spec_whose_lut_picks_the_winners(spec, spec_file):
    rs = [result("gmm_small", Shape(1024, 1536, 2048, 128), (32, 1536, 2048)),
          result("gmm_small", Shape(65536, 1536, 2048, 128), (256, 1536, 1024))]
    text, _ = fake_run(spec, SPEC, rs)
    session.check_text(text, spec_file)  # raises SpecError if the language refuses it
    spec_file.write_text(text)
    tuned = load(spec_file)[0].kernel("gmm_small").for_backend(PALLAS)
    for r in rs:
        assert session.lut_tile(tuned, r.shape) == r.winner.candidate.tile


def test_timing_on_another_generation_is_refused(spec_file, capsys, monkeypatch):
    """Tiles timed on a v5e are never written as another chip's: `--device`
    must name the generation of the TPU the command runs on."""
    pytest.importorskip("jax")
    from gemmgen.tune import timing

    monkeypatch.setattr(timing, "has_tpu", lambda: True)
    monkeypatch.setattr(timing, "tpu_kind", lambda: ("TPU v5 lite", "v5e"))
    before = spec_file.read_text()
    assert main(["tune", str(spec_file), "--device", "v6e", "--kernel", "gmm_small",
                 "--shapes", "64,256,256,2"]) == 2
    err = capsys.readouterr().err
    assert "this machine's TPU is v5e ('TPU v5 lite')" in err and "--device v5e" in err
    assert spec_file.read_text() == before


def test_time_budget_skips_the_jobs_not_started_and_results_are_handed_on(spec):
    """Past the budget no job starts (each is marked skipped), and
    `on_result` sees the results after every job: the command writes the
    block then, so a run cut off keeps what it measured."""
    plan = session.make_plan(spec, V5E, ["gmm_small"], [Shape(1024, 256, 256, 4),
                                                         Shape(64, 256, 256, 4)],
                             max_candidates=2)
    calls = []
    seen = []
    timer = lambda kernel, sp, shape, tile: (calls.append(shape),  # noqa: E731
                                             Measurement(1e-3 * tile.m / 128))[1]
    results = session.measure(plan, spec, timer, lambda k, sp, t: "", out_of_time=lambda: bool(
        calls), on_result=lambda r: seen.append(len(r)))
    assert [r.shape for r in results] == [Shape(1024, 256, 256, 4)]
    assert seen == [1] and set(calls) == {Shape(1024, 256, 256, 4)}
    assert plan.jobs[1].skipped.startswith("the time budget")


def test_measurements_of_an_earlier_run_write_the_block(spec_file, tmp_path, capsys):
    """`--measurements` takes an earlier run's --out JSON: the fastest
    measured legal tile of each shape wins (here not the cost model's
    favourite), checked against the reference in interpret mode, and the
    block's provenance is the file's (the chip that measured it)."""
    pytest.importorskip("jax")
    import json

    prov = {"device": "TPU v5 lite", "jax": "0.10.2", "jaxlib": "0.10.2",
            "libtpu": "0.0.42.1", "date": "2026-12-07"}
    job = {"kernel": "gmm_small", "m": 64, "n": 256, "k": 256, "g": 2, "candidates": [
        {"tile": [64, 256, 256], "seconds": 2e-3, "noise": 0.01},
        {"tile": [128, 128, 128], "seconds": 1e-3, "noise": 0.01},
        {"tile": [64, 128, 256], "seconds": None, "error": "boom"},
        {"tile": [64, 8192, 256], "seconds": 1e-4, "noise": 0.0}]}  # not a legal tile now
    data = {"device": "v5e", "backend": "pallas_tpu", "jobs": [job], "provenance": prov}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    assert main(["tune", str(spec_file), "--measurements", str(path)]) == 0
    text = spec_file.read_text()
    (block,) = rewrite.find_blocks(text)
    (rule,) = block.rules
    assert rule.kernel == "gmm_small" and "-> m=128 n=128 k=128" in text
    assert 'device "TPU v5 lite"' in text and 'libtpu "0.0.42.1"' in text
    assert "runner-up m=64 n=256 k=256 2.000 ms" in text
    # Shapes come from the file; a file of another device is refused.
    assert main(["tune", str(spec_file), "--measurements", str(path), "--shapes",
                 "64,256,256,2"]) == 2
    path.write_text(json.dumps({**data, "device": "v6e"}))
    assert main(["tune", str(spec_file), "--measurements", str(path)]) == 2
    assert "measured on v6e, not v5e" in capsys.readouterr().err
