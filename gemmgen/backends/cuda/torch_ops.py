"""The PyTorch ops: one `torch.library.custom_op` per CUDA kernel and dispatcher.

For every kernel emitted for CUDA, `torch/<kernel>.py` registers the op
`gemmgen_<stem>::<kernel>` with the CUDA launcher's arguments (tensors,
`group_offset` as an int, optional arrays as `Tensor?`) and:

- a fake (meta) implementation, so `torch.compile(fullgraph=True)` traces it
  (with a dynamic M);
- a CUDA implementation and a CPU one, both calling the kernel's C ABI
  `gg_<kernel>_launch()` (LaunchPlan.abi.params, defined in `<kernel>.cu`,
  the entry the XLA FFI handler calls too) through ctypes: the library built
  for the GPU, on `torch.cuda.current_stream()`, or the same source built
  against gemmgen's CPU emulator (`gemmgen compile --torch [--emulate]`);
- for 16-bit dense and grouped kernels, autograd (`register_autograd`):
  dlhs through the same op with the weight transposed, drhs through the
  same op (dense) or through the spec's tgmm kernel (grouped).

`torch/<dispatch>.py` registers a dispatcher's op: the arm its rules pick
for M, on the arms' C ABIs; with dense 16-bit arms, autograd through the
dispatcher itself. `torch/__init__.py` imports them all and has
`load_all(folder)`.

Every module is printed from the kernel's CUDA LaunchPlan, so an op cannot
drift from the launcher it calls. Pure: no I/O (docs/architecture.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from gemmgen import ir
from gemmgen.backends.cuda.args import Arg
from gemmgen.backends.cuda.kinds import plan as cuda_plan
from gemmgen.backends.cuda.launch import LaunchPlan
from gemmgen.backends.cuda.layout import COLUMNS, py_call, py_collection, py_times4
from gemmgen.render import header_text, render_template

__all__ = ["DispatchOp", "TorchOp", "kernels", "plan", "render"]

# torch dtypes of the storage dtypes, by NumPy storage name.
_TORCH = {
    "float32": "float32", "bfloat16": "bfloat16", "float16": "float16",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "int8": "int8",
    "uint8": "uint8", "int32": "int32",
}

_HELPERS = {
    "gg_cdiv": "def gg_cdiv(a, b):\n    return -(-a // b)",
    "gg_div": "def gg_div(a, b):\n    return a // b",
    "gg_min": "def gg_min(a, b):\n    return min(a, b)",
}


def kernels(spec: ir.Spec) -> tuple[ir.Kernel, ...]:
    """The kernels that get an op: every kernel emitted for CUDA."""
    return tuple(spec.kernels_for(ir.Backend.CUDA))


def library(name: str, emulated: bool = False) -> str:
    """The file `gemmgen compile --torch` writes for a kernel's C ABI."""
    return f"lib{name}_emu.so" if emulated else f"lib{name}.so"


def _sixteen_bit(dtype: ir.DType) -> bool:
    return dtype in (ir.DType.BF16, ir.DType.F16)


@dataclass(frozen=True, slots=True)
class Grad:
    """How the op's backward pass runs: dlhs through this op with the weight
    transposed, drhs through `drhs_op` (this op, or the spec's tgmm)."""

    drhs_module: str  # the module of drhs's op ("" for this one)
    drhs_name: str
    rhs_kn: bool  # rhs is [.., k, n]


