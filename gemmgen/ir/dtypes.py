"""Number formats: the element types (`DType`) with their width, NumPy name
and largest finite value, and which of them each role admits (operands,
outputs, scales, bias). The tables `_BITS`, `_NUMPY_NAME` and `_MAX_FINITE`
are the one place a dtype's facts live (docs/architecture.md, "How to add
a dtype")."""

from __future__ import annotations

import enum
import math


class DType(enum.Enum):
    """Element types. The value is the canonical spelling in a spec."""

    F32 = "f32"
    BF16 = "bf16"
    F16 = "f16"
    E4M3 = "e4m3"  # float8_e4m3fn: no infinity, max 448
    E5M2 = "e5m2"  # float8_e5m2: max 57344
    INT8 = "int8"
    INT4 = "int4"  # stored packed, two per uint8 (low nibble = even element)
    UINT4 = "uint4"  # unsigned 0..15, stored packed like int4 (GPTQ / AWQ weights)
    FP4 = "fp4"  # float4_e2m1fn, stored packed like int4
    E8M0 = "e8m0"  # scale-only: byte e means 2**(e - 127)
    UE4M3 = "ue4m3"  # scale-only: unsigned e4m3 byte 0x00..0x7E, 0x7F NaN (NVFP4)
    INT32 = "int32"  # accumulator of int8 x int8

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def is_float(self) -> bool:
        return self not in (DType.INT8, DType.INT4, DType.UINT4, DType.INT32)

    @property
    def is_fp8(self) -> bool:
        return self in (DType.E4M3, DType.E5M2)

    @property
    def is_sub_byte(self) -> bool:
        return self.bits < 8

    @property
    def is_quantized(self) -> bool:
        """8 bits or fewer: an operand that usually comes with scales."""
        return self.bits <= 8

    @property
    def numpy_name(self) -> str:
        """The `ml_dtypes` / NumPy name of the unpacked element type."""
        return _NUMPY_NAME[self]

    @property
    def storage_numpy_name(self) -> str:
        """The NumPy dtype of an array holding this type in memory.

        Sub-byte types are stored packed two per byte in uint8; e8m0 and
        ue4m3 scales are stored as their raw byte.
        """
        if self.is_sub_byte or self in (DType.E8M0, DType.UE4M3):
            return "uint8"
        return self.numpy_name

    @property
    def max_finite(self) -> float:
        return _MAX_FINITE[self]

    @property
    def emax(self) -> int:
        """The exponent of the largest power of two <= max_finite: OCP MX
        v1.0's emax_elem for the element formats (e4m3 8, e5m2 15, fp4 2)."""
        return math.frexp(self.max_finite)[1] - 1


_BITS = {
    DType.F32: 32, DType.BF16: 16, DType.F16: 16, DType.E4M3: 8,
    DType.E5M2: 8, DType.INT8: 8, DType.INT4: 4, DType.UINT4: 4, DType.FP4: 4,
    DType.E8M0: 8, DType.UE4M3: 8, DType.INT32: 32,
}
_NUMPY_NAME = {
    DType.F32: "float32", DType.BF16: "bfloat16", DType.F16: "float16",
    DType.E4M3: "float8_e4m3fn", DType.E5M2: "float8_e5m2",
    DType.INT8: "int8", DType.INT4: "int4", DType.UINT4: "uint4", DType.FP4: "float4_e2m1fn",
    DType.E8M0: "float8_e8m0fnu", DType.UE4M3: "float8_e4m3fn", DType.INT32: "int32",
}
_MAX_FINITE = {
    DType.F32: 3.4028234663852886e38, DType.BF16: 3.3895313892515355e38,
    DType.F16: 65504.0, DType.E4M3: 448.0, DType.E5M2: 57344.0,
    DType.INT8: 127.0, DType.INT4: 7.0, DType.UINT4: 15.0, DType.FP4: 6.0,
    DType.E8M0: 2.0**127, DType.UE4M3: 448.0, DType.INT32: 2147483647.0,
}

OPERAND_DTYPES = (
    DType.F32, DType.BF16, DType.F16, DType.E4M3, DType.E5M2, DType.INT8,
    DType.INT4, DType.UINT4, DType.FP4,
)
OUTPUT_DTYPES = (DType.F32, DType.BF16, DType.F16)
QUANTIZED_OUTPUT_DTYPES = (DType.E4M3, DType.E5M2, DType.FP4)  # op quantize (fp4 packed)
SCALE_DTYPES = (DType.F32, DType.BF16, DType.E8M0, DType.UE4M3)
# The block-scale bytes of the MX and NV formats (OCP MX v1.0, NVFP4): their
# scales are per K block of one row (lhs per_token_group, rhs block n=1).
MX_SCALE_DTYPES = (DType.E8M0, DType.UE4M3)
BIAS_DTYPES = (DType.F32, DType.BF16, DType.F16)
# The zero points of asymmetric 4-bit weights (`rhs_scale ... zero=uint4`):
# GPTQ / AWQ integers 0..15, packed two per byte like the weights.
ZERO_DTYPES = (DType.UINT4,)
