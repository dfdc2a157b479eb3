"""TMA multicast of A on the block-scaled and promoted kinds of the sm_100a
2-CTA tile (docs/cuda-sm100.md, "The 2-CTA tile", the cluster; issue 30):
MXFP8, MXFP4, NVFP4 (with its global scales), W4A8, DeepSeek's e8m0 scales
in hardware and DeepSeek's f32 scales promoted in software on LUT entries
`m=256 ... cluster_n=P`. Pair 0's CTA v multicasts A's half v to CTA v of
every pair, as on the 16-bit / FP8 tile; each CTA still gathers (or
bulk-copies) the scale atoms of its own 128 A rows and of its own pair's B
rows, and each pair's peer relays its gathers to its own leader. Every
role walks the cluster's units (first_unit / unit_step / unit_work).

Here: the plan (no compiler); the generated kernels on the emulator of an
sm_100a device through the C++ launcher's cluster launch against the
reference on fresh random inputs with poisoned outputs (idle pairs past the
last n tile, m = 1, ragged m / n / k, k below a K tile, grouped with
zero-size groups, group_offset with existing_out, masked, silu_mul, P = 2,
3 and 4, grids of several clusters); planted bugs; nvcc for sm_100a (A's
load UTMALDG.2D.MULTICAST.2CTA, every MMA and scale copy 2-CTA, no spills).

The unmarked case is one emulator run and one check without a compiler;
the rest are `slow`."""

from __future__ import annotations

import pytest
from sm100_helpers import (
    Sm100Spec,
    assert_fits,
    case_params,
    cluster_steps,
    needs_cuobjdump,
    needs_nvcc,
    seed,
    spec_errors,
)
from sm100_specs import spec_head

from gemmgen.cases import Case

SPEC = spec_head("lhs e4m3 [m, k]\ntile m=256 n=128 k=128 cluster_n=2") + """
kernel ms_nv4_moe {
  op grouped
  lhs fp4 packed [m, k]
  rhs fp4 packed [g, n, k]
  out bf16
  lhs_scale per_token_group k=16 ue4m3 global=f32
  rhs_scale block n=1 k=16 ue4m3 layout=atom128x4 global=f32
  tile m=256 n=128 k=256 cluster_n=2
}

kernel ms_mx4_dense {
  op dense
  lhs fp4 packed [m, k]
  rhs fp4 packed [n, k]
  out f32
  bias f32 [n]
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  tile m=256 n=128 k=256 cluster_n=3
}

kernel ms_mx_gateup {
  op grouped
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  epilogue silu_mul
}

kernel ms_w4a8_moe {
  op grouped
  rhs fp4 packed [g, n, k]
  out f32
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}

kernel ms_ds_masked {
  op grouped
  lhs e4m3 [g, m, k]
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=128 k=128 e8m0
  tile m=256 n=128 k=128 cluster_n=4
}

kernel ms_ds_promoted {
  op grouped
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=128 f32
  rhs_scale block n=128 k=128 f32
  tile m=256 n=64 k=128 cluster_n=2
}

kernel ms_ds_promoted_gateup {
  op grouped
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=128 f32
  rhs_scale block n=128 k=128 f32
  epilogue silu_mul
}

kernel ms_w4a16_moe {
  op grouped
  lhs bf16 [m, k]
  rhs int4 packed [g, n, k]
  out bf16
  rhs_scale kblock k=128 bf16
  bias f32 [g, 1, n]
  tile m=256 n=128 k=64 cluster_n=2
}

kernel ms_w8a16_gateup {
  op grouped
  lhs bf16 [m, k]
  rhs int8 [g, n, k]
  out bf16
  rhs_scale per_channel f32
  epilogue silu_mul
  tile m=256 n=128 k=64 cluster_n=2
}

kernel ms_w8a16_masked {
  op grouped
  lhs bf16 [g, m, k]
  rhs int8 [g, n, k]
  out f32
  rhs_scale per_channel f32
  tile m=256 n=128 k=64 cluster_n=2
}

kernel ms_fp4a16_dense {
  op dense
  lhs bf16 [m, k]
  rhs fp4 packed [n, k]
  out f32
  rhs_scale block n=1 k=64 e8m0
  tile m=256 n=128 k=64 cluster_n=3
}

kernel ms_lut {
  op grouped
  lhs fp4 packed [m, k]
  rhs fp4 packed [g, n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  tile m=128 n=128 k=256
  tile_rule m>=1024 -> m=256 n=128 k=256 cluster_n=2
  tile_rule m>=512 -> m=256 n=128 k=256
}
"""

