"""tgmm in Pallas (ragged K, the weight gradient): per group lhsᵢᵀ · rhsᵢ ->
[g, k, n], zero for empty groups, existing_out added, group_offset sharding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pallas_helpers import build, check, kernel_block, lower_for_tpu, random_inputs, run, spec_text

KERNELS = {
    "tgmm_bf16": ("op tgmm", "lhs bf16 [m, k]", "rhs bf16 [m, n]", "out f32"),
    "tgmm_f32_alpha": ("op tgmm", "lhs f32 [m, k]", "rhs f32 [m, n]", "out bf16",
                       "epilogue alpha=0.5", "tile m=64 n=128 k=256"),
    "tgmm_f16": ("op tgmm", "lhs f16 [m, k]", "rhs bf16 [m, n]", "out f16", "stages 1"),
}
SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])
M, N, K = 300, 200, 320


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_tgmm"))


@pytest.mark.parametrize("name", list(KERNELS))
def test_matches_reference(generated, name):
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=5, seed=2)
    out = check(kernel, generated.fn(name), inputs, k=M)
    assert out.shape == (5, K, N)
    lower_for_tpu(generated.fn(name), inputs)


@pytest.mark.parametrize("name", list(KERNELS))
def test_sharded_adds_existing_out(generated, name):
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=6, group_offset=2, g_local=3,
                           with_existing_out=True, seed=5)
    check(kernel, generated.fn(name), inputs, k=M)
    lower_for_tpu(generated.fn(name), inputs)


def _trim(sizes: list[int], m: int) -> np.ndarray:
    out, left = [], m
    for s in sizes:
        out.append(min(s, left))
        left -= out[-1]
    return np.asarray(out, np.int32)


@given(sizes=st.lists(st.integers(0, 160), min_size=5, max_size=5))
@example(sizes=[0, 0, 0, 0, 0])
@example(sizes=[0, 0, 300, 0, 0])
@example(sizes=[1, 127, 1, 128, 1])
def test_group_sizes(generated, sizes):
    """Ragged groups at every alignment; an empty group's block is zero."""
    kernel = generated.kernel("tgmm_bf16")
    group_sizes = _trim(sizes, M)
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=group_sizes)
    out = check(kernel, generated.fn("tgmm_bf16"), inputs, k=M)
    assert (out[group_sizes == 0] == 0).all()


def test_group_offset_needs_existing_out(generated):
    kernel = generated.kernel("tgmm_bf16")
    inputs = random_inputs(kernel, m=16, n=128, k=128, num_groups=3, group_offset=1)
    with pytest.raises(ValueError, match="group_offset needs existing_out"):
        run(generated.fn("tgmm_bf16"), inputs)
