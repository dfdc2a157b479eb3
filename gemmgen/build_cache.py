"""Rendered specs, cached by content, so that building or checking an
unchanged spec with an unchanged generator skips parsing, validation and
rendering (and the imports of lark, Jinja and the backends).

An entry is keyed by a SHA-256 over

- the generator: the bytes of every file of the `gemmgen` package and of its
  templates (so any edit to the code, a template, the grammar or a runtime
  header is a new key), the Python version, and the size and mtime of every
  file of the installed lark and Jinja packages (an upgrade is a new key);
- the spec: its source text, the path generated files name it by, and its
  stem.

Those are all the inputs of `build.render_spec`: rendering reads nothing
else (backends are pure functions of the IR, no environment, no clock).
The value is the validated spec IR and the rendered files, pickled, as the
parser cache already stores its tables. Only specs that rendered without an
error are stored: a spec with errors is parsed every time, so its
diagnostics are always fresh. A missing, unreadable, corrupt or read-only
cache only costs the render (`gemmgen.cache`); `GEMMGEN_CACHE` moves it.
Each stem keeps its newest few entries; older ones are deleted when a new
one is written. A patch of the generator inside a running process (a test
monkeypatching a backend) is not an input the key can see: such a test
points GEMMGEN_CACHE at a fresh folder.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import pickle
import sys
from pathlib import Path, PurePosixPath

import gemmgen
from gemmgen import ir
from gemmgen.cache import usable_subdir
from gemmgen.specfile import SpecFile
from gemmgen.templates import TEMPLATE_DIR

KEEP_PER_STEM = 4
_FORMAT = 2  # bump when the pickled value changes shape


def _files(root: Path):
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            yield Path(folder, name)


def generator_fingerprint() -> str:
    """What the generator is: its own files by content, Python, lark and Jinja."""
    return fingerprint((Path(gemmgen.__file__).parent, TEMPLATE_DIR), ("lark", "jinja2"))


@functools.cache
def fingerprint(roots: tuple[Path, ...], libraries: tuple[str, ...]) -> str:
    """Every file under `roots` by content; the installed `libraries` by the
    size and mtime of their files."""
    h = hashlib.sha256(f"{_FORMAT} {sys.version}".encode())
    for i, root in enumerate(roots):
        for p in _files(root):
            data = p.read_bytes()
            h.update(f"\0{i} {p.relative_to(root).as_posix()} {len(data)}\0".encode())
            h.update(data)
    for name in libraries:
        spec = importlib.util.find_spec(name)
        locations = spec.submodule_search_locations if spec else None
        if not locations:
            h.update(f"\0{name} missing".encode())
            continue
        root = Path(list(locations)[0])
        for p in _files(root):
            st = p.stat()
            h.update(f"\0{name}/{p.relative_to(root).as_posix()} {st.st_size} "
                     f"{st.st_mtime_ns}".encode())
    return h.hexdigest()


def key(sf: SpecFile) -> str:
    h = hashlib.sha256(generator_fingerprint().encode())
    for part in (sf.display, sf.stem, sf.source, sf.output):
        h.update(b"\0" + part.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:40]


def _entry(sf: SpecFile) -> Path | None:
    folder = usable_subdir("rendered")
    return folder / f"{sf.stem}-{key(sf)}.pickle" if folder else None


def load(sf: SpecFile) -> tuple[ir.Spec, dict[PurePosixPath, str]] | None:
    """The spec IR and rendered files of `sf`, if this generator rendered
    this very spec before; None otherwise."""
    path = _entry(sf)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            value = pickle.load(f)
        spec, files = value
        if not isinstance(spec, ir.Spec) or not isinstance(files, dict):
            return None
    except Exception:  # noqa: BLE001 - a missing or bad entry only costs a render
        return None
    return spec, files


def store(sf: SpecFile, spec: ir.Spec, files: dict[PurePosixPath, str]) -> None:
    path = _entry(sf)
    if path is None:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            pickle.dump((spec, files), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        older = sorted(path.parent.glob(f"{sf.stem}-*.pickle"),
                       key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for stale in older[KEEP_PER_STEM:]:
            stale.unlink(missing_ok=True)
    except OSError:
        tmp.unlink(missing_ok=True)
