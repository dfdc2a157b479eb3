"""TMA multicast of A across the CTA pairs of a cluster on the sm_100a 2-CTA
tile (docs/cuda-sm100.md, "The 2-CTA tile", the cluster; issue 30): a LUT
entry `m=256 ... cluster_n=P` gets clusters of 2P CTAs, P pairs along n
sharing the entry's 256 rows of A: CTA v of pair 0 multicasts A's half v to
CTA v of every pair (tma_load_2d_multicast_pair), every leader's stage
commit reaches every CTA of the cluster (empty[s] takes P arrivals), a
pair past the last n tile of a unit (the idle pair) still takes part.

Here: the spec field and its positioned diagnostics; the plan (cluster
step of 2P x 1 x 1, a grid of whole clusters, the launch condition); the
generated kernels on the emulator of an sm_100a device through the C++
launcher (cudaLaunchKernelEx with the cluster attribute), the Python
launcher and the CuPy stand-in, against the reference on fresh random inputs
with poisoned outputs (dense, grouped with zero-size groups, group_offset
with existing_out, masked, silu_mul, bf16 and FP8 with epilogue scales,
rhs [k, n], n tiles not a multiple of P, m = 1, ragged m / n / k, k below a
K tile, grids of several clusters with several units each, P = 2, 3 and 4);
planted bugs the emulator catches; nvcc for sm_100a (UTMALDG.2D.MULTICAST.2CTA,
2-CTA MMAs, no spills).

The unmarked cases are one emulator run and two checks without a compiler;
the rest are `slow`."""

from __future__ import annotations

import numpy as np
import pytest
from sm100_helpers import (
    Sm100Spec,
    assert_2cta_mmas,
    assert_fits,
    case_params,
    cluster_steps,
    needs_cuobjdump,
    needs_nvcc,
    seed,
    spec_errors,
)
from sm100_specs import pair_kernels, spec_head

from gemmgen.backends.cuda.gemm import tcgen05
from gemmgen.cases import Case

SPEC = spec_head("lhs bf16 [m, k]\ntile m=256 n=128 k=64 cluster_n=2") + pair_kernels(
    "mc_", " cluster_n=2") + """
kernel mc_four {
  op grouped
  rhs bf16 [g, n, k]
  out bf16
  tile m=256 n=128 k=64 cluster_n=4
}

kernel mc_three {
  op dense
  rhs bf16 [n, k]
  out bf16
  tile m=256 n=128 k=64 cluster_n=3
}

kernel mc_lut {
  op dense
  rhs bf16 [n, k]
  out bf16
  tile m=128 n=128 k=64
  tile_rule m>=1024 -> m=256 n=128 k=64 cluster_n=2
  tile_rule m>=512 -> m=256 n=128 k=64
}
"""

