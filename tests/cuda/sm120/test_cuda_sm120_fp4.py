"""MXFP4 and NVFP4 on the block-scaled body (sm_120a / sm_121a,
docs/cuda-blackwell.md): fp4 x fp4 (packed two per byte along k) with e8m0
scales of 32 (kind::mxf4, m16n8k64 scale_vec::2X) or ue4m3 scales of 16
(kind::mxf4nvf4, scale_vec::4X). fp4 has no mma.sync form, so such a kernel
runs on these archs only: its spec may declare nothing else.

Checked: the diagnostics (another arch declared, rhs [k, n], `mma
mma_sync`), the generated kernels on emulated sm_120a / sm_121a devices
against the reference (dense in the atom layout, grouped with row-major lhs
scales, the gate-up and the masked layout, m = 1, k ending inside a K tile,
zero-size groups, group_offset + existing_out), through the Python and the
C++ launcher, planted bugs (the NVFP4 scale word of the wrong K step, 1.0
written as ue8m0's 0x7F, a NaN in ue4m3, for the blocks past k), and nvcc
(OMMA.SF, 0 spills, shared memory within 101,376 bytes).

Unmarked: the diagnostics, NVFP4 dense and masked and MXFP4 grouped on
sm_120a, one case on sm_121a, the C++ launcher once, one planted bug, the
nvcc build of one kernel; the rest are `slow`.
"""

from __future__ import annotations

import pytest
from cuda_helpers import with_mutated_runtime
from sm120_helpers import Sm120Spec

from gemmgen import backends
from gemmgen.archs import shared_memory_limit
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.cases import Case
from gemmgen.diagnostics import SpecError
from gemmgen.harness import nvcc
from gemmgen.parse import parse
from gemmgen.validate import validate

SPEC = """
target cuda {
  archs sm_120a sm_121a
}

defaults {
  lhs fp4 packed [m, k]
  out bf16
  lhs_scale per_token_group k=16 ue4m3
  rhs_scale block n=1 k=16 ue4m3
  backends cuda
}

# NVFP4 as CUTLASS / FlashInfer quantizers write it: both scales in the
# 128 x 4 atom, each with its per-tensor global scale; a LUT tile for decode.
kernel nvfp4_dense {
  op dense
  rhs fp4 packed [n, k]
  lhs_scale per_token_group k=16 ue4m3 layout=atom128x4 global=f32
  rhs_scale block n=1 k=16 ue4m3 layout=atom128x4 global=f32
  tile m=64 n=64 k=128
  tile_rule m<=16 -> m=16 n=64 k=128
}

# MXFP4 x MXFP4 (e8m0 scales of 32), f32 out with a bias.
kernel mx4_dense {
  op dense
  rhs fp4 packed [n, k]
  out f32
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  bias f32 [n]
  tile m=64 n=64 k=64
  stages 3
}

# NVFP4 experts: row-major activation scales, atom weight scales, a global
# scale per expert on both.
kernel nvfp4_moe {
  op grouped
  rhs fp4 packed [g, n, k]
  lhs_scale per_token_group k=16 ue4m3 global=f32
  rhs_scale block n=1 k=16 ue4m3 layout=atom128x4 global=f32
  tile m=64 n=64 k=64
  stages 3
}

# MXFP4 experts: row-major e8m0 scales on both sides, two blocks per K tile.
kernel mx4_moe {
  op grouped
  rhs fp4 packed [g, n, k]
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  tile m=64 n=64 k=64
  stages 3
}

# The gate-up (silu_mul) and the masked layout.
kernel nvfp4_gate {
  op grouped
  rhs fp4 packed [g, n, k]
  epilogue silu_mul
  tile m=64 n=64 k=64
  stages 3
}

# GPT-OSS's gated activation in halves, per-expert bias (MX / NV bodies run
# swiglu_clamped as silu_mul: pairs=halves).
kernel nvfp4_swiglu {
  op grouped
  rhs fp4 packed [g, n, k]
  bias f32 [g, 1, n]
  epilogue swiglu_clamped pairs=halves limit=1
  tile m=64 n=64 k=64
  stages 3
}

kernel nvfp4_masked {
  op grouped
  lhs fp4 packed [g, m, k]
  rhs fp4 packed [g, n, k]
  rhs_scale block n=1 k=16 ue4m3 global=f32
  tile m=64 n=64 k=64
  stages 3
}
"""

