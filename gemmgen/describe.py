"""One-line human descriptions of kernels and dispatchers (`gemmgen list`)."""

from __future__ import annotations

from gemmgen import ir
from gemmgen.diagnostics import plural


def _scale(s: ir.Scale) -> str:
    blocks = []
    if s.block_n > 1:
        blocks.append(f"n={s.block_n}")
    if s.block_k:
        blocks.append(f"k={s.block_k}")
    words = [s.mode.value, *blocks, s.dtype.value]
    if s.rounding is not ir.ScaleRounding.UP:  # up, the default, goes unsaid
        words.append(f"round={s.rounding.value}")
    if s.layout is not ir.ScaleLayout.ROWS:  # rows, the default, goes unsaid
        words.append(f"layout={s.layout.value}")
    if s.global_scale:
        words.append("global=f32")
    if s.zero is not None:
        words.append(f"zero={s.zero.value}")
    inner = " ".join(words)
    return f"{inner} ({s.placement.value})"


def _lut(tile: ir.Tile, rules: tuple[ir.TileRule, ...]) -> str:
    text = f"tile {tile}"
    if rules:
        text += f" +{plural(len(rules), 'tile rule')}"
    return text


def describe_kernel(k: ir.Kernel) -> str:
    """One line: the kernel as the spec states it, with each backend's own
    tile LUT after the shared one (`pallas_tpu: tile 1024x1024x512`); a
    backend's view (`ir.Kernel.for_backend`) shows its own tiles only."""
    parts = [f"{k.name}:", k.op.value]
    if k.rhs is not None:
        rhs_shape = {ir.Op.DENSE: {ir.Layout.KN: "[k, n]", ir.Layout.NK: "[n, k]"},
                     ir.Op.GROUPED: {ir.Layout.KN: "[g, k, n]", ir.Layout.NK: "[g, n, k]"},
                     ir.Op.TGMM: {ir.Layout.KN: "[m, n]", ir.Layout.NK: "[m, n]"}}[k.op][k.rhs.layout]
        packed = " packed" if k.rhs.packed else ""
        lhs_packed = " packed" if k.lhs.packed else ""
        masked = " [g, m, k] (masked)" if k.masked else ""
        parts.append(f"lhs {k.lhs.dtype.value}{lhs_packed}{masked} x rhs {k.rhs.dtype.value}"
                     f"{packed} {rhs_shape}")
    else:
        parts.append(f"lhs {k.lhs.dtype.value}")
    packed = " packed" if k.out.is_sub_byte else ""
    parts.append(f"-> {k.out.value}{packed} (acc {k.acc.value})")
    for name, s in (("lhs_scale", k.lhs_scale), ("rhs_scale", k.rhs_scale),
                    ("out_scale", k.out_scale)):
        if s.enabled:
            parts.append(f"{name} {_scale(s)}")
    if k.bias.mode is not ir.BiasMode.NONE:
        parts.append(f"bias {k.bias.dtype.value} {'[n]' if k.bias.mode is ir.BiasMode.N else '[g, 1, n]'}")
    if k.epilogue.activation is not ir.Activation.NONE:
        parts.append(f"epilogue {k.epilogue.activation.value}")
    if k.epilogue.alpha is not None:
        parts.append(f"alpha {k.epilogue.alpha!r}")
    if k.op is not ir.Op.QUANTIZE:
        parts.append(_lut(k.tile, k.tile_rules))
        if k.view is None:
            for own in k.backend_tiles:
                parts.append(f"({own.backend.value}: {_lut(own.tile, own.tile_rules)})")
        if k.warp_tile:
            parts.append(f"warp {k.warp_tile.m}x{k.warp_tile.n}")
        parts.append(f"stages {k.stages}")
    if k.threads:
        parts.append(f"threads {k.threads}")
    if k.algorithm is not ir.Algorithm.TILE:
        parts.append(f"algorithm {k.algorithm.value}" + (f" max_m {k.max_m}" if k.max_m else ""))
    if k.static_n or k.static_k:
        parts.append("dims" + (f" n={k.static_n}" if k.static_n else "") +
                     (f" k={k.static_k}" if k.static_k else ""))
    if k.mma is not ir.Mma.AUTO:  # auto, the default, goes unsaid
        parts.append(f"mma {k.mma.value}")
    if k.promotion is not ir.Promotion.AUTO:
        parts.append(f"promotion {k.promotion.value}")
    parts.append("[" + ", ".join(b.value for b in k.backends) + "]")
    return " ".join(parts)


def describe_dispatch(d: ir.Dispatch) -> str:
    arms = ", ".join(f"{r.cond} -> {r.kernel}" if r.cond else f"else -> {r.kernel}"
                     for r in d.rules)
    return f"{d.name}: dispatch by M: {arms}"
