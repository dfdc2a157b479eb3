"""Every code block of docs/using-the-output.md runs.

The blocks run section by section, in order, in a fresh copy of the
repository's specs/, generated/ and examples/ (the project root), with
`gemmgen`, `python` and `nvcc` on PATH (gemmgen is this checkout, run as
`python -m gemmgen`). How a block runs depends on its info string:

- `python`: the section's python blocks run as one script (later blocks use
  what earlier ones defined); `python gpu` blocks join it only where CuPy
  sees a GPU;
- `cpp file=NAME`: written to NAME, for the section's `sh` blocks to build;
- `sh`: run by bash, line by line, each line must succeed;
- `yaml pre-commit`: the local hook's `entry` runs in the project as
  pre-commit runs it (fresh: exit 0; a generated file edited: exit 1), and
  its `files` pattern is the one `.pre-commit-hooks.yaml` gives;
- `yaml github-actions`: each `run:` step runs in the project, except
  `pip install -r requirements-dev.txt` (the project's pinned gemmgen),
  which the PATH above stands for.

A block with any other info string fails the test: nothing on the page
goes unrun.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gemmgen.harness.toolchain import find_nvcc

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "using-the-output.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    section: str
    info: str
    text: str


def blocks() -> list[Block]:
    text = DOC.read_text()
    out = []
    for m in FENCE.finditer(text):
        heading = [h for h in re.findall(r"^##+ (.+)$", text[: m.start()], re.M)][-1]
        out.append(Block(heading, m.group(1).strip(), m.group(2)))
    return out


KNOWN = re.compile(r"^(python|python gpu|sh|cpp file=\S+|yaml pre-commit|yaml github-actions)$")


def test_the_install_instructions_are_ones_that_work():
    """gemmgen is not on PyPI: the page never tells a user to `pip install
    gemmgen` by name; it installs from a checkout or a git URL, with extras
    pyproject.toml defines; and no heading is given twice."""
    import tomllib

    text = DOC.read_text()
    assert not re.search(r"pip install ['\"]?gemmgen(\[[^]]*\])?['\"]?(?!\s*@)(?=\s|`|$)", text,
                         re.M)
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for extra in re.findall(r"pip install (?:-e )?'\.\[(\w[\w-]*)\]'", text):
        assert extra in extras, extra
    assert "pip install ." in text and "gemmgen[verify] @ git+URL" in text
    headings = re.findall(r"^#+ .+$", text, re.M)
    assert len(headings) == len(set(headings)), headings
    readme = (REPO / "README.md").read_text()
    assert "pip install '.[verify]'" in readme and "pip install -e '.[dev]'" in readme


def test_every_block_is_one_the_runner_knows():
    found = blocks()
    assert len(found) >= 9
    unknown = [(b.section, b.info) for b in found if not KNOWN.match(b.info)]
    assert unknown == []
    sections = {b.section for b in found}
    assert {"Importing the generated code", "JAX on TPU", "C++ engine", "CuPy",
            "Expert parallelism", "pre-commit", "CI"} <= sections
    assert "## JAX on GPU (XLA FFI)" in DOC.read_text()


def _gpu_available() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, or no driver
        return False


@pytest.fixture
def project(tmp_path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "project"
    for folder in ("specs", "generated", "examples"):
        shutil.copytree(REPO / folder, root / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, command in (("python", f'exec "{sys.executable}" "$@"'),
                          ("gemmgen", f'PYTHONPATH="{REPO}" exec "{sys.executable}" -m gemmgen "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{command}\n")
        (bin_dir / name).chmod(0o755)
    path = [str(bin_dir)]
    nvcc = find_nvcc()
    if nvcc is not None:
        path.append(str(Path(nvcc).parent))
    # No PYTHONPATH: the project's code is found from its root, the folder
    # the commands run in.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}
    env.update(PATH=os.pathsep.join([*path, os.environ.get("PATH", "")]), JAX_PLATFORMS="cpu")
    return root, env


def _run(cmd, root: Path, env: dict[str, str], timeout: int = 900):
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _section(name: str) -> list[Block]:
    found = [b for b in blocks() if b.section == name]
    assert found, name
    return found


def _run_python(section: str, project) -> str:
    root, env = project
    code = [b.text for b in _section(section)
            if b.info == "python" or (b.info == "python gpu" and _gpu_available())]
    r = _run([sys.executable, "-c", "\n".join(code)], root, env)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


def test_importing(project):
    assert _run_python("Importing the generated code", project).split() == [
        "generated.moe.pallas.gmm_bf16", "gmm_bf16"]


def test_jax_on_tpu(project):
    assert _run_python("JAX on TPU", project).strip() == "(256, 128) bfloat16 (4, 128, 128)"


def test_cupy(project):
    out = _run_python("CuPy", project).splitlines()
    assert out and all(line.startswith("gmm_bf16") for line in out[:2]), out


def test_expert_parallelism_pattern(project):
    out = _run_python("Expert parallelism", project).strip()
    assert out == "1"  # one Mosaic kernel, the check_vma=True function lowered for TPU


def _run_sh(section: str, project, *, skip: tuple[str, ...] = ()) -> None:
    root, env = project
    for block in _section(section):
        if block.info.startswith("cpp file="):
            (root / block.info.split("=", 1)[1]).write_text(block.text)
    for block in _section(section):
        if block.info != "sh":
            continue
        for line in block.text.splitlines():
            if line.strip() and not any(s in line for s in skip):
                r = _run(["bash", "-c", line], root, env)
                assert r.returncode == 0, f"{line}\n{r.stdout}{r.stderr[-4000:]}"
                assert "warning" not in r.stderr.lower(), r.stderr


def test_pytorch(project):
    """The PyTorch section: `gemmgen compile --torch --emulate`, then the
    ops on CPU tensors (the emulated kernels), compiled and differentiated."""
    pytest.importorskip("torch", reason="PyTorch is an optional extra: pip install -e '.[torch]'")
    _run_sh("PyTorch", project)
    assert _run_python("PyTorch", project).split() == [
        "torch.Size([40])", "torch.Size([64,", "128])", "torch.Size([3,", "256,", "128])"]


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
def test_cpp_engine(project):
    root, _ = project
    _run_sh("C++ engine", project)
    assert (root / "gmm_bf16.o").stat().st_size > 0 and (root / "engine.o").stat().st_size > 0


@pytest.mark.slow
def test_expert_parallel_example_command(project):
    _run_sh("Expert parallelism", project)


def _yaml_value(text: str, key: str) -> str:
    return re.search(rf"^\s*-?\s*{key}: (.+)$", text, re.M).group(1).strip()


def _stale(root: Path) -> None:
    path = root / "generated" / "moe" / "cuda" / "gg_gemm.cuh"
    path.write_text(path.read_text() + "// edited\n")


def test_pre_commit_hook(project):
    root, env = project
    (block,) = [b for b in _section("pre-commit") if b.info == "yaml pre-commit"]
    assert _yaml_value(block.text, "pass_filenames") == "false"
    hooks = (REPO / ".pre-commit-hooks.yaml").read_text()
    provided = hooks[hooks.index("id: gemmgen-check"):hooks.index("id: gemmgen-build")]
    assert _yaml_value(block.text, "id") == "gemmgen-check"
    for key in ("entry", "files"):
        assert _yaml_value(block.text, key) == _yaml_value(provided, key), key
    files = re.compile(_yaml_value(block.text, "files"))
    assert files.search("specs/moe.gemm") and files.search("generated/moe/cuda/gg_runtime.cuh")
    assert not files.search("src/model.py")
    entry = _yaml_value(block.text, "entry")
    assert _run(["bash", "-c", entry], root, env).returncode == 0
    _stale(root)
    r = _run(["bash", "-c", entry], root, env)
    assert r.returncode == 1 and "gg_gemm.cuh" in r.stdout + r.stderr


def test_github_actions(project):
    root, env = project
    (block,) = [b for b in _section("CI") if b.info == "yaml github-actions"]
    steps = re.findall(r"^\s*- run: (.+)$", block.text, re.M)
    assert steps == ["pip install -r requirements-dev.txt", "gemmgen check"]
    for step in steps[1:]:
        assert _run(["bash", "-c", step], root, env).returncode == 0
    _stale(root)
    assert _run(["bash", "-c", steps[-1]], root, env).returncode == 1
