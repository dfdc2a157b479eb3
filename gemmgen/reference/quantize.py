"""op quantize in the reference: per-group amax, the scale it gives (f32
rounded to nearest, e8m0 rounded up to a power of two, exactly) and the
values before the fp8 cast (docs/semantics.md, "quantize")."""

from __future__ import annotations

import numpy as np

from gemmgen import ir
from gemmgen.ir import DType, ScaleMode
from gemmgen.numerics import e8m0_round_up, e8m0_to_float, saturating_cast, storage_to_float64
from gemmgen.reference.decode import arg_error, check_static_dims

# Activation quantization divides by amax / fp8_max; an all-zero group would
# divide by zero, so amax is floored first (DeepGEMM / SGLang use 1e-10 too).
AMAX_FLOOR = 1e-10

QUANTIZE_SCALE_MODES = ir.QUANTIZE_SCALE_MODES


def quantize_groups(kernel: ir.Kernel, k: int) -> int:
    """G, the K extent of one scale (k for per-token; per-tensor handled apart)."""
    scale = kernel.out_scale
    if scale.mode not in QUANTIZE_SCALE_MODES:
        raise arg_error(kernel, f"quantize needs a per_tensor / per_token / per_token_group "
                        f"out scale, got {scale.mode.value}")
    return (scale.block_k or k) if scale.mode is ScaleMode.TOKEN_GROUP else k


def quantize(kernel: ir.Kernel, lhs) -> tuple[np.ndarray, np.ndarray]:
    x = storage_to_float64(lhs, kernel.lhs.dtype)
    if x.ndim != 2:
        raise arg_error(kernel, f"lhs must be [m, k], got shape {x.shape}")
    if not kernel.out.is_fp8:
        raise arg_error(kernel, f"quantize produces fp8, not {kernel.out.value}")
    m, k = x.shape
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
    # (2) s = max(amax, floor) / fp8_max, exactly in float64 ...
    s = np.maximum(amax, AMAX_FLOOR) / kernel.out.max_finite
    # (3) ... then stored in the scale dtype: e8m0 rounds UP to a power of two
    #     so that no |x| / s exceeds fp8_max; f32 rounds to nearest (one
    #     correctly rounded f32 division amax / fp8_max gives exactly this).
    match scale.dtype:
        case DType.E8M0:
            s = e8m0_to_float(_e8m0_scale_bytes(amax, kernel.out.max_finite))
        case DType.F32:
            s = storage_to_float64(saturating_cast(s, scale.dtype), scale.dtype)
        case _:
            raise arg_error(kernel, f"quantize scales are f32 or e8m0, not {scale.dtype.value}")
    # A group holding an infinity or a NaN has no meaningful scale: its scale
    # is NaN (e8m0 byte 255) and so is every q of the group (x / NaN).
    s = np.where(np.isfinite(amax), s, np.nan)
    if scale.mode is ScaleMode.TOKEN:
        s = s[:, 0]
        expanded = s[:, None]
    elif scale.mode is ScaleMode.TENSOR:
        s = np.asarray(s, np.float64).reshape(())
        expanded = s
    else:
        expanded = np.repeat(s, group, axis=1)[:, :k]
    # (4) q = sat(x / s): the caller's cast (reference_output) saturates.
    return x / expanded, s


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
