"""GPU training from JAX (issue 28) for entry points with an epilogue: a
bias, alpha, an activation, any output type.

`<kernel>_vjp` runs its backward pass on CUDA kernels derived from the
forward one (backends/cuda/backward.py): d lhs (grouped) and d rhs (tgmm)
as for a plain kernel, and, with an activation, the forward kernel without
it (f32 out) to recompute the pre-activation; the activation's derivative,
alpha and the bias's gradient are XLA operations. The spec below (written
to a temporary project, not specs/: no kernel of the repository's specs is
such an entry point) is rendered, its emulated FFI libraries registered for
XLA's "cpu" platform, and the gradients compared with a float64 NumPy
computation written here (the activations' derivatives by hand), on fresh
random inputs; the compiled HLO must call only the FFI targets (no
interpret-mode Pallas: no loop, no other custom call).
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gemmgen.backends.cuda import backward
from gemmgen.build import render_spec
from gemmgen.harness.cuda_emu import device_env
from gemmgen.harness.ffi import backward_kernels, emulated_ffi
from gemmgen.harness.toolchain import find_nvcc

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

PACKAGE = "gemmgen_vjp_epilogue_test"

SPEC = """\
target pallas_tpu {
  tpu v5e
}
target cuda {
  archs sm_90a
}
# silu_mul (gate and up halves), alpha, a bias per group, bf16 out.
kernel gateup {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, n, k]
  bias f32 [g, 1, n]
  out bf16
  epilogue silu_mul alpha=0.5
  tile m=64 n=128 k=64
  tile pallas_tpu m=512 n=1024 k=1024
  backends pallas_tpu cuda
}
# gelu, a bf16 bias over n, [g, k, n] weights, f32 out.
kernel down_gelu {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, k, n]
  bias bf16 [n]
  out f32
  epilogue gelu
  tile m=64 n=128 k=64
  tile pallas_tpu m=512 n=1024 k=1024
  backends pallas_tpu cuda
}
# relu and a negative alpha, no bias.
kernel relu_neg {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, n, k]
  out bf16
  epilogue relu alpha=-1.5
  tile m=64 n=128 k=64
  tile pallas_tpu m=512 n=1024 k=1024
  backends pallas_tpu cuda
}
# silu and a bias per group, [g, k, n] weights.
kernel silu_kn {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, k, n]
  bias f32 [g, 1, n]
  out bf16
  epilogue silu
  tile m=64 n=128 k=64
  tile pallas_tpu m=512 n=1024 k=1024
  backends pallas_tpu cuda
}
# GPT-OSS's swiglu_clamped, interleaved (gate, up) columns, a bf16 bias per
# group, [g, k, n] weights; limit 1 so that the clamps bite at pre ~ 1.
kernel gptoss {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, k, n]
  bias bf16 [g, 1, n]
  out bf16
  epilogue swiglu_clamped limit=1
  tile m=64 n=128 k=64
  tile pallas_tpu m=512 n=1024 k=1024
  backends pallas_tpu cuda
}
# No activation: alpha and a bias per group (no pre-activation kernel).
kernel affine {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, n, k]
  bias f32 [g, 1, n]
  out f32
  epilogue alpha=2.0
  tile m=64 n=128 k=64
  tile pallas_tpu m=512 n=1024 k=1024
  backends pallas_tpu cuda
}
"""


@functools.cache
def project() -> tuple[Path, object]:
    """The spec rendered into a temporary package PACKAGE; (its root, the IR)."""
    root = Path(tempfile.mkdtemp(prefix="gemmgen-vjp-epilogue-"))
    (root / "specs").mkdir()
    path = root / "specs" / "train.gemm"
    path.write_text(SPEC)
    built = render_spec(path)
    for rel, text in built.files.items():
        out = root / PACKAGE / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    sys.path.insert(0, str(root))
    return root, built.spec


def entry(name: str):
    """The entry point, its emulated library registered for "cpu"."""
    root, _ = project()
    module = importlib.import_module(f"{PACKAGE}.jax.{name}")
    if "cpu" not in module._REGISTERED:
        module.register(emulated_ffi(root / PACKAGE / "cuda", name), platform="cpu")
    os.environ.update(device_env("sm_90a"))
    return module


# ---------------------------------------------------------------------------
# The NumPy computation (float64)


def bounds(sizes, offset: int, g: int, m: int) -> list[tuple[int, int]]:
    """Rows [start, end) of the g local groups (docs/semantics.md)."""
    ends = np.minimum(np.cumsum(np.maximum(np.asarray(sizes, np.int64), 0)), m)
    starts = np.concatenate([[0], ends[:-1]])
    return [(int(starts[offset + i]), int(ends[offset + i])) if offset + i < len(sizes)
            else (0, 0) for i in range(g)]


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


GELU_C = np.sqrt(2.0 / np.pi)


def activation(name: str, pre, ep=None):
    """(y, dy/dpre as a function of d y) of the epilogue's activation."""
    if name == "swiglu_clamped":  # interleaved: gate 2j, up 2j + 1
        gate, up = pre[:, 0::2], pre[:, 1::2]
        lim, a = ep.limit, ep.alpha_gate
        gc, uc = np.minimum(gate, lim), np.clip(up, -lim, lim)
        s = _sigmoid(a * gc)

        def back(d):
            out = np.empty_like(pre)
            out[:, 0::2] = d * (s + a * gc * s * (1.0 - s)) * (uc + 1.0) * (gate < lim)
            out[:, 1::2] = d * gc * s * (np.abs(up) < lim)
            return out

        return gc * s * (uc + 1.0), back
    if name == "relu":
        return np.maximum(pre, 0.0), lambda d: d * (pre > 0)
    if name == "silu":
        s = _sigmoid(pre)
        return pre * s, lambda d: d * s * (1.0 + pre * (1.0 - s))
    if name == "gelu":
        t = np.tanh(GELU_C * (pre + 0.044715 * pre**3))
        dt = (1.0 - t * t) * GELU_C * (1.0 + 3 * 0.044715 * pre**2)
        return 0.5 * pre * (1.0 + t), lambda d: d * (0.5 * (1.0 + t) + 0.5 * pre * dt)
    if name == "silu_mul":
        half = pre.shape[1] // 2
        a, b = pre[:, :half], pre[:, half:]
        s = _sigmoid(a)
        return a * s * b, lambda d: np.concatenate([d * s * (1.0 + a * (1.0 - s)) * b,
                                                    d * a * s], axis=1)
    assert name == "none"
    return pre, lambda d: d


