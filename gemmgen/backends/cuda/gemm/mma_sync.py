"""The mma.sync body of the tile GEMM (sm_80 and later): every kernel has it.

The kernel body is C++ shared by every tile GEMM (runtime/cuda/gg_gemm.cuh,
with gg_widen.cuh, gg_scales.cuh and gg_epilogue.cuh), templated on the
`Config` (contract.py) and one struct per tile. This module plans the tiles
(`TileConfig`: warp layout, fragment counts, shared-memory strides and
bytes), the entry points (fill and worklist when grouped, one GEMM per tile)
and the first lines of the file comment's algorithm. Its launches are each
`Variant`'s own steps, which every device runs unless a body of bodies.py
takes the tile on its own device (docs/architecture.md, "How to add a CUDA
body").
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from gemmgen import ir
from gemmgen.backends.cuda.common import CTYPE, LIMITS, WARP, array, i32
from gemmgen.backends.cuda.gemm import masked as cuda_masked
from gemmgen.backends.cuda.gemm.contract import BFeed, compute_dtype, fold_scales
from gemmgen.backends.cuda.gemm.text import COLUMNS, Entry, Param, call, signature
from gemmgen.ir import Activation, BiasMode, DType, Layout, Op

MMA = {DType.BF16: "mma_m16n8k16_bf16", DType.F16: "mma_m16n8k16_f16",
       DType.E4M3: "mma_m16n8k32_e4m3", DType.E5M2: "mma_m16n8k32_e5m2",
       DType.INT8: "mma_m16n8k32_s8", DType.FP4: "mma_m16n8k64_fp4"}

# NVFP4's global scales (`global=f32`): arrays of the entry after the scales,
# the trailing arguments of gg::gemm's dense / grouped / masked.
GLOBALS = ("lhs_global_scale", "rhs_global_scale")


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


def kstep(compute: DType) -> int:
    """K of one MMA: 32 bytes of each A row."""
    return 256 // compute.bits


def warp_tile(kernel: ir.Kernel, tile: ir.Tile) -> tuple[int, int]:
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


def tile_problem(kernel: ir.Kernel, tile: ir.Tile) -> str | None:
    compute = compute_dtype(kernel)
    assert compute is not None
    ks = kstep(compute)
    if tile.k % ks:
        return f"tile k={tile.k} must be a multiple of {ks} (one {compute.value} MMA)"
    if tile.m % 16 or tile.n % 16:
        return f"tile {tile.m}x{tile.n} must be a multiple of 16 in m and n"
    wm, wn = warp_tile(kernel, tile)
    if wm % 16 or wn % 16:
        return f"warp tile {wm}x{wn} must be a multiple of 16"
    warps = (tile.m // wm) * (tile.n // wn)
    if warps * WARP > 1024:
        return f"tile {tile.m}x{tile.n} with warp tile {wm}x{wn} needs {warps} warps (> 32)"
    if kernel.threads is not None and kernel.threads != warps * WARP:
        return (f"threads {kernel.threads} disagrees with {warps} warps of the "
                f"{wm}x{wn} warp tile")
    return None


def tile_config(kernel: ir.Kernel, tile: ir.Tile, index: int, entry: str, when: str,
                 where: str, compute: DType) -> TileConfig:
    ks = kstep(compute)
    wm, wn = warp_tile(kernel, tile)
    a_stride = tile.k * compute.bits // 8 + 16
    rhs = kernel.rhs_operand.dtype
    if kernel.rhs_operand.layout is Layout.NK:
        b_rows, b_row_bytes = tile.n, tile.k * rhs.bits // 8
    else:
        b_rows, b_row_bytes = tile.k, tile.n * rhs.bits // 8
    b_raw_stride = b_row_bytes + 16
    direct = b_direct(kernel, compute)
    b_conv_stride = tile.k * compute.bits // 8 + 16
    b_conv_bytes = 0 if direct else tile.n * b_conv_stride
    a_stage = tile.m * a_stride
    b_stage = b_rows * b_raw_stride
    pipeline = kernel.stages * (a_stage + b_stage) + b_conv_bytes
    c_stride = tile.n + 4
    epilogue = tile.m * c_stride * 4
    bn_out = tile.n // 2 if kernel.epilogue.activation.paired else tile.n
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


def w4a8(kernel: ir.Kernel, compute: DType | None) -> bool:
    """Whether the kernel multiplies e4m3 by packed fp4 (W4A8): the
    block-scaled body's e4m3 x e2m1 MMA only, B unpacked from the staged
    packed tile into registers (BFeed.UNPACK_FP4)."""
    return compute is DType.E4M3 and kernel.rhs_operand.dtype is DType.FP4


def b_direct(kernel: ir.Kernel, compute: DType) -> bool:
    """Whether B goes to the fragments from its staged tile (no conversion
    pass): ldmatrix as staged, or W4A8's unpacking loads."""
    if w4a8(kernel, compute):
        return True
    if kernel.rhs_operand.dtype is not compute:
        return False
    return kernel.rhs_operand.layout is Layout.NK or compute.bits == 16


