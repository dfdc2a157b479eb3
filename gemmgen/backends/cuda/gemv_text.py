"""The CUDA GEMV's text: where its scales apply, its epilogue and its comments.

gemv.py plans the GEMV; this module holds the scales' decisions (`Scales`)
and the C++ and comment text that follows from them: the `scaled()` helper
and epilogue statements, the file comment's algorithm items, the spec lines
and the summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from gemmgen import ir
from gemmgen.backends.cuda.layout import COLUMNS, Param, comment_item, cpp_call, cpp_params
from gemmgen.describe import describe_kernel
from gemmgen.ir import Activation, BiasMode, DType, ScaleMode
from gemmgen.render import _cfloat


@dataclass(frozen=True, slots=True)
class Scales:
    """Where the scales apply: the decisions of the main loop and the epilogue."""

    lhs: ir.Scale
    rhs: ir.Scale
    # Block-scaled weights: each K slice's partial dot product is scaled in
    # the main loop (FP32 promotion), by the scale of its (n, k) block.
    rhs_block: bool
    # The lhs scale applied with the block scales in the main loop, when both
    # exist and one is e8m0: a partial sum scaled by the weight block alone
    # may leave f32 where the fully scaled one does not (2^126 now, 2^-127 in
    # the epilogue).
    fold_lhs: bool
    epilogue_lhs: bool  # the lhs scale applies in the epilogue
    epilogue_rhs: bool  # the rhs scale applies in the epilogue (not per block)
    # e8m0 in the main loop's scales: applied with gg::mul_scale(s), so
    # 2^-127 and products outside f32 come out exact.
    exact_block: bool
    # An e8m0 epilogue scale: the scales multiply with gg::mul_scale(s),
    # exactly (their product may leave f32).
    exact_epilogue: bool


def scales(kernel: ir.Kernel) -> Scales:
    lhs, rhs = kernel.lhs_scale, kernel.rhs_scale
    block = rhs.mode is ScaleMode.BLOCK
    fold = block and lhs.enabled and DType.E8M0 in (lhs.dtype, rhs.dtype)
    epilogue_lhs = lhs.enabled and not fold
    epilogue_rhs = rhs.enabled and not block
    return Scales(
        lhs=lhs, rhs=rhs, rhs_block=block, fold_lhs=fold, epilogue_lhs=epilogue_lhs,
        epilogue_rhs=epilogue_rhs, exact_block=block and (rhs.dtype is DType.E8M0 or fold),
        exact_epilogue=((epilogue_lhs and lhs.dtype is DType.E8M0)
                        or (epilogue_rhs and rhs.dtype is DType.E8M0)),
    )


def to_float(scale: ir.Scale) -> str:
    return "gg::e8m0_to_float" if scale.dtype is DType.E8M0 else "gg::to_float"


_ACTIVATION_CALL = {Activation.SILU: "gg::silu", Activation.GELU: "gg::gelu_tanh",
                    Activation.RELU: "gg::relu"}


def algorithm_comment(kernel: ir.Kernel, sc: Scales, cols_per_block: int, unroll: int) -> str:
    """Items (1) to (3) of the .cu's header comment."""
    silu = kernel.epilogue.activation.paired
    rows = ("weight rows (the gate rows 2j and their up rows 2j + 1)" if kernel.epilogue.interleaved
            else "weight rows (the gate rows and their up rows n/2 further on)" if silu
            else "weight rows")
    span = "[k0 + l * kVec, k0 + (l + 1) * kVec)".replace(" ", "\u00a0")
    main = (f"lanes stride along K in slices of kVec elements: lane l reads {span} "
            f"of each weight row with one 16-byte ld.global.nc ({unroll} "
            f"slice{'s' if unroll > 1 else ''} per row in flight), widens it to f32 once and "
            "multiplies it with the same K slice of every lhs row: f32 FMAs")
    if sc.rhs_block:
        main += ("; the slice's partial dot product is scaled by its weight block's scale"
                 + (" and the row's lhs scale" if sc.fold_lhs else "")
                 + " before it is added (FP32 promotion; a slice never straddles blocks)")
    steps = []
    if sc.epilogue_lhs or sc.epilogue_rhs:
        steps.append("the scales")
    if kernel.epilogue.alpha is not None:
        steps.append("alpha")
    if kernel.bias.mode is not BiasMode.NONE:
        steps.append("the bias")
    if kernel.epilogue.activation is not Activation.NONE:
        steps.append(kernel.epilogue.activation.value)
    steps.append(f"the cast to {kernel.out.value}")
    finish = (f"warp_reduce_sum per (row, column); lane r * kOutCols + j then applies "
              f"{', '.join(steps[:-1]) + ' and ' if len(steps) > 1 else ''}{steps[-1]} "
              "to out[r, col0 + j].")
    return "\n".join([
        comment_item("(1)", f"each warp owns kOutCols consecutive output columns, i.e. kAccCols "
                     f"{rows}; a block of kWarps warps covers {cols_per_block} columns and the "
                     "grid runs over n."),
        comment_item("(2)", main + "."),
        comment_item("(3)", finish),
    ])


