"""The generated Hopper path of FP8 kernels (docs/cuda-hopper.md, "FP8 on
the generated path"): e4m3 / e5m2 x the same type with rhs [n, k] take the
wgmma body on sm_90a, with per-tensor, per-token and per-channel scales in
the epilogue and DeepSeek's block scales (1 x 128 lhs, 128 x 128 rhs, f32,
bf16 or e8m0) in the FP32 promotion of each 128-wide K tile. Checked here:
the plan (K tile 128, N at most 128 and inside one rhs scale block, UINT8
tensor maps, the scale arguments), the kernels that stay on mma.sync, and
the generated kernels on an emulated sm_90a device against the reference
(m = 1, ragged m / n / k and scale blocks, k = 16, zero-size groups, sums
< m, g = 16, group_offset + existing_out, persistent grids smaller than the
tile count, poisoned outputs), through the Python and the C++ launcher, a
planted promotion bug under a generated kernel, and nvcc for sm_90a
(QGMMA fed by UTMALDG, no HMMA, no spills).

The generated gate-up (silu_mul) and masked-layout kernels on the Hopper
body are tested here too, with planted bugs of their own.

Unmarked: the plan tests, one dense and one grouped block-scaled case, the
C++ launcher (grouped per-token/channel), one gate-up and one masked case,
one planted promotion bug, the nvcc build of the FP8 gate-up; the rest are
`slow`."""

from __future__ import annotations

import numpy as np
import pytest
from sm90_helpers import SM90, HopperSpec, fresh_seed
from test_cuda_sm90_gemm_fp8 import PLANTED as FP8_PLANTED

from gemmgen.archs import shared_memory_limit
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.backends.cuda.gemm import wgmma
from gemmgen.cases import Case
from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, reference

SPEC = """
target cuda {
  archs sm_89 sm_90a
}

defaults {
  lhs e4m3 [m, k]
  out bf16
  tile m=128 n=128 k=128
  backends cuda
}

# Per-token x per-channel f32 scales in the epilogue.
kernel f_tok {
  op dense
  rhs e4m3 [n, k]
  lhs_scale per_token
  rhs_scale per_channel
}

# e5m2, a per-tensor f32 x per-channel e8m0 scale, a bias and gelu, f32 out,
# a 64-wide tile from the LUT for small m.
kernel f_e5 {
  op dense
  lhs e5m2 [m, k]
  rhs e5m2 [n, k]
  out f32
  lhs_scale per_tensor
  rhs_scale per_channel e8m0
  bias f32 [n]
  epilogue gelu
  tile_rule m<=64 -> m=64 n=64 k=128
}

# DeepSeek block-scaled W8A8, f32 scales.
kernel f_blk {
  op dense
  rhs e4m3 [n, k]
  lhs_scale per_token_group k=128
  rhs_scale block n=128 k=128
}

# The same with e8m0 scales (exact promotion when a product leaves f32)
# and f16 out.
kernel f_blk_e8 {
  op dense
  rhs e4m3 [n, k]
  out f16
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=128 k=128 e8m0
}

# Grouped, per-token x per-expert-channel scales.
kernel fg_tok {
  op grouped
  rhs e4m3 [g, n, k]
  lhs_scale per_token
  rhs_scale per_channel
}

# Grouped DeepSeek W8A8 (moe_w8a8_grouped_gemm), bf16 rhs block scales,
# rhs blocks of 64 columns.
kernel fg_blk {
  op grouped
  rhs e4m3 [g, n, k]
  lhs_scale per_token_group k=128
  rhs_scale block n=64 k=128 bf16
  tile m=64 n=64 k=128
}

# FP8 [k, n]: wgmma reads FP8 K-major only, so mma.sync everywhere.
kernel f_kn {
  op dense
  rhs e4m3 [k, n]
}

# The fused gate-up of a block-scaled MoE (moe_w8a8_gateup_silu): rhs rows
# [0, n/2) gate, [n/2, n) up; out = silu(gate) * up, [m, n/2].
kernel fg_gate {
  op grouped
  rhs e4m3 [g, n, k]
  lhs_scale per_token_group k=128
  rhs_scale block n=128 k=128
  epilogue silu_mul
  tile m=64 n=128 k=128
}

# 16-bit gate-up with rhs [k, n] and a bias over both halves: MN-major
# boxes of 64 columns, two per half.
kernel h_gate_kn {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [k, n]
  bias f32 [n]
  epilogue silu_mul
  tile m=64 n=256 k=32
  stages 2
}

# The masked layout (decode-time MoE): lhs [g, m, k] of m rows of capacity
# per group, masked_m [g] valid; block-scaled W8A8 like moe_fp8_masked_gemm.
kernel fm_blk {
  op grouped
  lhs e4m3 [g, m, k]
  rhs e4m3 [g, n, k]
  lhs_scale per_token_group k=128
  rhs_scale block n=128 k=128
  tile m=64 n=128 k=128
}

# bf16 masked with per-token scales, a group bias and silu_mul.
kernel hm_gate {
  op grouped
  lhs bf16 [g, m, k]
  rhs bf16 [g, n, k]
  lhs_scale per_token
  bias f32 [g, 1, n]
  epilogue silu_mul
  tile m=64 n=128 k=32
}
"""

