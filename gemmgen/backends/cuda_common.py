"""The launch plan every CUDA kernel kind shares.

A kind (tile GEMM, GEMV, quantize, tgmm) turns a kernel into a `LaunchPlan`:
its arguments in contract order, how the problem dims are read off them,
the checks a call must pass, and per tile of the LUT the sequence of launch
steps (entry point, grid, block, dynamic shared memory, arguments). The
C++ header, the nvcc host launcher and the Python (CuPy) launcher are
rendered from this one object by generic templates; the kind's own `.cu`
template gets its kind-specific `detail` as well. So a kernel and its
launchers are printed from the same numbers and cannot drift.

Expressions (shapes, checks, grids, workspace sizes, scalar arguments) are
data: `Expr` trees over the dim names (`cdiv(var("n"), 128)`), which print
themselves as C++ (`Expr.cpp`) and Python (`Expr.py`) and evaluate directly
(`Expr.eval`, what `gemmgen explain` uses). Both launchers define the
helpers the printed text calls: `gg_cdiv`, `gg_div`, `gg_min`, `gg_i32`,
`gg_i64`. A kind may still hand a plan expression as text in that language
(`parse_expr`, a small parser, never `eval`); the plan holds the tree.

The layout helpers at the end (`cpp_decl`, `cpp_call`, `py_call`,
`comment`) print a declaration, a call or a comment the way the committed
`.clang-format` and `ruff format` would, so the generated files are
formatted as emitted (tests/test_generated_format.py checks them).
"""

from __future__ import annotations

import enum
import functools
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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
COLUMNS = 100  # the column limit of .clang-format and of ruff (line-length)


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


# ---------------------------------------------------------------------------
# Expressions


class Fn(enum.Enum):
    """The helpers an expression may call; both launchers define them."""

    CDIV = "gg_cdiv"
    DIV = "gg_div"
    MIN = "gg_min"
    I32 = "gg_i32"
    I64 = "gg_i64"


