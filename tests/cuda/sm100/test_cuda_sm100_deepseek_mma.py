"""DeepSeek's block-scaled FP8 with e8m0 scales promoted in hardware on the
sm_100a body (issue 30; docs/cuda-sm100.md, "DeepSeek's scales in
hardware"; docs/semantics.md, "Software and hardware promotion"): lhs
`per_token_group k=128 e8m0` and rhs `block n=128 k=128 e8m0` applied by the
block-scaled tcgen05.mma (kind::mxf8f6f4, scale_vec::1X), each scale repeated
over its four 32-wide K blocks and its rows. What the plan gives them, the
spec's `promotion` field and its diagnostics, the generated kernels on the
emulator of an sm_100a device against the NumPy reference (fresh random
inputs, outputs poisoned; m = 1, partial tiles, k not a multiple of the K
tile, zero-size groups, group_offset with existing_out, the masked layout,
silu_mul), planted bugs the comparison catches, and nvcc for sm_100a
(UTCQMMA, no spills).

The unmarked cases are one of each kind; the rest are `slow`."""

from __future__ import annotations

import numpy as np
import pytest
from sm100_helpers import SM100, Sm100Spec

from gemmgen import ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.cases import Case
from gemmgen.harness import nvcc
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, reference

SPEC = """
target cuda {
  archs sm_100a
}

defaults {
  lhs e4m3 [m, k]
  out bf16
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=128 k=128 e8m0
  tile m=128 n=128 k=128
  backends cuda
}

kernel ds_dense {
  op dense
  rhs e4m3 [n, k]
}

kernel ds_dense_wide {
  op dense
  rhs e4m3 [n, k]
  rhs_scale block n=64 k=128 e8m0
  tile m=128 n=192 k=128
}

kernel ds_dense_soft {
  op dense
  rhs e4m3 [n, k]
  promotion software
}

kernel ds_grouped {
  op grouped
  rhs e4m3 [g, n, k]
  out f32
  promotion hardware
}

kernel ds_masked {
  op grouped
  lhs e5m2 [g, m, k]
  rhs e5m2 [g, n, k]
  rhs_scale block n=64 k=256 e8m0
  bias f32 [n]
}

kernel ds_gateup {
  op grouped
  rhs e4m3 [g, n, k]
  epilogue silu_mul
}
"""

BODY = Sm100Spec("sm100ds", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check


def seed() -> int:
    return int(np.random.default_rng().integers(1 << 30))


CASES = [
    ("ds_dense", Case("ragged", 130, 136, 208), 2, False),
    ("ds_dense", Case("m1", 1, 128, 128), 1, False),
    ("ds_dense", Case("k_wraps", 300, 264, 416), 1, False),
    ("ds_dense_wide", Case("ragged", 300, 400, 544), 2, False),
    ("ds_dense_soft", Case("ragged", 130, 136, 208), 2, False),
    ("ds_grouped", Case("shard", 260, 136, 288, group_sizes=(60, 100, 0, 100), group_offset=1,
                        g_local=2, existing_out=True), 2, True),
    ("ds_grouped", Case("zero_size", 300, 128, 256, group_sizes=(40, 0, 130, 0, 130)), 3, False),
    ("ds_masked", Case("masked", 150, 200, 544, masked_m=(150, 0, 17, 128)), 2, False),
    ("ds_gateup", Case("gateup", 200, 400, 160, group_sizes=(70, 0, 130)), 2, False),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}", marks=() if fast else pytest.mark.slow)
    for n, c, s, fast in CASES])
def test_deepseek_scales_in_hardware_on_the_emulator(name, case, num_sms):
    check(name, case, num_sms, seed=seed())


@pytest.mark.slow
def test_cpp_launcher_runs_the_deepseek_hardware_path():
    """launch_ds_grouped() asks the emulated device for its compute
    capability (10.0) and launches the block-scaled sm_100a entry."""
    check("ds_grouped", CASES[5][1], 3, seed=seed(), cpp=True)


