"""Kill a build at every file-system step and check what is left.

Run as a script (a fresh process without JAX, so forking is safe):

    python tests/build_kill_driver.py PROJECT SPEC NEW_SPEC_TEXT_FILE

PROJECT holds an already-built spec (the old tree). For N = 1, 2, ... a
forked child builds the new spec text with every mutating `os` call counted,
and calls `os._exit` at the N-th — as a kill would stop it. After each kill
the parent checks that `generated/<stem>` is exactly the old tree or exactly
the new one, then builds normally and checks that the result is the new tree
with no staging folder left. It stops at the first N that the build
survives, and prints one JSON line: {"kills": N - 1, "old": a, "new": b}.
Exit status 1 and a message on any other outcome.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from gemmgen import build, specfile

MUTATING = ("open", "write", "fsync", "chmod", "link", "symlink", "rename", "replace",
            "unlink", "rmdir", "mkdir")


def snapshot(root: Path) -> dict[str, str]:
    """Every entry below root, links not followed: path -> content hash or link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif p.is_dir() and not any(p.iterdir()):
                out[rel] = "empty-dir"
    return out


def leftovers(gen: Path) -> list[str]:
    return sorted(p.name for p in gen.iterdir() if p.name.startswith(".gemmgen-"))


def main() -> int:
    project, spec_rel, new_text_file = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    os.chdir(project)
    spec = Path(spec_rel)
    stem = specfile.spec_stem(spec.name)
    gen = project / "generated"
    out = gen / stem
    old_tree = snapshot(out)
    backup = project / "old-tree-backup"
    shutil.copytree(out, backup, symlinks=True)
    old_text = spec.read_text()
    spec.write_text(new_text_file.read_text())
    rendered = build.render_all([spec])
    # The new tree, from an uninterrupted build in a scratch copy.
    scratch = project / "scratch"
    shutil.copytree(out, scratch / "generated" / stem, symlinks=True)
    (scratch / "specs").mkdir()
    shutil.copy(spec, scratch / "specs" / spec.name)
    build.write(build.render_all([scratch / "specs" / spec.name]))
    new_tree = snapshot(scratch / "generated" / stem)
    shutil.rmtree(scratch)
    if new_tree == old_tree:
        print("the new spec does not change the tree", file=sys.stderr)
        return 1
    seen = {"old": 0, "new": 0}
    n = 0
    while True:
        n += 1
        shutil.rmtree(out)
        shutil.copytree(backup, out, symlinks=True)
        for name in leftovers(gen):
            shutil.rmtree(gen / name)
        pid = os.fork()
        if pid == 0:  # the child: build, dying at the n-th mutating call
            count = [0]

            def counted(fn):
                def wrapper(*a, **kw):
                    count[0] += 1
                    if count[0] == n:
                        os._exit(137)
                    return fn(*a, **kw)
                return wrapper

            for name in MUTATING:
                setattr(os, name, counted(getattr(os, name)))
            build.output.exchange = counted(build.output.exchange)
            try:
                build.write(rendered)
            except BaseException as e:  # noqa: BLE001 - report and fail
                print(f"kill {n}: the build raised {e!r}", file=sys.stderr)
                os._exit(3)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 137):
            return 1
        now = snapshot(out) if out.is_dir() else {}
        if now == old_tree:
            seen["old"] += 1
        elif now == new_tree:
            seen["new"] += 1
        else:
            diff = sorted(set(now.items()) ^ set(old_tree.items()))[:6]
            print(f"kill at mutating call {n}: generated/{stem} is neither the old tree nor "
                  f"the new one; differs from the old in {diff}", file=sys.stderr)
            return 1
        # The next build finishes the job and cleans up.
        build.write(rendered)
        if snapshot(out) != new_tree or leftovers(gen):
            print(f"kill at mutating call {n}: the next build left {leftovers(gen)} or a "
                  "wrong tree", file=sys.stderr)
            return 1
        if code == 0:
            break
    spec.write_text(old_text)
    shutil.rmtree(backup)
    print(json.dumps({"kills": n - 1, **seen}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