BODY = Sm100Spec("sm100mcastscaled", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check


# (cluster_n, block-scaled, promoted in software) of each kernel's entry.
MULTICAST = {
    "ms_nv4_moe": (2, True, False), "ms_mx4_dense": (3, True, False),
    "ms_mx_gateup": (2, True, False), "ms_w4a8_moe": (2, True, False),
    "ms_ds_masked": (4, True, False), "ms_ds_promoted": (2, False, True),
    "ms_ds_promoted_gateup": (2, False, True), "ms_w4a16_moe": (2, False, True),
    "ms_w8a16_gateup": (2, False, False), "ms_w8a16_masked": (2, False, False),
    "ms_fp4a16_dense": (3, False, True),
}
# The weight-only ones (the transform warpgroup's tile, gg_gemm_sm100_mixed.cuh).
WEIGHT_ONLY = ("ms_w4a16_moe", "ms_w8a16_gateup", "ms_w8a16_masked", "ms_fp4a16_dense")


def test_scaled_kinds_plan_multicast_pairs():
    """Each entry is the pair tile with its cluster_n, its shared memory and
    TMEM those of the same pair without multicast (the scale atoms each
    CTA's own); a step of clusters of 2P; a LUT's m >= 1024 entry
    multicasts, its m >= 512 entry is the plain pair."""
    plain = Sm100Spec("sm100mcastscaled_plain", SPEC.replace(" cluster_n=2", "").replace(
        " cluster_n=3", "").replace(" cluster_n=4", ""))
    for name, (p, bs, promoted) in MULTICAST.items():
        (t,) = BODY.tiles(name)
        (u,) = plain.tiles(name)
        assert (t.pair, t.cluster_n, t.bm, t.block_scaled) == (True, p, 256, bs), name
        assert (u.pair, u.cluster_n) == (True, 1), name
        assert (t.smem_bytes, t.tmem_cols, t.sf_stage, t.stages, t.mixed) == (
            u.smem_bytes, u.tmem_cols, u.sf_stage, u.stages, name in WEIGHT_ONLY), name
        text = (BODY.folder / f"{name}.cu").read_text()
        assert f"static constexpr int kClusterN = {p};" in text, name
    lm = launcher("ms_mx4_dense")
    k = kernel("ms_mx4_dense")
    dims = lm.validate(**Case("plan", 1000, 520, 256).inputs(k, 1))
    # 4 row tiles x cdiv(5 n tiles, 3) = 8 units; clusters of 6.
    for sms, grid in [(148, 48), (13, 12), (6, 6)]:
        (step,) = lm.launches(dims, 100, sms)
        assert (step.entry, step.grid, step.cluster) == ("ms_mx4_dense_sm100", (grid, 1, 1),
                                                         (6, 1, 1))
        assert lm.launch_error(step) is None
    mcast, pair, one = BODY.tiles("ms_lut")
    assert (mcast.cluster_n, pair.cluster_n, pair.pair, one.pair) == (2, 1, True, False)


def test_cluster_n_on_an_entry_that_keeps_the_1cta_tile_is_an_error():
    """MXFP8 with rhs [k, n]: each CTA's half of B would be a 128-column box,
    so bn = 256, whose two accumulators leave no TMEM for the scales: its
    m=256 entry keeps the 1-CTA tile, and a cluster_n there (which would be
    silently dropped) is an error at its value, nothing written."""
    text = spec_head("lhs e4m3 [m, k]") + """
kernel kn {
  op grouped
  rhs e4m3 [g, k, n]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  tile m=128 n=128 k=128
  tile_rule m>=1024 -> m=256 n=128 k=128 cluster_n=2
}
"""
    rule = "  tile_rule m>=1024 -> m=256 n=128 k=128 cluster_n=2"
    line, col = text.splitlines().index(rule) + 1, rule.rindex("=2") + 2  # at the value
    got = spec_errors(text)
    assert (f"x.gemm:{line}:{col}: kernel 'kn': cluster_n=2 clusters CTA pairs, but this m=256 "
            "entry keeps the 1-CTA tile on sm_100a: with rhs [k, n] each CTA's half of B is "
            "whole 128-byte boxes of 128 columns, so the pair needs n = 256 or wider, and two "
            "accumulators and the scale atoms' columns must fit tensor memory's 512; drop "
            "cluster_n") in got, got
    assert got.count("\n") == 0, got  # that error alone
    # Without cluster_n the entry is valid: the 1-CTA tile at m = 256.
    from gemmgen import backends
    from gemmgen.backends.cuda.gemm import plan
    from gemmgen.parse import parse
    from gemmgen.validate import validate

    spec = validate(parse(text.replace(" cluster_n=2", ""), "specs/x.gemm"),
                    diagnose=backends.diagnose)
    assert [t.pair for t in plan(spec.kernel("kn"), spec).body_tiles("tcgen05")] == [False] * 2


# ---------------------------------------------------------------------------
# On the emulator of an sm_100a device, against the reference (the C++
# launcher's cluster launch). The grid is 2P x min(SMs / 2P, units) blocks.

CASES = [
    # n = 384: 3 n tiles, so each row tile's second unit has an idle pair;
    # one cluster walks every unit (the ring and both accumulators wrap).
    ("ms_nv4_moe", Case("idle_pair_wraps", 600, 384, 544, group_sizes=(60, 300, 0, 240)), 4,
     True),
    ("ms_nv4_moe", Case("shard", 600, 264, 288, group_sizes=(60, 300, 0, 240), group_offset=1,
                        g_local=2, existing_out=True), 8, False),
    ("ms_nv4_moe", Case("m1_k32", 1, 136, 32, group_sizes=(1,)), 4, False),
    ("ms_mx4_dense", Case("five_of_six", 520, 520, 320), 12, False),
    ("ms_mx4_dense", Case("m1_k64", 1, 72, 64), 6, False),  # pairs 1 and 2 idle
    ("ms_mx_gateup", Case("gateup_zero_size", 300, 384, 160, group_sizes=(70, 0, 230)), 4,
     False),
    ("ms_w4a8_moe", Case("zero_size", 600, 400, 224, group_sizes=(40, 0, 330, 0, 230)), 8,
     False),
    ("ms_ds_masked", Case("masked", 300, 640, 400, masked_m=(3, 0, 300, 260)), 8, False),
    ("ms_ds_promoted", Case("idle_pair", 600, 264, 400, group_sizes=(100, 0, 500)), 4, False),
    ("ms_ds_promoted", Case("shard", 600, 136, 256, group_sizes=(60, 300, 0, 240),
                            group_offset=1, g_local=2, existing_out=True), 8, False),
    # silu_mul with 128 x 128 scale blocks: n a multiple of 256, so an even
    # number of 64-column n tiles (no idle pair).
    ("ms_ds_promoted_gateup", Case("gateup", 300, 512, 384, group_sizes=(40, 0, 260)), 4,
     False),
    # Weight-only (the A multicast lands on each CTA's own `loaded`): kblock
    # scales promoted per scale block (the sums in TMEM), silu_mul's gate
    # and up halves, three pairs with idle ones.
    ("ms_w4a16_moe", Case("idle_pair", 600, 392, 352, group_sizes=(60, 300, 0, 240)), 4,
     False),
    ("ms_w4a16_moe", Case("shard_m1", 300, 136, 256, group_sizes=(1, 299, 0), group_offset=1,
                          g_local=2, existing_out=True), 8, False),
    ("ms_w8a16_gateup", Case("gateup_zero_size", 300, 528, 208, group_sizes=(70, 0, 230)), 4,
     False),
    ("ms_w8a16_masked", Case("masked", 300, 392, 144, masked_m=(3, 0, 300, 280)), 4, False),
    ("ms_fp4a16_dense", Case("five_of_six", 520, 520, 320), 12, False),
    ("ms_fp4a16_dense", Case("m1", 1, 72, 128), 6, False),
    ("ms_lut", Case("lut_mcast", 1100, 264, 256, group_sizes=(600, 500)), 4, False),
    ("ms_lut", Case("lut_m1", 1, 136, 256, group_sizes=(1,)), 4, False),
]


@pytest.mark.parametrize("name,case,num_sms", case_params(CASES))
def test_scaled_multicast_on_the_emulator(name, case, num_sms):
    check(name, case, num_sms, seed=seed(), cpp=True)


@pytest.mark.slow
@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}") for n, c, s, _ in (CASES[0], CASES[8])])
def test_scaled_multicast_in_the_reverse_schedule(name, case, num_sms):
    """The emulator's other warp order (the last runnable warp first)."""
    inputs = case.inputs(kernel(name), seed())
    got = BODY.run_py(name, inputs, num_sms, schedule="reverse")
    assert BODY.matches(name, case, inputs, got)


