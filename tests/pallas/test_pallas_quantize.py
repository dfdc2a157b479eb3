"""Per-token-group FP8 activation quantization in Pallas: f32 scales and e8m0
scales rounded up to a power of two, partial groups, all-zero groups, and
amax exactly at (and one ulp past) fp8_max * 2**e; scales bit-exact against
the reference (f32: the correctly rounded quotient amax / fp8_max); groups
with an infinity or a NaN (NaN scale, NaN q)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemmgen import reference as ref
from pallas_helpers import build, check, kernel_block, lower_for_tpu, random_inputs, run, spec_text

KERNELS = {
    "quant_e4m3_f32": ("op quantize", "lhs bf16 [m, k]", "out e4m3",
                       "out_scale per_token_group k=128 f32"),
    "quant_e4m3_e8m0": ("op quantize", "lhs bf16 [m, k]", "out e4m3",
                        "out_scale per_token_group k=128 e8m0"),
    "quant_e5m2_e8m0_g32": ("op quantize", "lhs f32 [m, k]", "out e5m2",
                            "out_scale per_token_group k=32 e8m0"),
    "quant_f16_g256": ("op quantize", "lhs f16 [m, k]", "out e4m3",
                       "out_scale per_token_group k=256 f32", "tile m=64 n=128 k=512"),
    # f32 inputs: amax has 24 significant bits, where a reciprocal multiply
    # is most often an ulp off the correctly rounded quotient.
    "quant_f32_e4m3_f32": ("op quantize", "lhs f32 [m, k]", "out e4m3",
                           "out_scale per_token_group k=128 f32"),
    "quant_f32_e5m2_f32": ("op quantize", "lhs f32 [m, k]", "out e5m2",
                           "out_scale per_token_group k=64 f32"),
}
SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_quantize"))


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("m,k", [(37, 384), (300, 200), (5, 448)])
def test_matches_reference(generated, name, m, k):
    """Partial row tiles, partial last groups, k smaller than a block."""
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=m, n=k, k=k, seed=m + k)
    q, scale = check(kernel, generated.fn(name), inputs, k=k)
    group = kernel.out_scale.block_k
    assert q.shape == (m, k) and scale.shape == (m, -(-k // group))
    lower_for_tpu(generated.fn(name), inputs)


def _dtype(name: str):
    return {"quant_e5m2_e8m0_g32": np.float32, "quant_f16_g256": np.float16,
            "quant_f32_e4m3_f32": np.float32, "quant_f32_e5m2_f32": np.float32}.get(
        name, ml_dtypes.bfloat16)


def _next_up(x: float, dtype) -> float:
    """The next representable value of `dtype` above x (x exact in dtype)."""
    a = np.array([x], dtype)
    uint = {2: np.uint16, 4: np.uint32}[a.itemsize]
    return float((a.view(uint) + 1).view(dtype)[0])


@pytest.mark.parametrize("name", ["quant_e4m3_e8m0", "quant_e5m2_e8m0_g32"])
def test_e8m0_rounds_up_exactly_at_powers_of_two(generated, name):
    """amax = fp8_max * 2**e gives 2**e; one ulp more gives 2**(e+1); the
    largest value then never saturates."""
    kernel = generated.kernel(name)
    group = kernel.out_scale.block_k
    fp8_max = kernel.out.max_finite
    k = 4 * group
    x = np.full((8, k), 0.25)
    for row, e in enumerate(range(-6, 2)):
        top = fp8_max * 2.0**e
        x[row, 0] = top  # group 0: exactly fp8_max * 2**e
        x[row, group] = -_next_up(top, _dtype(name))  # group 1: one ulp past it
        x[row, 2 * group:3 * group] = 0.0  # group 2: all zero
    x = x.astype(_dtype(name))
    q, scale = check(kernel, generated.fn(name), {"lhs": x}, k=k)
    exps = scale.astype(np.int32) - 127
    np.testing.assert_array_equal(exps[:, 0], np.arange(-6, 2))
    np.testing.assert_array_equal(exps[:, 1], np.arange(-6, 2) + 1)
    q = q.astype(np.float64)
    assert (np.abs(q) <= fp8_max).all()
    np.testing.assert_array_equal(q[:, 0], fp8_max)  # exact, not saturated
    assert (q[:, 2 * group:3 * group] == 0).all()


def test_f32_scale_and_q_reconstruct(generated):
    name = "quant_e4m3_f32"
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=64, n=512, k=512, seed=11)
    q, scale = run(generated.fn(name), inputs)
    _, s_ref = ref.reference(kernel, **inputs)
    np.testing.assert_allclose(scale, s_ref, rtol=2**-22)
    x = inputs["lhs"].astype(np.float64)
    back = q.astype(np.float64) * np.repeat(scale, 128, axis=1)
    # e4m3 has 3 mantissa bits: half an ulp is 1/16 of the value.
    assert (np.abs(back - x) <= np.abs(x) / 16 + 1e-30).all()


def test_validation(generated):
    with pytest.raises(ValueError, match=r"lhs must be bfloat16 \[m, k\], got float32 \[4, 128\]"):
        run(generated.fn("quant_e4m3_f32"), {"lhs": np.zeros((4, 128), np.float32)})


# ---------------------------------------------------------------------------
# Scales bit-exact, and groups with an infinity or a NaN

EXACT = ["quant_e4m3_f32", "quant_f32_e4m3_f32", "quant_f32_e5m2_f32", "quant_e4m3_e8m0",
         "quant_e5m2_e8m0_g32"]


def _with_amax(amax: np.ndarray, group: int, k: int, dtype, rng) -> np.ndarray:
    """x [m, k] in `dtype` whose group j of row r has |x| at most amax[r, j]
    and reaches it (at a random place, random sign); amax values exact in dtype."""
    m = amax.shape[0]
    x = np.empty((m, k), np.float64)
    for j in range(amax.shape[1]):
        cols = slice(j * group, min((j + 1) * group, k))
        width = cols.stop - cols.start
        top = amax[:, j:j + 1].astype(np.float64)
        x[:, cols] = top * rng.uniform(-0.9, 0.9, (m, width))
        x[np.arange(m), cols.start + rng.integers(0, width, m)] = (
            top[:, 0] * rng.choice([-1.0, 1.0], m))
    return x.astype(dtype)


def _special_amax(kernel, dtype, rng, m: int, groups: int) -> np.ndarray:
    """amax values that probe the scale's rounding: fp8_max * 2**e and one
    ulp either side, powers of two, the floor 1e-10 and values around it, 0,
    the dtype's largest finite value, and random values over the range."""
    fp8_max = kernel.out.max_finite
    info = np.finfo(dtype)
    lo_e = max(int(np.log2(1e-10 / fp8_max)) - 2, int(np.log2(float(info.tiny))) - 8)
    hi_e = int(np.log2(float(info.max) / fp8_max))
    tops = [np.asarray(fp8_max * 2.0**e, dtype) for e in range(lo_e, hi_e + 1)]
    values = []
    for t in tops:
        if not np.isfinite(t) or t == 0:
            continue
        values += [t, np.nextafter(t, dtype(np.inf)), np.nextafter(t, dtype(0))]
    values += [np.asarray(2.0**e, dtype) for e in range(-40, 40, 3)]
    values += [np.asarray(v, dtype) for v in (1e-10, 1.5e-10, 0.9e-10, 1e-12, 0.0,
                                              float(info.max))]
    values = np.array([v for v in values if np.isfinite(v)], dtype)
    count = m * groups
    extra = count - len(values)
    assert extra >= 0, f"test design: {len(values)} special values for {count} groups"
    random = np.exp2(rng.uniform(np.log2(1e-11), np.log2(float(info.max)), extra)).astype(dtype)
    amax = np.concatenate([values, random])
    return rng.permutation(amax).reshape(m, groups)


