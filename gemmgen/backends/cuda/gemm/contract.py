"""What every body of the tile GEMM shares: the launch contract and the Config.

The launchers' arguments in contract order (docs/cuda.md, launchers), their
checks and alignments, the spec restated for the file comments, and the
`Config` struct of the .cu (runtime/cuda/gg_gemm_config.cuh): what the
kernel computes, whichever tensor-core body computes it (mma_sync.py, or a
body of bodies.py on its device).
"""

from __future__ import annotations

import enum
from dataclasses import replace as dc_replace
from typing import assert_never

from gemmgen import ir
from gemmgen.backends.cuda.common import (
    CTYPE, Arg, Binding, Check, Step, array, cond_expr, i32, i64, spec_checks,
)
from gemmgen.backends.cuda.gemm import masked as cuda_masked
from gemmgen.backends.cuda.gemm.text import cbool
from gemmgen.ir import Activation, BiasMode, DType, Layout, Op, ScaleMode
from gemmgen.render import _cfloat

class BFeed(enum.Enum):
    """How the staged B tile reaches the tensor cores (gg::gemm::BFeed)."""

    LDMATRIX = "kLdmatrix"  # [n, k] tile of the tensor-core type, as for A
    LDMATRIX_TRANS = "kLdmatrixTrans"  # [k, n] tile of a 16-bit type: ldmatrix.trans
    CONVERT = "kConvert"  # widened and / or transposed to a [n, k] tile first
    UNPACK_FP4 = "kUnpackFp4"  # packed fp4 [n, k] to registers, one e2m1 a byte (W4A8)


# The C++ spelling of the plan's choices (runtime/cuda/gg_gemm_config.cuh).
FORMAT = {
    DType.F32: "kF32", DType.BF16: "kBF16", DType.F16: "kF16", DType.E4M3: "kE4M3",
    DType.E5M2: "kE5M2", DType.INT8: "kInt8", DType.INT4: "kInt4", DType.UINT4: "kUint4",
    DType.FP4: "kFp4", DType.E8M0: "kE8M0", DType.UE4M3: "kUE4M3",
}
SCALE_MODE = {
    ScaleMode.NONE: "kNone", ScaleMode.TENSOR: "kPerTensor", ScaleMode.TOKEN: "kPerToken",
    ScaleMode.TOKEN_GROUP: "kPerTokenGroup", ScaleMode.CHANNEL: "kPerChannel",
    ScaleMode.BLOCK: "kBlock", ScaleMode.KBLOCK: "kKBlock",
}
LAYOUT = {ir.ScaleLayout.ROWS: "kRows", ir.ScaleLayout.ATOM128X4: "kAtom128x4"}
BIAS = {BiasMode.NONE: "kNone", BiasMode.N: "kN", BiasMode.GROUP: "kGroup"}
ACTIVATION = {
    Activation.NONE: "kNone", Activation.RELU: "kRelu", Activation.GELU: "kGelu",
    Activation.SILU: "kSilu", Activation.SILU_MUL: "kSiluMul",
    Activation.SWIGLU_CLAMPED: "kSwigluClamped",
}


def compute_dtype(kernel: ir.Kernel) -> DType | None:
    """The tensor-core input type, or None when there is no MMA for the pair."""
    a, b = kernel.lhs.dtype, kernel.rhs_operand.dtype
    if a in (DType.BF16, DType.F16):
        return a if b in (a, DType.E4M3, DType.E5M2, DType.INT8, DType.INT4, DType.UINT4,
                          DType.FP4) else None
    if a is DType.E4M3 and b is DType.FP4:
        return a  # W4A8: the block-scaled e4m3 x e2m1 MMA of sm_120a / sm_121a only
    if a in (DType.E4M3, DType.E5M2):
        return a if b is a else None  # mixed e4m3 x e5m2 MMAs are not wrapped yet
    if a is DType.INT8:
        return a if b in (DType.INT8, DType.INT4) else None
    if a is DType.FP4:
        return a if b is a else None  # the block-scaled MMAs of sm_120a / sm_121a only
    return None


