"""The 2-CTA tile of the sm_100a body (docs/cuda-sm100.md, "The 2-CTA tile";
issue 30): a LUT entry of m = 256 of a 16-bit or FP8 (epilogue scales)
kernel gets gg_gemm_sm100.cuh's pair tile, which a 2 x 1 x 1 cluster
computes with tcgen05.mma.cta_group::2; the plan's step carries the
cluster, so every launcher launches it as one. Generated kernels run on the
emulator of an sm_100a device through the C++ launcher (cudaLaunchKernelEx
with the cluster attribute) and the generated Python launcher (the CuPy
stand-in's cuLaunchKernelEx), against the reference on fresh random inputs
with poisoned outputs: m = 1, ragged m / n / k, k not a multiple of the K
tile, grouped with zero-size groups, group_offset with existing_out,
masked, silu_mul, grids of 2 to 6 blocks (pairs walking several tiles, so
both accumulators and the stage ring wrap); planted bugs in the body under
the generated kernel; nvcc for sm_100a (UTCHMMA.2CTA / UTCQMMA.2CTA, no
spills, shared memory within the limit).

The unmarked cases are one of each kind; the rest are `slow`."""

from __future__ import annotations

import numpy as np
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
from sm100_specs import pair_kernels, spec_head

from gemmgen.archs import shared_memory_limit
from gemmgen.backends.cuda.gemm import tcgen05
from gemmgen.cases import Case

SPEC = spec_head("lhs bf16 [m, k]\ntile m=256 n=128 k=64") + pair_kernels("p_") + """
kernel p_lut {
  op dense
  rhs bf16 [n, k]
  out bf16
  tile m=128 n=128 k=64
  tile_rule m>=512 -> m=256 n=128 k=64
}

kernel p_promoted {
  op grouped
  lhs e4m3 [m, k]
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=128 f32
  rhs_scale block n=128 k=128 f32
  tile m=256 n=128 k=128
}
"""

