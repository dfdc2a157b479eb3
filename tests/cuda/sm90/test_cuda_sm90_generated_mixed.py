"""The generated weight-only Hopper path (docs/cuda-hopper.md, "Weight-only
W8A16 / W4A16"): bf16 / f16 activations times int8, int4, fp4, e4m3 or e5m2
weights [n, k] take gg_gemm_sm90_mixed.cuh on sm_90a: the operands swapped
(the weights are wgmma's A, widened into registers; the activations its B
from shared memory), per-K-block weight scales in an FP32 promotion, the
fragment transposed in the epilogue.

Checked here: the plan (bm rows of lhs from the LUT entry's m, 128 weight
rows, raw-byte weight maps with a 64- or 32-byte swizzle), the kernels that
stay on mma.sync and why, the generated kernels on an emulated sm_90a
device against the reference (m = 1, ragged m / n / k and scale blocks,
zero-size groups, sums < m, g = 16, group_offset + existing_out, the masked
layout, persistent grids smaller than the tile count, poisoned outputs)
through the Python and the C++ launcher, planted bugs (a fragment built into
the registers of an in-flight wgmma, the weights read without their
swizzle, the epilogue's transpose undone, a stage read before its TMA
arrived), and nvcc for sm_90a (HGMMA with A in registers fed by UTMALDG, no
HMMA, no spills, no instruction touching an in-flight wgmma's registers).

The fused gate-up (silu_mul: gate and up rows interleaved 8 by 8) is
tested here too, with planted bugs of its own.

Unmarked: the plan tests, one dense int4, one grouped int8, one gate-up
and one masked case, the C++ launcher, one planted bug and one nvcc build;
the rest are `slow`."""

from __future__ import annotations

import pytest
from sm90_helpers import OVERLAPPED_WEIGHT_ONLY_LOOP, SM90, HopperSpec, fresh_seed

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
  lhs bf16 [m, k]
  out bf16
  tile m=64 n=128 k=64
  stages 3
  backends cuda
}

# W8A16, per-channel f32 scales in the epilogue; a 16-row tile for small m.
kernel w8 {
  op dense
  rhs int8 [n, k]
  rhs_scale per_channel
  tile_rule m<=16 -> m=16 n=128 k=64
}

# W4A16 (w4a16_gemm): per-128 group scales along K (bf16), bias, silu.
kernel w4 {
  op dense
  rhs int4 packed [n, k]
  rhs_scale block n=1 k=128 bf16
  bias f32 [n]
  epilogue silu
}

# f16 activations, e5m2 weights, no scale, f32 out.
kernel h_e5 {
  op dense
  lhs f16 [m, k]
  rhs e5m2 [n, k]
  out f32
}

# fp4 weights with e8m0 block scales of 64 along K (MXFP4-like), f16 out.
kernel w_fp4 {
  op dense
  rhs fp4 packed [n, k]
  out f16
  rhs_scale block n=1 k=64 e8m0
}

# Grouped MoE experts (moe_w8a16_grouped_gemm): rhs_scale [g, k/128, 1, n].
kernel wg8 {
  op grouped
  rhs int8 [g, n, k] | e4m3 [g, n, k]
  rhs_scale kblock k=128 f32
  bias f32 [g, 1, n]
}

# Grouped W4A16 (moe_w4a16_grouped_gemm), 256-wide K blocks.
kernel wg4 {
  op grouped
  rhs int4 packed [g, n, k]
  rhs_scale kblock k=256 bf16
  bias f32 [g, 1, n]
  tile m=32 n=128 k=64
}

# The masked layout (lhs [g, m, k]: m rows of capacity per group, masked_m
# [g] valid) with int8 experts.
kernel wm8 {
  op grouped
  lhs bf16 [g, m, k]
  rhs int8 [g, n, k]
  rhs_scale kblock k=128 f32
}

# The fused gate-up of W4A16 experts: rhs rows [0, n/2) gate, [n/2, n) up,
# out = silu(gate) * up of n/2 columns; a group bias over both halves.
kernel wg4_gate {
  op grouped
  rhs int4 packed [g, n, k]
  rhs_scale kblock k=128 bf16
  bias f32 [g, 1, n]
  epilogue silu_mul
}

# Dense int8 gate-up, per-channel scales of both halves, f32 out.
kernel w8_gate {
  op dense
  rhs int8 [n, k]
  out f32
  rhs_scale per_channel
  epilogue silu_mul
  tile m=32 n=128 k=64
}

