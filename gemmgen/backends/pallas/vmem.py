"""VMEM accounting: every buffer one grid step holds, padded to native tiles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from gemmgen import ir
from gemmgen.backends.pallas.cores import matmul_core
from gemmgen.backends.pallas.dtypes import storage_bytes
from gemmgen.backends.pallas.tpu import LANES, MAX_BUFFERS, SUBLANES, TPU_VMEM, MiB, TpuVmem
from gemmgen.ir import BiasMode, Op, ScaleMode
from gemmgen.render import source_ref


def padded_bytes(shape: tuple[int, ...], itemsize: int) -> int:
    """VMEM bytes of a block: the last two dims padded to the native tile
    (128 lanes x 8 sublanes of 32 bits, so 16 rows of bf16, 32 of 8-bit)."""
    dims = list(shape)
    while len(dims) < 2:
        dims.insert(0, 1)
    *lead, rows, cols = dims
    sub = SUBLANES * max(1, 4 // itemsize)
    rows = -(-rows // sub) * sub
    cols = -(-cols // LANES) * LANES
    total = rows * cols * itemsize
    for d in lead:
        total *= d
    return total


@dataclass(frozen=True, slots=True)
class VmemBlock:
    """One VMEM buffer of a grid step, for the VMEM accounting."""

    name: str
    shape: tuple[int, ...]  # as it sits in VMEM (squeezed dims dropped)
    itemsize: int
    buffers: int

    @property
    def bytes(self) -> int:
        return padded_bytes(self.shape, self.itemsize) * self.buffers


def quantize_tk(kernel: ir.Kernel) -> int:
    """The K block of the quantize grid: the tile's k rounded to whole groups
    (for packed fp4 to whole groups and 256 columns, at least 256: 128 lanes
    of bytes)."""
    kernel = kernel.for_backend(ir.Backend.PALLAS_TPU)
    g = kernel.out_scale.block_k or kernel.tile.k
    if kernel.out.is_sub_byte:
        g = ir.lcm(g, 256)
    return max(g, kernel.tile.k // g * g)


def vmem_blocks(kernel: ir.Kernel, tile: ir.Tile) -> tuple[VmemBlock, ...]:
    """Every VMEM buffer one grid step holds with `tile`, optional inputs
    included (the worst case)."""
    tm, tn, tk = tile.m, tile.n, tile.k
    bufs = min(kernel.stages, MAX_BUFFERS)
    lhs_b = storage_bytes(kernel.lhs.dtype)
    out_b = storage_bytes(kernel.out)
    match kernel.op:
        case Op.QUANTIZE:
            q = quantize_tk(kernel)
            groups = max(q // max(kernel.out_scale.block_k, 1), 1)
            # The f32 work arrays of a block (x, |x| and its transpose, the
            # spread scales, q): Mosaic keeps them in VMEM too.
            shared = (VmemBlock("scale", (tm, groups), 4, bufs),
                      VmemBlock("work", (4, tm, q), 4, 1))
            if kernel.out.is_sub_byte:  # packed q, and the codes of a block in f32
                return (VmemBlock("lhs", (tm, q), lhs_b, bufs),
                        VmemBlock("out", (tm, q // 2), 1, bufs),
                        VmemBlock("pack", (256, 128), 2, bufs),
                        VmemBlock("codes", (tm, q), 4, 1), *shared)
            return (VmemBlock("lhs", (tm, q), lhs_b, bufs),
                    VmemBlock("out", (tm, q), out_b, bufs), *shared)
        case Op.TGMM:
            return (VmemBlock("lhs", (tm, tk), lhs_b, bufs),
                    VmemBlock("rhs", (tm, tn), storage_bytes(kernel.rhs_operand.dtype), bufs),
                    VmemBlock("existing_out", (tk, tn), out_b, bufs),
                    VmemBlock("out", (tk, tn), out_b, bufs),
                    VmemBlock("acc", (tk, tn), 4, 1))
        case Op.DENSE | Op.GROUPED:
            pass
        case _:
            assert_never(kernel.op)
    core = matmul_core(kernel)
    rhs_b = storage_bytes(kernel.rhs_operand.dtype)
    halves = len(core.halves)
    blocks: list[VmemBlock] = []
    if core.lhs_split:
        blocks += [VmemBlock("lhs_even", (tm, tk // 2), lhs_b, bufs),
                   VmemBlock("lhs_odd", (tm, tk // 2), lhs_b, bufs)]
    else:
        blocks.append(VmemBlock("lhs", (tm, tk // 2 if core.lhs_packed else tk), lhs_b, bufs))
    if core.rhs_nk:
        rhs_shape = (tn, tk // 2 if core.rhs_packed else tk)
    else:
        rhs_shape = (tk, tn // 2 if core.rhs_packed else tn)
    blocks.append(VmemBlock("rhs", rhs_shape, rhs_b, bufs * halves))
    if core.lhs_in_tile:  # bytes per block of the K tile, and e8m0's exponents
        blocks.append(VmemBlock("lhs_scale", (tm, tk // kernel.lhs_scale.block_k), 1, bufs))
        if core.exponent_input("lhs"):
            blocks.append(VmemBlock("lhs_exponent", (tm, 1), 4, bufs))
    elif core.lhs_sub:  # the K tile's scales: one f32 column per block
        blocks.append(VmemBlock("lhs_scale", (tm, max(tk // kernel.lhs_scale.block_k, 1)), 4,
                                bufs))
    elif kernel.lhs_scale.mode in (ScaleMode.TOKEN, ScaleMode.TOKEN_GROUP):
        blocks.append(VmemBlock("lhs_scale", (tm, 1), 4, bufs))
    if core.rhs_in_tile:
        nb = tk // kernel.rhs_scale.block_k
        blocks.append(VmemBlock("rhs_scale", (tn, nb) if core.rhs_nk else (nb, tn), 1,
                                bufs * halves))
        if core.exponent_input("rhs"):
            blocks.append(VmemBlock("rhs_exponent", (1, tn), 4, bufs * halves))
    elif core.rhs_sub:  # the K tile's scales: one f32 row per block
        blocks.append(VmemBlock("rhs_scale", (max(tk // kernel.rhs_scale.block_k, 1), tn), 4,
                                bufs * halves))
    elif core.rhs_scale_per_n:
        blocks.append(VmemBlock("rhs_scale", (1, tn), 4, bufs * halves))
    if kernel.bias.mode is not BiasMode.NONE:
        blocks.append(VmemBlock("bias", (1, tn), storage_bytes(kernel.bias.dtype),
                                bufs * halves))
    out_tn = tn // 2 if core.interleaved else tn
    if core.grouped and not core.masked:  # existing_out, aliased: read with out's blocks
        blocks.append(VmemBlock("existing_out", (tm, out_tn), out_b, bufs))
    blocks.append(VmemBlock("out", (tm, out_tn), out_b, bufs))
    blocks.append(VmemBlock("acc", (tm, tn), 4, halves))
    if core.interleaved:  # the transposed accumulator the pairs are read from
        blocks.append(VmemBlock("pairs", (tn, min(tm, 128)), 4, 1))
    if core.rows_scratch:
        blocks.append(VmemBlock("wide rows", (tk, tn // 2), 4, 1))
    return tuple(blocks)


def vmem_bytes(kernel: ir.Kernel, tile: ir.Tile) -> int:
    return sum(b.bytes for b in vmem_blocks(kernel, tile))


def vmem_limit(need: int, vmem: TpuVmem) -> int | None:
    """The scoped-VMEM limit to request: None (Mosaic's default) when the
    kernel's blocks plus a quarter (Mosaic's own scratch: 16.84 MiB for 16
    MiB of blocks, seen on a v5e) fit the smallest default of any TPU
    generation, else that much in whole MiB, capped at the declared
    generation's usable VMEM. The smallest default, not the declared
    generation's: a module built for a v6e (32 MiB by default) that needs
    22 MiB must still compile on a v5e (16 MiB), where Mosaic would refuse
    it (seen on a v5e)."""
    want = need + need // 4
    if want <= min(v.scoped_default for v in TPU_VMEM.values()):
        return None
    want = -(-want // MiB) * MiB
    return min(want, vmem.usable)


@dataclass(frozen=True, slots=True)
class TileRow:
    """One row of the tile LUT as the generated code sees it."""

    cond: str  # a Python condition on m, n, k (g, tpu); "" for the default tile
    m: int
    n: int
    k: int
    where: str  # spec position, for a comment ("tuned v5e, specs/x.gemm:40" for a tuned row)
    vmem_bytes: int  # VMEM per grid step with this tile


def cond_text(c: ir.Cond, masked: bool) -> str:
    """One condition in the generated `tile_for`: `m/g` is `m // g`, which
    holds only when there are groups (`g > 0 and m // g <= 64`: no rows per
    group to compare without them), on the masked layout `m` itself
    (tile_for gets a group's capacity);
    `tpu=v6e` compares the generation the module runs on."""
    if c.dim == ir.TPU_COND:
        return f'tpu == "{c.value}"'
    if c.dim == "m/g" and not masked:
        return f"g > 0 and m // g {c.cmp.value} {c.value}"
    return f"{'m' if c.dim == 'm/g' else c.dim} {c.cmp.value} {c.value}"


def tile_rows(kernel: ir.Kernel) -> tuple[TileRow, ...]:
    """The tile LUT: the rules in order, then the default (cond "")."""
    kernel = kernel.for_backend(ir.Backend.PALLAS_TPU)
    rows = []
    for rule in kernel.tile_rules:
        cond = " and ".join(cond_text(c, kernel.masked) for c in rule.conds)
        where = source_ref(rule.loc)
        if rule.tuned:
            where = f"tuned {rule.tuned}, {where}"
        rows.append(TileRow(cond, rule.tile.m, rule.tile.n, rule.tile.k,
                            where, vmem_bytes(kernel, rule.tile)))
    t = kernel.tile
    rows.append(TileRow("", t.m, t.n, t.k, source_ref(kernel.tile_loc), vmem_bytes(kernel, t)))
    return tuple(rows)
