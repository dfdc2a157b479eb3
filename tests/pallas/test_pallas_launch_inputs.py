"""What the generated Pallas launchers accept: any integer group_sizes and
group_offset, array-likes for both, and shape errors that name the array
that is wrong.

group_sizes may hold any int32 values (or wider integers, clipped on the
way in): a negative size counts as 0 and no group runs past row m, however
the sizes add up (an int32 cumsum would wrap). The expected results come
from the NumPy reference run on the sizes those rules give, computed here
with Python integers, never from the code under test.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gemmgen import reference as ref
from pallas_helpers import INTERPRET, build, kernel_block, random_inputs, run, spec_text

KERNELS = {
    "gmm": ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, n, k]", "out f32"),
    "gmm_bias_relu": ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, k, n]", "out bf16",
                      "bias f32 [g, 1, n]", "epilogue relu"),
    "gmm_fp8": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16",
                "lhs_scale per_token f32", "rhs_scale per_channel f32"),
    "gmm_f32": ("op grouped", "lhs f32 [m, k]", "rhs f32 [g, k, n]", "out f32"),
    "tgmm": ("op tgmm", "lhs bf16 [m, k]", "rhs bf16 [m, n]", "out f32"),
    "dense_int8": ("op dense", "lhs int8 [m, k]", "rhs int8 [n, k]", "out bf16",
                   "lhs_scale per_token f32", "rhs_scale per_channel f32"),
    "dense_k128": ("op dense", "lhs bf16 [m, k]", "rhs bf16 [k, n]", "out f32", "dims k=128"),
    # Packed along k: the tile's k is twice the 128 lanes of its byte block.
    "gmm_w4": ("op grouped", "lhs bf16 [m, k]", "rhs int4 packed [g, n, k]", "out bf16",
               "rhs_scale kblock k=256 f32", "tile m=16 n=128 k=256"),
    "quant": ("op quantize", "lhs bf16 [m, k]", "out e4m3", "out_scale per_token_group k=128 f32"),
}
# 16-row tiles (32 for 8-bit lhs, one sublane tile): m = 50 spans four m
# tiles (two), the last one partial.
EIGHT_BIT = ("gmm_fp8", "dense_int8")
SPEC = spec_text(*[
    kernel_block(name, *fields,
                 *(() if name in ("quant", "gmm_w4") else
                   (f"tile m={32 if name in EIGHT_BIT else 16} n=128 k=128",)))
    for name, fields in KERNELS.items()])
M, N, K = 50, 128, 128
INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_launch_inputs"))


def clamped(sizes, m: int) -> np.ndarray:
    """The sizes the launcher promises to use: group j ends at row
    min(max(s_0, 0) + ... + max(s_j, 0), m), in exact integer arithmetic."""
    out, end = [], 0
    for s in sizes:
        new_end = min(end + max(int(s), 0), m)
        out.append(new_end - end)
        end = new_end
    return np.asarray(out, np.int32)


def expected_bounds(sizes, offset: int, g: int, m: int) -> tuple[list[int], list[int]]:
    """[start, end) of the g local groups: group offset + i, or (0, 0) when
    group_sizes has no such group."""
    ends = np.cumsum(clamped(sizes, m), dtype=np.int64).tolist()
    starts = [0] + ends[:-1]
    bounds = [(starts[j], ends[j]) if 0 <= j < len(sizes) else (0, 0)
              for j in (offset + i for i in range(g))]
    return [b[0] for b in bounds], [b[1] for b in bounds]


def shard_inputs(sizes, offset: int, g: int) -> tuple[np.ndarray, int]:
    """Clamped sizes and an offset the reference accepts, for a shard whose
    local groups may lie past either end of group_sizes: empty groups are
    added on the side where they are missing (they own no rows)."""
    sizes = clamped(sizes, M)
    before = max(0, -offset)
    after = max(0, offset + g - len(sizes))
    padded = np.concatenate([np.zeros(before, np.int32), sizes, np.zeros(after, np.int32)])
    return padded, offset + before


def poisoned(inputs: dict) -> dict:
    """existing_out all NaN: a row the kernel should compute but copies, or
    a row it should copy but computes, shows up."""
    out = dict(inputs)
    out["existing_out"] = np.full_like(inputs["existing_out"], np.nan)
    return out


# Sizes whose int32 cumsum overflows, wraps back into [0, m), or goes negative.
OVERFLOWING = {
    "four_2^30": [2**30] * 4,
    "int32_max_twice": [INT32_MAX, INT32_MAX, 3, 5],
    "wraps_to_zero": [5, 2**30, 2**30, 2**30, 2**30 - 5, 12],
    "mixed_signs": [-5, 17, INT32_MIN, INT32_MAX, 9],
    "negative_then_large": [30, -7, 30, INT32_MAX],
    "all_negative": [-1, INT32_MIN, -3],
    "one_group": [INT32_MAX],
}


@given(sizes=st.lists(st.integers(INT32_MIN, INT32_MAX), min_size=7, max_size=7),
       offset=st.integers(INT32_MIN, INT32_MAX))
@example(sizes=[2**30] * 7, offset=0)
@example(sizes=[INT32_MAX] * 7, offset=INT32_MAX)
@example(sizes=[INT32_MIN] * 7, offset=INT32_MIN)
@example(sizes=[1, 2, 3, 4, 5, 6, 7], offset=-2)
@example(sizes=[1, 2, 3, 4, 5, 6, 7], offset=5)
def test_group_bounds_saturate(generated, sizes, offset):
    """_group_bounds (the XLA code that feeds every block index) gives the
    promised rows for any int32 sizes and offset, and the work list stays
    within its static length."""
    module = generated.modules["gmm"]
    g = 3
    bounds = jax.jit(functools.partial(module._group_bounds, m=M, g=g))
    starts, ends = bounds(jnp.asarray(sizes, jnp.int32), jnp.asarray(offset, jnp.int32))
    want_starts, want_ends = expected_bounds(sizes, offset, g, M)
    assert np.asarray(starts).tolist() == want_starts
    assert np.asarray(ends).tolist() == want_ends
    (_, m_tiles, _, _), num_work = module._group_metadata(starts, ends, m=M, tm=16,
                                                          visit_empty=True)
    assert 0 <= int(num_work) <= len(m_tiles) == -(-M // 16) + g - 1
    assert ((np.asarray(m_tiles) >= 0) & (np.asarray(m_tiles) < -(-M // 16))).all()


@pytest.mark.parametrize("name", ["gmm", "gmm_bias_relu", "gmm_fp8"])
@pytest.mark.parametrize("sizes", list(OVERFLOWING.values()), ids=list(OVERFLOWING))
def test_overflowing_group_sizes(generated, name, sizes):
    kernel = generated.kernel(name)
    fn = generated.fn(name)
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=clamped(sizes, M),
                           with_existing_out=True, seed=len(sizes))
    expected_inputs = poisoned(inputs)
    got = run(fn, {**expected_inputs, "group_sizes": np.asarray(sizes, np.int32)})
    result = ref.compare(got, ref.reference(kernel, **expected_inputs), kernel, k=K,
                         inputs=expected_inputs)
    assert result.passed, result.detail
    # Without existing_out the rows no group owns are zero.
    del inputs["existing_out"]
    got = run(fn, {**inputs, "group_sizes": np.asarray(sizes, np.int32)})
    result = ref.compare(got, ref.reference(kernel, **inputs), kernel, k=K, inputs=inputs)
    assert result.passed, result.detail


@pytest.mark.parametrize("offset", [0, 1, 3, 4, -1, -2, INT32_MAX, INT32_MIN])
def test_overflowing_group_sizes_sharded(generated, offset):
    """A shard of g = 2 groups at group_offset, also past either end of
    group_sizes (those local groups are empty)."""
    name = "gmm_bias_relu"
    kernel = generated.kernel(name)
    sizes = [10, 2**30, 2**30, -7, 25]  # clamped: [10, 40, 0, 0, 0]
    g = 2
    run_sizes, run_offset = shard_inputs(sizes, offset, g) if abs(offset) < 10 else (None, None)
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=clamped(sizes, M), g_local=g,
                           group_offset=0, with_existing_out=True, seed=7)
    inputs = poisoned(inputs)
    got = run(generated.fn(name), {**inputs, "group_sizes": np.asarray(sizes, np.int32),
                                    "group_offset": np.asarray(offset, np.int32)})
    if run_sizes is None:  # every local group is empty: every row is existing_out's
        np.testing.assert_array_equal(got, inputs["existing_out"])
        return
    expected_inputs = {**inputs, "group_sizes": run_sizes,
                       "group_offset": np.asarray(run_offset, np.int32)}
    result = ref.compare(got, ref.reference(kernel, **expected_inputs), kernel, k=K,
                         inputs=expected_inputs)
    assert result.passed, result.detail


@pytest.mark.parametrize("sizes,offset,g", [
    (OVERFLOWING["four_2^30"], None, None),
    (OVERFLOWING["wraps_to_zero"], None, None),
    (OVERFLOWING["mixed_signs"], 1, 3),
    ([10, 2**30, 2**30, -7, 25], 4, 2),   # local group 1 is past the end
    ([10, 2**30, 2**30, -7, 25], -1, 2),  # local group 0 is before the start
    ([INT32_MAX] * 3, INT32_MAX, 2),
], ids=["four_2^30", "wraps_to_zero", "mixed_signs_sharded", "past_end", "before_start",
        "huge_offset"])
def test_tgmm_overflowing_group_sizes(generated, sizes, offset, g):
    """tgmm: every local group's [k, n] block is written; an empty one (no
    rows left, or no such group) is existing_out's block."""
    kernel = generated.kernel("tgmm")
    if offset is None:
        inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=clamped(sizes, M), seed=3)
        got = run(generated.fn("tgmm"), {**inputs, "group_sizes": np.asarray(sizes, np.int32)})
        result = ref.compare(got, ref.reference(kernel, **inputs), kernel, k=M, inputs=inputs)
        assert result.passed, result.detail
        return
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=clamped(sizes, M), g_local=g,
                           group_offset=0, with_existing_out=True, seed=4)
    got = run(generated.fn("tgmm"), {**inputs, "group_sizes": np.asarray(sizes, np.int32),
                                     "group_offset": np.asarray(offset, np.int32)})
    if abs(offset) > 10:
        np.testing.assert_array_equal(got, inputs["existing_out"])
        return
    run_sizes, run_offset = shard_inputs(sizes, offset, g)
    expected_inputs = {**inputs, "group_sizes": run_sizes,
                       "group_offset": np.asarray(run_offset, np.int32)}
    result = ref.compare(got, ref.reference(kernel, **expected_inputs), kernel, k=M,
                         inputs=expected_inputs)
    assert result.passed, result.detail


