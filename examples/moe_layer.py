"""A mixture-of-experts feed-forward layer on gemmgen's generated Pallas kernels.

    router -> top-k -> sort tokens by expert -> gate-up grouped matmul with
    silu_mul -> down grouped matmul -> unsort and combine

The two grouped matmuls are generated from specs/moe.gemm:
`moe_gateup_silu_bf16` (rhs [E, 2F, D], out = silu(gate) * up) and `gmm_bf16`
(rhs [E, D, F], f32 out). Their `_vjp` twins are `jax.custom_vjp` functions
whose backward passes run generated kernels too, so `jax.grad` trains the
layer through them.

Expert parallelism (`moe_layer_ep`): under `jax.shard_map` each device of the
mesh axis "ep" owns E / devices experts (its slices of the expert weights)
and computes them through the kernels' `group_offset`; the tokens, sharded
over the same axis, are all-gathered, every device routes all of them, runs
its own experts (the rows of other experts come out as zeros) and the
partial outputs are summed and scattered back with `psum_scatter`.

Where it runs (docs/using-the-output.md, "Expert parallelism"):

- On TPUs the kernels run natively and `moe_layer_ep` uses shard_map's
  default `check_vma=True`: the generated modules type their outputs with
  the mesh axes their inputs vary over.
- On the CPU the kernels run in Pallas interpret mode, which JAX 0.10.2
  cannot run under `check_vma=True` once `group_offset` varies over the mesh
  (the work list in scalar prefetch then varies too, and the interpreter
  raises inside JAX), so `main` runs the numbers with `check_vma=False`
  and, separately, lowers the `check_vma=True` training step for TPU
  (`lower_for_tpu`, the real Pallas -> Mosaic lowering) to show that it
  type-checks and lowers. It uses plain interpret mode (`interpret=True`):
  TPU interpret mode (`pltpu.InterpretParams()`), which models a TPU's
  memories across devices, did not finish this layer on 8 host devices in
  ten minutes.

Run from the project root (the folder that holds `generated/`):

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m examples.moe_layer
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from generated.moe.pallas.gmm_bf16 import gmm_bf16_vjp
from generated.moe.pallas.moe_gateup_silu_bf16 import moe_gateup_silu_bf16_vjp

AXIS = "ep"  # the mesh axis the experts (and the tokens) are sharded over


@dataclasses.dataclass(frozen=True)
class Config:
    d_model: int = 128  # D
    d_ff: int = 128  # F; silu_mul needs F a multiple of 128
    experts: int = 16  # E
    top_k: int = 2  # K


def init_params(key: jax.Array, cfg: Config) -> dict[str, jax.Array]:
    """f32 master weights; the kernels get them as bf16."""
    k1, k2, k3 = jax.random.split(key, 3)
    d, f, e = cfg.d_model, cfg.d_ff, cfg.experts
    return {
        "router": jax.random.normal(k1, (d, e), jnp.float32) / np.sqrt(d),
        # [E, 2F, D]: rows [0, F) the gate, [F, 2F) the up projection.
        "w_gateup": jax.random.normal(k2, (e, 2 * f, d), jnp.float32) / np.sqrt(d),
        "w_down": jax.random.normal(k3, (e, d, f), jnp.float32) / np.sqrt(f),
    }


def route(router: jax.Array, x: jax.Array, top_k: int) -> tuple[jax.Array, jax.Array]:
    """Each token's top_k experts and their weights (softmax, renormalized)."""
    probs = jax.nn.softmax(x @ router, axis=-1)
    weights, experts = lax.top_k(probs, top_k)
    return weights / weights.sum(axis=-1, keepdims=True), experts


def sort_by_expert(experts: jax.Array, num_experts: int) -> tuple[jax.Array, jax.Array]:
    """The (token, k) slots in expert order, and the rows per expert."""
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    return order, jnp.bincount(flat, length=num_experts).astype(jnp.int32)


def expert_ffn(xs, w_gateup, w_down, group_sizes, group_offset, *, interpret):
    """The experts [group_offset, group_offset + len(w_gateup)) on the rows of
    xs (sorted by expert): silu(xs Wgᵀ) * (xs Wuᵀ) Wdᵀ; other rows are zero."""
    h = moe_gateup_silu_bf16_vjp(
        xs, w_gateup.astype(jnp.bfloat16), group_sizes, group_offset, interpret=interpret
    )
    return gmm_bf16_vjp(
        h, w_down.astype(jnp.bfloat16), group_sizes, group_offset, interpret=interpret
    )


