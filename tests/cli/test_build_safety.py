"""Builds that cannot hurt (docs/decisions.md, "Builds that cannot hurt").

Whatever the spec's file name, the state of `generated/`, or a kill at any
instant, a build changes nothing outside `generated/<stem>/`, removes only
files gemmgen wrote, and leaves the old tree or the new one.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gemmgen import output
from build_kill_driver import snapshot as _snapshot
from gemmgen.cli import main

REPO = Path(__file__).resolve().parents[2]


def snapshot(root: Path) -> dict[str, str]:
    """Every entry below root (links not followed): path -> hash or link target."""
    return _snapshot(root) if root.exists() else {}
HERE = Path(__file__).resolve().parents[1]

SMALL = """\
target pallas_tpu {
  tpu v5e
}

kernel mm_a {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [k, n]
  out f32
  tile m=128 n=128 k=128
  backends pallas_tpu
}

kernel mm_b {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=128 n=128 k=128
  backends pallas_tpu
}
"""
# The next version: mm_a changes, mm_b goes, mm_c comes.
SMALL_NEXT = SMALL.replace("out f32", "out bf16").replace("kernel mm_b", "kernel mm_c")


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """A project with specs/small.gemm built once, cwd at its root."""
    root = tmp_path / "proj"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "small.gemm").write_text(SMALL)
    monkeypatch.chdir(root)
    assert main(["build", "specs/small.gemm"]) == 0
    return root


def run_cli(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-m", "gemmgen", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, **kw)


# -- containment ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["..gemm", "...gemm", "a b.gemm", "1st.gemm", "class.gemm",
                                  "x-y.gemm", "caf\u00e9.gemm", "esc\x1b[2J.gemm",
                                  "new\nline.gemm"])
def test_spec_names_that_are_not_identifiers_are_refused(proj, capsys, name):
    (proj / "specs" / name).write_text(SMALL)
    before = snapshot(proj)
    assert main(["build", f"specs/{name}"]) == 2
    err = capsys.readouterr().err
    assert "the spec's name" in err and "it names the output folder" in err
    assert "\x1b" not in err and "\n" not in err.rstrip("\n")  # shown escaped, on one line
    assert snapshot(proj) == before


def test_dot_dot_spec_cannot_touch_the_project(tmp_path):
    root = tmp_path / "p"
    shutil_copy_specs(root)
    (root / "specs" / "...gemm").write_text(SMALL)
    (root / "keep.txt").write_text("mine")
    assert run_cli("build", "specs/moe.gemm", cwd=root).returncode == 0
    before = snapshot(root)
    r = run_cli("build", "specs/...gemm", "specs/moe.gemm", cwd=root)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "specs/...gemm: error: the spec's name '..'" in r.stderr
    assert snapshot(root) == before


def shutil_copy_specs(root: Path) -> None:
    import shutil
    shutil.copytree(REPO / "specs", root / "specs")


def test_symlinked_output_folder_is_refused_and_its_target_untouched(proj, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.py").write_text("keep me\n")
    (elsewhere / "MANIFEST.json").write_text((proj / "generated/small/MANIFEST.json").read_text())
    import shutil
    shutil.rmtree(proj / "generated" / "small")
    (proj / "generated" / "small").symlink_to(elsewhere)
    before = snapshot(elsewhere)
    assert main(["build", "specs/small.gemm"]) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert main(["check", "specs/small.gemm"]) == 2
    assert snapshot(elsewhere) == before


def test_symlinked_generated_folder_is_refused(tmp_path, monkeypatch, capsys):
    root = tmp_path / "p"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "small.gemm").write_text(SMALL)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "generated").symlink_to(elsewhere)
    monkeypatch.chdir(root)
    assert main(["build", "specs/small.gemm"]) == 2
    assert "generated is a symbolic link" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []


def test_links_inside_the_tree_are_kept_not_followed(proj, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.py").write_text("x = 1\n")
    gen = proj / "generated" / "small"
    (gen / "ext").symlink_to(outside)
    (gen / "pallas" / "alias.py").symlink_to(outside / "data.py")
    (proj / "specs" / "small.gemm").write_text(SMALL_NEXT)
    assert main(["build", "specs/small.gemm"]) == 0
    assert os.readlink(gen / "ext") == str(outside)
    assert os.readlink(gen / "pallas" / "alias.py") == str(outside / "data.py")
    assert snapshot(outside) == {"data.py": hashlib.sha256(b"x = 1\n").hexdigest()}
    assert main(["check", "specs/small.gemm"]) == 0
    err = capsys.readouterr().err
    assert "unexpected: " in err and "ext" in err


def test_only_files_the_manifest_owns_are_removed(proj, capsys):
    gen = proj / "generated" / "small"
    (gen / "BUILD.bazel").write_text("# hand-written\n")
    (gen / "notes").mkdir()
    (gen / "notes" / "todo.md").write_text("- review\n")
    (gen / "empty").mkdir()
    # mm_b goes away in the next spec; the user edited its file first, so it
    # is no longer the bytes gemmgen wrote and must be kept.
    edited = gen / "pallas" / "mm_b.py"
    edited.write_text(edited.read_text() + "# local change\n")
    (proj / "specs" / "small.gemm").write_text(SMALL_NEXT)
    capsys.readouterr()
    assert main(["build", "specs/small.gemm"]) == 0
    out = capsys.readouterr().out
    assert "kept" in out and "BUILD.bazel" in out and "mm_b.py" in out
    assert (gen / "BUILD.bazel").read_text() == "# hand-written\n"
    assert (gen / "notes" / "todo.md").read_text() == "- review\n"
    assert (gen / "empty").is_dir()
    assert edited.read_text().endswith("# local change\n")
    assert (gen / "pallas" / "mm_c.py").is_file()
    # Unedited and gone from the spec: removed.
    (proj / "specs" / "small.gemm").write_text(SMALL)
    assert main(["build", "specs/small.gemm"]) == 0
    (proj / "specs" / "small.gemm").write_text(SMALL_NEXT)
    capsys.readouterr()
    assert main(["build", "specs/small.gemm"]) == 0
    assert "removed" in capsys.readouterr().out
    assert not (gen / "pallas" / "mm_b.py").exists()
    assert (gen / "pallas" / "mm_c.py").is_file()


def test_without_a_manifest_nothing_is_removed(proj):
    gen = proj / "generated" / "small"
    (gen / "MANIFEST.json").unlink()
    (proj / "specs" / "small.gemm").write_text(SMALL_NEXT)
    assert main(["build", "specs/small.gemm"]) == 0
    assert (gen / "pallas" / "mm_b.py").is_file()  # not provably gemmgen's any more


def test_a_foreign_file_in_the_way_is_an_error(proj, capsys):
    gen = proj / "generated" / "small" / "pallas"
    (proj / "specs" / "small.gemm").write_text(SMALL_NEXT)
    (gen / "mm_c.py").write_text("# my own module\n")
    before = snapshot(proj / "generated")
    assert main(["build", "specs/small.gemm"]) == 2
    err = capsys.readouterr().err
    assert "mm_c.py was not written by gemmgen" in err and "move it away" in err
    assert snapshot(proj / "generated") == before


def test_another_specs_output_is_refused(proj, capsys):
    manifest = proj / "generated" / "small" / "MANIFEST.json"
    doc = json.loads(manifest.read_text())
    doc["spec"] = "specs/Small.gemm"
    manifest.write_text(json.dumps(doc))
    assert main(["build", "specs/small.gemm"]) == 2
    assert "holds the output of specs/Small.gemm" in capsys.readouterr().err


def test_case_twin_stems_are_refused(proj, capsys):
    (proj / "specs" / "Small.gemm").write_text(SMALL.replace("mm_", "other_"))
    assert main(["build", "specs/small.gemm", "specs/Small.gemm"]) == 2
    assert "differ in more than case" in capsys.readouterr().err


def test_unchanged_files_keep_their_inode_and_mtime(proj):
    f = proj / "generated" / "small" / "pallas" / "mm_b.py"
    st = f.stat()
    (proj / "specs" / "small.gemm").write_text(SMALL.replace("out f32", "out bf16"))
    assert main(["build", "specs/small.gemm"]) == 0
    st2 = f.stat()
    assert (st2.st_ino, st2.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)


# -- atomic trees, locks and file-system errors ---------------------------------

def test_a_kill_at_every_step_leaves_the_old_or_the_new_tree(proj, tmp_path):
    gen = proj / "generated" / "small"
    (gen / "BUILD.bazel").write_text("# kept\n")
    (gen / "link").symlink_to("/nonexistent-target")
    (gen / "pallas" / "__pycache__").mkdir()
    (gen / "pallas" / "__pycache__" / "x.pyc").write_bytes(b"\0pyc")
    new = tmp_path / "next.gemm"
    new.write_text(SMALL_NEXT)
    r = subprocess.run([sys.executable, str(HERE / "build_kill_driver.py"), str(proj),
                        "specs/small.gemm", str(new)], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    # Every mutating call was a kill point, and both outcomes were seen.
    assert result["kills"] > 20 and result["old"] > 0 and result["new"] > 0, result


def test_random_sigkill_loop(tmp_path):
    """Real processes killed at random instants: old tree or new tree."""
    root = tmp_path / "p"
    (root / "specs").mkdir(parents=True)
    spec = root / "specs" / "small.gemm"
    spec.write_text(SMALL)
    assert run_cli("build", "specs/small.gemm", cwd=root).returncode == 0
    gen = root / "generated" / "small"
    old = snapshot(gen)
    spec.write_text(SMALL_NEXT)
    assert run_cli("build", "specs/small.gemm", cwd=root).returncode == 0
    new = snapshot(gen)
    t0 = time.monotonic()
    assert run_cli("build", "specs/small.gemm", cwd=root).returncode == 0
    full = time.monotonic() - t0
    rng = random.Random(9)
    outcomes = set()
    for _ in range(8):
        spec.write_text(SMALL)
        assert run_cli("build", "specs/small.gemm", cwd=root).returncode == 0
        spec.write_text(SMALL_NEXT)
        p = subprocess.Popen([sys.executable, "-m", "gemmgen", "build", "specs/small.gemm"],
                             cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=dict(os.environ, JAX_PLATFORMS="cpu"))
        time.sleep(rng.uniform(0.5, 1.0) * full)
        p.send_signal(signal.SIGKILL)
        p.wait()
        now = snapshot(gen)
        assert now in (old, new)
        outcomes.add("old" if now == old else "new")
        r = run_cli("build", "specs/small.gemm", cwd=root)
        assert r.returncode == 0, r.stderr
        assert snapshot(gen) == new
        assert not [p for p in (root / "generated").iterdir() if p.name.startswith(".")]
    assert outcomes  # which ones depends on timing; both trees are valid


def test_concurrent_builds_serialise(tmp_path):
    root = tmp_path / "p"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "small.gemm").write_text(SMALL)
    procs = [subprocess.Popen([sys.executable, "-m", "gemmgen", "build", "specs/small.gemm"],
                              cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, JAX_PLATFORMS="cpu")) for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "Traceback" not in err
    assert run_cli("check", "specs/small.gemm", cwd=root).returncode == 0
    assert not [p for p in (root / "generated").iterdir() if p.name.startswith(".")]


def test_a_held_lock_makes_a_build_wait_then_fail(proj, capsys, monkeypatch):
    monkeypatch.setattr(output, "LOCK_TIMEOUT_S", 0.3)
    fd = os.open(proj / "generated", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        (proj / "specs" / "small.gemm").write_text(SMALL_NEXT)
        before = snapshot(proj / "generated")
        assert main(["build", "specs/small.gemm"]) == 2
        err = capsys.readouterr().err
        assert "waiting for another build" in err and "did not finish within 0.3 s" in err
        assert snapshot(proj / "generated") == before
        # Released while waiting: the build goes on.
        monkeypatch.setattr(output, "LOCK_TIMEOUT_S", 30)
        threading.Timer(0.3, lambda: os.close(fd)).start()
        assert main(["build", "specs/small.gemm"]) == 0
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES, errno.EROFS])
def test_file_system_errors_are_messages_and_keep_the_old_tree(proj, capsys, monkeypatch, err):
    calls = [0]
    real = output._write_file

    def failing(dst, data):
        calls[0] += 1
        if calls[0] == 2:
            raise OSError(err, os.strerror(err), str(dst))
        real(dst, data)

    monkeypatch.setattr(output, "_write_file", failing)
    before = snapshot(proj / "generated")
    (proj / "specs" / "small.gemm").write_text(SMALL_NEXT)
    assert main(["build", "specs/small.gemm"]) == 2
    msg = capsys.readouterr().err
    assert "Traceback" not in msg and os.strerror(err) in msg
    assert "the previous output is unchanged" in msg
    assert snapshot(proj / "generated") == before


def test_read_only_generated_folder(proj, capsys, monkeypatch):
    real_mkdir = os.mkdir

    def denied(path, *a, **kw):
        if ".gemmgen-stage-" in str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_mkdir(path, *a, **kw)

    monkeypatch.setattr(os, "mkdir", denied)
    (proj / "specs" / "small.gemm").write_text(SMALL_NEXT)
    before = snapshot(proj / "generated")
    assert main(["build", "specs/small.gemm"]) == 2
    msg = capsys.readouterr().err
    assert "Permission denied" in msg and "check the folder's permissions" in msg
    assert snapshot(proj / "generated") == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits")
def test_read_only_generated_folder_for_real(proj, capsys):
    gen = proj / "generated"
    (proj / "specs" / "small.gemm").write_text(SMALL_NEXT)
    gen.chmod(0o555)
    try:
        assert main(["build", "specs/small.gemm"]) == 2
    finally:
        gen.chmod(0o755)
    assert "Permission denied" in capsys.readouterr().err


# -- input files ---------------------------------------------------------------------

def test_bom_is_accepted(proj):
    before = snapshot(proj / "generated")
    (proj / "specs" / "small.gemm").write_bytes(b"\xef\xbb\xbf" + SMALL.encode())
    assert main(["build", "specs/small.gemm"]) == 0
    assert snapshot(proj / "generated") == before


def test_fifo_and_folder_are_refused_without_blocking(tmp_path):
    (tmp_path / "specs").mkdir()
    os.mkfifo(tmp_path / "specs" / "pipe.gemm")
    (tmp_path / "specs" / "dir.gemm").mkdir()
    r = run_cli("build", "specs/pipe.gemm", cwd=tmp_path)
    assert r.returncode == 2 and "must be a regular file; this is a FIFO" in r.stderr
    r = run_cli("build", "specs/dir.gemm", cwd=tmp_path)
    assert r.returncode == 2 and "this is a folder" in r.stderr
    assert not (tmp_path / "generated").exists()


def test_oversized_spec_is_refused(tmp_path, monkeypatch, capsys):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "big.gemm").write_text("# x\n" * (2 << 20))
    monkeypatch.chdir(tmp_path)
    assert main(["build", "specs/big.gemm"]) == 2
    assert "specs are limited to" in capsys.readouterr().err


# -- bounded diagnostics -----------------------------------------------------------

def _bad_spec(lines: int, width: int) -> str:
    head = ("target pallas_tpu {\n  tpu v5e\n}\n\nkernel mm {\n  op dense\n  lhs bf16 [m, k]\n"
            "  rhs bf16 [n, k]\n  out f32\n  backends pallas_tpu\n")
    body = "".join(f"  field{i}x {'y' * width}\n" for i in range(lines))
    return head + body + "}\n"


@pytest.mark.parametrize("lines,width", [(2000, 20), (20, 200_000), (3000, 300)])
def test_diagnostic_output_is_bounded(tmp_path, monkeypatch, capsys, lines, width):
    """However large the input, at most 40 diagnostics of bounded size."""
    (tmp_path / "s.gemm").write_text(_bad_spec(lines, width))
    monkeypatch.chdir(tmp_path)
    assert main(["build", "s.gemm"]) == 2
    err = capsys.readouterr().err
    shown = err.count(": error: ")
    assert shown == min(lines, 40)
    assert len(err) < 41 * 3 * 250 + 200
    assert max(len(line) for line in err.splitlines()) <= 700
    if lines > 40:
        assert f"s.gemm: note: {lines - 40} more errors not shown" in err
    assert err.rstrip().endswith(f"{lines} errors; nothing was written")


def test_syntax_errors_far_apart_are_not_reparsed_from_the_top(tmp_path, monkeypatch, capsys):
    """Recovery re-parses from the broken block on, so the text parsed in all
    is a small multiple of the spec, not one full pass per error."""
    from gemmgen import parse as parse_mod

    good = (REPO / "specs" / "dense.gemm").read_text()
    blocks = good.split("\nkernel ")
    kernels = ["kernel " + b for b in blocks[1:]] * 12
    text = blocks[0] + "\n" + "\n".join(
        k.replace("{", "{ oops", 1) if i % 25 == 0 else k for i, k in enumerate(kernels))
    parsed = [0]  # lines the parser went through, over all passes
    real = parse_mod._first_error

    def counting(t, path):
        skipped = len(t) - len(t.lstrip("\n"))
        found = real(t, path)
        end = found[0].loc.line if found else t.count("\n")
        parsed[0] += end - skipped
        return found

    monkeypatch.setattr(parse_mod, "_first_error", counting)
    (tmp_path / "s.gemm").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert main(["build", "s.gemm"]) == 2
    n_errors = capsys.readouterr().err.count("unexpected")
    assert n_errors == len(range(0, len(kernels), 25)) > 3
    assert parsed[0] < 1.5 * text.count("\n"), (parsed[0], text.count("\n"))


RUST = """\
target cuda {
  archs sm_89
  launchers cpp cupy rust
}

