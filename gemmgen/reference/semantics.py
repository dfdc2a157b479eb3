"""The semantics: what every generated kernel computes, in float64 NumPy.

`reference(kernel, lhs=..., ...)` evaluates one `ir.Kernel` in float64 from
arrays in their storage format (sub-byte operands packed in uint8 along the
last axis, e8m0 scales as exponent bytes, bf16 / fp8 as `ml_dtypes` arrays)
and returns the result before the final output cast; `reference_output`
applies that cast. This module evaluates; its parts are `decode` (the
arguments checked and decoded), `scales` (how each scale mode multiplies)
and `quantize` (op quantize). Beside them: `tolerance` (does a kernel's
output match?) and `inputs` (random operands for a kernel).

docs/semantics.md states the semantics in prose; these modules are the
executable form. In short, with every operand dequantized exactly:

    dense     y = act(alpha * sum_b (A[:, b] @ B[b, :]) * sa[:, b] * sb[b, :] + bias)
    grouped   the same per group i on rows of group i with B[i - group_offset];
              other rows are 0, or existing_out's rows when it is given
    masked    (grouped with lhs [g, m, k]) out[i, r] as dense with B[i] for
              r < masked_m[i] (clipped to [0, m]); rows past it are 0
    tgmm      out[i] = existing_out[i] + alpha * A[rows_i]^T @ D[rows_i]
    quantize  q = sat(x / s), s = max(amax(|x_group|), 1e-10) / fp8_max
              (e8m0: s rounded up to a power of two)

where b runs over K blocks (the scale blocks of main-loop scales; one block
when every scale is applied in the epilogue).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import assert_never

import numpy as np

from gemmgen import ir
from gemmgen.ir import Activation, BiasMode, Op
from gemmgen.numerics import float64_to_storage
from gemmgen.reference.decode import Inputs, arg_error, decode
from gemmgen.reference.quantize import quantize, quantize_scale_storage
from gemmgen.reference.scales import Scales

# Largest |f'(x)| of the activations, for propagating an absolute error on
# the pre-activation value: silu' peaks at 1.0998 (x ~ 2.4), the tanh gelu's
# derivative at 1.1289 (x ~ 1.5); tests/reference/test_reference.py checks both.
_LIPSCHITZ = {
    Activation.NONE: 1.0, Activation.RELU: 1.0, Activation.SILU: 1.1,
    Activation.GELU: 1.13, Activation.SILU_MUL: 1.1,
    # d/dx x * sigmoid(a x) = silu'(a x): the same peak for every alpha_gate.
    Activation.SWIGLU_CLAMPED: 1.1,
}


@dataclass(frozen=True, slots=True)
class _Evaluation:
    """Everything the reference computes, for `reference` and `compare`.

    value: the result before the output cast (the out shape).
    pre: alpha * acc + bias, before the activation ([.., n], full n).
    magnitude: the same computation on |A|, |B|, |scales|, |alpha| without
        bias: sum_k |alpha a b sa sb|, what accumulation error scales with.
    rss: sqrt(sum_k (alpha a b sa sb)**2), what independent rounding errors
        of the operands (TF32) scale with; None when not needed.
    raw_magnitude: sum_k |a b|, without scales and alpha: what a kernel's f32
        accumulator holds before it applies them (per K block, at most this);
        None when not asked for or when it equals magnitude.
    contraction: the number of terms summed per element (broadcastable).
    computed: which output elements the GEMM produced (the rest are 0 or
        copied from existing_out).
    existing: existing_out decoded, or None.
    """

    value: np.ndarray
    pre: np.ndarray
    magnitude: np.ndarray
    rss: np.ndarray | None
    contraction: np.ndarray
    computed: np.ndarray
    existing: np.ndarray | None
    raw_magnitude: np.ndarray | None = None


def _alpha(kernel: ir.Kernel) -> float:
    # alpha is an f32 constant in every backend; the reference uses the same value.
    alpha = kernel.epilogue.alpha
    return 1.0 if alpha is None else float(np.float32(alpha))


def _accumulate(kernel: ir.Kernel, inp: Inputs, a: np.ndarray, b: np.ndarray,
                scales: Scales) -> np.ndarray:
    """The scaled accumulator (no alpha, no bias): [m, n], or [g, k, n] for tgmm."""
    match kernel.op:
        case Op.DENSE:
            return _gemm_rows(a, b, scales, slice(0, inp.m), None)
        case Op.GROUPED:
            acc = np.zeros((inp.m, inp.n))
            for i in range(inp.g):
                rows = _group_rows(inp, i)
                acc[rows] = _gemm_rows(a, b[i], scales, rows, i)
            return acc
        case Op.TGMM:
            out = np.zeros((inp.g, inp.k, inp.n))
            for i in range(inp.g):
                rows = _group_rows(inp, i)
                # Scales sit on the contraction dim (rows): dequantize first.
                lhs, rhs = a[rows], b[rows]
                if kernel.lhs_scale.enabled:
                    lhs = lhs * scales.lhs_elementwise(rows)
                if kernel.rhs_scale.enabled:
                    rhs = rhs * scales.rhs_epi(i)
                out[i] = lhs.T @ rhs
            return out
        case Op.QUANTIZE:
            raise AssertionError("quantize has no accumulator")
        case _:
            assert_never(kernel.op)


def _group_rows(inp: Inputs, local: int) -> slice:
    """The rows of local group `local`; empty for a group group_sizes lacks
    (masked: the first counts[local] rows of its capacity)."""
    if inp.cap is not None:
        return slice(local * inp.cap, local * inp.cap + int(inp.counts[local]))
    gi = inp.offset + local
    if not 0 <= gi < len(inp.starts) - 1:
        return slice(0, 0)
    return slice(int(inp.starts[gi]), int(inp.starts[gi + 1]))


def _gemm_rows(a: np.ndarray, b: np.ndarray, scales: Scales, rows: slice,
               group: int | None) -> np.ndarray:
    """sum over K blocks of (a[rows, blk] @ b[blk]) * main-loop scales, then epilogue scales.

    Each block's partial product is exact (int64) for integer operands and
    float64 otherwise, mirroring the kernels' per-block promotion.
    """
    lhs = a[rows]
    acc = np.zeros((lhs.shape[0], b.shape[1]))
    for k0, k1 in scales.k_blocks():
        part = (lhs[:, k0:k1] @ b[k0:k1]).astype(np.float64)
        acc += part * scales.lhs_main(rows, k0) * scales.rhs_main(group, k0)
    return acc * scales.lhs_epi(rows) * scales.rhs_epi(group) * scales.global_epi(group)


def _silu(x: np.ndarray) -> np.ndarray:
    # x * sigmoid(x), with sigmoid(x) = (1 + tanh(x / 2)) / 2: no overflow.
    return x * 0.5 * (1.0 + np.tanh(0.5 * x))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def pair(epilogue: ir.Epilogue, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A paired activation's (gate, up) columns of x [.., n]: the halves
    x[.., :n/2] and x[.., n/2:], or the interleaved x[.., 0::2] and x[.., 1::2]."""
    if epilogue.pairs is ir.Pairs.INTERLEAVED:
        return x[..., 0::2], x[..., 1::2]
    half = x.shape[-1] // 2
    return x[..., :half], x[..., half:]


