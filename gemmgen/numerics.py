"""Number formats on the host: NumPy + ml_dtypes helpers shared by the
reference, the test harnesses and the runtime launchers.

Storage conventions (docs/semantics.md, "Storage formats"), the same in
every backend:

- Sub-byte types (int4, uint4, fp4 e2m1) are stored packed two per uint8 along the
  LAST axis of the array: element 2i sits in the low nibble (bits 0..3) of
  byte i, element 2i+1 in the high nibble (bits 4..7). The last dimension of
  the unpacked array must therefore be even.
- int4 nibbles are two's complement (0x8 is -8, 0xF is -1), uint4 nibbles
  their value 0..15 (also the zero points of `zero=uint4`); fp4 nibbles are
  the e2m1 code of `ml_dtypes.float4_e2m1fn` (sign bit 3, no inf, no NaN).
- e8m0 scales are stored as their raw exponent byte e, meaning 2**(e - 127);
  e = 255 is NaN (OCP Microscaling Formats v1.0, section 5.4.1), so the
  representable range is 2**-127 .. 2**127.
- ue4m3 scales (NVFP4's block scale) are stored as their raw byte: an
  unsigned e4m3, the e4m3fn code of a non-negative value (bit 7 clear).
  0x00 is zero, 0x01..0x07 subnormal (2**-9 ..), 0x7E the largest (448),
  0x7F NaN; a byte with bit 7 set is not a ue4m3 and is refused.
- Every other type is stored as its `ml_dtypes` / NumPy element type.

Casts into a format round to nearest, ties to even (RNE). Formats used for
quantized data (fp8, fp4, int8, int4) saturate: a finite value (or an
infinity) beyond the largest finite value becomes that value, as CUDA's
`__NV_SATFINITE` conversions do. IEEE formats with an infinity (f32, bf16,
f16) overflow to infinity like a hardware `cvt.rn`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from gemmgen.ir import DType

__all__ = [
    "E8M0_BIAS",
    "E8M0_NAN",
    "element_dtype",
    "e8m0_from_exponent",
    "e8m0_round_down",
    "e8m0_round_up",
    "element_emax",
    "e8m0_to_float",
    "float64_to_storage",
    "float_to_e8m0",
    "from_fp4_codes",
    "from_int4_codes",
    "pack_nibbles",
    "saturating_cast",
    "spacing",
    "storage_dtype",
    "storage_to_float64",
    "to_fp4_codes",
    "to_int4_codes",
    "ue4m3_to_float",
    "unpack_nibbles",
]

E8M0_BIAS = 127
E8M0_NAN = 255
UE4M3_NAN = 0x7F
UE4M3_MAX = 0x7E  # 448


def element_dtype(dtype: DType) -> np.dtype:
    """The NumPy dtype of one unpacked element (`DType.numpy_name`)."""
    return np.dtype(_lookup(dtype.numpy_name))


def storage_dtype(dtype: DType) -> np.dtype:
    """The NumPy dtype of an array holding `dtype` in memory (packed)."""
    return np.dtype(_lookup(dtype.storage_numpy_name))


def _lookup(name: str):
    return getattr(ml_dtypes, name, None) or np.dtype(name)


# ---------------------------------------------------------------------------
# Nibbles


def pack_nibbles(values_uint4: np.ndarray) -> np.ndarray:
    """Pack 4-bit codes [..., 2n] (integers 0..15) into uint8 [..., n].

    Element 2i goes to the low nibble of byte i, element 2i+1 to the high one.
    """
    codes = np.asarray(values_uint4)
    if codes.ndim == 0 or codes.shape[-1] % 2:
        raise ValueError(
            f"pack_nibbles: the last dimension must be even, got shape {codes.shape}")
    if codes.size and (codes.min() < 0 or codes.max() > 15):
        raise ValueError("pack_nibbles: codes must lie in 0..15, got "
                         f"{codes.min()}..{codes.max()}")
    codes = codes.astype(np.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """Unpack uint8 [..., n] into 4-bit codes uint8 [..., 2n] (low nibble first)."""
    packed = np.asarray(packed)
    if packed.dtype != np.uint8:
        raise ValueError(f"unpack_nibbles: expected uint8, got {packed.dtype}")
    out = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), np.uint8)
    out[..., 0::2] = packed & 0x0F
    out[..., 1::2] = packed >> 4
    return out


def to_int4_codes(values: np.ndarray) -> np.ndarray:
    """Integers in -8..7 -> their two's complement nibble codes (uint8 0..15)."""
    values = np.asarray(values)
    if values.size and (values.min() < -8 or values.max() > 7):
        raise ValueError(
            f"to_int4_codes: values must lie in -8..7, got {values.min()}..{values.max()}")
    return (values.astype(np.int16) & 0x0F).astype(np.uint8)