def test_vjp_overflowing_group_sizes(generated):
    """gmm_f32_vjp: the value and the gradients (whose backward pass runs
    the transposed grouped matmul and tgmm) with overflowing sizes, against
    float64 NumPy on the clamped sizes."""
    name = "gmm_f32"
    fn = getattr(generated.modules[name], f"{name}_vjp")
    kernel = generated.kernel(name)
    sizes = [12, INT32_MAX, INT32_MAX, -4]  # clamped: [12, 38, 0, 0]; rows all owned
    offset, g = 1, 2  # local groups 1 and 2: rows [12, 50); rows [0, 12) keep existing_out
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=clamped(sizes, M), g_local=g,
                           group_offset=offset, with_existing_out=True, seed=5)
    lhs, rhs, existing = (jnp.asarray(inputs[x]) for x in ("lhs", "rhs", "existing_out"))
    d_out = np.random.default_rng(6).standard_normal((M, N)).astype(np.float32)

    def f(lhs, rhs, existing):
        return fn(lhs, rhs, np.asarray(sizes, np.int32), offset, existing, interpret=INTERPRET)

    try:
        out, vjp = jax.vjp(f, lhs, rhs, existing)
        d_lhs, d_rhs, d_existing = (np.asarray(x, np.float64) for x in vjp(jnp.asarray(d_out)))
    except Exception:
        from jax.experimental.pallas import tpu as pltpu
        pltpu.reset_tpu_interpret_mode_state()
        raise
    a, b = inputs["lhs"].astype(np.float64), inputs["rhs"].astype(np.float64)
    e, d = inputs["existing_out"].astype(np.float64), d_out.astype(np.float64)
    want = e.copy()
    want_d_lhs, want_d_rhs = np.zeros_like(a), np.zeros_like(b)
    want_d_existing = d.copy()
    for i, (start, end) in enumerate([(12, 50), (50, 50)]):
        want[start:end] = a[start:end] @ b[i]
        want_d_lhs[start:end] = d[start:end] @ b[i].T
        want_d_rhs[i] = a[start:end].T @ d[start:end]
        want_d_existing[start:end] = 0
    for label, got, exp in [("out", out, want), ("d lhs", d_lhs, want_d_lhs),
                            ("d rhs", d_rhs, want_d_rhs), ("d existing_out", d_existing,
                                                           want_d_existing)]:
        got = np.asarray(got, np.float64)
        err = np.abs(got - exp).max()
        assert err <= 1e-5 * max(np.abs(exp).max(), 1.0), f"{label}: max error {err:.3g}"


