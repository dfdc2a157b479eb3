"""One JAX function per kernel, on TPU and on GPU: the plan of the JAX entry
points and of their XLA FFI handlers.

For every kernel emitted for both Pallas TPU and CUDA, two more files:

  jax/<kernel>.py        the JAX entry point, with the Pallas signature: on a
                         TPU it runs the Pallas kernel (pallas/<kernel>.py),
                         elsewhere the CUDA kernel through XLA's FFI
                         (`jax.ffi.ffi_call`), picked by
                         `jax.lax.platform_dependent`; `<kernel>_vjp` too
                         when the Pallas module has one, with its backward
                         pass
  cuda/<kernel>_ffi.cc   the FFI handler: XLA's buffers, checked -> the
                         kernel's C ABI gg_<kernel>_launch() (<kernel>.h,
                         shared with the PyTorch op) -> launch_<kernel>() on
                         XLA's stream; `gemmgen compile` builds it with the
                         kernel's .cu into a shared library

Both are printed from the kernel's CUDA LaunchPlan (arguments, bindings,
outputs, workspace), so neither can drift from the launcher they call.
Pure: no I/O (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from gemmgen import ir
from gemmgen.backends import pallas
from gemmgen.backends.cuda import backward as cuda_backward
from gemmgen.backends.cuda import render_kernel as cuda_render_kernel
from gemmgen.backends.cuda.common import Expr, LaunchPlan, Var, comment, cpp_call, cpp_decl
from gemmgen.backends.cuda.ffi_python import EntryPointText
from gemmgen.backends.cuda.kinds import plan as cuda_plan
from gemmgen.render import header_text, render_template

__all__ = ["FfiPlan", "kernels", "plan", "render", "render_kernel"]

# XLA FFI element types (xla::ffi::DataType) and jnp names of the storage
# dtypes, by NumPy storage name (ir.DType.storage_numpy_name).
_FFI_TYPE = {
    "float32": "F32", "bfloat16": "BF16", "float16": "F16", "float8_e4m3fn": "F8E4M3FN",
    "float8_e5m2": "F8E5M2", "int8": "S8", "uint8": "U8", "int32": "S32",
}


def kernels(spec: ir.Spec) -> tuple[ir.Kernel, ...]:
    """The kernels that get a JAX entry point: emitted for both backends."""
    both = {ir.Backend.PALLAS_TPU, ir.Backend.CUDA}
    return tuple(k for k in spec.kernels if both <= set(k.backends))


@dataclass(frozen=True, slots=True)
class FfiArg:
    """One operand of the FFI call, in call order."""

    name: str
    ffi_type: str  # xla::ffi::DataType enumerator
    ctype: str  # the argument struct's element type
    optional: bool  # an absent array travels as a [0] buffer, with has_<name> false
    offset: bool = False  # group_offset: an int32 [] device scalar

    @property
    def jnp(self) -> str:
        return f"jnp.{_JNP[self.ffi_type]}"

    @property
    def cpp_name(self) -> str:
        """The handler's parameter (group_offset is the host copy's name)."""
        return f"{self.name}_device" if self.offset else self.name


_JNP = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F8E4M3FN": "float8_e4m3fn",
        "F8E5M2": "float8_e5m2", "S8": "int8", "U8": "uint8", "S32": "int32"}


@dataclass(frozen=True, slots=True)
class FfiDim:
    """A dim of the argument struct and where the handler reads it."""

    name: str
    cpp: str  # `lhs.dimensions()[0]`
    py: str  # `lhs.shape[0]` (in the entry point)


@dataclass(frozen=True, slots=True)
class FfiOut:
    """A result of the FFI call (the kernel's outputs, then the workspace)."""

    name: str
    ffi_type: str
    ctype: str
    shape_py: str  # a Python tuple over the dims

    @property
    def jnp(self) -> str:
        return f"jnp.{_JNP[self.ffi_type]}"


@dataclass(frozen=True, slots=True)
class FfiPlan(EntryPointText):
    kernel: ir.Kernel
    launch: LaunchPlan
    spec_path: str
    pallas_args: tuple[tuple[str, bool], ...]  # the Pallas function's (argument, optional)
    summary: str  # what the function computes, one line
    out_dtype: str  # jnp name of the output (the vjp's zeros)
    vjp_residuals: tuple[str, ...]
    vjp_n_out: str
    vjp_grads: str  # what the backward pass returns, one entry per argument
    args: tuple[FfiArg, ...]
    dims: tuple[FfiDim, ...]
    derived: tuple[tuple[str, str, str], ...]  # (name, C++ value, Python value)
    outs: tuple[FfiOut, ...]
    workspace_ints: tuple[str, ...]  # Python expressions; the workspace is their max
    local_groups: bool  # tgmm without existing_out: g from a concrete group_offset
    vjp: bool  # the Pallas module has <name>_vjp: so does the entry point
    # Issue 28: a kernel of the backward pass (backends/cuda/backward.py) has
    # the entry point it serves and its role ("grad_lhs", "grad_rhs",
    # "grad_pre"); an entry point whose `_vjp` runs on CUDA has their plans.
    entry: str = ""
    role: str = ""
    backward: tuple[FfiPlan, ...] = ()

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def target(self) -> str:
        """The FFI target name the entry point calls and registers."""
        return f"gemmgen_{self.name}"

    @property
    def symbol(self) -> str:
        """The handler's C symbol in the shared library."""
        return f"gg_ffi_{self.name}"

    @property
    def handler(self) -> str:
        """The C++ implementation function: `gmm_bf16` -> `GmmBf16Ffi`."""
        return "".join(p[:1].upper() + p[1:] for p in self.name.split("_")) + "Ffi"

    @property
    def library(self) -> str:
        """The file name `gemmgen compile` gives the shared library."""
        return f"lib{self.name}_ffi.so"

    @property
    def entry_module(self) -> str:
        """The JAX entry point that calls this handler (jax/<entry_module>.py)."""
        return self.entry or self.name

    @property
    def _role_text(self) -> str:
        what = {"grad_lhs": "d lhs", "grad_rhs": "d rhs",
                "grad_pre": "the pre-activation"}.get(self.role)
        return f" in {self.entry}_vjp's backward pass (for {what})" if what else ""

    @property
    def _library_text(self) -> str:
        """Where a backward kernel's handler goes: its entry point's library."""
        return f" (with {self.entry}'s files, into lib{self.entry}_ffi.so)" if self.entry else ""

    @property
    def optional_args(self) -> tuple[FfiArg, ...]:
        return tuple(a for a in self.args if a.optional)

    @property
    def has_offset(self) -> bool:
        return any(a.offset for a in self.args)

    @property
    def tuple_result(self) -> bool:
        return len(self.launch.outputs) > 1

    @property
    def has_workspace(self) -> bool:
        return self.launch.has_workspace

    # -- C++ text (laid out as clang-format does) ---------------------------

    @property
    def cpp_intro(self) -> str:
        lines = [
            (f"XLA FFI handler of {self.name} ({self.spec_path}): XLA's buffers, checked, go "
             f"to the kernel's C ABI {self.launch.abi.symbol}() ({self.name}.h, which the "
             f"PyTorch op calls too), whose launch_{self.name}() runs on XLA's stream. "
             f"jax/{self.entry_module}.py calls it{self._role_text} as the FFI target "
             f"\"{self.target}\" "
            "(jax.ffi.ffi_call) once its register() has loaded the shared library that "
            f"`gemmgen compile` builds from this file and {self.name}.cu{self._library_text}, "
            "with XLA's FFI headers (jax.ffi.include_dir())."),
            "Operands: " + ", ".join(a.name for a in self.args) + "."
            + (" group_offset is an int32 scalar on the device (it may be traced, as under "
               "shard_map)." if self.has_offset else "")
            + "".join(f" Without {a.name}: an empty buffer and has_{a.name} = false."
                      for a in self.optional_args),
            "Results: " + ", ".join(o.name for o in self.outs) + "."
            + (f" The workspace holds at least {self.name}_workspace_bytes() bytes (the "
               "entry point sizes it)." if self.has_workspace else ""),
        ]
        return "\n//\n".join(comment(line) for line in lines)

    @property
    def cpp_handler_head(self) -> str:
        params = ["ffi::Context ctx"]
        params += [f"ffi::AnyBuffer {a.cpp_name}" for a in self.args]
        params += [f"bool has_{a.name}" for a in self.optional_args]
        params += [f"ffi::Result<ffi::AnyBuffer> {o.name}" for o in self.outs]
        return cpp_decl("ffi::Error Handler(", params, ") {")

    @property
    def cpp_rank_checks(self) -> tuple[dict[str, str], ...]:
        """Each buffer's element type and rank (group_offset: one element),
        before any dim is read."""
        out = []
        for a in self.launch.arrays:
            access = "->" if a.is_output else "."
            ffi_type = _ffi_type(a.dtype)
            checks = [(f"{a.name}{access}element_type() != ffi::DataType::{ffi_type}",
                       f"{a.name} must be {ffi_type}"),
                      (f"{a.name}{access}dimensions().size() != {len(a.shape)}",
                       f"{a.name} must have {len(a.shape)} dims")]
            for cond, message in checks:
                cond = f"has_{a.name} && {cond}" if a.optional else cond
                out.append({"cond": cond, "message": message})
        if self.has_offset:
            out.append({"cond": "group_offset_device.element_type() != ffi::DataType::S32",
                        "message": "group_offset must be S32"})
            out.append({"cond": "group_offset_device.element_count() != 1",
                        "message": "group_offset must be a scalar"})
        return tuple(out)

    @property
    def cpp_shape_checks(self) -> tuple[dict[str, str], ...]:
        """Per array: the condition to check it, and the check."""
        out = []
        arrays = [(a, f"{a.name}.") for a in self.launch.arrays if not a.is_output]
        arrays += [(a, f"{a.name}->") for a in self.launch.outputs]
        for a, access in arrays:
            cond = "why.empty()" + (f" && has_{a.name}" if a.optional else "")
            args = [f'"{a.name}"', f'"{a.shape_text}"', f"{access}dimensions()",
                    "{" + ", ".join(s.cpp for s in a.shape) + "}"]
            out.append({"cond": cond, "call": cpp_call("ShapeError(", args, ");", 4, lhs="why")})
        return tuple(out)

    @property
    def cpp_abi_call(self) -> str:
        """The call of the kernel's C ABI (LaunchPlan.abi.params), on XLA's buffers."""
        lp = self.launch
        values = []
        for a in lp.arrays:
            data = f"{a.name}{'->' if a.is_output else '.'}untyped_data()"
            values.append(f"has_{a.name} ? {data} : nullptr" if a.optional else data)
        values += list(lp.dims) + [s.name for s in lp.scalars]
        if lp.has_workspace:
            values += ["workspace->untyped_data()", "workspace->size_bytes()"]
        values += ["stream", "&error"]
        return lp.abi.call(values)

    @property
    def cpp_symbol_comment(self) -> str:
        return comment(f"The handler, {self.symbol}: the symbol that jax/{self.entry_module}.py "
                       "registers (exported also from a build with -fvisibility=hidden).")

    @property
    def cpp_binding_comment(self) -> str:
        parts = ["the context (for the platform stream)", ", ".join(a.name for a in self.args)]
        if self.optional_args:
            parts.append(", ".join(f"has_{a.name}" for a in self.optional_args))
        parts.append(", ".join(o.name for o in self.outs))
        return comment("; ".join(parts) + ".")

    @property
    def cpp_define(self) -> str:
        return cpp_call("XLA_FFI_DEFINE_HANDLER_SYMBOL(", [self.symbol, "Handler", "Binding()"],
                        ");", 0)

def _ffi_type(dtype: ir.DType) -> str:
    return _FFI_TYPE[dtype.storage_numpy_name]


def _dim_source(lp: LaunchPlan, dim: str) -> tuple[str, str]:
    """(C++, Python) reads of `dim` off a buffer that is always there: its
    binding's array, or (for a dim bound to an optional array, as tgmm's g
    to existing_out) the output that has it as a whole axis."""
    for b in lp.bindings:
        if b.dim == dim and b.fallback is None:
            mul = "" if b.mul == 1 else f" * {b.mul}"
            return f"{b.arg}.dimensions()[{b.axis}]{mul}", f"{b.arg}.shape[{b.axis}]{mul}"
    for out in lp.outputs:
        for axis, e in enumerate(out.shape):
            if e == Var(dim):
                return f"{out.name}->dimensions()[{axis}]", dim
    raise AssertionError(f"{lp.name}: no buffer holds dim {dim}")


def _py_shape(shape: tuple[Expr, ...]) -> str:
    items = [s.py for s in shape]
    return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"


def plan(kernel: ir.Kernel, spec: ir.Spec) -> FfiPlan:
    lp = cuda_plan(kernel, spec)
    pallas_plan = pallas.plan(kernel, spec)
    pallas_args = tuple((a.name, a.optional) for a in pallas_plan.module.args)
    cuda_inputs = tuple((a.name, a.optional) for a in lp.inputs)
    assert pallas_args == cuda_inputs, (
        f"{kernel.name}: the Pallas arguments {pallas_args} differ from the CUDA ones {cuda_inputs}")
    vjp = pallas.vjp_supported(kernel)
    if vjp:
        assert pallas_plan.vjp_args == tuple(n for n, _ in pallas_args), kernel.name
    backward = ()
    if vjp and cuda_backward.supported(kernel):
        backward = tuple(_derived_plan(d, spec, kernel.name, role) for d, role
                         in zip(cuda_backward.derive(kernel, spec), cuda_backward.roles(kernel),
                                strict=True))
    return FfiPlan(
        kernel=kernel,
        launch=lp,
        spec_path=spec.path,
        pallas_args=pallas_args,
        summary=pallas_plan.module.summary,
        out_dtype=pallas_plan.module.out_dtype,
        vjp_residuals=pallas_plan.vjp_residuals if vjp else (),
        vjp_n_out=pallas_plan.vjp_n_out if vjp else "",
        vjp_grads=pallas_plan.vjp_grads if vjp else "",
        vjp=vjp,
        backward=backward,
        **_ffi_parts(lp, kernel.name),
    )


def _derived_plan(kernel: ir.Kernel, spec: ir.Spec, entry: str, role: str) -> FfiPlan:
    """The FFI plan of a backward kernel (backward.py): its arguments are its
    CUDA launcher's; the entry point `entry` calls it."""
    lp = cuda_plan(kernel, spec)
    return FfiPlan(
        kernel=kernel,
        launch=lp,
        spec_path=spec.path,
        pallas_args=tuple((a.name, a.optional) for a in lp.inputs),
        summary="",
        out_dtype=_JNP[_ffi_type(kernel.out)],
        vjp_residuals=(),
        vjp_n_out="",
        vjp_grads="",
        vjp=False,
        entry=entry,
        role=role,
        **_ffi_parts(lp, kernel.name),
    )


def _ffi_parts(lp: LaunchPlan, name: str) -> dict:
    """The FFI call's operands, dims and results, from the launch plan."""
    args = []
    for a in lp.inputs:
        if a.is_scalar:
            assert a.name == "group_offset", f"{name}: scalar {a.name}"
            args.append(FfiArg(a.name, "S32", "int", optional=False, offset=True))
        else:
            args.append(FfiArg(a.name, _ffi_type(a.dtype), a.ctype, optional=a.optional))
    dims = tuple(FfiDim(d, *_dim_source(lp, d)) for d in lp.dims)
    outs = [FfiOut(o.name, _ffi_type(o.dtype), o.ctype, _py_shape(o.shape)) for o in lp.outputs]
    workspace = tuple(dict.fromkeys(v.workspace_ints.py for v in lp.variants if v.has_workspace))
    if lp.has_workspace:
        outs.append(FfiOut("workspace", "U8", "unsigned char", "(4 * _workspace_ints(dims),)"))
    return {
        "args": tuple(args),
        "dims": dims,
        "derived": tuple((d.name, d.value.cpp, d.value.py) for d in lp.derived),
        "outs": tuple(outs),
        "workspace_ints": workspace,
        "local_groups": any(b.fallback is not None for b in lp.bindings),
    }


def _render_plan(p: FfiPlan, header: str, spec: ir.Spec) -> dict[PurePosixPath, str]:
    files = {
        PurePosixPath("jax") / f"{p.name}.py": render_template("jax/entry.py.j2", header=header,
                                                                plan=p),
        PurePosixPath("cuda") / f"{p.name}_ffi.cc": render_template("jax/ffi.cc.j2",
                                                                    header=header, plan=p),
    }
    # The backward pass's CUDA kernels: their .cu, C++ and Python launchers
    # (as every CUDA kernel has; the Rust crate has the spec's kernels only)
    # and their FFI handlers.
    for b in p.backward:
        files.update(cuda_render_kernel(b.kernel, spec))
        files[PurePosixPath("cuda") / f"{b.name}_ffi.cc"] = render_template(
            "jax/ffi.cc.j2", header=header, plan=b)
    return files


def render_kernel(kernel: ir.Kernel, spec: ir.Spec) -> dict[PurePosixPath, str]:
    """One kernel's entry point and FFI handler."""
    return _render_plan(plan(kernel, spec), header_text(spec.path), spec)


def render(spec: ir.Spec) -> dict[PurePosixPath, str]:
    files: dict[PurePosixPath, str] = {}
    header = header_text(spec.path)
    plans = [plan(k, spec) for k in kernels(spec)]
    for p in plans:
        files.update(_render_plan(p, header, spec))
    if plans:
        files[PurePosixPath("jax") / "__init__.py"] = render_template(
            "jax/__init__.py.j2", header=header, plans=plans, spec_path=spec.path)
    return dict(sorted(files.items()))
