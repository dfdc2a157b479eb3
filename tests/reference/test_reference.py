"""The reference against independent formulations.

- `loop_reference`: plain Python loops over output elements, every operand
  element dequantized with its own scale looked up by index arithmetic
  (no K blocks, no NumPy matmul), bytes unpacked with bit operations.
- `jax.lax.ragged_dot` (float64) for grouped matmuls with Hypothesis group
  sizes, zero-sized groups, sum < m, group_offset and existing_out.
- Quantization checked by its defining properties (scale >= amax / fp8_max,
  minimal power of two, round-trip error) and exact rational arithmetic.
- `compare` passes f32 emulations of a kernel and fails planted errors.
"""

import dataclasses
import math
from fractions import Fraction

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemmgen import ir
from gemmgen import reference as R
from gemmgen.ir import (
    Activation, Bias, BiasMode, DType, Epilogue, Kernel, Layout, Op, Operand, Scale, ScaleMode,
)
from gemmgen.numerics import float64_to_storage

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def kernel(op=Op.DENSE, lhs=DType.BF16, rhs=DType.BF16, *, layout=Layout.KN, out=DType.F32,
           lhs_scale=ir.NO_SCALE, rhs_scale=ir.NO_SCALE, bias=BiasMode.NONE,
           bias_dtype=DType.F32, act=Activation.NONE, alpha=None, out_scale=ir.NO_SCALE):
    acc = DType.INT32 if lhs is DType.INT8 and rhs is DType.INT8 else DType.F32
    return Kernel(
        name="k", op=op, lhs=Operand(lhs, packed=lhs.is_sub_byte),
        rhs=None if rhs is None else Operand(rhs, packed=rhs.is_sub_byte, layout=layout),
        out=out, acc=acc, lhs_scale=lhs_scale, rhs_scale=rhs_scale, out_scale=out_scale,
        bias=Bias(bias, bias_dtype), epilogue=Epilogue(act, alpha))


# ---------------------------------------------------------------------------
# An independent decoder and a loop reference


def decode(array, dtype: DType) -> np.ndarray:
    """Storage -> float64 with bit operations, written from the format specs."""
    array = np.asarray(array)
    if dtype.is_sub_byte:
        assert array.dtype == np.uint8
        out = np.empty(array.shape[:-1] + (2 * array.shape[-1],))
        for idx in np.ndindex(array.shape):
            byte = int(array[idx])
            for half, code in enumerate((byte & 0xF, byte >> 4)):
                if dtype is DType.INT4:
                    value = code - 16 if code & 8 else code
                else:
                    value = (-1.0 if code & 8 else 1.0) * E2M1[code & 7]
                out[idx[:-1] + (2 * idx[-1] + half,)] = value
        return out
    if dtype is DType.E8M0:
        assert array.dtype == np.uint8
        return np.vectorize(lambda e: 2.0 ** (int(e) - 127))(array).astype(np.float64)
    assert array.dtype == np.dtype(getattr(ml_dtypes, dtype.numpy_name, None) or dtype.numpy_name)
    return array.astype(np.float64)


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def activate(act, row):
    match act:
        case Activation.NONE:
            return row
        case Activation.RELU:
            return [max(x, 0.0) for x in row]
        case Activation.SILU:
            return [x * sigmoid(x) for x in row]
        case Activation.GELU:
            c = math.sqrt(2 / math.pi)
            return [0.5 * x * (1 + math.tanh(c * (x + 0.044715 * x**3))) for x in row]
        case Activation.SILU_MUL:
            h = len(row) // 2
            return [row[j] * sigmoid(row[j]) * row[j + h] for j in range(h)]


