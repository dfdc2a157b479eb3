"""DeepSeek's block-scaled FP8 promoted in software on the 2-CTA tile of the
sm_100a body (docs/cuda-sm100.md, "The 2-CTA tile"; gg_gemm_sm100.cuh): a
LUT entry of m = 256 of an FP8 kernel with per-K-block scales (lhs
per_token_group, rhs block, f32 or e8m0 with `promotion software`) runs on
a CTA pair. A unit is one K tile, as on the 1-CTA tile: the leader's MMA
thread waits for both CTAs' epilogues (256 arrivals on its acc_empty)
before each K tile's MMAs and commits each K tile's partial sums to both
CTAs; each CTA's epilogue adds its 128 rows' sums times the K tile's
scales into registers (kBN = 128: 128 f32 a thread, as the 1-CTA tile).

Checked: the plan (the pair tile at m = 256, the 1-CTA tile beside it for
the decode entry), the generated kernels on the emulator of an sm_100a
device through the C++ launcher (a cluster launch) against the reference on
fresh random inputs with poisoned outputs (m = 1 on the pair, ragged m / n
/ k, k below a K tile, grouped with zero-size groups, group_offset with
existing_out, masked, silu_mul, e8m0 scales, grids of 2..6 blocks with
several tiles a pair), planted bugs (the MMA thread waiting for the
leader's epilogue only between K tiles, so the peer's partial sums are
overwritten; the per-K-tile commit reaching the leader only), and nvcc for
sm_100a (UTCQMMA.2CTA only, no spills, registers, shared memory).

Unmarked: the plan, one emulated case, one planted bug; the rest `slow`."""

from __future__ import annotations

import pytest
from sm100_helpers import (
    SM100,
    Sm100Spec,
    assert_2cta_mmas,
    assert_fits,
    case_params,
    cluster_steps,
    needs_cuobjdump,
    needs_nvcc,
    one_fast,
    seed,
)
from sm100_specs import spec_head

from gemmgen.archs import shared_memory_limit
from gemmgen.backends.cuda.gemm import tcgen05
from gemmgen.cases import Case

SPEC = spec_head("lhs e4m3 [m, k]\nout bf16\nlhs_scale per_token_group k=128 f32\n"
                 "rhs_scale block n=128 k=128 f32\ntile m=256 n=128 k=128") + """
kernel pp_dense {
  op dense
  rhs e4m3 [n, k]
  out f32
}

kernel pp_grouped {
  op grouped
  rhs e4m3 [g, n, k]
  tile m=128 n=128 k=128
  tile_rule m>=512 -> m=256 n=128 k=128
}

kernel pp_masked {
  op grouped
  lhs e5m2 [g, m, k]
  rhs e5m2 [g, n, k]
  rhs_scale block n=128 k=256 f32
}

kernel pp_gateup {
  op grouped
  rhs e4m3 [g, n, k]
  rhs_scale block n=64 k=128 f32
  epilogue silu_mul
}

kernel pp_e8m0 {
  op dense
  rhs e4m3 [n, k]
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=128 k=128 e8m0
  promotion software
}

kernel pp_e8m0_hw {
  op dense
  rhs e4m3 [n, k]
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=128 k=128 e8m0
}
"""

