"""CUDA tile GEMM (dense and grouped) on tensor cores: the plan.

The kernel body is C++ shared by every tile GEMM (runtime/cuda/gg_gemm.cuh,
with gg_widen.cuh, gg_scales.cuh and gg_epilogue.cuh), templated on a
`Config` and one struct per tile; its choices (operand formats, B's layout
and feed, scale modes and where they apply, bias, activation, alpha) are
`if constexpr` on that configuration. `plan(kernel, spec)` decides and
computes everything `gemm.cu.j2` prints: the Config's members, the warp
layout, fragment counts, shared-memory strides and bytes of every tile, the
entry points' parameter list (once, in launch order), and their layout as
clang-format would print it, so the emitted file is formatted as emitted;
`launch_plan` wraps it in the `LaunchPlan` the launcher templates print.
docs/cuda.md describes the kernel.

A kernel that gets the Hopper body on a declared arch (ir.Kernel.uses_wgmma:
sm_90a) also gets, per LUT entry, an `Sm90Tile` and a `<entry>_sm90` entry
point of gg_gemm_sm90.cuh (TMA + wgmma, 384 threads, a persistent grid),
taking tensor maps of lhs and rhs; its launch steps are the Variant's
`sm90_steps`, which the launchers run on compute capability 9.0
(docs/cuda-hopper.md, "The generated kernels").
"""

from __future__ import annotations

import enum
import math
import textwrap
from dataclasses import dataclass
from typing import assert_never

from gemmgen import ir
from gemmgen.backends.cuda.gemm import masked as cuda_masked
from gemmgen.backends.cuda.common import (
    CTYPE,
    LIMITS,
    WARP,
    Arg,
    Binding,
    Check,
    LaunchPlan,
    Step,
    StepArg,
    TensorMapSpec,
    Variant,
    all_of,
    array,
    cond_expr,
    div,
    i32,
    i64,
    spec_checks,
    tensor_map,
    var,
    where,
)
from gemmgen.describe import describe_kernel
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Activation, Algorithm, BiasMode, DType, Layout, Op, ScaleMode
from gemmgen.render import _cfloat
from gemmgen.archs import shared_memory_limit

# ---------------------------------------------------------------------------
# Plan data


class BFeed(enum.Enum):
    """How the staged B tile reaches the tensor cores (gg::gemm::BFeed)."""

    LDMATRIX = "kLdmatrix"  # [n, k] tile of the tensor-core type, as for A
    LDMATRIX_TRANS = "kLdmatrixTrans"  # [k, n] tile of a 16-bit type: ldmatrix.trans
    CONVERT = "kConvert"  # widened and / or transposed to a [n, k] tile first


# The C++ spelling of the plan's choices (runtime/cuda/gg_gemm_config.cuh).
FORMAT = {
    DType.F32: "kF32", DType.BF16: "kBF16", DType.F16: "kF16", DType.E4M3: "kE4M3",
    DType.E5M2: "kE5M2", DType.INT8: "kInt8", DType.INT4: "kInt4", DType.FP4: "kFp4",
    DType.E8M0: "kE8M0",
}
SCALE_MODE = {
    ScaleMode.NONE: "kNone", ScaleMode.TENSOR: "kPerTensor", ScaleMode.TOKEN: "kPerToken",
    ScaleMode.TOKEN_GROUP: "kPerTokenGroup", ScaleMode.CHANNEL: "kPerChannel",
    ScaleMode.BLOCK: "kBlock", ScaleMode.KBLOCK: "kKBlock",
}
BIAS = {BiasMode.NONE: "kNone", BiasMode.N: "kN", BiasMode.GROUP: "kGroup"}
ACTIVATION = {
    Activation.NONE: "kNone", Activation.RELU: "kRelu", Activation.GELU: "kGelu",
    Activation.SILU: "kSilu", Activation.SILU_MUL: "kSiluMul",
}
MMA = {DType.BF16: "mma_m16n8k16_bf16", DType.F16: "mma_m16n8k16_f16",
       DType.E4M3: "mma_m16n8k32_e4m3", DType.E5M2: "mma_m16n8k32_e5m2",
       DType.INT8: "mma_m16n8k32_s8"}

COLUMNS = 100  # the .clang-format column limit the emitted text keeps
INDENT = 4  # clang-format's continuation indent (Google style)


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
    def label(self) -> str:
        """Where the LUT uses the tile."""
        return f"when {self.when}" if self.when else "default"

    @property
    def comment(self) -> tuple[str, ...]:
        """The lines of the comment above the tile's struct."""
        text = (f"Tile {self.index}, {self.label} ({self.where}): pipeline {self.pipeline_bytes} "
                f"bytes, epilogue {self.epilogue_bytes}.")
        return tuple(textwrap.wrap(text, COLUMNS - len("// ")))


# The Hopper body's fixed shape (gg_gemm_sm90.cuh: kThreads, kBM, the
# 128-byte K tile row, the setmaxnreg counts) and the plan's choices for it.
SM90_ARCH = "sm_90a"
SM90_THREADS, SM90_BM, SM90_ROW_BYTES = 384, 128, 128
SM90_PRODUCER_REGS, SM90_CONSUMER_REGS = 40, 232
SM90_GROUP_M = 8  # rows of tiles per rasterized group (L2 reuse)
SM90_MAX_STAGES = 8


