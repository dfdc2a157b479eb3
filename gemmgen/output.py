"""Write one spec's output tree so that no build can hurt.

Rules (docs/decisions.md, "Builds that cannot hurt"):

- Containment: a spec writes into `<root>/generated/<stem>/` only (or
  `<root>/<output>/<stem>/`, the project's `[tool.gemmgen] output`, which
  gemmgen.project checks stays inside the project). Neither `generated/`
  (nor a folder on the way to `<output>`) nor `generated/<stem>` may be a
  symbolic link, and nothing
  below them is ever followed: links found in the old tree are carried over
  as links.
- Ownership: a file is removed only when the previous `MANIFEST.json` of
  that stem lists it and its bytes are still the bytes it recorded. Anything
  else that gemmgen does not generate (a hand-added `BUILD.bazel`, notes,
  `__pycache__`) is kept. A path that gemmgen now generates is overwritten
  only when it was gemmgen's (listed in the manifest, or carrying the
  generated-file header); anything else in the way is an error.
- Build products: what tools write beside the generated files when a user
  builds them in place (`__pycache__` folders anywhere; the Rust crate's
  `rust/target/` and `rust/Cargo.lock`, which the crate's generated
  `.gitignore` names) are carried over untouched, never reported by `check`
  and never removed.
- Atomic trees: the new tree is staged next to the old one
  (`generated/.gemmgen-stage-<stem>-*`), unchanged and kept files are hard
  links to the old ones (so their mtimes do not move), and the two trees are
  exchanged with one `renameat2(RENAME_EXCHANGE)`. A kill at any instant
  leaves the old tree or the new one; a leftover staging folder is removed
  by the next build.
- One build at a time per project: an exclusive `flock` on `generated/`
  itself (no lock file to commit or ignore).

Nothing here prints; errors are `OutputError`s (exit status 2).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gemmgen.render import GENERATED_MARK
from gemmgen.runtime import CRATE, CRATE_BUILD_PRODUCTS

GENERATED = "generated"
MANIFEST = PurePosixPath("MANIFEST.json")
STAGE_PREFIX = ".gemmgen-stage-"
OLD_PREFIX = ".gemmgen-old-"
# Folders Python writes beside generated modules: carried over silently.
_CACHE_DIRS = frozenset({"__pycache__"})
# What `cargo build` writes in the generated crate (`rust/`), relative to a
# spec's output folder: carried over silently, like `__pycache__`, and
# listed in the crate's generated `.gitignore` (gemmgen.backends.cuda.rust).
_BUILD_PRODUCTS = frozenset(PurePosixPath(CRATE) / name for name in CRATE_BUILD_PRODUCTS)
LOCK_TIMEOUT_S = 120.0


class OutputError(Exception):
    """The output tree cannot be written or read safely: exit status 2."""


def show(path: Path | str) -> str:
    """A path for a message: control and other invisible characters escaped."""
    text = str(path)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _oserror(what: str, path: Path, e: OSError) -> OutputError:
    reason = os.strerror(e.errno) if e.errno else str(e)
    where = show(e.filename) if getattr(e, "filename", None) else show(path)
    hint = ""
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "; check the folder's permissions"
    elif e.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "; free some space"
    return OutputError(f"error: cannot {what} {show(path)}: {reason} ({where}){hint}; "
                       "the previous output is unchanged")


# -- containment -------------------------------------------------------------

def generated_dir(root: Path, folder: PurePosixPath | str = GENERATED) -> Path:
    """`<root>/generated`, or `<root>/<folder>` (the project's output folder,
    `gemmgen.project`: `[tool.gemmgen] output` in pyproject.toml), refused if
    it or a folder between it and the root is a link or not a folder."""
    folder = PurePosixPath(folder)
    gen = root
    for part in folder.parts:
        gen = gen / part
        if gen.is_symlink():
            raise OutputError(f"error: {show(gen)} is a symbolic link; gemmgen writes only into "
                              f"a real '{folder}' folder and never follows links out of it")
        if gen.exists() and not gen.is_dir():
            raise OutputError(f"error: {show(gen)} exists and is not a folder")
    return gen


def out_dir(root: Path, stem: str, folder: PurePosixPath | str = GENERATED) -> Path:
    """`<root>/generated/<stem>` (`<root>/<folder>/<stem>`), refused if it is
    a link or not a folder."""
    assert stem.isidentifier() and stem.isascii(), stem  # the CLI checked the spec's name
    d = generated_dir(root, folder) / stem
    if d.is_symlink():
        raise OutputError(f"error: {show(d)} is a symbolic link; gemmgen never writes or "
                          "removes files behind a link (replace it with a real folder)")
    if d.exists() and not d.is_dir():
        raise OutputError(f"error: {show(d)} exists and is not a folder")
    return d


# -- what is on disk -------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One thing in an output tree, found without following links."""

    rel: PurePosixPath
    path: Path
    kind: str  # file, dir, link, other
    empty_dir: bool = False


