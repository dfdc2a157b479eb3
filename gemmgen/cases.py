"""Standard verification cases for a kernel: the shapes `gemmgen verify` and
the backend test suites run, chosen from the kernel's own tile so that every
case exercises the edges: a partial last M tile, K not a multiple of the K
tile, zero-sized groups, rows owned by no group, and group_offset sharding
with existing_out; for the masked grouped layout, valid counts of 0, 1, the
capacity and ragged ones, a capacity that is not a multiple of the M tile,
and 16 groups.

Tile LUTs: every entry (each `tile_rule` and the default tile) gets at least
one case whose shape picks it, built from that entry's tile (`lut_cases`).
A backend with a LUT of its own gets the cases of its own LUT: the cases are
those of the kernel as the backend sees it (`ir.Kernel.for_backend`).

Size: a case costs `case_work(kernel, case)` multiply-adds of the tiles it
runs. Over WORK_BUDGET, the free dims shrink (m first: the fewest rows that
keep a partial tile, then k and n) down to the smallest shape the spec's
`dims` and the LUT entry allow, so that a kernel with large static dims
still runs one row of tiles per case, not several.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from gemmgen import ir
from gemmgen.diagnostics import plural
from gemmgen.reference import random_inputs

# Multiply-adds of the tiles a case runs (m, n, k rounded up to the tile)
# above which its free dims shrink: a few seconds on the CPU emulator (about
# 5e7 a second on two cores), more than any case of a kernel without large
# static dims or LUT thresholds needs.
WORK_BUDGET = 1 << 28


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    m: int
    n: int  # accumulator width (rhs columns); silu_mul outputs n / 2
    k: int
    group_sizes: tuple[int, ...] | None = None
    group_offset: int | None = None
    g_local: int | None = None
    existing_out: bool = False
    # The masked layout (m is the capacity): the valid rows of each group.
    masked_m: tuple[int, ...] | None = None

    def describe(self) -> str:
        s = f"m={self.m} n={self.n} k={self.k}"
        if self.masked_m is not None:
            s += f" masked_m={list(self.masked_m)}"
        if self.group_sizes is not None:
            s += f" groups={list(self.group_sizes)}"
        if self.group_offset is not None:
            s += f" offset={self.group_offset} local={self.g_local}"
        if self.existing_out:
            s += " existing_out"
        return s

    def inputs(self, kernel: ir.Kernel, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([seed, self.m, self.n, self.k, len(self.name)])
        gs = np.asarray(self.group_sizes, np.int32) if self.group_sizes is not None else None
        mm = np.asarray(self.masked_m, np.int32) if self.masked_m is not None else None
        return random_inputs(kernel, m=self.m, n=self.n, k=self.k, rng=rng, group_sizes=gs,
                             g_local=self.g_local, group_offset=self.group_offset,
                             with_existing_out=self.existing_out, masked_m=mm)


def standard_cases(kernel: ir.Kernel, *, small: bool = True) -> list[Case]:
    """A few cases covering the kernel's edges, and every tile of its LUT;
    `small` keeps them cheap for CPU emulation and interpret mode.

    A kernel with a tile LUT of a backend's own (`tile pallas_tpu ...`) has
    one LUT per backend: pass the view of the backend that runs the cases,
    `kernel.for_backend(backend)`, whose LUT they then cover."""
    if kernel.backend_tiles and kernel.view is None:
        raise ValueError(f"kernel {kernel.name} has a tile LUT per backend: take the cases "
                         "of kernel.for_backend(backend)")
    cases = [_fit(kernel, c) for c in _base_cases(kernel, small)]
    return cases + lut_cases(kernel, cases)


def _base_cases(kernel: ir.Kernel, small: bool) -> list[Case]:
    t = kernel.tile
    if kernel.op is ir.Op.QUANTIZE:
        g = kernel.out_scale.block_k or 128
        k = kernel.static_k or 3 * g
        return [Case("ragged_rows", m=37, n=k, k=k),
                Case("partial_group", m=5, n=k + g // 2, k=k + g // 2)
                if kernel.static_k is None else Case("one_row", m=1, n=k, k=k)]
    n, k = _natural_nk(kernel, t)
    m = t.m + 37 if small else 4 * t.m + 37
    match kernel.op:
        case ir.Op.DENSE:
            if kernel.algorithm is ir.Algorithm.GEMV:
                return [Case("gemv", m=1, n=n, k=k)]
            if kernel.algorithm is ir.Algorithm.GEMV_BATCHED:
                top = kernel.max_m or 8
                return [Case("batch2", m=2, n=n, k=k), Case(f"batch{top}", m=top, n=n, k=k)]
            return [Case("ragged", m=m, n=n, k=k), Case("decode", m=3, n=n, k=k)]
        case ir.Op.GROUPED if kernel.masked:
            # m is the capacity, one row past a tile edge plus 37 (not a
            # multiple of the tile); then 16 groups of a decode-sized capacity.
            return [Case("masked_ragged", m=m, n=n, k=k, masked_m=_masked_counts(m, t, 5)),
                    Case("masked_g16", m=t.m // 2 + 5, n=n, k=k,
                         masked_m=_masked_counts(t.m // 2 + 5, t, 16))]
        case ir.Op.GROUPED:
            # 5 groups: an empty first group, a group spanning a tile edge,
            # another empty one, and rows past sum(group_sizes).
            sizes = _grouped_sizes(m, t)
            return [
                Case("ragged_groups", m=m, n=n, k=k, group_sizes=sizes),
                Case("sharded_existing_out", m=m, n=n, k=k, group_sizes=sizes, group_offset=1,
                     g_local=3, existing_out=True),
            ]
        case ir.Op.TGMM:
            return [Case("ragged_groups", m=m, n=t.n, k=t.k, group_sizes=_tgmm_sizes(m, t))]
    raise AssertionError(kernel.op)


def _natural_nk(kernel: ir.Kernel, t: ir.Tile) -> tuple[int, int]:
    """n and k of the standard cases for tile `t`: two n tiles, and k past
    two k tiles (by half a tile unless k must stay whole)."""
    n = kernel.static_n or 2 * t.n
    k_full = 2 * t.k
    for s in (kernel.lhs_scale, kernel.rhs_scale):
        if s.enabled and s.block_k:
            k_full = max(k_full, 2 * s.block_k)
    k = kernel.static_k or (k_full + t.k // 2 if not _needs_full_k(kernel) else k_full)
    return n, k


def _grouped_sizes(m: int, t: ir.Tile, rows: int | None = None) -> tuple[int, ...]:
    """Group sizes over `rows` of m (default: all but 20, or a quarter, left
    to no group): an empty first group, a group spanning a tile edge (when
    there are rows enough), another empty one, then the rest split in two."""
    if rows is None:
        rows = m - 20 if m > 40 else m - m // 4
    a = min(t.m // 2 + 3, rows // 2 + 1)
    rest = rows - a
    last = min(7, rest // 2)
    return (0, a, 0, rest - last, last)


def _masked_counts(cap: int, t: ir.Tile, g: int) -> tuple[int, ...]:
    """Valid rows of g groups of capacity cap: empty, full, one row, one past
    a tile edge (when the capacity has one), then ragged counts."""
    first = [0, cap, min(1, cap), min(t.m + 1, cap) if cap > t.m else cap // 2 + 1]
    rest = [(7 * i + 3) % (cap + 1) for i in range(max(g - len(first), 0))]
    return tuple((first + rest)[:g])


def _tgmm_sizes(m: int, t: ir.Tile, rows: int | None = None) -> tuple[int, ...]:
    if rows is None:
        rows = m - 4 if m > 8 else m
    a = min(t.m // 2 + 3, rows // 2 + 1)
    rest = rows - a
    last = min(5, rest // 2)
    return (a, 0, rest - last, last)


def _active(kernel: ir.Kernel) -> bool:
    """Whether the kernel's tile LUT means anything: tiled ops only."""
    return kernel.op is not ir.Op.QUANTIZE and kernel.algorithm is ir.Algorithm.TILE