FP8 = HopperSpec("hopper_fp8", SPEC)


# ---------------------------------------------------------------------------
# The plan (no compiler).


def test_plan_of_fp8_kernels():
    spec = FP8.spec
    want = {"f_tok": [(128, 128)], "f_e5": [(64, 128), (128, 128)], "f_blk": [(128, 128)],
            "f_blk_e8": [(128, 128)], "fg_tok": [(128, 128)], "fg_blk": [(64, 128)], "f_kn": [],
            "fg_gate": [(128, 128)], "h_gate_kn": [(256, 64)], "fm_blk": [(128, 128)],
            "hm_gate": [(128, 64)]}
    for name, tiles in want.items():
        k = FP8.kernel(name)
        p = tile_gemm.plan(k, spec)
        assert [(t.bn, t.bk) for t in p.body_tiles("wgmma")] == tiles, name
        assert (k.wgmma_obstacle() is None) == bool(tiles), name
        silu = k.epilogue.activation.value == "silu_mul"
        for t in p.body_tiles("wgmma"):
            assert t.wgmma == f"m64n{t.bn}k{256 // k.lhs.dtype.bits}"
            assert t.bn_out == (t.bn // 2 if silu else t.bn)
            assert t.a_stage == 128 * 128 and t.b_stage == t.bn * 128
            assert t.smem_bytes <= shared_memory_limit(SM90)
            more = wgmma.sm90_smem_bytes(t.bn, t.stages + 1, k.out, t.bn_out)
            assert t.stages == wgmma.SM90_MAX_STAGES or more > shared_memory_limit(SM90)
    assert "wgmma reads FP8 operands K-major only" in FP8.kernel("f_kn").wgmma_obstacle()


def test_fp8_launch_passes_uint8_maps_and_the_scales():
    lm = FP8.launcher("f_blk")
    dims = lm.validate(lhs=np.zeros((300, 256), np.uint8), rhs=np.zeros((200, 256), np.uint8),
                       lhs_scale=np.zeros((300, 2), np.float32),
                       rhs_scale=np.zeros((2, 2), np.float32))
    (step,) = lm.launches(dims, 90, 132)
    assert (step.entry, step.grid, step.block) == ("f_blk_sm90", (6, 1, 1), (384, 1, 1))
    map_lhs, map_rhs, lhs_scale, rhs_scale = step.args[:4]
    # CU_TENSOR_MAP_DATA_TYPE_UINT8 (0); boxes of one 128-byte row of 128 FP8 elements.
    assert (map_lhs.dtype, map_lhs.dims, map_lhs.strides, map_lhs.box) == (0, (256, 300), (256,), (128, 128))
    assert (map_rhs.dtype, map_rhs.dims, map_rhs.strides, map_rhs.box) == (0, (256, 200), (256,), (128, 128))
    assert (lhs_scale, rhs_scale) == ("lhs_scale", "rhs_scale")
    text = (FP8.folder / "f_blk.cu").read_text()
    assert "gg::gemm::sm90::dense<Sm90Tile0>(gg_smem, &map_lhs, &map_rhs, lhs_scale, rhs_scale," in text
    assert "CU_TENSOR_MAP_DATA_TYPE_UINT8" in (FP8.folder / "f_blk.cu").read_text()
    # Grouped: a 3D map over rhs [g, n, k].
    lg = FP8.launcher("fg_blk")
    dims = lg.validate(lhs=np.zeros((64, 256), np.uint8), rhs=np.zeros((3, 192, 256), np.uint8),
                       group_sizes=np.array([30, 0, 34], np.int32),
                       lhs_scale=np.zeros((64, 2), np.float32),
                       rhs_scale=np.zeros((3, 3, 2), np.uint16))
    steps = lg.launches(dims, 90, 132)
    assert [s.entry for s in steps] == ["fg_blk_fill", "fg_blk_worklist", "fg_blk_sm90"]
    assert steps[2].args[1].dims == (256, 192, 3) and steps[2].args[1].box == (128, 64, 1)
    # Other devices: the mma.sync path.
    assert [s.entry for s in lm.launches(lm.validate(
        lhs=np.zeros((3, 256), np.uint8), rhs=np.zeros((5, 256), np.uint8),
        lhs_scale=np.zeros((3, 2), np.float32), rhs_scale=np.zeros((1, 2), np.float32)),
        89, 128)] == ["f_blk"]


def test_spec_fp8_kernels_on_sm90a_get_the_hopper_path():
    """specs/: the FP8 x FP8 [n, k] kernels take it, the fused gate-up too;
    the [k, n] one stays on mma.sync."""
    from cuda_helpers import gemm_kernels, rendered

    KERNELS = gemm_kernels()

    have = set()
    for stem, name in KERNELS:
        k = rendered(stem).spec.kernel(name)
        if k.lhs.dtype.bits == 8 and k.op.value in ("dense", "grouped") and \
                tile_gemm.plan(k, rendered(stem).spec).body_tiles("wgmma"):
            have.add(name)
    assert {"moe_fp8_grouped_gemm", "moe_w8a8_grouped_gemm", "moe_w8a8_gateup_silu"} <= have
    assert "moe_fp8_grouped_gemm_kn" not in have


# ---------------------------------------------------------------------------
# On the emulator of an sm_90a device, against the reference.

DENSE = [
    ("f_tok", Case("ragged", 130, 136, 272), 2),
    ("f_tok", Case("m1", 1, 128, 128), 1),
    ("f_tok", Case("k16", 200, 72, 16), 1),
    ("f_e5", Case("lut_small_m", 50, 136, 144), 1),
    ("f_e5", Case("ragged", 150, 264, 400), 3),
    ("f_blk", Case("ragged_blocks", 130, 264, 400), 2),
    ("f_blk", Case("m1", 1, 136, 144), 1),
    ("f_blk_e8", Case("ragged", 140, 200, 272), 2),
]
FAST_DENSE = {("f_blk", "ragged_blocks")}


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}",
                 marks=() if (n, c.name) in FAST_DENSE else pytest.mark.slow)
    for n, c, s in DENSE])
