"""The block-scaled path of the generated sm_100a body (docs/cuda-sm100.md,
"The sm_100a GEMM", the block-scaled path): MXFP8 kernels (e4m3 / e5m2 with
e8m0 scales of 32 on both sides, either scale layout) on the block-scaled
tcgen05.mma, the scales gathered into the stages by the producer warp and
copied into TMEM with tcgen05.cp; what the plan gives them, the generated
kernels on the emulator of an sm_100a device against the NumPy reference
(fresh random inputs and scales, outputs poisoned, m = 1, ragged m / n / k,
k not a multiple of the K tile, zero-size groups, group_offset with
existing_out, silu_mul), planted bugs in the body, and nvcc for sm_100a
(UTCQMMA, UTCCP, UTMALDG, no spills, shared memory within the limit).

The unmarked cases are one of each kind; the rest are `slow`."""

from __future__ import annotations

import numpy as np
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
    spec_errors,
)
from sm100_specs import block_scaled_kernels, spec_head

from gemmgen.archs import shared_memory_limit
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.backends.cuda.gemm import tcgen05
from gemmgen.cases import Case

SPEC = spec_head("lhs e4m3 [m, k]\ntile m=128 n=128 k=128") + block_scaled_kernels("", 128) + """
kernel mx_dense_rows {
  op dense
  lhs e5m2 [m, k]
  rhs e5m2 [n, k]
  out f32
  bias f32 [n]
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  tile m=128 n=64 k=128
}

kernel mx_grouped {
  op grouped
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}

kernel mx_grouped_rows {
  op grouped
  rhs e4m3 [g, n, k]
  out f32
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  tile m=128 n=192 k=128
}
"""

