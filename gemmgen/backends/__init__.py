"""Backend registry. A backend module provides three pure functions:

    diagnose(kernel, spec) -> list[Diagnostic]   # what it cannot emit (yet)
    render(spec) -> dict[PurePosixPath, str]     # files under generated/<stem>/
    plan(kernel, spec) -> <Backend>Plan          # all arithmetic, unit-tested

None of them does I/O; only the CLI writes files or prints.
"""

from __future__ import annotations

import importlib
from pathlib import PurePosixPath
from types import ModuleType

from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Backend, Kernel, Spec

_MODULES = {
    Backend.PALLAS_TPU: "gemmgen.backends.pallas",
    Backend.CUDA: "gemmgen.backends.cuda",
}


def module(backend: Backend) -> ModuleType:
    return importlib.import_module(_MODULES[backend])


def diagnose(kernel: Kernel, spec: Spec) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for backend in kernel.backends:
        out.extend(module(backend).diagnose(kernel, spec))
    return out


def render(spec: Spec) -> dict[PurePosixPath, str]:
    files: dict[PurePosixPath, str] = {}
    for backend in sorted({b for k in spec.kernels for b in k.backends}, key=lambda b: b.value):
        for path, text in module(backend).render(spec).items():
            assert path not in files, f"two backends render {path}"
            files[path] = text
    return files