@dataclass(frozen=True, slots=True)
class TorchOp:
    kernel: ir.Kernel
    launch: LaunchPlan
    stem: str
    spec_path: str
    grad: Grad | None

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def namespace(self) -> str:
        return f"gemmgen_{self.stem}"

    @property
    def op(self) -> str:
        return f"{self.namespace}::{self.name}"

    @property
    def library(self) -> str:
        return library(self.name)

    @property
    def emulated_library(self) -> str:
        return library(self.name, emulated=True)

    @property
    def inputs(self) -> tuple[Arg, ...]:
        return self.launch.inputs

    @property
    def outputs(self) -> tuple[Arg, ...]:
        return self.launch.outputs

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.inputs)

    def _param(self, a: Arg, typed: bool) -> str:
        if a.is_scalar:
            return f"{a.name}: int = 0" if typed else f"{a.name}=0"
        if a.optional:
            return f"{a.name}: torch.Tensor | None = None" if typed else f"{a.name}=None"
        return f"{a.name}: torch.Tensor" if typed else a.name

    @property
    def result_type(self) -> str:
        if len(self.outputs) == 1:
            return "torch.Tensor"
        return "tuple[" + ", ".join("torch.Tensor" for _ in self.outputs) + "]"

    @property
    def py_op_def(self) -> str:
        params = [self._param(a, True) for a in self.inputs]
        text = py_call(f"def {self.name}(", params, f") -> {self.result_type}:", 0)
        if len(params) == 1 and "\n" in text:  # ruff format: a lone split parameter gets a comma
            text = text.replace(f"    {params[0]}\n", f"    {params[0]},\n")
        return text

    def renamed_op_def(self, name: str) -> str:
        """py_op_def for a function of another name (a dispatcher's op)."""
        params = [self._param(a, True) for a in self.inputs]
        text = py_call(f"def {name}(", params, f") -> {self.result_type}:", 0)
        if len(params) == 1 and "\n" in text:
            text = text.replace(f"    {params[0]}\n", f"    {params[0]},\n")
        return text

    @property
    def check_def(self) -> str:
        """`def _check(<the parameters>):`, laid out."""
        return py_call("def _check(", list(self.param_names), "):", 0)

    def py_def(self, name: str) -> str:
        return py_call(f"def {name}(", [self._param(a, False) for a in self.inputs], "):", 0)

    def py_call(self, head: str, indent: int = 4, *, extra: tuple[str, ...] = ()) -> str:
        return py_call(head, [*extra, *self.param_names], ")", indent)

    @property
    def arrays(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.inputs if not a.is_scalar)

    @property
    def py_dtypes(self) -> tuple[str, ...]:
        return tuple(f'    "{a.name}": torch.{_TORCH[a.nptype]},' for a in self.launch.arrays)

    @property
    def py_ndims(self) -> tuple[str, ...]:
        return tuple(f'    "{a.name}": {len(a.shape)},' for a in self.launch.arrays)

    @property
    def py_arrays(self) -> str:
        items = [f'"{a.name}": {a.name}' for a in self.arrays]
        return py_collection("arrays = {", items, "}", 4)

    @property
    def py_helpers(self) -> tuple[str, ...]:
        text = " ".join(a.shape_text for a in self.launch.args) + " ".join(
            d.value.py for d in self.launch.derived) + self.py_workspace
        return tuple(body for name, body in _HELPERS.items() if f"{name}(" in text)

    @property
    def py_dim_lines(self) -> tuple[str, ...]:
        """The dims read off the tensors (SymInts under torch.compile), then
        those with a fallback, then the derived names."""
        lines = []
        for b in self.launch.bindings:
            if b.fallback is None:
                mul = "" if b.mul == 1 else f" * {b.mul}"
                lines.append(f"    {b.dim} = {b.arg}.shape[{b.axis}]{mul}")
        for b in self.launch.bindings:
            if b.fallback is not None:
                mul = "" if b.mul == 1 else f" * {b.mul}"
                lines += [f"    if {b.arg} is not None:",
                          f"        {b.dim} = {b.arg}.shape[{b.axis}]{mul}",
                          "    else:",
                          f"        {b.dim} = {b.fallback.py}"]
        lines += [f"    {d.name} = {d.value.py}" for d in self.launch.derived]
        return tuple(lines)

    @property
    def py_expected(self) -> str:
        items = [f'"{a.name}": {_py_tuple(a)}' for a in self.launch.arrays if not a.is_output]
        return py_collection("expected = {", items, "}", 4)

    @property
    def py_dims_dict(self) -> str:
        names = [*self.launch.dims, *(s.name for s in self.launch.scalars),
                 *(d.name for d in self.launch.derived)]
        return py_collection("return {", [f'"{n}": {n}' for n in names], "}", 4)

    @property
    def py_out_shapes(self) -> tuple[tuple[str, str, str], ...]:
        """(name, torch dtype, shape over dims[...]) of each output."""
        out = []
        for a in self.outputs:
            items = [_over_dims(s.py) for s in a.shape]
            shape = f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"
            out.append((a.name, f"torch.{_TORCH[a.nptype]}", shape))
        return tuple(out)

    @property
    def py_workspace(self) -> str:
        """The workspace's bytes over the dims (`d`), "" without one."""
        if not self.launch.has_workspace:
            return ""
        ints = self._workspace_ints
        total = ints[0] if len(ints) == 1 else "max(" + ", ".join(ints) + ")"
        return f"4 * ({total})"

    @property
    def _workspace_ints(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(_over_dims(v.workspace_ints.py) for v in self.launch.variants
                                   if v.has_workspace))

    @property
    def py_workspace_line(self) -> str:
        items = [self.py_workspace, "dtype=torch.uint8", "device=lhs.device"]
        if len(" " * 8 + self.py_workspace + ",") <= COLUMNS:
            return py_call("workspace = torch.empty(", items, ")", 4)
        # A LUT's max() of worklist sizes too long for an argument line (which
        # ruff would break inside the product): the bytes named first.
        return (py_times4("workspace_bytes", list(self._workspace_ints), 4) + "\n"
                + py_call("workspace = torch.empty(", ["workspace_bytes", *items[1:]], ")", 4))

    @property
    def py_abi_argtypes(self) -> str:
        kinds = {"const void*": "ctypes.c_void_p", "void*": "ctypes.c_void_p",
                 "long long": "ctypes.c_longlong", "unsigned long long": "ctypes.c_ulonglong",
                 "const char**": "ctypes.POINTER(ctypes.c_char_p)"}
        items = [kinds[t] for t, _ in self.launch.abi.params]
        return py_collection("entry.argtypes = [", items, "]", 4)

    @property
    def py_abi_call(self) -> str:
        """The C ABI's call in _run (arrays through _pointer, dims from `d`)."""
        values = [f"_pointer({a.name}, stand_in)" for a in self.launch.arrays]
        values += [f'd["{n}"]' for n in self.launch.dims]
        values += [f'd["{s.name}"]' for s in self.launch.scalars]
        if self.launch.has_workspace:
            values += ["workspace.data_ptr()", "workspace.numel()"]
        values += ["stream", "ctypes.byref(error)"]
        return py_call("status = entry(", values, ")", 4)

    @property
    def py_summary(self) -> str:
        return self.launch.py_summary