BODY = Sm100Spec("sm100pair", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check

# ---------------------------------------------------------------------------
# The plan and the launchers' choice (no compiler).

PAIRED = ("p_dense", "p_dense_kn", "p_grouped", "p_gateup", "p_masked", "p_fp8_token",
          "p_fp8_grouped")


def test_lut_entries_of_m_256_get_the_pair_tile():
    limit = shared_memory_limit(SM100)
    for name in PAIRED:
        k = kernel(name)
        (t,) = BODY.tiles(name)
        assert t.pair and (t.bm, t.bn) == (256, 128), name
        # A CTA's stage: 128 rows of A and bn / 2 of B; as many stages as fit.
        assert (t.a_stage, t.b_stage) == (128 * 128, 64 * 128), name
        assert t.smem_bytes == tcgen05.sm100_smem_bytes(t.bn, t.stages, k.out, pair=True) <= limit
        assert (t.stages == tcgen05.SM100_MAX_STAGES
                or tcgen05.sm100_smem_bytes(t.bn, t.stages + 1, k.out, pair=True) > limit)
        assert t.tmem_cols == 256, name  # two 128-column accumulators in each CTA
    # FP8 rhs [k, n]: each CTA's half of B whole 128-column boxes, so 256.
    (t,) = BODY.tiles("p_fp8_kn")
    assert (t.pair, t.bm, t.bn, t.b_stage) == (True, 256, 256, 128 * 128)
    # A LUT: the m >= 512 entry is the pair's, the default the 1-CTA tile.
    pair, one = BODY.tiles("p_lut")
    assert (pair.pair, pair.bm, one.pair, one.bm) == (True, 256, False, 128)
    # The FP32 promotion in software takes the pair too, 128 columns wide
    # (test_cuda_sm100_pair_promoted.py runs it).
    (t,) = BODY.tiles("p_promoted")
    assert (t.pair, t.promoted, t.bm, t.bn) == (True, True, 256, 128)
    assert tcgen05.pair_obstacle(kernel("p_promoted")) is None
    text = (BODY.folder / "p_lut.cu").read_text()
    assert "static constexpr bool kCtaPair = true;" in text and text.count("kCtaPair") == 1


def test_the_pair_step_is_a_cluster_launch_of_an_even_grid():
    lm = launcher("p_dense")
    dims = lm.validate(lhs=np.zeros((1000, 64), np.uint16), rhs=np.zeros((300, 64), np.uint16))
    # 4 x 3 tiles of 256 x 128: 2 x min(SMs / 2, 12) blocks in clusters of 2.
    for sms, grid in [(148, 24), (5, 4), (2, 2)]:
        (step,) = lm.launches(dims, 100, sms)
        assert (step.entry, step.grid, step.cluster) == ("p_dense_sm100", (grid, 1, 1), (2, 1, 1))
        assert lm.launch_error(step) is None
    # One SM cannot hold a pair: the mma.sync path.
    assert [s.entry for s in lm.launches(dims, 100, 1)] == ["p_dense"]
    lg = launcher("p_grouped")
    dims = lg.validate(lhs=np.zeros((300, 64), np.uint16), rhs=np.zeros((3, 128, 64), np.uint16),
                       group_sizes=np.array([40, 0, 260], np.int32))
    steps = lg.launches(dims, 100, 7)
    assert [(s.entry, s.cluster) for s in steps] == [
        ("p_grouped_fill", (1, 1, 1)), ("p_grouped_worklist", (1, 1, 1)),
        ("p_grouped_sm100", (2, 1, 1))]
    assert steps[1].args[5] == 256  # the worklist's 256-row items
    assert steps[2].args[0].box == (64, 128) and steps[2].args[1].box == (64, 64, 1)
    assert steps[2].grid == (6, 1, 1)
    # A LUT: m = 1 takes the 1-CTA entry, a plain launch.
    ll = launcher("p_lut")
    (step,) = ll.launches(ll.validate(lhs=np.zeros((1, 64), np.uint16),
                                      rhs=np.zeros((128, 64), np.uint16)), 100, 4)
    assert step.cluster == (1, 1, 1) and step.grid == (1, 1, 1)
    h = (BODY.folder / "p_dense.h").read_text()
    assert "cudaLaunchAttributeClusterDimension" in h + (BODY.folder / "p_dense.cu").read_text()


# ---------------------------------------------------------------------------
# On the emulator of an sm_100a device, against the reference.

CASES = [
    ("p_dense", Case("ragged_wraps", 600, 264, 200), 2, True),  # 9 tiles on one pair
    ("p_dense", Case("m1", 1, 128, 64), 2, False),
    ("p_dense", Case("k24", 300, 136, 24), 4, False),
    ("p_dense_kn", Case("kn_bias", 150, 264, 136), 2, False),
    ("p_grouped", Case("zero_size", 300, 136, 72, group_sizes=(40, 0, 130, 0, 130)), 6, False),
    ("p_grouped", Case("shard", 600, 128, 200, group_sizes=(60, 300, 0, 240), group_offset=1,
                       g_local=2, existing_out=True), 2, False),
    ("p_gateup", Case("gateup", 200, 256, 72, group_sizes=(70, 0, 130)), 4, False),
    ("p_masked", Case("masked", 300, 136, 72, masked_m=(3, 0, 300, 400)), 4, False),
    ("p_fp8_token", Case("token", 300, 136, 208), 4, False),
    ("p_fp8_token", Case("m1", 1, 72, 128), 2, False),
    ("p_fp8_grouped", Case("groups", 600, 136, 304, group_sizes=(40, 0, 560)), 6, False),
    ("p_fp8_kn", Case("kn", 600, 528, 208, group_sizes=(100, 0, 500)), 4, False),
    ("p_lut", Case("lut_pair", 520, 136, 72), 2, False),
    ("p_lut", Case("lut_m1", 1, 136, 72), 2, False),
]


@pytest.mark.parametrize("name,case,num_sms", case_params(CASES))
def test_the_pair_tile_through_the_cpp_launcher(name, case, num_sms):
    """launch_<name>() launches the pair's step with cudaLaunchKernelEx and the
    cluster attribute on the emulated device."""
    check(name, case, num_sms, seed=seed(), cpp=True)


@pytest.mark.slow
@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}") for n, c, s, _ in (CASES[1], CASES[4], CASES[9])])
def test_the_pair_tile_through_the_python_launcher(name, case, num_sms):
    """The generated Python launcher's steps (their cluster) on the emulator."""
    check(name, case, num_sms, seed=seed())