def scan(root: Path) -> dict[PurePosixPath, Entry]:
    """Every file, link and empty folder below `root`, links not followed.

    Folders appear only when empty (files imply their folders); `__pycache__`
    folders and the crate's `rust/target` are one entry each.
    """
    found: dict[PurePosixPath, Entry] = {}

    def walk(d: Path, rel: PurePosixPath) -> None:
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
        if not entries and rel != PurePosixPath("."):
            found[rel] = Entry(rel, d, "dir", empty_dir=True)
        for e in entries:
            r = rel / e.name if rel != PurePosixPath(".") else PurePosixPath(e.name)
            p = d / e.name
            if e.is_symlink():
                found[r] = Entry(r, p, "link")
            elif e.is_dir(follow_symlinks=False):
                if e.name in _CACHE_DIRS or r in _BUILD_PRODUCTS:
                    found[r] = Entry(r, p, "dir")
                else:
                    walk(p, r)
            elif e.is_file(follow_symlinks=False):
                found[r] = Entry(r, p, "file")
            else:
                found[r] = Entry(r, p, "other")

    if root.is_dir() and not root.is_symlink():
        walk(root, PurePosixPath("."))
    return found


def is_build_product(entry: Entry) -> bool:
    """Whether `entry` is what a tool wrote building the generated files in
    place (`__pycache__`, the crate's `target/` and `Cargo.lock`): carried
    over by every build, never reported by `check`, never removed."""
    return entry.rel in _BUILD_PRODUCTS or (entry.kind == "dir" and entry.path.name in _CACHE_DIRS)


