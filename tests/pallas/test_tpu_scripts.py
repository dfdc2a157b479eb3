"""The TPU scripts and the `pallas-tpu` verify backend without a TPU: the
scripts run their whole flow in Pallas interpret mode on the CPU
(`--interpret`), so their first run on a lent TPU cannot fail on a stale
name, and the backend says why it cannot run here."""

from __future__ import annotations

import json
import os
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


# --- scripts/tpu_peers.py: gemmgen beside XLA, megablox, tpu-inference, tokamax ---

PEER_FAMILIES = {"gemmgen", "xla", "megablox", "tpu-inference", "tokamax"}


def _peers(tmp_path, *args: str, env: dict | None = None) -> tuple[dict, str]:
    r = subprocess.run([sys.executable, "scripts/tpu_peers.py", "--out", str(tmp_path), *args],
                       cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((tmp_path / "tpu_peers.json").read_text()), r.stdout


def _installed_or_ok(row: dict) -> bool:
    """A peer the machine lacks is a row saying so; one it has must be right."""
    return row["status"] == "ok" or row["status"].startswith("not installed")


def test_tpu_peers_lists_its_cases_without_jax_work():
    r = _run("scripts/tpu_peers.py", "--list")
    assert r.returncode == 0, r.stderr
    names = [line.split(":")[0] for line in r.stdout.splitlines()]
    for model in ("mixtral-8x7b-up", "qwen3-30b-a3b-up", "gpt-oss-120b-up", "deepseek-v3-ep-shard",
                  "mixtral-8x7b-gateup-silu", "qwen3-30b-a3b-tgmm", "dense-bf16-8192",
                  "prefill-w4-kblock", "decode-m64-w8-channel", "decode-m512-fp8-channel"):
        assert model in names
    assert "shard 32/256" in r.stdout and "m=8192 k=7168 n=4096" in r.stdout
    r = _run("scripts/tpu_peers.py", "--list", "--case", "decode-m64-*")
    assert len(r.stdout.splitlines()) == 5 and all("m=64 " in x for x in r.stdout.splitlines())
    r = _run("scripts/tpu_peers.py", "--list", "--case", "llama*")
    assert r.returncode != 0 and "no case matches" in r.stderr and "Traceback" not in r.stderr


def test_tpu_peers_without_a_tpu_says_so(tmp_path):
    r = _run("scripts/tpu_peers.py", "--out", str(tmp_path), "--case", "dense*")
    assert r.returncode == 0 and "JAX sees no TPU" in r.stdout, r.stdout + r.stderr


def test_tpu_peers_time_budget_skips_cases_and_says_which(tmp_path):
    data, out = _peers(tmp_path, "--interpret", "--time-budget", "0", "--case", "qwen3-30b-a3b-up",
                       "--case", "dense*")
    assert data["rows"] == [] and data["skipped"] == ["qwen3-30b-a3b-up", "dense-bf16-8192"]
    assert "Not run (time budget, or the device lost): qwen3-30b-a3b-up, dense-bf16-8192" in (
        tmp_path / "tpu_peers.md").read_text()


def test_tpu_peers_interpret_checks_every_impl_and_reports_a_wrong_one(tmp_path):
    """The Qwen3 case (many small experts, skewed routing) at its tiny shape
    in interpret mode: gemmgen, XLA and JAX's megablox each checked against
    the f32 reference and timed; a peer answering 1.5x the product (the
    test hook) is a WRONG row, kept in the table, not the best peer."""
    data, out = _peers(tmp_path, "--interpret", "--test-broken-peer", "--case", "qwen3-30b-a3b-up",
                       "--impl", "gemmgen:gmm_bf16_lut", "--impl", "xla:*", "--impl", "broken:*",
                       "--impl", "megablox:gmm", "--impl", "tpu-inference:gmm",
                       "--impl", "tokamax:mosaic")
    rows = {r["impl"]: r for r in data["rows"]}
    assert set(rows) == {"gemmgen:gmm_bf16_lut", "xla:ragged_dot", "broken:ragged_dot_x1.5",
                         "megablox:gmm", "tpu-inference:gmm", "tokamax:mosaic"}, rows
    assert rows["gemmgen:gmm_bf16_lut"]["float64_check"] is True
    for name in ("gemmgen:gmm_bf16_lut", "xla:ragged_dot", "megablox:gmm"):
        row = rows[name]
        assert row["status"] == "ok" and row["correct"] is True, row
        assert 0 <= row["err"] <= row["tolerance"] == 1e-2 and row["seconds"] > 0, row
        assert row["compile_s"] > 0 and row["tflops"] > 0 and "mxu_pct" in row
    assert rows["megablox:gmm"]["tile"] == "128x128x128"  # its default tiling
    broken = rows["broken:ragged_dot_x1.5"]
    assert broken["correct"] is False and broken["status"].startswith("WRONG (err ")
    assert 0.3 < broken["err"] < 0.6, broken  # 1.5x: half the reference's max
    for name in ("tpu-inference:gmm", "tokamax:mosaic"):
        assert _installed_or_ok(rows[name]), rows[name]
    (summary,) = data["summary"]
    assert summary["gemmgen"] == "gemmgen:gmm_bf16_lut"
    assert not summary["best_peer"].startswith("broken:")
    assert summary["speedup_vs_best_peer"] == summary["best_peer_ms"] / summary["gemmgen_ms"]
    md = (tmp_path / "tpu_peers.md").read_text()
    assert "| qwen3-30b-a3b-up | broken:ragged_dot_x1.5 |" in md and "WRONG (err" in md


def test_tpu_peers_lower_at_the_real_shape(tmp_path):
    """--lower: the expert-parallel shard at its real shape (32 of 256
    experts, k = 7168), every implementation exported for a TPU on the CPU,
    Mosaic lowering included."""
    data, _ = _peers(tmp_path, "--lower", "--case", "deepseek*")
    rows = {r["impl"]: r for r in data["rows"]}
    assert {"gemmgen:gmm_bf16_out", "gemmgen:gmm_bf16_lut", "xla:ragged_dot", "megablox:gmm",
            "megablox:gmm@gemmgen-tile"} <= set(rows)
    for row in rows.values():
        assert _lowered_or_missing(row), row
        assert row["k"] == 7168 and row["m"] == 8192 and 0 < row["rows"] < 8192
    # gemmgen's tile at the shard's shape (the v5e rule for n = 4096, k = 7168).
    assert rows["megablox:gmm@gemmgen-tile"]["tile"] == "128x4096x512"


@pytest.mark.slow
def test_tpu_peers_lower_every_case(tmp_path):
    """Every case at its real shape lowers for a TPU, gemmgen's kernels and
    XLA in every one; a peer that refuses a shape says why (megablox's and
    tokamax's m tiles at decode m = 64), in its row."""
    data, _ = _peers(tmp_path, "--lower")
    rows = data["rows"]
    assert {r["case"] for r in rows} == {c for c in _case_names()}
    for r in rows:
        if r["family"] in ("gemmgen", "xla") or not r["case"].startswith("decode-m64-"):
            assert _lowered_or_missing(r), r
        else:
            assert _lowered_or_missing(r) or "128" in r["status"], r


def _lowered_or_missing(row: dict) -> bool:
    return row["status"] == "lowered" or row["status"].startswith("not installed")


def _case_names() -> list[str]:
    r = _run("scripts/tpu_peers.py", "--list")
    return [line.split(":")[0] for line in r.stdout.splitlines()]


@pytest.mark.slow
def test_tpu_peers_interpret_every_structure(tmp_path):
    """An expert-parallel shard (group_offset), the fused gate-up, the d rhs
    (tgmm), dense, and every quantized format at decode: every gemmgen row
    and every XLA / megablox row is correct; a gemmgen kernel also passes
    its float64 check."""
    data, _ = _peers(tmp_path, "--interpret", "--case", "deepseek*", "--case", "*gateup*",
                     "--case", "*tgmm", "--case", "dense*", "--case", "decode-m128-*",
                     "--impl", "gemmgen:*", "--impl", "xla:*", "--impl", "megablox:*",
                     "--impl", "tpu-inference:gmm", "--impl", "tokamax:mosaic")
    rows = data["rows"]
    cases = {r["case"] for r in rows}
    assert len(cases) == 9, cases
    assert all(_installed_or_ok(r) for r in rows), [r for r in rows if not _installed_or_ok(r)]
    families = {(r["case"], r["family"]) for r in rows if r["status"] == "ok"}
    for case in cases:
        assert (case, "gemmgen") in families and (case, "xla") in families, case
    shard = [r for r in rows if r["case"] == "deepseek-v3-ep-shard"]
    assert all(0 < r["rows"] < r["m"] for r in shard)  # the shard's rows only
    decode = [r for r in rows if r["case"].startswith("decode") and r["status"] == "ok"]
    assert decode and all(r["hbm_pct"] > 0 for r in decode)
    assert {r["impl"] for r in rows if r["case"] == "decode-m128-w4-kblock"} >= {
        "gemmgen:peer_w4a16_kblock", "xla:ragged_dot"}


@pytest.mark.slow
def test_tpu_peers_tiles_from_renders_the_kernel_at_that_tile(tmp_path):
    tiles = tmp_path / "tiles.json"
    tiles.write_text(json.dumps({"gmm_bf16_lut": "128x256x256", "gmm_bf16_out": "128x256x128"}))
    data, _ = _peers(tmp_path, "--interpret", "--case", "gpt-oss-120b-up", "--tiles-from",
                     str(tiles), "--impl", "gemmgen:*", "--impl", "megablox:gmm@gemmgen-tile")
    rows = {r["impl"]: r for r in data["rows"]}
    assert rows["gemmgen:gmm_bf16_lut"]["tile"] == "128x256x256"
    assert rows["gemmgen:gmm_bf16_lut"]["status"] == "ok"
    # The peers at gemmgen's tile take the case's first gemmgen kernel's.
    assert rows["gemmgen:gmm_bf16_out"]["tile"] == "128x256x128"
    assert rows["megablox:gmm@gemmgen-tile"]["tile"] == "128x256x128"
    assert all(r["status"] == "ok" for r in rows.values()), rows
    # A tile the Pallas backend refuses is an error row saying why, not a crash.
    tiles.write_text(json.dumps({"gmm_bf16_lut": "100x256x256"}))
    data, _ = _peers(tmp_path, "--interpret", "--case", "gpt-oss-120b-up", "--tiles-from",
                     str(tiles), "--impl", "gemmgen:gmm_bf16_lut")
    (row,) = data["rows"]
    assert row["status"].startswith("error:") and "refused" in row["status"], row


@pytest.mark.slow
def test_tpu_peers_with_the_device_wheels(tmp_path):
    """The install the TPU run does (scripts/tpu_device_run.sh), from the
    wheels of .device-wheels/ (scripts/fetch_peer_wheels.sh), with this
    JAX first: tpu-inference's gmm and tokamax import and run on the CPU, in
    interpret mode, plain and quantized."""
    wheels = sorted((ROOT / ".device-wheels").glob("*.whl"))
    if not wheels:
        pytest.skip("no .device-wheels/ (bash scripts/fetch_peer_wheels.sh)")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "-q", "--no-index",
                    "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target",
                    str(site), *map(str, wheels)], check=True, timeout=600,
                   env={**os.environ, "PIP_CONFIG_FILE": "/dev/null"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), str(site)) if p)}
    out = tmp_path / "out"
    data, _ = _peers(out, "--interpret", "--case", "mixtral-8x7b-up", "--case", "decode-m128-w8-*",
                     "--case", "decode-m128-w4-kblock", "--case", "qwen3-30b-a3b-tgmm",
                     "--impl", "tpu-inference:*", "--impl", "tokamax:*", env=env)
    assert data["versions"]["tokamax"] != "not installed" and not data["missing_peers"]
    bad = [r for r in data["rows"] if r["status"] != "ok"]
    assert not bad, bad
    assert {r["family"] for r in data["rows"]} == {"tpu-inference", "tokamax"}
    # tokamax's default K tile does not divide gpt-oss's k: interpret mode
    # catches its DMAs reading past k. Such rows run after every case (they
    # might fault a chip), and are reported, not dropped.
    data, _ = _peers(tmp_path / "k", "--interpret", "--case", "gpt-oss-120b-up", "--case", "dense*",
                     "--impl", "xla:*", "--impl", "tokamax:mosaic", env=env)
    assert [(r["case"], r["impl"]) for r in data["rows"]] == [
        ("gpt-oss-120b-up", "xla:ragged_dot"), ("gpt-oss-120b-up", "tokamax:mosaic"),
        ("dense-bf16-8192", "xla:dot")]
    tk = data["rows"][1]
    assert "not a multiple of its K tile" in tk["deferred"]
    assert tk["status"].startswith("error:") and "Out-of-bounds read" in tk["status"], tk
    # And at the real shapes, lowered for a TPU: all but tokamax at decode
    # m = 64 (it needs 128 rows, and says so).
    data, _ = _peers(tmp_path / "lower", "--lower", "--impl", "tpu-inference:*",
                     "--impl", "tokamax:*", env=env)
    for r in data["rows"]:
        if r["family"] == "tokamax" and r["case"].startswith("decode-m64-"):
            assert "must be >= 128" in r["status"], r
        else:
            assert r["status"] == "lowered", r


