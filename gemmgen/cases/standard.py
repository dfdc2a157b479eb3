"""The standard cases of a kernel (`standard_cases`): the shapes `gemmgen
verify` and the backend test suites run, one or two per op and algorithm,
each through its edges (gemmgen.cases.edges), then one per LUT entry no
other case picks (gemmgen.cases.lut), each within WORK_BUDGET."""

from __future__ import annotations

from gemmgen import ir
from gemmgen.cases.case import Case
from gemmgen.cases.edges import grouped_sizes, masked_counts, natural_nk, tgmm_sizes
from gemmgen.cases.lut import fit, lut_cases


def standard_cases(kernel: ir.Kernel, *, small: bool = True) -> list[Case]:
    """A few cases covering the kernel's edges, and every tile of its LUT;
    `small` keeps them cheap for CPU emulation and interpret mode.

    A kernel with a tile LUT of a backend's own (`tile pallas_tpu ...`) has
    one LUT per backend: pass the view of the backend that runs the cases,
    `kernel.for_backend(backend)`, whose LUT they then cover."""
    if kernel.backend_tiles and kernel.view is None:
        raise ValueError(f"kernel {kernel.name} has a tile LUT per backend: take the cases "
                         "of kernel.for_backend(backend)")
    cases = [fit(kernel, c) for c in _base_cases(kernel, small)]
    return cases + lut_cases(kernel, cases)


def _base_cases(kernel: ir.Kernel, small: bool) -> list[Case]:
    t = kernel.tile
    if kernel.op is ir.Op.QUANTIZE:
        g = kernel.out_scale.block_k or 128
        k = kernel.static_k or 3 * g
        return [Case("ragged_rows", m=37, n=k, k=k),
                Case("partial_group", m=5, n=k + g // 2, k=k + g // 2)
                if kernel.static_k is None else Case("one_row", m=1, n=k, k=k)]
    n, k = natural_nk(kernel, t)
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
            return [Case("masked_ragged", m=m, n=n, k=k, masked_m=masked_counts(m, t, 5)),
                    Case("masked_g16", m=t.m // 2 + 5, n=n, k=k,
                         masked_m=masked_counts(t.m // 2 + 5, t, 16))]
        case ir.Op.GROUPED:
            # 5 groups: an empty first group, a group spanning a tile edge,
            # another empty one, and rows past sum(group_sizes).
            sizes = grouped_sizes(m, t)
            return [
                Case("ragged_groups", m=m, n=n, k=k, group_sizes=sizes),
                Case("sharded_existing_out", m=m, n=n, k=k, group_sizes=sizes, group_offset=1,
                     g_local=3, existing_out=True),
            ]
        case ir.Op.TGMM:
            return [Case("ragged_groups", m=m, n=t.n, k=t.k, group_sizes=tgmm_sizes(m, t))]
    raise AssertionError(kernel.op)
