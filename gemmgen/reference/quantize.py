"""op quantize in the reference: per-group amax, the scale it gives, exactly,
and the values before the element cast (docs/semantics.md, "quantize").

The scale, by out_scale dtype:

- f32: max(amax, 1e-10) / max rounded to nearest (DeepGEMM / SGLang);
- e8m0 round=up (the default): 2**ceil(log2(max(amax, 1e-10) / max)), so
  nothing saturates (DeepGEMM);
- e8m0 round=floor: OCP MX v1.0, section 6.3: 2**(floor(log2(amax)) -
  emax_elem), the exponent clamped to -127..127 (amax = 0: 2**-127);
- ue4m3 (NVFP4): amax / 6 rounded to nearest even in ue4m3, saturating at
  448; with a global scale G (`global=f32`), amax / (6 G), and the elements
  are x / (s G).

A group that holds an infinity or a NaN gets a NaN scale. The elements are
x / scale, which the caller's cast saturates and rounds to nearest even;
packed fp4 has no NaN, so a NaN group's fp4 elements are +0, and a zero
ue4m3 scale gives zeros with x's sign.
"""

from __future__ import annotations

import numpy as np

from gemmgen import ir
from gemmgen.ir import DType, ScaleMode, ScaleRounding
from gemmgen.numerics import (
    E8M0_NAN,
    UE4M3_NAN,
    e8m0_round_down,
    e8m0_round_up,
    e8m0_to_float,
    element_emax,
    float64_to_storage,
    saturating_cast,
    storage_to_float64,
    ue4m3_to_float,
)
from gemmgen.reference.decode import arg_error, check_static_dims

# Activation quantization divides by amax / fp8_max; an all-zero group would
# divide by zero, so amax is floored first (DeepGEMM / SGLang use 1e-10 too).
# The f32 and e8m0 round=up scales only; the OCP and NVFP4 rules have their
# own zero (2**-127, and a zero ue4m3 scale).
AMAX_FLOOR = 1e-10

# NVFP4's block scale is amax / 6, the largest e2m1 value.
FP4_MAX = DType.FP4.max_finite

QUANTIZE_SCALE_MODES = ir.QUANTIZE_SCALE_MODES


def quantize_groups(kernel: ir.Kernel, k: int) -> int:
    """G, the K extent of one scale (k for per-token; per-tensor handled apart)."""
    scale = kernel.out_scale
    if scale.mode not in QUANTIZE_SCALE_MODES:
        raise arg_error(kernel, f"quantize needs a per_tensor / per_token / per_token_group "
                        f"out scale, got {scale.mode.value}")
    return (scale.block_k or k) if scale.mode is ScaleMode.TOKEN_GROUP else k


def global_scale_of(kernel: ir.Kernel, global_scale) -> float:
    """NVFP4's global scale G of a quantize kernel (1 without `global=f32`),
    checked: an f32 scalar. A G that is not a positive finite number gives
    NaN, which makes every scale NaN."""
    if not kernel.out_scale.global_scale:
        if global_scale is not None:
            raise arg_error(kernel, "global_scale given but out_scale has no 'global=f32'")
        return 1.0
    if global_scale is None:
        raise arg_error(kernel, "global_scale (the f32 global scale of out_scale) is required")
    if np.shape(global_scale) != ():
        raise arg_error(kernel, f"global_scale must have shape (), got {np.shape(global_scale)}")
    g = float(storage_to_float64(global_scale, DType.F32))
    return g if np.isfinite(g) and g > 0 else np.nan


def quantize(kernel: ir.Kernel, lhs, global_scale=None) -> tuple[np.ndarray, np.ndarray]:
    glob = global_scale_of(kernel, global_scale)
    x = storage_to_float64(lhs, kernel.lhs.dtype)
    if x.ndim != 2:
        raise arg_error(kernel, f"lhs must be [m, k], got shape {x.shape}")
    out = kernel.out
    if out not in ir.QUANTIZED_OUTPUT_DTYPES:
        raise arg_error(kernel, f"quantize produces fp8 or fp4, not {out.value}")
    k = x.shape[1]
    if out is DType.FP4 and k % 2:
        raise arg_error(kernel, f"out fp4 is packed two per byte along k, so k must be even, "
                        f"got k = {k}")
    check_static_dims(kernel, n=None, k=k)
    scale = kernel.out_scale
    group = quantize_groups(kernel, k)
    # (1) amax per group of G consecutive elements of a row (the last group
    #     may be partial); per-tensor is one group over everything.
    if scale.mode is ScaleMode.TENSOR:
        amax = np.abs(x).max(initial=0.0)
    else:
        amax = np.stack([np.abs(x[:, k0:k0 + group]).max(axis=1, initial=0.0)
                         for k0 in range(0, k, group)], axis=1)
    # (2) The scale, exactly, as the scale dtype stores it; with a global
    #     scale G (NVFP4), of amax / G: the block scale s makes s * G.
    s = scale_values(kernel, amax if glob == 1.0 else np.asarray(amax, np.float64) / glob)
    if scale.mode is ScaleMode.TOKEN:
        s = s[:, 0]
        expanded = s[:, None]
    elif scale.mode is ScaleMode.TENSOR:
        s = np.asarray(s, np.float64).reshape(())
        expanded = s
    else:
        expanded = np.repeat(s, group, axis=1)[:, :k]
    # (3) q = sat(x / s): the caller's cast (reference_output) saturates.
    #     With G, x / (s G): s G is exact in float64 (4 + 24 significant
    #     bits), and so close to exact is the quotient that its cast rounds
    #     as the exact one would (docs/semantics.md, "quantize").
    with np.errstate(divide="ignore", invalid="ignore"):
        pre = x / (expanded * glob)
    if out is DType.FP4:
        # e2m1 has no NaN: the NaN scale alone marks a non-finite group, whose
        # elements are +0; a zero scale (ue4m3 0x00) gives zeros with x's sign.
        pre = np.where(expanded == 0, np.copysign(0.0, x), pre)
        pre = np.where(np.isnan(expanded), 0.0, pre)
    return pre, s


