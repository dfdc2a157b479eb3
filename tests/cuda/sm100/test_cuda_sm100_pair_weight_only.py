"""The weight-only (W8A16 / W4A16) tile of the sm_100a body on a CTA pair
(gg_gemm_sm100_mixed.cuh; docs/cuda-sm100.md, "Weight-only W8A16 / W4A16"
and "The 2-CTA tile"): a LUT entry of m = 256 runs 256 x 128 x 64 tiles on
a 2 x 1 x 1 cluster. Each CTA's producer loads its 128 lhs rows and its 64
raw weight rows (silu_mul: the leader the gate rows, the peer the up rows)
on its own `loaded` barrier; each CTA's transform warpgroup widens its half
into its own stage and arrives on the leader's `full` (256 arrivals), so
the leader's tcgen05.mma.cta_group::2 reads both halves only once both are
written and fenced; the leader's commits release both CTAs' stages and
accumulators; the decode tile (m <= 32) stays 1-CTA.

Checked: the plan, the generated kernels on the emulator of an sm_100a
device through the C++ launcher (a cluster launch) against the reference
on fresh random inputs with poisoned outputs (int8, int4, fp4, e4m3 and
e5m2 weights with per-channel, per-tensor, block and kblock scales; m = 1
on the pair, ragged m / n / k, k below a K tile, grouped with zero-size
groups, group_offset with existing_out, masked, silu_mul, grids of 2..6
blocks with several tiles a pair), planted bugs (the leader's MMA not
waiting for the peer's transform; the peer refilling a stage before the
pair's MMAs released it; the peer's transform not fenced), and nvcc for
sm_100a (UTCHMMA.2CTA only, no spills, registers, shared memory).

Unmarked: the plan, one emulated case, one planted bug; the rest `slow`."""

from __future__ import annotations

import pytest
from sm100_helpers import (
    SM100,
    Sm100Spec,
    assert_fits,
    case_params,
    needs_cuobjdump,
    needs_nvcc,
    one_fast,
    seed,
)
from sm100_specs import spec_head

from gemmgen.archs import shared_memory_limit
from gemmgen.backends.cuda.gemm import tcgen05
from gemmgen.cases import Case

SPEC = spec_head("lhs bf16 [m, k]\nout bf16\ntile m=256 n=128 k=64") + """
# W8A16, per-channel f32 scales in the epilogue.
kernel wp_int8 {
  op dense
  rhs int8 [n, k]
  rhs_scale per_channel
}

# W4A16: per-128 group scales along K (bf16), bias, silu: promoted units.
kernel wp_int4 {
  op dense
  rhs int4 packed [n, k]
  rhs_scale block n=1 k=128 bf16
  bias f32 [n]
  epilogue silu
}

# fp4 weights with e8m0 block scales of 64 along K, f16 out.
kernel wp_fp4 {
  op dense
  rhs fp4 packed [n, k]
  out f16
  rhs_scale block n=1 k=64 e8m0
}

# f16 activations, e5m2 weights, one f32 scale, f32 out.
kernel wp_e5m2 {
  op dense
  lhs f16 [m, k]
  rhs e5m2 [n, k]
  rhs_scale per_tensor f32
  out f32
}

# Grouped e4m3 experts with kblock scales and a group bias: the pair for
# m >= 512, the 1-CTA tile below, the decode tile at m <= 16.
kernel wp_e4m3_grouped {
  op grouped
  rhs e4m3 [g, n, k]
  rhs_scale kblock k=128 f32
  bias f32 [g, 1, n]
  tile m=128 n=128 k=64
  tile_rule m<=16 -> m=16 n=128 k=64
  tile_rule m>=512 -> m=256 n=128 k=64
}

# The fused gate-up of W4A16 experts: the leader widens gate rows, the peer
# the matching up rows.
kernel wp_int4_gateup {
  op grouped
  rhs int4 packed [g, n, k]
  rhs_scale kblock k=128 bf16
  bias f32 [g, 1, n]
  epilogue silu_mul
}

# Dense int8 gate-up, per-channel scales of both halves, f32 out.
kernel wp_int8_gateup {
  op dense
  rhs int8 [n, k]
  out f32
  rhs_scale per_channel
  epilogue silu_mul
}

# The masked layout (lhs [g, m, k]) with int8 experts.
kernel wp_int8_masked {
  op grouped
  lhs bf16 [g, m, k]
  rhs int8 [g, n, k]
  rhs_scale kblock k=128 f32
}
"""