def fold_scales(kernel: ir.Kernel) -> bool:
    """GemmPlan.fold_scales: a main-loop scale, an epilogue scale, and e8m0."""
    return ir.fold_scales_of(kernel)


def _lhs_shape(kernel: ir.Kernel) -> str:
    return "[g, m, k] (masked: m rows of capacity per group)" if kernel.masked else "[m, k]"


def spec_lines(kernel: ir.Kernel) -> tuple[str, ...]:
    """The spec restated for the comment block at the top of each file."""
    rhs_shape = {(Op.DENSE, Layout.NK): "[n, k]", (Op.DENSE, Layout.KN): "[k, n]",
                 (Op.GROUPED, Layout.NK): "[g, n, k]", (Op.GROUPED, Layout.KN): "[g, k, n]"}
    lines = [f"op        {kernel.op.value}",
             f"lhs       {kernel.lhs.dtype.value} {_lhs_shape(kernel)}",
             f"rhs       {kernel.rhs_operand.dtype.value}{' packed' if kernel.rhs_operand.packed else ''} "
             f"{rhs_shape[(kernel.op, kernel.rhs_operand.layout)]}",
             f"out       {kernel.out.value} (accumulator {kernel.acc.value})"]
    for name, sc in (("lhs_scale", kernel.lhs_scale), ("rhs_scale", kernel.rhs_scale)):
        if sc.enabled:
            blocks = "".join(f" {d}={v}" for d, v in (("n", sc.block_n), ("k", sc.block_k))
                             if (d == "n" and (v > 1 or sc.mode is ScaleMode.BLOCK))
                             or (d == "k" and v))
            if sc.layout is not ir.ScaleLayout.ROWS:
                blocks += f" layout={sc.layout.value}"
            where = ("mainloop, with the K-block scales"
                     if sc.placement is ir.Placement.EPILOGUE and fold_scales(kernel)
                     else sc.placement.value)
            glob = " global=f32" if sc.global_scale else ""
            glob += f" zero={sc.zero.value}" if sc.zero is not None else ""
            lines.append(f"{name:<10}{sc.mode.value}{blocks} {sc.dtype.value}{glob} "
                         f"(applied in the {where})")
    if kernel.bias.mode is not BiasMode.NONE:
        shape = "[n]" if kernel.bias.mode is BiasMode.N else "[g, 1, n]"
        lines.append(f"bias      {kernel.bias.dtype.value} {shape}")
    if kernel.epilogue.activation is not Activation.NONE or kernel.epilogue.alpha is not None:
        alpha = f" alpha={kernel.epilogue.alpha!r}" if kernel.epilogue.alpha is not None else ""
        lines.append(f"epilogue  {kernel.epilogue.activation.value}{alpha}")
    t = kernel.tile

    def cluster(t: ir.Tile) -> str:
        return f" cluster_n={t.cluster_n}" if t.cluster_n != 1 else ""

    lines.append(f"tile      m={t.m} n={t.n} k={t.k}{cluster(t)}, {kernel.stages} stages")
    for r in kernel.tile_rules:
        lines.append(f"  when {cond_expr(r.conds, kernel.masked)}: m={r.tile.m} n={r.tile.n} k={r.tile.k}"
                     f"{cluster(r.tile)}")
    if kernel.static_n or kernel.static_k:
        lines.append("dims     " + (f" n={kernel.static_n}" if kernel.static_n else "")
                     + (f" k={kernel.static_k}" if kernel.static_k else ""))
    return tuple(lines)