def _moe(router, w_gateup, w_down, x, group_offset, cfg: Config, interpret):
    """The layer on all tokens x [T, D], with the experts this device owns."""
    weights, experts = route(router, x, cfg.top_k)
    order, group_sizes = sort_by_expert(experts, cfg.experts)
    xs = x[order // cfg.top_k].astype(jnp.bfloat16)  # the token of each slot
    y = expert_ffn(xs, w_gateup, w_down, group_sizes, group_offset, interpret=interpret)
    y = y[jnp.argsort(order)].reshape(x.shape[0], cfg.top_k, cfg.d_model)  # unsort
    return jnp.einsum("tkd,tk->td", y, weights)  # combine


def moe_layer(params, x, cfg: Config, *, interpret=False):
    """The layer on one device: every expert, group_offset 0."""
    return _moe(params["router"], params["w_gateup"], params["w_down"], x, None, cfg, interpret)


def moe_layer_ep(
    params, x, cfg: Config, mesh: jax.sharding.Mesh, *, interpret=False, check_vma=True
):
    """The layer expert-parallel over the mesh axis "ep": tokens x [T, D] and
    the expert weights sharded over it, the router replicated."""
    devices = mesh.shape[AXIS]
    local_experts = cfg.experts // devices

    def local(router, w_gateup, w_down, x_local):
        x_all = lax.all_gather(x_local, AXIS, tiled=True)  # every token, on every device
        offset = lax.axis_index(AXIS) * local_experts  # the first expert this device owns
        out = _moe(router, w_gateup, w_down, x_all, offset, cfg, interpret)
        return lax.psum_scatter(out, AXIS, scatter_dimension=0, tiled=True)

    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(), P(AXIS), P(AXIS), P(AXIS)),
        out_specs=P(AXIS),
        check_vma=check_vma,
    )(params["router"], params["w_gateup"], params["w_down"], x)


def moe_layer_reference(params, x, cfg: Config):
    """The same layer in plain jnp on one device: each token's experts by a
    gather of their weights, the matmul inputs rounded to bf16 as the kernels
    take them, f32 arithmetic."""

    def bf16(a):
        return a.astype(jnp.bfloat16).astype(jnp.float32)

    weights, experts = route(params["router"], x, cfg.top_k)
    wg = bf16(params["w_gateup"])[experts]  # [T, K, 2F, D]
    gate_up = jnp.einsum("td,tknd->tkn", bf16(x), wg, precision="highest")
    gate, up = gate_up[..., : cfg.d_ff], gate_up[..., cfg.d_ff :]
    h = bf16(jax.nn.silu(gate) * up)  # the gate-up kernel's output is bf16
    y = jnp.einsum("tkf,tkdf->tkd", h, bf16(params["w_down"])[experts], precision="highest")
    return jnp.einsum("tkd,tk->td", y, weights)


def loss_fn(layer, params, x, target):
    return jnp.mean((layer(params, x) - target) ** 2)


def sgd_step(layer, params, x, target, lr: float):
    loss, grads = jax.value_and_grad(functools.partial(loss_fn, layer))(params, x, target)
    return loss, jax.tree.map(lambda p, g: p - lr * g, params, grads), grads


def make_problem(cfg: Config, tokens: int, seed: int = 0):
    kp, kx, kt = jax.random.split(jax.random.key(seed), 3)
    params = init_params(kp, cfg)
    x = jax.random.normal(kx, (tokens, cfg.d_model), jnp.float32)
    target = jax.random.normal(kt, (tokens, cfg.d_model), jnp.float32)
    return params, x, target


def shard(mesh, params, x, target):
    """Place the expert weights and the tokens on their devices."""

    def put(a, spec):
        return jax.device_put(a, NamedSharding(mesh, spec))

    params = {
        "router": put(params["router"], P()),
        "w_gateup": put(params["w_gateup"], P(AXIS)),
        "w_down": put(params["w_down"], P(AXIS)),
    }
    return params, put(x, P(AXIS)), put(target, P(AXIS))


def lower_for_tpu(cfg: Config, mesh: jax.sharding.Mesh, tokens: int) -> str:
    """The expert-parallel training step with check_vma=True, lowered for TPU
    (the real Pallas -> Mosaic lowering, on any machine): its StableHLO."""
    params, x, target = shard(mesh, *make_problem(cfg, tokens))
    layer = functools.partial(moe_layer_ep, cfg=cfg, mesh=mesh, check_vma=True)
    step = jax.jit(functools.partial(sgd_step, layer, lr=0.1))
    return step.trace(params, x, target).lower(lowering_platforms=("tpu",)).as_text()


def main(steps: int = 3, tokens: int = 32) -> None:
    cfg = Config()
    devices = jax.device_count()
    if cfg.experts % devices or tokens % devices:
        raise SystemExit(f"{devices} devices must divide {cfg.experts} experts and {tokens} tokens")
    mesh = jax.make_mesh((devices,), (AXIS,))
    on_tpu = jax.default_backend() == "tpu"
    interpret = not on_tpu  # plain interpret mode on the CPU (see above)
    # Interpret mode cannot run this under check_vma=True (JAX 0.10.2; see above).
    layer = functools.partial(
        moe_layer_ep, cfg=cfg, mesh=mesh, interpret=interpret, check_vma=on_tpu
    )
    reference = functools.partial(moe_layer_reference, cfg=cfg)
    params, x, target = make_problem(cfg, tokens)
    sharded = shard(mesh, params, x, target)
    ep_step = jax.jit(functools.partial(sgd_step, layer, lr=0.1))
    ref_step = jax.jit(functools.partial(sgd_step, reference, lr=0.1))
    for i in range(steps):
        loss, new, _ = ep_step(*sharded)
        ref_loss, params, _ = ref_step(params, x, target)
        sharded = (new, *sharded[1:])
        print(
            f"step {i}: loss {float(loss):.5f} (expert-parallel over {devices} "
            f"device{'s' if devices != 1 else ''}), "
            f"{float(ref_loss):.5f} (plain jnp)"
        )
    if not on_tpu:
        hlo = lower_for_tpu(cfg, mesh, tokens)
        print(
            f"check_vma=True training step lowered for TPU: {hlo.count('tpu_custom_call')} "
            "Mosaic kernels"
        )


if __name__ == "__main__":
    main()
