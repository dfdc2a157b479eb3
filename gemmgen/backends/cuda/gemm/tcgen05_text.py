"""The file comment's words on the sm_100a body (tcgen05.py's tiles print
them): the 1-CTA, 2-CTA and weight-only tiles' algorithm, and the
block-scaled tcgen05.mma of an MX kernel or of DeepSeek's e8m0 scales.
"""

from __future__ import annotations

import textwrap

from gemmgen import ir
from gemmgen.backends.cuda.gemm.tcgen05_tile import Sm100Tile
from gemmgen.backends.cuda.gemm.text import COLUMNS
from gemmgen.ir import DType


def algorithm(kernel: ir.Kernel, t: Sm100Tile, number: int,
              tiles: tuple[Sm100Tile, ...] = ()) -> tuple[str, ...]:
    """The file comment's lines on the sm_100a path."""
    if t.mixed:
        return mixed_algorithm(kernel, number, tiles or (t,))
    # The 1-CTA tile in words when a LUT entry has one, the pair after it.
    t = next((h for h in (t, *tiles) if not h.pair), t)
    extra = ""
    if t.promoted:
        extra = (" Each K tile's MMAs go into an accumulator of their own, whose sums the "
                 "epilogue warps add into f32 registers times the K tile's block scales "
                 "(the FP32 promotion).")
    if t.block_scaled:
        what = (f"DeepSeek e8m0 scales (128 x 4 atoms of a byte per row and 32-wide K block, "
                f"{t.sf_stage} bytes a stage)" if t.deepseek
                else f"MX scales (128 x 4 atoms, {t.sf_stage} bytes a stage)")
        extra = (f" Block-scaled: each K tile's {what} are gathered by the producer warp's "
                 f"32 lanes into the stage, copied into TMEM with tcgen05.cp.32x128b.warpx4 by the MMA thread, and applied "
                 f"by {block_scaled_words(kernel)}.")
    act = kernel.epilogue.activation.value
    if kernel.epilogue.interleaved:
        extra += (f" {act} (pairs=interleaved): a tile's B is the {t.bn} columns 2 n0.. in "
                  f"order, so each thread's row holds the adjacent gate and up columns of its "
                  f"outputs.")
    elif kernel.epilogue.activation.paired:
        extra += (f" {act}: a tile's B is {t.bn_out} gate columns over the matching "
                  f"{t.bn_out} up columns (n / 2 on), so each thread's row holds both halves "
                  f"of its outputs.")
    pair = next((h for h in (t, *tiles) if h.pair), None)
    if pair is not None:
        words = (f": clusters of 2 x 1 x 1 blocks of {pair.threads} threads, each "
                 f"CTA pair computing {pair.bm} x {pair.bn} tiles; in each CTA a producer warp "
                 f"issuing TMA loads of its 128 x {pair.bk} A and {pair.bn // 2} x {pair.bk} B "
                 f"boxes (128-byte swizzle) into {pair.stages} stages, completing on the even "
                 f"CTA's barriers; the even CTA's one thread issuing tcgen05.mma.cta_group::2 "
                 f"{pair.bm}x{pair.bn}x{pair.bk // 4} into one of two TMEM accumulators "
                 f"({pair.tmem_cols} columns in each CTA) and committing to both CTAs; each "
                 f"CTA's epilogue warpgroup reading its own 128 rows with tcgen05.ld; a "
                 f"persistent grid of 2 x min(SMs / 2, tiles) blocks.")
        multicast = sorted({h.cluster_n for h in (t, *tiles) if h.pair and h.cluster_n > 1})
        if multicast:
            ps = " or ".join(str(p) for p in multicast)
            words += (f" LUT entries of cluster_n={ps} put {ps} pairs along n in a cluster "
                      f"(2 x cluster_n CTAs) sharing the tile's 256 rows of A: CTA v of pair 0 "
                      f"multicasts A's half v to CTA v of every pair (TMA multicast), each "
                      f"stage's commit reaches every CTA of the cluster (its empty barrier "
                      f"takes one arrival a pair), and a pair past the last n tile of a unit "
                      f"still takes its part (zero-filled B, no stores).")
        if pair.block_scaled:
            words += (f" Block-scaled on the pair: each CTA's producer warp gathers the scale "
                      f"atoms of its 128 A rows and of all {pair.bn} B rows ({pair.sf_stage} "
                      f"bytes a stage"
                      + ("; W4A8: and unpacks its half of B" if pair_unpacks_b(kernel) else "")
                      + "), the odd CTA's arrivals relayed to the even CTA's barrier, and the "
                      "even CTA's thread copies them into both CTAs' TMEM with "
                      "tcgen05.cp.cta_group::2.32x128b.warpx4 before the cta_group::2 "
                      f"block-scaled MMAs (SASS {pair_sass(kernel)}).")
        if t.pair:  # every LUT entry's
            text = (f"on sm_100a (compute capability 10.0) the launchers run the sm_100a "
                    f"body's 2-CTA tile (gg_gemm_sm100_pair.cuh, docs/cuda-sm100.md){words}{extra}")
            wrapped = textwrap.wrap(text, COLUMNS - len("//   (1) "))
            return (f"({number}) {wrapped[0]}", *(f"    {w}" for w in wrapped[1:]))
        extra += f" LUT entries of m = 256 take the 2-CTA tile{words}"
    text = (f"on sm_100a (compute capability 10.0) the launchers run the sm_100a body "
            f"instead (gg_gemm_sm100.cuh, docs/cuda-sm100.md): {t.threads} threads, a "
            f"producer warp issuing TMA loads of {t.bm} x {t.bk} A and {t.bn} x {t.bk} B boxes "
            f"(128-byte swizzle) into {t.stages} stages, one thread issuing tcgen05.mma "
            f"{t.mma} into one of two TMEM accumulators ({t.tmem_cols} columns), an epilogue "
            f"warpgroup reading the other with tcgen05.ld; a persistent grid of min(SMs, "
            f"tiles) blocks.{extra}")
    wrapped = textwrap.wrap(text, COLUMNS - len("//   (1) "))
    return (f"({number}) {wrapped[0]}", *(f"    {w}" for w in wrapped[1:]))


