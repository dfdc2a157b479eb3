"""Does a kernel's output match the reference? The tolerance policy.

docs/semantics.md, "Tolerance", states the policy; `compare` applies it per
element, from the magnitudes of the actual terms when the inputs are given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gemmgen import ir
from gemmgen.ir import Activation, DType, Op, ScaleMode
from gemmgen.numerics import float64_to_storage, saturating_cast, spacing, storage_to_float64
from gemmgen.reference.quantize import quantize_groups, quantize_scale_storage
from gemmgen.reference.semantics import (
    _LIPSCHITZ,
    _evaluate,
    _Evaluation,
    _gate_scale,
    _silu,
    clamp_pair,
    pair,
)

F32_MAX = float(np.finfo(np.float32).max)
F32_MIN_NORMAL = float(np.finfo(np.float32).tiny)  # 2**-126


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far a correct kernel may be from the float64 reference.

    Per element, with t_i = alpha a_i b_i sa_i sb_i the c terms summed,
    S = sum |t_i| and Q = sqrt(sum t_i**2):

        |actual - expected| <= atol_factor * (sqrt(c) * acc_unit * S + 2 * input_unit * Q)
                               (propagated through the activation)
                               + rtol * |expected|  (+ rtol * |pre-activation|)
                               + ulp_out(|expected|) / 2

    The first term is Higham & Mary's probabilistic bound for a dot product
    (independent rounding errors: the error grows like sqrt(c), not c).
    acc_unit: unit roundoff of the f32 accumulation (2**-24).
    input_unit: rounding of the operands inside the MMA (TF32 for f32
        operands: 2**-10 covers round-to-nearest and truncation; 0 for
        bf16 / f16 / fp8 / int, whose products are exact in f32). Each
        term is then off by up to 2 * input_unit relative, independently.
    """

    atol_factor: float
    rtol: float
    input_unit: float = 0.0
    acc_unit: float = 2.0**-24


def tolerance(kernel: ir.Kernel) -> Tolerance:
    """The tolerance policy (docs/semantics.md, "Tolerance")."""
    if kernel.op is Op.QUANTIZE:
        return Tolerance(atol_factor=0.0, rtol=2.0**-20)
    input_unit = 2.0**-10 if DType.F32 in (kernel.lhs.dtype, kernel.rhs.dtype) else 0.0
    atol_factor = 4.0
    for scale in (kernel.lhs_scale, kernel.rhs_scale):
        if scale.enabled and scale.placement is ir.Placement.MAINLOOP:
            # Each K block adds a few f32 roundings (scale product, multiply, add).
            atol_factor += 2.0
    rtol = 2.0**-20  # f32 epilogue arithmetic: alpha, scales, bias, i32 -> f32
    if kernel.epilogue.activation in (Activation.SILU, Activation.GELU, Activation.SILU_MUL,
                                      Activation.SWIGLU_CLAMPED):
        rtol = 2.0**-17  # fast exp / tanh (CUDA __expf: a few ulp + 1.16 |x| ulp)
    return Tolerance(atol_factor=atol_factor, rtol=rtol, input_unit=input_unit)


@dataclass(frozen=True, slots=True, eq=False)
class CompareResult:
    """The verdict of `compare`. `allowed` is the per-element bound."""

    max_abs_err: float
    max_rel_err: float
    allowed: np.ndarray
    passed: bool
    detail: str

    def __bool__(self) -> bool:
        return self.passed


def _error_bound(kernel: ir.Kernel, ev: _Evaluation, tol: Tolerance) -> np.ndarray:
    """The per-element bound before the output rounding (see `Tolerance`)."""
    acc_err = tol.atol_factor * np.sqrt(ev.contraction) * tol.acc_unit * ev.magnitude
    if ev.rss is not None:
        acc_err = acc_err + tol.atol_factor * 2.0 * tol.input_unit * ev.rss
    pre_err = acc_err + tol.rtol * np.abs(ev.pre)
    act = kernel.epilogue.activation
    if act is Activation.SILU_MUL:
        x, y = pair(kernel.epilogue, ev.pre)
        ex, ey = pair(kernel.epilogue, pre_err)
        lip = _LIPSCHITZ[act]
        bound = lip * ex * np.abs(y) + np.abs(_silu(x)) * ey + lip * ex * ey
        bound += tol.rtol * np.abs(x * y)
    elif act is Activation.SWIGLU_CLAMPED:
        # The clamps are 1-Lipschitz; gate * sigmoid(a gate) has slope <= 1.1.
        ep = kernel.epilogue
        x, y = clamp_pair(ep, *pair(ep, ev.pre))
        ex, ey = pair(ep, pre_err)
        lip = _LIPSCHITZ[act]
        bound = lip * ex * np.abs(y + 1.0) + np.abs(_gate_scale(x, ep.alpha_gate)) * ey \
            + lip * ex * ey
        bound += tol.rtol * np.abs(x * (y + 1.0))
    else:
        bound = _LIPSCHITZ[act] * pre_err
        if act is not Activation.NONE:
            bound += tol.rtol * np.abs(ev.pre)
    bound = bound + tol.rtol * np.abs(ev.value)
    if kernel.op is Op.GROUPED:
        bound = np.where(ev.computed, bound, 0.0)  # copied rows are exact
    return bound


