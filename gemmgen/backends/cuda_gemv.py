"""CUDA GEMV (algorithm gemv, M == 1) and batched GEMV (algorithm
gemv_batched, M = 1..max_m) for op dense: the plan.

Decode GEMMs are memory bound: the weight is read once and each element is
used M times, so the kernel is built around streaming rhs [n, k] at full
bandwidth (docs/cuda-gemv-quantize.md):

  (1) each warp owns `out_cols` consecutive output columns, i.e. `acc_cols`
      weight rows (silu_mul: the gate rows and their up rows n/2 further on);
      a block of `warps` warps covers `cols_per_block` columns and the grid
      runs over n;
  (2) lanes stride along K in 16-byte slices (`vec` weight elements, one
      ld.global.nc.v4 each), `unroll` slices per weight row in flight; each
      slice is widened to f32 once and multiplied with the same K slice of
      every lhs row (the weight is read once for all M rows), f32 FMAs;
  (3) one warp_reduce_sum per (row, column), then lane r * out_cols + j
      applies the epilogue (scales, alpha, bias, activation, cast) to
      out[r, col0 + j] like the tile GEMM.

When k is not a multiple of `vec` the rows are not 16-byte aligned, and a
second entry point of the same code reads one element per lane instead (the
launch plan picks it by k, like a tile LUT). The spec's `tile`,
`tile_rule`, `warp_tile` and `stages` mean nothing to a GEMV and are
ignored; `threads` sets the block size (default 256).

`plan(kernel, spec)` does all the arithmetic; `launch_plan` wraps it in the
LaunchPlan the generic launcher templates print.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from gemmgen import ir
from gemmgen.backends.cuda_common import (
    CTYPE, WARP, Arg, Binding, Check, LaunchPlan, Step, Variant, array, i32, spec_checks,
    where,
)
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Activation, Algorithm, BiasMode, DType, Layout, Op, ScaleMode

DEFAULT_THREADS = 256
LOAD_BYTES = 16  # one ld.global.nc.v4.u32 per lane and weight row
# Register budget of the accumulators (rows x weight rows per warp): more
# weight rows per warp amortise the lhs loads over more columns, but the
# accumulators must stay in registers.
ACC_BUDGET = 32
# K slices per weight row a lane loads before using any: with one warp per
# few columns, the bytes in flight are n * UNROLL * 512 for the whole GPU,
# which must cover bandwidth x latency (~5 MB on an H200) at decode sizes.
UNROLL = {Algorithm.GEMV: 4, Algorithm.GEMV_BATCHED: 2}

LHS_DTYPES = (DType.BF16, DType.F16)
FP8_WEIGHTS = (DType.E4M3, DType.E5M2)
LHS_SCALE_MODES = (ScaleMode.NONE, ScaleMode.TENSOR, ScaleMode.TOKEN)
RHS_SCALE_MODES = (ScaleMode.NONE, ScaleMode.TENSOR, ScaleMode.CHANNEL, ScaleMode.BLOCK)


@dataclass(frozen=True, slots=True)
class GemvEntry:
    """One entry point of the .cu: the 16-byte path or the unaligned-k path."""

    name: str
    vec: int  # weight elements per lane and load (1: scalar loads)
    lhs_loads: int  # 16-byte lhs loads per K slice (0: scalar loads)


@dataclass(frozen=True, slots=True)
class GemvPlan:
    """What gemv.cu.j2 prints (the launchers get the LaunchPlan)."""

    kernel: ir.Kernel
    spec_lines: tuple[str, ...]
    where: str
    batched: bool
    max_rows: int  # M the kernel serves: 1, or max_m
    lhs: DType
    rhs: DType
    out: DType
    threads: int
    warps: int
    out_cols: int  # output columns per warp
    acc_cols: int  # weight rows per warp (2 * out_cols with silu_mul)
    cols_per_block: int
    unroll: int  # K slices in flight per weight row
    vec: int  # weight elements per 16-byte load
    entries: tuple[GemvEntry, ...]  # the 16-byte path, then the unaligned-k path
    lhs_scale: ir.Scale
    rhs_scale: ir.Scale
    bias: ir.Bias
    activation: str
    alpha: float | None
    silu_mul: bool
    args: tuple[Arg, ...]

    @property
    def name(self) -> str:
        return self.kernel.name

    def ctype(self, dt: DType) -> str:
        return CTYPE[dt]

    @property
    def rhs_block(self) -> bool:
        """Block-scaled weights: each K slice's partial dot product is scaled
        in the main loop (FP32 promotion), the scale of its (n, k) block."""
        return self.rhs_scale.mode is ScaleMode.BLOCK

    @property
    def fold_lhs_scale(self) -> bool:
        """The lhs scale applied with the block scales in the main loop, when
        both exist and one is e8m0: a partial sum scaled by the weight block
        alone may leave f32 where the fully scaled one does not (2^126 now,
        2^-127 in the epilogue)."""
        return (self.rhs_block and self.lhs_scale.enabled
                and DType.E8M0 in (self.lhs_scale.dtype, self.rhs_scale.dtype))

    @property
    def epilogue_lhs_scale(self) -> bool:
        return self.lhs_scale.enabled and not self.fold_lhs_scale

    @property
    def exact_block(self) -> bool:
        """e8m0 in the main loop's scales: applied with gg::mul_scale(s), so
        2^-127 and products outside f32 come out exact."""
        return self.rhs_block and (self.rhs_scale.dtype is DType.E8M0 or self.fold_lhs_scale)

    @property
    def exact_epilogue(self) -> bool:
        """An e8m0 epilogue scale: the scales multiply with gg::mul_scale(s),
        exactly (their product may leave f32)."""
        return ((self.epilogue_lhs_scale and self.lhs_scale.dtype is DType.E8M0)
                or (self.rhs_scale.enabled and not self.rhs_block
                    and self.rhs_scale.dtype is DType.E8M0))

    @property
    def outputs_per_warp(self) -> int:
        return self.max_rows * self.out_cols

    @property
    def lanes_rounds(self) -> int:
        """Epilogue rounds: each lane finishes one (row, column) per round."""
        return -(-self.outputs_per_warp // WARP)


# ---------------------------------------------------------------------------
# Diagnose


def _not_yet(loc: ir.Loc, kernel: ir.Kernel, what: str, why: str) -> Diagnostic:
    return Diagnostic(loc, f"kernel '{kernel.name}': cuda cannot emit {what} yet: {why}")


def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """What the GEMV kernels cannot emit (everything else is supported)."""
    assert kernel.op is Op.DENSE and kernel.algorithm in (Algorithm.GEMV, Algorithm.GEMV_BATCHED)
    algo = f"a {kernel.algorithm.value}"
    out: list[Diagnostic] = []
    if kernel.lhs.dtype not in LHS_DTYPES:
        out.append(_not_yet(kernel.lhs.loc, kernel, f"{algo} with lhs '{kernel.lhs.dtype.value}'",
                            "the GEMV takes bf16 or f16 activations"))
    elif kernel.rhs_operand.dtype is not kernel.lhs.dtype and kernel.rhs_operand.dtype not in FP8_WEIGHTS:
        out.append(_not_yet(kernel.rhs_operand.loc, kernel, f"{algo} with rhs '{kernel.rhs_operand.dtype.value}'",
                            f"the weights must be '{kernel.lhs.dtype.value}' like lhs, or e4m3 / "
                            "e5m2 (W8A16)"))
    if kernel.rhs_operand.layout is not Layout.NK:
        out.append(_not_yet(kernel.rhs_operand.loc, kernel, f"{algo} with rhs [k, n]",
                            "the GEMV streams K-contiguous weight rows; store the weight as "
                            "[n, k]"))
    if kernel.lhs_scale.mode not in LHS_SCALE_MODES:
        out.append(_not_yet(kernel.lhs_scale.loc, kernel,
                            f"{algo} with lhs_scale '{kernel.lhs_scale.mode.value}'",
                            "per_tensor and per_token lhs scales work"))
    if kernel.rhs_scale.mode not in RHS_SCALE_MODES:
        out.append(_not_yet(kernel.rhs_scale.loc, kernel,
                            f"{algo} with rhs_scale '{kernel.rhs_scale.mode.value}'",
                            "per_tensor, per_channel and block rhs scales work"))
    elif kernel.rhs_scale.mode is ScaleMode.BLOCK:
        vec = LOAD_BYTES * 8 // kernel.rhs_operand.dtype.bits
        if kernel.rhs_scale.block_k % vec:
            out.append(_not_yet(kernel.rhs_scale.loc, kernel,
                                f"{algo} with rhs_scale block k={kernel.rhs_scale.block_k}",
                                f"a lane's 16-byte slice of {vec} weights must lie in one scale "
                                f"block, so k must be a multiple of {vec}"))
    return out


# ---------------------------------------------------------------------------
# Plan


def max_rows(kernel: ir.Kernel) -> int:
    if kernel.algorithm is Algorithm.GEMV:
        return 1
    assert kernel.max_m is not None, "validate requires max_m for gemv_batched"
    return kernel.max_m


def _acc_cols(kernel: ir.Kernel, rows: int) -> int:
    """Weight rows per warp: 2 for the GEMV (with 2 slices in flight each),
    up to 4 for the batched GEMV so the lhs slices, read from L1 once per
    row and warp, serve more columns; within ACC_BUDGET accumulators."""
    silu = kernel.epilogue.activation is Activation.SILU_MUL
    want = 2 if kernel.algorithm is Algorithm.GEMV else 4
    cols = max(1, min(want, ACC_BUDGET // rows))
    if silu:
        cols = max(2, cols - cols % 2)  # gate and up rows in pairs
    return cols


def _args(kernel: ir.Kernel) -> tuple[tuple[Arg, ...], tuple[Binding, ...]]:
    """The launcher arguments: the tile GEMM's for the same dense kernel, so
    an M dispatcher can hand one argument struct to either."""
    args = [Arg("lhs", "in", kernel.lhs.dtype, ("m", "k"), "the activations", align=16),
            Arg("rhs", "in", kernel.rhs_operand.dtype, ("n", "k"), "the weights", align=16)]
    binds = (Binding("m", "lhs", 0), Binding("k", "lhs", 1), Binding("n", "rhs", 0))
    for side, scale in (("lhs", kernel.lhs_scale), ("rhs", kernel.rhs_scale)):
        if not scale.enabled:
            continue
        match scale.mode:
            case ScaleMode.TENSOR:
                shape: tuple[str, ...] = ()
            case ScaleMode.TOKEN:
                shape = ("m",)
            case ScaleMode.CHANNEL:
                shape = ("n",)
            case ScaleMode.BLOCK:
                shape = (f"gg_cdiv(n, {scale.block_n})", f"gg_cdiv(k, {scale.block_k})")
            case _:
                raise AssertionError(f"diagnose rejects {side}_scale {scale.mode.value}")
        args.append(Arg(f"{side}_scale", "in", scale.dtype, shape,
                        f"{scale.mode.value} scales of {side}", align=scale.dtype.bits // 8))
    match kernel.bias.mode:
        case BiasMode.N:
            args.append(Arg("bias", "in", kernel.bias.dtype, ("n",), "added per column",
                            align=kernel.bias.dtype.bits // 8))
        case BiasMode.NONE:
            pass
        case BiasMode.GROUP:
            raise AssertionError("validate allows a per-group bias on grouped ops only")
        case _:
            assert_never(kernel.bias.mode)
    n_out = "gg_div(n, 2)" if kernel.epilogue.activation is Activation.SILU_MUL else "n"
    args.append(Arg("out", "out", kernel.out, ("m", n_out), "the result",
                    align=kernel.out.bits // 8))
    return tuple(args), binds


def plan(kernel: ir.Kernel, spec: ir.Spec) -> GemvPlan:
    rows = max_rows(kernel)
    threads = kernel.threads or DEFAULT_THREADS
    warps = threads // WARP
    silu = kernel.epilogue.activation is Activation.SILU_MUL
    acc_cols = _acc_cols(kernel, rows)
    out_cols = acc_cols // 2 if silu else acc_cols
    vec = LOAD_BYTES * 8 // kernel.rhs_operand.dtype.bits
    lhs_loads = vec * kernel.lhs.dtype.bits // 8 // LOAD_BYTES
    entries = (GemvEntry(kernel.name, vec, lhs_loads),
               GemvEntry(f"{kernel.name}_unaligned_k", 1, 0))
    args, _ = _args(kernel)
    return GemvPlan(
        kernel=kernel, spec_lines=spec_lines(kernel), where=where(kernel.loc),
        batched=kernel.algorithm is Algorithm.GEMV_BATCHED, max_rows=rows,
        lhs=kernel.lhs.dtype, rhs=kernel.rhs_operand.dtype, out=kernel.out, threads=threads,
        warps=warps, out_cols=out_cols, acc_cols=acc_cols, cols_per_block=warps * out_cols,
        unroll=UNROLL[kernel.algorithm], vec=vec, entries=entries,
        lhs_scale=kernel.lhs_scale, rhs_scale=kernel.rhs_scale, bias=kernel.bias,
        activation=kernel.epilogue.activation.value, alpha=kernel.epilogue.alpha,
        silu_mul=silu, args=args,
    )


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


def _checks(kernel: ir.Kernel, rows: int) -> tuple[Check, ...]:
    what = "gemv serves m == 1" if rows == 1 else f"gemv_batched serves m <= {rows}"
    checks = [Check(f"m >= 0 and m <= {rows}",
                    f"{what} (m == 0 launches nothing); a dispatcher sends larger m elsewhere"),
              Check("n > 0 and k > 0", "n and k must be positive")]
    checks += spec_checks(kernel)
    # The K loop steps an int past k by up to 32 * 16 * unroll elements.
    checks.append(Check("n < 2147483647 and k <= 2147483647 - 65536",
                        "dims must fit in int32 (k with 65536 to spare)"))
    return tuple(checks)


# ---------------------------------------------------------------------------
# Launch plan


def summary(kernel: ir.Kernel) -> str:
    """`gemmgen list`'s description without the tile fields, which a GEMV ignores."""
    from gemmgen.describe import describe_kernel

    text = describe_kernel(kernel)
    cut = text.find(f" tile {kernel.tile}")
    tail = text.find(" algorithm ", cut)
    return text if cut < 0 or tail < 0 else text[:cut] + text[tail:]


