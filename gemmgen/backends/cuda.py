"""CUDA backend: tensor-core GEMMs, GEMV, dispatchers and their launchers.

The templates land with the CUDA issues; until then every CUDA kernel gets a
named diagnostic, so a spec can never produce wrong or missing CUDA code
silently.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Backend, Kernel, Spec


def diagnose(kernel: Kernel, spec: Spec) -> list[Diagnostic]:
    target = spec.target(Backend.CUDA)
    loc = target.loc if target is not None else kernel.loc
    return [Diagnostic(kernel.loc, f"kernel '{kernel.name}': backend 'cuda' cannot emit "
                       f"kernels yet (target declared at {loc})")]


def render(spec: Spec) -> dict[PurePosixPath, str]:
    return {}
