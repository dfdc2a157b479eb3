"""swiglu_clamped (GPT-OSS's clamped gated activation) on the sm_100a
bodies (gg_gemm_sm100.cuh's 1-CTA tile, plain and promoted FP8; the 2-CTA
tile of gg_gemm_sm100_pair.cuh; gg_gemm_sm100_mixed.cuh's weight-only
tile), on the CPU emulator of an sm_100a device, against the float64
reference: pairs=interleaved (a tile's B is the columns 2 n0.. in order,
each epilogue thread's row pairing adjacent accumulator columns) and
pairs=halves (silu_mul's gate half over up half), per-expert bias, empty
groups, group_offset with existing_out, n awkward (200) and a multiple of
the tile (256), k not a multiple of the K tile; and planted bugs in the
epilogue's pairing that the emulator tests must catch.

The unmarked cases are one interleaved and one halves kernel and one
planted bug; the rest are `slow`."""

from __future__ import annotations

import pytest
from sm100_helpers import Sm100Spec

from gemmgen.cases import Case
from gemmgen.harness import nvcc

SPEC = """
target cuda {
  archs sm_100a
}

defaults {
  lhs bf16 [m, k]
  tile m=128 n=128 k=64
  backends cuda
}

# GPT-OSS's gate-up: bf16 experts, per-expert bias, interleaved pairs; a
# small limit so that both clamps bite on random data.
kernel t_inter {
  op grouped
  rhs bf16 [g, n, k]
  out bf16
  bias bf16 [g, 1, n]
  epilogue swiglu_clamped limit=0.75
}

# The halves layout, rhs [g, k, n] (MN-major boxes), f32 out, other constants.
kernel t_halves {
  op grouped
  rhs bf16 [g, k, n]
  out f32
  bias f32 [g, 1, n]
  epilogue swiglu_clamped pairs=halves alpha_gate=2 limit=1.5
}

# The 2-CTA tile (m = 256), interleaved.
kernel t_pair {
  op grouped
  rhs bf16 [g, n, k]
  out bf16
  bias f32 [g, 1, n]
  epilogue swiglu_clamped limit=1
  tile m=256 n=128 k=64
}

# FP8 x FP8 with DeepSeek's block scales (the FP32 promotion, its sums in
# registers), interleaved.
kernel t_fp8 {
  op grouped
  lhs e4m3 [m, k]
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=128 f32
  rhs_scale block n=128 k=128 f32
  bias f32 [g, 1, n]
  epilogue swiglu_clamped limit=1
}

# DeepSeek's e8m0 block scales: the block-scaled tcgen05.mma does not run
# swiglu_clamped, so `promotion auto` takes the FP32 promotion in software.
kernel t_fp8_e8m0 {
  op grouped
  lhs e4m3 [m, k]
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=128 k=128 e8m0
  epilogue swiglu_clamped pairs=halves limit=1
}

# MXFP8 experts on the block-scaled tcgen05.mma (kind::mxf8f6f4, e8m0 scales
# of 32), halves (the block-scaled tile's B is silu_mul's two row runs).
kernel t_mxfp8 {
  op grouped
  lhs e4m3 [m, k]
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  bias f32 [g, 1, n]
  epilogue swiglu_clamped pairs=halves limit=1
  tile m=128 n=128 k=128
}

# Weight-only int8 experts (the weight-only tile), halves.
kernel t_w8 {
  op grouped
  rhs int8 [g, n, k]
  out bf16
  rhs_scale per_channel f32
  bias f32 [g, 1, n]
  epilogue swiglu_clamped pairs=halves limit=1
}
"""

BODY = Sm100Spec("sm100swiglu", SPEC)
SLOW = pytest.mark.slow

# n = 200: 100 outputs, a partial tile; 256: whole tiles. k = 80 is below
# the K tile (64 16-bit elements, 128 FP8 ones) plus a partial one for
# 16-bit; 272 FP8 two K tiles and a partial one.
SHARD = Case("shard", 45, 200, 80, group_sizes=(10, 0, 17, 18, 0), group_offset=1, g_local=3,
             existing_out=True)
WHOLE = Case("whole", 130, 256, 136, group_sizes=(70, 0, 60))
# rhs [k, n]: rows of 16-byte copies, so n % 16 == 0 (208: 104 outputs).
SHARD_KN = Case("shard_kn", 45, 208, 72, group_sizes=(10, 0, 17, 18, 0), group_offset=1,
                g_local=3, existing_out=True)
PAIR = Case("pair", 300, 256, 136, group_sizes=(280, 0, 20))
WHOLE_FP8 = Case("whole_fp8", 130, 256, 272, group_sizes=(70, 0, 60))
# MXFP8: k whole 32-wide scale blocks, a partial K tile; a shard, n awkward.
SHARD_MX = Case("shard_mx", 45, 200, 160, group_sizes=(10, 0, 17, 18, 0), group_offset=1,
                g_local=3, existing_out=True)


