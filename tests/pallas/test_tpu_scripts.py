"""The TPU scripts and the `pallas-tpu` verify backend without a TPU: the
scripts run their whole flow in Pallas interpret mode on the CPU
(`--interpret`), so their first run on a lent TPU cannot fail on a stale
name, and the backend says why it cannot run here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_tpu_bench_interpret_checks_times_and_compares(tmp_path):
    r = _run("scripts/tpu_bench.py", "--interpret", "--kernel", "gmm_bf16_out",
             "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed, 0 failed" in r.stdout
    rows = json.loads((tmp_path / "tpu_bench.json").read_text())["rows"]
    assert [row["kernel"] for row in rows] == ["gmm_bf16_out"]
    row = rows[0]
    assert row["correct"] is True and row["groups"] > 0 and row["seconds"] > 0
    # XLA's dot and ragged_dot ran beside it, on the same (CPU) device.
    assert row["xla_dot_s"] > 0 and row["xla_ragged_dot_s"] > 0


@pytest.mark.slow
def test_tpu_bench_interpret_every_kernel(tmp_path):
    r = _run("scripts/tpu_bench.py", "--interpret", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((tmp_path / "tpu_bench.json").read_text())["rows"]
    assert rows and all(row.get("correct") for row in rows), rows


def test_tpu_quant_bench_without_a_tpu_says_so(tmp_path):
    r = _run("scripts/tpu_quant_bench.py", "--only", "mxfp8", "--out", str(tmp_path))
    assert r.returncode == 0 and "no TPU on this machine" in r.stdout, r.stdout + r.stderr


@pytest.mark.slow
def test_tpu_quant_bench_interpret_checks_and_times(tmp_path):
    """The quantizers' check on the chip (ragged shapes, edge rows,
    non-finite groups), in interpret mode: every case matches."""
    r = _run("scripts/tpu_quant_bench.py", "--interpret", "--only", "mxfp8",
             "--tiles", "128x256", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((tmp_path / "tpu_quant_bench.json").read_text())
    assert [row["kernel"] for row in rows] == ["mxfp8_128x256"]
    assert rows[0]["correct"] is True and rows[0]["failures"] == [] and rows[0]["ms"] > 0


def test_tpu_tiles_interpret_renders_each_tile_and_refuses_bad_ones(tmp_path):
    r = _run("scripts/tpu_tiles.py", "--interpret", "--cases", "1", "--out", str(tmp_path),
             "moe:moe_w4a16_grouped_gemm", "--tiles", "64x128x256,64x128x128")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((tmp_path / "tpu_tiles.json").read_text())
    assert [row["tile"] for row in rows] == ["64x128x256", "64x128x128"]
    assert rows[0]["correct"] is True and rows[0]["seconds"] > 0
    # 4-bit weights packed along k: a K tile of 128 is half a lane tile.
    assert "not a multiple of 256" in rows[1]["refused"]


def test_verify_pallas_tpu_says_why_it_cannot_run_here():
    r = _run("-m", "gemmgen", "verify", "specs/dense.gemm", "--backend", "pallas-tpu",
             "--kernel", "dense_bf16_out_bf16", "--no-resources")
    assert "pallas-tpu: JAX sees no TPU on this machine" in r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in r.stderr


def test_tpu_run_rejects_an_unknown_step(tmp_path):
    r = subprocess.run(["bash", "scripts/tpu_run.sh", "everything"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out")})
    assert r.returncode == 2 and "usage" in r.stderr
    assert not (tmp_path / "out").exists()  # nothing written before the usage check


def test_tpu_run_runs_each_step_and_reports_it(tmp_path):
    """Without a TPU the verify steps fail (saying why) and the script goes
    on to the next, logging each step (scripts/steps.sh)."""
    out = tmp_path / "out"
    r = subprocess.run(["bash", "scripts/tpu_run.sh", "verify"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600,
                       env={"PATH": "/usr/bin:/bin", "OUT": str(out), "PYTHON": sys.executable})
    assert r.returncode == 1, r.stdout + r.stderr
    steps = (out / "steps.txt").read_text().splitlines()
    tpu_specs = sorted(p.stem for p in (ROOT / "specs").glob("*.gemm")
                       if "target pallas_tpu" in p.read_text())
    assert "moe" in tpu_specs and "dense" in tpu_specs
    assert [line.split(":")[0] for line in steps] == ["env", *(f"verify_{s}" for s in tpu_specs)]
    assert steps[0].startswith("env: exit 0") and "exit 1" in steps[1]
    assert "JAX sees no TPU" in (out / "verify_moe.txt").read_text()
