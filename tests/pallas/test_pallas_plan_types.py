"""One plan type per op, with typed fields, checked against hand-computed values."""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath

import pytest

from gemmgen.backends import pallas
from gemmgen.backends.pallas import MatmulPlan, QuantizePlan, Stage, TgmmPlan
from gemmgen.ir import Activation, BiasMode, DType, ScaleMode
from gemmgen.parse import parse
from gemmgen.validate import validate

from pallas_helpers import kernel_block, spec_text


def _plan(*fields: str, tpu: str = "v5e"):
    spec = validate(parse(spec_text(kernel_block("gemm", *fields), tpu=tpu), "specs/t.gemm"))
    return pallas.plan(spec.kernel("gemm"), spec)


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_each_op_has_its_own_plan_type_without_the_others_fields():
    matmul, tgmm, quantize = (_field_names(c) for c in (MatmulPlan, TgmmPlan, QuantizePlan))
    assert {"core", "backward", "constants"} <= matmul
    assert not {"group", "quant_tk", "fp8_max", "e8m0"} & (matmul | tgmm)
    assert not {"core", "backward"} & (tgmm | quantize)
    assert "tgmm" not in quantize
    for cls in (MatmulPlan, TgmmPlan, QuantizePlan):
        params = cls.__dataclass_params__
        assert params.frozen and cls.__dataclass_fields__["module"].kw_only
        # Every field is required: no zero defaults for fields of other ops.
        assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                   for f in dataclasses.fields(cls))
    with pytest.raises(TypeError):
        MatmulPlan(None)  # keyword arguments only


def test_grouped_fp8_silu_mul_plan():
    p = _plan("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16",
              "lhs_scale per_token_group k=128 e8m0", "rhs_scale block n=128 k=128 f32",
              "epilogue silu_mul alpha=0.75", "tile m=64 n=128 k=128")
    assert type(p) is MatmulPlan and p.grouped and not p.vjp and p.backward is None
    c = p.core
    assert (c.fn, c.kernel_fn, c.grouped, c.rhs_nk) == ("_gmm", "_kernel", True, True)
    assert c.lhs_scale is ScaleMode.TOKEN_GROUP and c.lhs_scale_dtype is DType.E8M0
    assert c.rhs_scale is ScaleMode.BLOCK and c.rhs_scale_dtype is DType.F32
    assert (c.lhs_block_k, c.rhs_block_k, c.rhs_block_n) == (128, 128, 128)
    assert c.activation is Activation.SILU_MUL and c.bias is BiasMode.NONE
    assert c.mxu is DType.BF16 and c.lhs_cast is DType.BF16 and c.rhs_cast is DType.BF16
    assert c.alpha == 0.75 and c.alpha_split == (1.5, -1)  # 0.75 = 1.5 * 2**-1
    # e8m0 meets a main-loop scale: everything applies per K block.
    assert c.folded and c.scale_stage("lhs") is Stage.LOOP and c.alpha_stage is Stage.LOOP
    # One e8m0 exponent (-127..127) plus alpha's -1: -128..126, two normal steps.
    assert c.pow2_steps(Stage.LOOP) == 2
    gate, up = c.halves
    s = c.loop_scaling(up)
    assert [f.ref for f in s.factors] == ["rhs_scale_up_ref[...]"]
    assert s.exponents == "lhs_scale_ref[...] + ALPHA_EXPONENT" and s.alpha_mantissa
    assert not c.epilogue_scaling(gate).applies
    assert c.inputs == ("lhs", "rhs", "rhs", "lhs_scale", "rhs_scale", "rhs_scale")
    assert [b.index for b in c.in_specs] == ["lhs_index", "rhs_index", "rhs_up_index",
                                             "lhs_scale_index", "rhs_scale_index",
                                             "rhs_scale_up_index"]
    assert [(k.name, k.value) for k in p.constants] == [
        ("RHS_NK", "True"), ("LHS_SCALE_BLOCK_K", "128"), ("RHS_SCALE_BLOCK_N", "128"),
        ("RHS_SCALE_BLOCK_K", "128"), ("M_ALIGN", "32"), ("K_ALIGN", "128"),
        ("N_ALIGN", "128"), ("N_LANES", "128")]
    mod = p.module
    assert mod.path == PurePosixPath("pallas/gemm.py") and mod.out_dtype == "bfloat16"
    assert [a.name for a in mod.args] == ["lhs", "rhs", "group_sizes", "lhs_scale",
                                          "rhs_scale", "group_offset", "existing_out"]
    # VMEM, 2 buffers each: lhs fp8 [64, 128] pads to 32 rows of 8-bit:
    # 64 * 128; rhs fp8 [128, 128] twice (gate, up); lhs_scale [64, 1] f32
    # pads to 128 lanes; rhs_scale [1, 128] f32 pads to 8 rows, twice;
    # existing_out and out bf16 [64, 128]; two f32 accumulators.
    want = (2 * 64 * 128 + 2 * 2 * 128 * 128 + 2 * 64 * 128 * 4 + 2 * 2 * 8 * 128 * 4
            + 2 * 64 * 128 * 2 + 2 * 64 * 128 * 2 + 2 * 64 * 128 * 4)
    assert mod.vmem_bytes == want and mod.vmem_limit_bytes is None and mod.buffers == 2