def lut_entry(kernel: ir.Kernel, case: Case) -> int:
    """The index of the LUT entry the case's shape picks: its tile_rule, or
    len(tile_rules) for the default tile."""
    for i, rule in enumerate(kernel.tile_rules):
        if all(c.test(case.m, case.n, case.k) for c in rule.conds):
            return i
    return len(kernel.tile_rules)


def tile_label(kernel: ir.Kernel, case: Case) -> str:
    """The tile a case runs, as verify's table prints it: "64x128x128 (m <= 64)",
    "128x256x256 (default)"; "-" for kernels without tiles (GEMV, quantize)."""
    if not _active(kernel):
        return "-"
    tile = kernel.tile_for(case.m, case.n, case.k)
    if not kernel.tile_rules:
        return str(tile)
    i = lut_entry(kernel, case)
    if i == len(kernel.tile_rules):
        return f"{tile} (default)"
    return f"{tile} ({', '.join(str(c) for c in kernel.tile_rules[i].conds)})"


def case_work(kernel: ir.Kernel, case: Case) -> int:
    """Multiply-adds of the tiles a case runs: m, n, k rounded up to the
    tile the case picks. A grouped GEMM runs one m tile per (local group,
    m tile it touches) work item; tgmm, each local group's rows in chunks
    of the tile's m."""
    if kernel.op is ir.Op.QUANTIZE:
        return case.m * case.k
    if not _active(kernel):
        return case.m * case.n * case.k
    t = kernel.tile_for(case.m, case.n, case.k)
    n_pad = _round_up(case.n, t.n)
    k_pad = _round_up(case.k, t.k)
    if case.masked_m is not None:
        # masked: the m tiles of each group's valid rows
        return sum(_round_up(max(c, 0), t.m) for c in case.masked_m) * n_pad * k_pad
    if case.group_sizes is None:
        return _round_up(case.m, t.m) * n_pad * k_pad
    offset = case.group_offset or 0
    local = case.g_local if case.g_local is not None else len(case.group_sizes) - offset
    start, rows = 0, 0
    for i, size in enumerate(case.group_sizes):
        end = min(start + max(size, 0), case.m)
        if offset <= i < offset + local and end > start:
            if kernel.op is ir.Op.TGMM:
                rows += _round_up(end - start, t.m)
            else:
                rows += ((end - 1) // t.m - start // t.m + 1) * t.m
        start = end
    return rows * n_pad * k_pad


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _fit(kernel: ir.Kernel, case: Case) -> Case:
    """`case` with fewer rows when it is over WORK_BUDGET and m is free to
    shrink without leaving its LUT entry."""
    if not _active(kernel) or case_work(kernel, case) <= WORK_BUDGET:
        return case
    entry = lut_entry(kernel, case)
    lo, hi = _entry_bounds(kernel, entry, "m", case)
    return _best(kernel, entry, case, [m for m in _m_candidates(kernel.tile_for(case.m, case.n, case.k), case.m, lo, hi)],
                 [case.n], [case.k])


def lut_cases(kernel: ir.Kernel, cases: list[Case]) -> list[Case]:
    """One case for each LUT entry that none of `cases` picks, shaped from
    that entry's tile and within the entry's conditions (an entry no shape
    can reach, e.g. one whose rule an earlier rule always takes, gets none)."""
    if not _active(kernel) or not kernel.tile_rules:
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
    n_nat, k_nat = _natural_nk(kernel, tile)
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
    work = case_work(kernel, case)
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
        counts = _masked_counts(m, tile, len(template.masked_m or ()) or 5)
        return replace(template, m=m, n=n, k=k, masked_m=counts)
    if kernel.op is ir.Op.GROUPED:
        sizes = _grouped_sizes(m, tile, rows=min(m - m // 8, tile.m + 17) if m > tile.m + 37 else None)
    elif kernel.op is ir.Op.TGMM:
        sizes = _tgmm_sizes(m, tile, rows=min(m, tile.m + 17) if m > tile.m + 37 else None)
    return replace(template, m=m, n=n, k=k, group_sizes=sizes)


def _tiles(kernel: ir.Kernel) -> list[ir.Tile]:
    return [r.tile for r in kernel.tile_rules] + [kernel.tile]


def _k_unit(kernel: ir.Kernel) -> int:
    """The step of k that keeps every case valid: half the largest k tile
    (k may stop halfway into a tile), or whole tiles and scale blocks."""
    tiles_k = max(t.k for t in _tiles(kernel))
    if not _needs_full_k(kernel):
        return max(tiles_k // 2, 16)
    blocks = [s.block_k for s in (kernel.lhs_scale, kernel.rhs_scale) if s.enabled and s.block_k]
    return math.lcm(tiles_k, *blocks)


def _needs_full_k(kernel: ir.Kernel) -> bool:
    """Packed operands and K-blocked scales want k a multiple of their block."""
    return kernel.lhs.packed or (kernel.rhs is not None and kernel.rhs.packed) or any(
        s.enabled and s.block_k for s in (kernel.lhs_scale, kernel.rhs_scale))


# -- the user's own shape (`gemmgen verify --m/--n/--k/--groups/--group-sizes`)

# Groups of a grouped kernel's own shape when neither --groups nor
# --group-sizes says (explain's default too).
DEFAULT_GROUPS = 8


@dataclass(frozen=True, slots=True)
class Shape:
    """A problem shape as the user gives it; None where not given."""

    m: int | None = None
    n: int | None = None
    k: int | None = None
    groups: int | None = None
    group_sizes: tuple[int, ...] | None = None

    def given(self) -> bool:
        return any(v is not None for v in (self.m, self.n, self.k, self.groups, self.group_sizes))


class ShapeError(ValueError):
    """A shape no case can be built from, or one the kernel's launcher refuses."""


def check_shape(shape: Shape) -> None:
    """A ShapeError for values no kernel takes: negative dims, no groups,
    --groups and --group-sizes that disagree."""
    for name in ("m", "n", "k"):
        v = getattr(shape, name)
        if v is not None and v < (0 if name == "m" else 1):
            raise ShapeError(f"--{name} {v}: must be {'>= 0' if name == 'm' else 'positive'}")
    if shape.groups is not None and shape.groups < 1:
        raise ShapeError(f"--groups {shape.groups}: must be positive")
    sizes = shape.group_sizes
    if sizes is not None:
        if not sizes or any(s < 0 for s in sizes):
            raise ShapeError(f"--group-sizes {','.join(map(str, sizes))}: each size must be >= 0")
        if shape.groups is not None and shape.groups != len(sizes):
            raise ShapeError(f"--groups {shape.groups} but --group-sizes gives "
                             f"{plural(len(sizes), 'group')}")


def _defaults_view(kernel: ir.Kernel) -> ir.Kernel:
    """The view whose first standard case gives `user_case` the dims not
    given: the kernel itself when it is a view or has one LUT, else its CUDA
    view (the smaller tiles: modest defaults), else its first backend's."""
    if kernel.view is not None or not kernel.backend_tiles:
        return kernel
    backend = ir.Backend.CUDA if ir.Backend.CUDA in kernel.backends else kernel.backends[0]
    return kernel.for_backend(backend)


def user_case(kernel: ir.Kernel, shape: Shape) -> Case:
    """The case `your_shape` at the user's shape: dims not given are the
    kernel's first standard case's (its static dims where the spec fixes
    them). A grouped kernel's m rows are split evenly over --groups groups
    (default DEFAULT_GROUPS) unless --group-sizes gives them; the masked
    layout's m is each group's capacity, --group-sizes its valid rows (default:
    all). A ShapeError for values no kernel takes (negative, inconsistent)."""
    check_shape(shape)
    sizes = shape.group_sizes
    base = standard_cases(_defaults_view(kernel))[0]
    if kernel.op is ir.Op.QUANTIZE:
        if shape.n is not None and shape.n != (shape.k or base.k):
            raise ShapeError(f"{kernel.name} (op quantize) has no n: its output is m x k "
                             "(give --k)")
        k = shape.k or base.k
        return Case("your_shape", m=base.m if shape.m is None else shape.m, n=k, k=k)
    grouped = kernel.op in (ir.Op.GROUPED, ir.Op.TGMM)
    if not grouped and (shape.groups is not None or sizes is not None):
        raise ShapeError(f"{kernel.name} is not grouped: --groups and --group-sizes do not "
                         "apply (use --kernel to pick grouped kernels)")
    n = shape.n or base.n
    k = shape.k or base.k
    if not grouped:
        return Case("your_shape", m=base.m if shape.m is None else shape.m, n=n, k=k)
    if kernel.masked:
        cap = shape.m if shape.m is not None else max(sizes) if sizes else base.m
        counts = sizes or (cap,) * (shape.groups or DEFAULT_GROUPS)
        if max(counts) > cap:
            raise ShapeError(f"--group-sizes: a masked group holds at most m = {cap} valid "
                             f"rows (its capacity), not {max(counts)}")
        return Case("your_shape", m=cap, n=n, k=k, masked_m=tuple(counts))
    if sizes is None:
        m = base.m if shape.m is None else shape.m
        g = shape.groups or DEFAULT_GROUPS
        sizes = tuple(m // g + (1 if i < m % g else 0) for i in range(g))
    m = shape.m if shape.m is not None else sum(sizes)
    if sum(sizes) > m:
        raise ShapeError(f"--group-sizes add up to {sum(sizes)} rows, more than m = {m}")
    return Case("your_shape", m=m, n=n, k=k, group_sizes=tuple(sizes))


def launch_env(kernel: ir.Kernel, case: Case) -> dict[str, int]:
    """The dims a launcher reads off the arrays of `case`, by the names of
    its launch plan (gemmgen.backends.cuda.launch)."""
    groups = len(case.masked_m if case.masked_m is not None else case.group_sizes or ())
    return {"m": case.m, "n": case.n, "k": case.k, "g": case.g_local or groups,
            "num_groups": groups, "group_offset": case.group_offset or 0}


def launch_conditions(kernel: ir.Kernel, spec: ir.Spec) -> list:
    """The conditions a call of `kernel` must meet (each a `Check`: its
    `cond` expression and the message), as its launchers check them: the
    CUDA launch plan's checks, or for a kernel without CUDA the checks of
    what the spec fixes (`dims`, silu_mul's even n), which both backends'
    launchers make."""
    from gemmgen.backends.cuda.args import spec_checks

    if ir.Backend.CUDA in kernel.backends:
        from gemmgen.backends import cuda

        return list(cuda.plan(kernel, spec).checks)
    return spec_checks(kernel)


def condition_results(kernel: ir.Kernel, spec: ir.Spec,
                      dims: dict[str, int]) -> list[tuple[object, bool | None]]:
    """Each of `launch_conditions` with whether `dims` (named as the launch
    plan names them: m, n, k, g, num_groups, group_offset) meet it; None
    where the condition needs a name `dims` does not give."""
    env = dict(dims)
    if ir.Backend.CUDA in kernel.backends:
        from gemmgen.backends import cuda

        plan = cuda.plan(kernel, spec)
        env = plan.env({name: v for name, v in env.items() if name in plan.names})
    out: list[tuple[object, bool | None]] = []
    for check in launch_conditions(kernel, spec):
        try:
            out.append((check, bool(check.cond.eval(env))))
        except KeyError:
            out.append((check, None))
    return out


def refused(kernel: ir.Kernel, spec: ir.Spec, case: Case) -> list:
    """The conditions of `launch_conditions` that `case` fails."""
    return [c for c, ok in condition_results(kernel, spec, launch_env(kernel, case))
            if ok is False]