BODY = Sm100Spec("sm100mcast", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check


# ---------------------------------------------------------------------------
# The spec field (no compiler).

BAD = """target cuda {
  archs ARCHS
}

target pallas_tpu {
  tpu v5e
}

kernel x_lut {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, n, k]
  out bf16
  tile m=128 n=128 k=64 cluster_n=2
  tile_rule m>=4096 -> m=256 n=128 k=64 cluster_n=8
  tile_rule m>=512 -> m=256 n=128 k=64 cluster_n=1
  backends cuda
}

kernel x_word {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=256 n=128 k=64 cluster_n=two
  backends cuda
}

kernel x_gemv {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  algorithm gemv

  tile m=256 n=128 k=64 cluster_n=2
  backends cuda
}

kernel x_mma_sync {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=256 n=128 k=64 cluster_n=2
  mma mma_sync
  backends cuda
}

kernel x_tpu {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=128 n=128 k=64
  tile pallas_tpu m=256 n=512 k=512 cluster_n=2
  backends cuda pallas_tpu
}
"""


def test_cluster_n_is_a_field_of_pair_tiles_with_positioned_errors():
    """`cluster_n` reads as a tile field; each misuse is an error at its
    value: a non-pair entry (m != 256), more than 8 CTAs (the portable
    cluster size), not an integer, a kernel the sm_100a body does not run
    (a GEMV), a TPU's tile, and a target without sm_100a /
    sm_103a; `mma mma_sync` ignores it."""
    from gemmgen.parse import parse
    from gemmgen.validate import validate

    spec = validate(parse(SPEC, "specs/ok.gemm"))
    (k,) = [k for k in spec.kernels if k.name == "mc_lut"]
    assert [r.tile.cluster_n for r in k.tile_rules] == [2, 1] and k.tile.cluster_n == 1
    assert str(k.tile_rules[0].tile) == "256x128x64 cluster_n=2"
    got = spec_errors(BAD.replace("ARCHS", "sm_100a"))
    for want in [
        ("x.gemm:14:35: kernel 'x_lut': tile cluster_n=2 needs the 2-CTA tile, m=256 (its CTA "
         "pairs along N share the tile's 256 rows of A), but the entry has m=128"),
        ("x.gemm:15:51: kernel 'x_lut': tile_rule cluster_n=8 asks for clusters of 16 CTAs (8 "
         "CTA pairs): at most 8, the portable cluster size, so cluster_n is 1 to 4"),
        "x.gemm:25:35: kernel 'x_word': tile cluster_n must be an integer, not 'two'",
        ("x.gemm:36:35: kernel 'x_gemv': cluster_n=2 needs CTA pairs of the sm_100a body "
         "sharing A by TMA multicast, which this kernel's tile does not do: it is a tile GEMM, "
         "not algorithm 'gemv'; drop cluster_n"),
        ("x.gemm:56:47: kernel 'x_tpu': tile pallas_tpu cluster_n=2: cluster_n is the CUDA "
         "sm_100a 2-CTA tile's"),
    ]:
        assert want in got, (want, got)
    assert got.count("\n") == 4, got  # one error each
    # `mma mma_sync` (or wgmma) forces a body without pairs: cluster_n is an
    # ordinary tile's there, as m=256 is, so `mma` stays sweepable.
    assert "x_mma_sync" not in got
    hopper = spec_errors(BAD.replace("ARCHS", "sm_90a"))
    assert ("x.gemm:36:35: kernel 'x_gemv': cluster_n=2 needs sm_100a or sm_103a "
            "(tcgen05.mma.cta_group::2 on CTA pairs, TMA multicast across a cluster), but target "
            "cuda declares sm_90a") in hopper
    assert "kernel 'x_tpu': cluster_n=2 needs sm_100a" not in hopper  # its cluster_n is the TPU's


# ---------------------------------------------------------------------------
# The plan and the launchers' choice (no compiler).

MULTICAST = {"mc_dense": 2, "mc_dense_kn": 2, "mc_grouped": 2, "mc_gateup": 2, "mc_masked": 2,
             "mc_fp8_token": 2, "mc_fp8_grouped": 2, "mc_fp8_kn": 2, "mc_four": 4,
             "mc_three": 3}


def test_cluster_n_plans_clusters_of_pairs_and_explain_states_them(monkeypatch):
    """The pair tile of each entry with its cluster_n (shared memory and TMEM
    those of the pair: multicast changes neither), a step of clusters of 2P x
    1 x 1 over a grid of whole clusters, min(SMs / 2P, units) of them (a unit
    256 rows x P n tiles), and the mma.sync path on a device of fewer SMs
    than a cluster; the struct's kClusterN; explain's cluster and A loads."""
    for name, p in MULTICAST.items():
        k = kernel(name)
        (t,) = BODY.tiles(name)
        assert t.pair and t.cluster_n == p and t.bm == 256, name
        assert t.smem_bytes == tcgen05.sm100_smem_bytes(t.bn, t.stages, k.out, pair=True), name
        assert f"static constexpr int kClusterN = {p};" in (BODY.folder / f"{name}.cu").read_text()
    lm = launcher("mc_dense")
    dims = lm.validate(lhs=np.zeros((1000, 64), np.uint16), rhs=np.zeros((520, 64), np.uint16))
    # 4 x 5 tiles of 256 x 128: 4 x 3 units of 256 x 256.
    for sms, grid in [(148, 48), (9, 8), (4, 4)]:
        (step,) = lm.launches(dims, 100, sms)
        assert (step.entry, step.grid, step.cluster) == ("mc_dense_sm100", (grid, 1, 1), (4, 1, 1))
        assert lm.launch_error(step) is None
    assert [s.entry for s in lm.launches(dims, 100, 3)] == ["mc_dense"]  # no cluster of 4 fits
    lf = launcher("mc_four")
    dims = lf.validate(lhs=np.zeros((300, 64), np.uint16), rhs=np.zeros((3, 640, 64), np.uint16),
                       group_sizes=np.array([40, 0, 260], np.int32))
    *_, step = lf.launches(dims, 100, 148)
    # At most cdiv(300, 256) + 3 = 5 row tiles x cdiv(5 n tiles, 4) = 10
    # units: 10 clusters of 8 (18 fit 148 SMs).
    assert (step.grid, step.cluster) == ((80, 1, 1), (8, 1, 1))
    (step,) = launcher("mc_three").launches(
        launcher("mc_three").validate(lhs=np.zeros((600, 64), np.uint16),
                                      rhs=np.zeros((700, 64), np.uint16)), 100, 20)
    assert (step.grid, step.cluster) == ((18, 1, 1), (6, 1, 1))
    # A LUT: m >= 1024 the clusters of 4, m >= 512 the pair, else one CTA.
    ll = launcher("mc_lut")
    for m, cluster in [(1500, (4, 1, 1)), (600, (2, 1, 1)), (1, (1, 1, 1))]:
        (step,) = ll.launches(ll.validate(lhs=np.zeros((m, 64), np.uint16),
                                          rhs=np.zeros((300, 64), np.uint16)), 100, 148)
        assert step.cluster == cluster, (m, step)
    mcast, pair, one = BODY.tiles("mc_lut")
    assert (mcast.cluster_n, pair.cluster_n, pair.pair, one.pair) == (2, 1, True, False)
    text = (BODY.folder / "mc_lut.cu").read_text()
    assert text.count("kClusterN") == 1 and text.count("kCtaPair") == 2

    from gemmgen.explain import plans

    monkeypatch.setattr(plans, "_ptxas", lambda *args: [])  # no compiler here
    lines = plans.cuda_lines(BODY.spec, kernel("mc_lut"), 4096, 4096, 4096, 1)
    (path,) = [x for x in lines if x.startswith("  tcgen05 path")]
    assert "over a CTA pair (clusters of 4: 2 pairs along n sharing A by TMA multicast)" in path
    (loads,) = [x for x in lines if x.startswith("  tile loads")]
    # 16 row tiles x 32 n tiles: A 256 x 4096 bf16 per unit of 2 n tiles.
    a = 16 * 16 * 256 * 4096 * 2 / 1e6
    assert (f"A {a:.3f} MB (each 256-row tile loaded once per cluster of 2 pairs and multicast "
            f"to them; {2 * a:.3f} MB a pair at a time), B {a:.3f} MB") in loads
    (launch,) = [x for x in lines if x.startswith("  launch mc_lut_t0_sm100:")]
    assert "grid (148, 1, 1), clusters of 4 x 1 x 1 blocks, 192 threads" in launch


# ---------------------------------------------------------------------------
# On the emulator of an sm_100a device, against the reference.

CASES = [
    # n = 384: 3 n tiles of 128, so each row tile's second unit has an idle
    # pair; one cluster walks every unit (both accumulators and the ring wrap).
    ("mc_grouped", Case("idle_pair_wraps", 600, 384, 200, group_sizes=(60, 300, 0, 240)), 4,
     True),
    ("mc_dense", Case("ragged_wraps", 600, 264, 200), 8, False),  # 2 clusters, 6 units
    ("mc_dense", Case("m1", 1, 128, 64), 4, False),  # one n tile: pair 1 idle throughout
    ("mc_dense", Case("k24", 300, 136, 24), 4, False),
    ("mc_dense_kn", Case("kn_bias", 150, 520, 136), 4, False),
    ("mc_grouped", Case("zero_size", 300, 136, 72, group_sizes=(40, 0, 130, 0, 130)), 8, False),
    ("mc_grouped", Case("shard", 600, 512, 200, group_sizes=(60, 300, 0, 240), group_offset=1,
                        g_local=2, existing_out=True), 4, False),
    ("mc_gateup", Case("gateup", 200, 384, 72, group_sizes=(70, 0, 130)), 4, False),
    ("mc_masked", Case("masked", 300, 136, 72, masked_m=(3, 0, 300, 400)), 4, False),
    ("mc_fp8_token", Case("token", 300, 400, 208), 8, False),
    ("mc_fp8_token", Case("m1", 1, 72, 128), 4, False),
    ("mc_fp8_grouped", Case("groups", 600, 136, 304, group_sizes=(40, 0, 560)), 4, False),
    ("mc_fp8_kn", Case("kn", 600, 528, 208, group_sizes=(100, 0, 500)), 8, False),
    ("mc_four", Case("three_of_four", 700, 320, 136, group_sizes=(100, 0, 600)), 8, False),
    ("mc_four", Case("one_of_four", 300, 96, 64, group_sizes=(300,)), 8, False),
    ("mc_three", Case("five_of_six", 520, 520, 200), 12, False),
    ("mc_lut", Case("lut_mcast", 1100, 264, 72), 4, False),
    ("mc_lut", Case("lut_m1", 1, 136, 72), 4, False),
]


@pytest.mark.parametrize("name,case,num_sms", case_params(CASES))
def test_the_multicast_tile_through_the_cpp_launcher(name, case, num_sms):
    """launch_<name>() launches clusters of 2P CTAs with cudaLaunchKernelEx
    on the emulated device; the result against the reference."""
    check(name, case, num_sms, seed=seed(), cpp=True)


@pytest.mark.slow
@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}") for n, c, s, _ in (CASES[2], CASES[7], CASES[13])])
def test_the_multicast_tile_through_the_python_launcher(name, case, num_sms):
    """The generated Python launcher's steps (their cluster) on the emulator."""
    check(name, case, num_sms, seed=seed())


