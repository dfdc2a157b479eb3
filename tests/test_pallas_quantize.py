"""Per-token-group FP8 activation quantization in Pallas: f32 scales and e8m0
scales rounded up to a power of two, partial groups, all-zero groups, and
amax exactly at (and one ulp past) fp8_max * 2**e."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

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
    return {"quant_e5m2_e8m0_g32": np.float32, "quant_f16_g256": np.float16}.get(
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