def from_int4_codes(codes: np.ndarray) -> np.ndarray:
    """Nibble codes 0..15 -> int8 values -8..7 (two's complement)."""
    codes = np.asarray(codes).astype(np.int16)
    return np.where(codes >= 8, codes - 16, codes).astype(np.int8)


def to_fp4_codes(x: np.ndarray) -> np.ndarray:
    """Real values -> e2m1 nibble codes (RNE, saturating to +-6)."""
    return saturating_cast(x, DType.FP4).view(np.uint8) & np.uint8(0x0F)


def from_fp4_codes(codes: np.ndarray) -> np.ndarray:
    """e2m1 nibble codes 0..15 -> float64."""
    codes = np.asarray(codes).astype(np.uint8)
    if codes.size and codes.max() > 15:
        raise ValueError(f"from_fp4_codes: codes must lie in 0..15, got {codes.max()}")
    return codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64)


# ---------------------------------------------------------------------------
# e8m0 (power-of-two scales)


def e8m0_to_float(e: np.ndarray) -> np.ndarray:
    """Exponent bytes -> float64: e -> 2**(e - 127); 255 -> NaN."""
    e = np.asarray(e)
    if e.dtype == ml_dtypes.float8_e8m0fnu:
        e = e.view(np.uint8)
    if e.dtype != np.uint8:
        raise ValueError(f"e8m0_to_float: expected uint8 bytes, got {e.dtype}")
    out = np.ldexp(1.0, e.astype(np.int32) - E8M0_BIAS)
    return np.where(e == E8M0_NAN, np.nan, out)


def e8m0_from_exponent(exponent: np.ndarray) -> np.ndarray:
    """Unbiased exponents -127..127 -> e8m0 bytes."""
    exponent = np.asarray(exponent)
    if exponent.size and (exponent.min() < -E8M0_BIAS or exponent.max() > E8M0_BIAS):
        raise ValueError("e8m0: exponent out of range -127..127: "
                         f"{exponent.min()}..{exponent.max()}")
    return (exponent.astype(np.int32) + E8M0_BIAS).astype(np.uint8)


def float_to_e8m0(x: np.ndarray) -> np.ndarray:
    """Exact encode: each value must be NaN or a power of two in 2**-127..2**127.

    Any other value raises: a scale that is not a power of two has no e8m0
    encoding, and choosing a rounding silently is how accuracy regressions
    start. Use `e8m0_round_up` to pick one.
    """
    x = np.asarray(x, np.float64)
    nan = np.isnan(x)
    mant, exp = np.frexp(np.where(nan, 1.0, x))
    ok = (mant == 0.5) & (exp - 1 >= -E8M0_BIAS) & (exp - 1 <= E8M0_BIAS)
    if not np.all(ok | nan):
        bad = x[~(ok | nan)].ravel()[:4]
        raise ValueError(f"float_to_e8m0: not a power of two in 2**-127..2**127: {bad}")
    return np.where(nan, E8M0_NAN, e8m0_from_exponent(np.where(nan, 0, exp - 1))).astype(np.uint8)


