"""Decoding and checking a kernel's arguments for the reference: arrays in
their storage format -> `Inputs` (float64, or int64 for integer x integer),
every shape, mode and dim the kernel fixes checked, each problem a
ValueError naming the kernel. `group_starts` says where each group's rows
start (docs/semantics.md, "grouped")."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import assert_never

import numpy as np

from gemmgen import ir
from gemmgen.ir import Activation, BiasMode, DType, Op, ScaleMode
from gemmgen.numerics import storage_to_float64
from gemmgen.reference.blockscale import atoms_to_rows

LHS_SCALE_MODES, RHS_SCALE_MODES = ir.LHS_SCALE_MODES, ir.RHS_SCALE_MODES


@dataclass(frozen=True, slots=True)
class Inputs:
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
    # The `global=f32` scales (NVFP4), float64 [] (dense) or [g]; None without.
    lhs_global: np.ndarray | None = None
    rhs_global: np.ndarray | None = None
    # Asymmetric weights (`zero=uint4`): b holds q - z; b_magnitude |q| + |z|,
    # the terms a kernel may sum instead (x . q - (sum x) z), for the
    # tolerance. None without zero points (|b|).
    b_magnitude: np.ndarray | None = None


def arg_error(kernel: ir.Kernel, message: str) -> ValueError:
    return ValueError(f"{kernel.name}: {message}")


def _decode_scale(kernel: ir.Kernel, side: str, array, *, m: int, n: int, k: int,
                  g: int | None) -> np.ndarray | None:
    scale: ir.Scale = getattr(kernel, f"{side}_scale")
    allowed = LHS_SCALE_MODES if side == "lhs" else RHS_SCALE_MODES
    if scale.mode not in allowed:
        raise arg_error(kernel, f"{side}_scale mode {scale.mode.value} does not apply to {side}")
    if not scale.enabled:
        if array is not None:
            raise arg_error(kernel, f"{side}_scale given but the kernel has no {side} scale")
        return None
    if array is None:
        raise arg_error(kernel, f"{side}_scale ({scale.mode.value}) is required")
    want = ir.scale_shape(scale, side=side, m=m, n=n, k=k, g=g, masked=kernel.masked)
    if np.shape(array) != want:
        raise arg_error(kernel, f"{side}_scale must have shape {want}, got {np.shape(array)}")
    if scale.layout is ir.ScaleLayout.ATOM128X4:
        # Only the bytes of real scales are decoded: padding may hold anything.
        rows_shape = ir.scale_shape(replace(scale, layout=ir.ScaleLayout.ROWS), side=side, m=m,
                                    n=n, k=k, g=g, masked=kernel.masked)
        array = atoms_to_rows(np.asarray(array), *rows_shape[-2:])
    try:
        return storage_to_float64(array, scale.dtype)
    except ValueError as e:
        raise arg_error(kernel, f"{side}_scale: {e}") from None


def _decode_global(kernel: ir.Kernel, side: str, array, g: int | None) -> np.ndarray | None:
    """A `global=f32` scale: f32 [] (dense) or [g] (grouped, masked)."""
    scale: ir.Scale = getattr(kernel, f"{side}_scale")
    name = f"{side}_global_scale"
    if not scale.global_scale:
        if array is not None:
            raise arg_error(kernel, f"{name} given but {side}_scale has no 'global=f32'")
        return None
    if array is None:
        raise arg_error(kernel, f"{name} (the f32 global scale of {side}_scale) is required")
    want = ir.global_scale_shape(g=g)
    if np.shape(array) != want:
        raise arg_error(kernel, f"{name} must have shape {want}, got {np.shape(array)}")
    return storage_to_float64(array, DType.F32)


def _decode_zero(kernel: ir.Kernel, array, *, n: int, k: int, g: int | None) -> np.ndarray | None:
    """The zero points of `zero=uint4` (packed two per byte along the
    scale's last dim, ir.zero_shape), spread over the elements they apply
    to: float64 [k, n] (dense) or [g, k, n]."""
    scale = kernel.rhs_scale
    if scale.zero is None:
        if array is not None:
            raise arg_error(kernel, "rhs_zero given but rhs_scale has no 'zero='")
        return None
    if array is None:
        raise arg_error(kernel, f"rhs_zero (the {scale.zero.value} zero points of rhs_scale) "
                        "is required")
    want = ir.zero_shape(scale, n=n, k=k, g=g)
    if np.shape(array) != want:
        raise arg_error(kernel, f"rhs_zero must have shape {want}, got {np.shape(array)}")
    try:
        z = storage_to_float64(array, scale.zero)
    except ValueError as e:
        raise arg_error(kernel, f"rhs_zero: {e}") from None
    last = ir.scale_shape(scale, side="rhs", m=0, n=n, k=k, g=g)[-1]
    z = z[..., :last]
    bk = scale.block_k or k
    if scale.mode is ScaleMode.KBLOCK:  # [g, kb, 1, n]
        z = np.repeat(z[:, :, 0, :], bk, axis=1)[:, :k, :]
        return z if kernel.grouped else z[0]
    # block n=BN k=BK: [(g,) nb, kb] -> [(g,) k, n]
    z = np.repeat(np.repeat(z, scale.block_n, axis=-2), bk, axis=-1)[..., :n, :k]
    return np.swapaxes(z, -1, -2)


def decode(kernel: ir.Kernel, *, lhs=None, rhs=None, group_sizes=None, lhs_scale=None,
           rhs_scale=None, bias=None, group_offset=None, existing_out=None,
           masked_m=None, lhs_global_scale=None, rhs_global_scale=None,
           rhs_zero=None) -> Inputs:
    inp = _decode_arrays(kernel, lhs=lhs, rhs=rhs, group_sizes=group_sizes, lhs_scale=lhs_scale,
                         rhs_scale=rhs_scale, bias=bias, group_offset=group_offset,
                         existing_out=existing_out, masked_m=masked_m)
    inp = replace(inp, lhs_global=_decode_global(kernel, "lhs", lhs_global_scale, inp.g),
                  rhs_global=_decode_global(kernel, "rhs", rhs_global_scale, inp.g))
    z = _decode_zero(kernel, rhs_zero, n=inp.n, k=inp.k, g=inp.g)
    if z is None:
        return inp
    return replace(inp, b=inp.b - z, b_magnitude=np.abs(inp.b) + z)


def _decode_arrays(kernel: ir.Kernel, *, lhs, rhs, group_sizes, lhs_scale, rhs_scale, bias,
                   group_offset, existing_out, masked_m) -> Inputs:
    if lhs is None or rhs is None:
        raise arg_error(kernel, "lhs and rhs are required")
    if kernel.masked:
        return _decode_masked(kernel, lhs=lhs, rhs=rhs, masked_m=masked_m,
                              lhs_scale=lhs_scale, rhs_scale=rhs_scale, bias=bias,
                              group_sizes=group_sizes, group_offset=group_offset,
                              existing_out=existing_out)
    if masked_m is not None:
        raise arg_error(kernel, "masked_m is for the masked grouped layout (lhs [g, m, k])")
    a = storage_to_float64(lhs, kernel.lhs.dtype)
    b = storage_to_float64(rhs, kernel.rhs.dtype)
    if a.ndim != 2:
        raise arg_error(kernel, f"lhs must be [m, k], got shape {a.shape}")
    m, k = a.shape
    rhs_grouped = kernel.op is Op.GROUPED  # rhs [g, ., .]
    match kernel.op:
        case Op.DENSE | Op.GROUPED:
            if b.ndim != (3 if rhs_grouped else 2):
                raise arg_error(kernel, f"rhs has {b.ndim} dims, expected {3 if rhs_grouped else 2}")
            if kernel.rhs.layout is ir.Layout.NK:
                b = np.swapaxes(b, -1, -2)
            if b.shape[-2] != k:
                raise arg_error(kernel, f"rhs has k = {b.shape[-2]}, lhs has k = {k}")
            n = b.shape[-1]
        case Op.TGMM:
            # NB: tgmm's rhs is the [m, n] gradient; rhs.layout does not apply.
            if b.ndim != 2 or b.shape[0] != m:
                raise arg_error(kernel, f"tgmm rhs must be [m={m}, n], got shape {b.shape}")
            n = b.shape[1]
        case Op.QUANTIZE:
            raise AssertionError("quantize is decoded by quantize")
        case _:
            assert_never(kernel.op)
    check_static_dims(kernel, n=n, k=k)
    if kernel.out_n_divisor == 2 and n % 2:
        raise arg_error(kernel, f"{kernel.epilogue.activation.value} needs an even n, got {n}")
    if kernel.lhs.dtype in (DType.INT8, DType.INT4) and kernel.rhs.dtype in (DType.INT8, DType.INT4):
        # Integer x integer accumulates exactly (i32 in the kernel, int64 here).
        a, b = a.astype(np.int64), b.astype(np.int64)

    g = None
    starts = None
    offset = 0
    if kernel.grouped:
        if group_sizes is None:
            raise arg_error(kernel, "group_sizes is required")
        sizes = np.asarray(group_sizes)
        if sizes.ndim != 1 or not np.issubdtype(sizes.dtype, np.integer):
            raise arg_error(kernel, f"group_sizes must be a 1-d integer array, got {sizes.dtype}{list(sizes.shape)}")
        starts = group_starts(sizes, m)
        offset = 0 if group_offset is None else int(np.asarray(group_offset).reshape(()))
        g = b.shape[0] if rhs_grouped else _tgmm_local_groups(
            len(sizes), offset, existing_out=existing_out, rhs_scale=rhs_scale)
        if g < 0:
            raise arg_error(kernel, f"group_offset {offset} is past the {len(sizes)} groups of "
                            "group_sizes, so tgmm has no local groups (give existing_out)")
    elif group_sizes is not None or group_offset is not None or existing_out is not None:
        raise arg_error(kernel, "group_sizes / group_offset / existing_out are for grouped ops")

    ls = _decode_scale(kernel, "lhs", lhs_scale, m=m, n=n, k=k, g=g)
    rs = _decode_scale(kernel, "rhs", rhs_scale, m=m, n=n, k=k, g=g)
    if kernel.op is Op.TGMM and kernel.rhs_scale.mode in (ScaleMode.BLOCK, ScaleMode.KBLOCK):
        raise arg_error(kernel, "tgmm has no K blocks of rhs: block / kblock scales do not apply")

    bias_values = None
    match kernel.bias.mode:
        case BiasMode.NONE:
            if bias is not None:
                raise arg_error(kernel, "bias given but the kernel has no bias")
        case BiasMode.N | BiasMode.GROUP:
            if kernel.op is Op.TGMM:
                raise arg_error(kernel, "tgmm has no bias")
            if bias is None:
                raise arg_error(kernel, "bias is required")
            bias_values = storage_to_float64(bias, kernel.bias.dtype)
            want = (n,) if kernel.bias.mode is BiasMode.N else (g, 1, n)
            if kernel.bias.mode is BiasMode.GROUP and not rhs_grouped:
                raise arg_error(kernel, "a per-group bias needs a grouped op")
            if bias_values.shape != want:
                raise arg_error(kernel, f"bias must have shape {want}, got {bias_values.shape}")
        case _:
            assert_never(kernel.bias.mode)

    existing = None
    if existing_out is not None:
        existing = storage_to_float64(existing_out, kernel.out)
        want = out_shape(kernel, m=m, n=n, k=k, g=g)
        if existing.shape != want:
            raise arg_error(kernel, f"existing_out must have shape {want}, got {existing.shape}")
    if kernel.op is Op.TGMM and kernel.epilogue.activation is not Activation.NONE:
        raise arg_error(kernel, "tgmm has no activation")
    return Inputs(a=a, b=b, m=m, n=n, k=k, g=g, starts=starts, offset=offset,
                  lhs_scale=ls, rhs_scale=rs, bias=bias_values, existing=existing)


def _decode_masked(kernel: ir.Kernel, *, lhs, rhs, masked_m, lhs_scale, rhs_scale, bias,
                   group_sizes, group_offset, existing_out) -> Inputs:
    """The masked layout: lhs [g, cap, k], masked_m [g]; decoded as a
    [g * cap, k] lhs whose group i owns rows [i * cap, i * cap + counts[i])."""
    if group_sizes is not None or group_offset is not None or existing_out is not None:
        raise arg_error(kernel, "the masked layout takes masked_m, not group_sizes / "
                        "group_offset / existing_out")
    if masked_m is None:
        raise arg_error(kernel, "masked_m is required")
    a = storage_to_float64(lhs, kernel.lhs.dtype)
    b = storage_to_float64(rhs, kernel.rhs.dtype)
    if a.ndim != 3:
        raise arg_error(kernel, f"lhs must be [g, m, k], got shape {a.shape}")
    if b.ndim != 3:
        raise arg_error(kernel, f"rhs has {b.ndim} dims, expected 3")
    g, cap, k = a.shape
    if kernel.rhs.layout is ir.Layout.NK:
        b = np.swapaxes(b, -1, -2)
    if b.shape[0] != g:
        raise arg_error(kernel, f"rhs has g = {b.shape[0]}, lhs has g = {g}")
    if b.shape[1] != k:
        raise arg_error(kernel, f"rhs has k = {b.shape[1]}, lhs has k = {k}")
    n = b.shape[2]
    check_static_dims(kernel, n=n, k=k)
    if kernel.out_n_divisor == 2 and n % 2:
        raise arg_error(kernel, f"{kernel.epilogue.activation.value} needs an even n, got {n}")
    counts = np.asarray(masked_m)
    if counts.shape != (g,) or not np.issubdtype(counts.dtype, np.integer):
        raise arg_error(kernel, f"masked_m must be an integer array of shape ({g},), got "
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
            raise arg_error(kernel, "bias is required")
        bias_values = storage_to_float64(bias, kernel.bias.dtype)
        want = (n,) if kernel.bias.mode is BiasMode.N else (g, 1, n)
        if bias_values.shape != want:
            raise arg_error(kernel, f"bias must have shape {want}, got {bias_values.shape}")
    elif bias is not None:
        raise arg_error(kernel, "bias given but the kernel has no bias")
    return Inputs(a=a, b=b, m=g * cap, n=n, k=k, g=g, starts=None, offset=0,
                  lhs_scale=ls, rhs_scale=rs, bias=bias_values, existing=None,
                  cap=cap, counts=counts)


def check_static_dims(kernel: ir.Kernel, *, n: int | None, k: int) -> None:
    for dim, static, got in (("n", kernel.static_n, n), ("k", kernel.static_k, k)):
        if static is not None and got is not None and got != static:
            raise arg_error(kernel, f"the spec fixes {dim} = {static}, got {dim} = {got}")


def _tgmm_local_groups(num_groups: int, offset: int, *, existing_out, rhs_scale) -> int:
    """tgmm's local group count: the leading dim of existing_out or of a
    per-group rhs_scale when given, else every group from group_offset on."""
    for array in (existing_out, rhs_scale):
        if array is not None and np.ndim(array) >= 1:
            return np.shape(array)[0]
    return num_groups - offset


def out_shape(kernel: ir.Kernel, *, m: int, n: int, k: int, g: int | None) -> tuple[int, ...]:
    """The output shape (masked: m is the capacity)."""
    n_out = n // kernel.out_n_divisor
    if kernel.masked:
        return (g, m, n_out)
    return (g, k, n_out) if kernel.op is Op.TGMM else (m, n_out)


def group_starts(sizes, m: int) -> np.ndarray:
    """int64 [len(sizes) + 1]: the row where each group starts, then the end.

    Any integers are defined (docs/semantics.md, "grouped"): a negative size
    counts as 0, and group j ends at row min(max(s_0, 0) + ... + max(s_j, 0), m),
    so groups past row m are empty and a group crossing m is cut there.
    Computed in exact integers (each size clipped to [0, m] first).
    """
    clipped = np.clip(np.asarray(sizes).astype(object), 0, m).astype(np.int64)
    return np.concatenate([[0], np.minimum(np.cumsum(clipped), m)]).astype(np.int64)
