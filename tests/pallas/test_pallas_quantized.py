"""Quantized operands and scales in Pallas: fp8 (e4m3, e5m2), int8 with int32
accumulation, int4 and fp4 packed two per byte (unpacked in the kernel), and
every scale mode with f32, bf16 and e8m0 scale dtypes, dense and grouped,
run in TPU interpret mode against the reference and lowered for TPU."""

from __future__ import annotations

import numpy as np
import pytest

from pallas_helpers import build, check, kernel_block, lower_for_tpu, random_inputs, spec_text

# name: spec fields. Between them every scale mode meets every scale dtype
# it allows, every operand dtype and both B layouts, dense and grouped.
KERNELS = {
    # fp8
    "fp8_token_channel": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16",
                          "lhs_scale per_token f32", "rhs_scale per_channel bf16"),
    "fp8_tensor_kn": ("op dense", "lhs e5m2 [m, k]", "rhs e4m3 [k, n]", "out f16",
                      "lhs_scale per_tensor e8m0", "rhs_scale per_tensor f32"),
    "w8a8_block": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16",
                   "lhs_scale per_token_group k=128 f32", "rhs_scale block n=128 k=128 f32"),
    "w8a8_block_kn_e8m0": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [k, n]", "out bf16",
                           "lhs_scale per_token_group k=256 e8m0",
                           "rhs_scale block n=256 k=256 bf16"),
    "gmm_w8a8_block": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16",
                       "lhs_scale per_token_group k=128 bf16",
                       "rhs_scale block n=128 k=128 e8m0"),
    "gmm_fp8_tensor": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16",
                       "lhs_scale per_token f32", "rhs_scale per_tensor bf16"),
    "gmm_e5m2_channel_kn": ("op grouped", "lhs bf16 [m, k]", "rhs e5m2 [g, k, n]", "out f32",
                            "rhs_scale per_channel f32"),
    # int8 (int32 accumulation; f32 promotion per K block with main-loop scales)
    "int8_token_channel": ("op dense", "lhs int8 [m, k]", "rhs int8 [n, k]", "out bf16",
                           "lhs_scale per_token bf16", "rhs_scale per_channel f32"),
    "gmm_int8_kblock_kn": ("op grouped", "lhs int8 [m, k]", "rhs int8 [g, k, n]", "out f32",
                           "lhs_scale per_tensor f32", "rhs_scale kblock k=128 e8m0"),
    "gmm_w8a16_kblock": ("op grouped", "lhs bf16 [m, k]", "rhs int8 [g, n, k]", "out bf16",
                         "rhs_scale kblock k=256 bf16"),
    # 4-bit, packed two per byte
    "w4a16": ("op dense", "lhs bf16 [m, k]", "rhs int4 packed [n, k]", "out bf16",
              "rhs_scale per_channel bf16", "tile m=128 n=128 k=256"),
    "fp4_mx": ("op dense", "lhs bf16 [m, k]", "rhs fp4 packed [n, k]", "out bf16",
               "rhs_scale block n=1 k=256 e8m0", "tile m=128 n=128 k=256"),
    "w4a4": ("op dense", "lhs int4 packed [m, k]", "rhs int4 packed [n, k]", "out f32",
             "lhs_scale per_token f32", "tile m=128 n=128 k=256"),
    "fp8_fp4_block": ("op dense", "lhs e4m3 [m, k]", "rhs fp4 packed [n, k]", "out bf16",
                      "lhs_scale per_token_group k=256 f32", "rhs_scale block n=128 k=256 f32",
                      "tile m=128 n=128 k=256"),
    "w4a8_kn": ("op dense", "lhs int8 [m, k]", "rhs int4 packed [k, n]", "out bf16",
                "rhs_scale per_channel f32", "tile m=128 n=256 k=128"),
    "gmm_w4a4_kn": ("op grouped", "lhs int4 packed [m, k]", "rhs int4 packed [g, k, n]",
                    "out f32", "tile m=128 n=256 k=256"),
    "gmm_fp4_kn_kblock": ("op grouped", "lhs bf16 [m, k]", "rhs fp4 packed [g, k, n]",
                          "out bf16", "rhs_scale kblock k=128 f32", "tile m=128 n=256 k=128"),
    "gmm_int4_nk": ("op grouped", "lhs bf16 [m, k]", "rhs int4 packed [g, n, k]", "out bf16",
                    "rhs_scale per_channel bf16", "tile m=64 n=128 k=256"),
}

SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])

# m, n, k: partial m, n and k tiles; k a whole number of bytes when packed.
M, N, K = 300, 200, 448


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_quantized"))


@pytest.mark.parametrize("name", list(KERNELS))
def test_matches_reference(generated, name):
    kernel = generated.kernel(name)
    extra = {"num_groups": 5} if kernel.grouped else {}
    inputs = random_inputs(kernel, m=M, n=N, k=K, seed=len(name), **extra)
    check(kernel, generated.fn(name), inputs, k=K)


@pytest.mark.parametrize("name", list(KERNELS))
def test_lowers_for_tpu(generated, name):
    kernel = generated.kernel(name)
    for m, n, k in [(M, N, K), (8, 512, 1024)]:
        extra = {"num_groups": 5} if kernel.grouped else {}
        lower_for_tpu(generated.fn(name), random_inputs(kernel, m=m, n=n, k=k, **extra))


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in KERNELS if n.startswith("gmm_")])
def test_grouped_sharded_with_existing_out(generated, name):
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=6, group_offset=2, g_local=3,
                           with_existing_out=True, seed=7)
    check(kernel, generated.fn(name), inputs, k=K)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(KERNELS))
def test_small_m_and_exact_tiles(generated, name):
    kernel = generated.kernel(name)
    for m, n, k in [(3, 256, 512), (256, 256, 1024)]:
        extra = {"num_groups": 3} if kernel.grouped else {}
        check(kernel, generated.fn(name), random_inputs(kernel, m=m, n=n, k=k, **extra), k=k)


def test_e8m0_scale_bytes_edge_values(generated):
    """e8m0 bytes 0 (2**-127), 1, 254 and 127 (1.0) decode exactly; a scale
    of 255 (NaN) makes the affected outputs NaN, never a finite number."""
    name = "fp4_mx"
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=16, n=128, k=512, seed=1)
    scale = np.full_like(inputs["rhs_scale"], 127)
    scale[0, 0] = 255  # column 0, first K block: NaN
    scale[1, :] = 128  # column 1: 2.0
    inputs["rhs_scale"] = scale
    out = check(kernel, generated.fn(name), inputs, k=512)
    assert np.isnan(out[:, 0].astype(np.float32)).all()
    assert np.isfinite(out[:, 1:].astype(np.float32)).all()


def test_packed_rejects_odd_bytes(generated):
    """A packed operand's shape says k/2 (or n/2) bytes; a wrong one is named."""
    kernel = generated.kernel("w4a16")
    inputs = random_inputs(kernel, m=8, n=128, k=512)
    inputs["rhs"] = inputs["rhs"][:, :-1]
    with pytest.raises(ValueError, match=r"lhs has k = 512 but rhs has k = 510 "
                       r"\(lhs \[8, 512\] is \[m, k\], rhs \[128, 255\] is \[n, k/2\]\)"):
        check(kernel, generated.fn("w4a16"), inputs, k=512)