BODY = Sm100Spec("sm100mx", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check


def test_plan_gives_mx_kernels_block_scaled_sm100_tiles():
    limit = shared_memory_limit(SM100)
    # (bn, scale bytes a stage, TMEM columns): two accumulators and 4
    # columns per 512-byte atom (A's, and B's per 128 rows) after them.
    want = {"mx_dense": (128, 1024, 512), "mx_dense_rows": (64, 1024, 256),
            "mx_grouped": (128, 1024, 512), "mx_grouped_rows": (192, 1536, 512),
            "mx_gateup": (128, 1024, 512)}
    for name, (bn, sf, cols) in want.items():
        k = kernel(name)
        assert k.tcgen05_block_scaled and k.tcgen05_obstacle() is None, name
        (t,) = BODY.tiles(name)
        assert (t.bn, t.sf_stage, t.tmem_cols, t.block_scaled, t.promoted) == (
            bn, sf, cols, True, False), name
        assert t.smem_bytes == tcgen05.sm100_smem_bytes(t.bn, t.stages, k.out, sf) <= limit
        more = tcgen05.sm100_smem_bytes(t.bn, t.stages + 1, k.out, sf)
        assert t.stages == tcgen05.SM100_MAX_STAGES or more > limit
        assert 2 * t.bn + t.sf_cols <= t.tmem_cols
    text = (BODY.folder / "mx_dense.cu").read_text()
    assert "static constexpr bool kBlockScaledMma = true;" in text
    assert "kind::mxf8f6f4.block_scale" in text  # the algorithm's words


def test_fp4_may_declare_sm100a_where_the_block_scaled_tcgen05_runs_it():
    from gemmgen import backends
    from gemmgen.parse import parse
    from gemmgen.validate import validate

    both = SPEC.replace("archs sm_100a", "archs sm_100a sm_103a sm_120a")
    spec = validate(parse(both, "specs/x.gemm"), diagnose=backends.diagnose)
    nv = spec.kernel("nv4_dense")
    assert nv.uses_tcgen05("sm_103a") and nv.uses_mx_mma("sm_120a")
    # An arch with neither block-scaled MMA is an error at the lhs.
    err = spec_errors(SPEC.replace("archs sm_100a", "archs sm_90a sm_100a"))
    assert ("multiplies fp4 x fp4 on the block-scaled MMAs of sm_120a / sm_121a (mma.sync) "
            "and sm_100a / sm_103a (tcgen05) only; the cuda target declares sm_90a too") in err
    # W4A8 and the masked layout run there too.
    assert spec.kernel("w4a8_moe").uses_tcgen05("sm_100a")
    assert spec.kernel("nv4_masked").uses_tcgen05("sm_100a")
    # MXFP8 with `mma tcgen05` gets the block-scaled tile; with `mma
    # mma_sync` the portable body (promoting each MX block in software).
    for mma, tiled in (("tcgen05", True), ("mma_sync", False)):
        text = SPEC.replace("  rhs_scale block n=1 k=32 e8m0 layout=atom128x4\n}",
                            f"  rhs_scale block n=1 k=32 e8m0 layout=atom128x4\n  mma {mma}\n}}",
                            1)
        assert text != SPEC
        spec = validate(parse(text, "specs/x.gemm"), diagnose=backends.diagnose)
        tiles = tile_gemm.plan(spec.kernel("mx_dense"), spec).body_tiles("tcgen05")
        assert bool(tiles) == tiled and all(t.block_scaled for t in tiles), mma


def test_explain_bounds_the_block_scaled_path_at_its_rate():
    """fp4 x fp4 on the block-scaled tcgen05.mma at B200's FP4 rate; MXFP8
    and W4A8 (kind::mxf8f6f4) at its FP8 rate."""
    from gemmgen.devices import DEVICES
    from gemmgen.explain.roofline import tensor_path

    b200 = DEVICES["b200"]
    want = {"nv4_dense": 9000.0, "mx4_moe": 9000.0, "mx_dense": 4500.0, "w4a8_moe": 4500.0}
    for name, rate in want.items():
        p = tensor_path(kernel(name), "sm_100a")
        assert p is not None and p.tcgen05 and p.rate(b200) == rate, name


CASES = [
    ("mx_dense", Case("ragged", 130, 136, 208), 2, True),
    ("mx_dense", Case("m1", 1, 128, 128), 1, False),
    ("mx_dense", Case("k_wraps", 300, 264, 416), 1, False),
    ("mx_dense_rows", Case("ragged_bias", 150, 72, 96), 2, False),
    ("mx_dense_rows", Case("m1_k32", 1, 200, 32), 1, False),
    ("mx_grouped", Case("shard", 260, 136, 160, group_sizes=(60, 100, 0, 100), group_offset=1,
                        g_local=2, existing_out=True), 2, True),
    ("mx_grouped", Case("zero_size", 300, 128, 256, group_sizes=(40, 0, 130, 0, 130)), 3, False),
    ("mx_grouped_rows", Case("rows", 200, 200, 288, group_sizes=(70, 0, 130)), 2, False),
    ("mx_gateup", Case("gateup", 200, 256, 160, group_sizes=(70, 0, 130)), 2, False),
    ("nv4_dense", Case("ragged", 130, 136, 288), 2, True),
    ("nv4_dense", Case("m1_k32", 1, 128, 32), 1, False),
    ("nv4_moe", Case("shard", 260, 72, 544, group_sizes=(60, 100, 0, 100), group_offset=1,
                     g_local=2, existing_out=True), 2, True),
    ("mx4_dense", Case("ragged_bias", 150, 200, 320), 2, True),
    ("mx4_moe", Case("gateup_zero_size", 200, 256, 96, group_sizes=(70, 0, 130)), 2, True),
    ("w4a8_dense", Case("ragged", 130, 136, 224), 2, True),
    ("w4a8_dense", Case("m1_k32", 1, 72, 32), 1, False),
    ("nv4_masked", Case("masked", 150, 72, 288, masked_m=(150, 0, 17, 200)), 2, True),
    ("w4a8_masked", Case("masked", 130, 136, 160, masked_m=(3, 0, 130)), 2, False),
    ("w4a8_moe", Case("gateup_shard", 260, 256, 160, group_sizes=(60, 100, 0, 100),
                      group_offset=1, g_local=2, existing_out=True), 2, True),
]


@pytest.mark.parametrize("name,case,num_sms", case_params(CASES))
def test_the_block_scaled_sm100_path_on_the_emulator(name, case, num_sms):
    check(name, case, num_sms, seed=seed())


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param("nv4_moe", CASES[11][1], 3, id="nvfp4-grouped"),
    pytest.param("w4a8_moe", CASES[-1][1], 2, id="w4a8-gateup", marks=pytest.mark.slow),
])
def test_cpp_launcher_runs_the_block_scaled_path(name, case, num_sms):
    """launch_<name>() asks the emulated device for its compute capability
    (10.0) and launches the block-scaled sm_100a entry (global scales and
    W4A8's rhs pointer among its arguments)."""
    check(name, case, num_sms, seed=seed(), cpp=True)