FP4 = Sm120Spec(SPEC, "sm120fp4")
NAMES = ("nvfp4_dense", "mx4_dense", "nvfp4_moe", "nvfp4_gate", "nvfp4_swiglu", "nvfp4_masked",
         "mx4_moe")
CASES = {
    "nvfp4_dense": [Case("ragged", 130, 96, 160), Case("m1", 1, 64, 128), Case("deep", 70, 128, 512)],
    "mx4_dense": [Case("ragged", 77, 80, 192), Case("m1", 1, 64, 64)],
    "nvfp4_moe": [Case("sharded", 150, 64, 96, group_sizes=(40, 0, 70, 40), group_offset=1, g_local=2,
                    existing_out=True),
               Case("groups", 150, 64, 96, group_sizes=(40, 0, 70, 40))],
    "nvfp4_gate": [Case("groups", 100, 128, 64, group_sizes=(10, 0, 90))],
    "nvfp4_swiglu": [Case("sharded", 100, 200, 96, group_sizes=(10, 0, 70, 20), group_offset=1,
                          g_local=2, existing_out=True)],
    "nvfp4_masked": [Case("masked", 40, 64, 96, masked_m=(40, 0, 17))],
    "mx4_moe": [Case("groups", 150, 64, 160, group_sizes=(40, 0, 70, 40))],
}


def _errors(text: str) -> str:
    with pytest.raises(SpecError) as err:
        validate(parse(text, "specs/x.gemm"), diagnose=backends.diagnose)
    return str(err.value)


def test_fp4_needs_the_block_scaled_archs_only():
    text = SPEC.replace("archs sm_120a sm_121a", "archs sm_89 sm_120a")
    assert ("multiplies fp4 x fp4 on the block-scaled MMAs of sm_120a / sm_121a (mma.sync) and "
            "sm_100a / sm_103a (tcgen05) only; the cuda "
            "target declares sm_89 too") in _errors(text)


def test_fp4_diagnostics_name_what_the_body_lacks():
    kn = SPEC.replace("  op dense\n  rhs fp4 packed [n, k]\n  lhs_scale per_token_group k=16 ue4m3 "
                      "layout=atom128x4", "  op dense\n  rhs fp4 packed [k, n]\n  lhs_scale "
                      "per_token_group k=16 ue4m3 layout=atom128x4", 1)
    assert "reads fp4 weights K-major: rhs [n, k] or [g, n, k]" in _errors(kn)
    forced = SPEC.replace("  tile m=64 n=64 k=64\n  stages 3\n}\n\n# NVFP4 experts",
                          "  tile m=64 n=64 k=64\n  stages 3\n  mma mma_sync\n}\n\n# NVFP4 experts")
    assert "fp4 x fp4 has no 'mma_sync' body" in _errors(forced)
    mixed = SPEC.replace("  rhs_scale block n=1 k=16 ue4m3 layout=atom128x4 global=f32\n  tile m=64",
                         "  rhs_scale block n=1 k=32 e8m0 layout=atom128x4\n  tile m=64")
    assert "MXFP4's ('e8m0', k=32) or NVFP4's ('ue4m3', k=16), the same on both sides" in _errors(mixed)


def test_every_fp4_kernel_gets_the_block_scaled_body():
    for name in NAMES:
        p = tile_gemm.plan(FP4.spec.kernel(name), FP4.spec)
        assert [b.name for b in p.bodies] == ["sm120"], name
        # The mma.sync GEMM entries exist only as traps the launchers never take.
        gemms = [e for e in p.entries if not any("gg::gemm::fill" in line or "gg::gemm::worklist"
                                                 in line for line in e.body)]
        assert gemms and all(e.body[-1] == "  __trap();" for e in gemms)


# CI: NVFP4 dense (atom) and masked, MXFP4 grouped (row-major scales).
FAST = [("nvfp4_dense", 0), ("nvfp4_masked", 0), ("mx4_moe", 0), ("nvfp4_swiglu", 0)]
ALL = [(name, i) for name, cases in CASES.items() for i in range(len(cases))]


@pytest.mark.parametrize("name, i", [pytest.param(*c, marks=() if c in FAST else pytest.mark.slow)
                                     for c in ALL], ids=[f"{n}-{CASES[n][i].name}" for n, i in ALL])