def test_dense_fp8_on_the_emulator(name, case, num_sms):
    FP8.check(name, case, num_sms, seed=fresh_seed())


GROUPED = [
    ("fg_blk", Case("shard", 260, 136, 272, group_sizes=(60, 100, 0, 100), group_offset=1,
                    g_local=2, existing_out=True), 2),
    ("fg_blk", Case("g16", 300, 64, 144, group_sizes=(0, 20, 0, 1, 40, 0, 7, 30, 0, 50, 2,
                                                      0, 60, 10, 0, 20)), 4),
    ("fg_tok", Case("zero_size", 300, 136, 208, group_sizes=(40, 0, 130, 0, 100)), 3),
    ("fg_tok", Case("all_empty", 64, 128, 128, group_sizes=(0, 0, 0)), 1),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}",
                 marks=() if c.name == "shard" else pytest.mark.slow)
    for n, c, s in GROUPED])
def test_grouped_fp8_on_the_emulator(name, case, num_sms):
    FP8.check(name, case, num_sms, seed=fresh_seed())


def test_cpp_launcher_runs_the_fp8_hopper_path():
    FP8.check("fg_tok", Case("sums_lt_m", 200, 136, 144, group_sizes=(50, 0, 70)), 2,
              seed=fresh_seed(), cpp=True)


# ---------------------------------------------------------------------------
# silu_mul on the Hopper body: a tile's B is the gate half over the up half
# (two half boxes), its output half as wide.


