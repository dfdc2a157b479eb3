"""The words of a generated module: its arguments, docstring formula and
the spec restated, as plain strings the templates print."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import assert_never

from gemmgen import ir
from gemmgen.backends.pallas.cores import MatmulCore
from gemmgen.backends.pallas.dtypes import jnp_name
from gemmgen.backends.pallas.tpu import M_ALIGN, TPU_VMEM, MiB
from gemmgen.backends.pallas.vmem import TileRow, quantize_tk
from gemmgen.ir import Activation, BiasMode, DType, Layout, Op, ScaleLayout, ScaleMode


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of the generated function, for `Args:` and `_validate`."""

    name: str
    shape: str  # "[m, k]", for people
    shape_expr: str  # "(m, k)", checked by _validate once m, n, k, g are known
    dtype: str  # jnp name of the storage dtype
    doc: str
    optional: bool = False

    @property
    def entry(self) -> str:
        """The argument's line of `Args:`, before wrapping."""
        optional = ", optional" if self.optional else ""
        return f"{self.name}: {self.shape} {self.dtype}{optional}; {self.doc}"


_PACKED_NOTE = {DType.INT4: "int4 packed two per byte, element 2i in the low nibble",
                DType.UINT4: "uint4 packed two per byte, element 2i in the low nibble",
                DType.FP4: "fp4 e2m1 packed two per byte, element 2i in the low nibble"}


def operand_arg(name: str, operand: ir.Operand, dims: tuple[str, ...], doc: str) -> Arg:
    if operand.packed:
        dims = dims[:-1] + (f"{dims[-1]}/2",)
        doc = f"{doc.rstrip('.')} ({_PACKED_NOTE[operand.dtype]})."
    expr = ", ".join(d.replace("/2", " // 2") for d in dims)
    return Arg(name, "[" + ", ".join(dims) + "]", f"({expr},)" if len(dims) == 1 else f"({expr})",
               jnp_name(operand.dtype), doc)


def scale_arg(side: str, scale: ir.Scale, grouped: bool, masked: bool = False) -> Arg:
    g = ("g",) if grouped else ()
    bk = scale.block_k
    rows = ("g", "m") if masked else ("m",)  # masked: per-row scales per group
    match scale.mode:
        case ScaleMode.TENSOR:
            dims: tuple[str, ...] = g if side == "rhs" else ()
            what = "one scale" + (" per group" if dims else " for the whole tensor")
        case ScaleMode.TOKEN:
            dims, what = rows, "one scale per row of lhs"
        case ScaleMode.TOKEN_GROUP:
            dims, what = rows + (f"cdiv(k, {bk})",), f"one scale per row and {bk} columns of lhs"
        case ScaleMode.CHANNEL:
            dims, what = g + ("n",), "one scale per column of the output"
        case ScaleMode.BLOCK if scale.block_n == 1:
            dims = g + ("n", f"cdiv(k, {bk})")
            what = f"one scale per column of the output and {bk} rows of k"
        case ScaleMode.BLOCK:
            dims = g + (f"cdiv(n, {scale.block_n})", f"cdiv(k, {bk})")
            what = f"one scale per {scale.block_n} x {bk} block of rhs (n x k)"
        case ScaleMode.KBLOCK:
            dims = ("g" if grouped else "1", f"cdiv(k, {bk})", "1", "n")
            what = f"one scale per column and {bk} rows of k (megablox rhs_scale)"
        case ScaleMode.NONE:
            raise AssertionError("no scale")
        case _:
            assert_never(scale.mode)
    # cdiv(x, b) is written -(-x // b) in the generated check.
    exprs = [_cdiv_expr(d) for d in dims]
    dt = scale.dtype
    note = {DType.E8M0: " (e8m0: exponent byte e means 2**(e - 127))",
            DType.UE4M3: " (ue4m3: unsigned e4m3 bytes, 0x7F is NaN)"}.get(dt, "")
    if scale.layout is ScaleLayout.ATOM128X4:
        # Rows padded to whole 128-row atoms, K blocks to whole 4-block ones.
        # (cdiv(cdiv(k, bk), 4) is cdiv(k, 4 * bk).)
        rows = dims[-2]
        dims = dims[:-2] + (f"cdiv({rows}, 128) * 128", f"cdiv(k, {4 * bk}) * 4")
        exprs = exprs[:-2] + [f"-(-{rows} // 128) * 128", f"-(-k // {4 * bk}) * 4"]
        note += ", in the 128 x 4 atom layout (CUTLASS Sm1xxBlockScaledConfig)"
    expr = ", ".join(exprs)
    return Arg(f"{side}_scale", "[" + ", ".join(dims) + "]",
               f"({expr},)" if len(dims) == 1 else f"({expr})",
               jnp_name(dt), f"{scale.mode.value}: {what}{note}.")