def want(kernel, lhs, rhs, bias, sizes, offset, existing, d_out):
    """The forward result and the gradients (lhs, rhs, bias, existing_out),
    each with the magnitude its sum could reach (for the bounds)."""
    f64 = functools.partial(np.asarray, dtype=np.float64)
    lhs, rhs, existing, d_out = f64(lhs), f64(rhs), f64(existing), f64(d_out)
    nk = kernel.rhs_operand.layout is backward.ir.Layout.NK
    m, g = lhs.shape[0], rhs.shape[0]
    w = rhs if nk else rhs.transpose(0, 2, 1)  # [g, n, k]
    n = w.shape[1]
    alpha = 1.0 if kernel.epilogue.alpha is None else kernel.epilogue.alpha
    act = kernel.epilogue.activation.value
    out = existing.copy()
    d_lhs, d_w = np.zeros_like(lhs), np.zeros_like(w)
    d_lhs_scale, d_w_scale = np.zeros_like(lhs), np.zeros_like(w)
    d_bias = np.zeros((g, n)) if bias is not None and bias.ndim == 3 else np.zeros(n)
    d_existing = d_out.copy()
    for i, (a, b) in enumerate(bounds(sizes, offset, g, m)):
        if a == b:
            continue
        pre = alpha * (lhs[a:b] @ w[i].T)
        if bias is not None:
            pre = pre + (f64(bias)[i, 0] if bias.ndim == 3 else f64(bias))
        y, back = activation(act, pre, kernel.epilogue)
        out[a:b] = y
        d_pre = back(d_out[a:b])
        if bias is not None and bias.ndim == 3:
            d_bias[i] = d_pre.sum(axis=0)
        elif bias is not None:
            d_bias += d_pre.sum(axis=0)
        d_prod = alpha * d_pre
        d_lhs[a:b] = d_prod @ w[i]
        d_w[i] = d_prod.T @ lhs[a:b]
        d_lhs_scale[a:b] = np.abs(d_prod) @ np.abs(w[i])
        d_w_scale[i] = np.abs(d_prod).T @ np.abs(lhs[a:b])
        d_existing[a:b] = 0.0
    d_rhs, d_rhs_scale = (d_w, d_w_scale) if nk else (d_w.transpose(0, 2, 1),
                                                      d_w_scale.transpose(0, 2, 1))
    return out, (d_lhs, d_lhs_scale), (d_rhs, d_rhs_scale), d_bias, d_existing


