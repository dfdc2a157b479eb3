"""CUDA M dispatchers: one entry point that picks a kernel by M at run time
(the classic decode dispatcher: M == 1 -> GEMV, M <= 8 -> batched GEMV, else
the tile GEMM).

    dispatch dense_mm_bf16 {
      when m == 1 -> dense_gemv_bf16
      when m <= 8 -> dense_gemv_batched_bf16
      else dense_gemm_bf16
    }

renders, beside the arms' own files under `generated/<stem>/cuda/`:

  dense_mm_bf16.h   `DenseMmBf16Args` (the arms' argument struct: the arms
                    compute the same function, so their launch plans take
                    the same arrays and dims; `diagnose_dispatch` checks it),
                    `dense_mm_bf16_pick(m)` (the arm index, thresholds from
                    the spec), a conversion to each arm's struct,
                    `dense_mm_bf16_validate()` (the chosen arm's) and the
                    declaration of `launch_dense_mm_bf16(args, stream)`;
  dense_mm_bf16.cu  its definition, for nvcc's host pass only (like the
                    kernels' launch_impl): convert, call launch_<arm>;
  dense_mm_bf16.py  `pick(m) -> arm name`, `validate(...)` and the CuPy call,
                    both handed to the chosen arm's launcher module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from gemmgen import ir
from gemmgen.backends.cuda import kinds as cuda_kinds
from gemmgen.backends.cuda.common import Arg, Binding, LaunchPlan, where
from gemmgen.backends.cuda.layout import COLUMNS, cpp_call, cpp_decl, prose
from gemmgen.diagnostics import Diagnostic
from gemmgen.names import args_struct
from gemmgen.render import header_text, render_template


@dataclass(frozen=True, slots=True)
class Arm:
    index: int
    kernel: str
    args_struct: str
    cond: str  # "m <= 8" (valid Python and C++); "" for the else arm
    where: str
    algorithm: str
    paths: str  # the body the arm's kernel runs on each declared arch
    # Laid out for the names' lengths, as clang-format would (layout.py):
    doc: str  # the header comment's lines about the arm
    as_decl: str  # the head of `<dispatch>_as_<arm>()`, up to its "{"
    validate_return: str  # `return <arm>_validate(...);` in the switch
    launch_return: str  # `return launch_<arm>(..., stream);` in the switch

    @property
    def label(self) -> str:
        return f"when {self.cond}" if self.cond else "else"


def arm_paths(kernel: ir.Kernel, archs: tuple[str, ...]) -> str:
    """Which body `kernel` runs on each of `archs`, e.g. "sm_89: mma.sync,
    sm_90a: wgmma" (tile GEMMs), "every arch: the gemv body" (others)."""
    if kernel.algorithm is not ir.Algorithm.TILE:
        return f"every arch: the {kernel.algorithm.value} body"
    names = ["wgmma" if kernel.uses_wgmma(a) else "tcgen05" if kernel.uses_tcgen05(a)
             else "block-scaled" if kernel.uses_mx_mma(a) else "mma.sync" for a in archs]
    if len(set(names)) == 1:
        return f"every arch: {names[0]}" if archs else "no arch declared"
    return ", ".join(f"{a}: {n}" for a, n in zip(archs, names))


@dataclass(frozen=True, slots=True)
class DispatchPlan:
    name: str
    spec_path: str
    where: str
    arms: tuple[Arm, ...]
    arrays: tuple[Arg, ...]  # the shared argument struct, in the arms' order
    dims: tuple[str, ...]
    scalars: tuple[Arg, ...]
    inputs: tuple[Arg, ...]
    outputs: tuple[Arg, ...]
    m_binding: Binding  # where M comes from (lhs.shape[0])
    py_params: str
    cpp_fields: tuple[str, ...]  # the argument struct's fields: the arms' own
    # Laid out for the names' lengths, as clang-format would (layout.py):
    h_doc: str  # the .h's opening comment, after the header line
    pick_doc: str  # the comment above <name>_pick()
    validate_decl: str  # the head of <name>_validate(), up to its "{"
    launch_doc: str  # the comment above launch_<name>()
    launch_decl: str  # launch_<name>()'s declaration (.h)
    cu_doc: str  # the .cu's opening comment, after the header line
    launch_def: str  # the head of launch_<name>()'s definition (.cu)

    @property
    def args_struct(self) -> str:
        return args_struct(self.name)

    @property
    def m_array(self) -> Arg:
        return next(a for a in self.arrays if a.name == self.m_binding.arg)


