"""`gemmgen compile --torch`: the libraries the PyTorch ops load (the
kernel's C ABI gg_<kernel>_launch(), built from its .cu alone). Needs no
PyTorch: the libraries are plain shared objects."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemmgen.harness.toolchain import find_nvcc

REPO = Path(__file__).resolve().parents[2]


def _gemmgen(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "gemmgen", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, check=False)


def test_compile_torch_names_the_kernels_it_can_build(tmp_path):
    """Any CUDA kernel has an op (not only those with a JAX entry point)."""
    proc = _gemmgen("compile", str(REPO / "specs" / "moe.gemm"), "--torch", "--kernel",
                    "moe_bf16_grouped_gem", "--out", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert ("has no CUDA kernel 'moe_bf16_grouped_gem'; did you mean 'moe_bf16_grouped_gemm'?"
            in proc.stderr)
    assert "Traceback" not in proc.stderr and not list(tmp_path.iterdir())


def test_compile_torch_emulate_writes_the_c_abi(tmp_path):
    """moe_bf16_grouped_gemm is CUDA-only (no FFI handler): its op's library."""
    proc = _gemmgen("compile", str(REPO / "specs" / "moe.gemm"), "--torch", "--emulate",
                    "--kernel", "moe_bf16_grouped_gemm", "--out", str(tmp_path / "build"),
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    library = tmp_path / "build" / "libmoe_bf16_grouped_gemm_emu.so"
    assert library.is_file() and f"wrote {library}" in proc.stdout
    assert hasattr(ctypes.CDLL(str(library)), "gg_moe_bf16_grouped_gemm_launch")


@pytest.mark.slow
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_compile_torch_builds_the_gpu_library_with_nvcc(tmp_path):
    """nvcc, warnings as errors, the spec's archs; the entry is exported
    (loading needs no GPU: cudart is static)."""
    proc = _gemmgen("compile", str(REPO / "specs" / "moe.gemm"), "--torch", "--kernel",
                    "gmm_bf16", "--out", str(tmp_path / "build"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "(sm_90a, sm_100a)" in proc.stdout  # both the spec's archs
    library = tmp_path / "build" / "libgmm_bf16.so"
    assert hasattr(ctypes.CDLL(str(library)), "gg_gmm_bf16_launch")
