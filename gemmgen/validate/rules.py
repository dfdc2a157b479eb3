"""Kernel semantics: one small function per rule, run in order on a kernel
whose fields all read cleanly (docs/spec.md states each rule in prose).

A rule gets the field reader (`reader.FieldReader`, for positions:
`r.field_loc`, `r.fields`, `r.repeated`, `r.targets`) and the kernel, and
reports through `r.err`. The rules import the reader, never the field
readers of `fields` that run them: no import cycle.
"""

from __future__ import annotations

from collections.abc import Callable

from gemmgen import ir
from gemmgen.ir import Activation, Algorithm, Backend, BiasMode, DType, Layout, Op, ScaleMode
from gemmgen.validate.reader import FieldReader

Rule = Callable[[FieldReader, ir.Kernel], None]


def quantize_fields(r: FieldReader, k: ir.Kernel) -> None:
    """quantize produces per-token-group scales (f32 or e8m0 for FP8, e8m0
    or ue4m3 per 16 for packed fp4) and takes nothing else."""
    if k.op is not Op.QUANTIZE:
        if "out_scale" in r.fields:
            r.err(r.field_loc("out_scale"), "'out_scale' is for op 'quantize' only")
        return
    if k.out_scale.mode is not ScaleMode.TOKEN_GROUP:
        r.err(r.field_loc("out"), "op 'quantize' needs 'out_scale per_token_group k=G "
              "<f32|e8m0|ue4m3>' for the scales it produces")
    elif k.out_scale.dtype is DType.BF16:
        r.err(k.out_scale.loc, "quantize scales are f32 or e8m0 (FP8 out), e8m0 or ue4m3 "
              "(out fp4 packed), not bf16")
    else:
        _quantize_formats(r, k)
    for f in ("lhs_scale", "rhs_scale", "bias", "epilogue", "tile_rule"):
        if f in r.fields or f in r.repeated:
            r.err(r.field_loc(f), f"op 'quantize' does not take '{f}'")
    for loc, what in _own_rule_lines(r):
        r.err(loc, f"op 'quantize' does not take '{what}'")


def _quantize_formats(r: FieldReader, k: ir.Kernel) -> None:
    """The element / scale pairs quantize produces (docs/spec.md, "Quantize"):
    FP8 with f32 or e8m0 scales (MXFP8 with k=32 round=floor); packed fp4 with
    e8m0 scales (MXFP4) or ue4m3 scales per 16 (NVFP4); row-major scales."""
    sc, out = k.out_scale, k.out
    g = sc.block_k
    if sc.layout is not ir.ScaleLayout.ROWS:
        r.err(sc.loc, f"quantize writes its scales row-major ([m, ceil(k/{g})], layout=rows), "
              f"not layout={sc.layout.value}")
    if out is DType.FP4 and sc.dtype is DType.F32:
        r.err(sc.loc, "out fp4 takes e8m0 scales (MXFP4: 'per_token_group k=32 e8m0 "
              "round=floor') or ue4m3 scales (NVFP4: 'per_token_group k=16 ue4m3'), not f32")
    if sc.dtype is DType.UE4M3:
        if out is not DType.FP4:
            r.err(sc.loc, f"ue4m3 scales are NVFP4's: they go with 'out fp4 packed', not "
                  f"'out {out.value}' (FP8 takes f32 or e8m0 scales)")
        if g != 16:
            r.err(sc.loc, f"ue4m3 scales (NVFP4) are one per 16 elements: write "
                  f"'per_token_group k=16 ue4m3', not k={g}")
    if out is DType.FP4:
        if g % 2:
            r.err(sc.loc, f"out fp4 is packed two per byte, so a group of k={g} would share a "
                  "byte with the next: the group size must be even")
        if k.static_k is not None and k.static_k % 2:
            r.err(r.field_loc("dims"), f"out fp4 is packed two per byte along k, so k must be "
                  f"even; dims k={k.static_k}")


def _own_rule_lines(r: FieldReader) -> list[tuple[ir.Loc, str]]:
    """The first `tile_rule BACKEND` line of each backend's own LUT."""
    return [(own.rules[0].loc, f"tile_rule {word}") for word, own in sorted(r.own_tiles.items())
            if own.rules]


