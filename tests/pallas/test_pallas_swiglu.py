"""swiglu_clamped (GPT-OSS's gated activation) in Pallas: interleaved
(gate, up) columns and the halves layout, per-expert bias, at awkward n
(GPT-OSS's n = 5760, whose n/2 = 2880 is not a whole number of lane tiles),
empty groups, poisoned outputs, and the `_vjp`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from pallas_helpers import build, check, kernel_block, lower_for_tpu, random_inputs, run, spec_text

from gemmgen.reference.semantics import _evaluate, pair

KERNELS = {
    # GPT-OSS's gate-up: bf16 experts [g, k, n], per-expert f32 bias, gate and
    # up interleaved; a small limit so that both clamps bite on random data.
    "gptoss_gateup": ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, k, n]", "out bf16",
                      "bias f32 [g, 1, n]", "epilogue swiglu_clamped limit=0.75",
                      "tile m=16 n=256 k=128"),
    # The default constants, rhs [g, n, k].
    "gptoss_nk_defaults": ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, n, k]", "out f32",
                           "bias bf16 [g, 1, n]", "epilogue swiglu_clamped",
                           "tile m=32 n=256 k=256"),
    # An m tile of 256 rows: the epilogue de-interleaves two 128-row chunks
    # (and an m of 200 rounds the clamped tile up to whole chunks).
    "gptoss_tall": ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, k, n]", "out bf16",
                    "bias f32 [g, 1, n]", "epilogue swiglu_clamped limit=1",
                    "tile m=256 n=512 k=128"),
    # The halves layout, the output scale alpha, other constants.
    "swiglu_halves": ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, n, k]", "out f32",
                      "bias f32 [g, 1, n]",
                      "epilogue swiglu_clamped pairs=halves alpha=0.5 limit=1.5 alpha_gate=2",
                      "tile m=16 n=128 k=128"),
    # Dense, per-n bias and per-channel int8 weight scales: the per-n inputs
    # of an interleaved tile follow its rhs columns.
    "dense_int8_interleaved": ("op dense", "lhs bf16 [m, k]", "rhs int8 [k, n]", "out bf16",
                               "rhs_scale per_channel f32", "bias f32 [n]",
                               "epilogue swiglu_clamped limit=2 alpha=1.5",
                               "tile m=64 n=512 k=128"),
    # int4 weights packed two per byte along n: the kernel re-interleaves
    # the unpacked halves before the dot, then pairs as any other tile.
    "int4_kn_interleaved": ("op dense", "lhs bf16 [m, k]", "rhs int4 packed [k, n]",
                            "out bf16", "rhs_scale per_channel f32",
                            "epilogue swiglu_clamped limit=2", "tile m=128 n=256 k=128"),
}

SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_swiglu"))


def _clamps_bite(kernel, inputs):
    """Some gate is above limit, some up below -limit, some in between."""
    pre = _evaluate(kernel, **inputs).pre
    gate, up = pair(kernel.epilogue, pre)
    lim = kernel.epilogue.limit
    assert (gate > lim).any() and (up < -lim).any() and (np.abs(up) < lim).any()


# (m, n, k, group sizes): n = 5760 is GPT-OSS's (n/2 = 2880 = 22.5 lane
# tiles); n = 200 a small awkward one (n/2 = 100, one partial tile).
@pytest.mark.parametrize("m, n, k, sizes", [
    (37, 200, 160, [9, 0, 28]),
    (24, 5760, 256, [0, 13, 11]),
])
def test_gptoss_gateup_matches_reference(generated, m, n, k, sizes):
    """Rows past sum(group_sizes) keep existing_out, poisoned with NaN here;
    every computed row matches (no NaN leaks in)."""
    kernel = generated.kernel("gptoss_gateup")
    inputs = random_inputs(kernel, m=m, n=n, k=k, seed=n, group_sizes=np.array(sizes),
                           with_existing_out=True)
    inputs["existing_out"] = np.full_like(inputs["existing_out"], np.nan)
    _clamps_bite(kernel, inputs)
    out = check(kernel, generated.fn("gptoss_gateup"), inputs, k=k)
    assert out.shape == (m, n // 2)
    assert not np.isnan(out[:sum(sizes)].astype(np.float32)).any()


def test_interleaved_pairs_adjacent_columns(generated):
    """A planted swap: the output must change when gate and up trade places
    (and match a hand-computed value at one element)."""
    kernel = generated.kernel("gptoss_gateup")
    m, n, k = 8, 256, 128
    lhs = np.zeros((m, k), np.float32)
    lhs[:, 0] = 1.0
    rhs = np.zeros((1, k, n), np.float32)
    rhs[0, 0, 0::2] = 0.5  # gates
    rhs[0, 0, 1::2] = -0.25  # ups
    rhs[0, 0, 2] = 3.0  # gate of output column 1: clamped to 0.75
    rhs[0, 0, 5] = -9.0  # up of output column 2: clamped to -0.75
    inputs = {"lhs": lhs.astype(jnp.bfloat16), "rhs": rhs.astype(jnp.bfloat16),
              "group_sizes": np.array([m], np.int32),
              "bias": np.zeros((1, 1, n), np.float32)}
    out = run(generated.fn("gptoss_gateup"), inputs).astype(np.float64)

    def act(g, u):
        g, u = min(g, 0.75), min(max(u, -0.75), 0.75)
        return g / (1 + np.exp(-1.702 * g)) * (u + 1)

    want = [act(0.5, -0.25), act(3.0, -0.25), act(0.5, -9.0)]
    np.testing.assert_allclose(out[0, :3], want, rtol=1e-2)
    check(kernel, generated.fn("gptoss_gateup"), inputs, k=k)


@pytest.mark.slow
@pytest.mark.parametrize("name, n", [
    ("gptoss_nk_defaults", 5760),
    ("gptoss_tall", 1000),
    ("swiglu_halves", 512),
    ("dense_int8_interleaved", 1000),
    ("int4_kn_interleaved", 1000),
])
def test_variants_match_reference(generated, name, n):
    kernel = generated.kernel(name)
    extra = {"num_groups": 3} if kernel.grouped else {}
    m, k = (200 if name == "gptoss_tall" else 50), 384
    inputs = random_inputs(kernel, m=m, n=n, k=k, seed=len(name), **extra)
    out = check(kernel, generated.fn(name), inputs, k=k)
    assert out.shape == (m, n // 2)


@pytest.mark.slow
def test_existing_out_poisoned_and_sharded(generated):
    """Rows outside the shard's groups keep existing_out (NaN here: any
    computed row that read it would show); the computed rows match."""
    kernel = generated.kernel("gptoss_gateup")
    m, n, k = 40, 5760, 128
    inputs = random_inputs(kernel, m=m, n=n, k=k, num_groups=5, group_offset=1, g_local=3,
                           with_existing_out=True, seed=7)
    inputs["existing_out"] = np.full_like(inputs["existing_out"], np.nan)
    out = check(kernel, generated.fn("gptoss_gateup"), inputs, k=k)
    assert np.isnan(out).any() and not np.isnan(out).all()


def test_odd_n_raises(generated):
    kernel = generated.kernel("gptoss_gateup")
    inputs = random_inputs(kernel, m=8, n=202, k=128, num_groups=2)
    inputs["rhs"] = inputs["rhs"][:, :, :201]
    inputs["bias"] = inputs["bias"][:, :, :201]
    with pytest.raises(ValueError, match="n must be even, got 201"):
        run(generated.fn("gptoss_gateup"), inputs)


@pytest.mark.parametrize("name", ["gptoss_gateup",
                                  pytest.param("swiglu_halves", marks=pytest.mark.slow)])
def test_vjp_matches_the_reference_gradient(generated, name):
    """jax.vjp of <name>_vjp against the float64 reference's finite-free
    gradient: the activation's derivative, clamps included, by NumPy."""
    kernel = generated.kernel(name)
    m, n, k = 24, 512, 128
    inputs = random_inputs(kernel, m=m, n=n, k=k, num_groups=3, seed=11)
    fn = getattr(generated.modules[name], f"{name}_vjp")
    args = {a: jnp.asarray(v) for a, v in inputs.items()}
    out, pullback = jax.vjp(lambda lhs, rhs, bias: fn(
        lhs, rhs, args["group_sizes"], bias, interpret=True), args["lhs"], args["rhs"],
        args["bias"])
    np.testing.assert_array_equal(np.asarray(out), run(generated.fn(name), inputs))
    d_out = np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)
    d_lhs, d_rhs, d_bias = pullback(jnp.asarray(d_out).astype(out.dtype))
    want = _reference_grads(kernel, inputs, d_out.astype(np.float64))
    for got, (name_, exp) in zip((d_lhs, d_rhs, d_bias), want.items()):
        got = np.asarray(got).astype(np.float64)
        scale = np.abs(exp).max()
        assert np.abs(got - exp).max() <= 2e-2 * scale, name_


