"""The weight-only (W8A16 / W4A16) tile of the sm_100a body
(gg_gemm_sm100_mixed.cuh; docs/cuda-sm100.md, "Weight-only W8A16 / W4A16"):
bf16 / f16 activations times int8, int4, fp4, e4m3 or e5m2 weights [n, k],
the raw weights loaded by TMA, widened to 16 bits in shared memory by a
transform warpgroup (the UMMA K-major layout, 128-byte swizzle), then
tcgen05.mma kind::f16; per-K-block weight scales promoted per K tile into
f32 sums kept in TMEM, each column times its own scale.

Checked here: the plan (the 128 x 128 x 64 tile of 320 threads, raw-byte
weight maps, stages within sm_100a's shared memory, TMEM columns), the
generated kernels on an emulated sm_100a device against the reference on
fresh random inputs with poisoned outputs (every weight type with a scale
mode: int8 per_channel, int4 block, fp4 e8m0 block, e4m3 kblock grouped,
e5m2 per_tensor; m = 1, partial tiles, k not a multiple of the K tile,
grouped with zero-size groups, group_offset + existing_out, the masked
layout, silu_mul gate-up, persistent grids smaller than the tile count),
the C++ launcher, planted bugs in the header under a generated kernel, and
nvcc for sm_100a (UTCHMMA fed by UTMALDG, STTM for the promoted sums, no
HMMA, no spills, shared memory within the limit).

Unmarked: the plan tests, one dense promoted case, one grouped gate-up
case, one planted bug and one nvcc build; the rest are `slow`."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from sm100_helpers import SM100, Sm100Spec

from gemmgen.archs import shared_memory_limit
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.backends.cuda.gemm import tcgen05
from gemmgen.cache import cache_dir
from gemmgen.cases import Case
from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError, EmuModule
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, reference
from gemmgen.runtime import RUNTIME_INCLUDE_DIR

SPEC = """
target cuda {
  archs sm_90a sm_100a
}

defaults {
  lhs bf16 [m, k]
  out bf16
  tile m=64 n=128 k=64
  backends cuda
}

# W8A16, per-channel f32 scales in the epilogue; m <= 16 takes the decode
# tile (the operands swapped, 16 lhs rows as the MMA's N).
kernel wo_int8 {
  op dense
  rhs int8 [n, k]
  rhs_scale per_channel
  tile_rule m<=16 -> m=16 n=128 k=64
}

# W4A16: per-128 group scales along K (bf16), bias, silu.
kernel wo_int4 {
  op dense
  rhs int4 packed [n, k]
  rhs_scale block n=1 k=128 bf16
  bias f32 [n]
  epilogue silu
}

# fp4 weights with e8m0 block scales of 64 along K, f16 out.
kernel wo_fp4 {
  op dense
  rhs fp4 packed [n, k]
  out f16
  rhs_scale block n=1 k=64 e8m0
}

# f16 activations, e5m2 weights, one f32 scale, f32 out.
kernel wo_e5m2 {
  op dense
  lhs f16 [m, k]
  rhs e5m2 [n, k]
  rhs_scale per_tensor f32
  out f32
}

# Grouped e4m3 experts with kblock scales and a group bias
# (moe_w8a16_grouped_gemm).
kernel wo_e4m3_grouped {
  op grouped
  rhs e4m3 [g, n, k]
  rhs_scale kblock k=128 f32
  bias f32 [g, 1, n]
}

# The fused gate-up of W4A16 experts: rhs rows [0, n/2) gate, [n/2, n) up.
kernel wo_int4_gateup {
  op grouped
  rhs int4 packed [g, n, k]
  rhs_scale kblock k=128 bf16
  bias f32 [g, 1, n]
  epilogue silu_mul
}

# Dense int8 gate-up, per-channel scales of both halves, f32 out.
kernel wo_int8_gateup {
  op dense
  rhs int8 [n, k]
  out f32
  rhs_scale per_channel
  epilogue silu_mul
}

# The masked layout (lhs [g, m, k]) with int8 experts.
kernel wo_int8_masked {
  op grouped
  lhs bf16 [g, m, k]
  rhs int8 [g, n, k]
  rhs_scale kblock k=128 f32
}