class Op(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    MOD = "%"
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    AND = "and"
    OR = "or"


_ARITH = {Op.ADD: 4, Op.SUB: 4, Op.MUL: 5, Op.MOD: 5}
_COMPARE = (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)
_ATOM = 9


class Expr:
    """An integer (or, for a comparison, boolean) expression over named dims."""

    __slots__ = ()

    @property
    def prec(self) -> int:
        return _ATOM

    def render(self, cpp: bool) -> str:
        raise NotImplementedError

    @property
    def cpp(self) -> str:
        return self.render(True)

    @property
    def py(self) -> str:
        return self.render(False)

    def __str__(self) -> str:
        return self.py

    def eval(self, env: Mapping[str, int]) -> int:
        raise NotImplementedError

    def names(self) -> frozenset[str]:
        raise NotImplementedError

    # Arithmetic and comparisons build trees (ints are literals).
    def __add__(self, other: Expr | int) -> Expr:
        return Bin(Op.ADD, self, expr(other))

    def __sub__(self, other: Expr | int) -> Expr:
        return Bin(Op.SUB, self, expr(other))

    def __mul__(self, other: Expr | int) -> Expr:
        return Bin(Op.MUL, self, expr(other))

    def __mod__(self, other: Expr | int) -> Expr:
        return Bin(Op.MOD, self, expr(other))

    def eq(self, other: Expr | int) -> Expr:
        return Bin(Op.EQ, self, expr(other))

    def ne(self, other: Expr | int) -> Expr:
        return Bin(Op.NE, self, expr(other))

    def lt(self, other: Expr | int) -> Expr:
        return Bin(Op.LT, self, expr(other))

    def le(self, other: Expr | int) -> Expr:
        return Bin(Op.LE, self, expr(other))

    def gt(self, other: Expr | int) -> Expr:
        return Bin(Op.GT, self, expr(other))

    def ge(self, other: Expr | int) -> Expr:
        return Bin(Op.GE, self, expr(other))


@dataclass(frozen=True, slots=True)
class Lit(Expr):
    value: int

    def render(self, cpp: bool) -> str:
        return str(self.value)

    @property
    def prec(self) -> int:
        return _ATOM if self.value >= 0 else 6  # -1: a unary minus

    def eval(self, env: Mapping[str, int]) -> int:
        return self.value

    def names(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True, slots=True)
class Var(Expr):
    name: str

    def render(self, cpp: bool) -> str:
        return self.name

    def eval(self, env: Mapping[str, int]) -> int:
        if self.name not in env:
            raise KeyError(f"expression needs '{self.name}' (have {', '.join(sorted(env))})")
        return env[self.name]

    def names(self) -> frozenset[str]:
        return frozenset((self.name,))


@dataclass(frozen=True, slots=True)
class Call(Expr):
    fn: Fn
    args: tuple[Expr, ...]

    def render(self, cpp: bool) -> str:
        return f"{self.fn.value}({', '.join(a.render(cpp) for a in self.args)})"

    def eval(self, env: Mapping[str, int]) -> int:
        v = [a.eval(env) for a in self.args]
        match self.fn:
            case Fn.CDIV:
                return -(-v[0] // v[1])
            case Fn.DIV:
                return v[0] // v[1]
            case Fn.MIN:
                return min(v)
            case Fn.I32 | Fn.I64:
                return v[0]
        raise AssertionError(self.fn)

    def names(self) -> frozenset[str]:
        return frozenset().union(*(a.names() for a in self.args))


@dataclass(frozen=True, slots=True)
class Bin(Expr):
    """`left op right`: arithmetic, a comparison, or `and` / `or`."""

    op: Op
    left: Expr
    right: Expr

    @property
    def prec(self) -> int:
        if self.op in _ARITH:
            return _ARITH[self.op]
        return 3 if self.op in _COMPARE else (2 if self.op is Op.AND else 1)

    def render(self, cpp: bool) -> str:
        p = self.prec
        if self.op in _ARITH:  # left-associative: a right operand of equal rank needs ( )
            lhs, rhs = _paren(self.left, p, cpp), _paren(self.right, p + 1, cpp)
        elif self.op in _COMPARE:  # never chained (Python would chain a < b < c)
            lhs, rhs = _paren(self.left, p + 1, cpp), _paren(self.right, p + 1, cpp)
        else:  # and / or: the other one inside gets ( ) (g++ -Wparentheses)
            lhs, rhs = (f"({c.render(cpp)})" if c.prec in (1, 2) and c.prec != p
                        else c.render(cpp) for c in (self.left, self.right))
        word = {Op.AND: "&&", Op.OR: "||"}.get(self.op, self.op.value) if cpp else self.op.value
        return f"{lhs} {word} {rhs}"

    def eval(self, env: Mapping[str, int]) -> int:
        a = self.left.eval(env)
        if self.op is Op.AND:
            return int(bool(a) and bool(self.right.eval(env)))
        if self.op is Op.OR:
            return int(bool(a) or bool(self.right.eval(env)))
        b = self.right.eval(env)
        match self.op:
            case Op.ADD:
                return a + b
            case Op.SUB:
                return a - b
            case Op.MUL:
                return a * b
            case Op.MOD:
                return a % b
            case Op.EQ:
                return int(a == b)
            case Op.NE:
                return int(a != b)
            case Op.LT:
                return int(a < b)
            case Op.LE:
                return int(a <= b)
            case Op.GT:
                return int(a > b)
            case Op.GE:
                return int(a >= b)
        raise AssertionError(self.op)

    def names(self) -> frozenset[str]:
        return self.left.names() | self.right.names()


def _paren(e: Expr, need: int, cpp: bool) -> str:
    text = e.render(cpp)
    return f"({text})" if e.prec < need else text


def expr(x: Expr | int | str) -> Expr:
    """An expression from a tree, an int, or text in the launch-plan language."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        raise TypeError("a bool is not an expression")
    if isinstance(x, int):
        return Lit(x)
    return parse_expr(x)


def var(name: str) -> Var:
    return Var(name)


def cdiv(a: Expr | int, b: Expr | int) -> Expr:
    return Call(Fn.CDIV, (expr(a), expr(b)))


def div(a: Expr | int, b: Expr | int) -> Expr:
    return Call(Fn.DIV, (expr(a), expr(b)))


def min_(a: Expr | int, b: Expr | int) -> Expr:
    return Call(Fn.MIN, (expr(a), expr(b)))


def all_of(*terms: Expr) -> Expr:
    """`a and b and ...` (left-nested)."""
    out = terms[0]
    for t in terms[1:]:
        out = Bin(Op.AND, out, t)
    return out


def any_of(*terms: Expr) -> Expr:
    out = terms[0]
    for t in terms[1:]:
        out = Bin(Op.OR, out, t)
    return out


_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(==|!=|<=|>=|[-+*%<>(),]))")


@functools.cache  # trees are frozen: one per distinct text
def parse_expr(text: str) -> Expr:
    """The tree of `text`: identifiers, integer literals, `+ - * %`,
    comparisons, `and` / `or`, parentheses and calls of the `Fn` helpers.
    A precedence-climbing parser; anything else raises ValueError."""
    tokens: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot read {text[pos:]!r} in expression {text!r}")
        tokens.append(m.group(m.lastindex or 0))
        pos = m.end()
    fns = {f.value: f for f in Fn}
    ops = {o.value: o for o in Op}
    i = 0

    def peek() -> str | None:
        return tokens[i] if i < len(tokens) else None

    def take(want: str | None = None) -> str:
        nonlocal i
        if i >= len(tokens) or (want is not None and tokens[i] != want):
            raise ValueError(f"expected {want or 'more'} in expression {text!r}")
        i += 1
        return tokens[i - 1]

    def atom() -> Expr:
        tok = take()
        if tok == "(":
            e = binary(1)
            take(")")
            return e
        if tok == "-":
            return Lit(-int(take()))
        if tok.isdigit():
            return Lit(int(tok))
        if not (tok[0].isalpha() or tok[0] == "_"):
            raise ValueError(f"unexpected {tok!r} in expression {text!r}")
        if peek() == "(":
            if tok not in fns:
                raise ValueError(f"unknown function {tok!r} in expression {text!r}")
            take("(")
            args = [binary(1)]
            while peek() == ",":
                take(",")
                args.append(binary(1))
            take(")")
            return Call(fns[tok], tuple(args))
        return Var(tok)

    def binary(level: int) -> Expr:
        left = atom()
        while (tok := peek()) in ops:
            op = ops[tok]
            p = Bin(op, left, left).prec
            if p < level:
                break
            take()
            left = Bin(op, left, binary(p + 1))
        return left

    result = binary(1)
    if i != len(tokens):
        raise ValueError(f"unexpected {tokens[i]!r} in expression {text!r}")
    return result


ZERO = Lit(0)


def _exprs(values: Sequence[Expr | int | str]) -> tuple[Expr, ...]:
    return tuple(expr(v) for v in values)


# ---------------------------------------------------------------------------
# The launch plan


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
        object.__setattr__(self, "shape", _exprs(self.shape))

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


class ArgKind(enum.Enum):
    ARRAY = "array"
    VALUE = "value"


@dataclass(frozen=True, slots=True)
class StepArg:
    """An argument of a launch step: an array by name (`workspace` is the
    launcher's scratch) or a scalar expression (`gg_i32(m)`)."""

    kind: ArgKind
    name: str = ""  # the array
    value: Expr | None = None  # the scalar

    def __init__(self, kind: ArgKind | str, text: str | Expr) -> None:
        kind = ArgKind(kind)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "name", text if kind is ArgKind.ARRAY else "")
        object.__setattr__(self, "value", expr(text) if kind is ArgKind.VALUE else None)

    @property
    def py(self) -> str:
        """The argument in the Python launch sequence: a name or an expression."""
        if self.value is not None:
            return self.value.py
        return f'"{self.name}"'

    @property
    def cpp(self) -> str:
        """The argument of the C++ launch: a field of the argument struct, or
        an expression."""
        if self.value is not None:
            return self.value.cpp
        return "static_cast<int*>(a.workspace)" if self.name == "workspace" else f"a.{self.name}"


@dataclass(frozen=True, slots=True)
class Grid:
    """A launch's grid: one expression per axis."""

    x: Expr
    y: Expr
    z: Expr

    def __post_init__(self) -> None:
        for axis in ("x", "y", "z"):
            object.__setattr__(self, axis, expr(getattr(self, axis)))

    @property
    def axes(self) -> tuple[Expr, Expr, Expr]:
        return (self.x, self.y, self.z)

    def eval(self, env: Mapping[str, int]) -> tuple[int, int, int]:
        return (self.x.eval(env), self.y.eval(env), self.z.eval(env))

    def __iter__(self):
        return iter(self.axes)

    def __getitem__(self, i: int) -> Expr:
        return self.axes[i]


@dataclass(frozen=True, slots=True)
class Step:
    entry: str
    grid: Grid
    block: int  # threads per block (x; y and z are 1)
    smem: int
    args: tuple[StepArg, ...]
    comment: str

    def __post_init__(self) -> None:
        if not isinstance(self.grid, Grid):
            object.__setattr__(self, "grid", Grid(*self.grid))

    @property
    def needs_attribute(self) -> bool:
        return self.smem > DEFAULT_SMEM

    @property
    def cpp_comment(self) -> str:
        return comment(f"{self.entry}: {self.comment}", 6)

    def cpp_what(self, i: int) -> str:
        return cpp_assign_string(f"out[{i}].what", self.comment, 6)

    @property
    def cpp_set_attribute(self) -> str:
        args = [self.entry, "cudaFuncAttributeMaxDynamicSharedMemorySize", str(self.smem)]
        call = "cudaFuncSetAttribute(" + ", ".join(args) + ");"
        if len(" " * 6 + "err = " + call) > COLUMNS and len(" " * 10 + call) <= COLUMNS:
            # clang-format breaks after "=" when the call then fits on a line.
            return " " * 6 + "err =\n" + " " * 10 + call
        return cpp_call("err = cudaFuncSetAttribute(", args, ");", 6)

    def cpp_launch(self, i: int) -> str:
        """The launch of step `i` of launch_<name>, with the sizes of `l[i]`."""
        return cpp_call(f"{self.entry}<<<gg_grid(l[{i}]), gg_block(l[{i}]), l[{i}].smem, stream>>>(",
                        list(self.cpp_args), ");", 6)

    def py_launch(self, indent: int) -> str:
        """`Launch(...)` of this step, an item of a list (ends in ",")."""
        parts: list[str | list[str]] = [
            f'"{self.entry}"', [a.py for a in self.grid], [str(self.block), "1", "1"],
            str(self.smem), list(self.py_args), f'"{self.comment}"']
        items = [p if isinstance(p, str) else py_tuple(p) for p in parts]
        pad = " " * indent
        one = f"{pad}Launch({', '.join(items)}),"
        if len(one) <= COLUMNS:
            return one
        body = f"{pad}    {', '.join(items)}"
        if len(body) <= COLUMNS:
            return f"{pad}Launch(\n{body}\n{pad}),"
        lines = [f"{pad}Launch("]
        for p, item in zip(parts, items):
            if isinstance(p, list) and len(pad) + 5 + len(item) > COLUMNS:
                lines.append(py_collection("(", p, "),", indent + 4))
            else:
                lines.append(f"{pad}    {item},")
        return "\n".join([*lines, f"{pad}),"])

    @property
    def py_args(self) -> tuple[str, ...]:
        return tuple(a.py for a in self.args)

    @property
    def cpp_args(self) -> tuple[str, ...]:
        return tuple(a.cpp for a in self.args)


@dataclass(frozen=True, slots=True)
class Variant:
    """One tile of the LUT: when it applies and what it launches."""

    index: int
    when: Expr | None  # condition on the dims; None for the default
    where: str  # spec position
    label: str  # e.g. "128x128x32"
    steps: tuple[Step, ...]
    workspace_ints: Expr = ZERO

    def __post_init__(self) -> None:
        if isinstance(self.when, str):
            object.__setattr__(self, "when", expr(self.when) if self.when else None)
        object.__setattr__(self, "workspace_ints", expr(self.workspace_ints))

    @property
    def has_workspace(self) -> bool:
        return self.workspace_ints != ZERO

    def applies(self, env: Mapping[str, int]) -> bool:
        return self.when is None or bool(self.when.eval(env))


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
    derived: tuple[Derived, ...]  # computed from the dims
    checks: tuple[Check, ...]
    variants: tuple[Variant, ...]  # LUT rules, then the default
    entries: tuple[str, ...]  # every extern "C" kernel of the .cu
    empty: Expr  # when true, there is nothing to compute: launch nothing
    # What pick_tile(m, n, k) gets.
    lut_dims: tuple[Expr, Expr, Expr] = field(default=(Var("m"), Var("n"), Var("k")))

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", tuple(
            d if isinstance(d, Derived) else Derived(d[0], expr(d[1])) for d in self.derived))
        object.__setattr__(self, "empty", expr(self.empty))
        object.__setattr__(self, "lut_dims", _exprs(self.lut_dims))
        assert self.variants and self.variants[-1].when is None, "the last variant is the default"

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def args_struct(self) -> str:
        """The C++ argument struct: `gmm_bf16` -> `GmmBf16Args`."""
        return args_struct(self.name)

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.dim for b in self.bindings))

    @property
    def scalars(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.is_scalar)

    @property
    def arrays(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if not a.is_scalar)

    @property
    def outputs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.is_output)

    @property
    def inputs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if not a.is_output)

    @property
    def aligned(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.arrays if a.align > 1)

    @property
    def has_workspace(self) -> bool:
        return any(v.has_workspace for v in self.variants)

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
    def max_steps(self) -> int:
        return max(len(v.steps) for v in self.variants)

    @property
    def limits(self) -> Limits:
        return LIMITS

    @property
    def names(self) -> tuple[str, ...]:
        """Every name an expression may use."""
        return self.dims + tuple(a.name for a in self.scalars) + tuple(d.name for d in self.derived)

    # -- evaluation (gemmgen explain, tests) ---------------------------------

    def env(self, dims: Mapping[str, int]) -> dict[str, int]:
        """Every name of the plan's expressions for `dims` (the bound dims and
        the scalars; a dim with a fallback may be left out), derived names
        added."""
        env = dict(dims)
        for b in self.bindings:
            if b.dim not in env and b.fallback is not None:
                env[b.dim] = b.fallback.eval(env)
        for d in self.derived:
            env[d.name] = d.value.eval(env)
        return env

    def variant_for(self, env: Mapping[str, int]) -> Variant:
        """The LUT's tile for these dims (what pick_tile returns)."""
        lut = dict(zip(("m", "n", "k"), (e.eval(env) for e in self.lut_dims)))
        return next(v for v in self.variants if v.applies(lut))

    # -- text the launcher templates print -----------------------------------

    @property
    def py_params(self) -> str:
        """The Python launcher's parameters in contract order."""
        return ", ".join(f"{a.name}=None" if a.optional else a.name for a in self.inputs)

    @property
    def lut_cpp(self) -> str:
        return ", ".join(e.cpp for e in self.lut_dims)

    @property
    def lut_py(self) -> str:
        return ", ".join(e.py for e in self.lut_dims)

    def dim_comment(self, dim: str) -> str:
        """What a struct field whose dim has a fallback means, else ""."""
        for b in self.bindings:
            if b.dim == dim and b.fallback is not None:
                return f"{b.arg}.shape[{b.axis}], or {b.fallback.py} without {b.arg}"
        return ""

    def py_unpack(self, *exprs: Expr) -> str:
        """`m, k = (dims["m"], dims["k"])`: the names `exprs` use."""
        used = frozenset().union(*(e.names() for e in exprs))
        names = [d for d in self.names if d in used]
        if not names:
            return ""
        if len(names) == 1:
            return f'    {names[0]} = dims["{names[0]}"]'
        return py_collection(", ".join(names) + " = (", [f'dims["{d}"]' for d in names], ")", 4)

    @property
    def py_unpack_outputs(self) -> str:
        return self.py_unpack(*(s for a in self.outputs for s in a.shape))

    @property
    def py_unpack_workspace(self) -> str:
        return self.py_unpack(*self.lut_dims, *(v.workspace_ints for v in self.variants))

    @property
    def py_unpack_sequence(self) -> str:
        steps = [s for v in self.variants for s in v.steps]
        return self.py_unpack(self.empty, *self.lut_dims, *(g for s in steps for g in s.grid),
                              *(a.value for s in steps for a in s.args if a.value is not None))

    @property
    def py_dims(self) -> str:
        return py_collection("dims = {", [f'"{d}": {d}' for d in self.names], "}", 4)

    @property
    def py_shape_message(self) -> str:
        """`m={m}, n={n}` for a check's message."""
        return ", ".join(f"{d}={{{d}}}" for d in self.names)

    @property
    def cpp_locals(self) -> tuple[str, ...]:
        """The dims, scalars and derived names as locals of a C++ function."""
        out = [f"[[maybe_unused]] const long long {d} = a.{d};" for d in self.dims]
        out += [f"[[maybe_unused]] const long long {s.name} = a.{s.name};" for s in self.scalars]
        out += [f"[[maybe_unused]] const long long {d.name} = {d.value.cpp};" for d in self.derived]
        return tuple(out)

    @property
    def cpp_locals_used(self) -> tuple[str, ...]:
        """The locals launch_<name> needs: those of its launches' arguments
        and of the tile pick (the rest are in <name>_launches)."""
        used = frozenset().union(*(e.names() for e in self.lut_dims),
                                 *(a.value.names() for v in self.variants for s in v.steps
                                   for a in s.args if a.value is not None))
        need = set(used)
        for d in reversed(self.derived):
            if d.name in need:
                need |= d.value.names()
        out = [f"const long long {d} = a.{d};" for d in self.dims if d in need]
        out += [f"const long long {s.name} = a.{s.name};" for s in self.scalars if s.name in need]
        out += [f"const long long {d.name} = {d.value.cpp};" for d in self.derived
                if d.name in need]
        return tuple(out)

    # -- C++ text -------------------------------------------------------------

    @property
    def summary_comment(self) -> str:
        return comment(self.summary, 0, "//  ")

    @property
    def cpp_usage_comment(self) -> str:
        n = self.name
        return "\n".join([
            comment(f"Compile {n}.cu with nvcc (it defines launch_{n}; gemmgen's CPU emulator "
                    "compiles and runs it with g++) and include this header:"),
            "//",
            f"//   {self.args_struct} args;  // device pointers and dims, below",
            f"//   const char* why = {n}_validate(args);",
            "//   if (why != nullptr) { /* a bad call: nothing is launched */ }",
            f"//   cudaError_t err = launch_{n}(args, stream);",
            "//",
            comment(f"launch_{n} validates first and returns cudaErrorInvalidValue without "
                    f"launching anything when {n}_validate() objects (a bad shape, or a launch "
                    "over CUDA's grid or block limits) or when a launch needs more dynamic "
                    f"shared memory than the current device allows ({n}_launch_error() with "
                    "the device's limit says why)."),
        ])

    def cpp_head(self, ret: str, suffix: str, params: Sequence[str]) -> str:
        """The head of function `<name><suffix>` (suffix ends in "("), ") {"."""
        return cpp_decl(f"{ret}{self.name}{suffix}", params, ") {")

    @property
    def cpp_launch_decl(self) -> str:
        return cpp_decl(f"cudaError_t launch_{self.name}(",
                        [f"const {self.args_struct}& args", "cudaStream_t stream"], ");")

    @property
    def cpp_launch_def(self) -> str:
        return cpp_decl(f"cudaError_t launch_{self.name}(",
                        [f"const {self.args_struct}& a", "cudaStream_t stream"], ") {")

    @property
    def cpp_fields(self) -> tuple[str, ...]:
        """The argument struct's fields, each under its comment."""
        out: list[str] = []
        for a in self.arrays:
            out += [comment(a.cpp_comment, 2), f"  {a.cpp_field}"]
        for d in self.dims:
            if why := self.dim_comment(d):
                out.append(comment(why, 2))
            out.append(f"  int {d} = 0;")
        for a in self.scalars:
            out += [comment(a.doc, 2), f"  {a.cpp_field}"]
        if self.has_workspace:
            out += [comment(f"{self.name}_workspace_bytes(*this) bytes, 16-byte aligned", 2),
                    "  void* workspace = nullptr;"]
        return tuple(out)

    @property
    def cpp_pick_tile_head(self) -> str:
        used = frozenset().union(*(v.when.names() for v in self.rules if v.when is not None))
        params = [("" if d in used else "[[maybe_unused]] ") + f"long long {d}"
                  for d in ("m", "n", "k")]
        return self.cpp_head("inline int ", "_pick_tile(", params)

    @property
    def cpp_pick_tile_body(self) -> tuple[str, ...]:
        out: list[str] = []
        for v in self.rules:
            assert v.when is not None
            out += [comment(f"{v.label}, {v.where}", 2), f"  if ({v.when.cpp}) {{",
                    f"    return {v.index};", "  }"]
        out += [comment(f"{self.default.label}, default", 2), f"  return {self.default.index};"]
        return tuple(out)

    def cpp_message(self, message: str) -> str:
        """`return "<name>: <message>";` at indent 4, split as clang-format would."""
        return cpp_string("    return ", f"{self.name}: {message}", ";")

    # -- Python text ----------------------------------------------------------

    @property
    def py_outputs(self) -> str:
        return py_tuple([f'"{a.name}"' for a in self.outputs])

    @property
    def py_may_be_none(self) -> str:
        return py_tuple([f'"{a.name}"' for a in self.arrays if a.may_be_none])

    @property
    def py_signature(self) -> str:
        """`def <name>(inputs, *, outputs=None, stream=None):`."""
        params = [f"{a.name}=None" if a.optional else a.name for a in self.inputs]
        params += ["*"] + [f"{a.name}=None" for a in self.outputs] + ["stream=None"]
        return py_call(f"def {self.name}(", params, "):", 0)

    @property
    def py_validate_signature(self) -> str:
        params = ["*"] + [f"{a.name}=None" if a.optional else a.name for a in self.inputs]
        params += [f"{a.name}=None" for a in self.outputs]
        return py_call("def validate(", params, ") -> dict[str, int]:", 0)

    @property
    def py_validate_call(self) -> str:
        return py_call("dims = validate(", [f"{a.name}={a.name}" for a in self.args], ")", 4)

    def py_raise(self, message: str, indent: int) -> str:
        """`raise ValueError(f"{NAME}: <message> (m={m}, ...)")`."""
        text = f'f"{{NAME}}: {message} ({self.py_shape_message})"'
        return py_call("raise ValueError(", [text], ")", indent)

    def py_check(self, check: Check) -> str:
        return py_call("if not (", [check.cond.py], "):", 4)

    @property
    def py_summary(self) -> str:
        return textwrap.fill(self.summary, COLUMNS - 4, initial_indent="    ",
                             subsequent_indent="    ", break_long_words=False,
                             break_on_hyphens=False)


