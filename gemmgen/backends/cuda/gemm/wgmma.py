"""The Hopper body of the tile GEMM: TMA + wgmma on sm_90a (a `Body` of bodies.py).

A kernel that gets it on a declared arch (ir.Kernel.uses_wgmma: sm_90a) also
gets, per LUT entry, an `Sm90Tile` and a `<entry>_sm90` entry point of
gg_gemm_sm90.cuh (TMA + wgmma, 384 threads, a persistent grid), taking
tensor maps of lhs and rhs; a weight-only kernel (ir.Kernel.wgmma_mixed)
gets the weight-only tile of gg_gemm_sm90_mixed.cuh instead. The launchers
take its steps on compute capability 9.0 (docs/cuda-hopper.md, "The
generated kernels"); templates/cuda/gemm_wgmma.cu.j2 prints its tiles.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from gemmgen import ir
from gemmgen.archs import shared_memory_limit
from gemmgen.backends.cuda.common import (
    CTYPE, Step, TensorMapSpec, all_of, array, div, i32, tensor_map, var,
)
from gemmgen.backends.cuda.gemm import masked as cuda_masked
from gemmgen.backends.cuda.gemm.body import Body, BodyLaunch, BodyPlan
from gemmgen.backends.cuda.gemm.contract import worklist_step
from gemmgen.backends.cuda.gemm.mma_sync import GLOBALS, TileConfig
from gemmgen.backends.cuda.gemm.text import COLUMNS, Entry, Param, call, signature
from gemmgen.ir import BiasMode, DType, Layout, Op, ScaleMode

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


def _widths(kernel: ir.Kernel, tile: ir.Tile) -> tuple[int, ...]:
    """The tile's candidate n, widest first: the LUT entry's n when a wgmma
    N of 64..256 in steps of 64 (at most 128 for FP8, whose promoted tile
    holds two fragments), else 128, then the narrower ones; with rhs block
    scales only the n whose output columns divide the scale block (one scale
    per tile, per half for silu_mul). silu_mul splits n into a gate and an
    up half, each a whole number of 64-column boxes for rhs [k, n]
    (swiglu_clamped likewise; pairs=interleaved reads bn columns 2 n0.. in
    order, so its tile lies in one scale block when bn divides it)."""
    silu = kernel.epilogue.activation.paired
    widest = 128 if kernel.lhs.dtype.bits == 8 else 256
    first = tile.n if tile.n in (64, 128, 192, 256) and tile.n <= widest else 128
    out = tuple(dict.fromkeys((first, 128, 64)))
    if silu and kernel.rhs_operand.layout is Layout.KN:
        out = tuple(dict.fromkeys(bn if bn % 128 == 0 else 128 for bn in out))
    rs = kernel.rhs_scale
    if rs.mode is ScaleMode.BLOCK:
        half = kernel.epilogue.halves
        out = tuple(bn for bn in out if rs.block_n % (bn // 2 if half else bn) == 0)
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


def tiles_expr(kernel: ir.Kernel, bm: int, bn_out: int) -> str:
    """The output tiles of a Hopper launch (the persistent grid's work)."""
    if kernel.masked:  # every (group, m tile) pair
        return f"g * gg_cdiv(m, {bm}) * gg_cdiv(n_out, {bn_out})"
    if kernel.op is Op.GROUPED:
        return f"(gg_cdiv(m, {bm}) + g) * gg_cdiv(n_out, {bn_out})"
    return f"gg_cdiv(m, {bm}) * gg_cdiv(n_out, {bn_out})"


def _mixed_tile(kernel: ir.Kernel, tile: ir.Tile, index: int, entry: str) -> Sm90Tile:
    """The weight-only tile of a LUT entry: the narrowest bm of
    SM90_MIXED_BMS that holds the entry's m rows (a decode entry of m <= 16
    streams the weights with 16-row tiles), with the most stages that fit."""
    bm = next((b for b in SM90_MIXED_BMS if b >= tile.m), SM90_MIXED_BMS[-1])
    wb = kernel.rhs_operand.dtype.bits
    silu = kernel.epilogue.activation.paired  # halves only (runs_mixed)
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
                    grid_x=f"gg_min(num_sms, {tiles_expr(kernel, bm, bn_out)})",
                    bm=bm, mixed=True)


