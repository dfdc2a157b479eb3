"""What gemmgen knows about each CUDA arch: pure data, no toolchain.

The backends' plans check their shared memory against these limits, the CPU
emulator plays a device with them, and the nvcc checks compare compiled
kernels with them; all three import this table, so they cannot disagree.
`ir.CUDA_ARCHS` lists the archs a spec may declare; each has a limit here
(tests/cli/test_layers.py checks it).
"""

from __future__ import annotations

import re

# Dynamic shared memory a launch may use without raising the kernel's
# cudaFuncAttributeMaxDynamicSharedMemorySize (the same on every arch).
DEFAULT_DYNAMIC_SMEM = 48 * 1024

# The most shared memory one block may use (static + dynamic, with the
# opt-in attribute), by compute capability: the CUDA C++ Programming Guide's
# "maximum amount of shared memory per thread block" (cudaDevAttrMaxShared-
# MemoryPerBlockOptin).
SMEM_OPTIN = {
    80: 166912,
    86: 101376,
    87: 166912,
    89: 101376,
    90: 232448,
    100: 232448,
    103: 232448,
    120: 101376,
    121: 101376,
}
# sm_12x (12.0 RTX 50 / RTX PRO 6000, 12.1 GB10): 101,376 bytes (99 KiB) per
# block of the 100 KiB (102,400 bytes) per SM, 1 KiB reserved per block. The
# toolkit's own tables say so: CCCL `cuda/__device/arch_traits.h` (12.0 and
# 12.1: max_shared_memory_per_multiprocessor = 100 * 1024, opt-in = that less
# reserved_shared_memory_per_block, 1024 from 8.0 on) and CUTLASS
# `cutlass/arch/arch.h` (`sm120_smem_capacity_bytes = 101376`); checked in the
# nvidia-cuda-cccl 13.3 and nvidia-cutlass 4.2 wheels by tests/cuda/sm120/test_sm12x_archs.py.
SMEM_PER_SM_SM12X = 100 * 1024

# The SM count of the part the CPU emulator plays for each compute capability
# (cudaDevAttrMultiProcessorCount): the data-center part where there is one
# (A100 108, H100 / H200 SXM 132, B200 148), else a common one (RTX 3090 82,
# Jetson Orin 16, RTX 4090 128, RTX 5090 170, GB10 48: gemmgen.devices says
# where each figure comes from). Persistent kernels size their grid by it.
SM_COUNT = {80: 108, 86: 82, 87: 16, 89: 128, 90: 132, 100: 148, 103: 148, 120: 170, 121: 48}

_ARCH_RE = re.compile(r"sm_(\d+)([af]?)")


def parse_arch(arch: str) -> tuple[int, str]:
    """`sm_90a` -> (90, "a"); a ValueError for anything else."""
    m = _ARCH_RE.fullmatch(arch)
    if not m:
        raise ValueError(f"not a CUDA arch: {arch!r} (expected e.g. sm_80, sm_90a)")
    return int(m.group(1)), m.group(2)


def shared_memory_limit(arch: str) -> int:
    """The most shared memory (bytes) one block may use on `arch`."""
    number, _ = parse_arch(arch)
    if number not in SMEM_OPTIN:
        raise ValueError(f"no shared-memory limit known for {arch}")
    return SMEM_OPTIN[number]


def sm_count(arch: str) -> int:
    """The SMs of the `arch` device the emulator plays (SM_COUNT)."""
    number, _ = parse_arch(arch)
    if number not in SM_COUNT:
        raise ValueError(f"no SM count known for {arch}")
    return SM_COUNT[number]


# The compute capabilities whose `mma.sync` multiplies FP8 (e4m3, e5m2) in
# hardware: SASS `QMMA` on sm_89 (Ada) and sm_120 / sm_121. Elsewhere ptxas compiles
# an FP8 `mma.sync` into conversions to f16 plus `HMMA.16816.F32`, which runs
# at the f16 rate: on sm_90/sm_90a (whose FP8 tensor cores are reached through
# wgmma only) and on sm_100a (nvcc 13.0, checked by compiling one
# mma.sync.m16n8k32.e4m3 for each arch; docs/cuda.md, "Hopper and FP8").
FP8_MMA_SYNC = (89, 120, 121)


def fp8_mma_sync(arch: str) -> bool:
    """Whether an FP8 `mma.sync` runs on FP8 tensor cores on `arch`."""
    number, _ = parse_arch(arch)
    return number in FP8_MMA_SYNC