def test_plan_promotes_e8m0_deepseek_scales_in_hardware_by_default():
    """`promotion auto` (the default) and `hardware`: the block-scaled tile
    (no promotion, 1 KiB of atoms a stage for 128 columns); `software`: the
    promoted tile of issue 29."""
    for name in ("ds_dense", "ds_dense_wide", "ds_grouped", "ds_masked", "ds_gateup"):
        k = kernel(name)
        assert k.tcgen05_deepseek_mma and k.tcgen05_block_scaled, name
        (t,) = tile_gemm.plan(k, BODY.spec).body_tiles("tcgen05")
        assert (t.block_scaled, t.deepseek, t.promoted) == (True, True, False), name
        assert t.sf_stage == 512 * (1 + -(-t.bn // 128)), name
        assert 2 * t.bn + t.sf_cols <= t.tmem_cols <= 512, name
    soft = kernel("ds_dense_soft")
    assert soft.promotion is ir.Promotion.SOFTWARE and not soft.tcgen05_block_scaled
    (t,) = tile_gemm.plan(soft, BODY.spec).body_tiles("tcgen05")
    assert (t.block_scaled, t.promoted, t.sf_stage) == (False, True, 0)
    # explain names the path and bounds it at B200's FP8 rate.
    from gemmgen.devices import DEVICES
    from gemmgen.explain.plans import cuda_lines
    from gemmgen.explain.roofline import tensor_path

    p = tensor_path(kernel("ds_grouped"), "sm_100a")
    assert p is not None and p.tcgen05 and p.rate(DEVICES["b200"]) == 4500.0
    lines = "\n".join(cuda_lines(BODY.spec, kernel("ds_grouped"), 256, 512, 1024, 4))
    assert "DeepSeek's e8m0 scales in hardware" in lines, lines
    text = (BODY.folder / "ds_dense.cu").read_text()
    assert "static constexpr bool kBlockScaledMma = true;  // DeepSeek's e8m0" in text
    assert "kBlockScaledMma" not in (BODY.folder / "ds_dense_soft.cu").read_text()


def _errors(text: str) -> str:
    from gemmgen import backends
    from gemmgen.diagnostics import SpecError
    from gemmgen.parse import parse
    from gemmgen.validate import validate

    with pytest.raises(SpecError) as err:
        validate(parse(text, "specs/x.gemm"), diagnose=backends.diagnose)
    return str(err.value)


def _one(archs: str, body: str) -> str:
    return ("target cuda {\n  archs " + archs + "\n}\n\nkernel ds {\n  op dense\n"
            "  lhs e4m3 [m, k]\n  rhs e4m3 [n, k]\n  out bf16\n" + body +
            "  backends cuda\n}\n")


DS = "  lhs_scale per_token_group k=128 e8m0\n  rhs_scale block n=128 k=128 e8m0\n"


@pytest.mark.parametrize("archs,body,want", [
    # An arch without the block-scaled tcgen05.mma.
    ("sm_90a sm_100a", DS + "  promotion hardware\n",
     ("x.gemm:12:3: kernel 'ds': 'promotion hardware' needs sm_100a, but target cuda declares "
      "'sm_90a'")),
    # f32 scales: the MMA reads e8m0 bytes.
    ("sm_100a", DS.replace("n=128 k=128 e8m0", "n=128 k=128 f32") + "  promotion hardware\n",
     ("x.gemm:12:3: kernel 'ds': 'promotion hardware' cannot apply this kernel's block scales: "
      "the block-scaled tcgen05.mma reads e8m0 scales (powers of two), but rhs_scale is 'f32'")),
    # The portable body cannot take it.
    ("sm_100a", DS + "  mma mma_sync\n  promotion hardware\n",
     ("x.gemm:13:3: kernel 'ds': 'promotion hardware' is the sm_100a body's (tcgen05), but the "
      "kernel says 'mma mma_sync'")),
    # Nothing to promote.
    ("sm_100a", "  rhs_scale per_channel f32\n  promotion software\n",
     "x.gemm:11:3: kernel 'ds': 'promotion software': the kernel has no per-K-block scales"),
    # MX scales are the MMA's: mma mma_sync promotes them in software.
    ("sm_100a", ("  lhs_scale per_token_group k=32 e8m0\n  rhs_scale block n=1 k=32 e8m0\n"
                 "  promotion software\n"),
     "x.gemm:12:3: kernel 'ds': 'promotion software': the MX / NV block scales of this kernel"),
    ("sm_100a", DS + "  promotion fast\n", "x.gemm:12:13: kernel 'ds':"),
], ids=["sm90a", "f32_scales", "mma_sync", "nothing_to_promote", "mx", "unknown_word"])
def test_promotion_diagnostics_are_positioned(archs, body, want):
    assert want in _errors(_one(archs, body))


def test_auto_promotes_in_software_where_hardware_cannot():
    """`auto` keeps the FP32 promotion for f32 scales and on other archs;
    an sm_90a + sm_100a target promotes e8m0 scales in hardware on sm_100a
    only (the Hopper body promotes in software)."""
    from gemmgen import backends
    from gemmgen.parse import parse
    from gemmgen.validate import validate

    f32 = DS.replace("n=128 k=128 e8m0", "n=128 k=128 f32")
    spec = validate(parse(_one("sm_100a", f32), "x.gemm"), diagnose=backends.diagnose)
    k = spec.kernel("ds")
    assert k.uses_tcgen05("sm_100a") and not k.tcgen05_deepseek_mma
    assert "rhs_scale is 'f32'" in k.hardware_promotion_obstacle()
    spec = validate(parse(_one("sm_90a sm_100a", DS), "x.gemm"), diagnose=backends.diagnose)
    k = spec.kernel("ds")
    assert k.uses_wgmma("sm_90a") and k.uses_tcgen05("sm_100a") and k.tcgen05_deepseek_mma
    plan = tile_gemm.plan(k, spec)
    assert plan.body_tiles("tcgen05")[0].deepseek and plan.body_tiles("wgmma")


# ---------------------------------------------------------------------------
# Planted bugs in the DeepSeek gather (gg_gemm_sm100.cuh's gather_ds_atoms):
# each runs on the emulator and the comparison with the reference fails.

PLANTED = {
    # Each K tile's lhs scale on its first 32-wide K block only (1.0 on the
    # other three): a scale repeated over the wrong K blocks.
    "lhs_first_block_only": [(
        "    word[q] = row < m ? kRepeat * sa[scale_offset<T::kLhsScaleLayout>(",
        "    word[q] = row < m ? 0x7F7F7F00u | sa[scale_offset<T::kLhsScaleLayout>(")],
    # The next K tile's rhs scale (the K blocks shifted by one 128-wide block).
    "rhs_next_k_block": [(
        "                   (long long)w.gl * nblocks * kblocks_b + k0 / T::kRhsScaleBlockK;",
        ("                   (long long)w.gl * nblocks * kblocks_b +\n"
         "                   (k0 / T::kRhsScaleBlockK + 1) % kblocks_b;"))],
    # B row j takes the scale of its tile row's block, not its own: every n
    # tile reads the first n block's scales.
    "rhs_rows_of_the_tile": [(
        "kRepeat * sb[(long long)(row / T::kRhsScaleBlockN) * kblocks_b]",
        "kRepeat * sb[(long long)(local / T::kRhsScaleBlockN) * kblocks_b]")],
    # The rhs scales of group 0 for every group.
    "rhs_first_group": [(
        "                   (long long)w.gl * nblocks * kblocks_b + k0 / T::kRhsScaleBlockK;",
        "                   k0 / T::kRhsScaleBlockK;")],
}
PLANTED_CASE = Case("planted", 200, 264, 416, group_sizes=(80, 0, 120))


@pytest.mark.parametrize("bug", [
    pytest.param(b, marks=() if b == "lhs_first_block_only" else pytest.mark.slow)
    for b in PLANTED])
def test_planted_bug_in_the_deepseek_gather_fails_the_comparison(bug):
    k = kernel("ds_grouped")
    inputs = PLANTED_CASE.inputs(k, seed())
    modules, key = BODY.planted("ds_grouped", PLANTED[bug])
    actual = run_launcher(launcher("ds_grouped"), "", key, inputs, modules=modules, arch=SM100,
                          num_sms=2)
    assert not compare(actual, reference(k, **inputs), k, k=PLANTED_CASE.k,
                       inputs=inputs).passed


@pytest.mark.slow
def test_unplanted_copy_passes():
    """The planted runs' harness with no edit passes: the failures above are
    the bugs'."""
    k = kernel("ds_grouped")
    inputs = PLANTED_CASE.inputs(k, seed())
    modules, key = BODY.planted("ds_grouped", [])
    actual = run_launcher(launcher("ds_grouped"), "", key, inputs, modules=modules, arch=SM100,
                          num_sms=2)
    assert compare(actual, reference(k, **inputs), k, k=PLANTED_CASE.k, inputs=inputs).passed


# ---------------------------------------------------------------------------
# nvcc for sm_100a: the hardware path's entries.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(
    nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("name", [
    pytest.param("ds_grouped", marks=pytest.mark.slow),
    pytest.param("ds_dense", marks=pytest.mark.slow),
    pytest.param("ds_masked", marks=pytest.mark.slow),
    pytest.param("ds_gateup", marks=pytest.mark.slow)])
def test_deepseek_hardware_entries_build_without_spills(name):
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
        assert code.count("UTCQMMA") > 0 and code.count("UTCCP") > 0, step.entry
        assert code.count("HMMA") == 0 and code.count("UTMALDG") > 0, step.entry