def operand_types(r: FieldReader, k: ir.Kernel) -> None:
    """A may be wider than B (weight-only quantization), but integer x float
    and fp8 x int8 have no MMA, and 4-bit values belong on the rhs."""
    lhs, rhs = k.lhs, k.rhs
    if rhs is None:
        return
    if lhs.dtype.is_quantized and rhs.dtype.is_quantized:
        both_int = not lhs.dtype.is_float and not rhs.dtype.is_float
        both_fp = lhs.dtype.is_float and rhs.dtype.is_float
        if not (both_int or both_fp):
            r.err(rhs.loc, f"lhs '{lhs.dtype.value}' x rhs '{rhs.dtype.value}' mixes integer "
                  "and floating-point 8-bit operands; dequantize one side (e.g. bf16 lhs)")
    if lhs.dtype.is_sub_byte and not rhs.dtype.is_sub_byte:
        r.err(lhs.loc, "a 4-bit lhs needs a 4-bit rhs; 4-bit weights belong on the rhs")


def unsigned_weights(r: FieldReader, k: ir.Kernel) -> None:
    """uint4 is a weight type of W4A16 (GPTQ / AWQ): rhs only, against float
    activations; its zero points (`rhs_scale ... zero=uint4`) belong to a
    K-blocked rhs scale of uint4 weights (docs/spec.md, "Zero points")."""
    lhs, rhs = k.lhs, k.rhs
    if lhs.dtype is DType.UINT4:
        r.err(lhs.loc, "uint4 is a weight type (W4A16: GPTQ / AWQ): it goes on the rhs, "
              "against bf16 / f16 / f32 activations")
    elif rhs is not None and rhs.dtype is DType.UINT4 and lhs.dtype.is_quantized:
        r.err(rhs.loc, f"uint4 weights go with 16- or 32-bit float activations (W4A16), not "
              f"lhs '{lhs.dtype.value}'")
    sc = k.rhs_scale
    if sc.zero is None:
        return
    if rhs is None or rhs.dtype is not DType.UINT4:
        got = "no rhs" if rhs is None else f"rhs '{rhs.dtype.value}'"
        r.err(sc.zero_loc, f"'zero={sc.zero.value}' gives uint4 weights their zero points "
              f"(w = (q - z) * s, GPTQ / AWQ); {got} is not uint4")
    elif sc.mode not in (ScaleMode.KBLOCK, ScaleMode.BLOCK):
        r.err(sc.zero_loc, f"zero points are one per scale of a K-blocked rhs_scale ('kblock "
              f"k=BK', or 'block n=1 k=BK' for dense), not '{sc.mode.value}'")
    elif sc.dtype is DType.E8M0 or sc.dtype is DType.UE4M3:
        r.err(sc.zero_loc, f"zero points go with f32 or bf16 scales, not {sc.dtype.value} "
              "(the MX and NV formats are symmetric)")


def tgmm_fields(r: FieldReader, k: ir.Kernel) -> None:
    """tgmm, the backward pass, has no scales, bias or activation, and a tile
    LUT only on Pallas."""
    if k.op is not Op.TGMM:
        return
    for f in ("lhs_scale", "rhs_scale", "bias", "tile_rule"):
        if f in r.fields or f in r.repeated:
            r.err(r.field_loc(f), f"op 'tgmm' (the backward pass) does not take '{f}'")
    # Pallas's tgmm picks its tile at trace time like the grouped matmul
    # (rules on m/g choose by rows per expert); the CUDA tgmm has one tile.
    for loc, what in _own_rule_lines(r):
        if what != "tile_rule pallas_tpu":
            r.err(loc, f"op 'tgmm' (the backward pass) takes only 'tile_rule pallas_tpu', "
                  f"not '{what}'")
    if k.epilogue.activation is not Activation.NONE:
        r.err(k.epilogue.loc, "op 'tgmm' takes no activation")


def grouped_only(r: FieldReader, k: ir.Kernel) -> None:
    """`kblock` scales and a per-group bias are for grouped weights."""
    if k.rhs_scale.mode is ScaleMode.KBLOCK and k.op is not Op.GROUPED:
        r.err(k.rhs_scale.loc, "rhs_scale 'kblock' ([g, k/bk, 1, n], megablox) is for op "
              "'grouped'; use 'block' or 'per_channel' for dense")
    if k.bias.mode is BiasMode.GROUP and k.op is not Op.GROUPED:
        r.err(k.bias.loc, "bias [g, 1, n] is per group: op 'grouped' only")


