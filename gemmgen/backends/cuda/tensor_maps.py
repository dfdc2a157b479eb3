"""Launch-step arguments: arrays, scalar expressions and tensor maps.

A launch step (steps.py) passes each entry point parameter as a `StepArg`:
an array of the call by name, a scalar expression over the dims, or a tiled
tensor map over an array (`TensorMapSpec`, cuTensorMapEncodeTiled's
arguments), which every launcher (C++, CuPy, Rust) encodes before the launch.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from gemmgen.backends.cuda.expr import Call, Expr, Fn, expr, exprs
from gemmgen.backends.cuda.layout import COLUMNS, cpp_call, py_call, py_tuple

__all__ = [
    "TENSOR_MAP_DTYPES", "TENSOR_MAP_SWIZZLES", "ArgKind", "StepArg", "TensorMapSpec", "array",
    "i32", "i64", "tensor_map",
]

class ArgKind(enum.Enum):
    ARRAY = "array"
    VALUE = "value"
    TENSOR_MAP = "tensor_map"


# CUtensorMapDataType (cuda.h) of the types a tensor map carries, and their
# element size in bytes: the 16-bit ones, and FP8 as raw bytes (cuda.h has
# no FP8 type on sm_90a; the bytes reach wgmma unchanged), and "uint8" for
# any other raw bytes (int8 or packed int4 weights viewed as bytes).
TENSOR_MAP_DTYPES = {"bfloat16": ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 9, 2),
                     "float16": ("CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 6, 2),
                     "float8_e4m3fn": ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 0, 1),
                     "float8_e5m2": ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 0, 1),
                     "uint8": ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 0, 1)}

# CUtensorMapSwizzle (cuda.h) of each swizzle span in bytes (0: none).
TENSOR_MAP_SWIZZLES = {0: ("CU_TENSOR_MAP_SWIZZLE_NONE", 0),
                       32: ("CU_TENSOR_MAP_SWIZZLE_32B", 1),
                       64: ("CU_TENSOR_MAP_SWIZZLE_64B", 2),
                       128: ("CU_TENSOR_MAP_SWIZZLE_128B", 3)}


@dataclass(frozen=True, slots=True)
class TensorMapSpec:
    """A tiled tensor map over a launcher array (cuTensorMapEncodeTiled's
    arguments, innermost dimension first): the dims in elements, the byte
    strides of dims 1.., the box in elements, the swizzle span in bytes
    (0 for none, 32, 64 or 128: CU_TENSOR_MAP_SWIZZLE_NONE, _32B, _64B,
    _128B); no interleave, 256-byte L2 promotion, zero fill out of bounds.
    Each map has its own swizzle, which every launcher encodes as given."""

    dtype: str  # a TENSOR_MAP_DTYPES name: "bfloat16", "float16", an FP8 one or "uint8"
    dims: tuple[Expr, ...]
    strides: tuple[Expr, ...]
    box: tuple[int, ...]
    swizzle: int = 128

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", exprs(self.dims))
        object.__setattr__(self, "strides", exprs(self.strides))
        assert len(self.strides) == len(self.dims) - 1 == len(self.box) - 1
        if self.dtype not in TENSOR_MAP_DTYPES:
            raise ValueError(f"tensor map dtype {self.dtype!r}: not one of "
                             f"{', '.join(TENSOR_MAP_DTYPES)}")
        if isinstance(self.swizzle, bool) or self.swizzle not in TENSOR_MAP_SWIZZLES:
            raise ValueError(f"tensor map swizzle {self.swizzle!r}: the span in bytes is 0 (none), "
                             f"32, 64 or 128")
        # cuTensorMapEncodeTiled (without interleave): the box's inner extent
        # is a multiple of 16 bytes, and at most the swizzle span.
        inner = self.box[0] * self.element_bytes
        if inner % 16 != 0:
            raise ValueError(f"tensor map box {self.box}: its inner extent, {inner} bytes, is not "
                             f"a multiple of 16 bytes")
        if self.swizzle and inner > self.swizzle:
            raise ValueError(f"tensor map box {self.box}: its inner extent, {inner} bytes, is more "
                             f"than the {self.swizzle}-byte swizzle span")

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def cu_dtype(self) -> str:
        return TENSOR_MAP_DTYPES[self.dtype][0]

    @property
    def code(self) -> int:
        return TENSOR_MAP_DTYPES[self.dtype][1]

    @property
    def element_bytes(self) -> int:
        return TENSOR_MAP_DTYPES[self.dtype][2]

    @property
    def cu_swizzle(self) -> str:
        """The CUtensorMapSwizzle of the span, by name (CU_TENSOR_MAP_SWIZZLE_128B)."""
        return TENSOR_MAP_SWIZZLES[self.swizzle][0]

    @property
    def swizzle_code(self) -> int:
        """The CUtensorMapSwizzle of the span, its value (3 for 128 bytes)."""
        return TENSOR_MAP_SWIZZLES[self.swizzle][1]

    def names(self) -> frozenset[str]:
        return frozenset().union(*(e.names() for e in (*self.dims, *self.strides)))

    def eval(self, env: Mapping[str, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return tuple(d.eval(env) for d in self.dims), tuple(s.eval(env) for s in self.strides)


@dataclass(frozen=True, slots=True)
class StepArg:
    """An argument of a launch step: an array by name (`workspace` is the
    launcher's scratch), a scalar expression (`gg_i32(m)`), or a tensor map
    over an array (`const __grid_constant__ CUtensorMap`, built by the
    launcher before the launch)."""

    kind: ArgKind
    name: str = ""  # the array (of the map)
    value: Expr | None = None  # the scalar
    tmap: TensorMapSpec | None = None

    def __init__(self, kind: ArgKind | str, text: str | Expr,
                 tmap: TensorMapSpec | None = None) -> None:
        kind = ArgKind(kind)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "name", text if kind is not ArgKind.VALUE else "")
        object.__setattr__(self, "value", expr(text) if kind is ArgKind.VALUE else None)
        assert (tmap is not None) == (kind is ArgKind.TENSOR_MAP)
        object.__setattr__(self, "tmap", tmap)

    def names(self) -> frozenset[str]:
        """The dims and scalars the argument's expressions use."""
        if self.value is not None:
            return self.value.names()
        return self.tmap.names() if self.tmap is not None else frozenset()

    @property
    def py(self) -> str:
        """The argument in the Python launch sequence: a name, an
        expression, or a TensorMapArg."""
        if self.value is not None:
            return self.value.py
        if self.tmap is not None:
            return f"TensorMapArg({', '.join(self._tmap_items())})"
        return f'"{self.name}"'

    def _tmap_items(self) -> list[str]:
        t = self.tmap
        assert t is not None
        return [f'"{self.name}"', str(t.code), py_tuple([d.py for d in t.dims]),
                py_tuple([s.py for s in t.strides]), py_tuple([str(b) for b in t.box]),
                str(t.swizzle_code)]

    def py_item(self, indent: int) -> str:
        """The argument as an item of a split list, `indent` columns in,
        with its comma: a TensorMapArg too long for the line laid out as
        ruff format splits a call."""
        one = " " * indent + self.py + ","
        if self.tmap is None or len(one) <= COLUMNS:
            return one
        return py_call("TensorMapArg(", self._tmap_items(), "),", indent)

    @property
    def cpp_map(self) -> str:
        """The local that holds the encoded map of a tensor-map argument."""
        return f"map_{self.name}"

    @property
    def cpp(self) -> str:
        """The argument of the C++ launch: a field of the argument struct, an
        expression, or the map the launcher encoded."""
        if self.value is not None:
            return self.value.cpp
        if self.tmap is not None:
            return self.cpp_map
        return "static_cast<int*>(a.workspace)" if self.name == "workspace" else f"a.{self.name}"

    def cpp_encode(self, indent: int) -> str:
        """The statement that encodes a tensor-map argument into its local:
        gg_tensor_map(map, base, type, swizzle, rank, dims (3), strides of
        dims 1.. (2), box (3)), launch_impl.cuh.j2; a rank-2 map pads with 1
        and 0."""
        t = self.tmap
        assert t is not None
        dims = [d.cpp for d in t.dims] + ["1"] * (3 - t.rank)
        strides = [s.cpp for s in t.strides] + ["0"] * (3 - t.rank)
        box = [str(b) for b in t.box] + ["1"] * (3 - t.rank)
        args = [f"&{self.cpp_map}", f"a.{self.name}", t.cu_dtype, t.cu_swizzle, str(t.rank),
                *dims, *strides, *box]
        return cpp_call("gg_tensor_map(", args, ");", indent, lhs="err")


def array(name: str) -> StepArg:
    return StepArg(ArgKind.ARRAY, name)


def i32(e: Expr | str) -> StepArg:
    return StepArg(ArgKind.VALUE, Call(Fn.I32, (expr(e),)))


def i64(e: Expr | str) -> StepArg:
    return StepArg(ArgKind.VALUE, Call(Fn.I64, (expr(e),)))


def tensor_map(name: str, spec: TensorMapSpec) -> StepArg:
    return StepArg(ArgKind.TENSOR_MAP, name, spec)
