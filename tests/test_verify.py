"""`gemmgen verify` runs the kernels build would write and fails when one is wrong."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gemmgen import backends
from gemmgen.cli import main

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_verify_passes_and_prints_a_table(project, capsys):
    code = main(["verify", "specs/moe.gemm", "--kernel", "gmm_bf16_kn",
                 "--backend", "pallas-interpret", "--backend", "pallas-lower"])
    out, err = capsys.readouterr()
    assert code == 0, out
    assert out.splitlines()[0].split() == ["kernel", "backend", "case", "shapes", "tile", "max", "err",
                                           "max", "allowed", "result"]
    assert "128x128x128  " in out  # the tile each case ran
    assert "gmm_bf16_kn  pallas-interpret  sharded_existing_out" in out
    assert "lowered" in out and "4 passed, 0 failed" in out
    assert "[1/4] gmm_bf16_kn on pallas-interpret" in err  # progress


def test_verify_catches_a_wrong_kernel(project, capsys, monkeypatch):
    # A patch of the generator in this process is not an input of the render
    # cache (gemmgen.build_cache): render into a fresh cache.
    monkeypatch.setenv("GEMMGEN_CACHE", str(project / ".cache"))
    real = backends.module

    class Broken:
        def __init__(self, mod):
            self.mod = mod

        def __getattr__(self, name):
            return getattr(self.mod, name)

        def render(self, spec):
            files = self.mod.render(spec)
            # Plant a bug: every partial product 0.1% too large.
            return {p: t.replace("    return lax.dot_general(", "    return 1.001 * lax.dot_general(", 1)
                    if p.name == "gmm_bf16.py" else t for p, t in files.items()}

    monkeypatch.setattr(backends, "module", lambda b: Broken(real(b)))
    code = main(["verify", "specs/moe.gemm", "--kernel", "gmm_bf16", "--backend",
                 "pallas-interpret"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL gmm_bf16 on pallas-interpret" in out and "out of tolerance" in out


def test_verify_rejects_unknown_names(project, capsys):
    assert main(["verify", "specs/moe.gemm", "--backend", "tpu-silicon"]) == 2
    assert main(["verify", "specs/moe.gemm", "--kernel", "nope"]) == 2
