"""The datacenter Blackwell body of the tile GEMM: TMA + tcgen05.mma on
sm_100a, the accumulator in tensor memory (a `Body` of bodies.py).

A kernel that gets it on a declared arch (ir.Kernel.uses_tcgen05: sm_100a)
also gets, per LUT entry, an `Sm100Tile` and a `<entry>_sm100` entry point of
gg_gemm_sm100.cuh (192 threads: a TMA producer warp, an MMA warp, an
epilogue warpgroup reading TMEM; a persistent grid), with the Hopper body's
parameters (tensor maps of lhs and rhs, then the arrays and dims: wgmma.py's
`tma_params`) and loads. The launchers take its steps on compute capability
10.0 (docs/cuda-sm100.md); templates/cuda/gemm_tcgen05.cu.j2 prints its
tiles.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace

from gemmgen import ir
from gemmgen.archs import shared_memory_limit
from gemmgen.backends.cuda.common import Step, all_of, any_of, tensor_map, var
from gemmgen.backends.cuda.gemm.body import Body, BodyLaunch, BodyPlan
from gemmgen.backends.cuda.gemm.contract import worklist_step
from gemmgen.backends.cuda.gemm.mma_sync import TileConfig
from gemmgen.backends.cuda.gemm.text import COLUMNS
from gemmgen.backends.cuda.gemm.wgmma import maps, tiles_expr, tma_entries, tma_params
from gemmgen.ir import Activation, DType, Layout, Op, ScaleMode

# The body's fixed shape (gg_gemm_sm100.cuh: kThreads, kBM, the 128-byte K
# tile row, the epilogue's 32-column chunks) and the plan's choices for it.
SM100_ARCH = "sm_100a"
SM100_THREADS, SM100_BM, SM100_ROW_BYTES, SM100_CHUNK = 192, 128, 128, 32
SM100_GROUP_M = 8  # rows of tiles per rasterized group (L2 reuse)
SM100_MAX_STAGES = 8
# A promoted tile (FP8 with block scales) keeps its kBN f32 sums per thread
# in registers: at most 128 columns.
SM100_PROMOTED_BN = 128


@dataclass(frozen=True, slots=True)
class Sm100Tile:
    """The sm_100a tile of one LUT entry: 128 x bn x bk (bk: one 128-byte
    row, 64 16-bit or 128 FP8 elements), its stages, its two accumulators'
    TMEM columns and its shared memory (gg::gemm::sm100::check_tile_sm100
    states how the numbers relate)."""

    index: int
    entry: str  # extern "C" symbol
    bn: int  # B columns of a tile (silu_mul: the gate half, then the up half)
    bn_out: int  # output columns of a tile: bn, or bn / 2 for silu_mul
    bk: int
    stages: int
    a_stage: int
    b_stage: int
    c_stride: int  # out_t per row of an epilogue warp's slice (a 32-column chunk + 16 bytes)
    c_warp_bytes: int
    tmem_cols: int  # the two accumulators' columns, a power of two (tcgen05.alloc)
    smem_bytes: int
    grid_x: str
    promoted: bool  # FP8 with block scales: a unit per K tile, sums in registers
    archs: tuple[str, ...] = (SM100_ARCH,)  # the declared archs with the body
    block_scaled: bool = False  # the MX scales applied by the block-scaled tcgen05.mma
    sf_stage: int = 0  # bytes of a stage's scale atoms (block-scaled)
    bm: int = SM100_BM
    mixed: bool = False  # no weight-only tile on this body (wgmma.maps asks)

    threads = SM100_THREADS
    group_m = SM100_GROUP_M

    @property
    def mma(self) -> str:
        """The MMA one thread issues: 128 x bn x (32 bytes of K)."""
        return f"128x{self.bn}x{self.bk // 4}"

    @property
    def sf_cols(self) -> int:
        """TMEM columns of a K tile's scale atoms (4 per 512-byte atom)."""
        return self.sf_stage // 128

    @property
    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}, {self.stages} stages"

    @property
    def comment(self) -> tuple[str, ...]:
        if self.block_scaled:
            text = (f"sm_100a tile {self.index}: {self.bm} x {self.bn} x {self.bk}, {self.stages} "
                    f"stages of {self.a_stage + self.b_stage} bytes of operands and "
                    f"{self.sf_stage} of scale atoms, {self.smem_bytes} bytes of shared memory "
                    f"in all, {self.tmem_cols} TMEM columns (two accumulators, then "
                    f"{self.sf_cols} of scales).")
        else:
            text = (f"sm_100a tile {self.index}: {self.bm} x {self.bn} x {self.bk}, "
                    f"{self.stages} stages of {self.a_stage + self.b_stage} bytes, "
                    f"{self.smem_bytes} bytes of shared memory in all, {self.tmem_cols} TMEM "
                    f"columns (two accumulators).")
        return tuple(textwrap.wrap(text, COLUMNS - len("// ")))