@pytest.mark.parametrize("convert", [
    list, tuple, lambda s: np.asarray(s, np.int64), lambda s: np.asarray(s, np.uint8),
    lambda s: jnp.asarray(s, jnp.int16)], ids=["list", "tuple", "numpy_int64", "numpy_uint8",
                                                "jax_int16"])
def test_group_sizes_array_likes(generated, convert):
    kernel = generated.kernel("gmm")
    sizes = [7, 0, 30, 9]
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=np.asarray(sizes, np.int32),
                           seed=8)
    # Passed as is (run() converts only the dict's arrays).
    got = run(generated.fn("gmm"), {"lhs": inputs["lhs"], "rhs": inputs["rhs"]},
              group_sizes=convert(sizes))
    result = ref.compare(got, ref.reference(kernel, **inputs), kernel, k=K, inputs=inputs)
    assert result.passed, result.detail


def test_int64_values_past_int32_are_clipped_not_wrapped(generated):
    """NumPy int64 sizes and offsets beyond int32 (which jax.jit alone would
    wrap around) and Python ints: a size of 2**32 + 5 is past m, not 5."""
    kernel = generated.kernel("gmm")
    sizes = [3, 2**32 + 5, 4, -(2**40)]  # clamped: [3, 47, 0, 0]
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=clamped(sizes, M), g_local=3,
                           group_offset=0, seed=9)
    inputs = {**inputs, "group_offset": np.asarray(1, np.int32),
              "group_sizes": clamped(sizes, M)}
    expected = ref.reference(kernel, **inputs)
    fn = generated.fn("gmm")
    for group_sizes, group_offset in [(np.asarray(sizes, np.int64), 1),
                                      (list(sizes), np.int64(1)),
                                      (tuple(sizes), np.asarray(1, np.uint64))]:
        got = run(fn, {"lhs": inputs["lhs"], "rhs": inputs["rhs"]}, group_sizes=group_sizes,
                  group_offset=group_offset)
        result = ref.compare(got, expected, kernel, k=K, inputs=inputs)
        assert result.passed, result.detail
    # An offset of 2**40 is past the end: every local group is empty.
    got = run(fn, {"lhs": inputs["lhs"], "rhs": inputs["rhs"]}, group_sizes=sizes,
              group_offset=2**40)
    np.testing.assert_array_equal(got, np.zeros((M, N), np.float32))


