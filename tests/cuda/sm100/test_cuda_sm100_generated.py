"""The generated sm_100a path (docs/cuda-sm100.md, "The sm_100a GEMM"): what
tile_gemm plans for a kernel that gets the tcgen05 body on sm_100a, the
launchers' choice of path by compute capability, the generated kernels on
the CPU emulator of an sm_100a device against the reference (m = 1, ragged
m / n / k, k below and not a multiple of the K tile, zero-size groups,
group_offset with existing_out, the masked layout, silu_mul, FP8 with
DeepSeek block scales promoted through registers, persistent grids smaller
than the tile count, so that both TMEM accumulators and the stage ring
wrap; outputs poisoned, fresh random inputs), through the Python and the
C++ launcher, planted bugs in the body under the generated kernel, and nvcc
for sm_100a (no spills, UTCHMMA / UTCQMMA fed by UTMALDG, LDTM, no HMMA).

The unmarked cases are one of each kind; the rest are `slow`."""

from __future__ import annotations

import numpy as np
import pytest
from sm100_helpers import SM100, Sm100Spec

from gemmgen.archs import shared_memory_limit
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.backends.cuda.gemm import tcgen05
from gemmgen.cases import Case
from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, reference

SPEC = """
target cuda {
  archs sm_90a sm_100a
}

defaults {
  lhs bf16 [m, k]
  tile m=128 n=128 k=64
  backends cuda
}

kernel b_dense {
  op dense
  rhs bf16 [n, k]
  out f32
}

kernel b_dense_kn {
  op dense
  rhs bf16 [k, n]
  out bf16
  bias f32 [n]
  epilogue relu
  tile m=128 n=256 k=64
}

kernel b_grouped {
  op grouped
  lhs f16 [m, k]
  rhs f16 [g, n, k]
  out bf16
  tile m=128 n=64 k=64
}

kernel b_gateup {
  op grouped
  rhs bf16 [g, n, k]
  out bf16
  epilogue silu_mul
}

kernel b_masked {
  op grouped
  lhs bf16 [g, m, k]
  rhs bf16 [g, k, n]
  out f32
}

kernel b_fp8 {
  op grouped
  lhs e4m3 [m, k]
  rhs e4m3 [g, n, k]
  out bf16
  lhs_scale per_token_group k=128 f32
  rhs_scale block n=128 k=128 f32
  tile m=128 n=128 k=128
}

kernel b_fp8_token {
  op dense
  lhs e5m2 [m, k]
  rhs e5m2 [n, k]
  out bf16
  lhs_scale per_token f32
  rhs_scale per_channel f32
  tile m=128 n=64 k=128
}

kernel b_fp8_kn {
  op grouped
  lhs e4m3 [m, k]
  rhs e4m3 [g, k, n]
  out f32
  rhs_scale per_channel f32
  epilogue silu_mul
  tile m=128 n=256 k=128
}

kernel b_mma_sync {
  op dense
  rhs bf16 [n, k]
  out bf16
  mma mma_sync
}
"""

