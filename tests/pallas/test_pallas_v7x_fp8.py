"""FP8 on the MXU of a TPU v7x (docs/pallas.md, "FP8 on a TPU v7x").

A spec with `tpu v7x` feeds FP8 x FP8 dots (e4m3, e5m2, mixed) to the MXU
as FP8 with f32 products; MXFP8 operands scaled in VMEM by their e8m0
blocks go as FP8 when every scaled value of the K tile is exact in FP8,
else as bf16. The same spec for a v5e or v6e widens FP8 to bf16.

What the CPU can check: the Mosaic module the Pallas lowering emits (the
`tpu.matmul` operand types, the FP8 -> bf16 conversions), captured while
`jax.export` lowers the kernel for TPU (`pallas_helpers.mosaic_text`); the
numerics in TPU interpret mode against the NumPy reference (dense,
grouped, masked, MXFP8 on one or both operands, partial tiles, m = 1, k a
multiple of neither the tile nor the scale block, zero-sized groups, every
e8m0 byte); MXFP8 tiles that must fall back to bf16,
with a planted bug (the FP8 dot taken always) that the comparison catches;
and `_fold_fp8`'s count of inexact values against ml_dtypes.
"""

from __future__ import annotations

import re
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest
from pallas_helpers import (
    Generated,
    build,
    check,
    import_path,
    kernel_block,
    load_spec,
    matmul_types,
    mosaic_text,
    random_inputs,
    run,
    spec_text,
)

from gemmgen import reference as ref
from gemmgen.backends.pallas.cores import matmul_core
from gemmgen.backends.pallas.dtypes import mxu_dtype
from gemmgen.backends.pallas.plans import plan
from gemmgen.ir import Backend, DType

MX8 = ("lhs_scale per_token_group k=32 e8m0", "rhs_scale block n=1 k=32 e8m0")

# name: spec fields. FP8 with per-row / per-column / per-tensor and DeepSeek
# block scales (applied to the f32 product), e4m3 x e5m2, dense, grouped and
# masked, rhs [n, k] and [k, n]; MXFP8 on both operands and on rhs only;
# FP8 against bf16 (widened on every TPU).
KERNELS = {
    "fp8_nk": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16",
               "lhs_scale per_token f32", "rhs_scale per_channel f32",
               "tile m=128 n=128 k=256"),
    "fp8_mixed_kn": ("op dense", "lhs e4m3 [m, k]", "rhs e5m2 [k, n]", "out f32",
                     "lhs_scale per_tensor f32", "tile m=64 n=128 k=128"),
    "fp8_deepseek": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16",
                     "lhs_scale per_token_group k=128 f32", "rhs_scale block n=128 k=128 f32",
                     "tile m=128 n=128 k=128"),
    "gmm_fp8": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16",
                "rhs_scale per_channel f32", "tile m=64 n=128 k=256"),
    "masked_fp8_kn": ("op grouped", "lhs e5m2 [g, m, k]", "rhs e4m3 [g, k, n]", "out f32",
                      "tile m=64 n=128 k=128"),
    "mxfp8": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16", *MX8,
              "tile m=128 n=128 k=256"),
    "mxfp8_mixed_kn": ("op dense", "lhs e5m2 [m, k]", "rhs e4m3 [k, n]", "out f32", *MX8,
                       "tile m=64 n=128 k=128"),
    "gmm_mxfp8": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16", *MX8,
                  "epilogue silu_mul", "tile m=64 n=128 k=256"),
    "mxfp8_rhs_only": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16",
                       "lhs_scale per_token f32", MX8[1], "tile m=128 n=128 k=256"),
    "fp8_bf16": ("op dense", "lhs e4m3 [m, k]", "rhs bf16 [n, k]", "out f32",
                 "tile m=128 n=128 k=256"),
}
BLOCKS = [kernel_block(name, *fields) for name, fields in KERNELS.items()]
FP8_FP8 = [name for name in KERNELS if name != "fp8_bf16"]
MX = [name for name in KERNELS if "mxfp8" in name]
GROUPED = [name for name, fields in KERNELS.items() if "op grouped" in fields]

# Partial m and n tiles; k a multiple of no K tile, and 720 = 22.5 blocks of
# 32: the last scale block is partial too.
M, N, K = 200, 384, 720


@pytest.fixture(scope="module")
def v7x(tmp_path_factory) -> Generated:
    return build(spec_text(*BLOCKS, tpu="v7x"), tmp_path_factory.mktemp("v7x_fp8"))


@pytest.fixture(scope="module")
def v5e(tmp_path_factory) -> Generated:
    return build(spec_text(*BLOCKS, tpu="v5e"), tmp_path_factory.mktemp("v5e_fp8"))


