"""CUDA backend: one `.cu` per kernel with its C++, Python and Rust launchers.

The package's layout shows its tiers:

What every CUDA kernel shares (the launch plan and its printers):
  expr, layout, args   expressions as data, clang-format/ruff layout, the
                       argument tables
  tensor_maps, steps   a launch's arguments (tensor maps too), `Step`, and
                       `Variant`: a LUT tile's steps and the `Path` of each
                       other tensor-core body, with its device condition
  launch, common       the `LaunchPlan` the generic templates print (C++
                       header and host launcher, CuPy launcher); `common`
                       re-exports the vocabulary
  kinds                the kind of each kernel -> its module
  dispatch             the M dispatchers (`<dispatch>.h` / `.cu` / `.py`)
  rust/                `launchers ... rust`: a cargo crate printed from the
                       same plans
  ffi                  the JAX entry points and XLA FFI handlers of kernels
                       emitted for both backends

The kinds, each a module with `diagnose(kernel, spec)` and
`launch_plan(kernel, spec) -> LaunchPlan`, picked by kinds.kind():
  gemm/                dense, grouped and masked tile GEMMs on tensor cores:
                       the mma.sync body every kernel has (gemm/mma_sync.py)
                       and the table of the other bodies (gemm/bodies.py:
                       TMA + wgmma on sm_90a, gemm/wgmma.py)
  gemv (+ gemv_text)   dense GEMV (M == 1) and batched GEMV (M <= max_m)
  quantize             per-token-group FP8 activation quantization
  tgmm                 the ragged-K backward pass (per group lhsᵀ · rhs)

A kind's LaunchPlan (launch.py) drives three files per kernel under
`generated/<stem>/cuda/`:

  <kernel>.cu   the kernel(s) and, for nvcc host builds, launch_<kernel>()
  <kernel>.h    the C++ argument struct, tile pick, workspace size, validation
  <kernel>.py   the Python launcher: validate(), launches(), and a CuPy call

A kernel whose kind is not implemented gets a named diagnostic, never code.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from gemmgen import ir
from gemmgen.backends.cuda import dispatch as cuda_dispatch
from gemmgen.backends.cuda import kinds as cuda_kinds
from gemmgen.backends.cuda import rust as cuda_rust
from gemmgen.backends.cuda.kinds import plan
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
    (the sm_12x block-scaled mma.sync body does not exist yet: no stub), an
    e8m0 scale with several blocks per K tile (its FP32 promotion applies
    one scale per K tile), then what its kind says
    (cuda_kinds.diagnose_kernel)."""
    if (found := kernel.block_scale_format()) is not None:
        loc, what = found
        return [Diagnostic(loc, f"kernel '{kernel.name}': cuda does not emit {what} yet (the "
                                "block-scaled mma.sync body of sm_120a / sm_121a is not "
                                "written); drop the cuda backend for this kernel")]
    if held := kernel.for_backend(ir.Backend.CUDA).several_scale_blocks_per_k_tile():
        return [Diagnostic(loc, f"kernel '{kernel.name}': cuda applies an e8m0 scale once per "
                                f"K tile, so a K tile must divide the scale block, but {what} "
                                "(several blocks per K tile are a pallas_tpu form); give cuda "
                                "K tiles that divide the block (a 'tile cuda' LUT of its own "
                                "when the other backend wants larger ones)") for loc, what in held]
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