def tiles_fit_scale_blocks(r: FieldReader, k: ir.Kernel) -> None:
    """FP32 promotion happens at the end of each K scale block, so a K tile
    may not straddle two: it divides a block, or holds whole ones where the
    scale allows several per K tile (`ir.Scale.tile_k_problem`); N tiles and
    N scale blocks divide one another; silu_mul needs even N tiles. (GEMV
    kernels have no block tile.)"""
    if k.algorithm is not Algorithm.TILE or k.op is Op.QUANTIZE:
        return
    for tile, loc, what in lut_tiles(r, k):
        # pallas_tpu applies the blocks a K tile holds one by one (a loop over
        # them, docs/pallas.md); the CUDA kernels apply one scale per K tile.
        several = tile_backends(k, what) == {Backend.PALLAS_TPU}
        for scale, side in ((k.lhs_scale, "lhs_scale"), (k.rhs_scale, "rhs_scale")):
            if (problem := scale.tile_k_problem(tile.k, side, several=several)) is not None:
                r.err(loc, f"{what} k={tile.k} {problem}")
            if scale.mode is ScaleMode.BLOCK and scale.block_n % tile.n and \
                    tile.n % scale.block_n:
                r.err(loc, f"{what} n={tile.n} cannot tile the {side} blocks of "
                      f"n={scale.block_n}: one must divide the other")
        if k.epilogue.activation.paired and tile.n % 2:
            r.err(loc, f"{what} n={tile.n} must be even for {k.epilogue.activation.value}")


def tile_backends(k: ir.Kernel, what: str) -> set[Backend]:
    """The backends that use a tile of `lut_tiles` (by what it is called):
    a backend's own LUT is its alone, the unqualified one serves every
    listed backend without a LUT of its own."""
    for own in k.backend_tiles:
        if what.endswith(f" {own.backend.value}"):
            return {own.backend}
    return {b for b in k.backends if k.own_tiles(b) is None}


def lut_tiles(r: FieldReader, k: ir.Kernel) -> list[tuple[ir.Tile, ir.Loc, str]]:
    """Every tile of the LUTs the kernel's backends use, with its position
    and what to call it: the unqualified `tile` and `tile_rule`s when a
    listed backend has no LUT of its own (they are no backend's otherwise),
    then each backend's own."""
    out = []
    if any(k.own_tiles(b) is None for b in k.backends):
        out += [(k.tile, r.field_loc("tile"), "tile")] + [
            (rule.tile, rule.loc, "tile_rule") for rule in k.tile_rules]
    for own in k.backend_tiles:
        word = own.backend.value
        out += [(own.tile, own.loc, f"tile {word}")] + [
            (rule.tile, rule.loc, f"tile_rule {word}") for rule in own.tile_rules]
    return out


def static_dims(r: FieldReader, k: ir.Kernel) -> None:
    """Fixed dims must suit silu_mul's pairing and the packing of 4-bit operands."""
    if k.epilogue.activation.paired and k.static_n is not None and k.static_n % 2:
        how = ("gate column 2j with up column 2j + 1" if k.epilogue.interleaved
               else "column j with j + n/2")
        r.err(r.field_loc("dims"), f"{k.epilogue.activation.value} pairs {how}, so n must be "
              f"even; dims n={k.static_n} is odd")
    for operand, name in ((k.lhs, "lhs"), (k.rhs, "rhs")):
        if operand is None or not operand.packed:
            continue
        nk = k.rhs is not None and k.rhs.layout is Layout.NK
        packed_dim = "k" if (name == "lhs" or nk) else "n"
        static = k.static_k if packed_dim == "k" else k.static_n
        if static is not None and static % 2:
            r.err(operand.loc, f"{name} is packed two per byte along {packed_dim}, so "
                  f"{packed_dim} must be even; dims {packed_dim}={static}")


def algorithms(r: FieldReader, k: ir.Kernel) -> None:
    """GEMV algorithms are for dense ops; gemv_batched says the M it serves."""
    if k.algorithm is not Algorithm.TILE and k.op is not Op.DENSE:
        r.err(r.field_loc("algorithm"), f"algorithm '{k.algorithm.value}' is for op 'dense'")
    if k.algorithm is Algorithm.GEMV_BATCHED and k.max_m is None:
        r.err(r.field_loc("algorithm"), "algorithm 'gemv_batched' needs 'max_m' "
              "(the largest M it serves, e.g. max_m 8)")
    if k.max_m is not None and k.algorithm is not Algorithm.GEMV_BATCHED:
        r.err(r.field_loc("max_m"), "'max_m' applies to algorithm 'gemv_batched' only")


