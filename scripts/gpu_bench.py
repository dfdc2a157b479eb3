#!/usr/bin/env python3
"""Benchmark the committed CUDA kernels of specs/ on a real GPU.

For every CUDA kernel in generated/<spec>/cuda/ this script
  (1) checks it against the NumPy reference on a small ragged shape, through
      its own CuPy launcher (the same launch plan the CPU emulator runs), and
  (2) times it at a production shape with CUDA events and reports TFLOP/s
      and GB/s, next to torch.matmul (one call for dense, a loop over groups
      and the dense equivalent for grouped kernels) when torch is installed.
  (3) for a kernel with a Hopper path (sm_90a: TMA + wgmma, docs/cuda-hopper.md)
      on a device of compute capability 9.0, where the launcher picks that
      path, it also checks and times the same kernel's mma.sync path (the
      launcher's device limits answering 0 SMs, which makes launches() pick
      the path every arch runs), so the two bodies are compared on one GPU.
      The goal (issue: Hopper tier): the bf16 dense Hopper kernel at 4096^3
      to 8192^3 at or above torch.matmul, grouped at >= 90 % of its dense
      equivalent.
  (4) the DeepSeek-V3 shapes whose FP8 block-scaled figures DeepGEMM
      publishes (DEEPSEEK_DENSE, DEEPSEEK_CONTIGUOUS, DEEPSEEK_MASKED, from
      the performance tables of the DeepGEMM README (H800), NVCC 12.8): the
      dense rows on the block-scaled W8A8 kernel of specs/dense.gemm, the
      contiguous grouped rows on moe_w8a8_grouped_gemm of specs/moe.gemm and
      the masked rows on a kernel with the masked grouped layout when the
      specs have one (else they are skipped, saying why), timed and printed
      in TFLOP/s and GB/s beside DeepGEMM's H800 figures. Goal (issue 14):
      at or above them on an H200 for the large shapes, >= 90 % of HBM
      bandwidth for m = 64. These rows are timed only: the kernels'
      correctness is step (1)'s, on ragged shapes.
  (5) on a device of compute capability 12.x (GB10 / DGX Spark 12.1, RTX 50
      and RTX PRO 6000 12.0), the kernels of specs/gb10.gemm join steps
      (1)-(2) (the sm_90a-only kernels of specs/moe.gemm, which such a
      device cannot load, are skipped, saying so), and SM12X_ROWS replace
      step (4): MXFP8 and FP8 (block-scaled W8A8, per-token) dense and
      grouped GEMMs at DeepSeek-V3 and GPT-OSS shapes, the masked decode
      layout, and the decode GEMV arms of the M dispatchers, each beside
      the device's roofline (gemmgen.devices: 273 GB/s on a GB10). Timed
      only, like step (4). Other devices run steps (1)-(4) as before.
  (6) on a B200 (compute capability 10.0), the kernels of specs/b200.gemm
      join steps (1)-(2), and SM100_ROWS follow step (4): MXFP8, MXFP4,
      NVFP4 and W4A8 dense and grouped GEMMs on the block-scaled tcgen05
      path, and bf16 / FP8 experts and a bf16 gate-up on the 2-CTA tile
      (their m >= 512 entry), at DeepSeek-V3 and GPT-OSS shapes, each
      beside the B200 roofline at the rate of its operands
      (gemmgen.devices: bf16 2.25, FP8 4.5, FP4 9 PFLOP/s)
      and beside DeepGEMM's and cuBLAS's published B200 figures for that
      shape (SM100_PUBLISHED: each with its source, date and GPU; MXFP4 at
      five shapes, NVFP4 and MXFP8 at 8192^3), or "not published".

    python scripts/gpu_bench.py [--out DIR] [--kernel NAME ...] [--quick]
    python scripts/gpu_bench.py --deepseek-only     # only step (4)
    python scripts/gpu_bench.py --list-deepseek     # the DeepSeek rows and their kernels; no GPU
    python scripts/gpu_bench.py --list-sm12x        # the sm_12x rows and their kernels; no GPU
    python scripts/gpu_bench.py --sm12x-only        # only step (5), on a 12.x device
    python scripts/gpu_bench.py --list-sm100        # the B200 rows and their kernels; no GPU
    python scripts/gpu_bench.py --sm100-only        # only step (6), on a 10.0 device
    python scripts/gpu_bench.py --emulate --kernel dense_gemm_bf16   # the whole flow on the CPU

Timing: each sample is `BATCH` calls back to back between two CUDA events,
so the host's per-call work (validation, plan, argument packing: the "host
us" column, timed alone over many calls) overlaps the GPU's, as in a model's
forward pass; a kernel shorter than that host work is host-bound, and the
table says so. `--emulate` runs every step on the CPU emulator through the
CuPy stand-in (gemmgen/harness/cupy_standin.py: the real NVRTC, the
emulator's launches) at tiny shapes, so that the script's first run on a
lent GPU cannot fail on a stale name; its times are not measurements
(`--emulate-arch sm_121a` plays a GB10, which selects step (5)).

It prints a Markdown table (paste into docs/benchmarks.md) and writes
bench.json to --out (default $OUT, else the current folder). Without CuPy or
a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gemmgen import ir  # noqa: E402
from gemmgen.build import render_spec  # noqa: E402
from gemmgen.cases import standard_cases  # noqa: E402
from gemmgen.devices import DEVICES, Device  # noqa: E402 (after sys.path)
from gemmgen.explain import cost  # noqa: E402
from gemmgen.reference import compare, random_inputs, reference  # noqa: E402
from gemmgen.harness import cuda_gpu  # noqa: E402
from gemmgen.harness.runner import load_generated_module  # noqa: E402

# DeepSeek-V3 shapes and DeepGEMM's published figures for them, as
# (TFLOP/s, GB/s): the "Performance" tables of the DeepGEMM README (H800),
# FP8 e4m3 with 1x128 activation and 128x128 weight scales, bf16 out.
DEEPGEMM_SOURCE = "DeepGEMM README (H800)"
# (m, n, k) -> (TFLOP/s, GB/s)
DEEPSEEK_DENSE = {
    (64, 2112, 7168): (206, 1688),
    (64, 24576, 1536): (289, 2455),
    (64, 32768, 512): (219, 2143),
    (64, 7168, 16384): (336, 2668),
    (64, 4096, 7168): (287, 2320),
    (64, 7168, 2048): (295, 2470),
    (128, 2112, 7168): (352, 1509),
    (128, 24576, 1536): (535, 2448),
    (128, 32768, 512): (358, 2103),
    (128, 7168, 16384): (645, 2604),
    (128, 4096, 7168): (533, 2221),
    (128, 7168, 2048): (510, 2277),
    (4096, 2112, 7168): (1058, 527),
    (4096, 24576, 1536): (990, 786),
    (4096, 32768, 512): (590, 1232),
    (4096, 7168, 16384): (1358, 343),
    (4096, 4096, 7168): (1304, 500),
    (4096, 7168, 2048): (1025, 697),
}
# (groups, m per group, n, k) -> (TFLOP/s, GB/s)
DEEPSEEK_CONTIGUOUS = {
    (4, 8192, 4096, 7168): (1297, 418),
    (4, 8192, 7168, 2048): (1099, 681),
    (8, 4096, 4096, 7168): (1288, 494),
    (8, 4096, 7168, 2048): (1093, 743),
}
DEEPSEEK_MASKED = {
    (1, 1024, 4096, 7168): (1233, 924),
    (1, 1024, 7168, 2048): (925, 968),
    (2, 512, 4096, 7168): (1040, 1288),
    (2, 512, 7168, 2048): (916, 1405),
    (4, 256, 4096, 7168): (932, 2064),
    (4, 256, 7168, 2048): (815, 2047),
}
# The kernels of specs/ the rows run on: (spec stem, kernel name).
DEEPSEEK_DENSE_KERNEL = ("dense", "fp8_gemm_blockscaled_lhs_scale_f32_rhs_scale_f32")
DEEPSEEK_CONTIGUOUS_KERNEL = ("moe", "moe_w8a8_grouped_gemm")

# Step (5), on compute capability 12.x: the kernels (or M dispatchers) of
# specs/gb10.gemm at production shapes, as (what, kernel, groups, m per
# group, n, k); groups 0 is a dense call. The masked rows' m is each
# expert's capacity, every row valid.
SM12X_SPEC = "gb10"
SM12X_ROWS = (
    # DeepSeek-V3's dense projections (DEEPSEEK_DENSE's shapes): block-scaled
    # W8A8 (1x128 / 128x128, mma.sync with FP32 promotion) and MXFP8
    # (block-scaled MMA), prefill and a decode-sized batch.
    ("deepseek dense", "gb10_fp8_gemm_blockscaled", 0, 4096, 7168, 2048),
    ("deepseek dense", "gb10_fp8_gemm_blockscaled", 0, 4096, 4096, 7168),
    ("deepseek dense", "gb10_fp8_gemm_blockscaled", 0, 64, 7168, 2048),
    ("deepseek dense", "gb10_mxfp8_gemm", 0, 4096, 7168, 2048),
    ("deepseek dense", "gb10_mxfp8_gemm", 0, 4096, 4096, 7168),
    ("deepseek dense", "gb10_mxfp8_gemm", 0, 64, 7168, 2048),
    ("fp8 dense", "gb10_fp8_gemm", 0, 4096, 7168, 2048),
    # GPT-OSS (hidden 2880; 64 query and 8 key-value heads of 64): the
    # attention's qkv and output projections in MXFP8.
    ("gpt-oss dense", "gb10_mxfp8_gemm", 0, 4096, 5120, 2880),
    ("gpt-oss dense", "gb10_mxfp8_gemm", 0, 4096, 2880, 4096),
    # DeepSeek-V3's routed experts: contiguous (DEEPSEEK_CONTIGUOUS's
    # shapes), the fused gate-up (2 x 2048 intermediate columns), and the
    # masked decode layout (DEEPSEEK_MASKED's, then 32 experts of 8 tokens).
    ("deepseek grouped", "gb10_moe_w8a8_grouped_gemm", 8, 4096, 7168, 2048),
    ("deepseek grouped", "gb10_moe_w8a8_grouped_gemm", 4, 8192, 4096, 7168),
    ("deepseek grouped", "gb10_mxfp8_moe_grouped_gemm", 8, 4096, 7168, 2048),
    ("deepseek gate-up", "gb10_moe_w8a8_gateup_silu", 8, 4096, 4096, 7168),
    ("deepseek masked", "gb10_moe_fp8_masked_gemm", 4, 256, 4096, 7168),
    ("deepseek masked", "gb10_moe_fp8_masked_gemm", 32, 8, 4096, 7168),
    # GPT-OSS-20b's experts (32, top 4: 4096 tokens give 512 rows each):
    # the gate-up (2 x 2880) and down projections in MXFP8.
    ("gpt-oss grouped", "gb10_mxfp8_moe_grouped_gemm", 32, 512, 5760, 2880),
    ("gpt-oss grouped", "gb10_mxfp8_moe_grouped_gemm", 32, 512, 2880, 2880),
    # The same experts in fp4 on the m16n8k64 block-scaled MMAs: MXFP4
    # (GPT-OSS's checkpoint format) and NVFP4 (DeepSeek-V3's shapes).
    ("gpt-oss grouped", "gb10_mxfp4_moe_grouped_gemm", 32, 512, 5760, 2880),
    ("gpt-oss grouped", "gb10_mxfp4_moe_grouped_gemm", 32, 512, 2880, 2880),
    # W4A8: GPT-OSS's MXFP4 expert weights times MXFP8 activations (e4m3 x
    # e2m1 on the m16n8k32 block-scaled MMA).
    ("gpt-oss grouped", "gb10_w4a8_moe_grouped_gemm", 32, 512, 5760, 2880),
    ("gpt-oss grouped", "gb10_w4a8_moe_grouped_gemm", 32, 512, 2880, 2880),
    ("deepseek grouped", "gb10_nvfp4_moe_grouped_gemm", 8, 4096, 7168, 2048),
    ("deepseek grouped", "gb10_nvfp4_moe_grouped_gemm", 8, 4096, 4096, 7168),
    # Decode: the M dispatchers' GEMV arms (M = 1: GEMV, M = 8: batched
    # GEMV), bound by the weight stream (273 GB/s on a GB10).
    ("decode", "gb10_dense_mm_bf16", 0, 1, 4096, 4096),
    ("decode", "gb10_dense_mm_bf16", 0, 8, 4096, 4096),
    ("decode", "gb10_dense_mm_bf16", 0, 1, 5120, 2880),
    ("decode", "gb10_w8a16_mm", 0, 1, 4096, 4096),
    ("decode", "gb10_w8a16_mm", 0, 1, 5120, 2880),
)

# Step (6), on compute capability 10.0: the block-scaled kernels of
# specs/b200.gemm at production shapes, as (what, kernel, groups, m per
# group, n, k); groups 0 is a dense call.
SM100_SPEC = "b200"
SM100_ROWS = (
    # DeepSeek-V3's dense projections (DEEPSEEK_DENSE's shapes), prefill and
    # a decode-sized batch, in MXFP8, MXFP4 and NVFP4.
    ("deepseek dense", "b200_mxfp8_gemm", 0, 4096, 7168, 2048),
    ("deepseek dense", "b200_mxfp8_gemm", 0, 4096, 4096, 7168),
    ("deepseek dense", "b200_mxfp8_gemm", 0, 128, 7168, 2048),
    ("deepseek dense", "b200_mxfp4_gemm", 0, 4096, 7168, 2048),
    ("deepseek dense", "b200_mxfp4_gemm", 0, 4096, 4096, 7168),
    # MXFP4 at the DeepSeek-V3 shapes of DeepGEMM's MXFP4 x MXFP4 B200 table
    # (SM100_PUBLISHED): a decode-sized batch and two mid-sized ones.
    ("deepseek dense", "b200_mxfp4_gemm", 0, 128, 24576, 1536),
    ("deepseek dense", "b200_mxfp4_gemm", 0, 512, 7168, 2048),
    ("deepseek dense", "b200_mxfp4_gemm", 0, 1024, 7168, 2048),
    ("deepseek dense", "b200_nvfp4_gemm", 0, 4096, 7168, 2048),
    ("deepseek dense", "b200_nvfp4_gemm", 0, 4096, 4096, 7168),
    ("deepseek dense", "b200_nvfp4_gemm", 0, 128, 7168, 2048),
    # The square shape the block-scaled GEMM figures are usually given at.
    ("square dense", "b200_mxfp8_gemm", 0, 8192, 8192, 8192),
    ("square dense", "b200_mxfp4_gemm", 0, 8192, 8192, 8192),
    ("square dense", "b200_nvfp4_gemm", 0, 8192, 8192, 8192),
    # GPT-OSS (hidden 2880): the attention's qkv and output projections.
    ("gpt-oss dense", "b200_mxfp8_gemm", 0, 4096, 5120, 2880),
    ("gpt-oss dense", "b200_mxfp4_gemm", 0, 4096, 5120, 2880),
    # DeepSeek-V3's routed experts (DEEPSEEK_CONTIGUOUS's shapes) and the
    # fused gate-up (2 x 2048 intermediate columns).
    ("deepseek grouped", "b200_mxfp8_moe_grouped_gemm", 8, 4096, 7168, 2048),
    ("deepseek grouped", "b200_mxfp8_moe_grouped_gemm", 4, 8192, 4096, 7168),
    ("deepseek grouped", "b200_nvfp4_moe_grouped_gemm", 8, 4096, 7168, 2048),
    ("deepseek grouped", "b200_nvfp4_moe_grouped_gemm", 4, 8192, 4096, 7168),
    ("deepseek grouped", "b200_mxfp4_moe_grouped_gemm", 8, 4096, 7168, 2048),
    ("deepseek gate-up", "b200_nvfp4_moe_gateup_silu", 8, 4096, 4096, 7168),
    # GPT-OSS-120b's experts (128, top 4: 16384 tokens give 512 rows each;
    # 32 of them a shard): gate-up (2 x 2880) and down, in MXFP4, W4A8
    # (its MXFP4 weights with MXFP8 activations), MXFP8 and NVFP4.
    ("gpt-oss grouped", "b200_mxfp4_moe_grouped_gemm", 32, 512, 5760, 2880),
    ("gpt-oss grouped", "b200_mxfp4_moe_grouped_gemm", 32, 512, 2880, 2880),
    ("gpt-oss grouped", "b200_w4a8_moe_grouped_gemm", 32, 512, 5760, 2880),
    ("gpt-oss grouped", "b200_w4a8_moe_grouped_gemm", 32, 512, 2880, 2880),
    ("gpt-oss grouped", "b200_mxfp8_moe_grouped_gemm", 32, 512, 5760, 2880),
    ("gpt-oss grouped", "b200_nvfp4_moe_grouped_gemm", 32, 512, 5760, 2880),
    # The 2-CTA tile (prefill: every row's m is at least 512, the LUT's pair
    # entry, as for the fp4 and W4A8 rows above with m >= 512): bf16 and FP8
    # (per-token / per-channel) experts and the bf16 gate-up at DeepSeek-V3's
    # and GPT-OSS-120b's expert shapes.
    ("deepseek grouped", "b200_fp8_moe_grouped_gemm", 8, 4096, 7168, 2048),
    ("deepseek grouped", "b200_fp8_moe_grouped_gemm", 4, 8192, 4096, 7168),
    ("deepseek grouped", "b200_bf16_moe_grouped_gemm", 8, 4096, 7168, 2048),
    ("deepseek grouped", "b200_bf16_moe_grouped_gemm", 4, 8192, 4096, 7168),
    ("deepseek gate-up", "b200_bf16_moe_gateup_silu", 8, 4096, 4096, 7168),
    ("gpt-oss grouped", "b200_fp8_moe_grouped_gemm", 32, 512, 5760, 2880),
    ("gpt-oss grouped", "b200_fp8_moe_grouped_gemm", 32, 512, 2880, 2880),
    ("gpt-oss grouped", "b200_bf16_moe_grouped_gemm", 32, 512, 2880, 2880),
    ("gpt-oss gate-up", "b200_bf16_moe_gateup_silu", 32, 512, 5760, 2880),
    # The pair for DeepSeek's FP8 block scales promoted in software
    # (DeepGEMM's recipe) and for W4A16 experts on the weight-only tile.
    ("deepseek grouped", "b200_fp8_blockscaled_moe_grouped_gemm", 8, 4096, 7168, 2048),
    ("deepseek grouped", "b200_fp8_blockscaled_moe_grouped_gemm", 4, 8192, 4096, 7168),
    ("gpt-oss grouped", "b200_w4a16_moe_grouped_gemm", 32, 512, 5760, 2880),
    ("gpt-oss grouped", "b200_w4a16_moe_grouped_gemm", 32, 512, 2880, 2880),
)
class Published(NamedTuple):
    """One published B200 figure beside a row of SM100_ROWS: its TFLOP/s
    (2 M N K per call, as the source counts), what ran, the public page it
    is written on, that page's date, and the GPU as the page names it."""

    tflops: float
    what: str
    source: str
    date: str
    gpu: str