BODY = Sm100Spec("sm100body", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check


def seed() -> int:
    return int(np.random.default_rng().integers(1 << 30))


# ---------------------------------------------------------------------------
# The plan and the launchers' choice of path (no compiler).


def test_plan_gives_qualifying_kernels_an_sm100_tile_per_lut_entry():
    limit = shared_memory_limit(SM100)
    want = {"b_dense": (128, 256), "b_dense_kn": (256, 512), "b_grouped": (64, 128),
            "b_gateup": (128, 256), "b_masked": (128, 256), "b_fp8": (128, 256),
            "b_fp8_token": (64, 128), "b_fp8_kn": (256, 512), "b_mma_sync": None}
    for name, shape in want.items():
        p = tile_gemm.plan(kernel(name), BODY.spec)
        tiles = p.body_tiles("tcgen05")
        if shape is None:
            assert not tiles, name
            continue
        (t,) = tiles
        assert (t.bn, t.tmem_cols) == shape, name
        assert t.smem_bytes == tcgen05.sm100_smem_bytes(t.bn, t.stages, kernel(name).out)
        assert t.smem_bytes <= limit
        more = tcgen05.sm100_smem_bytes(t.bn, t.stages + 1, kernel(name).out)
        assert t.stages == tcgen05.SM100_MAX_STAGES or more > limit
        assert t.promoted == (name == "b_fp8"), name
        # The Hopper body is planned beside it, for sm_90a (not for FP8 rhs
        # [k, n], which wgmma cannot read).
        assert bool(p.body_tiles("wgmma")) == (name != "b_fp8_kn"), name


def test_the_launchers_pick_the_body_by_compute_capability():
    text = (BODY.folder / "b_grouped.cu").read_text()
    assert 'extern "C" __global__ void __launch_bounds__(192, 1) b_grouped_sm100(' in text
    assert "gg::gemm::sm100::grouped<Sm100Tile0>(" in text
    assert "!defined(GG_SM100_TCGEN05)" in text
    lm = launcher("b_dense")
    dims = lm.validate(lhs=np.zeros((300, 64), np.uint16), rhs=np.zeros((200, 64), np.uint16))
    (step,) = lm.launches(dims, 100, 148)
    assert (step.entry, step.grid, step.block) == ("b_dense_sm100", (6, 1, 1), (192, 1, 1))
    assert lm.launches(dims, 100, 4)[0].grid == (4, 1, 1)
    assert lm.launches(dims, 90, 132)[0].entry == "b_dense_sm90"
    for device in [(89, 128), (103, 148), (120, 170), (0, 0)]:
        assert [s.entry for s in lm.launches(dims, *device)] == ["b_dense"], device
    lg = launcher("b_grouped")
    dims = lg.validate(lhs=np.zeros((64, 64), np.float16), rhs=np.zeros((2, 128, 64), np.float16),
                       group_sizes=np.array([30, 34], np.int32))
    steps = lg.launches(dims, 100, 148)
    assert [s.entry for s in steps] == ["b_grouped_fill", "b_grouped_worklist", "b_grouped_sm100"]
    assert steps[2].args[1].box == (64, 64, 1)
    h = (BODY.folder / "b_dense.h").read_text()
    assert "if (sm == 100 && num_sms > 0) {" in (BODY.folder / "b_dense.cu").read_text() + h


def test_mma_tcgen05_needs_sm100a_and_a_qualifying_kernel(tmp_path):
    from cuda_helpers import render_cuda

    from gemmgen.diagnostics import SpecError

    def render(name: str, text: str):
        (tmp_path / name).mkdir()
        return render_cuda(tmp_path / name, name, text)

    with pytest.raises(SpecError, match="'mma tcgen05' needs sm_100a, but target cuda "
                                        "declares 'sm_90a'"):
        render("a", SPEC.replace("  mma mma_sync\n", "  mma tcgen05\n"))
    only = SPEC.replace("archs sm_90a sm_100a", "archs sm_100a").replace(
        "  mma mma_sync\n", "  mma tcgen05\n")
    spec, _, _ = render("b", only)
    assert tile_gemm.plan(spec.kernel("b_mma_sync"), spec).body_tiles("tcgen05")
    only = only.replace("  tile m=128 n=256 k=128\n}", "  tile m=128 n=256 k=128\n  mma tcgen05\n}")
    promoted_kn = only.replace("  out f32\n  rhs_scale per_channel f32\n",
                               "  out f32\n  lhs_scale per_token_group k=128 f32\n"
                               "  rhs_scale block n=128 k=128 f32\n")
    with pytest.raises(SpecError, match="a gate-up tile needs 256 of them, but a tile with "
                                        "per-K-block scales holds at most 128"):
        render("c", promoted_kn)
    # Weight-only kernels get the weight-only tile (gg_gemm_sm100_mixed.cuh),
    # weights [n, k] only.
    weight_only = only.replace("  lhs e4m3 [m, k]\n  rhs e4m3 [g, k, n]\n",
                               "  lhs bf16 [m, k]\n  rhs int8 [g, n, k]\n")
    spec, _, _ = render("d", weight_only)
    (t,) = tile_gemm.plan(spec.kernel("b_fp8_kn"), spec).body_tiles("tcgen05")
    assert t.mixed and t.threads == 320
    with pytest.raises(SpecError, match=r"its weight-only tile reads the weights \[n, k\]"):
        render("e", weight_only.replace("rhs int8 [g, n, k]", "rhs int8 [g, k, n]"))


# ---------------------------------------------------------------------------
# On the emulator of an sm_100a device, against the reference.

CASES = [
    ("b_dense", Case("ragged", 130, 136, 72), 2, True),
    ("b_dense", Case("m1", 1, 128, 64), 1, False),
    ("b_dense", Case("k24_wraps", 520, 264, 24), 1, False),
    ("b_dense_kn", Case("m1_bias", 1, 264, 72), 2, True),
    ("b_dense_kn", Case("ragged_bias", 150, 520, 136), 2, False),
    ("b_grouped", Case("shard", 260, 128, 64, group_sizes=(60, 100, 0, 100), group_offset=1,
                       g_local=2, existing_out=True), 2, True),
    ("b_grouped", Case("zero_size", 300, 136, 72, group_sizes=(40, 0, 130, 0, 130)), 3, False),
    ("b_gateup", Case("gateup", 200, 256, 72, group_sizes=(70, 0, 130)), 2, True),
    ("b_masked", Case("masked", 130, 136, 72, masked_m=(3, 0, 130, 200)), 2, True),
    ("b_fp8", Case("blocks", 200, 256, 304, group_sizes=(70, 130)), 2, True),
    ("b_fp8", Case("m1", 1, 128, 256, group_sizes=(1,)), 1, False),
    ("b_fp8_token", Case("token", 150, 72, 208), 2, True),
    ("b_fp8_kn", Case("kn", 150, 512, 208, group_sizes=(50, 0, 100)), 2, True),
    ("b_fp8_kn", Case("kn_ragged", 140, 288, 80, group_sizes=(139, 1)), 1, False),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}", marks=() if fast else pytest.mark.slow)
    for n, c, s, fast in CASES])