def _over_dims(py: str) -> str:
    """A launch-plan expression over the names of `d` (the dims dict)."""
    return re.sub(r"\b(?!gg_)([a-z_][a-z_0-9]*)\b(?!\()", lambda m: f'd["{m.group(1)}"]', py)


def _natural(name: str) -> tuple:
    """isort's (ruff's) order of names: digit runs compare as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _py_tuple(a: Arg) -> str:
    items = [s.py for s in a.shape]
    if not items:
        return "()"
    return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"


def _plain16(kernel: ir.Kernel) -> bool:
    """A dense or grouped kernel (not masked) with 16-bit operands of one
    type and no scales, bias or epilogue: its gradients are products of the
    same kind."""
    view = kernel.for_backend(ir.Backend.CUDA)
    if view.op not in (ir.Op.DENSE, ir.Op.GROUPED) or view.masked:
        return False
    if not (_sixteen_bit(view.lhs.dtype) and view.rhs_operand.dtype == view.lhs.dtype):
        return False
    return not (view.lhs_scale.enabled or view.rhs_scale.enabled
                or view.bias.mode is not ir.BiasMode.NONE
                or view.epilogue.activation is not ir.Activation.NONE
                or view.epilogue.alpha is not None)


def _rhs_kn(lp: LaunchPlan) -> bool:
    """Whether the launcher's rhs is [.., k, n]."""
    rhs = next(a for a in lp.args if a.name == "rhs")
    return [s.py for s in rhs.shape][-2:] == ["k", "n"]


def _grad(kernel: ir.Kernel, spec: ir.Spec) -> Grad | None:
    """Autograd for 16-bit operands with no scales, bias or epilogue: dense
    kernels (drhs through the op itself) and grouped ones whose spec has a
    CUDA tgmm kernel of the same operand dtype (drhs through it)."""
    if not _plain16(kernel):
        return None
    view = kernel.for_backend(ir.Backend.CUDA)
    lp = cuda_plan(kernel, spec)
    rhs_kn = _rhs_kn(lp)
    if view.op is ir.Op.DENSE:
        if lp.template != "cuda/gemm.cu.j2":
            return None  # GEMV kinds bound M; the tile GEMM takes the backward's shapes
        return Grad("", kernel.name, rhs_kn)
    for t in spec.kernels_for(ir.Backend.CUDA):
        tv = t.for_backend(ir.Backend.CUDA)
        if tv.op is ir.Op.TGMM and tv.lhs.dtype == view.lhs.dtype \
                and tv.rhs_operand.dtype == view.lhs.dtype:
            return Grad(t.name, t.name, rhs_kn)
    return None