# Published B200 figures at the shapes of SM100_ROWS, as (kernel, groups, m,
# n, k) -> {reference: Published}; a reference is one of SM100_REFERENCES.
# Only figures read in the source, at the row's shape and operand format;
# every other row prints "not published". Where we looked and what we found
# that fits no row: docs/benchmarks.md, "Published B200 figures".
# - DeepGEMM's README has no performance tables since its PR #86 (the H800
#   ones are DEEPSEEK_DENSE & co.); its MXFP4 x MXFP4 SM100 kernel's PR
#   gives B200 figures beside cuBLAS 13.3's (cublasTest) at DeepSeek-V3
#   shapes and 8192^3 (an open PR; its kernel writes an f32 D).
# - NVIDIA's cuBLAS 12.9 post gives Blackwell block-scaled results as
#   speedups; cuBLAS's NVFP4 and MXFP8 figures at 8192^3 on a B200 are
#   torchao's (torch._scaled_mm) and Triton's tutorial baseline (cuBLAS 13.1).
_DG_MXFP4 = {"what": "DeepGEMM MXFP4 x MXFP4 SM100 kernel (open PR #348, CUDA 12.9, f32 D)",
             "source": "https://github.com/deepseek-ai/DeepGEMM/pull/348", "date": "2026-06-01",
             "gpu": "B200"}