def test_the_sm100_path_on_the_emulator(name, case, num_sms):
    check(name, case, num_sms, seed=seed())


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param("b_grouped", CASES[5][1], 3, id="grouped-shard"),
    pytest.param("b_dense", CASES[0][1], 148, id="dense-all-sms", marks=pytest.mark.slow),
])
def test_cpp_launcher_on_the_emulator(name, case, num_sms):
    """launch_<name>() asks the emulated device for its compute capability
    (10.0) and SM count and launches the sm_100a path."""
    check(name, case, num_sms, seed=seed(), cpp=True)


# ---------------------------------------------------------------------------
# Planted bugs in the body under the generated kernel (gg_gemm_sm100.cuh
# with one edit; the launch sequence, tiles and maps are the generated ones).

PLANTED = {
    # The MMA thread reuses an accumulator before the epilogue read it: its
    # fresh MMA overwrites a result no tcgen05.ld has read.
    "acc_not_waited": ([("        gg::mbarrier_wait(&s.acc_empty[acc], ((a / 2) & 1) ^ 1);\n", "")],
                       (r"overwrites TMEM lane 0 column 0 \(a fresh accumulation, enable-input-d "
                        r"false\), which holds an earlier MMA's result that no thread has read")),
    # The epilogue reads the accumulator before the MMAs' commit (reported
    # at that read, or when the next MMA overwrites a result it never read).
    "ld_before_commit": ([(("        gg::mbarrier_wait(&s.acc_full[acc], (a / 2) & 1);\n"
                            "        gg::tcgen05_fence_after_thread_sync();\n      }\n"),
                           "        gg::tcgen05_fence_after_thread_sync();\n      }\n")],
                         (r"read before a thread waited on the mbarrier phase of a tcgen05.commit"
                          r"|an earlier MMA's result that no thread has read")),
    # A stage goes back to the producer before its MMAs are done.
    "stage_released_early": ([("      commit.stage(&s.empty[st]);\n",
                               "      gg::mbarrier_arrive(&s.empty[st]);\n")],
                             r"the stage was released before the MMA's tcgen05.commit"),
    # The epilogue warps read the lanes of warp - 2 instead of warp % 4.
    "wrong_lane_quarter": ([("  const int quarter = (threadIdx.x / 32) % 4;\n  return tmem",
                             "  const int quarter = (threadIdx.x / 32) - 2;\n  return tmem")],
                           r"accesses TMEM lanes 0..31, but it reaches only lanes 64..95"),
    # The columns are never freed.
    "tmem_leak": ([("    gg::tmem_dealloc(tmem, T::kTmemCols);\n", "")], r"TMEM leak"),
}


