"""GPU training from JAX (issue 28): `<kernel>_vjp` of a JAX entry point runs
its backward pass on CUDA kernels.

gmm_bf16's entry point (generated/moe/jax/gmm_bf16.py) differentiates with
two CUDA kernels derived from the forward one (backends/cuda/backward.py):
gmm_bf16_grad_lhs (the grouped GEMM with the weight transposed) and
gmm_bf16_grad_rhs (tgmm), whose handlers `gemmgen compile` builds into the
forward's library. Here that library is built against gemmgen's CPU emulator
and registered for XLA's "cpu" platform, so jax.jit / jax.grad / shard_map
run the emulated CUDA kernels inside XLA. The gradients are compared with a
NumPy computation of the product's gradients (float64, from the bf16 inputs)
on fresh random inputs; the compiled HLO must call only the FFI targets
(no interpret-mode Pallas: no loop, no other custom call).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
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

REPO = Path(__file__).resolve().parents[2]
CUDA = REPO / "generated" / "moe" / "cuda"
TARGETS = {"gemmgen_gmm_bf16", "gemmgen_gmm_bf16_grad_lhs", "gemmgen_gmm_bf16_grad_rhs"}


def entry():
    """generated.moe.jax.gmm_bf16 with its emulated library registered for "cpu"."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from generated.moe.jax import gmm_bf16

    if "cpu" not in gmm_bf16._REGISTERED:
        gmm_bf16.register(emulated_ffi(CUDA, "gmm_bf16"), platform="cpu")
    os.environ.update(device_env("sm_90a"))
    return gmm_bf16


def bounds(sizes, offset: int, g: int, m: int) -> list[tuple[int, int]]:
    """Rows [start, end) of the g local groups (docs/semantics.md)."""
    ends = np.minimum(np.cumsum(np.maximum(np.asarray(sizes, np.int64), 0)), m)
    starts = np.concatenate([[0], ends[:-1]])
    out = []
    for i in range(g):
        j = offset + i
        out.append((int(starts[j]), int(ends[j])) if 0 <= j < len(sizes) else (0, 0))
    return out


def want_grads(lhs, rhs, sizes, offset, d_out):
    """d lhs, d rhs ([g, n, k]) and d existing_out of out = gmm(lhs, rhs) with
    existing_out kept outside the local groups, in float64: d out is rounded
    to bf16 first for the products, as the backward pass feeds its kernels."""
    lhs64 = np.asarray(lhs, np.float64)
    rhs64 = np.asarray(rhs, np.float64)
    d64 = np.asarray(jnp.asarray(d_out).astype(jnp.bfloat16), np.float64)
    m, g = lhs64.shape[0], rhs64.shape[0]
    d_lhs = np.zeros_like(lhs64)
    d_rhs = np.zeros_like(rhs64)
    d_existing = np.asarray(d_out, np.float64).copy()
    for i, (a, b) in enumerate(bounds(sizes, offset, g, m)):
        d_lhs[a:b] = d64[a:b] @ rhs64[i]
        d_rhs[i] = d64[a:b].T @ lhs64[a:b]
        d_existing[a:b] = 0.0
    # The magnitude each entry's sum could reach, for the accumulation bound.
    scale_lhs = np.zeros_like(lhs64)
    scale_rhs = np.zeros_like(rhs64)
    for i, (a, b) in enumerate(bounds(sizes, offset, g, m)):
        scale_lhs[a:b] = np.abs(d64[a:b]) @ np.abs(rhs64[i])
        scale_rhs[i] = np.abs(d64[a:b]).T @ np.abs(lhs64[a:b])
    return (d_lhs, scale_lhs), (d_rhs, scale_rhs), (d_existing, None)


def assert_close(name: str, got, want, scale) -> None:
    """bf16 results: one rounding of the f32 sum (2^-8 relative), plus the
    f32 accumulation's error (a few ulps of the sum of magnitudes)."""
    got = np.asarray(jnp.asarray(got).astype(jnp.float32), np.float64)
    allowed = np.abs(want) * 2.0**-8 + (0.0 if scale is None else scale * 2.0**-20)
    bad = np.abs(got - want) > allowed
    assert not bad.any(), (f"d {name}: {bad.sum()} entries off, worst "
                           f"{np.max(np.abs(got - want) - allowed)} beyond the bound")


def inputs(seed: int, m: int, k: int, n: int, groups: int):
    rng = np.random.default_rng(seed)
    lhs = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
    rhs = jnp.asarray(rng.standard_normal((groups, n, k)), jnp.bfloat16)
    existing = jnp.asarray(rng.standard_normal((m, n)), jnp.float32)
    d_out = jnp.asarray(rng.standard_normal((m, n)), jnp.float32)
    return lhs, rhs, existing, d_out


