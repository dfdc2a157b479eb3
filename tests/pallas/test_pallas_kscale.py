"""Pallas K tiles that hold several main-loop scale blocks (issue 41): the
kernel loops over the tile's blocks, each block's partial product times its
own scales, in f32, summed into the accumulator. DeepSeek 1x128 / 128x128
(f32, bf16, e8m0), megablox K-block rhs scales (int8, fp8, packed int4 /
fp4, both rhs layouts), per_token_group next to another rhs mode, masked,
silu_mul; 2, 4 and 8 blocks per K tile, against the reference in interpret
mode; planted bugs; the TPU lowering; the validator and diagnostics."""

from __future__ import annotations

import numpy as np
import pytest
from pallas_helpers import (
    build,
    check,
    import_path,
    kernel_block,
    load_spec,
    lower_for_tpu,
    random_inputs,
    run,
    spec_text,
)

from gemmgen import ir
from gemmgen import reference as ref
from gemmgen.backends.pallas.cores import matmul_core
from gemmgen.backends.pallas.vmem import vmem_blocks
from gemmgen.ir import Backend

DS = ("lhs_scale per_token_group k=128 f32", "rhs_scale block n=128 k=128 f32")

# name: spec fields; the suffix _xN is the scale blocks per K tile.
KERNELS = {
    "ds_x4": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16", *DS,
              "tile m=64 n=128 k=512"),
    "ds_x1": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16", *DS,
              "tile m=64 n=128 k=128"),
    "ds_e8m0_kn_x2": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [k, n]", "out bf16",
                      "lhs_scale per_token_group k=128 e8m0",
                      "rhs_scale block n=128 k=128 bf16", "tile m=64 n=128 k=256"),
    "gmm_ds_e8m0_x4": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16",
                       "lhs_scale per_token_group k=128 f32",
                       "rhs_scale block n=128 k=128 e8m0", "tile m=64 n=128 k=512"),
    "gmm_w8a16_int8_x8": ("op grouped", "lhs bf16 [m, k]", "rhs int8 [g, n, k]", "out bf16",
                          "rhs_scale kblock k=128 f32", "bias f32 [g, 1, n]",
                          "tile m=64 n=128 k=1024"),
    "gmm_w8a16_fp8_kn_x2": ("op grouped", "lhs bf16 [m, k]", "rhs e4m3 [g, k, n]",
                            "out f32", "rhs_scale kblock k=128 bf16",
                            "tile m=32 n=128 k=256"),
    "gmm_w8a8_int8_e8m0_x4": ("op grouped", "lhs int8 [m, k]", "rhs int8 [g, n, k]",
                              "out f32", "lhs_scale per_token f32",
                              "rhs_scale kblock k=128 e8m0", "tile m=64 n=128 k=512"),
    "gmm_w4a16_x2": ("op grouped", "lhs bf16 [m, k]", "rhs int4 packed [g, n, k]", "out bf16",
                     "rhs_scale kblock k=256 bf16", "tile m=64 n=128 k=512"),
    "gmm_fp4_kn_x4": ("op grouped", "lhs bf16 [m, k]", "rhs fp4 packed [g, k, n]", "out bf16",
                      "rhs_scale kblock k=128 f32", "tile m=32 n=256 k=512"),
    "gmm_ptg_channel_x4": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16",
                           "lhs_scale per_token_group k=128 f32",
                           "rhs_scale per_channel f32", "tile m=64 n=128 k=512"),
    "gmm_ds_silu_x4": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16",
                       *DS, "epilogue silu_mul", "tile m=64 n=128 k=512"),
    "masked_ds_x4": ("op grouped", "lhs e4m3 [g, m, k]", "rhs e4m3 [g, n, k]", "out bf16",
                     *DS, "tile m=32 n=128 k=512"),
}

SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])

FAST = ["ds_x4", "gmm_w8a16_int8_x8", "gmm_w4a16_x2"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("pallas_kscale")


@pytest.fixture(scope="module")
def generated(folder):
    return build(SPEC, folder)


def _inputs(kernel: ir.Kernel, *, m: int, n: int, k: int, seed: int = 0, **kwargs):
    if kernel.masked:
        kwargs.setdefault("g_local", 3)
    elif kernel.grouped:
        kwargs.setdefault("num_groups", 4)
    return random_inputs(kernel, m=m, n=n, k=k, seed=seed, **kwargs)


# k = 1300: a multiple of neither 128 nor any K tile, so the last K tile is
# ragged, its last block partial and (up to 8 blocks per tile) later blocks
# wholly past k; m = 37 and n = 200 leave partial m and n tiles.
@pytest.mark.parametrize("name", FAST)
def test_matches_reference(generated, name):
    kernel = generated.kernel(name)
    check(kernel, generated.fn(name), _inputs(kernel, m=37, n=256, k=1300), k=1300)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("m,n,k", [(37, 256, 1300), (1, 256, 700), (70, 512, 2048),
                                   (45, 256, 192)])
def test_matches_reference_every_family(generated, name, m, n, k):
    kernel = generated.kernel(name)
    check(kernel, generated.fn(name), _inputs(kernel, m=m, n=n, k=k, seed=m + k), k=k)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in KERNELS if n.startswith("gmm_")])