def run_planted(edits, inputs, name="b_dense"):
    modules, key = BODY.planted(name, edits)
    return run_launcher(launcher(name), "", key, inputs, modules=modules, arch=SM100, num_sms=1)


@pytest.mark.parametrize("bug", [
    pytest.param(b, marks=() if b == "stage_released_early" else pytest.mark.slow)
    for b in PLANTED])
def test_planted_bug_under_the_generated_kernel_is_caught(bug):
    edits, report = PLANTED[bug]
    k = kernel("b_dense")
    case = Case("rings_wrap", 400, 136, 400)  # 8 tiles of 7 K tiles on one block
    inputs = case.inputs(k, 3)
    with pytest.raises(EmuKernelError, match=report):
        run_planted(edits, inputs)


@pytest.mark.slow
def test_the_unplanted_copy_of_the_generated_kernel_passes():
    k = kernel("b_dense")
    case = Case("rings_wrap", 400, 136, 400)
    inputs = case.inputs(k, 3)
    actual = run_planted([], inputs)
    assert compare(actual, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


# ---------------------------------------------------------------------------
# nvcc for sm_100a: the generated file's sm_100a entries.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(
    nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("name,mma", [
    ("b_fp8", "UTCQMMA"), pytest.param("b_gateup", "UTCHMMA", marks=pytest.mark.slow),
    pytest.param("b_dense_kn", "UTCHMMA", marks=pytest.mark.slow),
    pytest.param("b_fp8_token", "UTCQMMA", marks=pytest.mark.slow),
    pytest.param("b_fp8_kn", "UTCQMMA", marks=pytest.mark.slow)])
def test_generated_sm100_entries_build_without_spills_on_tcgen05(name, mma):
    lp = cuda_backend.plan(kernel(name), BODY.spec)
    source = (BODY.folder / f"{name}.cu").read_text()
    result = nvcc.compile_check(source, SM100, name_for_errors=f"{name}.cu",
                                include_dirs=(BODY.folder,),
                                extra_flags=("-Werror", "all-warnings"))
    sass = nvcc.sass_summary(result.cubin)
    for v in lp.variants:
        step = v.path("tcgen05").steps[-1]
        usage = result.kernels[step.entry]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
        assert usage.static_smem + step.smem <= nvcc.shared_memory_limit(SM100)
        code = sass[step.entry]
        assert code.count(mma) > 0 and code.count("HMMA") == 0, step.entry
        assert code.count("UTMALDG") > 0 and code.count("LDTM") > 0, step.entry
        assert code.count("UTCBAR") > 0, step.entry


# ---------------------------------------------------------------------------
# sm_103a (B300): the same body, its own `a` build and compute capability.

class Sm103Spec(Sm100Spec):
    ARCH, SM = "sm_103a", 103


B300 = Sm103Spec("sm103body", SPEC.replace("archs sm_90a sm_100a", "archs sm_100a sm_103a"))


def test_sm103a_gets_the_body_on_its_own_compute_capability():
    lm = B300.launcher("b_dense")
    dims = lm.validate(lhs=np.zeros((300, 64), np.uint16), rhs=np.zeros((200, 64), np.uint16))
    assert [s.entry for s in lm.launches(dims, 103, 148)] == ["b_dense_sm100"]
    assert [s.entry for s in lm.launches(dims, 100, 148)] == ["b_dense_sm100"]
    assert [s.entry for s in lm.launches(dims, 90, 132)] == ["b_dense"]
    B300.check("b_grouped", CASES[5][1], 2, seed=seed())
