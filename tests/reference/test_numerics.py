"""Number-format helpers against formulations written from the format specs.

Expected values come from the OCP / IEEE definitions (bit arithmetic, an
exact round-to-nearest-even written here with Python integers), never from
the code under test.
"""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemmgen import numerics as nu
from gemmgen.ir import DType

# (mantissa bits, smallest normal exponent, largest finite) from the specs.
FORMATS = {
    DType.E4M3: (3, -6, 448.0),
    DType.E5M2: (2, -14, 57344.0),
    DType.FP4: (1, 0, 6.0),
    DType.BF16: (7, -126, None),
    DType.F16: (10, -14, None),
    DType.F32: (23, -126, None),
}
# OCP MX v1.0, table 5: e2m1 code -> value (bit 3 is the sign).
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def rne_exact(x: float, nmant: int, minexp: int) -> float:
    """Round x to `nmant` mantissa bits, ties to even, with Python's exact
    rationals (no overflow handling: callers clip)."""
    if x == 0 or not math.isfinite(x):
        return x
    q = Fraction(x)
    e = max(math.floor(math.log2(abs(x))), minexp)
    # fix a log2 that is one off at a binade edge
    while Fraction(2) ** e > abs(q) and e > minexp:
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(q):
        e += 1
    quantum = Fraction(2) ** (e - nmant)
    steps = q / quantum
    fl = math.floor(steps)
    rem = steps - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1):
        fl += 1
    return float(fl * quantum)


# ---------------------------------------------------------------------------
# Packing


