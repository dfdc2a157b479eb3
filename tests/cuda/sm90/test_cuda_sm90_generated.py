"""The generated Hopper path (docs/cuda-hopper.md, "The generated kernels"):
what tile_gemm plans for a kernel that gets the wgmma body on sm_90a, its
launchers' choice of path by compute capability, the generated kernels on
the CPU emulator of an sm_90a device against the reference (m = 1, ragged
m / n / k, k below and not a multiple of the 64-wide K tile, zero-size
groups, group_offset with existing_out, persistent grids smaller than the
tile count; outputs poisoned, fresh random inputs), through both the
Python and the C++ launcher, planted bugs in the body under the generated
kernel, and nvcc for sm_90a (no spills, HGMMA fed by UTMALDG, no HMMA).

The unmarked cases are one of each kind (dense [n, k], dense [k, n] with a
bias, grouped, the C++ launcher, one planted bug); the rest are `slow`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cuda_helpers import render_cuda
from sm90_helpers import HopperSpec
from test_cuda_sm90_gemm import PLANTED

from gemmgen import ir
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
  lhs bf16 [m, k]
  tile m=128 n=128 k=32
  stages 3
  backends cuda
}

kernel h_dense {
  op dense
  rhs bf16 [n, k]
  out f32
}

kernel h_dense_kn {
  op dense
  rhs bf16 [k, n]
  out bf16
  bias f32 [n]
  epilogue relu
  tile m=64 n=256 k=32
  stages 2
}

kernel h_grouped {
  op grouped
  rhs bf16 [g, n, k]
  out bf16
}

kernel h_grouped_kn {
  op grouped
  lhs f16 [m, k]
  rhs f16 [g, k, n]
  out f32
  tile m=64 n=64 k=32
  tile_rule m<=64 -> m=64 n=128 k=32
}

kernel h_mma_sync {
  op dense
  rhs bf16 [n, k]
  out bf16
  mma mma_sync
}
"""

SM90 = "sm_90a"
HOPPER = HopperSpec("hopper", SPEC)
_modules = HOPPER.modules


def generated() -> tuple[ir.Spec, Path]:
    """SPEC rendered, its CUDA files in a folder of their own."""
    return HOPPER.spec, HOPPER.folder


kernel = HOPPER.kernel
launcher = HOPPER.launcher
check = HOPPER.check


# ---------------------------------------------------------------------------
# The plan and the launchers' choice of path (no compiler).


def test_plan_gives_qualifying_kernels_a_hopper_tile_per_lut_entry():
    spec, _ = generated()
    for name, want in {"h_dense": [(128, 4)], "h_dense_kn": [(256, 3)], "h_grouped": [(128, 5)],
                       "h_grouped_kn": [(128, 4), (64, 7)], "h_mma_sync": []}.items():
        p = tile_gemm.plan(kernel(name), spec)
        assert [(t.bn, t.stages) for t in p.body_tiles("wgmma")] == want, name
        for t in p.body_tiles("wgmma"):
            assert t.smem_bytes == wgmma.sm90_smem_bytes(t.bn, t.stages, kernel(name).out)
            assert t.smem_bytes <= shared_memory_limit(SM90)
            # The most stages that fit: one more would not.
            more = wgmma.sm90_smem_bytes(t.bn, t.stages + 1, kernel(name).out)
            assert t.stages == wgmma.SM90_MAX_STAGES or more > shared_memory_limit(SM90)


def test_spec_kernels_on_sm90a_get_the_hopper_path():
    """specs/: the 16-bit CUDA GEMMs without scales, the FP8 x FP8 [n, k]
    ones (tests/cuda/sm90/test_cuda_sm90_generated_fp8.py) and the weight-only ones
    (tests/cuda/sm90/test_cuda_sm90_generated_mixed.py) that declare sm_90a."""
    from cuda_helpers import gemm_kernels, rendered

    KERNELS = gemm_kernels()

    have = sorted(name for stem, name in KERNELS
                  if tile_gemm.plan(rendered(stem).spec.kernel(name), rendered(stem).spec).body_tiles("wgmma"))
    assert have == ["dense_gemm_bf16", "dense_gemm_bf16_kn", "fp8_fp8_gemm_tile_128x128x64",
                    "fp8_fp8_gemm_tile_64x128x64",
                    "fp8_gemm_blockscaled_lhs_scale_e8m0_rhs_scale_bf16",
                    "fp8_gemm_blockscaled_lhs_scale_e8m0_rhs_scale_f32",
                    "fp8_gemm_blockscaled_lhs_scale_f32_rhs_scale_bf16",
                    "fp8_gemm_blockscaled_lhs_scale_f32_rhs_scale_f32",
                    "fp8_gemm_blockscaled_pipe", "fp8_weight_gemm", "gmm_bf16",
                    "moe_bf16_grouped_gemm",
                    "moe_fp8_grouped_gemm", "moe_fp8_masked_gemm", "moe_w4a16_grouped_gemm",
                    "moe_w8a16_grouped_gemm_rhs_e4m3", "moe_w8a16_grouped_gemm_rhs_int8",
                    "moe_w8a8_gateup_silu", "moe_w8a8_grouped_gemm", "w4a16_gemm"]


