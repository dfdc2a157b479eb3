"""Infinities, NaNs and overflow in Pallas kernels, against the reference.

Inf and NaN inputs propagate by IEEE rules through products and sums, as
the float64 reference computes them: an infinity in lhs[i, kk] makes row i
infinite (or NaN where it meets another infinity or a NaN), and nothing
else. Masking (the padding of partial tiles, rows of other groups) must be
a selection, not a multiplication by 0, or inf * 0 = NaN would leak into
outputs that do not depend on the value. An output that overflows the out
dtype must be the same infinity; only where the terms' magnitudes sum past
the f32 range does `compare` accept any infinity or NaN.

Tiles are 16 x 128 x 128 with m = 50, n = 200, k = 200, so values are
planted in full and partial tiles alike; TPU interpret mode also fills the
padding of edge blocks with NaN. Besides `compare`, `_check` asserts that
every non-finite reference value comes out exactly (same infinity, NaN),
and every finite one finite.
"""

from __future__ import annotations

import numpy as np
import pytest

from gemmgen import reference as ref
from gemmgen.numerics import saturating_cast, storage_to_float64
from pallas_helpers import build, kernel_block, random_inputs, run, spec_text

TILE = "tile m=16 n=128 k=128"
TILE8 = "tile m=32 n=128 k=128"  # 8-bit lhs: 32 rows are one sublane tile
KERNELS = {
    "dense": ("op dense", "lhs bf16 [m, k]", "rhs bf16 [n, k]", "out f32", TILE),
    "dense_f16_silu": ("op dense", "lhs bf16 [m, k]", "rhs bf16 [k, n]", "out f16",
                       "epilogue silu", TILE),
    "dense_e8m0_block": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16",
                         "lhs_scale per_token_group k=128 f32",
                         "rhs_scale block n=128 k=128 e8m0", TILE8),
    "gmm": ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, n, k]", "out f32", TILE),
    "gmm_e5m2": ("op grouped", "lhs e5m2 [m, k]", "rhs e4m3 [g, k, n]", "out bf16",
                 "lhs_scale per_token f32", "rhs_scale per_channel f32", TILE8),
    "tgmm": ("op tgmm", "lhs bf16 [m, k]", "rhs bf16 [m, n]", "out f32", TILE),
}
SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])
M, N, K = 50, 200, 200
INF, NAN = np.inf, np.nan


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_nonfinite"))


def _plant(array: np.ndarray, cells: dict) -> np.ndarray:
    """A copy of array with the given values at the given indices."""
    out = array.copy()
    for index, value in cells.items():
        out[index] = value
    return out


def _check(generated, name: str, inputs: dict, *, k: int = K) -> np.ndarray:
    """compare() with the reference, then exactly: a NaN wherever the
    reference is NaN, the same infinity wherever it overflows the out
    dtype (or is infinite), a finite value everywhere else."""
    kernel = generated.kernel(name)
    actual = run(generated.fn(name), inputs)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, inf * 0 in float64
        expected = ref.reference(kernel, **inputs)
        result = ref.compare(actual, expected, kernel, k=k, inputs=inputs)
        want = storage_to_float64(saturating_cast(expected, kernel.out), kernel.out)
    assert result.passed, f"{name}: {result.detail}"
    got = storage_to_float64(actual, kernel.out)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    infinite = np.isinf(want)
    np.testing.assert_array_equal(got[infinite], want[infinite])
    assert np.isfinite(got[np.isfinite(want)]).all()
    return got


def test_dense_inf_nan_in_full_and_partial_tiles(generated):
    """An inf, a -inf (last, partial K tile) and a NaN (partial m tile) in
    lhs; an inf (partial n and k tiles) and a NaN in rhs."""
    name = "dense"
    inputs = random_inputs(generated.kernel(name), m=M, n=N, k=K, seed=1)
    inputs["lhs"] = _plant(inputs["lhs"], {(3, 7): INF, (10, 150): -INF, (49, 5): NAN})
    inputs["rhs"] = _plant(inputs["rhs"], {(199, 199): INF, (60, 20): NAN})  # [n, k]
    got = _check(generated, name, inputs)
    assert np.isinf(got[3]).sum() > N // 2 and np.isnan(got[49]).all()
    assert np.isfinite(got[:3, :60]).all()


