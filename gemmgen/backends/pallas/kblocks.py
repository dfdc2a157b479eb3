"""Which main-loop scales a K tile applies per block, and how: an MX / NV
(or e8m0 per-row) scale multiplies its operand in VMEM (`in_tile_scale`);
the other K-blocked scales, when a K tile of the LUT holds several of their
blocks, are applied by a loop over the tile's blocks (`sub_blocked`,
`sub_block_sides`). The functions take the kernel's Pallas view."""

from __future__ import annotations

from gemmgen import ir
from gemmgen.backends.pallas.tpu import LANES
from gemmgen.ir import Layout


def in_tile_scale(kernel: ir.Kernel, scale: ir.Scale) -> bool:
    """Whether the kernel applies `scale` per block inside each K tile, by
    multiplying the operand in VMEM: an MX / NV block scale (ue4m3, the
    atom layout), or an e8m0 scale per K block of one row whose Pallas tile
    LUT has a K tile that holds several blocks (else such a scale divides
    its K tiles, one scale per tile, like every other K-blocked scale),
    unless the kernel loops over the blocks of its K tiles for another
    scale (`sub_blocked`): the e8m0 scale then joins that loop, one
    exponent per block, exactly as with a K tile of one block.
    `kernel` is the Pallas view; checks.py refuses a LUT that mixes the two."""
    if not scale.blocks_in_k_tile or not scale.per_row_blocks:
        return False
    return scale.per_mma_block or (not sub_blocked(kernel) and _holds_several(kernel, scale))


def _holds_several(kernel: ir.Kernel, scale: ir.Scale) -> bool:
    """A K tile of the kernel's LUT holds more than one of the scale's blocks."""
    return any(t.k > scale.block_k for t, _, _ in kernel.lut())


def _loop_only(scale: ir.Scale) -> bool:
    """A main-loop scale with K blocks that only a loop over the blocks of a
    K tile can apply several of (not an MX / NV or e8m0 per-row scale,
    which the operand takes in VMEM): f32 / bf16 `per_token_group`, `block`
    with n > 1, `kblock`."""
    return (scale.placement is ir.Placement.MAINLOOP and scale.block_k > 0
            and not scale.blocks_in_k_tile)


def sub_blocked(kernel: ir.Kernel) -> bool:
    """The kernel loops over the scale blocks of its K tiles: a K tile of
    its Pallas LUT holds several blocks of a `_loop_only` scale."""
    return any(_loop_only(s) and _holds_several(kernel, s)
               for s in (kernel.lhs_scale, kernel.rhs_scale))


def sub_block_sides(kernel: ir.Kernel) -> tuple[bool, bool]:
    """(lhs, rhs): the main-loop scales a `sub_blocked` kernel applies per
    block in its loop (those not applied to the operand in VMEM)."""
    if not sub_blocked(kernel):
        return False, False
    return tuple(s.placement is ir.Placement.MAINLOOP and s.block_k > 0
                 and not in_tile_scale(kernel, s)
                 for s in (kernel.lhs_scale, kernel.rhs_scale))


def k_lanes(kernel: ir.Kernel) -> int:
    """Lanes of a K block: 128, or 256 when 4-bit data is packed along k."""
    rhs = kernel.rhs_operand
    packed_k = kernel.lhs.packed or (rhs.packed and rhs.layout is Layout.NK)
    return 2 * LANES if packed_k else LANES