# ---------------------------------------------------------------------------
# Planted bugs in the pair tile under the generated kernel (gg_gemm_sm100.cuh
# with one edit; the launch sequence, tiles and maps are the generated ones).

PLANTED = {
    # The accumulator's commit reaches the leader only: the peer's epilogue
    # waits for it forever.
    "acc_commit_one_cta": (
        [("      gg::tcgen05_commit_pair_multicast(bar, acc_mask);\n",
          "      gg::tcgen05_commit_pair_multicast(bar, 1);\n")],
        (r"deadlock in cluster(.|\n)*CTA rank 1, block \(1,0,0\):\n  thread 0: (.|\n)*"
        r"threads 64-191: wait at mbarrier.try_wait.parity")),
    # The stage's commit reaches the leader only: the peer's producer waits
    # for its release forever.
    "stage_commit_one_cta": (
        [("      gg::tcgen05_commit_pair_multicast(bar, kClusterMask<T>);\n",
          "      gg::tcgen05_commit_pair_multicast(bar, 1);\n")],
        r"deadlock in cluster(.|\n)*CTA rank 1"),
    # The peer refills a stage without waiting for its release: its TMA
    # load overwrites what the pair's MMAs still read.
    "peer_stage_released_early": (
        [("      gg::mbarrier_wait(&s.empty[st], ((it / T::kStages) & 1) ^ 1);\n      if (v == 0) {\n",
          "      if (v == 0) {\n        gg::mbarrier_wait(&s.empty[st], ((it / T::kStages) & 1) ^ 1);\n")],
        (r"2-CTA TMA load\) into shared memory at 0x[0-9a-f]+ that an earlier TMA load \(mbarrier "
        r"at 0x[0-9a-f]+, phase 0\) still fills: no thread waited for it(.|\n)*block \(1,0,0\)")),
    # The leader releases each stage before its MMAs (the commit covers
    # only the earlier stages' MMAs).
    "stage_released_before_mma": (
        [(("      sm100::mma_stage<T>(s, st, tmem + acc * T::kBN, !kPromoted<T> && kt > 0, tmem);\n"
          "      commit.stage(&s.empty[st]);\n"),
          ("      commit.stage(&s.empty[st]);\n"
          "      sm100::mma_stage<T>(s, st, tmem + acc * T::kBN, !kPromoted<T> && kt > 0, tmem);\n"))],
        (r"a TMA load overwrites shared memory \[0x[0-9a-f]+, 0x[0-9a-f]+\) that a "
        r"tcgen05.mma.cta_group::2.kind::f16 issued by thread 32 still reads")),
    # The peer's threads leave after their roles, without the cluster
    # barrier (nor the epilogue): the leader's MMAs read its shared memory
    # after it exited.
    "peer_exits_before_cluster_sync": (
        [("  } else {\n    epilogue<T, L>(s, tmem, units, items, tiles_n, m, n, k, g, o, gs);\n  }\n",
          ("  } else if (pair_rank() == 0) {\n"
          "    epilogue<T, L>(s, tmem, units, items, tiles_n, m, n, k, g, o, gs);\n  }\n"
          "  if (pair_rank() == 1) {\n    return;\n  }\n"))],
        (r"(the pair peer \(CTA rank 1\) has exited|CTA rank 1 has exited|lands after every thread "
        r"of that CTA exited)")),
    # The epilogue hands the accumulator back to its own CTA's barrier: the
    # leader's never completes (256 arrivals expected).
    "acc_empty_own_cta": (
        [("      gg::mbarrier_arrive_cluster(leader + 8u * static_cast<u32>(acc));\n",
          "      gg::mbarrier_arrive(&own[acc]);\n")],
        r"deadlock(.|\n)*128 of 256 arrivals missing"),
}