@dataclass(frozen=True, slots=True)
class Sm90Tile:
    """The Hopper (TMA + wgmma) tile of one LUT entry: 128 x bn x bk (bk:
    one 128-byte row, 64 16-bit or 128 FP8 elements), its stages and
    shared memory (gg::gemm::sm90::check_tile_sm90 states how the numbers
    relate). A weight-only tile (`mixed`, gg_gemm_sm90_mixed.cuh) is bm
    rows of lhs (8..128, wgmma's N) x 128 weight rows x 64, its B stage raw
    weight bytes (check_tile_mixed)."""

    index: int
    entry: str  # extern "C" symbol
    bn: int  # B columns of a tile (silu_mul: the gate half, then the up half)
    bn_out: int  # output columns of a tile: bn, or bn / 2 for silu_mul
    bk: int
    stages: int
    a_stage: int  # bytes of one stage's A tile
    b_stage: int
    c_stride: int  # out_t per row of a consumer warp's epilogue slice
    c_warp_bytes: int
    smem_bytes: int
    grid_x: str  # the persistent grid: min(SMs, tiles)
    bm: int = SM90_BM  # rows of lhs (and out) of a tile
    mixed: bool = False  # weight-only: the operands swapped, A from registers

    threads = SM90_THREADS
    group_m = SM90_GROUP_M

    @property
    def wgmma(self) -> str:
        """The wgmma shape each consumer warpgroup issues: K is 32 bytes of
        each row (k16 for 16-bit types, k32 for FP8); weight-only tiles
        multiply 64 weight rows (from registers) by the tile's bm rows."""
        if self.mixed:
            return f"m64n{self.bm}k16 (A from registers)"
        return f"m64n{self.bn}k{self.bk // 4}"

    @property
    def check(self) -> str:
        """The C++ predicate that checks the tile's numbers."""
        return "check_tile_mixed" if self.mixed else "check_tile_sm90"

    @property
    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}, {self.stages} stages"

    @property
    def comment(self) -> tuple[str, ...]:
        text = (f"Hopper tile {self.index} (sm_90a): {self.bm} x {self.bn} x {self.bk}, "
                f"{self.stages} stages of {self.a_stage + self.b_stage} bytes, "
                f"{self.smem_bytes} bytes of shared memory in all.")
        return tuple(textwrap.wrap(text, COLUMNS - len("// ")))


