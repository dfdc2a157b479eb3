"""The datacenter Blackwell body of the tile GEMM: TMA + tcgen05.mma on
sm_100a, the accumulator in tensor memory (a `Body` of bodies.py).

A kernel that gets it on a declared arch (ir.Kernel.uses_tcgen05: sm_100a)
also gets, per LUT entry, an `Sm100Tile` and a `<entry>_sm100` entry point of
gg_gemm_sm100.cuh (192 threads: a TMA producer warp, an MMA warp, an
epilogue warpgroup reading TMEM; a persistent grid), with the Hopper body's
parameters (tensor maps of lhs and rhs, then the arrays and dims: wgmma.py's
`tma_params`) and loads. The launchers take its steps on compute capability
10.0 (docs/cuda-sm100.md); templates/cuda/gemm_tcgen05.cu.j2 prints its
tiles. A weight-only kernel (ir.Kernel.wgmma_mixed) gets the weight-only
tile of gg_gemm_sm100_mixed.cuh instead (`_mixed_tile`: 320 threads, the
weights widened in shared memory by a transform warpgroup).
"""

from __future__ import annotations

from dataclasses import replace

from gemmgen import ir
from gemmgen.archs import shared_memory_limit
from gemmgen.backends.cuda.common import Step, all_of, any_of, tensor_map, var
from gemmgen.backends.cuda.gemm.body import Body, BodyLaunch, BodyPlan
from gemmgen.backends.cuda.gemm.contract import worklist_step
from gemmgen.backends.cuda.gemm.mma_sync import TileConfig
from gemmgen.backends.cuda.gemm.tcgen05_text import algorithm
from gemmgen.backends.cuda.gemm.tcgen05_tile import (  # noqa: F401 (the body's numbers, one import away)
    SM100_ARCH, SM100_BM, SM100_CHUNK, SM100_GROUP_M, SM100_MAX_STAGES, SM100_MIXED_BK,
    SM100_MIXED_BN, SM100_MIXED_THREADS, SM100_PROMOTED_BN, SM100_ROW_BYTES, SM100_THREADS,
    Sm100Tile,
)
from gemmgen.backends.cuda.gemm.wgmma import (
    maps,
    sm90_weight_row_bytes,
    tiles_expr,
    tma_entries,
    tma_params,
)
from gemmgen.ir import DType, Layout, Op, ScaleMode