def assert_close(name: str, got, want, scale, *, eps: float) -> None:
    """One rounding to the result's type (eps, the unit roundoff: 2^-8 for
    bf16, 2^-11 for f16), plus what d_prod's rounding to the operand type
    feeds into the sum (eps of each term: eps of the sum of magnitudes) and
    the f32 accumulation's error (2^-18 of it)."""
    got = np.asarray(jnp.asarray(got).astype(jnp.float32), np.float64)
    allowed = np.abs(want) * eps + scale * (eps + 2.0**-18)
    bad = np.abs(got - want) > allowed
    assert not bad.any(), (f"d {name}: {bad.sum()} entries off, worst "
                           f"{np.max(np.abs(got - want) - allowed)} beyond the bound")


EPS = {"bf16": 2.0**-8, "f16": 2.0**-11, "f32": 2.0**-22}  # unit roundoffs, f32 with slack
JNP = {"bf16": jnp.bfloat16, "f16": jnp.float16, "f32": jnp.float32}


def inputs(module, kernel, seed: int, m: int, k: int, n: int, g: int):
    """lhs, rhs, bias (None without one), existing_out (poisoned), d out."""
    rng = np.random.default_rng(seed)
    dtype = JNP[kernel.lhs.dtype.value]
    lhs = jnp.asarray(rng.standard_normal((m, k)), dtype)
    nk = kernel.rhs_operand.layout is backward.ir.Layout.NK
    # Weights of magnitude 1/sqrt(k): pre-activations of order 1, where the
    # activations bend.
    rhs = jnp.asarray(rng.standard_normal((g, n, k) if nk else (g, k, n)) / np.sqrt(k), dtype)
    mode = kernel.bias.mode.value
    bias_dtype = JNP[kernel.bias.dtype.value]
    bias = (None if mode == "none" else
            jnp.asarray(rng.standard_normal((g, 1, n) if mode == "group" else (n,)), bias_dtype))
    n_out = n // 2 if kernel.epilogue.activation.paired else n
    out_dtype = JNP[kernel.out.value]
    existing = jnp.full((m, n_out), -4242.0, out_dtype)
    d_out = jnp.asarray(rng.standard_normal((m, n_out)), out_dtype)
    return lhs, rhs, bias, existing, d_out


def custom_calls(hlo: str) -> set[str]:
    return set(re.findall(r'custom_call_target="([^"]+)"', hlo))


def check(name: str, m: int, k: int, n: int, sizes, offset: int, g: int, seed: int) -> None:
    """out and its gradients by jax.vjp under one jax.jit against NumPy; the
    compiled HLO calls the forward's and the derived kernels' FFI targets
    and nothing else, and has no loop."""
    module = entry(name)
    kernel = project()[1].kernel(name)
    lhs, rhs, bias, existing, d_out = inputs(module, kernel, seed, m, k, n, g)
    sizes_arr = jnp.asarray(sizes, jnp.int32)
    fn = getattr(module, f"{name}_vjp")
    has_bias = bias is not None

    args = (lhs, rhs, *((bias,) if has_bias else ()), existing)

    def f(*a):
        return fn(a[0], a[1], sizes_arr, *a[2:-1], offset, a[-1])

    def step(args, d_out):
        out, pullback = jax.vjp(f, *args)
        return out, pullback(d_out)

    jitted = jax.jit(step)
    out, grads = jitted(args, d_out)
    d_lhs, d_rhs, *d_bias, d_existing = grads
    hlo = jitted.lower(args, d_out).compile().as_text()
    w_out, (w_lhs, s_lhs), (w_rhs, s_rhs), w_bias, w_existing = want(
        kernel, lhs, rhs, bias, sizes, offset, existing, d_out)

    eps_out = EPS[kernel.out.value]
    got_out = np.asarray(jnp.asarray(out).astype(jnp.float32), np.float64)
    np.testing.assert_allclose(got_out, w_out, rtol=2 * eps_out + 2.0**-16, atol=2.0**-12)
    eps = EPS[kernel.lhs.dtype.value]
    assert_close("lhs", d_lhs, w_lhs, s_lhs, eps=eps)
    assert_close("rhs", d_rhs, w_rhs, s_rhs, eps=eps)
    assert d_lhs.dtype == lhs.dtype and d_rhs.dtype == rhs.dtype
    np.testing.assert_array_equal(np.asarray(d_existing, np.float64), w_existing)
    if has_bias:
        [d_bias] = d_bias
        assert d_bias.dtype == bias.dtype and d_bias.shape == bias.shape
        got_bias = np.asarray(jnp.asarray(d_bias).astype(jnp.float32), np.float64)
        np.testing.assert_allclose(got_bias.reshape(w_bias.shape), w_bias,
                                   rtol=EPS[kernel.bias.dtype.value] + 2.0**-14, atol=2.0**-14)
    targets = {f"gemmgen_{n}" for n in (name, *backward.names(kernel))}
    assert custom_calls(hlo) == targets, custom_calls(hlo)
    assert not re.search(r"\bwhile\(", hlo), "a loop in the HLO: interpret-mode Pallas?"


