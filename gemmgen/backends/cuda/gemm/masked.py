"""The masked grouped layout on the CUDA tile GEMM (docs/cuda.md, "The
masked layout"): the pieces of the plan that differ from the contiguous
grouped GEMM, as small functions the tile GEMM's plan (gemm/) calls
where a kernel is `ir.Kernel.masked`.

lhs [g, m, k] holds each group's rows padded to the capacity m and
`masked_m` [g] says how many are valid; out is [g, m, n_out]. The kernel
sees lhs and out as g * m rows (`rows`): group gl owns rows [gl * m,
gl * m + masked_m[gl]) (the count clipped to [0, m]). One launch: the grid's
rows are the g * cdiv(m, bm) (group, m tile) pairs, and each block zeroes the
rows of its tile past the count and computes the others
(gg::gemm::masked, gg_gemm.cuh), so there is no fill pass, no worklist and
no workspace. No group_offset and no existing_out: a shard holds its own
experts' buffers.
"""

from __future__ import annotations

from gemmgen.backends.cuda.common import Arg, Binding, Check, StepArg, array, i32, var
from gemmgen.ir import DType

__all__ = ["EMPTY", "ROWS", "args", "bindings", "checks", "grid_rows", "params"]

# The rows of lhs and out as the kernel indexes them, g * m: the launchers
# compute it in 64 bits and `checks` keeps it within int32.
ROWS = "g * m"
# Nothing to compute: no group, or no row of capacity.
EMPTY = "m == 0 or g == 0"


def args(grouped: tuple[Arg, ...]) -> tuple[Arg, ...]:
    """The launcher arguments of a masked kernel, from those of the same
    kernel in the contiguous layout: lhs [g, m, k], masked_m [g] in place of
    group_sizes, per-row lhs scales with a leading g, out [g, m, n_out]; no
    group_offset or existing_out."""
    out: list[Arg] = []
    for a in grouped:
        if a.name in ("group_offset", "existing_out"):
            continue
        if a.name == "group_sizes":
            out.append(Arg("masked_m", "in", DType.INT32, ("g",),
                           "valid rows of each group, the first of its m (clipped to [0, m])",
                           align=4))
        elif a.name == "lhs":
            out.append(Arg("lhs", a.role, a.dtype, ("g",) + a.shape,
                           "the activations, m rows (the capacity) per group", align=a.align))
        elif a.name == "lhs_scale" and a.shape and a.shape[0] == var("m"):
            # per_token [g, m] and per_token_group [g, m, k blocks]
            out.append(Arg(a.name, a.role, a.dtype, ("g",) + a.shape, a.doc, a.optional,
                           a.align))
        elif a.name == "out":
            out.append(Arg("out", a.role, a.dtype, ("g",) + a.shape,
                           "the result; rows past a group's count are zero"))
        else:
            out.append(a)
    return tuple(out)


def bindings(grouped: tuple[Binding, ...]) -> tuple[Binding, ...]:
    """m (the capacity) and k from lhs [g, m, k], g and n from rhs; the
    contiguous layout's num_groups does not exist."""
    k_mul = next(b.mul for b in grouped if b.dim == "k")  # 2: packed fp4
    out = [Binding("m", "lhs", 1), Binding("k", "lhs", 2, k_mul)]
    out += [b for b in grouped if b.dim in ("g", "n")]
    return tuple(out)


def checks(grouped: tuple[Check, ...]) -> tuple[Check, ...]:
    """The contiguous layout's checks less group_offset's, and the row count
    within int32 (the kernel indexes rows as int)."""
    out = [c for c in grouped if "group_offset" not in c.message]
    out.insert(len(out) - 1, Check(f"{ROWS} < 2147483647",
                                   "g * m (the rows of lhs and out) must fit in int32"))
    return tuple(out)


def params() -> tuple[tuple[str, str, StepArg], ...]:
    """The GEMM entry points' parameters after out (C++ type, name, what the
    launchers pass): masked_m, then the dims (m is the capacity)."""
    return (("const int* __restrict__", "masked_m", array("masked_m")),
            *(("int", d, i32(d)) for d in ("n", "k", "g", "m")))


def grid_rows(bm: int) -> str:
    """The grid's rows (folded over y and z): every (group, m tile) pair."""
    return f"g * gg_cdiv(m, {bm})"
