"""W4A8 on the block-scaled body (sm_120a / sm_121a, docs/cuda-blackwell.md):
MXFP8 activations (e4m3 with e8m0 scales of 32) times MXFP4 weights (packed
fp4 [n, k] with e8m0 scales of 32) on the m16n8k32 kind::mxf8f6f4 MMA with
.e4m3.e2m1 types, the weights unpacked to one e2m1 a byte on their way from
shared memory to the fragments. No mma.sync form takes e2m1, so such a
kernel runs on these archs only: its spec may declare nothing else.

Checked: the diagnostics (another arch declared, rhs [k, n], `mma
mma_sync`, NVFP4 scales, e5m2 activations), the generated kernels on
emulated sm_120a / sm_121a devices against the reference (dense in the atom
layout with a decode LUT tile, grouped with row-major activation scales,
the gate-up and the masked layout; m = 1, partial tiles, k ending inside a K
tile, zero-size groups, group_offset + existing_out), through the Python and
the C++ launcher; planted bugs (the nibbles of a packed byte swapped, the
e2m1 left in the low bits of its container, the fragment's second word read
from the wrong K); nvcc (QMMA.SF ... E4M3.E2M1 in every block-scaled entry,
0 spills, shared memory within 101,376 bytes).

Unmarked: the diagnostics, W4A8 dense and grouped and masked on sm_120a,
one case on sm_121a, the C++ launcher once, two planted bugs, the nvcc
build of one kernel on each arch; the rest are `slow`.
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
from gemmgen.harness.cuda_emu import EmuError
from gemmgen.parse import parse
from gemmgen.validate import validate

SPEC = """
target cuda {
  archs sm_120a sm_121a
}

