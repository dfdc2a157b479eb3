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
  backward             the CUDA kernels of an entry point's `_vjp` backward
                       pass, derived from its forward kernel

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
    """What this backend cannot emit for one kernel: NV block scales and the
    MX formats it does not run on the tile GEMM (_block_scales), K blocks
    held several to a K tile that its promotion cannot split
    (_blocks_in_k_tile), then what its kind says
    (cuda_kinds.diagnose_kernel)."""
    if kernel.epilogue.interleaved and kernel.algorithm is ir.Algorithm.TILE and \
            kernel.mx_mma_obstacle() is None:
        return [Diagnostic(kernel.epilogue.loc, f"kernel '{kernel.name}': cuda's block-scaled "
                           "(MX / NV) bodies run swiglu_clamped pairs=halves (as silu_mul), not "
                           "pairs=interleaved yet: store the gate and up columns in halves")]
    if (found := _block_scales(kernel)) is not None:
        return [found]
    if (found := _unsigned_weights(kernel)) is not None:
        return [found]
    if problems := _blocks_in_k_tile(kernel):
        return problems
    return cuda_kinds.diagnose_kernel(kernel, spec)


def _unsigned_weights(kernel: ir.Kernel) -> Diagnostic | None:
    """uint4 weights and their zero points (`zero=uint4`) run on the tile
    GEMM's mma.sync body only (docs/cuda.md, "uint4 weights"): not as a GEMV."""
    rhs = kernel.rhs
    if rhs is None or rhs.dtype is not ir.DType.UINT4 or kernel.algorithm is ir.Algorithm.TILE:
        return None
    what = "uint4 weights with zero points" if kernel.rhs_scale.zero else "uint4 weights"
    return Diagnostic(rhs.loc, f"kernel '{kernel.name}': cuda cannot emit {what} (GPTQ / AWQ "
                      f"W4A16) with algorithm '{kernel.algorithm.value}' yet; the tile GEMM "
                      "takes them (docs/cuda.md, \"uint4 weights\")")


def _blocks_in_k_tile(kernel: ir.Kernel) -> list[Diagnostic]:
    """A K tile holding several blocks of a per-row e8m0 scale (rows layout,
    ir.Kernel.several_scale_blocks_per_k_tile): the block-scaled body takes
    any such MX scale; the mma.sync body promotes after each block's MMA
    steps, so a block must be whole MMA steps (32 K elements of FP8, 16 of a
    16-bit type)."""
    from gemmgen.backends.cuda.gemm import contract, mma_sync

    view = kernel.for_backend(ir.Backend.CUDA)
    if view.op not in (ir.Op.DENSE, ir.Op.GROUPED) or view.algorithm is not ir.Algorithm.TILE:
        return []
    compute = contract.compute_dtype(view)
    if compute is None or view.mx_mma_obstacle() is None:
        return []  # the block-scaled formats' blocks are whole MMA steps or fractions of one
    step = mma_sync.kstep(compute)
    out = []
    for loc, what in view.several_scale_blocks_per_k_tile():
        for scale, side in ((view.lhs_scale, "lhs_scale"), (view.rhs_scale, "rhs_scale")):
            if scale.blocks_in_k_tile and scale.block_k and scale.block_k % step:
                out.append(Diagnostic(loc, f"kernel '{kernel.name}': {what}, but cuda's mma.sync "
                                           f"body promotes after whole {compute.value} MMA steps of "
                                           f"k={step}, and {side} blocks of k={scale.block_k} are "
                                           "not; give cuda K tiles that divide the block (a 'tile "
                                           "cuda' LUT of its own)"))
    return out


def _block_scales(kernel: ir.Kernel) -> Diagnostic | None:
    """An MX / NV block scale (ir.Scale.per_mma_block) this backend does not
    emit: anything but the tile GEMM's MXFP8 (FP8 operands, e8m0 scales of
    32-wide K blocks on both sides, ir.Kernel.mx_mma_obstacle), which the
    block-scaled mma.sync body runs on sm_120a / sm_121a and the mma.sync
    body promotes in software elsewhere."""
    found = kernel.block_scale_format()
    if found is None or kernel.mx_mma_obstacle() is None:
        return None
    loc, what = found
    return Diagnostic(loc, f"kernel '{kernel.name}': cuda does not emit {what} yet: it emits "
                           "MXFP8 block scales on the tile GEMM (e4m3 or e5m2 on both sides, "
                           "'per_token_group k=32 e8m0' on lhs and 'block n=1 k=32 e8m0' on "
                           f"rhs), and {kernel.mx_mma_obstacle()}; drop the cuda backend for "
                           "this kernel")


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