def test_gate_up_launch_takes_half_boxes_and_needs_whole_scale_blocks_at_n_half():
    lg = FP8.launcher("fg_gate")

    def steps(n):
        return lg.launches(lg.validate(
            lhs=np.zeros((64, 256), np.uint8), rhs=np.zeros((2, n, 256), np.uint8),
            group_sizes=np.array([30, 34], np.int32), lhs_scale=np.zeros((64, 2), np.float32),
            rhs_scale=np.zeros((2, -(-n // 128), 2), np.float32)), 90, 132)

    hopper = steps(512)
    assert hopper[-1].entry == "fg_gate_sm90"
    assert hopper[-1].args[1].box == (128, 64, 1)  # a half of the 128 B rows
    # (grouped: cdiv(m, 128) + g items) x cdiv(256, 64) output tiles: 3 x 4.
    assert hopper[-1].grid == (12, 1, 1)
    # n / 2 = 136 is not a whole number of 128-column scale blocks: mma.sync.
    assert steps(272)[-1].entry == "fg_gate"
    lk = FP8.launcher("h_gate_kn")
    dims = lk.validate(lhs=np.zeros((10, 64), np.uint16), rhs=np.zeros((64, 400), np.uint16),
                       bias=np.zeros(400, np.float32))
    step = lk.launches(dims, 90, 132)[-1]
    assert step.args[1].box == (64, 64) and step.grid == (2, 1, 1)  # 200 out columns / 128


GATE = [
    ("fg_gate", Case("shard", 260, 512, 272, group_sizes=(60, 100, 0, 100), group_offset=1,
                     g_local=2, existing_out=True), 2),
    ("fg_gate", Case("zero_size_m1", 1, 256, 144, group_sizes=(0, 1, 0)), 1),
    ("h_gate_kn", Case("ragged", 150, 400, 136), 2),
    ("h_gate_kn", Case("m1", 1, 272, 72), 1),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}",
                 marks=() if (n, c.name) == ("fg_gate", "shard") else pytest.mark.slow)
    for n, c, s in GATE])
def test_gate_up_on_the_emulator(name, case, num_sms):
    FP8.check(name, case, num_sms, seed=fresh_seed())


# ---------------------------------------------------------------------------
# The masked layout on the Hopper body: every (group, m tile) pair an item of
# the persistent grid, rows past a group's count written as zeros (a tile
# past it loads nothing), no fill and no worklist.


def test_masked_launch_is_one_persistent_gemm_over_every_group_tile():
    lm = FP8.launcher("fm_blk")
    dims = lm.validate(lhs=np.zeros((3, 200, 256), np.uint8), rhs=np.zeros((3, 256, 256), np.uint8),
                       masked_m=np.array([0, 200, 7], np.int32),
                       lhs_scale=np.zeros((3, 200, 2), np.float32),
                       rhs_scale=np.zeros((3, 2, 2), np.float32))
    (step,) = lm.launches(dims, 90, 132)
    assert step.entry == "fm_blk_sm90"
    assert step.grid == (12, 1, 1)  # 3 groups x 2 m tiles of 128 x 2 n tiles
    assert step.args[0].dims == (256, 600) and step.args[0].box == (128, 128)  # g * m rows
    assert step.args[1].dims == (256, 256, 3)
    assert "gg::gemm::sm90::masked<Sm90Tile0>(" in (FP8.folder / "fm_blk.cu").read_text()
    assert [s.entry for s in lm.launches(dims, 89, 128)] == ["fm_blk"]


MASKED = [
    ("fm_blk", Case("edges", 200, 256, 272, masked_m=(0, 200, 1, 129)), 3),
    ("fm_blk", Case("cap_101_g16", 101, 128, 144,
                    masked_m=(0, 101, 1, 65, 3, 0, 100, 7, 64, 0, 2, 99, 5, 0, 101, 33)), 4),
    ("hm_gate", Case("gate", 150, 272, 72, masked_m=(150, 0, 20, 149)), 2),
    ("hm_gate", Case("all_empty", 64, 128, 64, masked_m=(0, 0)), 1),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}",
                 marks=() if (n, c.name) == ("fm_blk", "edges") else pytest.mark.slow)
    for n, c, s in MASKED])
def test_masked_on_the_emulator(name, case, num_sms):
    FP8.check(name, case, num_sms, seed=fresh_seed())


# ---------------------------------------------------------------------------
# The planted promotion bugs of tests/cuda/sm90/test_cuda_sm90_gemm_fp8.py, under a
# generated kernel: its launch sequence, tile and maps, the body edited.


@pytest.mark.parametrize("bug", [
    pytest.param(b, marks=() if b == "release_before_retire" else pytest.mark.slow)
    for b in FP8_PLANTED])
def test_planted_promotion_bug_under_the_generated_fp8_kernel_is_caught(bug):
    edits, report = FP8_PLANTED[bug]
    inputs = Case("ring_wraps", 256, 128, 1024).inputs(FP8.kernel("f_blk"), 5)  # 8 K tiles
    modules, name = FP8.planted("f_blk", edits)
    with pytest.raises(EmuKernelError, match=report):
        run_launcher(FP8.launcher("f_blk"), "", name, inputs, modules=modules, arch=SM90,
                     num_sms=1)