def _assign(lhs: str, head: str, args: list[str]) -> str:
    """`lhs = head(args);` at indent 4 as clang-format lays it out: one line,
    else the right-hand side on the next line 8 columns in, else the call's
    arguments broken."""
    one = f"    {lhs} = {head}{', '.join(args)});"
    below = f"        {head}{', '.join(args)});"
    if len(one) > COLUMNS and len(below) <= COLUMNS:
        return f"    {lhs} =\n{below}"
    return cpp_call(f"{lhs} = {head}", args, ");", 4)


def epilogue(kernel: ir.Kernel, sc: Scales, params: tuple[Param, ...]
              ) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """scaled()'s head and scale lines, and the epilogue's statements that
    give y, the value stored."""
    lhs_row = "0" if sc.lhs.mode is ScaleMode.TENSOR else "row"
    rhs_row = "0" if sc.rhs.mode is ScaleMode.TENSOR else "wrow"
    factors = []
    if sc.epilogue_lhs:
        factors.append(f"lhs_scale_value(lhs_scale, {lhs_row})")
    if sc.epilogue_rhs:
        factors.append(f"rhs_scale_value(rhs_scale, {rhs_row})")
    if sc.exact_epilogue:
        fn = "gg::mul_scales(" if len(factors) == 2 else "gg::mul_scale("
        lines = ("  // e8m0: exactly", cpp_call(f"v = {fn}", ["v", *factors], ");", 2))
    else:
        lines = tuple(f"  v *= {f};" for f in factors)
    wanted = [p for p in params
              if (p.name == "lhs_scale" and sc.epilogue_lhs)
              or (p.name == "rhs_scale" and sc.epilogue_rhs) or p.name == "bias"]
    row_used = sc.epilogue_lhs and lhs_row == "row"
    wrow_used = (sc.epilogue_rhs and rhs_row == "wrow") or kernel.bias.mode is BiasMode.N
    heads = [Param("float", "v"), Param("int" if row_used else "[[maybe_unused]] int", "row"),
             Param("long long" if wrow_used else "[[maybe_unused]] long long", "wrow")]
    head = cpp_params("__device__ __forceinline__ float scaled(", heads + wanted)
    pointers = [p.name for p in wanted]
    ep = kernel.epilogue
    if ep.activation is Activation.SWIGLU_CLAMPED:
        gate_row, up_row = (("2LL * col", "2LL * col + 1") if ep.interleaved
                            else ("col", "(long long)n_out + col"))
        finish = (cpp_call("const float g = scaled(", ["gate", "row", gate_row, *pointers], ");", 4),
                  cpp_call("const float u = scaled(", ["up", "row", up_row, *pointers], ");", 4),
                  (f"    const float y = gg::swiglu_clamped(g, u, {_cfloat(ep.alpha_gate)}, "
                   f"{_cfloat(ep.limit)});"))
    elif kernel.epilogue.activation is Activation.SILU_MUL:
        finish = (cpp_call("const float g = scaled(", ["gate", "row", "col", *pointers], ");", 4),
                  _assign("const float y", "gg::silu(g) * scaled(",
                          ["up", "row", "(long long)n_out + col", *pointers]))
    else:
        call = _ACTIVATION_CALL.get(kernel.epilogue.activation)
        finish = (cpp_call("v = scaled(", ["v", "row", "col", *pointers], ");", 4),
                  f"    const float y = {call}(v);" if call else "    const float y = v;")
    return head, lines, finish


def spec_lines(kernel: ir.Kernel) -> tuple[str, ...]:
    """The spec restated for the comment block at the top of the .cu."""
    lines = [f"op        {kernel.op.value}, algorithm {kernel.algorithm.value}"
             + (f" (max_m {kernel.max_m})" if kernel.max_m else ""),
             f"lhs       {kernel.lhs.dtype.value} [m, k]",
             f"rhs       {kernel.rhs_operand.dtype.value} [n, k]",
             f"out       {kernel.out.value} (accumulator f32)"]
    for name, sc in (("lhs_scale", kernel.lhs_scale), ("rhs_scale", kernel.rhs_scale)):
        if sc.mode is ScaleMode.BLOCK:
            lines.append(f"{name:<10}block n={sc.block_n} k={sc.block_k} {sc.dtype.value} "
                         "(applied per K slice)")
        elif sc.enabled:
            lines.append(f"{name:<10}{sc.mode.value} {sc.dtype.value}")
    if kernel.bias.mode is BiasMode.N:
        lines.append(f"bias      {kernel.bias.dtype.value} [n]")
    if kernel.epilogue.activation is not Activation.NONE or kernel.epilogue.alpha is not None:
        alpha = f" alpha={kernel.epilogue.alpha!r}" if kernel.epilogue.alpha is not None else ""
        lines.append(f"epilogue  {kernel.epilogue.activation.value}{alpha}")
    if kernel.static_n or kernel.static_k:
        lines.append("dims     " + (f" n={kernel.static_n}" if kernel.static_n else "")
                     + (f" k={kernel.static_k}" if kernel.static_k else ""))
    return tuple(lines)


def summary(kernel: ir.Kernel) -> str:
    """`gemmgen list`'s description without the tile fields, which a GEMV ignores."""
    text = describe_kernel(kernel)
    cut = text.find(f" tile {kernel.tile}")
    tail = text.find(" algorithm ", cut)
    return text if cut < 0 or tail < 0 else text[:cut] + text[tail:]
