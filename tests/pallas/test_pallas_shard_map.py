"""The generated Pallas functions inside `jax.shard_map` with its default
check_vma=True, no flags (docs/pallas.md, "Inside jax.shard_map").

Each module types its pallas_call output with the mesh axes its operands
vary over (operands that lack some are `pcast` to them), and a `_vjp`
makes its arguments vary alike, so a custom_vjp's gradients have their
arguments' types. Checked here on a one-device mesh by the TPU lowering
(the real Pallas -> Mosaic lowering, which is what runs on a TPU), with the
output's varying axes read from the trace. TPU interpret mode cannot run
under check_vma=True in JAX 0.10.2 once the work list varies over the mesh
(its interpreter, not the generated code, raises); the last test pins
that, so that a JAX that lifts the limitation shows up here.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from pallas_helpers import INTERPRET, import_path

REPO = Path(__file__).resolve().parents[2]


def _module(stem: str, name: str):
    return import_path(REPO / "generated" / stem / "pallas" / f"{name}.py")


def _mesh():
    return jax.make_mesh((1,), ("x",))


def _run_sharded(fn, args, specs, *, grad: bool = False):
    """Trace fn(*args) inside shard_map (check_vma=True), lower it for TPU;
    return the varying axes of fn's outputs, seen inside the trace."""
    seen = []

    def body(*xs):
        out = fn(*xs, interpret=False)
        outs = out if isinstance(out, tuple) else (out,)
        seen.append([jax.typeof(o).manual_axis_type.varying for o in outs])
        return out

    mesh = _mesh()
    args = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, specs)]
    out_specs = tuple(P("x") for _ in range(2)) if "quant" in fn.__name__ else P("x")
    f = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=out_specs)
    if grad:
        g = jax.grad(lambda *xs: jnp.sum(f(*xs).astype(jnp.float32) ** 2), argnums=(0, 1))
        traced = jax.jit(g).trace(*args)
    else:
        traced = jax.jit(f).trace(*args)
    text = traced.lower(lowering_platforms=("tpu",)).as_text()
    assert "tpu_custom_call" in text
    return seen, text


def _bf16(rng, shape):
    return jnp.asarray(rng.standard_normal(shape), jnp.bfloat16)


def test_grouped_and_its_vjp_under_check_vma():
    rng = np.random.default_rng(0)
    mod = _module("moe", "gmm_bf16")
    lhs, rhs = _bf16(rng, (64, 128)), _bf16(rng, (4, 128, 128))
    sizes = jnp.asarray([16, 16, 16, 16], jnp.int32)

    def fn(lhs, rhs, interpret):
        # rhs is sharded (varying over x), lhs and the sizes replicated.
        offset = jax.lax.axis_index("x") * rhs.shape[0]
        return mod.gmm_bf16(lhs, rhs, sizes, offset, interpret=interpret)

    seen, _ = _run_sharded(fn, (lhs, rhs), (P(), P("x")))
    assert seen == [[frozenset({"x"})]]

    def fn_vjp(lhs, rhs, interpret):
        offset = jax.lax.axis_index("x") * rhs.shape[0]
        return mod.gmm_bf16_vjp(lhs, rhs, sizes, offset, interpret=interpret)

    seen, text = _run_sharded(fn_vjp, (lhs, rhs), (P(), P("x")), grad=True)
    assert seen == [[frozenset({"x"})]]
    assert text.count("tpu_custom_call") >= 3  # forward, d lhs, d rhs (tgmm)


def test_silu_mul_vjp_under_check_vma():
    rng = np.random.default_rng(1)
    mod = _module("moe", "moe_gateup_silu_bf16")
    lhs, rhs = _bf16(rng, (64, 128)), _bf16(rng, (2, 256, 128))

    def fn(lhs, rhs, interpret):
        return mod.moe_gateup_silu_bf16_vjp(lhs, rhs, [32, 32], interpret=interpret)

    seen, _ = _run_sharded(fn, (lhs, rhs), (P("x"), P()), grad=True)
    assert seen == [[frozenset({"x"})]]


def test_tgmm_dense_and_quantize_under_check_vma():
    rng = np.random.default_rng(2)
    tgmm = _module("moe", "moe_bf16_grad_rhs").moe_bf16_grad_rhs
    seen, _ = _run_sharded(
        lambda a, b, interpret: tgmm(a, b, [32, 32], interpret=interpret),
        (_bf16(rng, (64, 128)), _bf16(rng, (64, 128))), (P(), P("x")))
    assert seen == [[frozenset({"x"})]]

    dense = _module("dense", "dense_bf16_out_f32").dense_bf16_out_f32
    seen, _ = _run_sharded(lambda a, b, interpret: dense(a, b, interpret=interpret),
                           (_bf16(rng, (64, 128)), _bf16(rng, (128, 128))), (P("x"), P()))
    assert seen == [[frozenset({"x"})]]

    quant = _module("dense", "per_token_group_quant_fp8_out_scale_f32")

    def per_token_group_quant(a, interpret):
        return quant.per_token_group_quant_fp8_out_scale_f32(a, interpret=interpret)

    seen, _ = _run_sharded(per_token_group_quant, (_bf16(rng, (64, 256)),), (P("x"),))
    assert seen == [[frozenset({"x"}), frozenset({"x"})]]


def test_outside_shard_map_nothing_varies():
    mod = _module("moe", "gmm_bf16")
    assert mod._varying_axes(jnp.zeros(3), None) == frozenset()
    struct = mod._out_struct((2, 3), jnp.float32, frozenset())
    assert struct.shape == (2, 3) and struct.manual_axis_type is None


def test_interpret_mode_under_check_vma_works_until_the_work_list_varies():
    """TPU interpret mode under check_vma=True: with an offset the same on
    every device it runs and gives the plain call's numbers; with an offset
    that varies (expert parallelism: axis_index), the work list in scalar
    prefetch varies too, and JAX 0.10.2's interpreter raises inside JAX (it
    compares its grid indices with the prefetched values). If the second
    half starts passing, interpret mode can run expert parallelism under
    check_vma=True: update docs/using-the-output.md and examples/moe_layer.py."""
    rng = np.random.default_rng(3)
    mod = _module("moe", "gmm_bf16")
    lhs, rhs = _bf16(rng, (64, 128)), _bf16(rng, (2, 128, 128))
    mesh = _mesh()
    placed = (jax.device_put(lhs, NamedSharding(mesh, P())),
              jax.device_put(rhs, NamedSharding(mesh, P("x"))))

    def sharded(offset):
        def body(lhs, rhs):
            off = jax.lax.axis_index("x") * 2 if offset == "axis_index" else offset
            return mod.gmm_bf16(lhs, rhs, [20, 44, 9], off, interpret=INTERPRET)

        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P("x")), out_specs=P("x")))

    got = np.asarray(sharded(1)(*placed))
    want = np.asarray(mod.gmm_bf16(lhs, rhs, [20, 44, 9], 1, interpret=INTERPRET))
    assert np.isfinite(want).all() and np.abs(want[20:]).max() > 0 and not want[:20].any()
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="requires varying manual axes to match"):
        sharded("axis_index")(*placed)
