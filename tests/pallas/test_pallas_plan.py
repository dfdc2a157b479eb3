"""The Pallas backend's pure parts: plan arithmetic, diagnostics, rendering."""

from __future__ import annotations

import ast
from pathlib import PurePosixPath

import pytest

from gemmgen import ir
from gemmgen.backends import pallas
from gemmgen.backends.pallas import MiB, TPU_VMEM
from gemmgen.diagnostics import SpecError
from gemmgen.parse import parse
from gemmgen.render import header_text
from gemmgen.validate import validate

from pallas_helpers import kernel_block, load_spec, spec_text

GMM = ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, n, k]", "out f32")


def _kernel(*fields: str, tpu: str = "v5e") -> tuple[ir.Kernel, ir.Spec]:
    """A validated kernel without backend diagnostics (to test diagnose itself)."""
    spec = validate(parse(spec_text(kernel_block("gemm", *fields), tpu=tpu), "specs/t.gemm"))
    return spec.kernel("gemm"), spec


def _diagnose(*fields: str, tpu: str = "v5e") -> list[str]:
    kernel, spec = _kernel(*fields, tpu=tpu)
    return [f"{d.loc.line}:{d.loc.col}: {d.message}" for d in pallas.diagnose(kernel, spec)]


def test_padded_bytes_round_to_native_tiles():
    assert pallas.padded_bytes((128, 128), 4) == 128 * 128 * 4
    assert pallas.padded_bytes((300, 1), 4) == 304 * 128 * 4  # a column takes 128 lanes
    assert pallas.padded_bytes((8, 128), 2) == 16 * 128 * 2  # bf16 packs 16 rows
    assert pallas.padded_bytes((8, 128), 1) == 32 * 128  # 8-bit packs 32 rows
    assert pallas.padded_bytes((128,), 4) == 8 * 128 * 4
    assert pallas.padded_bytes((3, 16, 128), 2) == 3 * 16 * 128 * 2


def test_vmem_accounting_of_a_grouped_tile():
    kernel, spec = _kernel(*GMM, "tile m=128 n=256 k=512")
    blocks = {b.name: b.bytes for b in pallas.vmem_blocks(kernel, kernel.tile)}
    assert blocks == {
        "lhs": 2 * 128 * 512 * 2,  # two buffers of bf16 [tm, tk]
        "rhs": 2 * 256 * 512 * 2,
        "existing_out": 2 * 128 * 256 * 4,  # aliased into out, read with out's blocks
        "out": 2 * 128 * 256 * 4,
        "acc": 128 * 256 * 4,  # scratch: one buffer
    }
    p = pallas.plan(kernel, spec)
    assert p.module.vmem_bytes == sum(blocks.values())
    assert p.module.vmem_limit_bytes is None  # 1.9 MiB fits the 16 MiB default


def test_vmem_limit_requested_over_the_scoped_default():
    vm = TPU_VMEM["v5e"]
    # None while need + 1/4 (Mosaic's own scratch) fits 16 MiB, the smallest
    # default of any generation: a v5e refused 16.84 MiB for 16 MiB of blocks.
    assert pallas.vmem_limit(12 * MiB, vm) is None
    assert pallas.vmem_limit(16 * MiB, vm) == 20 * MiB
    assert pallas.vmem_limit(20 * MiB, vm) == 25 * MiB  # need + 1/4, whole MiB
    # The smallest default, whatever generation the spec declares: a v6e
    # module (32 MiB default) needing 22 MiB failed to compile on a v5e.
    assert pallas.vmem_limit(22 * MiB, TPU_VMEM["v6e"]) == 28 * MiB
    assert pallas.vmem_limit(90 * MiB, vm) == 96 * MiB  # capped at 3/4 of 128 MiB
    kernel, spec = _kernel(*GMM, "tile m=1024 n=1024 k=1024", tpu="v5e")
    p = pallas.plan(kernel, spec)
    assert p.module.vmem_bytes == (2 * 2 + 2 * 2 + 2 * 4 + 2 * 4 + 4) * MiB  # 28 MiB
    assert p.module.vmem_limit_bytes == 35 * MiB


