"""The launch plan every CUDA kernel kind shares.

A kind (tile GEMM, GEMV, quantize, tgmm) turns a kernel into a `LaunchPlan`:
its arguments in contract order (cuda_args), how the problem dims are read
off them, the checks a call must pass, and per tile of the LUT the sequence
of launch steps (entry point, grid, block, dynamic shared memory,
arguments). The C++ header, the nvcc host launcher and the Python (CuPy)
launcher are rendered from this one object by generic templates; the kind's
own `.cu` template gets its kind-specific `detail` as well. So a kernel and
its launchers are printed from the same numbers and cannot drift.
Expressions are data (cuda_expr); the text the launcher templates print is
laid out by cuda_layout.
"""

from __future__ import annotations

import enum
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gemmgen import ir
from gemmgen.archs import parse_arch
from gemmgen.backends.cuda.args import Arg, Binding, Check, Derived
from gemmgen.backends.cuda.expr import (
    COMPARISONS, ZERO, Bin, Call, Expr, Fn, Lit, Var, all_of, expr, exprs, var,
)
from gemmgen.backends.cuda.layout import (
    COLUMNS, comment, cpp_assign_string, cpp_call, cpp_decl, cpp_string, one_per_line, pack,
    py_call, py_collection, py_tuple,
)
from gemmgen.names import args_struct
from gemmgen.render import source_ref

__all__ = [
    "DEFAULT_SMEM", "DEVICE_NAMES", "LIMITS", "TENSOR_MAP_DTYPES", "TENSOR_MAP_SWIZZLES", "WARP",
    "ArgKind", "Grid", "LaunchPlan", "Limits", "Step", "StepArg", "TensorMapSpec", "Variant",
    "array", "cond_expr", "i32", "i64", "tensor_map", "where",
]

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