def sm100_smem_bytes(bn: int, stages: int, out: DType, sf_stage: int = 0,
                     pair: bool = False) -> int:
    """gg_gemm_sm100.cuh's carve-up: alignment slack, the stages (operands:
    128 rows of A and bn of B, or bn / 2 of B a CTA of the 2-CTA tile, and
    `sf_stage` bytes of scale atoms on block-scaled tiles), 4 epilogue
    slices of 32 rows of a 32-column chunk (+ 16 bytes a row), the stage
    and accumulator barriers, the TMEM slot."""
    ob = out.bits // 8
    b_rows = bn // 2 if pair else bn
    return (1024 + stages * ((SM100_BM + b_rows) * SM100_ROW_BYTES + sf_stage)
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


def mma_scale_block(kernel: ir.Kernel) -> int:
    """K elements per scale byte the block-scaled MMA reads: the MX / NV
    block (32 or 16), or 32 for DeepSeek's e8m0 scales promoted in hardware
    (scale_vec::1X: each scale repeated over its 32-wide K blocks)."""
    return kernel.lhs_scale.block_k if kernel.mx_mma_obstacle() is None else ir.MX_BLOCK_K


def sf_stage_bytes(kernel: ir.Kernel, bn: int) -> int:
    """Bytes of one stage's scale atoms: a K tile's atoms of A's 128 rows and
    of each 128 rows of B; 0 when not block-scaled."""
    if not kernel.tcgen05_block_scaled:
        return 0
    bk = SM100_ROW_BYTES * 8 // kernel.lhs.dtype.bits
    atoms_k = bk // (4 * mma_scale_block(kernel))
    return SM100_SF_ATOM * atoms_k * (1 + -(-bn // SM100_BM))


def _widths(kernel: ir.Kernel, tile: ir.Tile) -> tuple[int, ...]:
    """The tile's candidate n, widest first: the LUT entry's n when an M =
    128 MMA's N that the epilogue's chunks and the boxes divide (64..256 in
    steps of 64; at most 128 when promoted), else 256 (128 promoted), then
    the narrower ones; with rhs block scales only the n whose output columns
    divide the scale block; rhs [k, n] takes whole boxes of 128-byte rows
    of columns. A paired activation (silu_mul, swiglu_clamped) has boxes in
    each half of B; pairs=interleaved reads bn columns 2 n0.. in order, so
    its tile lies in one scale block when bn divides it."""
    silu = kernel.epilogue.activation.paired
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
        half = kernel.epilogue.halves
        out = tuple(bn for bn in out if rs.block_n % (bn // 2 if half else bn) == 0)
    return out


def sm100_mixed_smem_bytes(stages: int, out: DType, weight_bits: int, bm: int = SM100_BM,
                           pair: bool = False) -> int:
    """gg_gemm_sm100_mixed.cuh's carve-up: alignment slack, the stages (bm
    lhs rows, widened weights, raw weights; a CTA of the 2-CTA tile: 128
    lhs rows and half the weight rows), 4 epilogue slices of a 32-column
    chunk, three barriers per stage and the accumulators' four, the TMEM
    slot."""
    ob = out.bits // 8
    rows = SM100_MIXED_BN // 2 if pair else SM100_MIXED_BN
    raw = rows * sm90_weight_row_bytes(weight_bits)
    return (1024 + stages * ((min(bm, SM100_BM) + rows) * SM100_ROW_BYTES + raw)
            + 4 * 32 * (SM100_CHUNK + 16 // ob) * ob + (3 * stages + 4) * 8 + 16)


# The decode tile's lhs rows (the MMA's N), for LUT entries of m <= 32.
SM100_MIXED_DECODE_BMS = (16, 32)


def _mixed_tile(kernel: ir.Kernel, tile: ir.Tile, index: int, entry: str) -> Sm100Tile:
    """The weight-only tile: 128 lhs rows x 128 weight rows x 64, or for a
    LUT entry of m <= 32 (not silu_mul) the decode tile, its operands
    swapped: 16 or 32 lhs rows (the narrowest that holds the entry's m) as
    the MMA's N, the 128 weight rows its M; for a LUT entry of m = 256 the
    2-CTA tile (256 x 128 x 64 over a CTA pair, each CTA 128 lhs rows and
    64 weight rows; `cluster_n` pairs a cluster sharing A by TMA
    multicast); with the most stages that fit."""
    limit = shared_memory_limit(SM100_ARCH)
    wb = kernel.rhs_operand.dtype.bits
    silu = kernel.epilogue.activation.paired  # halves only (interleaved is refused)
    swap = not silu and tile.m <= SM100_MIXED_DECODE_BMS[-1]
    pair = tile.m == SM100_PAIR_BM and pair_obstacle(kernel) is None
    bm = (next(b for b in SM100_MIXED_DECODE_BMS if b >= tile.m) if swap
          else SM100_PAIR_BM if pair else SM100_BM)
    stages = max(st for st in range(2, SM100_MAX_STAGES + 1)
                 if sm100_mixed_smem_bytes(st, kernel.out, wb, bm, pair) <= limit)
    bn_out = SM100_MIXED_BN // 2 if silu else SM100_MIXED_BN
    ob = kernel.out.bits // 8
    c_stride = SM100_CHUNK + 16 // ob
    tmem = (tmem_columns(bm) if swap
            else (4 if promoted(kernel) else 2) * SM100_MIXED_BN)
    b_rows = SM100_MIXED_BN // 2 if pair else SM100_MIXED_BN  # a CTA's weight rows
    # (validated: ir.Kernel.tcgen05_multicast_obstacle, at most 8 CTAs)
    cluster_n = tile.cluster_n if pair else 1
    ctas = 2 * cluster_n
    # A cluster's unit: 256 rows x cluster_n n tiles (one a pair).
    tiles = tiles_expr(kernel, bm, cluster_n * bn_out)
    return Sm100Tile(index=index, entry=entry, bn=SM100_MIXED_BN, bn_out=bn_out,
                     bk=SM100_MIXED_BK, stages=stages,
                     a_stage=min(bm, SM100_BM) * SM100_ROW_BYTES,
                     b_stage=b_rows * SM100_ROW_BYTES, c_stride=c_stride,
                     c_warp_bytes=32 * c_stride * ob, tmem_cols=tmem,
                     smem_bytes=sm100_mixed_smem_bytes(stages, kernel.out, wb, bm, pair),
                     grid_x=(f"{ctas} * gg_min(gg_div(num_sms, {ctas}), {tiles})" if pair
                             else f"gg_min(num_sms, {tiles})"),
                     promoted=promoted(kernel), bm=bm, mixed=True,
                     raw_stage=b_rows * sm90_weight_row_bytes(wb), swap=swap, pair=pair,
                     cluster_n=cluster_n)


# (issue 30) The 2-CTA tile's rows: a LUT entry of m = 256 (CUTLASS's
# MmaTileShape M = 256 of its 2SM kernels) gets it where the kernel allows,
# in clusters of 2 x cluster_n CTAs (cluster_n pairs along N sharing A by
# TMA multicast; CUTLASS's cluster shape (2, cluster_n, 1)).
SM100_PAIR_BM = 2 * SM100_BM
SM100_PAIR_CLUSTER = (2, 1, 1)


def pair_cluster(cluster_n: int) -> tuple[int, int, int]:
    """The launch's cluster of a 2-CTA tile of `cluster_n` pairs: 2P x 1 x 1
    (the body numbers the CTAs of a cluster linearly, pair p ranks 2p and
    2p + 1)."""
    return (2 * cluster_n, 1, 1)


def pair_obstacle(kernel: ir.Kernel) -> str | None:
    """Why a kernel's LUT entries of m = 256 keep the 1-CTA tile on sm_100a
    (None: they get the 2-CTA tile): the pair runs 16-bit and FP8 operands
    with epilogue scales or DeepSeek's block scales promoted in software
    (gg_gemm_sm100.cuh: check_tile_sm100's kPair clause; each CTA's
    epilogue holds its rows' sums, as the 1-CTA tile) and the block-scaled
    MMAs (MX, NVFP4, W4A8, DeepSeek's e8m0 in hardware), and the
    weight-only tile (gg_gemm_sm100_mixed.cuh: check_tile_mixed)."""
    return None


def _pair_widths(kernel: ir.Kernel, tile: ir.Tile) -> tuple[int, ...]:
    """`_widths` that the pair can split: each CTA's half of B whole
    MN-major boxes for rhs [k, n], bn a multiple of 32."""
    widths = _widths(kernel, tile)
    if kernel.rhs_operand.layout is Layout.KN:
        box = SM100_ROW_BYTES * 8 // kernel.lhs.dtype.bits
        widths = tuple(bn for bn in widths if (bn // 2) % box == 0)
    return tuple(bn for bn in widths if bn % 32 == 0)


def pair_entry_obstacle(kernel: ir.Kernel, tile: ir.Tile) -> str | None:
    """Why a LUT entry of m = 256 keeps the 1-CTA tile on sm_100a (so a
    `cluster_n` on it has no pairs to cluster: plans.diagnose refuses it),
    as a phrase; None when it gets the 2-CTA tile. The weight-only tile
    always splits; the others need an n the pair can split (`_pair_widths`:
    with rhs [k, n] each CTA's half a whole 128-byte box of columns, and
    for the block-scaled MMAs the two accumulators and the scale columns
    within TMEM's 512)."""
    if tile.m != SM100_PAIR_BM or kernel.wgmma_mixed or _pair_widths(kernel, tile):
        return None
    limit = ("a promoted tile is at most 128 columns wide (its sums in registers)"
             if promoted(kernel) else
             "two accumulators and the scale atoms' columns must fit tensor memory's 512"
             if kernel.tcgen05_block_scaled else "no wider tile fits")
    if kernel.rhs_operand.layout is Layout.KN:
        box = SM100_ROW_BYTES * 8 // kernel.lhs.dtype.bits
        return (f"with rhs [k, n] each CTA's half of B is whole 128-byte boxes of "
                f"{box} columns, so the pair needs n = {2 * box} or wider, and {limit}")
    return f"no tile n splits into two CTAs' halves ({limit})"


def _pair_tile(kernel: ir.Kernel, tile: ir.Tile, index: int, entry: str) -> Sm100Tile | None:
    """The 2-CTA tile of a LUT entry of m = 256 whose kernel has no
    pair_obstacle: 256 x bn (the widest of `_widths` whose halves are whole
    MN-major boxes for rhs [k, n]; at most 128 promoted, as the 1-CTA
    tile: each CTA's epilogue holds its rows' bn sums) with the most stages
    that fit; None otherwise (the 1-CTA tile). A block-scaled pair's stage
    holds, in each CTA, the scale atoms of its 128 A rows and of all bn B
    rows (the 1-CTA stage's `sf_stage_bytes`), so its TMEM is the 1-CTA
    tile's; an MXFP8 rhs [k, n] would need bn = 256 (each half a 128-column
    box), whose two accumulators leave no TMEM for the scales: the 1-CTA
    tile."""
    if tile.m != SM100_PAIR_BM or pair_obstacle(kernel) is not None:
        return None
    # (validated: ir.Kernel.tcgen05_multicast_obstacle, at most 8 CTAs)
    assert tile.cluster_n == 1 or kernel.tcgen05_multicast_obstacle() is None, tile
    limit = shared_memory_limit(SM100_ARCH)
    silu = kernel.epilogue.activation.paired
    widths = _pair_widths(kernel, tile)
    if not widths:
        return None
    bn = widths[0]
    sf = sf_stage_bytes(kernel, bn)
    stages = max(st for st in range(2, SM100_MAX_STAGES + 1)
                 if sm100_smem_bytes(bn, st, kernel.out, sf, pair=True) <= limit)
    bn_out = bn // 2 if silu else bn
    ob = kernel.out.bits // 8
    c_stride = SM100_CHUNK + 16 // ob
    # A cluster's unit: 256 rows x cluster_n n tiles (one a pair).
    ctas = 2 * tile.cluster_n
    units = tiles_expr(kernel, SM100_PAIR_BM, tile.cluster_n * bn_out)
    return Sm100Tile(index=index, entry=entry, bn=bn, bn_out=bn_out,
                     bk=SM100_ROW_BYTES * 8 // kernel.lhs.dtype.bits, stages=stages,
                     a_stage=SM100_BM * SM100_ROW_BYTES, b_stage=bn // 2 * SM100_ROW_BYTES,
                     c_stride=c_stride, c_warp_bytes=32 * c_stride * ob,
                     tmem_cols=tmem_columns(bn, sf // 128),
                     smem_bytes=sm100_smem_bytes(bn, stages, kernel.out, sf, pair=True),
                     grid_x=f"{ctas} * gg_min(gg_div(num_sms, {ctas}), {units})",
                     promoted=promoted(kernel), bm=SM100_PAIR_BM, pair=True,
                     cluster_n=tile.cluster_n,
                     block_scaled=kernel.tcgen05_block_scaled, sf_stage=sf,
                     deepseek=kernel.tcgen05_deepseek_mma)


def _tile(kernel: ir.Kernel, tile: ir.Tile, index: int, entry: str) -> Sm100Tile:
    """The widest n of `_widths` with the most stages (up to
    SM100_MAX_STAGES) that fit sm_100a's opt-in shared memory; the
    weight-only tile for a weight-only kernel."""
    if kernel.wgmma_mixed:
        return _mixed_tile(kernel, tile, index, entry)
    if (pair := _pair_tile(kernel, tile, index, entry)) is not None:
        return pair
    limit = shared_memory_limit(SM100_ARCH)
    silu = kernel.epilogue.activation.paired
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
                     sf_stage=sf, deepseek=kernel.tcgen05_deepseek_mma)


def archs_of(kernel: ir.Kernel, spec: ir.Spec) -> tuple[str, ...]:
    """The declared archs where the kernel gets the body (ir.Kernel.uses_tcgen05:
    sm_100a, sm_103a)."""
    target = spec.target(ir.Backend.CUDA)
    return tuple(a for a in (target.cuda_archs if target else ()) if kernel.uses_tcgen05(a))


def uses_sm100(kernel: ir.Kernel, spec: ir.Spec) -> bool:
    """Whether the kernel gets the sm_100a body on some declared arch."""
    return bool(archs_of(kernel, spec))


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
    mixed = own[-1].mixed
    entries = tma_entries(kernel, list(own), params,
                          namespace="sm100_mixed" if mixed else "sm100", struct="Sm100Tile",
                          guard="GG_SM100_TCGEN05", archs=archs_of(kernel, spec),
                          title="sm_100a", what="TMA + tcgen05.mma, the accumulators in tensor "
                          "memory;")
    return BodyPlan(body=replace(BODY, cc=_cc(archs_of(kernel, spec))), tiles=own,
                    params=params, entries=entries,
                    algorithm=algorithm(kernel, own[-1], number, own))


def _launch(kernel: ir.Kernel, bp: BodyPlan, t: TileConfig,
            steps: tuple[Step, ...]) -> BodyLaunch:
    """The sm_100a launches of LUT entry `t` (after the mma.sync fill when
    grouped, with a worklist of its own row tiles), and when: compute
    capability 10.0."""
    h = bp.tiles[t.index]
    grouped = kernel.op is Op.GROUPED
    # The 2-CTA tile's boxes are a CTA's: 128 rows of A, bn / 2 rows of B
    # (the weight-only tile's raw weights too: one box of bn / 2 rows, the
    # gate rows in the leader and the up rows in the peer for silu_mul).
    tmaps = dict(zip(("lhs", "rhs"), maps(kernel, replace(h, bm=SM100_BM, bn_out=h.bn // 2),
                                          weight_rows=h.bn // 2)
                                     if h.pair else maps(kernel, h)))
    args = tuple(tensor_map(a.name, tmaps[a.name]) if a.tmap is not None else a
                 for a in (prm.launch for prm in bp.params))
    out: list[Step] = []
    worklist_bm = None
    if grouped and not kernel.masked:
        out += [steps[0], worklist_step(kernel.name, h.bm,
                                        f"the (group, {h.bm}-row tile) work items")]
        worklist_bm = h.bm
    if h.pair and h.cluster_n > 1:
        c = 2 * h.cluster_n
        out.append(Step(h.entry, (h.grid_x, "1", "1"), h.threads, h.smem_bytes, args,
                        f"{h.bm}x{h.bn} tiles over CTA pairs, TMA + tcgen05.mma.cta_group::2, "
                        f"{h.cluster_n} pairs along n sharing A by TMA multicast: a persistent "
                        f"grid of {c} x min(SMs / {c}, units) blocks in clusters of {c} (a unit "
                        f"{h.bm} x {h.cluster_n * h.bn_out})",
                        cluster=pair_cluster(h.cluster_n)))
    elif h.pair:
        out.append(Step(h.entry, (h.grid_x, "1", "1"), h.threads, h.smem_bytes, args,
                        f"{h.bm}x{h.bn} tiles over CTA pairs, TMA + tcgen05.mma.cta_group::2: "
                        "a persistent grid of 2 x min(SMs / 2, tiles) blocks in clusters of 2",
                        cluster=SM100_PAIR_CLUSTER))
    else:
        out.append(Step(h.entry, (h.grid_x, "1", "1"), h.threads, h.smem_bytes, args,
                        f"{h.bm}x{h.bn} tiles, TMA + tcgen05.mma: a persistent grid of "
                        "min(SMs, tiles) blocks"))
    # (A cluster of 2 x cluster_n CTAs needs as many SMs.)
    conds = [any_of(*(var("sm").eq(ir.arch_number(a)) for a in h.archs)),
             var("num_sms").gt(2 * h.cluster_n - 1 if h.pair else 0)]
    if grouped:
        conds.append(var("g").gt(0))
    rs = kernel.rhs_scale
    if (kernel.epilogue.halves and rs.mode is ScaleMode.BLOCK
            and not kernel.tcgen05_deepseek_mma and not h.mixed):
        # The up half starts at n / 2: in one rhs scale block per tile only
        # when n / 2 is a whole number of blocks (else the mma.sync body).
        conds.append((var("n") % (2 * rs.block_n)).eq(0))
    return BodyLaunch(tuple(out), all_of(*conds), h.label, worklist_bm)


BODY = Body(name="tcgen05", title="tcgen05", arch=SM100_ARCH, cc="10.0 (sm_100a) / 10.3 (sm_103a)",
            what="TMA + tcgen05.mma with the accumulators in tensor memory, tensor maps of lhs "
                 "and rhs, a persistent grid of the device's SMs",
            template="cuda/gemm_tcgen05.cu.j2", applies=uses_sm100, plan=_plan, launch=_launch)
