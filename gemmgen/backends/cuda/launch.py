"""The launch plan every CUDA kernel kind shares.

A kind (tile GEMM, GEMV, quantize, tgmm) turns a kernel into a `LaunchPlan`:
its arguments in contract order (args.py), how the problem dims are read
off them, the checks a call must pass, and per tile of the LUT a `Variant`
of launch steps (steps.py: entry point, grid, block, dynamic shared memory,
arguments; tensor_maps.py: what each argument is), with the `Path` of each
other tensor-core body the launchers take instead on its device. The C++
header, the nvcc host launcher, the Python (CuPy) launcher, the Rust crate
(rust/) and the FFI handlers (ffi.py) are rendered from this one object;
the kind's own `.cu` template gets its kind-specific `detail` as well. So a
kernel and its launchers are printed from the same numbers and cannot
drift. Expressions are data (expr.py); the text the launcher templates print
is laid out by layout.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gemmgen import ir
from gemmgen.archs import parse_arch
from gemmgen.backends.cuda.abi import CAbi
from gemmgen.backends.cuda.args import Arg, Binding, Check, Derived
from gemmgen.backends.cuda.expr import COMPARISONS, Bin, Expr, Lit, Var, all_of, div, expr, exprs, var
from gemmgen.backends.cuda.launch_py import PyLaunchText
from gemmgen.backends.cuda.layout import (
    comment, cpp_call, cpp_decl, cpp_string, prose, py_collection,
)
from gemmgen.backends.cuda.steps import (
    DEFAULT_SMEM, DEVICE_NAMES, LIMITS, MAX_CLUSTER_BLOCKS, NO_CLUSTER, WARP, Grid, Limits, Path,
    Step, Variant,
)
from gemmgen.backends.cuda.tensor_maps import (
    TENSOR_MAP_DTYPES, TENSOR_MAP_SWIZZLES, ArgKind, StepArg, TensorMapSpec, array, i32, i64,
    tensor_map,
)
from gemmgen.names import args_struct
from gemmgen.render import source_ref

# The launch vocabulary, one import away (steps.py and tensor_maps.py hold it).
__all__ = [
    "DEFAULT_SMEM", "DEVICE_NAMES", "LIMITS", "MAX_CLUSTER_BLOCKS", "NO_CLUSTER",
    "TENSOR_MAP_DTYPES", "TENSOR_MAP_SWIZZLES", "WARP", "ArgKind", "Grid", "LaunchPlan", "Limits",
    "LUT_GROUPS", "Path", "Step", "StepArg", "TensorMapSpec", "Variant", "array", "cond_expr", "lut_groups", "tuned_where", "i32", "i64", "tensor_map", "where",
]



@dataclass(frozen=True, slots=True)
class LaunchPlan(PyLaunchText):
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
    # What pick_tile(m, n, k) gets; a LUT with rules on the groups also
    # gets g (LUT_GROUPS: the problem's groups, `lut_groups`).
    lut_dims: tuple[Expr, ...] = field(default=(Var("m"), Var("n"), Var("k")))

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
        return max(len(s) for v in self.variants for s in (v.steps, *(p.steps for p in v.paths)))

    @property
    def has_clusters(self) -> bool:
        """Whether a launch is a cluster launch (Step.cluster): the launchers
        then print their cluster launch, which no other plan's files carry."""
        return any(s.is_cluster for v in self.variants for s in v.all_steps)

    @property
    def cluster_entries(self) -> tuple[tuple[str, tuple[int, int, int]], ...]:
        """(entry, cluster) of each cluster launch, once per entry."""
        seen: dict[str, tuple[int, int, int]] = {}
        for v in self.variants:
            for s in v.all_steps:
                if s.is_cluster:
                    seen.setdefault(s.entry, s.cluster)
        return tuple(seen.items())

    @property
    def max_cluster_blocks(self) -> int:
        return MAX_CLUSTER_BLOCKS

    @property
    def has_paths(self) -> bool:
        """Whether a variant has the path of another tensor-core body (the
        launchers then ask the device for DEVICE_NAMES to pick it)."""
        return any(v.paths for v in self.variants)

    @property
    def uses_num_sms(self) -> bool:
        """Whether a path's condition or launches read the device's SM count
        (the Hopper path's persistent grid; the block-scaled path does not)."""
        return any(p.uses_sms or "num_sms" in p.when.names()
                   for v in self.variants for p in v.paths)

    @property
    def paths(self) -> tuple[Path, ...]:
        """One path of each body the variants have, in the table order."""
        seen: dict[str, Path] = {}
        for v in self.variants:
            for p in v.paths:
                seen.setdefault(p.body, p)
        return tuple(seen.values())

    @property
    def has_tensor_maps(self) -> bool:
        """Whether a launch takes a tensor map (the launchers then encode them)."""
        return bool(self.tensor_map_args)

    @property
    def path_conds(self) -> tuple[Expr, ...]:
        """The conditions of every variant's paths."""
        return tuple(p.when for v in self.variants for p in v.paths)

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
        lut = dict(zip(self.lut_names, (e.eval(env) for e in self.lut_dims)))
        return next(v for v in self.variants if v.applies(lut))

    @property
    def lut_names(self) -> tuple[str, ...]:
        """pick_tile's parameters: m, n, k, and g when a rule tests the groups."""
        return ("m", "n", "k", LUT_GROUPS)[:len(self.lut_dims)]

    @property
    def py_pick_tile_params(self) -> str:
        return ", ".join(f"{d}: int" for d in self.lut_names)

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
        return self.py_unpack(self.empty, *self.lut_dims, *self.path_conds,
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
                                 *(c.names() for c in self.path_conds),
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

    # -- the paths in words ---------------------------------------------------

    def paths_words(self, template: str = "{cc} the {title} path ({arch})", sep: str = ", ") -> str:
        """Each body's path and the compute capability that takes it, in the
        table order: "9.0 the Hopper path (sm_90a)"."""
        return sep.join(template.format(cc=p.cc, title=p.title, arch=p.arch, what=p.what)
                         for p in self.paths)

    def sms_words(self, noun: str) -> str:
        """The paths whose grid the SM count sizes: "Hopper body's"."""
        return " and the ".join(f"{p.title} {noun}'s" for p in self.paths if p.uses_sms)

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
    def cpp_launches_comment(self) -> str:
        """The comment above <name>_launches."""
        if not self.has_paths:
            return ("// The launches of call `a` in order, into `out`; returns how many (0: there\n"
                    "// is nothing to compute). The launcher below makes exactly these.")
        return prose("The launches of call `a` in order, into `out`, on a device of compute "
                     "capability `sm` (major * 10 + minor) with `num_sms` SMs; returns how many "
                     "(0: there is nothing to compute). The launcher below makes exactly these: "
                     f"on {self.paths_words()}, else the mma.sync path (sm = 0 too).", "// ")

    @property
    def cpp_device_comment(self) -> str:
        """The comment above launch_<name>'s device query."""
        sms = self.sms_words("body")
        text = ("The device: its compute capability picks the path ("
                + self.paths_words("{cc}: the {title} body", "; ") + ")"
                + (f", its SM count sizes the {sms} persistent grid" if sms else "") + ".")
        return prose(text, "  // ")

    @property
    def cpp_launch_decl(self) -> str:
        return cpp_decl(f"cudaError_t launch_{self.name}(",
                        [f"const {self.args_struct}& args", "cudaStream_t stream"], ");")

    @property
    def abi(self) -> CAbi:  # the kernel's C ABI, gg_<name>_launch() (abi.py)
        return CAbi(self)

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
                  for d in self.lut_names]
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

    def cpp_cluster_message(self, entry: str) -> str:
        """`return "<name>: launch <entry> ...";` at indent 6 (the C++
        launch_error's refusal of a grid that is not a multiple of the
        cluster)."""
        return cpp_string("      return ", f"{self.name}: launch {entry} needs a grid that is a "
                          "multiple of its cluster", ";")

    def cpp_message(self, message: str) -> str:
        """`return "<name>: <message>";` at indent 4, split as clang-format would."""
        return cpp_string("    return ", f"{self.name}: {message}", ";")