@given(st.data())
def test_pack_unpack_roundtrip(data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=0, max_size=2))
    last = 2 * data.draw(st.integers(1, 5))
    codes = np.array(data.draw(st.lists(st.integers(0, 15), min_size=math.prod(shape) * last,
                                        max_size=math.prod(shape) * last)), np.uint8)
    codes = codes.reshape(tuple(shape) + (last,))
    packed = nu.pack_nibbles(codes)
    assert packed.dtype == np.uint8 and packed.shape == tuple(shape) + (last // 2,)
    flat_codes, flat_packed = codes.reshape(-1, last), packed.reshape(-1, last // 2)
    for row_c, row_p in zip(flat_codes, flat_packed):
        for i, byte in enumerate(row_p):
            assert int(byte) == int(row_c[2 * i]) + 16 * int(row_c[2 * i + 1])
    np.testing.assert_array_equal(nu.unpack_nibbles(packed), codes)


def test_pack_layout_low_nibble_first():
    assert nu.pack_nibbles(np.array([0x1, 0xA])).tolist() == [0xA1]
    assert nu.unpack_nibbles(np.array([0xA1], np.uint8)).tolist() == [0x1, 0xA]


def test_pack_rejects_odd_last_dim_and_bad_codes():
    with pytest.raises(ValueError, match="even"):
        nu.pack_nibbles(np.zeros((2, 3), np.uint8))
    with pytest.raises(ValueError, match="0..15"):
        nu.pack_nibbles(np.array([1, 16]))
    with pytest.raises(ValueError, match="uint8"):
        nu.unpack_nibbles(np.zeros(2, np.int8))


def test_int4_codes_twos_complement():
    values = np.arange(-8, 8)
    codes = nu.to_int4_codes(values)
    assert codes.tolist() == [v + 16 if v < 0 else v for v in range(-8, 8)]
    np.testing.assert_array_equal(nu.from_int4_codes(codes), values)
    with pytest.raises(ValueError):
        nu.to_int4_codes(np.array([8]))


def test_fp4_codes_match_ocp_table():
    table = [(-1.0 if c & 8 else 1.0) * E2M1[c & 7] for c in range(16)]
    np.testing.assert_array_equal(nu.from_fp4_codes(np.arange(16)), table)
    # every value roundtrips (0 and -0 are both zero)
    back = nu.from_fp4_codes(nu.to_fp4_codes(np.array(table)))
    np.testing.assert_array_equal(back, table)


@pytest.mark.parametrize("x, want", [
    (0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0),
    (5.0, 4.0), (5.5, 6.0), (7.0, 6.0), (1e9, 6.0), (-100.0, -6.0), (math.inf, 6.0),
])
def test_fp4_rounds_to_nearest_even_and_saturates(x, want):
    assert nu.from_fp4_codes(nu.to_fp4_codes(np.array([x])))[0] == want


# ---------------------------------------------------------------------------
# e8m0


def test_e8m0_decode_every_byte():
    got = nu.e8m0_to_float(np.arange(256, dtype=np.uint8))
    for e in range(255):
        assert got[e] == 2.0 ** (e - 127)
    assert math.isnan(got[255])
    # agrees with ml_dtypes' float8_e8m0fnu
    via_ml = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    np.testing.assert_array_equal(got, via_ml)


def test_e8m0_encode_is_exact():
    values = np.array([2.0 ** (e - 127) for e in range(255)] + [math.nan])
    np.testing.assert_array_equal(nu.float_to_e8m0(values), np.arange(256))
    for bad in (3.0, 0.0, -1.0, 2.0**-128, 2.0**128, math.inf):
        with pytest.raises(ValueError):
            nu.float_to_e8m0(np.array([bad]))


def ceil_log2_exact(s: float) -> int:
    q = Fraction(s)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** e < q:
        e += 1
    while Fraction(2) ** (e - 1) >= q:
        e -= 1
    return e


def test_e8m0_round_up_powers_of_two_and_neighbours():
    for e in range(-126, 127):
        p = 2.0**e
        assert nu.e8m0_round_up(np.array([p]))[0] == e + 127
        assert nu.e8m0_round_up(np.array([np.nextafter(p, math.inf)]))[0] == e + 128
        assert nu.e8m0_round_up(np.array([np.nextafter(p, 0.0)]))[0] == e + 127
    assert nu.e8m0_round_up(np.array([2.0**127]))[0] == 254
    assert nu.e8m0_round_up(np.array([2.0**-140]))[0] == 0  # clamps, still >= s
    for bad in (0.0, -1.0, math.inf, math.nan, 2.0**127 * 1.5):
        with pytest.raises(ValueError):
            nu.e8m0_round_up(np.array([bad]))


@given(st.floats(min_value=2.0**-126, max_value=2.0**126, allow_nan=False))
def test_e8m0_round_up_matches_exact_ceil_log2(s):
    assert nu.e8m0_round_up(np.array([s]))[0] == ceil_log2_exact(s) + 127


def test_e8m0_round_up_sweep():
    s = np.exp2(np.random.default_rng(3).uniform(-120, 120, 2000))
    got = nu.e8m0_round_up(s)
    assert got.tolist() == [ceil_log2_exact(float(v)) + 127 for v in s]


# ---------------------------------------------------------------------------
# Casts


def check_rne(dtype, values):
    nmant, minexp, big = FORMATS[dtype]
    got = nu.saturating_cast(np.array(values, np.float64), dtype)
    assert got.dtype == nu.element_dtype(dtype)
    top = float(ml_dtypes.finfo(nu.element_dtype(dtype)).max)
    for xi, gi in zip(values, got.astype(np.float64)):
        if big is not None:  # saturating formats clip first
            want = rne_exact(max(-big, min(big, xi)), nmant, minexp)
        else:
            want = rne_exact(xi, nmant, minexp)
            if abs(want) > top:
                want = math.copysign(math.inf, xi)
        assert gi == want, (dtype, xi, gi, want)


@pytest.mark.parametrize("dtype", list(FORMATS))
@given(values=st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False,
                                 allow_subnormal=False), min_size=1, max_size=30))
def test_saturating_cast_is_rne(dtype, values):
    check_rne(dtype, values)


@pytest.mark.parametrize("dtype", list(FORMATS))
def test_saturating_cast_is_rne_on_ties_and_every_binade(dtype):
    nmant, minexp, big = FORMATS[dtype]
    rng = np.random.default_rng(7)
    top = big if big is not None else 2.0**20
    # log-uniform over the format's range (incl. subnormals and beyond max),
    # plus exact midpoints between neighbours, where ties-to-even decides
    x = np.exp2(rng.uniform(minexp - nmant - 2, math.log2(top) + 1, 300))
    x *= np.where(rng.random(300) < 0.5, -1, 1)
    rep = nu.saturating_cast(x, dtype).astype(np.float64)
    mids = rep + np.copysign(0.5 * nu.spacing(rep, dtype), rep)
    check_rne(dtype, list(x) + list(mids))