# ---------------------------------------------------------------------------
# The derivation


def test_an_activation_adds_the_forward_kernel_without_it():
    """gateup (silu_mul, alpha, a bias per group, bf16 out) gets three
    kernels: d lhs and d rhs with the plain epilogue, and the pre-activation
    kernel: the forward's operands, tile, bias and alpha, no activation, f32
    out. affine (alpha and a bias, no activation) gets the two only."""
    root, spec = project()
    grad_lhs, grad_rhs, grad_pre = backward.derive(spec.kernel("gateup"), spec)
    forward = spec.kernel("gateup").for_backend(backward.ir.Backend.CUDA)
    assert grad_lhs.epilogue == backward.ir.Epilogue() and grad_lhs.bias.mode.value == "none"
    assert grad_rhs.op is backward.ir.Op.TGMM
    assert (grad_pre.name, grad_pre.out, grad_pre.tile, grad_pre.bias, grad_pre.rhs) == (
        "gateup_grad_pre", backward.ir.DType.F32, forward.tile, forward.bias, forward.rhs)
    assert (grad_pre.epilogue.activation, grad_pre.epilogue.alpha) == (
        backward.ir.Activation.NONE, 0.5)
    assert len(backward.derive(spec.kernel("affine"), spec)) == 2
    cuda = root / PACKAGE / "cuda"
    assert backward_kernels(cuda, "gateup") == ("gateup_grad_lhs", "gateup_grad_rhs",
                                                 "gateup_grad_pre")
    assert backward_kernels(cuda, "affine") == ("affine_grad_lhs", "affine_grad_rhs")
    text = (root / PACKAGE / "jax" / "affine.py").read_text()
    assert "_grad_pre" not in text and "_differentiable_bwd, True" not in text


def test_a_spec_kernel_named_grad_pre_is_not_linked_in(tmp_path):
    """A kernel without an activation has no pre-activation kernel, so its
    spec may name a kernel of its own `<kernel>_grad_pre`; that kernel's
    handler does not go into `<kernel>`'s library (only one whose header
    says it does)."""
    root, _ = project()
    for name in ("affine_grad_lhs", "affine_grad_rhs"):
        (tmp_path / f"{name}_ffi.cc").write_text("// a derived handler\n")
    (tmp_path / "affine_grad_pre_ffi.cc").write_text("// the spec's own kernel, into libx.so\n")
    assert backward_kernels(tmp_path, "affine") == ("affine_grad_lhs", "affine_grad_rhs")
    text = (root / PACKAGE / "cuda" / "gateup_grad_pre_ffi.cc").read_text()
    (tmp_path / "affine_grad_pre_ffi.cc").write_text(text.replace("gateup", "affine"))
    assert backward_kernels(tmp_path, "affine")[-1] == "affine_grad_pre"


