"""`gemmgen explain`: the plan in words, with independently checked costs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gemmgen.cli import main

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)


def test_explain_cuda_grouped(project, capsys):
    m, n, k, g = 1000, 512, 1024, 4
    assert main(["explain", "specs/moe.gemm", "moe_bf16_grouped_gemm", "--m", str(m), "--n",
                 str(n), "--k", str(k), "--groups", str(g)]) == 0
    out = capsys.readouterr().out
    assert f"FLOPs:      {2 * m * n * k / 1e9:.3f} GFLOP" in out
    # bf16 lhs, g bf16 weights, bf16 out.
    assert f"bytes:      {(2 * m * k + 2 * g * k * n + 2 * m * n) / 1e6:.3f} MB" in out
    # 128 x 128 tiles: n / 128 column tiles; cdiv(m, 128) + g work items at most.
    assert f"grid ({n // 128}, {-(-m // 128) + g}, 1), 256 threads" in out
    assert "moe_bf16_grouped_gemm_worklist: grid (1, 1, 1)" in out


def test_explain_pallas_and_unknown_kernel(project, capsys):
    assert main(["explain", "specs/moe.gemm", "gmm_bf16_lut", "--m", "32"]) == 0
    out = capsys.readouterr().out
    assert "pallas_tpu (v5e): tile m=64 n=128 k=128" in out  # the LUT's m<=64 rule
    assert main(["explain", "specs/moe.gemm", "gmm_bf61"]) == 2
    assert "did you mean 'gmm_bf16'" in capsys.readouterr().err