def zero_arg(scale: Arg) -> Arg:
    """rhs_zero: the shape of rhs_scale with its last dim packed two per byte."""
    dims = re.split(r", (?![^(]*\))", scale.shape[1:-1])  # not inside cdiv(...)
    last = dims[-1]
    dims[-1] = f"cdiv({last}, 2)"
    exprs = [_cdiv_expr(d) for d in dims[:-1]] + [f"({_cdiv_expr(last)} + 1) // 2"]
    return Arg("rhs_zero", "[" + ", ".join(dims) + "]", "(" + ", ".join(exprs) + ")", "uint8",
               "the zero point z of each rhs_scale (uint4 0..15, packed two per byte along "
               "the last dim, element 2i in the low nibble): rhs = (q - z) * rhs_scale.")


def _cdiv_expr(dim: str) -> str:
    if dim.startswith("cdiv("):
        a, b = dim[5:-1].split(", ")
        return f"-(-{a} // {b})"
    return dim


def matmul_args(kernel: ir.Kernel, core: MatmulCore) -> tuple[Arg, ...]:
    grouped = core.grouped
    if kernel.masked:
        lhs = operand_arg("lhs", kernel.lhs, ("g", "m", "k"),
                          "the activations, m rows (the capacity) per group.")
    else:
        lhs = operand_arg("lhs", kernel.lhs, ("m", "k"), "the activations.")
    dims = ("n", "k") if core.rhs_nk else ("k", "n")
    if grouped:
        rhs = operand_arg("rhs", kernel.rhs_operand, ("g",) + dims,
                           "the weights of the g groups this shard owns (g = rhs.shape[0]).")
    else:
        rhs = operand_arg("rhs", kernel.rhs_operand, dims, "the weights.")
    args = [lhs, rhs]
    if kernel.masked:
        args.append(Arg("masked_m", "[g]", "(g,)", "int32",
                        "valid rows of each group: group i computes its first masked_m[i] "
                        "rows. Any integer array-like (a list or tuple too): a count is "
                        "clipped to [0, m]."))
    elif grouped:
        args.append(Arg("group_sizes", "[num_groups]", "(num_groups,)", "int32",
                        "rows of lhs per group, in order; num_groups >= g. Any integer "
                        "array-like (a list or tuple too): a negative size counts as 0, "
                        "no group runs past row m."))
    for side, scale in (("lhs", kernel.lhs_scale), ("rhs", kernel.rhs_scale)):
        if scale.enabled:
            args.append(scale_arg(side, scale, grouped, kernel.masked))
    if kernel.rhs_scale.zero is not None:
        args.append(zero_arg(scale_arg("rhs", kernel.rhs_scale, grouped)))
    for side, scale in (("lhs", kernel.lhs_scale), ("rhs", kernel.rhs_scale)):
        if scale.global_scale:
            args.append(Arg(f"{side}_global_scale", "[g]" if grouped else "[]",
                            "(g,)" if grouped else "()", "float32",
                            f"NVFP4's second-level scale of {side}_scale ({side} = e2m1 x "
                            f"ue4m3 x this), one per {'group' if grouped else 'tensor'}."))
    match kernel.bias.mode:
        case BiasMode.N:
            args.append(Arg("bias", "[n]", "(n,)", jnp_name(kernel.bias.dtype),
                            "added to every row, after alpha, before the activation."))
        case BiasMode.GROUP:
            args.append(Arg("bias", "[g, 1, n]", "(g, 1, n)", jnp_name(kernel.bias.dtype),
                            "added to the rows of each group (megablox rhs_bias)."))
        case BiasMode.NONE:
            pass
        case _:
            assert_never(kernel.bias.mode)
    out_n = "n // 2" if core.paired else "n"
    if grouped and not kernel.masked:
        args.append(Arg("group_offset", "[]", "()", "int32",
                        "the first group this shard owns (default 0, an int is fine): it "
                        "computes groups [group_offset, group_offset + g); a local group "
                        "that group_sizes does not have is empty.", optional=True))
        args.append(Arg("existing_out", f"[m, {out_n.replace(' // ', '/')}]", f"(m, {out_n})",
                        jnp_name(kernel.out), "rows this shard does not compute keep these "
                        "values (default: zeros).", optional=True))
    return tuple(args)