def test_the_entry_points_are_formatted():
    """Each entry point's new branches (the pre-activation call, the bias's
    gradient, _group_sums) print as ruff format lays them out, lint-clean
    (tests/cli/test_generated_format.py checks specs/' entry points)."""
    import shutil
    import subprocess

    ruff = Path(sys.executable).parent / "ruff"
    ruff = str(ruff) if ruff.is_file() else shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not found")
    folder = project()[0] / PACKAGE / "jax"
    files = sorted(str(p) for p in folder.glob("*.py"))
    for args in (("format", "--check", "--diff"), ("check", "--no-fix", "--output-format",
                                                   "concise")):
        proc = subprocess.run([ruff, *args, "--line-length", "100", *files],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout[:4000] + proc.stderr[:2000]


# ---------------------------------------------------------------------------
# The fast case: every edge at once


def test_silu_mul_alpha_and_a_bias_per_group_match_numpy():
    """gateup_vjp under jax.jit(jax.vjp): a shard of four local groups
    (group_offset 1: the first group's rows are existing_out's; one local
    group empty, one past group_sizes), rows past sum(group_sizes), m and k
    not multiples of the tile, a poisoned existing_out: the result and the
    gradients of lhs, rhs, the bias and existing_out match NumPy; the HLO
    holds the four FFI calls and no loop."""
    check("gateup", 70, 72, 256, [20, 0, 30, 10], 1, 4, seed=1)


def test_swiglu_clamped_interleaved_matches_numpy():
    """gptoss_vjp (GPT-OSS's activation, interleaved pairs, per-group bf16
    bias) at an awkward n = 200 (100 outputs), a sharded, poisoned call:
    the forward result and every gradient match NumPy, on the CUDA
    kernels (the clamps pass no gradient where they bite)."""
    check("gptoss", 70, 72, 200, [20, 0, 30, 10], 1, 4, seed=2)


def test_under_shard_map_with_check_vma():
    """jax.grad of a loss through gateup_vjp inside jax.shard_map with its
    default check_vma=True (one CPU device, group_offset = axis_index * 2 +
    1 traced): the gradients of lhs, rhs and the bias match NumPy."""
    from jax.sharding import PartitionSpec as P

    module = entry("gateup")
    kernel = project()[1].kernel("gateup")
    lhs, rhs, bias, _, d_out = inputs(module, kernel, 2, 40, 64, 256, 2)
    sizes = [12, 0, 28]
    mesh = jax.make_mesh((1,), ("x",))

    def local(lhs, rhs, bias, d_out):
        offset = jax.lax.axis_index("x") * 2 + 1
        out = module.gateup_vjp(lhs, rhs, jnp.asarray(sizes, jnp.int32), bias, offset)
        return jnp.sum(out.astype(jnp.float32) * d_out.astype(jnp.float32))[None]

    loss = jax.shard_map(local, mesh=mesh, in_specs=(P(), P("x"), P("x"), P()),
                         out_specs=P("x"))
    step = jax.jit(jax.grad(lambda a, b, c: loss(a, b, c, d_out).sum(), argnums=(0, 1, 2)))
    sharded = jax.NamedSharding(mesh, P("x"))
    d_lhs, d_rhs, d_bias = step(lhs, jax.device_put(rhs, sharded), jax.device_put(bias, sharded))
    _, (w_lhs, s_lhs), (w_rhs, s_rhs), w_bias, _ = want(
        kernel, lhs, rhs, bias, sizes, 1, jnp.zeros(d_out.shape, d_out.dtype), d_out)
    assert_close("lhs", d_lhs, w_lhs, s_lhs, eps=2.0**-8)
    assert_close("rhs", d_rhs, w_rhs, s_rhs, eps=2.0**-8)
    np.testing.assert_allclose(np.asarray(d_bias, np.float64)[:, 0], w_bias, rtol=2.0**-14,
                               atol=2.0**-14)
    hlo = step.lower(lhs, jax.device_put(rhs, sharded),
                     jax.device_put(bias, sharded)).compile().as_text()
    assert not re.search(r"\bwhile\(", hlo) and "tpu_custom_call" not in hlo


# ---------------------------------------------------------------------------
# Slow: the other epilogues, more shapes


@pytest.mark.slow
@pytest.mark.parametrize("name", ["down_gelu", "relu_neg", "silu_kn", "affine"])
def test_each_epilogue_matches_numpy(name):
    check(name, 70, 72, 256, [20, 0, 30, 10], 1, 3, seed=3)


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    # (m, k, n, sizes, offset, g)
    (1, 8, 256, [1], 0, 1),  # m = 1
    (130, 136, 512, [100, 0, 0, 30], 0, 4),  # partial tiles, empty groups
    (64, 64, 256, [0, 0, 0], 0, 3),  # every group empty
    (64, 64, 256, [20, 20], 5, 2),  # an offset past the end: nothing local
])
def test_edges(case):
    m, k, n, sizes, offset, g = case
    check("gateup", m, k, n, sizes, offset, g, seed=sum(case[:3]))