def _arm_plans(dispatch: ir.Dispatch, spec: ir.Spec) -> list[LaunchPlan]:
    return [cuda_kinds.plan(spec.kernel(r.kernel), spec) for r in dispatch.rules]


def _signature(lp: LaunchPlan) -> tuple:
    """What the shared argument struct and Python signature are made of."""
    return (tuple((a.name, a.role, a.ctype if a.dtype else "", a.optional) for a in lp.args),
            lp.dims, lp.has_workspace)


def arm_mismatch(dispatch: ir.Dispatch, spec: ir.Spec) -> str | None:
    """Why the arms cannot share one argument struct, or None."""
    plans = _arm_plans(dispatch, spec)
    first = plans[0]
    for lp in plans[1:]:
        if _signature(lp) != _signature(first):
            return (f"kernels '{first.name}' and '{lp.name}' take different launcher arguments "
                    f"({', '.join(a.name for a in first.args)} / "
                    f"{', '.join(a.name for a in lp.args)}), so they cannot share one "
                    "argument struct")
    if first.has_workspace:
        return "arms with a workspace (grouped kernels) cannot be dispatched yet"
    if not any(b.dim == "m" for b in first.bindings):
        return f"kernel '{first.name}' has no dim m to dispatch on"
    return None


def diagnose_dispatch(dispatch: ir.Dispatch, spec: ir.Spec) -> list[Diagnostic]:
    """The CUDA backend's check of a dispatcher whose arms are all CUDA
    kernels that the backend can emit (other problems are the arms' own)."""
    arms = [spec.kernel(r.kernel) for r in dispatch.rules]
    if not all(ir.Backend.CUDA in k.backends for k in arms):
        return []
    if any(cuda_kinds.diagnose_kernel(k, spec) for k in arms):
        return []
    why = arm_mismatch(dispatch, spec)
    if why is None:
        return []
    return [Diagnostic(dispatch.loc, f"dispatch '{dispatch.name}': cuda: {why}")]