@pytest.mark.slow
def test_the_cupy_launcher_launches_clusters_of_four():
    from gemmgen.harness import cupy_standin

    # 9 SMs: 4 x min(2, 2 x 2 units), a grid of 8.
    passed, launches, refused = BODY.run_cupy("mc_dense", Case("cupy", 300, 400, 200), 9)
    assert passed
    assert launches == [("mc_dense_sm100", (8, 1, 1), (4, 1, 1),
                         (cupy_standin.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,))]
    assert not refused


# ---------------------------------------------------------------------------
# Planted bugs in the multicast protocol under the generated kernel
# (gg_gemm_sm100.cuh with one edit; the launch, tiles and maps generated).

PLANTED = {
    # Pair 0's CTA 1 multicasts A's half 1 to itself only (CTA 3 left out of
    # the mask): pair 1's leader's `full` barrier never gets those bytes.
    "a_mask_misses_a_cta": (
        [("a_multicast_mask<T>(static_cast<unsigned>(v)));",
          "static_cast<unsigned short>(a_multicast_mask<T>(static_cast<unsigned>(v)) & 0x7));")],
        (r"deadlock in cluster(.|\n)*CTA rank 2, block \(2,0,0\):(.|\n)*"
         r"16384 transaction bytes missing \(expect_tx announced 49152, TMA delivered 32768\)")),
    # empty[s] takes one arrival instead of one a pair: pair 0's A multicast
    # refills a stage before every pair's MMAs on it are known done.
    "empty_fewer_arrivals_than_pairs": (
        [("gg::mbarrier_init(&s.empty[st], kClusterN<T>);", "gg::mbarrier_init(&s.empty[st], 1);")],
        (r"(2-CTA TMA multicast load\) into shared memory at 0x[0-9a-f]+ that an earlier TMA load "
         r"\(mbarrier at 0x[0-9a-f]+, phase \d\) still fills: no thread waited for it|"
         r"a TMA load overwrites shared memory(.|\n)*tcgen05.mma.cta_group::2)")),
    # Each leader commits a stage's release to its own pair only: every
    # CTA's empty[s] waits for the other pair's arrival forever.
    "stage_commit_to_the_pair_only": (
        [("gg::tcgen05_commit_pair_multicast(bar, kClusterMask<T>);",
          "gg::tcgen05_commit_pair_multicast(bar, acc_mask);")],
        (r"deadlock in cluster(.|\n)*CTA rank 3, block \(3,0,0\):(.|\n)*"
         r"incomplete: 1 of 2 arrivals missing")),
    # A pair with no n tile (n = 128: pair 1 idle in every unit) leaves at
    # once: pair 0's A multicasts still target its shared memory.
    "idle_pair_exits_early": (
        [("  gg::cluster_sync();  // every CTA's barriers initialised, the columns allocated\n",
          ("  gg::cluster_sync();  // every CTA's barriers initialised, the columns allocated\n"
           "  if (pair_index() * T::kBNOut >= (kSilu<T> ? n / 2 : n)) {\n    return;\n  }\n"))],
        r"2-CTA TMA multicast load\): CTA rank 3 has exited; its shared memory is released"),
}