# ---------------------------------------------------------------------------
# Planted bugs in the block-scaled path of the body under a generated kernel
# (gg_gemm_sm100.cuh with one edit; launches, tiles and maps generated).

PLANTED = {
    # tcgen05.cp puts the atoms 4 columns further than the MMAs read them.
    "scales_wrong_columns": (
        [("    gg::tcgen05_cp_32x128b_warpx4(tmem + 2 * T::kBN + 4 * a, desc);",
          "    gg::tcgen05_cp_32x128b_warpx4(tmem + 2 * T::kBN + 4 * a + 4, desc);")],
        r"which nothing wrote since its allocation"),
    # The generic stores of the gathered scales are not fenced before the
    # async proxy (tcgen05.cp) reads them.
    "scales_not_fenced": (
        [("      gg::fence_proxy_async();\n      if (lane == 0) {", "      if (lane == 0) {")],
        r"fence.proxy.async"),
    # The scale stage is released by a plain arrival, not the commit: the
    # next round's TMA load overwrites what the MMAs and copies still read.
    "stage_released_early": (
        [("      commit.stage(&s.empty[st]);\n",
          "      gg::mbarrier_arrive(&s.empty[st]);\n")],
        r"released before|still reads|overwritten before"),
    # Only lane 0 waits for the stage to be empty: the other lanes run
    # ahead, gathering scales into stages a tcgen05.cp may still read and
    # arriving on `full` barriers of later rounds; the emulator stops it (a
    # report of the overwrite, or the deadlock the early arrivals leave).
    "scales_written_early": (
        [(("      gg::mbarrier_wait(&s.empty[st], ((it / T::kStages) & 1) ^ 1);\n"
           "      unsigned char* sf"),
          ("      if (lane == 0) gg::mbarrier_wait(&s.empty[st], ((it / T::kStages) & 1) ^ 1);\n"
           "      unsigned char* sf"))],
        r"deadlock|overwritten|still reads"),
}

# A scale id one K block off: the MMAs read the wrong scale bytes, which the
# comparison with the reference rejects (no rule of the hardware is broken).
WRONG_ID = [("  const unsigned id = static_cast<unsigned>((kb * kBsVec<T>) % 4);",
             "  const unsigned id = static_cast<unsigned>(((kb + 1) * kBsVec<T>) % 4);")]

RINGS = Case("rings_wrap", 300, 136, 800)  # 6 tiles of 7 K tiles on one block, 6 stages


def run_planted(edits, inputs, name="mx_dense"):
    return BODY.run_planted(name, edits, inputs, num_sms=1)


@pytest.mark.parametrize("bug", one_fast(PLANTED, "scales_wrong_columns"))
def test_planted_bug_in_the_block_scaled_path_is_caught(bug):
    edits, report = PLANTED[bug]
    inputs = RINGS.inputs(kernel("mx_dense"), seed())
    BODY.expect_report("mx_dense", edits, inputs, report, num_sms=1)


@pytest.mark.slow
@pytest.mark.parametrize("edits,passes", [(WRONG_ID, False), ([], True)],
                         ids=["wrong_scale_id", "unplanted"])
def test_a_wrong_scale_id_fails_the_comparison(edits, passes):
    inputs = RINGS.inputs(kernel("mx_dense"), seed())
    assert BODY.matches("mx_dense", RINGS, inputs, run_planted(edits, inputs)) == passes


# NVFP4's global scales, applied once per output in the epilogue: planted
# never, twice, and the first group's for every group (the comparison fails).
GLOBAL_BUGS = {
    "global_never": [("      const float global = global_scale<T>(gs.lhs, gs.rhs, w.gl);",
                      "      const float global = 1.0f;")],
    "global_twice": [("      const float global = global_scale<T>(gs.lhs, gs.rhs, w.gl);",
                      ("      const float global = global_scale<T>(gs.lhs, gs.rhs, w.gl) *\n"
                       "                           global_scale<T>(gs.lhs, gs.rhs, w.gl);"))],
    "global_first_group": [("      const float global = global_scale<T>(gs.lhs, gs.rhs, w.gl);",
                            "      const float global = global_scale<T>(gs.lhs, gs.rhs, 0);")],
}
MOE = Case("groups", 300, 72, 288, group_sizes=(100, 0, 120, 80))

