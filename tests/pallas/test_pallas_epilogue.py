"""Epilogues in Pallas: bias per n and per group, relu, silu, gelu (tanh),
silu_mul (n/2 output columns), alpha, and f32 / bf16 / f16 output casts."""

from __future__ import annotations

import numpy as np
import pytest

from pallas_helpers import build, check, kernel_block, lower_for_tpu, random_inputs, run, spec_text

KERNELS = {
    "f16_gelu_bias": ("op dense", "lhs f16 [m, k]", "rhs f16 [k, n]", "out f16", "bias f16 [n]",
                      "epilogue gelu"),
    "silu_alpha_bias": ("op dense", "lhs bf16 [m, k]", "rhs bf16 [k, n]", "out f32",
                        "bias f32 [n]", "epilogue silu alpha=2"),
    "relu_kn_f16": ("op dense", "lhs bf16 [m, k]", "rhs bf16 [k, n]", "out f16",
                    "epilogue relu"),
    "gmm_relu_alpha_bias": ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, n, k]", "out bf16",
                            "bias bf16 [g, 1, n]", "epilogue relu alpha=0.75"),
    "gmm_gelu_n_bias": ("op grouped", "lhs f32 [m, k]", "rhs f32 [g, k, n]", "out f16",
                        "bias f32 [n]", "epilogue gelu alpha=1.5"),
    # silu_mul: gate columns [0, n/2), up columns [n/2, n).
    "silu_mul_kn": ("op dense", "lhs bf16 [m, k]", "rhs bf16 [k, n]", "out bf16",
                    "bias f32 [n]", "epilogue silu_mul", "tile m=128 n=256 k=128"),
    "gmm_silu_mul_f32": ("op grouped", "lhs f32 [m, k]", "rhs f32 [g, n, k]", "out f32",
                         "epilogue silu_mul alpha=0.5"),
    "moe_int8_silu_mul": ("op grouped", "lhs bf16 [m, k]", "rhs int8 [g, n, k]", "out bf16",
                          "rhs_scale kblock k=128 f32", "bias bf16 [g, 1, n]",
                          "epilogue silu_mul"),
    "fp8_block_silu_mul": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16",
                           "lhs_scale per_token_group k=128 f32",
                           "rhs_scale block n=128 k=128 bf16", "epilogue silu_mul"),
    "int4_kn_silu_mul": ("op dense", "lhs bf16 [m, k]", "rhs int4 packed [k, n]", "out bf16",
                         "rhs_scale per_channel f32", "epilogue silu_mul",
                         "tile m=128 n=256 k=128"),
}

SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])
M, K = 300, 320


def _n(name: str) -> int:
    # silu_mul needs n/2 in whole 128-lane blocks (256 when rhs is packed
    # along n); 768 also makes the 256-wide n tile shrink to 128 so that
    # column blocks j and j + n/2 pair up.
    if "silu_mul" not in name:
        return 200
    return 1024 if "int4_kn" in name else 768


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_epilogue"))


@pytest.mark.parametrize("name", list(KERNELS))
def test_matches_reference(generated, name):
    kernel = generated.kernel(name)
    extra = {"num_groups": 4} if kernel.grouped else {}
    inputs = random_inputs(kernel, m=M, n=_n(name), k=K, seed=len(name), **extra)
    out = check(kernel, generated.fn(name), inputs, k=K)
    assert out.shape == (M, _n(name) // kernel.out_n_divisor)
    lower_for_tpu(generated.fn(name), inputs)


def test_relu_clamps_and_f16_overflows_to_inf(generated):
    """relu output has no negatives; an f16 output past 65504 is inf, as the
    reference's IEEE cast says."""
    kernel = generated.kernel("relu_kn_f16")
    inputs = random_inputs(kernel, m=16, n=128, k=128)
    out = check(kernel, generated.fn("relu_kn_f16"), inputs, k=128)
    assert (out >= 0).all()
    inputs["lhs"] = (inputs["lhs"].astype(np.float32) * 4096).astype(inputs["lhs"].dtype)
    out = check(kernel, generated.fn("relu_kn_f16"), inputs, k=128)
    assert np.isinf(out).any()


def test_silu_mul_needs_whole_lane_blocks(generated):
    kernel = generated.kernel("silu_mul_kn")
    inputs = random_inputs(kernel, m=8, n=384, k=128)
    with pytest.raises(ValueError, match="n must be a multiple of 256, got 384"):
        run(generated.fn("silu_mul_kn"), inputs)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in KERNELS if n.startswith(("gmm_", "moe_"))])
def test_grouped_sharded_with_existing_out(generated, name):
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=M, n=_n(name), k=K, num_groups=5, group_offset=1,
                           g_local=3, with_existing_out=True, seed=3)
    check(kernel, generated.fn(name), inputs, k=K)


AWKWARD_N = 320  # 2.5 lane blocks; silu_mul's half, 160, is not a whole one


@pytest.mark.parametrize("epilogue", ["none", "relu", "silu", "gelu", "silu_mul"])
def test_every_epilogue_at_an_awkward_static_n_builds_a_module_that_runs(tmp_path, epilogue):
    """A spec that fixes an n the lanes do not divide: every epilogue either
    builds a module whose call matches the reference, or (silu_mul, whose
    pairing needs n/2 in whole lane blocks on a TPU) is refused at the
    epilogue when the spec is built; never a module that raises on every
    call."""
    from gemmgen.diagnostics import SpecError

    fields = ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, n, k]", "out bf16",
              f"dims n={AWKWARD_N}", "tile m=128 n=256 k=256")
    if epilogue != "none":
        fields += (f"epilogue {epilogue}",)
    text = spec_text(kernel_block("awkward", *fields))
    if epilogue == "silu_mul":
        with pytest.raises(SpecError) as e:
            build(text, tmp_path)
        (d,) = e.value.diagnostics
        assert d.loc.line == text.splitlines().index("  epilogue silu_mul") + 1
        assert "n must be a multiple of 256; dims n=320 (n/2 = 160)" in d.message
        return
    generated = build(text, tmp_path)
    kernel = generated.kernel("awkward")
    inputs = random_inputs(kernel, m=70, n=AWKWARD_N, k=300, seed=3, num_groups=3)
    check(kernel, generated.fn("awkward"), inputs, k=300)