def sm100_smem_bytes(bn: int, stages: int, out: DType, sf_stage: int = 0) -> int:
    """gg_gemm_sm100.cuh's carve-up: alignment slack, the stages (operands,
    and `sf_stage` bytes of scale atoms on block-scaled tiles), 4 epilogue
    slices of 32 rows of a 32-column chunk (+ 16 bytes a row), the stage
    and accumulator barriers, the TMEM slot."""
    ob = out.bits // 8
    return (1024 + stages * ((SM100_BM + bn) * SM100_ROW_BYTES + sf_stage)
            + 4 * 32 * (SM100_CHUNK + 16 // ob) * ob + (2 * stages + 4) * 8 + 16)


def tmem_columns(bn: int, sf_cols: int = 0) -> int:
    """The TMEM columns of two bn-column accumulators (and `sf_cols` of
    scale atoms after them): a power of two, at least 32 (tcgen05.alloc's
    rule)."""
    cols = 32
    while cols < 2 * bn + sf_cols:
        cols *= 2
    return cols


def promoted(kernel: ir.Kernel) -> bool:
    """FP8 with per-K-block scales: the FP32 promotion, one unit per K tile
    (not the MX kernels, whose scales the block-scaled MMA applies)."""
    return not kernel.tcgen05_block_scaled and any(
        s.enabled and s.placement is ir.Placement.MAINLOOP
        for s in (kernel.lhs_scale, kernel.rhs_scale))


# Block-scaled tiles: the scales of a K tile (128 bytes of each row) are
# 128 x 4 atoms of 512 bytes, 4 K blocks of 128 rows each (gg_gemm_sm100.cuh:
# kSfAtomsK, kSfAtomsB), in 4 TMEM columns each after the accumulators.
SM100_SF_ATOM = 512


def sf_stage_bytes(kernel: ir.Kernel, bn: int) -> int:
    """Bytes of one stage's scale atoms: a K tile's atoms of A's 128 rows and
    of each 128 rows of B; 0 when not block-scaled."""
    if not kernel.tcgen05_block_scaled:
        return 0
    bk = SM100_ROW_BYTES * 8 // kernel.lhs.dtype.bits
    atoms_k = bk // (4 * kernel.lhs_scale.block_k)
    return SM100_SF_ATOM * atoms_k * (1 + -(-bn // SM100_BM))


def _widths(kernel: ir.Kernel, tile: ir.Tile) -> tuple[int, ...]:
    """The tile's candidate n, widest first: the LUT entry's n when an M =
    128 MMA's N that the epilogue's chunks and the boxes divide (64..256 in
    steps of 64; at most 128 when promoted), else 256 (128 promoted), then
    the narrower ones; with rhs block scales only the n whose output columns
    divide the scale block; rhs [k, n] takes whole boxes of 128-byte rows
    of columns."""
    silu = kernel.epilogue.activation is Activation.SILU_MUL
    widest = SM100_PROMOTED_BN if promoted(kernel) else 256
    sizes = tuple(n for n in (256, 192, 128, 64) if n <= widest)
    if kernel.tcgen05_block_scaled:
        # Two accumulators and the scale columns within TMEM's 512.
        sizes = tuple(n for n in sizes if 2 * n + sf_stage_bytes(kernel, n) // 128 <= 512)
    first = tile.n if tile.n in sizes else sizes[0]
    out = tuple(dict.fromkeys((first, *sizes)))
    if kernel.rhs_operand.layout is Layout.KN:
        # Whole MN-major boxes of a 128-byte row: 64 16-bit or 128 FP8
        # columns, in each half for silu_mul.
        box = SM100_ROW_BYTES * 8 // kernel.lhs.dtype.bits
        out = tuple(bn for bn in out if (bn // 2 if silu else bn) % box == 0)
    rs = kernel.rhs_scale
    if rs.mode is ScaleMode.BLOCK and not kernel.tcgen05_block_scaled:
        out = tuple(bn for bn in out if rs.block_n % (bn // 2 if silu else bn) == 0)
    return out


def _tile(kernel: ir.Kernel, tile: ir.Tile, index: int, entry: str) -> Sm100Tile:
    """The widest n of `_widths` with the most stages (up to
    SM100_MAX_STAGES) that fit sm_100a's opt-in shared memory."""
    limit = shared_memory_limit(SM100_ARCH)
    silu = kernel.epilogue.activation is Activation.SILU_MUL
    for bn in _widths(kernel, tile):
        sf = sf_stage_bytes(kernel, bn)
        fits = [st for st in range(2, SM100_MAX_STAGES + 1)
                if sm100_smem_bytes(bn, st, kernel.out, sf) <= limit]
        if fits:
            break
    stages = max(fits)
    bn_out = bn // 2 if silu else bn
    ob = kernel.out.bits // 8
    c_stride = SM100_CHUNK + 16 // ob
    return Sm100Tile(index=index, entry=entry, bn=bn, bn_out=bn_out,
                     bk=SM100_ROW_BYTES * 8 // kernel.lhs.dtype.bits, stages=stages,
                     a_stage=SM100_BM * SM100_ROW_BYTES, b_stage=bn * SM100_ROW_BYTES,
                     c_stride=c_stride, c_warp_bytes=32 * c_stride * ob,
                     tmem_cols=tmem_columns(bn, sf // 128),
                     smem_bytes=sm100_smem_bytes(bn, stages, kernel.out, sf),
                     grid_x=f"gg_min(num_sms, {tiles_expr(kernel, SM100_BM, bn_out)})",
                     promoted=promoted(kernel), block_scaled=kernel.tcgen05_block_scaled,
                     sf_stage=sf)


def archs_of(kernel: ir.Kernel, spec: ir.Spec) -> tuple[str, ...]:
    """The declared archs where the kernel gets the body (ir.Kernel.uses_tcgen05:
    sm_100a, sm_103a)."""
    target = spec.target(ir.Backend.CUDA)
    return tuple(a for a in (target.cuda_archs if target else ()) if kernel.uses_tcgen05(a))


def uses_sm100(kernel: ir.Kernel, spec: ir.Spec) -> bool:
    """Whether the kernel gets the sm_100a body on some declared arch."""
    return bool(archs_of(kernel, spec))


def _algorithm(kernel: ir.Kernel, t: Sm100Tile, number: int) -> tuple[str, ...]:
    """The file comment's lines on the sm_100a path."""
    extra = ""
    if t.promoted:
        extra = (" Each K tile's MMAs go into an accumulator of their own, whose sums the "
                 "epilogue warps add into f32 registers times the K tile's block scales "
                 "(the FP32 promotion).")
    if t.block_scaled:
        extra = (f" Block-scaled: each K tile's MX scales (128 x 4 atoms, {t.sf_stage} bytes a "
                 f"stage) are gathered by the producer warp's 32 lanes into the stage, copied "
                 f"into TMEM with tcgen05.cp.32x128b.warpx4 by the MMA thread, and applied "
                 f"by {block_scaled_words(kernel)}.")
    if kernel.epilogue.activation is Activation.SILU_MUL:
        extra += (f" silu_mul: a tile's B is {t.bn_out} gate columns over the matching "
                  f"{t.bn_out} up columns (n / 2 on), so each thread's row holds both halves "
                  f"of its outputs.")
    text = (f"on sm_100a (compute capability 10.0) the launchers run the sm_100a body "
            f"instead (gg_gemm_sm100.cuh, docs/cuda-sm100.md): {t.threads} threads, a "
            f"producer warp issuing TMA loads of {t.bm} x {t.bk} A and {t.bn} x {t.bk} B boxes "
            f"(128-byte swizzle) into {t.stages} stages, one thread issuing tcgen05.mma "
            f"{t.mma} into one of two TMEM accumulators ({t.tmem_cols} columns), an epilogue "
            f"warpgroup reading the other with tcgen05.ld; a persistent grid of min(SMs, "
            f"tiles) blocks.{extra}")
    wrapped = textwrap.wrap(text, COLUMNS - len("//   (1) "))
    return (f"({number}) {wrapped[0]}", *(f"    {w}" for w in wrapped[1:]))


def block_scaled_words(kernel: ir.Kernel) -> str:
    """The block-scaled tcgen05.mma of an MX kernel, in words."""
    pair = " x ".join("e2m1" if d is DType.FP4 else d.value
                      for d in (kernel.lhs.dtype, kernel.rhs_operand.dtype))
    if kernel.lhs.dtype is DType.FP4 and kernel.lhs_scale.dtype is DType.UE4M3:
        return (f"tcgen05.mma.kind::mxf4nvf4.block_scale.scale_vec::4X ({pair}, ue4m3 scales of "
                "16; SASS UTCOMMA.4X), one atom per MMA, scale id 0, NVFP4's global scales "
                "in the epilogue")
    if kernel.rhs_operand.dtype is DType.FP4 and kernel.lhs.dtype is not DType.FP4:
        return (f"tcgen05.mma.kind::mxf8f6f4.block_scale.scale_vec::1X ({pair}, ue8m0 scales "
                "of 32; W4A8: the packed weights unpacked by the producer warp into the MMA's "
                "padded fp4 layout; SASS UTCQMMA), scale ids 0..3 over the K tile's four MMAs")
    if kernel.lhs.dtype is DType.FP4:
        return (f"tcgen05.mma.kind::mxf4.block_scale.scale_vec::2X ({pair}, ue8m0 scales of 32; "
                "SASS UTCOMMA), two MMAs per atom, scale ids 0 and 2")
    return (f"tcgen05.mma.kind::mxf8f6f4.block_scale.scale_vec::1X ({pair}, ue8m0 scales of 32; "
            "SASS UTCQMMA), scale ids 0..3 over the K tile's four MMAs")


def _cc(archs: tuple[str, ...]) -> str:
    """The compute capabilities the launchers take the body on, in words:
    those of the declared archs only ("10.0" for a spec declaring sm_100a)."""
    if archs == (SM100_ARCH,):
        return "10.0"
    return " / ".join(f"{ir.arch_number(a) // 10}.{ir.arch_number(a) % 10} ({a})" for a in archs)


def _plan(kernel: ir.Kernel, spec: ir.Spec, tiles: tuple[TileConfig, ...],
          lut: tuple[ir.Tile, ...], number: int) -> BodyPlan:
    """An Sm100Tile per LUT entry, the entry points (the Hopper body's
    parameters) and the algorithm item."""
    own = tuple(replace(_tile(kernel, tile, t.index, f"{t.entry}_sm100"),
                        archs=archs_of(kernel, spec)) for t, tile in zip(tiles, lut))
    params = tma_params(kernel, own[-1])
    # GG_SM100_TCGEN05: gg_primitives_sm100.cuh's macro of the sm_100a and
    # sm_103a builds.
    entries = tma_entries(kernel, list(own), params, namespace="sm100", struct="Sm100Tile",
                          guard="GG_SM100_TCGEN05", archs=archs_of(kernel, spec),
                          title="sm_100a", what="TMA + tcgen05.mma, the accumulators in tensor "
                          "memory;")
    return BodyPlan(body=replace(BODY, cc=_cc(archs_of(kernel, spec))), tiles=own,
                    params=params, entries=entries,
                    algorithm=_algorithm(kernel, own[-1], number))


def _launch(kernel: ir.Kernel, bp: BodyPlan, t: TileConfig,
            steps: tuple[Step, ...]) -> BodyLaunch:
    """The sm_100a launches of LUT entry `t` (after the mma.sync fill when
    grouped, with a worklist of its own row tiles), and when: compute
    capability 10.0."""
    h = bp.tiles[t.index]
    grouped = kernel.op is Op.GROUPED
    tmaps = dict(zip(("lhs", "rhs"), maps(kernel, h)))
    args = tuple(tensor_map(a.name, tmaps[a.name]) if a.tmap is not None else a
                 for a in (prm.launch for prm in bp.params))
    out: list[Step] = []
    worklist_bm = None
    if grouped and not kernel.masked:
        out += [steps[0], worklist_step(kernel.name, h.bm,
                                        f"the (group, {h.bm}-row tile) work items")]
        worklist_bm = h.bm
    out.append(Step(h.entry, (h.grid_x, "1", "1"), h.threads, h.smem_bytes, args,
                    f"{h.bm}x{h.bn} tiles, TMA + tcgen05.mma: a persistent grid of "
                    "min(SMs, tiles) blocks"))
    conds = [any_of(*(var("sm").eq(ir.arch_number(a)) for a in h.archs)), var("num_sms").gt(0)]
    if grouped:
        conds.append(var("g").gt(0))
    rs = kernel.rhs_scale
    if kernel.epilogue.activation is Activation.SILU_MUL and rs.mode is ScaleMode.BLOCK:
        # The up half starts at n / 2: in one rhs scale block per tile only
        # when n / 2 is a whole number of blocks (else the mma.sync body).
        conds.append((var("n") % (2 * rs.block_n)).eq(0))
    return BodyLaunch(tuple(out), all_of(*conds), h.label, worklist_bm)


BODY = Body(name="tcgen05", title="tcgen05", arch=SM100_ARCH, cc="10.0 (sm_100a) / 10.3 (sm_103a)",
            what="TMA + tcgen05.mma with the accumulators in tensor memory, tensor maps of lhs "
                 "and rhs, a persistent grid of the device's SMs",
            template="cuda/gemm_tcgen05.cu.j2", applies=uses_sm100, plan=_plan, launch=_launch)
