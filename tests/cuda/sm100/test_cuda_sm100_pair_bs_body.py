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

import pytest
from sm100_helpers import (
    SM100,
    Sm100Spec,
    assert_fits,
    case_params,
    cluster_steps,
    needs_cuobjdump,
    needs_nvcc,
    one_fast,
    seed,
)
from sm100_specs import block_scaled_kernels, spec_head

from gemmgen.archs import shared_memory_limit
from gemmgen.backends.cuda.gemm import tcgen05
from gemmgen.cases import Case

SPEC = spec_head("lhs e4m3 [m, k]\ntile m=256 n=128 k=128") + block_scaled_kernels("q_", 256) + """
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


# ---------------------------------------------------------------------------
# The plan (no compiler).

# (kind, bn, scale bytes a stage, TMEM columns a CTA) of each pair kernel:
# A's atoms of the CTA's 128 rows and B's of all bn rows (the 1-CTA stage's
# atoms), two bn-column accumulators and 4 columns an atom after them.
PAIRED = {
    "q_mx_dense": (128, 1024, 512), "q_mx_grouped": (192, 1536, 512),
    "q_mx_gateup": (128, 1024, 512), "q_nv4_dense": (128, 4096, 512),
    "q_nv4_moe": (64, 4096, 256), "q_nv4_masked": (128, 4096, 512),
    "q_mx4_dense": (128, 2048, 512), "q_mx4_moe": (128, 2048, 512),
    "q_w4a8_dense": (128, 1024, 512), "q_w4a8_moe": (128, 1024, 512),
    "q_w4a8_masked": (64, 1024, 256), "q_ds_grouped": (128, 1024, 512),
    "q_ds_gateup": (128, 1024, 512), "q_ds_masked": (128, 1024, 512),
}


def test_block_scaled_entries_of_m_256_get_the_pair_tile():
    limit = shared_memory_limit(SM100)
    for name, (bn, sf, cols) in PAIRED.items():
        k = kernel(name)
        assert k.tcgen05_block_scaled and tcgen05.pair_obstacle(k) is None, name
        (t,) = BODY.tiles(name)
        assert (t.pair, t.bm, t.bn, t.sf_stage, t.tmem_cols, t.block_scaled) == (
            True, 256, bn, sf, cols, True), name
        assert t.deepseek == name.startswith("q_ds"), name
        # A CTA's stage: 128 rows of A, bn / 2 of B, and the scale atoms.
        assert (t.a_stage, t.b_stage) == (128 * 128, bn // 2 * 128), name
        assert t.smem_bytes == tcgen05.sm100_smem_bytes(bn, t.stages, k.out, sf, pair=True)
        assert t.smem_bytes <= limit and (
            t.stages == tcgen05.SM100_MAX_STAGES
            or tcgen05.sm100_smem_bytes(bn, t.stages + 1, k.out, sf, pair=True) > limit), name
        assert 2 * t.bn + t.sf_cols <= t.tmem_cols, name
        text = (BODY.folder / f"{name}.cu").read_text()
        assert text.count("static constexpr bool kCtaPair = true;") == 1, name
        assert "static constexpr bool kBlockScaledMma = true;" in text, name
        assert "tcgen05.cp.cta_group::2.32x128b.warpx4" in text, name  # the file comment
    # A LUT: the m >= 512 entry is the pair's, the default the 1-CTA tile.
    pair, one = BODY.tiles("q_lut")
    assert (pair.pair, pair.bm, one.pair, one.bm) == (True, 256, False, 128)
    assert pair.block_scaled and one.block_scaled
    # MXFP8 rhs [k, n]: each CTA's half of B would be a 128-column box, so
    # bn = 256, whose two accumulators leave TMEM no room for the scales:
    # the 1-CTA tile at m = 256.
    (t,) = BODY.tiles("q_mx_kn")
    assert not t.pair and t.bm == 128 and t.block_scaled


def test_the_pair_step_is_a_cluster_launch_of_an_even_grid():
    lm = launcher("q_nv4_moe")
    k = kernel("q_nv4_moe")
    dims = lm.validate(**Case("plan", 600, 72, 512, group_sizes=(300, 0, 300)).inputs(k, 1))
    # The grid: 2 x min(SMs / 2, items x n tiles), items the worklist's bound
    # of 256-row items (600 / 256 rounded up, plus one a group: 6) and 2 n
    # tiles of 64.
    for sms, grid in [(148, 24), (5, 4), (2, 2)]:
        steps = lm.launches(dims, 100, sms)
        assert [s.entry for s in steps] == ["q_nv4_moe_fill", "q_nv4_moe_worklist",
                                            "q_nv4_moe_sm100"]
        assert steps[1].args[5] == 256  # the worklist's 256-row items
        assert (steps[-1].grid, steps[-1].cluster) == ((grid, 1, 1), (2, 1, 1))
        assert lm.launch_error(steps[-1]) is None
    # One SM cannot hold a pair, and fp4 has no mma.sync form: refused.
    assert lm.launches(dims, 100, 1)[-1].entry != "q_nv4_moe_sm100"
    # A LUT: m = 1 takes the 1-CTA entry, a plain launch.
    ll = launcher("q_lut")
    steps = ll.launches(ll.validate(**Case("m1", 1, 128, 256, group_sizes=(1,)).inputs(
        kernel("q_lut"), 1)), 100, 4)
    assert steps[-1].entry == "q_lut_t1_sm100" and steps[-1].cluster == (1, 1, 1)


def test_explain_says_the_2cta_block_scaled_mma(monkeypatch):
    from gemmgen.explain import plans

    monkeypatch.setattr(plans, "_ptxas", lambda *args: [])  # no compiler here
    lines = plans.cuda_lines(BODY.spec, kernel("q_lut"), 4096, 4096, 4096, 1)
    (path,) = [x for x in lines if x.startswith("  tcgen05 path")]
    assert "2-CTA tile 256x128x256 over a CTA pair (clusters of 2)" in path
    assert ("the even CTA's thread issues the 2-CTA block-scaled tcgen05.mma 256x128x64 "
            "(cta_group::2), after copying both CTAs' scale atoms with tcgen05.cp.cta_group::2"
            in path)
    assert "4096 of scale atoms (its A rows', all 128 B rows'" in path


# ---------------------------------------------------------------------------
# On the emulator of an sm_100a device, against the reference. Each kind's
# first case is the fast one; the emulated device's SMs set the grid (2 x
# min(SMs / 2, tiles) blocks), so 2 SMs put every tile on one pair.

CASES = [
    # MXFP8 (e4m3 / e5m2, kind::mxf8f6f4.block_scale, UTCQMMA.2CTA)
    ("q_mx_dense", Case("ragged", 300, 136, 208), 4, True),
    ("q_mx_dense", Case("m1", 1, 128, 128), 2, False),
    ("q_mx_dense", Case("k32", 300, 136, 32), 4, False),  # below one K tile
    ("q_mx_dense", Case("rings_wrap", 1000, 264, 416), 2, False),  # 12 tiles on one pair
    ("q_mx_grouped", Case("zero_size", 300, 200, 288, group_sizes=(40, 0, 130, 0, 130)), 6,
     False),
    ("q_mx_grouped", Case("shard", 600, 136, 160, group_sizes=(60, 300, 0, 240),
                          group_offset=1, g_local=2, existing_out=True), 2, False),
    ("q_mx_gateup", Case("gateup", 300, 256, 160, group_sizes=(70, 0, 230)), 4, False),
    # NVFP4 (kind::mxf4nvf4.block_scale.scale_vec::4X, ue4m3, global scales)
    ("q_nv4_dense", Case("ragged", 300, 136, 288), 2, True),
    ("q_nv4_dense", Case("m1_k32", 1, 128, 32), 2, False),
    ("q_nv4_dense", Case("rings_wrap", 1000, 264, 800), 2, False),
    ("q_nv4_moe", Case("shard", 600, 72, 544, group_sizes=(60, 300, 0, 240), group_offset=1,
                       g_local=2, existing_out=True), 2, False),
    ("q_nv4_moe", Case("six_blocks", 900, 136, 288, group_sizes=(300, 0, 100, 500)), 6, False),
    ("q_nv4_masked", Case("masked", 300, 136, 288, masked_m=(3, 0, 300, 260)), 4, False),
    # MXFP4 (kind::mxf4.block_scale.scale_vec::2X)
    ("q_mx4_dense", Case("ragged_bias", 300, 200, 320), 2, True),
    ("q_mx4_dense", Case("m1_k64", 1, 72, 64), 2, False),
    ("q_mx4_moe", Case("gateup_zero_size", 300, 256, 96, group_sizes=(70, 0, 230)), 2, False),
    # W4A8 (e4m3 x fp4 on kind::mxf8f6f4, B unpacked by each CTA)
    ("q_w4a8_dense", Case("ragged", 300, 136, 224), 2, True),
    ("q_w4a8_dense", Case("m1_k32", 1, 72, 32), 2, False),
    ("q_w4a8_moe", Case("gateup_shard", 600, 256, 160, group_sizes=(60, 300, 0, 240),
                        group_offset=1, g_local=2, existing_out=True), 4, False),
    ("q_w4a8_masked", Case("masked", 300, 136, 160, masked_m=(3, 0, 300)), 2, False),
    # DeepSeek's e8m0 block scales in hardware (kind::mxf8f6f4, ids 0..3)
    ("q_ds_grouped", Case("zero_size", 300, 136, 400, group_sizes=(40, 0, 260)), 2, True),
    ("q_ds_grouped", Case("shard_m1", 300, 136, 128, group_sizes=(1, 299, 0), group_offset=1,
                          g_local=2, existing_out=True), 4, False),
    ("q_ds_gateup", Case("gateup", 300, 256, 256, group_sizes=(40, 0, 260)), 2, False),
    ("q_ds_masked", Case("masked", 300, 136, 512, masked_m=(3, 0, 300)), 2, False),
    # A LUT: the pair at m >= 512, the 1-CTA entry at m = 1.
    ("q_lut", Case("lut_pair", 600, 136, 512, group_sizes=(100, 500)), 2, False),
    ("q_lut", Case("lut_m1", 1, 136, 512, group_sizes=(1,)), 2, False),
]


@pytest.mark.parametrize("name,case,num_sms", case_params(CASES))
def test_block_scaled_pair_on_the_emulator(name, case, num_sms):
    check(name, case, num_sms, seed=seed())


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param("q_nv4_moe", CASES[10][1], 4, id="nvfp4-grouped", marks=pytest.mark.slow),
    pytest.param("q_w4a8_moe", CASES[18][1], 2, id="w4a8-gateup", marks=pytest.mark.slow),
    pytest.param("q_ds_masked", CASES[23][1], 2, id="deepseek-masked", marks=pytest.mark.slow),
])
def test_the_cpp_launcher_launches_the_block_scaled_pair(name, case, num_sms):
    """launch_<name>() launches the pair's step with cudaLaunchKernelEx and the
    cluster attribute (global scales and W4A8's rhs pointer among its
    arguments). Slow: the C++ launcher's cluster launch has its fast case in
    test_cuda_sm100_pair_body.py."""
    check(name, case, num_sms, seed=seed(), cpp=True)


# ---------------------------------------------------------------------------
# Planted bugs in the block-scaled pair under a generated kernel
# (gg_gemm_sm100.cuh / gg_gemm_sm100_pair.cuh with one edit; launches, tiles
# and maps generated). Reported ones name what the emulator saw; the others
# break no rule of the hardware and fail the comparison with the reference.

# The peer's relay arrives on the leader's `full` without waiting for the
# peer's own: nothing orders the peer's gathered scales (st.shared, then
# fence.proxy.async) before the leader's tcgen05.cp.cta_group::2 that reads
# them. The baton runs the peer's gathers first anyway, so the bytes are
# right; the happens-before clocks see that no arrival carries them. (Over
# many K tiles the relay, waiting for nothing, runs a round ahead and its
# second arrival completes a leader's phase one of the leader's own lanes
# has not arrived in: reported the same way, for that lane's atoms.)
PEER_NOT_ORDERED = (
    [(("      gg::mbarrier_wait(&s.full[st], (it / T::kStages) & 1);\n"
       "      gg::mbarrier_arrive_cluster(leader_full"),
      "      gg::mbarrier_arrive_cluster(leader_full")],
    (r"tcgen05.cp.cta_group::2.32x128b.warpx4 \(its source in CTA rank (\d), no swizzle\) "
     r"reads shared memory at 0x[0-9a-f]+ of CTA rank \1 that thread \d+ of CTA rank \1 wrote "
     r"\(st.shared\) and published with fence.proxy.async, but nothing orders that write before "
     r"this read(.|\n)*reading thread 32 of CTA rank 0"))

# bs_idesc's scale format: ue4m3 for NVFP4, else ue8m0.
FORMAT_LINES = ("      T::kLhsScaleFormat == Format::kUE4M3 ? gg::umma::ScaleFormat::ue4m3\n"
                "                                           : gg::umma::ScaleFormat::ue8m0,")

REPORTED = {
    "peer_gather_not_ordered": ("q_mx4_moe", *PEER_NOT_ORDERED),
    # No relay at all, the leader's `full` counting its own 32 lanes: the
    # peer's 2-CTA TMA bytes complete it, and its scales are not ordered.
    "peer_gather_not_counted": (
        "q_ds_grouped",
        [("    const unsigned full = kBs<T> ? 32 + (v == 0 ? 1 : 0) : 1;\n",
          "    const unsigned full = kBs<T> ? 32 : 1;\n"),
         ("    } else if (threadIdx.x == 32 && kBs<T>) {\n",
          "    } else if (threadIdx.x == 32 && kBs<T> && false) {\n")],
        PEER_NOT_ORDERED[1]),
    # The same relay on bulk-copied atoms (layout=atom128x4): the peer's
    # copies were never waited for when the leader's copy reads them.
    "peer_bulk_not_waited": (
        "q_nv4_dense", PEER_NOT_ORDERED[0],
        (r"tcgen05.cp.cta_group::2.32x128b.warpx4 \(its source in CTA rank 1, no swizzle\) reads "
         r"shared memory at 0x[0-9a-f]+ that a TMA load \(mbarrier at 0x[0-9a-f]+, phase \d+\) "
         r"still fills: no thread has waited on that barrier phase")),
    # The leader copies the atoms with tcgen05.cp.cta_group::1 (into its own
    # TMEM only; ptxas refuses the mix, the emulator names it).
    "copy_cta_group_1": (
        "q_mx_dense",
        [("      gg::tcgen05_cp_32x128b_warpx4_pair(tmem + 2 * T::kBN + 4 * a, desc);",
          "      gg::tcgen05_cp_32x128b_warpx4(tmem + 2 * T::kBN + 4 * a, desc);")],
        r"the scale factors of a CTA pair's MMA are copied with tcgen05.cp.cta_group::2"),
    # The scale format bit flipped: kind::mxf4 takes ue8m0 scales.
    "scale_format_bit": (
        "q_mx4_dense",
        [(FORMAT_LINES, FORMAT_LINES.replace("ue4m3\n", "ue8m0\n").replace("ue8m0,", "ue4m3,"))],
        r"kind::mxf4 takes ue8m0 scales \(bit 23 = 1\)"),
}

WRONG = {
    # Each CTA stages B's scale atoms for its own half of N only (as B
    # itself is split), the other half's rows 1.0: the half of the columns
    # whose scales another CTA gathered come out unscaled in this CTA.
    "sfb_this_half_only": (
        "q_mx4_moe",
        [("                  [&](int r, int& row) { return b_row(kBM * b + r, row); });",
          ("                  [&](int r, int& row) {\n"
           "                    return (kBM * b + r) / kCtaBRows<T> == v && b_row(kBM * b + r, row);\n"
           "                  });"))]),
    # A's scale atoms of the other CTA's 128 rows.
    "sfa_wrong_cta_rows": (
        "q_mx_grouped",
        [("    wa.m0 += kBM * v;\n", "    wa.m0 += kBM * (kPair<T> ? 1 - v : 0);\n")]),
    # A scale id one K block off (kind::mxf8f6f4 takes any id: a legal
    # descriptor reading the wrong bytes).
    "wrong_scale_id": (
        "q_mx_dense",
        [("  const unsigned id = static_cast<unsigned>((kb * kBsVec<T>) % 4);",
          "  const unsigned id = static_cast<unsigned>(((kb + 1) * kBsVec<T>) % 4);")]),
    # NVFP4's ue4m3 scales read as ue8m0 (a legal descriptor of mxf4nvf4).
    "nvfp4_format_bit": (
        "q_nv4_moe",
        [(FORMAT_LINES, FORMAT_LINES.replace("ue4m3\n", "ue8m0\n"))]),
}

PLANT_CASES = {
    "q_mx4_moe": Case("plant", 600, 256, 320, group_sizes=(300, 0, 300)),
    "q_ds_grouped": Case("plant", 600, 136, 512, group_sizes=(300, 0, 300)),
    "q_nv4_dense": Case("plant", 600, 264, 512),
    "q_mx_dense": Case("plant", 600, 264, 416),
    "q_mx4_dense": Case("plant", 600, 200, 320),
    "q_mx_grouped": Case("plant", 600, 200, 288, group_sizes=(300, 0, 300)),
    "q_nv4_moe": Case("plant", 600, 136, 512, group_sizes=(300, 0, 300)),
}


@pytest.mark.parametrize("bug", one_fast(REPORTED, "peer_gather_not_ordered"))
def test_planted_bug_in_the_block_scaled_pair_is_reported(bug):
    name, edits, report = REPORTED[bug]
    inputs = PLANT_CASES[name].inputs(kernel(name), seed())
    BODY.expect_report(name, edits, inputs, report, num_sms=2)


@pytest.mark.slow
@pytest.mark.parametrize("bug", list(WRONG))
def test_planted_bug_in_the_block_scaled_pair_fails_the_comparison(bug):
    name, edits = WRONG[bug]
    case = PLANT_CASES[name]
    inputs = case.inputs(kernel(name), seed())
    actual = BODY.run_planted(name, edits, inputs, num_sms=2)
    assert not BODY.matches(name, case, inputs, actual)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PLANT_CASES))
def test_the_unplanted_copy_of_the_body_passes(name):
    case = PLANT_CASES[name]
    inputs = case.inputs(kernel(name), seed())
    actual = BODY.run_planted(name, [], inputs, num_sms=2)
    assert BODY.matches(name, case, inputs, actual)


# ---------------------------------------------------------------------------
# nvcc 13.5 for sm_100a: the pair entries' SASS.

# The 2-CTA MMA of each kind (nvcc 13.5's spelling).
SASS = {"q_mx_dense": "UTCQMMA", "q_mx_grouped": "UTCQMMA", "q_mx_gateup": "UTCQMMA",
        "q_nv4_dense": "UTCOMMA.4X", "q_nv4_moe": "UTCOMMA.4X", "q_nv4_masked": "UTCOMMA.4X",
        "q_mx4_dense": "UTCOMMA", "q_mx4_moe": "UTCOMMA", "q_w4a8_dense": "UTCQMMA",
        "q_w4a8_moe": "UTCQMMA", "q_w4a8_masked": "UTCQMMA", "q_ds_grouped": "UTCQMMA",
        "q_ds_gateup": "UTCQMMA", "q_ds_masked": "UTCQMMA", "q_lut": "UTCOMMA.4X"}


@needs_nvcc
@needs_cuobjdump
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SASS))
def test_the_block_scaled_pair_entries_build_for_sm100a_on_2cta_mmas(name):
    lp, result, sass = BODY.build(name)
    (step,) = cluster_steps(lp).values()
    base, *mods = SASS[name].split(".")
    code = sass[step.entry]
    # Every MMA 2-CTA (UTCQMMA.2CTA, UTCOMMA.2CTA, UTCOMMA.2CTA.4X), as many
    # as a K tile's 4; every scale copy the 2-CTA one (UTCCP.T.S.2CTA.4), one
    # per atom; no one-CTA MMA or copy.
    assert code.count(base, "2CTA", *mods) == code.count(base) == 4, (step.entry, code.opcodes)
    assert sum(code.count(b) for b in ("UTCQMMA", "UTCOMMA", "UTCHMMA")) == 4
    atoms = BODY.tiles(name)[0].sf_stage // 512
    assert code.count("UTCCP", "2CTA") == code.count("UTCCP") == atoms, code.opcodes
    assert code.count("UTCBAR", "2CTA", "MULTICAST") > 0 and code.count("HMMA") == 0
    assert code.count("UTCATOMSWS", "2CTA") > 0 and code.count("LDTM") > 0
    assert_fits(result.kernels[step.entry], step)
    if name == "q_lut":  # the 1-CTA entry beside it has no 2-CTA instruction
        (one,) = {s.entry for v in lp.variants for s in v.path("tcgen05").steps
                  if s.entry.endswith("_sm100")} - {step.entry}
        assert sass[one].count(base, *mods) == 4 and sass[one].count(base, "2CTA") == 0
        assert sass[one].count("UTCCP", "2CTA") == 0
