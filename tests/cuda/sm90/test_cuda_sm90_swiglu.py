"""swiglu_clamped (GPT-OSS's clamped gated activation) on the Hopper bodies
(gg_gemm_sm90.cuh's 16-bit and FP8 tile, gg_gemm_sm90_mixed.cuh's
weight-only one), on the CPU emulator of an sm_90a device, against the
float64 reference: pairs=interleaved (a tile's B is the columns 2 n0.. in
order, each thread pairing its adjacent gate and up columns) and
pairs=halves (silu_mul's gate half over up half), per-expert bias, empty
groups, group_offset with existing_out, n awkward (200) and a multiple of
the tile (256), k not a multiple of the K tile; and planted bugs in the
body's pairing that the emulator tests must catch.

The unmarked cases are one interleaved and one halves kernel and one
planted bug; the rest are `slow`."""

from __future__ import annotations

import pytest
from sm90_helpers import HopperSpec

from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.cases import Case
from gemmgen.harness import nvcc
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, reference

SPEC = """
target cuda {
  archs sm_89 sm_90a
}

defaults {
  lhs bf16 [m, k]
  tile m=128 n=128 k=64
  backends cuda
}

# GPT-OSS's gate-up: bf16 experts, per-expert bias, interleaved pairs; a
# small limit so that both clamps bite on random data.
kernel sw_inter {
  op grouped
  rhs bf16 [g, n, k]
  out bf16
  bias bf16 [g, 1, n]
  epilogue swiglu_clamped limit=0.75
}

# The halves layout, rhs [g, k, n] (MN-major boxes), f32 out, other constants.
kernel sw_halves {
  op grouped
  rhs bf16 [g, k, n]
  out f32
  bias f32 [g, 1, n]
  epilogue swiglu_clamped pairs=halves alpha_gate=2 limit=1.5
}

# Interleaved, rhs [k, n], dense, per-n bias.
kernel sw_inter_kn {
  op dense
  rhs bf16 [k, n]
  out bf16
  bias f32 [n]
  epilogue swiglu_clamped limit=1
}

# FP8 x FP8 (the promoted tile), interleaved, per-tensor scales.
kernel sw_fp8 {
  op grouped
  lhs e4m3 [m, k]
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_tensor f32
  rhs_scale per_tensor f32
  bias f32 [g, 1, n]
  epilogue swiglu_clamped limit=1
}

# Weight-only int8 experts (the weight-only tile), halves.
kernel sw_w8 {
  op grouped
  rhs int8 [g, n, k]
  out bf16
  rhs_scale per_channel f32
  bias f32 [g, 1, n]
  epilogue swiglu_clamped pairs=halves limit=1
}

# Weight-only with interleaved pairs: the weight-only tile refuses them, so
# the kernel keeps the mma.sync body on sm_90a.
kernel sw_w8_inter {
  op dense
  rhs int8 [n, k]
  out bf16
  rhs_scale per_channel f32
  epilogue swiglu_clamped limit=1
}
"""

HOPPER = HopperSpec("sm90swiglu", SPEC)
SLOW = pytest.mark.slow

# n = 200: 100 outputs, a partial second tile; 256: whole tiles. k = 72 is
# one K tile and a partial one (64 for 16-bit, 128 for FP8: k < the tile).
SHARD = Case("shard", 45, 200, 72, group_sizes=(10, 0, 17, 18, 0), group_offset=1, g_local=3,
             existing_out=True)
WHOLE = Case("whole", 130, 256, 136, group_sizes=(70, 0, 60))
# rhs [k, n]: rows of 16-byte copies, so n % 16 == 0 (208: 104 outputs).
SHARD_KN = Case("shard_kn", 45, 208, 72, group_sizes=(10, 0, 17, 18, 0), group_offset=1,
                g_local=3, existing_out=True)
DENSE_KN = Case("dense_kn", 33, 208, 72)
# FP8 and the int8 weights: rows of 16-byte copies, so k % 16 == 0 (80: below the 128-wide K tile;
# 272: two K tiles and a partial one).
SHARD_FP8 = Case("shard_fp8", 45, 200, 80, group_sizes=(10, 0, 17, 18, 0), group_offset=1,
                 g_local=3, existing_out=True)