# W4A8's unpacking into kind::mxf8f6f4's padded fp4 layout: planted without
# the 128-byte swizzle, and with the data in the chunk's second 8 bytes.
W4A8_BUGS = {
    "unswizzled": [("(tr % 8) * 128 + ((c ^ (tr % 8)) * 16)) =", "(tr % 8) * 128 + c * 16) =")],
    "padding_first": [("        make_uint4(v.x, v.y, 0u, 0u);", "        make_uint4(0u, 0u, v.x, v.y);")],
}


@pytest.mark.parametrize("bug", one_fast(W4A8_BUGS, "unswizzled"))
def test_w4a8_unpacking_planted_wrong_fails_the_comparison(bug):
    case = Case("two_tiles", 200, 136, 256)
    inputs = case.inputs(kernel("w4a8_dense"), seed())
    actual = run_planted(W4A8_BUGS[bug], inputs, name="w4a8_dense")
    assert not BODY.matches("w4a8_dense", case, inputs, actual)


@pytest.mark.parametrize("bug", one_fast(GLOBAL_BUGS, "global_twice"))
def test_nvfp4_global_scale_planted_wrong_fails_the_comparison(bug):
    inputs = MOE.inputs(kernel("nv4_moe"), seed())
    globals_ = [np.asarray(inputs[n]) for n in ("lhs_global_scale", "rhs_global_scale")]
    assert all(np.all(g != 1.0) for g in globals_)  # the bugs are visible
    actual = run_planted(GLOBAL_BUGS[bug], inputs, name="nv4_moe")
    assert not BODY.matches("nv4_moe", MOE, inputs, actual)


# ---------------------------------------------------------------------------
# nvcc for sm_100a: the block-scaled entries.

@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("name,mma", [
    ("mx_grouped", ("UTCQMMA",)), ("nv4_moe", ("UTCOMMA", "4X")), ("mx4_dense", ("UTCOMMA",)),
    pytest.param("mx_dense", ("UTCQMMA",), marks=pytest.mark.slow),
    pytest.param("mx_dense_rows", ("UTCQMMA",), marks=pytest.mark.slow),
    pytest.param("mx_grouped_rows", ("UTCQMMA",), marks=pytest.mark.slow),
    pytest.param("mx_gateup", ("UTCQMMA",), marks=pytest.mark.slow),
    pytest.param("nv4_dense", ("UTCOMMA", "4X"), marks=pytest.mark.slow),
    pytest.param("mx4_moe", ("UTCOMMA",), marks=pytest.mark.slow),
    ("w4a8_moe", ("UTCQMMA",)), pytest.param("w4a8_dense", ("UTCQMMA",), marks=pytest.mark.slow),
    pytest.param("nv4_masked", ("UTCOMMA", "4X"), marks=pytest.mark.slow),
    pytest.param("w4a8_masked", ("UTCQMMA",), marks=pytest.mark.slow)])
def test_generated_block_scaled_entries_build_without_spills(name, mma):
    lp, result, sass = BODY.build(name)
    for v in lp.variants:
        step = v.path("tcgen05").steps[-1]
        assert_fits(result.kernels[step.entry], step)
        code = sass[step.entry]
        assert code.count(*mma) > 0 and code.count("HMMA") == 0, step.entry
        if mma == ("UTCOMMA",):  # kind::mxf4, not mxf4nvf4's 4X
            assert code.count("UTCOMMA", "4X") == 0, step.entry
        assert code.count("UTCCP") > 0 and code.count("UTMALDG") > 0, step.entry
        assert code.count("LDTM") > 0 and code.count("UTCBAR") > 0, step.entry


# ---------------------------------------------------------------------------
# sm_103a (B300): the same block-scaled body on its own compute capability.

class Sm103Spec(Sm100Spec):
    ARCH, SM = "sm_103a", 103


@pytest.mark.slow
def test_sm103a_runs_the_block_scaled_body():
    b300 = Sm103Spec("sm103mx", SPEC.replace("archs sm_100a", "archs sm_103a"))
    lm = b300.launcher("nv4_dense")
    dims = lm.validate(**Case("m1", 1, 128, 64).inputs(b300.kernel("nv4_dense"), 1))
    assert [s.entry for s in lm.launches(dims, 103, 148)] == ["nv4_dense_sm100"]
    b300.check("nv4_dense", CASES[9][1], 2, seed=seed())
    b300.check("w4a8_moe", CASES[-1][1], 2, seed=seed())