def _exact_scales(generated, name: str, x: np.ndarray):
    """Run the kernel on x: the scale must equal reference_output's bit for
    bit (f32 compared as uint32), and q must pass compare."""
    kernel = generated.kernel(name)
    q, scale = run(generated.fn(name), {"lhs": x})
    q_ref, scale_ref = ref.reference_output(kernel, lhs=x)
    if scale_ref.dtype == np.float32:
        np.testing.assert_array_equal(scale.view(np.uint32), scale_ref.view(np.uint32))
    else:
        np.testing.assert_array_equal(scale, scale_ref)
    result = ref.compare((q, scale), ref.reference(kernel, lhs=x), kernel, k=x.shape[1])
    assert result.passed, result.detail
    return q, scale


@pytest.mark.parametrize("name", EXACT)
def test_scales_exact_at_special_amax(generated, name):
    """Every special amax of the input dtype's range, in one group each."""
    kernel = generated.kernel(name)
    dtype = _dtype(name)
    group = kernel.out_scale.block_k
    rng = np.random.default_rng(21)
    m, groups = 128, 6
    k = groups * group - group // 2  # a partial last group
    amax = _special_amax(kernel, dtype, rng, m, groups)
    _exact_scales(generated, name, _with_amax(amax, group, k, dtype, rng))


@pytest.mark.parametrize("name", EXACT)
@given(exponents=st.lists(st.floats(-40.0, 120.0), min_size=8, max_size=8),
       seed=st.integers(0, 2**32 - 1))
def test_scales_exact_random(generated, name, exponents, seed):
    """Hypothesis: rows whose group amax is 2**e times a random mantissa
    (within the input dtype's range), scales bit-exact."""
    kernel = generated.kernel(name)
    dtype = _dtype(name)
    group = kernel.out_scale.block_k
    rng = np.random.default_rng(seed)
    top = np.log2(float(np.finfo(dtype).max))
    e = np.minimum(np.asarray(exponents), top - 1)[:, None] + rng.uniform(-1, 1, (8, 4))
    amax = np.exp2(e).astype(dtype)
    _exact_scales(generated, name, _with_amax(amax, group, 4 * group, dtype, rng))


@pytest.mark.parametrize("name", EXACT + ["quant_f16_g256"])
def test_nonfinite_groups(generated, name):
    """A group holding an inf, a -inf or a NaN: scale NaN (e8m0 byte 255)
    and every q of the group NaN; the other groups of the row and the
    other rows are untouched."""
    kernel = generated.kernel(name)
    group = kernel.out_scale.block_k
    m, groups = 16, 4
    k = groups * group - group // 2  # the NaN in row 3 sits in the partial last group
    x = random_inputs(kernel, m=m, n=k, k=k, seed=22)["lhs"]
    bad = {(0, 0): np.inf, (1, 1): -np.inf, (2, 1): np.nan, (3, groups - 1): np.nan,
           (4, 2): np.inf}
    for (r, j), v in bad.items():
        x[r, j * group + 5] = v
    x[4, 2 * group + 7] = np.nan  # inf and NaN in one group
    q, scale = _exact_scales(generated, name, x)
    q = q.astype(np.float32)
    nan_scale = np.isnan(scale) if scale.dtype == np.float32 else scale == 255
    want = np.zeros((m, groups), bool)
    for (r, j) in bad:
        want[r, j] = True
    np.testing.assert_array_equal(nan_scale, want)
    for (r, j) in bad:
        assert np.isnan(q[r, j * group:(j + 1) * group]).all()
    good = ~np.repeat(want, group, axis=1)[:, :k]
    assert np.isfinite(q[good]).all()
