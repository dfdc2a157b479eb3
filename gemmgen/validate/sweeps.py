"""Sweeps: a field with alternatives (`out f32 | bf16`) expands a kernel
block into one variant per combination, named `<base>_<field>_<token>`."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from gemmgen.diagnostics import one_of, suggest
from gemmgen.ir import Backend
from gemmgen.parse import Alt, Atom, Block, Field
from gemmgen.validate.common import (
    DTYPE_ALIASES, KERNEL_FIELDS, MAX_VARIANTS, QUALIFIABLE, REPEATABLE, SWEEPABLE, Collector,
)


@dataclass(frozen=True)
class Variant:
    """One element of a sweep: the chosen alternative for each field."""

    fields: dict[str, tuple[Field, Alt]]
    suffix: str


def _alt_parts(alt: Alt) -> list[str]:
    """The name tokens of an alternative: one per atom, a run of `key=value`
    atoms joined by 'x' (`m=64 n=128 k=64` -> `64x128x64`)."""
    parts: list[str] = []
    kv_run: list[str] = []
    for atom in alt.atoms:
        if atom.kind == "kv":
            assert isinstance(atom.value, Atom)
            kv_run.append(str(atom.value.value).replace(".", "p").replace("-", "m"))
            continue
        if kv_run:
            parts.append("x".join(kv_run))
            kv_run = []
        match atom.kind:
            case "word":
                parts.append(DTYPE_ALIASES.get(str(atom.value), str(atom.value)))
            case "int":
                parts.append(str(atom.value))
            case "float":
                parts.append(str(atom.value).replace(".", "p").replace("-", "m"))
            case "shape":
                assert isinstance(atom.value, tuple)
                parts.append("".join(str(d.value) for d in atom.value))
            case "cond":
                parts.append(f"{atom.key}{atom.value}")
    if kv_run:
        parts.append("x".join(kv_run))
    return parts


def _alt_tokens(field: Field) -> list[str]:
    """The canonical name token of each alternative of a swept field: the
    parts in which the alternatives differ (`out f32 | bf16` -> f32, bf16;
    `lhs_scale per_token_group k=128 f32 | ... e8m0` -> f32, e8m0)."""
    parts = [_alt_parts(alt) for alt in field.alts]
    if len({len(p) for p in parts}) == 1:
        keep = [i for i in range(len(parts[0])) if len({p[i] for p in parts}) > 1]
        if keep:
            parts = [[p[i] for i in keep] for p in parts]
    return ["_".join(p) for p in parts]




@dataclass
class OwnTiles:
    """One backend's own tile LUT lines (`tile BACKEND ...`, `tile_rule
    BACKEND ...`), each keeping its backend word as its first atom."""

    tile: Field | None = None
    rules: list[Field] = field(default_factory=list)
    # The kernel block's own lines (not the defaults'), in order: a line for
    # a backend the kernel does not list is an error at the first of them.
    own_lines: list[Field] = field(default_factory=list)


def qualifier(f: Field) -> Atom | None:
    """The backend word of `tile BACKEND ...` or `tile_rule BACKEND ...`."""
    if f.name not in QUALIFIABLE or not f.alts[0].atoms:
        return None
    first = f.alts[0].atoms[0]
    return first if first.kind == "word" else None


def qualified_problem(f: Field, q: Atom) -> tuple[Atom | Field, str] | None:
    """What is wrong with a qualified tile line in itself: (where, message)."""
    word = str(q.value)
    backends = [b.value for b in Backend]
    if word not in backends:
        return q, (f"unknown backend '{word}' before the {f.name} values"
                   f"{suggest(word, backends)} (a backend's own {f.name} starts with its "
                   f"name: {one_of(backends)})")
    if f.swept:
        return f, (f"'{f.name} {word}' cannot be swept with '|': a backend's own "
                   f"{'tile' if f.name == 'tile' else 'tile rule'} is one line (sweep the "
                   "unqualified tile of a kernel for that backend alone)")
    return None


def check_defaults_tiles(c: Collector, defaults: tuple[Field, ...]) -> None:
    """The defaults block's qualified tile lines, checked once (each kernel
    block then takes the good ones it lacks)."""
    first: dict[str, Field] = {}
    for f in defaults:
        if (q := qualifier(f)) is None:
            continue
        if (problem := qualified_problem(f, q)) is not None:
            _report(c, "defaults", *problem)
        elif f.name == "tile":
            if str(q.value) in first:
                c.err(f.loc, f"defaults: field 'tile {q.value}' given twice (first at line "
                      f"{first[str(q.value)].loc.line})", len(f.name))
            first.setdefault(str(q.value), f)


def _report(c: Collector, where: str, at: Atom | Field, message: str) -> None:
    if isinstance(at, Atom):
        c.err(at.loc, f"{where}: {message}", at.width)
    else:
        c.err(at.loc, f"{where}: {message}", len(at.name))


def _qualified(c: Collector, block: Block, f: Field, q: Atom,
               tiles: dict[str, OwnTiles], from_defaults: bool) -> None:
    """File a qualified tile line under its backend, or report it (a
    defaults line is reported once, by check_defaults_tiles)."""
    word = str(q.value)
    where = f"kernel '{block.name}'"
    if (problem := qualified_problem(f, q)) is not None:
        if not from_defaults:
            _report(c, where, *problem)
        return
    own = tiles.setdefault(word, OwnTiles())
    if f.name == "tile":
        if own.tile is not None:
            if not from_defaults:
                c.err(f.loc, f"{where}: field 'tile {word}' given twice (first at line "
                      f"{own.tile.loc.line})", len(f.name))
            return
        own.tile = f
    else:
        own.rules.append(f)
    if not from_defaults:
        own.own_lines.append(f)


def expand(c: Collector, block: Block, defaults: tuple[Field, ...]) -> tuple[
        list[Variant], dict[str, list[Field]], dict[str, OwnTiles]]:
    """Check field names and duplicates; expand sweeps into variants. The
    third result holds the backend-qualified tile lines, by backend: they
    are not swept, so every variant shares them."""
    own: dict[str, Field] = {}
    repeated: dict[str, list[Field]] = {}
    tiles: dict[str, OwnTiles] = {}
    for f in block.fields:
        if f.name not in KERNEL_FIELDS:
            c.err(f.loc, f"kernel '{block.name}': unknown field '{f.name}'"
                  f"{suggest(f.name, KERNEL_FIELDS)}", len(f.name))
            continue
        if (q := qualifier(f)) is not None:
            _qualified(c, block, f, q, tiles, from_defaults=False)
            continue
        if f.name in REPEATABLE:
            if f.swept:
                c.err(f.loc, f"'{f.name}' cannot be swept with '|'; write one line per rule")
                continue
            repeated.setdefault(f.name, []).append(f)
            continue
        if f.name in own:
            c.err(f.loc, f"kernel '{block.name}': field '{f.name}' given twice (first at line "
                  f"{own[f.name].loc.line}); sweep alternatives with '|'", len(f.name))
            continue
        if f.swept and f.name not in SWEEPABLE:
            c.err(f.loc, f"field '{f.name}' cannot be swept; sweepable fields: "
                  f"{', '.join(sorted(SWEEPABLE))}", len(f.name))
            f = Field(f.name, f.alts[:1], f.loc)  # go on with the first value
        own[f.name] = f
    merged = dict(own)
    # The defaults fill what the block leaves out: a field, the lines of a
    # repeatable field (all of them, when the block has none of its own),
    # and per backend its own tile and its own tile rules.
    own_repeated = set(repeated)
    own_tiles = {word: (t.tile is not None, bool(t.rules)) for word, t in tiles.items()}
    for f in defaults:
        if (q := qualifier(f)) is not None:
            has_tile, has_rules = own_tiles.get(str(q.value), (False, False))
            if not (has_tile if f.name == "tile" else has_rules):
                _qualified(c, block, f, q, tiles, from_defaults=True)
        elif f.name in REPEATABLE:
            if f.name not in own_repeated:
                repeated.setdefault(f.name, []).append(f)
        elif f.name not in merged:
            merged[f.name] = f
    ordered = [merged[name] for name in KERNEL_FIELDS if name in merged]
    swept = [f for f in ordered if f.swept]
    count = math.prod(len(f.alts) for f in swept)
    if count > MAX_VARIANTS:
        c.err(block.name_loc, f"kernel '{block.name}': its sweeps make {count} variants; at most "
              f"{MAX_VARIANTS} per kernel block (split it into several blocks)", len(block.name))
        return [], repeated, tiles
    tokens = {f.name: _alt_tokens(f) for f in swept}
    variants: list[Variant] = []
    for combo in itertools.product(*[range(len(f.alts)) for f in swept]):
        chosen = {f.name: (f, f.alts[0]) for f in ordered}
        suffix = []
        for f, i in zip(swept, combo):
            chosen[f.name] = (f, f.alts[i])
            suffix.append(f"{f.name}_{tokens[f.name][i]}")
        variants.append(Variant(chosen, "_".join(suffix)))
    return variants, repeated, tiles