def e8m0_round_up(s: np.ndarray) -> np.ndarray:
    """The e8m0 byte of 2**ceil(log2(s)), the smallest power of two >= s.

    Exact: frexp splits s = mant * 2**exp with mant in [0.5, 1), so s is a
    power of two exactly when mant == 0.5 (then ceil(log2(s)) = exp - 1),
    otherwise ceil(log2(s)) = exp. No floating log2, which can be an ulp off.
    Results below 2**-127 clamp to 2**-127 (still >= s, as rounding up
    requires); s must be positive and finite, and at most 2**127.
    """
    s = np.asarray(s, np.float64)
    if s.size and not (np.all(np.isfinite(s)) and np.all(s > 0)):
        raise ValueError("e8m0_round_up: scales must be positive and finite")
    mant, exp = np.frexp(s)
    e = np.where(mant == 0.5, exp - 1, exp)
    if e.size and e.max() > E8M0_BIAS:
        raise ValueError(f"e8m0_round_up: {s.max()} exceeds 2**127")
    return e8m0_from_exponent(np.maximum(e, -E8M0_BIAS))


def e8m0_round_down(s: np.ndarray) -> np.ndarray:
    """The e8m0 byte of 2**floor(log2(s)), the largest power of two <= s,
    with the exponent clamped to -127..127 (OCP MX v1.0's shared scale,
    `element_emax`). Exact like `e8m0_round_up`: frexp gives s = mant *
    2**exp with mant in [0.5, 1), so floor(log2(s)) = exp - 1. s must be
    positive and finite.
    """
    s = np.asarray(s, np.float64)
    if s.size and not (np.all(np.isfinite(s)) and np.all(s > 0)):
        raise ValueError("e8m0_round_down: scales must be positive and finite")
    _, exp = np.frexp(s)
    return e8m0_from_exponent(np.clip(exp - 1, -E8M0_BIAS, E8M0_BIAS))


def element_emax(dtype: DType) -> int:
    """emax_elem of OCP MX v1.0 (section 5.3): the exponent of the largest
    power of two of an element format, floor(log2(max finite)): e4m3 8
    (256 <= 448), e5m2 15, fp4 e2m1 2 (4 <= 6)."""
    if dtype not in (DType.E4M3, DType.E5M2, DType.FP4):
        raise ValueError(f"element_emax: {dtype.value} is not an MX element format")
    return dtype.emax


# ---------------------------------------------------------------------------
# ue4m3 (NVFP4 block scales)


def ue4m3_to_float(b: np.ndarray) -> np.ndarray:
    """ue4m3 bytes (uint8 0x00..0x7F) -> float64: the e4m3fn value of the
    byte, 0x7F NaN. A byte with bit 7 set raises (ue4m3 has no sign)."""
    b = np.asarray(b)
    if b.dtype != np.uint8:
        raise ValueError(f"ue4m3_to_float: expected uint8 bytes, got {b.dtype}")
    if b.size and b.max() > UE4M3_NAN:
        where = tuple(int(i) for i in np.argwhere(b > UE4M3_NAN)[0])
        raise ValueError(f"ue4m3: byte 0x{int(b[where]):02X} at {where} has the sign bit set; "
                         "an unsigned e4m3 scale is 0x00..0x7F")
    return b.view(ml_dtypes.float8_e4m3fn).astype(np.float64)


# ---------------------------------------------------------------------------
# Casts