# Weights [k, n] and a scale block of 32 along K: mma.sync.
kernel w8_kn {
  op dense
  rhs int8 [k, n]
}

kernel w8_k32 {
  op dense
  rhs int8 [n, k]
  rhs_scale block n=1 k=32 f32
  tile m=64 n=128 k=32
}
"""

MIXED = HopperSpec("sm90mixed", SPEC)


# ---------------------------------------------------------------------------
# The plan.


def test_plan_of_weight_only_tiles():
    w4 = tile_gemm.plan(MIXED.kernel("w4"), MIXED.spec).body_tiles("wgmma")[0]
    assert (w4.mixed, w4.bm, w4.bn, w4.bk) == (True, 64, 128, 64)
    assert (w4.a_stage, w4.b_stage) == (64 * 128, 128 * 32)  # 4-bit rows of 32 bytes
    assert w4.wgmma == "m64n64k16 (A from registers)"
    w8 = tile_gemm.plan(MIXED.kernel("w8"), MIXED.spec).body_tiles("wgmma")
    assert [(t.bm, t.b_stage) for t in w8] == [(16, 128 * 64), (64, 128 * 64)]
    for t in w8:
        assert t.smem_bytes <= 232448 and t.stages >= 2


def test_weight_maps_are_raw_bytes_with_the_row_span_swizzle():
    for name, inner_bytes in (("w4", 32), ("wg8_rhs_int8", 64), ("wg4", 32)):
        k = MIXED.kernel(name)
        t = tile_gemm.plan(k, MIXED.spec).body_tiles("wgmma")[0]
        lhs, rhs = wgmma.maps(k, t)
        assert (lhs.dtype, lhs.box, lhs.swizzle) == ("bfloat16", (64, t.bm), 128)
        assert rhs.dtype == "uint8" and rhs.box[:2] == (inner_bytes, 128)
        assert rhs.swizzle == inner_bytes
        env = {"m": 300, "n": 384, "k": 1024, "g": 4}
        dims, strides = rhs.eval(env)
        assert dims[0] == 1024 * k.rhs_operand.dtype.bits // 8 and dims[1] == 384
        assert strides[0] == dims[0]


def test_which_weight_only_kernels_take_the_hopper_path():
    for name in ("w8", "w4", "h_e5", "w_fp4", "wg8_rhs_int8", "wg8_rhs_e4m3", "wg4", "wm8",
                 "wg4_gate", "w8_gate"):
        k = MIXED.kernel(name)
        assert k.wgmma_mixed and k.uses_wgmma(SM90) and not k.uses_wgmma("sm_89"), name
    reasons = {name: MIXED.kernel(name).wgmma_obstacle() for name in ("w8_kn", "w8_k32")}
    assert "[n, k]" in reasons["w8_kn"]
    assert "k=32" in reasons["w8_k32"]


def test_gate_up_tile_interleaves_gate_and_up_rows_8_by_8():
    k = MIXED.kernel("wg4_gate")
    t = tile_gemm.plan(k, MIXED.spec).body_tiles("wgmma")[0]
    assert (t.bm, t.bn, t.bn_out, t.c_stride) == (64, 128, 64, 8 + 8)
    _, rhs = wgmma.maps(k, t)
    assert rhs.box == (32, 8, 1)  # 16 boxes of 8 rows a K tile
    # The whole stage still arrives: 16 boxes of 8 rows are the 128 rows.
    assert 16 * rhs.box[0] * rhs.box[1] == t.b_stage


def test_spec_weight_only_kernels_take_the_hopper_path():
    """specs/: W4A16 dense and the W8A16 / W4A16 experts take it."""
    from cuda_helpers import rendered

    for stem, names in (("dense", ("w4a16_gemm",)),
                        ("moe", ("moe_w8a16_grouped_gemm_rhs_int8",
                                 "moe_w8a16_grouped_gemm_rhs_e4m3", "moe_w4a16_grouped_gemm"))):
        spec = rendered(stem).spec
        for name in names:
            tiles = tile_gemm.plan(spec.kernel(name), spec).body_tiles("wgmma")
            assert tiles and all(t.mixed for t in tiles), name


# ---------------------------------------------------------------------------
# The emulator.

DENSE = [
    ("w4", Case("ragged", 130, 200, 320), 2),
    ("w4", Case("m1", 1, 136, 256), 1),
    ("w8", Case("lut_small_m", 13, 264, 112), 2),
    ("w8", Case("ragged", 150, 136, 208), 3),
    ("h_e5", Case("k16", 70, 128, 16), 1),
    ("w_fp4", Case("ragged_blocks", 90, 136, 224), 2),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}",
                 marks=() if (n, c.name) == ("w4", "ragged") else pytest.mark.slow)
    for n, c, s in DENSE])
def test_dense_weight_only_on_the_emulator(name, case, num_sms):
    MIXED.check(name, case, num_sms, seed=fresh_seed())


GROUPED = [
    ("wg8_rhs_int8", Case("shard", 260, 136, 272, group_sizes=(60, 100, 0, 100), group_offset=1,
                          g_local=2, existing_out=True), 2),
    ("wg8_rhs_e4m3", Case("zero_size", 200, 128, 128, group_sizes=(40, 0, 130, 0)), 2),
    ("wg4", Case("g16", 150, 128, 320, group_sizes=(0, 20, 0, 1, 40, 0, 7, 30, 0, 20, 2,
                                                    0, 9, 0, 1, 0)), 3),
    ("wg4", Case("all_empty", 64, 128, 256, group_sizes=(0, 0, 0)), 1),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}",
                 marks=() if (n, c.name) == ("wg8_rhs_int8", "shard") else pytest.mark.slow)
    for n, c, s in GROUPED])
def test_grouped_weight_only_on_the_emulator(name, case, num_sms):
    MIXED.check(name, case, num_sms, seed=fresh_seed())


GATE = [
    ("wg4_gate", Case("shard", 200, 272, 256, group_sizes=(60, 70, 0, 70), group_offset=1,
                      g_local=2, existing_out=True), 2),
    ("w8_gate", Case("ragged", 70, 400, 144), 2),
    ("w8_gate", Case("m1", 1, 144, 64), 1),
]


@pytest.mark.parametrize("name,case,num_sms", [
    # In CI: the dense int8 gate-up (ragged). The grouped int4 shard is slow
    # (about 100 s on the emulator alone, near its 120 s limit under load).
    pytest.param(n, c, s, id=f"{n}-{c.name}",
                 marks=() if (n, c.name) == ("w8_gate", "ragged") else pytest.mark.slow)
    for n, c, s in GATE])
def test_gate_up_weight_only_on_the_emulator(name, case, num_sms):
    MIXED.check(name, case, num_sms, seed=fresh_seed())


MASKED = [
    ("wm8", Case("edges", 70, 136, 144, masked_m=(0, 70, 1, 65)), 2),
    ("wm8", Case("cap_5_g16", 5, 128, 128, masked_m=(5, 0, 1, 3, 9, -1, 0, 2, 5, 5, 0, 1, 4,
                                                      0, 5, 2)), 3),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}", marks=() if c.name == "edges" else pytest.mark.slow)
    for n, c, s in MASKED])
def test_masked_weight_only_on_the_emulator(name, case, num_sms):
    MIXED.check(name, case, num_sms, seed=fresh_seed())


def test_cpp_launcher_runs_the_weight_only_hopper_path():
    MIXED.check("wg4", Case("sums_lt_m", 120, 136, 256, group_sizes=(50, 0, 30)), 2,
                seed=fresh_seed(), cpp=True)


# ---------------------------------------------------------------------------
# Planted bugs under a generated kernel.

MIXED_PLANTED = {
    # The next K tile's fragments built into a second array while this K
    # tile's wgmmas run (the body as it was before the H200 run): ptxas gave
    # the new values the in-flight A registers (docs/cuda-hopper.md,
    # "Register-sourced wgmma hazards"); the emulator refuses any such work.
    "next_fragments_built_while_wgmmas_in_flight": (
        OVERLAPPED_WEIGHT_ONLY_LOOP,
        (r"a spin on an mbarrier \(mbarrier.try_wait\) while a wgmma.mma_async with A in registers is in "
        r"flight \(thread \d+, warpgroup \d, commit group \d+\): ptxas may give")),
    # This K tile's fragments rebuilt after its wgmmas were issued: the
    # in-flight A registers themselves change.
    "fragment_built_into_in_flight_registers": (
        [("      gg::wgmma_commit_group();\n      gg::wgmma_wait_group<0>();",
          ("      gg::wgmma_commit_group();\n      load_fragments<T>(s, st, cw, a);\n"
          "      gg::wgmma_wait_group<0>();"))],
        (r"widening weights into A fragments \(load_fragments\) while a wgmma.mma_async with A in "
        r"registers is in flight")),
    # The weights read as if the TMA had not swizzled them.
    "weights_read_unswizzled": (
        [("(tile + (x ^ (((x >> 7) & kMask) << 4)));", "(tile + x);")],
        None),
    # The epilogue's transpose undone: fragment rows taken as out rows.
    "epilogue_not_transposed": (
        [("    const int row = w.m0 + r, col = col0 + c;\n    if (row >= w.row_hi",
          "    const int row = w.m0 + c, col = col0 + r;\n    if (row >= w.row_hi")],
        None),
    # silu_mul: the up row paired with the wrong fragment element.
    "up_paired_with_the_wrong_element": (
        [("float x[2] = {d[i], d[i + 2]};", "float x[2] = {d[i], d[i + 4]};")], None),
    # silu_mul: the gate rows loaded together, then the up rows (no interleave).
    "gate_and_up_not_interleaved": (
        [("const int row = b0[r % 2] + kRunRows * (r / 2);",
          "const int row = b0[r / (kRuns / 2)] + kRunRows * (r % (kRuns / 2));")], None),
    # A K tile's weights read before its stage's full barrier: its wgmmas
    # then read activations a TMA load still fills.
    "weights_read_before_the_stage_arrived": (
        [("      gg::mbarrier_wait(&s.full[st], (it / T::kStages) & 1);\n      load_fragments",
          "      load_fragments")],
        r"still fills: no thread has waited on that barrier phase"),
}


@pytest.mark.parametrize("bug", [
    pytest.param(b, marks=() if b == "next_fragments_built_while_wgmmas_in_flight"
                 else pytest.mark.slow) for b in MIXED_PLANTED])
def test_planted_weight_only_bug_is_caught(bug):
    edits, report = MIXED_PLANTED[bug]
    kernel = "w8_gate" if "up" in bug else "w4"
    k = MIXED.kernel(kernel)
    # 8 K tiles over a ring of 3 stages; 4 tiles of the gate-up's 32 x 64
    # outputs, 4 of w4's 64 x 128.
    case = Case("ring", 40, 144, 512) if kernel == "w8_gate" else Case("ring", 100, 136, 512)
    inputs = case.inputs(k, 3)
    modules, name = MIXED.planted(kernel, edits)

    def run():
        return run_launcher(MIXED.launcher(kernel), "", name, inputs, modules=modules,
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
@pytest.mark.parametrize("name", ["w4", pytest.param("wg8_rhs_int8", marks=pytest.mark.slow),
                                  pytest.param("wg4_gate", marks=pytest.mark.slow),
                                  pytest.param("w8", marks=pytest.mark.slow),
                                  pytest.param("w_fp4", marks=pytest.mark.slow),
                                  pytest.param("wm8", marks=pytest.mark.slow)])
def test_generated_weight_only_entries_run_hgmma_from_registers_without_spills(name):
    lp = cuda_backend.plan(MIXED.kernel(name), MIXED.spec)
    source = (MIXED.folder / f"{name}.cu").read_text()
    result = nvcc.compile_check(source, SM90, name_for_errors=f"{name}.cu",
                                include_dirs=(MIXED.folder,),
                                extra_flags=("-Werror", "all-warnings"))
    text = nvcc.sass_text(result.cubin)
    sass = nvcc.parse_sass(text)
    # Nothing touches an in-flight wgmma's A registers or accumulators.
    hazards = nvcc.wgmma_register_hazards(text)
    assert not hazards, "\n".join(map(str, hazards[:20]))
    tiles = tile_gemm.plan(MIXED.kernel(name), MIXED.spec).body_tiles("wgmma")
    for v in lp.variants:
        hopper = v.path("wgmma").steps[-1]
        usage = result.kernels[hopper.entry]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
        assert usage.registers <= 168, usage
        code = sass[hopper.entry]
        # wgmma with A from registers: HGMMA.64xBMx16 whose A operand (after
        # the accumulator) is a register, not a gdesc; no mma.sync HMMA.
        hgmma = nvcc.sass_instructions(text, hopper.entry, "HGMMA")
        assert hgmma, hopper.entry
        for line in hgmma:
            opcode, operands = line.split(None, 1)
            assert opcode.startswith(f"HGMMA.64x{tiles[v.index].bm}x16.F32."), line
            assert operands.split(",")[1].strip().startswith("R"), line
        assert code.count("HMMA") == 0, hopper.entry
        # The weights come from shared memory (LDS), which the TMA filled.
        assert code.count("UTMALDG") > 0 and code.count("LDS") > 0, hopper.entry
        assert code.count("USETMAXREG") == 2, hopper.entry