@pytest.mark.parametrize("dtype, big", [(DType.E4M3, 448.0), (DType.E5M2, 57344.0)])
def test_fp8_saturates_without_nan(dtype, big):
    x = np.array([big, big * 1.01, big + 16.0, 2 * big, 1e30, math.inf,
                  -big * 1.01, -1e30, -math.inf])
    got = nu.saturating_cast(x, dtype).astype(np.float64)
    np.testing.assert_array_equal(got, [big] * 6 + [-big] * 3)
    assert math.isnan(float(nu.saturating_cast(np.array([math.nan]), dtype)[0]))
    # the pitfall being avoided: a plain ml_dtypes cast of 1e30 is NaN for e4m3fn
    if dtype is DType.E4M3:
        assert math.isnan(float(np.array([1e30]).astype(ml_dtypes.float8_e4m3fn)[0]))


def test_bf16_rounds_from_float64_once():
    # 1 + 2**-8 is a bf16 tie; + 2**-40 is above it. Rounding through f32
    # first would drop 2**-40 and round the tie down to 1.
    x = np.array([1 + 2.0**-8 + 2.0**-40, 1 + 2.0**-8, 1 + 3 * 2.0**-8])
    got = nu.saturating_cast(x, DType.BF16).astype(np.float64)
    np.testing.assert_array_equal(got, [1 + 2.0**-7, 1.0, 1 + 2.0**-6])


def test_ieee_formats_overflow_to_inf():
    assert math.isinf(float(nu.saturating_cast(np.array([1e6]), DType.F16)[0]))
    assert float(nu.saturating_cast(np.array([65504.0]), DType.F16)[0]) == 65504.0


@pytest.mark.parametrize("dtype, lo, hi", [(DType.INT8, -128, 127), (DType.INT4, -8, 7)])
def test_int_cast_rounds_half_even_and_clips(dtype, lo, hi):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6, 1000.0, -1000.0])
    got = nu.saturating_cast(x, dtype).astype(np.int64).tolist()
    want = [0, 2, 2, 0, -2, -2, 2, 3, hi, lo]
    assert got == want
    with pytest.raises(ValueError, match="NaN"):
        nu.saturating_cast(np.array([math.nan]), dtype)


# The scale-only bytes have tests of their own (e8m0 below, ue4m3 in
# tests/reference/test_mx_reference.py): neither takes negative values.
@pytest.mark.parametrize("dtype", [d for d in DType if d not in (DType.E8M0, DType.UE4M3)])
def test_storage_roundtrip(dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 8)) * 3
    stored = nu.float64_to_storage(x, dtype)
    assert stored.dtype == nu.storage_dtype(dtype)
    if dtype.is_sub_byte:
        assert stored.shape == (3, 4)
    decoded = nu.storage_to_float64(stored, dtype)
    assert decoded.shape == (3, 8) and decoded.dtype == np.float64
    # decoded values are representable: encoding them again is the identity
    np.testing.assert_array_equal(nu.storage_to_float64(nu.float64_to_storage(decoded, dtype),
                                                        dtype), decoded)
    # and they are the RNE neighbours of x (at most half a spacing away, or clipped)
    big = dtype.max_finite
    low = 0.0 if dtype is DType.UINT4 else -big  # unsigned: negatives saturate to 0
    err = np.abs(decoded - np.clip(x, low, big))
    assert (err <= 0.5 * nu.spacing(x, dtype) + 1e-300).all()


def test_e8m0_storage_roundtrip_and_wrong_dtype_rejected():
    b = np.array([0, 120, 127, 130, 254], np.uint8)
    np.testing.assert_array_equal(nu.float64_to_storage(nu.storage_to_float64(b, DType.E8M0),
                                                        DType.E8M0), b)
    with pytest.raises(ValueError, match="bfloat16"):
        nu.storage_to_float64(np.zeros(2, np.float32), DType.BF16)
    with pytest.raises(ValueError, match="uint8"):
        nu.storage_to_float64(np.zeros(2, np.int8), DType.INT4)


def test_spacing():
    for dt, np_dt in ((DType.F32, np.float32), (DType.F16, np.float16)):
        x = np.array([1.0, 3.0, 1e-3, 1000.0, 6e-8], np_dt)
        np.testing.assert_array_equal(nu.spacing(x.astype(np.float64), dt),
                                      np.spacing(x).astype(np.float64))
    assert nu.spacing(np.array([1.0]), DType.BF16)[0] == 2.0**-7
    np.testing.assert_array_equal(nu.spacing(np.array([0.0, 2.0**-8, 1.0, 448.0, 1e9]),
                                             DType.E4M3), [2.0**-9, 2.0**-9, 2.0**-3, 32.0, 32.0])
    assert nu.spacing(np.array([5.0]), DType.INT8)[0] == 1.0