def plan(dispatch: ir.Dispatch, spec: ir.Spec) -> DispatchPlan:
    why = arm_mismatch(dispatch, spec)
    assert why is None, why  # diagnose_dispatch reports it first
    plans = _arm_plans(dispatch, spec)
    first = plans[0]
    name, struct = dispatch.name, args_struct(dispatch.name)
    arms = []
    for i, (r, lp) in enumerate(zip(dispatch.rules, plans)):
        kernel = spec.kernel(r.kernel)
        cond = str(r.cond) if r.cond is not None else ""
        label = f"when {cond}" if cond else "else"
        paths = arm_paths(kernel, first.archs)
        as_arm = f"{name}_as_{r.kernel}(a)"
        arms.append(Arm(
            index=i, kernel=r.kernel, args_struct=lp.args_struct, cond=cond, where=where(r.loc),
            algorithm=kernel.algorithm.value, paths=paths,
            doc=_arm_doc(label, f"{r.kernel} ({kernel.algorithm.value}, {where(r.loc)})", paths),
            as_decl=_decl(f"inline {lp.args_struct}", f"{name}_as_{r.kernel}",
                          [f"const {struct}& a"], ") {"),
            validate_return=cpp_call(f"return {r.kernel}_validate(", [as_arm], ");", 6),
            launch_return=cpp_call(f"return launch_{r.kernel}(", [as_arm, "stream"], ");", 6)))
    m_binding = next(b for b in first.bindings if b.dim == "m")
    at = where(dispatch.loc)
    files = ", ".join(f"{r.kernel}.cu" for r in dispatch.rules)
    h_doc = "\n".join([
        prose(f"M dispatcher {name} ({at}): one argument struct, and the kernel for each M "
              "chosen at run time (first matching arm), with the body each arm's kernel runs on "
              "each declared arch (its launcher picks one by compute capability):", "// "),
        *(a.doc for a in arms),
        "//",
        prose("Every arm computes the same function with the same arguments. Compile "
              f"{name}.cu and each arm's .cu with nvcc, include this header:", "// "),
        "//",
        f"//   {struct} args;  // device pointers and dims, below",
        f"//   if (const char* why = {name}_validate(args)) {{",
        "//     // a bad call: nothing was launched",
        "//   }",
        f"//   cudaError_t err = launch_{name}(args, stream);"])
    launch_params = [f"const {struct}& a", "cudaStream_t stream"]
    return DispatchPlan(
        name=name, spec_path=spec.path, where=at, arms=tuple(arms),
        arrays=first.arrays, dims=first.dims, scalars=first.scalars, inputs=first.inputs,
        outputs=first.outputs, m_binding=m_binding, py_params=first.py_params,
        cpp_fields=first.cpp_fields, h_doc=h_doc,
        pick_doc=prose(f"The arm launch_{name} runs for M ({name}.py's pick() agrees).", "// "),
        validate_decl=_decl("inline const char*", f"{name}_validate", [f"const {struct}& a"],
                            ") {"),
        launch_doc=prose(f"Validates and launches the arm for a.m; cudaErrorInvalidValue "
                         f"(nothing launched) when {name}_validate() objects (CUDA's launch "
                         "limits included) or the arm needs more shared memory than the device "
                         "allows.", "// "),
        launch_decl=_decl("cudaError_t", f"launch_{name}",
                          [f"const {struct}& args", "cudaStream_t stream"], ");"),
        cu_doc=prose(
            f"launch_{name} ({at}): the host side of the M dispatcher in {name}.h. Host code "
            f"only: compile it with nvcc and link it with the arms' .cu files ({files}), which "
            "define their launch_<kernel>(); the CPU emulation links them the same way. NVRTC "
            f"(CuPy) dispatches through {name}.py instead.", "// "),
        launch_def=_decl("cudaError_t", f"launch_{name}", launch_params, ") {"),
    )


def _decl(ret: str, name: str, params: list[str], tail: str) -> str:
    """A function head as clang-format lays it out (layout.cpp_decl), with
    the break after the return type that it makes when `ret name(` alone
    does not fit."""
    if len(f"{ret} {name}(") <= COLUMNS:
        return cpp_decl(f"{ret} {name}(", params, tail)
    return f"{ret}\n" + cpp_decl(f"{name}(", params, tail)


def _arm_doc(label: str, text: str, paths: str) -> str:
    """The header comment's two items of an arm: `label -> kernel (...)` and,
    under the kernel, the body it runs on each arch; each wrapped within
    the column limit under its first word."""
    rest = "//" + " " * (3 + 14 + 4)
    return "\n".join([prose(f"{label:<14} -> {text}", "//   ", rest, width=COLUMNS),
                      prose(paths, rest, width=COLUMNS)])


def render_dispatch(dispatch: ir.Dispatch, spec: ir.Spec) -> dict[PurePosixPath, str]:
    p = plan(dispatch, spec)
    header = header_text(spec.path)
    base = PurePosixPath("cuda")
    return {
        base / f"{p.name}.h": render_template("cuda/dispatch.h.j2", header=header, plan=p),
        base / f"{p.name}.cu": render_template("cuda/dispatch.cu.j2", header=header, plan=p),
        base / f"{p.name}.py": render_template("cuda/dispatch.py.j2", header=header, plan=p),
    }