def _gate_scale(x: np.ndarray, alpha_gate: float) -> np.ndarray:
    # x * sigmoid(alpha_gate * x), overflow-free as _silu.
    return x * 0.5 * (1.0 + np.tanh(0.5 * alpha_gate * x))


def clamp_pair(epilogue: ir.Epilogue, gate: np.ndarray, up: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """swiglu_clamped's clamps: gate to at most limit, up to [-limit, limit]
    (NaN stays NaN)."""
    lim = epilogue.limit
    return np.minimum(gate, lim), np.clip(up, -lim, lim)


def swiglu_clamped(epilogue: ir.Epilogue, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """gate * sigmoid(alpha_gate * gate) * (up + 1) on the clamped pair."""
    g, u = clamp_pair(epilogue, gate, up)
    return _gate_scale(g, epilogue.alpha_gate) * (u + 1.0)


def _activate(act: Activation, x: np.ndarray,
              epilogue: ir.Epilogue | None = None) -> np.ndarray:
    ep = epilogue if epilogue is not None else ir.Epilogue(act)
    match act:
        case Activation.NONE:
            return x
        case Activation.RELU:
            return np.maximum(x, 0.0)
        case Activation.SILU:
            return _silu(x)
        case Activation.GELU:
            return _gelu_tanh(x)
        case Activation.SILU_MUL:
            gate, up = pair(ep, x)
            return _silu(gate) * up
        case Activation.SWIGLU_CLAMPED:
            return swiglu_clamped(ep, *pair(ep, x))
        case _:
            assert_never(act)


def _evaluate(kernel: ir.Kernel, *, lhs=None, rhs=None, group_sizes=None, lhs_scale=None,
              rhs_scale=None, bias=None, group_offset=None, existing_out=None,
              masked_m=None, lhs_global_scale=None, rhs_global_scale=None, rhs_zero=None,
              with_rss: bool = False, with_raw: bool = False) -> _Evaluation:
    inp = decode(kernel, lhs=lhs, rhs=rhs, group_sizes=group_sizes, lhs_scale=lhs_scale,
                 rhs_scale=rhs_scale, bias=bias, group_offset=group_offset,
                 existing_out=existing_out, masked_m=masked_m,
                 lhs_global_scale=lhs_global_scale, rhs_global_scale=rhs_global_scale,
                 rhs_zero=rhs_zero)
    b_abs = np.abs(inp.b) if inp.b_magnitude is None else inp.b_magnitude
    scales = Scales(kernel, inp.lhs_scale, inp.rhs_scale, inp.n, inp.k, inp.lhs_global,
                    inp.rhs_global)
    alpha = _alpha(kernel)
    acc = alpha * _accumulate(kernel, inp, inp.a, inp.b, scales)
    magnitude = abs(alpha) * _accumulate(kernel, inp, np.abs(inp.a), b_abs, scales.absolute())
    rss = None
    if with_rss:
        rss = abs(alpha) * np.sqrt(_accumulate(kernel, inp, np.square(inp.a), np.square(b_abs),
                                               scales.squared()))
    raw = None
    # tgmm's scales sit on the contraction dim: kernels dequantize before the
    # product, so only alpha comes after the sum there.
    unscaled = scales.enabled and kernel.op is not Op.TGMM
    if with_raw and (unscaled or alpha != 1.0):
        raw = _accumulate(kernel, inp, np.abs(inp.a), b_abs,
                          scales.ones() if unscaled else scales.absolute())

    if kernel.op is Op.TGMM:
        # megablox tgmm: every local group is written, existing_out is added.
        sizes = np.array([_group_rows(inp, i).stop - _group_rows(inp, i).start
                          for i in range(inp.g)], np.int64)
        value = acc if inp.existing is None else acc + inp.existing
        return _Evaluation(value=value, pre=acc, magnitude=magnitude, rss=rss,
                           contraction=sizes[:, None, None].astype(np.float64),
                           computed=np.ones(value.shape, bool), existing=inp.existing,
                           raw_magnitude=raw)

    pre = acc
    rows_bias = None
    match kernel.bias.mode:
        case BiasMode.N:
            rows_bias = inp.bias[None, :]
        case BiasMode.GROUP:
            rows_bias = np.zeros((inp.m, inp.n))
            for i in range(inp.g):
                rows_bias[_group_rows(inp, i)] = inp.bias[i, 0]
        case BiasMode.NONE:
            pass
        case _:
            assert_never(kernel.bias.mode)
    if rows_bias is not None:
        pre = pre + rows_bias
    y = _activate(kernel.epilogue.activation, pre, kernel.epilogue)

    computed = np.ones(y.shape, bool)
    if kernel.op is Op.GROUPED:
        mask = np.zeros(inp.m, bool)
        for i in range(inp.g):
            mask[_group_rows(inp, i)] = True
        computed = np.broadcast_to(mask[:, None], y.shape)
        fill = inp.existing if inp.existing is not None else np.zeros(y.shape)
        y = np.where(computed, y, fill)
        pre = np.where(mask[:, None], pre, 0.0)
    ev = _Evaluation(value=y, pre=pre, magnitude=magnitude, rss=rss,
                     contraction=np.full((1, 1), float(inp.k)), computed=computed,
                     existing=inp.existing, raw_magnitude=raw)
    if inp.cap is not None:
        ev = _unflatten(ev, inp.g, inp.cap)
    return ev


def _unflatten(ev: _Evaluation, g: int, cap: int) -> _Evaluation:
    """The masked layout: the [g * cap, .] arrays as [g, cap, .]."""
    def shaped(x):
        return None if x is None else np.reshape(x, (g, cap) + np.shape(x)[1:])
    return _Evaluation(value=shaped(ev.value), pre=shaped(ev.pre),
                       magnitude=shaped(ev.magnitude), rss=shaped(ev.rss),
                       contraction=np.full((1, 1, 1), ev.contraction.item()),
                       computed=shaped(ev.computed), existing=None,
                       raw_magnitude=shaped(ev.raw_magnitude))


def reference(kernel: ir.Kernel, *, lhs, rhs=None, group_sizes=None, lhs_scale=None,
              rhs_scale=None, bias=None, group_offset=None, existing_out=None, masked_m=None,
              lhs_global_scale=None, rhs_global_scale=None, global_scale=None, rhs_zero=None):
    """The kernel's result in float64, before the final output cast.

    Args:
      kernel: the validated kernel.
      lhs: [m, k] in lhs storage format (sub-byte: uint8 [m, k/2]).
      rhs: dense [k, n] / [n, k]; grouped [g, k, n] / [g, n, k]; tgmm [m, n].
      group_sizes: int [num_groups] (grouped ops), sum <= m.
      lhs_scale, rhs_scale: shapes from `ir.scale_shape`, in the scale dtype
        (e8m0: uint8 exponent bytes).
      bias: [n] or [g, 1, n] in the bias dtype.
      group_offset: int scalar, the first group this shard owns (default 0).
      existing_out: the out shape in the out dtype.
      masked_m: int [g], the masked layout's valid rows per group (lhs
        [g, m, k], out [g, m, n_out]; no group_sizes, group_offset or
        existing_out).
      lhs_global_scale, rhs_global_scale: f32 [] (dense) or [g] (grouped,
        masked): the `global=f32` scales of NVFP4 block scales, multiplying
        the accumulator of each group once.
      rhs_zero: `zero=uint4` only: the zero points of rhs_scale, uint8
        `ir.zero_shape` (packed two per byte along the scale's last dim);
        an rhs element is (q - z) * s.
      global_scale: quantize only: f32 [], NVFP4's global scale G of a
        `global=f32` out_scale (block scales of amax / G, q = x / (s G)).

    Returns:
      float64 [m, n_out] (dense, grouped), [g, m, n_out] (masked) or
      [g, k, n_out] (tgmm); for
      quantize a tuple (x / scale before the fp8 cast [m, k], scale float64).
    """
    if kernel.op is Op.QUANTIZE:
        return quantize(kernel, lhs, global_scale)
    if global_scale is not None:
        raise arg_error(kernel, "global_scale is op quantize's (a GEMM's global scales are "
                        "lhs_global_scale and rhs_global_scale)")
    return _evaluate(kernel, lhs=lhs, rhs=rhs, group_sizes=group_sizes,
                     lhs_scale=lhs_scale, rhs_scale=rhs_scale, bias=bias,
                     group_offset=group_offset, existing_out=existing_out,
                     masked_m=masked_m, lhs_global_scale=lhs_global_scale,
                     rhs_global_scale=rhs_global_scale, rhs_zero=rhs_zero).value


def reference_output(kernel: ir.Kernel, **arrays):
    """`reference` cast to the storage format of kernel.out (RNE, fp8 saturates).

    For quantize: (q [m, k] fp8, or [m, k / 2] packed fp4 bytes; the scale in
    its storage format: f32, or e8m0 / ue4m3 bytes).
    """
    if kernel.op is Op.QUANTIZE:
        pre, scale = reference(kernel, **arrays)
        return float64_to_storage(pre, kernel.out), quantize_scale_storage(kernel, scale)
    return float64_to_storage(reference(kernel, **arrays), kernel.out)
