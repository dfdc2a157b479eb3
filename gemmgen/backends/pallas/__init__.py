"""Pallas TPU backend: megablox-style kernels, one self-launching module each.

`plan(kernel, spec)` does all the arithmetic (tiles of the LUT, VMEM bytes
per grid step, the scoped-VMEM limit to request, dtype decisions) and
returns one plan type per op (`MatmulPlan | TgmmPlan | QuantizePlan`);
`render(spec)` prints plans through the Jinja templates in
`templates/pallas/`; `diagnose(kernel, spec)` names what this backend cannot
emit and checks the VMEM budget of the declared TPU generation. All three are
pure (no I/O, no toolchain, no JAX). docs/pallas.md explains the design.

Modules, one concern each: `dtypes` (jnp names, the MXU dtype), `tpu`
(VMEM per generation, tiling), `cores` (the matmul and tgmm implementations
of a module), `vmem` (VMEM accounting, the tile LUT), `text` (arguments and
docstrings), `plans` (the plan types), `emit` (render), `checks` (diagnose).
"""

from __future__ import annotations

from gemmgen.backends.pallas.checks import diagnose
from gemmgen.backends.pallas.backward import TgmmCore, vjp_supported
from gemmgen.backends.pallas.cores import MatmulCore, matmul_core
from gemmgen.backends.pallas.dtypes import jnp_name, mxu_dtype, storage_bytes
from gemmgen.backends.pallas.emit import render
from gemmgen.backends.pallas.parts import Stage
from gemmgen.backends.pallas.plans import (
    JAX_BELOW,
    JAX_MIN,
    JAX_RANGE,
    JAX_VERSION,
    MatmulPlan,
    ModuleInfo,
    PallasPlan,
    QuantizePlan,
    TgmmPlan,
    plan,
)
from gemmgen.backends.pallas.aliasing import existing_out_saving
from gemmgen.backends.pallas.tpu import MAX_BUFFERS, TPU_VMEM, MiB, TpuVmem
from gemmgen.backends.pallas.vmem import (
    VmemBlock,
    padded_bytes,
    quantize_tk,
    vmem_blocks,
    vmem_bytes,
    vmem_limit,
)

__all__ = [
    "JAX_BELOW",
    "JAX_MIN",
    "JAX_RANGE",
    "JAX_VERSION",
    "MAX_BUFFERS",
    "TPU_VMEM",
    "MatmulCore",
    "MatmulPlan",
    "MiB",
    "ModuleInfo",
    "PallasPlan",
    "QuantizePlan",
    "Stage",
    "TgmmCore",
    "TgmmPlan",
    "TpuVmem",
    "VmemBlock",
    "diagnose",
    "existing_out_saving",
    "jnp_name",
    "matmul_core",
    "mxu_dtype",
    "padded_bytes",
    "plan",
    "quantize_tk",
    "render",
    "storage_bytes",
    "vjp_supported",
    "vmem_blocks",
    "vmem_bytes",
    "vmem_limit",
]