def test_tpu_device_run_writes_its_files_and_says_no_tpu(tmp_path):
    """The lead's one command, without a TPU: versions printed, the wheels (if
    fetched here) installed into PEER_SITE, tpu_peers.py run; at most 8 files
    under $OUT."""
    out = tmp_path / "out"
    r = subprocess.run(["bash", "scripts/tpu_device_run.sh", "--case", "dense*"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OUT": str(out), "PYTHON": sys.executable,
                            "PEER_SITE": str(tmp_path / "site")})
    assert r.returncode == 0, r.stdout + r.stderr
    files = sorted(p.name for p in out.iterdir())
    assert files == ["tpu_peers.log", "versions.txt"] and len(files) <= 8
    versions = (out / "versions.txt").read_text()
    assert versions.startswith("python 3.") and "jax 0.10.2" in versions
    assert "JAX sees no TPU" in (out / "tpu_peers.log").read_text()


def test_tpu_peers_gives_the_lut_its_groups(tmp_path):
    """A kernel whose LUT has rules on the groups (the v5e tuned block of
    specs/moe.gemm picks by n and k, and by m/g for decode) gets g from the
    benchmark: its tile is the LUT's for the case, not an error (the first
    run on a v5e called tile_for without g and lost every such row)."""
    import importlib.util

    pytest.importorskip("jax")
    spec = importlib.util.spec_from_file_location("tpu_peers_t", ROOT / "scripts" / "tpu_peers.py")
    peers = importlib.util.module_from_spec(spec)
    sys.modules["tpu_peers_t"] = peers
    spec.loader.exec_module(peers)
    ours = peers.Ours.load({}, tmp_path)
    got = ours.tile("gmm_bf16_out", 16384, 1536, 2048, 128)
    lut = ours.modules["gmm_bf16_out"].tile_for
    assert got == tuple(lut(16384, 1536, 2048, 128))
    # Decode: 16 rows per group takes the m/g rule, 64 rows per group the next.
    assert ours.tile("gmm_bf16_out", 128, 14336, 4096, 8) != ours.tile("gmm_bf16_out", 512, 14336,
                                                                        4096, 8)
    # A LUT without group rules is called as before.
    assert ours.tile("dense_bf16_out_bf16", 4096, 4096, 4096) == (1024, 1024, 512)


