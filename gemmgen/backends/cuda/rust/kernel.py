"""The Rust module of one kernel (`src/<kernel>.rs`), printed from its LaunchPlan.

`RustKernel` is what templates/rust/launcher.rs.j2 prints: Args and Dims,
pick_tile, validate, workspace_bytes, and `launches` with every variant's
paths (the bodies other than mma.sync, taken on their device) and tensor
maps, the same plan the C++ and CuPy launchers print.
"""

from __future__ import annotations

from dataclasses import dataclass

from gemmgen.backends.cuda.expr import Expr, Var, negate
from gemmgen.backends.cuda.launch import DEVICE_NAMES, ArgKind, LaunchPlan, Step, Variant
from gemmgen.backends.cuda.layout import prose
from gemmgen.backends.cuda.rust.text import (
    HELPERS, WIDTH, called_helpers, field_doc, field_type, rs_call, rs_const, rs_doc,
    rs_format, rs_list, rs_use, used_names,
)


@dataclass(frozen=True)
class RustKernel:
    """The Rust text of one kernel's LaunchPlan."""

    plan: LaunchPlan
    # Whether a kernel of the crate launches clusters: then every Launch has
    # a `cluster` (common.rs).
    clusters: bool = False

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def summary_doc(self) -> str:
        return rs_doc(self.plan.summary, 0, "//!")

    @property
    def entries(self) -> str:
        items = [f'"{e}"' for e in self.plan.entries]
        return rs_const(f"pub const ENTRIES: [&str; {len(items)}] = ", items)

    @property
    def archs(self) -> str:
        items = [f'"{a}"' for a in self.plan.archs]
        return rs_const(f"pub const ARCHS: [&str; {len(items)}] = ", items)

    @property
    def has_paths(self) -> bool:
        """Whether `launches` takes the device (a body other than mma.sync)."""
        return self.plan.has_paths

    @property
    def launches_doc(self) -> str:
        """The doc comment of `launches`."""
        if not self.has_paths:
            return ("/// The launches of a valid call with dims `d`, in order (none when there\n"
                    "/// is nothing to compute). `launch` makes exactly these.")
        paths = self.plan.paths_words("compute capability {cc} the {title} path ({arch}: {what})")
        return prose("The launches of a valid call with dims `d` on `device`, in order (none when "
                     f"there is nothing to compute): on {paths}, else (and on `Device::UNKNOWN`) "
                     "the `mma.sync` path. `launch` makes exactly these.", "/// ")

    @property
    def fields(self) -> tuple[str, ...]:
        out: list[str] = []
        for a in self.plan.args:
            out += [rs_doc(field_doc(a), 4), f"    pub {a.name}: {field_type(a)},"]
        if self.plan.has_workspace:
            out += [rs_doc("`workspace_bytes(&dims)` bytes of device memory, 16-byte aligned.", 4),
                    "    pub workspace: Workspace,"]
        return tuple(out)

    @property
    def names(self) -> tuple[str, ...]:
        return self.plan.names

    @property
    def dims_doc(self) -> tuple[str, ...]:
        p = self.plan
        docs = {d: f"Dim `{d}`." for d in p.dims}
        for d in p.dims:
            if why := p.dim_comment(d):
                docs[d] = f"Dim `{d}`: {why}."
        docs |= {s.name: f"Scalar `{s.name}`." for s in p.scalars}
        docs |= {d.name: f"`{d.name}` = `{d.value.py}`." for d in p.derived}
        return tuple(docs[n] for n in self.names)

    @property
    def dims_display(self) -> str:
        fmt = ", ".join(f"{n}={{}}" for n in self.names)
        return rs_format("write!(", ["f", f'"{fmt}"'], [f"self.{n}" for n in self.names], ")", 8)

    # -- the tile pick ------------------------------------------------------

    @property
    def pick_tile_head(self) -> str:
        used = used_names(*(v.when for v in self.plan.rules))
        params = [f"{'' if d in used else '_'}{d}: i64" for d in self.plan.lut_names]
        return f"pub fn pick_tile({', '.join(params)}) -> usize {{"

    @property
    def pick_tile_body(self) -> tuple[str, ...]:
        out: list[str] = []
        for v in self.plan.rules:
            assert v.when is not None
            out += [f"    // {v.label}, {v.where}", f"    if {v.when.rs} {{",
                    f"        return {v.index};", "    }"]
        out += [f"    // {self.plan.default.label}, default", f"    {self.plan.default.index}"]
        return tuple(out)

    @property
    def lut(self) -> str:
        return ", ".join(e.rs for e in self.plan.lut_dims)

    # -- validate -----------------------------------------------------------

    @property
    def validate_body(self) -> tuple[str, ...]:
        p = self.plan
        out: list[str] = []
        for a in p.arrays:
            if not a.optional:
                out += [f"    if a.{a.name}.ptr == 0 {{",
                        f'        return Err(Error::Null {{ kernel: NAME, array: "{a.name}" }});',
                        "    }"]
        for a in p.arrays:
            call = f'common::check_extents(NAME, "{a.name}", {{}}.shape)?;'
            if a.optional:
                out.append(f"    if let Some(x) = a.{a.name} {{")
                out.append("        " + call.format("x"))
                out.append("    }")
            else:
                out.append("    " + call.format(f"a.{a.name}"))
        for sc in p.scalars:
            out.append(f'    common::check_scalar(NAME, "{sc.name}", a.{sc.name})?;')
        # The dims, as the Python launcher reads them: the last binding of a
        # dim wins; the shape checks below catch a disagreement.
        last = {b.dim: b for b in p.bindings if b.fallback is None}
        for d in p.dims:
            b = last.get(d)
            if b is not None:
                read = f"a.{b.arg}.shape[{b.axis}]" + (f" * {b.mul}" if b.mul != 1 else "")
                out.append(f"    let {d} = {read};")
        for s in p.scalars:
            out.append(f"    let {s.name} = a.{s.name};")
        for b in p.bindings:
            if b.fallback is not None:
                read = f"x.shape[{b.axis}]" + (f" * {b.mul}" if b.mul != 1 else "")
                out += [f"    let {b.dim} = match a.{b.arg} {{",
                        f"        Some(x) => {read},", f"        None => {b.fallback.rs},",
                        "    };"]
        for d in p.derived:
            out.append(f"    let {d.name} = {d.value.rs};")
        fields = ", ".join(self.names)
        line = f"    let d = Dims {{ {fields} }};"
        if len(line) > WIDTH:
            out.append("    let d = Dims {")
            out += [f"        {n}," for n in self.names]
            out.append("    };")
        else:
            out.append(line)
        for a in p.arrays:
            shape = "[" + ", ".join(s.rs for s in a.shape) + "]"
            if a.optional:
                out.append(f"    if let Some(x) = a.{a.name} {{")
                out.append(rs_call("common::check_shape(", ["NAME", f'"{a.name}"', "x.shape", shape],
                                   ")?;", 8))
                out.append("    }")
            else:
                out.append(rs_call("common::check_shape(",
                                   ["NAME", f'"{a.name}"', f"a.{a.name}.shape", shape], ")?;", 4))
        for c in p.checks:
            cond = negate(c.cond).rs
            head = f"    if {cond} {{"
            if len(head) > WIDTH:
                raise AssertionError(f"condition too long for one line: {cond}")
            out += [head, self._err(f'd.check("{c.message}")', 8), "    }"]
        for a in p.aligned:
            assert a.align & (a.align - 1) == 0, "alignments are powers of two"
            if a.optional:
                out.append(f"    if matches!(a.{a.name}, Some(x) if !common::is_aligned(x.ptr, {a.align})) {{")
            else:
                out.append(f"    if !common::is_aligned(a.{a.name}.ptr, {a.align}) {{")
            out += [self._err(f'misaligned("{a.name}", {a.align})', 8), "    }"]
        if p.has_workspace:
            out += ["    let need = workspace_bytes(&d);",
                    "    let w = a.workspace;",
                    "    if w.ptr == 0 || !common::is_aligned(w.ptr, 16) || w.bytes < need {",
                    "        return Err(Error::Workspace { kernel: NAME, need, got: w });",
                    "    }"]
        device = ", Device::UNKNOWN" if p.has_paths else ""
        out.append(f"    common::check_launches(NAME, &launches(a, &d{device}), &d, None)?;")
        out.append("    Ok(d)")
        return tuple(out)

    @staticmethod
    def _err(value: str, indent: int) -> str:
        line = f"{' ' * indent}return Err({value});"
        if len(line) <= WIDTH:
            return line
        inner = value[value.index("(") + 1:-1]
        head = value[:value.index("(") + 1]
        return "\n".join([f"{' ' * indent}return Err({head}", f"{' ' * (indent + 4)}{inner},",
                          f"{' ' * indent}));"])

    @property
    def checks_used(self) -> bool:
        return bool(self.plan.checks)

    @property
    def aligned_used(self) -> bool:
        return bool(self.plan.aligned)

    # -- workspace and launches --------------------------------------------

    def unpack(self, *exprs: Expr) -> str:
        used = used_names(*exprs)
        names = [n for n in self.names if n in used]
        if not names:
            return ""
        rest = ", .." if len(names) < len(self.names) else ""
        return rs_list("let Dims { ", names, f"{rest} }} = *d;", 4).replace(
            "{ \n", "{\n")

    @property
    def workspace_unpack(self) -> str:
        return self.unpack(*self.lut_used, *(v.workspace_ints for v in self.plan.variants))

    @property
    def lut_used(self) -> tuple[Expr, ...]:
        """The LUT's dims, when there is a tile to pick."""
        return self.plan.lut_dims if len(self.plan.variants) > 1 else ()

    @property
    def workspace_body(self) -> tuple[str, ...]:
        p = self.plan
        if len(p.variants) == 1:
            return (f"    let ints = {p.default.workspace_ints.rs};",)
        out = [f"    let ints = match pick_tile({self.lut}) {{"]
        for v in p.rules:
            out.append(f"        {v.index} => {v.workspace_ints.rs},")
        out += [f"        _ => {p.default.workspace_ints.rs},", "    };"]
        return tuple(out)

    @property
    def steps(self) -> list[Step]:
        return [s for v in self.plan.variants for s in v.all_steps]

    def _arg_names(self) -> list[Expr]:
        return [Var(n) for s in self.steps for a in s.args for n in sorted(a.names())]

    @property
    def launches_unpack(self) -> str:
        steps = self.steps
        return self.unpack(self.plan.empty, *self.lut_used, *self.plan.path_conds,
                           *(g for s in steps for g in s.grid), *self._arg_names())

    @property
    def device_unpack(self) -> str:
        """`let Device { sm, num_sms } = device;`: the names of DEVICE_NAMES
        the paths' conditions and grids use."""
        steps = self.steps
        used = used_names(*self.plan.path_conds, *(g for s in steps for g in s.grid), *self._arg_names())
        names = [n for n in DEVICE_NAMES if n in used]
        if not names:
            return ""
        rest = ", .." if len(names) < len(DEVICE_NAMES) else ""
        return f"    let Device {{ {', '.join(names)}{rest} }} = device;"

    @property
    def launches_head(self) -> str:
        a = "a" if self.uses_args else "_a"
        if self.has_paths:
            return f"pub fn launches({a}: &Args, d: &Dims, device: Device) -> Vec<Launch> {{"
        return f"pub fn launches({a}: &Args, d: &Dims) -> Vec<Launch> {{"

    @property
    def uses_args(self) -> bool:
        return any(a.kind is not ArgKind.VALUE for s in self.steps for a in s.args)

    def _ptr(self, name: str) -> str:
        arg = next(x for x in self.plan.arrays if x.name == name)
        return f"a.{name}.map_or(0, |x| x.ptr)" if arg.optional else f"a.{name}.ptr"

    def _map_items(self, a) -> list[str]:
        """tensor_map()'s arguments: the plan's TensorMapSpec, as the C++
        and Python launchers print it."""
        t = a.tmap
        return [self._ptr(a.name), str(t.code), "&[" + ", ".join(d.rs for d in t.dims) + "]",
                "&[" + ", ".join(s.rs for s in t.strides) + "]",
                "&[" + ", ".join(str(b) for b in t.box) + "]", str(t.swizzle_code)]

    def _arg(self, a) -> str:
        if a.tmap is not None:
            return f"tensor_map({', '.join(self._map_items(a))})"
        if a.value is not None:
            return a.value.rs
        if a.name == "workspace":
            return "KernelArg::Ptr(a.workspace.ptr)"
        arg = next(x for x in self.plan.arrays if x.name == a.name)
        if arg.optional:
            return f"KernelArg::Ptr(a.{a.name}.map_or(0, |x| x.ptr))"
        return f"KernelArg::Ptr(a.{a.name}.ptr)"

    def _launch(self, s: Step, indent: int) -> list[str]:
        pad = " " * indent
        out = [rs_doc(f"{s.entry}: {s.comment}", indent, "//"), f"{pad}Launch {{",
               f"{pad}    kernel: NAME,", f'{pad}    entry: "{s.entry}",']
        what = f'{pad}    what: "{s.comment}",'
        below = f'{pad}        "{s.comment}",'
        if len(what) > WIDTH and len(below) <= WIDTH:  # rustfmt: the literal on the next line
            what = f"{pad}    what:\n{below}"
        out.append(what)
        out.append(rs_list("grid: [", [g.rs for g in s.grid], "],", indent + 4))
        out += [f"{pad}    threads: {s.block},", f"{pad}    smem: {s.smem},"]
        if self.clusters:
            out.append(f"{pad}    cluster: [{', '.join(str(c) for c in s.cluster)}],")
        args = rs_list("args: vec![", [self._arg(a) for a in s.args], "],", indent + 4)
        if "\n" in args:  # one a line; a map too long for its line, one argument a line
            lines = [f"{pad}    args: vec!["]
            for a in s.args:
                item = f"{pad}        {self._arg(a)},"
                if a.tmap is not None and len(item) > WIDTH:
                    item = rs_call("tensor_map(", self._map_items(a), "),", indent + 8)
                lines.append(item)
            args = "\n".join([*lines, f"{pad}    ],"])
        out.append(args)
        out.append(f"{pad}}},")
        return out

    def _vec(self, steps: tuple[Step, ...], indent: int) -> list[str]:
        pad = " " * indent
        out = ["vec!["]
        for s in steps:
            out += self._launch(s, indent + 4)
        out.append(f"{pad}]")
        return out

    def _paths(self, v: Variant, indent: int) -> list[str]:
        """`if <when> { return vec![..steps..]; }` of each of the variant's
        paths, at `indent`."""
        pad = " " * indent
        out: list[str] = []
        for p in v.paths:
            head = f"{pad}if {p.when.rs} {{"
            if len(head) > WIDTH:
                raise AssertionError(f"condition too long for one line: {p.when.rs}")
            vec = self._vec(p.steps, indent + 4)
            out += [head, f"{pad}    // The {p.title} path: {p.label}",
                    f"{pad}    return {vec[0]}", *vec[1:-1], vec[-1] + ";", f"{pad}}}"]
        return out

    @property
    def launches_body(self) -> tuple[str, ...]:
        p = self.plan
        out = [f"    if {p.empty.rs} {{", "        return Vec::new();", "    }"]
        if len(p.variants) == 1:
            out += self._paths(p.default, 4)
            v = self._vec(p.default.steps, 4)
            out += ["    " + v[0], *v[1:]]
            return tuple(out)
        out.append(f"    match pick_tile({self.lut}) {{")
        for v in p.variants:
            key = "_" if v is p.default else str(v.index)
            out.append(f"        // {v.label}")
            if v.paths:
                vec = self._vec(v.steps, 12)
                out += [f"        {key} => {{", *self._paths(v, 12), f"            {vec[0]}",
                        *vec[1:], "        }"]
            else:
                vec = self._vec(v.steps, 8)
                out += [f"        {key} => {vec[0]}", *vec[1:-1], vec[-1] + ","]
        out.append("    }")
        return tuple(out)

    @property
    def helpers(self) -> tuple[str, ...]:
        p = self.plan
        exprs: list[Expr] = [*p.lut_dims, p.empty, *(c.cond for c in p.checks),
                             *(d.value for d in p.derived),
                             *(s for a in p.arrays for s in a.shape),
                             *(b.fallback for b in p.bindings if b.fallback is not None),
                             *(v.when for v in p.rules if v.when is not None)]
        if p.has_workspace:
            exprs += [v.workspace_ints for v in p.variants]
        exprs += [g for s in self.steps for g in s.grid]
        exprs += [a.value for s in self.steps for a in s.args if a.value is not None]
        exprs += [e for s in self.steps for a in s.args if a.tmap is not None
                  for e in (*a.tmap.dims, *a.tmap.strides)]
        exprs += p.path_conds
        used: set[str] = set()
        for e in exprs:
            used |= called_helpers(e)
        return tuple(h for h in HELPERS if h in used)

    @property
    def imports(self) -> str:
        types = ["Array", "Backend", "Error", "Launch", "Refusal"]
        if self.has_paths:
            types.append("Device")
        if any(a.kind is ArgKind.ARRAY for s in self.steps for a in s.args):
            types.append("KernelArg")
        if self.plan.has_workspace:
            types.append("Workspace")
        # rustfmt's order: self, then snake_case, then CamelCase names.
        helpers = [*self.helpers, *(["tensor_map"] if self.plan.has_tensor_maps else [])]
        names = ["self", *sorted(helpers), *sorted(types)]
        return rs_use("crate::common", names)