def test_dense_plan():
    p = _plan("op dense", "lhs f32 [m, k]", "rhs bf16 [k, n]", "out f16", "bias bf16 [n]",
              "epilogue gelu", "stages 1", "dims n=512 k=256")
    assert type(p) is MatmulPlan and not p.grouped and p.backward is None
    c = p.core
    assert not c.rhs_nk and c.mxu is DType.F32 and c.highest and not c.int_dot
    assert c.lhs_cast is None and c.rhs_cast is DType.F32
    assert c.bias is BiasMode.N and c.activation_fn == "_gelu"
    assert c.inputs == ("lhs", "rhs", "bias[None, :]")
    assert [(k.name, k.value) for k in p.constants] == [
        ("RHS_NK", "False"), ("M_ALIGN", "32"), ("K_ALIGN", "128"), ("N_ALIGN", "128")]
    assert p.module.buffer_arg == ", pipeline_mode=pl.Buffered(1)"
    assert (p.module.static_n, p.module.static_k) == (512, 256)
    assert p.k_from_rhs == "rhs.shape[0]" and p.n_from_rhs == "rhs.shape[1]"


def test_tgmm_plan():
    p = _plan("op tgmm", "lhs bf16 [m, k]", "rhs f32 [m, n]", "out f32", "epilogue alpha=0.1",
              "tile m=128 n=128 k=256")
    assert type(p) is TgmmPlan
    t = p.tgmm
    assert (t.fn, t.kernel_fn, t.highest) == ("_tgmm", "_tgmm_kernel", True)
    assert t.lhs_cast is DType.F32 and t.rhs_cast is None  # bf16 x f32 meets at f32
    assert t.alpha == 0.10000000149011612  # 0.1 rounded to f32
    # lhs bf16 [128, 256], rhs f32 [128, 128], existing_out and out f32
    # [256, 128], 2 buffers each, and the f32 accumulator [256, 128].
    want = (2 * 128 * 256 * 2 + 2 * 128 * 128 * 4 + 2 * 256 * 128 * 4 * 2 + 256 * 128 * 4)
    assert p.module.vmem_bytes == want
    assert [a.name for a in p.module.args if a.optional] == ["group_offset", "existing_out"]


@pytest.mark.parametrize("dtype,out,group,tile_k,tk,fp8_max,scale", [
    ("f32", "e4m3", 64, 128, 128, 448.0, "float32"),
    ("e8m0", "e5m2", 128, 512, 512, 57344.0, "uint8"),
    ("f32", "e4m3", 256, 128, 256, 448.0, "float32"),  # a K block of one whole group
])
def test_quantize_plan(dtype, out, group, tile_k, tk, fp8_max, scale):
    p = _plan("op quantize", "lhs bf16 [m, k]", f"out {out}",
              f"out_scale per_token_group k={group} {dtype}", f"tile m=32 n=128 k={tile_k}")
    assert type(p) is QuantizePlan
    assert (p.group, p.quant_tk, p.fp8_max, p.e8m0, p.scale_dtype) == (
        group, tk, fp8_max, dtype == "e8m0", scale)
    # x bf16 [32, tk] and q fp8 [32, tk] (8-bit: 32 rows), the scales [32,
    # tk / G] f32 (padded to 128 lanes), two buffers each; four f32 work
    # arrays [32, tk].
    assert p.groups == tk // group
    assert p.module.vmem_bytes == 2 * (32 * tk * 2 + 32 * tk + 32 * 128 * 4) + 4 * 32 * tk * 4