def test_tpu_tune_run_runs_each_job_and_keeps_the_tuned_spec(tmp_path):
    """scripts/tpu_tune_run.sh on a jobs file: each job its own `gemmgen
    tune` process under its limit, the spec and the JSON copied to $OUT after
    it (here in interpret mode, on a copy of the scripts and a small spec)."""
    pytest.importorskip("jax")
    import shutil

    (tmp_path / "scripts").mkdir()
    for name in ("tpu_tune_run.sh", "device_setup.sh"):
        shutil.copy(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "small.gemm").write_text(
        "target pallas_tpu {\n  tpu v5e\n}\n\nkernel gmm_small {\n  op grouped\n"
        "  lhs bf16 [m, k]\n  rhs bf16 [g, n, k]\n  out f32\n  tile m=128 n=128 k=128\n"
        "  backends pallas_tpu\n}\n")
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("# one job\n"
                    "specs/small.gemm --interpret --kernel gmm_small --shapes 64,256,256,2\n"
                    "specs/small.gemm --interpret --kernel nope\n")
    out = tmp_path / "out"
    env = dict(os.environ, TUNE_JOBS=str(jobs), OUT=str(out), PYTHON=sys.executable,
               CANDIDATES="1", SAMPLES="1", BATCH="1", PEER_SITE=str(tmp_path / "site"))
    proc = subprocess.run(["bash", str(tmp_path / "scripts" / "tpu_tune_run.sh")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the second job's bad kernel
    log = (out / "tune.log").read_text()
    assert log.count("=== exit 0") == 1 and "=== exit 2" in log and "is not a kernel" in log
    tuned = (out / "small.gemm").read_text()
    assert "tuned v5e {" in tuned and "tile_rule gmm_small n==256 k==256" in tuned
    assert json.loads((out / "tune-small.json").read_text())["device"] == "v5e"


@pytest.mark.slow
def test_tpu_probe_groups_interpret_checks_every_variant(tmp_path):
    r = _run("scripts/tpu_probe_groups.py", "--interpret", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((tmp_path / "probe_gmm_bf16_out_k320_n256_ka0.json").read_text())["rows"]
    # XLA and gemmgen at each of two tiles, on both routings; each checked.
    assert len(rows) == 6 and all(row["ok"] for row in rows)
    aligned = [row for row in rows if row["routing"] == "aligned" and row["impl"] == "gemmgen"]
    assert [row["items"] for row in aligned] == [8, 4]  # 4 groups of 64 rows: no straddling


@pytest.mark.slow
def test_tpu_probe_groups_interpret_other_layout_and_k_align(tmp_path):
    """One variant at a time: the [g, k, n] kernel, K blocks rounded to 256."""
    r = _run("scripts/tpu_probe_groups.py", "--interpret", "--kernel", "gmm_bf16_kn_out",
             "--routings", "aligned", "--k-align", "256", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads((tmp_path / "probe_gmm_bf16_kn_out_k320_n256_ka256.json").read_text())
    assert data["kernel"] == "gmm_bf16_kn_out" and data["k_align"] == 256
    assert [row["routing"] for row in data["rows"]] == ["aligned"] * 3
    assert all(row["ok"] for row in data["rows"])


@pytest.mark.slow
def test_tpu_probe_dma_interpret_copies_exactly(tmp_path):
    r = _run("scripts/tpu_probe_dma.py", "--interpret", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((tmp_path / "probe_dma.json").read_text())["rows"]
    # XLA's copy and two Pallas block shapes, at a width off and on the lane grid.
    assert [(row["cols"], row["impl"]) for row in rows] == [
        (320, "xla copy"), (320, "pallas 32x320"), (320, "pallas 32x128"),
        (384, "xla copy"), (384, "pallas 32x384"), (384, "pallas 32x128")]
    assert all(row["ok"] and row["layout"].startswith("bf16[64,") for row in rows)


@pytest.mark.slow
def test_tpu_gelu_vjp_interpret_matches_float64():
    r = _run("scripts/tpu_gelu_vjp.py", "--interpret")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(generated): RMS relative error" in r.stdout and "(before)" in r.stdout