def saturating_cast(x: np.ndarray, dtype: DType) -> np.ndarray:
    """float64 values -> an array of `element_dtype(dtype)` (unpacked).

    RNE throughout. fp8 / fp4 clip to +-max finite first (ml_dtypes turns an
    overflowing e4m3fn cast into NaN); +-inf also saturate, NaN stays NaN for
    fp8 and raises for formats without NaN. int8 / int4 / int32 round half to
    even, then clip. f32 / bf16 / f16 round directly (ml_dtypes rounds from
    float64 once, with no double rounding through f32) and overflow to inf.
    """
    x = np.asarray(x, np.float64)
    match dtype:
        case DType.F32 | DType.BF16 | DType.F16:
            with np.errstate(over="ignore"):  # overflow to inf is the definition
                return x.astype(element_dtype(dtype))
        case DType.E4M3 | DType.E5M2 | DType.FP4:
            if dtype is DType.FP4 and np.isnan(x).any():
                raise ValueError("saturating_cast: fp4 e2m1 has no NaN")
            big = dtype.max_finite
            return np.clip(x, -big, big).astype(element_dtype(dtype))
        case DType.INT8 | DType.INT4 | DType.UINT4 | DType.INT32:
            if np.isnan(x).any():
                raise ValueError(f"saturating_cast: {dtype.value} has no NaN")
            info = np.iinfo(np.int32) if dtype is DType.INT32 else ml_dtypes.iinfo(
                element_dtype(dtype))
            return np.clip(np.rint(x), info.min, info.max).astype(element_dtype(dtype))
        case DType.UE4M3:
            if np.isnan(x).any() or (x < 0).any():
                raise ValueError("saturating_cast: ue4m3 scales are non-negative numbers")
            return np.minimum(x, dtype.max_finite).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        case DType.E8M0:
            raise ValueError("saturating_cast: e8m0 has no rounding here; use "
                             "float_to_e8m0 (exact) or e8m0_round_up")
    raise AssertionError(dtype)


def float64_to_storage(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Encode float64 values in the storage format of `dtype`.

    Sub-byte types come back packed (uint8, last dim halved); e8m0 comes back
    as exponent bytes and must be exact powers of two (`float_to_e8m0`).
    """
    match dtype:
        case DType.E8M0:
            return float_to_e8m0(x)
        case DType.INT4:
            return pack_nibbles(to_int4_codes(saturating_cast(x, dtype).astype(np.int8)))
        case DType.UINT4:
            return pack_nibbles(saturating_cast(x, dtype).astype(np.uint8))
        case DType.FP4:
            return pack_nibbles(to_fp4_codes(x))
        case _:
            return saturating_cast(x, dtype)


def storage_to_float64(array: np.ndarray, dtype: DType) -> np.ndarray:
    """Decode an array in the storage format of `dtype` to float64 (exact).

    The array's NumPy dtype must be the storage dtype (a float32 array given
    for a bf16 operand is a harness bug, not something to convert silently).
    """
    array = np.asarray(array)
    want = storage_dtype(dtype)
    if dtype is DType.E8M0 and array.dtype == ml_dtypes.float8_e8m0fnu:
        array = array.view(np.uint8)
    if array.dtype != want:
        raise ValueError(
            f"expected {dtype.value} stored as {want}, got an array of {array.dtype}")
    match dtype:
        case DType.E8M0:
            return e8m0_to_float(array)
        case DType.UE4M3:
            return ue4m3_to_float(array)
        case DType.INT4:
            return from_int4_codes(unpack_nibbles(array)).astype(np.float64)
        case DType.UINT4:
            return unpack_nibbles(array).astype(np.float64)
        case DType.FP4:
            return from_fp4_codes(unpack_nibbles(array))
        case _:
            return array.astype(np.float64)


def spacing(x: np.ndarray, dtype: DType) -> np.ndarray:
    """The distance between adjacent values of `dtype` around |x| (its ulp).

    For a float format with `nmant` mantissa bits and smallest normal
    exponent `minexp`: 2**(max(floor(log2|x|), minexp) - nmant); integers: 1.
    Above the largest finite value the spacing of the top binade is used.
    """
    x = np.abs(np.asarray(x, np.float64))
    if not dtype.is_float:
        return np.ones_like(x)
    info = ml_dtypes.finfo(element_dtype(dtype))
    finite_nonzero = np.isfinite(x) & (x > 0)
    _, exp = np.frexp(np.where(finite_nonzero, x, 1.0))
    e = np.where(finite_nonzero, exp - 1, np.where(x == 0, info.minexp, info.maxexp - 1))
    e = np.clip(e, info.minexp, info.maxexp - 1)
    return np.ldexp(1.0, e - info.nmant)
