"""Which CUDA toolchain gemmgen uses (gemmgen.harness.toolchain, one rule:
$GEMMGEN_NVCC, $CUDA_HOME/bin, the PyPI wheels of this Python, PATH,
/usr/local/cuda), and that `explain`, `verify` and `build --resources` say
which nvcc measured their figures.

The compilers here are stand-ins: small scripts that answer `--version` with
their own release and report fixed ptxas figures for each entry function of
the file they are given, so that switching compilers is visible in the
figures and costs no compilation."""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

import pytest

from gemmgen.cli import main
from gemmgen.harness import toolchain

FAKE_NVCC = """\
#!{python}
import re, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("nvcc: NVIDIA (R) Cuda compiler driver")
    print("Cuda compilation tools, release {release}, V{release}.{build}")
    sys.exit(0)
source = next(a for a in args if a.endswith(".cu"))
arch = re.search(r"code=(\\w+)", " ".join(args)).group(1)
text = open(source).read()
for entry in re.findall(r"__global__ void (?:__launch_bounds__\\([^)]*\\) )?(\\w+)\\(", text):
    print(f"ptxas info    : Compiling entry function '{{entry}}' for '{{arch}}'")
    print(f"ptxas info    : Function properties for {{entry}}")
    print("    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads")
    print(f"ptxas info    : Used {registers} registers, used 1 barriers, 400 bytes cmem[0]")
"""

SPEC = """\
target cuda {
  archs sm_90a
}

kernel small_gemm {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [k, n]
  out bf16
  tile m=64 n=64 k=32
  mma mma_sync
  backends cuda
}
"""


def _fake_nvcc(folder: Path, release: str, registers: int) -> Path:
    """A stand-in nvcc of `release` in `folder/bin`, reporting `registers`
    registers for every entry function."""
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    path = folder / "bin" / "nvcc"
    path.write_text(FAKE_NVCC.format(python=sys.executable, release=release, build=7,
                                     registers=registers))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def places(tmp_path, monkeypatch):
    """An nvcc in each place the rule looks, each of another release."""
    tools = {
        "GEMMGEN_NVCC": _fake_nvcc(tmp_path / "explicit", "99.4", 40),
        "CUDA_HOME": _fake_nvcc(tmp_path / "home", "99.3", 48),
        "wheel": _fake_nvcc(tmp_path / "site-packages" / "nvidia" / "cu13", "99.2", 56),
        "PATH": _fake_nvcc(tmp_path / "usr", "99.1", 64),
    }
    monkeypatch.setenv("GEMMGEN_NVCC", str(tools["GEMMGEN_NVCC"]))
    monkeypatch.setenv("CUDA_HOME", str(tools["CUDA_HOME"].parent.parent))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(toolchain, "_pypi_cuda_roots",
                        lambda: [tools["wheel"].parent.parent])
    monkeypatch.setenv("PATH", f"{tools['PATH'].parent}{os.pathsep}{os.environ['PATH']}")
    return tools


def test_the_most_explicit_setting_wins_and_the_wheel_beats_path(places, monkeypatch):
    """An nvcc first on PATH (a system toolkit) does not shadow the one the
    install brought; an explicit setting beats both."""
    found = toolchain.locate_cuda_tool("nvcc")
    assert (found.path, found.how) == (places["GEMMGEN_NVCC"], "$GEMMGEN_NVCC")
    monkeypatch.delenv("GEMMGEN_NVCC")
    found = toolchain.locate_cuda_tool("nvcc")
    assert (found.path, found.how) == (places["CUDA_HOME"], "$CUDA_HOME")
    monkeypatch.delenv("CUDA_HOME")
    found = toolchain.locate_cuda_tool("nvcc")
    assert (found.path, found.how) == (places["wheel"], "the PyPI wheels of this Python environment")
    assert toolchain.find_nvcc() == places["wheel"]
    monkeypatch.setattr(toolchain, "_pypi_cuda_roots", lambda: [])
    found = toolchain.locate_cuda_tool("nvcc")
    assert (found.path, found.how) == (places["PATH"], "PATH")


def test_a_cuda_home_without_the_tool_is_passed_over(places, monkeypatch, tmp_path):
    monkeypatch.delenv("GEMMGEN_NVCC")
    (tmp_path / "empty" / "bin").mkdir(parents=True)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "empty"))
    assert toolchain.find_nvcc() == places["wheel"]


def test_describe_names_release_file_and_rule(places, monkeypatch):
    monkeypatch.delenv("GEMMGEN_NVCC")
    monkeypatch.delenv("CUDA_HOME")
    wheel = places["wheel"]
    assert toolchain.describe_nvcc(wheel) == \
        f"nvcc V99.2.7 ({wheel}, from the PyPI wheels of this Python environment)"
    # Not the one the rule picks (a caller's own choice): no rule named.
    assert toolchain.describe_nvcc(places["PATH"]) == f"nvcc V99.1.7 ({places['PATH']})"
    assert toolchain.describe_nvcc(Path("/no/such/nvcc")).startswith(
        "nvcc (cannot run: No such file or directory) (/no/such/nvcc")


@pytest.fixture
def project(tmp_path, monkeypatch, places):
    (tmp_path / "proj" / "specs").mkdir(parents=True)
    (tmp_path / "proj" / "specs" / "small.gemm").write_text(SPEC)
    monkeypatch.chdir(tmp_path / "proj")
    monkeypatch.setenv("GEMMGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GEMMGEN_NVCC")
    return places


def _registers(out: str) -> list[str]:
    return re.findall(r"ptxas sm_90a small_gemm: (\d+) registers", out)


def test_the_measuring_commands_name_the_toolchain_and_switching_measures_again(
        project, monkeypatch, capsys):
    """build --resources, explain and verify print the nvcc that measured;
    a record of another compiler's release is measured again, never shown as
    this one's."""
    cuda_home = project["CUDA_HOME"]
    assert main(["build", "--resources"]) == 0
    out = capsys.readouterr().out
    assert (f"resources: 1 kernel x arch build measured with nvcc V99.3.7 ({cuda_home}, "
            "from $CUDA_HOME): 0 spills") in out, out
    assert main(["explain", "specs/small.gemm", "small_gemm"]) == 0
    out = capsys.readouterr().out
    assert f"  ptxas of nvcc V99.3.7 ({cuda_home}, from $CUDA_HOME)\n" in out, out
    assert _registers(out) == ["48"]
    # Switch: without CUDA_HOME the wheel's nvcc (another release) measures.
    monkeypatch.delenv("CUDA_HOME")
    wheel = project["wheel"]
    assert main(["explain", "specs/small.gemm", "small_gemm"]) == 0
    out = capsys.readouterr().out
    assert (f"  ptxas of nvcc V99.2.7 ({wheel}, from the PyPI wheels of this Python "
            "environment)\n") in out, out
    assert _registers(out) == ["56"]


@pytest.mark.slow
def test_verify_names_the_toolchain(project, capsys):
    assert main(["verify", "specs/small.gemm", "--backend", "cuda-emu"]) == 0
    out = capsys.readouterr().out
    cuda_home = project["CUDA_HOME"]
    assert f"\nptxas of nvcc V99.3.7 ({cuda_home}, from $CUDA_HOME)\n" in out, out
    assert _registers(out) == ["48"]