def test_group_sizes_list_under_jit(generated):
    """A list passed through an enclosing jax.jit arrives as traced scalars;
    tgmm's group_sizes as a tuple."""
    kernel = generated.kernel("gmm")
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=np.asarray([20, 5, 25], np.int32),
                           seed=10)
    fn = generated.fn("gmm")
    jitted = jax.jit(lambda lhs, rhs, sizes: fn(lhs, rhs, sizes, interpret=INTERPRET))
    got = np.asarray(jitted(inputs["lhs"], inputs["rhs"], [20, 5, 25]))
    result = ref.compare(got, ref.reference(kernel, **inputs), kernel, k=K, inputs=inputs)
    assert result.passed, result.detail
    tg = generated.kernel("tgmm")
    tg_inputs = random_inputs(tg, m=M, n=N, k=K, group_sizes=np.asarray([20, 5, 25], np.int32),
                              seed=11)
    got = run(generated.fn("tgmm"), {"lhs": tg_inputs["lhs"], "rhs": tg_inputs["rhs"]},
              group_sizes=(20, 5, 25))
    result = ref.compare(got, ref.reference(tg, **tg_inputs), tg, k=M, inputs=tg_inputs)
    assert result.passed, result.detail


# ---------------------------------------------------------------------------
# Wrong arguments: a ValueError that names the array that is wrong. The
# checks run at trace time, so jax.eval_shape finds them without running
# a kernel.


