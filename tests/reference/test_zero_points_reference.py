"""The reference of asymmetric 4-bit weights (`rhs_scale ... zero=uint4`):
uint4 codes and zero points decoded nibble by nibble, and whole GEMMs
(dense `block`, grouped `kblock`, both B layouts, a ragged last K block,
odd n) against a loop over columns and K blocks, w = (q - z) * s, on fresh
random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from gemmgen import ir
from gemmgen.ir import DType
from gemmgen.numerics import float64_to_storage, pack_nibbles, storage_to_float64
from gemmgen.parse import parse
from gemmgen.reference import random_inputs, reference
from gemmgen.validate import validate


def kernel_of(op: str, rhs_shape: str, scale: str) -> ir.Kernel:
    lhs = "[g, m, k]" if op == "masked" else "[m, k]"
    text = f"""
target pallas_tpu {{
  tpu v5e
}}
kernel asym {{
  op {"grouped" if op == "masked" else op}
  lhs bf16 {lhs}
  rhs uint4 packed {rhs_shape}
  out f32
  rhs_scale {scale}
  tile m=128 n=256 k=256
  backends pallas_tpu
}}
"""
    (kernel,) = validate(parse(text, "t.gemm")).kernels
    return kernel


def nibbles(packed: np.ndarray, count: int) -> np.ndarray:
    """Element i of each row: byte i // 2, low nibble when i is even."""
    out = np.zeros(packed.shape[:-1] + (count,))
    for i in range(count):
        byte = packed[..., i // 2].astype(np.int64)
        out[..., i] = (byte & 15) if i % 2 == 0 else (byte >> 4)
    return out


def test_uint4_storage_round_trip():
    codes = np.arange(16, dtype=np.float64).reshape(2, 8)
    packed = float64_to_storage(codes, DType.UINT4)
    assert packed.dtype == np.uint8 and packed.shape == (2, 4)
    assert packed[0, 0] == 0x10 and packed[1, 3] == 0xFE
    assert np.array_equal(storage_to_float64(packed, DType.UINT4), codes)
    # Out-of-range values saturate to 0..15, halves round to even.
    assert np.array_equal(storage_to_float64(
        float64_to_storage(np.array([-3.0, 20.0, 2.5, 3.5]), DType.UINT4), DType.UINT4),
        [0.0, 15.0, 2.0, 4.0])


def loop_reference(kernel: ir.Kernel, inputs: dict, *, m: int, n: int, k: int) -> np.ndarray:
    """out = x @ W per group, W[kk, j] = (q[kk, j] - z[b, j]) * s[b, j], b = kk // BK."""
    scale = kernel.rhs_scale
    bk = scale.block_k
    kb = -(-k // bk)
    x = inputs["lhs"].astype(np.float64)
    q = nibbles(inputs["rhs"], inputs["rhs"].shape[-1] * 2)
    grouped = kernel.op is ir.Op.GROUPED
    if not grouped:
        q = q[None]
    if kernel.rhs_operand.layout is ir.Layout.NK:
        q = np.swapaxes(q, -1, -2)  # [g, k, n]
    s = storage_to_float64(inputs["rhs_scale"], scale.dtype)
    if scale.mode is ir.ScaleMode.KBLOCK:
        z = nibbles(inputs["rhs_zero"], n)[:, :, 0, :]  # [g, kb, n]
        s = s[:, :, 0, :]
    else:  # block n=1: [(g,) n, kb]
        z = np.swapaxes(nibbles(inputs["rhs_zero"], kb), -1, -2)
        s = np.swapaxes(s, -1, -2)
        if not grouped:
            z, s = z[None], s[None]
    w = np.zeros(q.shape)
    for kk in range(k):
        w[:, kk, :] = (q[:, kk, :] - z[:, kk // bk, :]) * s[:, kk // bk, :]
    if kernel.masked:
        out = np.einsum("gmk,gkn->gmn", x, w)
        counts = np.clip(inputs["masked_m"], 0, x.shape[1])
        for i, c in enumerate(counts):
            out[i, c:] = 0.0
        return out
    if not grouped:
        return x @ w[0]
    out = np.zeros((m, n))
    start = 0
    for i, size in enumerate(inputs["group_sizes"]):
        out[start:start + size] = x[start:start + size] @ w[i]
        start += size
    return out


@pytest.mark.parametrize("op, rhs_shape, scale, n", [
    ("dense", "[n, k]", "block n=1 k=128 bf16 zero=uint4", 96),
    ("dense", "[k, n]", "block n=1 k=64 f32 zero=uint4", 64),
    ("grouped", "[g, n, k]", "kblock k=128 f32 zero=uint4", 33),
    ("grouped", "[g, k, n]", "kblock k=64 bf16 zero=uint4", 48),
    ("masked", "[g, n, k]", "kblock k=128 f32 zero=uint4", 40),
])
def test_matches_loop(op, rhs_shape, scale, n):
    kernel = kernel_of(op, rhs_shape, scale)
    m, k = 24, 200  # k: a ragged last scale block
    rng = np.random.default_rng(len(scale) + n)
    extra = {"g_local": 3} if op == "masked" else {"num_groups": 3} if op == "grouped" else {}
    inputs = random_inputs(kernel, m=m, n=n, k=k, rng=rng, **extra)
    expected = loop_reference(kernel, inputs, m=m, n=n, k=k)
    np.testing.assert_allclose(reference(kernel, **inputs), expected, rtol=1e-12, atol=1e-9)


def test_zero_points_required_and_shaped():
    kernel = kernel_of("grouped", "[g, n, k]", "kblock k=128 f32 zero=uint4")
    inputs = random_inputs(kernel, m=8, n=10, k=256, rng=np.random.default_rng(0))
    assert inputs["rhs_zero"].shape == (4, 2, 1, 5)
    missing = dict(inputs)
    del missing["rhs_zero"]
    with pytest.raises(ValueError, match="rhs_zero .* is required"):
        reference(kernel, **missing)
    with pytest.raises(ValueError, match=r"rhs_zero must have shape \(4, 2, 1, 5\)"):
        reference(kernel, **{**inputs, "rhs_zero": inputs["rhs_zero"][..., :4]})
    plain = kernel_of("grouped", "[g, n, k]", "kblock k=128 f32")
    with pytest.raises(ValueError, match="rhs_zero given but"):
        reference(plain, **{**random_inputs(plain, m=8, n=10, k=256,
                                            rng=np.random.default_rng(0)),
                            "rhs_zero": inputs["rhs_zero"]})


def test_zero_point_equal_to_code_gives_zero_weight():
    """z = q everywhere: every weight is 0, so is the output."""
    kernel = kernel_of("dense", "[n, k]", "block n=1 k=128 f32 zero=uint4")
    inputs = random_inputs(kernel, m=4, n=8, k=256, rng=np.random.default_rng(1))
    inputs["rhs"] = pack_nibbles(np.full((8, 256), 7))
    inputs["rhs_zero"] = pack_nibbles(np.full((8, 2), 7))
    assert not np.any(reference(kernel, **inputs))


def test_quantize_uint4_asymmetric_round_trips_within_half_a_step():
    """Min-max quantized weights decode (through the reference of a kernel
    that reads them) to within s / 2 of the float weights, and a block of
    all-positive weights keeps z = 0 (its min is clipped to 0)."""
    from gemmgen.reference import quantize_uint4_asymmetric

    rng = np.random.default_rng(3)
    g, k, n, bk = 2, 200, 6, 64
    w = rng.standard_normal((g, k, n)) * rng.uniform(0.1, 2.0, size=(1, 1, n))
    w[0, :64, 0] = np.abs(w[0, :64, 0])
    args = quantize_uint4_asymmetric(w, bk)
    kernel = kernel_of("grouped", "[g, k, n]", f"kblock k={bk} f32 zero=uint4")
    eye = np.eye(k, dtype=np.float64)
    got = np.stack([reference(kernel, lhs=eye.astype(ml_bf16()), rhs=args["rhs"][i:i + 1],
                              group_sizes=np.array([k], np.int32), rhs_scale=args["rhs_scale"][i:i + 1],
                              rhs_zero=args["rhs_zero"][i:i + 1]) for i in range(g)])
    step = np.repeat(args["rhs_scale"][:, :, 0, :].astype(np.float64), bk, axis=1)[:, :k]
    assert np.all(np.abs(got - w) <= step / 2 * (1 + 1e-6))
    assert nibbles(args["rhs_zero"], n)[0, 0, 0, 0] == 0


def ml_bf16():
    import ml_dtypes

    return ml_dtypes.bfloat16