def test_stages_map_to_buffers():
    kernel, spec = _kernel(*GMM, "stages 1")
    assert pallas.plan(kernel, spec).module.buffers == 1
    assert "pipeline_mode=pl.Buffered(1)" in pallas.render(spec)[PurePosixPath("pallas/gemm.py")]
    assert any("stages 3" in d for d in _diagnose(*GMM, "stages 3"))


def test_tile_rows_keep_the_lut_order():
    kernel, spec = _kernel(*GMM, "tile m=128 n=256 k=256", "tile_rule m<=64 -> m=64 n=128 k=128",
                           "tile_rule m>4096 k>=4096 -> m=256 n=256 k=128")
    rows = pallas.plan(kernel, spec).module.tiles
    assert [(r.cond, r.m, r.n, r.k) for r in rows] == [
        ("m <= 64", 64, 128, 128),
        ("m > 4096 and k >= 4096", 256, 256, 128),
        ("", 128, 256, 256),
    ]
    assert rows[0].where == "specs/t.gemm"  # no line numbers: see render.source_ref


def test_dtype_choices():
    assert pallas.mxu_dtype(ir.DType.BF16, ir.DType.E4M3) is ir.DType.BF16
    assert pallas.mxu_dtype(ir.DType.INT8, ir.DType.INT4) is ir.DType.INT8
    assert pallas.mxu_dtype(ir.DType.F16, ir.DType.F16) is ir.DType.F32
    assert pallas.mxu_dtype(ir.DType.BF16, ir.DType.F32) is ir.DType.F32
    kernel, spec = _kernel("op dense", "lhs f32 [m, k]", "rhs f32 [k, n]", "out f32")
    assert pallas.plan(kernel, spec).core.highest


def test_diagnose_accepts_the_supported_kernels():
    assert _diagnose(*GMM) == []
    assert _diagnose("op dense", "lhs f32 [m, k]", "rhs f32 [k, n]", "out bf16") == []


def test_diagnose_tile_alignment_is_positioned():
    why = "as a TPU block needs (8 sublanes x 128 lanes; 4-bit data packed two per byte " \
        "doubles the lanes)"
    # NB: ir.Kernel carries no position for its `tile` field, so the default
    # tile is reported at the kernel's name; tile rules have their own.
    assert _diagnose(*GMM, "tile m=100 n=64 k=128", "tile_rule m<=8 -> m=8 n=128 k=96") == [
        f"10:3: kernel 'gemm': tile 100x64x128: m=100 is not a multiple of 16, the rows of one "
        f"sublane tile of 16-bit lhs, {why}",
        f"10:3: kernel 'gemm': tile 100x64x128: n=64 is not a multiple of 128, {why}",
        f"11:3: kernel 'gemm': tile_rule 8x128x96: m=8 is not a multiple of 16, the rows of one "
        f"sublane tile of 16-bit lhs, {why}",
        f"11:3: kernel 'gemm': tile_rule 8x128x96: k=96 is not a multiple of 128, {why}",
    ]


@pytest.mark.parametrize("fields, tile, rows, what", [
    (("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16"), "24", 32, "8-bit lhs"),
    (("op dense", "lhs int8 [m, k]", "rhs int8 [n, k]", "out bf16"), "40", 32, "8-bit lhs"),
    (("op dense", "lhs int4 packed [m, k]", "rhs int4 packed [n, k]", "out f32"), "16", 32,
     "packed 4-bit lhs"),
    (("op dense", "lhs f32 [m, k]", "rhs f32 [k, n]", "out bf16"), "8", 16, "16-bit out"),
    (("op tgmm", "lhs bf16 [m, k]", "rhs bf16 [m, n]", "out f32"), "8", 16, "16-bit lhs"),
])
def test_diagnose_row_blocks_hold_whole_sublane_tiles(fields, tile, rows, what):
    """Row blocks below a dtype's packing compile on the CPU's lowering but
    not on a v5e (CompileTimeMosaicMisalignedBlockAndTiling): refused at the
    tile; the next multiple is accepted."""
    n = 256
    got = _diagnose(*fields, f"tile m={tile} n={n} k=256")
    assert len(got) == 1 and f"m={tile} is not a multiple of {rows}, the rows of one sublane " \
        f"tile of {what}" in got[0], got
    assert _diagnose(*fields, f"tile m={rows} n={n} k=256") == []


