"""Backend registry. A backend module provides three pure functions:

    diagnose(kernel, spec) -> list[Diagnostic]   # what it cannot emit (yet)
    render(spec) -> dict[PurePosixPath, str]     # files under generated/<stem>/
    plan(kernel, spec) -> <Backend>Plan          # all arithmetic, unit-tested

None of them does I/O; only the CLI writes files or prints.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from types import ModuleType

from gemmgen.backends import cuda, pallas
from gemmgen.backends.cuda import backward as cuda_backward
from gemmgen.backends.cuda import ffi as jax_ffi
from gemmgen.backends.cuda import torch_ops
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Backend, Kernel, Spec

# Every backend, by the target that selects it. A new backend is a module
# here and a member of ir.Backend (docs/architecture.md).
MODULES: dict[Backend, ModuleType] = {
    Backend.PALLAS_TPU: pallas,
    Backend.CUDA: cuda,
}


def module(backend: Backend) -> ModuleType:
    return MODULES[backend]


def diagnose(kernel: Kernel, spec: Spec) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for backend in kernel.backends:
        out.extend(module(backend).diagnose(kernel, spec))
    # The JAX entry point's backward kernels (issue 28) need their names.
    out.extend(cuda_backward.diagnose(kernel, spec))
    return out


def render(spec: Spec) -> dict[PurePosixPath, str]:
    files: dict[PurePosixPath, str] = {}
    for backend in sorted({b for k in spec.kernels for b in k.backends}, key=lambda b: b.value):
        for path, text in module(backend).render(spec).items():
            assert path not in files, f"two backends render {path}"
            files[path] = text
    # The JAX entry points of the kernels emitted for both backends.
    for path, text in jax_ffi.render(spec).items():
        assert path not in files, f"two backends render {path}"
        files[path] = text
    # The PyTorch ops of the CUDA kernels (generated/<stem>/torch/).
    for path, text in torch_ops.render(spec).items():
        assert path not in files, f"two backends render {path}"
        files[path] = text
    return files