def plan(kernel: ir.Kernel, spec: ir.Spec) -> TorchOp:
    return TorchOp(kernel=kernel, launch=cuda_plan(kernel, spec), stem=spec.stem,
                   spec_path=spec.path, grad=_grad(kernel, spec))


@dataclass(frozen=True, slots=True)
class DispatchOp:
    """A dispatcher's op: the arm its rules pick for M."""

    name: str
    stem: str
    spec_path: str
    arms: tuple[tuple[str, str], ...]  # (Python condition over m, or "", kernel)
    first: TorchOp  # the arms share its arguments
    grad: Grad | None = None  # autograd through this op (dense 16-bit arms)

    @property
    def op(self) -> str:
        return f"gemmgen_{self.stem}::{self.name}"

    @property
    def kernels(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k for _, k in self.arms))

    @property
    def py_import(self) -> str:
        names = sorted(self.kernels, key=_natural)
        return py_call("from . import ", names, "", 0)

    @property
    def m_read(self) -> str:
        """M, read off the first arm's arguments."""
        b = next(b for b in self.first.launch.bindings if b.dim == "m")
        return f"{b.arg}.shape[{b.axis}]"


def _dispatch_grad(d: ir.Dispatch, spec: ir.Spec) -> Grad | None:
    """Autograd for a dispatcher whose arms are all dense 16-bit kernels with
    a plain epilogue and one rhs layout: d lhs and d rhs through the
    dispatcher itself, whose rules pick the arm for each product's M (d lhs
    has the forward's M: a GEMV arm for a decode-sized M; d rhs has M = n:
    the tile GEMM's arm). A GEMV op alone has no autograd: d rhs contracts
    over M, so its M is the weight's n, past the GEMV's bound on M."""
    kernels = [spec.kernel(r.kernel) for r in d.rules]
    if not all(_plain16(k) and k.op is ir.Op.DENSE for k in kernels):
        return None
    layouts = {_rhs_kn(cuda_plan(k, spec)) for k in kernels}
    if len(layouts) != 1:
        return None
    return Grad("", d.name, layouts.pop())


def dispatch_ops(spec: ir.Spec) -> tuple[DispatchOp, ...]:
    out = []
    for d in spec.dispatches:
        if not all(ir.Backend.CUDA in spec.kernel(r.kernel).backends for r in d.rules):
            continue
        arms = tuple((f"m {r.cond.cmp.value} {r.cond.value}" if r.cond else "", r.kernel)
                     for r in d.rules)
        first = plan(spec.kernel(d.rules[0].kernel), spec)
        out.append(DispatchOp(d.name, spec.stem, spec.path, arms, first,
                              _dispatch_grad(d, spec)))
    return tuple(out)


def render(spec: ir.Spec) -> dict[PurePosixPath, str]:
    header = header_text(spec.path)
    ops = [plan(k, spec) for k in kernels(spec)]
    if not ops:
        return {}
    files = {PurePosixPath("torch") / f"{p.name}.py": render_template(
        "torch/op.py.j2", header=header, plan=p, helpers=p.py_helpers) for p in ops}
    dispatches = dispatch_ops(spec)
    for d in dispatches:
        files[PurePosixPath("torch") / f"{d.name}.py"] = render_template(
            "torch/dispatch.py.j2", header=header, plan=d)
    files[PurePosixPath("torch") / "__init__.py"] = render_template(
        "torch/__init__.py.j2", header=header, ops=ops, dispatches=dispatches,
        spec_path=spec.path, stem=spec.stem,
        dispatchers=py_call("DISPATCHERS = (", [d.name for d in dispatches], ")", 0,
                            tuple_of_one=len(dispatches) == 1),
        modules=sorted([*(p.name for p in ops), *(d.name for d in dispatches)], key=_natural),
        kernels=py_call("KERNELS = (", [p.name for p in ops], ")", 0, tuple_of_one=len(ops) == 1))
    return dict(sorted(files.items()))