_CUBLAS_MXFP4 = {**_DG_MXFP4, "what": "cuBLAS 13.3 (cublasTest), as DeepGEMM PR #348 lists it"}
SM100_PUBLISHED: dict[tuple, dict[str, Published]] = {
    ("b200_mxfp4_gemm", 0, 128, 24576, 1536): {
        "DeepGEMM": Published(980, **_DG_MXFP4), "cuBLAS": Published(745, **_CUBLAS_MXFP4)},
    ("b200_mxfp4_gemm", 0, 512, 7168, 2048): {
        "DeepGEMM": Published(1439, **_DG_MXFP4), "cuBLAS": Published(1190, **_CUBLAS_MXFP4)},
    ("b200_mxfp4_gemm", 0, 1024, 7168, 2048): {
        "DeepGEMM": Published(2056, **_DG_MXFP4), "cuBLAS": Published(1399, **_CUBLAS_MXFP4)},
    ("b200_mxfp4_gemm", 0, 4096, 4096, 7168): {
        "DeepGEMM": Published(5332, **_DG_MXFP4), "cuBLAS": Published(3939, **_CUBLAS_MXFP4)},
    ("b200_mxfp4_gemm", 0, 8192, 8192, 8192): {
        "DeepGEMM": Published(5702, **_DG_MXFP4), "cuBLAS": Published(5239, **_CUBLAS_MXFP4)},
    ("b200_nvfp4_gemm", 0, 8192, 8192, 8192): {"cuBLAS": Published(
        5370, what="torch._scaled_mm (cuBLASLt) NVFP4, torchao bench_matmul.py --recipe nvfp4",
        source="https://github.com/pytorch/ao/pull/2427", date="2025-06-23", gpu="NVIDIA B200")},
    ("b200_mxfp8_gemm", 0, 8192, 8192, 8192): {"cuBLAS": Published(
        3858, what="cuBLAS 13.1.0.3 MXFP8 (Triton tutorial 10's cuBLAS baseline)",
        source="https://github.com/triton-lang/triton/pull/9044", date="2025-12-18",
        gpu="B200 (unlocked clocks)")},
}
SM100_REFERENCES = ("DeepGEMM", "cuBLAS")