WHOLE_FP8 = Case("whole_fp8", 130, 256, 272, group_sizes=(70, 0, 60))


def test_the_hopper_bodies_take_swiglu_clamped():
    for name in ("sw_inter", "sw_halves", "sw_inter_kn", "sw_fp8", "sw_w8"):
        k = HOPPER.kernel(name)
        assert k.wgmma_obstacle() is None and k.uses_wgmma("sm_90a"), name
        tiles = tile_gemm.plan(k, HOPPER.spec).body_tiles("wgmma")
        assert tiles and all(t.bn_out * 2 == t.bn for t in tiles), name
    k = HOPPER.kernel("sw_w8_inter")
    assert "pairs=interleaved" in k.wgmma_obstacle() and not k.uses_wgmma("sm_90a")


@pytest.mark.parametrize("name, case", [
    ("sw_inter", SHARD),
    pytest.param("sw_inter", WHOLE, marks=SLOW),
    ("sw_halves", SHARD_KN),
    pytest.param("sw_halves", WHOLE, marks=SLOW),
    pytest.param("sw_inter_kn", DENSE_KN, marks=SLOW),
    pytest.param("sw_fp8", SHARD_FP8, marks=SLOW),
    pytest.param("sw_fp8", WHOLE_FP8, marks=SLOW),
    pytest.param("sw_w8", SHARD_FP8, marks=SLOW),
])
def test_swiglu_on_the_hopper_body_matches_reference(name, case):
    HOPPER.check(name, case, num_sms=2, seed=7)


# Planted bugs in the body's pairing (edits of gg_gemm_sm90.cuh): each must
# fail the comparison.
PLANTS = {
    # Interleaved: the gate and up columns of a pair swapped.
    "interleaved_swapped": [("float x[2] = {d[e], d[e + 1]};", "float x[2] = {d[e + 1], d[e]};")],
    # Interleaved: the second run of B read half a tile on (the up half's
    # offset of silu_mul's layout, n0-based).
    "interleaved_second_run": [("kInterleavedPairs<T> ? 2 * n0 + T::kBN / 2 : n / 2 + n0",
                                "kInterleavedPairs<T> ? n0 + T::kBN / 2 : n / 2 + n0")],
}


@pytest.mark.parametrize("plant", [
    "interleaved_swapped", pytest.param("interleaved_second_run", marks=SLOW)])
def test_planted_pairing_bug_is_caught(plant):
    name, case = "sw_inter", WHOLE
    k = HOPPER.kernel(name)
    inputs = case.inputs(k, 5)
    modules, key = HOPPER.planted(name, PLANTS[plant])
    got = run_launcher(HOPPER.launcher(name), "", key, inputs, modules=modules, arch="sm_90a",
                       num_sms=2)
    assert not compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


@SLOW
def test_the_unplanted_copy_passes():
    """The planted copy's machinery with no edit passes the same case."""
    name, case = "sw_inter", WHOLE
    k = HOPPER.kernel(name)
    inputs = case.inputs(k, 5)
    modules, key = HOPPER.planted(name, [])
    got = run_launcher(HOPPER.launcher(name), "", key, inputs, modules=modules, arch="sm_90a",
                       num_sms=2)
    assert compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


@pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
@pytest.mark.parametrize("name", ["sw_inter", "sw_halves", "sw_fp8", "sw_w8"])
@SLOW
def test_swiglu_hopper_entries_build_without_spills(name):
    """nvcc for sm_90a (-Werror): the Hopper entries of each kind, no spills."""
    k = HOPPER.kernel(name)
    lp = cuda_backend.plan(k, HOPPER.spec)
    source = (HOPPER.folder / f"{name}.cu").read_text()
    result = nvcc.compile_check(source, "sm_90a", name_for_errors=f"{name}.cu",
                                include_dirs=(HOPPER.folder,),
                                extra_flags=("-Werror", "all-warnings"))
    for v in lp.variants:
        usage = result.kernels[v.path("wgmma").steps[-1].entry]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
