"""The emulator's direct cache: a library found from its sources and the
files they include, without preprocessing them again.

A library is cached by its preprocessed text (build.py), which takes g++ -E
and the kernel rewrite's regular expressions over megabytes of text: about
a second of every `EmuModule` in a new process, even when the library is on
disk (a warm `gemmgen verify` spent a third of its CUDA time there). As
ccache's direct mode does, a manifest maps a key of everything but the
included files (the sources, flags, defines, the compiler, the names of the
files in each include folder) to the files the preprocessor read, with the
SHA-256 of each, and the library they made. A lookup hashes those files
again (once per process per file state) and takes the library only if every
one still matches and the library is still in the cache; else the library
is built as before and the manifest rewritten.

Include folders are named by their position, not their path: a temporary
folder of generated files (verify, the tests) finds the manifest another
folder with the same files wrote, as the library cache does. A file added
to an include folder changes the key (it could shadow a header found later
on the path).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from gemmgen.harness.toolchain import atomic_write, cache_dir, digest

_HASHES: dict[tuple[str, int, int], str] = {}
_MANIFEST_VERSION = 1


def _file_hash(path: Path) -> str | None:
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key in _HASHES:
        return _HASHES[key]
    try:
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
    # A file changed less than 2 s ago may change again within the clock's
    # granularity at the same size: hashed again next time, not remembered.
    if time.time_ns() - st.st_mtime_ns > 2_000_000_000:
        _HASHES[key] = sha
    return sha


def _listing(folder: Path) -> list[str]:
    """The files under `folder`, relative, sorted (empty if it is not one)."""
    out = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        rel = os.path.relpath(root, folder)
        out += [os.path.normpath(os.path.join(rel, f)) for f in sorted(files)]
    return out


def key(parts: Sequence[str], folders: Sequence[Path]) -> str:
    """The manifest key: `parts` (sources, flags, defines, compiler) and the
    file names in each of `folders` (the include folders, by position)."""
    return digest(*parts, *("\0".join(_listing(f)) for f in folders))


def _manifest(key_: str) -> Path:
    return cache_dir() / "emu" / "direct" / f"{key_[:32]}.json"


def _portable(path: Path, folders: Sequence[Path]) -> list:
    """`path` as [folder index, relative path], or [-1, absolute path]."""
    for i, folder in enumerate(folders):
        try:
            return [i, str(path.relative_to(folder))]
        except ValueError:
            continue
    return [-1, str(path)]


def _resolve(entry: list, folders: Sequence[Path]) -> Path:
    index, rel = entry
    return Path(rel) if index < 0 else folders[index] / rel


def lookup(key_: str, folders: Sequence[Path]) -> dict | None:
    """The manifest's record (library file name, kernels, launch bounds,
    parameter names) if every file it lists still hashes the same and the
    library is still in the cache; else None."""
    try:
        data = json.loads(_manifest(key_).read_text())
    except (OSError, ValueError):
        return None
    if data.get("version") != _MANIFEST_VERSION:
        return None
    for entry, sha in data["deps"]:
        if _file_hash(_resolve(entry, folders)) != sha:
            return None
    if not (cache_dir() / "emu" / data["library"]).is_file():
        return None
    return data


def store(key_: str, folders: Sequence[Path], deps: Sequence[Path], record: dict) -> None:
    """Writes the manifest of a library just built: `deps`, the files its
    preprocessing read (a dependency file of g++ -MD), with their hashes."""
    entries = []
    for dep in deps:
        sha = _file_hash(dep)
        if sha is None:
            return  # a file gone already: no manifest, the next build looks again
        entries.append([_portable(dep.resolve(), folders), sha])
    data = {"version": _MANIFEST_VERSION, "deps": entries, **record}
    try:
        atomic_write(_manifest(key_), json.dumps(data, sort_keys=True).encode())
    except OSError:
        pass  # a read-only cache only costs time


def read_depfile(path: Path) -> list[Path]:
    """The prerequisites of a Make rule g++ -MD wrote (escaped spaces kept)."""
    text = path.read_text().replace("\\\n", " ")
    _, _, rest = text.partition(": ")
    out, word = [], ""
    i = 0
    while i < len(rest):
        c = rest[i]
        if c == "\\" and i + 1 < len(rest) and rest[i + 1] == " ":
            word += " "
            i += 2
            continue
        if c.isspace():
            if word:
                out.append(Path(word))
            word = ""
        else:
            word += c
        i += 1
    if word:
        out.append(Path(word))
    return out
