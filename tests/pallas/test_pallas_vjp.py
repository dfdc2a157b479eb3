"""`<name>_vjp`: the differentiable grouped matmul. Its gradients (from the
generated gmm with the other B layout and the generated tgmm) are checked
against jax autodiff of an independent plain-jnp formulation of the same
function, on sharded groups with existing_out and zero-sized groups."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemmgen import ir
from pallas_helpers import INTERPRET, build, kernel_block, lower_for_tpu, random_inputs, spec_text

KERNELS = {
    "gmm_kn": ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, k, n]", "out f32"),
    "gmm_silu_mul_nk": ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, n, k]", "out bf16",
                        "bias f32 [g, 1, n]", "epilogue silu_mul alpha=0.5"),
    "gmm_f32_gelu_kn": ("op grouped", "lhs f32 [m, k]", "rhs f32 [g, k, n]", "out f32",
                        "bias bf16 [n]", "epilogue gelu", "tile m=64 n=128 k=128"),
    "gmm_relu_alpha_nk": ("op grouped", "lhs f32 [m, k]", "rhs bf16 [g, n, k]", "out f32",
                          "epilogue relu alpha=2"),
    # Quantized operands get no _vjp.
    "gmm_fp8": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, n, k]", "out bf16",
                "rhs_scale per_channel f32"),
}
DIFFERENTIABLE = [name for name in KERNELS if name != "gmm_fp8"]
SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])
M, N, K = 200, 256, 320


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_vjp"))


def _plain(kernel: ir.Kernel, lhs, rhs, group_sizes, bias, group_offset, existing_out):
    """The grouped matmul as dense jnp ops over a [m, g] membership matrix."""
    f32 = jnp.float32
    b = rhs.astype(f32)
    if kernel.rhs.layout is ir.Layout.NK:
        b = jnp.swapaxes(b, 1, 2)
    m, g = lhs.shape[0], b.shape[0]
    ends = jnp.cumsum(group_sizes)
    starts = ends - group_sizes
    local = group_offset + jnp.arange(g)
    rows = jnp.arange(m)[:, None]
    member = ((rows >= starts[local][None]) & (rows < ends[local][None])).astype(f32)
    y = jnp.einsum("mg,mk,gkn->mn", member, lhs.astype(f32), b, precision="highest")
    if kernel.epilogue.alpha is not None:
        y = y * kernel.epilogue.alpha
    if bias is not None:
        bias = bias.astype(f32)
        y = y + (bias if bias.ndim == 1 else member @ bias[:, 0, :])
    match kernel.epilogue.activation:
        case ir.Activation.SILU_MUL:
            half = y.shape[1] // 2
            y = jax.nn.silu(y[:, :half]) * y[:, half:]
        case ir.Activation.GELU:
            y = jax.nn.gelu(y, approximate=True)
        case ir.Activation.RELU:
            y = jax.nn.relu(y)
        case _:
            pass
    owned = member.sum(axis=1, keepdims=True) > 0
    return jnp.where(owned, y, existing_out.astype(f32)).astype(existing_out.dtype)


def _vjps(gen, name, inputs, seed=0):
    kernel = gen.kernel(name)
    fn = getattr(gen.modules[name], f"{name}_vjp")
    args = {key: jnp.asarray(v) for key, v in inputs.items()}
    args.setdefault("group_offset", jnp.zeros((), jnp.int32))
    wrt = ["lhs", "rhs"] + (["bias"] if "bias" in args else []) + ["existing_out"]

    def with_(xs):
        return {**args, **dict(zip(wrt, xs))}

    def kernel_fn(*xs):
        return fn(**with_(xs), interpret=INTERPRET)

    def plain_fn(*xs):
        a = with_(xs)
        return _plain(kernel, a["lhs"], a["rhs"], a["group_sizes"], a.get("bias"),
                      a["group_offset"], a["existing_out"])

    primals = [args[w] for w in wrt]
    out, kernel_vjp = jax.vjp(kernel_fn, *primals)
    want, plain_vjp = jax.vjp(plain_fn, *primals)
    cotangent = jnp.asarray(np.random.default_rng(seed).standard_normal(out.shape), out.dtype)
    return wrt, out, want, kernel_vjp(cotangent), plain_vjp(cotangent), primals


def _close(name, got, want, low_precision: bool):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, name
    scale = max(np.abs(want).max(), 1e-30)
    # bf16 cotangents and gradients are rounded to 8 bits; f32 ones are not.
    tol = 2.0**-6 if low_precision else 2.0**-14
    err = np.abs(got - want).max()
    assert err <= tol * scale, f"{name}: max error {err:.3g} > {tol:.3g} * {scale:.3g}"


CASES = [pytest.param(name, sharded, id=f"{name}-{'sharded' if sharded else 'all_groups'}",
                      marks=[pytest.mark.slow] if not sharded and name != "gmm_silu_mul_nk" else [])
         for name in DIFFERENTIABLE for sharded in (False, True)]


@pytest.mark.parametrize("name,sharded", CASES)
def test_gradients_match_autodiff(generated, name, sharded):
    kernel = generated.kernel(name)
    if sharded:
        inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=6, group_offset=2, g_local=3,
                               with_existing_out=True, seed=1)
    else:
        # Zero-sized groups, and rows past sum(group_sizes) = 175 that keep
        # existing_out (so only its gradient reaches them).
        inputs = random_inputs(kernel, m=M, n=N, k=K, seed=2, with_existing_out=True,
                               group_sizes=np.array([0, 70, 0, 45, 60], np.int32))
    wrt, out, want, grads, want_grads, _ = _vjps(generated, name, inputs)
    low = ir.DType.BF16 in (kernel.lhs.dtype, kernel.rhs.dtype, kernel.out)
    _close("out", out, want, low)
    for w, got, exp in zip(wrt, grads, want_grads):
        assert got.dtype == exp.dtype, w
        _close(f"d {w}", got, exp, low)


def test_grad_of_a_loss_under_jit(generated):
    name = "gmm_kn"
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=64, n=128, k=128, num_groups=3, seed=4)
    fn = getattr(generated.modules[name], f"{name}_vjp")
    args = {key: jnp.asarray(v) for key, v in inputs.items()}

    @jax.jit
    def loss(lhs, rhs):
        return jnp.sum(fn(lhs, rhs, args["group_sizes"], interpret=INTERPRET) ** 2)

    d_lhs, d_rhs = jax.grad(loss, argnums=(0, 1))(args["lhs"], args["rhs"])
    assert d_lhs.shape == args["lhs"].shape and d_rhs.shape == args["rhs"].shape
    assert np.isfinite(np.asarray(d_lhs, np.float32)).all()


def test_backward_lowers_for_tpu(generated):
    """The backward pass (gmm with the other layout, tgmm) lowers for TPU."""
    name = "gmm_silu_mul_nk"
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=4)
    fn = getattr(generated.modules[name], f"{name}_vjp")
    structs = {k: jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype)
               for k, v in inputs.items()}

    def grads(lhs, rhs, group_sizes, bias):
        out, vjp = jax.vjp(lambda a, b, c: fn(a, b, group_sizes, c), lhs, rhs, bias)
        return vjp(jnp.ones_like(out))

    jax.export.export(jax.jit(grads), platforms=["tpu"])(**structs)
    lower_for_tpu(fn, inputs)


def test_only_float_grouped_kernels_get_a_vjp(generated):
    for name in KERNELS:
        assert hasattr(generated.modules[name], f"{name}_vjp") == (name in DIFFERENTIABLE)