# Production shapes: (m, n, k, groups). Decode-sized kernels get small m.
# The masked layout's m is each group's capacity (every row valid): 8 local
# experts of 256 tokens at DeepSeek-V3's (n, k) = (4096, 7168).
SHAPES = {
    "gemv": (1, 8192, 8192, 0),
    "gemv_batched": (8, 8192, 8192, 0),
    "dense": (4096, 4096, 4096, 0),
    "grouped": (8192, 4096, 4096, 8),
    "masked": (256, 4096, 7168, 8),
    "tgmm": (8192, 4096, 4096, 8),
    "quantize": (8192, 0, 7168, 0),
}


def shape_for(kernel: ir.Kernel, quick: bool) -> tuple[int, int, int, int]:
    key = kernel.algorithm.value if kernel.algorithm is not ir.Algorithm.TILE else kernel.op.value
    if kernel.masked:
        key = "masked"
    m, n, k, g = SHAPES[key]
    if EMULATED:
        m, n, k = min(m, 64 if g else 32), min(n, 256) if n else 0, min(k, 256)
        g = min(g, 2)
    elif quick:
        m, n, k = max(1, m // 8), max(n // 8, 256), max(k // 8, 256)
    n = kernel.static_n or n or k
    k = kernel.static_k or k
    return m, n, k, g


def to_device(inputs: dict) -> dict:
    import cupy

    out = {}
    for name, v in inputs.items():
        if isinstance(v, np.ndarray) and v.ndim:
            if v.dtype.name == "bfloat16":
                v = v.view(np.uint16)
            elif v.dtype.name.startswith("float8"):
                v = v.view(np.uint8)
            out[name] = cupy.asarray(v)
        else:
            out[name] = v
    return out


BATCH = 10  # calls per timed sample
EMULATED = False  # --emulate: tiny shapes, one sample


def time_call(fn, repeats: int = 10) -> float:
    """Median seconds per call over samples of BATCH back-to-back calls
    between CUDA events, after a warm-up."""
    import cupy

    fn()
    cupy.cuda.Device().synchronize()
    batch, repeats = (1, 1) if EMULATED else (BATCH, repeats)
    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(batch):
            fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3 / batch)
    return float(np.median(times))


def host_seconds(fn, calls: int = 200) -> float:
    """Host seconds per call of the launcher (validation, cached plan,
    argument packing, the launch calls), calls enqueued without waiting."""
    import cupy

    calls = 1 if EMULATED else calls
    fn()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    seconds = (time.perf_counter() - start) / calls
    cupy.cuda.Device().synchronize()
    return seconds