def launch_plan(kernel: ir.Kernel, spec: ir.Spec) -> LaunchPlan:
    p = plan(kernel, spec)
    target = spec.target(ir.Backend.CUDA)
    args, binds = _args(kernel)
    step_args = [array("lhs"), array("rhs")]
    step_args += [array(a.name) for a in args if a.name in ("lhs_scale", "rhs_scale", "bias")]
    step_args += [array("out"), i32("m"), i32("n"), i32("k")]
    grid = (f"gg_cdiv(n_out, {p.cols_per_block})", "1", "1")
    fast, unaligned = p.entries
    variants = (
        Variant(0, f"k % {fast.vec} == 0", p.where, f"{LOAD_BYTES}-byte loads",
                (Step(fast.name, grid, p.threads, 0, tuple(step_args),
                      f"{p.cols_per_block} output columns per block, {LOAD_BYTES}-byte "
                      "weight loads"),), "0"),
        Variant(1, "", p.where, "unaligned k",
                (Step(unaligned.name, grid, p.threads, 0, tuple(step_args),
                      f"{p.cols_per_block} output columns per block, one element per "
                      "lane and load (k is not a multiple of "
                      f"{fast.vec})"),), "0"),
    )
    return LaunchPlan(
        kernel=kernel, template="cuda/gemv.cu.j2", detail=p, spec_path=spec.path,
        where=p.where, summary=summary(kernel), spec_lines=p.spec_lines,
        archs=target.cuda_archs if target else (), args=args, bindings=binds,
        derived=(("n_out", "gg_div(n, 2)" if p.silu_mul else "n"),),
        checks=_checks(kernel, p.max_rows), variants=variants,
        entries=tuple(e.name for e in p.entries), empty="m == 0",
    )