def _inputs(kernel, *, m=M, n=N, k=K, seed=0, **kw):
    if kernel.out_n_divisor == 2 and n % 256:  # silu_mul: n/2 in whole 128-lane blocks
        n += 256 - n % 256
    if kernel.masked:
        extra = kw
    else:
        extra = {"num_groups": 5, **kw} if kernel.grouped else {}
    return random_inputs(kernel, m=m, n=n, k=k, seed=seed, **extra)


# ---------------------------------------------------------------------------
# The Mosaic module: what reaches the MXU.

_CHOICE = re.compile(r"scf\.if %\w+ -> \(vector<[\dx]+f32>\) \{(.*?)\} else \{(.*?)scf\.yield",
                     re.DOTALL)
_WIDEN = re.compile(r"arith\.extf [^\n]*: vector<(?:\d+x)+(f8\w+)> to vector<(?:\d+x)+bf16>")


FP8_TYPES = {"e4m3": "f8E4M3FN", "e5m2": "f8E5M2"}


def _operand_types(kernel) -> tuple[str, str]:
    return FP8_TYPES[kernel.lhs.dtype.value], FP8_TYPES[kernel.rhs_operand.dtype.value]


@pytest.mark.parametrize("name", [n for n in FP8_FP8 if n not in MX])
def test_v7x_fp8_reaches_the_mxu_as_fp8(v7x, name):
    """Every dot takes the operands in their own FP8 types, f32 results, and
    no FP8 value is widened to bf16 anywhere in the kernel."""
    kernel = v7x.kernel(name)
    text = mosaic_text(v7x.fn(name), _inputs(kernel))
    types = matmul_types(text)
    assert types and set(types) == {_operand_types(kernel)}, types
    assert "-> vector<" in text and not _WIDEN.findall(text)
    for line in text.splitlines():
        if "tpu.matmul" in line:
            assert re.search(r"-> vector<(?:\d+x)+f32>", line), line


@pytest.mark.parametrize("name", MX)
def test_v7x_mxfp8_dot_is_fp8_with_a_bf16_fallback(v7x, name):
    """MXFP8: an scf.if chooses per K tile between the FP8 dot and the bf16
    one; the only other matmul is the 0/1 spread of the scales (bf16). No
    FP8 value is widened to bf16 but an unscaled FP8 operand in the
    fallback (rhs-only MXFP8)."""
    kernel = v7x.kernel(name)
    text = mosaic_text(v7x.fn(name), _inputs(kernel))
    types = matmul_types(text)
    lhs8, rhs8 = _operand_types(kernel)
    assert (lhs8, rhs8) in types and ("bf16", "bf16") in types, types
    assert set(types) == {(lhs8, rhs8), ("bf16", "bf16")}, types
    # Each K step (the regular and the ragged one; for silu_mul, each half)
    # chooses with an scf.if whose f32 result is the FP8 dot, else the bf16
    # one; no FP8 dot is anywhere else.
    choices = _CHOICE.findall(text)
    assert len(choices) == 2 * (2 if "epilogue silu_mul" in KERNELS[name] else 1), choices
    for fp8_branch, bf16_branch in choices:
        assert matmul_types(fp8_branch) == [(lhs8, rhs8)]
        assert matmul_types(bf16_branch) == [("bf16", "bf16")]
    assert types.count((lhs8, rhs8)) == len(choices)
    widened = _WIDEN.findall(text)
    assert widened == ([lhs8] * len(choices) if name == "mxfp8_rhs_only" else []), widened


@pytest.mark.parametrize("name", FP8_FP8[:1] + MX[:1] + [
    pytest.param(n, marks=pytest.mark.slow) for n in FP8_FP8[1:] if n != MX[0]])
def test_v5e_widens_fp8(v5e, name):
    """The same kernels for a v5e: FP8 widened to bf16, every dot in bf16."""
    kernel = v5e.kernel(name)
    text = mosaic_text(v5e.fn(name), _inputs(kernel))
    assert set(matmul_types(text)) == {("bf16", "bf16")}
    assert _WIDEN.findall(text) and "scf.if" not in text.split("tpu.matmul", 1)[0][-200:]


def test_fp8_against_bf16_widens_on_v7x(v7x):
    """The v7x MXU has no FP8 x bf16 form: the FP8 operand widens to bf16."""
    text = mosaic_text(v7x.fn("fp8_bf16"), _inputs(v7x.kernel("fp8_bf16")))
    assert set(matmul_types(text)) == {("bf16", "bf16")} and _WIDEN.findall(text)