def _tile(kernel: ir.Kernel, tile: ir.Tile, index: int, entry: str) -> Sm90Tile:
    """The widest n of `_widths` with the most stages (up to
    SM90_MAX_STAGES) that fit sm_90a's opt-in shared memory; a narrower n
    when not even 2 stages fit."""
    if kernel.wgmma_mixed:
        return _mixed_tile(kernel, tile, index, entry)
    limit = shared_memory_limit(SM90_ARCH)
    silu = kernel.epilogue.activation.paired
    for bn in _widths(kernel, tile):
        bn_out = bn // 2 if silu else bn
        fits = [st for st in range(2, SM90_MAX_STAGES + 1)
                if sm90_smem_bytes(bn, st, kernel.out, bn_out) <= limit]
        if fits:
            break
    stages = max(fits)
    ob = kernel.out.bits // 8
    c_stride = bn_out + 16 // ob
    tiles = tiles_expr(kernel, SM90_BM, bn_out)
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


def maps(kernel: ir.Kernel, t: Sm90Tile,
         weight_rows: int | None = None) -> tuple[TensorMapSpec, TensorMapSpec]:
    """The tensor maps of lhs and rhs (gg_gemm_sm90.cuh's boxes; bk elements
    make a 128-byte row): A is one {bk, 128} box of lhs [m, k] ([g * m, k]
    masked); B boxes of {bk, bn_out} rows of rhs [n, k] (one box a tile, or
    silu_mul's gate and up halves), or {a 128-byte row of columns, bk k rows}
    of rhs [k, n] (64 16-bit columns; 128 FP8 ones, on sm_100a only); grouped rhs adds the group as the outermost dimension (a
    box of 1). `weight_rows`: the raw weight box's rows of a weight-only
    tile when not the Hopper boxes' (a CTA's half of the sm_100a 2-CTA
    tile's)."""
    k, n, m, g = var("k"), var("n"), var("m"), var("g")
    # Masked: lhs [g, m, k] is g * m rows.
    lhs_rows = g * m if kernel.masked else m
    if kernel.lhs.dtype is DType.FP4:
        # Packed fp4 on the sm_100a block-scaled body (fp4 x fp4, K-major
        # both): bytes, rows of k / 2, boxes of one 128-byte K tile row.
        kb = div(k, 2)
        lhs = TensorMapSpec("uint8", (kb, lhs_rows), (kb,), (SM90_ROW_BYTES, t.bm))
        if kernel.op is Op.GROUPED:
            rhs = TensorMapSpec("uint8", (kb, n, g), (kb, kb * n), (SM90_ROW_BYTES, t.bn_out, 1))
        else:
            rhs = TensorMapSpec("uint8", (kb, n), (kb,), (SM90_ROW_BYTES, t.bn_out))
        return lhs, rhs
    dt = kernel.lhs.dtype.numpy_name
    eb = kernel.lhs.dtype.bits // 8
    bk = SM90_ROW_BYTES // eb
    lhs = TensorMapSpec(dt, (k, lhs_rows), (k * eb,), (bk, t.bm))
    if t.mixed:
        # The weights as raw bytes: rows of k * bits / 8, a box of one K
        # tile's bytes x 128 rows (silu_mul: 8 rows, 16 boxes interleaving
        # gate and up), swizzled over that span (64 or 32 bytes).
        wb = kernel.rhs_operand.dtype.bits
        inner, raw = k if wb == 8 else div(k, 8 // wb), sm90_weight_row_bytes(wb)
        rows = (weight_rows if weight_rows is not None
                else 8 if kernel.epilogue.activation.paired else SM90_BM)
        if kernel.op is Op.GROUPED:
            rhs = TensorMapSpec("uint8", (inner, n, g), (inner, inner * n), (raw, rows, 1),
                                swizzle=raw)
        else:
            rhs = TensorMapSpec("uint8", (inner, n), (inner,), (raw, rows), swizzle=raw)
        return lhs, rhs
    if kernel.rhs_operand.layout is Layout.NK:
        inner, outer, box = k, n, (bk, t.bn_out)
    else:
        inner, outer, box = n, k, (SM90_ROW_BYTES // eb, bk)  # a 128-byte row of columns
    if kernel.op is Op.GROUPED:
        rhs = TensorMapSpec(dt, (inner, outer, g), (inner * eb, inner * outer * eb), (*box, 1))
    else:
        rhs = TensorMapSpec(dt, (inner, outer), (inner * eb,), box)
    return lhs, rhs


def tma_params(kernel: ir.Kernel, t: Sm90Tile) -> tuple[Param, ...]:
    """The Hopper entry points' parameters in launch order: the tensor maps
    of lhs and rhs (A and B are read through them alone), the scales, bias,
    out, the grouped worklist, the dims."""
    grouped = kernel.op is Op.GROUPED
    map_lhs, map_rhs = maps(kernel, t)
    out = [Param("const __grid_constant__ CUtensorMap", "map_lhs", tensor_map("lhs", map_lhs))]
    if kernel.lhs.dtype.is_fp8 and kernel.rhs_operand.dtype is DType.FP4:
        # W4A8 on the sm_100a block-scaled body: the producer warp reads the
        # packed weights through a pointer (kind::mxf8f6f4's padded layout);
        # 16-bit activations with fp4 weights (weight-only) take a map.
        out.append(Param(f"const {CTYPE[DType.FP4]}* __restrict__", "rhs", array("rhs")))
    else:
        out.append(Param("const __grid_constant__ CUtensorMap", "map_rhs",
                         tensor_map("rhs", map_rhs)))
    for side, scale in (("lhs_scale", kernel.lhs_scale), ("rhs_scale", kernel.rhs_scale)):
        if scale.enabled:
            out.append(Param(f"const {CTYPE[scale.dtype]}* __restrict__", side, array(side)))
    # NVFP4's global scales (the sm_100a block-scaled body), as mma_sync's.
    for name, scale in zip(GLOBALS, (kernel.lhs_scale, kernel.rhs_scale), strict=True):
        if scale.global_scale:
            out.append(Param(f"const {CTYPE[DType.F32]}* __restrict__", name, array(name)))
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


def tma_entries(kernel: ir.Kernel, tiles: list, params: tuple[Param, ...], *, namespace: str,
                struct: str, guard: str, archs: tuple[str, ...], title: str,
                what: str) -> tuple[Entry, ...]:
    """The entry points of a TMA body's tiles (this one's and the sm_100a
    body's): each calls gg::gemm::<namespace>::dense / grouped / masked on
    its tile struct `<struct><index>`, and traps where the feature macro
    `guard` is absent (a build for none of `archs`)."""
    grouped = kernel.op is Op.GROUPED
    present = {p.name for p in params}
    args = ["gg_smem", "&map_lhs", "&map_rhs" if "map_rhs" in present else "rhs"]
    if "lhs_scale" in present or "rhs_scale" in present:
        args += [side if side in present else "nullptr" for side in ("lhs_scale", "rhs_scale")]
    args += ["bias" if "bias" in present else "nullptr", "out"]
    if kernel.masked:
        args.append("masked_m")
    elif grouped:
        args.append("workspace")
    args += [p.name for p in params if p.ctype == "int"]
    if present & set(GLOBALS):  # trailing parameters, null by default
        args += [a if a in present else "nullptr" for a in GLOBALS]
    body_fn = "masked" if kernel.masked else "grouped" if grouped else "dense"
    arch = " / ".join(archs)
    cc = " / ".join(f"{ir.arch_number(a) // 10}.{ir.arch_number(a) % 10}" for a in archs)
    out = []
    for t in tiles:
        rows = ("(group, m tile) pairs" if kernel.masked else "work items" if grouped
                else "m tiles")
        body = (f"#if defined(__CUDA_ARCH__) && !defined({guard})",
                f"  __trap();  // built without {arch}: the launchers pick this entry on {cc} only",
                "#else",
                *call(f"gg::gemm::{namespace}::{body_fn}<{struct}{t.index}>", args),
                "#endif")
        grid = f"a persistent grid of min(SMs, tiles) blocks walks the {t.bm} x {t.bn} output tiles"
        if getattr(t, "pair", False):  # the sm_100a 2-CTA tile: clusters of cluster_n pairs
            c = 2 * t.cluster_n
            grid = (f"a persistent grid of {c} x min(SMs / {c}, tiles) blocks in clusters of {c} "
                    f"(CTA pairs) walks the {t.bm} x {t.bn} output tiles" if c == 2 else
                    f"a persistent grid of {c} x min(SMs / {c}, units) blocks in clusters of {c} "
                    f"({t.cluster_n} CTA pairs sharing A) walks units of {t.cluster_n} {t.bm} x "
                    f"{t.bn} output tiles")
        out.append(Entry(
            comment=tuple(textwrap.wrap(
                f"({arch}) {title} tile {t.index}: {what} {grid} ({rows} x n tiles) in "
                f"rasterized order.", COLUMNS - len("// "))),
            signature=signature(f'extern "C" __global__ void __launch_bounds__({t.threads}, 1)',
                                t.entry, [p.decl for p in params],
                                "tensor maps of lhs and rhs, then the arrays and dims"),
            body=body))
    return tuple(out)


def _algorithm(kernel: ir.Kernel, t: Sm90Tile, number: int) -> tuple[str, ...]:
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
                + (f" {kernel.epilogue.activation.value}: a stage's weight rows are 8 gate "
                   "rows over the 8 matching up rows, 16 boxes, so each thread holds both "
                   "rows of its output column."
                   if kernel.epilogue.activation.paired else ""))
        wrapped = textwrap.wrap(text, COLUMNS - len("//   (1) "))
        return (f"({number}) {wrapped[0]}", *(f"    {w}" for w in wrapped[1:]))
    promote = ""
    if kernel.lhs.dtype.bits == 8:
        blocks = any(s.enabled and s.placement is ir.Placement.MAINLOOP
                     for s in (kernel.lhs_scale, kernel.rhs_scale))
        promote = (" Each K tile's wgmma sums are promoted into an f32 accumulator"
                   + (", times the tile's block scales" if blocks else "") + ".")
    act = kernel.epilogue.activation.value
    if kernel.epilogue.interleaved:
        promote += (f" {act} (pairs=interleaved): a tile's B is the {t.bn} columns 2 n0.. in "
                    f"order, each thread holding the adjacent gate and up columns of its "
                    f"outputs.")
    elif kernel.epilogue.activation.paired:
        promote += (f" {act}: a tile's B is {t.bn_out} gate columns over the matching "
                    f"{t.bn_out} up columns (n / 2 on), so each thread holds both halves of "
                    f"its outputs.")
    text = (f"on sm_90a (compute capability 9.0) the launchers run the Hopper body instead "
            f"(gg_gemm_sm90.cuh, docs/cuda-hopper.md): {t.threads} threads, a producer "
            f"warpgroup issuing TMA loads of {t.bm} x {t.bk} A and {t.bn} x {t.bk} B boxes "
            f"(128-byte swizzle) into {t.stages} stages, two consumer warpgroups issuing wgmma "
            f"{t.wgmma}; a persistent grid of min(SMs, tiles) blocks.{promote}")
    wrapped = textwrap.wrap(text, COLUMNS - len("//   (1) "))
    return (f"({number}) {wrapped[0]}", *(f"    {w}" for w in wrapped[1:]))


def _plan(kernel: ir.Kernel, spec: ir.Spec, tiles: tuple[TileConfig, ...],
          lut: tuple[ir.Tile, ...], number: int) -> BodyPlan:
    """An Sm90Tile per LUT entry, the entry points (every LUT entry's tile
    takes the same parameters: its n only shapes the B box, which the
    launcher encodes per tile) and the algorithm item."""
    own = tuple(_tile(kernel, tile, t.index, f"{t.entry}_sm90") for t, tile in zip(tiles, lut))
    params = tma_params(kernel, own[-1])
    entries = tma_entries(kernel, list(own), params, namespace="sm90", struct="Sm90Tile",
                          guard="__CUDA_ARCH_FEAT_SM90_ALL", archs=(SM90_ARCH,), title="Hopper",
                          what="TMA + wgmma, warp specialized;")
    return BodyPlan(body=BODY, tiles=own, params=params, entries=entries,
                    algorithm=_algorithm(kernel, own[-1], number))


def _launch(kernel: ir.Kernel, bp: BodyPlan, t: TileConfig,
            steps: tuple[Step, ...]) -> BodyLaunch:
    """The Hopper launches of LUT entry `t` (after the mma.sync fill when
    grouped, with a worklist of its own row tiles), and when: compute
    capability 9.0 (the device has sm_90a's wgmma)."""
    h = bp.tiles[t.index]
    grouped = kernel.op is Op.GROUPED
    tmaps = dict(zip(("lhs", "rhs"), maps(kernel, h)))
    args = tuple(tensor_map(a.name, tmaps[a.name]) if a.tmap is not None else a
                 for a in (prm.launch for prm in bp.params))
    out: list[Step] = []
    worklist_bm = None
    if grouped and not kernel.masked:
        out += [steps[0], worklist_step(kernel.name, h.bm, f"the (group, {h.bm}-row tile) work items")]
        worklist_bm = h.bm
    out.append(Step(h.entry, (h.grid_x, "1", "1"), h.threads, h.smem_bytes, args,
                    f"{h.bm}x{h.bn} tiles, TMA + wgmma: a persistent grid of "
                    "min(SMs, tiles) blocks"))
    # A grouped call with g = 0 has no rhs to map (and nothing to multiply).
    conds = [var("sm").eq(90), var("num_sms").gt(0)]
    if grouped:
        conds.append(var("g").gt(0))
    rs = kernel.rhs_scale
    if kernel.epilogue.halves and rs.mode is ScaleMode.BLOCK and not h.mixed:
        # The up half starts at n / 2: in one rhs scale block per tile only
        # when n / 2 is a whole number of blocks (else the mma.sync body,
        # which scales column by column).
        conds.append((var("n") % (2 * rs.block_n)).eq(0))
    return BodyLaunch(tuple(out), all_of(*conds), h.label, worklist_bm)


BODY = Body(name="wgmma", title="Hopper", arch=SM90_ARCH, cc="9.0",
            what="TMA + wgmma, tensor maps of lhs and rhs, a persistent grid of the device's SMs",
            template="cuda/gemm_wgmma.cu.j2", applies=uses_sm90, plan=_plan, launch=_launch)