def read_manifest(out: Path) -> dict[str, object] | None:
    """The previous build's manifest, or None if there is none gemmgen wrote."""
    p = out / MANIFEST
    if p.is_symlink() or not p.is_file():
        return None
    try:
        doc = json.loads(p.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not str(doc.get("generator", "")).startswith("gemmgen "):
        return None
    files = doc.get("files")
    if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    return doc


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _has_header(data: bytes) -> bool:
    head = data[:4096].split(b"\n", 2)[:2]
    return any(b"Code generated by gemmgen from " in line and GENERATED_MARK.encode() in line
               for line in head)


# -- the plan of one build -------------------------------------------------

@dataclass
class TreeChange:
    """What building one spec does to its output folder."""

    out: Path
    written: list[PurePosixPath] = field(default_factory=list)
    unchanged: list[PurePosixPath] = field(default_factory=list)
    removed: list[PurePosixPath] = field(default_factory=list)  # gemmgen's, no longer generated
    kept: list[PurePosixPath] = field(default_factory=list)  # not gemmgen's: left alone
    carried: list[Entry] = field(default_factory=list)  # kept entries + caches

    @property
    def changes(self) -> bool:
        return bool(self.written or self.removed)


def plan_tree(out: Path, files: dict[PurePosixPath, bytes], spec_display: str) -> TreeChange:
    """Compare the files to write with what is in `out`; refuse what is unsafe."""
    change = TreeChange(out)
    existing = scan(out)
    doc = read_manifest(out) if existing else None
    if doc is not None and doc.get("spec") not in (None, spec_display):
        raise OutputError(f"error: {show(out)} holds the output of {show(str(doc.get('spec')))}, "
                          f"not of {show(spec_display)}; move it away or rename one of the specs")
    recorded: dict[str, str] = doc["files"] if doc is not None else {}  # type: ignore[assignment]
    dirs_needed = {p for rel in files for p in rel.parents if p != PurePosixPath(".")}

    for rel, entry in existing.items():
        if rel in dirs_needed and entry.kind != "dir":
            raise OutputError(f"error: {show(entry.path)} is in the way of generated files "
                              f"(a {_kind_word(entry)}, not a folder); move it away")
        if rel in files:
            if entry.kind != "file":
                raise OutputError(f"error: {show(entry.path)} is in the way of a generated file "
                                  f"(a {_kind_word(entry)}); move it away")
            data = _read(entry.path)
            if data == files[rel]:
                change.unchanged.append(rel)
            elif str(rel) in recorded or rel == MANIFEST or _has_header(data):
                change.written.append(rel)
            else:
                raise OutputError(f"error: {show(entry.path)} was not written by gemmgen and is in "
                                  "the way of a generated file; move it away")
            continue
        if is_build_product(entry):
            change.carried.append(entry)
            continue
        if entry.kind == "file" and recorded.get(str(rel)) == _sha(_read(entry.path)):
            change.removed.append(rel)
            continue
        change.kept.append(rel)
        change.carried.append(entry)
    for rel in files:
        if rel not in existing:
            change.written.append(rel)
    change.written.sort()
    return change


def _kind_word(e: Entry) -> str:
    return {"file": "file", "link": "symbolic link", "dir": "folder"}.get(e.kind, "special file")


def _read(p: Path) -> bytes:
    try:
        with open(p, "rb", opener=lambda f, fl: os.open(f, fl | os.O_NOFOLLOW)) as fh:
            return fh.read()
    except OSError as e:
        raise _oserror("read", p, e) from None


# -- staging and the swap ----------------------------------------------------

def _link_or_copy(src: Path, dst: Path, entry_kind: str) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
        return
    except OSError:
        pass
    if entry_kind == "link":
        os.symlink(os.readlink(src), dst)
    elif entry_kind == "file":
        shutil.copy2(src, dst, follow_symlinks=False)
    else:
        raise OSError(errno.EPERM, "cannot carry this special file over", str(src))


def _carry(entry: Entry, dst: Path) -> None:
    if entry.kind == "dir" and entry.empty_dir:
        dst.mkdir(parents=True, exist_ok=True)
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    if entry.kind == "dir":  # a cache folder: its files, links not followed
        shutil.copytree(entry.path, dst, symlinks=True, copy_function=_hardlink_copy)
        return
    _link_or_copy(entry.path, dst, entry.kind)


def _hardlink_copy(src: str, dst: str) -> None:
    _link_or_copy(Path(src), Path(dst), "file")


def _write_file(dst: Path, data: bytes) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(dst, 0o644)


_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """glibc's renameat2, or None where there is none (then two renames)."""
    if not sys.platform.startswith("linux"):
        return None
    try:  # the C library is already in the process: dlopen(NULL) finds it
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two folders; False where the system cannot."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a))


def _fsync_dir(d: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _stage_path(gen: Path, prefix: str, stem: str) -> Path:
    return gen / f"{prefix}{stem}-{os.getpid()}-{secrets.token_hex(4)}"


def recover(gen: Path, stem: str) -> None:
    """Finish or undo what an interrupted build of `stem` left in `gen`.

    Call with the project lock held. A staging folder is gemmgen's own
    scratch copy and is removed. An old tree is removed when the live tree
    exists (the swap happened) and put back when it does not (a system
    without renameat2 was stopped between its two renames).
    """
    if not gen.is_dir():
        return
    live = gen / stem
    for p in sorted(gen.iterdir()):
        if p.is_symlink() or not p.is_dir():
            continue
        if p.name.startswith(f"{STAGE_PREFIX}{stem}-"):
            shutil.rmtree(p)
        elif p.name.startswith(f"{OLD_PREFIX}{stem}-"):
            if live.exists() or live.is_symlink():
                shutil.rmtree(p)
            else:
                os.rename(p, live)


def apply(change: TreeChange, files: dict[PurePosixPath, bytes]) -> None:
    """Make `change.out` hold exactly `files` plus the carried entries.

    The new tree is complete on disk before it replaces the old one in one
    step; on any error the staging folder goes and the old tree stays.
    """
    out = change.out
    gen = out.parent
    stem = out.name
    if not change.changes and out.is_dir():
        return
    stage = _stage_path(gen, STAGE_PREFIX, stem)
    try:
        gen.mkdir(exist_ok=True)
        stage.mkdir()
        unchanged = set(change.unchanged)
        for rel, data in files.items():
            if rel in unchanged:
                _link_or_copy(out / rel, _make_parent(stage / rel), "file")
            else:
                _write_file(stage / rel, data)
        for entry in change.carried:
            _carry(entry, stage / entry.rel)
        for d in sorted({stage / rel.parent for rel in files}, key=lambda p: -len(p.parts)):
            _fsync_dir(d)
        _fsync_dir(stage)
        if not out.exists():
            os.rename(stage, out)
            _fsync_dir(gen)
            return
        if exchange(stage, out):
            _fsync_dir(gen)
            old = stage
        else:  # two renames; `recover` puts the old tree back if stopped between them
            old = _stage_path(gen, OLD_PREFIX, stem)
            os.rename(out, old)
            os.rename(stage, out)
            _fsync_dir(gen)
    except OSError as e:
        with contextlib.suppress(OSError):
            if stage.exists():
                shutil.rmtree(stage)
        raise _oserror("write", out, e) from None
    with contextlib.suppress(OSError):  # the next build's `recover` finishes this
        shutil.rmtree(old)


def _make_parent(p: Path) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


# -- one build at a time ----------------------------------------------------

@contextlib.contextmanager
def project_lock(gen: Path, *, timeout: float | None = None,
                 on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on `generated/` (created if missing).

    A second build of the same project waits (calling `on_wait` once) and
    fails with an OutputError after `timeout` seconds.
    """
    try:
        import fcntl
    except ModuleNotFoundError as e:  # pragma: no cover - no flock (Windows): no locking
        if e.name != "fcntl":
            raise
        yield
        return
    timeout = LOCK_TIMEOUT_S if timeout is None else timeout
    try:
        gen.mkdir(parents=True, exist_ok=True)
        fd = os.open(gen, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise _oserror("create", gen, e) from None
    try:
        deadline = time.monotonic() + timeout
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited and on_wait is not None:
                    on_wait()
                waited = True
                if time.monotonic() >= deadline:
                    raise OutputError(
                        f"error: another gemmgen build is writing {show(gen)} and did not "
                        f"finish within {timeout:g} s; try again when it has") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
