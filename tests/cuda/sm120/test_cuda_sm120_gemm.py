"""The block-scaled body (sm_120a / sm_121a, docs/cuda-blackwell.md): MXFP8
kernels (e4m3 / e5m2 with e8m0 scales of 32-wide K blocks on both sides, in
the row-major or the 128 x 4 atom layout) take it on compute capability
12.0 / 12.1, and the mma.sync body with software promotion (several blocks
per K tile for the atom layout) everywhere else.

Checked: the plan (which kernels get the body, its launch condition by
declared arch), the generated kernels on emulated sm_120a, sm_121a and sm_89
devices against the reference (m = 1, ragged m / n / k, k ending inside a
scale block, zero-size groups, group_offset + existing_out, silu_mul, the
masked layout, NaN scale bytes, poisoned outputs) through the Python and
the C++ launchers, planted bugs (a scale for the wrong lane or K block, a
wrong byte-id, the atom read as row-major, a stage read before it landed, a
tile over 99 KiB), and nvcc for sm_120a and sm_121a (QMMA.SF in the
block-scaled entries, 0 spills, shared memory within 101,376 bytes).

Unmarked: the plan, a dense, grouped, gate-up and masked case on sm_120a,
one on sm_121a, two on sm_89, the C++ launcher once, one planted bug, the
nvcc and NVRTC builds; the rest are `slow`.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_helpers import with_mutated_runtime
from sm120_helpers import Sm120Spec

from gemmgen import backends
from gemmgen.archs import shared_memory_limit
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.cases import Case
from gemmgen.diagnostics import SpecError
from gemmgen.harness import nvcc
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.parse import parse
from gemmgen.reference import compare, reference
from gemmgen.validate import validate

SPEC = """
target cuda {
  archs sm_89 sm_120a sm_121a
}