def test_the_sm100_bodies_take_swiglu_clamped():
    for name in ("t_inter", "t_halves", "t_pair", "t_fp8", "t_w8", "t_mxfp8"):
        k = BODY.kernel(name)
        assert k.tcgen05_obstacle() is None and k.uses_tcgen05("sm_100a"), name
        tiles = BODY.tiles(name)
        assert tiles and all(t.bn_out * 2 == t.bn for t in tiles), name
    assert any(t.pair for t in BODY.tiles("t_pair"))
    assert all(t.promoted for t in BODY.tiles("t_fp8"))
    assert BODY.kernel("t_mxfp8").tcgen05_block_scaled
    k = BODY.kernel("t_fp8_e8m0")
    assert k.tcgen05_obstacle() is None and not k.tcgen05_deepseek_mma
    assert "swiglu_clamped" in k.hardware_promotion_obstacle()
    assert all(t.promoted and not t.deepseek for t in BODY.tiles("t_fp8_e8m0"))


@pytest.mark.parametrize("name, case", [
    ("t_inter", SHARD),
    pytest.param("t_inter", WHOLE, marks=SLOW),
    ("t_halves", SHARD_KN),
    pytest.param("t_pair", PAIR, marks=SLOW),
    pytest.param("t_fp8", SHARD, marks=SLOW),
    pytest.param("t_fp8", WHOLE_FP8, marks=SLOW),
    pytest.param("t_fp8_e8m0", WHOLE_FP8, marks=SLOW),  # n / 2 whole scale blocks
    pytest.param("t_w8", SHARD, marks=SLOW),
    ("t_mxfp8", SHARD_MX),
])
def test_swiglu_on_the_sm100_body_matches_reference(name, case):
    BODY.check(name, case, num_sms=2, seed=11)


# Planted bugs in the epilogue's pairing (edits of gg_gemm_sm100.cuh): each
# must fail the comparison.
PLANTS = {
    # Interleaved, from TMEM: the gate read from the up column.
    "tmem_gate_from_up": [("y[0][j] = x[j / (kChunk / 2)][(2 * j) % kChunk];",
                           "y[0][j] = x[j / (kChunk / 2)][(2 * j) % kChunk + 1];")],
    # Interleaved, promoted: gate and up swapped.
    "promoted_swapped": [("x[0][j] = d[2 * (c0 + j)];\n            x[1][j] = d[2 * (c0 + j) + 1];",
                          "x[0][j] = d[2 * (c0 + j) + 1];\n            x[1][j] = d[2 * (c0 + j)];")],
    # The pair: CTA 1's B rows from n0-based offsets (silu_mul's halves).
    "pair_b_rows": [("kInterleavedPairs<T> ? 2 * w.n0 + kHalf * v",
                     "kInterleavedPairs<T> ? w.n0 + kHalf * v")],
    # The block-scaled tile: B's up rows scaled by the gate rows' scales.
    "mx_up_scales": [("row = (tr < kRunRows ? b0[0] : b0[1]) + local;",
                      "row = b0[0] + local;")],
}


@pytest.mark.parametrize("plant, name, case", [
    ("tmem_gate_from_up", "t_inter", WHOLE),
    pytest.param("promoted_swapped", "t_fp8", WHOLE_FP8, marks=SLOW),
    pytest.param("pair_b_rows", "t_pair", PAIR, marks=SLOW),
    ("mx_up_scales", "t_mxfp8", SHARD_MX),
])
def test_planted_pairing_bug_is_caught(plant, name, case):
    inputs = case.inputs(BODY.kernel(name), 5)
    got = BODY.run_planted(name, PLANTS[plant], inputs, num_sms=2)
    assert not BODY.matches(name, case, inputs, got)


@SLOW
def test_the_unplanted_copy_passes():
    """The planted copy's machinery with no edit passes the same case."""
    inputs = WHOLE.inputs(BODY.kernel("t_inter"), 5)
    got = BODY.run_planted("t_inter", [], inputs, num_sms=2)
    assert BODY.matches("t_inter", WHOLE, inputs, got)


@pytest.mark.skipif(nvcc.find_nvcc() is None or nvcc.find_cuda_tool("cuobjdump") is None,
                    reason="nvcc or cuobjdump is not installed")
@pytest.mark.parametrize("name", ["t_inter", "t_halves", "t_pair", "t_fp8", "t_w8"])
@SLOW
def test_swiglu_sm100_entries_build_without_spills(name):
    """nvcc for sm_100a (-Werror): the tcgen05 entries of each kind, no spills."""
    lp, result, _ = BODY.build(name)
    for v in lp.variants:
        usage = result.kernels[v.path("tcgen05").steps[-1].entry]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
