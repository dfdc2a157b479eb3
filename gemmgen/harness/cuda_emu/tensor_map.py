"""Tensor-map kernel arguments (`TensorMap`): cuTensorMapEncodeTiled's
parameters over one of a launch's own buffers, encoded by whoever owns the
buffer (the emulator's child, or the GPU's context).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np



class TensorMapDataType(enum.IntEnum):
    """CUtensorMapDataType (cuda.h): the values cuTensorMapEncodeTiled takes."""

    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    INT32 = 3
    UINT64 = 4
    INT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT32_FTZ = 10
    TFLOAT32 = 11
    TFLOAT32_FTZ = 12
    U4X16_ALIGN8B = 13
    U4X16_ALIGN16B = 14
    U6X16_ALIGN16B = 15


class TensorMapSwizzle(enum.IntEnum):
    """CUtensorMapSwizzle: NONE, B32, B64, B128 are CU_TENSOR_MAP_SWIZZLE_{NONE,32B,64B,128B}."""

    NONE = 0
    B32 = 1
    B64 = 2
    B128 = 3
    B128_ATOM_32B = 4
    B128_ATOM_32B_FLIP_8B = 5
    B128_ATOM_64B = 6


class TensorMapInterleave(enum.IntEnum):
    """CUtensorMapInterleave: CU_TENSOR_MAP_INTERLEAVE_{NONE,16B,32B}."""

    NONE = 0
    B16 = 1
    B32 = 2


class TensorMapL2Promotion(enum.IntEnum):
    """CUtensorMapL2promotion: CU_TENSOR_MAP_L2_PROMOTION_{NONE,L2_64B,L2_128B,L2_256B}."""

    NONE = 0
    L2_64B = 1
    L2_128B = 2
    L2_256B = 3


class TensorMapOobFill(enum.IntEnum):
    """CUtensorMapFloatOOBfill: NONE fills out-of-bounds elements with zeros."""

    NONE = 0
    NAN_REQUEST_ZERO_FMA = 1


# The element size in bytes of each data type (the packed 4/6-bit types have none).
_ELEMENT_BYTES = {
    TensorMapDataType.UINT8: 1, TensorMapDataType.UINT16: 2, TensorMapDataType.UINT32: 4,
    TensorMapDataType.INT32: 4, TensorMapDataType.UINT64: 8, TensorMapDataType.INT64: 8,
    TensorMapDataType.FLOAT16: 2, TensorMapDataType.FLOAT32: 4, TensorMapDataType.FLOAT64: 8,
    TensorMapDataType.BFLOAT16: 2, TensorMapDataType.FLOAT32_FTZ: 4, TensorMapDataType.TFLOAT32: 4,
    TensorMapDataType.TFLOAT32_FTZ: 4,
}

# NumPy (and ml_dtypes) element types and the CUtensorMapDataType that moves
# them: the 8-bit floats and signed ints move as UINT8, 16-bit ints as UINT16.
_NUMPY_TO_MAP = {
    "uint8": TensorMapDataType.UINT8, "int8": TensorMapDataType.UINT8,
    "float8_e4m3fn": TensorMapDataType.UINT8, "float8_e5m2": TensorMapDataType.UINT8,
    "float8_e8m0fnu": TensorMapDataType.UINT8,
    "uint16": TensorMapDataType.UINT16, "int16": TensorMapDataType.UINT16,
    "uint32": TensorMapDataType.UINT32, "int32": TensorMapDataType.INT32,
    "uint64": TensorMapDataType.UINT64, "int64": TensorMapDataType.INT64,
    "float16": TensorMapDataType.FLOAT16, "float32": TensorMapDataType.FLOAT32,
    "float64": TensorMapDataType.FLOAT64, "bfloat16": TensorMapDataType.BFLOAT16,
}


def tensor_map_dtype(dtype: object) -> int:
    """The CUtensorMapDataType of `dtype`: a TensorMapDataType (or its int,
    passed through as is, so that the encoder judges it), or a NumPy dtype
    (``np.float32``, ``ml_dtypes.bfloat16``, ...)."""
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        return int(dtype)
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"tensor map dtype: {dtype!r} is neither a TensorMapDataType nor a NumPy dtype") from None
    if name not in _NUMPY_TO_MAP:
        raise TypeError(f"tensor map dtype: no CUtensorMapDataType moves NumPy {name}")
    return int(_NUMPY_TO_MAP[name])


def _ints(values: Iterable[object], what: str) -> tuple[int, ...]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"tensor map {what}: {v!r} is not an int")
        out.append(int(v))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class TensorMap:
    """A ``const __grid_constant__ CUtensorMap`` kernel argument over one of
    the launch's own device buffers: the parameters of cuTensorMapEncodeTiled,
    with `buffer` (the index of an array in the launch's ``args``, or in
    ``buffers`` counting on from ``len(args)``) plus `offset_bytes` in place of
    the global address, which only exists in the process that owns the
    buffer. Dimensions are innermost first, as the driver takes them:
    `global_dims` has `rank` sizes in elements, `global_strides_bytes` the
    byte strides of dimensions 1..rank-1 (rank - 1 of them), `box` the box
    size in elements, `element_strides` the traversal strides (default 1).
    The enums accept their ints, so that any value reaches the encoder, which
    checks them as the driver documents. ``TensorMap.of_array`` fills the
    dims and strides from a C-contiguous array. ``EmuModule.launch`` encodes
    it with the emulated encoder, ``cuda_gpu.GpuModule.launch`` with the
    driver's; both pass the 128 bytes by value."""

    buffer: int
    dtype: int
    global_dims: tuple[int, ...]
    global_strides_bytes: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...] | None = None
    swizzle: int = TensorMapSwizzle.NONE
    interleave: int = TensorMapInterleave.NONE
    l2_promotion: int = TensorMapL2Promotion.L2_256B
    oob_fill: int = TensorMapOobFill.NONE
    offset_bytes: int = 0

    def __post_init__(self) -> None:
        (buffer,) = _ints([self.buffer], "buffer")
        dims = _ints(self.global_dims, "global_dims")
        strides = _ints(self.global_strides_bytes, "global_strides_bytes")
        box = _ints(self.box, "box")
        rank = len(dims)
        estrides = (1,) * rank if self.element_strides is None else _ints(self.element_strides, "element_strides")
        if len(strides) != max(rank - 1, 0) or len(box) != rank or len(estrides) != rank:
            raise ValueError(
                f"tensor map of rank {rank} (global_dims {dims}): global_strides_bytes needs {max(rank - 1, 0)} "
                f"entries (dimensions 1..rank-1), box and element_strides {rank}; got {len(strides)}, "
                f"{len(box)}, {len(estrides)}"
            )
        enums = _ints([self.swizzle, self.interleave, self.l2_promotion, self.oob_fill], "enum")
        (offset,) = _ints([self.offset_bytes], "offset_bytes")
        # What the request's fields hold (u32, u64); the encoder judges the rest.
        for what, values, bits in (("buffer", [buffer], 32), ("global_dims", dims, 64),
                                   ("global_strides_bytes", strides, 64), ("box", box, 32),
                                   ("element_strides", estrides, 32), ("enum", enums, 32),
                                   ("offset_bytes", [offset], 64)):
            if any(not 0 <= v < 1 << bits for v in values):
                raise ValueError(f"tensor map {what} {values}: not an unsigned {bits}-bit value")
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "dtype", tensor_map_dtype(self.dtype))
        object.__setattr__(self, "global_dims", dims)
        object.__setattr__(self, "global_strides_bytes", strides)
        object.__setattr__(self, "box", box)
        object.__setattr__(self, "element_strides", estrides)
        object.__setattr__(self, "offset_bytes", offset)

    @classmethod
    def of_array(cls, buffer: int, array: np.ndarray, box: Sequence[int], **kwargs) -> TensorMap:
        """The map of a whole C-contiguous `array` (as the launch copies it):
        dims and strides from its shape, innermost first, and the data type
        from its dtype unless `dtype` is given. `box` is innermost first too,
        as cuTensorMapEncodeTiled takes it."""
        shape = tuple(int(d) for d in array.shape)
        item = array.dtype.itemsize
        strides, s = [], item
        for d in reversed(shape[1:]):
            s *= d
            strides.append(s)
        kwargs.setdefault("dtype", array.dtype)
        return cls(buffer, global_dims=tuple(reversed(shape)), global_strides_bytes=tuple(strides),
                   box=tuple(box), **kwargs)

    @property
    def rank(self) -> int:
        return len(self.global_dims)

    def element_bytes(self) -> int | None:
        """The size of one element, or None for a type the table does not size."""
        try:
            return _ELEMENT_BYTES.get(TensorMapDataType(self.dtype))
        except ValueError:
            return None

    def extent_bytes(self) -> int | None:
        """How many bytes from the offset the map reaches: every dimension at
        its last index, plus one element (None when the type has no size)."""
        eb = self.element_bytes()
        if eb is None or 0 in self.global_dims:
            return None
        strides = (eb, *self.global_strides_bytes)
        return eb + sum((d - 1) * s for d, s in zip(self.global_dims, strides))

    def describe(self) -> str:
        """The encoder's arguments, for messages."""
        def name(enum_type, value):
            try:
                return enum_type(value).name
            except ValueError:
                return str(value)

        return (f"dtype {name(TensorMapDataType, self.dtype)}, globalDim {list(self.global_dims)}, "
                f"globalStrides {list(self.global_strides_bytes)}, boxDim {list(self.box)}, "
                f"elementStrides {list(self.element_strides or ())}, "
                f"interleave {name(TensorMapInterleave, self.interleave)}, "
                f"swizzle {name(TensorMapSwizzle, self.swizzle)}, "
                f"l2Promotion {name(TensorMapL2Promotion, self.l2_promotion)}, "
                f"oobFill {name(TensorMapOobFill, self.oob_fill)}, offset {self.offset_bytes}")

    def payload(self) -> bytes:
        """The data of the request's tensor-map entry (gg_emu_launch.cc, run_request)."""
        rank = self.rank
        estrides = self.element_strides or (1,) * rank
        return b"".join([
            struct.pack("<7IQ", self.buffer, self.dtype, rank, self.interleave, self.swizzle, self.l2_promotion,
                        self.oob_fill, self.offset_bytes),
            struct.pack(f"<{rank}Q", *self.global_dims),
            struct.pack(f"<{len(self.global_strides_bytes)}Q", *self.global_strides_bytes),
            struct.pack(f"<{rank}I", *self.box),
            struct.pack(f"<{rank}I", *estrides),
        ])


def _describe_entry(value: object) -> str:
    if value is None:
        return "None (a null pointer)"
    if isinstance(value, TensorMap):
        return "a tensor map"
    if isinstance(value, np.generic):
        return f"a NumPy scalar ({value.dtype})"
    return f"a {type(value).__name__}"


def tensor_map_problem(kernel: str, entries: Sequence[object], index: int) -> str | None:
    """Why the TensorMap at `entries[index]` cannot be encoded for a launch
    whose arrays are `entries` (args, then buffers), or None: its buffer must
    be an array there."""
    tm = entries[index]
    assert isinstance(tm, TensorMap)
    if not 0 <= tm.buffer < len(entries):
        return (f"{kernel}: argument #{index} is a tensor map over entry #{tm.buffer}, but the launch has "
                f"{len(entries)} arguments and buffers")
    target = entries[tm.buffer]
    if not isinstance(target, np.ndarray):
        return (f"{kernel}: argument #{index} is a tensor map over entry #{tm.buffer}, which is "
                f"{_describe_entry(target)}, not an array")
    return None