kernel mm_rs {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [k, n]
  out bf16
  tile m=64 n=64 k=32
  backends cuda
}
"""


def test_the_crates_build_products_are_ignored_kept_and_never_removed(tmp_path, monkeypatch,
                                                                       capsys):
    """`cargo build` in generated/<stem>/rust/ writes target/ and Cargo.lock:
    the crate's generated .gitignore names them, `check` does not list them,
    and a build that rewrites the tree carries them over silently."""
    root = tmp_path / "proj"
    (root / "specs").mkdir(parents=True)
    spec = root / "specs" / "rs.gemm"
    spec.write_text(RUST)
    monkeypatch.chdir(root)
    assert main(["build", "specs/rs.gemm"]) == 0
    crate = root / "generated" / "rs" / "rust"
    ignore = (crate / ".gitignore").read_text()
    assert ignore.startswith("# Code generated by gemmgen from specs/rs.gemm. DO NOT EDIT.\n")
    assert [ln for ln in ignore.splitlines() if ln and not ln.startswith("#")] == \
        ["/target", "/Cargo.lock"]
    assert "rust/.gitignore" in json.loads((crate.parent / "MANIFEST.json").read_text())["files"]
    # What cargo leaves: many files under target/ (a link among them), a lock file.
    for i in range(40):
        d = crate / "target" / "debug" / ".fingerprint" / f"gemmgen-rs-{i:02d}"
        d.mkdir(parents=True)
        (d / "lib-gemmgen_rs").write_text(f"{i}\n")
    (crate / "target" / "debug" / "libgemmgen_rs.rlib").write_bytes(b"\x7fELF rlib")
    (crate / "target" / "debug" / "latest").symlink_to("libgemmgen_rs.rlib")
    (crate / "target" / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    (crate / "Cargo.lock").write_text("version = 3\n")
    before = snapshot(crate / "target")
    capsys.readouterr()
    assert main(["check", "specs/rs.gemm"]) == 0
    err = capsys.readouterr().err
    assert "unexpected" not in err and "target" not in err and "Cargo.lock" not in err, err
    # A changed spec rewrites the tree: target/ and Cargo.lock come along, unreported.
    spec.write_text(RUST.replace("tile m=64 n=64 k=32", "tile m=64 n=128 k=32"))
    assert main(["build", "specs/rs.gemm"]) == 0
    out = capsys.readouterr().out
    assert any(ln.startswith("wrote ") for ln in out.splitlines()), out
    assert not [ln for ln in out.splitlines() if ln.startswith(("kept ", "removed "))], out
    assert snapshot(crate / "target") == before
    assert (crate / "Cargo.lock").read_text() == "version = 3\n"
    assert main(["check", "specs/rs.gemm"]) == 0
    assert "unexpected" not in capsys.readouterr().err
    # Dropping the Rust launchers removes the crate's own files, never cargo's.
    spec.write_text(RUST.replace(" rust\n", "\n"))
    assert main(["build", "specs/rs.gemm"]) == 0
    assert not (crate / ".gitignore").exists() and not (crate / "src").exists()
    assert snapshot(crate / "target") == before
    assert (crate / "Cargo.lock").is_file()


# -- the output folder ([tool.gemmgen] output in pyproject.toml) ---------------

def _pyproject(root: Path, output: str) -> None:
    (root / "pyproject.toml").write_text(
        '[project]\nname = "myproj"\n\n# Where gemmgen writes.\n[tool.gemmgen]\n'
        f"output = {output}\n")


def test_a_configured_output_folder_is_the_package(tmp_path, monkeypatch, capsys):
    """`[tool.gemmgen] output` moves every spec's package: build, check and
    MANIFEST.json follow it, the generated Python imports under the project's
    own package name (its imports between generated files are relative), and
    the render cache does not hand back the default layout's files."""
    root = tmp_path / "proj"
    (root / "specs").mkdir(parents=True)
    shutil.copy(REPO / "specs" / "moe.gemm", root / "specs")
    monkeypatch.chdir(root)
    assert main(["build"]) == 0  # the default first: generated/moe/
    assert (root / "generated" / "moe" / "MANIFEST.json").is_file()
    shutil.rmtree(root / "generated")
    _pyproject(root, '"src/myproj/kernels"')
    pkg = root / "src" / "myproj"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""The project\'s own package."""\n')
    capsys.readouterr()
    assert main(["build"]) == 0
    assert not (root / "generated").exists()
    out = pkg / "kernels" / "moe"
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["spec"] == "specs/moe.gemm" and "jax/gmm_bf16.py" in manifest["files"]
    init = (out / "__init__.py").read_text()
    assert "With the folder that holds myproj/ (src/) on sys.path:" in init
    assert "from myproj.kernels.moe.pallas.<kernel> import <kernel>" in init
    assert "generated." not in init and "generated/" not in init
    for py in out.rglob("*.py"):
        for line in py.read_text().splitlines():
            if "<kernel>" not in line:  # the docstring's example is the one absolute import
                assert not re.match(r"\s*(from|import)\s+(generated|myproj)\b", line), (py, line)
    # The project's own package files beside the specs' packages are not noise.
    (pkg / "kernels" / "__init__.py").write_text("")
    capsys.readouterr()
    assert main(["check"]) == 0
    captured = capsys.readouterr()
    assert "unexpected" not in captured.err, captured.err
    assert "gemmgen check: 1 spec" in captured.out
    # A stale file is reported under the configured folder.
    (out / "jax" / "gmm_bf16.py").write_text("# edited\n")
    assert main(["check"]) == 1
    err = capsys.readouterr().err
    assert "stale: " in err and "src/myproj/kernels/moe/jax/gmm_bf16.py" in err
    assert "src/myproj/kernels/ is out of date" in err
    assert main(["build"]) == 0
    # The generated package imports as myproj.kernels.moe with src/ on sys.path.
    code = ("import sys; sys.path.insert(0, 'src'); import myproj.kernels.moe.jax.gmm_bf16 as m; "
            "import myproj.kernels.moe.cuda.gmm_bf16 as c; print(m.__name__, c.NAME)")
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["myproj.kernels.moe.jax.gmm_bf16", "gmm_bf16"]