def sm90_smem_bytes(bn: int, stages: int, out: DType, bn_out: int | None = None) -> int:
    """gg_gemm_sm90.cuh's carve-up: alignment slack, the stages (A and B
    tiles of 128-byte rows), 8 epilogue slices of 16 rows of the output tile
    (bn_out columns, default bn), two barriers per stage."""
    ob = out.bits // 8
    bn_out = bn if bn_out is None else bn_out
    return (1024 + stages * (SM90_BM + bn) * SM90_ROW_BYTES
            + 8 * 16 * (bn_out + 16 // ob) * ob + 2 * stages * 8)


def _sm90_widths(kernel: ir.Kernel, tile: ir.Tile) -> tuple[int, ...]:
    """The tile's candidate n, widest first: the LUT entry's n when a wgmma
    N of 64..256 in steps of 64 (at most 128 for FP8, whose promoted tile
    holds two fragments), else 128, then the narrower ones; with rhs block
    scales only the n whose output columns divide the scale block (one scale
    per tile, per half for silu_mul). silu_mul splits n into a gate and an
    up half, each a whole number of 64-column boxes for rhs [k, n]."""
    silu = kernel.epilogue.activation is Activation.SILU_MUL
    widest = 128 if kernel.lhs.dtype.bits == 8 else 256
    first = tile.n if tile.n in (64, 128, 192, 256) and tile.n <= widest else 128
    out = tuple(dict.fromkeys((first, 128, 64)))
    if silu and kernel.rhs_operand.layout is Layout.KN:
        out = tuple(dict.fromkeys(bn if bn % 128 == 0 else 128 for bn in out))
    rs = kernel.rhs_scale
    if rs.mode is ScaleMode.BLOCK:
        out = tuple(bn for bn in out if rs.block_n % (bn // 2 if silu else bn) == 0)
    return out


# The weight-only tile's rows of lhs (wgmma's N), narrowest first.
SM90_MIXED_BMS = (8, 16, 32, 64, 128)


def sm90_weight_row_bytes(weight_bits: int) -> int:
    """Bytes of one weight row of a weight-only K tile (kBInner): 64 for 8-bit
    weights, 32 for 4-bit ones; the inner extent and swizzle span of the
    weight map's box."""
    return ir.WGMMA_MIXED_BK * weight_bits // 8


def sm90_mixed_smem_bytes(bm: int, stages: int, out: DType, weight_bits: int,
                          warp_cols: int = 16) -> int:
    """check_tile_mixed's carve-up: alignment slack, the stages (bm rows of
    128-byte lhs rows, 128 rows of 64 weight elements), 8 epilogue slices
    of bm rows of a warp's output columns (16, or 8 for silu_mul; + 16
    bytes), two barriers per stage."""
    ob = out.bits // 8
    return (1024 + stages * (bm * SM90_ROW_BYTES + SM90_BM * sm90_weight_row_bytes(weight_bits))
            + 8 * bm * (warp_cols + 16 // ob) * ob + 2 * stages * 8)


def _sm90_tiles_expr(kernel: ir.Kernel, bm: int, bn_out: int) -> str:
    """The output tiles of a Hopper launch (the persistent grid's work)."""
    if kernel.masked:  # every (group, m tile) pair
        return f"g * gg_cdiv(m, {bm}) * gg_cdiv(n_out, {bn_out})"
    if kernel.op is Op.GROUPED:
        return f"(gg_cdiv(m, {bm}) + g) * gg_cdiv(n_out, {bn_out})"
    return f"gg_cdiv(m, {bm}) * gg_cdiv(n_out, {bn_out})"


def _sm90_mixed_tile(kernel: ir.Kernel, tile: ir.Tile, index: int, entry: str) -> Sm90Tile:
    """The weight-only tile of a LUT entry: the narrowest bm of
    SM90_MIXED_BMS that holds the entry's m rows (a decode entry of m <= 16
    streams the weights with 16-row tiles), with the most stages that fit."""
    bm = next((b for b in SM90_MIXED_BMS if b >= tile.m), SM90_MIXED_BMS[-1])
    wb = kernel.rhs_operand.dtype.bits
    silu = kernel.epilogue.activation is Activation.SILU_MUL
    cols, bn_out = (8, SM90_BM // 2) if silu else (16, SM90_BM)  # per warp, per tile
    limit = shared_memory_limit(SM90_ARCH)
    stages = max(st for st in range(2, SM90_MAX_STAGES + 1)
                 if sm90_mixed_smem_bytes(bm, st, kernel.out, wb, cols) <= limit)
    ob = kernel.out.bits // 8
    c_stride = cols + 16 // ob
    return Sm90Tile(index=index, entry=entry, bn=SM90_BM, bn_out=bn_out, bk=ir.WGMMA_MIXED_BK,
                    stages=stages, a_stage=bm * SM90_ROW_BYTES,
                    b_stage=SM90_BM * sm90_weight_row_bytes(wb),
                    c_stride=c_stride, c_warp_bytes=bm * c_stride * ob,
                    smem_bytes=sm90_mixed_smem_bytes(bm, stages, kernel.out, wb, cols),
                    grid_x=f"gg_min(num_sms, {_sm90_tiles_expr(kernel, bm, bn_out)})",
                    bm=bm, mixed=True)


def _sm90_tile(kernel: ir.Kernel, tile: ir.Tile, index: int, entry: str) -> Sm90Tile:
    """The widest n of `_sm90_widths` with the most stages (up to
    SM90_MAX_STAGES) that fit sm_90a's opt-in shared memory; a narrower n
    when not even 2 stages fit."""
    if kernel.wgmma_mixed:
        return _sm90_mixed_tile(kernel, tile, index, entry)
    limit = shared_memory_limit(SM90_ARCH)
    silu = kernel.epilogue.activation is Activation.SILU_MUL
    for bn in _sm90_widths(kernel, tile):
        bn_out = bn // 2 if silu else bn
        fits = [st for st in range(2, SM90_MAX_STAGES + 1)
                if sm90_smem_bytes(bn, st, kernel.out, bn_out) <= limit]
        if fits:
            break
    stages = max(fits)
    ob = kernel.out.bits // 8
    c_stride = bn_out + 16 // ob
    tiles = _sm90_tiles_expr(kernel, SM90_BM, bn_out)
    return Sm90Tile(index=index, entry=entry, bn=bn, bn_out=bn_out,
                    bk=SM90_ROW_BYTES * 8 // kernel.lhs.dtype.bits,
                    stages=stages, a_stage=SM90_BM * SM90_ROW_BYTES,
                    b_stage=bn * SM90_ROW_BYTES, c_stride=c_stride,
                    c_warp_bytes=16 * c_stride * ob,
                    smem_bytes=sm90_smem_bytes(bn, stages, kernel.out, bn_out),
                    grid_x=f"gg_min(num_sms, {tiles})")


def uses_sm90(kernel: ir.Kernel, spec: ir.Spec) -> bool:
    """Whether the kernel gets the Hopper body: a declared arch where
    ir.Kernel.uses_wgmma holds (sm_90a)."""
    target = spec.target(ir.Backend.CUDA)
    return any(kernel.uses_wgmma(a) for a in (target.cuda_archs if target else ()))


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of an entry point, in launch order: its C++ type and
    name, and what the launchers pass for it."""

    ctype: str  # e.g. "const __nv_bfloat16* __restrict__", "int"
    name: str
    launch: StepArg

    @property
    def decl(self) -> str:
        return f"{self.ctype} {self.name}"


@dataclass(frozen=True, slots=True)
class Entry:
    """An `extern "C"` entry point of the .cu, laid out as clang-format
    would (the file is emitted formatted, docs/cuda.md)."""

    comment: tuple[str, ...]  # the lines of the comment above it
    signature: tuple[str, ...]  # through the opening brace
    body: tuple[str, ...]  # the statements, indented


@dataclass(frozen=True, slots=True)
class GemmPlan:
    """What gemm.cu.j2 prints (the launchers get the `LaunchPlan`)."""

    kernel: ir.Kernel
    spec_path: str
    where: str
    summary: str
    spec_lines: tuple[str, ...]
    algorithm: tuple[str, ...]  # the file comment's "Algorithm" lines
    archs: tuple[str, ...]
    args: tuple[Arg, ...]  # contract order, then out
    bindings: tuple[Binding, ...]
    checks: tuple[Check, ...]
    tiles: tuple[TileConfig, ...]  # LUT rules, then the default
    grouped: bool
    # Types.
    lhs: DType
    rhs: DType
    out: DType
    compute: DType  # what the tensor cores multiply
    acc: DType  # f32, or int32 for int8 MMAs
    mma: str  # primitive name, e.g. "mma_m16n8k16_bf16"
    kstep: int  # K per MMA (16 or 32)
    rhs_nk: bool
    b_feed: BFeed
    # Scales, bias, epilogue.
    lhs_scale: ir.Scale
    rhs_scale: ir.Scale
    fold_scales: bool  # epilogue scales join the main loop's (see fold_scales())
    scale_block_k: int  # K extent of one promotion (0: no main-loop scale)
    bias: ir.Bias
    activation: Activation
    alpha: float | None
    k_align: int  # k must be a multiple of this (16-byte rows)
    n_align: int
    n_out: str  # output columns, an expression of n
    params: tuple[Param, ...]  # the GEMM entry points' parameters, launch order
    config: tuple[str, ...]  # the members of the generated `Config` struct
    entries: tuple[Entry, ...]  # fill and worklist (grouped), then one GEMM per tile
    # The Hopper path (empty when the kernel has none): one tile per LUT
    # entry, its entry points' parameters (tensor maps first) and entries.
    sm90_tiles: tuple[Sm90Tile, ...] = ()
    sm90_params: tuple[Param, ...] = ()
    sm90_entries: tuple[Entry, ...] = ()

    @property
    def all_entries(self) -> tuple[Entry, ...]:
        """Every entry point the .cu defines: the mma.sync ones, then the Hopper ones."""
        return self.entries + self.sm90_entries

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def summary_lines(self) -> tuple[str, ...]:
        kind = "grouped (mixture-of-experts) GEMM" if self.grouped else "dense GEMM"
        if self.kernel.masked:
            kind = "masked grouped (mixture-of-experts) GEMM"
        return tuple(textwrap.wrap(f"{self.name}: {kind} on tensor cores.", COLUMNS - len("// ")))

    @property
    def mainloop_scale(self) -> bool:
        return self.scale_block_k > 0

    def arg(self, name: str) -> Arg | None:
        for a in self.args:
            if a.name == name:
                return a
        return None

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
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
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
    # At the kernel's name, or for the CUDA tile LUT of its own at each line.
    locs = [loc if kernel.tile_at is not None else kernel.loc for _, loc in _tiles_with_loc(kernel)]
    for t in p.tiles:
        for arch in archs:
            if t.smem_bytes > shared_memory_limit(arch):
                out.append(Diagnostic(locs[t.index], f"kernel '{kernel.name}': tile "
                                      f"{t.bm}x{t.bn}x{t.bk} needs {t.smem_bytes} bytes of shared "
                                      f"memory, over the {shared_memory_limit(arch)} that {arch} allows; "
                                      "use a smaller tile or fewer stages"))
    return out


def _tiles_with_loc(kernel: ir.Kernel) -> list[tuple[ir.Tile, ir.Loc]]:
    return [(r.tile, r.loc) for r in kernel.tile_rules] + [(kernel.tile, kernel.tile_loc)]


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
    if kernel.masked:  # every (group, m tile) pair; no worklist
        rows, ws = cuda_masked.grid_rows(tile.m), "0"
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
    if kernel.masked:
        return cuda_masked.args(tuple(args)), cuda_masked.bindings(tuple(binds))
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
    if kernel.masked:
        return cuda_masked.checks(tuple(checks))
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


def _b_feed(kernel: ir.Kernel, compute: DType) -> BFeed:
    if not _b_direct(kernel, compute):
        return BFeed.CONVERT
    return BFeed.LDMATRIX if kernel.rhs_operand.layout is Layout.NK else BFeed.LDMATRIX_TRANS


def _params(kernel: ir.Kernel) -> tuple[Param, ...]:
    """The GEMM entry points' parameters in launch order: the arrays the
    kernel reads and writes (absent scales and bias are not parameters),
    the grouped worklist, then the dims."""
    grouped = kernel.op is Op.GROUPED
    arrays = [("lhs", kernel.lhs.dtype), ("rhs", kernel.rhs_operand.dtype)]
    for side, scale in (("lhs_scale", kernel.lhs_scale), ("rhs_scale", kernel.rhs_scale)):
        if scale.enabled:
            arrays.append((side, scale.dtype))
    if kernel.bias.mode is not BiasMode.NONE:
        arrays.append(("bias", kernel.bias.dtype))
    out = [Param(f"const {CTYPE[dt]}* __restrict__", name, array(name)) for name, dt in arrays]
    out.append(Param(f"{CTYPE[kernel.out]}* __restrict__", "out", array("out")))
    if kernel.masked:
        return tuple(out) + tuple(Param(*p) for p in cuda_masked.params())
    if grouped:
        out.append(Param("const int* __restrict__", "workspace", array("workspace")))
    dims = ("m", "n", "k", "num_groups", "group_offset") if grouped else ("m", "n", "k")
    out += [Param("int", d, i32(d)) for d in dims]
    return tuple(out)


def _sm90_maps(kernel: ir.Kernel, t: Sm90Tile) -> tuple[TensorMapSpec, TensorMapSpec]:
    """The tensor maps of lhs and rhs (gg_gemm_sm90.cuh's boxes; bk elements
    make a 128-byte row): A is one {bk, 128} box of lhs [m, k] ([g * m, k]
    masked); B boxes of {bk, bn_out} rows of rhs [n, k] (one box a tile, or
    silu_mul's gate and up halves), or (16-bit only) {64 columns, bk k rows}
    of rhs [k, n]; grouped rhs adds the group as the outermost dimension (a
    box of 1)."""
    dt = kernel.lhs.dtype.numpy_name
    eb = kernel.lhs.dtype.bits // 8
    bk = SM90_ROW_BYTES // eb
    k, n, m, g = var("k"), var("n"), var("m"), var("g")
    # Masked: lhs [g, m, k] is g * m rows.
    lhs_rows = g * m if kernel.masked else m
    lhs = TensorMapSpec(dt, (k, lhs_rows), (k * eb,), (bk, t.bm))
    if t.mixed:
        # The weights as raw bytes: rows of k * bits / 8, a box of one K
        # tile's bytes x 128 rows (silu_mul: 8 rows, 16 boxes interleaving
        # gate and up), swizzled over that span (64 or 32 bytes).
        wb = kernel.rhs_operand.dtype.bits
        inner, raw = k if wb == 8 else div(k, 8 // wb), sm90_weight_row_bytes(wb)
        rows = 8 if kernel.epilogue.activation is Activation.SILU_MUL else SM90_BM
        if kernel.op is Op.GROUPED:
            rhs = TensorMapSpec("uint8", (inner, n, g), (inner, inner * n), (raw, rows, 1),
                                swizzle=raw)
        else:
            rhs = TensorMapSpec("uint8", (inner, n), (inner,), (raw, rows), swizzle=raw)
        return lhs, rhs
    if kernel.rhs_operand.layout is Layout.NK:
        inner, outer, box = k, n, (bk, t.bn_out)
    else:
        inner, outer, box = n, k, (64, bk)
    if kernel.op is Op.GROUPED:
        rhs = TensorMapSpec(dt, (inner, outer, g), (inner * eb, inner * outer * eb), (*box, 1))
    else:
        rhs = TensorMapSpec(dt, (inner, outer), (inner * eb,), box)
    return lhs, rhs


def _sm90_params(kernel: ir.Kernel, t: Sm90Tile) -> tuple[Param, ...]:
    """The Hopper entry points' parameters in launch order: the tensor maps
    of lhs and rhs (A and B are read through them alone), the scales, bias,
    out, the grouped worklist, the dims."""
    grouped = kernel.op is Op.GROUPED
    map_lhs, map_rhs = _sm90_maps(kernel, t)
    out = [Param("const __grid_constant__ CUtensorMap", "map_lhs", tensor_map("lhs", map_lhs)),
           Param("const __grid_constant__ CUtensorMap", "map_rhs", tensor_map("rhs", map_rhs))]
    for side, scale in (("lhs_scale", kernel.lhs_scale), ("rhs_scale", kernel.rhs_scale)):
        if scale.enabled:
            out.append(Param(f"const {CTYPE[scale.dtype]}* __restrict__", side, array(side)))
    if kernel.bias.mode is not BiasMode.NONE:
        out.append(Param(f"const {CTYPE[kernel.bias.dtype]}* __restrict__", "bias", array("bias")))
    out.append(Param(f"{CTYPE[kernel.out]}* __restrict__", "out", array("out")))
    if kernel.masked:  # masked_m, then n, k, g and m (the capacity)
        return tuple(out) + tuple(Param(*prm) for prm in cuda_masked.params())
    if grouped:
        out.append(Param("const int* __restrict__", "workspace", array("workspace")))
    dims = ("m", "n", "k", "num_groups", "group_offset") if grouped else ("m", "n", "k")
    out += [Param("int", d, i32(d)) for d in dims]
    return tuple(out)


def _sm90_entries(kernel: ir.Kernel, tiles: list[Sm90Tile],
                  params: tuple[Param, ...]) -> tuple[Entry, ...]:
    grouped = kernel.op is Op.GROUPED
    present = {p.name for p in params}
    args = ["gg_smem", "&map_lhs", "&map_rhs"]
    if "lhs_scale" in present or "rhs_scale" in present:
        args += [side if side in present else "nullptr" for side in ("lhs_scale", "rhs_scale")]
    args += ["bias" if "bias" in present else "nullptr", "out"]
    if kernel.masked:
        args.append("masked_m")
    elif grouped:
        args.append("workspace")
    args += [p.name for p in params if p.ctype == "int"]
    body_fn = "masked" if kernel.masked else "grouped" if grouped else "dense"
    out = []
    for t in tiles:
        rows = ("(group, m tile) pairs" if kernel.masked else "work items" if grouped
                else "m tiles")
        body = ("#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)",
                "  __trap();  // built without sm_90a: the launchers pick this entry on 9.0 only",
                "#else",
                *_call(f"gg::gemm::sm90::{body_fn}<Sm90Tile{t.index}>",
                       args),
                "#endif")
        out.append(Entry(
            comment=tuple(textwrap.wrap(
                f"(sm_90a) Hopper tile {t.index}: TMA + wgmma, warp specialized; a persistent "
                f"grid of min(SMs, tiles) blocks walks the {t.bm} x {t.bn} output tiles "
                f"({rows} x n tiles) in rasterized order.", COLUMNS - len("// "))),
            signature=_signature('extern "C" __global__ void __launch_bounds__(384, 1)',
                                 t.entry, [p.decl for p in params],
                                 "tensor maps of lhs and rhs, then the arrays and dims"),
            body=body))
    return tuple(out)


def _config(kernel: ir.Kernel, compute: DType, b_feed: BFeed, block_k: int) -> tuple[str, ...]:
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
        f"static constexpr bool kRhsNK = {_cbool(kernel.rhs_operand.layout is Layout.NK)};",
        f"static constexpr {g}BFeed kBFeed = {g}BFeed::{b_feed.value};",
        f"static constexpr {g}ScaleMode kLhsScale = {g}ScaleMode::{SCALE_MODE[ls.mode]};",
        f"static constexpr {g}Format kLhsScaleFormat = {g}Format::{fmt(ls)};",
        f"static constexpr int kLhsScaleBlockK = {per_k(ls)};",
        f"static constexpr {g}ScaleMode kRhsScale = {g}ScaleMode::{SCALE_MODE[rs.mode]};",
        f"static constexpr {g}Format kRhsScaleFormat = {g}Format::{fmt(rs)};",
        f"static constexpr int kRhsScaleBlockN = {rs.block_n if rs.mode is ScaleMode.BLOCK else 0};",
        f"static constexpr int kRhsScaleBlockK = {per_k(rs)};",
        f"static constexpr bool kFoldScales = {_cbool(fold_scales(kernel))};",
        f"static constexpr int kScaleBlockK = {block_k};",
        f"static constexpr {g}Bias kBias = {g}Bias::{BIAS[kernel.bias.mode]};",
        (f"static constexpr {g}Activation kActivation = {g}Activation::"
         f"{ACTIVATION[kernel.epilogue.activation]};"),
        f"static constexpr bool kHasAlpha = {_cbool(alpha is not None)};",
        f"static constexpr float kAlpha = {_cfloat(alpha if alpha is not None else 1.0)};",
    )


def _cbool(value: bool) -> str:
    return "true" if value else "false"


def _pack(items: list[str], indent: int, first: str, last: str) -> list[str]:
    """`first` + the comma-separated `items` + `last`, filled greedily into
    lines of at most COLUMNS, continuation lines at `indent`: how
    clang-format bin-packs a parameter or argument list it cannot fit on one
    line (tests/test_cuda_gemm_format.py checks the emitted files)."""
    lines: list[str] = []
    line = first
    for i, item in enumerate(items):
        text = item + (last if i == len(items) - 1 else ",")
        sep = "" if line == first or line.endswith("(") else " "
        if line.strip() and len(line) + len(sep) + len(text) > COLUMNS:
            lines.append(line)
            line = " " * indent + text
        else:
            line += sep + text
    lines.append(line)
    return lines


def _signature(head: str, name: str, params: list[str], note: str) -> tuple[str, ...]:
    """`head name(` then a comment line (which makes clang-format break
    there) and the parameters bin-packed. When the first line does not fit,
    clang-format breaks after the return type: the name starts a line of its
    own, indented after an attribute such as `__launch_bounds__(256)`."""
    first = f"{head} {name}("
    if len(first) <= COLUMNS:
        lines = [first]
        indent = INDENT
    else:
        name_indent = INDENT if head.endswith(")") else 0
        lines = [head, " " * name_indent + f"{name}("]
        indent = name_indent + INDENT
    lines.append(" " * indent + f"// {note}")
    return tuple(lines + _pack(params, indent, " " * indent, ") {"))


def _call(callee: str, args: list[str]) -> tuple[str, ...]:
    """`callee(args);` as a statement, arguments aligned after the paren."""
    first = f"  {callee}("
    one = first + ", ".join(args) + ");"
    if len(one) <= COLUMNS:
        return (one,)
    return tuple(_pack(args, len(first), first, ");"))


def _entries(kernel: ir.Kernel, tiles: list[TileConfig], params: tuple[Param, ...]) -> tuple[Entry, ...]:
    name = kernel.name
    grouped = kernel.op is Op.GROUPED
    out: list[Entry] = []
    if grouped and not kernel.masked:
        ot = CTYPE[kernel.out]
        out.append(Entry(
            comment=("(1a) out = existing_out, or zeros: rows this shard does not compute keep",
                     "these values; the GEMM overwrites the rows of its groups."),
            signature=_signature('extern "C" __global__ void', f"{name}_fill",
                                 [f"{ot}* __restrict__ out", f"const {ot}* __restrict__ existing_out",
                                  "long long total"], "existing_out may be null"),
            body=_call("gg::gemm::fill", ["out", "existing_out", "total"])))
        ws = ["const int* __restrict__ group_sizes", "int num_groups", "int group_offset", "int g",
              "int m", "int bm", "int* __restrict__ workspace"]
        out.append(Entry(
            comment=("(1b) The (local group, m tile) work items, by one thread (gg_gemm.cuh).",),
            signature=_signature('extern "C" __global__ void', f"{name}_worklist", ws,
                                 "one block of one thread"),
            body=_call("gg::gemm::worklist", [w.split()[-1] for w in ws])))
    present = {p.name for p in params}
    for t in tiles:
        args = ["gg_smem", "lhs", "rhs"]
        args += [a if a in present else "nullptr" for a in ("lhs_scale", "rhs_scale", "bias")]
        args += [p.name for p in params if p.name not in ("lhs", "rhs", "lhs_scale", "rhs_scale",
                                                            "bias")]
        rows = "work items" if grouped else "m tiles"
        body = "grouped" if grouped else "dense"
        if kernel.masked:
            rows, body = "(group, m tile) pairs", "masked"
        out.append(Entry(
            comment=tuple(textwrap.wrap(
                f"(2-4) Tile {t.index} ({t.label}): {t.bm} x {t.bn_out} output tiles; grid: n "
                f"tiles, {rows} over y and z.", COLUMNS - len("// "))),
            signature=_signature(f'extern "C" __global__ void __launch_bounds__({t.threads})',
                                 t.entry, [p.decl for p in params],
                                 "arrays in the launch contract's order, then the dims"),
            body=_call(f"gg::gemm::{body}<Tile{t.index}>", args)))
    return tuple(out)


def _algorithm(kernel: ir.Kernel, tiles: list[TileConfig], compute: DType, b_feed: BFeed,
               block_k: int) -> tuple[str, ...]:
    """The file comment's outline of what this kernel does."""
    name = kernel.name
    t = tiles[-1]
    if kernel.masked:
        one = ("the masked layout: lhs and out hold g groups of m rows (the capacity); each "
               "block takes a (group, m tile) pair and an n tile, computes the rows before "
               "the group's count masked_m[group] and writes zeros to the rows past it.")
    elif kernel.op is Op.GROUPED:
        one = (f"`{name}_fill` writes zeros (or existing_out) to out, and `{name}_worklist` turns "
               "group_sizes into (group, m tile) work items on the device; each GEMM block takes "
               "one item and an n tile, and stores only the rows of its group.")
    else:
        one = f"each block computes a {t.bm} x {t.bn_out} tile of out."
    two = (f"{t.stages}-stage cp.async pipeline: 16-byte copies of A and B tiles into shared "
           "memory, zero-filled past m, n and k.")
    rhs = kernel.rhs_operand
    if b_feed is BFeed.CONVERT:
        kn = " [k, n] -> [n, k]" if rhs.layout is Layout.KN else ""
        three = (f"each staged B tile is converted to a [bn][bk] {compute.value} tile "
                 f"({rhs.dtype.value}{kn}, exact), then ")
    else:
        three = f"ldmatrix{'.trans' if b_feed is BFeed.LDMATRIX_TRANS else ''} feeds the fragments, then "
    three += f"{MMA[compute]} accumulates in {'int' if compute is DType.INT8 else 'float'}"
    if block_k:
        three += (f"; every {block_k} of K the partial sums are multiplied by their scales and "
                  "added to an f32 accumulator (FP32 promotion)")
    three += "."
    fold = fold_scales(kernel)
    steps = []
    if any(s.enabled and s.placement is ir.Placement.EPILOGUE and not fold
           for s in (kernel.lhs_scale, kernel.rhs_scale)):
        steps.append("scales")
    if kernel.epilogue.alpha is not None:
        steps.append("alpha")
    if kernel.bias.mode is not BiasMode.NONE:
        steps.append("bias")
    if kernel.epilogue.activation is not Activation.NONE:
        steps.append(kernel.epilogue.activation.value)
    four = ("the epilogue stages the tile in shared memory and writes out row by row: "
            + (", ".join(steps) + ", then " if steps else "") + f"the cast to {kernel.out.value}.")
    lines: list[str] = []
    for i, text in enumerate((one, two, three, four), 1):
        wrapped = textwrap.wrap(text, COLUMNS - len("//   (1) "))
        lines.append(f"({i}) {wrapped[0]}")
        lines += [f"    {w}" for w in wrapped[1:]]
    return tuple(lines)


def plan(kernel: ir.Kernel, spec: ir.Spec) -> GemmPlan:
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
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
                              where(kernel.tile_loc), compute))
    args, binds = _args(kernel)
    k_align, n_align = _alignments(kernel, compute)
    mainloop = [s for s in (kernel.lhs_scale, kernel.rhs_scale)
                if s.enabled and s.placement is ir.Placement.MAINLOOP]
    # Promote at the gcd of the scale blocks so no partial sum straddles a
    # block of either side (the tile's K divides both: validated).
    block_k = 0
    for sc in mainloop:
        block_k = math.gcd(block_k, sc.block_k)
    b_feed = _b_feed(kernel, compute)
    params = _params(kernel)
    sm90_tiles: list[Sm90Tile] = []
    if uses_sm90(kernel, spec):
        for t, tile in zip(tiles, [r.tile for r in rules] + [kernel.tile]):
            sm90_tiles.append(_sm90_tile(kernel, tile, t.index, f"{t.entry}_sm90"))
    # Every LUT entry's Hopper tile takes the same parameters (its n only
    # shapes the B box, which the launcher encodes per tile).
    sm90_params = _sm90_params(kernel, sm90_tiles[-1]) if sm90_tiles else ()
    algorithm = _algorithm(kernel, tiles, compute, b_feed, block_k)
    if sm90_tiles:
        algorithm += _sm90_algorithm(kernel, sm90_tiles[-1])
    return GemmPlan(
        kernel=kernel, spec_path=spec.path, where=where(kernel.loc),
        summary=describe_kernel(kernel),
        spec_lines=_spec_lines(kernel),
        algorithm=algorithm,
        archs=target.cuda_archs if target else (),
        args=args, bindings=binds, checks=_checks(kernel, k_align, n_align),
        tiles=tuple(tiles), grouped=kernel.op is Op.GROUPED,
        lhs=kernel.lhs.dtype, rhs=kernel.rhs_operand.dtype, out=kernel.out,
        compute=compute, acc=DType.INT32 if compute is DType.INT8 else DType.F32,
        mma=MMA[compute], kstep=_kstep(compute),
        rhs_nk=kernel.rhs_operand.layout is Layout.NK, b_feed=b_feed,
        lhs_scale=kernel.lhs_scale, rhs_scale=kernel.rhs_scale,
        fold_scales=fold_scales(kernel), scale_block_k=block_k, bias=kernel.bias,
        activation=kernel.epilogue.activation, alpha=kernel.epilogue.alpha,
        k_align=k_align, n_align=n_align,
        n_out="gg_div(n, 2)" if kernel.epilogue.activation is Activation.SILU_MUL else "n",
        params=params, config=_config(kernel, compute, b_feed, block_k),
        entries=_entries(kernel, tiles, params),
        sm90_tiles=tuple(sm90_tiles), sm90_params=sm90_params,
        sm90_entries=_sm90_entries(kernel, sm90_tiles, sm90_params),
    )


def _sm90_algorithm(kernel: ir.Kernel, t: Sm90Tile) -> tuple[str, ...]:
    """The file comment's lines on the Hopper path."""
    if t.mixed:
        blocks = kernel.rhs_scale.enabled and kernel.rhs_scale.placement is ir.Placement.MAINLOOP
        row = t.b_stage // SM90_BM  # bytes of a weight row of a K tile
        text = (f"on sm_90a (compute capability 9.0) the launchers run the Hopper body's "
                f"weight-only tile instead (gg_gemm_sm90_mixed.cuh, docs/cuda-hopper.md): "
                f"{t.threads} threads, a producer warpgroup issuing TMA loads of {t.bm} x "
                f"{t.bk} lhs boxes (128-byte swizzle) and 128 x {row}-byte weight "
                f"boxes ({row}-byte swizzle) into {t.stages} stages; two consumer "
                f"warpgroups, the operands swapped, widen their 64 weight rows of each K tile "
                f"to {kernel.lhs.dtype.value} in registers and issue wgmma {t.wgmma} on the "
                f"tile's lhs rows, then store the transposed fragment; a persistent grid of "
                f"min(SMs, tiles) blocks."
                + (" The K tiles of each scale block are promoted into an f32 accumulator "
                   "times the weight rows' scales." if blocks else "")
                + (" silu_mul: a stage's weight rows are 8 gate rows over the 8 matching up "
                   "rows, 16 boxes, so each thread holds both rows of its output column."
                   if kernel.epilogue.activation is Activation.SILU_MUL else ""))
        wrapped = textwrap.wrap(text, COLUMNS - len("//   (1) "))
        return (f"(5) {wrapped[0]}", *(f"    {w}" for w in wrapped[1:]))
    promote = ""
    if kernel.lhs.dtype.bits == 8:
        blocks = any(s.enabled and s.placement is ir.Placement.MAINLOOP
                     for s in (kernel.lhs_scale, kernel.rhs_scale))
        promote = (" Each K tile's wgmma sums are promoted into an f32 accumulator"
                   + (", times the tile's block scales" if blocks else "") + ".")
    if kernel.epilogue.activation is Activation.SILU_MUL:
        promote += (f" silu_mul: a tile's B is {t.bn_out} gate columns over the matching "
                    f"{t.bn_out} up columns (n / 2 on), so each thread holds both halves of "
                    f"its outputs.")
    text = (f"on sm_90a (compute capability 9.0) the launchers run the Hopper body instead "
            f"(gg_gemm_sm90.cuh, docs/cuda-hopper.md): {t.threads} threads, a producer "
            f"warpgroup issuing TMA loads of {t.bm} x {t.bk} A and {t.bn} x {t.bk} B boxes "
            f"(128-byte swizzle) into {t.stages} stages, two consumer warpgroups issuing wgmma "
            f"{t.wgmma}; a persistent grid of min(SMs, tiles) blocks.{promote}")
    wrapped = textwrap.wrap(text, COLUMNS - len("//   (1) "))
    return (f"(5) {wrapped[0]}", *(f"    {w}" for w in wrapped[1:]))


def fold_scales(kernel: ir.Kernel) -> bool:
    """GemmPlan.fold_scales: a main-loop scale, an epilogue scale, and e8m0."""
    return ir.fold_scales_of(kernel)


def _lhs_shape(kernel: ir.Kernel) -> str:
    return "[g, m, k] (masked: m rows of capacity per group)" if kernel.masked else "[m, k]"


def _spec_lines(kernel: ir.Kernel) -> tuple[str, ...]:
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
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    p = plan(kernel, spec)
    name = kernel.name
    variants = []
    for t in p.tiles:
        gemm_args = [prm.launch for prm in p.params]
        rows = "work items" if p.grouped else "m tiles"
        if kernel.masked:
            rows = "(group, m tile) pairs"
        gemm = Step(t.entry, (t.grid_x, t.grid_y, t.grid_z), t.threads, t.smem_bytes,
                    tuple(gemm_args), f"{t.bm}x{t.bn_out} output tiles: n tiles, {rows} over y and z")
        steps: list[Step] = []
        if p.grouped and not kernel.masked:
            steps.append(Step(f"{name}_fill", ("gg_min(gg_cdiv(m * n_out, 256), 4096)", "1", "1"),
                              256, 0, (array("out"), array("existing_out"), i64("m * n_out")),
                              "out = existing_out or zeros"))
            steps.append(Step(f"{name}_worklist", ("1", "1", "1"), 1, 0,
                              (array("group_sizes"), i32("num_groups"), i32("group_offset"),
                               i32("g"), i32("m"), i32(str(t.bm)), array("workspace")),
                              "the (group, m tile) work items"))
        steps.append(gemm)
        sm90: list[Step] = []
        sm90_when = None
        workspace = t.workspace_ints
        if p.sm90_tiles:
            h = p.sm90_tiles[t.index]
            maps = dict(zip(("lhs", "rhs"), _sm90_maps(kernel, h)))
            args = tuple(tensor_map(a.name, maps[a.name]) if a.tmap is not None else a
                         for a in (prm.launch for prm in p.sm90_params))
            if p.grouped and not kernel.masked:
                sm90 += [steps[0], Step(f"{name}_worklist", ("1", "1", "1"), 1, 0,
                                        (array("group_sizes"), i32("num_groups"),
                                         i32("group_offset"), i32("g"), i32("m"),
                                         i32(str(h.bm)), array("workspace")),
                                        f"the (group, {h.bm}-row tile) work items")]
                # The worklist of the smaller of the two row tiles bounds both.
                workspace = (f"2 + num_groups + 2 * (gg_cdiv(m, {min(t.bm, h.bm)}) + g)")
            sm90.append(Step(h.entry, (h.grid_x, "1", "1"), h.threads, h.smem_bytes, args,
                             f"{h.bm}x{h.bn} tiles, TMA + wgmma: a persistent grid of "
                             "min(SMs, tiles) blocks"))
            # Compute capability 9.0 (the device has sm_90a's wgmma); a grouped
            # call with g = 0 has no rhs to map (and nothing to multiply).
            conds = [var("sm").eq(90), var("num_sms").gt(0)]
            if p.grouped:
                conds.append(var("g").gt(0))
            rs = kernel.rhs_scale
            if (kernel.epilogue.activation is Activation.SILU_MUL and rs.mode is ScaleMode.BLOCK
                    and not h.mixed):
                # The up half starts at n / 2: in one rhs scale block per
                # tile only when n / 2 is a whole number of blocks (else
                # the mma.sync body, which scales column by column).
                conds.append((var("n") % (2 * rs.block_n)).eq(0))
            sm90_when = all_of(*conds)
        variants.append(Variant(t.index, t.when, t.where, f"{t.bm}x{t.bn}x{t.bk}",
                                tuple(steps), workspace, tuple(sm90), sm90_when,
                                p.sm90_tiles[t.index].label if p.sm90_tiles else ""))
    entries = tuple(t.entry for t in p.tiles) + tuple(h.entry for h in p.sm90_tiles)
    if p.grouped and not kernel.masked:
        entries = (f"{name}_fill", f"{name}_worklist") + entries
    return LaunchPlan(
        kernel=kernel, template="cuda/gemm.cu.j2", detail=p, spec_path=spec.path,
        where=p.where, summary=p.summary, spec_lines=p.spec_lines, archs=p.archs, args=p.args,
        bindings=p.bindings, derived=(("n_out", p.n_out),), checks=p.checks,
        variants=tuple(variants), entries=entries,
        empty=cuda_masked.EMPTY if kernel.masked else "m == 0",
    )