def b_feed(kernel: ir.Kernel, compute: DType) -> BFeed:
    if w4a8(kernel, compute):
        return BFeed.UNPACK_FP4
    if not b_direct(kernel, compute):
        return BFeed.CONVERT
    return BFeed.LDMATRIX if kernel.rhs_operand.layout is Layout.NK else BFeed.LDMATRIX_TRANS


def params(kernel: ir.Kernel) -> tuple[Param, ...]:
    """The GEMM entry points' parameters in launch order: the arrays the
    kernel reads and writes (absent scales and bias are not parameters),
    the grouped worklist, then the dims."""
    grouped = kernel.op is Op.GROUPED
    arrays = [("lhs", kernel.lhs.dtype), ("rhs", kernel.rhs_operand.dtype)]
    for side, scale in (("lhs_scale", kernel.lhs_scale), ("rhs_scale", kernel.rhs_scale)):
        if scale.enabled:
            arrays.append((side, scale.dtype))
    for name, scale in zip(GLOBALS, (kernel.lhs_scale, kernel.rhs_scale), strict=True):
        if scale.global_scale:
            arrays.append((name, DType.F32))
    if kernel.rhs_scale.zero is not None:
        arrays.append(("rhs_zero", kernel.rhs_scale.zero))
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


def entries(kernel: ir.Kernel, tiles: list[TileConfig], params: tuple[Param, ...],
            struct: str = "Tile", suffix: str = "") -> tuple[Entry, ...]:
    """The entry points: fill and worklist (grouped), then one GEMM per tile,
    `<entry><suffix>` calling the body on `<struct><index>` (another body's
    entries over the same tiles: sm120.py), each laid out for its own
    names."""
    name = kernel.name
    grouped = kernel.op is Op.GROUPED
    out: list[Entry] = []
    if grouped and not kernel.masked:
        ot = CTYPE[kernel.out]
        out.append(Entry(
            comment=("(1a) out = existing_out, or zeros: rows this shard does not compute keep",
                     "these values; the GEMM overwrites the rows of its groups."),
            signature=signature('extern "C" __global__ void', f"{name}_fill",
                                 [f"{ot}* __restrict__ out", f"const {ot}* __restrict__ existing_out",
                                  "long long total"], "existing_out may be null"),
            body=call("gg::gemm::fill", ["out", "existing_out", "total"])))
        ws = ["const int* __restrict__ group_sizes", "int num_groups", "int group_offset", "int g",
              "int m", "int bm", "int* __restrict__ workspace"]
        out.append(Entry(
            comment=("(1b) The (local group, m tile) work items, by one thread (gg_gemm.cuh).",),
            signature=signature('extern "C" __global__ void', f"{name}_worklist", ws,
                                 "one block of one thread"),
            body=call("gg::gemm::worklist", [w.split()[-1] for w in ws])))
    for t in tiles:
        rows = "work items" if grouped else "m tiles"
        if kernel.masked:
            rows = "(group, m tile) pairs"
        if (compute_dtype(kernel) is DType.FP4 or w4a8(kernel, compute_dtype(kernel))) \
                and struct == "Tile":
            # fp4 x fp4 and W4A8 multiply on the block-scaled MMAs alone (sm120.py).
            body = ("  // fp4 has no mma.sync: the launchers take the block-scaled entry (sm_120a /",
                    "  // sm_121a) and refuse any other device.",
                    *call("gg::gemm::unused", [p.name for p in params]),
                    "  __trap();")
        else:
            body = gemm_call(kernel, params, f"{struct}{t.index}")
        out.append(Entry(
            comment=tuple(textwrap.wrap(
                f"(2-4) Tile {t.index} ({t.label}): {t.bm} x {t.bn_out} output tiles; grid: n "
                f"tiles, {rows} over y and z.", COLUMNS - len("// "))),
            signature=signature(f'extern "C" __global__ void __launch_bounds__({t.threads})',
                                 t.entry + suffix, [p.decl for p in params],
                                 "arrays in the launch contract's order, then the dims"),
            body=body))
    return tuple(out)


