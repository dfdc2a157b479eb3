"""The sm_100a body's fixed shape and the tile of one LUT entry
(`Sm100Tile`): the numbers tcgen05.py plans and
templates/cuda/gemm_tcgen05.cu.j2 prints, with the tile's file comment.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from gemmgen.backends.cuda.gemm.text import COLUMNS

# The body's fixed shape (gg_gemm_sm100.cuh: kThreads, kBM, the 128-byte K
# tile row, the epilogue's 32-column chunks) and the plan's choices for it.
SM100_ARCH = "sm_100a"
SM100_THREADS, SM100_BM, SM100_ROW_BYTES, SM100_CHUNK = 192, 128, 128, 32
SM100_GROUP_M = 8  # rows of tiles per rasterized group (L2 reuse)
SM100_MAX_STAGES = 8
# The weight-only tile (gg_gemm_sm100_mixed.cuh): a transform warpgroup
# more, 128 weight rows (the Hopper weight-only boxes) of 64 K elements.
SM100_MIXED_THREADS, SM100_MIXED_BN, SM100_MIXED_BK = 320, 128, 64
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
    mixed: bool = False  # weight-only: raw weights widened by a transform warpgroup
    raw_stage: int = 0  # bytes of a stage's raw weights (weight-only tiles)
    swap: bool = False  # the weight-only decode tile: the weights the MMA's A, bm lhs rows its N
    deepseek: bool = False  # DeepSeek's e8m0 scales promoted in hardware (block_scaled too)
    pair: bool = False  # the 2-CTA tile: bm = 256 rows over a CTA pair, cta_group::2, cluster 2x1x1
    cluster_n: int = 1  # the 2-CTA tile: pairs along n a cluster, sharing A by TMA multicast

    group_m = SM100_GROUP_M

    @property
    def threads(self) -> int:
        """192, or 320 with the weight-only tile's transform warpgroup."""
        return SM100_MIXED_THREADS if self.mixed else SM100_THREADS

    @property
    def check(self) -> str:
        """The C++ predicate that checks the tile's numbers."""
        return ("sm100_mixed::check_tile_mixed" if self.mixed
                else "sm100::check_tile_sm100")

    @property
    def mma(self) -> str:
        """The MMA one thread issues: 128 x bn x (32 bytes of K); the decode
        tile's: 128 weight rows x bm lhs rows x 16."""
        if self.swap:
            return f"128x{self.bm}x{self.bk // 4} (the weights as A)"
        if self.pair:
            return f"256x{self.bn}x{self.bk // 4} (cta_group::2)"
        return f"128x{self.bn}x{self.bk // 4}"

    @property
    def sf_cols(self) -> int:
        """TMEM columns of a K tile's scale atoms (4 per 512-byte atom)."""
        return self.sf_stage // 128

    @property
    def label(self) -> str:
        cluster = f", {self.cluster_n} pairs" if self.cluster_n > 1 else ""
        return f"{self.bm}x{self.bn}x{self.bk}, {self.stages} stages{cluster}"

    @property
    def comment(self) -> tuple[str, ...]:
        if self.mixed:
            decode = (" (the decode tile: the operands swapped)" if self.swap
                      else " (2-CTA: a CTA pair, cta_group::2, clusters of 2 x 1 x 1; a CTA's "
                      "stage holds its 128 lhs rows and 64 weight rows)" if self.pair else "")
            text = (f"sm_100a weight-only tile {self.index}{decode}: {self.bm} x {self.bn} x "
                    f"{self.bk}, "
                    f"{self.stages} stages of {self.a_stage} bytes of lhs, {self.raw_stage} of "
                    f"raw weights and {self.b_stage} of widened ones, {self.smem_bytes} bytes "
                    f"of shared memory in all, {self.tmem_cols} TMEM columns (two "
                    f"accumulators{', then the f32 sums' if self.promoted else ''}).")
            return tuple(textwrap.wrap(text, COLUMNS - len("// ")))
        cluster = (f"clusters of {2 * self.cluster_n} x 1 x 1: {self.cluster_n} pairs along "
                   f"n, CTA v of pair 0 multicasting A's half v to every pair"
                   if self.cluster_n > 1 else "clusters of 2 x 1 x 1")
        if self.block_scaled and self.pair:
            text = (f"sm_100a 2-CTA tile {self.index}: {self.bm} x {self.bn} x {self.bk} over a "
                    f"CTA pair (cta_group::2, {cluster}), each CTA 128 rows of A "
                    f"and {self.bn // 2} of B: {self.stages} stages of "
                    f"{self.a_stage + self.b_stage} bytes of operands and {self.sf_stage} of "
                    f"scale atoms (its A rows', all {self.bn} B rows'), {self.smem_bytes} bytes "
                    f"of shared memory in all, {self.tmem_cols} TMEM columns a CTA (two "
                    f"accumulators, then {self.sf_cols} of scales).")
        elif self.block_scaled:
            text = (f"sm_100a tile {self.index}: {self.bm} x {self.bn} x {self.bk}, {self.stages} "
                    f"stages of {self.a_stage + self.b_stage} bytes of operands and "
                    f"{self.sf_stage} of scale atoms, {self.smem_bytes} bytes of shared memory "
                    f"in all, {self.tmem_cols} TMEM columns (two accumulators, then "
                    f"{self.sf_cols} of scales).")
        elif self.pair:
            text = (f"sm_100a 2-CTA tile {self.index}: {self.bm} x {self.bn} x {self.bk} over a "
                    f"CTA pair (cta_group::2, {cluster}), each CTA 128 rows of A "
                    f"and {self.bn // 2} of B: {self.stages} stages of "
                    f"{self.a_stage + self.b_stage} bytes, {self.smem_bytes} bytes of shared "
                    f"memory in all, {self.tmem_cols} TMEM columns a CTA (two accumulators).")
        else:
            text = (f"sm_100a tile {self.index}: {self.bm} x {self.bn} x {self.bk}, "
                    f"{self.stages} stages of {self.a_stage + self.b_stage} bytes, "
                    f"{self.smem_bytes} bytes of shared memory in all, {self.tmem_cols} TMEM "
                    f"columns (two accumulators).")
        return tuple(textwrap.wrap(text, COLUMNS - len("// ")))