defaults {
  lhs e4m3 [m, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  backends cuda
}

# MXFP8 as CUTLASS / FlashInfer / vLLM quantizers write it: both scales in
# the 128 x 4 atom, four MX blocks per K tile, a LUT tile for decode.
kernel mx_atom {
  op dense
  rhs e4m3 [n, k]
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  tile m=64 n=64 k=128
  tile_rule m<=16 -> m=16 n=64 k=128
}

# e5m2, row-major scales (a K tile of one block), f32 out, bias and gelu.
kernel mx_e5 {
  op dense
  lhs e5m2 [m, k]
  rhs e5m2 [n, k]
  out f32
  bias f32 [n]
  epilogue gelu
  tile m=64 n=64 k=32
  stages 4
}

# Grouped experts: row-major lhs scales, each expert's rhs scales an atom
# matrix of its own.
kernel mx_moe {
  op grouped
  rhs e4m3 [g, n, k]
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  tile m=64 n=64 k=32
  stages 4
}

# The fused gate-up: rhs rows [0, n/2) gate, [n/2, n) up.
kernel mx_gate {
  op grouped
  rhs e4m3 [g, n, k]
  epilogue silu_mul
  tile m=64 n=64 k=32
  stages 4
}

# The masked layout (decode-time MoE).
kernel mx_masked {
  op grouped
  lhs e4m3 [g, m, k]
  rhs e4m3 [g, n, k]
  tile m=64 n=64 k=32
  stages 4
}

# Row-major scales held four to a K tile (the language allows either for
# e8m0 per-row scales): per-byte scale loads on sm_12x, a promotion after
# each block elsewhere.
kernel mx_rows4 {
  op dense
  rhs e4m3 [n, k]
  tile m=64 n=64 k=128
}

# Not MXFP8 (128-wide blocks): no block-scaled body.
kernel ds_blk {
  op dense
  rhs e4m3 [n, k]
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=128 k=128 e8m0
  tile m=64 n=64 k=128
}

# mma_sync keeps the portable body on every arch.
kernel mx_portable {
  op dense
  rhs e4m3 [n, k]
  tile m=64 n=64 k=32
  mma mma_sync
}
"""

MX = ("mx_atom", "mx_e5", "mx_moe", "mx_gate", "mx_masked", "mx_rows4")


MXS = Sm120Spec(SPEC, "sm120")

CASES = {
    "mx_atom": [Case("ragged", 130, 96, 208), Case("m1", 1, 64, 128), Case("deep", 70, 128, 512)],
    "mx_e5": [Case("ragged", 77, 80, 144), Case("m1", 1, 64, 32)],
    "mx_moe": [Case("groups", 150, 64, 96, group_sizes=(40, 0, 70, 40)),
               Case("sharded", 150, 64, 96, group_sizes=(40, 0, 70, 40), group_offset=1, g_local=2,
                    existing_out=True)],
    "mx_gate": [Case("groups", 100, 128, 64, group_sizes=(10, 0, 90))],
    "mx_masked": [Case("masked", 40, 64, 96, masked_m=(40, 0, 17))],
    "mx_rows4": [Case("ragged", 70, 64, 208)],
}


# ---------------------------------------------------------------------------
# The plan (no compiler).


def test_which_kernels_get_the_block_scaled_body():
    for name in (*MX, "ds_blk", "mx_portable"):
        k = MXS.spec.kernel(name)
        p = tile_gemm.plan(k, MXS.spec)
        got = [b.name for b in p.bodies]
        assert got == (["sm120"] if name in MX else []), name
        assert k.uses_mx_mma("sm_120a") == (name in MX) and not k.uses_mx_mma("sm_89")
    assert "lhs 'per_token_group k=32 e8m0'" in MXS.spec.kernel("ds_blk").mx_mma_obstacle()


def test_the_path_is_taken_on_the_declared_a_archs_only():
    lm = MXS.launcher("mx_atom")
    dims = lm.validate(lhs=np.zeros((100, 256), np.uint8), rhs=np.zeros((64, 256), np.uint8),
                       lhs_scale=np.zeros((128, 8), np.uint8), rhs_scale=np.zeros((128, 8), np.uint8))
    entries = {sm: lm.launches(dims, sm, 48)[-1].entry for sm in (0, 89, 90, 100, 120, 121)}
    # The default tile (m = 100 > 16) is the LUT's second: entry mx_atom_t1.
    assert entries == {0: "mx_atom_t1", 89: "mx_atom_t1", 90: "mx_atom_t1", 100: "mx_atom_t1",
                       120: "mx_atom_t1_sm120", 121: "mx_atom_t1_sm120"}
    # Declaring only sm_121a: a 12.0 device runs the plain sm_120 build's mma.sync entry.
    text = SPEC.replace("archs sm_89 sm_120a sm_121a", "archs sm_120 sm_121a")
    spec = validate(parse(text, "specs/x.gemm"))
    lp = cuda_backend.plan(spec.kernel("mx_atom"), spec)
    env = lp.env({"m": 100, "n": 64, "k": 256})
    v = lp.variant_for(env)
    assert v.steps_for({**env, "sm": 121, "num_sms": 48})[-1].entry.endswith("_sm120")
    assert v.steps_for({**env, "sm": 120, "num_sms": 48})[-1].entry == v.steps[-1].entry


def test_the_scale_arrays_of_the_atom_layout_are_padded():
    lm = MXS.launcher("mx_atom")
    with pytest.raises(ValueError, match="lhs_scale"):
        lm.validate(lhs=np.zeros((100, 256), np.uint8), rhs=np.zeros((64, 256), np.uint8),
                    lhs_scale=np.zeros((100, 8), np.uint8), rhs_scale=np.zeros((128, 8), np.uint8))


# ---------------------------------------------------------------------------
# The generated kernels on the emulator.

# CI: one dense (atom), grouped, gate-up and masked case; the row-major
# dense kernels run on sm_89 below.
FAST = [("mx_atom", 0), ("mx_moe", 1), ("mx_gate", 0), ("mx_masked", 0)]
ALL = [(name, i) for name, cases in CASES.items() for i in range(len(cases))]


@pytest.mark.parametrize("name, i", [pytest.param(*c, marks=() if c in FAST else pytest.mark.slow)
                                     for c in ALL], ids=[f"{n}-{CASES[n][i].name}" for n, i in ALL])
def test_block_scaled_body_matches_reference(name, i):
    result, entry = MXS.run(name, CASES[name][i], "sm_120a", seed=i)
    assert entry.startswith(name) and entry.endswith("_sm120"), entry
    assert result.passed, result.detail


@pytest.mark.parametrize("arch, name, entry", [
    ("sm_121a", "mx_moe", "mx_moe_sm120"),
    ("sm_89", "mx_atom", "mx_atom_t1"),  # four blocks promoted per K tile in software
    ("sm_89", "mx_rows4", "mx_rows4"),  # the same, row-major scales
    pytest.param("sm_89", "mx_gate", "mx_gate", marks=pytest.mark.slow),
    pytest.param("sm_121a", "mx_atom", "mx_atom_t1_sm120", marks=pytest.mark.slow),
])
def test_other_archs(arch, name, entry):
    result, got = MXS.run(name, CASES[name][0], arch, seed=5)
    assert got == entry
    assert result.passed, result.detail


def test_cpp_launcher_takes_the_block_scaled_path():
    result, _ = MXS.run("mx_atom", CASES["mx_atom"][0], "sm_120a", seed=2, cpp=True)
    assert result.passed, result.detail


@pytest.mark.slow
def test_nan_scale_bytes_reach_their_rows_only():
    """A NaN (0xFF) scale of one lhs row's K block makes that row NaN, as the
    reference says; the padding bytes of the atoms (random, some 0xFF) and
    the blocks past k never do."""
    k = MXS.spec.kernel("mx_atom")
    case = Case("nan", 70, 64, 208)
    inputs = case.inputs(k, 3)
    from gemmgen.reference.blockscale import atoms_to_rows, rows_to_atoms

    rows = atoms_to_rows(inputs["lhs_scale"], 70, 7)
    rows[5, 2] = 255
    stored = rows_to_atoms(rows, 255)  # every padding byte NaN
    inputs["lhs_scale"] = stored
    lm = MXS.launcher("mx_atom")
    path = MXS.folder / "mx_atom.cu"
    actual = run_launcher(lm, path.read_text(), str(path), inputs, modules=MXS.modules, arch="sm_120a")
    want = reference(k, **inputs)
    assert np.isnan(np.asarray(actual, np.float32)[5]).all()
    assert not np.isnan(np.delete(np.asarray(actual, np.float32), 5, axis=0)).any()
    assert compare(actual, want, k, k=case.k, inputs=inputs).passed


# ---------------------------------------------------------------------------
# Planted bugs: the body's scale handling edited in a copy of the runtime.

PLANTED = {
    # The lanes of thread-id 1 load the scales; the MMA reads thread-id 0's.
    "wrong_lane": ("gg_gemm.cuh", "gg::frag::sfa_row(lane, 0)", "gg::frag::sfa_row(lane, 1)"),
    # The K tile's scales are those of the next block.
    "wrong_k_block": ("gg_gemm.cuh", "const int kb0 = kt * T::kKSteps * kMxPerStep<T> + 4 * w;",
                      "const int kb0 = kt * T::kKSteps * kMxPerStep<T> + 4 * w + 1;"),
    # K step 1 reads byte 0 of the scale words.
    "wrong_byte_id": ("gg_gemm.cuh", "mma_mx_step<T, 1>(acc, a, b, sfa, sfb, w);",
                      "mma_mx_step<T, 0>(acc, a, b, sfa, sfb, w);"),
    # The 128 x 4 atom indexed as if it were row-major.
    "atom_as_rows": ("gg_scales.cuh", "  if constexpr (L == ScaleLayout::kAtom128x4) {\n    const long long k_atoms",
                     "  if constexpr (false) {\n    const long long k_atoms"),
}
FAST_PLANTED = ("wrong_byte_id",)


@pytest.mark.parametrize("bug", [pytest.param(b, marks=() if b in FAST_PLANTED else pytest.mark.slow)
                                 for b in PLANTED])
def test_planted_scale_bugs_are_caught(bug):
    header, old, new = PLANTED[bug]
    source = (MXS.folder / "mx_atom.cu").read_text()
    mutant = with_mutated_runtime(source, header, old, new)
    case = CASES["mx_atom"][2]  # four K tiles of four blocks
    result, entry = MXS.run("mx_atom", case, "sm_120a", seed=11, source=mutant)
    assert entry == "mx_atom_t1_sm120"
    assert not result.passed, f"planted bug {bug} went unnoticed"


@pytest.mark.slow
def test_a_stage_read_before_it_landed_is_caught():
    source = (MXS.folder / "mx_e5.cu").read_text()
    mutant = with_mutated_runtime(source, "gg_gemm.cuh", "gg::cp_async_wait_group<T::kStages - 2>();",
                                  "gg::cp_async_wait_group<T::kStages - 1>();")
    # The emulator's cp.async destination reads as poison (0xFF, an FP8 NaN)
    # until the thread's wait_group lands it: the MMAs see NaNs.
    result, entry = MXS.run("mx_e5", CASES["mx_e5"][0], "sm_120a", source=mutant)
    assert entry == "mx_e5_sm120" and not result.passed


def test_a_tile_over_99_kib_is_a_spec_error():
    text = SPEC.replace("tile m=64 n=64 k=128\n  tile_rule", "tile m=128 n=256 k=128\n  stages 3\n  tile_rule")
    with pytest.raises(SpecError) as err:
        validate(parse(text, "specs/x.gemm"), diagnose=backends.diagnose)
    assert "over the 101376 that sm_120a allows" in str(err.value)


# ---------------------------------------------------------------------------
# nvcc: the block-scaled entries' SASS and resources.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None or nvcc.find_cuda_tool("cuobjdump") is None,
                                reason="nvcc / cuobjdump are not installed")


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_120a", "sm_121a"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in ("mx_atom", "mx_moe") else pytest.mark.slow)
                                  for n in MX])
def test_nvcc_block_scaled_entries(arch, name):
    path = MXS.folder / f"{name}.cu"
    result = nvcc.compile_check(path.read_text(), arch, name_for_errors=str(path), include_dirs=(MXS.folder,))
    sass = nvcc.sass_summary(result.cubin)
    p = tile_gemm.plan(MXS.spec.kernel(name), MXS.spec)
    for t in p.body_tiles("sm120"):
        s = sass[t.entry]
        assert s.count("QMMA", "SF") > 0 and s.count("QMMA", "SF") == s.count("QMMA"), s.opcodes
        assert s.count("HMMA") == 0
        plain = sass[t.base.entry]  # the mma.sync entry beside it: QMMA without scales
        assert plain.count("QMMA") > 0 and plain.count("QMMA", "SF") == 0
        usage = result.kernels[t.entry]
        assert usage.spills == 0, usage
        assert t.base.smem_bytes + usage.static_smem <= shared_memory_limit(arch) == 101376


def test_explain_names_the_block_scaled_path():
    from gemmgen.explain.plans import cuda_lines
    from gemmgen.explain.roofline import tensor_path

    k = MXS.spec.kernel("mx_moe")
    assert tensor_path(k, "sm_120a").block_scaled and tensor_path(k, "sm_121a").block_scaled
    assert not tensor_path(k, "sm_89").block_scaled
    assert not tensor_path(MXS.spec.kernel("ds_blk"), "sm_120a").block_scaled
    text = "\n".join(cuda_lines(MXS.spec, k, 300, 256, 512, 4))
    assert "sm_120a: block-scaled mma.sync" in text and "(12.0, 12.1: block-scaled)" in text
    assert "launch mx_moe_sm120:" in text


def _nvrtc_missing() -> bool:
    from gemmgen.harness import nvrtc

    try:
        nvrtc.load()
    except nvrtc.NvrtcNotFound:
        return True
    return nvcc.find_cuda_tool("cuobjdump") is None


@pytest.mark.skipif(_nvrtc_missing(), reason="NVRTC / cuobjdump are not installed")
@pytest.mark.parametrize("sm", [120, 121])
def test_nvrtc_builds_the_block_scaled_entries(sm):
    """What the CuPy launcher compiles on a 12.0 / 12.1 device: NVRTC with
    its own compile_options(sm). NVRTC 13.5 defines no
    __CUDA_ARCH_FEAT_SM121_ALL for sm_121a (nvcc does), so the entries are
    gated on GG_SM12X_BLOCK_SCALED, which also reads __CUDA_ARCH_SPECIFIC__:
    a build that lost the MMAs would hold only the trap."""
    from gemmgen.harness import nvrtc

    lm = MXS.launcher("mx_moe")
    options = lm.compile_options(sm)
    assert options[-1] == f"-arch=sm_{sm}a"
    result = nvrtc.compile_program((MXS.folder / "mx_moe.cu").read_text(), "mx_moe.cu", options)
    sass = nvcc.sass_summary(result.cubin)
    assert sass["mx_moe_sm120"].count("QMMA", "SF") > 0