def gemm_call(kernel: ir.Kernel, params: tuple[Param, ...], tile: str) -> tuple[str, ...]:
    """The statement of a GEMM entry point: gg::gemm's dense, grouped or
    masked on the tile struct `tile`, with the entry's parameters."""
    present = {p.name for p in params}
    args = ["gg_smem", "lhs", "rhs"]
    args += [a if a in present else "nullptr" for a in ("lhs_scale", "rhs_scale", "bias")]
    args += [p.name for p in params if p.name not in ("lhs", "rhs", "lhs_scale", "rhs_scale",
                                                        "bias", *GLOBALS, "rhs_zero")]
    if present & {*GLOBALS, "rhs_zero"}:  # trailing parameters, null by default
        args += [a if a in present else "nullptr" for a in GLOBALS]
    if "rhs_zero" in present:
        args.append("rhs_zero")
    body = "grouped" if kernel.op is Op.GROUPED else "dense"
    if kernel.masked:
        body = "masked"
    return call(f"gg::gemm::{body}<{tile}>", args)


def algorithm(kernel: ir.Kernel, tiles: list[TileConfig], compute: DType, b_feed: BFeed,
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
    if b_feed is BFeed.UNPACK_FP4:
        three = ("the packed fp4 B tile is read two bytes (four K elements) at a time into "
                 "registers, one e2m1 a byte (gg::unpack_fp4x4), then ")
    elif b_feed is BFeed.CONVERT:
        kn = " [k, n] -> [n, k]" if rhs.layout is Layout.KN else ""
        three = (f"each staged B tile is converted to a [bn][bk] {compute.value} tile "
                 f"({rhs.dtype.value}{kn}, exact), then ")
    else:
        three = f"ldmatrix{'.trans' if b_feed is BFeed.LDMATRIX_TRANS else ''} feeds the fragments, then "
    if compute is DType.FP4 or w4a8(kernel, compute):
        # These entries trap (entries()): only (5) multiplies.
        three += ("the block-scaled MMA of (5) multiplies: no mma.sync form takes e2m1, so this "
                  "body's GEMM entries trap and the launchers refuse any other device.")
        block_k = 0
    else:
        three += f"{MMA[compute]} accumulates in {'int' if compute is DType.INT8 else 'float'}"
    if block_k:
        three += (f"; every {block_k} of K the partial sums are multiplied by their scales and "
                  "added to an f32 accumulator (FP32 promotion)")
    three += "" if three.endswith(".") else "."
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