def spec_checks(kernel: ir.Kernel) -> list[Check]:
    """The checks every kind makes of what the spec fixes: `dims n= k=`, and
    silu_mul's even n."""
    checks = []
    if kernel.epilogue.activation is ir.Activation.SILU_MUL:
        checks.append(Check((var("n") % 2).eq(0), "silu_mul needs an even n (gate and up halves)"))
    if kernel.static_n is not None and kernel.op is not ir.Op.QUANTIZE:
        checks.append(Check(var("n").eq(kernel.static_n), f"the spec fixes n = {kernel.static_n}"))
    if kernel.static_k is not None:
        checks.append(Check(var("k").eq(kernel.static_k), f"the spec fixes k = {kernel.static_k}"))
    return checks


def where(loc: ir.Loc) -> str:
    return source_ref(loc)


def cond_expr(conds: tuple[ir.Cond, ...]) -> Expr:
    """A LUT rule's condition (`m <= 64 and n >= 128`)."""
    terms = [Bin(_CMP_OF[c.cmp.value], var(c.dim), Lit(c.value)) for c in conds]
    return all_of(*terms)


_CMP_OF = {o.value: o for o in _COMPARE}


def array(name: str) -> StepArg:
    return StepArg(ArgKind.ARRAY, name)


def i32(e: Expr | str) -> StepArg:
    return StepArg(ArgKind.VALUE, Call(Fn.I32, (expr(e),)))


