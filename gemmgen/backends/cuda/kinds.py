"""The CUDA backend's kernel kinds: which module plans a kernel.

Each kind is a module with `diagnose(kernel, spec)` and
`launch_plan(kernel, spec) -> LaunchPlan` (see backends/cuda/__init__.py). Both
`cuda` (the files of each kernel) and `dispatch` (the M dispatchers,
which need their arms' plans) import this table, so neither imports the
other.
"""

from __future__ import annotations

from types import ModuleType

from gemmgen import ir
from gemmgen.backends.cuda import gemm, gemv, quantize, tgmm
from gemmgen.backends.cuda.common import LaunchPlan
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Algorithm, Op


def kind(kernel: ir.Kernel) -> ModuleType | None:
    """The module that plans `kernel`, or None when no kind emits it."""
    if kernel.op in (Op.DENSE, Op.GROUPED) and kernel.algorithm is Algorithm.TILE:
        return gemm
    if kernel.op is Op.DENSE:
        return gemv
    if kernel.op is Op.QUANTIZE:
        return quantize
    if kernel.op is Op.TGMM:
        return tgmm
    return None


def _what(kernel: ir.Kernel) -> str:
    if kernel.algorithm is not Algorithm.TILE:
        return f"algorithm '{kernel.algorithm.value}'"
    return f"op '{kernel.op.value}'"


def diagnose_kernel(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """What this backend cannot emit for one kernel (as this backend sees
    it: its own tile LUT, if the spec gives it one)."""
    kernel = kernel.for_backend(ir.Backend.CUDA)
    k = kind(kernel)
    if k is None:
        at = kernel.at("algorithm" if kernel.algorithm is not Algorithm.TILE else "op")
        return [Diagnostic(at, f"kernel '{kernel.name}': cuda cannot emit "
                           f"{_what(kernel)} yet")]
    return k.diagnose(kernel, spec)


def plan(kernel: ir.Kernel, spec: ir.Spec) -> LaunchPlan:
    kernel = kernel.for_backend(ir.Backend.CUDA)
    k = kind(kernel)
    assert k is not None, "diagnose() rejects kernels without a kind"
    return k.launch_plan(kernel, spec)
