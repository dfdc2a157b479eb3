"""The semantics: what every generated kernel computes, in float64 NumPy.

`reference(kernel, lhs=..., ...)` evaluates one `ir.Kernel` in float64 from
arrays in their storage format (sub-byte operands packed in uint8 along the
last axis, e8m0 scales as exponent bytes, bf16 / fp8 as `ml_dtypes` arrays)
and returns the result before the final output cast; `reference_output`
applies that cast. Beside it: `tolerance` (does a kernel's output match?)
and `inputs` (random operands for a kernel).

docs/semantics.md states the semantics in prose; this module is the
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
from gemmgen.ir import Activation, BiasMode, DType, Op, ScaleMode
from gemmgen.numerics import (
    e8m0_round_up,
    e8m0_to_float,
    float64_to_storage,
    saturating_cast,
    storage_to_float64,
)

# Activation quantization divides by amax / fp8_max; an all-zero group would
# divide by zero, so amax is floored first (DeepGEMM / SGLang use 1e-10 too).
AMAX_FLOOR = 1e-10

LHS_SCALE_MODES, RHS_SCALE_MODES = ir.LHS_SCALE_MODES, ir.RHS_SCALE_MODES
QUANTIZE_SCALE_MODES = ir.QUANTIZE_SCALE_MODES

# Largest |f'(x)| of the activations, for propagating an absolute error on
# the pre-activation value: silu' peaks at 1.0998 (x ~ 2.4), the tanh gelu's
# derivative at 1.1289 (x ~ 1.5); tests/test_reference.py checks both.
_LIPSCHITZ = {
    Activation.NONE: 1.0, Activation.RELU: 1.0, Activation.SILU: 1.1,
    Activation.GELU: 1.13, Activation.SILU_MUL: 1.1,
}


# ---------------------------------------------------------------------------
# Decoding and checking the arguments


@dataclass(frozen=True, slots=True)
class _Inputs:
    """Decoded operands. a [m, k]; b dense [k, n], grouped [g, k, n], tgmm [m, n]."""

    a: np.ndarray  # float64, or int64 when both operands are integers
    b: np.ndarray
    m: int
    n: int  # accumulator columns (out has n / out_n_divisor)
    k: int
    g: int | None  # local groups (grouped ops)
    starts: np.ndarray | None  # int64 [num_groups_total + 1]: row where group i starts
    offset: int
    lhs_scale: np.ndarray | None  # float64, shape ir.scale_shape(...)
    rhs_scale: np.ndarray | None
    bias: np.ndarray | None  # float64 [n] or [g, 1, n]
    existing: np.ndarray | None  # float64, the output shape
    # The masked layout: a [g, cap, k] lhs is held as [g * cap, k] (and its
    # per-row scales likewise); group i owns rows [i * cap, i * cap + counts[i]).
    cap: int | None = None
    counts: np.ndarray | None = None  # int64 [g], masked_m clipped to [0, cap]


def _arg_error(kernel: ir.Kernel, message: str) -> ValueError:
    return ValueError(f"{kernel.name}: {message}")


def _decode_scale(kernel: ir.Kernel, side: str, array, *, m: int, n: int, k: int,
                  g: int | None) -> np.ndarray | None:
    scale: ir.Scale = getattr(kernel, f"{side}_scale")
    allowed = LHS_SCALE_MODES if side == "lhs" else RHS_SCALE_MODES
    if scale.mode not in allowed:
        raise _arg_error(kernel, f"{side}_scale mode {scale.mode.value} does not apply to {side}")
    if not scale.enabled:
        if array is not None:
            raise _arg_error(kernel, f"{side}_scale given but the kernel has no {side} scale")
        return None
    if array is None:
        raise _arg_error(kernel, f"{side}_scale ({scale.mode.value}) is required")
    values = storage_to_float64(array, scale.dtype)
    want = ir.scale_shape(scale, side=side, m=m, n=n, k=k, g=g, masked=kernel.masked)
    if values.shape != want:
        raise _arg_error(kernel, f"{side}_scale must have shape {want}, got {values.shape}")
    return values


def _decode(kernel: ir.Kernel, *, lhs=None, rhs=None, group_sizes=None, lhs_scale=None,
            rhs_scale=None, bias=None, group_offset=None, existing_out=None,
            masked_m=None) -> _Inputs:
    if lhs is None or rhs is None:
        raise _arg_error(kernel, "lhs and rhs are required")
    if kernel.masked:
        return _decode_masked(kernel, lhs=lhs, rhs=rhs, masked_m=masked_m,
                              lhs_scale=lhs_scale, rhs_scale=rhs_scale, bias=bias,
                              group_sizes=group_sizes, group_offset=group_offset,
                              existing_out=existing_out)
    if masked_m is not None:
        raise _arg_error(kernel, "masked_m is for the masked grouped layout (lhs [g, m, k])")
    a = storage_to_float64(lhs, kernel.lhs.dtype)
    b = storage_to_float64(rhs, kernel.rhs.dtype)
    if a.ndim != 2:
        raise _arg_error(kernel, f"lhs must be [m, k], got shape {a.shape}")
    m, k = a.shape
    rhs_grouped = kernel.op is Op.GROUPED  # rhs [g, ., .]
    match kernel.op:
        case Op.DENSE | Op.GROUPED:
            if b.ndim != (3 if rhs_grouped else 2):
                raise _arg_error(kernel, f"rhs has {b.ndim} dims, expected {3 if rhs_grouped else 2}")
            if kernel.rhs.layout is ir.Layout.NK:
                b = np.swapaxes(b, -1, -2)
            if b.shape[-2] != k:
                raise _arg_error(kernel, f"rhs has k = {b.shape[-2]}, lhs has k = {k}")
            n = b.shape[-1]
        case Op.TGMM:
            # NB: tgmm's rhs is the [m, n] gradient; rhs.layout does not apply.
            if b.ndim != 2 or b.shape[0] != m:
                raise _arg_error(kernel, f"tgmm rhs must be [m={m}, n], got shape {b.shape}")
            n = b.shape[1]
        case Op.QUANTIZE:
            raise AssertionError("quantize is decoded by _quantize")
        case _:
            assert_never(kernel.op)
    _check_static_dims(kernel, n=n, k=k)
    if kernel.out_n_divisor == 2 and n % 2:
        raise _arg_error(kernel, f"silu_mul needs an even n, got {n}")
    if kernel.lhs.dtype in (DType.INT8, DType.INT4) and kernel.rhs.dtype in (DType.INT8, DType.INT4):
        # Integer x integer accumulates exactly (i32 in the kernel, int64 here).
        a, b = a.astype(np.int64), b.astype(np.int64)

    g = None
    starts = None
    offset = 0
    if kernel.grouped:
        if group_sizes is None:
            raise _arg_error(kernel, "group_sizes is required")
        sizes = np.asarray(group_sizes)
        if sizes.ndim != 1 or not np.issubdtype(sizes.dtype, np.integer):
            raise _arg_error(kernel, f"group_sizes must be a 1-d integer array, got {sizes.dtype}{list(sizes.shape)}")
        starts = group_starts(sizes, m)
        offset = 0 if group_offset is None else int(np.asarray(group_offset).reshape(()))
        g = b.shape[0] if rhs_grouped else _tgmm_local_groups(
            len(sizes), offset, existing_out=existing_out, rhs_scale=rhs_scale)
        if g < 0:
            raise _arg_error(kernel, f"group_offset {offset} is past the {len(sizes)} groups of "
                             "group_sizes, so tgmm has no local groups (give existing_out)")
    elif group_sizes is not None or group_offset is not None or existing_out is not None:
        raise _arg_error(kernel, "group_sizes / group_offset / existing_out are for grouped ops")

    ls = _decode_scale(kernel, "lhs", lhs_scale, m=m, n=n, k=k, g=g)
    rs = _decode_scale(kernel, "rhs", rhs_scale, m=m, n=n, k=k, g=g)
    if kernel.op is Op.TGMM and kernel.rhs_scale.mode in (ScaleMode.BLOCK, ScaleMode.KBLOCK):
        raise _arg_error(kernel, "tgmm has no K blocks of rhs: block / kblock scales do not apply")

    bias_values = None
    match kernel.bias.mode:
        case BiasMode.NONE:
            if bias is not None:
                raise _arg_error(kernel, "bias given but the kernel has no bias")
        case BiasMode.N | BiasMode.GROUP:
            if kernel.op is Op.TGMM:
                raise _arg_error(kernel, "tgmm has no bias")
            if bias is None:
                raise _arg_error(kernel, "bias is required")
            bias_values = storage_to_float64(bias, kernel.bias.dtype)
            want = (n,) if kernel.bias.mode is BiasMode.N else (g, 1, n)
            if kernel.bias.mode is BiasMode.GROUP and not rhs_grouped:
                raise _arg_error(kernel, "a per-group bias needs a grouped op")
            if bias_values.shape != want:
                raise _arg_error(kernel, f"bias must have shape {want}, got {bias_values.shape}")
        case _:
            assert_never(kernel.bias.mode)

    existing = None
    if existing_out is not None:
        existing = storage_to_float64(existing_out, kernel.out)
        want = _out_shape(kernel, m=m, n=n, k=k, g=g)
        if existing.shape != want:
            raise _arg_error(kernel, f"existing_out must have shape {want}, got {existing.shape}")
    if kernel.op is Op.TGMM and kernel.epilogue.activation is not Activation.NONE:
        raise _arg_error(kernel, "tgmm has no activation")
    return _Inputs(a=a, b=b, m=m, n=n, k=k, g=g, starts=starts, offset=offset,
                   lhs_scale=ls, rhs_scale=rs, bias=bias_values, existing=existing)


def _decode_masked(kernel: ir.Kernel, *, lhs, rhs, masked_m, lhs_scale, rhs_scale, bias,
                   group_sizes, group_offset, existing_out) -> _Inputs:
    """The masked layout: lhs [g, cap, k], masked_m [g]; decoded as a
    [g * cap, k] lhs whose group i owns rows [i * cap, i * cap + counts[i])."""
    if group_sizes is not None or group_offset is not None or existing_out is not None:
        raise _arg_error(kernel, "the masked layout takes masked_m, not group_sizes / "
                         "group_offset / existing_out")
    if masked_m is None:
        raise _arg_error(kernel, "masked_m is required")
    a = storage_to_float64(lhs, kernel.lhs.dtype)
    b = storage_to_float64(rhs, kernel.rhs.dtype)
    if a.ndim != 3:
        raise _arg_error(kernel, f"lhs must be [g, m, k], got shape {a.shape}")
    if b.ndim != 3:
        raise _arg_error(kernel, f"rhs has {b.ndim} dims, expected 3")
    g, cap, k = a.shape
    if kernel.rhs.layout is ir.Layout.NK:
        b = np.swapaxes(b, -1, -2)
    if b.shape[0] != g:
        raise _arg_error(kernel, f"rhs has g = {b.shape[0]}, lhs has g = {g}")
    if b.shape[1] != k:
        raise _arg_error(kernel, f"rhs has k = {b.shape[1]}, lhs has k = {k}")
    n = b.shape[2]
    _check_static_dims(kernel, n=n, k=k)
    if kernel.out_n_divisor == 2 and n % 2:
        raise _arg_error(kernel, f"silu_mul needs an even n, got {n}")
    counts = np.asarray(masked_m)
    if counts.shape != (g,) or not np.issubdtype(counts.dtype, np.integer):
        raise _arg_error(kernel, f"masked_m must be an integer array of shape ({g},), got "
                         f"{counts.dtype}{list(counts.shape)}")
    # Any integer is defined: a count is clipped to [0, cap] (exactly, as objects).
    counts = np.clip(counts.astype(object), 0, cap).astype(np.int64)
    a = a.reshape(g * cap, k)
    if kernel.lhs.dtype in (DType.INT8, DType.INT4) and kernel.rhs.dtype in (DType.INT8, DType.INT4):
        a, b = a.astype(np.int64), b.astype(np.int64)
    ls = _decode_scale(kernel, "lhs", lhs_scale, m=cap, n=n, k=k, g=g)
    if ls is not None and ls.ndim >= 2:
        ls = ls.reshape((g * cap,) + ls.shape[2:])  # per-row scales follow the rows
    rs = _decode_scale(kernel, "rhs", rhs_scale, m=cap, n=n, k=k, g=g)
    bias_values = None
    if kernel.bias.mode is not BiasMode.NONE:
        if bias is None:
            raise _arg_error(kernel, "bias is required")
        bias_values = storage_to_float64(bias, kernel.bias.dtype)
        want = (n,) if kernel.bias.mode is BiasMode.N else (g, 1, n)
        if bias_values.shape != want:
            raise _arg_error(kernel, f"bias must have shape {want}, got {bias_values.shape}")
    elif bias is not None:
        raise _arg_error(kernel, "bias given but the kernel has no bias")
    return _Inputs(a=a, b=b, m=g * cap, n=n, k=k, g=g, starts=None, offset=0,
                   lhs_scale=ls, rhs_scale=rs, bias=bias_values, existing=None,
                   cap=cap, counts=counts)


def _check_static_dims(kernel: ir.Kernel, *, n: int | None, k: int) -> None:
    for dim, static, got in (("n", kernel.static_n, n), ("k", kernel.static_k, k)):
        if static is not None and got is not None and got != static:
            raise _arg_error(kernel, f"the spec fixes {dim} = {static}, got {dim} = {got}")


def _tgmm_local_groups(num_groups: int, offset: int, *, existing_out, rhs_scale) -> int:
    """tgmm's local group count: the leading dim of existing_out or of a
    per-group rhs_scale when given, else every group from group_offset on."""
    for array in (existing_out, rhs_scale):
        if array is not None and np.ndim(array) >= 1:
            return np.shape(array)[0]
    return num_groups - offset


def _out_shape(kernel: ir.Kernel, *, m: int, n: int, k: int, g: int | None) -> tuple[int, ...]:
    """The output shape (masked: m is the capacity)."""
    n_out = n // kernel.out_n_divisor
    if kernel.masked:
        return (g, m, n_out)
    return (g, k, n_out) if kernel.op is Op.TGMM else (m, n_out)


# ---------------------------------------------------------------------------
# Scales


@dataclass(frozen=True, slots=True)
class _Scales:
    """Decoded scales and the lookups the GEMM needs.

    lhs_* return [rows, 1] factors, rhs_* return [1, n] factors; `main`
    looks up the K block starting at k0, `epi` the epilogue factor.
    """

    kernel: ir.Kernel
    lhs: np.ndarray | None
    rhs: np.ndarray | None
    n: int
    k: int

    def absolute(self) -> _Scales:
        return self._map(np.abs)

    def squared(self) -> _Scales:
        return self._map(np.square)

    def ones(self) -> _Scales:
        """Unit scales: what a kernel sums before it applies the scales."""
        return self._map(np.ones_like)

    @property
    def enabled(self) -> bool:
        return self.lhs is not None or self.rhs is not None

    def _map(self, f) -> _Scales:
        lhs, rhs = (None if s is None else f(s) for s in (self.lhs, self.rhs))
        return _Scales(self.kernel, lhs, rhs, self.n, self.k)

    def k_blocks(self) -> list[tuple[int, int]]:
        """The K blocks of the main loop: the union of all scale block edges."""
        cuts = {0, self.k}
        for scale in (self.kernel.lhs_scale, self.kernel.rhs_scale):
            if scale.enabled and scale.placement is ir.Placement.MAINLOOP:
                cuts.update(range(0, self.k, scale.block_k or self.k))
        edges = sorted(cuts)
        return list(zip(edges[:-1], edges[1:]))

    def lhs_main(self, rows: slice, k0: int) -> np.ndarray | float:
        if self.kernel.lhs_scale.mode is ScaleMode.TOKEN_GROUP:
            return self.lhs[rows, k0 // (self.kernel.lhs_scale.block_k or self.k), None]
        return 1.0

    def lhs_epi(self, rows: slice) -> np.ndarray | float:
        match self.kernel.lhs_scale.mode:
            case ScaleMode.TENSOR:
                return float(self.lhs)
            case ScaleMode.TOKEN:
                return self.lhs[rows, None]
        return 1.0

    def rhs_main(self, group: int | None, k0: int) -> np.ndarray | float:
        scale = self.kernel.rhs_scale
        bk = scale.block_k or self.k
        match scale.mode:
            case ScaleMode.BLOCK:
                # [n / bn, k / bk], grouped [g, n / bn, k / bk]
                s = self.rhs if group is None else self.rhs[group]
                return np.repeat(s[:, k0 // bk], scale.block_n)[None, : self.n]
            case ScaleMode.KBLOCK:
                # [g, k / bk, 1, n]; a dense kernel has g = 1.
                return self.rhs[group or 0, k0 // bk, 0][None, :]
        return 1.0

    def rhs_epi(self, group: int | None) -> np.ndarray | float:
        match self.kernel.rhs_scale.mode:
            case ScaleMode.TENSOR:
                return float(self.rhs if group is None else self.rhs[group])
            case ScaleMode.CHANNEL:
                return (self.rhs if group is None else self.rhs[group])[None, :]
        return 1.0

    def lhs_elementwise(self, rows: slice) -> np.ndarray | float:
        """tgmm: the lhs scale of each element of lhs[rows] ([r, k] or less)."""
        match self.kernel.lhs_scale.mode:
            case ScaleMode.TOKEN_GROUP:
                bk = self.kernel.lhs_scale.block_k or self.k
                return np.repeat(self.lhs[rows], bk, axis=1)[:, : self.k]
        return self.lhs_epi(rows)


# ---------------------------------------------------------------------------
# Evaluation


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


def _accumulate(kernel: ir.Kernel, inp: _Inputs, a: np.ndarray, b: np.ndarray,
                scales: _Scales) -> np.ndarray:
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


def group_starts(sizes, m: int) -> np.ndarray:
    """int64 [len(sizes) + 1]: the row where each group starts, then the end.

    Any integers are defined (docs/semantics.md, "grouped"): a negative size
    counts as 0, and group j ends at row min(max(s_0, 0) + ... + max(s_j, 0), m),
    so groups past row m are empty and a group crossing m is cut there.
    Computed in exact integers (each size clipped to [0, m] first).
    """
    clipped = np.clip(np.asarray(sizes).astype(object), 0, m).astype(np.int64)
    return np.concatenate([[0], np.minimum(np.cumsum(clipped), m)]).astype(np.int64)


def _group_rows(inp: _Inputs, local: int) -> slice:
    """The rows of local group `local`; empty for a group group_sizes lacks
    (masked: the first counts[local] rows of its capacity)."""
    if inp.cap is not None:
        return slice(local * inp.cap, local * inp.cap + int(inp.counts[local]))
    gi = inp.offset + local
    if not 0 <= gi < len(inp.starts) - 1:
        return slice(0, 0)
    return slice(int(inp.starts[gi]), int(inp.starts[gi + 1]))


def _gemm_rows(a: np.ndarray, b: np.ndarray, scales: _Scales, rows: slice,
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
    return acc * scales.lhs_epi(rows) * scales.rhs_epi(group)


def _silu(x: np.ndarray) -> np.ndarray:
    # x * sigmoid(x), with sigmoid(x) = (1 + tanh(x / 2)) / 2: no overflow.
    return x * 0.5 * (1.0 + np.tanh(0.5 * x))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _activate(act: Activation, x: np.ndarray) -> np.ndarray:
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
            half = x.shape[-1] // 2
            return _silu(x[..., :half]) * x[..., half:]
        case _:
            assert_never(act)


def _evaluate(kernel: ir.Kernel, *, lhs=None, rhs=None, group_sizes=None, lhs_scale=None,
              rhs_scale=None, bias=None, group_offset=None, existing_out=None,
              masked_m=None, with_rss: bool = False, with_raw: bool = False) -> _Evaluation:
    inp = _decode(kernel, lhs=lhs, rhs=rhs, group_sizes=group_sizes, lhs_scale=lhs_scale,
                  rhs_scale=rhs_scale, bias=bias, group_offset=group_offset,
                  existing_out=existing_out, masked_m=masked_m)
    scales = _Scales(kernel, inp.lhs_scale, inp.rhs_scale, inp.n, inp.k)
    alpha = _alpha(kernel)
    acc = alpha * _accumulate(kernel, inp, inp.a, inp.b, scales)
    magnitude = abs(alpha) * _accumulate(kernel, inp, np.abs(inp.a), np.abs(inp.b),
                                         scales.absolute())
    rss = None
    if with_rss:
        rss = abs(alpha) * np.sqrt(_accumulate(kernel, inp, np.square(inp.a), np.square(inp.b),
                                               scales.squared()))
    raw = None
    # tgmm's scales sit on the contraction dim: kernels dequantize before the
    # product, so only alpha comes after the sum there.
    unscaled = scales.enabled and kernel.op is not Op.TGMM
    if with_raw and (unscaled or alpha != 1.0):
        raw = _accumulate(kernel, inp, np.abs(inp.a), np.abs(inp.b),
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
    y = _activate(kernel.epilogue.activation, pre)

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
              rhs_scale=None, bias=None, group_offset=None, existing_out=None, masked_m=None):
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

    Returns:
      float64 [m, n_out] (dense, grouped), [g, m, n_out] (masked) or
      [g, k, n_out] (tgmm); for
      quantize a tuple (x / scale before the fp8 cast [m, k], scale float64).
    """
    if kernel.op is Op.QUANTIZE:
        return _quantize(kernel, lhs)
    return _evaluate(kernel, lhs=lhs, rhs=rhs, group_sizes=group_sizes,
                     lhs_scale=lhs_scale, rhs_scale=rhs_scale, bias=bias,
                     group_offset=group_offset, existing_out=existing_out,
                     masked_m=masked_m).value