def test_v6e_modules_are_the_v5e_ones():
    """Only a generation with an FP8 MXU changes the kernel body."""
    def kernel_text(tpu):
        spec = load_spec(spec_text(*BLOCKS, tpu=tpu))
        return {name: plan(spec.kernel(name), spec).core for name in KERNELS}

    v5e, v6e, v7x = kernel_text("v5e"), kernel_text("v6e"), kernel_text("v7x")
    assert v5e == v6e
    for name in FP8_FP8:
        assert v7x[name].fp8_dot and not v5e[name].fp8_dot
        assert v7x[name].lhs_cast is None and v7x[name].rhs_cast is None
        assert v5e[name].mxu is DType.BF16
    assert v7x["fp8_bf16"] == v5e["fp8_bf16"]
    assert [n for n in KERNELS if v7x[n].fp8_fold] == MX


def test_mxu_dtype_decisions():
    fp8 = {"fp8": True}
    assert mxu_dtype(DType.E4M3, DType.E5M2, **fp8) is DType.E4M3
    assert mxu_dtype(DType.E5M2, DType.E5M2, **fp8) is DType.E5M2
    assert mxu_dtype(DType.E4M3, DType.E4M3, lhs_scale=DType.E8M0, **fp8) is DType.E4M3
    assert mxu_dtype(DType.E4M3, DType.E4M3) is DType.BF16
    assert mxu_dtype(DType.E4M3, DType.BF16, **fp8) is DType.BF16
    assert mxu_dtype(DType.E4M3, DType.F32, **fp8) is DType.F32
    assert mxu_dtype(DType.E4M3, DType.E4M3, rhs_scale=DType.UE4M3, **fp8) is DType.BF16
    assert mxu_dtype(DType.E4M3, DType.INT8, **fp8) is DType.BF16
    spec = load_spec(spec_text(*BLOCKS, tpu="v7x"))
    c = matmul_core(spec.kernel("mxfp8").for_backend(Backend.PALLAS_TPU), fp8_mxu=True)
    assert c.fp8_fold and c.mxu is DType.E4M3 and c.exponent_input("lhs")


# ---------------------------------------------------------------------------
# Numerics in interpret mode, against the reference.


# One CI case per kind; gmm_mxfp8 runs in test_v7x_grouped_edges.
FAST = ("fp8_nk", "fp8_mixed_kn", "gmm_fp8", "masked_fp8_kn", "mxfp8", "mxfp8_rhs_only")


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in KERNELS])
def test_v7x_matches_reference(v7x, name):
    kernel = v7x.kernel(name)
    check(kernel, v7x.fn(name), _inputs(kernel, seed=len(name)), k=K)


@pytest.mark.parametrize("name", ["mxfp8", "fp8_nk"] + [
    pytest.param(n, marks=pytest.mark.slow) for n in KERNELS if n not in ("mxfp8", "fp8_nk")])
def test_v7x_one_row_short_k(v7x, name):
    """m = 1 with k = 96: one partial K tile (3 scale blocks)."""
    kernel = v7x.kernel(name)
    check(kernel, v7x.fn(name), _inputs(kernel, m=1, n=256, k=96, seed=3), k=96)


@pytest.mark.parametrize("name", ["gmm_mxfp8"] + [
    pytest.param(n, marks=pytest.mark.slow) for n in GROUPED if n != "gmm_mxfp8"])
def test_v7x_grouped_edges(v7x, name):
    """Zero-sized groups (sharded with existing_out for the contiguous layout)."""
    kernel = v7x.kernel(name)
    if kernel.masked:
        inputs = _inputs(kernel, m=100, seed=5, masked_m=np.array([0, 100, 37, 0, 64]))
    else:
        inputs = _inputs(kernel, m=300, n=256, seed=5,
                         group_sizes=np.array([40, 0, 70, 0, 55, 20], np.int32),
                         group_offset=2, g_local=3, with_existing_out=True)
    check(kernel, v7x.fn(name), inputs, k=K)


@pytest.mark.parametrize("side", ["lhs", pytest.param("rhs", marks=pytest.mark.slow)])
def test_v7x_mxfp8_every_e8m0_byte(v7x, side):
    """Bytes 0..255 of one operand's e8m0 scale, 8 blocks per K tile, the
    other's 127: row (column) i holds byte i in every block but one, which
    holds i + 1, so tiles with shifts of 0 and 1 next to the extremes (2^-127,
    2^127, NaN) go through the FP8 / bf16 choice. Operands are positive,
    so no sum cancels, and no expected output is an f32 subnormal."""
    kernel = v7x.kernel("mxfp8")
    inputs = _inputs(kernel, m=256, n=256, k=256, seed=11)
    inputs["lhs"], inputs["rhs"] = np.abs(inputs["lhs"]), np.abs(inputs["rhs"])
    rows = np.repeat(np.arange(256)[:, None], 8, axis=1)
    rows[np.arange(256), np.arange(256) % 8] = np.minimum(np.arange(256) + 1, 254)
    rows[255] = 255
    other = "rhs" if side == "lhs" else "lhs"
    inputs[f"{side}_scale"] = rows.astype(np.uint8)
    inputs[f"{other}_scale"] = np.full_like(inputs[f"{other}_scale"], 127)
    expected = ref.reference(kernel, **inputs)
    with np.errstate(invalid="ignore"):
        assert not ((expected != 0) & (np.abs(expected) < 2.0**-126)).any()
    actual = run(v7x.fn("mxfp8"), inputs)
    result = ref.compare(actual, expected, kernel, k=256, inputs=inputs)
    assert result.passed, result.detail
    out = np.asarray(actual, np.float32)
    nan_line = out[255] if side == "lhs" else out[:, 255]
    rest = out[:255] if side == "lhs" else out[:, :255]
    assert np.isnan(nan_line).all() and not np.isnan(rest).any()


