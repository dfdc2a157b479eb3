"""The argument tables of a CUDA launch plan: each launcher argument
(`Arg`: name, role, dtype, shape, alignment), how the problem dims are read
off them (`Binding`), the checks a call must pass (`Check`) and the names
computed from the dims (`Derived`). The C++ header and the Python launcher
print these; cuda/launch.py's LaunchPlan holds them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gemmgen import ir
from gemmgen.backends.cuda.expr import Expr, expr, exprs, var
from gemmgen.backends.cuda.layout import py_tuple
from gemmgen.ir import DType

__all__ = ["CTYPE", "Arg", "Binding", "Check", "Derived", "Role", "spec_checks"]

# NB: plain C types, not <cstdint>'s: kernels also compile under NVRTC (CuPy),
# which has no standard headers.
CTYPE = {
    DType.F32: "float", DType.BF16: "__nv_bfloat16", DType.F16: "__half",
    DType.E4M3: "__nv_fp8_e4m3", DType.E5M2: "__nv_fp8_e5m2", DType.INT8: "signed char",
    DType.INT4: "unsigned char", DType.UINT4: "unsigned char", DType.FP4: "unsigned char", DType.E8M0: "unsigned char",
    DType.UE4M3: "unsigned char", DType.INT32: "int",
}


class Role(enum.Enum):
    IN = "in"
    OUT = "out"
    SCALAR = "scalar"


@dataclass(frozen=True, slots=True)
class Arg:
    """One launcher argument (an array, or a scalar such as group_offset)."""

    name: str
    role: Role
    dtype: DType | None
    shape: tuple[Expr, ...]
    doc: str
    optional: bool = False
    align: int = 1  # byte alignment the kernel needs for the base pointer

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", Role(self.role))
        object.__setattr__(self, "shape", exprs(self.shape))

    @property
    def ctype(self) -> str:
        assert self.dtype is not None
        return CTYPE[self.dtype]

    @property
    def nptype(self) -> str:
        assert self.dtype is not None
        return self.dtype.storage_numpy_name

    @property
    def shape_text(self) -> str:
        return "[" + ", ".join(s.py for s in self.shape) + "]"

    @property
    def is_scalar(self) -> bool:
        return self.role is Role.SCALAR

    @property
    def is_output(self) -> bool:
        return self.role is Role.OUT

    @property
    def may_be_none(self) -> bool:
        """The Python launcher accepts None: optional inputs and the outputs."""
        return self.optional or self.role is Role.OUT

    @property
    def py_shape(self) -> str:
        """The shape as a Python tuple."""
        return py_tuple([s.py for s in self.shape])

    @property
    def doc_line(self) -> str:
        """`lhs: [m, k] bfloat16, the activations.` for a docstring."""
        kind = "int" if self.is_scalar else f"{self.shape_text} {self.nptype}"
        return f"{self.name}: {kind}, {self.doc}{' (optional)' if self.optional else ''}."

    @property
    def cpp_field(self) -> str:
        """The field of the C++ argument struct."""
        if self.is_scalar:
            return f"int {self.name} = 0;"
        return f"{'' if self.is_output else 'const '}{self.ctype}* {self.name} = nullptr;"

    @property
    def cpp_comment(self) -> str:
        if self.is_scalar:
            return self.doc
        return f"{self.shape_text} {self.doc}{' (optional)' if self.optional else ''}"


@dataclass(frozen=True, slots=True)
class Binding:
    """How a problem dim is read off an argument: dim = arg.shape[axis] * mul."""

    dim: str
    arg: str
    axis: int
    mul: int = 1
    # When `arg` is an optional array and the call leaves it out, the dim is
    # this expression instead (over the scalars and the dims bound without a
    # fallback). The Python launcher applies it; in C++ the dim is a field of
    # the argument struct that the caller sets.
    fallback: Expr | None = None

    def __post_init__(self) -> None:
        if isinstance(self.fallback, str):
            object.__setattr__(self, "fallback", expr(self.fallback) if self.fallback else None)

    @property
    def py_read(self) -> str:
        """`int(lhs.shape[0])`, times mul."""
        text = f"int({self.arg}.shape[{self.axis}])"
        return text if self.mul == 1 else f"{text} * {self.mul}"


@dataclass(frozen=True, slots=True)
class Check:
    """A launch-time condition and the message when it fails."""

    cond: Expr
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "cond", expr(self.cond))


@dataclass(frozen=True, slots=True)
class Derived:
    """A name computed from the dims (`n_out = gg_div(n, 2)`)."""

    name: str
    value: Expr



def spec_checks(kernel: ir.Kernel) -> list[Check]:
    """The checks every kind makes of what the spec fixes: `dims n= k=`, and
    silu_mul's even n."""
    checks = []
    if kernel.epilogue.activation is ir.Activation.SILU_MUL:
        checks.append(Check((var("n") % 2).eq(0), "silu_mul needs an even n (gate and up halves)"))
    elif kernel.epilogue.activation is ir.Activation.SWIGLU_CLAMPED:
        checks.append(Check((var("n") % 2).eq(0), "swiglu_clamped needs an even n (gate and up "
                            "pairs)"))
    if kernel.static_n is not None and kernel.op is not ir.Op.QUANTIZE:
        checks.append(Check(var("n").eq(kernel.static_n), f"the spec fixes n = {kernel.static_n}"))
    if kernel.static_k is not None:
        checks.append(Check(var("k").eq(kernel.static_k), f"the spec fixes k = {kernel.static_k}"))
    return checks
