"""CUDA tile GEMM (dense and grouped) on tensor cores: the plan.

`plan(kernel, spec)` does every piece of arithmetic for `gemm.cu.j2`: the
warp layout, the MMA shape, fragment counts, shared-memory strides and
bytes per stage, the grid of every launch step, the 16-byte alignment rules,
and the argument list; `launch_plan` wraps it in the `LaunchPlan` the
launcher templates print. docs/cuda.md describes the kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import assert_never

from gemmgen import ir
from gemmgen.diagnostics import Diagnostic
from gemmgen.archs import shared_memory_limit
from gemmgen.ir import Activation, Algorithm, BiasMode, DType, Layout, Op, ScaleMode
from gemmgen.backends.cuda_common import (
    CTYPE, LIMITS, WARP, Arg, Binding, Check, LaunchPlan, Step, Variant, array, cond_expr,
    i32, i64, spec_checks, where,
)


# ---------------------------------------------------------------------------
# Plan data


@dataclass(frozen=True, slots=True)
class TileConfig:
    """One tile of the LUT and everything the kernel template needs for it."""

    index: int
    entry: str  # extern "C" symbol of the GEMM kernel for this tile
    when: str  # condition on m, n, k ("" for the default)
    where: str
    bm: int
    bn: int  # accumulator columns per block (silu_mul: gate + up halves)
    bn_out: int  # output columns per block
    bk: int
    wm: int
    wn: int
    warps_m: int
    warps_n: int
    stages: int
    mi: int  # 16-row MMA fragments per warp
    ni: int  # 8-column MMA fragments per warp
    ksteps: int  # MMAs along K per K tile
    a_stride: int  # bytes per A row in shared memory (padded)
    a_stage_bytes: int
    b_raw_rows: int  # rows of the staged B tile (n for [n, k], k for [k, n])
    b_raw_row_bytes: int  # payload bytes per staged B row
    b_raw_stride: int  # padded bytes per staged B row
    b_stage_bytes: int
    b_conv_stride: int  # bytes per row of the converted [bn][bk] B tile
    b_conv_bytes: int
    c_stride: int  # floats per row of the epilogue tile
    pipeline_bytes: int
    epilogue_bytes: int
    smem_bytes: int
    grid_x: str  # launch grid, expressions over the dims: n tiles,
    grid_y: str  # and the rows of tiles (m tiles, or work items) folded
    grid_z: str  # over y and z
    workspace_ints: str  # grouped: ints of the tile worklist ("0" for dense)

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * WARP

    @property
    def a_chunks(self) -> int:  # 16-byte copies per A stage
        return self.bm * (self.a_stride - 16) // 16

    @property
    def b_chunks(self) -> int:
        return self.b_raw_rows * self.b_raw_row_bytes // 16


@dataclass(frozen=True, slots=True)
class GemmPlan:
    """What gemm.cu.j2 prints (the launchers get the `LaunchPlan`)."""

    kernel: ir.Kernel
    spec_path: str
    where: str
    summary: str
    spec_lines: tuple[str, ...]
    archs: tuple[str, ...]
    args: tuple[Arg, ...]  # contract order, then out
    bindings: tuple[Binding, ...]
    checks: tuple[Check, ...]
    tiles: tuple[TileConfig, ...]  # LUT rules, then the default
    # Types.
    lhs: DType
    rhs: DType
    out: DType
    compute: DType  # what the tensor cores multiply
    acc_ctype: str  # "float" or "int"
    mma: str  # primitive name, e.g. "mma_m16n8k16_bf16"
    kstep: int  # K per MMA (16 or 32)
    elem_bytes: int  # bytes per compute element in shared memory
    rhs_nk: bool
    b_direct: bool  # B feeds ldmatrix straight from the staged tile
    b_trans: bool  # ... with .trans ([k, n], 16-bit)
    # Scales, bias, epilogue.
    lhs_scale: ir.Scale
    rhs_scale: ir.Scale
    mainloop_scale: bool
    scale_block_k: int  # K extent of one main-loop scale (0: none)
    bias: BiasMode
    activation: str
    alpha: float | None
    silu_mul: bool
    grouped: bool
    k_align: int  # k must be a multiple of this (16-byte rows)
    n_align: int
    n_out: str  # output columns, an expression of n

    def ctype(self, dt: DType) -> str:
        return CTYPE[dt]

    @property
    def rhs_bits(self) -> int:
        return self.rhs.bits

    @property
    def name(self) -> str:
        return self.kernel.name

    def arg(self, name: str) -> Arg | None:
        for a in self.args:
            if a.name == name:
                return a
        return None

    @property
    def rules(self) -> tuple[TileConfig, ...]:
        return self.tiles[:-1]

    @property
    def inputs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "in")

    @property
    def max_smem(self) -> int:
        return max(t.smem_bytes for t in self.tiles)

    @property
    def max_threads(self) -> int:
        return max(t.threads for t in self.tiles)

    @property
    def fold_scales(self) -> bool:
        """Epilogue scales (per tensor / token / channel) applied with the
        main-loop ones at every K block's promotion, when there are both and
        one is e8m0. Scaling the partial total by the main-loop scales alone
        can leave f32 where the fully scaled result does not (2^126 now and
        2^-127 in the epilogue); with every scale in the promotion the total
        has the output's magnitude."""
        return fold_scales(self.kernel)

    def promoted(self, scale: ir.Scale) -> bool:
        """Whether `scale` multiplies each K block's partial sum."""
        return scale.enabled and (scale.placement is ir.Placement.MAINLOOP or self.fold_scales)

    @property
    def exact_mainloop(self) -> bool:
        """An e8m0 scale in the promotion: the per-block scale products may
        leave f32 (2^-254 .. 2^254), so they are applied as exponents when a
        thread's products are not all normal (gg::mul_scales_out_of_line)."""
        return any(self.promoted(s) and s.dtype is DType.E8M0
                   for s in (self.lhs_scale, self.rhs_scale))

    @property
    def exact_epilogue(self) -> bool:
        """An e8m0 scale in the epilogue: applied with gg::mul_scale(s), exactly."""
        return any(s.enabled and not self.promoted(s) and s.dtype is DType.E8M0
                   for s in (self.lhs_scale, self.rhs_scale))