# Decode-sized MoE experts: the 32-row decode tile, kblock scales promoted
# per scale block in registers, a group bias.
kernel wo_int4_decode {
  op grouped
  rhs int4 packed [g, n, k]
  rhs_scale kblock k=128 bf16
  bias f32 [g, 1, n]
  tile m=32 n=128 k=64
}

# Weights [k, n]: no weight-only tile (mma.sync on every arch).
kernel wo_int8_kn {
  op dense
  rhs int8 [k, n]
}
"""

BODY = Sm100Spec("sm100wo", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check


def seed() -> int:
    return int(np.random.default_rng().integers(1 << 30))


# ---------------------------------------------------------------------------
# The plan (no compiler).


def test_plan_gives_weight_only_kernels_the_transform_tile():
    limit = shared_memory_limit(SM100)
    for k in BODY.spec.kernels:
        p = tile_gemm.plan(k, BODY.spec)
        tiles = p.body_tiles("tcgen05")
        if k.name == "wo_int8_kn":
            assert not tiles and not p.body_tiles("wgmma")
            assert "[n, k]" in k.tcgen05_obstacle()
            continue
        # The decode tile for LUT entries of m <= 32 (16 or 32 lhs rows),
        # else 128 rows.
        want = {"wo_int8": (16, 128), "wo_int4_decode": (32,)}.get(k.name, (128,))
        assert tuple(t.bm for t in tiles) == want, k.name
        for t in tiles:
            assert t.mixed and (t.bn, t.bk, t.threads) == (128, 64, 320), k.name
            assert t.swap == (t.bm < 128) and t.a_stage == t.bm * 128
            wb = k.rhs_operand.dtype.bits
            assert t.raw_stage == 128 * 64 * wb // 8
            silu = k.epilogue.activation.value == "silu_mul"
            assert t.bn_out == (64 if silu else 128)
            smem = tcgen05.sm100_mixed_smem_bytes(t.stages, k.out, wb, t.bm)
            assert t.smem_bytes == smem <= limit
            assert (t.stages == tcgen05.SM100_MAX_STAGES
                    or tcgen05.sm100_mixed_smem_bytes(t.stages + 1, k.out, wb, t.bm) > limit)
            blocks = k.rhs_scale.mode.value in ("block", "kblock")
            assert t.promoted == blocks, k.name
            # Two accumulators of 128 columns (and the promoted sums), or
            # the decode tile's two of bm (at least 32 columns).
            assert t.tmem_cols == (max(32, 2 * t.bm) if t.swap else 512 if blocks else 256)
        # The Hopper weight-only tile beside it, for sm_90a.
        assert p.body_tiles("wgmma")[0].mixed


def test_launchers_take_the_weight_only_tile_on_10_0():
    text = (BODY.folder / "wo_int4_gateup.cu").read_text()
    assert 'extern "C" __global__ void __launch_bounds__(320, 1) wo_int4_gateup_sm100(' in text
    assert "gg::gemm::sm100_mixed::grouped<Sm100Tile0>(" in text
    assert "static constexpr int kRawStage = 4096;" in text
    lm = launcher("wo_int4_gateup")
    k = kernel("wo_int4_gateup")
    inputs = Case("c", 64, 256, 128, group_sizes=(30, 34)).inputs(k, 1)
    dims = lm.validate(**inputs)
    steps = lm.launches(dims, 100, 148)
    assert [s.entry for s in steps] == ["wo_int4_gateup_fill", "wo_int4_gateup_worklist",
                                        "wo_int4_gateup_sm100"]
    assert steps[2].block == (320, 1, 1)
    # The raw weights: bytes (k / 2 of them a row), 32-byte rows of a K
    # tile, 8-row boxes (the gate and up rows interleaved 8 by 8).
    rhs_map = steps[2].args[1]
    assert rhs_map.box == (32, 8, 1) and rhs_map.dims == (64, 256, 2)
    assert lm.launches(dims, 90, 132)[-1].entry == "wo_int4_gateup_sm90"
    assert lm.launches(dims, 89, 128)[-1].entry == "wo_int4_gateup"


# ---------------------------------------------------------------------------
# On the emulator of an sm_100a device, against the reference.

CASES = [
    # Promoted int4 blocks, bias, silu: ragged m / n, k not a multiple of 64.
    ("wo_int4", Case("ragged", 130, 136, 352), 2, True),
    ("wo_int4", Case("m1", 1, 128, 256), 1, False),
    ("wo_int8", Case("k_ragged", 200, 264, 80), 2, False),
    ("wo_int8", Case("m1", 1, 136, 48), 1, True),
    ("wo_int8", Case("decode_m13", 13, 300, 208), 2, False),
    ("wo_fp4", Case("e8m0_blocks", 140, 200, 320), 2, False),
    ("wo_e5m2", Case("k16", 129, 130, 16), 1, False),
    ("wo_e4m3_grouped", Case("zero_size", 300, 136, 272, group_sizes=(40, 0, 130, 0, 130)), 3,
     False),
    ("wo_e4m3_grouped", Case("shard", 260, 128, 128, group_sizes=(60, 100, 0, 100),
                             group_offset=1, g_local=2, existing_out=True), 2, False),
    ("wo_int4_gateup", Case("gateup_shard", 200, 272, 192, group_sizes=(70, 0, 100, 30),
                            group_offset=1, g_local=2, existing_out=True), 2, True),
    ("wo_int4_gateup", Case("gateup_m1", 1, 256, 128, group_sizes=(0, 1)), 1, False),
    ("wo_int8_gateup", Case("gateup", 150, 272, 208), 2, False),
    ("wo_int8_masked", Case("masked", 130, 136, 144, masked_m=(3, 0, 130, 200)), 2, False),
    ("wo_int4_decode", Case("decode_experts", 40, 136, 384, group_sizes=(3, 0, 30, 7)), 2,
     False),
    ("wo_int4_decode", Case("decode_shard", 70, 128, 320, group_sizes=(5, 20, 0, 45),
                            group_offset=1, g_local=2, existing_out=True), 3, False),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}", marks=() if fast else pytest.mark.slow)
    for n, c, s, fast in CASES])
def test_the_weight_only_tile_on_the_emulator(name, case, num_sms):
    check(name, case, num_sms, seed=seed())


@pytest.mark.slow
def test_cpp_launcher_on_the_emulator():
    """launch_<name>() asks the emulated device for its compute capability
    (10.0) and SM count and launches the weight-only sm_100a tile."""
    check("wo_e4m3_grouped", CASES[7][1], 3, seed=seed(), cpp=True)


# ---------------------------------------------------------------------------
# Planted bugs in gg_gemm_sm100_mixed.cuh under a generated kernel (one
# edit; the launch sequence, tiles and maps are the generated ones).

ARRIVE = "      full.arrive(st);\n"
# The transform's wait on `loaded` (the MMA thread has one too).
WAIT_LOADED = ("      gg::mbarrier_wait(&s.loaded[st], (it / T::kStages) & 1);\n"
               "      const unsigned char* raw")
PLANTED = {
    # The transform's st.shared are not made visible to the async proxy.
    "missing_proxy_fence": (
        [("      gg::fence_proxy_async();  // the MMA reads the tile through the async proxy\n",
          "")], "wo_int8", r"missing fence\.proxy\.async"),
    # The transform releases the stage to the MMA before it has waited for
    # the stage's raw weights (and so before widening them): its arrivals
    # run a phase ahead of the loads, and the ring's barriers hang. (An
    # arrival between the transform's wait and its stores is not exposed:
    # both schedules run a thread until it blocks, docs/cuda-sm100.md.)
    "transform_releases_early": (
        [(WAIT_LOADED, ARRIVE + WAIT_LOADED),
         ("async proxy\n" + ARRIVE, "async proxy\n")],
        "wo_int8", r"deadlock .*\n(.*\n)*.*incomplete: 64 of 128 arrivals missing"),
    # The transform widens a stage before its TMA loads landed.
    "transform_skips_the_load_wait": (
        [(WAIT_LOADED, "      const unsigned char* raw")], "wo_int8",
        r"no thread has waited on that barrier phase"),
    # The widened tile without the 128-byte swizzle the descriptor names.
    "wrong_swizzle": (
        [("((c ^ (dr % 8)) * 16)", "(c * 16)")], "wo_int8", None),
    # The raw weights read as if TMA had not swizzled them.
    "raw_swizzle_ignored": (
        [("  x ^= ((x >> 7) & kMask) << 4;\n", "")], "wo_int4", None),
    # silu_mul's interleaved rows left interleaved.
    "gateup_not_deinterleaved": (
        [("    return ((r / 8) % 2) * (kBN / 2) + 8 * (r / 16) + r % 8;\n", "    return r;\n")],
        "wo_int8_gateup", None),
    # Every column of a chunk scaled by the chunk's first column's scale.
    "scale_of_the_chunk": (
        [("    const float sc = weight_row<T>(w, c0 + j, n, row)",
          "    const float sc = weight_row<T>(w, c0, n, row)")], "wo_int4", None),
    # The decode tile's transposed accumulator read as if every warp held
    # the first 32 output columns.
    "decode_lanes_not_columns": (
        [("    const int col = w.n0 + 32 * quarter + lane;\n", "    const int col = w.n0 + lane;\n")],
        "wo_int4_decode", None),
    # The promoted sums restarted at every K tile.
    "sums_not_carried": (
        [("        if (kt > 0) {\n          sm100::load_chunk(sm100::lane_addr(sums, c0), d);",
          "        if (kt < 0) {\n          sm100::load_chunk(sm100::lane_addr(sums, c0), d);")],
        "wo_int4", None),
}


def planted(name: str, edits) -> tuple[dict, str]:
    """Kernel `name`'s generated .cu on a copy of gg_gemm_sm100_mixed.cuh
    with `edits` (each must match once), renamed gg::gemm::sm100_mixed_planted:
    the emulator modules keyed as run_launcher looks them up, and the key."""
    text = (RUNTIME_INCLUDE_DIR / "gg_gemm_sm100_mixed.cuh").read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"the planted edit no longer matches the header: {old!r}"
        text = text.replace(old, new)
    text = text.replace("sm100_mixed", "sm100_mixed_planted")
    k = kernel(name)
    call = (f"gg::gemm::sm100_mixed::"
            f"{'masked' if k.masked else 'grouped' if k.grouped else 'dense'}<")
    source = (BODY.folder / f"{name}.cu").read_text()
    assert source.count(call) >= 1  # one per LUT entry
    source = source.replace(call, call.replace("sm100_mixed", "sm100_mixed_planted")).replace(
        '#include "gg_runtime.cuh"\n', '#include "gg_runtime.cuh"\n#include "wo_planted.cuh"\n')
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    out = cache_dir() / "sm100_weight_only_planted" / digest
    out.mkdir(parents=True, exist_ok=True)
    (out / "wo_planted.cuh").write_text(text)
    key = str(BODY.folder / f"{name}_planted.cu")
    return {key: EmuModule(source, key, include_dirs=[out, BODY.folder])}, key


def run_planted(name: str, edits, inputs):
    modules, key = planted(name, edits)
    return run_launcher(launcher(name), "", key, inputs, modules=modules, arch=SM100, num_sms=1)


# Each planted kernel's case: tiles that wrap the stage ring and both
# accumulators on one block.
PLANTED_CASE = {"wo_int8": Case("rings_wrap", 260, 136, 448),
                "wo_int4": Case("rings_wrap", 130, 200, 384),
                "wo_int8_gateup": Case("rings_wrap", 130, 272, 192),
                "wo_int4_decode": Case("rings_wrap", 60, 200, 384, group_sizes=(20, 0, 40))}


@pytest.mark.parametrize("bug", [
    pytest.param(b, marks=() if b == "missing_proxy_fence" else pytest.mark.slow)
    for b in PLANTED])
def test_planted_bug_in_the_weight_only_tile_is_caught(bug):
    edits, name, report = PLANTED[bug]
    k = kernel(name)
    case = PLANTED_CASE[name]
    inputs = case.inputs(k, seed())
    if report is not None:
        with pytest.raises(EmuKernelError, match=report):
            run_planted(name, edits, inputs)
    else:
        actual = run_planted(name, edits, inputs)
        assert not compare(actual, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PLANTED_CASE))
def test_the_unplanted_copies_pass(name):
    k = kernel(name)
    case = PLANTED_CASE[name]
    inputs = case.inputs(k, seed())
    actual = run_planted(name, [], inputs)
    assert compare(actual, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


# ---------------------------------------------------------------------------
# nvcc for sm_100a: the generated file's sm_100a entries.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(
    nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("name", [
    "wo_int4_gateup", *(pytest.param(n, marks=pytest.mark.slow) for n in (
        "wo_int8", "wo_int4", "wo_fp4", "wo_e5m2", "wo_e4m3_grouped", "wo_int8_gateup",
        "wo_int8_masked", "wo_int4_decode"))])
def test_weight_only_entries_build_without_spills_on_tcgen05(name):
    lp = cuda_backend.plan(kernel(name), BODY.spec)
    source = (BODY.folder / f"{name}.cu").read_text()
    result = nvcc.compile_check(source, SM100, name_for_errors=f"{name}.cu",
                                include_dirs=(BODY.folder,),
                                extra_flags=("-Werror", "all-warnings"))
    sass = nvcc.sass_summary(result.cubin)
    tiles = {t.entry: t for t in tile_gemm.plan(kernel(name), BODY.spec).body_tiles("tcgen05")}
    for v in lp.variants:
        step = v.path("tcgen05").steps[-1]
        usage = result.kernels[step.entry]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
        assert usage.static_smem + step.smem <= nvcc.shared_memory_limit(SM100)
        code = sass[step.entry]
        assert code.count("UTCHMMA") > 0 and code.count("HMMA") == 0, step.entry
        assert code.count("UTMALDG") > 0 and code.count("LDTM") > 0, step.entry
        assert code.count("UTCBAR") > 0, step.entry
        # The 128-row tile keeps its promoted sums in TMEM (tcgen05.st); the
        # decode tile in registers.
        t = tiles[step.entry]
        assert (code.count("STTM") > 0) == (t.promoted and not t.swap), step.entry


# ---------------------------------------------------------------------------
# The weight-only kernels of specs/ on an emulated B200, through their
# generated Python launchers.

SPEC_KERNELS = [
    ("moe", "moe_w8a16_grouped_gemm_rhs_int8",
     Case("experts", 200, 272, 384, group_sizes=(70, 0, 100, 30))),
    ("moe", "moe_w8a16_grouped_gemm_rhs_e4m3",
     Case("shard", 150, 136, 256, group_sizes=(40, 0, 75, 35), group_offset=1, g_local=2,
          existing_out=True)),
    ("moe", "moe_w4a16_grouped_gemm", Case("experts", 130, 256, 512, group_sizes=(1, 129))),
    ("dense", "w4a16_gemm", Case("ragged", 129, 200, 384)),
    ("dense", "fp8_weight_gemm", Case("ragged", 140, 136, 208)),
]


@pytest.fixture(scope="module")
def specs_cuda(tmp_path_factory):
    from cuda_helpers import REPO, render_cuda

    out = {}
    for stem in ("moe", "dense"):
        root = tmp_path_factory.mktemp(f"wo_{stem}")
        out[stem] = render_cuda(root, stem, (REPO / "specs" / f"{stem}.gemm").read_text())[:2]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("stem,name,case", SPEC_KERNELS, ids=[n for _, n, _ in SPEC_KERNELS])
def test_the_specs_weight_only_kernels_on_an_emulated_b200(specs_cuda, stem, name, case):
    from gemmgen.harness.runner import load_generated_module

    spec, cuda = specs_cuda[stem]
    k = spec.kernel(name)
    lm = load_generated_module(cuda / f"{name}.py", f"test_sm100_wo_{name}")
    inputs = case.inputs(k, seed())
    assert lm.launches(lm.validate(**inputs), 100, 2)[-1].entry == f"{name}_sm100"
    source = cuda / f"{name}.cu"
    actual = run_launcher(lm, source.read_text(), str(source), inputs, arch=SM100, num_sms=2)
    result = compare(actual, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()}:\n{result.detail}"