BODY = Sm100Spec("sm100pairwo", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check
tiles_of = BODY.tiles


# ---------------------------------------------------------------------------
# The plan (no compiler).


def test_weight_only_entries_of_m_256_get_the_pair_tile():
    limit = shared_memory_limit(SM100)
    for k in BODY.spec.kernels:
        assert tcgen05.pair_obstacle(k) is None, k.name
        pair = [t for t in tiles_of(k.name) if t.bm == 256]
        (t,) = pair
        wb = k.rhs_operand.dtype.bits
        silu = k.epilogue.activation.value == "silu_mul"
        # 256 x 128 x 64 over the pair; a CTA's stage: 128 lhs rows, 64
        # widened and 64 raw weight rows.
        assert (t.pair, t.mixed, t.swap, t.bn, t.bk, t.threads) == (
            True, True, False, 128, 64, 320), k.name
        assert (t.a_stage, t.b_stage, t.raw_stage) == (128 * 128, 64 * 128, 64 * 64 * wb // 8)
        assert t.bn_out == (64 if silu else 128)
        smem = tcgen05.sm100_mixed_smem_bytes(t.stages, k.out, wb, 256, pair=True)
        assert t.smem_bytes == smem <= limit
        assert (t.stages == tcgen05.SM100_MAX_STAGES
                or tcgen05.sm100_mixed_smem_bytes(t.stages + 1, k.out, wb, 256, True) > limit)
        blocks = k.rhs_scale.mode.value in ("block", "kblock")
        assert t.promoted == blocks and t.tmem_cols == (512 if blocks else 256), k.name
    # The LUT: the decode tile (1-CTA, operands swapped), the 128-row tile,
    # the pair.
    assert [(t.bm, t.swap, t.pair) for t in tiles_of("wp_e4m3_grouped")] == [
        (16, True, False), (256, False, True), (128, False, False)]


def test_the_pair_step_is_a_cluster_launch_with_a_cta_s_boxes():
    lm = launcher("wp_int4_gateup")
    k = kernel("wp_int4_gateup")
    inputs = Case("c", 600, 256, 128, group_sizes=(300, 300)).inputs(k, 1)
    steps = lm.launches(lm.validate(**inputs), 100, 7)
    assert [(s.entry, s.cluster) for s in steps] == [
        ("wp_int4_gateup_fill", (1, 1, 1)), ("wp_int4_gateup_worklist", (1, 1, 1)),
        ("wp_int4_gateup_sm100", (2, 1, 1))]
    step = steps[2]
    assert step.block == (320, 1, 1) and step.grid[0] % 2 == 0
    # A CTA's boxes: 128 lhs rows; 64 raw weight rows of one K tile (32
    # bytes of int4), one box (the gate rows or the up rows).
    assert step.args[0].box == (64, 128) and step.args[1].box == (32, 64, 1)
    text = (BODY.folder / "wp_e4m3_grouped.cu").read_text()
    assert text.count("static constexpr bool kCtaPair = true;") == 1


# ---------------------------------------------------------------------------
# On the emulator of an sm_100a device, against the reference.

CASES = [
    ("wp_int4", Case("ragged_wraps", 600, 264, 352), 2, True),  # 6 tiles, promoted
    ("wp_int4", Case("m1", 1, 128, 256), 2, False),
    ("wp_int8", Case("k_ragged", 300, 264, 80), 4, False),
    ("wp_int8", Case("m1", 1, 136, 48), 2, False),
    ("wp_fp4", Case("e8m0_blocks", 520, 200, 320), 6, False),
    ("wp_e5m2", Case("k16", 257, 130, 16), 2, False),
    ("wp_e4m3_grouped", Case("zero_size", 700, 136, 272, group_sizes=(40, 0, 560, 0, 100)), 6,
     False),
    ("wp_e4m3_grouped", Case("shard", 900, 128, 128, group_sizes=(60, 600, 0, 240),
                             group_offset=1, g_local=2, existing_out=True), 2, False),
    ("wp_int4_gateup", Case("gateup_shard", 600, 272, 192, group_sizes=(70, 0, 500, 30),
                            group_offset=1, g_local=2, existing_out=True), 4, False),
    ("wp_int8_gateup", Case("gateup", 300, 272, 208), 2, False),
    ("wp_int8_masked", Case("masked", 300, 136, 144, masked_m=(3, 0, 300, 280)), 4, False),
]


@pytest.mark.parametrize("name,case,num_sms", case_params(CASES))
def test_the_weight_only_pair_through_the_cpp_launcher(name, case, num_sms):
    check(name, case, num_sms, seed=seed(), cpp=True)


@pytest.mark.slow
def test_the_weight_only_pair_through_the_python_launcher():
    check("wp_e4m3_grouped", CASES[6][1], 6, seed=seed())


# ---------------------------------------------------------------------------
# Planted bugs in the pair under a generated kernel (gg_gemm_sm100_mixed.cuh
# with the edits; the launch sequence, tiles and maps are the generated ones).

WAIT_EMPTY = ("      gg::mbarrier_wait(&s.empty[st], ((it / T::kStages) & 1) ^ 1);\n"
              "      gg::mbarrier_arrive_expect_tx(&s.loaded[st]")
PLANTED = {
    # The leader's MMA waits for the leader's transform only (its `full`
    # counts 128 arrivals; the peer's transform arrives on its own CTA's
    # `full`): the MMAs read the peer's half of the stage before the peer
    # loaded and widened it.
    "mma_skips_the_peer_transform": (
        [(("      gg::mbarrier_init(&s.full[st], (kPair<T> ? 2 : 1) * 128);  // the transform "
           "warpgroup(s)\n"), "      gg::mbarrier_init(&s.full[st], 128);\n"),
         ("      gg::mbarrier_arrive_cluster(leader + 8u * static_cast<u32>(st));\n",
          ("      if (sm100::pair_rank() == 0) {\n"
           "        gg::mbarrier_arrive_cluster(leader + 8u * static_cast<u32>(st));\n"
           "      } else {\n        gg::mbarrier_arrive(&own[st]);\n      }\n"))],
        (r"tcgen05.mma.cta_group::2.kind::f16 \(its [AB] operand in CTA rank 1, 128-byte "
         r"swizzle\) reads shared memory at 0x[0-9a-f]+ of CTA rank 1, which that CTA's write "
         r"[0-9]+ filled \(.*\), but CTA rank 0 has waited on no signal of CTA rank 1 made "
         r"after that write")),
    # The peer refills a stage (its lhs rows, its raw weights, then its
    # transform the widened half) without waiting for the pair's release.
    "peer_refills_before_release": (
        [(WAIT_EMPTY, ("      if (v == 0) {\n"
                       "        gg::mbarrier_wait(&s.empty[st], ((it / T::kStages) & 1) ^ 1);\n"
                       "      }\n      gg::mbarrier_arrive_expect_tx(&s.loaded[st]"))],
        (r"cp.async.bulk.tensor \(TMA load\) into shared memory at 0x[0-9a-f]+ that an earlier "
         r"TMA load \(mbarrier at 0x[0-9a-f]+, phase 0\) still fills: no thread waited for it"
         r"(.|\n)*block \(1,0,0\)")),
    # The peer's transform does not make its stores visible to the async
    # proxy that the leader's MMAs read them through.
    "peer_transform_not_fenced": (
        [("      gg::fence_proxy_async();  // the MMA reads the tile through the async proxy\n",
          ("      if (sm100::pair_rank() == 0) {\n        gg::fence_proxy_async();\n"
           "      }\n"))],
        (r"missing fence.proxy.async: tcgen05.mma.cta_group::2.kind::f16 \(its B operand in CTA "
         r"rank 1, 128-byte swizzle\) reads shared memory")),
}

PLANT_CASE = Case("rings_wrap", 600, 264, 448)  # 6 tiles of 7 K tiles on one pair


@pytest.mark.parametrize("bug", one_fast(PLANTED, "mma_skips_the_peer_transform"))
def test_planted_bug_in_the_weight_only_pair_is_caught(bug):
    edits, report = PLANTED[bug]
    inputs = PLANT_CASE.inputs(kernel("wp_int8"), seed())
    BODY.expect_report("wp_int8", edits, inputs, report, num_sms=2, mixed=True)


@pytest.mark.slow
def test_the_unplanted_copy_of_the_weight_only_pair_passes():
    inputs = PLANT_CASE.inputs(kernel("wp_int8"), seed())
    actual = BODY.run_planted("wp_int8", [], inputs, num_sms=2, mixed=True)
    assert BODY.matches("wp_int8", PLANT_CASE, inputs, actual)


# ---------------------------------------------------------------------------
# nvcc for sm_100a: the pair entries (UTCHMMA.2CTA only), the 1-CTA and
# decode entries beside them (no 2-CTA form).

@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("name", [
    "wp_int4_gateup", *(pytest.param(n, marks=pytest.mark.slow) for n in (
        "wp_int8", "wp_int4", "wp_fp4", "wp_e5m2", "wp_e4m3_grouped", "wp_int8_gateup",
        "wp_int8_masked"))])
def test_the_weight_only_pair_entries_build_for_sm100a_on_2cta_mmas(name):
    lp, result, sass = BODY.build(name)
    steps = {s.entry: s for v in lp.variants for s in v.path("tcgen05").steps
             if s.entry.endswith("_sm100") or "_sm100" in s.entry}
    pairs = {e for e, s in steps.items() if s.is_cluster}
    assert pairs, name
    for entry, step in steps.items():
        assert_fits(result.kernels[entry], step)
        code = sass[entry]
        assert code.count("UTCHMMA") > 0 and code.count("HMMA") == 0, entry
        assert code.count("UTMALDG") > 0 and code.count("LDTM") > 0, entry
        if entry in pairs:
            assert code.count("UTCHMMA", "2CTA") == code.count("UTCHMMA"), entry
            assert code.count("UTCBAR", "2CTA", "MULTICAST") > 0, entry
            assert code.count("UTCATOMSWS", "2CTA") > 0, entry
        else:
            assert code.count("UTCHMMA", "2CTA") == 0, entry