def formula(kernel: ir.Kernel, core: MatmulCore) -> str:
    t = "ᵀ" if core.rhs_nk else ""
    b = f"rhs[i - group_offset]{t}" if core.grouped else f"rhs{t}"
    a = "lhs[rows of group i]" if core.grouped else "lhs"
    if kernel.masked:
        b, a = f"rhs[i]{t}", "lhs[i, :masked_m[i]]"
    if kernel.rhs_scale.zero is not None:
        b = f"({b} - rhs_zero)"  # the zero points, spread over their blocks
    prod = f"{a} @ {b}"
    scales = []
    if kernel.lhs_scale.enabled:
        scales.append("lhs_scale")
    if kernel.rhs_scale.enabled:
        scales.append("rhs_scale")
    for side in ("lhs", "rhs"):
        if getattr(kernel, f"{side}_scale").global_scale:
            index = "[i]" if kernel.masked else "[i - group_offset]" if core.grouped else ""
            scales.append(f"{side}_global_scale{index}")
    if scales:
        prod = f"({prod}) * " + " * ".join(scales)
    if kernel.epilogue.alpha is not None:
        prod = f"{core.alpha!r} * {prod}"
    if kernel.bias.mode is not BiasMode.NONE:
        prod += " + bias"
    act = kernel.epilogue.activation
    if act is not Activation.NONE:
        prod = f"{act.value}({prod})"
    lhs_side = "out[rows of group i]" if core.grouped else "out"
    if kernel.masked:
        lhs_side = "out[i, :masked_m[i]]"
    return f"{lhs_side} = {prod}"


def spec_lines(kernel: ir.Kernel, tiles: tuple[TileRow, ...], tpu: str, buffers: int,
                need: int) -> tuple[str, ...]:
    lines = [f"op        {kernel.op.value}"]
    lines.append(f"lhs       {kernel.lhs.dtype.value}{' packed' if kernel.lhs.packed else ''} "
                 + ("[g, m, k] (masked: m rows of capacity per group)" if kernel.masked
                    else "[m, k]"))
    if kernel.rhs is not None:
        packed = " packed" if kernel.rhs_operand.packed else ""
        lines.append(f"rhs       {kernel.rhs_operand.dtype.value}{packed} {_rhs_shape(kernel)}")
    if kernel.op is Op.QUANTIZE:
        lines.append(f"out       {kernel.out.value} packed [m, k / 2] (two e2m1 values per byte)"
                     if kernel.out.is_sub_byte else f"out       {kernel.out.value} [m, k]")
    else:
        lines.append(f"out       {kernel.out.value}, {kernel.acc.value} accumulator")
    for name, scale in (("lhs_scale", kernel.lhs_scale), ("rhs_scale", kernel.rhs_scale),
                        ("out_scale", kernel.out_scale)):
        if scale.enabled:
            sizes = (f" n={scale.block_n}" if scale.mode is ScaleMode.BLOCK else "") + \
                (f" k={scale.block_k}" if scale.block_k else "")
            where = "" if name == "out_scale" else f" ({scale.placement.value})"
            layout = (f" layout={scale.layout.value}"
                      if scale.layout is not ScaleLayout.ROWS else "")
            if scale.rounding is not ir.ScaleRounding.UP:  # up, the default, goes unsaid
                where += f" round={scale.rounding.value}"
            if scale.global_scale:
                layout += " global=f32"
            if scale.zero is not None:
                layout += f" zero={scale.zero.value}"
            lines.append(f"{name:<9} {scale.mode.value}{sizes} {scale.dtype.value}{layout}"
                         f"{where}")
    if kernel.bias.mode is not BiasMode.NONE:
        shape = "[n]" if kernel.bias.mode is BiasMode.N else "[g, 1, n]"
        lines.append(f"bias      {kernel.bias.dtype.value} {shape}")
    ep = kernel.epilogue
    if ep.activation is not Activation.NONE or ep.alpha is not None:
        alpha = f" alpha={ep.alpha!r}" if ep.alpha is not None else ""
        lines.append(f"epilogue  {ep.activation.value}{alpha}")
    default = tiles[-1]
    if kernel.op is Op.QUANTIZE:
        lines.append(f"tile      m={default.m} k={quantize_tk(kernel)}")
    else:
        lines.append(f"tile      m={default.m} n={default.n} k={default.k}")
    for row in tiles[:-1]:
        lines.append(f"  when {row.cond}: m={row.m} n={row.n} k={row.k}")
    if kernel.static_n or kernel.static_k:
        lines.append("dims     " + (f" n={kernel.static_n}" if kernel.static_n else "")
                     + (f" k={kernel.static_k}" if kernel.static_k else ""))
    vm = TPU_VMEM[tpu]
    lines.append(f"buffers   {buffers} per pipelined block")
    lines.append(f"vmem      {need / MiB:.2f} MiB per grid step (TPU {tpu}: "
                 f"{vm.scoped_default // MiB} MiB scoped default, {vm.physical // MiB} MiB "
                 "physical)")
    return tuple(lines)