def args(kernel: ir.Kernel) -> tuple[tuple[Arg, ...], tuple[Binding, ...]]:
    """The launcher arguments in contract order (docs/cuda.md, launchers), then out."""
    lhs, rhs = kernel.lhs, kernel.rhs_operand
    grouped = kernel.op is Op.GROUPED
    args: list[Arg] = []
    binds: list[Binding] = []
    if lhs.dtype.is_sub_byte:  # fp4 x fp4: two per byte along k
        args.append(Arg("lhs", "in", lhs.dtype, ("m", "gg_div(k, 2)"),
                        "the activations (two 4-bit values per byte along k)", align=16))
        binds += [Binding("m", "lhs", 0), Binding("k", "lhs", 1, 2)]
    else:
        args.append(Arg("lhs", "in", lhs.dtype, ("m", "k"), "the activations", align=16))
        binds += [Binding("m", "lhs", 0), Binding("k", "lhs", 1)]
    rb = rhs.dtype.bits
    packed = rb < 8
    if grouped:
        shape = ("g", "n", "k") if rhs.layout is Layout.NK else ("g", "k", "n")
    else:
        shape = ("n", "k") if rhs.layout is Layout.NK else ("k", "n")
    last = shape[-1]
    stored = shape[:-1] + (f"gg_div({last}, 2)",) if packed else shape
    args.append(Arg("rhs", "in", rhs.dtype, stored, "the weights" +
                    (" (two 4-bit values per byte along the last dim)" if packed else ""),
                    align=16))
    ax = {d: i for i, d in enumerate(shape)}
    if grouped:
        binds.append(Binding("g", "rhs", 0))
    binds.append(Binding("n", "rhs", ax["n"], 2 if packed and last == "n" else 1))
    if grouped:
        args.append(Arg("group_sizes", "in", DType.INT32, ("num_groups",),
                        "rows of lhs per group, in order", align=4))
        binds.append(Binding("num_groups", "group_sizes", 0))
    g = "g" if grouped else None
    for side, scale in (("lhs", kernel.lhs_scale), ("rhs", kernel.rhs_scale)):
        if scale.enabled:
            dims = _scale_dims(scale, side=side, g=g)
            args.append(Arg(f"{side}_scale", "in", scale.dtype, dims,
                            f"{scale.mode.value} scales of {side}", align=4))
    if kernel.rhs_scale.zero is not None:
        *lead, last = _scale_dims(kernel.rhs_scale, side="rhs", g=g)
        args.append(Arg("rhs_zero", "in", kernel.rhs_scale.zero, (*lead, f"gg_cdiv({last}, 2)"),
                        "uint4 zero points of rhs_scale, two per byte along the last dim"))
    for side, scale in (("lhs", kernel.lhs_scale), ("rhs", kernel.rhs_scale)):
        if scale.global_scale:
            args.append(Arg(f"{side}_global_scale", "in", DType.F32, (g,) if g else (),
                            f"NVFP4's global scale of {side}_scale, one per "
                            f"{'group' if g else 'tensor'}", align=4))
    match kernel.bias.mode:
        case BiasMode.N:
            args.append(Arg("bias", "in", kernel.bias.dtype, ("n",), "added per column"))
        case BiasMode.GROUP:
            args.append(Arg("bias", "in", kernel.bias.dtype, ("g", "1", "n"),
                            "added per column of each group"))
        case BiasMode.NONE:
            pass
        case _:
            assert_never(kernel.bias.mode)
    n_out = "gg_div(n, 2)" if kernel.epilogue.activation.paired else "n"
    if grouped:
        args.append(Arg("group_offset", "scalar", DType.INT32, (),
                        "the first group this shard owns (default 0)", optional=True))
        args.append(Arg("existing_out", "in", kernel.out, ("m", n_out),
                        "rows this shard does not compute keep these values", optional=True,
                        align=4))
    args.append(Arg("out", "out", kernel.out, ("m", n_out), "the result"))
    if kernel.masked:
        return cuda_masked.args(tuple(args)), cuda_masked.bindings(tuple(binds))
    return tuple(args), tuple(binds)


