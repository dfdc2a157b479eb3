"""Random operands for a kernel, in storage format, with realistic magnitudes.

docs/semantics.md, "Random inputs", says what is drawn and why.
"""

from __future__ import annotations

import math

import numpy as np

from gemmgen import ir
from gemmgen.ir import BiasMode, DType, Op
from gemmgen.numerics import (
    element_dtype,
    float64_to_storage,
    from_fp4_codes,
    saturating_cast,
    storage_to_float64,
)
from gemmgen.reference.decode import out_shape


def random_group_sizes(rng: np.random.Generator, m: int, num_groups: int, *,
                       total: int | None = None, zero_fraction: float = 0.25) -> np.ndarray:
    """int32 [num_groups] with sum <= m and (usually) some zero-sized groups.

    total: the sum (default: drawn from m // 2 .. m, so trailing rows are
    often unowned). Each group is empty with probability zero_fraction; the
    rest share `total` at random cut points.
    """
    if total is None:
        total = int(rng.integers(m // 2, m + 1))
    if not 0 <= total <= m:
        raise ValueError(f"total {total} must lie in 0..{m}")
    live = rng.random(num_groups) >= zero_fraction
    if not live.any():
        live[rng.integers(num_groups)] = True
    cuts = np.sort(rng.integers(0, total + 1, size=int(live.sum()) - 1))
    parts = np.diff(np.concatenate([[0], cuts, [total]]))
    sizes = np.zeros(num_groups, np.int64)
    sizes[live] = parts
    return sizes.astype(np.int32)


def random_masked_m(rng: np.random.Generator, cap: int, g: int) -> np.ndarray:
    """int32 [g] valid-row counts in 0..cap for the masked layout, with empty
    (0) and full (cap) groups among ragged ones when g allows."""
    counts = rng.integers(0, cap + 1, size=g)
    if g >= 3:
        counts[rng.permutation(g)[:2]] = (0, cap)
    return counts.astype(np.int32)


def _operand_values(rng: np.random.Generator, dtype: DType, shape: tuple[int, ...], *,
                    scaled: bool, gain: float = 1.0) -> tuple[np.ndarray, float]:
    """Random nonzero values exactly representable in `dtype` (float64, unpacked)
    and the scale that brings them to magnitude ~gain.

    A scaled operand spans its format (fp8: sigma = max / 4, so the largest
    values saturate rarely; int8: 1..127) and its scale carries the gain; an
    unscaled float operand has sigma = gain, an unscaled int8 stays in
    -15..15 so that the output fits f16.
    """
    match dtype:
        case DType.INT8 | DType.INT4:
            top = (127 if scaled else 15) if dtype is DType.INT8 else 7
            mag = rng.integers(1, top + 1, size=shape)
            values = np.where(rng.random(shape) < 0.5, -mag, mag).astype(np.float64)
            return values, gain / (0.6 * top)  # rms of 1..top is ~0.6 top
        case DType.UINT4:
            # GPTQ / AWQ codes: all of 0..15 (the zero points, `zero=uint4`,
            # are drawn on their own); rms ~9 without zero points.
            return rng.integers(0, 16, size=shape).astype(np.float64), gain / 9.0
        case DType.FP4:
            codes = rng.integers(1, 8, size=shape) + 8 * rng.integers(0, 2, size=shape)
            return from_fp4_codes(codes.astype(np.uint8)), gain / 3.0
        case DType.F32 | DType.BF16 | DType.F16 | DType.E4M3 | DType.E5M2:
            stored, base = _float_operand(rng, dtype, shape, scaled=scaled, gain=gain)
            return storage_to_float64(stored, dtype), base
    raise AssertionError(f"{dtype.value} is not an operand dtype")


_FLOATS = (DType.F32, DType.BF16, DType.F16, DType.E4M3, DType.E5M2)


def _float_operand(rng: np.random.Generator, dtype: DType, shape: tuple[int, ...], *,
                   scaled: bool, gain: float) -> tuple[np.ndarray, float]:
    """A float operand in storage format (see `_operand_values`): drawn in
    f32 and cast once (an f32 value rounds to bf16 / f16 / fp8 as its exact
    float64 value does), with no float64 round trip: a [5, 2048, 2560]
    operand drew in 1.5 s that way, a third of that now."""
    sigma = dtype.max_finite / 4 if (dtype.is_fp8 and scaled) else gain
    x = rng.standard_normal(shape, dtype=np.float32)
    x *= np.float32(sigma)
    tiny = np.float32(sigma * 2.0**-8)  # keep away from zero (fp8 e4m3: above 2**-9)
    # |x| < tiny becomes copysign(tiny, x): the same values as a masked copy,
    # in three plain passes (a masked np.copyto took 1 s per 1e8 elements).
    np.copysign(np.maximum(np.abs(x), tiny), x, out=x)
    if dtype.is_fp8:
        np.clip(x, -dtype.max_finite, dtype.max_finite, out=x)  # saturate, as saturating_cast does
    return (x if dtype is DType.F32 else x.astype(element_dtype(dtype))), gain / sigma


def _operand(rng: np.random.Generator, dtype: DType, shape: tuple[int, ...], *,
             scaled: bool, gain: float = 1.0) -> tuple[np.ndarray, float]:
    """`_operand_values` in storage format."""
    if dtype in _FLOATS:
        return _float_operand(rng, dtype, shape, scaled=scaled, gain=gain)
    values, base = _operand_values(rng, dtype, shape, scaled=scaled, gain=gain)
    return float64_to_storage(values, dtype), base


def _random_scale(rng: np.random.Generator, scale: ir.Scale, shape: tuple[int, ...],
                  base: float) -> np.ndarray:
    """Positive scales around `base` (x 2**U(-1, 1)) in the scale's storage
    format; in layout=atom128x4 the padding bytes are random too (a kernel
    must not read them)."""
    if scale.dtype is DType.UE4M3:
        # Within ue4m3's normal range whatever `base` is (2**-6 .. 448).
        s = np.clip(base, 2.0**-4, 64.0) * np.exp2(rng.uniform(-1.0, 1.0, size=shape))
        return saturating_cast(s, scale.dtype)
    if scale.dtype is DType.E8M0:
        e = round(math.log2(base)) + rng.integers(-2, 3, size=shape)
        return (np.clip(e, -127, 127) + 127).astype(np.uint8)
    s = base * np.exp2(rng.uniform(-1.0, 1.0, size=shape))
    return saturating_cast(s, scale.dtype)


def random_inputs(kernel: ir.Kernel, *, m: int, n: int, k: int, rng: np.random.Generator,
                  group_sizes=None, num_groups: int | None = None, g_local: int | None = None,
                  group_offset: int | None = None, with_existing_out: bool = False,
                  masked_m=None) -> dict[str, np.ndarray]:
    """Fresh random operands for `kernel` in storage format, keyed like `reference`'s
    keyword arguments (only the ones the kernel takes).

    n is the accumulator width (rhs columns); with silu_mul the output has
    n / 2 columns. Grouped ops: group_sizes (default: `random_group_sizes`
    over num_groups, default 4, groups in total), g_local local groups
    (default: all from group_offset on), group_offset (default: omitted,
    meaning 0). The masked layout: m is the capacity, g_local the groups
    (default 4), masked_m the valid rows (default `random_masked_m`); lhs is
    [g, m, k]. Values are never zero; scales are positive and bring the
    dequantized operands to magnitude ~1, so |out| ~ sqrt(k).
    """
    out: dict[str, np.ndarray] = {}
    if kernel.op is Op.QUANTIZE:
        # Rows of very different magnitudes, so scales differ per group.
        sigma = np.exp2(rng.uniform(-6.0, 6.0, size=(m, 1)))
        x, _ = _operand_values(rng, kernel.lhs.dtype, (m, k), scaled=False)
        out["lhs"] = float64_to_storage(x * sigma, kernel.lhs.dtype)
        if kernel.out_scale.global_scale:
            # NVFP4's recipe, amax / (448 * 6) over the tensor, times 2**U(-1, 1):
            # sometimes the largest blocks' scales saturate.
            amax = np.abs(storage_to_float64(out["lhs"], kernel.lhs.dtype)).max(initial=1.0)
            g = amax / 2688.0 * np.exp2(rng.uniform(-1.0, 1.0))
            out["global_scale"] = np.float32(g)
        return out

    g = None
    if kernel.masked:
        if group_sizes is not None or group_offset is not None or with_existing_out:
            raise ValueError("the masked layout takes masked_m, not group_sizes / "
                             "group_offset / existing_out")
        g = g_local if g_local is not None else (
            len(masked_m) if masked_m is not None else 4)
        if masked_m is None:
            masked_m = random_masked_m(rng, m, g)
        out["masked_m"] = np.asarray(masked_m, np.int32)
    elif masked_m is not None:
        raise ValueError("masked_m is for the masked grouped layout (lhs [g, m, k])")
    elif kernel.grouped:
        if group_sizes is None:
            total_groups = num_groups if num_groups is not None else (
                (g_local or 4) + (group_offset or 0))
            group_sizes = random_group_sizes(rng, m, total_groups)
        group_sizes = np.asarray(group_sizes, np.int32)
        offset = group_offset or 0
        g = g_local if g_local is not None else len(group_sizes) - offset
        if kernel.op is Op.TGMM and g != len(group_sizes) - offset and not with_existing_out:
            # NB: no tgmm argument but existing_out carries the local group count.
            raise ValueError(f"tgmm with g_local={g} < {len(group_sizes) - offset} groups "
                             "after group_offset needs with_existing_out=True")
        out["group_sizes"] = group_sizes
        if group_offset is not None:
            out["group_offset"] = np.asarray(group_offset, np.int32)

    lhs_scaled = kernel.lhs_scale.enabled
    rhs_scaled = kernel.rhs_scale.enabled
    a, a_base = _operand(rng, kernel.lhs.dtype, (g, m, k) if kernel.masked else (m, k),
                         scaled=lhs_scaled)
    # A paired activation multiplies two accumulators: shrink B so |out|
    # stays ~ sqrt(k).
    gain = k**-0.25 if kernel.epilogue.activation.paired else 1.0
    match kernel.op:
        case Op.DENSE:
            b_shape = (k, n) if kernel.rhs.layout is ir.Layout.KN else (n, k)
        case Op.GROUPED:
            b_shape = (g, k, n) if kernel.rhs.layout is ir.Layout.KN else (g, n, k)
        case _:
            b_shape = (m, n)
    b, b_base = _operand(rng, kernel.rhs.dtype, b_shape, scaled=rhs_scaled, gain=gain)
    out["lhs"], out["rhs"] = a, b
    for side, base in (("lhs", a_base), ("rhs", b_base)):
        scale: ir.Scale = getattr(kernel, f"{side}_scale")
        if scale.global_scale:
            # NVFP4's two levels as its quantizers set them: a small global
            # scale per tensor (per group: each its own) and block scales
            # that use ue4m3's range, their product ~base.
            glob = np.exp2(rng.uniform(-6.0, -4.0, size=ir.global_scale_shape(g=g)))
            base = base / float(np.exp2(-5.0))
        if scale.zero is not None:
            # Zero points anywhere in 0..15: q - z spans -15..15 (rms ~6.5).
            zshape = ir.scale_shape(scale, side=side, m=m, n=n, k=k, g=g)
            z = rng.integers(0, 16, size=zshape[:-1] + (2 * ir.cdiv(zshape[-1], 2),))
            out[f"{side}_zero"] = float64_to_storage(z.astype(np.float64), scale.zero)
            base = base * 9.0 / 6.5
        if scale.enabled:
            shape = ir.scale_shape(scale, side=side, m=m, n=n, k=k, g=g, masked=kernel.masked)
            out[f"{side}_scale"] = _random_scale(rng, scale, shape, base)
        if scale.global_scale:
            out[f"{side}_global_scale"] = glob.astype(np.float32)
    match kernel.bias.mode:
        case BiasMode.N:
            bias_shape: tuple[int, ...] | None = (n,)
        case BiasMode.GROUP:
            bias_shape = (g, 1, n)
        case _:
            bias_shape = None
    if bias_shape is not None:
        values = rng.standard_normal(bias_shape) * 0.5 * math.sqrt(k)
        out["bias"] = saturating_cast(values, kernel.bias.dtype)
    if with_existing_out:
        if not kernel.grouped:
            raise ValueError("existing_out is for grouped ops")
        shape = out_shape(kernel, m=m, n=n, k=k, g=g)
        values = rng.standard_normal(shape) * math.sqrt(k)
        out["existing_out"] = saturating_cast(values, kernel.out)
    return out