def scale_values(kernel: ir.Kernel, amax: np.ndarray) -> np.ndarray:
    """The stored scale of each group's amax, as float64 (NaN where amax is
    infinite or NaN: a group holding an inf or a NaN)."""
    scale, out = kernel.out_scale, kernel.out
    amax = np.asarray(amax, np.float64)
    finite = np.isfinite(amax)
    match scale.dtype, scale.rounding:
        case DType.E8M0, ScaleRounding.UP:
            # Rounded UP to a power of two, so that no |x| / s exceeds max.
            s = e8m0_to_float(_e8m0_scale_bytes(amax, out.max_finite))
        case DType.E8M0, ScaleRounding.FLOOR:
            s = e8m0_to_float(mx_scale_bytes(amax, out))
        case DType.F32, _:
            # Rounded to nearest: one correctly rounded f32 division
            # max(amax, floor) / max gives exactly this.
            s = np.maximum(amax, AMAX_FLOOR) / out.max_finite
            s = storage_to_float64(saturating_cast(s, DType.F32), DType.F32)
        case DType.UE4M3, _:
            s = ue4m3_to_float(nvfp4_scale_bytes(amax))
        case _:
            raise arg_error(kernel, f"quantize scales are f32, e8m0 or ue4m3, not "
                            f"{scale.dtype.value}")
    return np.where(finite, s, np.nan)


def mx_scale_bytes(amax: np.ndarray, out: DType) -> np.ndarray:
    """OCP MX v1.0 (section 6.3) shared scale bytes: 2**(floor(log2(amax)) -
    emax_elem), the exponent clamped to -127..127; amax = 0 gives byte 0
    (2**-127, the clamp of log2(0) = -inf); an infinite or NaN amax 255.

    amax / 2**emax is exact in float64, and `e8m0_round_down` takes
    floor(log2) exactly (frexp), never a floating log2.
    """
    amax = np.asarray(amax, np.float64)
    positive = np.isfinite(amax) & (amax > 0)
    e = e8m0_round_down(np.where(positive, amax, 1.0) * 2.0**-element_emax(out))
    e = np.where(amax == 0, 0, e)
    return np.where(np.isfinite(amax), e, E8M0_NAN).astype(np.uint8)


def nvfp4_scale_bytes(amax: np.ndarray) -> np.ndarray:
    """NVFP4 block scale bytes: amax / 6 rounded to nearest even in ue4m3
    (from the exact quotient, once), saturating at 448 (0x7E); amax = 0 and
    any amax / 6 at most 2**-10 give 0x00 (zero); an infinite or NaN amax
    0x7F (NaN)."""
    amax = np.asarray(amax, np.float64)
    finite = np.isfinite(amax)
    b = saturating_cast(np.where(finite, amax, 0.0) / FP4_MAX, DType.UE4M3)
    return np.where(finite, b, UE4M3_NAN).astype(np.uint8)


def quantize_scale_storage(kernel: ir.Kernel, s: np.ndarray) -> np.ndarray:
    """The scales `quantize` returns (float64, exact) in their storage
    format: f32, or e8m0 / ue4m3 bytes (NaN: 0xFF / 0x7F)."""
    match kernel.out_scale.dtype:
        case DType.UE4M3:
            nan = np.isnan(s)
            b = saturating_cast(np.where(nan, 0.0, s), DType.UE4M3)  # exact: s is a ue4m3 value
            return np.where(nan, UE4M3_NAN, b).astype(np.uint8)
        case dtype:
            return float64_to_storage(s, dtype)


def _e8m0_scale_bytes(amax: np.ndarray, fp8_max: float) -> np.ndarray:
    """e8m0 bytes of 2**ceil(log2(max(amax, floor) / fp8_max)), exactly.

    The float64 quotient is rounded; the exponent is then corrected with
    exact comparisons (multiplying by a power of two is exact), so an amax
    of exactly fp8_max * 2**e gives 2**e and one ulp more gives 2**(e+1).
    """
    amax = np.asarray(amax, np.float64)
    nonfinite = ~np.isfinite(amax)
    amax = np.maximum(np.where(nonfinite, 1.0, amax), AMAX_FLOOR)
    e = e8m0_round_up(amax / fp8_max).astype(np.int32) - 127
    # smallest e with amax <= fp8_max * 2**e
    e = np.where(amax > fp8_max * np.ldexp(1.0, e), e + 1, e)
    e = np.where(amax <= fp8_max * np.ldexp(1.0, e - 1), e - 1, e)
    return np.where(nonfinite, 255, np.clip(e, -127, 127) + 127).astype(np.uint8)