def _scale_dims(scale: ir.Scale, *, side: str, g: str | None) -> tuple[str, ...]:
    if scale.layout is ir.ScaleLayout.ATOM128X4:
        # The row-major dims' last two padded to whole atoms (ir.scale_shape).
        *lead, rows, kblocks = _scale_dims(dc_replace(scale, layout=ir.ScaleLayout.ROWS),
                                           side=side, g=g)
        return (*lead, f"gg_cdiv({rows}, {ir.ATOM_ROWS}) * {ir.ATOM_ROWS}",
                f"gg_cdiv({kblocks}, {ir.ATOM_KBLOCKS}) * {ir.ATOM_KBLOCKS}")
    grp = (g,) if g else ()
    kb = f"gg_cdiv(k, {scale.block_k})" if scale.block_k else "1"
    match scale.mode:
        case ScaleMode.TENSOR:
            return grp if side == "rhs" else ()
        case ScaleMode.TOKEN:
            return ("m",)
        case ScaleMode.TOKEN_GROUP:
            return ("m", kb)
        case ScaleMode.CHANNEL:
            return grp + ("n",)
        case ScaleMode.BLOCK:
            return grp + (f"gg_cdiv(n, {scale.block_n})", kb)
        case ScaleMode.KBLOCK:
            return (g or "1", kb, "1", "n")
        case ScaleMode.NONE:
            return ()
    assert_never(scale.mode)


def checks(kernel: ir.Kernel, k_align: int, n_align: int) -> tuple[Check, ...]:
    checks = [Check("m >= 0 and n > 0 and k > 0", "m must be >= 0 and n, k positive")]
    if k_align > 1:
        checks.append(Check(f"k % {k_align} == 0",
                            f"k must be a multiple of {k_align}: rows of 16-byte copies"))
    if n_align > 1:
        checks.append(Check(f"n % {n_align} == 0",
                            f"n must be a multiple of {n_align}: rows of 16-byte copies"))
    checks += spec_checks(kernel)
    if kernel.op is Op.GROUPED:
        # NB: any group_sizes and group_offset values are defined
        # (docs/semantics.md, "grouped"): local groups that group_sizes lacks
        # are empty, and g = 0 computes nothing. Only the int32 range is checked.
        checks.append(Check("group_offset >= -2147483648 and group_offset <= 2147483647",
                            "group_offset must fit in int32"))
    checks.append(Check("m < 2147483647 and n < 2147483647 and k < 2147483647",
                        "dims must fit in int32"))
    if kernel.masked:
        return cuda_masked.checks(tuple(checks))
    return tuple(checks)


