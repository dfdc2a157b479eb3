"""The spec's Hopper qualification (ir.Kernel.wgmma_obstacle) agrees with the
body's own, `gg::gemm::sm90::qualifies<Config>()` in gg_gemm_sm90.cuh, on the
Config the CUDA backend prints for each kernel: one host g++ compile of every
Config with a static_assert of the Python answer."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from cuda_helpers import render_cuda

from gemmgen.harness.toolchain import ToolchainError, cuda_include_dir
from gemmgen.runtime import RUNTIME_INCLUDE_DIR

# Dense and grouped tile kernels, the ones the C++ predicate speaks about, of
# the operand pairs the CUDA backend emits (f32 and mixed 16-bit pairs it
# rejects; tests/language/test_spec_language.py covers them on the Python side).
KERNELS = {
    "bf16_nk": "op dense\n  lhs bf16 [m, k]\n  rhs bf16 [n, k]\n  out f32",
    "f16_kn_bias_relu": "op dense\n  lhs f16 [m, k]\n  rhs f16 [k, n]\n  out f16\n"
                        "  bias f32 [n]\n  epilogue relu alpha=0.5",
    "grouped_bf16_kn": "op grouped\n  lhs bf16 [m, k]\n  rhs bf16 [g, k, n]\n  out bf16",
    "w8a16": "op dense\n  lhs bf16 [m, k]\n  rhs int8 [n, k]\n  out bf16",
    "fp8": "op grouped\n  lhs e4m3 [m, k]\n  rhs e4m3 [g, n, k]\n  out bf16",
    "per_channel": "op dense\n  lhs bf16 [m, k]\n  rhs bf16 [n, k]\n  out bf16\n"
                   "  rhs_scale per_channel",
    "per_token": "op dense\n  lhs bf16 [m, k]\n  rhs bf16 [n, k]\n  out bf16\n"
                 "  lhs_scale per_token",
    "silu_mul": "op dense\n  lhs bf16 [m, k]\n  rhs bf16 [n, k]\n  out bf16\n"
                "  epilogue silu_mul",
    "fp8_kn": "op dense\n  lhs e4m3 [m, k]\n  rhs e4m3 [k, n]\n  out bf16",
    "fp8_e5m2_tensor": "op dense\n  lhs e5m2 [m, k]\n  rhs e5m2 [n, k]\n  out f32\n"
                       "  lhs_scale per_tensor\n  rhs_scale per_channel e8m0",
    "fp8_block": "op grouped\n  lhs e4m3 [m, k]\n  rhs e4m3 [g, n, k]\n  out bf16\n"
                 "  lhs_scale per_token_group k=128\n  rhs_scale block n=128 k=128",
    "fp8_block_k64": "op dense\n  lhs e4m3 [m, k]\n  rhs e4m3 [n, k]\n  out bf16\n"
                     "  lhs_scale per_token_group k=64\n  tile m=128 n=128 k=64",
    "fp8_block_n32": "op dense\n  lhs e4m3 [m, k]\n  rhs e4m3 [n, k]\n  out bf16\n"
                     "  rhs_scale block n=32 k=128",
    "fp8_folded": "op dense\n  lhs e4m3 [m, k]\n  rhs e4m3 [n, k]\n  out bf16\n"
                  "  lhs_scale per_token_group k=128 e8m0\n  rhs_scale per_channel",
    "bf16_block": "op dense\n  lhs bf16 [m, k]\n  rhs bf16 [n, k]\n  out bf16\n"
                  "  rhs_scale block n=128 k=128",
    # Weight-only (the mixed tile): [n, k] weights of 8 or 4 bits, scales
    # per K block of whole 64-element K tiles, lhs scales in the epilogue.
    "w4a16_block": "op dense\n  lhs bf16 [m, k]\n  rhs int4 packed [n, k]\n  out bf16\n"
                   "  rhs_scale block n=1 k=128 bf16",
    "w8a16_grouped_kblock": "op grouped\n  lhs f16 [m, k]\n  rhs e4m3 [g, n, k]\n  out f16\n"
                            "  rhs_scale kblock k=128 f32",
    "w8a16_kn": "op dense\n  lhs bf16 [m, k]\n  rhs int8 [k, n]\n  out bf16",
    "w8a16_k32": "op dense\n  lhs bf16 [m, k]\n  rhs int8 [n, k]\n  out bf16\n"
                 "  rhs_scale block n=1 k=32\n  tile m=64 n=128 k=32",
    "w8a16_silu_mul": "op dense\n  lhs bf16 [m, k]\n  rhs int8 [n, k]\n  out bf16\n"
                      "  epilogue silu_mul",
    # swiglu_clamped: both pairs on the 16-bit and FP8 tiles, halves only on
    # the weight-only tile; the MX / NV block-scaled MMAs refuse it.
    "swiglu_interleaved": "op grouped\n  lhs bf16 [m, k]\n  rhs bf16 [g, k, n]\n  out bf16\n"
                          "  epilogue swiglu_clamped",
    "swiglu_fp8_halves": "op dense\n  lhs e4m3 [m, k]\n  rhs e4m3 [n, k]\n  out bf16\n"
                         "  epilogue swiglu_clamped pairs=halves",
    "w8a16_swiglu_halves": "op dense\n  lhs bf16 [m, k]\n  rhs int8 [n, k]\n  out bf16\n"
                           "  epilogue swiglu_clamped pairs=halves",
    "w8a16_swiglu_interleaved": "op dense\n  lhs bf16 [m, k]\n  rhs int8 [n, k]\n  out bf16\n"
                                "  epilogue swiglu_clamped",
    "w8a16_lhs_group": "op dense\n  lhs bf16 [m, k]\n  rhs int8 [n, k]\n  out bf16\n"
                       "  lhs_scale per_token_group k=128",
}

CONFIG_RE = re.compile(r"^struct Config \{\n.*?^\};\n", re.M | re.S)


def test_wgmma_obstacle_matches_the_cxx_qualifies(tmp_path):
    text = "target cuda {\n  archs sm_90a\n}\n" + "".join(
        f"\nkernel {name} {{\n  {body}\n  backends cuda\n}}\n" for name, body in KERNELS.items())
    spec, cuda, _ = render_cuda(tmp_path, "q", text)
    unit = ['#include "gg_runtime.cuh"']
    expected = {}
    for k in spec.kernels:
        (config,) = CONFIG_RE.findall((cuda / f"{k.name}.cu").read_text())
        expected[k.name] = k.wgmma_obstacle() is None
        unit += [config.replace("struct Config {", f"struct Config_{k.name} {{"),
                 f"static_assert(gg::gemm::sm90::qualifies<Config_{k.name}>() == "
                 f"{'true' if expected[k.name] else 'false'}, \"{k.name}\");"]
    # Both answers occur, so a predicate stuck at either one fails.
    assert set(expected.values()) == {True, False}
    assert [n for n, q in expected.items() if q] == [
        "bf16_nk", "f16_kn_bias_relu", "grouped_bf16_kn", "w8a16", "fp8", "per_channel",
        "per_token", "silu_mul", "fp8_e5m2_tensor", "fp8_block", "w4a16_block",
        "w8a16_grouped_kblock", "w8a16_silu_mul", "swiglu_interleaved", "swiglu_fp8_halves",
        "w8a16_swiglu_halves"]
    src = tmp_path / "qualifies.cc"
    src.write_text("\n".join(unit) + "\n")
    try:
        include = cuda_include_dir()
    except ToolchainError as e:
        pytest.skip(f"no CUDA headers: {e}")
    cxx = os.environ.get("GEMMGEN_CXX", "g++")
    r = subprocess.run([cxx, "-x", "c++", "-std=c++20", "-fsyntax-only", "-Wno-attributes",
                        f"-I{RUNTIME_INCLUDE_DIR}", f"-I{include}", str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]


def test_tcgen05_obstacle_matches_the_cxx_qualifies(tmp_path):
    """The same for the sm_100a body: ir.Kernel.tcgen05_obstacle against
    `gg::gemm::sm100::qualifies<Config>()` (gg_gemm_sm100.cuh), whose
    weight-only branch is the tile of gg_gemm_sm100_mixed.cuh
    (`sm100_mixed::qualifies` must agree too)."""
    text = "target cuda {\n  archs sm_100a\n}\n" + "".join(
        f"\nkernel {name} {{\n  {body}\n  backends cuda\n}}\n" for name, body in KERNELS.items())
    spec, cuda, _ = render_cuda(tmp_path, "q100", text)
    unit = ['#include "gg_runtime.cuh"']
    expected = {}
    for k in spec.kernels:
        (config,) = CONFIG_RE.findall((cuda / f"{k.name}.cu").read_text())
        expected[k.name] = k.tcgen05_obstacle() is None
        want = "true" if expected[k.name] else "false"
        unit += [config.replace("struct Config {", f"struct Config_{k.name} {{"),
                 (f"static_assert(gg::gemm::sm100::qualifies<Config_{k.name}>() == {want}, "
                  f"\"{k.name}\");")]
        if k.wgmma_mixed:
            unit.append(f"static_assert(gg::gemm::sm100_mixed::qualifies<Config_{k.name}>() == "
                        f"{want}, \"{k.name} (weight-only)\");")
    # tcgen05 reads FP8 [k, n] too; the weight-only kernels qualify as on sm_90a.
    assert [n for n, q in expected.items() if q] == [
        "bf16_nk", "f16_kn_bias_relu", "grouped_bf16_kn", "w8a16", "fp8", "per_channel",
        "per_token", "silu_mul", "fp8_kn", "fp8_e5m2_tensor", "fp8_block", "w4a16_block",
        "w8a16_grouped_kblock", "w8a16_silu_mul", "swiglu_interleaved", "swiglu_fp8_halves",
        "w8a16_swiglu_halves"]
    src = tmp_path / "qualifies100.cc"
    src.write_text("\n".join(unit) + "\n")
    try:
        include = cuda_include_dir()
    except ToolchainError as e:
        pytest.skip(f"no CUDA headers: {e}")
    cxx = os.environ.get("GEMMGEN_CXX", "g++")
    r = subprocess.run([cxx, "-x", "c++", "-std=c++20", "-fsyntax-only", "-Wno-attributes",
                        f"-I{RUNTIME_INCLUDE_DIR}", f"-I{include}", str(src)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