def test_an_arch_list_without_sm90a_gets_no_hopper_path(tmp_path):
    spec, cuda, _ = render_cuda(tmp_path, "old", SPEC.replace("sm_89 sm_90a", "sm_80 sm_89"))
    assert not tile_gemm.plan(spec.kernel("h_dense"), spec).body_tiles("wgmma")
    assert "_sm90" not in (cuda / "h_dense.cu").read_text()


def test_the_entry_points_and_the_launch_sequence():
    _, folder = generated()
    text = (folder / "h_grouped.cu").read_text()
    assert ('extern "C" __global__ void __launch_bounds__(384, 1) h_grouped_sm90(' in text)
    assert "const __grid_constant__ CUtensorMap map_lhs, const __grid_constant__ CUtensorMap map_rhs" in text
    assert "gg::gemm::sm90::grouped<Sm90Tile0>(" in text
    lm = launcher("h_dense")
    dims = lm.validate(lhs=np.zeros((300, 64), np.uint16), rhs=np.zeros((200, 64), np.uint16))
    # 3 x 2 tiles of 128 x 128: the persistent grid is min(SMs, 6).
    (step,) = lm.launches(dims, 90, 132)
    assert (step.entry, step.grid, step.block) == ("h_dense_sm90", (6, 1, 1), (384, 1, 1))
    assert lm.launches(dims, 90, 4)[0].grid == (4, 1, 1)
    map_lhs, map_rhs = step.args[:2]
    assert (map_lhs.array, map_lhs.dims, map_lhs.strides, map_lhs.box) == ("lhs", (64, 300), (128,), (64, 128))
    assert (map_rhs.array, map_rhs.dims, map_rhs.strides, map_rhs.box) == ("rhs", (64, 200), (128,), (64, 128))
    # Any other compute capability, or none given: the mma.sync path.
    for device in [(89, 128), (100, 148), (0, 0)]:
        assert [s.entry for s in lm.launches(dims, *device)] == ["h_dense"], device
    # Grouped: fill and a 128-row worklist first; g = 0 falls back (no rhs to map).
    lg = launcher("h_grouped")
    dims = lg.validate(lhs=np.zeros((64, 64), np.uint16), rhs=np.zeros((2, 128, 64), np.uint16),
                       group_sizes=np.array([30, 34], np.int32))
    steps = lg.launches(dims, 90, 132)
    assert [s.entry for s in steps] == ["h_grouped_fill", "h_grouped_worklist", "h_grouped_sm90"]
    assert steps[1].args[5] == 128
    assert steps[2].args[1].dims == (64, 128, 2) and steps[2].args[1].box == (64, 128, 1)
    dims0 = lg.validate(lhs=np.zeros((64, 64), np.uint16), rhs=np.zeros((0, 128, 64), np.uint16),
                        group_sizes=np.array([30, 34], np.int32))
    assert lg.launches(dims0, 90, 132)[-1].entry == "h_grouped"
    # The [k, n] rhs: boxes of 64 columns x 64 k rows.
    lk = launcher("h_dense_kn")
    dims = lk.validate(lhs=np.zeros((10, 64), np.uint16), rhs=np.zeros((64, 520), np.uint16),
                       bias=np.zeros(520, np.float32))
    step = lk.launches(dims, 90, 132)[-1]
    assert step.args[1].dims == (520, 64) and step.args[1].box == (64, 64)
    assert step.grid == (3, 1, 1)  # one m tile x 3 n tiles of 256


def test_h_file_launches_take_the_device():
    _, folder = generated()
    h = (folder / "h_dense.h").read_text()
    assert "GgLaunch (&out)[1], int sm = 0, int num_sms = 0" in h
    assert "if (sm == 90 && num_sms > 0) {" in h
    cu = (folder / "h_dense.cu").read_text()
    assert "cudaDevAttrMultiProcessorCount" in cu and "cudaGetDriverEntryPointByVersion" in cu


# ---------------------------------------------------------------------------
# On the emulator of an sm_90a device, against the reference.

DENSE = [
    ("h_dense", Case("m1", 1, 128, 64), 1),
    ("h_dense", Case("ragged", 130, 136, 72), 2),
    ("h_dense", Case("k24", 200, 72, 24), 1),
    ("h_dense_kn", Case("ragged_bias", 150, 264, 136), 2),
    ("h_dense_kn", Case("m1_bias", 1, 264, 72), 2),
    ("h_dense_kn", Case("m1_k8", 1, 64, 8), 1),
]
FAST_DENSE = {("h_dense", "ragged"), ("h_dense_kn", "m1_bias")}


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}",
                 marks=() if (n, c.name) in FAST_DENSE else pytest.mark.slow)
    for n, c, s in DENSE])
