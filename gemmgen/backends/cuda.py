"""CUDA backend: one `.cu` per kernel with its C++ and Python launchers.

Kernel kinds, each a module with `diagnose(kernel, spec)` and
`launch_plan(kernel, spec) -> LaunchPlan`, picked by cuda_kinds.kind():

  cuda_gemm      dense and grouped tile GEMMs on tensor cores (mma.sync, and
                 TMA + wgmma on sm_90a)
  cuda_gemv      dense GEMV (M == 1) and batched GEMV (M <= max_m)
  cuda_quantize  per-token-group FP8 activation quantization
  cuda_tgmm      the ragged-K backward pass (per group lhsᵀ · rhs)

and `cuda_dispatch.render_dispatch(dispatch, spec)` prints the M
dispatchers (`<dispatch>.h` / `.cu` / `.py`). With `launchers ... rust` in
the target, `cuda_rust.render_crate` adds the Rust launchers, a cargo crate
under `generated/<stem>/rust/` printed from the same plans.

A kind's LaunchPlan (cuda_launch.py) drives three files per kernel under
`generated/<stem>/cuda/`:

  <kernel>.cu   the kernel(s) and, for nvcc host builds, launch_<kernel>()
  <kernel>.h    the C++ argument struct, tile pick, workspace size, validation
  <kernel>.py   the Python launcher: validate(), launches(), and a CuPy call

A kernel whose kind is not implemented gets a named diagnostic, never code.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from gemmgen import ir
from gemmgen.backends import cuda_dispatch, cuda_rust
from gemmgen.backends import cuda_kinds
from gemmgen.backends.cuda_kinds import plan
from gemmgen.diagnostics import Diagnostic
from gemmgen.render import header_text, render_template

__all__ = ["diagnose", "diagnose_kernel", "plan", "render", "render_kernel"]


def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """The kernel's problems, and those of each dispatcher whose else arm it
    is (checked once per dispatcher, with every arm's kind known)."""
    out = diagnose_kernel(kernel, spec)
    for d in spec.dispatches:
        if d.rules[-1].kernel == kernel.name:
            out.extend(cuda_dispatch.diagnose_dispatch(d, spec))
    return out


def diagnose_kernel(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """What this backend cannot emit for one kernel: MX / NV block scales
    (the sm_12x block-scaled mma.sync body does not exist yet: no stub),
    then what its kind says (cuda_kinds.diagnose_kernel)."""
    if (found := kernel.block_scale_format()) is not None:
        loc, what = found
        return [Diagnostic(loc, f"kernel '{kernel.name}': cuda does not emit {what} yet (the "
                                "block-scaled mma.sync body of sm_120a / sm_121a is not "
                                "written); drop the cuda backend for this kernel")]
    return cuda_kinds.diagnose_kernel(kernel, spec)


def render_kernel(kernel: ir.Kernel, spec: ir.Spec) -> dict[PurePosixPath, str]:
    """One kernel's three files: the kernel(s), the C++ and the Python launcher."""
    header = header_text(spec.path)
    base = PurePosixPath("cuda")
    lp = plan(kernel, spec)
    return {
        base / f"{kernel.name}.cu": render_template(lp.template, header=header, plan=lp.detail,
                                                    launch=lp),
        base / f"{kernel.name}.h": render_template("cuda/launcher.h.j2", header=header, plan=lp),
        base / f"{kernel.name}.py": render_template("cuda/launcher.py.j2", header=header, plan=lp),
    }


def render(spec: ir.Spec) -> dict[PurePosixPath, str]:
    files: dict[PurePosixPath, str] = {}
    kernels = spec.kernels_for(ir.Backend.CUDA)
    for k in kernels:
        files.update(render_kernel(k, spec))
    dispatches = [d for d in spec.dispatches
                  if all(ir.Backend.CUDA in spec.kernel(r.kernel).backends for r in d.rules)]
    for d in dispatches:
        files.update(cuda_dispatch.render_dispatch(d, spec))
    target = spec.target(ir.Backend.CUDA)
    if kernels and target is not None and "rust" in target.launchers:
        files.update(cuda_rust.render_crate(
            spec, header_text(spec.path), [plan(k, spec) for k in kernels],
            [cuda_dispatch.plan(d, spec) for d in dispatches]))
    return dict(sorted(files.items()))