# ---------------------------------------------------------------------------
# MXFP8 tiles that FP8 cannot hold: the bf16 fallback.


def _spread_scales(kernel, *, seed: int) -> dict:
    """MXFP8 inputs where, in every row of lhs, the first scale block of each
    K tile is all zeros under a scale 2**20 above the others: the blocks
    after it are scaled by 2**-20 relative to it in VMEM, below FP8's
    smallest subnormal for (nearly) all of their values, made at least 0.5
    in magnitude. Every output is then the sum of those blocks' products
    alone, which an FP8 dot of the scaled values would flush to (about) 0."""
    inputs = _inputs(kernel, m=64, n=256, k=512, seed=seed)
    lhs = np.asarray(inputs["lhs"], np.float32)
    rng = np.random.default_rng(seed)
    lhs = np.where(np.abs(lhs) < 0.5, np.sign(lhs + 0.1) * rng.uniform(0.5, 2, lhs.shape), lhs)
    tk = kernel.for_backend(Backend.PALLAS_TPU).tile.k
    blocks = lhs.shape[1] // 32
    first = (np.arange(blocks) * 32) % tk == 0
    lhs[:, np.repeat(first, 32)] = 0
    inputs["lhs"] = lhs.astype(inputs["lhs"].dtype)
    scale = np.full(inputs["lhs_scale"].shape, 120, np.uint8)
    scale[:, first] = 140
    inputs["lhs_scale"] = scale
    inputs["rhs_scale"] = np.full_like(inputs["rhs_scale"], 127)
    return inputs


@pytest.mark.parametrize("name", ["mxfp8", pytest.param("mxfp8_mixed_kn",
                                                        marks=pytest.mark.slow)])
def test_v7x_mxfp8_inexact_tiles_take_bf16(v7x, name, tmp_path):
    kernel = v7x.kernel(name)
    inputs = _spread_scales(kernel, seed=31)
    expected = ref.reference(kernel, **inputs)
    assert np.mean(np.abs(np.asarray(expected, np.float32)) > 2.0**-7) > 0.9  # test design
    check(kernel, v7x.fn(name), inputs, k=512)
    # Planted: the FP8 dot taken whatever the check says. The comparison
    # must catch it on these inputs.
    text = Path(v7x.modules[name].__file__).read_text()
    old = "lhs_misses + rhs_misses == 0,"
    assert text.count(old) == 1
    path = tmp_path / f"{name}_always_fp8.py"
    path.write_text(text.replace(old, "True,"))
    planted = getattr(import_path(path), name)
    result = ref.compare(run(planted, inputs), expected, kernel, k=512, inputs=inputs)
    assert not result.passed


def test_fold_fp8_counts_inexact_values(v7x):
    """`_fold_fp8`: the FP8 and bf16 values, and the count of values the FP8
    type does not hold, against ml_dtypes' round trip."""
    fold = v7x.modules["mxfp8"]._fold_fp8
    rng = np.random.default_rng(41)
    for dtype, tiny in ((ml_dtypes.float8_e4m3fn, 2.0**-9), (ml_dtypes.float8_e5m2, 2.0**-16)):
        x = rng.standard_normal((32, 128)).astype(dtype).astype(np.float32)
        shift = rng.integers(0, 24, (32, 128))
        scaled = (x * np.exp2(-shift.astype(np.float32))).astype(np.float32)
        scaled[0, :4] = [tiny, tiny / 2, 0.0, np.nan]
        narrow, wide, misses = fold(jax.numpy.asarray(scaled), dtype)
        round_trip = scaled.astype(dtype).astype(np.float32)
        want = int(np.sum(~(round_trip == scaled)))
        assert int(misses) == want and 0 < want < scaled.size
        assert np.array_equal(np.asarray(narrow).view(np.uint8),
                              scaled.astype(dtype).view(np.uint8))
        assert np.array_equal(np.asarray(wide, np.float32), scaled, equal_nan=True)
        exact = np.where(round_trip == scaled, scaled, 0.0).astype(np.float32)
        assert int(fold(jax.numpy.asarray(exact), dtype)[2]) == 0
