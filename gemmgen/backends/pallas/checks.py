"""diagnose: what the Pallas backend cannot emit, and the VMEM budget."""

from __future__ import annotations

from gemmgen import ir
from gemmgen.backends.pallas.cores import matmul_core
from gemmgen.backends.pallas.dtypes import storage_bytes
from gemmgen.backends.pallas.tpu import LANES, MAX_BUFFERS, SUBLANES, TPU_VMEM, MiB, tpu_of
from gemmgen.backends.pallas.vmem import quantize_tk, vmem_blocks
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import DType, Layout, Op, ScaleMode


def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """What this backend cannot emit for `kernel`, and the VMEM budget, of
    the kernel as this backend sees it (its own tile LUT, if any)."""
    kernel = kernel.for_backend(ir.Backend.PALLAS_TPU)
    out: list[Diagnostic] = []
    name = kernel.name
    if kernel.algorithm is not ir.Algorithm.TILE:
        out.append(Diagnostic(kernel.at("algorithm"), f"kernel '{name}': pallas_tpu cannot emit "
                              f"algorithm '{kernel.algorithm.value}' (a CUDA GEMV); use the tile "
                              "algorithm, whose m tile clamps to small m"))
    if kernel.op is Op.QUANTIZE:
        out.extend(_check_quantize(kernel))
    else:
        out.extend(_check_tiles(kernel))
        out.extend(_check_in_tile_scales(kernel))
        out.extend(_check_paired_n(kernel))
        out.extend(_check_sub_blocks(kernel))
    if kernel.stages > MAX_BUFFERS:
        out.append(Diagnostic(kernel.at("stages"), f"kernel '{name}': stages {kernel.stages}: "
                              f"Mosaic pipelines each block with 1 or 2 buffers, so pallas_tpu "
                              f"supports stages 1 or 2"))
    out.extend(_check_vmem(kernel, spec))
    return out


def _check_quantize(kernel: ir.Kernel) -> list[Diagnostic]:
    out = []
    g = kernel.out_scale.block_k
    if kernel.out_scale.mode is not ScaleMode.TOKEN_GROUP or not g:
        out.append(Diagnostic(kernel.out_scale.loc, f"kernel '{kernel.name}': pallas_tpu "
                              "cannot emit quantize with out_scale "
                              f"'{kernel.out_scale.mode.value}' yet (per_token_group k=G only)"))
        return out
    lanes = 2 * LANES if kernel.out.is_sub_byte else LANES  # packed fp4: 128 lanes of bytes
    if quantize_tk(kernel) % lanes:
        out.append(Diagnostic(kernel.out_scale.loc, f"kernel '{kernel.name}': the K block of "
                              f"quantize ({quantize_tk(kernel)}: tile k={kernel.tile.k} rounded "
                              f"to whole groups of {g}) must be a multiple of {lanes} lanes; "
                              f"choose a group size that divides {lanes} or is a multiple of it"))
    if g % SUBLANES:
        out.append(Diagnostic(kernel.out_scale.loc, f"kernel '{kernel.name}': pallas_tpu "
                              f"quantize needs a group size that is a multiple of {SUBLANES} "
                              f"(k={g}): it reduces each group's amax over whole sublane tiles "
                              "of the transposed block"))
    sc = kernel.out_scale
    if ir.quantize_rule(kernel.out, sc) is None or sc.layout is not ir.ScaleLayout.ROWS:
        out.append(Diagnostic(kernel.out_scale.loc, f"kernel '{kernel.name}': pallas_tpu "
                              "quantize writes row-major f32 or e8m0 scales for FP8, e8m0 or "
                              "ue4m3 (k=16) scales for packed fp4"))
    if kernel.tile.m % SUBLANES:
        out.append(Diagnostic(kernel.lut()[0][1], f"kernel '{kernel.name}': tile "
                              f"m={kernel.tile.m} is not a multiple of {SUBLANES}, as a TPU "
                              "block needs"))
    return out


def _check_paired_n(kernel: ir.Kernel) -> list[Diagnostic]:
    """silu_mul pairs output column j (gate) with rhs column j + n/2 (up), an
    n block with the block n/2 further on: a fixed n whose half is not a
    whole number of lane blocks gives a module that raises on every call, so
    it is refused here, at the epilogue (a kernel without `dims n=` checks n
    when called)."""
    n = kernel.static_n
    if not kernel.epilogue.halves or n is None:  # interleaved pairs: any even n
        return []
    lanes = matmul_core(kernel).n_lanes
    if n % (2 * lanes) == 0:
        return []
    act = kernel.epilogue.activation.value
    return [Diagnostic(kernel.epilogue.loc, f"kernel '{kernel.name}': pallas_tpu pairs column j "
                       f"with j + n/2 ({act}) in blocks of {lanes} lanes, so n must be a "
                       f"multiple of {2 * lanes}; dims n={n} (n/2 = {n // 2}) is not, and the "
                       f"module could never run: store the gate and up halves padded to "
                       f"n/2 = {-(-n // (2 * lanes)) * lanes} columns each",
                       related=(kernel.at("dims"),))]