@pytest.mark.parametrize("value, problem", [
    ('"/tmp/elsewhere"', "is absolute"),
    ('"../elsewhere"', "leaves the project ('..')"),
    ('"src/../../elsewhere"', "leaves the project ('..')"),
    ('"specs/out"', "is inside specs/"),
    ('"."', "must name a folder below the project root"),
    ('""', "must name a folder below the project root"),
    ('"src//kernels"', "must name a folder below the project root"),
    ('"my-proj/kernels"', "'my-proj' is not a Python identifier"),
    ('"src\\\\kernels"', "use '/' between folders"),
    ("5", "must be a string"),
])
def test_a_dangerous_output_folder_is_a_positioned_error(tmp_path, monkeypatch, capsys, value,
                                                         problem):
    root = tmp_path / "proj"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "small.gemm").write_text(SMALL)
    _pyproject(root, value)
    monkeypatch.chdir(root)
    before = snapshot(tmp_path)
    for command in (["build"], ["check"], ["build", "specs/small.gemm"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith("gemmgen: pyproject.toml:6:10: error: [tool.gemmgen] output "), err
        assert problem in err and "Traceback" not in err
    assert snapshot(tmp_path) == before


def test_an_unknown_setting_is_a_positioned_error(tmp_path, monkeypatch, capsys):
    root = tmp_path / "proj"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "small.gemm").write_text(SMALL)
    (root / "pyproject.toml").write_text('[tool.gemmgen]\noutptu = "src/k"\n')
    monkeypatch.chdir(root)
    assert main(["build"]) == 2
    assert capsys.readouterr().err == ("gemmgen: pyproject.toml:2:10: error: [tool.gemmgen]: "
                                       "unknown setting 'outptu'; did you mean 'output'? "
                                       "(known: output)\n")
    assert not (root / "generated").exists() and not (root / "src").exists()


def test_a_link_on_the_way_to_the_output_folder_is_refused(tmp_path, monkeypatch, capsys):
    root = tmp_path / "proj"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "small.gemm").write_text(SMALL)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "src").symlink_to(outside)
    _pyproject(root, '"src/kernels"')
    monkeypatch.chdir(root)
    assert main(["build"]) == 2
    err = capsys.readouterr().err
    assert "src is a symbolic link" in err and "never follows links" in err
    assert list(outside.iterdir()) == []