def test_sharded_empty_groups_existing_out(generated, name):
    kernel = generated.kernel(name)
    for sizes in ([0, 40, 0, 25, 0, 20], [30, 0, 0, 0, 0, 55]):
        inputs = _inputs(kernel, m=100, n=256, k=1300, group_sizes=np.asarray(sizes, np.int32),
                         group_offset=1, g_local=4, with_existing_out=True, seed=len(name))
        check(kernel, generated.fn(name), inputs, k=1300)


@pytest.mark.slow
def test_masked_counts(generated):
    kernel = generated.kernel("masked_ds_x4")
    inputs = _inputs(kernel, m=40, n=256, k=1300, masked_m=np.asarray([40, 0, 1], np.int32))
    out = check(kernel, generated.fn("masked_ds_x4"), inputs, k=1300)
    assert not np.asarray(out[1], np.float32).any()


def test_same_bits_as_a_k_tile_of_one_block(generated):
    """Each block's scaled product joins the accumulator on its own, in the
    order a 128-deep K tile adds them: the result is bit for bit that
    kernel's, ragged last block included."""
    kernel = generated.kernel("ds_x4")
    inputs = _inputs(kernel, m=37, n=256, k=700, seed=3)
    four = run(generated.fn("ds_x4"), inputs)
    one = run(generated.fn("ds_x1"), inputs)
    np.testing.assert_array_equal(four.view(np.uint16), one.view(np.uint16))
    assert matmul_core(generated.kernel("ds_x4").for_backend(Backend.PALLAS_TPU)).sub_blocks
    assert not matmul_core(generated.kernel("ds_x1").for_backend(Backend.PALLAS_TPU)).sub_blocks


# Planted bugs: each mutation of the generated kernel must fail the comparison.
BUGS = {
    "every block the first block's rhs scale": (
        "ds_x4", "rhs_scale_ref[pl.ds(b, 1), :]", "rhs_scale_ref[pl.ds(0, 1), :]"),
    "the rhs scale of the wrong block": (
        "ds_x4", "rhs_scale_ref[pl.ds(b, 1), :]", "rhs_scale_ref[pl.ds(k_blocks - 1 - b, 1), :]"),
    "every block the first block's lhs scale": (
        "ds_x4", "lhs_scale_ref[:, pl.ds(b, 1)]", "lhs_scale_ref[:, pl.ds(0, 1)]"),
    "the first K tile's scales for every K tile": (
        "gmm_w8a16_int8_x8", "return group_ids[w], kk, 0, j", "return group_ids[w], 0, 0, j"),
    "the kblock scale of the wrong block": (
        "gmm_w4a16_x2", "rhs_scale_ref[pl.ds(b, 1), :]", "rhs_scale_ref[pl.ds(1 - b, 1), :]"),
}


@pytest.mark.parametrize("bug", [
    b if i < 3 else pytest.param(b, marks=pytest.mark.slow) for i, b in enumerate(BUGS)])
def test_planted_bugs_are_caught(generated, folder, tmp_path, bug):
    name, old, new = BUGS[bug]
    text = (folder / "pallas" / f"{name}.py").read_text()
    assert text.count(old) >= 1, old
    mutant = tmp_path / f"{name}.py"
    mutant.write_text(text.replace(old, new))
    fn = getattr(import_path(mutant), name)
    kernel = generated.kernel(name)
    k = 1300
    inputs = _inputs(kernel, m=37, n=256, k=k, seed=11)
    result = ref.compare(run(fn, inputs), ref.reference(kernel, **inputs), kernel, k=k,
                         inputs=inputs)
    assert not result.passed, bug
    check(kernel, generated.fn(name), inputs, k=k)  # the real kernel passes the same inputs


# The TPU lowering at a production tile, one kernel per family (spec kernels
# of specs/ are lowered by test_pallas_specs.py).
PRODUCTION = "tile m=512 n=1024 k=512"
LOWERED = {
    "ds": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16",
           "lhs_scale per_token_group k=128 e8m0", "rhs_scale block n=128 k=128 f32", PRODUCTION),
    "w8a16": ("op grouped", "lhs bf16 [m, k]", "rhs int8 [g, k, n]", "out bf16",
              "rhs_scale kblock k=128 f32", "tile m=512 n=1024 k=1024"),
    "w4a16": ("op grouped", "lhs bf16 [m, k]", "rhs int4 packed [g, n, k]", "out bf16",
              "rhs_scale kblock k=256 bf16", PRODUCTION),
    "gateup": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16", *DS,
               "epilogue silu_mul", PRODUCTION),
    "masked": ("op grouped", "lhs e4m3 [g, m, k]", "rhs e4m3 [g, n, k]", "out bf16", *DS,
               "tile m=256 n=1024 k=512"),
}


