"""Asymmetric 4-bit weights in Pallas: uint4 codes with one uint4 zero point
per rhs_scale (`rhs_scale ... zero=uint4`, GPTQ / AWQ), w = (q - z) * s,
dense, grouped (both B layouts), masked and with silu_mul, in TPU interpret
mode against the float64 reference and lowered for TPU; and plain uint4."""

from __future__ import annotations

import numpy as np
import pytest

from pallas_helpers import build, check, kernel_block, lower_for_tpu, random_inputs, spec_text

KERNELS = {
    # K tile of two scale blocks: the K-block loop, a zero row per block.
    "gmm_asym_kblock": ("op grouped", "lhs bf16 [m, k]", "rhs uint4 packed [g, n, k]",
                        "out bf16", "rhs_scale kblock k=256 f32 zero=uint4",
                        "bias f32 [g, 1, n]", "tile m=128 n=128 k=512"),
    # One scale block per K tile.
    "dense_asym_block": ("op dense", "lhs bf16 [m, k]", "rhs uint4 packed [n, k]", "out f32",
                         "rhs_scale block n=1 k=256 bf16 zero=uint4", "tile m=64 n=128 k=256"),
    # rhs packed along n, blocks of 128 rows along sublanes.
    "gmm_asym_kn": ("op grouped", "lhs bf16 [m, k]", "rhs uint4 packed [g, k, n]", "out f32",
                    "rhs_scale kblock k=128 bf16 zero=uint4", "tile m=128 n=256 k=256"),
    # K tiles that divide the scale block: one zero row for several K tiles.
    "masked_asym": ("op grouped", "lhs bf16 [g, m, k]", "rhs uint4 packed [g, n, k]",
                    "out bf16", "rhs_scale kblock k=512 f32 zero=uint4", "tile m=64 n=128 k=256"),
    # The gate and up halves each read their columns' zero points.
    "gmm_asym_silu_mul": ("op grouped", "lhs bf16 [m, k]", "rhs uint4 packed [g, n, k]",
                          "out bf16", "rhs_scale kblock k=256 f32 zero=uint4",
                          "epilogue silu_mul", "tile m=128 n=128 k=256"),
    # uint4 without zero points: codes 0..15 times the scale.
    "dense_uint4": ("op dense", "lhs bf16 [m, k]", "rhs uint4 packed [n, k]", "out f32",
                    "rhs_scale per_channel f32", "tile m=128 n=128 k=256"),
}

SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])

# Partial m and n tiles, k not a multiple of the tile nor of the scale block.
M, N, K = 300, 256, 704


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_asymmetric"))


def _inputs(kernel, m, n, k, seed, **extra):
    if kernel.grouped and not kernel.masked:
        extra.setdefault("num_groups", 5)
    return random_inputs(kernel, m=m, n=n, k=k, seed=seed, **extra)


@pytest.mark.parametrize("name", list(KERNELS))
def test_matches_reference(generated, name):
    kernel = generated.kernel(name)
    check(kernel, generated.fn(name), _inputs(kernel, M, N, K, len(name)), k=K)


@pytest.mark.parametrize("name", list(KERNELS))
def test_lowers_for_tpu(generated, name):
    kernel = generated.kernel(name)
    lower_for_tpu(generated.fn(name), _inputs(kernel, 8, 512, 1024, 0))


def test_one_row_odd_n(generated):
    """m = 1, and an odd n: the zero points' last byte has an unused high
    nibble, which random_inputs fills with noise the kernel must not read."""
    kernel = generated.kernel("gmm_asym_kblock")
    inputs = _inputs(kernel, 1, 131, 512, 3, num_groups=3)
    assert inputs["rhs_zero"].shape[-1] == 66
    check(kernel, generated.fn("gmm_asym_kblock"), inputs, k=512)


def test_empty_groups_sharded_existing_out(generated):
    """Empty groups, a shard's groups (group_offset) and existing_out rows."""
    name = "gmm_asym_kblock"
    kernel = generated.kernel(name)
    sizes = np.array([0, 40, 0, 90, 0, 70], np.int32)
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=sizes, group_offset=1,
                           g_local=4, with_existing_out=True, seed=5)
    check(kernel, generated.fn(name), inputs, k=K)


def test_zero_points_matter(generated):
    """The zero points are read: the output moves by (sum_k x) * z * s when
    every z is raised by one (all z in 0..14 first), not by anything else."""
    name = "dense_asym_block"
    kernel = generated.kernel(name)
    inputs = _inputs(kernel, 16, 128, 512, 9)
    z = inputs["rhs_zero"]
    low, high = np.minimum(z & 15, 14), np.minimum(z >> 4, 14)
    inputs["rhs_zero"] = (low | (high << 4)).astype(np.uint8)
    before = check(kernel, generated.fn(name), inputs, k=512)
    inputs["rhs_zero"] = ((low + 1) | ((high + 1) << 4)).astype(np.uint8)
    after = check(kernel, generated.fn(name), inputs, k=512)
    assert not np.allclose(before, after)


def test_rejects_wrong_zero_shape(generated):
    name = "dense_asym_block"
    kernel = generated.kernel(name)
    inputs = _inputs(kernel, 8, 128, 512, 1)
    inputs["rhs_zero"] = inputs["rhs_zero"][:, :-1]
    with pytest.raises(ValueError, match="rhs_zero"):
        check(kernel, generated.fn(name), inputs, k=512)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(KERNELS))
def test_small_m_and_exact_tiles(generated, name):
    kernel = generated.kernel(name)
    for m, n, k in [(3, 256, 512), (256, 256, 1024)]:
        check(kernel, generated.fn(name), _inputs(kernel, m, n, k, 2), k=k)
