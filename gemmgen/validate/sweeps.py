"""Sweeps: a field with alternatives (`out f32 | bf16`) expands a kernel
block into one variant per combination, named `<base>_<field>_<token>`."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from gemmgen.parse import Alt, Atom, Block, Field
from gemmgen.diagnostics import suggest
from gemmgen.validate.common import (
    DTYPE_ALIASES, KERNEL_FIELDS, MAX_VARIANTS, REPEATABLE, SWEEPABLE, Collector,
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




def expand(c: Collector, block: Block, defaults: tuple[Field, ...]) -> tuple[
        list[Variant], dict[str, list[Field]]]:
    """Check field names and duplicates; expand sweeps into variants."""
    own: dict[str, Field] = {}
    repeated: dict[str, list[Field]] = {}
    for f in block.fields:
        if f.name not in KERNEL_FIELDS:
            c.err(f.loc, f"kernel '{block.name}': unknown field '{f.name}'"
                  f"{suggest(f.name, KERNEL_FIELDS)}", len(f.name))
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
    for f in defaults:
        if f.name in REPEATABLE:
            if f.name not in repeated:
                repeated.setdefault(f.name, []).append(f)
        elif f.name not in merged:
            merged[f.name] = f
    ordered = [merged[name] for name in KERNEL_FIELDS if name in merged]
    swept = [f for f in ordered if f.swept]
    count = math.prod(len(f.alts) for f in swept)
    if count > MAX_VARIANTS:
        c.err(block.name_loc, f"kernel '{block.name}': its sweeps make {count} variants; at most "
              f"{MAX_VARIANTS} per kernel block (split it into several blocks)", len(block.name))
        return [], repeated
    tokens = {f.name: _alt_tokens(f) for f in swept}
    variants: list[Variant] = []
    for combo in itertools.product(*[range(len(f.alts)) for f in swept]):
        chosen = {f.name: (f, f.alts[0]) for f in ordered}
        suffix = []
        for f, i in zip(swept, combo):
            chosen[f.name] = (f, f.alts[i])
            suffix.append(f"{f.name}_{tokens[f.name][i]}")
        variants.append(Variant(chosen, "_".join(suffix)))
    return variants, repeated


