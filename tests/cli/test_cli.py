"""The CLI end to end: build, check (stale / missing / orphaned), list,
atomic failure, determinism across runs, directories and hash seeds."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gemmgen.cli import main

REPO = Path(__file__).resolve().parents[2]
# Every spec of the repository: what `check` compares with generated/.
SPECS = sorted(f"specs/{p.name}" for p in (REPO / "specs").glob("*.gemm"))


def tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def run_cli(*args: str, cwd: Path, seed: str = "0") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONHASHSEED=seed, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-m", "gemmgen", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_build_then_check_clean(project, capsys):
    assert main(["build", *SPECS]) == 0
    files = tree(project / "generated")
    assert "moe/MANIFEST.json" in files and "dense/MANIFEST.json" in files
    assert any(f.startswith("moe/pallas/") and f.endswith(".py") for f in files)
    for rel in files:
        text = (project / "generated" / rel).read_text()
        first = text.splitlines()[0] if not rel.endswith(".json") else text
        assert "DO NOT EDIT." in first and "specs/" in first, rel
    capsys.readouterr()
    assert main(["check"]) == 0
    # A second build writes nothing.
    assert main(["build", "specs/moe.gemm"]) == 0
    assert "0 written" in capsys.readouterr().out


def test_check_reports_stale_missing_orphaned(project, capsys):
    assert main(["build", *SPECS]) == 0
    gen = project / "generated" / "moe" / "pallas"
    edited = gen / "gmm_bf16.py"
    edited.write_text(edited.read_text().replace("def gmm_bf16(", "def gmm_bf16_edited(", 1))
    missing = gen / "gmm_bf16_kn.py"
    missing.unlink()
    (gen / "stray.py").write_text("x = 1\n")
    # A kernel renamed in the spec: its old files are gemmgen's and orphaned.
    spec = project / "specs" / "moe.gemm"
    spec.write_text(spec.read_text().replace("kernel gmm_bf16_lut {", "kernel gmm_bf16_lut2 {"))
    # The output of a spec that was deleted.
    shutil.copytree(project / "generated" / "dense", project / "generated" / "gone")
    capsys.readouterr()
    assert main(["check"]) == 1
    err = capsys.readouterr().err.replace(str(project) + os.sep, "").replace(os.sep, "/")
    assert "stale: generated/moe/pallas/gmm_bf16.py" in err
    assert "-def gmm_bf16_edited(" in err and "+def gmm_bf16(" in err
    assert "missing: generated/moe/pallas/gmm_bf16_kn.py" in err
    assert "missing: generated/moe/pallas/gmm_bf16_lut2.py" in err
    assert "orphaned: generated/moe/pallas/gmm_bf16_lut.py (no longer generated)" in err
    # A file gemmgen did not write is reported, kept, and not a failure.
    assert "unexpected: generated/moe/pallas/stray.py" in err
    assert "orphaned: generated/gone (its spec specs/dense.gemm is not built any more" in err
    assert f"gemmgen build {' '.join(SPECS)}" in err  # every spec of the project
    assert "remove generated/gone" in err
    # build repairs everything it owns and keeps what it does not.
    assert main(["build", "specs/moe.gemm"]) == 0
    out = capsys.readouterr().out.replace(str(project) + os.sep, "").replace(os.sep, "/")
    assert "removed generated/moe/pallas/gmm_bf16_lut.py (no longer generated)" in out
    assert "kept generated/moe/pallas/stray.py (not written by gemmgen)" in out
    assert (gen / "stray.py").read_text() == "x = 1\n"
    assert not (gen / "gmm_bf16_lut.py").exists()
    assert (project / "generated" / "gone").is_dir()  # another stem: never touched
    shutil.rmtree(project / "generated" / "gone")
    assert main(["check"]) == 0
    assert "unexpected: " in capsys.readouterr().err


def test_failed_build_writes_nothing(project, capsys):
    assert main(["build", "specs/moe.gemm"]) == 0
    before = tree(project / "generated")
    mtimes = {p: p.stat().st_mtime_ns for p in (project / "generated").rglob("*")}
    spec = project / "specs" / "moe.gemm"
    spec.write_text(spec.read_text().replace("out bf16", "out bf61", 1))
    # moe.gemm is broken; dense.gemm is fine and must not be written either.
    assert main(["build", "specs/dense.gemm", "specs/moe.gemm"]) == 2
    err = capsys.readouterr().err
    assert "moe.gemm:" in err and "unknown dtype 'bf61'" in err and "did you mean 'bf16'" in err
    assert "nothing was written" in err
    assert tree(project / "generated") == before
    assert {p: p.stat().st_mtime_ns for p in (project / "generated").rglob("*")} == mtimes
    assert not (project / "generated" / "dense").exists()


def test_output_is_identical_across_cwd_and_hash_seed(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        shutil.copytree(REPO / "specs", d / "specs")
    r1 = run_cli("build", *SPECS, cwd=a, seed="1")
    # From another directory, with absolute paths and another hash seed.
    r2 = run_cli("build", *(str(b / s) for s in reversed(SPECS)), cwd=tmp_path, seed="4242")
    assert r1.returncode == 0, r1.stderr
    assert r2.returncode == 0, r2.stderr
    assert tree(a / "generated") == tree(b / "generated")
    # And it matches what is committed.
    assert tree(a / "generated") == tree(REPO / "generated")


def test_list_prints_kernels(project, capsys):
    assert main(["list", "specs/moe.gemm"]) == 0
    out = capsys.readouterr().out
    assert "gmm_bf16: grouped lhs bf16 x rhs bf16 [g, n, k] -> f32" in out
    assert "tile 128x128x128" in out
    assert "gmm_f32_tile_64x128x128" in out


def test_bad_invocations_exit_2(project, capsys):
    assert main(["build", "specs/nope.gemm"]) == 2
    assert "no such spec file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2
    nowhere = project / "empty"
    nowhere.mkdir()
    r = run_cli("build", cwd=nowhere.parent.parent)  # no specs/ here or above
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "no specs given, and no specs/*.gemm here or in a folder above" in r.stderr


def test_build_and_check_find_the_project_from_a_subfolder(project):
    """As git finds .git: the nearest folder above with specs/*.gemm."""
    sub = project / "generated_docs" / "deep"
    sub.mkdir(parents=True)
    r = run_cli("build", cwd=sub)
    assert r.returncode == 0, r.stderr
    assert (project / "generated" / "moe" / "MANIFEST.json").is_file()
    assert not (sub / "generated").exists()
    r = run_cli("check", cwd=sub)
    assert r.returncode == 0, r.stderr
    assert f"gemmgen check: {len(SPECS)} specs," in r.stdout and "up to date" in r.stdout
    (project / "generated" / "moe" / "pallas" / "gmm_bf16.py").unlink()
    r = run_cli("check", cwd=sub)
    assert r.returncode == 1
    assert f"gemmgen build {' '.join('../../' + s for s in SPECS)}" in r.stderr


def test_python_dash_m_and_console_script(project):
    r = run_cli("check", cwd=project)
    assert r.returncode == 1  # nothing built yet: everything is missing
    assert "missing:" in r.stderr and "gemmgen build" in r.stderr


def test_help_loads_no_heavy_module():
    """`gemmgen --help` and argument errors parse arguments only."""
    code = ("import sys\nfrom gemmgen.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('lark', 'jinja2', 'numpy', 'jax', 'gemmgen.backends') "
            "if m in sys.modules]\nprint(heavy)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_generator_cache_never_changes_output(tmp_path):
    """The lark tables and compiled templates cached in $GEMMGEN_CACHE: a
    cold cache, a warm one and a corrupted one build the same bytes."""
    cache = tmp_path / "cache"
    outs = []
    for state in ("cold", "warm", "corrupt"):
        root = tmp_path / state
        shutil.copytree(REPO / "specs", root / "specs")
        if state == "corrupt":
            for p in cache.rglob("*"):
                if p.is_file():
                    p.write_bytes(b"\0garbage")
        env = dict(os.environ, GEMMGEN_CACHE=str(cache))
        r = subprocess.run([sys.executable, "-m", "gemmgen", "build", *SPECS], cwd=root,
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        outs.append(tree(root / "generated"))
        if state == "cold":
            assert list((cache / "lark").glob("*.pickle")) and any((cache / "jinja").iterdir())
    assert outs[0] == outs[1] == outs[2] == tree(REPO / "generated")


def test_pre_commit_hooks_run_check_once_on_specs_and_generated():
    import re

    text = (REPO / ".pre-commit-hooks.yaml").read_text()
    hooks = [h for h in re.split(r"^- ", text, flags=re.M)[1:]]
    by_id = {re.search(r"^id: (\S+)", h, re.M).group(1): h for h in hooks}
    check = by_id["gemmgen-check"]
    assert re.search(r"^\s*entry: gemmgen check$", check, re.M)
    assert re.search(r"^\s*pass_filenames: false$", check, re.M)
    files = re.compile(re.search(r"^\s*files: (\S+)$", check, re.M).group(1))
    assert files.search("specs/moe.gemm") and files.search("generated/moe/cuda/x.cu")
    assert not files.search("gemmgen/cli.py") and not files.search("tests/specs/x.gemm")
    assert files.search("pyproject.toml")  # where [tool.gemmgen] output moves generated/
    # The hook's command, as pre-commit runs it at the repository root.
    r = run_cli("check", cwd=REPO)
    assert r.returncode == 0, r.stderr


TINY_SPEC = """target pallas_tpu {
  tpu v5e
}

kernel tiny_gemm {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out f32
  tile m=128 n=128 k=128
  tile_rule m<=64 -> m=64 n=128 k=128
  backends pallas_tpu
}
"""


def test_counts_are_singular_for_one(tmp_path, monkeypatch, capsys):
    """"1 spec", "1 problem", "1 tile rule": never "1 specs"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "tiny.gemm").write_text(TINY_SPEC)
    assert main(["build", "specs/tiny.gemm"]) == 0
    assert "1 spec, " in capsys.readouterr().out
    assert main(["check", "specs/tiny.gemm"]) == 0
    out = capsys.readouterr().out
    assert "gemmgen check: 1 spec, " in out and "1 specs" not in out
    assert main(["list", "specs/tiny.gemm"]) == 0
    assert "+1 tile rule" in capsys.readouterr().out
    manifest = tmp_path / "generated" / "tiny" / "MANIFEST.json"
    manifest.write_text(manifest.read_text() + " ")
    assert main(["check", "specs/tiny.gemm"]) == 1
    err = capsys.readouterr().err
    assert "(1 problem)" in err and "1 problems" not in err
    (tmp_path / "specs" / "tiny.gemm").write_text(TINY_SPEC.replace("op dense", "op densee"))
    assert main(["build", "specs/tiny.gemm"]) == 2
    assert "\n1 error; nothing was written" in capsys.readouterr().err


def test_list_shows_a_backends_own_tile(tmp_path, monkeypatch, capsys):
    (tmp_path / "both.gemm").write_text(
        "target cuda {\n  archs sm_80\n}\n\ntarget pallas_tpu {\n  tpu v5e\n}\n\n"
        "kernel dense_both {\n  op dense\n  lhs bf16 [m, k]\n  rhs bf16 [n, k]\n  out bf16\n"
        "  tile m=64 n=128 k=128\n  tile pallas_tpu m=512 n=1024 k=512\n"
        "  backends pallas_tpu cuda\n}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["list", "both.gemm"]) == 0
    out = capsys.readouterr().out
    assert "tile 64x128x128 (pallas_tpu: tile 512x1024x512) stages 2 [cuda, pallas_tpu]" in out
