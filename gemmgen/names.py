"""Which kernel and dispatch names are usable, and which names clash.

A kernel's name becomes the name of its files (`<name>.cu`, `.h`, `.py`), a
Python function, an `extern "C"` CUDA entry point, C++ launcher functions
(`launch_<name>`, `<name>_validate`, ...) and a C++ argument struct
(`args_struct`). `name_problem` rejects a name that could not be all of
these; `collisions` finds names that are usable one by one but not
together. Both are used by `gemmgen.validate` (the names of one spec) and
`gemmgen.project_names` (the specs of one project). The backends name
their struct with `args_struct` and their symbols as `symbols` says, so the
rules here are the generated code's own.

The reserved names are data in `gemmgen.reserved`. This module renders
nothing: `tests/language/test_names.py` renders every kind of kernel and checks that
no identifier of the generated code is a name `name_problem` accepts.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import NamedTuple

from gemmgen import reserved
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Loc

MAX_LENGTH = 96

# Prefixes of gemmgen's own symbols (`gg_` in any case: the runtime's macros
# are `GG_...`).
OWN_PREFIXES = ("gg_", "launch_", "_")

# What generated code derives from a kernel or dispatch name `x`, besides `x`
# and `args_struct(x)`: `launch_x`, `x_validate`, ... (cuda/launcher.h.j2,
# dispatch.h.j2, the kinds' entry points, pallas `x_vjp`), and two families:
# `x_t<i>`, the CUDA entry point of tile i of a LUT, and `x_as_<arm>`, a
# dispatcher's view of its arguments as arm <arm>'s.
DERIVED_PREFIXES = ("launch_",)
DERIVED_SUFFIXES = ("_validate", "_pick", "_pick_tile", "_workspace_bytes", "_fill",
                    "_worklist", "_unaligned_k", "_vjp", "_launch_error", "_launches", "_sm90",
                    "_sm100", "_sm120", "_arch_error")
_TILE_ENTRY = re.compile(r"(.+)_t\d+(_sm90|_sm100|_sm120)?\Z")
_AS = "_as_"

RESERVED: frozenset[str] = (
    reserved.PYTHON_KEYWORDS | reserved.PYTHON_BUILTINS | reserved.CXX_KEYWORDS
    | reserved.RUST_KEYWORDS    | reserved.C_LIBRARY | reserved.POSIX | reserved.CUDA | reserved.GENERATED)

_CATEGORIES = (
    ("a name the generated code defines or uses", reserved.GENERATED),
    ("a Python builtin", reserved.PYTHON_BUILTINS),
    ("a C standard library name", reserved.C_LIBRARY),
    ("a POSIX library name", reserved.POSIX),
    ("a CUDA name", reserved.CUDA),
)
_CUDA_PREFIX_PATTERNS = tuple(
    (re.compile(rx), words) for rx, words in reserved.CUDA_PREFIX_PATTERNS)
_GENERATED_PATTERN = re.compile(reserved.GENERATED_PATTERN)


def args_struct(name: str) -> str:
    """The C++ argument struct of a kernel or dispatcher: `gmm_bf16` -> `GmmBf16Args`.

    Each `_`-separated part is capitalised, so `gmm_x1`, `gmmX1` and `Gmm_x1`
    all become `GmmX1Args`; `collisions` reports such names.
    """
    return "".join(p[:1].upper() + p[1:] for p in name.split("_")) + "Args"


def symbols(name: str) -> frozenset[str]:
    """The symbols generated code names after `name` (but for the `x_t<i>`
    and `x_as_<arm>` families, see `derived_from`)."""
    return frozenset({name, args_struct(name), *(p + name for p in DERIVED_PREFIXES),
                      *(name + s for s in DERIVED_SUFFIXES)})


def derived_from(identifier: str, names: Collection[str]) -> str | None:
    """The name among `names` that generated code made `identifier` from, or None."""
    if identifier in names:
        return identifier
    for p in DERIVED_PREFIXES:
        if identifier.startswith(p) and identifier[len(p):] in names:
            return identifier[len(p):]
    for s in DERIVED_SUFFIXES:
        if identifier.endswith(s) and identifier[:-len(s)] in names:
            return identifier[:-len(s)]
    if (m := _TILE_ENTRY.match(identifier)) and m.group(1) in names:
        return m.group(1)
    for base, arm in _as_splits(identifier):
        if base in names and arm in names:
            return base
    if identifier.endswith("Args"):
        for n in names:
            if args_struct(n) == identifier:
                return n
    return None


def _as_splits(identifier: str) -> list[tuple[str, str]]:
    out = []
    i = identifier.find(_AS)
    while i > 0:
        out.append((identifier[:i], identifier[i + len(_AS):]))
        i = identifier.find(_AS, i + 1)
    return out


def _joined(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a kernel or dispatch name, or None when it can."""
    if not name.isidentifier() or not name.isascii():
        return f"'{name}' is not an identifier"
    if name in reserved.PYTHON_KEYWORDS:
        return f"'{name}' is reserved in Python"
    if name in reserved.CXX_KEYWORDS:
        return f"'{name}' is reserved in C++"
    if name in reserved.RUST_KEYWORDS:
        return f"'{name}' is reserved in Rust"
    if name.startswith("__") or (name.startswith("_") and name[1:2].isupper()) or "__" in name:
        return f"'{name}' is reserved in C++ (leading '_' + capital, or '__')"
    if name.startswith(OWN_PREFIXES) or name.lower() == "gg" or name.lower().startswith("gg_"):
        return (f"'{name}' uses a prefix reserved for gemmgen's own symbols "
                f"('gg_', 'launch_', '_')")
    if len(name) > MAX_LENGTH:
        return f"'{name}' is longer than {MAX_LENGTH} characters"
    kinds = [label for label, words in _CATEGORIES if name in words]
    if _GENERATED_PATTERN.fullmatch(name):
        kinds.insert(0, _CATEGORIES[0][0])
    if kinds:
        return f"'{name}' is {_joined(kinds)}"
    for p in reserved.CUDA_PREFIXES:
        if name.lower().startswith(p):
            return f"'{name}' starts with '{name[:len(p)]}', as CUDA's names do"
    for rx, words in _CUDA_PREFIX_PATTERNS:
        if rx.match(name):
            return f"'{name}' starts with {words}, as CUDA's names do"
    if name.lower() in reserved.WINDOWS_DEVICE_NAMES:
        return f"'{name}' is a device name on Windows, where no file can be called '{name}.py'"
    for s in sorted(symbols(name) - {name}):
        if s in RESERVED:
            return f"'{name}' would make the generated code define '{s}', a reserved name"
    return None


