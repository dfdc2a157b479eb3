"""A project's gemmgen settings: the `[tool.gemmgen]` table of the
`pyproject.toml` at the project root (the folder above `specs/`).

One setting today, `output`: the folder, relative to the project root, that
holds one package per spec (`<output>/<stem>/`); `generated` when unset, so
that a spec imports as `generated.<stem>`. With `output = "src/myproj/kernels"`
the specs' packages import as `myproj.kernels.<stem>` (a leading `src` is the
src layout's folder, not a package). Every part must be a Python identifier
(it is a package name), and the folder must stay inside the project: an
absolute path, `..`, `.`, an empty part or `specs/` is an error positioned
at the value in `pyproject.toml` (docs/decisions.md, "The output folder").

    folder = output_folder(root)        # PurePosixPath("generated") by default
"""

from __future__ import annotations

import functools
import keyword
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gemmgen.diagnostics import suggest
from gemmgen.specfile import InputError

DEFAULT_OUTPUT = PurePosixPath("generated")
PYPROJECT = "pyproject.toml"
KEYS = ("output",)


@dataclass(frozen=True, slots=True)
class Output:
    """Where a project's specs build: `folder` (relative to the root) and the
    Python package it is."""

    folder: PurePosixPath

    @property
    def package(self) -> str:
        """`generated`, or `myproj.kernels` for `src/myproj/kernels`."""
        parts = self.folder.parts
        return ".".join(parts[1:] if parts[0] == "src" and len(parts) > 1 else parts)

    @property
    def import_root(self) -> str:
        """Where the folder on sys.path sits, in words."""
        parts = self.folder.parts
        return "src/" if parts[0] == "src" and len(parts) > 1 else "the project root"


def output(root: Path) -> Output:
    """The output of the project at `root`; InputError for a bad setting."""
    path = root / PYPROJECT
    try:
        st = path.stat()
    except OSError:
        return Output(DEFAULT_OUTPUT)
    return _read(path, st.st_mtime_ns, st.st_size)


def output_folder(root: Path) -> PurePosixPath:
    return output(root).folder


@functools.lru_cache(maxsize=64)
def _read(path: Path, _mtime_ns: int, _size: int) -> Output:
    import tomllib

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"error: cannot read {path}: {e}") from None
    if "gemmgen" not in text:
        return Output(DEFAULT_OUTPUT)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{PYPROJECT}: error: not valid TOML ({e}); gemmgen reads its "
                         "[tool.gemmgen] table from it") from None
    table = doc.get("tool", {}).get("gemmgen")
    if table is None:
        return Output(DEFAULT_OUTPUT)
    if not isinstance(table, dict):
        raise InputError(f"{PYPROJECT}: error: tool.gemmgen must be a table ([tool.gemmgen])")
    for key in table:
        if key not in KEYS:
            raise InputError(f"{_where(text, key)}: error: [tool.gemmgen]: unknown setting "
                             f"'{key}'{suggest(key, KEYS)} (known: {', '.join(KEYS)})")
    value = table.get("output")
    if value is None:
        return Output(DEFAULT_OUTPUT)
    problem = output_problem(value)
    if problem is not None:
        raise InputError(f"{_where(text, 'output')}: error: [tool.gemmgen] output {problem}")
    return Output(PurePosixPath(value))


def output_problem(value: object) -> str | None:
    """Why `value` cannot be the output folder, or None."""
    if not isinstance(value, str):
        return "must be a string: a folder relative to the project root"
    if value.startswith("/") or re.match(r"[A-Za-z]:[\\/]", value):
        return (f"{value!r} is absolute: give a folder inside the project, relative to its "
                "root (the folder above specs/), e.g. \"src/myproj/kernels\"")
    if "\\" in value or any(ord(c) < 32 for c in value):
        return f"{value!r}: use '/' between folders, and no control characters"
    parts = value.removesuffix("/").split("/")
    if ".." in parts:
        return f"{value!r} leaves the project ('..'): gemmgen writes only inside it"
    if value in ("", ".", "./") or "" in parts or "." in parts:
        return (f"{value!r} must name a folder below the project root, without empty or '.' "
                "parts")
    if parts[0] == "specs":
        return f"{value!r} is inside specs/: generated code and specs stay apart"
    for part in parts:
        if not part.isidentifier() or not part.isascii() or keyword.iskeyword(part):
            return (f"{value!r}: '{part}' is not a Python identifier (the folder is the "
                    "generated code's package path)")
    return None


def _where(text: str, key: str) -> str:
    """`pyproject.toml:LINE:COL` of `key`'s value in the [tool.gemmgen]
    table of `text`, or `pyproject.toml` when it cannot be found."""
    lines = text.splitlines()
    inside = False
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("["):
            inside = re.fullmatch(r"\[\s*tool\s*\.\s*gemmgen\s*\]\s*(#.*)?", stripped) is not None
            continue
        m = re.match(rf"\s*{re.escape(key)}\s*=\s*", line)
        if inside and m:
            return f"{PYPROJECT}:{i}:{m.end() + 1}"
        m = re.match(rf"\s*tool\s*\.\s*gemmgen\s*\.\s*{re.escape(key)}\s*=\s*", line)
        if m and not inside:
            return f"{PYPROJECT}:{i}:{m.end() + 1}"
    return PYPROJECT
