"""Spec files on disk: read a regular UTF-8 file of bounded size, find its
project root, the path generated files name it by, and its stem (the
output folder `generated/<stem>/`).

Paths: a spec at `<root>/specs/<stem>.gemm` renders into
`<root>/generated/<stem>/`, and generated files name it `specs/<stem>.gemm`
whatever the working directory. A spec outside a `specs/` folder uses its
own folder as the root. `gemmgen.build` and `gemmgen.project_names` (which
reads a spec's siblings) both read specs through `locate`.
"""

from __future__ import annotations

import codecs
import keyword
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gemmgen.diagnostics import Diagnostic, SpecError
from gemmgen.ir import Loc
from gemmgen.output import show


class InputError(Exception):
    """A spec that cannot be read (missing, not a regular file): exit status 2."""


# Specs are small text files; anything larger is not a spec (and would make
# every diagnostic pass over it slow).
MAX_SPEC_BYTES = 4 << 20
_STEM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_STEM = 64


@dataclass(frozen=True)
class SpecFile:
    path: Path  # as given
    root: Path  # project root: generated/ lives here
    display: str  # posix path relative to root, used in headers and messages
    source: str
    stem: str
    output: str = "generated"  # the project's output folder (gemmgen.build sets it)


def spec_stem(name: str) -> str:
    """The output folder name of a spec file: its name without `.gemm`."""
    return name[:-len(".gemm")] if name.endswith(".gemm") else PurePosixPath(name).stem


def stem_problem(stem: str) -> str | None:
    """Why `stem` cannot name an output folder `generated/<stem>/`, or None."""
    if not _STEM.fullmatch(stem):
        return "must be an identifier (letters, digits and '_', not starting with a digit)"
    if keyword.iskeyword(stem):
        return "is a Python keyword (generated Python imports it as a package name)"
    if len(stem) > MAX_STEM:
        return f"is longer than {MAX_STEM} characters"
    return None


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _read_bytes(path: Path) -> bytes:
    """The bytes of a regular file; never blocks on a FIFO or device."""
    shown = show(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(f"{shown}: error: no such spec file") from None
    except OSError as e:
        raise InputError(f"{shown}: error: cannot read the spec: {os.strerror(e.errno or 0)}") \
            from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = next((w for test, w in _KINDS if test(st.st_mode)), "not a regular file")
            raise InputError(f"{shown}: error: a spec must be a regular file; this is {what}")
        if st.st_size > MAX_SPEC_BYTES:
            raise InputError(f"{shown}: error: the spec is {st.st_size} bytes; specs are "
                             f"limited to {MAX_SPEC_BYTES >> 20} MiB")
        chunks = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_SPEC_BYTES:
                raise InputError(f"{shown}: error: the spec is larger than "
                                 f"{MAX_SPEC_BYTES >> 20} MiB")
        return b"".join(chunks)
    except OSError as e:
        raise InputError(f"{shown}: error: cannot read the spec: {os.strerror(e.errno or 0)}") \
            from None
    finally:
        os.close(fd)


def decode_spec(data: bytes, display: str) -> str:
    """UTF-8 text (a leading BOM dropped); bad bytes are a positioned error."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        line_start = data.rfind(b"\n", 0, e.start) + 1
        col = len(data[line_start:e.start].decode("utf-8")) + 1
        shown = data[e.start:min(e.end, e.start + 4)].hex(" ")
        diag = Diagnostic(Loc(display, line, col),
                          f"invalid UTF-8 (byte {shown}); a spec is UTF-8 text")
        raise SpecError([diag], {display: data.decode("utf-8", "replace")}) from None


def locate(path: Path) -> SpecFile:
    """Read a spec and find its project root, display path and stem."""
    data = _read_bytes(path)
    # The folder is resolved, the file is not: a linked spec builds into the
    # project it is linked from.
    folder = path.absolute().parent.resolve()
    root = folder.parent if folder.name == "specs" else folder
    display = (folder / path.name).relative_to(root).as_posix()
    stem = spec_stem(path.name)
    if problem := stem_problem(stem):
        raise InputError(f"{show(display)}: error: the spec's name '{show(stem)}' (its file "
                         f"name without '.gemm') {problem}; it names the output folder "
                         "generated/<name>/")
    return SpecFile(path, root, display, decode_spec(data, display), stem)
