"""e8m0 scales in Pallas: every byte 0..255 in every position an e8m0 scale
can take, against the reference.

Byte e means 2**(e - 127) exactly; byte 0 (2**-127) is an f32 subnormal,
which XLA on the CPU (and so interpret mode) flushes to zero just as TPUs
do, so a kernel that formed it as an f32 would output 0. Byte 255 is NaN.

Each test gives every byte a row, a column, a group or a call of its own,
with |lhs| and |rhs| (fresh random values, made positive so that no sum
cancels): every output is then one product whose size is known to within a
small factor, so each byte's effect is visible (not drowned by a larger
term) and the outputs are normal f32 numbers or overflow. An output below
2**-126 would be flushed by the hardware, which `reference.compare` does not
accept, so the byte pairs are chosen to avoid one (`_check` asserts it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gemmgen import reference as ref
from gemmgen.build import load
from pallas_helpers import Generated, build, generate, kernel_block, lower_for_tpu, random_inputs, run, spec_text

KERNELS = {
    # lhs per_token x rhs per_channel, both e8m0: one sum of exponents in the epilogue.
    "tok_ch": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [k, n]", "out bf16",
               "lhs_scale per_token e8m0", "rhs_scale per_channel e8m0"),
    # lhs per_token_group x rhs block, both e8m0: the sum per K block.
    "tg_blk": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out f32",
               "lhs_scale per_token_group k=128 e8m0", "rhs_scale block n=1 k=128 e8m0"),
    # lhs per_token_group e8m0 with an f32 epilogue scale and alpha, both
    # moved into the main loop.
    "tg_ch_alpha": ("op dense", "lhs e5m2 [m, k]", "rhs e4m3 [n, k]", "out bf16",
                    "lhs_scale per_token_group k=128 e8m0", "rhs_scale per_channel f32",
                    "epilogue alpha=0.75"),
    # rhs per_tensor e8m0 alone (an SMEM scalar), dense.
    "dense_rtensor": ("op dense", "lhs bf16 [m, k]", "rhs e4m3 [n, k]", "out f32",
                      "rhs_scale per_tensor e8m0"),
    # grouped: lhs per_token e8m0 (moved into the loop) x rhs kblock e8m0, int8.
    "gmm_tok_kblock": ("op grouped", "lhs int8 [m, k]", "rhs int8 [g, k, n]", "out f32",
                       "lhs_scale per_token e8m0", "rhs_scale kblock k=128 e8m0"),
    # grouped: lhs per_tensor x rhs per_tensor [g], both e8m0 (SMEM scalars).
    "gmm_tensor": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16",
                   "lhs_scale per_tensor e8m0", "rhs_scale per_tensor e8m0"),
    # f32 operands: a partial product near 2**127 times 2**-253 needs all
    # three steps of _times_pow2.
    "f32_pair": ("op dense", "lhs f32 [m, k]", "rhs f32 [k, n]", "out f32",
                 "lhs_scale per_token_group k=128 e8m0", "rhs_scale block n=1 k=128 e8m0"),
}
SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])
BYTES = np.arange(256)
EDGE_BYTES = [0, 1, 2, 126, 127, 128, 253, 254, 255]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_e8m0"))


def _positive(inputs: dict) -> dict:
    """|lhs| and |rhs|: no cancellation, so every output is far from 0."""
    return {**inputs, "lhs": np.abs(inputs["lhs"]), "rhs": np.abs(inputs["rhs"])}


def _check(gen: Generated, name: str, inputs: dict, *, k: int):
    """Run the kernel and compare with the reference; asserts this file's
    premise first (no expected output is an f32 subnormal)."""
    kernel = gen.kernel(name)
    expected = ref.reference(kernel, **inputs)
    with np.errstate(invalid="ignore"):
        subnormal = (expected != 0) & (np.abs(expected) < 2.0**-126)
    assert not subnormal.any(), "test design: an expected output is an f32 subnormal"
    actual = run(gen.fn(name), inputs)
    result = ref.compare(actual, expected, kernel, k=k, inputs=inputs)
    assert result.passed, f"{name}: {result.detail}"
    return actual, expected


def _high(count: int, offset: int = 0) -> np.ndarray:
    """count bytes cycling through 120..254: partners for the bytes under
    test that keep every product (|part| >= 2**10 here) a normal f32."""
    return (120 + (np.arange(count) + offset) % 135).astype(np.uint8)


def test_lowers_for_tpu(generated):
    for name in KERNELS:
        kernel = generated.kernel(name)
        extra = {"num_groups": 3} if kernel.grouped else {}
        lower_for_tpu(generated.fn(name), random_inputs(kernel, m=40, n=256, k=256, **extra))


@pytest.mark.parametrize("side", ["lhs", "rhs"])
def test_token_channel_every_byte(generated, side):
    """Epilogue e8m0 x e8m0: every byte on one side (a row or a column
    each), against bytes 120..254 and 255 on the other."""
    name = "tok_ch"
    m = n = 256
    k = 200  # a partial K tile
    inputs = _positive(random_inputs(generated.kernel(name), m=m, n=n, k=k, seed=1))
    under_test, partner = BYTES.astype(np.uint8), _high(256)
    partner[7] = 255
    inputs["lhs_scale"], inputs["rhs_scale"] = (
        (under_test, partner) if side == "lhs" else (partner, under_test))
    actual, _ = _check(generated, name, inputs, k=k)
    # The pairs reach past bf16's range (the same infinity) and NaN.
    actual = actual.astype(np.float32)
    assert np.isinf(actual).any() and np.isnan(actual).any()


@pytest.mark.parametrize("side", ["lhs", "rhs"])
def test_group_block_every_byte(generated, side):
    """Main-loop e8m0 x e8m0: every byte in both K blocks of a row (lhs
    per_token_group) or a column (rhs block n=1), the partner side 120..254;
    the exponents meet per K block."""
    name = "tg_blk"
    m = n = 256
    k = 256
    inputs = _positive(random_inputs(generated.kernel(name), m=m, n=n, k=k, seed=2))
    under_test = np.repeat(BYTES.astype(np.uint8)[:, None], 2, axis=1)
    partner = np.stack([_high(256), _high(256, offset=40)], axis=1)
    partner[3] = 255
    if side == "lhs":
        inputs["lhs_scale"], inputs["rhs_scale"] = under_test, partner
    else:
        inputs["lhs_scale"], inputs["rhs_scale"] = partner, under_test
    _check(generated, name, inputs, k=k)


def test_group_scale_with_f32_channel_and_alpha(generated):
    """lhs per_token_group e8m0, every byte (one row each, the same in both
    K blocks), with an f32 per-channel scale and alpha, folded into the
    main loop."""
    name = "tg_ch_alpha"
    m, n, k = 256, 128, 256
    inputs = _positive(random_inputs(generated.kernel(name), m=m, n=n, k=k, seed=3))
    inputs["lhs_scale"] = np.repeat(BYTES.astype(np.uint8)[:, None], 2, axis=1)
    _check(generated, name, inputs, k=k)


@pytest.mark.parametrize("side", ["lhs", "rhs"])
def test_grouped_token_kblock_every_byte(generated, side):
    """Grouped: lhs per_token e8m0 (moved into the main loop) x rhs kblock
    e8m0 [g, k/128, 1, n]; each group sees every byte of the side under test."""
    name = "gmm_tok_kblock"
    kernel = generated.kernel(name)
    m, n, k, g = 256, 256, 256, 3
    sizes = np.array([100, 0, 156], np.int32)  # every row owned, an empty group
    inputs = _positive(random_inputs(kernel, m=m, n=n, k=k, group_sizes=sizes, seed=4))
    rhs_scale = np.empty((g, 2, 1, n), np.uint8)
    if side == "lhs":
        inputs["lhs_scale"] = BYTES.astype(np.uint8)
        for i in range(g):
            rhs_scale[i, :, 0] = _high(n, offset=31 * i)
    else:
        inputs["lhs_scale"] = _high(m)
        for i in range(g):
            rhs_scale[i, :, 0] = np.roll(BYTES, 64 * i).astype(np.uint8)
    inputs["rhs_scale"] = rhs_scale
    _check(generated, name, inputs, k=k)


def test_grouped_tensor_every_rhs_byte(generated):
    """rhs per_tensor [g] e8m0: 256 groups of one row, group i scaled by
    byte i, lhs per_tensor 127 (1.0)."""
    name = "gmm_tensor"
    m, n, k = 256, 128, 128
    inputs = _positive(random_inputs(generated.kernel(name), m=m, n=n, k=k,
                                     group_sizes=np.ones(256, np.int32), seed=5))
    inputs["lhs_scale"] = np.asarray(127, np.uint8)
    inputs["rhs_scale"] = BYTES.astype(np.uint8)
    _check(generated, name, inputs, k=k)


def _grouped_tensor_lhs_byte(generated, byte: int):
    name = "gmm_tensor"
    m, n, k = 40, 128, 128
    inputs = _positive(random_inputs(generated.kernel(name), m=m, n=n, k=k,
                                     group_sizes=np.array([10, 7, 0, 23], np.int32),
                                     seed=6 + byte))
    inputs["lhs_scale"] = np.asarray(byte, np.uint8)
    # rhs bytes from where the product stays normal up to 254, and a NaN group.
    low = max(0, 120 - min(byte, 254))
    inputs["rhs_scale"] = np.array([low, (low + 254) // 2, 254, 255], np.uint8)
    _check(generated, name, inputs, k=k)


@pytest.mark.parametrize("byte", EDGE_BYTES)
def test_grouped_tensor_lhs_edge_bytes(generated, byte):
    """lhs per_tensor e8m0 (one scalar per call) at the edge bytes."""
    _grouped_tensor_lhs_byte(generated, byte)


@pytest.mark.slow
def test_grouped_tensor_every_lhs_byte(generated):
    for byte in BYTES:
        _grouped_tensor_lhs_byte(generated, int(byte))


def _dense_tensor_rhs_byte(generated, byte: int):
    name = "dense_rtensor"
    m, n, k = 24, 128, 200
    inputs = _positive(random_inputs(generated.kernel(name), m=m, n=n, k=k, seed=7 + byte))
    inputs["rhs_scale"] = np.asarray(byte, np.uint8)
    actual, expected = _check(generated, name, inputs, k=k)
    if byte == 0:  # 2**-127 times ~2**13: about 1e-34, not 0
        assert (np.abs(actual) > 2.0**-126).all()


@pytest.mark.parametrize("byte", EDGE_BYTES)
def test_dense_tensor_rhs_edge_bytes(generated, byte):
    """rhs per_tensor e8m0 alone (an SMEM scalar) at the edge bytes."""
    _dense_tensor_rhs_byte(generated, byte)


@pytest.mark.slow
def test_dense_tensor_every_rhs_byte(generated):
    for byte in BYTES:
        _dense_tensor_rhs_byte(generated, int(byte))


def test_exponent_sum_below_minus_252(generated):
    """2**(e_lhs + e_rhs) down to 2**-253, which takes three normal steps:
    f32 products near 2**127 (positive random values of 2**63 and 2**57
    times 1..1.25, 128 of them per output) times bytes 0..3 on both sides,
    where the result is normal (|result| >= 2**-126)."""
    name = "f32_pair"
    m, n, k = 16, 128, 128
    rng = np.random.default_rng(8)
    lhs = (2.0**63 * rng.uniform(1.0, 1.25, (m, k))).astype(np.float32)
    rhs = (2.0**57 * rng.uniform(1.0, 1.25, (k, n))).astype(np.float32)
    lhs_bytes = np.array([0, 1, 2, 3] * 4, np.uint8)[:, None]
    rhs_bytes = (1 + np.arange(n) % 3).astype(np.uint8)[:, None]  # 1, 2, 3
    inputs = {"lhs": lhs, "rhs": rhs, "lhs_scale": lhs_bytes, "rhs_scale": rhs_bytes}
    actual, expected = _check(generated, name, inputs, k=k)
    # Rows with byte 0 against columns with byte 1: 2**-253, the three-step case.
    assert (np.abs(actual[0, 0::3]) >= 2.0**-126).all()


def test_spec_kernel_every_lhs_byte(tmp_path):
    """The issue's kernel, specs/dense.gemm's
    fp8_gemm_blockscaled_lhs_scale_e8m0_rhs_scale_f32: row i of lhs_scale is
    byte i (both K blocks); byte 0 used to give exactly 0.0."""
    spec, _ = load(Path(__file__).resolve().parents[2] / "specs" / "dense.gemm")
    gen = Generated(spec, generate(spec, tmp_path))
    name = "fp8_gemm_blockscaled_lhs_scale_e8m0_rhs_scale_f32"
    m, n, k = 256, 256, 256
    inputs = _positive(random_inputs(gen.kernel(name), m=m, n=n, k=k, seed=9))
    inputs["lhs_scale"] = np.repeat(BYTES.astype(np.uint8)[:, None], 2, axis=1)
    actual, _ = _check(gen, name, inputs, k=k)
    row0 = actual[0].astype(np.float32)
    assert (row0 != 0).all() and np.isfinite(row0).all()