def i64(e: Expr | str) -> StepArg:
    return StepArg(ArgKind.VALUE, Call(Fn.I64, (expr(e),)))


# ---------------------------------------------------------------------------
# Layout: what clang-format (the committed .clang-format) and ruff format
# print for the few data-dependent shapes the templates emit. Fixed text is
# written formatted in the templates themselves.


def _pack(first: str, items: Sequence[str], tail: str, indent: int) -> list[str] | None:
    """`first` then `items` separated by ", ", `tail` after the last, filled
    greedily into lines of at most COLUMNS; continuation lines start at
    column `indent`. None when an item does not fit."""
    lines, line = [], first
    for i, item in enumerate(items):
        piece = item + (tail if i == len(items) - 1 else ",")
        sep = "" if line.endswith("(") or line == " " * indent or not line.strip() else " "
        if len(line) + len(sep) + len(piece) <= COLUMNS:
            line += sep + piece
        else:
            if not line.strip() or line.endswith("("):
                return None
            lines.append(line)
            line = " " * indent + piece
            if len(line) > COLUMNS:
                return None
    lines.append(line)
    return lines


def _one_per_line(items: Sequence[str], tail: str, indent: int) -> list[str]:
    """The layout of last resort, for names too long for any line: one item
    per line, `indent` columns in (lines may pass COLUMNS; clang-format may
    lay such code out otherwise: docs/decisions.md, "Generated C++ layout")."""
    pad = " " * indent
    return [pad + item + ("," if i < len(items) - 1 else tail) for i, item in enumerate(items)]