# silu_mul's own: the up half never loaded (one box of a half's rows for the
# whole B tile: the barrier waits for bytes that never come), and the up
# column paired with the wrong fragment element (a wrong product).
GATE_PLANTED = {
    "one_box_for_both_halves": (
        [("constexpr int kRuns = kPaired<T> ? (kMixed<T> ? 16 : 2) : 1;", "constexpr int kRuns = 1;")],
        r"transaction bytes missing \(expect_tx announced \d+, TMA delivered \d+\)"),
    "up_paired_with_the_wrong_element": (
        [("float x[2] = {d[i], d[i + T::kBN / 4]};", "float x[2] = {d[i], d[i + T::kBN / 8]};")],
        None),
}


@pytest.mark.parametrize("bug", [
    pytest.param(b, marks=pytest.mark.slow) for b in GATE_PLANTED])
def test_planted_gate_up_bug_is_caught(bug):
    edits, report = GATE_PLANTED[bug]
    k = FP8.kernel("fg_gate")
    inputs = Case("gate", 200, 256, 272, group_sizes=(120, 80)).inputs(k, 9)
    modules, name = FP8.planted("fg_gate", edits)

    def run():
        return run_launcher(FP8.launcher("fg_gate"), "", name, inputs, modules=modules,
                            arch=SM90, num_sms=2)

    if report is not None:
        with pytest.raises(EmuKernelError, match=report):
            run()
    else:
        result = compare(run(), reference(k, **inputs), k, k=272, inputs=inputs)
        assert not result.passed


# The masked layout's own: the consumers run the K loop of a tile past its
# group's count, whose stages the producer never loads (a deadlock), and the
# rows past the count never zeroed (the poisoned output shows).
MASKED_PLANTED = {
    "consumer_loops_on_an_empty_tile": (
        [("    const int ktiles = ktiles_of<L>(w, (k + T::kBK - 1) / T::kBK);",
          "    const int ktiles = (k + T::kBK - 1) / T::kBK;")],
        r"(?s)deadlock in block .*mbarrier.try_wait.parity"),
    "rows_past_the_count_not_zeroed": (
        [("    w.zero_hi = base + (lo + T::kBM < g.cap ? lo + T::kBM : g.cap);",
          "    w.zero_hi = base + (lo + T::kBM < g.cap ? lo + T::kBM : g.cap);\n    w.zero_hi = end;")],
        None),
}


@pytest.mark.parametrize("bug", [
    pytest.param(b, marks=pytest.mark.slow) for b in MASKED_PLANTED])
def test_planted_masked_bug_is_caught(bug):
    edits, report = MASKED_PLANTED[bug]
    k = FP8.kernel("fm_blk")
    case = Case("edges", 200, 128, 144, masked_m=(0, 200, 1, 100))
    inputs = case.inputs(k, 4)
    modules, name = FP8.planted("fm_blk", edits)

    def run():
        return run_launcher(FP8.launcher("fm_blk"), "", name, inputs, modules=modules,
                            arch=SM90, num_sms=2)

    if report is not None:
        with pytest.raises(EmuKernelError, match=report):
            run()
    else:
        assert not compare(run(), reference(k, **inputs), k, k=case.k, inputs=inputs).passed


# ---------------------------------------------------------------------------
# nvcc for sm_90a.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(
    nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("name", [pytest.param("fg_blk", marks=pytest.mark.slow),
                                  pytest.param("f_e5", marks=pytest.mark.slow),
                                  pytest.param("f_blk_e8", marks=pytest.mark.slow),
                                  "fg_gate", pytest.param("fm_blk", marks=pytest.mark.slow)])
def test_generated_fp8_hopper_entries_run_qgmma_on_tma_without_spills(name):
    lp = cuda_backend.plan(FP8.kernel(name), FP8.spec)
    source = (FP8.folder / f"{name}.cu").read_text()
    result = nvcc.compile_check(source, SM90, name_for_errors=f"{name}.cu",
                                include_dirs=(FP8.folder,), extra_flags=("-Werror", "all-warnings"))
    sass = nvcc.sass_summary(result.cubin)
    for v in lp.variants:
        hopper = v.path("wgmma").steps[-1]
        usage = result.kernels[hopper.entry]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
        code = sass[hopper.entry]
        # FP8 wgmma is QGMMA in SASS; no 16-bit HGMMA and no mma.sync HMMA.
        assert code.count("QGMMA") > 0, hopper.entry
        assert usage.registers <= 168, usage  # the consumers' 232 after setmaxnreg
        assert code.count("HGMMA") == 0 and code.count("HMMA") == 0, hopper.entry
        assert code.count("UTMALDG") > 0 and code.count("USETMAXREG") == 2, hopper.entry