def mixed_algorithm(kernel: ir.Kernel, number: int,
                    tiles: tuple[Sm100Tile, ...]) -> tuple[str, ...]:
    """The file comment's lines on the weight-only sm_100a path: its
    128-row tile (else the decode tile) in words, and the decode tile's
    swap when a LUT entry takes it."""
    t = next((h for h in tiles if not h.swap and not h.pair),
             next((h for h in tiles if not h.swap), tiles[0]))
    row = t.raw_stage // (t.bn // 2 if t.pair else t.bn)
    blocks = kernel.rhs_scale.enabled and kernel.rhs_scale.placement is ir.Placement.MAINLOOP
    text = (f"on sm_100a (compute capability 10.0) the launchers run the sm_100a body's "
            f"weight-only tile instead (gg_gemm_sm100_mixed.cuh, docs/cuda-sm100.md): "
            f"{t.threads} threads, a producer warp issuing TMA loads of {min(t.bm, 128)} x "
            f"{t.bk} lhs boxes (128-byte swizzle) and {t.bn // 2 if t.pair else t.bn} x "
            f"{row}-byte raw weight boxes ({row}-byte "
            f"swizzle) into {t.stages} stages; a transform warpgroup widening each stage's "
            f"weights to {kernel.lhs.dtype.value} in shared memory (the UMMA K-major layout, "
            f"128-byte swizzle) and releasing it to one thread issuing tcgen05.mma {t.mma} "
            f"into one of two TMEM accumulators ({t.tmem_cols} columns), an epilogue "
            f"warpgroup reading the other with tcgen05.ld; a persistent grid of min(SMs, "
            f"tiles) blocks."
            + (" Each scale block's MMAs go into an accumulator of their own, whose sums the "
               "epilogue warps add, times each weight row's scale of the block, into the "
               + ("tile's f32 sums in registers." if t.swap else
                  "tile's f32 sums in TMEM (128 columns after the accumulators).")
               if blocks else "")
            + (f" {kernel.epilogue.activation.value}: the raw weight rows come 8 gate rows "
               "over the 8 matching up rows (16 boxes), and the transform writes them as the "
               "gate half over the up half."
               if kernel.epilogue.activation.paired else "")
            + (" LUT entries of m <= 32 take the decode tile: the operands swapped (the widened "
               "weights as the MMA's A, 16 or 32 lhs rows as its N), the accumulator read back "
               "transposed, one output column per epilogue thread."
               if any(h.swap for h in tiles) else "")
            + (f" LUT entries of m = 256 take the 2-CTA tile: clusters of 2 x 1 x 1 blocks, "
               f"each CTA pair computing 256 x {t.bn} tiles; each CTA loads its 128 lhs rows and "
               f"{t.bn // 2} weight rows (the leader the gate rows, the peer the up rows for "
               f"silu_mul) on its own barrier, its transform warpgroup widens its half and "
               f"arrives on the even CTA's barrier, whose one thread issues "
               f"tcgen05.mma.cta_group::2 256x{t.bn}x16 once both halves are written and "
               f"commits to both CTAs; a persistent grid of 2 x min(SMs / 2, tiles) blocks."
               if any(h.pair for h in tiles) else ""))
    wrapped = textwrap.wrap(text, COLUMNS - len("//   (1) "))
    return (f"({number}) {wrapped[0]}", *(f"    {w}" for w in wrapped[1:]))


def block_scaled_words(kernel: ir.Kernel) -> str:
    """The block-scaled tcgen05.mma of an MX kernel (or of DeepSeek's e8m0
    scales promoted in hardware), in words."""
    if kernel.tcgen05_deepseek_mma:
        ls, rs = kernel.lhs_scale, kernel.rhs_scale
        return (f"tcgen05.mma.kind::mxf8f6f4.block_scale.scale_vec::1X ({kernel.lhs.dtype.value}, "
                f"DeepSeek's e8m0 block scales promoted in hardware: each lhs scale of "
                f"k={ls.block_k} repeated over its {ls.block_k // ir.MX_BLOCK_K} K blocks of 32, "
                f"each rhs scale of n={rs.block_n} k={rs.block_k} over its rows and K blocks; "
                "SASS UTCQMMA), scale ids 0..3 over the K tile's four MMAs")
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


def pair_unpacks_b(kernel: ir.Kernel) -> bool:
    """W4A8: the producer warp unpacks the packed fp4 weights (B) itself."""
    return kernel.rhs_operand.dtype is DType.FP4 and kernel.lhs.dtype is not DType.FP4


def pair_sass(kernel: ir.Kernel) -> str:
    """The SASS of a block-scaled kernel's cta_group::2 MMA (nvcc 13.5)."""
    if kernel.lhs.dtype is DType.FP4:
        return ("UTCOMMA.2CTA.4X" if kernel.lhs_scale.dtype is DType.UE4M3
                else "UTCOMMA.2CTA")
    return "UTCQMMA.2CTA"