defaults {
  lhs e4m3 [m, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  backends cuda
}

# Both scales in the 128 x 4 atom (as CUTLASS / FlashInfer quantizers write
# them); a LUT tile for decode (16 x 32: ptxas 13.5 spills 12 bytes at 16 x
# 64 x 128, docs/cuda-blackwell.md).
kernel w4a8_dense {
  op dense
  rhs fp4 packed [n, k]
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  tile m=64 n=64 k=128
  tile_rule m<=16 -> m=16 n=32 k=128
}

# Experts: row-major activation scales, atom weight scales, f32 out.
kernel w4a8_moe {
  op grouped
  rhs fp4 packed [g, n, k]
  out f32
  tile m=64 n=64 k=64
  stages 3
}

# The gate-up (silu_mul) and the masked layout.
kernel w4a8_gate {
  op grouped
  rhs fp4 packed [g, n, k]
  epilogue silu_mul
  tile m=64 n=64 k=64
  stages 3
}

kernel w4a8_masked {
  op grouped
  lhs e4m3 [g, m, k]
  rhs fp4 packed [g, n, k]
  tile m=64 n=64 k=128
}
"""

W4A8 = Sm120Spec(SPEC, "sm120w4a8")
NAMES = ("w4a8_dense", "w4a8_moe", "w4a8_gate", "w4a8_masked")
CASES = {
    "w4a8_dense": [Case("ragged", 130, 96, 160), Case("m1", 1, 64, 128), Case("deep", 70, 128, 544)],
    "w4a8_moe": [Case("groups", 150, 64, 96, group_sizes=(40, 0, 70, 40)),
                 Case("sharded", 150, 64, 96, group_sizes=(40, 0, 70, 40), group_offset=1,
                      g_local=2, existing_out=True)],
    "w4a8_gate": [Case("groups", 100, 128, 64, group_sizes=(10, 0, 90))],
    "w4a8_masked": [Case("masked", 40, 64, 96, masked_m=(40, 0, 17))],
}


def _errors(text: str) -> str:
    with pytest.raises(SpecError) as err:
        validate(parse(text, "specs/x.gemm"), diagnose=backends.diagnose)
    return str(err.value)


def _line_of(text: str, needle: str, after: str) -> int:
    """1-based line of the first `needle` line after the line holding `after`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return next(i for i in range(start, len(lines)) if needle in lines[i]) + 1


def test_w4a8_needs_the_block_scaled_archs_only():
    text = SPEC.replace("archs sm_120a sm_121a", "archs sm_89 sm_120a")
    err = _errors(text)
    assert ("kernel 'w4a8_dense': cuda multiplies e4m3 x fp4 (W4A8) on the block-scaled MMAs "
            "of sm_120a / sm_121a (mma.sync) and sm_100a / sm_103a (tcgen05) only; the cuda "
            "target declares sm_89 too") in err
    # At the kernel's own lhs (here the defaults' line it inherits).
    assert f"specs/x.gemm:{_line_of(text, 'lhs e4m3 [m, k]', 'defaults {')}:" in err


def test_w4a8_diagnostics_name_what_the_body_lacks():
    kn = SPEC.replace("  op dense\n  rhs fp4 packed [n, k]\n", "  op dense\n  rhs fp4 packed [k, n]\n", 1)
    assert kn != SPEC
    assert "reads fp4 weights K-major: rhs [n, k] or [g, n, k]" in _errors(kn)
    forced = SPEC.replace("  rhs fp4 packed [g, n, k]\n  tile m=64 n=64 k=128\n}",
                          "  rhs fp4 packed [g, n, k]\n  tile m=64 n=64 k=128\n  mma mma_sync\n}")
    assert forced != SPEC
    assert "e4m3 x fp4 (W4A8) has no 'mma_sync' body" in _errors(forced)
    nv = SPEC.replace("  lhs_scale per_token_group k=32 e8m0\n  rhs_scale block n=1 k=32 e8m0 "
                      "layout=atom128x4\n", "  lhs_scale per_token_group k=16 ue4m3\n  rhs_scale "
                      "block n=1 k=16 ue4m3 layout=atom128x4\n")
    assert ("its W4A8 scales are MX's on both sides: lhs 'per_token_group k=32 e8m0' and rhs "
            "'block n=1 k=32 e8m0'") in _errors(nv)
    e5 = SPEC.replace("  lhs e4m3 [m, k]\n  out bf16", "  lhs e5m2 [m, k]\n  out bf16")
    assert "or e4m3 x fp4 (W4A8), not lhs 'e5m2' x rhs 'fp4'" in _errors(e5)


def test_every_w4a8_kernel_gets_the_block_scaled_body():
    for name in NAMES:
        p = tile_gemm.plan(W4A8.spec.kernel(name), W4A8.spec)
        assert [b.name for b in p.bodies] == ["sm120"], name
        # The mma.sync GEMM entries exist only as traps the launchers never take.
        gemms = [e for e in p.entries if not any("gg::gemm::fill" in line or "gg::gemm::worklist"
                                                 in line for line in e.body)]
        assert gemms and all(e.body[-1] == "  __trap();" for e in gemms)
        # No conversion buffer: the packed tile feeds the fragments.
        assert all(t.b_conv_bytes == 0 for t in p.tiles), name
        text = (W4A8.folder / f"{name}.cu").read_text()
        assert "BFeed kBFeed = gg::gemm::BFeed::kUnpackFp4;" in text


# CI: dense (atom, k ending inside a K tile), grouped (row-major lhs scales,
# a zero-size group), masked.
FAST = [("w4a8_dense", 0), ("w4a8_moe", 0), ("w4a8_masked", 0)]
ALL = [(name, i) for name, cases in CASES.items() for i in range(len(cases))]


@pytest.mark.parametrize("name, i", [pytest.param(*c, marks=() if c in FAST else pytest.mark.slow)
                                     for c in ALL], ids=[f"{n}-{CASES[n][i].name}" for n, i in ALL])
def test_w4a8_kernels_match_reference(name, i):
    result, entry = W4A8.run(name, CASES[name][i], "sm_120a", seed=i)
    assert entry.startswith(name) and entry.endswith("_sm120"), entry
    assert result.passed, result.detail


@pytest.mark.parametrize("name", ["w4a8_moe", pytest.param("w4a8_dense", marks=pytest.mark.slow)])
def test_w4a8_on_sm_121a(name):
    result, entry = W4A8.run(name, CASES[name][-1], "sm_121a", seed=4)
    assert entry.endswith("_sm120") and result.passed, result.detail


def test_w4a8_cpp_launcher():
    result, _ = W4A8.run("w4a8_dense", CASES["w4a8_dense"][0], "sm_120a", seed=2, cpp=True)
    assert result.passed, result.detail


PLANTED = {
    # The two K elements of each packed byte swapped on the way to the
    # fragment (element 2i is the low nibble).
    "nibbles_swapped": ("gg_primitives_sm120.cuh", "x = (x | (x << 4)) & 0x0F0F0F0Fu;",
                        "x = ((x >> 4) | (x << 8)) & 0x0F0F0F0Fu;"),
    # The e2m1 left in the low bits of its byte (ldmatrix's b4x16_p64
    # placement), not bits [5:2].
    "not_shifted": ("gg_primitives_sm120.cuh", "  return x << 2;\n", "  return x;\n"),
    # The fragment's second word read 4 K elements on instead of 16.
    "second_word": ("gg_gemm.cuh", "*reinterpret_cast<const unsigned short*>(src + 8)",
                    "*reinterpret_cast<const unsigned short*>(src + 2)"),
}


@pytest.mark.parametrize("bug", ["nibbles_swapped", "not_shifted",
                                 pytest.param("second_word", marks=pytest.mark.slow)])
def test_planted_w4a8_bugs_are_caught(bug):
    header, old, new = PLANTED[bug]
    source = (W4A8.folder / "w4a8_dense.cu").read_text()
    mutant = with_mutated_runtime(source, header, old, new)
    case = CASES["w4a8_dense"][0]  # k = 160: the second K tile ends inside the tile
    if bug == "not_shifted":  # the emulator refuses the container
        with pytest.raises(EmuError, match="padding bits set"):
            W4A8.run("w4a8_dense", case, "sm_120a", seed=9, source=mutant)
        return
    result, entry = W4A8.run("w4a8_dense", case, "sm_120a", seed=9, source=mutant)
    assert entry.endswith("_sm120")
    assert not result.passed, f"planted bug {bug} went unnoticed"


needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None or nvcc.find_cuda_tool("cuobjdump") is None,
                                reason="nvcc / cuobjdump are not installed")


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_120a", "sm_121a"])
@pytest.mark.parametrize("name", ["w4a8_dense", pytest.param("w4a8_moe", marks=pytest.mark.slow),
                                  pytest.param("w4a8_masked", marks=pytest.mark.slow)])
def test_nvcc_w4a8_entries(arch, name):
    path = W4A8.folder / f"{name}.cu"
    result = nvcc.compile_check(path.read_text(), arch, name_for_errors=str(path),
                                include_dirs=(W4A8.folder,))
    sass = nvcc.sass_summary(result.cubin)
    p = tile_gemm.plan(W4A8.spec.kernel(name), W4A8.spec)
    for t in p.body_tiles("sm120"):
        s = sass[t.entry]
        want = s.count("QMMA", "SF", "E4M3", "E2M1", "E8")
        assert want > 0 and want == s.count("QMMA"), t.entry
        assert s.count("OMMA") == s.count("HMMA") == 0
        usage = result.kernels[t.entry]
        assert usage.spills == 0, usage
        assert t.base.smem_bytes + usage.static_smem <= shared_memory_limit(arch) == 101376
