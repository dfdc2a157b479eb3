"""examples/moe_layer.py: a MoE feed-forward layer on the generated Pallas
kernels, expert-parallel under jax.shard_map on 8 CPU devices, against a
plain-jnp MoE on one device (forward and gradients), plus its check_vma=True
training step lowered for TPU. Runs in a subprocess: the 8 host devices need
XLA_FLAGS before JAX starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent("""\
    import functools, json

    import jax
    import jax.numpy as jnp
    import numpy as np

    from examples import moe_layer as ml

    assert jax.device_count() == 8, jax.devices()
    cfg = ml.Config()
    mesh = jax.make_mesh((8,), (ml.AXIS,))
    result = {}
    for seed in (11, 12):  # fresh random weights, tokens and targets
        params, x, target = ml.make_problem(cfg, 32, seed=seed)
        sp, sx, st = ml.shard(mesh, params, x, target)
        ep = functools.partial(ml.moe_layer_ep, cfg=cfg, mesh=mesh, interpret=True,
                               check_vma=False)
        ref = functools.partial(ml.moe_layer_reference, cfg=cfg)
        one = functools.partial(ml.moe_layer, cfg=cfg, interpret=True)

        def loss(layer, params, x, target):
            return jnp.mean((layer(params, x) - target) ** 2)

        grad = lambda layer: jax.jit(jax.value_and_grad(functools.partial(loss, layer),
                                                        argnums=(0, 1)))
        out = {"ep": np.asarray(jax.jit(ep)(sp, sx)), "ref": np.asarray(ref(params, x)),
               "one": np.asarray(jax.jit(one)(params, x))}
        (l_ep, (g_ep, dx_ep)) = grad(ep)(sp, sx, st)
        (l_ref, (g_ref, dx_ref)) = grad(ref)(params, x, target)
        errors = {name: float(np.abs(out[name] - out["ref"]).max()) for name in ("ep", "one")}
        scale = {"out": float(np.abs(out["ref"]).max())}
        for name in g_ref:
            errors[name] = float(np.abs(np.asarray(g_ep[name]) - np.asarray(g_ref[name])).max())
            scale[name] = float(np.abs(np.asarray(g_ref[name])).max())
        errors["x"] = float(np.abs(np.asarray(dx_ep) - np.asarray(dx_ref)).max())
        scale["x"] = float(np.abs(np.asarray(dx_ref)).max())
        errors["loss"] = abs(float(l_ep) - float(l_ref))
        scale["loss"] = float(l_ref)
        result[seed] = {"errors": errors, "scale": scale}

    # Training: a few SGD steps, expert-parallel and plain, side by side.
    params, x, target = ml.make_problem(cfg, 32, seed=13)
    sharded = ml.shard(mesh, params, x, target)
    ep = functools.partial(ml.moe_layer_ep, cfg=cfg, mesh=mesh, interpret=True, check_vma=False)
    ep_step = jax.jit(functools.partial(ml.sgd_step, ep, lr=0.5))
    ref_step = jax.jit(functools.partial(ml.sgd_step, functools.partial(
        ml.moe_layer_reference, cfg=cfg), lr=0.5))
    losses = []
    for _ in range(3):
        loss_ep, new, _ = ep_step(*sharded)
        loss_ref, params, _ = ref_step(params, x, target)
        sharded = (new, *sharded[1:])
        losses.append((float(loss_ep), float(loss_ref)))
    result["losses"] = losses
    # The same training step with shard_map's default check_vma=True,
    # lowered for TPU (interpret mode cannot run it; see the example).
    result["mosaic_kernels"] = ml.lower_for_tpu(cfg, mesh, 32).count("tpu_custom_call")
    print("RESULT", json.dumps(result))
    """)


def _run(code: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, *code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_expert_parallel_layer_matches_plain_jnp_and_trains():
    r = _run(["-c", DRIVER])
    assert r.returncode == 0, r.stderr[-4000:]
    line = next(s for s in r.stdout.splitlines() if s.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    for seed in ("11", "12"):
        errors, scale = result[seed]["errors"], result[seed]["scale"]
        assert scale["out"] > 0.1
        # The kernels' outputs and gradients are bf16 (gate-up out, d lhs,
        # d rhs); the reference rounds the same matmul inputs to bf16.
        for name in ("ep", "one"):
            assert errors[name] <= 1e-2 * scale["out"], (seed, name, errors, scale)
        for name in ("router", "w_gateup", "w_down", "x", "loss"):
            assert scale[name] > 0, (seed, name, scale)
            assert errors[name] <= 2e-2 * scale[name], (seed, name, errors, scale)
    losses = result["losses"]
    assert losses[-1][0] < losses[0][0]  # it learns
    for ep, ref in losses:
        assert abs(ep - ref) <= 2e-2 * ref, losses
    # Forward 2, backward 5 (gate-up: recompute, d lhs, d rhs; down: d lhs, d rhs).
    assert result["mosaic_kernels"] == 7


@pytest.mark.slow
def test_example_runs_as_documented():
    r = _run(["-m", "examples.moe_layer"])
    assert r.returncode == 0, r.stderr[-4000:]
    lines = r.stdout.splitlines()
    assert [s.split(":")[0] for s in lines[:3]] == ["step 0", "step 1", "step 2"]
    assert lines[3] == "check_vma=True training step lowered for TPU: 7 Mosaic kernels"
