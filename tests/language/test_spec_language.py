"""The spec language can say everything docs/spec.md lists, and the
examples in docs/spec.md are valid specs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gemmgen import ir
from gemmgen.diagnostics import SpecError
from gemmgen.parse import parse
from gemmgen.validate import identifier_problem, validate

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = ROOT / "tests" / "specs" / "everything.gemm"


def load(text: str, path: str = "t.gemm") -> ir.Spec:
    return validate(parse(text, path))  # language only: no backend diagnostics


@pytest.fixture(scope="module")
def everything() -> ir.Spec:
    return load(EVERYTHING.read_text(), "tests/specs/everything.gemm")


def test_every_construct_is_expressible(everything):
    ks = everything.kernels
    assert {k.op for k in ks} == set(ir.Op)
    operand_dtypes = {k.lhs.dtype for k in ks} | {k.rhs.dtype for k in ks if k.rhs}
    assert operand_dtypes >= set(ir.OPERAND_DTYPES)
    assert {k.rhs.layout for k in ks if k.rhs and k.op is ir.Op.DENSE} == set(ir.Layout)
    assert {k.rhs.layout for k in ks if k.rhs and k.op is ir.Op.GROUPED} == set(ir.Layout)
    assert {k.out for k in ks} == set(ir.OUTPUT_DTYPES) | set(ir.QUANTIZED_OUTPUT_DTYPES) - {ir.DType.E5M2}
    assert {k.acc for k in ks} == {ir.DType.F32, ir.DType.INT32}
    modes = {s.mode for k in ks for s in (k.lhs_scale, k.rhs_scale, k.out_scale)}
    assert modes == set(ir.ScaleMode)
    assert {s.dtype for k in ks for s in (k.lhs_scale, k.rhs_scale, k.out_scale)
            if s.enabled} == set(ir.SCALE_DTYPES)
    assert {s.placement for k in ks for s in (k.lhs_scale, k.rhs_scale) if s.enabled} == \
        set(ir.Placement)
    assert {k.bias.mode for k in ks} == set(ir.BiasMode)
    assert {k.epilogue.activation for k in ks} == set(ir.Activation)
    assert {k.epilogue.pairs for k in ks if k.epilogue.activation is
            ir.Activation.SWIGLU_CLAMPED} == set(ir.Pairs)
    assert any(k.epilogue.alpha == 0.5 for k in ks)
    assert any(k.tile_rules for k in ks) and any(k.warp_tile for k in ks)
    assert any(own.tile_rules for k in ks for own in k.backend_tiles)  # a backend's own LUT
    assert {k.stages for k in ks} == {3} and any(k.threads for k in ks)
    assert {k.algorithm for k in ks} == set(ir.Algorithm)
    assert any(k.lhs.packed or (k.rhs and k.rhs.packed) for k in ks)
    assert any(k.variant_of for k in ks)
    assert {t.backend for t in everything.targets} == set(ir.Backend)
    assert everything.target(ir.Backend.CUDA).cuda_archs == ("sm_89", "sm_90a", "sm_120")
    (d,) = everything.dispatches
    assert [d.pick(m, 4096, 4096) for m in (1, 2, 8, 9, 4096)] == [
        "dense_gemv", "dense_gemv_batched", "dense_gemv_batched", "dense_tile", "dense_tile"]


def test_sweep_names_are_canonical(everything):
    names = [k.name for k in everything.kernels]
    assert len(names) == len(set(names))
    assert "fp8_scaled_lhs_e4m3_lhs_scale_per_token_rhs_scale_per_channel_bf16" in names
    for n in names:
        assert identifier_problem(n) is None or n.startswith("_"), n


def test_tile_lut_first_match_wins(everything):
    k = next(k for k in everything.kernels if k.name.startswith("moe_int8_rhs"))
    assert k.tile_for(32, 4096, 4096) == ir.Tile(64, 128, 128)
    assert k.tile_for(8192, 4096, 4096) == ir.Tile(256, 256, 128)
    assert k.tile_for(8192, 4096, 1024) == k.tile == ir.Tile(128, 128, 128)


def test_positions_survive_into_the_ir(everything):
    k = everything.kernel("int8_gemm")
    assert k.loc.path == "tests/specs/everything.gemm"
    text = EVERYTHING.read_text().splitlines()
    assert text[k.loc.line - 1][k.loc.col - 1:].startswith("int8_gemm")
    assert text[k.rhs_scale.loc.line - 1].strip().startswith("rhs_scale per_channel")


DOC_BLOCKS = re.findall(r"```gemm\n(.*?)```", (ROOT / "docs" / "spec.md").read_text(), re.S)


@pytest.mark.parametrize("index", range(len(DOC_BLOCKS)))
def test_docs_examples_are_valid(index):
    spec = load(DOC_BLOCKS[index], f"docs/spec.md#{index}")
    assert spec.kernels


def test_docs_sweep_example_names():
    spec = load(next(b for b in DOC_BLOCKS if "kernel gmm {" in b))
    names = [k.name for k in spec.kernels]
    assert len(names) == 8
    assert names[0] == "gmm_rhs_gnk_out_f32_tile_128x128x128"
    assert names[-1] == "gmm_rhs_gkn_out_bf16_tile_64x128x128"


def test_identifier_rules():
    assert identifier_problem("gmm_bf16") is None
    for bad in ("class", "match", "int", "template", "__x", "a__b", "_Abc", "gg_x", "launch_a",
                "x" * 97):
        assert identifier_problem(bad) is not None, bad


def test_every_field_has_position_and_all_errors_reported():
    src = ("target pallas_tpu {\n  tpu v9\n}\nkernel gemm {\n  op dense\n  lhs bf16 [m, k]\n"
           "  rhs bf16 [n, k]\n  out f33\n  stages 0\n  backends pallas_tpu\n}\n")
    from gemmgen.diagnostics import SpecError
    with pytest.raises(SpecError) as e:
        load(src)
    got = [(d.loc.line, d.loc.col) for d in e.value.diagnostics]
    assert got == [(2, 7), (8, 7), (9, 10)]


def _big(block: str) -> bool:  # fixed dims large enough to take tens of seconds
    return bool(re.search(r"dims n=\d{4,} k=\d{4,}", block))


@pytest.mark.parametrize("index", [
    pytest.param(i, marks=pytest.mark.slow) if _big(b) else i for i, b in enumerate(DOC_BLOCKS)])
def test_docs_examples_run_on_the_reference(index):
    """What docs/spec.md shows, the validator accepts (above) and the
    reference computes: the two may not disagree about a documented kernel."""
    import numpy as np

    from gemmgen import reference as R
    from gemmgen.ir import Op

    spec = load(DOC_BLOCKS[index], f"docs/spec.md#{index}")
    rng = np.random.default_rng(index)
    for k in spec.kernels:
        n = k.static_n or 64
        kk = k.static_k or 256
        extra = {"num_groups": 3} if k.grouped else {}
        inputs = R.random_inputs(k, m=4, n=n, k=kk, rng=rng, **extra)
        out = R.reference(k, **inputs)
        value = out[0] if k.op is Op.QUANTIZE else out
        assert np.isfinite(np.asarray(value, np.float64)).all(), k.name


def test_a_one_line_block_is_one_error_and_recovery_moves_on():
    """`target cuda { arch sm_90a }` on one line: one positioned error per
    block (recovery used to report the same '}' until the error limit), and
    the blocks after it are still parsed."""
    from gemmgen.parse import SpecError

    text = ("target cuda { arch sm_90a }\n"
            "kernel k { op dense }\n"
            "kernel j {\n  op dense\n  lhs bf16 [m, k] }\n"
            "kernel i {\n  op\n}\n")
    with pytest.raises(SpecError) as e:
        parse(text, "x.gemm")
    where = [(d.loc.line, d.loc.col) for d in e.value.diagnostics]
    assert len(where) == len(set(where)) == 4, [d.message for d in e.value.diagnostics]
    assert [line for line, _ in where] == [1, 2, 5, 7]


# -- mma: which tensor-core instruction a CUDA tile kernel is built on --------

MMA_TARGETS = """
target cuda {
  archs ARCHS
}

