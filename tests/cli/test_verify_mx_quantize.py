"""`gemmgen verify` on tests/specs/mx_quantize.gemm: the MXFP8, MXFP4 and
NVFP4 quantizers through every backend this machine has (Pallas interpret
and lowering, the CUDA emulator through the Python and the C++ launchers),
each case bit for bit the reference (`compare` is exact for e8m0 and ue4m3
scales)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gemmgen.cli import main

SPEC = Path(__file__).resolve().parents[1] / "specs" / "mx_quantize.gemm"
BACKENDS = ("pallas-interpret", "pallas-lower", "cuda-emu", "cuda-emu-cpp")


def verify(tmp_path, monkeypatch, capsys, *kernels: str,
           backends: tuple[str, ...] = BACKENDS) -> list[list[str]]:
    (tmp_path / "specs").mkdir()
    shutil.copy(SPEC, tmp_path / "specs" / SPEC.name)
    monkeypatch.chdir(tmp_path)
    args = ["verify", f"specs/{SPEC.name}", "--no-resources"]
    for b in backends:
        args += ["--backend", b]
    for k in kernels:
        args += ["--kernel", k]
    code = main(args)
    out = capsys.readouterr().out
    assert code == 0, out
    return [line.split() for line in out.splitlines() if line.split()[:1] and
            line.split()[0].endswith("_quant") and line.split()[1] in BACKENDS]


def test_nvfp4_through_the_cpp_launcher_and_the_tpu_lowering(tmp_path, monkeypatch, capsys):
    """The fast case: the kernels themselves have their own tests
    (tests/cuda/sm80/test_cuda_quantize_mx.py, tests/pallas/test_pallas_quantize_mx.py)."""
    backends = ("pallas-lower", "cuda-emu-cpp")
    rows = verify(tmp_path, monkeypatch, capsys, "nvfp4_quant", backends=backends)
    assert {r[1] for r in rows} == set(backends)
    assert all(r[-1] == "pass" for r in rows) and len(rows) == 2 * len(backends)


@pytest.mark.slow
def test_every_kernel_on_every_backend(tmp_path, monkeypatch, capsys):
    rows = verify(tmp_path, monkeypatch, capsys)
    assert {(r[0], r[1]) for r in rows} == {
        (k, b) for k in ("mxfp8_quant", "mxfp4_quant", "nvfp4_quant") for b in BACKENDS}
    assert all(r[-1] == "pass" for r in rows)
