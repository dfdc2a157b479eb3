"""The package as users install it: the templates live in the top-level
templates/ folder and install as `gemmgen.templates`, so a wheel built from
the repository, or from its sdist, renders both specs byte-identically to the
committed generated/ in a fresh venv that cannot see the checkout."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# What the build needs from the checkout (tests/ and generated/ are not packaged).
SOURCES = ("pyproject.toml", "README.md", "gemmgen", "templates")


def tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def test_every_package_is_listed():
    """The package list is explicit (a find would not see the templates
    mapping): a new subpackage must be added to it, or wheels lose it."""
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(REPO).parts)
               for p in (REPO / "gemmgen").rglob("__init__.py")}
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - on_disk == {"gemmgen.templates"}
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {"gemmgen.templates": "templates"}
    assert not (REPO / "gemmgen" / "templates").exists()


def _build(kind: str, source: Path, out: Path) -> Path:
    """PEP 517 build through setuptools' backend, without isolation (no download)."""
    out.mkdir(parents=True, exist_ok=True)
    code = (f"from setuptools import build_meta as b; "
            f"print(b.build_{kind}({str(out)!r}))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    run = subprocess.run([sys.executable, "-c", code], cwd=source, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return out / run.stdout.strip().splitlines()[-1]


def _fresh_venv(root: Path, wheel: Path) -> Path:
    """A venv without pip holding only the wheel, unpacked as an installer
    would; its dependencies (lark, jinja2) come from this venv's
    site-packages through a .pth line, which is not itself scanned for .pth
    files, so the editable install of the checkout stays invisible."""
    venv.EnvBuilder(with_pip=False).create(root)
    python = root / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


def test_wheel_and_sdist_render_like_the_checkout(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(REPO / name, src / name)
    wheel = _build("wheel", src, tmp_path / "dist")
    sdist = _build("sdist", src, tmp_path / "dist")

    # The sdist carries every template; a wheel built from it is the same.
    templates = sorted(p.relative_to(REPO).as_posix()
                       for p in (REPO / "templates").rglob("*") if p.is_file()
                       and "__pycache__" not in p.parts)
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
        assert set(templates) <= names
        t.extractall(tmp_path / "unpacked", filter="data")
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    wheel_from_sdist = _build("wheel", unpacked, tmp_path / "dist2")
    members = {}
    for w in (wheel, wheel_from_sdist):
        with zipfile.ZipFile(w) as z:
            members[w] = sorted(n for n in z.namelist() if ".dist-info/" not in n)
    assert members[wheel] == members[wheel_from_sdist]
    assert {"gemmgen/templates/" + t.split("/", 1)[1] for t in templates} <= set(members[wheel])
    assert "gemmgen/grammar.lark" in members[wheel]
    assert "gemmgen/runtime/cuda/gg_runtime.cuh" in members[wheel]

    for n, w in enumerate((wheel, wheel_from_sdist)):
        python = _fresh_venv(tmp_path / f"venv{n}", w)
        project = tmp_path / f"project{n}"
        shutil.copytree(REPO / "specs", project / "specs")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["GEMMGEN_CACHE"] = str(tmp_path / f"cache{n}")
        where = subprocess.run([python, "-c", "import gemmgen.render as r; print(r.TEMPLATE_DIR)"],
                               cwd=project, env=env, capture_output=True, text=True)
        assert where.returncode == 0, where.stderr
        assert Path(where.stdout.strip()).is_relative_to(tmp_path / f"venv{n}")
        specs = sorted(f"specs/{p.name}" for p in (REPO / "specs").glob("*.gemm"))
        run = subprocess.run([python, "-m", "gemmgen", "build", *specs], cwd=project, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        assert tree(project / "generated") == tree(REPO / "generated")