def arch_features(r: FieldReader, k: ir.Kernel) -> None:
    """FP8 x FP8 tensor-core MMA needs sm_89 or newer on every declared arch."""
    cuda = r.targets.get(Backend.CUDA)
    if cuda is None or Backend.CUDA not in k.backends or k.rhs is None:
        return
    if k.lhs.dtype.is_fp8 and k.rhs.dtype.is_fp8 and k.algorithm is Algorithm.TILE:
        for arch in cuda.cuda_archs:
            if ir.arch_number(arch) < 89:
                r.err(r.field_loc("backends"), f"FP8 x FP8 tensor-core MMA needs sm_89 or "
                      f"newer, but target cuda declares '{arch}'; drop the arch or use "
                      "a bf16 lhs (W8A16)")


def mma_choice(r: FieldReader, k: ir.Kernel) -> None:
    """`mma wgmma` needs sm_90a on every declared CUDA arch and a kernel the
    Hopper body runs (`ir.Kernel.wgmma_obstacle`), `mma tcgen05` sm_100a and
    a kernel the sm_100a body runs (`tcgen05_obstacle`); `auto` and
    `mma_sync` always have a body to use."""
    if k.mma is ir.Mma.TCGEN05:
        _tcgen05_choice(r, k)
    if k.mma is not ir.Mma.WGMMA:
        return
    loc = r.field_loc("mma")
    cuda = r.targets.get(Backend.CUDA)
    if cuda is None or Backend.CUDA not in k.backends:
        r.err(loc, "'mma wgmma' is a CUDA choice, but the kernel has no cuda backend", 3)
        return
    for arch in cuda.cuda_archs:
        if arch in ir.SM12X_ARCHS:
            r.err(loc, f"'mma wgmma' needs sm_90a, but target cuda declares '{arch}': sm_12x "
                  "has no wgmma, tcgen05, TMEM or clusters beyond 1x1x1, only warp-level "
                  "mma.sync; drop the arch or write 'mma auto', which uses mma.sync there", 3)
        elif arch not in ir.WGMMA_ARCHS:
            r.err(loc, f"'mma wgmma' needs sm_90a, but target cuda declares '{arch}' "
                  "(wgmma is an sm_90a instruction); drop the arch or write 'mma auto', "
                  "which uses mma.sync there", 3)
    why = k.wgmma_obstacle()
    if why is not None:
        r.err(loc, f"'mma wgmma' cannot run this kernel on the Hopper body: {why}; "
              "write 'mma auto' or 'mma mma_sync'", 3)


def _tcgen05_choice(r: FieldReader, k: ir.Kernel) -> None:
    """`mma tcgen05`: every declared arch has tcgen05 and TMEM, and the
    sm_100a body runs the kernel."""
    loc = r.field_loc("mma")
    cuda = r.targets.get(Backend.CUDA)
    if cuda is None or Backend.CUDA not in k.backends:
        r.err(loc, "'mma tcgen05' is a CUDA choice, but the kernel has no cuda backend", 3)
        return
    for arch in cuda.cuda_archs:
        if arch not in ir.TCGEN05_ARCHS:
            r.err(loc, f"'mma tcgen05' needs sm_100a, but target cuda declares '{arch}' "
                  "(tcgen05 and tensor memory are datacenter Blackwell instructions: "
                  f"{', '.join(ir.TCGEN05_ARCHS)}); drop the arch or write 'mma auto', which "
                  "uses tcgen05 where the arch has it", 3)
    why = k.tcgen05_obstacle()
    if why is not None:
        r.err(loc, f"'mma tcgen05' cannot run this kernel on the sm_100a body: {why}; "
              "write 'mma auto' or 'mma mma_sync'", 3)