def where(loc: ir.Loc) -> str:
    return source_ref(loc)


def tuned_where(rule: ir.TileRule) -> str:
    """A LUT rule's position for its comment; a tuned row says so: "tuned
    v5e, specs/moe.gemm" (the block is found by its device)."""
    return f"tuned {rule.tuned}, {where(rule.loc)}" if rule.tuned else where(rule.loc)


# The name of the problem's groups in pick_tile (a grouped kernel's LUT with
# rules on g or m/g): `num_groups` (len(group_sizes), all groups also when
# group_offset shards them) on the contiguous layout, lhs.shape[0] on the
# masked one (`lut_groups`).
LUT_GROUPS = "g"


def lut_groups(kernel: ir.Kernel) -> tuple[Expr, ...]:
    """What pick_tile gets after m, n, k: the problem's groups when a rule
    of the kernel's LUT tests them, else nothing."""
    if not any(r.on_groups for r in kernel.tile_rules):
        return ()
    return (var("g" if kernel.masked else "num_groups"),)


def cond_expr(conds: tuple[ir.Cond, ...], masked: bool = False) -> Expr:
    """A LUT rule's condition (`m <= 64 and n >= 128`). `m/g` is m // g,
    true only when there are groups (`g > 0 and gg_div(m, g) <= 64`, no
    division by zero); on the masked layout m itself (a group's capacity)."""
    terms: list[Expr] = []
    for c in conds:
        assert c.dim != ir.TPU_COND, "validated: tpu= is for pallas_tpu rules"
        op, value = _CMP_OF[c.cmp.value], Lit(c.value)  # type: ignore[arg-type]
        if c.dim == "m/g" and not masked:
            g = var(LUT_GROUPS)
            terms += [Bin(_CMP_OF[">"], g, Lit(0)), Bin(op, div(var("m"), g), value)]
        else:
            terms.append(Bin(op, var("m" if c.dim == "m/g" else c.dim), value))
    return all_of(*terms)


_CMP_OF = {o.value: o for o in COMPARISONS}