@pytest.mark.slow
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_nvcc_builds_the_four_handlers_into_one_library(tmp_path):
    """gateup's library built with nvcc for the spec's sm_90a (warnings as
    errors, as `gemmgen compile` builds it): the forward's handler and the
    three derived kernels' (loading it needs no GPU: cudart is static)."""
    import ctypes

    from gemmgen.harness.ffi import compile_ffi

    root, _ = project()
    library = ctypes.CDLL(str(compile_ffi(root / PACKAGE / "cuda", "gateup", tmp_path,
                                          ["sm_90a"])))
    for name in ("gateup", *backward.names(project()[1].kernel("gateup"))):
        assert hasattr(library, f"gg_ffi_{name}"), name


@pytest.mark.slow
def test_on_a_tpu_the_backward_pass_is_the_pallas_one():
    """The same training step lowered for TPU (the real Pallas -> Mosaic
    lowering, on any machine): Pallas kernels only (the pre-activation, d
    lhs, d rhs; the linear loss needs no forward result), no FFI call: both
    branches of the backward pass have one type, the bias's gradient
    included."""
    module = entry("gateup")
    kernel = project()[1].kernel("gateup")
    lhs, rhs, bias, _, d_out = inputs(module, kernel, 4, 256, 128, 256, 2)
    sizes = jnp.array([100, 156], jnp.int32)

    def loss(lhs, rhs, bias):
        out = module.gateup_vjp(lhs, rhs, sizes, bias)
        return jnp.sum(out.astype(jnp.float32) * d_out.astype(jnp.float32))

    step = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    text = step.trace(lhs, rhs, bias).lower(lowering_platforms=("tpu",)).as_text()
    assert text.count("tpu_custom_call") == 3 and "gemmgen_" not in text


SHARDED_GRAD = """\
import sys
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from PACKAGE.jax import gateup

gateup.register(sys.argv[1], platform="cpu")
rng = np.random.default_rng(8)
lhs = jnp.asarray(rng.standard_normal((96, 64)), jnp.bfloat16)
rhs = jnp.asarray(rng.standard_normal((4, 256, 64)) / 8, jnp.bfloat16)
bias = jnp.asarray(rng.standard_normal((4, 1, 256)), jnp.float32)
d_out = jnp.asarray(rng.standard_normal((96, 128)), jnp.float32)
group_sizes = jnp.array([30, 0, 50, 10], jnp.int32)
mesh = jax.make_mesh((2,), ("x",))


def shard(lhs, rhs, bias):  # 2 experts per device: group_offset is traced
    offset = jax.lax.axis_index("x") * 2
    out = gateup.gateup_vjp(lhs, rhs, group_sizes, bias, offset).astype(jnp.float32)
    return jax.lax.psum(out, "x")


sharded = jax.shard_map(shard, mesh=mesh, in_specs=(P(), P("x"), P("x")), out_specs=P())


def loss(fn, *args):
    return jnp.sum(fn(*args) * d_out)


put = lambda x: jax.device_put(x, jax.NamedSharding(mesh, P("x")))
step = jax.jit(jax.grad(lambda *a: loss(sharded, *a), argnums=(0, 1, 2)))
got = step(lhs, put(rhs), put(bias))
whole = lambda a, b, c: gateup.gateup_vjp(a, b, group_sizes, c).astype(jnp.float32)
want = jax.grad(lambda *a: loss(whole, *a), argnums=(0, 1, 2))(lhs, rhs, bias)
for g, w in zip(got, want):
    g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
    assert np.array_equal(g, w), np.abs(g - w).max()
hlo = step.lower(lhs, put(rhs), put(bias)).compile().as_text()
assert " while(" not in hlo and "tpu_custom_call" not in hlo
print("ok")
""".replace("PACKAGE", PACKAGE)


@pytest.mark.slow
def test_expert_parallel_training_on_two_devices():
    """Two CPU devices, two experts each, check_vma=True: the gradients of
    lhs, rhs and the bias of the sharded layer (psum of the shards) equal
    the unsharded ones exactly (every row and expert is one device's)."""
    import subprocess

    root, _ = project()
    library = emulated_ffi(root / PACKAGE / "cuda", "gateup")
    env = {**os.environ, "PYTHONPATH": str(root), **device_env("sm_90a"),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    proc = subprocess.run([sys.executable, "-c", SHARDED_GRAD, str(library)],
                          capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