def test_diagnose_vmem_budget_per_generation():
    # bf16 [512, 2048] + [2048, 2048] double-buffered, f32 existing_out and out
    # double-buffered and the f32 accumulator: 4 + 16 + 8 + 8 + 4 = 40 MiB.
    fits = "tile m=512 n=2048 k=2048"
    assert _diagnose(*GMM, fits, tpu="v7x") == []  # 3/4 of 64 MiB = 48 MiB usable
    too_big = "tile m=1024 n=2048 k=2048"  # 8 + 16 + 16 + 16 + 8 = 64 MiB
    assert _diagnose(*GMM, too_big, tpu="v5e") == []  # 3/4 of 128 MiB = 96 MiB usable
    assert _diagnose(*GMM, too_big, tpu="v7x") == [
        "10:3: kernel 'gemm': tile 1024x2048x2048 needs 64.0 MiB of VMEM per grid step (lhs 8.0, "
        "rhs 16.0, existing_out 16.0, out 16.0, acc 8.0), over the 48 MiB a kernel may use on "
        "TPU v7x (3/4 of 64 MiB)"]
    assert len(_diagnose(*GMM, fits, "tile_rule m>=1024 -> " + too_big.replace("tile ", ""),
                         tpu="v7x")) == 1


def test_diagnose_accepts_every_op_and_feature():
    assert _diagnose("op tgmm", "lhs bf16 [m, k]", "rhs bf16 [m, n]", "out f32") == []
    assert _diagnose("op quantize", "lhs bf16 [m, k]", "out e4m3",
                     "out_scale per_token_group k=128 e8m0") == []
    assert _diagnose("op grouped", "lhs bf16 [m, k]", "rhs int4 packed [g, n, k]", "out bf16",
                     "rhs_scale kblock k=256 e8m0", "bias bf16 [g, 1, n]",
                     "epilogue silu_mul alpha=0.5", "tile m=128 n=128 k=256") == []


def test_diagnose_packed_operands_double_the_lanes():
    assert _diagnose("op dense", "lhs bf16 [m, k]", "rhs int4 packed [n, k]", "out bf16",
                     "tile m=128 n=128 k=128") == [
        "10:3: kernel 'gemm': tile 128x128x128: k=128 is not a multiple of 256, as a TPU block "
        "needs (8 sublanes x 128 lanes; 4-bit data packed two per byte doubles the lanes)"]
    assert len(_diagnose("op dense", "lhs bf16 [m, k]", "rhs fp4 packed [k, n]", "out bf16",
                         "tile m=128 n=128 k=128")) == 1


def test_diagnose_quantize_groups_and_gemv():
    assert _diagnose("op quantize", "lhs bf16 [m, k]", "out e4m3",
                     "out_scale per_token_group k=96 f32") == [
        "9:3: kernel 'gemm': the K block of quantize (96: tile k=128 rounded to whole groups of "
        "96) must be a multiple of 128 lanes; choose a group size that divides 128 or is a "
        "multiple of it"]
    assert _diagnose("op quantize", "lhs bf16 [m, k]", "out e4m3",
                     "out_scale per_token_group k=4 f32") == [
        "9:3: kernel 'gemm': pallas_tpu quantize needs a group size that is a multiple of 8 "
        "(k=4): it reduces each group's amax over whole sublane tiles of the transposed block"]
    msgs = _diagnose("op dense", "lhs bf16 [m, k]", "rhs bf16 [n, k]", "out bf16",
                     "algorithm gemv")
    assert msgs == ["10:3: kernel 'gemm': pallas_tpu cannot emit algorithm 'gemv' (a CUDA GEMV); "
                    "use the tile algorithm, whose m tile clamps to small m"]