# ---------------------------------------------------------------------------
# Planted bugs (gg_gemm_sm100.cuh / gg_gemm_sm100_pair.cuh with one edit).


@pytest.mark.slow
def test_b_scales_of_pair_0_in_every_pair_fail_the_comparison():
    """Every pair gathers B's scale atoms of pair 0's n tile (as if the atoms
    were multicast with A): pair 1's columns come out with the wrong
    scales. No rule of the hardware is broken; the comparison fails."""
    name, case = "ms_mx4_dense", Case("two_pairs", 300, 384, 256)
    inputs = case.inputs(kernel(name), seed())
    edits = [("    const int b0[2] = {w.n0, n / 2 + w.n0};\n",
              "    const int b0[2] = {w.n0 - T::kBN * pair_index(), n / 2 + w.n0};\n")]
    assert not BODY.matches(name, case, inputs, BODY.run_planted(name, edits, inputs, 6))
    assert BODY.matches(name, case, inputs, BODY.run_planted(name, [], inputs, 6))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ms_nv4_moe", "ms_ds_promoted"])
def test_a_stage_commit_to_one_pair_deadlocks(name):
    """Each leader commits a stage's release to its own pair only: the other
    pair's `empty` waits for its second arrival forever (block-scaled and
    promoted: the producer warp's 32 lanes, or its thread, wait there)."""
    case = Case("plant", 600, 384, 544 if name == "ms_nv4_moe" else 400,
                group_sizes=(300, 300))
    inputs = case.inputs(kernel(name), seed())
    edits = [("gg::tcgen05_commit_pair_multicast(bar, kClusterMask<T>);",
              "gg::tcgen05_commit_pair_multicast(bar, acc_mask);")]
    BODY.expect_report(name, edits, inputs, r"deadlock in cluster(.|\n)*1 of 2 arrivals missing",
                       num_sms=4)