BODY = Sm100Spec("sm100pairpromo", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check
tiles_of = BODY.tiles


def test_promoted_entries_of_m_256_get_the_pair_tile():
    limit = shared_memory_limit(SM100)
    for name in ("pp_dense", "pp_masked", "pp_gateup", "pp_e8m0"):
        k = kernel(name)
        assert tcgen05.pair_obstacle(k) is None and tcgen05.promoted(k), name
        (t,) = tiles_of(name)
        # 256 x 128 over the pair, each CTA 128 rows of A and 64 of B; the
        # epilogue's 128 sums a thread, as the 1-CTA promoted tile.
        assert (t.pair, t.promoted, t.bm, t.bn, t.bk) == (True, True, 256, 128, 128), name
        assert (t.a_stage, t.b_stage, t.tmem_cols) == (128 * 128, 64 * 128, 256), name
        assert t.smem_bytes == tcgen05.sm100_smem_bytes(128, t.stages, k.out, pair=True) <= limit
    # The decode entry keeps the 1-CTA tile.
    pair, one = tiles_of("pp_grouped")
    assert (pair.pair, pair.bm, one.pair, one.bm, one.promoted) == (True, 256, False, 128, True)
    # DeepSeek's e8m0 scales promoted in hardware take the block-scaled pair
    # (test_cuda_sm100_pair_bs_body.py runs it), not the promoted one.
    (t,) = tiles_of("pp_e8m0_hw")
    assert (t.pair, t.deepseek, t.block_scaled, t.promoted) == (True, True, True, False)
    assert tcgen05.pair_obstacle(kernel("pp_e8m0_hw")) is None
    text = (BODY.folder / "pp_grouped.cu").read_text()
    assert text.count("static constexpr bool kCtaPair = true;") == 1



# ---------------------------------------------------------------------------
# On the emulator of an sm_100a device, against the reference.

CASES = [
    ("pp_dense", Case("ragged_wraps", 600, 264, 528), 2, True),  # 6 tiles of 5 K tiles a pair
    ("pp_dense", Case("m1", 1, 128, 256), 2, False),
    ("pp_dense", Case("k_below_tile", 300, 136, 48), 4, False),
    ("pp_grouped", Case("zero_size", 700, 136, 272, group_sizes=(40, 0, 560, 0, 100)), 6, False),
    ("pp_grouped", Case("shard", 800, 128, 400, group_sizes=(60, 520, 0, 220), group_offset=1,
                        g_local=2, existing_out=True), 2, False),
    ("pp_masked", Case("masked", 300, 136, 608, masked_m=(3, 0, 300, 280)), 4, False),
    ("pp_gateup", Case("gateup", 300, 256, 272, group_sizes=(70, 0, 230)), 4, False),
    ("pp_e8m0", Case("e8m0", 520, 200, 384), 6, False),
]


@pytest.mark.parametrize("name,case,num_sms", case_params(CASES))
def test_the_promoted_pair_through_the_cpp_launcher(name, case, num_sms):
    check(name, case, num_sms, seed=seed(), cpp=True)


@pytest.mark.slow
def test_the_promoted_pair_through_the_python_launcher():
    check("pp_grouped", CASES[3][1], 6, seed=seed())


# ---------------------------------------------------------------------------
# Planted bugs in the pair under the generated kernel (gg_gemm_sm100.cuh
# with the edits; the launch sequence, tiles and maps are the generated ones).

PLANTED = {
    # Between K tiles the MMA thread waits for the leader's epilogue only
    # (its acc_empty counts 128 arrivals; the peer's epilogue arrives on
    # its own CTA's barrier, which no one waits on): the leader's MMAs
    # overwrite the peer's partial sums before the peer's epilogue read them.
    "mma_waits_for_the_leader_only": (
        [(("      gg::mbarrier_init(&s.acc_empty[a], 2 * 128);  // the leader's: both epilogue "
           "warpgroups\n"), "      gg::mbarrier_init(&s.acc_empty[a], 128);\n"),
         ("      gg::mbarrier_arrive_cluster(leader + 8u * static_cast<u32>(acc));\n",
          ("      if (pair_rank() == 0) {\n"
           "        gg::mbarrier_arrive_cluster(leader + 8u * static_cast<u32>(acc));\n"
           "      } else {\n        gg::mbarrier_arrive(&own[acc]);\n      }\n"))],
        (r"tcgen05.mma.cta_group::2.kind::f8f6f4 overwrites TMEM lane 0 column 0 of CTA rank 1 "
         r"\(a fresh accumulation, enable-input-d false\), which holds an earlier MMA's result "
         r"that no thread of CTA rank 1 has read")),
    # Each K tile's accumulator commit reaches the leader only: the peer's
    # epilogue waits for its partial sums forever.
    "k_tile_commit_to_the_leader_only": (
        [("      gg::tcgen05_commit_pair_multicast(bar, acc_mask);\n",
          "      gg::tcgen05_commit_pair_multicast(bar, 1);\n")],
        (r"deadlock in cluster(.|\n)*CTA rank 1, block \(1,0,0\):(.|\n)*"
         r"wait at mbarrier.try_wait.parity")),
}

PLANT_CASE = Case("rings_wrap", 600, 264, 656)  # 6 tiles of 6 K tiles on one pair


@pytest.mark.parametrize("bug", one_fast(PLANTED, "mma_waits_for_the_leader_only"))
def test_planted_bug_in_the_promoted_pair_is_caught(bug):
    edits, report = PLANTED[bug]
    inputs = PLANT_CASE.inputs(kernel("pp_dense"), seed())
    BODY.expect_report("pp_dense", edits, inputs, report, num_sms=2)


@pytest.mark.slow
def test_the_unplanted_copy_of_the_promoted_pair_passes():
    inputs = PLANT_CASE.inputs(kernel("pp_dense"), seed())
    actual = BODY.run_planted("pp_dense", [], inputs, num_sms=2)
    assert BODY.matches("pp_dense", PLANT_CASE, inputs, actual)


# ---------------------------------------------------------------------------
# nvcc for sm_100a: the pair entries, their registers (each CTA's epilogue
# holds its rows' 128 sums: the 1-CTA promoted tile's budget).

@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("name", [
    "pp_grouped", *(pytest.param(n, marks=pytest.mark.slow)
                    for n in ("pp_dense", "pp_masked", "pp_gateup", "pp_e8m0"))])
def test_the_promoted_pair_entries_build_for_sm100a_on_2cta_mmas(name):
    lp, result, sass = BODY.build(name)
    pairs = cluster_steps(lp)
    assert pairs, name
    for entry, step in pairs.items():
        usage = result.kernels[entry]
        assert_fits(usage, step)
        assert usage.registers <= 255, usage
        code = sass[entry]
        assert_2cta_mmas(code, "UTCQMMA", entry)
        assert code.count("UTCATOMSWS", "2CTA") > 0, entry
        assert code.count("LDTM") > 0 and code.count("UTMALDG") > 0, entry
    # The decode entry beside the pair is the 1-CTA tile: no 2-CTA form.
    for entry in {s.entry for v in lp.variants for s in v.path("tcgen05").steps
                  if s.entry.endswith("_sm100")} - set(pairs):
        assert sass[entry].count("UTCQMMA") > 0 and sass[entry].count("UTCQMMA", "2CTA") == 0