target pallas_tpu {
  tpu v5e
}
"""


def mma_kernel(body: str, archs: str = "sm_90a") -> ir.Kernel:
    (k,) = load(MMA_TARGETS.replace("ARCHS", archs) + "kernel mm {\n" + body + "\n}\n").kernels
    return k


BF16_NK = "op dense\nlhs bf16 [m, k]\nrhs bf16 [n, k]\nout bf16\nbackends cuda"


def test_mma_defaults_to_auto_and_reads_each_value():
    assert mma_kernel(BF16_NK).mma is ir.Mma.AUTO
    for word, mma in (("auto", ir.Mma.AUTO), ("wgmma", ir.Mma.WGMMA),
                      ("mma_sync", ir.Mma.MMA_SYNC)):
        assert mma_kernel(BF16_NK + f"\nmma {word}").mma is mma


def test_mma_sweeps_into_named_variants():
    spec = load(MMA_TARGETS.replace("ARCHS", "sm_90a") + "kernel mm {\n" + BF16_NK +
                "\nmma wgmma | mma_sync\n}\n")
    assert [(k.name, k.mma) for k in spec.kernels] == [
        ("mm_mma_wgmma", ir.Mma.WGMMA), ("mm_mma_mma_sync", ir.Mma.MMA_SYNC)]
    from gemmgen.describe import describe_kernel

    assert [describe_kernel(k).rsplit(" stages 2 ", 1)[1] for k in spec.kernels] == [
        "mma wgmma [cuda]", "mma mma_sync [cuda]"]
    assert "mma" not in describe_kernel(mma_kernel(BF16_NK))


# Kernels the Hopper body runs (bf16/f16 x the same type, dense or grouped,
# both rhs layouts, any out, bias, alpha, any activation (silu_mul too);
# e4m3/e5m2 x the same type [n, k] with epilogue or block scales),
# and kernels it does not run, each with the word its obstacle names.
QUALIFY = (
    "op dense\nlhs bf16 [m, k]\nrhs bf16 [k, n]\nout f32\nbackends cuda",
    "op grouped\nlhs f16 [m, k]\nrhs f16 [g, n, k]\nout f16\nbias f32 [n]\n"
    "epilogue gelu alpha=2\nbackends cuda",
    "op grouped\nlhs bf16 [m, k]\nrhs bf16 [g, k, n]\nout bf16\nbias bf16 [g, 1, n]\n"
    "dims n=4096 k=1024\nbackends cuda",
    "op dense\nlhs bf16 [m, k]\nrhs bf16 [n, k]\nout f32\ndims n=4099 k=8\nbackends cuda",
    "op grouped\nlhs e4m3 [m, k]\nrhs e4m3 [g, n, k]\nout bf16\nbackends cuda",
    "op dense\nlhs bf16 [m, k]\nrhs bf16 [n, k]\nout bf16\nrhs_scale per_channel\nbackends cuda",
    "op dense\nlhs e5m2 [m, k]\nrhs e5m2 [n, k]\nout f32\nlhs_scale per_tensor\n"
    "rhs_scale per_channel e8m0\nbias f32 [n]\nbackends cuda",
    "op grouped\nlhs e4m3 [m, k]\nrhs e4m3 [g, n, k]\nout bf16\n"
    "lhs_scale per_token_group k=128\nrhs_scale block n=128 k=128\nbackends cuda",
    "op dense\nlhs bf16 [m, k]\nrhs bf16 [n, k]\nout bf16\nepilogue silu_mul\nbackends cuda",
    # Weight-only (the Hopper body's weight-only tile).
    ("op dense\nlhs bf16 [m, k]\nrhs fp4 packed [n, k]\nout bf16\n"
     "rhs_scale block n=1 k=128 e8m0\nbackends cuda"),
    "op grouped\nlhs f16 [m, k]\nrhs int4 packed [g, n, k]\nout f16\n"
    "rhs_scale kblock k=128\nepilogue silu_mul\nbackends cuda",
    "op grouped\nlhs e4m3 [m, k]\nrhs e4m3 [g, n, k]\nout bf16\n"
    "lhs_scale per_token_group k=128\nrhs_scale block n=128 k=128\nepilogue silu_mul\n"
    "backends cuda",
)
DO_NOT_QUALIFY = (
    ("op tgmm\nlhs bf16 [m, k]\nrhs bf16 [m, n]\nout f32\nbackends cuda", "'tgmm'"),
    ("op quantize\nlhs bf16 [m, k]\nout e4m3\nout_scale per_token_group k=128\n"
     "backends cuda", "'quantize'"),
    ("op dense\nlhs bf16 [m, k]\nrhs bf16 [n, k]\nout bf16\nalgorithm gemv_batched\nmax_m 8\n"
     "backends cuda", "'gemv_batched'"),
    ("op dense\nlhs f32 [m, k]\nrhs f32 [k, n]\nout f32\nbackends cuda", "'f32'"),
    ("op dense\nlhs bf16 [m, k]\nrhs f16 [k, n]\nout f32\nbackends cuda", "'f16'"),
    # Weight-only: [k, n] weights, a scale K block under the 64-element K
    # tile, lhs per-K-block scales, int4 rows not 16 bytes.
    ("op dense\nlhs bf16 [m, k]\nrhs int8 [k, n]\nout bf16\nbackends cuda", "[n, k]"),
    ("op dense\nlhs bf16 [m, k]\nrhs int4 packed [n, k]\nout bf16\n"
     "rhs_scale block n=1 k=32\ntile m=64 n=128 k=32\nbackends cuda", "k=32"),
    ("op dense\nlhs bf16 [m, k]\nrhs int8 [n, k]\nout bf16\n"
     "lhs_scale per_token_group k=128\nbackends cuda", "per_token_group"),
    ("op dense\nlhs f16 [m, k]\nrhs int4 packed [n, k]\nout f16\ndims k=48\nbackends cuda",
     "k % 32"),
    ("op grouped\nlhs e4m3 [m, k]\nrhs e4m3 [g, k, n]\nout bf16\nbackends cuda", "K-major"),
    ("op dense\nlhs bf16 [m, k]\nrhs bf16 [n, k]\nout bf16\nrhs_scale block n=128 k=128\n"
     "backends cuda", "'block'"),
    ("op dense\nlhs e4m3 [m, k]\nrhs e4m3 [n, k]\nout bf16\n"
     "lhs_scale per_token_group k=128 e8m0\nrhs_scale per_channel\nbackends cuda", "e8m0"),
    ("op dense\nlhs e5m2 [m, k]\nrhs e5m2 [n, k]\nout bf16\nrhs_scale block n=32 k=128\n"
     "backends cuda", "n must be a multiple of 64"),
    ("op dense\nlhs e4m3 [m, k]\nrhs e4m3 [n, k]\nout bf16\ndims k=24\nbackends cuda",
     "k % 16"),
    ("op dense\nlhs bf16 [m, k]\nrhs bf16 [n, k]\nout bf16\ndims k=4\nbackends cuda", "k=4"),
    ("op dense\nlhs bf16 [m, k]\nrhs bf16 [k, n]\nout bf16\ndims n=12\nbackends cuda", "n=12"),
)


@pytest.mark.parametrize("body", QUALIFY)
def test_auto_picks_wgmma_on_sm90a_only(body):
    # FP8 tensor-core MMAs need sm_89 or newer (validation).
    older = "" if "e4m3" in body or "e5m2" in body else "sm_80 sm_86 "
    k = mma_kernel(body, older + "sm_89 sm_90 sm_90a sm_100a sm_120")
    assert k.wgmma_obstacle() is None
    assert [a for a in ir.CUDA_ARCHS if k.uses_wgmma(a)] == ["sm_90a"]
    forced = mma_kernel(body + "\nmma wgmma")
    assert forced.uses_wgmma("sm_90a")
    for sync in (mma_kernel(body + "\nmma mma_sync"),
                 mma_kernel(body + "\nmma mma_sync", "sm_89 sm_90a")):
        assert not any(sync.uses_wgmma(a) for a in ir.CUDA_ARCHS)


@pytest.mark.parametrize("body,named", DO_NOT_QUALIFY)
def test_auto_keeps_mma_sync_where_the_hopper_body_cannot_run(body, named):
    k = mma_kernel(body)
    why = k.wgmma_obstacle()
    assert why is not None and named in why
    assert not any(k.uses_wgmma(a) for a in ir.CUDA_ARCHS)
    with pytest.raises(SpecError) as e:
        mma_kernel(body + "\nmma wgmma")
    (d,) = e.value.diagnostics
    assert (d.loc.line, d.loc.col) == (body.count("\n") + 11, 1)
    assert "'mma wgmma' cannot run this kernel on the Hopper body" in d.message
    assert named in d.message


def test_wgmma_needs_sm90a_on_every_arch_and_a_cuda_backend():
    for archs, bad in (("sm_89", ["sm_89"]), ("sm_90", ["sm_90"]), ("sm_100a", ["sm_100a"]),
                       ("sm_80 sm_90a sm_120", ["sm_80", "sm_120"])):
        with pytest.raises(SpecError) as e:
            mma_kernel(BF16_NK + "\nmma wgmma", archs)
        got = sorted(d.message for d in e.value.diagnostics)
        why = {a: " (wgmma is an sm_90a instruction);" for a in bad} | {
            a: ": sm_12x has no wgmma, tcgen05, TMEM or clusters beyond 1x1x1, only warp-level "
               "mma.sync;" for a in bad if a.startswith("sm_12")}
        assert got == sorted(f"kernel 'mm': 'mma wgmma' needs sm_90a, but target cuda declares "
                             f"'{a}'{why[a]} drop the arch or write "
                             "'mma auto', which uses mma.sync there" for a in bad)
        assert all(d.loc.line == 15 for d in e.value.diagnostics)
        # auto compiles mma.sync for those archs instead; mma_sync never fails.
        for word in ("auto", "mma_sync"):
            k = mma_kernel(BF16_NK + f"\nmma {word}", archs)
            assert [a for a in archs.split() if k.uses_wgmma(a)] == \
                (["sm_90a"] if "sm_90a" in archs.split() and word == "auto" else [])
    tpu = BF16_NK.replace("backends cuda", "backends pallas_tpu")
    with pytest.raises(SpecError, match="'mma wgmma' is a CUDA choice"):
        mma_kernel(tpu + "\nmma wgmma")
    k = mma_kernel(tpu)
    assert k.wgmma_obstacle() is None and not k.uses_wgmma("sm_90a")


def test_mma_auto_on_the_shipped_specs_changes_no_generated_file():
    """`auto` is the default: writing it into every kernel of specs/*.gemm
    renders byte-identical files, and `mma_sync` is accepted there too."""
    from gemmgen import backends

    for path in sorted((ROOT / "specs").glob("*.gemm")):
        text = path.read_text()
        rel = path.relative_to(ROOT).as_posix()
        base = backends.render(validate(parse(text, rel), stem=path.stem,
                                        diagnose=backends.diagnose))
        blocks = re.subn(r"(?m)^(kernel \w+ \{)$", r"\1\n  mma auto", text)
        assert blocks[1] >= 2
        spec = validate(parse(blocks[0], rel), stem=path.stem, diagnose=backends.diagnose)
        assert all(k.mma is ir.Mma.AUTO for k in spec.kernels)
        assert backends.render(spec) == base
        # fp4 x fp4 and W4A8 (e4m3 x fp4) have no mma.sync form
        # (docs/cuda-blackwell.md): `mma mma_sync` is an error there, and
        # accepted everywhere else.
        forced = blocks[0].replace("mma auto", "mma mma_sync")
        try:
            sync = validate(parse(forced, rel), stem=path.stem, diagnose=backends.diagnose)
        except SpecError as e:
            assert all(any(f"{pair} has no 'mma_sync' body" in d.message
                           for pair in ("fp4 x fp4", "e4m3 x fp4 (W4A8)"))
                       for d in e.diagnostics), e
            fp4 = {k.name for k in spec.kernels if k.rhs is not None
                   and ir.DType.FP4 in (k.lhs.dtype, k.rhs.dtype) and ir.Backend.CUDA in k.backends}
            assert fp4 and len(e.diagnostics) == len(fp4)
        else:
            assert all(k.mma is ir.Mma.MMA_SYNC for k in sync.kernels)


def test_docs_mma_example_resolves_as_documented():
    spec = load(next(b for b in DOC_BLOCKS if "kernel moe_up {" in b))
    for name in ("moe_up", "moe_up_fp8"):
        up = spec.kernel(name)
        assert [up.uses_wgmma(a) for a in ("sm_89", "sm_90a")] == [False, True], name
    kn = spec.kernel("moe_up_kn")
    assert not kn.uses_wgmma("sm_90a") and "[k, n]" in kn.wgmma_obstacle()