def _rhs_shape(kernel: ir.Kernel) -> str:
    nk = kernel.rhs_operand.layout is Layout.NK
    match kernel.op:
        case Op.DENSE:
            return "[n, k]" if nk else "[k, n]"
        case Op.GROUPED:
            return "[g, n, k]" if nk else "[g, k, n]"
        case Op.TGMM:
            return "[m, n]"
        case Op.QUANTIZE:
            raise AssertionError("quantize has no rhs")
        case _:
            assert_never(kernel.op)


AMAX_FLOOR = 1e-10  # gemmgen.reference.AMAX_FLOOR

QUANTIZE_NOTES = """\
Per row of lhs and group of {group} consecutive columns (the last group may be
partial): amax = max |x|; scale = max(amax, AMAX_FLOOR) / {max}, {rounding};
q = x / scale, saturated to +-{max}, cast with round-to-nearest-even. A
group that holds an infinity or a NaN gets a NaN scale{nan_byte}
and NaN for every q."""

QUANTIZE_MX_NOTES = """\
Per row of lhs and group of {group} consecutive columns (the last group may be
partial), OCP MX v1.0 (section 6.3): amax = max |x|; scale =
2**(floor(log2(amax)) - EMAX), the exponent clamped to -127 (amax = 0 gives
2**-127), as an e8m0 byte; q = x / scale, saturated to +-{max}, cast with
round-to-nearest-even. A group that holds an infinity or a NaN gets a NaN
scale (e8m0 byte 255) and NaN for every q."""

QUANTIZE_NV_NOTES = """\
Per row of lhs and group of 16 consecutive columns (the last group may be
partial), NVFP4's block scale without a per-tensor scale: amax = max |x|;
scale = amax / 6 rounded to nearest even in ue4m3 (an unsigned e4m3 byte),
saturating at 448; q = x / scale rounded to nearest even in e2m1, saturated
to +-6; a zero scale gives zeros with the sign of x. A group that holds an
infinity or a NaN gets a NaN scale (ue4m3 byte 0x7F) and q = +0."""

QUANTIZE_FP4_NOTES = """

The fp4 (e2m1) values are packed two per byte along k: column 2i in the low
nibble of byte i, 2i + 1 in the high one; k must be even. e2m1 has no NaN: a
group that holds an infinity or a NaN gets q = +0, its NaN scale marks it."""


@dataclass(frozen=True, slots=True)
class QuantizeText:
    """The words of a quantize module."""

    title: str  # "NVFP4 quantization"
    summary: str  # the docstring's formula line
    notes: str
    returns: str  # the function's Returns: line
    scale_dtype: str  # the jnp name of the returned scales