def reference_output(kernel: ir.Kernel, **arrays):
    """`reference` cast to the storage format of kernel.out (RNE, fp8 saturates).

    For quantize: (q [m, k] fp8, scale in the scale dtype, e8m0 as bytes).
    """
    if kernel.op is Op.QUANTIZE:
        pre, scale = reference(kernel, **arrays)
        return (saturating_cast(pre, kernel.out),
                float64_to_storage(scale, kernel.out_scale.dtype))
    return float64_to_storage(reference(kernel, **arrays), kernel.out)


def _quantize_groups(kernel: ir.Kernel, k: int) -> int:
    """G, the K extent of one scale (k for per-token; per-tensor handled apart)."""
    scale = kernel.out_scale
    if scale.mode not in QUANTIZE_SCALE_MODES:
        raise _arg_error(kernel, f"quantize needs a per_tensor / per_token / per_token_group "
                         f"out scale, got {scale.mode.value}")
    return (scale.block_k or k) if scale.mode is ScaleMode.TOKEN_GROUP else k


def _quantize(kernel: ir.Kernel, lhs) -> tuple[np.ndarray, np.ndarray]:
    x = storage_to_float64(lhs, kernel.lhs.dtype)
    if x.ndim != 2:
        raise _arg_error(kernel, f"lhs must be [m, k], got shape {x.shape}")
    if not kernel.out.is_fp8:
        raise _arg_error(kernel, f"quantize produces fp8, not {kernel.out.value}")
    m, k = x.shape
    _check_static_dims(kernel, n=None, k=k)
    scale = kernel.out_scale
    group = _quantize_groups(kernel, k)
    # (1) amax per group of G consecutive elements of a row (the last group
    #     may be partial); per-tensor is one group over everything.
    if scale.mode is ScaleMode.TENSOR:
        amax = np.abs(x).max(initial=0.0)
    else:
        amax = np.stack([np.abs(x[:, k0:k0 + group]).max(axis=1, initial=0.0)
                         for k0 in range(0, k, group)], axis=1)
    # (2) s = max(amax, floor) / fp8_max, exactly in float64 ...
    s = np.maximum(amax, AMAX_FLOOR) / kernel.out.max_finite
    # (3) ... then stored in the scale dtype: e8m0 rounds UP to a power of two
    #     so that no |x| / s exceeds fp8_max; f32 rounds to nearest (one
    #     correctly rounded f32 division amax / fp8_max gives exactly this).
    match scale.dtype:
        case DType.E8M0:
            s = e8m0_to_float(_e8m0_scale_bytes(amax, kernel.out.max_finite))
        case DType.F32:
            s = storage_to_float64(saturating_cast(s, scale.dtype), scale.dtype)
        case _:
            raise _arg_error(kernel, f"quantize scales are f32 or e8m0, not {scale.dtype.value}")
    # A group holding an infinity or a NaN has no meaningful scale: its scale
    # is NaN (e8m0 byte 255) and so is every q of the group (x / NaN).
    s = np.where(np.isfinite(amax), s, np.nan)
    if scale.mode is ScaleMode.TOKEN:
        s = s[:, 0]
        expanded = s[:, None]
    elif scale.mode is ScaleMode.TENSOR:
        s = np.asarray(s, np.float64).reshape(())
        expanded = s
    else:
        expanded = np.repeat(s, group, axis=1)[:, :k]
    # (4) q = sat(x / s): the caller's cast (reference_output) saturates.
    return x / expanded, s


def _e8m0_scale_bytes(amax: np.ndarray, fp8_max: float) -> np.ndarray:
    """e8m0 bytes of 2**ceil(log2(max(amax, floor) / fp8_max)), exactly.

    The float64 quotient is rounded; the exponent is then corrected with
    exact comparisons (multiplying by a power of two is exact), so an amax
    of exactly fp8_max * 2**e gives 2**e and one ulp more gives 2**(e+1).
    """
    amax = np.asarray(amax, np.float64)
    nonfinite = ~np.isfinite(amax)
    amax = np.maximum(np.where(nonfinite, 1.0, amax), AMAX_FLOOR)
    e = e8m0_round_up(amax / fp8_max).astype(np.int32) - 127
    # smallest e with amax <= fp8_max * 2**e
    e = np.where(amax > fp8_max * np.ldexp(1.0, e), e + 1, e)
    e = np.where(amax <= fp8_max * np.ldexp(1.0, e - 1), e - 1, e)
    return np.where(nonfinite, 255, np.clip(e, -127, 127) + 127).astype(np.uint8)


