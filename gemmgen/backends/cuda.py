"""CUDA backend: one `.cu` per kernel with its C++ and Python launchers.

Kernel kinds, each a module with `diagnose(kernel, spec)` and
`launch_plan(kernel, spec) -> LaunchPlan`:

  cuda_gemm      dense and grouped tile GEMMs on tensor cores (mma.sync)
  cuda_gemv      dense GEMV (M == 1) and batched GEMV (M <= max_m)
  cuda_quantize  per-token-group FP8 activation quantization
  cuda_tgmm      the ragged-K backward pass (per group lhsᵀ · rhs)

and `cuda_dispatch.render_dispatch(dispatch, spec)` prints the M
dispatchers (`<dispatch>.h` / `.cu` / `.py`).

A kind's LaunchPlan (cuda_common.py) drives three files per kernel under
`generated/<stem>/cuda/`:

  <kernel>.cu   the kernel(s) and, for nvcc host builds, launch_<kernel>()
  <kernel>.h    the C++ argument struct, tile pick, workspace size, validation
  <kernel>.py   the Python launcher: validate(), launches(), and a CuPy call

A kernel whose kind is not implemented gets a named diagnostic, never code.
"""

from __future__ import annotations

import importlib
from pathlib import PurePosixPath
from types import ModuleType

from gemmgen import ir
from gemmgen.backends import cuda_gemm
from gemmgen.backends.cuda_common import LaunchPlan
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Algorithm, Op
from gemmgen.render import header_text, render_template


def _optional(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"gemmgen.backends.{module}")
    except ModuleNotFoundError as e:
        if e.name != f"gemmgen.backends.{module}":
            raise
        return None


def _kind(kernel: ir.Kernel) -> ModuleType | None:
    if kernel.op in (Op.DENSE, Op.GROUPED) and kernel.algorithm is Algorithm.TILE:
        return cuda_gemm
    if kernel.op is Op.DENSE:
        return _optional("cuda_gemv")
    if kernel.op is Op.QUANTIZE:
        return _optional("cuda_quantize")
    if kernel.op is Op.TGMM:
        return _optional("cuda_tgmm")
    return None


def _what(kernel: ir.Kernel) -> str:
    if kernel.algorithm is not Algorithm.TILE:
        return f"algorithm '{kernel.algorithm.value}'"
    return f"op '{kernel.op.value}'"


def diagnose_kernel(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """What this backend cannot emit for one kernel."""
    kind = _kind(kernel)
    if kind is None:
        return [Diagnostic(kernel.loc, f"kernel '{kernel.name}': cuda cannot emit "
                           f"{_what(kernel)} yet")]
    return kind.diagnose(kernel, spec)


def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """The kernel's problems, and those of each dispatcher whose else arm it
    is (checked once per dispatcher, with every arm's kind known)."""
    out = diagnose_kernel(kernel, spec)
    dispatch = _optional("cuda_dispatch")
    if dispatch is not None:
        for d in spec.dispatches:
            if d.rules[-1].kernel == kernel.name:
                out.extend(dispatch.diagnose_dispatch(d, spec))
    return out


def plan(kernel: ir.Kernel, spec: ir.Spec) -> LaunchPlan:
    kind = _kind(kernel)
    assert kind is not None, "diagnose() rejects kernels without a kind"
    return kind.launch_plan(kernel, spec)


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
    for k in spec.kernels_for(ir.Backend.CUDA):
        files.update(render_kernel(k, spec))
    dispatch = _optional("cuda_dispatch")
    for d in spec.dispatches:
        arms = [spec.kernel(r.kernel) for r in d.rules]
        if dispatch is not None and all(ir.Backend.CUDA in k.backends for k in arms):
            files.update(dispatch.render_dispatch(d, spec))
    return dict(sorted(files.items()))