def test_fp4_kernels_match_reference(name, i):
    result, entry = FP4.run(name, CASES[name][i], "sm_120a", seed=i)
    assert entry.startswith(name) and entry.endswith("_sm120"), entry
    assert result.passed, result.detail


@pytest.mark.parametrize("name", ["nvfp4_moe", pytest.param("mx4_dense", marks=pytest.mark.slow)])
def test_fp4_on_sm_121a(name):
    result, entry = FP4.run(name, CASES[name][0], "sm_121a", seed=4)
    assert entry.endswith("_sm120") and result.passed, result.detail


def test_fp4_cpp_launcher():
    result, _ = FP4.run("nvfp4_dense", CASES["nvfp4_dense"][0], "sm_120a", seed=2, cpp=True)
    assert result.passed, result.detail


PLANTED = {
    # NVFP4's step ks reads word ks: reading the next one scales by the
    # wrong K blocks.
    "wrong_word": ("gg_gemm.cuh", "const int first = ks * kPer, w = first / 4;",
                   "const int first = ks * kPer, w = (first / 4 + 1) % kMxWords<T>;"),
    # 1.0 as ue8m0's byte is a NaN in ue4m3: the blocks past k (zero
    # operands) would turn every output NaN.
    "fill_nan": ("gg_gemm.cuh", "T::kLhsScaleFormat == Format::kUE4M3 ? 0x38 : 0x7F;",
                 "T::kLhsScaleFormat == Format::kUE4M3 ? 0x7F : 0x7F;"),
    # NVFP4's global scales applied never, twice, or the first group's to
    # every group.
    "global_never": ("gg_epilogue.cuh", "v *= global;", "v *= 1.0f;"),
    "global_twice": ("gg_epilogue.cuh", "v *= global;", "v *= global * global;"),
    "global_group": ("gg_epilogue.cuh", "s *= rhs_global[gl];", "s *= rhs_global[0];"),
}
PLANTED["swiglu_up_unclamped"] = ("gg_convert.cuh",
                                  "up = up > limit ? limit : (up < -limit ? -limit : up);",
                                  "up = up > limit ? limit : up;")
# The kernel and case each bug is planted in (default: nvfp4_dense, ragged).
PLANTED_IN = {"global_group": ("nvfp4_moe", 1), "swiglu_up_unclamped": ("nvfp4_swiglu", 0)}


@pytest.mark.parametrize("bug", ["wrong_word", "global_never", "global_group",
                                 "swiglu_up_unclamped"] + [
    pytest.param(b, marks=pytest.mark.slow) for b in ("fill_nan", "global_twice")])
def test_planted_fp4_bugs_are_caught(bug):
    header, old, new = PLANTED[bug]
    name, i = PLANTED_IN.get(bug, ("nvfp4_dense", 0))
    source = (FP4.folder / f"{name}.cu").read_text()
    mutant = with_mutated_runtime(source, header, old, new)
    case = CASES[name][i]  # nvfp4_dense: k = 160, the second K tile ends inside the tile
    result, entry = FP4.run(name, case, "sm_120a", seed=9, source=mutant)
    assert entry.endswith("_sm120")
    assert not result.passed, f"planted bug {bug} went unnoticed"


needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None or nvcc.find_cuda_tool("cuobjdump") is None,
                                reason="nvcc / cuobjdump are not installed")


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_120a", pytest.param("sm_121a", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", ["nvfp4_dense", pytest.param("mx4_dense", marks=pytest.mark.slow),
                                  pytest.param("nvfp4_moe", marks=pytest.mark.slow)])
def test_nvcc_fp4_entries(arch, name):
    path = FP4.folder / f"{name}.cu"
    result = nvcc.compile_check(path.read_text(), arch, name_for_errors=str(path), include_dirs=(FP4.folder,))
    sass = nvcc.sass_summary(result.cubin)
    k = FP4.spec.kernel(name)
    want = "UE4M3" if k.lhs_scale.dtype.value == "ue4m3" else "E8"
    p = tile_gemm.plan(k, FP4.spec)
    for t in p.body_tiles("sm120"):
        s = sass[t.entry]
        assert s.count("OMMA", "SF", want) > 0 and s.count("OMMA", "SF", want) == s.count("OMMA")
        assert s.count("QMMA") == s.count("HMMA") == 0
        usage = result.kernels[t.entry]
        assert usage.spills == 0, usage
        assert t.base.smem_bytes + usage.static_smem <= shared_memory_limit(arch) == 101376