def torch_baseline(kernel: ir.Kernel, m: int, n: int, k: int, g: int) -> dict:
    """torch.matmul in bf16 for the same problem (dense; grouped: a loop over
    groups and the dense equivalent)."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available() or kernel.op is ir.Op.QUANTIZE:
        return {}
    dev = torch.device("cuda")
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    res = {}
    if kernel.op is ir.Op.GROUPED:
        rows = m // g
        b = torch.randn(g, k, n, device=dev, dtype=torch.bfloat16)

        def loop():
            for i in range(g):
                a[i * rows:(i + 1) * rows] @ b[i]
        res["torch_group_loop_s"] = _torch_time(loop)
        bd = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        res["torch_dense_s"] = _torch_time(lambda: a @ bd)
    else:
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        res["torch_dense_s"] = _torch_time(lambda: a @ b)
    return res


def mma_sync_path(launcher, fn, kernel: ir.Kernel, case, inputs: dict, dev: dict) -> dict:
    """Correctness and time of the mma.sync path of a kernel whose launcher
    picks its Hopper path on this device: its _device_limits() (what
    device_sm() and the CuPy call read, part of a call's signature) is
    replaced by one that answers 0 SMs for the duration."""
    import cupy

    real = launcher._device_limits
    # No SM count: launches() takes the mma.sync path.
    launcher._device_limits = lambda device: (real(device)[0], 0, real(device)[2])
    try:
        got = fn(**to_device(inputs))
        got = got if isinstance(got, tuple) else (got,)
        host = tuple(_view(cupy.asnumpy(o), launcher.DTYPES[name])
                     for o, name in zip(got, launcher.OUTPUTS))
        result = compare(host[0] if len(host) == 1 else host, reference(kernel, **inputs), kernel,
                         k=case.k, inputs=inputs)
        return {"mma_sync_correct": bool(result.passed),
                "mma_sync_seconds": time_call(lambda: fn(**dev))}
    finally:
        launcher._device_limits = real


def _torch_time(fn, repeats: int = 20) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return float(np.median(times))


def is_masked(kernel: ir.Kernel) -> bool:
    """A grouped kernel with the masked layout (a fixed per-group capacity
    and a per-group valid count, `ir.Kernel.masked`)."""
    return kernel.masked


def find_masked_kernel(specs: dict) -> tuple[str, ir.Kernel] | None:
    """(stem, kernel) of the first FP8 CUDA kernel of the specs with the
    masked grouped layout, block-scaled W8A8 first; None when there is none."""
    found = [(stem, k) for stem, spec in specs.items() for k in spec.kernels_for(ir.Backend.CUDA)
             if is_masked(k) and k.lhs.dtype.is_fp8]
    found.sort(key=lambda sk: not (sk[1].lhs_scale.enabled and sk[1].rhs_scale.enabled))
    return found[0] if found else None


def deepseek_plan(specs: dict) -> tuple[list[dict], list[str]]:
    """The DeepSeek-V3 rows to run, each with its kernel and DeepGEMM's
    figures; and why rows are skipped (a missing kernel)."""
    rows, skipped = [], []

    def kernel(stem: str, name: str) -> ir.Kernel | None:
        spec = specs.get(stem)
        return next((k for k in spec.kernels if k.name == name), None) if spec else None

    layouts = [("dense", DEEPSEEK_DENSE_KERNEL, {(1, m, n, k): v for (m, n, k), v in
                                                  DEEPSEEK_DENSE.items()}),
               ("contiguous", DEEPSEEK_CONTIGUOUS_KERNEL, DEEPSEEK_CONTIGUOUS)]
    masked = find_masked_kernel(specs)
    for layout, (stem, name), table in layouts:
        if kernel(stem, name) is None:
            skipped.append(f"{layout}: specs/{stem}.gemm has no kernel {name}")
            continue
        for (g, m, n, k), (tflops, gbps) in table.items():
            rows.append({"layout": layout, "spec": stem, "kernel": name,
                         "groups": g if layout != "dense" else 0, "m_per_group": m, "n": n,
                         "k": k, "ref_tflops": tflops, "ref_gbps": gbps})
    if masked is None:
        skipped.append(f"masked: no FP8 CUDA kernel of specs/ has the masked grouped layout, "
                       f"so the {len(DEEPSEEK_MASKED)} masked rows are not run")
    else:
        stem, k_ = masked
        for (g, m, n, k), (tflops, gbps) in DEEPSEEK_MASKED.items():
            rows.append({"layout": "masked", "spec": stem, "kernel": k_.name, "groups": g,
                         "m_per_group": m, "n": n, "k": k, "ref_tflops": tflops,
                         "ref_gbps": gbps})
    return rows, skipped


def deepseek_inputs(kernel: ir.Kernel, row: dict, rng) -> tuple[dict, int, int]:
    """Inputs of one DeepSeek row, the total m and the group count for cost()."""
    g, m = row["groups"], row["m_per_group"]
    if EMULATED:
        row = {**row, "n": 256, "k": 256}
        g, m = min(g, 2), min(m, 32)
    if not g:
        return random_inputs(kernel, m=m, n=row["n"], k=row["k"], rng=rng), m, 0
    # Contiguous: g groups of m rows each. Masked: g groups of capacity m,
    # all m valid (DeepGEMM's masked rows run full groups too).
    sizes = np.full(g, m, np.int32)
    return (random_inputs(kernel, m=g * m, n=row["n"], k=row["k"], rng=rng, group_sizes=sizes),
            g * m, g)


def run_deepseek(specs: dict) -> list[dict]:
    from gemmgen.explain import H200_TBPS

    plan, skipped = deepseek_plan(specs)
    for why in skipped:
        print(f"deepseek rows skipped: {why}", flush=True)
    rng = np.random.default_rng(0)
    done = []
    for row in plan[:1] if EMULATED else plan:
        spec = specs[row["spec"]]
        kernel = spec.kernel(row["kernel"])
        try:
            path = ROOT / "generated" / row["spec"] / "cuda" / f"{kernel.name}.py"
            launcher = load_generated_module(path, f"bench_deepseek_{kernel.name}")
            fn = getattr(launcher, kernel.name)
            inputs, m, g = deepseek_inputs(kernel, row, rng)
            n, k = (256, 256) if EMULATED else (row["n"], row["k"])
            dev = to_device(inputs)
            seconds = time_call(lambda fn=fn, dev=dev: fn(**dev))
            row["host_seconds"] = host_seconds(lambda fn=fn, dev=dev: fn(**dev))
            flops, moved = cost(kernel, m, n, k, g)
            row.update(seconds=seconds, tflops=flops / seconds / 1e12, gbps=moved / seconds / 1e9)
            row["hbm_fraction"] = row["gbps"] / (H200_TBPS * 1e3)
            if hasattr(launcher, "device_sm"):
                row["path"] = "wgmma" if launcher.device_sm()[0] == 90 and \
                    kernel.uses_wgmma("sm_90a") else "mma.sync"
        except Exception as e:  # noqa: BLE001 (report and go on)
            row["error"] = f"{type(e).__name__}: {e}"
        print(_deepseek_line(row), flush=True)
        done.append(row)
    return done


def _deepseek_shape(row: dict) -> str:
    if row["layout"] == "dense":
        return f"{row['m_per_group']}x{row['n']}x{row['k']}"
    return f"{row['groups']} x {row['m_per_group']} rows, n={row['n']} k={row['k']}"


def _deepseek_line(row: dict) -> str:
    head = f"deepseek {row['layout']} {_deepseek_shape(row)} on {row['kernel']}: "
    ref = f"{DEEPGEMM_SOURCE}: {row['ref_tflops']} TFLOP/s, {row['ref_gbps']} GB/s"
    if "error" in row:
        return head + f"ERROR {row['error']} ({ref})"
    return head + (f"{row['tflops']:.0f} TFLOP/s, {row['gbps']:.0f} GB/s "
                   f"({row['hbm_fraction']:.0%} of HBM), host {row['host_seconds'] * 1e6:.0f} us/call "
                   f"vs {ref}")


def deepseek_table(rows: list[dict]) -> list[str]:
    out = [(f"| layout | shape | kernel | path | TFLOP/s | GB/s | % of HBM | {DEEPGEMM_SOURCE} "
            "TFLOP/s | GB/s | ratio |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "tflops" not in r:
            out.append(f"| {r['layout']} | {_deepseek_shape(r)} | {r['kernel']} | - | error | | | "
                       f"{r['ref_tflops']} | {r['ref_gbps']} | |")
            continue
        out.append(f"| {r['layout']} | {_deepseek_shape(r)} | {r['kernel']} | "
                   f"{r.get('path', '-')} | {r['tflops']:.0f} | {r['gbps']:.0f} | "
                   f"{r['hbm_fraction']:.0%} | {r['ref_tflops']} | {r['ref_gbps']} | "
                   f"{r['tflops'] / r['ref_tflops']:.2f} |")
    return out


def _specs() -> dict:
    return {stem: render_spec(ROOT / "specs" / f"{stem}.gemm").spec for stem in ("dense", "moe")}


def is_sm12x(sm: int) -> bool:
    """Compute capability 12.x (major * 10 + minor): the devices of step (5)."""
    return sm // 10 == 12


def sm12x_device(sm: int, name: str = "") -> Device | None:
    """The gemmgen.devices entry whose roofline a 12.x device's rows are put
    beside: a GB10 on 12.1, an RTX PRO 6000 or an RTX 5090 on 12.0 (by the
    device's name); None for another compute capability."""
    if sm == 121:
        return DEVICES["gb10"]
    if sm == 120:
        return DEVICES["rtxpro6000" if "PRO" in name.upper() else "rtx5090"]
    return None


def sm12x_plan(specs: dict) -> tuple[list[dict], list[str]]:
    """The rows of step (5), each with its kernel (a dispatcher's: the arm
    for the row's M) and the dispatcher it goes through; why rows are
    skipped (a kernel the spec lacks)."""
    spec = specs.get(SM12X_SPEC)
    if spec is None:
        why = f"specs/{SM12X_SPEC}.gemm is missing, so the {len(SM12X_ROWS)} sm_12x rows are not run"
        return [], [why]
    kernels = {k.name for k in spec.kernels}
    dispatches = {d.name: d for d in spec.dispatches}
    rows, skipped = [], []
    for what, name, g, m, n, k in SM12X_ROWS:
        if name in dispatches:
            kernel, via = dispatches[name].pick(m, n, k), name
        elif name in kernels:
            kernel, via = name, None
        else:
            skipped.append(f"{what}: specs/{SM12X_SPEC}.gemm has no kernel {name}")
            continue
        rows.append({"what": what, "spec": SM12X_SPEC, "kernel": kernel, "via": via, "groups": g,
                     "m_per_group": m, "n": n, "k": k})
    return rows, skipped


def _sm12x_shape(row: dict) -> str:
    if not row["groups"]:
        return f"{row['m_per_group']}x{row['n']}x{row['k']}"
    return f"{row['groups']} x {row['m_per_group']} rows, n={row['n']} k={row['k']}"


def _sm12x_path(kernel: ir.Kernel, sm: int) -> str:
    if kernel.algorithm is not ir.Algorithm.TILE:
        return kernel.algorithm.value
    if kernel.op is not ir.Op.QUANTIZE and kernel.uses_mx_mma(f"sm_{sm}a"):
        return "block-scaled"
    return "mma.sync"


def run_sm12x(specs: dict, sm: int, device_name: str, only: list[str] | None = None) -> list[dict]:
    """Step (5): time the SM12X_ROWS rows on this 12.x device (those whose
    kernel or dispatcher `only` names, when given), beside the roofline of
    its gemmgen.devices entry. Emulated: the first row of each kernel."""
    plan, skipped = sm12x_plan(specs)
    for why in skipped:
        print(f"sm_12x rows skipped: {why}", flush=True)
    if only:
        plan = [r for r in plan if r["kernel"] in only or r["via"] in only]
    if EMULATED:
        firsts: dict = {}
        for r in plan:
            firsts.setdefault((r["kernel"], r["via"]), r)
        plan = list(firsts.values())
    device = sm12x_device(sm, device_name)
    rng = np.random.default_rng(0)
    done = []
    for row in plan:
        spec = specs[row["spec"]]
        kernel = spec.kernel(row["kernel"])
        try:
            entry = row["via"] or kernel.name
            path = ROOT / "generated" / row["spec"] / "cuda" / f"{entry}.py"
            launcher = load_generated_module(path, f"bench_sm12x_{entry}")
            fn = getattr(launcher, entry)
            inputs, m, g = deepseek_inputs(kernel, row, rng)
            n, k = (256, 256) if EMULATED else (row["n"], row["k"])
            dev = to_device(inputs)
            seconds = time_call(lambda fn=fn, dev=dev: fn(**dev))
            row["host_seconds"] = host_seconds(lambda fn=fn, dev=dev: fn(**dev))
            flops, moved = cost(kernel, m, n, k, g)
            row.update(seconds=seconds, tflops=flops / seconds / 1e12, gbps=moved / seconds / 1e9,
                       path=_sm12x_path(kernel, sm))
            if device is not None:
                eight_bit = kernel.lhs.dtype.bits <= 8 and kernel.rhs_operand.dtype.bits <= 8
                bound = max(flops / (device.rate(8 if eight_bit else 16) * 1e12),
                            moved / (device.tbps * 1e12))
                row.update(device=device.label, roofline_fraction=bound / seconds)
        except Exception as e:  # noqa: BLE001 (report and go on)
            row["error"] = f"{type(e).__name__}: {e}"
        print(_sm12x_line(row), flush=True)
        done.append(row)
    return done


def _sm12x_line(row: dict) -> str:
    via = f" via {row['via']}" if row["via"] else ""
    head = f"sm_12x {row['what']} {_sm12x_shape(row)} on {row['kernel']}{via}: "
    if "error" in row:
        return head + f"ERROR {row['error']}"
    bound = (f" ({row['roofline_fraction']:.0%} of the {row['device']} roofline)"
             if "device" in row else "")
    return head + (f"{row['tflops']:.1f} TFLOP/s, {row['gbps']:.0f} GB/s{bound}, "
                   f"{row['path']}, host {row['host_seconds'] * 1e6:.0f} us/call")


def sm12x_table(rows: list[dict]) -> list[str]:
    out = ["| rows | shape | kernel | path | TFLOP/s | GB/s | % of roofline | host us/call |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        kernel = r["kernel"] + (f" ({r['via']})" if r["via"] else "")
        if "tflops" not in r:
            out.append(f"| {r['what']} | {_sm12x_shape(r)} | {kernel} | - | error | | | |")
            continue
        frac = f"{r['roofline_fraction']:.0%}" if "roofline_fraction" in r else "-"
        out.append(f"| {r['what']} | {_sm12x_shape(r)} | {kernel} | {r['path']} | "
                   f"{r['tflops']:.1f} | {r['gbps']:.0f} | {frac} | "
                   f"{r['host_seconds'] * 1e6:.0f} |")
    return out


def _sm12x_specs() -> dict:
    return {SM12X_SPEC: render_spec(ROOT / "specs" / f"{SM12X_SPEC}.gemm").spec}


def is_sm100(sm: int) -> bool:
    """Compute capability 10.0 (B200, GB200): the device of step (6), which
    the sm_100a builds of specs/b200.gemm run on."""
    return sm == 100


def sm100_plan(specs: dict) -> tuple[list[dict], list[str]]:
    """The rows of step (6), each with its published figures (or "not
    published"); why rows are skipped (a kernel the spec lacks)."""
    spec = specs.get(SM100_SPEC)
    if spec is None:
        return [], [(f"specs/{SM100_SPEC}.gemm is missing, so the {len(SM100_ROWS)} B200 rows "
                     "are not run")]
    kernels = {k.name for k in spec.kernels}
    rows, skipped = [], []
    for what, name, g, m, n, k in SM100_ROWS:
        if name not in kernels:
            skipped.append(f"{what}: specs/{SM100_SPEC}.gemm has no kernel {name}")
            continue
        published = SM100_PUBLISHED.get((name, g, m, n, k), {})
        rows.append({"what": what, "spec": SM100_SPEC, "kernel": name, "via": None, "groups": g,
                     "m_per_group": m, "n": n, "k": k,
                     "published": {src: published[src].tflops if src in published else None
                                   for src in SM100_REFERENCES},
                     "published_sources": {src: p._asdict() for src, p in published.items()}})
    return rows, skipped


def _published(row: dict) -> str:
    return ", ".join(f"{src} {tf:.0f}" if tf is not None else f"{src}: not published"
                     for src, tf in row["published"].items())


def run_sm100(specs: dict, only: list[str] | None = None) -> list[dict]:
    """Step (6): time the SM100_ROWS rows on this 10.0 device (those of the
    kernels `only` names, when given), beside the B200 roofline at the rate
    of the row's operands (fp4 x fp4 at the FP4 rate, else the FP8 rate)
    and the published figures. Emulated: the first row of each kernel (at
    its shrunk m, the 1-CTA entry of a 2-CTA kernel's LUT)."""
    plan, skipped = sm100_plan(specs)
    for why in skipped:
        print(f"B200 rows skipped: {why}", flush=True)
    if only:
        plan = [r for r in plan if r["kernel"] in only]
    if EMULATED:
        firsts: dict = {}
        for r in plan:
            firsts.setdefault(r["kernel"], r)
        plan = list(firsts.values())
    device = DEVICES["b200"]
    rng = np.random.default_rng(0)
    done = []
    for row in plan:
        kernel = specs[row["spec"]].kernel(row["kernel"])
        try:
            path = ROOT / "generated" / row["spec"] / "cuda" / f"{kernel.name}.py"
            launcher = load_generated_module(path, f"bench_sm100_{kernel.name}")
            fn = getattr(launcher, kernel.name)
            inputs, m, g = deepseek_inputs(kernel, row, rng)
            n, k = (256, 256) if EMULATED else (row["n"], row["k"])
            dev = to_device(inputs)
            seconds = time_call(lambda fn=fn, dev=dev: fn(**dev))
            row["host_seconds"] = host_seconds(lambda fn=fn, dev=dev: fn(**dev))
            flops, moved = cost(kernel, m, n, k, g)
            bits = max(kernel.lhs.dtype.bits, kernel.rhs_operand.dtype.bits)
            bound = max(flops / (device.rate(bits) * 1e12), moved / (device.tbps * 1e12))
            row.update(seconds=seconds, tflops=flops / seconds / 1e12, gbps=moved / seconds / 1e9,
                       path=sm100_path(kernel, launcher, inputs), device=device.label,
                       roofline_fraction=bound / seconds, rate=device.rate(bits))
        except Exception as e:  # noqa: BLE001 (report and go on)
            row["error"] = f"{type(e).__name__}: {e}"
        print(_sm100_line(row), flush=True)
        done.append(row)
    return done


def sm100_path(kernel: ir.Kernel, launcher, inputs: dict) -> str:
    """The body a row runs on a B200 (148 SMs): the 2-CTA tile (its
    launcher's cluster launch) or the 1-CTA one, with the block-scaled
    tcgen05 MMA or not."""
    kind = "block-scaled tcgen05" if kernel.tcgen05_block_scaled else "tcgen05"
    steps = launcher.launches(launcher.validate(**inputs), 100, DEVICES["b200"].sms)
    pair = any(getattr(s, "cluster", (1, 1, 1)) != (1, 1, 1) for s in steps)
    return f"2-CTA {kind}" if pair else kind


def _sm100_line(row: dict) -> str:
    head = f"B200 {row['what']} {_sm12x_shape(row)} on {row['kernel']}: "
    if "error" in row:
        return head + f"ERROR {row['error']}"
    return head + (f"{row['tflops']:.1f} TFLOP/s, {row['gbps']:.0f} GB/s "
                   f"({row['roofline_fraction']:.0%} of the {row['device']} roofline at "
                   f"{row['rate']:.0f} TFLOP/s), {_published(row)}, "
                   f"host {row['host_seconds'] * 1e6:.0f} us/call")


def sm100_table(rows: list[dict]) -> list[str]:
    out = [("| rows | shape | kernel | TFLOP/s | GB/s | % of roofline | DeepGEMM (B200) | "
            "cuBLAS (B200) | host us/call |"),
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pub = [f"{r['published'][s]:.0f}" if r["published"][s] is not None else "not published"
               for s in SM100_REFERENCES]
        if "tflops" not in r:
            out.append(f"| {r['what']} | {_sm12x_shape(r)} | {r['kernel']} | error | | | "
                       f"{pub[0]} | {pub[1]} | |")
            continue
        out.append(f"| {r['what']} | {_sm12x_shape(r)} | {r['kernel']} | {r['tflops']:.1f} | "
                   f"{r['gbps']:.0f} | {r['roofline_fraction']:.0%} | {pub[0]} | {pub[1]} | "
                   f"{r['host_seconds'] * 1e6:.0f} |")
    return out


def sm100_sources(rows: list[dict]) -> list[str]:
    """Where each published figure beside `rows` is written: one line per
    figure, its row, its reference, what ran, the GPU, the page and its date."""
    out = []
    for r in rows:
        for src, p in r.get("published_sources", {}).items():
            out.append(f"- {_sm12x_shape(r)} on {r['kernel']}: {src} {p['tflops']:.0f} TFLOP/s, "
                       f"{p['what']}, {p['gpu']} ({p['source']}, {p['date']})")
    return out


def _sm100_specs() -> dict:
    return {SM100_SPEC: render_spec(ROOT / "specs" / f"{SM100_SPEC}.gemm").spec}


def device_sm() -> tuple[int, str]:
    """(compute capability as major * 10 + minor, name) of CuPy's device."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return int(props["major"]) * 10 + int(props["minor"]), (
        name.decode() if isinstance(name, bytes) else str(name))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--kernel", action="append")
    ap.add_argument("--quick", action="store_true", help="1/8 of the production shapes")
    ap.add_argument("--no-deepseek", action="store_true", help="skip the DeepSeek-V3 rows (step 4)")
    ap.add_argument("--emulate", action="store_true",
                    help="run the whole flow on the CPU emulator (CuPy stand-in, tiny shapes); "
                         "its times are not measurements")
    ap.add_argument("--deepseek-only", action="store_true",
                    help=f"only the DeepSeek-V3 shapes, beside the {DEEPGEMM_SOURCE} figures")
    ap.add_argument("--list-deepseek", action="store_true",
                    help="print the DeepSeek-V3 rows and the kernels they run on, and exit "
                         "(needs no GPU)")
    ap.add_argument("--sm12x-only", action="store_true",
                    help="only step (5), the specs/gb10.gemm rows (a 12.x device); with "
                         "--kernel, the rows of those kernels or dispatchers")
    ap.add_argument("--list-sm12x", action="store_true",
                    help="print the sm_12x rows (step 5) and the kernels they run on, and exit "
                         "(needs no GPU)")
    ap.add_argument("--sm100-only", action="store_true",
                    help="only step (6), the specs/b200.gemm rows (a 10.0 device); with "
                         "--kernel, the rows of those kernels")
    ap.add_argument("--list-sm100", action="store_true",
                    help="print the B200 rows (step 6), their kernels and the published "
                         "figures beside them, and exit (needs no GPU)")
    ap.add_argument("--emulate-arch", default="sm_90a",
                    help="the arch --emulate plays (default sm_90a; sm_121a: a GB10, step 5; "
                         "sm_100a: a B200, step 6)")
    args = ap.parse_args()
    if args.list_sm100:
        plan, skipped = sm100_plan(_sm100_specs())
        for row in plan:
            print(f"{row['what']:18} {_sm12x_shape(row):38} {row['kernel']:30} {_published(row)}")
        print("\npublished B200 figures:")
        print("\n".join(sm100_sources(plan)))
        for why in skipped:
            print(f"skipped {why}")
        return 0
    if args.list_sm12x:
        plan, skipped = sm12x_plan(_sm12x_specs())
        for row in plan:
            via = f" via {row['via']}" if row["via"] else ""
            print(f"{row['what']:18} {_sm12x_shape(row):38} {row['kernel']}{via}")
        for why in skipped:
            print(f"skipped {why}")
        return 0
    if args.list_deepseek:
        plan, skipped = deepseek_plan(_specs())
        for row in plan:
            print(f"{row['layout']:10} {_deepseek_shape(row):40} {row['kernel']}  "
                  f"({DEEPGEMM_SOURCE}: {row['ref_tflops']} TFLOP/s, {row['ref_gbps']} GB/s)")
        for why in skipped:
            print(f"skipped {why}")
        return 0
    if args.emulate:
        from gemmgen.harness import cupy_standin

        global EMULATED
        EMULATED = True
        with cupy_standin.install(ROOT / "generated", args.emulate_arch):
            return run(args)
    if reason := cuda_gpu.unavailable_reason():
        print(f"gpu_bench: skipped: {reason}")
        return 0
    return run(args)


def run(args) -> int:
    rows = []
    failed = 0
    sm, device_name = device_sm()
    sm12x, sm100 = is_sm12x(sm), is_sm100(sm)
    if args.sm12x_only and not sm12x:
        print(f"sm_12x rows skipped: {device_name} has compute capability {sm // 10}.{sm % 10}, "
              "not 12.x")
        return 0
    if args.sm100_only and not sm100:
        print(f"B200 rows skipped: {device_name} has compute capability {sm // 10}.{sm % 10}, "
              "not 10.0")
        return 0
    stems = ("dense", "moe") + ((SM12X_SPEC,) if sm12x else ()) + ((SM100_SPEC,) if sm100 else ())
    only_step = args.deepseek_only or args.sm12x_only or args.sm100_only
    for stem in () if only_step else stems:
        rendered = render_spec(ROOT / "specs" / f"{stem}.gemm")
        for kernel in rendered.spec.kernels_for(ir.Backend.CUDA):
            if args.kernel and kernel.name not in args.kernel:
                continue
            path = ROOT / "generated" / stem / "cuda" / f"{kernel.name}.py"
            row = {"spec": stem, "kernel": kernel.name}
            try:
                launcher = load_generated_module(path, f"bench_{stem}_{kernel.name}")
                if sm12x and (why := launcher.arch_error(sm)):
                    # specs/moe.gemm's sm_90a-only kernels: no image for 12.x.
                    print(f"{kernel.name}: skipped on this device: {why}", flush=True)
                    continue
                if sm12x:
                    row["path"] = _sm12x_path(kernel, sm)
                fn = getattr(launcher, kernel.name)
                # (1) correctness on the standard ragged case.
                case = standard_cases(kernel)[0]
                inputs = case.inputs(kernel, 0)
                got = fn(**to_device(inputs))
                got = got if isinstance(got, tuple) else (got,)
                import cupy
                host = tuple(cupy.asnumpy(o) for o in got)
                want_dtypes = [launcher.DTYPES[o] for o in launcher.OUTPUTS]
                host = tuple(_view(h, d) for h, d in zip(host, want_dtypes))
                result = compare(host[0] if len(host) == 1 else host,
                                 reference(kernel, **inputs), kernel, k=case.k, inputs=inputs)
                row["correct"] = bool(result.passed)
                if not result.passed:
                    row["detail"] = result.detail
                # (2) timing at the production shape.
                m, n, k, g = shape_for(kernel, args.quick)
                rng = np.random.default_rng(0)
                kw = {}
                if kernel.masked:
                    kw["masked_m"] = np.full(g, m, np.int32)
                elif kernel.grouped:
                    kw["group_sizes"] = np.full(g, m // g, np.int32)
                big = random_inputs(kernel, m=m, n=n, k=k, rng=rng, **kw)
                dev = to_device(big)
                seconds = time_call(lambda: fn(**dev))
                row["host_seconds"] = host_seconds(lambda: fn(**dev))
                flops, moved = cost(kernel, m, n, k, g)
                row.update(m=m, n=n, k=k, groups=g, seconds=seconds,
                           tflops=flops / seconds / 1e12, gbps=moved / seconds / 1e9)
                if not EMULATED:
                    row.update(torch_baseline(kernel, g * m if kernel.masked else m, n, k, g))
                # (3) the mma.sync path of a kernel whose launcher chose wgmma.
                if hasattr(launcher, "device_sm") and launcher.device_sm()[0] == 90:
                    row["path"] = "wgmma"
                    row.update(mma_sync_path(launcher, fn, kernel, case, inputs, dev))
            except Exception as e:  # report and go on
                row["error"] = f"{type(e).__name__}: {e}"
                row["traceback"] = traceback.format_exc()
            failed += not row.get("correct", False) or not row.get("mma_sync_correct", True)
            rows.append(row)
            print(_line(row), flush=True)
            save(args, rows, [])  # so far: a step cut short by its time limit keeps its rows
    run_it = args.deepseek_only or not (args.kernel or args.no_deepseek or args.sm12x_only
                                        or args.sm100_only)
    if sm12x and run_it:  # step (5) in place of step (4), whose kernels are sm_90a-tuned
        print("deepseek rows skipped: on compute capability 12.x the sm_12x rows (step 5) time "
              "these shapes on specs/gb10.gemm", flush=True)
        run_it = False
    deepseek = run_deepseek(_specs()) if run_it else []
    sm12x_rows = []
    if sm12x and (args.sm12x_only or not (args.deepseek_only or args.no_deepseek)):
        sm12x_rows = run_sm12x(_sm12x_specs(), sm, device_name, args.kernel)
        failed += sum("error" in r for r in sm12x_rows)
    sm100_rows = []
    if sm100 and (args.sm100_only or not (args.deepseek_only or args.no_deepseek)):
        sm100_rows = run_sm100(_sm100_specs(), args.kernel)
        failed += sum("error" in r for r in sm100_rows)
    device = save(args, rows, deepseek, sm12x_rows, sm100_rows)
    if deepseek:
        print(f"\nDeepSeek-V3 shapes on {device}, beside {DEEPGEMM_SOURCE}:\n")
        print("\n".join(deepseek_table(deepseek)))
    if sm12x_rows:
        print(f"\nsm_12x rows (specs/{SM12X_SPEC}.gemm) on {device}:\n")
        print("\n".join(sm12x_table(sm12x_rows)))
    if sm100_rows:
        print(f"\nB200 rows (specs/{SM100_SPEC}.gemm) on {device}:\n")
        print("\n".join(sm100_table(sm100_rows)))
        if sources := sm100_sources(sm100_rows):
            print("\nThe published B200 figures beside them:\n")
            print("\n".join(sources))
    print(f"\n{device}\n")
    if EMULATED:
        print("(emulated: the times below are the CPU emulator's, not measurements)")
    print("| kernel | path | shape | correct | TFLOP/s | GB/s | host us/call | mma.sync path TFLOP/s "
          "| torch bf16 dense TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "seconds" not in r:
            print(f"| {r['kernel']} | - | - | {r.get('correct', False)} | error | | | | |")
            continue
        flops = r["tflops"] * r["seconds"] * 1e12
        torch_tf = f"{flops / r['torch_dense_s'] / 1e12:.1f}" if "torch_dense_s" in r else "-"
        mma_sync = "-"
        if "mma_sync_seconds" in r:
            mma_sync = f"{flops / r['mma_sync_seconds'] / 1e12:.1f}"
            if not r["mma_sync_correct"]:
                mma_sync += " (wrong)"
        print(f"| {r['kernel']} | {r.get('path', 'mma.sync')} | {r['m']}x{r['n']}x{r['k']}"
              f"{' g=' + str(r['groups']) if r['groups'] else ''} | {r['correct']} | "
              f"{r['tflops']:.1f} | {r['gbps']:.0f} | {r['host_seconds'] * 1e6:.0f} | {mma_sync} | {torch_tf} |")
    return 1 if failed else 0


def save(args, rows: list[dict], deepseek: list[dict], sm12x: list[dict] | None = None,
         sm100: list[dict] | None = None) -> str:
    """Write bench.json (bench_deepseek.json for --deepseek-only, bench_sm12x.json for
    --sm12x-only, bench_sm100.json for --sm100-only) to --out; returns the device's name."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = __import__("cupy").cuda.runtime.getDeviceProperties(0)["name"].decode()
    name = ("bench_deepseek.json" if args.deepseek_only else
            "bench_sm12x.json" if getattr(args, "sm12x_only", False) else
            "bench_sm100.json" if getattr(args, "sm100_only", False) else "bench.json")
    (out / name).write_text(json.dumps({"device": device, "time": time.time(), "rows": rows,
                                        "deepseek": deepseek, "sm12x": sm12x or [],
                                        "sm100": sm100 or []}, indent=2))
    return device


def _view(host: np.ndarray, dtype_name: str) -> np.ndarray:
    import ml_dtypes

    if hasattr(ml_dtypes, dtype_name) and dtype_name not in ("float32", "float16", "int8",
                                                               "int32", "uint8"):
        return host.view(getattr(ml_dtypes, dtype_name))
    return host.view(dtype_name)


def _line(row: dict) -> str:
    if "error" in row:
        return f"{row['kernel']}: ERROR {row['error']}"
    line = (f"{row['kernel']}: correct={row['correct']} {row['m']}x{row['n']}x{row['k']} "
            f"{row['tflops']:.1f} TFLOP/s {row['gbps']:.0f} GB/s, host {row['host_seconds'] * 1e6:.0f} us/call")
    if row["host_seconds"] >= row["seconds"]:
        line += " (host-bound)"
    if "mma_sync_seconds" in row:
        line += (f" (wgmma path; mma.sync path: correct={row['mma_sync_correct']}, "
                 f"{row['tflops'] * row['seconds'] / row['mma_sync_seconds']:.1f} TFLOP/s)")
    return line


if __name__ == "__main__":
    sys.exit(main())