def test_dense_on_the_emulator(name, case, num_sms):
    check(name, case, num_sms, seed=int(np.random.default_rng().integers(1 << 30)))


GROUPED = [
    ("h_grouped", Case("zero_size", 300, 136, 72, group_sizes=(40, 0, 130, 0, 130)), 3),
    ("h_grouped", Case("shard", 260, 128, 64, group_sizes=(60, 100, 0, 100), group_offset=1,
                       g_local=2, existing_out=True), 2),
    ("h_grouped_kn", Case("kn_f16", 200, 192, 40, group_sizes=(0, 150, 50),
                          existing_out=True), 4),
    ("h_grouped_kn", Case("lut_small_m", 60, 136, 88, group_sizes=(20, 0, 40)), 1),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}",
                 marks=() if c.name == "shard" else pytest.mark.slow)
    for n, c, s in GROUPED])
def test_grouped_on_the_emulator(name, case, num_sms):
    check(name, case, num_sms, seed=int(np.random.default_rng().integers(1 << 30)))


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param("h_grouped", GROUPED[1][1], 3, id="grouped-shard"),
    pytest.param("h_dense", DENSE[1][1], 132, id="dense-all-sms", marks=pytest.mark.slow),
])
def test_cpp_launcher_on_the_emulator(name, case, num_sms):
    """launch_<name>() asks the emulated device for its compute capability
    (9.0) and SM count, encodes the maps with cuTensorMapEncodeTiled from
    cudaGetDriverEntryPointByVersion, and launches the Hopper path."""
    check(name, case, num_sms, seed=int(np.random.default_rng().integers(1 << 30)), cpp=True)


@pytest.mark.slow
def test_the_mma_sync_path_of_the_same_kernel_on_sm89():
    """The same .cu on an sm_89 device: the launcher picks the mma.sync entry."""
    k = kernel("h_dense")
    case = Case("ragged", 130, 136, 72)
    inputs = case.inputs(k, 7)
    source = (generated()[1] / "h_dense.cu").read_text()
    actual = run_launcher(launcher("h_dense"), source, "h_dense.cu", inputs, modules=_modules,
                          arch="sm_89")
    assert compare(actual, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


# ---------------------------------------------------------------------------
# Planted bugs in the body under the generated kernel: the generated .cu with
# its calls of gg::gemm::sm90 pointed at a copy of gg_gemm_sm90.cuh with one
# edit of PLANTED (tests/cuda/sm90/test_cuda_sm90_gemm.py), in namespace
# gg::gemm::sm90_planted; the launch sequence, tiles and maps are the
# generated ones.


def run_planted(edits, inputs):
    modules, key = HOPPER.planted("h_dense", edits)
    return run_launcher(launcher("h_dense"), "", key, inputs, modules=modules, arch=SM90,
                        num_sms=1)


@pytest.mark.parametrize("bug", [
    pytest.param(b, marks=() if b == "expect_tx_too_many" else pytest.mark.slow) for b in PLANTED])
def test_planted_bug_under_the_generated_kernel_is_caught(bug):
    edits, report = PLANTED[bug]
    k = kernel("h_dense")
    case = Case("ring_wraps", 200, 136, 200)  # 4 tiles of 4 K tiles on one block: 4 stages wrap
    inputs = case.inputs(k, 3)
    with pytest.raises(EmuKernelError, match=report):
        run_planted(edits, inputs)


@pytest.mark.slow
def test_the_unplanted_copy_of_the_generated_kernel_passes():
    k = kernel("h_dense")
    case = Case("ring_wraps", 200, 136, 200)
    inputs = case.inputs(k, 3)
    actual = run_planted([], inputs)
    assert compare(actual, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


# ---------------------------------------------------------------------------
# nvcc for sm_90a: the generated file's Hopper entries.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(
    nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("name", [
    "h_grouped", pytest.param("h_dense_kn", marks=pytest.mark.slow)])
def test_generated_hopper_entries_build_without_spills_and_run_hgmma_on_tma(name):
    spec, folder = generated()
    lp = cuda_backend.plan(kernel(name), spec)
    source = (folder / f"{name}.cu").read_text()
    result = nvcc.compile_check(source, SM90, name_for_errors=f"{name}.cu", include_dirs=(folder,),
                                extra_flags=("-Werror", "all-warnings"))
    sass = nvcc.sass_summary(result.cubin)
    for v in lp.variants:
        hopper, mma_sync = v.path("wgmma").steps[-1], v.steps[-1]
        usage = result.kernels[hopper.entry]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
        assert usage.static_smem + hopper.smem <= nvcc.shared_memory_limit(SM90)
        code = sass[hopper.entry]
        assert code.count("HGMMA") > 0 and code.count("HMMA") == 0, hopper.entry
        assert code.count("UTMALDG") > 0 and code.count("USETMAXREG") == 2, hopper.entry
        assert code.count("SYNCS", "PHASECHK") > 0, hopper.entry
        # The mma.sync entry of the same file stays on HMMA.
        assert sass[mma_sync.entry].count("HMMA") > 0
