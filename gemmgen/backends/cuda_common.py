"""The launch plan every CUDA kernel kind shares.

A kind (tile GEMM, GEMV, quantize, tgmm) turns a kernel into a `LaunchPlan`:
its arguments in contract order, how the problem dims are read off them,
the checks a call must pass, and per tile of the LUT the sequence of launch
steps (entry point, grid, block, dynamic shared memory, arguments). The
C++ header, the nvcc host launcher and the Python (CuPy) launcher are
rendered from this one object by generic templates; the kind's own `.cu`
template gets its kind-specific `detail` as well. So a kernel and its
launchers are printed from the same numbers and cannot drift.

Expressions (shapes, checks, grids, scalar arguments) are strings over the
dim names that are valid Python and C++ alike: identifiers, integer
literals, `+ - * %`, comparisons, `and`/`or`, and the helpers `gg_cdiv`,
`gg_div`, `gg_min`, `gg_i32`, `gg_i64`, which both launchers define.
"""

from __future__ import annotations

from dataclasses import dataclass

from gemmgen import ir
from gemmgen.ir import DType
from gemmgen.names import args_struct
from gemmgen.render import source_ref

WARP = 32
# The opt-in shared-memory maximum per block of each arch is data in
# gemmgen.archs (shared_memory_limit), which the nvcc checks test. Each
# kind's diagnose() rejects a plan over the limit of a declared arch, and
# both launchers compare every launch with the device's own limit.
DEFAULT_SMEM = 48 * 1024  # above this, cudaFuncSetAttribute is needed


@dataclass(frozen=True, slots=True)
class Limits:
    """CUDA's launch limits, the same on every compute capability from 3.0 on
    (so on every arch gemmgen targets): the CUDA C++ Programming Guide's
    table of technical specifications per compute capability. Both launchers
    check every launch against them before launching anything."""

    grid_x: int = 2**31 - 1
    grid_yz: int = 65535
    block_threads: int = 1024


LIMITS = Limits()

# NB: plain C types, not <cstdint>'s: kernels also compile under NVRTC (CuPy),
# which has no standard headers.
CTYPE = {
    DType.F32: "float", DType.BF16: "__nv_bfloat16", DType.F16: "__half",
    DType.E4M3: "__nv_fp8_e4m3", DType.E5M2: "__nv_fp8_e5m2", DType.INT8: "signed char",
    DType.INT4: "unsigned char", DType.FP4: "unsigned char", DType.E8M0: "unsigned char",
    DType.INT32: "int",
}


@dataclass(frozen=True, slots=True)
class Arg:
    """One launcher argument (an array, or a scalar such as group_offset)."""

    name: str
    role: str  # "in", "out", "scalar"
    dtype: DType | None
    shape: tuple[str, ...]
    doc: str
    optional: bool = False
    align: int = 1  # byte alignment the kernel needs for the base pointer

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
        return "[" + ", ".join(self.shape) + "]"


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
    fallback: str = ""


@dataclass(frozen=True, slots=True)
class Check:
    """A launch-time condition and the message when it fails."""

    cond: str
    message: str


@dataclass(frozen=True, slots=True)
class StepArg:
    """An argument of a launch step: an array by name (`workspace` is the
    launcher's scratch) or a scalar expression (`gg_i32(m)`)."""

    kind: str  # "array" or "value"
    text: str

    @property
    def py(self) -> str:
        """The argument in the Python launch sequence: a name or an expression."""
        return f'"{self.text}"' if self.kind == "array" else self.text

    @property
    def cpp(self) -> str:
        """The argument of the C++ launch: a field of the argument struct, or
        an expression."""
        if self.kind == "value":
            return self.text
        return "static_cast<int*>(a.workspace)" if self.text == "workspace" else f"a.{self.text}"


@dataclass(frozen=True, slots=True)
class Step:
    entry: str
    grid: tuple[str, str, str]
    block: int
    smem: int
    args: tuple[StepArg, ...]
    comment: str

    @property
    def needs_attribute(self) -> bool:
        return self.smem > DEFAULT_SMEM