# What the launchers know of the device, besides the dims: its compute
# capability as major * 10 + minor (`sm`, 90 on an H100 or H200) and its
# number of SMs (`num_sms`, the persistent grid of the Hopper GEMM). The C++
# launcher asks cudaDeviceGetAttribute, the CuPy call CuPy; `launches()`
# without them (0, 0) is the path every arch runs.
DEVICE_NAMES = ("sm", "num_sms")


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
        return self.cpp_comment_at(6)

    def cpp_comment_at(self, indent: int) -> str:
        return comment(f"{self.entry}: {self.comment}", indent)

    def cpp_what(self, i: int, indent: int = 6) -> str:
        return cpp_assign_string(f"out[{i}].what", self.comment, indent)

    @property
    def cpp_set_attribute(self) -> str:
        return self.cpp_set_attribute_at(6)

    def cpp_set_attribute_at(self, indent: int) -> str:
        args = [self.entry, "cudaFuncAttributeMaxDynamicSharedMemorySize", str(self.smem)]
        return cpp_call("cudaFuncSetAttribute(", args, ");", indent, lhs="err")

    def cpp_launch(self, i: int) -> str:
        """The launch of step `i` of launch_<name>, with the sizes of `l[i]`,
        at indent 6."""
        return self.cpp_launch_at(i, 6)

    def cpp_launch_at(self, i: int, indent: int) -> str:
        """The launch of step `i` at `indent`."""
        config = [f"gg_grid(l[{i}])", f"gg_block(l[{i}])", f"l[{i}].smem", "stream"]
        head = f"{self.entry}<<<{', '.join(config)}>>>("
        if len(head) + indent <= COLUMNS:
            return cpp_call(head, list(self.cpp_args), ");", indent)
        # A long entry name: clang-format breaks the launch configuration,
        # aligned after "<<<" or, when that takes more lines, 4 columns in
        # on the line after "<<<".
        cont = indent + 4
        first = " " * indent + f"{self.entry}<<<"
        aligned = pack(first, config, ">>>(", len(first))
        below_config = (pack(" " * cont, config, ">>>(", cont)
                        or one_per_line(config, ">>>(", cont))
        broken = [first, *below_config]
        lines = aligned if aligned is not None and len(aligned) <= len(broken) else broken
        # The arguments: after ">>>(" (aligned there) or on lines of their
        # own 4 columns in, whichever breaks fewer lines (aligned on a tie).
        after = pack(lines[-1], list(self.cpp_args), ");", len(lines[-1]))
        below = (pack(" " * cont, list(self.cpp_args), ");", cont)
                 or one_per_line(list(self.cpp_args), ");", cont))
        if after is not None and len(after) - 1 <= len(below):
            return "\n".join(lines[:-1] + after)
        lines += below
        return "\n".join(lines)

    def py_launch(self, indent: int) -> str:
        """`Launch(...)` of this step, an item of a list (ends in ",")."""
        args = list(self.py_args)
        parts: list[str | list[str]] = [
            f'"{self.entry}"', [a.py for a in self.grid], [str(self.block), "1", "1"],
            str(self.smem), args, f'"{self.comment}"']
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
            if p is args and len(pad) + 5 + len(item) > COLUMNS:  # one argument a line
                lines += [f"{pad}    (", *(a.py_item(indent + 8) for a in self.args),
                          f"{pad}    ),"]
            elif isinstance(p, list) and len(pad) + 5 + len(item) > COLUMNS:
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
    # The Hopper path (sm_90a, docs/cuda-hopper.md): its launches, run instead
    # of `steps` when `sm90_when` holds (over the dims and DEVICE_NAMES).
    sm90_steps: tuple[Step, ...] = ()
    sm90_when: Expr | None = None
    sm90_label: str = ""  # e.g. "128x128x64, 5 stages"

    def __post_init__(self) -> None:
        if isinstance(self.when, str):
            object.__setattr__(self, "when", expr(self.when) if self.when else None)
        object.__setattr__(self, "workspace_ints", expr(self.workspace_ints))
        if isinstance(self.sm90_when, str):
            object.__setattr__(self, "sm90_when", expr(self.sm90_when))
        assert bool(self.sm90_steps) == (self.sm90_when is not None)

    @property
    def has_sm90(self) -> bool:
        return bool(self.sm90_steps)

    @property
    def sm90_maps(self) -> tuple:
        """The tensor-map arguments of the Hopper GEMM launch (its last step)."""
        return tuple(a for a in self.sm90_steps[-1].args if a.tmap is not None) \
            if self.sm90_steps else ()

    def steps_for(self, env: Mapping[str, int]) -> tuple[Step, ...]:
        """The launches for these dims and device (env has DEVICE_NAMES)."""
        if self.sm90_when is not None and self.sm90_when.eval(env):
            return self.sm90_steps
        return self.steps

    @property
    def all_steps(self) -> tuple[Step, ...]:
        return self.steps + self.sm90_steps

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
        object.__setattr__(self, "lut_dims", exprs(self.lut_dims))
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
        return max((s.smem for v in self.variants for s in v.all_steps), default=0)

    @property
    def max_steps(self) -> int:
        return max(max(len(v.steps), len(v.sm90_steps)) for v in self.variants)

    @property
    def has_sm90(self) -> bool:
        """Whether a variant has a Hopper path (the launchers then ask the
        device for DEVICE_NAMES and encode tensor maps)."""
        return any(v.has_sm90 for v in self.variants)

    @property
    def py_archs(self) -> str:
        """The declared archs as the Python launcher's ARCHS tuple."""
        items = ", ".join(f'"{a}"' for a in self.archs)
        return f"({items},)" if len(self.archs) == 1 else f"({items})"

    @property
    def min_sm(self) -> int:
        """The compute capability (major * 10 + minor) of the oldest declared
        arch: the Python launcher refuses an older device."""
        return min(parse_arch(a)[0] for a in self.archs)

    @property
    def tensor_map_args(self) -> tuple[StepArg, ...]:
        """Every tensor-map argument of the plan's launches, once per array."""
        seen: dict[str, StepArg] = {}
        for v in self.variants:
            for s in v.all_steps:
                for a in s.args:
                    if a.kind is ArgKind.TENSOR_MAP:
                        seen.setdefault(a.name, a)
        return tuple(seen.values())

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
        steps = [s for v in self.variants for s in v.all_steps]
        conds = [v.sm90_when for v in self.variants if v.sm90_when is not None]
        return self.py_unpack(self.empty, *self.lut_dims, *conds,
                              *(g for s in steps for g in s.grid),
                              *(Var(n) for s in steps for a in s.args for n in sorted(a.names())))

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
                                 *(v.sm90_when.names() for v in self.variants
                                   if v.sm90_when is not None),
                                 *(a.names() for v in self.variants for s in v.all_steps
                                   for a in s.args))
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

    def cpp_assign(self, lhs: str, suffix: str, args: Sequence[str]) -> str:
        """`lhs = <name><suffix>args);` (suffix ends in "("), indented 2 and
        laid out as clang-format would."""
        return cpp_call(f"{self.name}{suffix}", args, ");", 2, lhs=lhs)

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
        """`def <name>(inputs, *, outputs=None, workspace=None, stream=None):`."""
        params = [f"{a.name}=None" if a.optional else a.name for a in self.inputs]
        params += ["*"] + [f"{a.name}=None" for a in self.outputs] + ["workspace=None", "stream=None"]
        return py_call(f"def {self.name}(", params, "):", 0)

    @property
    def py_validate_signature(self) -> str:
        params = ["*"] + [f"{a.name}=None" if a.optional else a.name for a in self.inputs]
        params += [f"{a.name}=None" for a in self.outputs]
        return py_call("def validate(", params, ") -> dict[str, int]:", 0)

    def py_validate(self, indent: int, lhs: str) -> str:
        """`<lhs>validate(lhs=lhs, ...)` at `indent`."""
        return py_call(f"{lhs}validate(", [f"{a.name}={a.name}" for a in self.args], ")", indent)

    @property
    def py_prepare_call(self) -> str:
        """The arrays of a call by name, the workspace last, for _prepare."""
        names = [a.name for a in self.arrays] + ["workspace"]
        return py_collection("named = {", [f'"{n}": {n}' for n in names], "}", 8)

    @property
    def py_launch_arrays(self) -> str:
        """The arrays of a call in DTYPES order, then the workspace."""
        names = [a.name for a in self.arrays] + ["workspace"]
        return py_collection("arrays = (", names, ")", 4)

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



def where(loc: ir.Loc) -> str:
    return source_ref(loc)


def cond_expr(conds: tuple[ir.Cond, ...]) -> Expr:
    """A LUT rule's condition (`m <= 64 and n >= 128`)."""
    terms = [Bin(_CMP_OF[c.cmp.value], var(c.dim), Lit(c.value)) for c in conds]
    return all_of(*terms)


_CMP_OF = {o.value: o for o in COMPARISONS}


def array(name: str) -> StepArg:
    return StepArg(ArgKind.ARRAY, name)


def i32(e: Expr | str) -> StepArg:
    return StepArg(ArgKind.VALUE, Call(Fn.I32, (expr(e),)))


def i64(e: Expr | str) -> StepArg:
    return StepArg(ArgKind.VALUE, Call(Fn.I64, (expr(e),)))


def tensor_map(name: str, spec: TensorMapSpec) -> StepArg:
    return StepArg(ArgKind.TENSOR_MAP, name, spec)