PLANT_CASE = Case("rings_wrap", 1000, 520, 600)  # 4 x 3 units of 10 K tiles on one cluster
IDLE_CASE = Case("idle", 1000, 128, 600)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
@pytest.mark.parametrize("bug", list(PLANTED))
def test_planted_bug_in_the_multicast_protocol_is_caught(bug, schedule):
    """Each bug is reported in both of the emulator's warp schedules; the
    same copy of the body without the edit computes the reference."""
    edits, report = PLANTED[bug]
    case = IDLE_CASE if bug == "idle_pair_exits_early" else PLANT_CASE
    inputs = case.inputs(kernel("mc_dense"), 3)
    BODY.expect_report("mc_dense", edits, inputs, report, num_sms=4, schedule=schedule)
    actual = BODY.run_planted("mc_dense", [], inputs, num_sms=4, schedule=schedule)
    assert BODY.matches("mc_dense", case, inputs, actual)


@pytest.mark.slow
@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}") for n, c, s, _ in (CASES[0], CASES[7], CASES[13])])
def test_the_multicast_tile_in_the_reverse_schedule(name, case, num_sms):
    """The emulator's other warp order (the last runnable warp first): the
    idle pair, silu_mul and four pairs a cluster still match the reference."""
    inputs = case.inputs(kernel(name), seed())
    got = BODY.run_py(name, inputs, num_sms, schedule="reverse")
    assert BODY.matches(name, case, inputs, got)