# ---------------------------------------------------------------------------
# Diagnose


def _not_yet(loc: ir.Loc, kernel: ir.Kernel, what: str) -> Diagnostic:
    return Diagnostic(loc, f"kernel '{kernel.name}': cuda cannot emit {what} yet")


def compute_dtype(kernel: ir.Kernel) -> DType | None:
    """The tensor-core input type, or None when there is no MMA for the pair."""
    a, b = kernel.lhs.dtype, kernel.rhs_operand.dtype
    if a in (DType.BF16, DType.F16):
        return a if b in (a, DType.E4M3, DType.E5M2, DType.INT8, DType.INT4, DType.FP4) else None
    if a in (DType.E4M3, DType.E5M2):
        return a if b is a else None  # mixed e4m3 x e5m2 MMAs are not wrapped yet
    if a is DType.INT8:
        return a if b in (DType.INT8, DType.INT4) else None
    return None


def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """What the tile GEMM cannot emit for a dense / grouped kernel, and the
    shared memory each tile needs against each declared arch."""
    out: list[Diagnostic] = []
    assert kernel.algorithm is Algorithm.TILE
    if compute_dtype(kernel) is None:
        out.append(Diagnostic(kernel.rhs_operand.loc, f"kernel '{kernel.name}': cuda cannot emit lhs "
                              f"'{kernel.lhs.dtype.value}' x rhs '{kernel.rhs_operand.dtype.value}' yet: "
                              "tensor cores take bf16, f16, e4m3, e5m2 or int8 on both sides "
                              "(a narrower rhs is widened exactly); f32 has no path"))
        return out
    if kernel.stages < 2:
        out.append(Diagnostic(kernel.loc, f"kernel '{kernel.name}': the cuda tile GEMM pipelines "
                              "with cp.async and needs stages >= 2"))
    target = spec.target(ir.Backend.CUDA)
    archs = target.cuda_archs if target else ()
    for rule_tile, loc in _tiles_with_loc(kernel):
        problem = _tile_problem(kernel, rule_tile)
        if problem:
            out.append(Diagnostic(loc, f"kernel '{kernel.name}': cuda: {problem}"))
    if out:
        return out
    p = plan(kernel, spec)
    for t in p.tiles:
        for arch in archs:
            if t.smem_bytes > shared_memory_limit(arch):
                out.append(Diagnostic(kernel.loc, f"kernel '{kernel.name}': tile "
                                      f"{t.bm}x{t.bn}x{t.bk} needs {t.smem_bytes} bytes of shared "
                                      f"memory, over the {shared_memory_limit(arch)} that {arch} allows; "
                                      "use a smaller tile or fewer stages"))
    return out


