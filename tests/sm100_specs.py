"""Kernels that several sm_100a test specs declare alike (the 1-CTA and the
2-CTA tile, the pair with and without TMA multicast): each file's SPEC is
its target and defaults, these kernels under its own prefix, then its own."""

from __future__ import annotations


def spec_head(defaults: str) -> str:
    """The sm_100a CUDA target and a defaults block of `defaults` (lines
    without their indent) plus `backends cuda`."""
    lines = "".join(f"  {line}\n" for line in (*defaults.strip().splitlines(), "backends cuda"))
    return f"\ntarget cuda {{\n  archs sm_100a\n}}\n\ndefaults {{\n{lines}}}\n"


def pair_kernels(p: str, cluster: str = "") -> str:
    """The 16-bit and FP8 kernels of the 2-CTA tile's tests, named `p`...
    (the defaults: lhs bf16 [m, k], a 256 x 128 x 64 tile): dense ([n, k],
    and [k, n] with a bias and relu), grouped, silu_mul, masked, FP8 with
    epilogue scales (per-token, per-tensor; rhs [k, n]). `cluster` follows
    each tile the kernels set (" cluster_n=P")."""
    return f"""
kernel {p}dense {{
  op dense
  rhs bf16 [n, k]
  out f32
}}

kernel {p}dense_kn {{
  op dense
  lhs f16 [m, k]
  rhs f16 [k, n]
  out f16
  bias f32 [n]
  epilogue relu
}}

kernel {p}grouped {{
  op grouped
  rhs bf16 [g, n, k]
  out bf16
}}

kernel {p}gateup {{
  op grouped
  rhs bf16 [g, n, k]
  out bf16
  epilogue silu_mul
}}

kernel {p}masked {{
  op grouped
  lhs bf16 [g, m, k]
  rhs bf16 [g, n, k]
  out f32
}}

kernel {p}fp8_token {{
  op dense
  lhs e4m3 [m, k]
  rhs e4m3 [n, k]
  out bf16
  lhs_scale per_token f32
  rhs_scale per_channel f32
  tile m=256 n=128 k=128{cluster}
}}

kernel {p}fp8_grouped {{
  op grouped
  lhs e4m3 [m, k]
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_tensor f32
  rhs_scale per_channel f32
  tile m=256 n=128 k=128{cluster}
}}

kernel {p}fp8_kn {{
  op grouped
  lhs e4m3 [m, k]
  rhs e4m3 [g, k, n]
  out bf16
  rhs_scale per_channel f32
}}
"""


def block_scaled_kernels(p: str, bm: int) -> str:
    """The block-scaled kernels of the sm_100a body's tests, named `p`...
    (the defaults: lhs e4m3 [m, k], tiles of `bm` rows): MXFP8 (first, ending
    in the atom layout's rhs_scale line), its silu_mul, NVFP4, MXFP4, W4A8
    dense, grouped and masked; the narrow tiles (n = 64) `bm` rows."""
    return f"""
kernel {p}mx_dense {{
  op dense
  rhs e4m3 [n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}}

kernel {p}mx_gateup {{
  op grouped
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  epilogue silu_mul
}}

# NVFP4 (ue4m3 scales of 16, each with its global scale) and MXFP4 (e8m0
# of 32), packed fp4 on kind::mxf4nvf4 / kind::mxf4.
kernel {p}nv4_dense {{
  op dense
  lhs fp4 packed [m, k]
  rhs fp4 packed [n, k]
  out bf16
  lhs_scale per_token_group k=16 ue4m3 layout=atom128x4 global=f32
  rhs_scale block n=1 k=16 ue4m3 layout=atom128x4 global=f32
}}

kernel {p}nv4_moe {{
  op grouped
  lhs fp4 packed [m, k]
  rhs fp4 packed [g, n, k]
  out f32
  lhs_scale per_token_group k=16 ue4m3 global=f32
  rhs_scale block n=1 k=16 ue4m3 layout=atom128x4 global=f32
  tile m={bm} n=64 k=256
}}

kernel {p}nv4_masked {{
  op grouped
  lhs fp4 packed [g, m, k]
  rhs fp4 packed [g, n, k]
  out bf16
  lhs_scale per_token_group k=16 ue4m3 global=f32
  rhs_scale block n=1 k=16 ue4m3 global=f32
}}

kernel {p}mx4_dense {{
  op dense
  lhs fp4 packed [m, k]
  rhs fp4 packed [n, k]
  out f32
  bias f32 [n]
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}}

kernel {p}mx4_moe {{
  op grouped
  lhs fp4 packed [m, k]
  rhs fp4 packed [g, n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  epilogue silu_mul
}}

# W4A8: MXFP8 activations x MXFP4 weights on kind::mxf8f6f4, the packed
# weights unpacked into the MMA's padded fp4 layout by the producer warp.
kernel {p}w4a8_dense {{
  op dense
  rhs fp4 packed [n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}}

kernel {p}w4a8_moe {{
  op grouped
  rhs fp4 packed [g, n, k]
  out f32
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  epilogue silu_mul
}}

kernel {p}w4a8_masked {{
  op grouped
  lhs e4m3 [g, m, k]
  rhs fp4 packed [g, n, k]
  out f32
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  tile m={bm} n=64 k=128
}}
"""
