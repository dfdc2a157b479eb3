"""Cases for every tile of a kernel's LUT, and cases that fit the budget.

`lut_cases` adds one case for each LUT entry (a `tile_rule`, or the
default tile) that no standard case picks, shaped from that entry's tile
inside the boxes of (m, n, k) where the LUT picks it. `fit` shrinks a case
over WORK_BUDGET (m first) without leaving its LUT entry."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

from gemmgen import ir
from gemmgen.cases.case import WORK_BUDGET, Case, case_groups, case_work, lut_entry, tiled
from gemmgen.cases.edges import (
    grouped_sizes,
    masked_counts,
    natural_nk,
    needs_full_k,
    tgmm_sizes,
)


def fit(kernel: ir.Kernel, case: Case) -> Case:
    """`case` with fewer rows when it is over WORK_BUDGET and m is free to
    shrink without leaving its LUT entry."""
    if not tiled(kernel) or case_work(kernel, case) <= WORK_BUDGET:
        return case
    entry = lut_entry(kernel, case)
    lo, hi = _entry_bounds(kernel, entry, "m", case)
    return _best(kernel, entry, case, [m for m in _m_candidates(kernel.tile_for(case.m, case.n, case.k, case_groups(case)), case.m, lo, hi)],
                 [case.n], [case.k])


def lut_cases(kernel: ir.Kernel, cases: list[Case]) -> list[Case]:
    """One case for each LUT entry that none of `cases` picks, shaped from
    that entry's tile and within the entry's conditions (an entry no shape
    can reach, e.g. one whose rule an earlier rule always takes, gets none)."""
    if not tiled(kernel) or not kernel.tile_rules:
        return []
    covered = {lut_entry(kernel, c) for c in cases}
    out: list[Case] = []
    template = cases[0]
    for entry in range(len(kernel.tile_rules) + 1):
        if entry in covered:
            continue
        case = _case_for_entry(kernel, entry, template)
        if case is not None:
            out.append(case)
    return out


# Per dim, the interval a condition allows; the negation of a condition is
# one interval, or two for ==.
_BIG = 2**31 - 1


def _interval(c: ir.Cond) -> tuple[int, int]:
    v = c.value
    return {ir.Cmp.LT: (1, v - 1), ir.Cmp.LE: (1, v), ir.Cmp.EQ: (v, v),
            ir.Cmp.GE: (v, _BIG), ir.Cmp.GT: (v + 1, _BIG)}[c.cmp]


def _negations(c: ir.Cond) -> list[tuple[str, int, int]]:
    if c.dim not in ir.COND_DIMS:
        # g, m/g, tpu: not a box of (m, n, k); the candidates are checked
        # against the LUT (`_best`), so the box stays open
        return [("m", 1, _BIG)]
    v = c.value
    match c.cmp:
        case ir.Cmp.LT:
            return [(c.dim, v, _BIG)]
        case ir.Cmp.LE:
            return [(c.dim, v + 1, _BIG)]
        case ir.Cmp.GE:
            return [(c.dim, 1, v - 1)]
        case ir.Cmp.GT:
            return [(c.dim, 1, v)]
        case ir.Cmp.EQ:
            return [(c.dim, 1, v - 1), (c.dim, v + 1, _BIG)]
    raise AssertionError(c.cmp)


def _regions(kernel: ir.Kernel, entry: int) -> list[dict[str, tuple[int, int]]]:
    """The boxes of (m, n, k) in which the LUT picks `entry`: its own
    conditions, and one violated condition of every earlier rule."""
    base = {d: (1, _BIG) for d in "mnk"}
    if kernel.static_n is not None:
        base["n"] = (kernel.static_n, kernel.static_n)
    if kernel.static_k is not None:
        base["k"] = (kernel.static_k, kernel.static_k)
    own = kernel.tile_rules[entry].conds if entry < len(kernel.tile_rules) else ()
    for c in own:
        if c.dim not in ir.COND_DIMS:
            continue  # g, m/g, tpu: checked on the shaped case (`_best`)
        lo, hi = _interval(c)
        base[c.dim] = (max(base[c.dim][0], lo), min(base[c.dim][1], hi))
    earlier = [[neg for c in rule.conds for neg in _negations(c)] for rule in kernel.tile_rules[:entry]]
    boxes = []
    for choice in itertools.product(*earlier):
        box = dict(base)
        for d, lo, hi in choice:
            box[d] = (max(box[d][0], lo), min(box[d][1], hi))
        if all(lo <= hi for lo, hi in box.values()):
            boxes.append(box)
    return boxes


def _entry_bounds(kernel: ir.Kernel, entry: int, dim: str, case: Case) -> tuple[int, int]:
    """The range of `dim` that keeps `case` in `entry`, the other dims fixed."""
    values = {"m": case.m, "n": case.n, "k": case.k}
    for box in _regions(kernel, entry):
        if all(box[d][0] <= values[d] <= box[d][1] for d in "mnk" if d != dim):
            if box[dim][0] <= values[dim] <= box[dim][1]:
                return box[dim]
    return values[dim], values[dim]


def _m_candidates(t: ir.Tile, natural: int, lo: int, hi: int) -> list[int]:
    """m values in [lo, hi], preferred first: `natural`, then values that
    leave the last m tile partial, from large to small."""
    picks = [natural, t.m // 2 + 3, hi - 5, hi, lo, lo + 5, 3, 1]
    for start in (hi, lo):
        # the multiple of the tile nearest `start`, less a few rows
        picks.append(max(lo, start // t.m * t.m - 5))
    seen, out = set(), []
    for v in picks:
        v = min(max(v, lo), hi)
        if v >= 1 and v not in seen:
            seen.add(v)
            out.append(v)
    partial = [v for v in out if v % t.m]
    return partial + [v for v in out if not v % t.m]


def _aligned_candidates(natural: int, unit: int, lo: int, hi: int) -> list[int]:
    """Multiples of `unit` (or `natural` itself) in [lo, hi], preferred first."""
    picks = [natural, -(-lo // unit) * unit, hi // unit * unit, -(-lo // unit) * unit + unit]
    out = []
    for v in picks:
        if lo <= v <= hi and v >= 1 and v not in out:
            out.append(v)
    return out


def _case_for_entry(kernel: ir.Kernel, entry: int, template: Case) -> Case | None:
    tile = kernel.tile_rules[entry].tile if entry < len(kernel.tile_rules) else kernel.tile
    n_nat, k_nat = natural_nk(kernel, tile)
    n_unit = math.lcm(*(t.n for t in _tiles(kernel)))
    k_unit = _k_unit(kernel)
    m_nat = tile.m + 37
    best: Case | None = None
    for box in _regions(kernel, entry):
        ms = _m_candidates(tile, m_nat, *box["m"])
        ns = _aligned_candidates(n_nat, n_unit, *box["n"]) or _aligned_candidates(n_nat, tile.n, *box["n"])
        ks = _aligned_candidates(k_nat, k_unit, *box["k"])
        ks += [v for v in _aligned_candidates(k_nat, tile.k, *box["k"]) if v not in ks]
        if not (ms and ns and ks):
            continue
        named = replace(template, name=f"tile_rule_{entry + 1}" if entry < len(kernel.tile_rules)
                        else "default_tile")
        case = _best(kernel, entry, named, ms, ns, ks)
        if best is None or _cost(kernel, case) < _cost(kernel, best):
            best = case
    return best


def _cost(kernel: ir.Kernel, case: Case) -> tuple[bool, int]:
    # A grouped case's work counts the rows its groups cover, but its lhs
    # and out have all m rows: an `m >= ...` entry must not pick an m of
    # 2**31 whose groups are small (arrays of terabytes).
    work = max(case_work(kernel, case), case.m * max(case.n, case.k))
    return (work > WORK_BUDGET, work if work > WORK_BUDGET else 0)


def _best(kernel: ir.Kernel, entry: int, template: Case, ms: list[int], ns: list[int],
          ks: list[int]) -> Case:
    """The first shape of the candidates (in preference order: m, then k,
    then n) that picks `entry` and fits WORK_BUDGET; else the cheapest."""
    tile = kernel.tile_rules[entry].tile if entry < len(kernel.tile_rules) else kernel.tile
    options = []
    for rank, (n, k, m) in enumerate(itertools.product(ns, ks, ms)):
        case = _shaped(kernel, template, m, n, k, tile)
        if lut_entry(kernel, case) == entry:
            options.append((_cost(kernel, case), rank, case))
    if not options:
        return template
    return min(options, key=lambda o: (o[0], o[1]))[2]


def _shaped(kernel: ir.Kernel, template: Case, m: int, n: int, k: int, tile: ir.Tile) -> Case:
    """`template` with the shape (m, n, k) and group sizes to match."""
    sizes = template.group_sizes
    if kernel.masked:
        counts = masked_counts(m, tile, len(template.masked_m or ()) or 5)
        return replace(template, m=m, n=n, k=k, masked_m=counts)
    if kernel.op is ir.Op.GROUPED:
        sizes = grouped_sizes(m, tile, rows=min(m - m // 8, tile.m + 17) if m > tile.m + 37 else None)
    elif kernel.op is ir.Op.TGMM:
        sizes = tgmm_sizes(m, tile, rows=min(m, tile.m + 17) if m > tile.m + 37 else None)
    return replace(template, m=m, n=n, k=k, group_sizes=sizes)


def _tiles(kernel: ir.Kernel) -> list[ir.Tile]:
    return [r.tile for r in kernel.tile_rules] + [kernel.tile]


def _k_unit(kernel: ir.Kernel) -> int:
    """The step of k that keeps every case valid: half the largest k tile
    (k may stop halfway into a tile), or whole tiles and scale blocks."""
    tiles_k = max(t.k for t in _tiles(kernel))
    if not needs_full_k(kernel):
        return max(tiles_k // 2, 16)
    blocks = [s.block_k for s in (kernel.lhs_scale, kernel.rhs_scale) if s.enabled and s.block_k]
    return math.lcm(tiles_k, *blocks)