def promotion_choice(r: FieldReader, k: ir.Kernel) -> None:
    """`promotion hardware` needs sm_100a / sm_103a on every declared CUDA
    arch, the sm_100a body (`mma auto` or `tcgen05`) and block scales the
    block-scaled tcgen05.mma applies (`ir.Kernel.hardware_promotion_obstacle`:
    DeepSeek's, e8m0, on FP8); `software` needs per-K-block scales to promote
    (not MX / NV ones: `mma mma_sync` promotes those). `auto` is always
    valid."""
    if k.promotion is ir.Promotion.AUTO:
        return
    loc = r.field_loc("promotion")
    word = f"'promotion {k.promotion.value}'"
    cuda = r.targets.get(Backend.CUDA)
    if cuda is None or Backend.CUDA not in k.backends:
        r.err(loc, f"{word} is a CUDA choice, but the kernel has no cuda backend", 9)
        return
    if k.promotion is ir.Promotion.SOFTWARE:
        if k.rhs is not None and k.mx_mma_obstacle() is None:
            r.err(loc, f"{word}: the MX / NV block scales of this kernel are applied by the "
                  "block-scaled MMAs wherever one runs; write 'mma mma_sync' to promote them "
                  "in software", 9)
        elif not any(s.enabled and s.placement is ir.Placement.MAINLOOP
                     for s in (k.lhs_scale, k.rhs_scale)):
            r.err(loc, f"{word}: the kernel has no per-K-block scales to promote "
                  "(lhs_scale per_token_group, rhs_scale block or kblock)", 9)
        return
    for arch in cuda.cuda_archs:
        if arch not in ir.TCGEN05_ARCHS:
            r.err(loc, f"{word} needs sm_100a, but target cuda declares '{arch}' (the "
                  "block-scaled tcgen05.mma is a datacenter Blackwell instruction: "
                  f"{', '.join(ir.TCGEN05_ARCHS)}); drop the arch or write 'promotion auto', "
                  "which promotes in hardware where the arch has it", 9)
    if k.mma not in (ir.Mma.AUTO, ir.Mma.TCGEN05):
        r.err(loc, f"{word} is the sm_100a body's (tcgen05), but the kernel says "
              f"'mma {k.mma.value}'; write 'mma auto' or 'mma tcgen05'", 9)
    why = k.hardware_promotion_obstacle()
    if why is not None:
        r.err(loc, f"{word} cannot apply this kernel's block scales: {why}; write "
              "'promotion auto' or 'promotion software'", 9)


