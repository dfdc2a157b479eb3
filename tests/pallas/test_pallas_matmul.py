"""Dense and grouped matmuls from the Pallas backend, run in TPU interpret
mode against the NumPy reference and lowered for TPU.

Every variant (operand dtype x B layout x output dtype x op) runs on a shape
with partial tiles in m, n and k; the grouped kernels also get Hypothesis-
drawn group sizes (zero-sized groups included), sharded groups with and
without existing_out, and a tile LUT.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pallas_helpers import build, check, kernel_block, lower_for_tpu, random_inputs, run, spec_text

DTYPES = ("bf16", "f32")
LAYOUTS = ("kn", "nk")
OUTS = ("f32", "bf16")


def _rhs(op: str, dtype: str, layout: str) -> str:
    dims = {"kn": "k, n", "nk": "n, k"}[layout]
    return f"rhs {dtype} [{'g, ' if op == 'grouped' else ''}{dims}]"


def _name(op: str, dtype: str, layout: str, out: str) -> str:
    return f"{op}_{dtype}_{layout}_{out}"


VARIANTS = [(op, dt, lay, out) for op in ("dense", "grouped")
            for dt, lay, out in itertools.product(DTYPES, LAYOUTS, OUTS)]

SPEC = spec_text(*[
    kernel_block(_name(*v), f"op {v[0]}", f"lhs {v[1]} [m, k]", _rhs(v[0], v[1], v[2]),
                 f"out {v[3]}", "tile m=128 n=128 k=128")
    for v in VARIANTS
], kernel_block(
    "gmm_lut", "op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, n, k]", "out f32",
    "tile m=128 n=256 k=256", "tile_rule m<=64 -> m=64 n=128 k=128",
    "tile_rule k<=128 -> m=128 n=128 k=128"),
   kernel_block(
    "dense_lut", "op dense", "lhs bf16 [m, k]", "rhs bf16 [k, n]", "out bf16",
    "tile m=256 n=256 k=256", "tile_rule m<16 -> m=16 n=128 k=256", "stages 1"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_matmul"))


# Partial tiles everywhere: m, n, k are not multiples of 128.
M, N, K = 300, 200, 320


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: _name(*v))
def test_matches_reference_with_partial_tiles(generated, variant):
    gen = generated
    name = _name(*variant)
    kernel = gen.kernel(name)
    extra = {"num_groups": 5} if kernel.grouped else {}
    inputs = random_inputs(kernel, m=M, n=N, k=K, seed=1, **extra)
    check(kernel, gen.fn(name), inputs, k=K)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: _name(*v))
@pytest.mark.parametrize("m,n,k", [(M, N, K), (5, 128, 64), (256, 384, 512)])
def test_lowers_for_tpu(generated, variant, m, n, k):
    gen = generated
    name = _name(*variant)
    kernel = gen.kernel(name)
    if kernel.grouped:
        inputs = random_inputs(kernel, m=m, n=n, k=k, g_local=3, group_offset=1,
                               num_groups=6, with_existing_out=True)
        lower_for_tpu(gen.fn(name), inputs)
        del inputs["group_offset"], inputs["existing_out"]
    else:
        inputs = random_inputs(kernel, m=m, n=n, k=k)
    lower_for_tpu(gen.fn(name), inputs)


def _trim(sizes: list[int], m: int) -> np.ndarray:
    """Cut sizes so that they sum to at most m (later groups shrink first)."""
    out, left = [], m
    for s in sizes:
        out.append(min(s, left))
        left -= out[-1]
    return np.asarray(out, np.int32)


@given(sizes=st.lists(st.integers(0, 160), min_size=6, max_size=6))
@example(sizes=[0, 0, 0, 0, 0, 0])
@example(sizes=[0, 300, 0, 0, 0, 0])
@example(sizes=[1, 1, 1, 127, 129, 41])
def test_group_sizes(generated, sizes):
    """Ragged groups at every alignment, empty ones included, sum <= m."""
    gen = generated
    kernel = gen.kernel("grouped_bf16_nk_f32")
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=_trim(sizes, M))
    check(kernel, gen.fn("grouped_bf16_nk_f32"), inputs, k=K)


@pytest.mark.parametrize("offset,g_local", [
    pytest.param(0, 2, marks=pytest.mark.slow), (2, 3), pytest.param(5, 1, marks=pytest.mark.slow)])
@pytest.mark.parametrize("existing", [False, True], ids=["zeros", "existing_out"])
def test_sharded_groups(generated, offset, g_local, existing):
    """This shard owns groups [offset, offset + g_local) of 6; the other rows
    are zero or keep existing_out."""
    gen = generated
    name = "grouped_bf16_kn_bf16"
    kernel = gen.kernel(name)
    sizes = np.array([40, 0, 77, 50, 1, 90], np.int32)  # sum 258 < m
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=sizes, g_local=g_local,
                           group_offset=offset, with_existing_out=existing, seed=offset)
    out = check(kernel, gen.fn(name), inputs, k=K)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    outside = np.ones(M, bool)
    outside[starts[offset]:starts[offset + g_local]] = False
    want = inputs["existing_out"][outside] if existing else 0
    np.testing.assert_array_equal(out[outside], want)


def test_all_groups_empty_keeps_existing_out(generated):
    gen = generated
    name = "grouped_f32_nk_f32"
    kernel = gen.kernel(name)
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=np.zeros(4, np.int32),
                           with_existing_out=True)
    out = run(gen.fn(name), inputs)
    np.testing.assert_array_equal(out, inputs["existing_out"])


@pytest.mark.parametrize("m,n,k", [(7, 200, 320), pytest.param(128, 128, 128, marks=pytest.mark.slow),
                                   pytest.param(300, 100, 96, marks=pytest.mark.slow)])
def test_small_and_exact_shapes(generated, m, n, k):
    """m, n or k smaller than the tile (the block becomes the whole dim), and
    shapes that are exact multiples of it."""
    gen = generated
    for name in ("dense_bf16_nk_f32", "grouped_f32_kn_f32"):
        kernel = gen.kernel(name)
        inputs = random_inputs(kernel, m=m, n=n, k=k, seed=m)
        check(kernel, gen.fn(name), inputs, k=k)


def test_tile_lut(generated):
    """The generated tile_for is the spec's LUT, first match wins; each
    arm of it computes the right result."""
    gen = generated
    module = gen.modules["gmm_lut"]
    kernel = gen.kernel("gmm_lut")
    for m, n, k in [(64, 512, 512), (65, 512, 128), (65, 512, 512), (1, 1, 1)]:
        t = kernel.tile_for(m, n, k)
        assert module.tile_for(m, n, k) == (t.m, t.n, t.k)
    for m, k in [(40, 384), (300, 128)]:
        inputs = random_inputs(kernel, m=m, n=N, k=k, seed=k)
        check(kernel, gen.fn("gmm_lut"), inputs, k=k)
    dense = gen.kernel("dense_lut")
    assert gen.modules["dense_lut"].tile_for(4, 512, 512) == (16, 128, 256)
    for m in (4, 300):
        inputs = random_inputs(dense, m=m, n=N, k=K)
        check(dense, gen.fn("dense_lut"), inputs, k=K)
        lower_for_tpu(gen.fn("dense_lut"), inputs)  # stages 1: pl.Buffered(1)


def test_m_zero(generated):
    gen = generated
    kernel = gen.kernel("grouped_bf16_nk_f32")
    inputs = random_inputs(kernel, m=0, n=N, k=K, group_sizes=np.zeros(3, np.int32))
    assert run(gen.fn("grouped_bf16_nk_f32"), inputs).shape == (0, N)
    dense = gen.kernel("dense_f32_kn_bf16")
    assert run(gen.fn("dense_f32_kn_bf16"), random_inputs(dense, m=0, n=N, k=K)).shape == (0, N)


@pytest.mark.parametrize("change,message", [
    (lambda a: a.update(lhs=a["lhs"].astype(np.float32)), "lhs must be bfloat16 [300, 320], got float32 [300, 320]"),
    (lambda a: a.update(lhs=a["lhs"][:, :-1]),
     "lhs has k = 319 but rhs has k = 320 (lhs [300, 319] is [m, k], rhs [4, 200, 320] is [g, n, k])"),
    (lambda a: a.update(group_sizes=a["group_sizes"].astype(np.float32)),
     "group_sizes must be a 1-d integer array, got float32 [4]"),
    (lambda a: a.update(group_sizes=a["group_sizes"][:2]), "group_sizes has 2 groups but rhs has g = 4"),
    (lambda a: a.update(group_offset=np.zeros(1, np.int32)), "group_offset must be an integer scalar, got int32 [1]"),
    (lambda a: a.update(existing_out=np.zeros((M, N), np.float16)),
     "existing_out must be float32 [300, 200], got float16 [300, 200]"),
])
def test_validation_errors(generated, change, message):
    gen = generated
    kernel = gen.kernel("grouped_bf16_nk_f32")
    inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=4)
    change(inputs)
    with pytest.raises(ValueError) as e:
        run(gen.fn("grouped_bf16_nk_f32"), inputs)
    assert message in str(e.value)


def test_two_cores_no_races(generated):
    """With the grid's parallel axis split over two simulated TensorCores
    (megacore, v7x) and JAX's race detector on, the grouped kernel still
    matches the reference and no two cores touch the same output block."""
    import jax.numpy as jnp
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpret_state
    from jax.experimental.pallas import tpu as pltpu

    from gemmgen import reference as ref

    gen = generated
    name = "grouped_bf16_kn_f32"
    kernel = gen.kernel(name)
    inputs = random_inputs(kernel, m=M, n=384, k=K, num_groups=5, seed=9)
    params = pltpu.InterpretParams(detect_races=True, num_cores_or_threads=2)
    try:
        out = gen.fn(name)(**{k: jnp.asarray(v) for k, v in inputs.items()}, interpret=params)
        out = np.asarray(out)
    except Exception:
        pltpu.reset_tpu_interpret_mode_state()
        raise
    assert interpret_state.races is not None and not interpret_state.races.races_found
    result = ref.compare(out, ref.reference(kernel, **inputs), kernel, k=K, inputs=inputs)
    assert result.passed, result.detail