def cpp_decl(head: str, params: Sequence[str], tail: str, indent: int = 0) -> str:
    """A function declaration `head` (up to its "("), its parameters and
    `tail` (") {" or ");") as clang-format lays it out: one line; else the
    parameters aligned after "(" when they all fit there; else on lines of
    their own, 4 columns in."""
    pad = " " * indent
    one = pad + head + ", ".join(params) + tail
    if len(one) <= COLUMNS:
        return one
    aligned = _pack(pad + head, params, tail, indent + len(head))
    if aligned is not None:
        return "\n".join(aligned)
    broken = _pack(" " * (indent + 4), params, tail, indent + 4)
    if broken is None or len(pad + head) > COLUMNS:
        return "\n".join([pad + head, *_one_per_line(params, tail, indent + 4)])
    return "\n".join([pad + head, *broken])


def cpp_call(head: str, args: Sequence[str], tail: str, indent: int) -> str:
    """A call statement `head(args tail` as clang-format lays it out: one
    line; else the layout with fewer lines of (a) the arguments aligned after
    "(" and (b) a break after "(" and the arguments 4 columns in (a on a
    tie)."""
    pad = " " * indent
    one = pad + head + ", ".join(args) + tail
    if len(one) <= COLUMNS:
        return one
    aligned = _pack(pad + head, args, tail, indent + len(head))
    broken = _pack(" " * (indent + 4), args, tail, indent + 4)
    if broken is None:
        return "\n".join([pad + head, *_one_per_line(args, tail, indent + 4)])
    broken = [pad + head, *broken]
    if aligned is not None and len(aligned) <= len(broken):
        return "\n".join(aligned)
    return "\n".join(broken)