def lhs_factor(kern, s, i, kk):
    match kern.lhs_scale.mode:
        case ScaleMode.NONE:
            return 1.0
        case ScaleMode.TENSOR:
            return float(s)
        case ScaleMode.TOKEN:
            return s[i]
        case ScaleMode.TOKEN_GROUP:
            return s[i][kk // kern.lhs_scale.block_k]


def rhs_factor(kern, s, grp, kk, j):
    """The scale of B element (kk, j) of local group grp (None: dense)."""
    sc = kern.rhs_scale
    if sc.mode is ScaleMode.NONE:
        return 1.0
    if grp is not None and sc.mode is not ScaleMode.KBLOCK:
        s = s[grp]
    match sc.mode:
        case ScaleMode.TENSOR:
            return float(s)
        case ScaleMode.CHANNEL:
            return s[j]
        case ScaleMode.BLOCK:
            return s[j // sc.block_n][kk // sc.block_k]
        case ScaleMode.KBLOCK:
            return s[grp or 0][kk // sc.block_k][0][j]


def loop_reference(kern, lhs, rhs, group_sizes=None, lhs_scale=None, rhs_scale=None,
                   bias=None, group_offset=None, existing_out=None):
    a = decode(lhs, kern.lhs.dtype)
    b = decode(rhs, kern.rhs.dtype)
    ls = None if lhs_scale is None else decode(lhs_scale, kern.lhs_scale.dtype)
    rs = None if rhs_scale is None else decode(rhs_scale, kern.rhs_scale.dtype)
    bb = None if bias is None else decode(bias, kern.bias.dtype)
    ex = None if existing_out is None else decode(existing_out, kern.out)
    alpha = 1.0 if kern.epilogue.alpha is None else float(np.float32(kern.epilogue.alpha))
    m, k = a.shape
    off = 0 if group_offset is None else int(group_offset)

    def b_at(grp, kk, j):
        mat = b if grp is None else b[grp]
        return mat[kk][j] if kern.rhs.layout is Layout.KN else mat[j][kk]

    def group_of(row):
        start = 0
        for gi, size in enumerate(group_sizes):
            if start <= row < start + size:
                return gi
            start += size
        return None

    if kern.op is Op.TGMM:
        g = ex.shape[0] if ex is not None else len(group_sizes) - off
        n = b.shape[1]
        out = np.zeros((g, k, n)) if ex is None else ex.copy()
        for row in range(m):
            gi = group_of(row)
            if gi is None or not off <= gi < off + g:
                continue
            loc = gi - off
            for kk in range(k):
                av = a[row][kk] * lhs_factor(kern, ls, row, kk)
                for j in range(n):
                    sb = 1.0
                    if kern.rhs_scale.mode is ScaleMode.TENSOR:
                        sb = rs[loc]
                    elif kern.rhs_scale.mode is ScaleMode.CHANNEL:
                        sb = rs[loc][j]
                    out[loc][kk][j] += alpha * av * b[row][j] * sb
        return out

    n = b.shape[-1] if kern.rhs.layout is Layout.KN else b.shape[-2]
    n_out = n // kern.out_n_divisor
    out = np.zeros((m, n_out)) if ex is None else ex.copy()
    for row in range(m):
        grp = None
        if kern.op is Op.GROUPED:
            gi = group_of(row)
            if gi is None or not off <= gi < off + b.shape[0]:
                continue
            grp = gi - off
        pre = []
        for j in range(n):
            acc = 0.0
            for kk in range(k):
                acc += (a[row][kk] * lhs_factor(kern, ls, row, kk)
                        * b_at(grp, kk, j) * rhs_factor(kern, rs, grp, kk, j))
            value = alpha * acc
            if kern.bias.mode is BiasMode.N:
                value += bb[j]
            elif kern.bias.mode is BiasMode.GROUP:
                value += bb[grp][0][j]
            pre.append(value)
        out[row] = activate(kern.epilogue.activation, pre)
    return out


def magnitude_atol(kern, inputs):
    """An absolute slack for float64 summation-order differences."""
    mag = R._evaluate(kern, **inputs).magnitude
    return 1e-12 * (1.0 + float(np.max(mag, initial=0.0)))


# ---------------------------------------------------------------------------
# Cases: every op x scale mode x dtype family, small and with partial blocks

TG8 = Scale(ScaleMode.TOKEN_GROUP, block_k=8)
BLK = Scale(ScaleMode.BLOCK, block_n=5, block_k=8)  # n = 12: a partial N block

CASES = {
    "dense_bf16": kernel(),
    "dense_f32_nk_bias_relu_alpha": kernel(lhs=DType.F32, rhs=DType.F32, layout=Layout.NK,
                                           bias=BiasMode.N, act=Activation.RELU, alpha=0.3),
    "dense_f16_tensor_scales_bf16": kernel(
        lhs=DType.F16, rhs=DType.F16, out=DType.F16,
        lhs_scale=Scale(ScaleMode.TENSOR, DType.BF16), rhs_scale=Scale(ScaleMode.TENSOR, DType.BF16)),
    "dense_w8a8_block_f32": kernel(lhs=DType.E4M3, rhs=DType.E4M3, layout=Layout.NK,
                                   out=DType.BF16, lhs_scale=TG8, rhs_scale=BLK),
    "dense_w8a8_block_e8m0": kernel(
        lhs=DType.E4M3, rhs=DType.E4M3, layout=Layout.NK, out=DType.BF16,
        lhs_scale=Scale(ScaleMode.TOKEN_GROUP, DType.E8M0, block_k=8),
        rhs_scale=Scale(ScaleMode.BLOCK, DType.E8M0, block_n=4, block_k=8)),
    "dense_mixed_block_edges": kernel(  # lhs K groups of 6, rhs K blocks of 8: union
        lhs=DType.E4M3, rhs=DType.E5M2, lhs_scale=Scale(ScaleMode.TOKEN_GROUP, block_k=6),
        rhs_scale=Scale(ScaleMode.KBLOCK, block_k=8)),
    "dense_fp8_tensor": kernel(lhs=DType.E4M3, rhs=DType.E5M2, out=DType.BF16,
                               lhs_scale=Scale(ScaleMode.TENSOR),
                               rhs_scale=Scale(ScaleMode.TENSOR)),
    "dense_int8_token_channel_silu": kernel(
        lhs=DType.INT8, rhs=DType.INT8, out=DType.F16, act=Activation.SILU,
        lhs_scale=Scale(ScaleMode.TOKEN), rhs_scale=Scale(ScaleMode.CHANNEL)),
    "dense_int8_unscaled": kernel(lhs=DType.INT8, rhs=DType.INT8, layout=Layout.NK),
    "dense_int8_int4_kn_gelu": kernel(lhs=DType.INT8, rhs=DType.INT4, act=Activation.GELU,
                                      rhs_scale=Scale(ScaleMode.CHANNEL, DType.BF16)),
    "dense_bf16_fp4_kblock_silu_mul": kernel(
        rhs=DType.FP4, layout=Layout.NK, act=Activation.SILU_MUL, bias=BiasMode.N,
        bias_dtype=DType.BF16, rhs_scale=Scale(ScaleMode.KBLOCK, DType.E8M0, block_k=8)),
    "dense_f16_int4_block_bf16": kernel(
        lhs=DType.F16, rhs=DType.INT4, layout=Layout.NK, out=DType.BF16,
        rhs_scale=Scale(ScaleMode.BLOCK, DType.BF16, block_n=4, block_k=8)),
    "dense_fp4_fp4": kernel(lhs=DType.FP4, rhs=DType.FP4, layout=Layout.NK,
                            lhs_scale=Scale(ScaleMode.TOKEN_GROUP, DType.E8M0, block_k=8),
                            rhs_scale=Scale(ScaleMode.BLOCK, DType.E8M0, block_n=4, block_k=8)),
    "grouped_bf16_kblock_group_bias": kernel(
        Op.GROUPED, layout=Layout.NK, out=DType.BF16, bias=BiasMode.GROUP,
        rhs_scale=Scale(ScaleMode.KBLOCK, block_k=8)),
    "grouped_w8a8_silu_mul": kernel(Op.GROUPED, DType.E4M3, DType.E4M3, out=DType.BF16,
                                    lhs_scale=TG8, rhs_scale=BLK, act=Activation.SILU_MUL,
                                    bias=BiasMode.N, alpha=1.5),
    "grouped_int8_tensor_relu": kernel(Op.GROUPED, DType.INT8, DType.INT8, layout=Layout.NK,
                                       lhs_scale=Scale(ScaleMode.TENSOR),
                                       rhs_scale=Scale(ScaleMode.TENSOR), act=Activation.RELU),
    "grouped_fp4_channel_e8m0": kernel(Op.GROUPED, DType.FP4, DType.FP4, layout=Layout.NK,
                                       lhs_scale=Scale(ScaleMode.TOKEN, DType.E8M0),
                                       rhs_scale=Scale(ScaleMode.CHANNEL, DType.E8M0)),
    "tgmm_bf16_alpha": kernel(Op.TGMM, alpha=-0.75),
    "tgmm_fp8_token_group_channel": kernel(Op.TGMM, DType.E4M3, DType.E5M2, out=DType.BF16,
                                           lhs_scale=TG8,
                                           rhs_scale=Scale(ScaleMode.CHANNEL, DType.E8M0)),
    "tgmm_int8_token_tensor": kernel(Op.TGMM, DType.INT8, DType.INT8,
                                     lhs_scale=Scale(ScaleMode.TOKEN),
                                     rhs_scale=Scale(ScaleMode.TENSOR)),
}


@pytest.mark.parametrize("name, sharded", [(name, False) for name in CASES] + [
    pytest.param(name, True, id=f"{name}-sharded") for name in CASES if CASES[name].grouped])
def test_matches_loop_reference(name, sharded):
    kern = CASES[name]
    rng = np.random.default_rng(abs(hash((name, sharded))) % 2**32)
    m, n, k = 11, 12, 20  # k: 2.5 blocks of 8; n: 2.4 blocks of 5
    extra = {}
    if kern.grouped:
        extra = dict(group_sizes=np.array([3, 0, 4, 2, 0], np.int32))  # sum 9 < m
        if sharded:
            extra.update(group_offset=1, g_local=3, with_existing_out=True)
    inputs = R.random_inputs(kern, m=m, n=n, k=k, rng=rng, **extra)
    got = R.reference(kern, **inputs)
    want = loop_reference(kern, **inputs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=magnitude_atol(kern, inputs))
    if kern.op is Op.GROUPED:
        # rows of no local group: 0, or existing_out's rows untouched
        rows = [r for r in range(m) if not (3 <= r < 9 if sharded else r < 9)]
        fill = (decode(inputs["existing_out"], kern.out)[rows] if sharded
                else np.zeros((len(rows), want.shape[1])))
        np.testing.assert_array_equal(got[rows], fill)
    out = R.reference_output(kern, **inputs)
    assert out.dtype == np.dtype(kern.out.numpy_name) if kern.out is not DType.BF16 \
        else out.dtype == ml_dtypes.bfloat16
    assert out.shape == got.shape
    assert R.compare(out, got, kern, k=k, inputs=inputs).passed


def test_tgmm_existing_out_is_accumulated_and_empty_groups_kept():
    kern = kernel(Op.TGMM)
    rng = np.random.default_rng(5)
    inputs = R.random_inputs(kern, m=10, n=4, k=6, rng=rng,
                             group_sizes=np.array([2, 0, 5, 0], np.int32), group_offset=1,
                             g_local=3, with_existing_out=True)
    got = R.reference(kern, **inputs)
    ex = decode(inputs["existing_out"], DType.F32)
    a, d = decode(inputs["lhs"], DType.BF16), decode(inputs["rhs"], DType.BF16)
    np.testing.assert_array_equal(got[0], ex[0])  # group 1: empty
    np.testing.assert_allclose(got[1], ex[1] + a[2:7].T @ d[2:7], rtol=1e-13)
    np.testing.assert_array_equal(got[2], ex[2])  # group 3: empty


def test_int8_accumulates_exactly():
    kern = kernel(lhs=DType.INT8, rhs=DType.INT8, layout=Layout.NK)
    k = 4096
    lhs = np.full((2, k), 127, np.int8)
    lhs[1] = -128
    rhs = np.full((3, k), -128, np.int8)
    rhs[1, ::2] = 1  # odd terms survive, an f32 sum of 2**26-scale values would round
    got = R.reference(kern, lhs=lhs, rhs=rhs)
    want = [[sum(int(x) * int(y) for x, y in zip(lhs[i], rhs[j])) for j in range(3)]
            for i in range(2)]
    assert got.tolist() == want


@pytest.mark.parametrize("act, bound", [(Activation.SILU, 1.1), (Activation.GELU, 1.13)])
def test_activation_lipschitz_constants(act, bound):
    x = np.linspace(-20, 20, 400001)
    y = R._activate(act, x)
    slope = np.abs(np.diff(y) / np.diff(x))
    assert slope.max() < bound == R._LIPSCHITZ[act]


# ---------------------------------------------------------------------------
# Grouped against jax.lax.ragged_dot

M, K, N, G = 24, 16, 8, 5
GROUPED_BF16 = kernel(Op.GROUPED, layout=Layout.NK)


@st.composite
def group_sizes(draw):
    sizes = draw(st.lists(st.integers(0, 8), min_size=G, max_size=G))
    while sum(sizes) > M:
        sizes[sizes.index(max(sizes))] -= 1
    return np.array(sizes, np.int32)


def ragged_dot_reference(lhs, rhs_kn, sizes):
    with jax.enable_x64(True):
        out = jax.lax.ragged_dot(jax.numpy.asarray(lhs), jax.numpy.asarray(rhs_kn),
                                 jax.numpy.asarray(sizes), precision=jax.lax.Precision.HIGHEST)
        return np.asarray(out, np.float64)


@given(sizes=group_sizes(), offset=st.integers(0, G - 1), data=st.data())
def test_grouped_matches_ragged_dot(sizes, offset, data):
    g_local = data.draw(st.integers(1, G - offset))
    existing = data.draw(st.booleans())
    rng = np.random.default_rng(int(sizes.sum()) * 31 + offset)
    inputs = R.random_inputs(GROUPED_BF16, m=M, n=N, k=K, rng=rng, group_sizes=sizes,
                             group_offset=offset, g_local=g_local, with_existing_out=existing)
    got = R.reference(GROUPED_BF16, **inputs)

    # Non-local groups get zero weights, so ragged_dot leaves their rows 0 too.
    rhs_kn = np.zeros((G, K, N))
    rhs_kn[offset:offset + g_local] = np.swapaxes(decode(inputs["rhs"], DType.BF16), 1, 2)
    want = ragged_dot_reference(decode(inputs["lhs"], DType.BF16), rhs_kn, sizes)
    owner = np.repeat(np.arange(G), sizes)
    local = np.zeros(M, bool)
    local[: len(owner)] = (owner >= offset) & (owner < offset + g_local)
    if existing:
        want = np.where(local[:, None], want, decode(inputs["existing_out"], DType.F32))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if not existing:
        assert (got[~local] == 0).all()


def test_static_dims_are_enforced():
    kern = dataclasses.replace(kernel(layout=Layout.NK), static_n=8, static_k=16)
    rng = np.random.default_rng(0)
    assert R.reference(kern, **R.random_inputs(kern, m=3, n=8, k=16, rng=rng)).shape == (3, 8)
    with pytest.raises(ValueError, match="n = 8"):
        R.reference(kern, **R.random_inputs(kern, m=3, n=6, k=16, rng=rng))


def test_grouped_argument_errors():
    rng = np.random.default_rng(0)
    inputs = R.random_inputs(GROUPED_BF16, m=8, n=4, k=4, rng=rng,
                             group_sizes=np.array([4, 4], np.int32))
    with pytest.raises(ValueError, match="1-d integer"):
        R.reference(GROUPED_BF16, **{**inputs, "group_sizes": np.array([4.0, 4.0])})
    with pytest.raises(ValueError, match="required"):
        R.reference(kernel(rhs_scale=Scale(ScaleMode.CHANNEL)), lhs=inputs["lhs"],
                    rhs=inputs["rhs"][0])
    with pytest.raises(ValueError, match="shape"):
        R.reference(kernel(rhs_scale=Scale(ScaleMode.CHANNEL)), lhs=inputs["lhs"],
                    rhs=inputs["rhs"][0], rhs_scale=np.ones(3, np.float32))


def test_any_group_sizes_reduce_to_the_plain_case():
    """docs/semantics.md: negative sizes count as 0, groups are cut at row m,
    and a local group that group_sizes lacks is empty; each case equals the
    plain (sizes >= 0, sum <= m) reference on the sizes so reduced."""
    rng = np.random.default_rng(3)
    inputs = R.random_inputs(GROUPED_BF16, m=8, n=4, k=4, rng=rng,
                             group_sizes=np.array([4, 4], np.int32))
    plain = {k: v for k, v in inputs.items() if k != "group_sizes"}

    def ref(sizes, **kw):
        return R.reference(GROUPED_BF16, **plain, group_sizes=np.asarray(sizes), **kw)

    big = np.iinfo(np.int32).max
    np.testing.assert_array_equal(ref([5, 4]), ref([5, 3]))
    np.testing.assert_array_equal(ref([-3, 9]), ref([0, 8]))
    np.testing.assert_array_equal(ref(np.array([2**30] * 4, np.int64)), ref([8, 0, 0, 0][:2]))
    np.testing.assert_array_equal(ref(np.array([big, big], np.int64)), ref([8, 0]))
    np.testing.assert_array_equal(ref(np.array([2**40, -2**40], np.int64)), ref([8, 0]))
    # Shards past either end: the missing groups are empty.
    np.testing.assert_array_equal(ref([4, 4], group_offset=1), ref([4, 4, 0], group_offset=1))
    np.testing.assert_array_equal(ref([4, 4], group_offset=-1), ref([0, 4, 4], group_offset=0)
                                  * np.array([[1.0]] * 4 + [[0.0]] * 4))
    np.testing.assert_array_equal(ref([4, 4], group_offset=2**31 - 1), np.zeros((8, 4)))
    assert np.array_equal(R.group_starts(np.array([3, -1, 9, 2]), 8), [0, 3, 3, 8, 8])


# ---------------------------------------------------------------------------
# Quantize


def quant_kernel(out=DType.E4M3, scale_dtype=DType.F32, mode=ScaleMode.TOKEN_GROUP, g=128,
                 lhs=DType.BF16):
    return kernel(Op.QUANTIZE, lhs, None, out=out,
                  out_scale=Scale(mode, scale_dtype, block_k=g if mode is ScaleMode.TOKEN_GROUP else 0))


def ceil_pow2(q: Fraction) -> Fraction:
    e = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** e < q:
        e += 1
    while Fraction(2) ** (e - 1) >= q:
        e -= 1
    return Fraction(2) ** e


@pytest.mark.parametrize("out", [DType.E4M3, DType.E5M2])
@pytest.mark.parametrize("scale_dtype", [DType.F32, DType.E8M0])
@pytest.mark.parametrize("mode", [ScaleMode.TOKEN_GROUP, ScaleMode.TOKEN, ScaleMode.TENSOR])
def test_quantize_roundtrip(out, scale_dtype, mode):
    kern = quant_kernel(out, scale_dtype, mode)
    m, k = 5, 300  # 300 = 2 x 128 + a partial group of 44
    inputs = R.random_inputs(kern, m=m, n=0, k=k, rng=np.random.default_rng(11))
    x = decode(inputs["lhs"], DType.BF16)
    q_store, s_store = R.reference_output(kern, **inputs)
    q, s = decode(q_store, out), decode(s_store, scale_dtype)
    fmax = out.max_finite
    assert not np.isnan(q).any() and np.abs(q).max() <= fmax
    want_shape = ir.scale_shape(kern.out_scale, side="lhs", m=m, n=0, k=k, g=None)
    assert s.shape == want_shape
    assert R.compare((q_store, s_store), R.reference(kern, **inputs), kern, k=k).passed
    for i in range(m if mode is not ScaleMode.TENSOR else 1):
        groups = [(0, k)] if mode is not ScaleMode.TOKEN_GROUP else [(0, 128), (128, 256), (256, 300)]
        for gi, (k0, k1) in enumerate(groups):
            rows = slice(None) if mode is ScaleMode.TENSOR else slice(i, i + 1)
            xs, qs = x[rows, k0:k1], q[rows, k0:k1]
            sv = float(s) if mode is ScaleMode.TENSOR else float(s[i] if s.ndim == 1 else s[i, gi])
            amax = Fraction(float(np.abs(xs).max()))
            ideal = amax / Fraction(fmax)
            if scale_dtype is DType.E8M0:
                assert Fraction(sv) == ceil_pow2(ideal)  # smallest power of two >= ideal
                assert np.abs(qs).max() >= fmax / 2  # no wasted range (amax / s > fmax / 2)
            else:
                ulp = 2.0**-23 if scale_dtype is DType.F32 else 2.0**-7
                assert abs(Fraction(sv) - ideal) <= ideal * Fraction(ulp)
                assert np.abs(qs).max() >= fmax * (1 - 2 * ulp)
            # round trip: each element within half an fp8 ulp (in units of s)
            v = np.clip(xs / sv, -fmax, fmax)
            step = np.exp2(np.maximum(np.floor(np.log2(np.maximum(np.abs(v), 1e-300))),
                                      -6 if out is DType.E4M3 else -14)
                           - (3 if out is DType.E4M3 else 2))
            assert (np.abs(qs - v) <= 0.5 * step * (1 + 1e-12)).all()
            assert (np.abs(qs * sv - xs) <= 0.5 * step * sv + np.maximum(np.abs(xs) - fmax * sv, 0)
                    ).all()


@pytest.mark.parametrize("out", [DType.E4M3, DType.E5M2])
def test_quantize_e8m0_exact_powers_of_two(out):
    kern = quant_kernel(out, DType.E8M0, g=4, lhs=DType.F32)
    fmax = out.max_finite
    amaxes = []
    for e in (-40, -3, 0, 1, 7, 60):
        p = np.float32(fmax * 2.0**e)
        amaxes += [p, np.nextafter(p, np.float32(np.inf)), np.nextafter(p, np.float32(0))]
    x = np.zeros((len(amaxes), 8), np.float32)
    x[:, 1] = -np.array(amaxes, np.float32)  # group 0: amax from a negative value
    x[:, 0] = 0.5 * x[:, 1]
    x[:, 4:] = 0.0  # group 1: all zero
    pre, s = R.reference(kern, lhs=x)
    for i, amax in enumerate(amaxes):
        assert Fraction(float(s[i, 0])) == ceil_pow2(Fraction(float(amax)) / Fraction(fmax))
    # exact powers: amax == fmax * 2**e gives exactly 2**e and q = -fmax
    assert s[0, 0] == 2.0**-40 and s[1, 0] == 2.0**-39 and s[2, 0] == 2.0**-40
    assert (pre[::3, 1] == -fmax).all()
    floor = ceil_pow2(Fraction(R.AMAX_FLOOR) / Fraction(fmax))
    assert all(Fraction(float(v)) == floor for v in s[:, 1])
    q, _ = R.reference_output(kern, lhs=x)
    assert not np.isnan(q.astype(np.float64)).any() and (q[:, 4:].astype(np.float64) == 0).all()


def test_quantize_tiny_and_huge_amax_and_partial_group():
    kern = quant_kernel(DType.E4M3, DType.E8M0, g=128, lhs=DType.F32)
    x = np.ones((3, 200), np.float32)
    x[0] = 1e-30  # below the floor: scale = floor / 448 rounded up, q ~ 0
    x[1, :] = 3e38  # near f32 max
    x[2, 150] = 896.0  # = 448 * 2: only the partial group (128..199) sees it
    pre, s = R.reference(kern, lhs=x)
    q, s_bytes = R.reference_output(kern, lhs=x)
    qf = q.astype(np.float64)
    assert np.isfinite(qf).all() and s_bytes.dtype == np.uint8
    assert Fraction(float(s[0, 0])) == ceil_pow2(Fraction(1e-10) / 448)
    assert Fraction(float(s[1, 0])) == ceil_pow2(Fraction(float(np.float32(3e38))) / 448)
    assert s[2, 0] == 2.0**-8 and s[2, 1] == 2.0
    assert qf[2, 150] == 448.0 and qf[2, 0] == 256.0 and qf[2, 199] == 0.5


def test_quantize_compare():
    kern = quant_kernel(DType.E4M3, DType.F32)
    inputs = R.random_inputs(kern, m=4, n=0, k=256, rng=np.random.default_rng(2))
    expected = R.reference(kern, **inputs)
    q, s = R.reference_output(kern, **inputs)
    assert R.compare((q, s), expected, kern, k=256).passed
    # an f32 kernel: s = amax / 448 (one correctly rounded division), q = x / s
    x = decode(inputs["lhs"], DType.BF16).astype(np.float32)
    amax = np.abs(x.reshape(4, 2, 128)).max(axis=2)
    s32 = (amax / np.float32(448)).astype(np.float32)
    q32 = np.clip(x / np.repeat(s32, 128, axis=1), -448, 448)
    assert R.compare((q32.astype(ml_dtypes.float8_e4m3fn), s32), expected, kern, k=256).passed
    # the scale must be that RNE quotient: a reciprocal multiply is often an ulp off
    s_recip = (amax * np.float32(1 / 448)).astype(np.float32)
    assert (s_recip != s32).any()
    q_recip = np.clip(x / np.repeat(s_recip, 128, axis=1), -448, 448)
    assert not R.compare((q_recip.astype(ml_dtypes.float8_e4m3fn), s_recip), expected, kern,
                         k=256).passed
    # planted: one q two fp8 steps off; one scale 1% off
    bad_q = q.astype(np.float64)
    bad_q[1, 3] = bad_q[1, 3] * (1 + 2 * 2.0**-3)
    assert not R.compare((bad_q.astype(ml_dtypes.float8_e4m3fn), s), expected, kern, k=256).passed
    bad_s = s.copy()
    bad_s[2, 1] *= np.float32(1.01)
    assert not R.compare((q, bad_s), expected, kern, k=256).passed
    # e8m0: one exponent off fails
    kern8 = quant_kernel(DType.E4M3, DType.E8M0)
    q8, s8 = R.reference_output(kern8, **inputs)
    exp8 = R.reference(kern8, **inputs)
    assert R.compare((q8, s8), exp8, kern8, k=256).passed
    s8_bad = s8.copy()
    s8_bad[0, 0] += 1
    assert not R.compare((q8, s8_bad), exp8, kern8, k=256).passed


# ---------------------------------------------------------------------------
# random_inputs


@pytest.mark.parametrize("name", list(CASES))
def test_random_inputs_are_realistic(name):
    kern = CASES[name]
    rng = np.random.default_rng(4)
    extra = {}
    if kern.grouped:  # 4 local groups of 6 (tgmm: the last 4, its shard is implicit)
        extra = dict(num_groups=6, g_local=4, group_offset=2 if kern.op is Op.TGMM else 1)
    inputs = R.random_inputs(kern, m=32, n=16, k=64, rng=rng, **extra)
    for side in ("lhs", "rhs"):
        values = decode(inputs[side], getattr(kern, side).dtype)
        assert (values != 0).all() and np.isfinite(values).all()
        scale = getattr(kern, f"{side}_scale")
        if scale.enabled:
            s = inputs[f"{side}_scale"]
            assert s.shape == ir.scale_shape(scale, side=side, m=32, n=16, k=64,
                                             g=4 if kern.grouped else None)
            sv = decode(s, scale.dtype)
            assert (sv > 0).all()
            if scale.dtype is DType.E8M0:
                assert 110 <= s.min() and s.max() <= 132
            # dequantized operand magnitudes near 1
            assert 0.05 < np.sqrt(np.mean(values**2)) * np.median(sv) < 20
        if getattr(kern, side).dtype.is_fp8 and scale.enabled:
            assert np.abs(values).max() > getattr(kern, side).dtype.max_finite / 4
    if kern.grouped:
        sizes = inputs["group_sizes"]
        assert sizes.dtype == np.int32 and sizes.shape == (6,) and sizes.sum() <= 32
    out = R.reference(kern, **inputs)
    assert np.isfinite(out).all()


def test_random_group_sizes():
    rng = np.random.default_rng(0)
    draws = [R.random_group_sizes(rng, 50, 8) for _ in range(50)]
    assert all(d.dtype == np.int32 and d.shape == (8,) and 0 <= d.min() and d.sum() <= 50
               for d in draws)
    assert any((d == 0).any() for d in draws)
    assert any(d.sum() < 50 for d in draws) and any(d.sum() == 50 for d in draws)
    assert R.random_group_sizes(rng, 10, 3, total=10).sum() == 10


# ---------------------------------------------------------------------------
# Tolerance: f32 emulations pass, planted errors fail


def emulate_f32(kern, inputs, *, sequential=False, tf32=False):
    """What a dense kernel computes: f32 operands, f32 products and sums,
    DeepSeek-style per-128-K-block promotion with f32 scales, f32 epilogue."""
    assert kern.op is Op.DENSE and kern.bias.mode in (BiasMode.NONE, BiasMode.N)
    a = decode(inputs["lhs"], kern.lhs.dtype).astype(np.float32)
    b = decode(inputs["rhs"], kern.rhs.dtype).astype(np.float32)
    if kern.rhs.layout is Layout.NK:
        b = np.ascontiguousarray(b.T)
    if tf32:  # truncate to 10 mantissa bits
        a = (a.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
        b = (b.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    m, k = a.shape
    n = b.shape[1]
    ls = decode(inputs["lhs_scale"], kern.lhs_scale.dtype).astype(np.float32) \
        if kern.lhs_scale.enabled else None
    rs = decode(inputs["rhs_scale"], kern.rhs_scale.dtype).astype(np.float32) \
        if kern.rhs_scale.enabled else None
    blocked = kern.lhs_scale.mode is ScaleMode.TOKEN_GROUP
    step = 128 if blocked else k
    acc = np.zeros((m, n), np.float32)
    for k0 in range(0, k, step):
        if sequential:
            part = np.zeros_like(acc)
            for kk in range(k0, k0 + step):
                part = part + a[:, kk, None] * b[None, kk]
        else:
            part = a[:, k0:k0 + step] @ b[k0:k0 + step]
        if blocked:  # TOKEN_GROUP 128 x BLOCK 128 x 128
            part = part * (ls[:, k0 // 128, None] * np.repeat(rs[:, k0 // 128], 128)[None, :n])
        acc = acc + part
    if kern.lhs_scale.mode is ScaleMode.TOKEN:
        acc = acc * ls[:, None]
    if kern.rhs_scale.mode is ScaleMode.CHANNEL:
        acc = acc * rs[None, :]
    if kern.epilogue.alpha is not None:
        acc = acc * np.float32(kern.epilogue.alpha)
    if kern.bias.mode is BiasMode.N:
        acc = acc + decode(inputs["bias"], kern.bias.dtype).astype(np.float32)
    y = np.asarray(activate_f32(kern.epilogue.activation, acc), np.float32)
    return y.astype(ml_dtypes.bfloat16 if kern.out is DType.BF16 else np.dtype(kern.out.numpy_name))


def activate_f32(act, x):
    one, half = np.float32(1), np.float32(0.5)
    match act:
        case Activation.NONE:
            return x
        case Activation.GELU:
            c = np.float32(math.sqrt(2 / math.pi))
            return half * x * (one + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))
        case Activation.SILU_MUL:
            h = x.shape[1] // 2
            with np.errstate(over="ignore"):  # exp(-x) -> inf: silu -> -0
                return x[:, :h] / (one + np.exp(-x[:, :h])) * x[:, h:]
    raise AssertionError(act)


TOL_CASES = {
    "bf16": kernel(out=DType.BF16),
    "f32_tf32": kernel(lhs=DType.F32, rhs=DType.F32),
    "w8a8_block": kernel(lhs=DType.E4M3, rhs=DType.E4M3, layout=Layout.NK, out=DType.BF16,
                         lhs_scale=Scale(ScaleMode.TOKEN_GROUP, block_k=128),
                         rhs_scale=Scale(ScaleMode.BLOCK, block_n=128, block_k=128)),
    "int8_silu_mul_f16": kernel(lhs=DType.INT8, rhs=DType.INT8, out=DType.F16,
                                act=Activation.SILU_MUL, bias=BiasMode.N,
                                lhs_scale=Scale(ScaleMode.TOKEN),
                                rhs_scale=Scale(ScaleMode.CHANNEL)),
    "bf16_gelu_f32": kernel(act=Activation.GELU, alpha=0.125, bias=BiasMode.N),
}


@pytest.mark.parametrize("name", list(TOL_CASES))
def test_compare_passes_f32_kernels_and_catches_planted_errors(name):
    kern = TOL_CASES[name]
    m, n, k = 32, 256, 1024
    rng = np.random.default_rng(9)
    inputs = R.random_inputs(kern, m=m, n=n, k=k, rng=rng)
    expected = R.reference(kern, **inputs)
    for sequential in (False, True):
        actual = emulate_f32(kern, inputs, sequential=sequential, tf32=name == "f32_tf32")
        for given_inputs in (inputs, None):
            result = R.compare(actual, expected, kern, k=k, inputs=given_inputs)
            assert result.passed, result.detail

    actual = emulate_f32(kern, inputs)

    def fails(planted, **kw):
        for given_inputs in (inputs, None):
            result = R.compare(planted, expected, kern, k=k, inputs=given_inputs)
            assert not result.passed, (kw, given_inputs is None)
            assert "out of tolerance" in result.detail

    # Plant at the largest output: a relative error there is an error by any measure.
    at = np.unravel_index(np.argmax(np.abs(expected)), expected.shape)
    # (1) one element misses a K tile of 128
    cut = decode(inputs["lhs"], kern.lhs.dtype)
    cut[at[0], 256:384] = 0
    partial = R.reference(kern, **{**inputs, "lhs": float64_to_storage(cut, kern.lhs.dtype)})
    planted = actual.astype(np.float64)
    planted[at] = partial[at]
    fails(planted.astype(actual.dtype), case="missing K tile")
    # (2) one rhs scale entry wrong (x2) for a whole block
    if kern.rhs_scale.enabled:
        bad_scale = inputs["rhs_scale"].copy()
        flat = bad_scale.reshape(-1)
        flat[1] = flat[1] * 2
        wrong = R.reference(kern, **{**inputs, "rhs_scale": bad_scale})
        fails(wrong.astype(actual.dtype), case="wrong scale")
    # (3) one element 1% off, (4) one NaN
    planted = actual.astype(np.float64)
    planted[at] = expected[at] * 1.01
    fails(planted.astype(actual.dtype), case="1% off")
    planted = actual.astype(np.float64)
    planted[at] = np.nan
    fails(planted.astype(actual.dtype), case="NaN")


def test_compare_grouped_rows_outside_groups_must_match_exactly():
    kern = kernel(Op.GROUPED, out=DType.BF16)
    inputs = R.random_inputs(kern, m=16, n=8, k=32, rng=np.random.default_rng(3),
                             group_sizes=np.array([4, 6, 2], np.int32), group_offset=1,
                             g_local=2, with_existing_out=True)
    expected = R.reference(kern, **inputs)
    out = R.reference_output(kern, **inputs)
    assert R.compare(out, expected, kern, k=32, inputs=inputs).passed
    planted = out.astype(np.float64)
    planted[1, 0] += 0.01 * abs(planted[1, 0]) + 1e-3  # row of group 0: not local, kept
    result = R.compare(planted.astype(out.dtype), expected, kern, k=32, inputs=inputs)
    assert not result.passed and "[1, 0]" in result.detail


def test_compare_nan_and_overflow_rules():
    kern = kernel(out=DType.F16)
    expected = np.array([[1.0, 1e6]])
    ok = np.array([[1.0, np.inf]], np.float16)
    assert R.compare(ok, expected, kern, k=4).passed
    assert not R.compare(np.array([[1.0, 65504]], np.float16), expected, kern, k=4).passed
    assert not R.compare(np.array([[np.nan, np.inf]], np.float16), expected, kern, k=4).passed
    assert not R.compare(np.zeros((2, 2), np.float16), expected, kern, k=4).passed
    nan_expected = np.array([[np.nan, 1e6]])
    assert R.compare(np.array([[np.nan, np.inf]], np.float16), nan_expected, kern, k=4).passed


# ---------------------------------------------------------------------------
# Edges: non-finite quantize input, f32 accumulator overflow


@pytest.mark.parametrize("scale_dtype", [DType.F32, DType.E8M0])
def test_quantize_non_finite_groups_are_nan(scale_dtype):
    """A group holding inf or NaN: scale NaN (e8m0 byte 255) and every q NaN;
    the other groups are untouched."""
    kern = quant_kernel(DType.E4M3, scale_dtype, g=4)
    x = np.arange(1, 17, dtype=np.float32).reshape(2, 8)
    x[0, 1] = np.inf
    x[1, 6] = np.nan
    q, s = R.reference_output(kern, lhs=x.astype(ml_dtypes.bfloat16))
    s = np.asarray(s)
    if scale_dtype is DType.E8M0:
        assert s[0, 0] == 255 and s[1, 1] == 255 and s[0, 1] != 255 and s[1, 0] != 255
    else:
        assert np.isnan(s[0, 0]) and np.isnan(s[1, 1]) and np.isfinite(s[[0, 1], [1, 0]]).all()
    qf = q.astype(np.float64)
    assert np.isnan(qf[0, :4]).all() and np.isnan(qf[1, 4:]).all()
    assert np.isfinite(qf[0, 4:]).all() and np.isfinite(qf[1, :4]).all()


def test_nan_passes_only_where_f32_accumulation_can_overflow():
    kern = kernel(out=DType.F32, rhs_scale=Scale(ScaleMode.CHANNEL))
    rng = np.random.default_rng(5)
    inputs = R.random_inputs(kern, m=4, n=4, k=16, rng=rng)
    scale = np.ones(4, np.float32)
    scale[2] = 2.0**120  # column 2's terms sum past the f32 range
    inputs["lhs"] = (np.ones((4, 16)) * 2.0**10).astype(ml_dtypes.bfloat16)
    inputs["rhs_scale"] = scale
    expected = R.reference(kern, **inputs)
    actual = expected.astype(np.float32).astype(np.float64)
    actual[:, 2] = np.nan
    assert R.compare(actual, expected, kern, k=16, inputs=inputs).passed
    actual[0, 1] = np.nan  # column 1 is in range: NaN fails
    assert not R.compare(actual, expected, kern, k=16, inputs=inputs).passed


def test_nan_passes_where_the_unscaled_f32_sum_can_overflow():
    """Kernels sum the products in f32 before they apply the scales: a tiny
    scale gives a finite float64 value, but the accumulator overflows. Where
    even the unscaled sum stays in range, NaN still fails."""
    kern = kernel(out=DType.F32, rhs_scale=Scale(ScaleMode.CHANNEL))
    rng = np.random.default_rng(6)
    inputs = R.random_inputs(kern, m=4, n=4, k=16, rng=rng)
    inputs["lhs"] = (np.ones((4, 16)) * 2.0**125).astype(ml_dtypes.bfloat16)
    rhs = np.full(np.shape(inputs["rhs"]), 4.0)
    rhs[..., 1] = 2.0**-10  # column 1: the unscaled sum is 2**119, in range
    inputs["rhs"] = rhs.astype(ml_dtypes.bfloat16)
    inputs["rhs_scale"] = np.full(4, 2.0**-120, np.float32)
    expected = R.reference(kern, **inputs)
    assert np.all(np.isfinite(expected)) and np.all(np.abs(expected) < 2.0**20)
    actual = expected.astype(np.float32).astype(np.float64)
    actual[:, 2] = np.nan  # sum of 16 products of 2**127: past the f32 range
    assert R.compare(actual, expected, kern, k=16, inputs=inputs).passed
    actual[0, 1] = np.nan
    assert not R.compare(actual, expected, kern, k=16, inputs=inputs).passed