# ---------------------------------------------------------------------------
# nvcc for sm_100a.

@needs_nvcc
@needs_cuobjdump
@pytest.mark.slow
@pytest.mark.parametrize("name,mma", [
    ("ms_nv4_moe", "UTCOMMA"), ("ms_mx4_dense", "UTCOMMA"), ("ms_mx_gateup", "UTCQMMA"),
    ("ms_w4a8_moe", "UTCQMMA"), ("ms_ds_masked", "UTCQMMA"), ("ms_ds_promoted", "UTCQMMA"),
    ("ms_ds_promoted_gateup", "UTCQMMA"), ("ms_w4a16_moe", "UTCHMMA"),
    ("ms_w8a16_gateup", "UTCHMMA"), ("ms_w8a16_masked", "UTCHMMA"),
    ("ms_fp4a16_dense", "UTCHMMA")])
def test_the_scaled_multicast_entries_build_for_sm100a(name, mma):
    """A's load is the 2-CTA multicast form (the weight-only tile's: the
    plain multicast, landing on each CTA's own `loaded`), every MMA and
    scale copy the 2-CTA form; no spills, shared memory within the limit."""
    lp, result, sass = BODY.build(name)
    steps = cluster_steps(lp)
    assert steps, name
    for entry, step in steps.items():
        assert_fits(result.kernels[entry], step)
        code = sass[entry]
        assert code.count(mma, "2CTA") == code.count(mma) > 0, entry
        assert code.count("UTMALDG", "2D", "MULTICAST", "2CTA") == (name not in WEIGHT_ONLY), (
            entry, code.opcodes)
        assert code.count("UTMALDG", "2D", "MULTICAST") == 1, (entry, code.opcodes)
        if MULTICAST[name][1]:
            assert code.count("UTCCP", "2CTA") == code.count("UTCCP") > 0, entry
        assert step.cluster[0] == 2 * MULTICAST[name][0], entry


# The weight-only tile's multicast (gg_gemm_sm100_mixed.cuh with one edit).
WEIGHT_ONLY_PLANTED = {
    # Each leader commits a stage's release to its own pair only: every
    # other pair's arrival on a CTA's `empty` never comes.
    "stage_commit_to_the_pair_only": (
        [("      commit.stage(&s.empty[st]);", "      commit.acc(&s.empty[st]);")],
        r"deadlock in cluster(.|\n)*2 of 3 arrivals missing"),
    # `empty` takes one arrival, not one a pair: pair 0's A multicast of the
    # next round lands in a stage before another pair's MMAs have read it.
    "empty_one_arrival": (
        [("gg::mbarrier_init(&s.empty[st], sm100::kClusterN<T>);",
          "gg::mbarrier_init(&s.empty[st], 1);")],
        (r"tcgen05.mma.cta_group::2.kind::f16 \(its A operand in CTA rank [2-5], 128-byte "
         r"swizzle\) reads shared memory at 0x[0-9a-f]+ that a TMA load \(mbarrier at "
         r"0x[0-9a-f]+, phase \d+\) still fills")),
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", list(WEIGHT_ONLY_PLANTED))
def test_planted_bug_in_the_weight_only_multicast_is_caught(bug):
    name, case = "ms_fp4a16_dense", Case("plant", 600, 520, 640)
    inputs = case.inputs(kernel(name), seed())
    edits, report = WEIGHT_ONLY_PLANTED[bug]
    BODY.expect_report(name, edits, inputs, report, num_sms=6, mixed=True)
    assert BODY.matches(name, case, inputs, BODY.run_planted(name, [], inputs, 6, mixed=True))
