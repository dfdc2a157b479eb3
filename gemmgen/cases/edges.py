"""The edge-making shapes of the cases, from a tile: n over two n tiles
and k past two k tiles (whole where packing or K-blocked scales need it),
group sizes with empty groups, a group across a tile edge and rows owned
by no group, tgmm's groups, and the masked layout's valid counts (0, the
capacity, 1, one past a tile edge, then ragged ones)."""

from __future__ import annotations

from gemmgen import ir


def natural_nk(kernel: ir.Kernel, t: ir.Tile) -> tuple[int, int]:
    """n and k of the standard cases for tile `t`: two n tiles, and k past
    two k tiles (by half a tile unless k must stay whole)."""
    n = kernel.static_n or 2 * t.n
    k_full = 2 * t.k
    for s in (kernel.lhs_scale, kernel.rhs_scale):
        if s.enabled and s.block_k:
            k_full = max(k_full, 2 * s.block_k)
    k = kernel.static_k or (k_full + t.k // 2 if not needs_full_k(kernel) else k_full)
    return n, k


def grouped_sizes(m: int, t: ir.Tile, rows: int | None = None) -> tuple[int, ...]:
    """Group sizes over `rows` of m (default: all but 20, or a quarter, left
    to no group): an empty first group, a group spanning a tile edge (when
    there are rows enough), another empty one, then the rest split in two."""
    if rows is None:
        rows = m - 20 if m > 40 else m - m // 4
    a = min(t.m // 2 + 3, rows // 2 + 1)
    rest = rows - a
    last = min(7, rest // 2)
    return (0, a, 0, rest - last, last)


def masked_counts(cap: int, t: ir.Tile, g: int) -> tuple[int, ...]:
    """Valid rows of g groups of capacity cap: empty, full, one row, one past
    a tile edge (when the capacity has one), then ragged counts."""
    first = [0, cap, min(1, cap), min(t.m + 1, cap) if cap > t.m else cap // 2 + 1]
    rest = [(7 * i + 3) % (cap + 1) for i in range(max(g - len(first), 0))]
    return tuple((first + rest)[:g])


def tgmm_sizes(m: int, t: ir.Tile, rows: int | None = None) -> tuple[int, ...]:
    if rows is None:
        rows = m - 4 if m > 8 else m
    a = min(t.m // 2 + 3, rows // 2 + 1)
    rest = rows - a
    last = min(5, rest // 2)
    return (a, 0, rest - last, last)


def needs_full_k(kernel: ir.Kernel) -> bool:
    """Packed operands and K-blocked scales want k a multiple of their block."""
    return kernel.lhs.packed or (kernel.rhs is not None and kernel.rhs.packed) or any(
        s.enabled and s.block_k for s in (kernel.lhs_scale, kernel.rhs_scale))
