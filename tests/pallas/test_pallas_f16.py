"""f16 on a TPU (docs/pallas.md, "f16 on a TPU").

Mosaic has no f16 vectors on the TPUs gemmgen targets: a v5e refused every
f16 block ("Invalid vector type for load"; f16 stores fail to legalize
`tpu.pack_subelements`). The generated function widens f16 arrays to f32 in
XLA and casts an f16 result back, so no f16 value reaches the kernel: the
Mosaic module of every kind (dense, grouped with bias and existing_out,
masked, tgmm, quantize) has no f16 type, and each still matches the
reference in interpret mode, at the edges (m = 1, empty groups, a ragged
K tile, group_offset with existing_out).
"""

from __future__ import annotations

import numpy as np
import pytest
from pallas_helpers import build, check, kernel_block, mosaic_text, random_inputs, spec_text

KERNELS = {
    "dense_f16": ("op dense", "lhs f16 [m, k]", "rhs f16 [n, k]", "out f16",
                  "tile m=32 n=128 k=128"),
    "gmm_f16": ("op grouped", "lhs f16 [m, k]", "rhs bf16 [g, k, n]", "out f16",
                "bias f16 [g, 1, n]", "epilogue silu", "tile m=32 n=128 k=128"),
    "masked_f16": ("op grouped", "lhs f16 [g, m, k]", "rhs f16 [g, n, k]", "out f32",
                   "tile m=32 n=128 k=128"),
    "tgmm_f16": ("op tgmm", "lhs f16 [m, k]", "rhs f16 [m, n]", "out f16",
                 "tile m=32 n=128 k=128"),
    "quantize_f16": ("op quantize", "lhs f16 [m, k]", "out e4m3",
                     "out_scale per_token_group k=128"),
}
M, N, K = 70, 256, 200  # a ragged m tile and a ragged K tile


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    blocks = [kernel_block(name, *fields) for name, fields in KERNELS.items()]
    return build(spec_text(*blocks), tmp_path_factory.mktemp("f16"))


def _inputs(kernel, *, m=M, seed=0, **kw):
    extra = {"num_groups": 4} if kernel.grouped and not kernel.masked else {}
    return random_inputs(kernel, m=m, n=N, k=K, seed=seed, **extra, **kw)


@pytest.mark.parametrize("name", list(KERNELS))
def test_no_f16_reaches_mosaic(gen, name):
    kernel = gen.kernel(name)
    text = mosaic_text(gen.fn(name), _inputs(kernel))
    assert "tpu.matmul" in text or name == "quantize_f16"
    assert "f16" not in text.replace("bf16", ""), name


@pytest.mark.parametrize("name,kw", [
    ("dense_f16", {}),
    ("dense_f16", {"m": 1}),
    ("gmm_f16", {"group_sizes": [30, 0, 40, 0]}),
    ("gmm_f16", {"group_sizes": [30, 0, 40, 0], "group_offset": 1, "with_existing_out": True}),
    ("masked_f16", {}),
    ("tgmm_f16", {"group_sizes": [0, 50, 20, 0]}),
    ("quantize_f16", {}),
])
def test_f16_matches_reference(gen, name, kw):
    kernel = gen.kernel(name)
    inputs = _inputs(kernel, seed=len(kw), **kw)
    out = check(kernel, gen.fn(name), inputs, k=K)
    if name in ("dense_f16", "gmm_f16", "tgmm_f16"):
        assert np.asarray(out).dtype == np.float16