@dataclass(frozen=True, slots=True)
class Variant:
    """One tile of the LUT: when it applies and what it launches."""

    index: int
    when: str  # condition on the dims; "" for the default
    where: str  # spec position
    label: str  # e.g. "128x128x32"
    steps: tuple[Step, ...]
    workspace_ints: str  # "0" when none


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    kernel: ir.Kernel
    template: str  # the kind's .cu template
    detail: object  # the kind's own plan, for its .cu template
    spec_path: str
    where: str
    summary: str
    spec_lines: tuple[str, ...]
    archs: tuple[str, ...]
    args: tuple[Arg, ...]  # contract order, then the outputs
    bindings: tuple[Binding, ...]
    derived: tuple[tuple[str, str], ...]  # (name, expression) computed from dims
    checks: tuple[Check, ...]
    variants: tuple[Variant, ...]  # LUT rules, then the default
    entries: tuple[str, ...]  # every extern "C" kernel of the .cu
    empty: str  # when true, there is nothing to compute: launch nothing
    lut_dims: tuple[str, str, str] = ("m", "n", "k")  # what pick_tile(m, n, k) gets

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def args_struct(self) -> str:
        """The C++ argument struct: `gmm_bf16` -> `GmmBf16Args`."""
        return args_struct(self.name)

    @property
    def dims(self) -> tuple[str, ...]:
        seen: list[str] = []
        for b in self.bindings:
            if b.dim not in seen:
                seen.append(b.dim)
        return tuple(seen)

    @property
    def scalars(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "scalar")

    @property
    def arrays(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role != "scalar")

    @property
    def outputs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "out")

    @property
    def inputs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role != "out")

    @property
    def py_params(self) -> str:
        """The Python launcher's parameters in contract order."""
        return ", ".join(f"{a.name}=None" if a.optional else a.name for a in self.inputs)

    @property
    def has_workspace(self) -> bool:
        return any(v.workspace_ints != "0" for v in self.variants)

    @property
    def rules(self) -> tuple[Variant, ...]:
        return self.variants[:-1]

    @property
    def default(self) -> Variant:
        return self.variants[-1]

    @property
    def max_smem(self) -> int:
        return max((s.smem for v in self.variants for s in v.steps), default=0)

    @property
    def limits(self) -> Limits:
        return LIMITS

    def dim_comment(self, dim: str) -> str:
        """`  // ...` for a struct field whose dim has a fallback, else ""."""
        for b in self.bindings:
            if b.dim == dim and b.fallback:
                return f"  // {b.arg}.shape[{b.axis}], or {b.fallback} without {b.arg}"
        return ""

    @property
    def py_unpack(self) -> str:
        """`m, n, k = (dims["m"], dims["n"], dims["k"])` for the Python launcher."""
        names = self.names
        return (", ".join(names) + " = (" + ", ".join(f'dims["{d}"]' for d in names)
                + ("," if len(names) == 1 else "") + ")")

    @property
    def names(self) -> tuple[str, ...]:
        """Every name an expression may use."""
        return self.dims + tuple(a.name for a in self.scalars) + tuple(n for n, _ in self.derived)


def spec_checks(kernel: ir.Kernel) -> list[Check]:
    """The checks every kind makes of what the spec fixes: `dims n= k=`, and
    silu_mul's even n."""
    checks = []
    if kernel.epilogue.activation is ir.Activation.SILU_MUL:
        checks.append(Check("n % 2 == 0", "silu_mul needs an even n (gate and up halves)"))
    if kernel.static_n is not None and kernel.op is not ir.Op.QUANTIZE:
        checks.append(Check(f"n == {kernel.static_n}", f"the spec fixes n = {kernel.static_n}"))
    if kernel.static_k is not None:
        checks.append(Check(f"k == {kernel.static_k}", f"the spec fixes k = {kernel.static_k}"))
    return checks


def where(loc: ir.Loc) -> str:
    return source_ref(loc)


def cond_expr(conds: tuple[ir.Cond, ...]) -> str:
    return " and ".join(f"{c.dim} {c.cmp.value} {c.value}" for c in conds)


def array(name: str) -> StepArg:
    return StepArg("array", name)


def i32(expr: str) -> StepArg:
    return StepArg("value", f"gg_i32({expr})")


def i64(expr: str) -> StepArg:
    return StepArg("value", f"gg_i64({expr})")