def _tiles_with_loc(kernel: ir.Kernel) -> list[tuple[ir.Tile, ir.Loc]]:
    return [(r.tile, r.loc) for r in kernel.tile_rules] + [(kernel.tile, kernel.loc)]


def _kstep(compute: DType) -> int:
    return 16 if compute.bits == 16 else 32


def _warp_tile(kernel: ir.Kernel, tile: ir.Tile) -> tuple[int, int]:
    if kernel.warp_tile is not None:
        return kernel.warp_tile.m, kernel.warp_tile.n
    # 64 x 32 per warp: 64 f32 accumulators per thread. Main-loop scales keep
    # a second set (the f32 total), so they get 32 x 32 to stay far from
    # the 255-register limit (no spills).
    mainloop = any(s.enabled and s.placement is ir.Placement.MAINLOOP
                   for s in (kernel.lhs_scale, kernel.rhs_scale))
    top = 32 if mainloop else 64
    wm = next(w for w in (top, 32, 16) if tile.m % w == 0 and w <= top)
    wn = 32 if tile.n % 32 == 0 else 16
    return wm, wn


def _tile_problem(kernel: ir.Kernel, tile: ir.Tile) -> str | None:
    compute = compute_dtype(kernel)
    assert compute is not None
    ks = _kstep(compute)
    if tile.k % ks:
        return f"tile k={tile.k} must be a multiple of {ks} (one {compute.value} MMA)"
    if tile.m % 16 or tile.n % 16:
        return f"tile {tile.m}x{tile.n} must be a multiple of 16 in m and n"
    wm, wn = _warp_tile(kernel, tile)
    if wm % 16 or wn % 16:
        return f"warp tile {wm}x{wn} must be a multiple of 16"
    warps = (tile.m // wm) * (tile.n // wn)
    if warps * WARP > 1024:
        return f"tile {tile.m}x{tile.n} with warp tile {wm}x{wn} needs {warps} warps (> 32)"
    if kernel.threads is not None and kernel.threads != warps * WARP:
        return (f"threads {kernel.threads} disagrees with {warps} warps of the "
                f"{wm}x{wn} warp tile")
    return None


# ---------------------------------------------------------------------------
# Plan


def _align_up(x: int, a: int) -> int:
    return -(-x // a) * a


def _tile_config(kernel: ir.Kernel, tile: ir.Tile, index: int, entry: str, when: str,
                 where: str, compute: DType) -> TileConfig:
    es = compute.bits // 8
    ks = _kstep(compute)
    wm, wn = _warp_tile(kernel, tile)
    a_stride = tile.k * es + 16
    rhs = kernel.rhs_operand.dtype
    if kernel.rhs_operand.layout is Layout.NK:
        b_rows, b_row_bytes = tile.n, tile.k * rhs.bits // 8
    else:
        b_rows, b_row_bytes = tile.k, tile.n * rhs.bits // 8
    b_raw_stride = b_row_bytes + 16
    direct = _b_direct(kernel, compute)
    b_conv_stride = tile.k * es + 16
    b_conv_bytes = 0 if direct else tile.n * b_conv_stride
    a_stage = tile.m * a_stride
    b_stage = b_rows * b_raw_stride
    pipeline = kernel.stages * (a_stage + b_stage) + b_conv_bytes
    c_stride = tile.n + 4
    epilogue = tile.m * c_stride * 4
    silu = kernel.epilogue.activation is Activation.SILU_MUL
    bn_out = tile.n // 2 if silu else tile.n
    grouped = kernel.op is Op.GROUPED
    # Grid (n tiles, rows): one block per output tile. Grouped: the rows are
    # (group, m tile) work items; a group that starts inside a tile adds one
    # item, so cdiv(m, bm) + g bounds the count. The rows are folded over y
    # and z (row = blockIdx.y + blockIdx.z * gridDim.y), so grid y stays
    # within CUDA's 65535 for any int32 m (docs/cuda.md, "Launch limits").
    rows = f"gg_cdiv(m, {tile.m}) + g" if grouped else f"gg_cdiv(m, {tile.m})"
    ws = f"2 + num_groups + 2 * (gg_cdiv(m, {tile.m}) + g)" if grouped else "0"
    return TileConfig(
        index=index, entry=entry, when=when, where=where, bm=tile.m, bn=tile.n,
        bn_out=bn_out, bk=tile.k, wm=wm, wn=wn,
        warps_m=tile.m // wm, warps_n=tile.n // wn, stages=kernel.stages, mi=wm // 16,
        ni=wn // 8, ksteps=tile.k // ks, a_stride=a_stride, a_stage_bytes=a_stage,
        b_raw_rows=b_rows, b_raw_row_bytes=b_row_bytes, b_raw_stride=b_raw_stride,
        b_stage_bytes=b_stage, b_conv_stride=b_conv_stride, b_conv_bytes=b_conv_bytes,
        c_stride=c_stride, pipeline_bytes=pipeline, epilogue_bytes=epilogue,
        smem_bytes=max(pipeline, epilogue), grid_x=f"gg_cdiv(n_out, {bn_out})",
        grid_y=f"gg_min({rows}, {LIMITS.grid_yz})", grid_z=f"gg_cdiv({rows}, {LIMITS.grid_yz})",
        workspace_ints=ws,
    )


def _b_direct(kernel: ir.Kernel, compute: DType) -> bool:
    """Whether B goes to ldmatrix as staged (no conversion pass)."""
    if kernel.rhs_operand.dtype is not compute:
        return False
    return kernel.rhs_operand.layout is Layout.NK or compute.bits == 16


def _args(kernel: ir.Kernel) -> tuple[tuple[Arg, ...], tuple[Binding, ...]]:
    """The launcher arguments in contract order (docs/cuda.md, launchers), then out."""
    lhs, rhs = kernel.lhs, kernel.rhs_operand
    grouped = kernel.op is Op.GROUPED
    args: list[Arg] = []
    binds: list[Binding] = []
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
    n_out = "gg_div(n, 2)" if kernel.epilogue.activation is Activation.SILU_MUL else "n"
    if grouped:
        args.append(Arg("group_offset", "scalar", DType.INT32, (),
                        "the first group this shard owns (default 0)", optional=True))
        args.append(Arg("existing_out", "in", kernel.out, ("m", n_out),
                        "rows this shard does not compute keep these values", optional=True,
                        align=4))
    args.append(Arg("out", "out", kernel.out, ("m", n_out), "the result"))
    return tuple(args), tuple(binds)


def _scale_dims(scale: ir.Scale, *, side: str, g: str | None) -> tuple[str, ...]:
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


def _checks(kernel: ir.Kernel, k_align: int, n_align: int) -> tuple[Check, ...]:
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
    return tuple(checks)


def _alignments(kernel: ir.Kernel, compute: DType) -> tuple[int, int]:
    """(k, n) multiples that keep every 16-byte copy's source aligned."""
    k_align = 128 // compute.bits  # lhs rows
    rb = kernel.rhs_operand.dtype.bits
    n_align = 1
    if kernel.rhs_operand.layout is Layout.NK:
        k_align = max(k_align, 128 // rb)
    else:
        n_align = 128 // rb
        if kernel.epilogue.activation is Activation.SILU_MUL:
            n_align *= 2  # the up half starts at n / 2
    return k_align, n_align


def plan(kernel: ir.Kernel, spec: ir.Spec) -> GemmPlan:
    assert kernel.op in (Op.DENSE, Op.GROUPED)
    compute = compute_dtype(kernel)
    assert compute is not None
    target = spec.target(ir.Backend.CUDA)
    tiles = []
    rules = list(kernel.tile_rules)
    for i, rule in enumerate(rules):
        tiles.append(_tile_config(kernel, rule.tile, i, f"{kernel.name}_t{i}",
                                  cond_expr(rule.conds), where(rule.loc), compute))
    default_entry = f"{kernel.name}_t{len(rules)}" if rules else kernel.name
    tiles.append(_tile_config(kernel, kernel.tile, len(rules), default_entry, "",
                              where(kernel.loc), compute))
    args, binds = _args(kernel)
    k_align, n_align = _alignments(kernel, compute)
    mainloop = [s for s in (kernel.lhs_scale, kernel.rhs_scale)
                if s.enabled and s.placement is ir.Placement.MAINLOOP]
    # Promote at the gcd of the scale blocks so no partial sum straddles a
    # block of either side (the tile's K divides both: validated).
    block_k = 0
    for sc in mainloop:
        block_k = math.gcd(block_k, sc.block_k)
    mma = {DType.BF16: "mma_m16n8k16_bf16", DType.F16: "mma_m16n8k16_f16",
           DType.E4M3: "mma_m16n8k32_e4m3", DType.E5M2: "mma_m16n8k32_e5m2",
           DType.INT8: "mma_m16n8k32_s8"}[compute]
    from gemmgen.describe import describe_kernel
    return GemmPlan(
        kernel=kernel, spec_path=spec.path, where=where(kernel.loc),
        summary=describe_kernel(kernel),
        spec_lines=_spec_lines(kernel),
        archs=target.cuda_archs if target else (),
        args=args, bindings=binds, checks=_checks(kernel, k_align, n_align),
        tiles=tuple(tiles), lhs=kernel.lhs.dtype, rhs=kernel.rhs_operand.dtype, out=kernel.out,
        compute=compute, acc_ctype="int" if compute is DType.INT8 else "float", mma=mma,
        kstep=_kstep(compute), elem_bytes=compute.bits // 8,
        rhs_nk=kernel.rhs_operand.layout is Layout.NK, b_direct=_b_direct(kernel, compute),
        b_trans=_b_direct(kernel, compute) and kernel.rhs_operand.layout is Layout.KN,
        lhs_scale=kernel.lhs_scale, rhs_scale=kernel.rhs_scale, mainloop_scale=bool(mainloop),
        scale_block_k=block_k, bias=kernel.bias.mode,
        activation=kernel.epilogue.activation.value, alpha=kernel.epilogue.alpha,
        silu_mul=kernel.epilogue.activation is Activation.SILU_MUL,
        grouped=kernel.op is Op.GROUPED, k_align=k_align, n_align=n_align,
        n_out="gg_div(n, 2)" if kernel.epilogue.activation is Activation.SILU_MUL else "n",
    )


def fold_scales(kernel: ir.Kernel) -> bool:
    """GemmPlan.fold_scales: a main-loop scale, an epilogue scale, and e8m0."""
    scales = (kernel.lhs_scale, kernel.rhs_scale)
    return (any(s.enabled and s.placement is ir.Placement.MAINLOOP for s in scales)
            and any(s.enabled and s.dtype is DType.E8M0 for s in scales)
            and any(s.enabled and s.placement is ir.Placement.EPILOGUE for s in scales))


def _spec_lines(kernel: ir.Kernel) -> tuple[str, ...]:
    """The spec restated for the comment block at the top of each file."""
    rhs_shape = {(Op.DENSE, Layout.NK): "[n, k]", (Op.DENSE, Layout.KN): "[k, n]",
                 (Op.GROUPED, Layout.NK): "[g, n, k]", (Op.GROUPED, Layout.KN): "[g, k, n]"}
    lines = [f"op        {kernel.op.value}",
             f"lhs       {kernel.lhs.dtype.value} [m, k]",
             f"rhs       {kernel.rhs_operand.dtype.value}{' packed' if kernel.rhs_operand.packed else ''} "
             f"{rhs_shape[(kernel.op, kernel.rhs_operand.layout)]}",
             f"out       {kernel.out.value} (accumulator {kernel.acc.value})"]
    for name, sc in (("lhs_scale", kernel.lhs_scale), ("rhs_scale", kernel.rhs_scale)):
        if sc.enabled:
            blocks = "".join(f" {d}={v}" for d, v in (("n", sc.block_n), ("k", sc.block_k))
                             if (d == "n" and v > 1) or (d == "k" and v))
            where = ("mainloop, with the K-block scales"
                     if sc.placement is ir.Placement.EPILOGUE and fold_scales(kernel)
                     else sc.placement.value)
            lines.append(f"{name:<10}{sc.mode.value}{blocks} {sc.dtype.value} "
                         f"(applied in the {where})")
    if kernel.bias.mode is not BiasMode.NONE:
        shape = "[n]" if kernel.bias.mode is BiasMode.N else "[g, 1, n]"
        lines.append(f"bias      {kernel.bias.dtype.value} {shape}")
    if kernel.epilogue.activation is not Activation.NONE or kernel.epilogue.alpha is not None:
        alpha = f" alpha={kernel.epilogue.alpha!r}" if kernel.epilogue.alpha is not None else ""
        lines.append(f"epilogue  {kernel.epilogue.activation.value}{alpha}")
    t = kernel.tile
    lines.append(f"tile      m={t.m} n={t.n} k={t.k}, {kernel.stages} stages")
    for r in kernel.tile_rules:
        lines.append(f"  when {cond_expr(r.conds)}: m={r.tile.m} n={r.tile.n} k={r.tile.k}")
    if kernel.static_n or kernel.static_k:
        lines.append("dims     " + (f" n={kernel.static_n}" if kernel.static_n else "")
                     + (f" k={kernel.static_k}" if kernel.static_k else ""))
    return tuple(lines)


# ---------------------------------------------------------------------------
# Launch plan


def launch_plan(kernel: ir.Kernel, spec: ir.Spec) -> LaunchPlan:
    p = plan(kernel, spec)
    name = kernel.name
    variants = []
    for t in p.tiles:
        gemm_args = [array("lhs"), array("rhs")]
        gemm_args += [array(a) for a in ("lhs_scale", "rhs_scale", "bias") if p.arg(a)]
        gemm_args.append(array("out"))
        if p.grouped:
            gemm_args.append(array("workspace"))
        gemm_args += [i32("m"), i32("n"), i32("k")]
        if p.grouped:
            gemm_args += [i32("num_groups"), i32("group_offset")]
        rows = "work items" if p.grouped else "m tiles"
        gemm = Step(t.entry, (t.grid_x, t.grid_y, t.grid_z), t.threads, t.smem_bytes,
                    tuple(gemm_args), f"{t.bm}x{t.bn_out} output tiles: n tiles, {rows} over y and z")
        steps: list[Step] = []
        if p.grouped:
            steps.append(Step(f"{name}_fill", ("gg_min(gg_cdiv(m * n_out, 256), 4096)", "1", "1"),
                              256, 0, (array("out"), array("existing_out"), i64("m * n_out")),
                              "out = existing_out or zeros"))
            steps.append(Step(f"{name}_worklist", ("1", "1", "1"), 1, 0,
                              (array("group_sizes"), i32("num_groups"), i32("group_offset"),
                               i32("g"), i32("m"), i32(str(t.bm)), array("workspace")),
                              "the (group, m tile) work items"))
        steps.append(gemm)
        variants.append(Variant(t.index, t.when, t.where, f"{t.bm}x{t.bn}x{t.bk}",
                                tuple(steps), t.workspace_ints))
    entries = tuple(t.entry for t in p.tiles)
    if p.grouped:
        entries = (f"{name}_fill", f"{name}_worklist") + entries
    return LaunchPlan(
        kernel=kernel, template="cuda/gemm.cu.j2", detail=p, spec_path=spec.path,
        where=p.where, summary=p.summary, spec_lines=p.spec_lines, archs=p.archs, args=p.args,
        bindings=p.bindings, derived=(("n_out", p.n_out),), checks=p.checks,
        variants=tuple(variants), entries=entries, empty="m == 0",
    )
