"""Dtypes as the Pallas kernels hold them: jnp names, storage bytes, the MXU dtype."""

from __future__ import annotations

import dataclasses
import struct

from gemmgen import ir
from gemmgen.ir import DType


def jnp_name(dt: DType) -> str:
    """The `jnp.<name>` of the array that holds `dt` in memory (ir's table)."""
    return dt.storage_numpy_name


def held(dt: DType) -> DType:
    """The dtype a kernel body holds `dt` in: f16 as f32, the rest as stored.

    Mosaic has no f16 vectors on the TPUs gemmgen targets: a v5e refuses an
    f16 block ("Invalid vector type for load", "failed to legalize
    'tpu.pack_subelements' ... vector<8x128x2xf16>"). The generated function
    widens every f16 array to f32 in XLA before the kernel (exact) and casts
    an f16 result back after it (one rounding from the f32 accumulator, as
    the kernel's own cast would be). f16 products are f32 at HIGHEST
    precision anyway (`mxu_dtype`), so only the HBM copy costs: docs/pallas.md,
    "f16 on a TPU".
    """
    return DType.F32 if dt is DType.F16 else dt


def held_kernel(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` as its Pallas body sees it: every f16 array `held` as f32."""
    rhs = kernel.rhs
    return dataclasses.replace(
        kernel,
        lhs=dataclasses.replace(kernel.lhs, dtype=held(kernel.lhs.dtype)),
        rhs=None if rhs is None else dataclasses.replace(rhs, dtype=held(rhs.dtype)),
        out=held(kernel.out),
        bias=dataclasses.replace(kernel.bias, dtype=held(kernel.bias.dtype)),
    )


def storage_bytes(dt: DType) -> int:
    """Bytes per element as the kernel holds it (packed sub-byte types: one
    byte per pair; f16 as f32, `held`)."""
    dt = held(dt)
    return 1 if dt.bits <= 8 else dt.bits // 8


# Significant bits of each operand's values (integers: of their largest
# magnitude) and of a scale's: a product of the two needs at most their sum.
_SIGNIFICANT_BITS = {
    DType.F32: 24, DType.BF16: 8, DType.F16: 11, DType.E4M3: 4, DType.E5M2: 3,
    DType.INT8: 8, DType.INT4: 3, DType.UINT4: 4, DType.FP4: 2, DType.E8M0: 0, DType.UE4M3: 4,
}


FP8 = (DType.E4M3, DType.E5M2)


def mxu_dtype(lhs: DType, rhs: DType, *, lhs_scale: DType | None = None,
              rhs_scale: DType | None = None, fp8: bool = False) -> DType:
    """The dtype both operands are converted to for the MXU.

    int8/int4 x int8/int4 multiply as int8 (int32 products); an f32 or f16
    operand makes the product f32 at HIGHEST precision (TPUs have no f16
    MXU path, and bf16 would round f16 inputs); everything else (bf16, fp8,
    int8 or 4-bit against a float) converts exactly to bf16.

    lhs_scale / rhs_scale: the dtype of a scale the kernel multiplies into
    that operand in VMEM (several scale blocks per K tile). The scaled
    values must stay exact, so the MXU takes bf16 only when each operand's
    significant bits plus its scale's fit bf16's 8 (e4m3 x ue4m3, fp4 x
    ue4m3, anything x an e8m0 power of two), else f32; never int8.

    fp8: the chip's MXU multiplies FP8 (`tpu.FP8_MXU`, TPU v7x). Two FP8
    operands then reach it as they are, e4m3 x e5m2 too, with f32 products
    (the result is lhs's FP8 type; `cast` leaves either FP8 operand alone).
    Not when a scale applies inside the K tile (MXFP8): the scaled values
    need not be FP8 numbers, so they take bf16 as on every TPU
    (docs/decisions.md, "FP8 on the v7x MXU"). FP8 against any other type
    widens as on every TPU (the v7x MXU has no FP8 x bf16 form).
    """
    if fp8 and lhs in FP8 and rhs in FP8 and lhs_scale is None and rhs_scale is None:
        return lhs
    if lhs_scale is not None or rhs_scale is not None:
        wide = any(_SIGNIFICANT_BITS[op] + (_SIGNIFICANT_BITS[sc] if sc else 0) > 8
                   for op, sc in ((lhs, lhs_scale), (rhs, rhs_scale)))
        return DType.F32 if wide else DType.BF16
    if not lhs.is_float and not rhs.is_float:
        return DType.INT8
    if DType.F32 in (lhs, rhs) or DType.F16 in (lhs, rhs):
        return DType.F32
    return DType.BF16


def packed(op: ir.Operand) -> DType | None:
    """The 4-bit dtype of an operand stored two per byte, else None."""
    return op.dtype if op.packed else None


def cast(operand: DType, mxu: DType) -> DType | None:
    """The dtype a loaded block converts to before the dot (None: none)."""
    if operand.is_sub_byte:
        return None  # unpacked straight into the MXU dtype
    if operand in FP8 and mxu in FP8:
        return None  # an FP8 MXU takes e4m3 and e5m2 alike
    return None if operand is mxu else mxu


def f32(x: float | None) -> float | None:
    """The spec's constant rounded to f32, as every backend holds it."""
    if x is None:
        return None
    return struct.unpack("f", struct.pack("f", x))[0]