def test_dense_f16_overflow_and_silu(generated):
    """f16 output: rows scaled past 65504 overflow to the same infinity
    (silu(+big) = +inf, silu(-big) = -0); silu(-inf) is NaN, as in the
    reference."""
    name = "dense_f16_silu"
    inputs = random_inputs(generated.kernel(name), m=M, n=N, k=K, seed=2)
    lhs = inputs["lhs"].astype(np.float32)
    lhs[[4, 20, 33]] *= 3.0e4
    inputs["lhs"] = _plant(lhs.astype(inputs["lhs"].dtype), {(40, 100): -INF, (41, 190): INF})
    got = _check(generated, name, inputs)
    assert np.isposinf(got[[4, 20, 33]]).any()
    assert np.isnan(got[40]).any() and np.isposinf(got[41]).any()


@pytest.mark.parametrize("case", ["2^127_and_2^100", "2^127_everywhere"])
def test_overflowing_e8m0_scales(generated, case):
    """rhs block scales 2**127 (byte 254) and 2**100 (byte 227): outputs past
    bf16's range are the same infinity; where the terms sum past f32's
    range, per-K-block partials of opposite signs may give inf - inf = NaN
    (compare accepts either there). A row with an infinite f32 lhs scale in
    one K block is infinite too."""
    name = "dense_e8m0_block"
    n, k = 256, 256
    inputs = random_inputs(generated.kernel(name), m=M, n=n, k=k, seed=3)
    if case == "2^127_and_2^100":
        scale = np.array([[254, 127], [227, 227]], np.uint8)
    else:
        scale = np.full((2, 2), 254, np.uint8)
    inputs["rhs_scale"] = scale
    inputs["lhs_scale"] = _plant(inputs["lhs_scale"], {(5, 1): INF})
    kernel = generated.kernel(name)
    actual = run(generated.fn(name), inputs)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = ref.reference(kernel, **inputs)
        result = ref.compare(actual, expected, kernel, k=k, inputs=inputs)
    assert result.passed, f"{name}: {result.detail}"
    got = actual.astype(np.float32)
    if case == "2^127_and_2^100":
        # columns 128..255: about 2**110, finite in bf16 (and within tolerance);
        # columns 0..127: K block 0 times 2**127 overflows, unless its partial
        # product happens to be tiny.
        others = np.delete(np.arange(M), 5)
        assert np.isfinite(got[others][:, 128:]).all()
        assert np.isinf(got[others][:, :128]).mean() > 0.9
    assert not np.isfinite(got[5]).any()


def _gmm_inputs(generated, name: str, *, existing: str | None, seed: int) -> dict:
    """Groups [8, 10, 0, 20] (38 rows of 50), this shard owns groups 1 and 2
    (rows 8..17); inf and NaN in rows of group 0 and 3 that share m tiles
    with owned rows, in a row past sum(group_sizes) in the partial m tile,
    in owned rows (one in the partial K tile), and in rhs."""
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=np.array([8, 10, 0, 20], np.int32),
                           group_offset=1, g_local=2, with_existing_out=existing is not None,
                           seed=seed)
    inputs["lhs"] = _plant(inputs["lhs"], {
        (7, 3): INF, (7, 4): NAN,        # group 0, m tile 0 (shared with rows 8..15)
        (18, 150): -INF, (19, 0): NAN,   # group 3, m tile 1 (shared with rows 16, 17)
        (49, 199): NAN,                  # past the groups, partial m and k tiles
        (9, 3): INF, (12, 150): NAN,     # owned rows
    })
    rhs = inputs["rhs"]
    if rhs.ndim == 3 and name == "gmm":  # [g, n, k]
        inputs["rhs"] = _plant(rhs, {(0, 190, 10): -INF, (1, 20, 199): NAN})
    if existing == "nan":  # rows that are copied must be copied, not computed
        inputs["existing_out"] = np.full_like(inputs["existing_out"], np.nan)
    return inputs


