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


def _as_jax_4bit(packed: np.ndarray, dtype, count: int):
    """uint8 bytes [..., c/2] -> a JAX 4-bit array [..., count] (count <= c),
    unpacked nibble by nibble: element 2i is the low nibble of byte i."""
    import jax.numpy as jnp

    codes = np.stack([packed & 15, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    codes = codes[..., :count].astype(np.int64)
    if dtype == jnp.int4:
        codes = np.where(codes >= 8, codes - 16, codes)
    return jnp.asarray(codes.astype(np.int8)).astype(dtype)


@pytest.mark.parametrize("name, n", [("gmm_asym_kblock", 131), ("gmm_asym_kn", 256),
                                     ("dense_asym_block", 128)])
def test_jax_uint4_arrays(generated, name, n):
    """rhs and rhs_zero as jnp.uint4 arrays of their logical shapes (an odd
    number of zero points too) give the bytes' result, exactly."""
    import jax.numpy as jnp
    from pallas_helpers import run

    kernel = generated.kernel(name)
    k = 512
    inputs = _inputs(kernel, 40, n, k, 11)
    want = check(kernel, generated.fn(name), inputs, k=k)
    rhs, zero = inputs["rhs"], inputs["rhs_zero"]
    last = n if kernel.rhs_scale.mode.value == "kblock" else -(-k // kernel.rhs_scale.block_k)
    as_jax = {**inputs, "rhs": _as_jax_4bit(rhs, jnp.uint4, 2 * rhs.shape[-1]),
              "rhs_zero": _as_jax_4bit(zero, jnp.uint4, last)}
    got = run(generated.fn(name), as_jax)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_jax_int4_weights_and_wrong_4bit_type(tmp_path):
    """int4 weights as jnp.int4 [n, k] match their bytes; a jnp.int4 array
    for uint4 weights, or an odd k, is refused by name."""
    import jax.numpy as jnp
    from pallas_helpers import run

    spec = spec_text(kernel_block("w4", "op dense", "lhs bf16 [m, k]", "rhs int4 packed [n, k]",
                                  "out f32", "rhs_scale per_channel f32",
                                  "tile m=64 n=128 k=256"))
    gen = build(spec, tmp_path)
    kernel = gen.kernel("w4")
    inputs = random_inputs(kernel, m=24, n=128, k=512, seed=4)
    want = check(kernel, gen.fn("w4"), inputs, k=512)
    rhs4 = _as_jax_4bit(inputs["rhs"], jnp.int4, 512)
    got = run(gen.fn("w4"), {**inputs, "rhs": rhs4})
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    with pytest.raises(ValueError, match="rhs is a uint4 array, but this kernel reads int4"):
        run(gen.fn("w4"), {**inputs, "rhs": rhs4.astype(jnp.uint4)})
    with pytest.raises(ValueError, match="must be even"):
        run(gen.fn("w4"), {**inputs, "rhs": rhs4[:, :511]})


# Planted bugs: the generated module with one line changed must fail.


def _planted(gen, tmp_path, name: str, old: str, new: str):
    from pathlib import Path

    from pallas_helpers import import_path

    text = Path(gen.modules[name].__file__).read_text()
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    path = tmp_path / f"{name}_planted.py"
    path.write_text(text.replace(old, new))
    return getattr(import_path(path), name)


@pytest.mark.parametrize("name, old, new", [
    # the zero point subtracted with the wrong sign
    ("gmm_asym_kblock", "part = part - row_sums *", "part = part + row_sums *"),
    # each zero point read from the other nibble of its byte
    ("gmm_asym_kn", "jnp.stack([x & 15, x >> 4]", "jnp.stack([x >> 4, x & 15]"),
    # the zero points of the K block before (one scale block late)
    ("dense_asym_block", "rhs_zero = _zero_points(rhs_zero, pl.cdiv(k, RHS_SCALE_BLOCK_K))",
     "rhs_zero = jnp.roll(_zero_points(rhs_zero, pl.cdiv(k, RHS_SCALE_BLOCK_K)), 1, axis=-1)"),
    # only the even half of packed k corrected
    ("masked_asym", "row_sums = _row_sum(lhs_even) + _row_sum(lhs_odd)",
     "row_sums = _row_sum(lhs_even)"),
], ids=["sign", "nibble", "k_block", "half"])
def test_planted_zero_point_bugs(generated, tmp_path, name, old, new):
    from pallas_helpers import run

    from gemmgen import reference as ref

    kernel = generated.kernel(name)
    fn = _planted(generated, tmp_path, name, old, new)
    inputs = _inputs(kernel, 64, 256, 1024, 13)
    result = ref.compare(run(fn, inputs), ref.reference(kernel, **inputs), kernel, k=1024,
                         inputs=inputs)
    assert not result.passed