def test_plan_cores_for_the_backward_pass():
    # With an epilogue the backward pass needs a plain core, called with the
    # spec's B layout (the pre-activation) and the other one (d lhs).
    kernel, spec = _kernel("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, k, n]", "out bf16",
                           "epilogue gelu")
    p = pallas.plan(kernel, spec)
    assert [c.fn for c in p.cores] == ["_gmm", "_gmm_plain"]
    assert [c.kernel_fn for c in p.cores] == ["_kernel", "_plain_kernel"]
    assert p.backward is p.cores[1] and p.backward.plain and not p.core.plain
    assert p.tgmm is not None and p.tgmm.fn == "_tgmm"
    # A plain spec kernel serves the backward pass itself: one core.
    kernel, spec = _kernel(*GMM)
    p = pallas.plan(kernel, spec)
    assert [c.fn for c in p.cores] == ["_gmm"] and p.backward is p.core and p.vjp
    kernel, spec = _kernel("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16")
    p = pallas.plan(kernel, spec)
    assert not p.vjp and p.backward is None and p.tgmm is None


def test_plan_packing_decisions():
    kernel, spec = _kernel("op dense", "lhs bf16 [m, k]", "rhs int4 packed [n, k]", "out bf16",
                           "tile m=128 n=128 k=256")
    c = pallas.plan(kernel, spec).core
    assert c.k_pairs and c.lhs_split and not c.rhs_permute and c.mxu is ir.DType.BF16
    kernel, spec = _kernel("op dense", "lhs int4 packed [m, k]", "rhs int4 packed [k, n]",
                           "out f32", "tile m=128 n=256 k=256")
    c = pallas.plan(kernel, spec).core
    assert c.k_pairs and not c.lhs_split and c.rhs_permute and c.int_dot
    assert c.acc_dtype is ir.DType.INT32
    kernel, spec = _kernel("op dense", "lhs int8 [m, k]", "rhs int8 [n, k]", "out f32",
                           "lhs_scale per_token_group k=128 f32")
    assert pallas.plan(kernel, spec).core.acc_dtype is ir.DType.F32  # promoted per K block


def test_alpha_is_rounded_to_f32():
    kernel, spec = _kernel(*GMM, "epilogue alpha=0.1")
    assert pallas.plan(kernel, spec).core.alpha == 0.10000000149011612
    assert "ALPHA = 0.10000000149011612" in pallas.render(spec)[PurePosixPath("pallas/gemm.py")]


def test_spec_with_unsupported_kernel_fails_validation():
    text = spec_text(kernel_block("bad", *GMM, "stages 4"))
    with pytest.raises(SpecError) as e:
        load_spec(text)
    assert "pallas_tpu supports stages 1 or 2" in str(e.value)


def test_render_is_deterministic_and_headed():
    text = spec_text(kernel_block("gmm_a", *GMM), kernel_block(
        "dense_b", "op dense", "lhs f32 [m, k]", "rhs f32 [n, k]", "out bf16",
        "tile_rule n>=1024 -> m=128 n=256 k=128"))
    spec = load_spec(text, "specs/moe.gemm")
    files = pallas.render(spec)
    assert files == pallas.render(load_spec(text, "specs/moe.gemm"))
    assert sorted(map(str, files)) == ["pallas/__init__.py", "pallas/dense_b.py",
                                       "pallas/gmm_a.py"]
    for path, body in files.items():
        assert body.split("\n", 1)[0] == "# " + header_text("specs/moe.gemm")
        ast.parse(body, filename=str(path))  # valid Python
        assert "\t" not in body and not any(line != line.rstrip() for line in body.splitlines())
    init = files[PurePosixPath("pallas/__init__.py")]
    assert "gmm_a: " in init and "dense_b: " in init
    gmm = files[PurePosixPath("pallas/gmm_a.py")]
    assert ("def gmm_a(\n    lhs,\n    rhs,\n    group_sizes,\n    group_offset=None,\n"
            "    existing_out=None,\n    *,\n    interpret=False,\n):") in gmm
    dense = files[PurePosixPath("pallas/dense_b.py")]
    assert "def dense_b(\n    lhs,\n    rhs,\n    *,\n    interpret=False,\n):" in dense
    assert "    if n >= 1024:\n        return 128, 256, 128" in dense
    assert "precision=lax.Precision.HIGHEST" in dense


