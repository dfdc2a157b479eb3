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
LaunchPlan the generic launcher templates print; gemv_text.py words the
scales' decisions and prints the epilogue and the file comment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from gemmgen import ir
from gemmgen.backends.cuda.args import CTYPE, Arg, Binding, Check, Derived, Role, spec_checks
from gemmgen.backends.cuda.expr import Expr, Lit, all_of, cdiv, div, var
from gemmgen.backends.cuda.launch import WARP, Grid, LaunchPlan, Step, Variant, array, i32, where
from gemmgen.backends.cuda.layout import (
    Param, comment, cpp_args, cpp_params, cpp_signature,
)
from gemmgen.diagnostics import Diagnostic
from gemmgen.backends.cuda.gemv_text import (
    Scales, algorithm_comment, epilogue, scales, spec_lines, summary, to_float,
)
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
    comment: str  # what the entry point serves
    signature: str  # its head, laid out
    call: str  # its body: the call of gemv<vec>


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
    rows_per_column: int  # weight rows per output column: 2 with silu_mul, else 1
    cols_per_block: int
    unroll: int  # K slices in flight per weight row
    vec: int  # weight elements per 16-byte load
    entries: tuple[GemvEntry, ...]  # the 16-byte path, then the unaligned-k path
    lhs_scale: ir.Scale
    rhs_scale: ir.Scale
    scales: Scales
    bias: ir.Bias
    activation: Activation
    alpha: float | None
    silu_mul: bool  # a paired activation (silu_mul, swiglu_clamped): gate and up rows
    interleaved: bool  # its gate and up rows alternate (2j, 2j + 1)
    args: tuple[Arg, ...]
    # The .cu's text: C types (None: the operand is absent) and the pieces
    # that depend on the plan, laid out.
    title: str
    n_out: str  # C++: the output columns
    max_rows_source: str  # where kMaxRows comes from
    algorithm_comment: str
    entries_comment: str
    lhs_ctype: str
    rhs_ctype: str
    out_ctype: str
    lhs_scale_ctype: str | None
    rhs_scale_ctype: str | None
    bias_ctype: str | None
    lhs_scale_to_float: str  # the conversion of one scale to f32
    rhs_scale_to_float: str
    lhs_scale_row: str  # the index of row r's lhs scale
    weight_row_bound: str  # the last argument of weight_row()
    params: tuple[Param, ...]  # gemv<kVec>() and the entry points, in the launch order
    gemv_head: str
    scaled_head: str
    epilogue_scale_lines: tuple[str, ...]
    block_accumulate: str  # the main loop's statement for a block-scaled slice
    finish: tuple[str, ...]  # the epilogue after the reduction: scaled, activated value y

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def rhs_block(self) -> bool:
        return self.scales.rhs_block

    @property
    def fold_lhs_scale(self) -> bool:
        return self.scales.fold_lhs

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
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
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
    silu = kernel.epilogue.activation.paired
    want = 2 if kernel.algorithm is Algorithm.GEMV else 4
    cols = max(1, min(want, ACC_BUDGET // rows))
    if silu:
        cols = max(2, cols - cols % 2)  # gate and up rows in pairs
    return cols


def _scale_shape(scale: ir.Scale) -> tuple[Expr, ...]:
    match scale.mode:
        case ScaleMode.TENSOR:
            return ()
        case ScaleMode.TOKEN:
            return (var("m"),)
        case ScaleMode.CHANNEL:
            return (var("n"),)
        case ScaleMode.BLOCK:
            return (cdiv(var("n"), scale.block_n), cdiv(var("k"), scale.block_k))
    raise AssertionError(f"diagnose rejects scale {scale.mode.value}")


def _args(kernel: ir.Kernel) -> tuple[tuple[Arg, ...], tuple[Binding, ...]]:
    """The launcher arguments: the tile GEMM's for the same dense kernel, so
    an M dispatcher can hand one argument struct to either."""
    m, n, k = var("m"), var("n"), var("k")
    args = [Arg(name="lhs", role=Role.IN, dtype=kernel.lhs.dtype, shape=(m, k),
                doc="the activations", align=16),
            Arg(name="rhs", role=Role.IN, dtype=kernel.rhs_operand.dtype, shape=(n, k),
                doc="the weights", align=16)]
    binds = (Binding(dim="m", arg="lhs", axis=0), Binding(dim="k", arg="lhs", axis=1),
             Binding(dim="n", arg="rhs", axis=0))
    for side, scale in (("lhs", kernel.lhs_scale), ("rhs", kernel.rhs_scale)):
        if scale.enabled:
            args.append(Arg(name=f"{side}_scale", role=Role.IN, dtype=scale.dtype,
                            shape=_scale_shape(scale), doc=f"{scale.mode.value} scales of {side}",
                            align=scale.dtype.bits // 8))
    match kernel.bias.mode:
        case BiasMode.N:
            args.append(Arg(name="bias", role=Role.IN, dtype=kernel.bias.dtype, shape=(n,),
                            doc="added per column", align=kernel.bias.dtype.bits // 8))
        case BiasMode.NONE:
            pass
        case BiasMode.GROUP:
            raise AssertionError("validate allows a per-group bias on grouped ops only")
        case _:
            assert_never(kernel.bias.mode)
    n_out = div(n, 2) if kernel.epilogue.activation.paired else n
    args.append(Arg(name="out", role=Role.OUT, dtype=kernel.out, shape=(m, n_out),
                    doc="the result", align=kernel.out.bits // 8))
    return tuple(args), binds


def _params(kernel: ir.Kernel) -> tuple[Param, ...]:
    """The arrays of the launch contract (the .cu's type aliases), then the dims."""
    params = [Param("const lhs_t* __restrict__", "lhs"), Param("const rhs_t* __restrict__", "rhs")]
    if kernel.lhs_scale.enabled:
        params.append(Param("const lhs_scale_t* __restrict__", "lhs_scale"))
    if kernel.rhs_scale.enabled:
        params.append(Param("const rhs_scale_t* __restrict__", "rhs_scale"))
    if kernel.bias.mode is BiasMode.N:
        params.append(Param("const bias_t* __restrict__", "bias"))
    params += [Param("out_t* __restrict__", "out"), Param("int", "m"), Param("int", "n"),
               Param("int", "k")]
    return tuple(params)


def plan(kernel: ir.Kernel, spec: ir.Spec) -> GemvPlan:
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    rows = max_rows(kernel)
    threads = kernel.threads or DEFAULT_THREADS
    warps = threads // WARP
    silu = kernel.epilogue.activation.paired
    acc_cols = _acc_cols(kernel, rows)
    out_cols = acc_cols // 2 if silu else acc_cols
    vec = LOAD_BYTES * 8 // kernel.rhs_operand.dtype.bits
    params = _params(kernel)
    note = "the launch contract's arrays, then the dims"
    head = f'extern "C" __global__ void __launch_bounds__({threads})'
    entries = (
        GemvEntry(name=kernel.name, vec=vec,
                  lhs_loads=vec * kernel.lhs.dtype.bits // 8 // LOAD_BYTES,
                  comment=f"k a multiple of {vec}: 16-byte loads of weights and activations.",
                  signature=cpp_signature(head, kernel.name, params, note),
                  call=cpp_args(f"gemv<{vec}>(", params, ");", 2)),
        GemvEntry(name=f"{kernel.name}_unaligned_k", vec=1, lhs_loads=0,
                  comment="Any k: rows are not 16-byte aligned, one element per lane and load.",
                  signature=cpp_signature(head, f"{kernel.name}_unaligned_k", params, note),
                  call=cpp_args("gemv<1>(", params, ");", 2)),
    )
    args, _ = _args(kernel)
    sc = scales(kernel)
    batched = kernel.algorithm is Algorithm.GEMV_BATCHED
    unroll = UNROLL[kernel.algorithm]
    scaled_head, scale_lines, finish = epilogue(kernel, sc, params)
    if sc.fold_lhs:
        accumulate = "acc[r][a] += gg::mul_scales(dot, sw[a], sa[r]);  // exactly, whatever the e8m0 bytes"
    elif sc.exact_block:
        accumulate = "acc[r][a] += gg::mul_scale(dot, sw[a]);  // e8m0: 2^-127 too, exactly"
    else:
        accumulate = "acc[r][a] += dot * sw[a];"
    fast, unaligned = entries
    return GemvPlan(
        kernel=kernel, spec_lines=spec_lines(kernel), where=where(kernel.loc),
        batched=batched, max_rows=rows,
        lhs=kernel.lhs.dtype, rhs=kernel.rhs_operand.dtype, out=kernel.out, threads=threads,
        warps=warps, out_cols=out_cols, acc_cols=acc_cols, rows_per_column=2 if silu else 1,
        cols_per_block=warps * out_cols, unroll=unroll, vec=vec, entries=entries,
        lhs_scale=kernel.lhs_scale, rhs_scale=kernel.rhs_scale, scales=sc, bias=kernel.bias,
        activation=kernel.epilogue.activation, alpha=kernel.epilogue.alpha,
        silu_mul=silu, interleaved=kernel.epilogue.interleaved, args=args,
        title=(f"batched GEMV, M = 0..{rows} rows in one pass over the weight" if batched
               else "GEMV, M == 1"),
        n_out="n / 2" if silu else "n",
        max_rows_source="max_m" if batched else "gemv: M == 1",
        algorithm_comment=algorithm_comment(kernel, sc, warps * out_cols, unroll),
        entries_comment=comment(f"Entry points: {fast.name} (k a multiple of {vec}: 16-byte "
                                f"loads) and {unaligned.name} (any k: one element per lane and "
                                "load)."),
        lhs_ctype=CTYPE[kernel.lhs.dtype], rhs_ctype=CTYPE[kernel.rhs_operand.dtype],
        out_ctype=CTYPE[kernel.out],
        lhs_scale_ctype=CTYPE[sc.lhs.dtype] if sc.lhs.enabled else None,
        rhs_scale_ctype=CTYPE[sc.rhs.dtype] if sc.rhs.enabled else None,
        bias_ctype=CTYPE[kernel.bias.dtype] if kernel.bias.mode is BiasMode.N else None,
        lhs_scale_to_float=to_float(sc.lhs), rhs_scale_to_float=to_float(sc.rhs),
        lhs_scale_row="0" if sc.lhs.mode is ScaleMode.TENSOR else "r",
        weight_row_bound="n_out" if silu else "n",
        params=params,
        gemv_head=cpp_params("__device__ __forceinline__ void gemv(", params),
        scaled_head=scaled_head, epilogue_scale_lines=scale_lines,
        block_accumulate=accumulate, finish=finish,
    )


def _checks(kernel: ir.Kernel, rows: int) -> tuple[Check, ...]:
    m, n, k = var("m"), var("n"), var("k")
    what = "gemv serves m == 1" if rows == 1 else f"gemv_batched serves m <= {rows}"
    checks = [Check(all_of(m.ge(0), m.le(rows)),
                    f"{what} (m == 0 launches nothing); a dispatcher sends larger m elsewhere"),
              Check(all_of(n.gt(0), k.gt(0)), "n and k must be positive")]
    checks += spec_checks(kernel)
    # The K loop steps an int past k by up to 32 * 16 * unroll elements.
    checks.append(Check(all_of(n.lt(2147483647), k.le(Lit(2147483647) - 65536)),
                        "dims must fit in int32 (k with 65536 to spare)"))
    return tuple(checks)


# ---------------------------------------------------------------------------
# Launch plan


def launch_plan(kernel: ir.Kernel, spec: ir.Spec) -> LaunchPlan:
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    p = plan(kernel, spec)
    target = spec.target(ir.Backend.CUDA)
    args, binds = _args(kernel)
    step_args = tuple(array(q.name) if q.type.endswith("__restrict__") else i32(var(q.name))
                      for q in p.params)
    grid = Grid(cdiv(var("n_out"), p.cols_per_block), Lit(1), Lit(1))
    fast, unaligned = p.entries
    variants = (
        Variant(index=0, when=(var("k") % fast.vec).eq(0), where=p.where,
                label=f"{LOAD_BYTES}-byte loads",
                steps=(Step(entry=fast.name, grid=grid, block=p.threads, smem=0, args=step_args,
                            comment=f"{p.cols_per_block} output columns per block, "
                            f"{LOAD_BYTES}-byte weight loads"),)),
        Variant(index=1, when=None, where=p.where, label="unaligned k",
                steps=(Step(entry=unaligned.name, grid=grid, block=p.threads, smem=0,
                            args=step_args,
                            comment=f"{p.cols_per_block} output columns per block, one element "
                            f"per lane and load (k is not a multiple of {fast.vec})"),)),
    )
    return LaunchPlan(
        kernel=kernel, template="cuda/gemv.cu.j2", detail=p, spec_path=spec.path,
        where=p.where, summary=summary(kernel), spec_lines=p.spec_lines,
        archs=target.cuda_archs if target else (), args=args, bindings=binds,
        derived=(Derived(name="n_out", value=div(var("n"), 2) if p.silu_mul else var("n")),),
        checks=_checks(kernel, p.max_rows), variants=variants,
        entries=tuple(e.name for e in p.entries), empty=var("m").eq(0),
    )