@pytest.fixture(scope="module")
def lowered(tmp_path_factory):
    text = spec_text(*[kernel_block(name, *fields) for name, fields in LOWERED.items()])
    return build(text, tmp_path_factory.mktemp("pallas_kscale_lowered"))


@pytest.mark.parametrize("name", ["ds", "w4a16"] + [
    pytest.param(n, marks=pytest.mark.slow) for n in ("w8a16", "gateup", "masked")])
def test_lowers_for_tpu_at_a_production_tile(lowered, name):
    kernel = lowered.kernel(name)
    exported = lower_for_tpu(lowered.fn(name), _inputs(kernel, m=2048, n=4096, k=7168))
    assert "tpu_custom_call" in exported.mlir_module()


def test_vmem_counts_the_scale_blocks_of_a_k_tile():
    spec = load_spec(SPEC)
    kernel = spec.kernel("ds_x4").for_backend(Backend.PALLAS_TPU)
    blocks = {b.name: b for b in vmem_blocks(kernel, ir.Tile(m=512, n=1024, k=1024))}
    assert blocks["lhs_scale"].shape == (512, 8) and blocks["lhs_scale"].itemsize == 4
    assert blocks["rhs_scale"].shape == (8, 1024) and blocks["rhs_scale"].bytes == 2 * 8 * 4096


# The validator and the Pallas diagnostics.
TWO_BACKENDS = "target pallas_tpu {\n  tpu v5e\n}\n\ntarget cuda {\n  archs sm_90a\n}\n\n"


def _two_backend_kernel(*tiles: str) -> str:
    body = "".join(f"  {f}\n" for f in ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]",
                                         "out bf16", *DS, *tiles, "backends pallas_tpu cuda"))
    return TWO_BACKENDS + f"kernel two {{\n{body}}}\n"


def test_pallas_accepts_a_k_tile_of_whole_blocks_cuda_does_not():
    spec = load_spec(_two_backend_kernel("tile m=64 n=128 k=128",
                                         "tile pallas_tpu m=512 n=1024 k=512"))
    assert matmul_core(spec.kernel("two").for_backend(Backend.PALLAS_TPU)).sub_blocks
    with pytest.raises(Exception) as e:  # the shared tile serves the CUDA kernel too
        load_spec(_two_backend_kernel("tile m=64 n=128 k=512"))
    text = str(e.value)
    assert "test.gemm:16:" in text and "tile k=512 cannot tile the lhs_scale blocks of k=128" \
        in text, text


@pytest.mark.parametrize("fields,line,message", [
    # neither divides nor holds whole blocks
    (("rhs_scale kblock k=256 f32", "tile m=64 n=128 k=384"), 11,
     ("tile k=384 must divide the rhs_scale blocks of k=256 (one scale per K tile) or hold "
     "whole ones")),
    # a LUT that applies the blocks one way with one tile, another way with the other
    (("rhs_scale kblock k=256 f32", "tile m=64 n=128 k=512",
      "tile_rule m<=32 -> m=32 n=128 k=128"), 12,
     ("applies the rhs_scale blocks of k=256 one by one inside each K tile here, as another "
     "tile of the LUT holds several, so tile_rule k=128 must hold whole blocks too")),
])
def test_diagnostics(fields, line, message):
    text = spec_text(kernel_block("bad", "op grouped", "lhs bf16 [m, k]", "rhs int8 [g, n, k]",
                                  "out bf16", *fields))
    with pytest.raises(Exception) as e:
        load_spec(text)
    assert f"test.gemm:{line}:" in str(e.value) and message in str(e.value), str(e.value)


@pytest.mark.parametrize("fields,line,message", [
    # 4-bit data packed along k: a 128-wide block is 64 columns of each half
    (("lhs bf16 [m, k]", "rhs int4 packed [g, n, k]", "rhs_scale kblock k=128 f32"), 10,
     "each a slice of 64 columns (4-bit data packed along k"),
    (("lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "lhs_scale per_token_group k=128 f32",
      "rhs_scale block n=128 k=256 f32"), 11,
     "applies the lhs_scale blocks of k=128 and the rhs_scale blocks of k=256 one by one"),
])
def test_loop_diagnostics(fields, line, message):
    text = spec_text(kernel_block("bad", "op grouped", *fields[:2], "out bf16", *fields[2:],
                                  "tile m=64 n=128 k=512"))
    with pytest.raises(Exception) as e:
        load_spec(text)
    assert f"test.gemm:{line}:" in str(e.value) and message in str(e.value), str(e.value)
