"""A verification case (`Case`: a problem shape, its groups, and the
random inputs it draws) and what a kernel makes of it: the LUT entry its
shape picks (`lut_entry`, `tile_label`) and the multiply-adds of the tiles
it runs (`case_work`, held under WORK_BUDGET)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemmgen import ir
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


def tiled(kernel: ir.Kernel) -> bool:
    """Whether the kernel's tile LUT means anything: tiled ops only."""
    return kernel.op is not ir.Op.QUANTIZE and kernel.algorithm is ir.Algorithm.TILE


def case_groups(case: Case) -> int | None:
    """The groups of the case's problem, as a tile rule on g sees them:
    len(group_sizes) (every group, also past group_offset), the masked
    layout's groups; None for a dense case."""
    if case.masked_m is not None:
        return len(case.masked_m)
    if case.group_sizes is not None:
        return len(case.group_sizes)
    return None


def lut_entry(kernel: ir.Kernel, case: Case) -> int:
    """The index of the LUT entry the case's shape picks: its tile_rule, or
    len(tile_rules) for the default tile."""
    return kernel.tile_rule_for(case.m, case.n, case.k, case_groups(case))[0]


def tile_label(kernel: ir.Kernel, case: Case) -> str:
    """The tile a case runs, as verify's table prints it: "64x128x128 (m <= 64)",
    "128x256x256 (default)"; "-" for kernels without tiles (GEMV, quantize)."""
    if not tiled(kernel):
        return "-"
    tile = kernel.tile_for(case.m, case.n, case.k, case_groups(case))
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
    if not tiled(kernel):
        return case.m * case.n * case.k
    t = kernel.tile_for(case.m, case.n, case.k, case_groups(case))
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
