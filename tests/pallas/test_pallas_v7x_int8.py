"""int8 on a TPU v7x (docs/pallas.md, "int8 on a TPU v7x").

Mosaic's matmul canonicalization for the v7x multiplies int8 operands as
bf16 and sums the products in f32, exact while every partial sum stays
within 2**24: a dot of at most INT_DOT_K = 1024 terms of |a * b| <= 2**14.
The kernels for a v7x split a longer K tile into dots of at most 1024
terms and add their int32 results; other generations keep one dot. The
Mosaic module shows the split (`tpu.matmul` contraction sizes); interpret
mode checks the sum against the reference, with extreme values whose sums
pass 2**24.
"""

from __future__ import annotations

import numpy as np
import pytest
from pallas_helpers import (
    build,
    check,
    kernel_block,
    matmul_shapes,
    matmul_types,
    mosaic_text,
    random_inputs,
    spec_text,
)

KERNELS = {
    # rhs [k, n]: the chunks are row slices; K tile 2560 = 1024 + 1024 + 512.
    "int8_kn": ("op dense", "lhs int8 [m, k]", "rhs int8 [k, n]", "acc int32", "out f32",
                "lhs_scale per_token f32", "tile m=128 n=128 k=2560"),
    # int4 weights packed along k: the even and odd halves (1280 each) split.
    "gmm_int8_int4": ("op grouped", "lhs int8 [m, k]", "rhs int4 packed [g, n, k]",
                      "acc int32", "out bf16", "rhs_scale per_channel f32",
                      "tile m=64 n=128 k=2560"),
}
BLOCKS = [kernel_block(name, *fields) for name, fields in KERNELS.items()]
M, N, K = 100, 256, 3000  # one whole K tile and a ragged one of 440


@pytest.fixture(scope="module")
def v7x(tmp_path_factory):
    return build(spec_text(*BLOCKS, tpu="v7x"), tmp_path_factory.mktemp("v7x_int8"))


@pytest.fixture(scope="module")
def v6e(tmp_path_factory):
    return build(spec_text(*BLOCKS, tpu="v6e"), tmp_path_factory.mktemp("v6e_int8"))


def _inputs(kernel, *, seed=0, **kw):
    extra = {"num_groups": 3} if kernel.grouped else {}
    return random_inputs(kernel, m=M, n=N, k=K, seed=seed, **extra, **kw)


@pytest.mark.parametrize("name", list(KERNELS))
def test_v7x_splits_long_int8_dots(v7x, v6e, name):
    kernel = v7x.kernel(name)
    inputs = _inputs(kernel)
    text = mosaic_text(v7x.fn(name), inputs)
    assert set(matmul_types(text)) == {("i8", "i8")}
    k_of = [lhs[-1] for lhs, _ in matmul_shapes(text)]
    assert max(k_of) <= 1024 and 1024 in k_of, k_of
    # The regular K step: 2560 terms (int4: two halves of 1280) in chunks.
    full = [1024, 1024, 512] if name == "int8_kn" else [1024, 256] * 2
    assert k_of[:len(full)] == full, k_of
    # A v6e multiplies int8 itself: one dot per K step (per half for int4).
    text = mosaic_text(v6e.fn(name), inputs)
    assert max(lhs[-1] for lhs, _ in matmul_shapes(text)) == (2560 if name == "int8_kn" else 1280)


@pytest.mark.parametrize("name", [pytest.param("int8_kn", marks=pytest.mark.slow),
                                  "gmm_int8_int4"])  # int8_kn: test_v7x_int8_sums_past_2_24
def test_v7x_int8_matches_reference(v7x, name):
    kernel = v7x.kernel(name)
    check(kernel, v7x.fn(name), _inputs(kernel, seed=len(name)), k=K)


def test_v7x_int8_sums_past_2_24(v7x):
    """-128 x -128 everywhere in some rows and columns: each output there is
    3000 * 2**14, past 2**24 (f32 sums of one 2560-term dot would round)."""
    kernel = v7x.kernel("int8_kn")
    inputs = _inputs(kernel, seed=7)
    inputs["lhs"][:8] = -128
    inputs["rhs"][:, :8] = -128
    inputs["rhs"][::7, 8:16] = 127
    actual = check(kernel, v7x.fn("int8_kn"), inputs, k=K)
    scale = inputs["lhs_scale"][:8, None]
    assert np.array_equal(actual[:8, :8], (K * 2.0**14 * scale * np.ones((1, 8))).astype(
        np.float32))