def alignments(kernel: ir.Kernel, compute: DType) -> tuple[int, int]:
    """(k, n) multiples that keep every 16-byte copy's source aligned."""
    k_align = 128 // compute.bits  # lhs rows
    rb = kernel.rhs_operand.dtype.bits
    n_align = 1
    if kernel.rhs_operand.layout is Layout.NK:
        k_align = max(k_align, 128 // rb)
    else:
        n_align = 128 // rb
        if kernel.epilogue.halves:
            n_align *= 2  # the up half starts at n / 2
    return k_align, n_align


def config(kernel: ir.Kernel, compute: DType, b_feed: BFeed, block_k: int) -> tuple[str, ...]:
    """The members of the `Config` struct, in C++ (gg_gemm_config.cuh says
    what each means)."""
    g = "gg::gemm::"

    def scale_type(s: ir.Scale) -> str:
        return CTYPE[s.dtype] if s.enabled else "void"

    def fmt(s: ir.Scale) -> str:
        return FORMAT[s.dtype] if s.enabled else "kNone"

    def per_k(s: ir.Scale) -> int:
        return s.block_k if s.placement is ir.Placement.MAINLOOP and s.enabled else 0

    ls, rs = kernel.lhs_scale, kernel.rhs_scale
    alpha = kernel.epilogue.alpha
    return (
        f"using lhs_t = {CTYPE[kernel.lhs.dtype]};",
        f"using rhs_t = {CTYPE[kernel.rhs_operand.dtype]};",
        f"using mma_t = {CTYPE[compute]};",
        f"using acc_t = {'int' if compute is DType.INT8 else 'float'};",
        f"using out_t = {CTYPE[kernel.out]};",
        f"using lhs_scale_t = {scale_type(ls)};",
        f"using rhs_scale_t = {scale_type(rs)};",
        f"using bias_t = {CTYPE[kernel.bias.dtype] if kernel.bias.mode is not BiasMode.NONE else 'void'};",
        f"static constexpr {g}Format kRhs = {g}Format::{FORMAT[kernel.rhs_operand.dtype]};",
        f"static constexpr bool kRhsNK = {cbool(kernel.rhs_operand.layout is Layout.NK)};",
        f"static constexpr {g}BFeed kBFeed = {g}BFeed::{b_feed.value};",
        f"static constexpr {g}ScaleMode kLhsScale = {g}ScaleMode::{SCALE_MODE[ls.mode]};",
        f"static constexpr {g}Format kLhsScaleFormat = {g}Format::{fmt(ls)};",
        f"static constexpr int kLhsScaleBlockK = {per_k(ls)};",
        f"static constexpr {g}ScaleLayout kLhsScaleLayout = {g}ScaleLayout::{LAYOUT[ls.layout]};",
        f"static constexpr {g}ScaleMode kRhsScale = {g}ScaleMode::{SCALE_MODE[rs.mode]};",
        f"static constexpr {g}Format kRhsScaleFormat = {g}Format::{fmt(rs)};",
        f"static constexpr int kRhsScaleBlockN = {rs.block_n if rs.mode is ScaleMode.BLOCK else 0};",
        f"static constexpr int kRhsScaleBlockK = {per_k(rs)};",
        f"static constexpr {g}ScaleLayout kRhsScaleLayout = {g}ScaleLayout::{LAYOUT[rs.layout]};",
        f"static constexpr bool kFoldScales = {cbool(fold_scales(kernel))};",
        f"static constexpr int kScaleBlockK = {block_k};",
        f"static constexpr {g}Bias kBias = {g}Bias::{BIAS[kernel.bias.mode]};",
        (f"static constexpr {g}Activation kActivation = {g}Activation::"
         f"{ACTIVATION[kernel.epilogue.activation]};"),
        f"static constexpr bool kHasAlpha = {cbool(alpha is not None)};",
        f"static constexpr float kAlpha = {_cfloat(alpha if alpha is not None else 1.0)};",
    ) + _swiglu_members(kernel.epilogue) + ((f"static constexpr bool kLhsGlobalScale = {cbool(ls.global_scale)};",
          f"static constexpr bool kRhsGlobalScale = {cbool(rs.global_scale)};")
         if ls.global_scale or rs.global_scale else ()) + (
        ("static constexpr bool kRhsZero = true;",) if rs.zero is not None else ())


def _swiglu_members(ep: ir.Epilogue) -> tuple[str, ...]:
    """swiglu_clamped's constants (f32) and pairing, in the Config."""
    if ep.activation is not Activation.SWIGLU_CLAMPED:
        return ()
    return (f"static constexpr float kAlphaGate = {_cfloat(ep.alpha_gate)};",
            f"static constexpr float kLimit = {_cfloat(ep.limit)};",
            f"static constexpr bool kPairsInterleaved = {cbool(ep.interleaved)};")


def fill_step(name: str) -> Step:
    """Grouped: out = existing_out or zeros, before the GEMM of any body."""
    return Step(f"{name}_fill", ("gg_min(gg_cdiv(m * n_out, 256), 4096)", "1", "1"), 256, 0,
                (array("out"), array("existing_out"), i64("m * n_out")),
                "out = existing_out or zeros")


def worklist_step(name: str, bm: int, comment: str) -> Step:
    """Grouped: the (group, row tile) work items of a body whose row tiles
    are `bm` rows, by one thread."""
    return Step(f"{name}_worklist", ("1", "1", "1"), 1, 0,
                (array("group_sizes"), i32("num_groups"), i32("group_offset"), i32("g"),
                 i32("m"), i32(str(bm)), array("workspace")), comment)


def worklist_ints(bm: int) -> str:
    """Grouped: the workspace ints of a worklist of `bm`-row tiles."""
    return f"2 + num_groups + 2 * (gg_cdiv(m, {bm}) + g)"