def run_vjp(module, lhs, rhs, sizes, offset, existing, d_out):
    """out and the three gradients, under one jax.jit; and its compiled HLO."""
    sizes = jnp.asarray(sizes, jnp.int32)

    def step(lhs, rhs, existing, d_out):
        out, pullback = jax.vjp(
            lambda a, b, c: module.gmm_bf16_vjp(a, b, sizes, offset, c), lhs, rhs, existing)
        return out, pullback(d_out)

    fn = jax.jit(step)
    out, grads = fn(lhs, rhs, existing, d_out)
    return out, grads, fn.lower(lhs, rhs, existing, d_out).compile().as_text()


def custom_calls(hlo: str) -> set[str]:
    return set(re.findall(r'custom_call_target="([^"]+)"', hlo))


# ---------------------------------------------------------------------------
# Generation: the derived kernels


def test_the_backward_kernels_are_derived_from_the_forward_one():
    """gmm_bf16 (bf16 [g, n, k] weights, 128 x 128 x 128 tiles) gets a grouped
    d lhs kernel reading the weight as [g, k, n] and a tgmm d rhs kernel
    whose output block is the forward's n x k weight tile; both are rendered
    with their FFI handlers, and the other entry points get none."""
    spec = render_spec(REPO / "specs" / "moe.gemm").spec
    grad_lhs, grad_rhs = backward.derive(spec.kernel("gmm_bf16"), spec)
    assert (grad_lhs.name, grad_lhs.op, grad_lhs.rhs.layout, grad_lhs.out) == (
        "gmm_bf16_grad_lhs", spec.kernel("gmm_bf16").op, backward.ir.Layout.KN,
        backward.ir.DType.BF16)
    assert (grad_rhs.op, grad_rhs.out, grad_rhs.tile) == (
        backward.ir.Op.TGMM, backward.ir.DType.BF16,
        backward.ir.Tile(backward.TGMM_ROWS, 128, 128))
    assert backward_kernels(CUDA, "gmm_bf16") == ("gmm_bf16_grad_lhs", "gmm_bf16_grad_rhs")
    assert backward_kernels(CUDA, "moe_fp8_grouped_gemm") == ()
    assert not backward.supported(spec.kernel("moe_w8a8_grouped_gemm"))  # scales: no _vjp


CLASH = """\
target pallas_tpu {
  tpu v5e
}
target cuda {
  archs sm_90a
}
kernel gmm {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, n, k]
  out f32
  backends pallas_tpu cuda
}
kernel gmm_grad_rhs {
  op tgmm
  lhs bf16 [m, k]
  rhs bf16 [m, n]
  out f32
  tile m=32 n=128 k=128
  backends cuda
}
"""


def test_a_derived_tile_that_does_not_fit_falls_back_to_a_smaller_one(tmp_path):
    """A 64 x 256 x 32 forward fits sm_89's shared memory; its d lhs kernel
    with n and k swapped (64 x 32 x 256) does not, so d lhs takes the first
    fallback tile that does, and the spec builds as it did before."""
    from gemmgen.backends import cuda

    (tmp_path / "specs").mkdir()
    path = tmp_path / "specs" / "wide.gemm"
    path.write_text(CLASH.replace("sm_90a", "sm_89").replace(
        "  out f32\n  backends pallas_tpu cuda",
        "  out f32\n  tile m=64 n=256 k=32\n  tile pallas_tpu m=512 n=1024 k=1024\n"
        "  backends pallas_tpu cuda").split("kernel gmm_grad_rhs")[0])
    spec = render_spec(path).spec
    forward = spec.kernel("gmm")
    swapped, *_ = backward._candidates(forward)[0]
    assert swapped.tile == backward.ir.Tile(64, 32, 256) and cuda.diagnose_kernel(swapped, spec)
    grad_lhs, grad_rhs = backward.derive(forward, spec)
    assert grad_lhs.tile == backward.FALLBACK_TILES[0] and not cuda.diagnose_kernel(grad_lhs, spec)
    assert grad_rhs.tile == backward.ir.Tile(backward.TGMM_ROWS, 32, 256)


def test_a_spec_kernel_with_a_derived_name_is_a_positioned_error(tmp_path):
    """A kernel named as one of the backward kernels of a JAX entry point:
    reported at the entry point's kernel, with the other one's position."""
    from gemmgen.diagnostics import SpecError

    (tmp_path / "specs").mkdir()
    path = tmp_path / "specs" / "clash.gemm"
    path.write_text(CLASH)
    with pytest.raises(SpecError) as info:
        render_spec(path)
    [found] = info.value.diagnostics
    assert (found.loc.line, found.loc.col) == (7, 8)
    assert "'gmm_grad_rhs', which the spec names at specs/clash.gemm:14:8 too" in found.message


# ---------------------------------------------------------------------------
# The fast case: every edge at once, under jax.jit and jax.vjp