def quantize_text(kernel: ir.Kernel, rule: str) -> QuantizeText:
    """Title, formula, notes and returns of a quantize module whose scale
    follows `rule` (ir.quantize_rule)."""
    group = kernel.out_scale.block_k
    fp4 = kernel.out is DType.FP4
    max_name = "FP4_MAX" if fp4 else "FP8_MAX"
    if rule == "e8m0_up":
        notes = QUANTIZE_NOTES.format(
            group=group, max=max_name, rounding="rounded\nup to a power of two (e8m0) so that "
            f"no |x| / scale exceeds {max_name}", nan_byte=" (e8m0 byte 255)")
    elif rule == "f32":
        notes = QUANTIZE_NOTES.format(
            group=group, max=max_name, nan_byte="",
            rounding="rounded\nto the nearest f32 (exactly one correctly rounded division)")
    elif rule == "e8m0_floor":
        notes = QUANTIZE_MX_NOTES.format(group=group, max=max_name)
    else:
        notes = QUANTIZE_NV_NOTES
    if fp4:
        notes += QUANTIZE_FP4_NOTES
    scale_dtype = "uint8" if rule != "f32" else "float32"
    scale_bytes = {"e8m0_up": ", e8m0 exponent bytes", "e8m0_floor": ", e8m0 exponent bytes",
                   "ue4m3": ", ue4m3 bytes"}.get(rule, "")
    title = {"e8m0_floor": f"MX{kernel.out.value.upper()} quantization (OCP MX v1.0)",
             "ue4m3": "NVFP4 quantization"}.get(
        rule, "per-token-group fp4 quantization" if fp4 else "per-token-group FP8 quantization")
    values = "q = e2m1(lhs / scale), packed two per byte" if fp4 else "q = saturate(lhs / scale)"
    return QuantizeText(
        title=title, summary=f"{values}, one scale per row and {group} columns", notes=notes,
        returns=f"(q {'[m, k // 2]' if fp4 else '[m, k]'} {jnp_name(kernel.out)}, scale "
                f"[m, cdiv(k, {group})] {scale_dtype}{scale_bytes}).",
        scale_dtype=scale_dtype)


@dataclass(frozen=True, slots=True)
class Constant:
    """A named module constant: `NAME = value  # comment`."""

    name: str
    value: str  # a Python literal
    comment: str


def matmul_constants(core: MatmulCore) -> tuple[Constant, ...]:
    """The module constants of a matmul core: `NAME = value  # comment`."""
    out = [Constant("RHS_NK", repr(core.rhs_nk),
                    "rhs is [g, n, k]" if core.rhs_nk and core.grouped else
                    "rhs is [n, k]" if core.rhs_nk else
                    "rhs is [g, k, n]" if core.grouped else "rhs is [k, n]")]
    if core.lhs_scale is ScaleMode.TOKEN_GROUP:
        out.append(Constant("LHS_SCALE_BLOCK_K", str(core.lhs_block_k),
                            "columns of lhs per lhs_scale"))
    if core.rhs_scale is ScaleMode.BLOCK:
        out.append(Constant("RHS_SCALE_BLOCK_N", str(core.rhs_block_n),
                            "columns of rhs per rhs_scale"))
    if core.rhs_scale in (ScaleMode.BLOCK, ScaleMode.KBLOCK):
        out.append(Constant("RHS_SCALE_BLOCK_K", str(core.rhs_block_k),
                            "rows of k per rhs_scale"))
    if core.int_dot_k:
        out.append(Constant("INT_DOT_K", str(core.int_dot_k),
                            "the most K terms one int8 dot sums (exact in f32)"))
    out.append(Constant("M_ALIGN", str(M_ALIGN), "rows of a block past m: whole sublane tiles"))
    out.append(Constant("K_ALIGN", str(core.k_align), "columns of a block past k: whole "
                        + ("scale blocks and lane tiles" if core.k_align_scales else "lane tiles")))
    # Every module: a silu_mul module's backward pass runs the plain core.
    out.append(Constant("N_ALIGN", str(core.n_lanes), "columns of a block past n: whole lane tiles"))
    if core.paired:  # N_LANES (halves) or PAIR_ALIGN (interleaved)
        out.append(Constant(*core.pair_constant))
    return tuple(out)