class Named(NamedTuple):
    """A name and where a spec gives it; `kind` is how messages call it."""

    name: str
    loc: Loc
    kind: str = "name"  # "kernel", "dispatch"


def _why(a: str, b: str) -> str:
    """Why names `a` and `b` clash (they do)."""
    if args_struct(a) == args_struct(b):
        return f"both become C++ '{args_struct(a)}'"
    for x, y in ((a, b), (b, a)):
        if derived_from(y, {x}) == x or y.startswith(x + _AS):
            return f"the code generated for '{x}' defines '{y}'"
    common = sorted(symbols(a) & symbols(b))
    if common:
        return f"both make the generated code define '{common[0]}'"
    return (f"names that differ only in case give files ('{a}.py', '{b}.py') that are one "
            f"file on case-insensitive file systems")


def collisions(entries: Iterable[tuple[str, Loc] | tuple[str, Loc, str]], *,
               case: bool = True, across_files: bool = False) -> list[Diagnostic]:
    """Diagnostics for names among `entries` that clash: the same name (only
    meaningful with `across_files`), one C++ symbol made from both (the
    argument struct of `args_struct`, or a symbol one name derives that is the
    other name), or, with `case`, names equal but for case (their files
    collide on case-insensitive file systems).

    Each clash is reported once, at the later entry, naming the earlier one's
    position. With `across_files`, only entries from different spec files are
    compared (the names of one spec are `validate`'s business).
    """
    items = [Named(*e) for e in entries]
    by_key: dict[tuple[str, str], list[int]] = {}
    by_name: dict[str, list[int]] = {}
    for i, e in enumerate(items):
        by_name.setdefault(e.name, []).append(i)
        keys = [("symbol", s) for s in symbols(e.name)]
        if case:
            keys.append(("file", e.name.lower()))
        for key in keys:
            by_key.setdefault(key, []).append(i)

    def allowed(i: int, j: int) -> bool:
        return i != j and (not across_files or items[i].loc.path != items[j].loc.path)

    pairs: set[tuple[int, int]] = set()
    for idxs in by_key.values():
        for n, j in enumerate(idxs):
            for i in idxs[:n]:
                if allowed(i, j):
                    pairs.add((i, j))
                    break
    for j, e in enumerate(items):
        bases = [m.group(1)] if (m := _TILE_ENTRY.match(e.name)) else []
        bases += [b for b, arm in _as_splits(e.name) if arm in by_name]
        for base in bases:
            for i in by_name.get(base, ()):
                if allowed(i, j):
                    pairs.add((min(i, j), max(i, j)))

    first: dict[int, int] = {}
    for i, j in sorted(pairs):
        first.setdefault(j, i)
    out: list[Diagnostic] = []
    seen: set[tuple[Loc, Loc]] = set()
    for j, i in sorted(first.items()):
        later, earlier = items[j], items[i]
        if (later.loc, earlier.loc) in seen:
            continue  # variants of one swept kernel: one report per position
        seen.add((later.loc, earlier.loc))
        if later.name == earlier.name:
            msg = (f"{later.kind} name '{later.name}' is also used at {earlier.loc}; kernel "
                   f"and dispatch names must be unique across the specs of a project")
        else:
            msg = (f"{later.kind} name '{later.name}' clashes with '{earlier.name}' at "
                   f"{earlier.loc}: {_why(earlier.name, later.name)}")
        out.append(Diagnostic(later.loc, msg, width=len(later.name)))
    return out
