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


def test_explain_pallas_states_the_aliasing_saving(project, capsys):
    m, n, k = 1000, 512, 1024
    assert main(["explain", "specs/moe.gemm", "gmm_bf16", "--m", str(m), "--n", str(n), "--k",
                 str(k), "--groups", "4"]) == 0
    out = capsys.readouterr().out
    # f32 out [m, n]: the select pass read out and existing_out and wrote the
    # result (3 m n 4 bytes); the kernel reads existing_out's visited blocks
    # instead (at most m n 4 bytes): 2 m n 4 bytes saved.
    assert (f"existing_out is aliased into the output (input_output_aliases): saves "
            f"{2 * m * n * 4} bytes of HBM traffic per call") in out
    assert f"({3 * m * n * 4} bytes: read out and existing_out, write the result)" in out
    # silu_mul halves the output columns.
    assert main(["explain", "specs/moe.gemm", "moe_w8a8_gateup_silu", "--m", str(m), "--n",
                 str(n), "--k", str(k)]) == 0
    assert f"saves {2 * m * (n // 2) * 2} bytes" in capsys.readouterr().out
    # Dense kernels have no existing_out.
    assert main(["explain", "specs/dense.gemm", "dense_bf16_out_f32", "--m", "64"]) == 0
    assert "existing_out" not in capsys.readouterr().out


def test_explain_counters_of_quantize(project, capsys):
    # One run at m=64, k=512 (4 groups of 128 per row): 256 groups, 2 per
    # warp (16 lanes of 8 elements each). Per warp request: 2 x 16 lanes x
    # 16 bytes of bf16 loaded = 512 contiguous bytes = 16 sectors; 2 x 16 x 8
    # FP8 bytes stored = 8 sectors; 2 f32 scales (lanes 0 and 16) = 1 sector.
    assert main(["explain", "specs/dense.gemm", "per_token_group_quant_fp8_out_scale_f32",
                 "--counters"]) == 0
    out = capsys.readouterr().out
    assert "emulator counters, one run at m=64 n=512 k=512" in out
    assert "ld.global              128 warp requests, 2048 sectors (ideal 2048, 100% efficient)" in out
    assert "st.global              256 warp requests, 1152 sectors (ideal 1152, 100% efficient)" in out
    assert "shared" not in out.split("emulator counters")[1]


@pytest.mark.slow
def test_docs_counters_table_is_current():
    import subprocess
    import sys

    doc = (REPO / "docs" / "cuda-emulation.md").read_text()
    cxx = subprocess.run(["g++", "-dumpfullversion"], capture_output=True, text=True).stdout.strip()
    if f"Measured with g++ {cxx}." not in doc:
        pytest.skip(f"the table was measured with another g++ than {cxx}")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "counters_table.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