def _fallback_bound(kernel: ir.Kernel, expected: np.ndarray, tol: Tolerance,
                    k: int) -> np.ndarray:
    """A coarse bound from the expected values alone (no inputs given).

    For random-signed terms |C| ~ sqrt(k) * rms(t) = Q while S ~ k * mean|t|,
    so S ~ sqrt(k) * rms(C) and Q ~ rms(C); twice that (8x for silu_mul,
    whose output is a product of two accumulators) stands in for the
    per-element S and Q.
    """
    finite = expected[np.isfinite(expected) & (expected != 0)]
    rms = float(np.sqrt(np.mean(finite**2))) if finite.size else 0.0
    safety = 8.0 if kernel.epilogue.activation.paired else 2.0
    atol = tol.atol_factor * safety * rms * (k * tol.acc_unit + 2.0 * tol.input_unit)
    return atol + tol.rtol * np.abs(expected)


def compare(actual, expected, kernel: ir.Kernel, *, k: int, inputs: dict | None = None
            ) -> CompareResult:
    """Check a kernel's output against the reference.

    Args:
      actual: the kernel's output (any array convertible to float64, usually
        in the out storage dtype); quantize: the tuple (q, scale) in storage
        format.
      expected: `reference(...)` of the same inputs.
      kernel: the kernel.
      k: the contraction length (tgmm: the largest group size); used by the
        fallback bound only when `inputs` is not given.
      inputs: the keyword arrays given to `reference`; with them the bound
        is per element, from the magnitudes of the actual terms (preferred).

    NaN in `actual` never passes where `expected` is finite; an expected
    NaN needs a NaN; an expected value that overflows the out dtype needs
    the same infinity.
    """
    if kernel.op is Op.QUANTIZE:
        return _compare_quantized(actual, expected, kernel)
    act = np.asarray(actual).astype(np.float64)
    exp = np.asarray(expected, np.float64)
    if act.shape != exp.shape:
        return CompareResult(math.inf, math.inf, np.zeros(exp.shape), False,
                             f"shape {act.shape} != expected {exp.shape}")
    tol = tolerance(kernel)
    if inputs is not None:
        ev = _evaluate(kernel, **inputs, with_rss=tol.input_unit > 0, with_raw=True)
        bound = _error_bound(kernel, ev, tol)
    else:
        bound = _fallback_bound(kernel, exp, tol, k)
    # Kernels compute in f32, and TPUs (and XLA on the CPU) flush subnormal
    # results to zero: a value below the smallest normal f32 may come out 0.
    allowed = bound + 0.5 * spacing(np.abs(exp) + bound, kernel.out) + F32_MIN_NORMAL
    # Where the terms' magnitudes sum past the f32 range, an f32 accumulator
    # may overflow on the way (per-K-block partials of opposite signs give
    # inf - inf): any infinity or NaN is then as right as the float64 value.
    # Kernels sum the products before they apply scales and alpha, so the
    # unscaled sum counts too (a tiny scale does not save the accumulator).
    f32_overflow = None
    if inputs is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            f32_overflow = ~(ev.magnitude <= F32_MAX)
            if ev.raw_magnitude is not None:
                f32_overflow = f32_overflow | ~(ev.raw_magnitude <= F32_MAX)
            if kernel.epilogue.activation.paired:  # gate or up column
                gate, up = pair(kernel.epilogue, f32_overflow)
                f32_overflow = gate | up
            if kernel.op is Op.TGMM and ev.existing is not None:
                f32_overflow = f32_overflow | ~(np.abs(ev.existing) <= F32_MAX)
    return _verdict(act, exp, allowed, overflow_dtype=kernel.out, f32_overflow=f32_overflow)


def _verdict(act: np.ndarray, exp: np.ndarray, allowed: np.ndarray, *,
             overflow_dtype: DType, name: str = "out",
             f32_overflow: np.ndarray | None = None) -> CompareResult:
    """Element-wise |act - exp| <= allowed, with the NaN and overflow rules.

    f32_overflow: elements where f32 accumulation may overflow; any
    non-finite actual value passes there."""
    with np.errstate(invalid="ignore", over="ignore"):
        cast = storage_to_float64(saturating_cast(exp, overflow_dtype), overflow_dtype)
        err = np.abs(act - exp)
        rel = err / np.maximum(np.abs(exp), np.finfo(np.float64).tiny)
        ok = err <= allowed
    ok = np.where(np.isinf(cast), act == cast, ok)  # overflow: the same infinity
    ok = np.where(np.isnan(exp), np.isnan(act), ok & ~np.isnan(act))
    if f32_overflow is not None:
        ok = ok | (f32_overflow & ~np.isfinite(act))
    finite = np.isfinite(err)
    max_abs = float(err[finite].max(initial=0.0))
    max_rel = float(rel[finite].max(initial=0.0))
    if (np.isnan(act) & ~np.isnan(exp)).any():
        max_abs = max_rel = math.inf
    num_bad = int((~ok).sum())
    if num_bad == 0:
        detail = f"{name}: {act.size} elements within tolerance (max abs err {max_abs:.3g})"
        return CompareResult(max_abs, max_rel, allowed, True, detail)
    excess = np.where(ok, -np.inf, np.nan_to_num(err - allowed, nan=np.inf))
    worst = np.argsort(excess, axis=None)[::-1][:min(5, num_bad)]
    lines = [f"{name}: {num_bad} of {act.size} elements out of tolerance"]
    for flat in worst:
        i = np.unravel_index(flat, act.shape)
        lines.append(f"  at {[int(j) for j in i]}: actual {float(act[i])!r} expected "
                     f"{float(exp[i])!r} (|err| {err[i]:.3g} > allowed {allowed[i]:.3g})")
    return CompareResult(max_abs, max_rel, allowed, False, "\n".join(lines))


