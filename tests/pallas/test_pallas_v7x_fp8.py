"""FP8 on the MXU of a TPU v7x (docs/pallas.md, "FP8 on a TPU v7x").

A spec with `tpu v7x` feeds FP8 x FP8 dots (e4m3, e5m2, mixed) to the MXU
as FP8 with f32 products; MXFP8, whose e8m0 blocks scale the operands in
VMEM, keeps the exact bf16 dot there (docs/decisions.md, "FP8 on the v7x
MXU"); FP8 against bf16 widens. The same spec for a v5e or v6e widens FP8
to bf16.

What the CPU can check: the Mosaic module the Pallas lowering emits (the
`tpu.matmul` operand types, the FP8 -> bf16 conversions), captured while
`jax.export` lowers the kernel for TPU (`pallas_helpers.mosaic_text`); the
numerics in TPU interpret mode against the NumPy reference (dense,
grouped, masked, every scale kind, MXFP8 on one or both operands, partial
tiles, m = 1, k a multiple of neither the tile nor the scale block,
zero-sized groups).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from pallas_helpers import (
    Generated,
    build,
    check,
    kernel_block,
    load_spec,
    matmul_types,
    mosaic_text,
    random_inputs,
    spec_text,
)

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
def test_v7x_mxfp8_keeps_the_bf16_dot(v7x, v5e, name):
    """MXFP8 on a v7x: the operands scaled in VMEM by their e8m0 blocks go to
    the MXU in bf16, as on a v5e (the same module body)."""
    kernel = v7x.kernel(name)
    text = mosaic_text(v7x.fn(name), _inputs(kernel))
    assert set(matmul_types(text)) == {("bf16", "bf16")}
    assert matmul_types(text) == matmul_types(mosaic_text(v5e.fn(name), _inputs(kernel)))


@pytest.mark.parametrize("name", FP8_FP8[:1] + MX[:1] + [
    pytest.param(n, marks=pytest.mark.slow) for n in FP8_FP8[1:] if n != MX[0]])
def test_v5e_widens_fp8(v5e, name):
    """The same kernels for a v5e: FP8 widened to bf16, every dot in bf16."""
    kernel = v5e.kernel(name)
    text = mosaic_text(v5e.fn(name), _inputs(kernel))
    assert set(matmul_types(text)) == {("bf16", "bf16")}
    assert _WIDEN.findall(text)


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
    for name in [n for n in FP8_FP8 if n not in MX]:
        assert v7x[name].fp8_dot and not v5e[name].fp8_dot
        assert v7x[name].lhs_cast is None and v7x[name].rhs_cast is None
        assert v5e[name].mxu is DType.BF16
    for name in MX + ["fp8_bf16"]:
        assert v7x[name] == v5e[name]


def test_mxu_dtype_decisions():
    fp8 = {"fp8": True}
    assert mxu_dtype(DType.E4M3, DType.E5M2, **fp8) is DType.E4M3
    assert mxu_dtype(DType.E5M2, DType.E5M2, **fp8) is DType.E5M2
    assert mxu_dtype(DType.E4M3, DType.E4M3, lhs_scale=DType.E8M0, **fp8) is DType.BF16
    assert mxu_dtype(DType.E4M3, DType.E4M3) is DType.BF16
    assert mxu_dtype(DType.E4M3, DType.BF16, **fp8) is DType.BF16
    assert mxu_dtype(DType.E4M3, DType.F32, **fp8) is DType.F32
    assert mxu_dtype(DType.E4M3, DType.E4M3, rhs_scale=DType.UE4M3, **fp8) is DType.BF16
    assert mxu_dtype(DType.E4M3, DType.INT8, **fp8) is DType.BF16
    spec = load_spec(spec_text(*BLOCKS, tpu="v7x"))
    c = matmul_core(spec.kernel("mxfp8").for_backend(Backend.PALLAS_TPU), fp8_mxu=True)
    assert not c.fp8_dot and c.mxu is DType.BF16 and c.exponent_input("lhs")
    c = matmul_core(spec.kernel("fp8_deepseek").for_backend(Backend.PALLAS_TPU), fp8_mxu=True)
    assert c.fp8_dot and c.lhs_cast is None and c.rhs_cast is None


# ---------------------------------------------------------------------------
# Numerics in interpret mode, against the reference.


# One CI case per kind (MXFP8 is the v5e body: tests/pallas/test_pallas_mx.py).
FAST = ("fp8_nk", "fp8_mixed_kn", "gmm_fp8", "masked_fp8_kn", "mxfp8")


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


@pytest.mark.parametrize("name", ["gmm_fp8"] + [
    pytest.param(n, marks=pytest.mark.slow) for n in GROUPED if n != "gmm_fp8"])
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