def warp_layout(r: FieldReader, k: ir.Kernel) -> None:
    """warp_tile divides the block tile, and threads match the warp count.
    (tgmm's output block is k x n; its backend checks its own warp tile.)"""
    if k.warp_tile is None or k.op is Op.TGMM:
        return
    k = k.for_backend(Backend.CUDA)  # warp_tile splits the CUDA tile
    if k.tile.m % k.warp_tile.m or k.tile.n % k.warp_tile.n:
        r.err(r.field_loc("warp_tile"), f"warp_tile {k.warp_tile.m}x{k.warp_tile.n} "
              f"must divide the block tile {k.tile.m}x{k.tile.n}")
    elif k.threads is not None and \
            (k.tile.m // k.warp_tile.m) * (k.tile.n // k.warp_tile.n) * 32 != k.threads:
        r.err(r.field_loc("threads"), f"threads {k.threads} disagrees with the warp "
              f"layout: {k.tile.m // k.warp_tile.m} x {k.tile.n // k.warp_tile.n} warps "
              f"of 32 threads")


def scale_layouts(r: FieldReader, k: ir.Kernel) -> None:
    """layout=atom128x4 pads rows to whole 128-row atoms: defined for the
    rows of one matrix (dense lhs, a dense or per-group rhs), not for the
    lhs rows of a grouped op, where groups of any size would share atoms."""
    s = k.lhs_scale
    if s.layout is ir.ScaleLayout.ATOM128X4 and k.op is not Op.DENSE:
        r.err(s.loc, f"lhs_scale layout=atom128x4 is defined for op dense only: the lhs rows of "
              f"op {k.op.value} belong to groups of any size, which would share 128-row atoms; "
              "use layout=rows")


# The most CTAs a cluster launch may ask for everywhere (the CUDA
# programming guide's portable cluster size; more needs
# cudaFuncAttributeNonPortableClusterSizeAllowed and a device that has it).
PORTABLE_CLUSTER_CTAS = 8
PAIR_M = 256  # the sm_100a 2-CTA tile's rows (a LUT entry of m = 256)


def cluster_tiles(r: FieldReader, k: ir.Kernel) -> None:
    """`cluster_n=P` on a LUT entry: P CTA pairs of the sm_100a 2-CTA tile
    along N in a cluster of 2P CTAs, sharing the entry's 256 rows of A by
    TMA multicast (docs/spec.md, "Clusters: TMA multicast on sm_100a"). It
    needs a CUDA LUT, an entry of m = 256, at most 8 CTAs (the portable
    cluster size), a declared sm_100a / sm_103a and a kernel whose m = 256
    entries take the 2-CTA tile there (`ir.Kernel.tcgen05_multicast_obstacle`).
    `mma wgmma | mma_sync` ignore it, as they ignore the pair, so that `mma`
    stays sweepable."""
    entries = [(t, loc, what) for t, loc, what in lut_tiles(r, k) if t.cluster_n != 1]
    cuda_entries = []
    for tile, loc, what in entries:
        at, width = ((tile.cluster_at, len(str(tile.cluster_n))) if tile.cluster_at != ir.NO_LOC
                     else (loc, 1))
        backend = what.split()[1] if " " in what else Backend.CUDA.value
        if backend == Backend.CUDA.value:
            cuda_entries.append((tile, loc))
        if backend != Backend.CUDA.value:
            r.err(at, f"{what} cluster_n={tile.cluster_n}: cluster_n is the CUDA sm_100a "
                  f"2-CTA tile's (pairs of CTAs sharing A by TMA multicast), not {backend}'s",
                  width)
        elif 2 * tile.cluster_n > PORTABLE_CLUSTER_CTAS:
            r.err(at, f"{what} cluster_n={tile.cluster_n} asks for clusters of "
                  f"{2 * tile.cluster_n} CTAs ({tile.cluster_n} CTA pairs): at most "
                  f"{PORTABLE_CLUSTER_CTAS}, the portable cluster size, so cluster_n is 1 to "
                  f"{PORTABLE_CLUSTER_CTAS // 2}", width)
        elif tile.m != PAIR_M:
            r.err(at, f"{what} cluster_n={tile.cluster_n} needs the 2-CTA tile, m={PAIR_M} "
                  f"(its CTA pairs along N share the tile's {PAIR_M} rows of A), but the "
                  f"entry has m={tile.m}", width)
    if not cuda_entries:
        return
    tile, loc = cuda_entries[0]
    at = tile.cluster_at if tile.cluster_at != ir.NO_LOC else loc
    word = f"cluster_n={tile.cluster_n}"
    cuda = r.targets.get(Backend.CUDA)
    if cuda is None or Backend.CUDA not in k.backends:
        r.err(at, f"{word} is a CUDA choice, but the kernel has no cuda backend")
        return
    if not any(a in ir.TCGEN05_ARCHS for a in cuda.cuda_archs):
        r.err(at, f"{word} needs sm_100a or sm_103a (tcgen05.mma.cta_group::2 on CTA pairs, "
              f"TMA multicast across a cluster), but target cuda declares "
              f"{', '.join(cuda.cuda_archs) or 'no arch'}; on other archs an m=256 entry is "
              "an ordinary tile: drop cluster_n or declare sm_100a")
    elif k.mma not in (ir.Mma.AUTO, ir.Mma.TCGEN05):
        return  # another body forced (`mma` swept, say): an ordinary tile there, as m=256 is
    elif (why := k.tcgen05_multicast_obstacle()) is not None:
        r.err(at, f"{word} needs CTA pairs of the sm_100a body sharing A by TMA multicast, "
              f"which this kernel's tile does not do: {why}; drop cluster_n")


RULES: tuple[Rule, ...] = (
    quantize_fields, operand_types, unsigned_weights, tgmm_fields, grouped_only, tiles_fit_scale_blocks,
    static_dims, algorithms, arch_features, mma_choice, promotion_choice, warp_layout,
    scale_layouts, cluster_tiles,
)


def check(r: FieldReader, k: ir.Kernel) -> None:
    """Run the rules on `k`: for quantize only its own (it has no rhs, tile
    or epilogue for the others to check)."""
    quantize_fields(r, k)
    if k.op is Op.QUANTIZE:
        mma_choice(r, k)
        promotion_choice(r, k)
        return
    for rule in RULES[1:]:
        rule(r, k)