def test_vjp_runs_the_cuda_backward_kernels_and_matches_numpy():
    """A shard of two local groups (group_offset 1, one of them empty), a
    group past the shard, rows past sum(group_sizes), m and k not multiples
    of the tiles, a poisoned existing_out: the forward result and the three
    gradients match NumPy, and the compiled HLO holds the three FFI calls
    and nothing of Pallas's interpreter (no loop, no other custom call)."""
    module = entry()
    m, k, n = 70, 72, 128
    sizes, offset = [20, 0, 30, 10], 1
    lhs, rhs, existing, d_out = inputs(1, m, k, n, 2)
    existing = jnp.full((m, n), -4242.0, jnp.float32)
    out, (d_lhs, d_rhs, d_existing), hlo = run_vjp(module, lhs, rhs, sizes, offset, existing,
                                                   d_out)
    rows = bounds(sizes, offset, 2, m)
    want_out = np.full((m, n), -4242.0)
    for i, (a, b) in enumerate(rows):
        want_out[a:b] = np.asarray(lhs[a:b], np.float64) @ np.asarray(rhs[i], np.float64).T
    np.testing.assert_allclose(np.asarray(out), want_out, rtol=1e-5, atol=1e-4)
    for name, got, (want, scale) in zip(("lhs", "rhs", "existing_out"), (d_lhs, d_rhs, d_existing),
                                        want_grads(lhs, rhs, sizes, offset, d_out), strict=True):
        assert_close(name, got, want, scale)
    assert d_lhs.dtype == jnp.bfloat16 and d_rhs.dtype == jnp.bfloat16
    assert custom_calls(hlo) == TARGETS, custom_calls(hlo)
    assert not re.search(r"\bwhile\(", hlo), "a loop in the HLO: interpret-mode Pallas?"


def test_vjp_under_shard_map_with_check_vma():
    """jax.grad of a loss through gmm_bf16_vjp inside jax.shard_map with its
    default check_vma=True (one CPU device: the types vary over the mesh
    axis, group_offset = axis_index * 2 is traced): the gradients match
    NumPy."""
    from jax.sharding import PartitionSpec as P

    module = entry()
    m, k, n = 40, 64, 128
    sizes = jnp.array([12, 0, 28], jnp.int32)
    lhs, rhs, _, d_out = inputs(2, m, k, n, 2)
    mesh = jax.make_mesh((1,), ("x",))

    def local(lhs, rhs, d_out):
        offset = jax.lax.axis_index("x") * 2 + 1
        return jnp.sum(module.gmm_bf16_vjp(lhs, rhs, sizes, offset) * d_out)[None]

    loss = jax.shard_map(local, mesh=mesh, in_specs=(P(), P("x"), P()), out_specs=P("x"))
    step = jax.jit(jax.grad(lambda a, b: loss(a, b, d_out).sum(), argnums=(0, 1)))
    d_lhs, d_rhs = step(lhs, jax.device_put(rhs, jax.NamedSharding(mesh, P("x"))))
    want = want_grads(lhs, rhs, [12, 0, 28], 1, d_out)
    assert_close("lhs", d_lhs, *want[0])
    assert_close("rhs", d_rhs, *want[1])


def test_on_a_tpu_the_backward_pass_is_the_pallas_one():
    """The same shard_map training step lowered for TPU (the real Pallas ->
    Mosaic lowering, on any machine): the Pallas kernels of the backward
    pass (d lhs and d rhs; the linear loss needs no forward), no FFI call."""
    from jax.sharding import PartitionSpec as P

    module = entry()
    lhs, rhs, _, d_out = inputs(3, 256, 128, 128, 2)
    sizes = jnp.array([64, 64, 128], jnp.int32)
    mesh = jax.make_mesh((1,), ("x",))

    def local(lhs, rhs, d_out):
        offset = jax.lax.axis_index("x") * 2 + 1
        return jnp.sum(module.gmm_bf16_vjp(lhs, rhs, sizes, offset) * d_out)[None]

    loss = jax.shard_map(local, mesh=mesh, in_specs=(P(), P("x"), P()), out_specs=P("x"))
    step = jax.jit(jax.grad(lambda a, b: loss(a, b, d_out).sum(), argnums=(0, 1)))
    rhs = jax.device_put(rhs, jax.NamedSharding(mesh, P("x")))
    text = step.trace(lhs, rhs).lower(lowering_platforms=("tpu",)).as_text()
    assert text.count("tpu_custom_call") == 2 and "gemmgen_" not in text