def py_call(head: str, items: Sequence[str], tail: str, indent: int, *,
            tuple_of_one: bool = False) -> str:
    """`head` + items + `tail` (a call, tuple, list or dict display whose
    items cannot be split further) as ruff format lays it out: one line;
    else the items on one line of their own, 4 columns in; else one item a
    line with a trailing comma."""
    pad = " " * indent
    inner = ", ".join(items) + ("," if tuple_of_one else "")
    one = pad + head + inner + tail
    if len(one) <= COLUMNS:
        return one
    if len(pad) + 4 + len(inner) <= COLUMNS and not tuple_of_one:
        return f"{pad}{head}\n{pad}    {inner}\n{pad}{tail}"
    body = "\n".join(f"{pad}    {item}," for item in items)
    return f"{pad}{head}\n{body}\n{pad}{tail}"


def py_collection(head: str, items: Sequence[str], tail: str, indent: int) -> str:
    """A list, tuple, set or dict display: one line, else one item a line
    with a trailing comma (ruff format never packs a split collection)."""
    pad = " " * indent
    one = pad + head + ", ".join(items) + tail
    if len(one) <= COLUMNS:
        return one
    body = "\n".join(f"{pad}    {item}," for item in items)
    return f"{pad}{head}\n{body}\n{pad}{tail}"