def _errors(generated, name: str, inputs: dict) -> str:
    fn = functools.partial(generated.fn(name), interpret=INTERPRET)
    with pytest.raises(ValueError) as e:
        jax.eval_shape(fn, **inputs)
    return str(e.value)


def _grouped(generated, name="gmm", **kw):
    kernel = generated.kernel(name)
    return random_inputs(kernel, m=M, n=N, k=K, num_groups=3, with_existing_out=True, **kw)


def _bf16(shape):
    return np.ones(shape, jnp.bfloat16)


GMM_ERRORS = {
    "lhs_k": (lambda a: a.update(lhs=a["lhs"][:, :100]),
              "lhs has k = 100 but rhs has k = 128 (lhs [50, 100] is [m, k], "
              "rhs [3, 128, 128] is [g, n, k])"),
    "rhs_k": (lambda a: a.update(rhs=a["rhs"][:, :, :100]),
              "lhs has k = 128 but rhs has k = 100 (lhs [50, 128] is [m, k], "
              "rhs [3, 128, 100] is [g, n, k])"),
    "lhs_ndim": (lambda a: a.update(lhs=a["lhs"][None]), "lhs must be [m, k], got shape [1, 50, 128]"),
    "rhs_ndim": (lambda a: a.update(rhs=a["rhs"][0]), "rhs must be [g, n, k], got shape [128, 128]"),
    "lhs_dtype": (lambda a: a.update(lhs=a["lhs"].astype(np.float32)),
                  "lhs must be bfloat16 [50, 128], got float32 [50, 128]"),
    "existing_out_m": (lambda a: a.update(existing_out=a["existing_out"][:49]),
                       "existing_out must be float32 [50, 128], got float32 [49, 128]"),
    "existing_out_n": (lambda a: a.update(existing_out=a["existing_out"][:, :100]),
                       "existing_out must be float32 [50, 128], got float32 [50, 100]"),
    "group_sizes_short": (lambda a: a.update(group_sizes=a["group_sizes"][:2]),
                          "group_sizes has 2 groups but rhs has g = 3"),
    "group_sizes_2d": (lambda a: a.update(group_sizes=a["group_sizes"][None]),
                       "group_sizes must be a 1-d integer array, got int32 [1, 3]"),
    "group_sizes_float": (lambda a: a.update(group_sizes=a["group_sizes"].astype(np.float32)),
                          "group_sizes must be a 1-d integer array, got float32 [3]"),
    "group_offset_1d": (lambda a: a.update(group_offset=np.zeros(1, np.int32)),
                        "group_offset must be an integer scalar, got int32 [1]"),
    "group_offset_float": (lambda a: a.update(group_offset=np.float32(1)),
                           "group_offset must be an integer scalar, got float32 []"),
}


@pytest.mark.parametrize("case", list(GMM_ERRORS))
@pytest.mark.parametrize("vjp", [False, True], ids=["gmm", "gmm_vjp"])
def test_gmm_errors_name_the_wrong_array(generated, case, vjp):
    change, message = GMM_ERRORS[case]
    inputs = _grouped(generated)
    change(inputs)
    fn = generated.fn("gmm") if not vjp else generated.modules["gmm"].gmm_vjp
    with pytest.raises(ValueError) as e:
        jax.eval_shape(functools.partial(fn, interpret=INTERPRET), **inputs)
    assert message in str(e.value)