# ---------------------------------------------------------------------------
# Slow: more shapes, two devices, the nvcc build


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    # (m, k, n, sizes, offset, g)
    (1, 8, 8, [1], 0, 1),  # m = 1, the smallest dims
    (300, 136, 264, [100, 0, 0, 150, 50], 0, 5),  # partial tiles, empty groups
    (128, 64, 128, [0, 0, 0], 0, 3),  # every group empty
    (96, 64, 128, [10, 20, 30, 36], 2, 2),  # the last groups of the shard
    (64, 64, 128, [2**30, 5, -3], 0, 3),  # sizes past m and negative
    (64, 64, 128, [20, 20], 5, 2),  # an offset past the end: nothing local
])
def test_vjp_edges(case):
    module = entry()
    m, k, n, sizes, offset, g = case
    lhs, rhs, existing, d_out = inputs(sum(case[:3]), m, k, n, g)
    _, grads, hlo = run_vjp(module, lhs, rhs, sizes, offset, existing, d_out)
    for name, got, (want, scale) in zip(("lhs", "rhs", "existing_out"), grads,
                                        want_grads(lhs, rhs, sizes, offset, d_out), strict=True):
        assert_close(name, got, want, scale)
    assert custom_calls(hlo) == TARGETS


SHARDED_GRAD = """\
import sys
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from generated.moe.jax import gmm_bf16

gmm_bf16.register(sys.argv[1], platform="cpu")
rng = np.random.default_rng(7)
lhs = jnp.asarray(rng.standard_normal((96, 64)), jnp.bfloat16)
rhs = jnp.asarray(rng.standard_normal((4, 128, 64)), jnp.bfloat16)
d_out = jnp.asarray(rng.standard_normal((96, 128)), jnp.float32)
group_sizes = jnp.array([30, 0, 50, 10], jnp.int32)
mesh = jax.make_mesh((2,), ("x",))


def shard(lhs, rhs):  # 2 experts per device: group_offset is traced
    offset = jax.lax.axis_index("x") * 2
    return jax.lax.psum(gmm_bf16.gmm_bf16_vjp(lhs, rhs, group_sizes, offset), "x")


sharded = jax.shard_map(shard, mesh=mesh, in_specs=(P(), P("x")), out_specs=P())


def loss(fn, lhs, rhs):
    return jnp.sum(fn(lhs, rhs) * d_out)


rhs_sharded = jax.device_put(rhs, jax.NamedSharding(mesh, P("x")))
step = jax.jit(jax.grad(lambda a, b: loss(sharded, a, b), argnums=(0, 1)))
got = step(lhs, rhs_sharded)
want = jax.grad(lambda a, b: loss(lambda x, y: gmm_bf16.gmm_bf16_vjp(x, y, group_sizes), a, b),
                argnums=(0, 1))(lhs, rhs)
for g, w in zip(got, want):
    g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
    assert np.array_equal(g, w), np.abs(g - w).max()
hlo = step.lower(lhs, rhs_sharded).compile().as_text()
assert " while(" not in hlo and "tpu_custom_call" not in hlo
print("ok")
"""


@pytest.mark.slow
def test_expert_parallel_training_on_two_devices(tmp_path):
    """Two CPU devices, two experts each, check_vma=True: the gradients of
    the sharded layer (psum of the shards) equal the unsharded ones exactly
    (every row and every expert is computed on one device only)."""
    library = emulated_ffi(CUDA, "gmm_bf16")
    env = {**os.environ, "PYTHONPATH": str(REPO), **device_env("sm_90a"),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    proc = subprocess.run([sys.executable, "-c", SHARDED_GRAD, str(library)],
                          capture_output=True, text=True, cwd=REPO, env=env, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_compile_builds_the_backward_kernels_into_the_library(tmp_path):
    """`gemmgen compile --kernel gmm_bf16` with nvcc (warnings as errors, the
    spec's sm_90a): one library exporting the three handlers register()
    needs (loading it needs no GPU: cudart is static)."""
    import ctypes

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "gemmgen", "compile",
                           str(REPO / "specs" / "moe.gemm"), "--kernel", "gmm_bf16", "--out",
                           str(tmp_path)], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    library = ctypes.CDLL(str(tmp_path / "libgmm_bf16_ffi.so"))
    for symbol in ("gg_ffi_gmm_bf16", "gg_ffi_gmm_bf16_grad_lhs", "gg_ffi_gmm_bf16_grad_rhs"):
        assert hasattr(library, symbol), symbol


def test_register_names_a_missing_backward_handler(tmp_path):
    """A library with the forward handler only (as one built before the
    backward kernels existed) is refused, naming the missing symbol, before
    any target is registered."""
    module = entry()
    source = tmp_path / "forward_only.c"
    source.write_text("int gg_ffi_gmm_bf16(void) { return 0; }\n")
    library = tmp_path / "libforward_only.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    with pytest.raises(ValueError, match="has no gg_ffi_gmm_bf16_grad_lhs: `gemmgen compile`"):
        module.register(library, platform="forward-only")
    assert "forward-only" not in module._REGISTERED