def py_tuple(items: Sequence[str]) -> str:
    """A Python tuple display: `()`, `(a,)`, `(a, b)`."""
    if len(items) == 1:
        return f"({items[0]},)"
    return "(" + ", ".join(items) + ")"


def comment(text: str, indent: int = 0, mark: str = "//") -> str:
    """`text` as comment lines of at most COLUMNS columns."""
    pad = " " * indent
    width = COLUMNS - indent - len(mark) - 1
    lines = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)
    return "\n".join(f"{pad}{mark} {line}" for line in lines)


def cpp_string(head: str, text: str, tail: str) -> str:
    """`head "text" tail`; a literal past the column limit is split at spaces
    into adjacent literals aligned under the first, as clang-format does."""
    one = f'{head}"{text}"{tail}'
    if len(one) <= COLUMNS:
        return one
    col = len(head)
    width = COLUMNS - col - 2  # the quotes
    pieces: list[str] = []
    rest = text
    while rest:
        room = width - (len(tail) if len(rest) + len(tail) <= width else 0)
        if len(rest) <= room and len(rest) + len(tail) <= width:
            pieces.append(rest)
            break
        cut = rest.rfind(" ", 0, width)
        if cut <= 0:  # a word longer than the line: split after it
            cut = rest.find(" ", width)
            if cut < 0:
                pieces.append(rest)
                break
        pieces.append(rest[:cut + 1])
        rest = rest[cut + 1:]
    lines = [f'{head}"{pieces[0]}"'] + [f'{" " * col}"{p}"' for p in pieces[1:]]
    lines[-1] += tail
    return "\n".join(lines)


def cpp_assign_string(lhs: str, text: str, indent: int) -> str:
    """`lhs = "text";`: one line, else the literal on the next line 4 columns
    further in, split there when it is still too long."""
    pad = " " * indent
    one = f'{pad}{lhs} = "{text}";'
    if len(one) <= COLUMNS:
        return one
    return f"{pad}{lhs} =\n" + cpp_string(" " * (indent + 4), text, ";")