@pytest.mark.parametrize("existing", [None, "finite", "nan"])
def test_grouped_rows_of_other_groups(generated, existing):
    """Rows of other groups (and past sum(group_sizes)) hold inf and NaN
    that must not reach this shard's rows, which share m tiles with them;
    those rows are zero or existing_out's, exactly."""
    name = "gmm"
    inputs = _gmm_inputs(generated, name, existing=existing, seed=4)
    got = _check(generated, name, inputs)
    assert np.isfinite(got[[8, 10, 11, 13, 14, 15, 16, 17]][:, :20]).all()
    assert np.isinf(got[9]).sum() > N // 2 and np.isnan(got[12]).all()
    if existing is None:
        assert (got[:8] == 0).all() and (got[18:] == 0).all()


def test_grouped_e5m2_inf_and_zero_scale(generated):
    """e5m2 has infinities: an inf in lhs times a per-token scale of 0 is
    NaN (inf * 0), as in the reference; an infinite per-channel scale makes
    its column infinite in the owned rows only."""
    name = "gmm_e5m2"
    inputs = _gmm_inputs(generated, name, existing="finite", seed=5)
    inputs["lhs_scale"] = _plant(inputs["lhs_scale"], {13: 0.0})
    inputs["lhs"] = _plant(inputs["lhs"], {(13, 40): INF})
    inputs["rhs_scale"] = _plant(inputs["rhs_scale"], {(0, 77): INF})
    got = _check(generated, name, inputs)
    assert np.isnan(got[13]).all()


@pytest.mark.parametrize("existing", [None, "finite", "inf"])
def test_tgmm_inf_nan(generated, existing):
    """tgmm: an inf in an lhs row of group 0 makes that group's row of k
    infinite; a NaN in an rhs row of group 2 (partial n tile) its column;
    inf and NaN in rows past sum(group_sizes) (the partial m tile) reach
    nothing. existing_out is added: an infinity there stays."""
    name = "tgmm"
    kernel = generated.kernel(name)
    sizes = np.array([10, 0, 25, 5], np.int32)  # 40 of 50 rows
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=sizes,
                           with_existing_out=existing is not None, seed=6)
    inputs["lhs"] = _plant(inputs["lhs"], {(3, 7): INF, (45, 1): INF, (48, 190): NAN})
    inputs["rhs"] = _plant(inputs["rhs"], {(30, 150): NAN, (49, 2): -INF})
    if existing == "inf":
        inputs["existing_out"] = _plant(inputs["existing_out"], {(3, 0, 0): -INF})
    got = _check(generated, name, inputs, k=M)
    assert np.isinf(got[0, 7]).sum() > N // 2
    assert np.isnan(got[2, :, 150]).all()
    assert np.isfinite(got[3]).all() or existing == "inf"
    # Without existing_out, the empty group 1 is exactly zero.
    if existing is None:
        assert (got[1] == 0).all()


def test_tgmm_sharded_without_existing_out(generated):
    """group_offset = 1 without existing_out: g = 3 local groups; the inf in
    group 0's rows is not this shard's."""
    name = "tgmm"
    kernel = generated.kernel(name)
    sizes = np.array([10, 0, 25, 5], np.int32)
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=sizes, group_offset=1, seed=7)
    inputs["lhs"] = _plant(inputs["lhs"], {(3, 7): INF, (12, 9): NAN})
    got = _check(generated, name, inputs, k=M)
    assert got.shape == (3, K, N)
    assert np.isnan(got[1, 9]).all() and np.isfinite(np.delete(got[1], 9, axis=0)).all()