def _compare_quantized(actual, expected, kernel: ir.Kernel) -> CompareResult:
    """quantize: the scale must match exactly (e8m0 and ue4m3 bytes, and f32
    = RNE(amax / fp8_max)). With e8m0 or ue4m3 scales q must be bit for bit
    the reference's (x / scale is exact in f32 for a power of two, and the
    kernels round against exact e2m1 boundaries for ue4m3); with f32 scales
    q must be the RNE fp8 cast of x / scale, up to one tie flip (half an
    fp8 ulp plus 2**-20 relative for the kernel's f32 division); a NaN scale
    needs NaN q (fp8)."""
    q_act, s_act = actual
    pre, s_ref = expected
    sdt = kernel.out_scale.dtype
    if sdt is not DType.F32:
        return _compare_quantized_exactly(q_act, s_act, pre, s_ref, kernel)
    s = storage_to_float64(s_act, sdt)
    if s.shape != np.shape(s_ref):
        return CompareResult(math.inf, math.inf, np.zeros(np.shape(s_ref)), False,
                             f"scale shape {s.shape} != expected {np.shape(s_ref)}")
    s_allowed = np.zeros(s.shape)  # f32: the RNE quotient, exactly
    scale_result = _verdict(s, np.asarray(s_ref, np.float64), s_allowed,
                            overflow_dtype=DType.F32, name="scale")
    if not scale_result.passed:
        return scale_result
    q = storage_to_float64(q_act, kernel.out)
    if q.shape != pre.shape:
        return CompareResult(math.inf, math.inf, np.zeros(pre.shape), False,
                             f"q shape {q.shape} != expected {pre.shape}")
    group = quantize_groups(kernel, pre.shape[1])
    if kernel.out_scale.mode is ScaleMode.TOKEN_GROUP:
        ratio = np.repeat(s_ref / s, group, axis=1)[:, : pre.shape[1]]
    else:
        ratio = (s_ref / s)[..., None] if np.ndim(s) else s_ref / s
    big = kernel.out.max_finite
    v = np.clip(pre * ratio, -big, big)  # x / s_act, saturated
    allowed = 0.5 * spacing(v, kernel.out) + tolerance(kernel).rtol * np.abs(v)
    return _verdict(q, v, allowed, overflow_dtype=kernel.out, name="q")




def _compare_quantized_exactly(q_act, s_act, pre, s_ref, kernel: ir.Kernel) -> CompareResult:
    """quantize with e8m0 or ue4m3 scales: scale bytes and q bits equal to
    the reference's (any NaN code where the reference's q is NaN)."""
    checks = (("scale", np.asarray(s_act), quantize_scale_storage(kernel, np.asarray(s_ref)),
               kernel.out_scale.dtype),
              ("q", np.asarray(q_act), float64_to_storage(pre, kernel.out), kernel.out))
    for name, act, want, dtype in checks:
        if act.shape != want.shape or act.dtype != want.dtype:
            return CompareResult(math.inf, math.inf, np.zeros(want.shape), False,
                                 f"{name}: {act.dtype} {list(act.shape)} != expected "
                                 f"{want.dtype} {list(want.shape)}")
        a, w = act.view(np.uint8), want.view(np.uint8)
        same = a == w
        if dtype.is_fp8:
            with np.errstate(invalid="ignore"):
                same |= np.isnan(act.astype(np.float64)) & np.isnan(want.astype(np.float64))
        if not same.all():
            bad = np.argwhere(~same)
            head = (f"{name}: {len(bad)} of {a.size} bytes differ from the reference's "
                    "(bit for bit expected)")
            lines = [head]
            for where in bad[:5]:
                i = tuple(int(j) for j in where)
                lines.append(f"  at {list(i)}: actual 0x{int(a[i]):02X} expected 0x{int(w[i]):02X}")
            return CompareResult(math.inf, math.inf, np.zeros(want.shape), False, "\n".join(lines))
    return CompareResult(0.0, 0.0, np.zeros(np.shape(pre)), True,
                         f"q and scale: {np.size(pre)} values and {np.size(s_act)} scales "
                         "bit for bit the reference's")