def _reference_grads(kernel, inputs, d_out):
    """d lhs, d rhs, d bias of the float64 reference, by the chain rule."""
    ep = kernel.epilogue
    a = inputs["lhs"].astype(np.float64)
    b = inputs["rhs"].astype(np.float64)
    if kernel.rhs.layout.value == "nk":
        b = np.swapaxes(b, 1, 2)
    bias = inputs["bias"].astype(np.float64)
    sizes = inputs["group_sizes"]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    alpha = 1.0 if ep.alpha is None else ep.alpha
    pre = np.zeros((a.shape[0], b.shape[2]))
    for i in range(b.shape[0]):
        r = slice(starts[i], starts[i + 1])
        pre[r] = alpha * a[r] @ b[i] + bias[i, 0]
    gate, up = pair(ep, pre)
    lim, s = ep.limit, ep.alpha_gate
    gc, uc = np.minimum(gate, lim), np.clip(up, -lim, lim)
    sig = 1 / (1 + np.exp(-s * gc))
    d_gc = (sig + s * gc * sig * (1 - sig)) * (uc + 1) * (gate < lim)
    d_uc = gc * sig * (np.abs(up) < lim)
    d_pre = np.zeros_like(pre)
    gi, ui = pair(ep, np.arange(pre.shape[1]))
    d_pre[:, gi] = d_out * d_gc
    d_pre[:, ui] = d_out * d_uc
    d_lhs = np.zeros_like(a)
    d_rhs = np.zeros_like(b)
    d_bias = np.zeros_like(bias)
    for i in range(b.shape[0]):
        r = slice(starts[i], starts[i + 1])
        d_lhs[r] = alpha * d_pre[r] @ b[i].T
        d_rhs[i] = alpha * a[r].T @ d_pre[r]
        d_bias[i, 0] = d_pre[r].sum(0)
    if kernel.rhs.layout.value == "nk":
        d_rhs = np.swapaxes(d_rhs, 1, 2)
    return {"lhs": d_lhs, "rhs": d_rhs, "bias": d_bias}


def test_interleaved_tiles_are_refused_at_the_tile(tmp_path):
    """An n tile whose half is not whole lane tiles, and an m tile over 128
    rows that is not whole 128-row chunks: errors at the tile line."""
    from gemmgen.diagnostics import SpecError

    text = spec_text(kernel_block(
        "bad", "op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, k, n]", "out bf16",
        "epilogue swiglu_clamped", "tile m=192 n=128 k=128"))
    with pytest.raises(SpecError) as e:
        build(text, tmp_path)
    line = text.splitlines().index("  tile m=192 n=128 k=128") + 1
    messages = sorted(d.message for d in e.value.diagnostics)
    assert [d.loc.line for d in e.value.diagnostics] == [line, line]
    assert "m=192 is over 128 and not a multiple of it" in messages[0]
    assert "n=128 is not a multiple of 256" in messages[1]


def test_lowers_for_tpu(generated):
    for name in KERNELS:
        kernel = generated.kernel(name)
        extra = {"num_groups": 3} if kernel.grouped else {}
        n = 512 if kernel.epilogue.halves else 5760  # halves: n/2 in whole lane tiles
        inputs = random_inputs(kernel, m=64, n=n, k=256, **extra)
        lower_for_tpu(generated.fn(name), inputs)
