"""Standard verification cases for a kernel: the shapes `gemmgen verify` and
the backend test suites run, chosen from the kernel's own tile so that every
case exercises the edges: a partial last M tile, K not a multiple of the K
tile, zero-sized groups, rows owned by no group, and group_offset sharding
with existing_out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemmgen import ir
from gemmgen.reference import random_inputs


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

    def describe(self) -> str:
        s = f"m={self.m} n={self.n} k={self.k}"
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
        return random_inputs(kernel, m=self.m, n=self.n, k=self.k, rng=rng, group_sizes=gs,
                             g_local=self.g_local, group_offset=self.group_offset,
                             with_existing_out=self.existing_out)


def standard_cases(kernel: ir.Kernel, *, small: bool = True) -> list[Case]:
    """A few cases covering the kernel's edges; `small` keeps them cheap for
    CPU emulation and interpret mode."""
    t = kernel.tile
    if kernel.op is ir.Op.QUANTIZE:
        g = kernel.out_scale.block_k or 128
        k = kernel.static_k or 3 * g
        return [Case("ragged_rows", m=37, n=k, k=k),
                Case("partial_group", m=5, n=k + g // 2, k=k + g // 2)
                if kernel.static_k is None else Case("one_row", m=1, n=k, k=k)]
    n = kernel.static_n or 2 * t.n
    k_full = 2 * t.k
    for s in (kernel.lhs_scale, kernel.rhs_scale):
        if s.enabled and s.block_k:
            k_full = max(k_full, 2 * s.block_k)
    k = kernel.static_k or (k_full + t.k // 2 if not _needs_full_k(kernel) else k_full)
    m = t.m + 37 if small else 4 * t.m + 37
    match kernel.op:
        case ir.Op.DENSE:
            if kernel.algorithm is ir.Algorithm.GEMV:
                return [Case("gemv", m=1, n=n, k=k)]
            if kernel.algorithm is ir.Algorithm.GEMV_BATCHED:
                top = kernel.max_m or 8
                return [Case("batch2", m=2, n=n, k=k), Case(f"batch{top}", m=top, n=n, k=k)]
            return [Case("ragged", m=m, n=n, k=k), Case("decode", m=3, n=n, k=k)]
        case ir.Op.GROUPED:
            # 5 groups: an empty first group, a group spanning a tile edge,
            # another empty one, and rows past sum(group_sizes).
            a = t.m // 2 + 3
            b = m - a - 20
            sizes = (0, a, 0, b - 7, 7)
            return [
                Case("ragged_groups", m=m, n=n, k=k, group_sizes=sizes),
                Case("sharded_existing_out", m=m, n=n, k=k, group_sizes=sizes, group_offset=1,
                     g_local=3, existing_out=True),
            ]
        case ir.Op.TGMM:
            a = t.m // 2 + 3
            sizes = (a, 0, m - a - 9, 9 - 4)
            return [Case("ragged_groups", m=m, n=t.n, k=t.k, group_sizes=sizes)]
    raise AssertionError(kernel.op)


def _needs_full_k(kernel: ir.Kernel) -> bool:
    """Packed operands and K-blocked scales want k a multiple of their block."""
    return kernel.lhs.packed or (kernel.rhs is not None and kernel.rhs.packed) or any(
        s.enabled and s.block_k for s in (kernel.lhs_scale, kernel.rhs_scale))
