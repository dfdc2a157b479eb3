"""The block-scaled kinds on the 2-CTA tile of the sm_100a body
(docs/cuda-sm100.md, "The 2-CTA tile", the block-scaled pair): MXFP8,
MXFP4, NVFP4 (with its global scales), W4A8 (MXFP8 x MXFP4, B unpacked by
each CTA's producer warp) and DeepSeek's e8m0 scales applied by the
hardware, on LUT entries of m = 256: each CTA gathers (or bulk-copies) the
scale atoms of its 128 A rows and of every B row, the peer's arrivals
relayed to the leader's `full` barrier, the leader's tcgen05.cp.cta_group::2
copying each CTA's atoms into that CTA's TMEM before the cta_group::2
block-scaled MMAs. Generated kernels on the emulator of an sm_100a device
(through the C++ launcher's cluster launch and the Python launcher) against
the reference on fresh random inputs with poisoned outputs: m = 1, ragged
m / n / k, k below a K tile, grouped with zero-size groups, group_offset
with existing_out, masked, silu_mul, grids of 2 to 6 blocks with several
tiles a pair (the ring and both accumulators wrap); planted bugs in the body
the emulator catches; nvcc 13.5 for sm_100a (every MMA of the pair entries
2-CTA, the 2-CTA scale copy, no spills, shared memory within the limit).

The unmarked cases are one of each kind; the rest are `slow`."""

from __future__ import annotations

import numpy as np
import pytest
from sm100_helpers import SM100, Sm100Spec

from gemmgen.archs import shared_memory_limit
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.backends.cuda.gemm import tcgen05
from gemmgen.cases import Case
from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, reference

SPEC = """
target cuda {
  archs sm_100a
}

defaults {
  lhs e4m3 [m, k]
  tile m=256 n=128 k=128
  backends cuda
}

kernel q_mx_dense {
  op dense
  rhs e4m3 [n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}

kernel q_mx_grouped {
  op grouped
  lhs e5m2 [m, k]
  rhs e5m2 [g, n, k]
  out f32
  bias f32 [g, 1, n]
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  tile m=256 n=192 k=128
  warp_tile m=64 n=48
}

kernel q_mx_gateup {
  op grouped
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  epilogue silu_mul
}

kernel q_nv4_dense {
  op dense
  lhs fp4 packed [m, k]
  rhs fp4 packed [n, k]
  out bf16
  lhs_scale per_token_group k=16 ue4m3 layout=atom128x4 global=f32
  rhs_scale block n=1 k=16 ue4m3 layout=atom128x4 global=f32
}

kernel q_nv4_moe {
  op grouped
  lhs fp4 packed [m, k]
  rhs fp4 packed [g, n, k]
  out f32
  lhs_scale per_token_group k=16 ue4m3 global=f32
  rhs_scale block n=1 k=16 ue4m3 layout=atom128x4 global=f32
  tile m=256 n=64 k=256
}

kernel q_nv4_masked {
  op grouped
  lhs fp4 packed [g, m, k]
  rhs fp4 packed [g, n, k]
  out bf16
  lhs_scale per_token_group k=16 ue4m3 global=f32
  rhs_scale block n=1 k=16 ue4m3 global=f32
}

kernel q_mx4_dense {
  op dense
  lhs fp4 packed [m, k]
  rhs fp4 packed [n, k]
  out f32
  bias f32 [n]
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}

kernel q_mx4_moe {
  op grouped
  lhs fp4 packed [m, k]
  rhs fp4 packed [g, n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  epilogue silu_mul
}

kernel q_w4a8_dense {
  op dense
  rhs fp4 packed [n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}

kernel q_w4a8_moe {
  op grouped
  rhs fp4 packed [g, n, k]
  out f32
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  epilogue silu_mul
}

kernel q_w4a8_masked {
  op grouped
  lhs e4m3 [g, m, k]
  rhs fp4 packed [g, n, k]
  out f32
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  tile m=256 n=64 k=128
}

kernel q_ds_grouped {
  op grouped
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=128 k=128 e8m0
}

kernel q_ds_gateup {
  op grouped
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=128 k=128 e8m0
  epilogue silu_mul
  promotion hardware
}

kernel q_ds_masked {
  op grouped
  lhs e5m2 [g, m, k]
  rhs e5m2 [g, n, k]
  out f32
  lhs_scale per_token_group k=256 e8m0
  rhs_scale block n=64 k=256 e8m0
}

kernel q_lut {
  op grouped
  lhs fp4 packed [m, k]
  rhs fp4 packed [g, n, k]
  out bf16
  lhs_scale per_token_group k=16 ue4m3 global=f32
  rhs_scale block n=1 k=16 ue4m3 layout=atom128x4 global=f32
  tile m=128 n=128 k=256
  tile_rule m>=512 -> m=256 n=128 k=256
}

kernel q_mx_kn {
  op grouped
  rhs e4m3 [g, k, n]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
}
"""

BODY = Sm100Spec("sm100pairbs", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check


def seed() -> int:
    return int(np.random.default_rng().integers(1 << 30))