def test_group_sizes_host_values_rejected(generated):
    """Non-integer host values are refused before jax.jit sees them."""
    inputs = _grouped(generated)
    del inputs["existing_out"]
    for bad, got in [([1.5, 2.0, 3.0], "float64 [3]"), ([True, False, True], "bool [3]"),
                     ([[1, 2, 3]], "int64 [1, 3]")]:
        with pytest.raises(ValueError, match=re.escape(f"group_sizes must be a 1-d integer array, got {got}")):
            generated.fn("gmm")(inputs["lhs"], inputs["rhs"], bad, interpret=INTERPRET)
    with pytest.raises(ValueError, match=r"group_offset must be an integer scalar, got int64 \[2\]"):
        generated.fn("gmm")(inputs["lhs"], inputs["rhs"], [1, 2, 3], [0, 1], interpret=INTERPRET)


def test_grouped_scales_and_bias_errors(generated):
    inputs = _grouped(generated, "gmm_fp8")
    inputs["lhs_scale"] = inputs["lhs_scale"][:49]
    assert "lhs_scale must be float32 [50], got float32 [49]" in _errors(generated, "gmm_fp8", inputs)
    inputs = _grouped(generated, "gmm_fp8")
    inputs["rhs_scale"] = inputs["rhs_scale"][:2]
    assert "rhs_scale must be float32 [3, 128], got float32 [2, 128]" in _errors(
        generated, "gmm_fp8", inputs)
    inputs = _grouped(generated, "gmm_bias_relu")
    inputs["bias"] = inputs["bias"][:, :, :100]
    assert "bias must be float32 [3, 1, 128], got float32 [3, 1, 100]" in _errors(
        generated, "gmm_bias_relu", inputs)
    # rhs [g, k, n]: a k that disagrees is still reported on lhs.
    inputs = _grouped(generated, "gmm_bias_relu")
    inputs["lhs"] = inputs["lhs"][:, :64]
    assert ("lhs has k = 64 but rhs has k = 128 (lhs [50, 64] is [m, k], "
            "rhs [3, 128, 128] is [g, k, n])") in _errors(generated, "gmm_bias_relu", inputs)


def test_packed_rhs_errors(generated):
    """A packed rhs holds k/2 bytes per row: a k that disagrees is counted
    in elements, and the shapes say which array holds what."""
    inputs = random_inputs(generated.kernel("gmm_w4"), m=M, n=N, k=256, num_groups=2)
    inputs["lhs"] = inputs["lhs"][:, :128]
    assert ("lhs has k = 128 but rhs has k = 256 (lhs [50, 128] is [m, k], "
            "rhs [2, 128, 128] is [g, n, k/2])") in _errors(generated, "gmm_w4", inputs)


def test_m_past_max_rows(generated):
    """Rows are int32 indices: m above MAX_ROWS = 2**30 is refused (shapes
    only, nothing is allocated)."""
    module = generated.modules["gmm"]
    assert module.MAX_ROWS == 2**30
    big = 2**30 + 8
    args = dict(lhs=jax.ShapeDtypeStruct((big, K), jnp.bfloat16),
                rhs=jax.ShapeDtypeStruct((2, N, K), jnp.bfloat16),
                group_sizes=jax.ShapeDtypeStruct((2,), jnp.int32))
    message = f"lhs has m = {big} rows, more than MAX_ROWS = {2**30}"
    for fn in (module.gmm, module.gmm_vjp):
        with pytest.raises(ValueError, match=message):
            jax.eval_shape(functools.partial(fn, interpret=INTERPRET), **args)
    tgmm = generated.fn("tgmm")
    with pytest.raises(ValueError, match=message):
        jax.eval_shape(functools.partial(tgmm, interpret=INTERPRET),
                       lhs=jax.ShapeDtypeStruct((big, K), jnp.bfloat16),
                       rhs=jax.ShapeDtypeStruct((big, N), jnp.bfloat16),
                       group_sizes=jax.ShapeDtypeStruct((2,), jnp.int32))
    # 2**30 rows itself is accepted (abstract evaluation only).
    ok = dict(args, lhs=jax.ShapeDtypeStruct((2**30, K), jnp.bfloat16))
    assert jax.eval_shape(functools.partial(module.gmm, interpret=INTERPRET), **ok).shape == (2**30, N)