def _check_tiles(kernel: ir.Kernel) -> list[Diagnostic]:
    """TPU blocks: the last dim a multiple of 128 lanes, the second-minor a
    multiple of 8 sublanes (what the Mosaic lowering demands of a block that
    is not a whole dimension; the generated code clamps a tile larger than
    its dimension to the whole dimension, which is always legal)."""
    out: list[Diagnostic] = []
    k_lanes = LANES * 2 if (kernel.lhs.packed or (kernel.rhs_operand.packed and
                                                   kernel.rhs_operand.layout is Layout.NK)) else LANES
    n_lanes = LANES * 2 if (kernel.rhs_operand.packed and kernel.rhs_operand.layout is Layout.KN) else LANES
    # Row blocks hold whole sublane tiles of every array cut along m: 8 rows
    # of 32-bit data, 16 of 16-bit, 32 of 8-bit and packed 4-bit (bytes). A
    # v5e refused to compile 24- and 40-row blocks of 8-bit lhs and 16-row
    # blocks of packed 4-bit lhs (CompileTimeMosaicMisalignedBlockAndTiling)
    # that the lowering on the CPU accepts.
    by_rows = [("lhs", kernel.lhs.dtype)]
    if kernel.op is Op.TGMM:
        by_rows.append(("rhs", kernel.rhs_operand.dtype))
    else:
        by_rows.append(("out", kernel.out))
    name, dtype = min(by_rows, key=lambda item: storage_bytes(item[1]))
    rows = SUBLANES * (4 // storage_bytes(dtype))
    for tile, loc, what in kernel.lut():
        problems = []
        if tile.m % rows:
            bits = "packed 4-bit" if dtype.is_sub_byte else f"{8 * storage_bytes(dtype)}-bit"
            problems.append(f"m={tile.m} is not a multiple of {rows}, the rows of one sublane "
                            f"tile of {bits} {name}")
        if tile.n % n_lanes:
            problems.append(f"n={tile.n} is not a multiple of {n_lanes}")
        if tile.k % k_lanes:
            problems.append(f"k={tile.k} is not a multiple of {k_lanes}")
        for p in problems:
            out.append(Diagnostic(loc, f"kernel '{kernel.name}': {what} {tile}: {p}, as a TPU "
                                  "block needs (8 sublanes x 128 lanes; 4-bit data packed two "
                                  "per byte doubles the lanes)"))
        if kernel.epilogue.interleaved and not problems:
            out.extend(_check_interleaved_tile(kernel, tile, loc, what))
    return out


def _check_interleaved_tile(kernel: ir.Kernel, tile: ir.Tile, loc: ir.Loc,
                            what: str) -> list[Diagnostic]:
    """Interleaved (gate, up) pairs: an n tile writes tn / 2 output columns,
    whole lane tiles (PAIR_ALIGN), and the epilogue de-interleaves at most
    128 rows at a time (Mosaic's strided loads), so a taller m tile is whole
    128-row chunks. Refused rather than rounded: a LUT's tile is what runs."""
    out = []
    align = matmul_core(kernel).pair_align
    act = kernel.epilogue.activation.value
    if tile.n % align:
        out.append(Diagnostic(loc, f"kernel '{kernel.name}': {what} {tile}: n={tile.n} is not a "
                              f"multiple of {align}: {act} with interleaved pairs writes n/2 "
                              f"output columns per n tile, which must be whole {LANES}-lane "
                              "tiles"))
    if tile.m > LANES and tile.m % LANES:
        out.append(Diagnostic(loc, f"kernel '{kernel.name}': {what} {tile}: m={tile.m} is over "
                              f"{LANES} and not a multiple of it: {act} with interleaved pairs "
                              f"de-interleaves {LANES} rows at a time (Mosaic's strided loads)"))
    return out


def _check_in_tile_scales(kernel: ir.Kernel) -> list[Diagnostic]:
    """Scales applied per block inside each K tile (`kblocks.in_tile_scale`):
    every K tile of the LUT holds whole blocks (a kernel applies a scale's
    blocks one way); they are bytes (e8m0, ue4m3); blocks along the
    sublanes of rhs [k, n] are whole sublane tiles of f32."""
    if kernel.algorithm is not ir.Algorithm.TILE:
        return []
    core = matmul_core(kernel)
    out = []
    for side in ("lhs", "rhs"):
        scale: ir.Scale = getattr(kernel, f"{side}_scale")
        if not core.in_tile(side):
            continue
        where = f"kernel '{kernel.name}': pallas_tpu"
        if scale.dtype not in (DType.E8M0, DType.UE4M3):
            out.append(Diagnostic(scale.loc, f"{where} applies {side}_scale "
                                  f"layout={scale.layout.value} (per block inside a K tile) in "
                                  f"e8m0 or ue4m3 bytes, not {scale.dtype.value}; use "
                                  "layout=rows"))
            continue
        for tile, loc, what in kernel.lut():
            if tile.k % scale.block_k:
                out.append(Diagnostic(loc, f"{where} applies the {side}_scale blocks of "
                                      f"k={scale.block_k} inside each K tile here, as another "
                                      f"tile of the LUT holds several, so {what} k={tile.k} "
                                      f"must hold whole blocks too (a multiple of "
                                      f"{scale.block_k})"))
        width = scale.block_k // 2 if core.k_pairs else scale.block_k
        if side == "rhs" and not core.rhs_nk and width % SUBLANES:
            out.append(Diagnostic(scale.loc, f"{where} applies rhs_scale blocks of "
                                  f"k={scale.block_k} along the sublanes of rhs [k, n], in "
                                  f"blocks of {width} rows, which must be a multiple of "
                                  f"{SUBLANES}; use rhs [n, k] or a k that is a multiple of "
                                  f"{SUBLANES * (2 if core.k_pairs else 1)}"))
    return out


def _check_sub_blocks(kernel: ir.Kernel) -> list[Diagnostic]:
    """Main-loop scales applied block by block inside a K tile that holds
    several (`cores.sub_blocked`): every K tile of the LUT holds whole
    blocks (the kernel applies a scale's blocks one way), the looped scales
    share one block size, and a block is whole lane tiles of the values the
    loop slices (BK, or BK / 2 for 4-bit data packed along k, a multiple of
    128: a slice inside a lane tile would need lane shuffles)."""
    if kernel.algorithm is not ir.Algorithm.TILE:
        return []
    core = matmul_core(kernel)
    if not core.sub_blocks:
        return []
    where = f"kernel '{kernel.name}': pallas_tpu"
    out = []
    looped = [(side, getattr(kernel, f"{side}_scale")) for side in ("lhs", "rhs")
              if core.sub(side)]
    for side, scale in looped:
        for tile, loc, what in kernel.lut():
            if tile.k % scale.block_k:
                out.append(Diagnostic(loc, f"{where} applies the {side}_scale blocks of "
                                      f"k={scale.block_k} one by one inside each K tile here, "
                                      f"as another tile of the LUT holds several, so {what} "
                                      f"k={tile.k} must hold whole blocks too (a multiple of "
                                      f"{scale.block_k})"))
        width = scale.block_k // 2 if core.k_pairs else scale.block_k
        if width % LANES:
            packed = " (4-bit data packed along k: half of it per byte half)" \
                if core.k_pairs else ""
            out.append(Diagnostic(scale.loc, f"{where} applies the {side}_scale blocks of "
                                  f"k={scale.block_k} one by one inside a K tile, each a slice "
                                  f"of {width} columns{packed}, which must be whole tiles of "
                                  f"{LANES} lanes; use K tiles that divide the block"))
    if len(looped) == 2 and looped[0][1].block_k != looped[1][1].block_k:
        out.append(Diagnostic(kernel.rhs_scale.loc, f"{where} applies the lhs_scale blocks of "
                              f"k={kernel.lhs_scale.block_k} and the rhs_scale blocks of "
                              f"k={kernel.rhs_scale.block_k} one by one inside a K tile, so "
                              "they must be the same size; use K tiles that divide both"))
    return out


def _check_vmem(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    tpu = tpu_of(spec)
    vm = TPU_VMEM[tpu]
    out = []
    for tile, loc, _ in kernel.lut():
        blocks = vmem_blocks(kernel, tile)
        need = sum(b.bytes for b in blocks)
        if need > vm.usable:
            parts = ", ".join(f"{b.name} {b.bytes / MiB:.1f}" for b in blocks)
            out.append(Diagnostic(loc, f"kernel '{kernel.name}': tile {tile} needs "
                                  f"{need / MiB:.1f} MiB of VMEM per grid step ({parts}), over "
                                  f"the {vm.usable // MiB} MiB a kernel may use on TPU {tpu} "
                                  f"(3/4 of {vm.physical // MiB} MiB)"))
    return out