def test_no_pallas_kernels_render_nothing():
    text = "target cuda {\n  archs sm_90a\n}\n\n" + kernel_block(
        "c", "op dense", "lhs bf16 [m, k]", "rhs bf16 [n, k]", "out bf16").replace(
        "pallas_tpu", "cuda")
    spec = validate(parse(text, "specs/c.gemm"))
    assert pallas.render(spec) == {}


BOTH_BACKENDS = """\
target cuda {{
  archs sm_80 sm_90a
}}

target pallas_tpu {{
  tpu v5e
}}

kernel dense_both {{
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=64 n=128 k=128
  tile_rule m<=32 -> m=32 n=128 k=128
{own}  backends pallas_tpu cuda
}}
"""
PALLAS_LUT = ("  tile pallas_tpu m=512 n=1024 k=512\n"
              "  tile_rule pallas_tpu m<=64 -> m=64 n=1024 k=512\n")


def _tile_for(module_text: str):
    """The generated module's `tile_for`, compiled on its own."""
    tree = ast.parse(module_text)
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "tile_for"]
    scope: dict = {}
    exec(compile(ast.Module([fn], []), "tile_for", "exec"), scope)  # noqa: S102 (generated, ours)
    return scope["tile_for"]


def test_a_pallas_tile_of_its_own_renders_in_the_pallas_module_only():
    """The Pallas module's LUT is the Pallas one, every other file (CUDA
    kernel, launchers, JAX entry point) byte-identical to the kernel's
    without the Pallas lines."""
    from gemmgen.backends import render

    own = load_spec(BOTH_BACKENDS.format(own=PALLAS_LUT))
    shared = load_spec(BOTH_BACKENDS.format(own=""))
    a, b = render(own), render(shared)
    assert a.keys() == b.keys()
    module = PurePosixPath("pallas/dense_both.py")
    others = [p for p in a if p.parts[0] != "pallas"]
    assert any(p.parts[0] == "cuda" for p in others) and any(p.parts[0] == "jax" for p in others)
    for p in others:
        assert a[p] == b[p], p
    assert a[module] != b[module]
    tile_for = _tile_for(a[module])
    assert tile_for(16, 4096, 4096) == (64, 1024, 512)
    assert tile_for(4096, 4096, 4096) == (512, 1024, 512)
    assert _tile_for(b[module])(4096, 4096, 4096) == (64, 128, 128)
    p = pallas.plan(own.kernel("dense_both"), own)
    assert [(t.m, t.n, t.k) for t in p.module.tiles] == [(64, 1024, 512), (512, 1024, 512)]
    assert p.module.kernel.view is ir.Backend.PALLAS_TPU
    assert "tile      m=512 n=1024 k=512" in a[module]  # the module's spec lines


def test_pallas_checks_read_the_pallas_tile():
    """The shared tile k=32 is no TPU block, which the CUDA tile may be; with
    a Pallas tile of its own the kernel passes the Pallas checks, and a bad
    Pallas tile is reported at its own line."""
    text = BOTH_BACKENDS.replace("k=128\n  tile_rule m<=32 -> m=32 n=128 k=128", "k=32\n")
    with pytest.raises(SpecError) as e:
        load_spec(text.format(own=""))
    assert {d.loc.line for d in e.value.diagnostics} == {14}  # the tile line
    load_spec(text.format(own=PALLAS_LUT))
    with pytest.raises(SpecError) as e:
        load_spec(text.format(own="  tile pallas_tpu m=512 n=1000 k=512\n"))
    (d,) = e.value.diagnostics
    assert d.loc.line == 16 and "tile pallas_tpu 512x1000x512: n=1000 is not a multiple of 128" \
        in d.message