PLANT_CASE = Case("rings_wrap", 1000, 264, 600)  # 12 tiles of 10 K tiles on one pair
# One tile: the peer's producer is done (and the peer gone) while the
# leader's MMAs still read its last stages.
ONE_TILE = {"peer_exits_before_cluster_sync": Case("one_tile", 256, 128, 1200)}


@pytest.mark.parametrize("bug", one_fast(PLANTED, "acc_commit_one_cta"))
def test_planted_bug_in_the_pair_tile_is_caught(bug):
    edits, report = PLANTED[bug]
    inputs = ONE_TILE.get(bug, PLANT_CASE).inputs(kernel("p_dense"), 3)
    BODY.expect_report("p_dense", edits, inputs, report, num_sms=2)


@pytest.mark.slow
def test_the_unplanted_copy_of_the_pair_tile_passes():
    inputs = PLANT_CASE.inputs(kernel("p_dense"), 3)
    actual = BODY.run_planted("p_dense", [], inputs, num_sms=2)
    assert BODY.matches("p_dense", PLANT_CASE, inputs, actual)


# ---------------------------------------------------------------------------
# The CuPy launcher (the stand-in: cuLaunchKernelEx with the cluster
# attribute, the clusters on the emulator).


@pytest.mark.slow
def test_the_cupy_launcher_launches_the_pair_tile_as_a_cluster():
    from gemmgen.harness import cupy_standin

    # 5 SMs: 2 x min(2, 4 tiles), a grid of 4.
    passed, launches, refused = BODY.run_cupy("p_dense", Case("cupy", 300, 136, 200), 5)
    assert passed
    assert launches == [("p_dense_sm100", (4, 1, 1), (2, 1, 1),
                         (cupy_standin.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,))]
    assert not refused


# ---------------------------------------------------------------------------
# nvcc for sm_100a: the pair tile's entries.

@needs_nvcc
@needs_cuobjdump
@pytest.mark.slow
@pytest.mark.parametrize("name,mma", [
    ("p_dense", "UTCHMMA"), ("p_dense_kn", "UTCHMMA"), ("p_gateup", "UTCHMMA"),
    ("p_masked", "UTCHMMA"), ("p_fp8_token", "UTCQMMA"), ("p_fp8_grouped", "UTCQMMA"),
    ("p_fp8_kn", "UTCQMMA"),
    ("p_lut", "UTCHMMA")])
def test_the_pair_entries_build_for_sm100a_on_2cta_mmas(name, mma):
    lp, result, sass = BODY.build(name)
    (step,) = cluster_steps(lp).values()
    if name == "p_lut":  # the 1-CTA entry beside it has no 2-CTA instruction
        (one,) = {s.entry for v in lp.variants for s in v.path("tcgen05").steps} - {step.entry}
        assert sass[one].count(mma) > 0 and sass[one].count(mma, "2CTA") == 0
    assert_fits(result.kernels[step.entry], step)
    code = sass[step.entry]
    # Every MMA the 2-CTA form (UTCHMMA.2CTA / UTCQMMA.2CTA), its commits
    # multicast to the pair (UTCBAR.2CTA.MULTICAST), TMEM allocated for both.
    assert_2cta_mmas(code, mma, step.entry)
    assert code.count("UTCATOMSWS", "2CTA") > 0, step.entry
    assert code.count("UTMALDG") > 0 and code.count("LDTM") > 0, step.entry


def test_explain_states_the_pair_tile_and_its_clusters(monkeypatch):
    from gemmgen.explain import plans

    monkeypatch.setattr(plans, "_ptxas", lambda *args: [])  # no compiler here
    lines = plans.cuda_lines(BODY.spec, kernel("p_lut"), 4096, 4096, 4096, 1)
    (path,) = [x for x in lines if x.startswith("  tcgen05 path")]
    assert "2-CTA tile 256x128x64 over a CTA pair (clusters of 2)" in path
    assert "the even CTA's thread issues tcgen05.mma 256x128x16 (cta_group::2)" in path
    (launch,) = [x for x in lines if x.startswith("  launch p_lut_t0_sm100:")]
    assert "grid (148, 1, 1), clusters of 2 x 1 x 1 blocks, 192 threads" in launch