# ---------------------------------------------------------------------------
# nvcc for sm_100a: the multicast entries.

@needs_nvcc
@needs_cuobjdump
@pytest.mark.slow
@pytest.mark.parametrize("name,mma", [
    ("mc_dense", "UTCHMMA"), ("mc_dense_kn", "UTCHMMA"), ("mc_grouped", "UTCHMMA"),
    ("mc_gateup", "UTCHMMA"), ("mc_masked", "UTCHMMA"), ("mc_fp8_token", "UTCQMMA"),
    ("mc_fp8_grouped", "UTCQMMA"), ("mc_fp8_kn", "UTCQMMA"), ("mc_four", "UTCHMMA"),
    ("mc_three", "UTCHMMA"), ("mc_lut", "UTCHMMA")])
def test_the_multicast_entries_build_for_sm100a(name, mma):
    """A's load is the 2-CTA multicast form (UTMALDG.2D.MULTICAST.2CTA), every
    MMA the 2-CTA form, the commits multicast; no spills; a pair entry of
    cluster_n = 1 beside it (mc_lut's m >= 512) loads A without multicast."""
    lp, result, sass = BODY.build(name)
    steps = cluster_steps(lp)
    for entry, step in steps.items():
        assert_fits(result.kernels[entry], step)
        code = sass[entry]
        assert_2cta_mmas(code, mma, entry)
        multicast = code.count("UTMALDG", "2D", "MULTICAST", "2CTA")
        assert multicast == (1 if step.cluster[0] > 2 else 0), (entry, code.opcodes)
    assert {s.cluster[0] for s in steps.values()} == (
        {4, 2} if name == "mc_lut" else {2 * MULTICAST[name]})