TGMM_ERRORS = {
    "rhs_m": (lambda a: a.update(rhs=a["rhs"][:49]),
              "rhs has m = 49 but lhs has m = 50: rhs holds one row per row of lhs "
              "(lhs [50, 128] is [m, k], rhs [49, 128] is [m, n])"),
    "lhs_m": (lambda a: a.update(lhs=a["lhs"][:49]), "rhs has m = 50 but lhs has m = 49"),
    "lhs_ndim": (lambda a: a.update(lhs=a["lhs"][0]), "lhs must be [m, k], got shape [128]"),
    "rhs_ndim": (lambda a: a.update(rhs=a["rhs"][None]), "rhs must be [m, n], got shape [1, 50, 128]"),
    "existing_out_k": (lambda a: a.update(existing_out=a["existing_out"][:, :100]),
                       "existing_out must be float32 [2, 128, 128], got float32 [2, 100, 128]"),
    "existing_out_ndim": (lambda a: a.update(existing_out=a["existing_out"][0]),
                          "existing_out must be float32 [g, k, n], got shape [128, 128]"),
    "group_sizes_float": (lambda a: a.update(group_sizes=a["group_sizes"].astype(np.float32)),
                          "group_sizes must be a 1-d integer array, got float32 [3]"),
    "group_offset_1d": (lambda a: a.update(group_offset=np.zeros(2, np.int32)),
                        "group_offset must be an integer scalar, got int32 [2]"),
}


@pytest.mark.parametrize("case", list(TGMM_ERRORS))
def test_tgmm_errors_name_the_wrong_array(generated, case):
    change, message = TGMM_ERRORS[case]
    kernel = generated.kernel("tgmm")
    inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=3, g_local=2, group_offset=1,
                           with_existing_out=True)
    change(inputs)
    assert message in _errors(generated, "tgmm", inputs)


DENSE_ERRORS = {
    "lhs_k": ("dense_int8", lambda a: a.update(lhs=a["lhs"][:, :100]),
              "lhs has k = 100 but rhs has k = 128 (lhs [50, 100] is [m, k], rhs [128, 128] is [n, k])"),
    "rhs_k": ("dense_int8", lambda a: a.update(rhs=a["rhs"][:, :100]),
              "lhs has k = 128 but rhs has k = 100"),
    "lhs_scale_m": ("dense_int8", lambda a: a.update(lhs_scale=a["lhs_scale"][:49]),
                    "lhs_scale must be float32 [50], got float32 [49]"),
    "rhs_scale_n": ("dense_int8", lambda a: a.update(rhs_scale=np.ones(256, np.float32)),
                    "rhs_scale must be float32 [128], got float32 [256]"),
    "static_k_rhs": ("dense_k128", lambda a: a.update(rhs=_bf16((256, N))),
                     "rhs has k = 256 but the spec fixes k = 128 (dims k=128)"),
    "static_k_lhs": ("dense_k128", lambda a: a.update(lhs=_bf16((M, 256))),
                     "lhs has k = 256 but the spec fixes k = 128 (dims k=128)"),
}


@pytest.mark.parametrize("case", list(DENSE_ERRORS))
def test_dense_errors_name_the_wrong_array(generated, case):
    name, change, message = DENSE_ERRORS[case]
    inputs = random_inputs(generated.kernel(name), m=M, n=N, k=K)
    change(inputs)
    assert message in _errors(generated, name, inputs)


def test_quantize_errors(generated):
    assert "lhs must be bfloat16 [m, k], got bfloat16 [128]" in _errors(
        generated, "quant", {"lhs": _bf16((128,))})
    assert "lhs must be bfloat16 [m, k], got float32 [4, 128]" in _errors(
        generated, "quant", {"lhs": np.ones((4, 128), np.float32)})
