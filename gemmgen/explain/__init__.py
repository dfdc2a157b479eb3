"""`gemmgen explain SPEC KERNEL`: a kernel's plan in words, with its cost.

For a problem shape (default m=4096 and the spec's static n and k, else
4096), it prints what each backend would launch — grid, block, shared
memory or VMEM, the tile the LUT picks — the registers and spills ptxas
reports when nvcc is available (through the resource cache that `build`
warns from, gemmgen.harness.resources), and the roofline: FLOPs, bytes
moved and the time bound on a device (`--device`, gemmgen.devices: a
table of GPUs and TPUs with each rate's source; by default one that runs
the spec's preferred declared arch, an H200 for sm_90a at about 790 TFLOP/s
dense bf16 and 4.3 TB/s as measured on that part, else the spec's TPU) of
the path that runs there (`tensor_path`), so a reviewer sees the cost of a
variant.

`--counters` also runs each CUDA launch once on the CPU emulator at a modest
shape (`counters_case`) and prints what it would cost a GPU: shared-memory
bank conflicts, global sectors against the ideal, MMA / ldmatrix / cp.async
/ barrier counts (gemmgen.harness.counters, docs/cuda-emulation.md).

The modules: `roofline` (cost, tensor paths, the bound on a device),
`plans` (what each backend launches, ptxas's registers), `counters` (the
emulator run of `--counters`) and `report` (`explain`, `explain_dispatch`,
which put them together). This module re-exports their public names.
"""

from gemmgen.explain.counters import counters_at, counters_case, emulator_counters
from gemmgen.explain.plans import H200_SMS, wgmma_regs
from gemmgen.explain.report import DEFAULT_M, explain, explain_dispatch, launcher_conditions
from gemmgen.explain.roofline import (
    H200,
    H200_TBPS,
    H200_TFLOPS_8BIT,
    H200_TFLOPS_16BIT,
    TensorPath,
    cost,
    roofline,
    tensor_path,
)

__all__ = [
    "DEFAULT_M",
    "H200",
    "H200_SMS",
    "H200_TBPS",
    "H200_TFLOPS_8BIT",
    "H200_TFLOPS_16BIT",
    "TensorPath",
    "cost",
    "counters_at",
    "counters_case",
    "wgmma_regs",
    "emulator_counters",
    "explain",
    "explain_dispatch",
    "launcher_conditions",
    "roofline",
    "tensor_path",
]
