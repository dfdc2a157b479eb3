"""The JAX entry points (generated/<stem>/jax/<kernel>.py) on the CPU.

Each kernel emitted for both backends has one JAX function: on a TPU the
Pallas kernel, elsewhere the CUDA kernel through XLA's FFI. Here the same
FFI handler (cuda/<kernel>_ffi.cc, which calls launch_<kernel>()) is built
against gemmgen's CPU emulator (harness/ffi.emulated_ffi, GG_FFI_EMULATED)
and registered for XLA's "cpu" platform, so `jax.jit` of the entry point
runs the emulated CUDA kernel inside XLA. Results are compared with the
NumPy reference (gemmgen/reference) and with the Pallas kernel in TPU
interpret mode, on fresh random inputs; existing_out is poisoned (a value no
computed row can have) so that a row the kernel should have written and did
not shows.

The files are rendered in memory from specs/ and written once per session
as a package (`<package>.<stem>.jax.<kernel>` imports `..pallas`); each
library is built once and cached by content (the emulator's cache).
"""

from __future__ import annotations

import functools
import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gemmgen import ir
from gemmgen.backends.cuda import ffi as jax_ffi
from gemmgen.build import render_spec
from gemmgen.cases import Case, standard_cases
from gemmgen.harness.cuda_emu import device_env
from gemmgen.harness.ffi import emulated_ffi
from gemmgen.harness.toolchain import find_nvcc
from gemmgen.harness.verify_cuda import emulated_arch
from gemmgen.reference import compare, reference

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "gemmgen_ffi_test"
SENTINEL = -4242.0  # poisoned existing_out: no computed row holds it


@functools.cache
def rendered(stem: str):
    return render_spec(REPO / "specs" / f"{stem}.gemm")


@functools.cache
def package_root() -> Path:
    """A temporary folder holding the package PACKAGE: both specs' files."""
    root = Path(tempfile.mkdtemp(prefix="gemmgen-ffi-"))
    for stem in ("moe", "dense"):
        for rel, text in rendered(stem).files.items():
            path = root / PACKAGE / stem / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    sys.path.insert(0, str(root))
    return root


def entry(stem: str, name: str):
    """The entry-point module, its emulated handler registered for "cpu"."""
    package_root()
    module = importlib.import_module(f"{PACKAGE}.{stem}.jax.{name}")
    if "cpu" not in module._REGISTERED:
        library = emulated_ffi(package_root() / PACKAGE / stem / "cuda", name)
        module.register(library, platform="cpu")
    # The emulated device: read by each library at its first launch.
    os.environ.update(device_env(emulated_arch(rendered(stem).spec)))
    return module


def pallas(stem: str, name: str):
    package_root()
    return importlib.import_module(f"{PACKAGE}.{stem}.pallas.{name}")


def kernel(stem: str, name: str) -> ir.Kernel:
    return rendered(stem).spec.kernel(name)


def poison(inputs: dict) -> dict:
    """existing_out, when the case has one, set to SENTINEL."""
    if inputs.get("existing_out") is not None:
        x = inputs["existing_out"]
        inputs["existing_out"] = np.full(x.shape, SENTINEL, x.dtype)
    return inputs


def as_jax(inputs: dict) -> dict:
    return {a: (jnp.asarray(v) if isinstance(v, np.ndarray) else v) for a, v in inputs.items()}


def to_numpy(out):
    return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out)


def check(stem: str, name: str, case: Case, *, seed: int, jit: bool = False,
          against_pallas: bool = True) -> None:
    """The entry point on the emulated CUDA kernel against the reference and
    against the Pallas kernel in interpret mode."""
    k = kernel(stem, name)
    inputs = poison(case.inputs(k, seed))
    fn = getattr(entry(stem, name), name)
    got = to_numpy((jax.jit(fn) if jit else fn)(**as_jax(inputs)))
    expected = reference(k, **inputs)
    result = compare(got, expected, k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()} (FFI, emulated CUDA):\n{result.detail}"
    if against_pallas:
        from jax.experimental.pallas import tpu as pltpu

        ref_fn = getattr(pallas(stem, name), name)
        other = to_numpy(ref_fn(**as_jax(inputs), interpret=pltpu.InterpretParams()))
        second = compare(other, expected, k, k=case.k, inputs=inputs)
        assert second.passed, f"{name} {case.describe()} (Pallas interpret):\n{second.detail}"
        if k.op is ir.Op.QUANTIZE:  # (q, scale): both pass the reference's rules
            return
        # Both within their bound of the reference, so within the sum of the
        # bounds of each other (each rounds to the output dtype on its own).
        gap = np.abs(got.astype(np.float64) - other.astype(np.float64))
        bound = result.allowed + second.allowed
        assert np.array_equal(np.isnan(got.astype(np.float64)), np.isnan(other.astype(np.float64)))
        assert (np.nan_to_num(gap) <= bound).all(), (
            f"{name} {case.describe()}: FFI and Pallas differ by {np.nanmax(gap - bound)} "
            "beyond their bounds")


def all_entry_points() -> list[tuple[str, str]]:
    return [(stem, k.name) for stem in ("moe", "dense") for k in jax_ffi.kernels(rendered(stem).spec)]


# ---------------------------------------------------------------------------
# The fast case: a sharded call with every edge at once.


def test_grouped_entry_point_runs_the_cuda_kernel_inside_xla():
    """gmm_bf16 under jax.jit on the CPU platform: zero-size groups, a
    group_offset (traced: the handler reads it off the device), rows past
    sum(group_sizes), poisoned existing_out."""
    case = Case("sharded", m=150, n=128, k=64, group_sizes=(40, 0, 75, 0, 5), group_offset=1,
                g_local=3, existing_out=True)
    check("moe", "gmm_bf16", case, seed=31, jit=True)


def test_the_default_branch_is_the_ffi_call():
    """On the CPU, jax.lax.platform_dependent lowers only the FFI call: the
    compiled HLO calls the target, and holds no Pallas kernel."""
    module = entry("moe", "gmm_bf16")
    lhs = jnp.zeros((8, 64), jnp.bfloat16)
    rhs = jnp.zeros((2, 128, 64), jnp.bfloat16)
    text = module._launch.lower(lhs, rhs, jnp.array([4, 4], jnp.int32), None, None).as_text()
    assert module.TARGET in text and "tpu_custom_call" not in text


def test_the_handler_refuses_what_the_cuda_launcher_refuses():
    """k = 60 suits Pallas, not the CUDA launcher (16-byte rows): the call
    fails with launch_gmm_bf16's own message, from inside XLA."""
    module = entry("moe", "gmm_bf16")
    lhs = jnp.ones((8, 60), jnp.bfloat16)
    rhs = jnp.ones((2, 128, 60), jnp.bfloat16)
    with pytest.raises(Exception, match=r"gmm_bf16: k must be a multiple of 8"):
        jax.block_until_ready(module.gmm_bf16(lhs, rhs, [4, 4]))


def test_bad_arguments_get_the_pallas_message_before_any_kernel():
    module = entry("moe", "gmm_bf16")
    lhs = jnp.ones((8, 64), jnp.float32)
    rhs = jnp.ones((2, 128, 64), jnp.bfloat16)
    with pytest.raises(ValueError, match=r"lhs must be bfloat16 \[8, 64\], got float32 \[8, 64\]"):
        module.gmm_bf16(lhs, rhs, [4, 4])


def test_register_refuses_a_library_without_the_handler():
    """Another kernel's library: register() says so and registers nothing."""
    package_root()
    module = importlib.import_module(f"{PACKAGE}.moe.jax.moe_fp8_grouped_gemm")
    other = emulated_ffi(package_root() / PACKAGE / "moe" / "cuda", "gmm_bf16")
    with pytest.raises(ValueError, match=r"has no gg_ffi_moe_fp8_grouped_gemm"):
        module.register(other, platform="cpu")
    assert "cpu" not in module._REGISTERED


# ---------------------------------------------------------------------------
# Every entry point, on the cases `gemmgen verify` runs, and edge cases.


@pytest.mark.slow
@pytest.mark.parametrize("stem, name", all_entry_points(), ids=lambda v: v)
def test_every_entry_point_matches_the_reference_and_pallas(stem, name):
    k = kernel(stem, name)
    # The first cases of each backend's tile LUT (one list when they share it).
    cases = [c for b in k.backends for c in standard_cases(k.for_backend(b))[:2]]
    for i, case in enumerate(dict.fromkeys(cases)):
        check(stem, name, case, seed=100 + i)


EDGES = {
    "m=1": Case("m1", m=1, n=128, k=64, group_sizes=(0, 1, 0)),
    "all groups empty": Case("empty", m=20, n=128, k=64, group_sizes=(0, 0, 0)),
    "offset past the groups": Case("far", m=20, n=128, k=64, group_sizes=(10, 10), group_offset=5,
                                   g_local=2, existing_out=True),
    "negative offset": Case("negative", m=40, n=128, k=64, group_sizes=(10, 20, 10),
                            group_offset=-1, g_local=3, existing_out=True),
    "no existing_out": Case("zeros", m=70, n=256, k=128, group_sizes=(30, 0, 40), group_offset=1,
                            g_local=2),
}


@pytest.mark.slow
@pytest.mark.parametrize("edge", EDGES)
def test_grouped_edges(edge):
    check("moe", "gmm_bf16", EDGES[edge], seed=7, jit=True)


@pytest.mark.slow
def test_dense_m1_and_tgmm_and_quantize_under_jit():
    check("dense", "int8_gemm", Case("m1", m=1, n=128, k=128), seed=3, jit=True)
    check("moe", "moe_bf16_grad_rhs",
          Case("tgmm", m=50, n=128, k=128, group_sizes=(20, 0, 30), group_offset=1, g_local=2,
               existing_out=True), seed=4, jit=True)
    check("dense", "per_token_group_quant_fp8_out_scale_e8m0", Case("q", m=3, n=256, k=256),
          seed=5, jit=True)


@pytest.mark.slow
def test_vjp_gradients_match_the_pallas_vjp():
    """gmm_bf16_vjp: the forward and the backward pass on the emulated CUDA
    kernels (test_jax_ffi_vjp.py compares them with NumPy); the gradients
    equal those of the Pallas gmm_bf16_vjp in interpret mode."""
    from jax.experimental.pallas import tpu as pltpu

    module = entry("moe", "gmm_bf16")
    k = kernel("moe", "gmm_bf16")
    case = Case("grad", m=60, n=128, k=64, group_sizes=(20, 0, 30, 10), group_offset=1, g_local=2,
                existing_out=True)
    inputs = as_jax(case.inputs(k, 11))
    rng = np.random.default_rng(12)
    d_out = jnp.asarray(rng.standard_normal((case.m, case.n)).astype(np.float32))

    def grads(fn):
        def loss(lhs, rhs, existing_out):
            out = fn(lhs, rhs, inputs["group_sizes"], inputs["group_offset"], existing_out)
            return jnp.sum(out * d_out)
        return jax.grad(loss, argnums=(0, 1, 2))(inputs["lhs"], inputs["rhs"], inputs["existing_out"])

    got = grads(module.gmm_bf16_vjp)
    want = grads(functools.partial(pallas("moe", "gmm_bf16").gmm_bf16_vjp,
                                   interpret=pltpu.InterpretParams()))
    for name, g, w in zip(("lhs", "rhs", "existing_out"), got, want):
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32),
                                   rtol=2e-2, atol=2e-2, err_msg=f"d {name}")


# ---------------------------------------------------------------------------
# `gemmgen compile`


def _gemmgen(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "gemmgen", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, check=False)


def test_compile_names_the_kernels_it_can_build(tmp_path):
    proc = _gemmgen("compile", str(REPO / "specs" / "moe.gemm"), "--kernel", "gmm_bf1",
                    "--out", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "has no JAX entry point 'gmm_bf1'; did you mean 'gmm_bf16'?" in proc.stderr
    assert "Traceback" not in proc.stderr and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_compile_emulate_writes_a_library_that_registers(tmp_path):
    proc = _gemmgen("compile", str(REPO / "specs" / "moe.gemm"), "--kernel", "gmm_bf16",
                    "--emulate", "--out", str(tmp_path / "build"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    library = tmp_path / "build" / "libgmm_bf16_ffi_emu.so"
    assert library.is_file() and f"wrote {library}" in proc.stdout
    import ctypes

    for symbol in ("gg_ffi_gmm_bf16", "gg_ffi_gmm_bf16_grad_lhs", "gg_ffi_gmm_bf16_grad_rhs"):
        assert hasattr(ctypes.CDLL(str(library)), symbol), symbol


@pytest.mark.slow
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_compile_builds_the_gpu_library_with_nvcc(tmp_path):
    """The documented command: nvcc, warnings as errors, the spec's archs;
    the handler is exported (loading needs no GPU: cudart is static)."""
    proc = _gemmgen("compile", str(REPO / "specs" / "moe.gemm"), "--kernel",
                    "moe_w8a8_grouped_gemm", "--out", str(tmp_path / "build"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "(sm_90a, sm_100a)" in proc.stdout  # both the spec's archs
    library = tmp_path / "build" / "libmoe_w8a8_grouped_gemm_ffi.so"
    import ctypes

    assert hasattr(ctypes.CDLL(str(library)), "gg_ffi_moe_w8a8_grouped_gemm")


@pytest.mark.slow
def test_the_documented_snippet_runs(tmp_path):
    """docs/using-the-output.md, "JAX on GPU (XLA FFI)": its Python snippets
    (the call, then the gradients), in a fresh process from the repository
    root (generated/ importable as a package), with the emulated library of
    the committed files registered for "cpu" in place of the nvcc-built one."""
    text = (REPO / "docs" / "using-the-output.md").read_text()
    section = text.split("## JAX on GPU (XLA FFI)", 1)[1].split("\n## ", 1)[0]
    snippets = [part.split("```", 1)[0] for part in section.split("```python\n")[1:]]
    assert len(snippets) == 2, len(snippets)
    snippet = "\n".join(snippets)
    call = 'gmm_bf16.register("build/libgmm_bf16_ffi.so")'
    assert call in snippet
    library = emulated_ffi(REPO / "generated" / "moe" / "cuda", "gmm_bf16")
    snippet = snippet.replace(call, f'gmm_bf16.register("{library}", platform="cpu")')
    snippet += (
        "assert out.shape == (64, 256) and bool((out == 128).all()), out\n"
        # loss = sum(out ** 2): d out = 2 out = 256 on the rows of a group;
        # d lhs[r] = sum over n of 256 * 1 = 65536, d rhs[i] = 256 * rows of i.
        "assert d_lhs.dtype == jnp.bfloat16 and bool((d_lhs == 65536).all()), d_lhs\n"
        "assert [float(d_rhs[i].max()) for i in range(3)] == [256 * 24, 0, 256 * 40]\n"
        "assert bool((d_rhs == d_rhs.max(axis=(1, 2), keepdims=True)).all())\n"
        "print('ok')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), **device_env("sm_90a")}
    proc = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True,
                          cwd=REPO, env=env, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


DEEP_STACK = """\
#include "gg_runtime.cuh"

// 32 KiB of locals: past the first 8 KiB of a fiber's stack, so the stack
// grows on faults (docs/cuda-emulation.md, "Uninitialised values").
extern "C" __global__ void deep(float* out) {
  volatile float big[8192];
  for (int i = 0; i < 8192; ++i) big[i] = static_cast<float>(i + LIBRARY);
  float sum = 0.0f;
  for (int i = 0; i < 8192; i += 1024) sum += big[i];
  out[threadIdx.x] = sum;
}

extern "C" int gg_emu_host_main(void) {
  float* out = nullptr;
  if (cudaMalloc(&out, 32 * sizeof(float)) != cudaSuccess) return 1;
  deep<<<2, 32>>>(out);
  const cudaError_t err = cudaGetLastError();
  cudaFree(out);
  return err == cudaSuccess ? 0 : 2;
}
"""


def test_emulated_libraries_in_one_process_pass_on_faults_that_are_not_theirs(tmp_path):
    """Two emulated libraries in one process, as XLA's CPU platform holds one
    per registered handler: A launches (its fault handler installed), then B
    (B's replaces it), then A again, whose fiber stacks grow on faults that
    reach B's handler first; B passes them on to A's instead of reporting an
    invalid access (status 71)."""
    from gemmgen.harness.cuda_emu import EmuModule, _encode_host_request

    a, b = (EmuModule(DEEP_STACK, f"deep{i}.cu", defines={"LIBRARY": i}, memcheck=False).library
            for i in (1, 2))
    request = tmp_path / "request"
    request.write_bytes(_encode_host_request({}))
    child = (
        "import ctypes, sys\n"
        "libs = [ctypes.CDLL(p) for p in sys.argv[1:3]]\n"
        "for lib in (libs[0], libs[1], libs[0]):\n"
        "    run = lib.gg_emu_run_host\n"
        "    run.argtypes = (ctypes.c_char_p, ctypes.c_char_p)\n"
        "    assert run(sys.argv[3].encode(), sys.argv[4].encode()) == 0\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", child, str(a), str(b), str(request),
                           str(tmp_path / "response")], capture_output=True, text=True,
                          env={**os.environ, **device_env("sm_90a")}, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


SHARDED = """\
import sys
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from generated.moe.jax import gmm_bf16

gmm_bf16.register(sys.argv[1], platform="cpu")
rng = np.random.default_rng(5)
lhs = jnp.asarray(rng.standard_normal((96, 64)), jnp.bfloat16)
rhs = jnp.asarray(rng.standard_normal((4, 128, 64)), jnp.bfloat16)
group_sizes = jnp.array([30, 0, 50, 10], jnp.int32)
mesh = jax.make_mesh((2,), ("x",))


def shard(lhs, rhs, group_sizes):  # 2 experts per device: group_offset is traced
    offset = (jax.lax.axis_index("x") * 2).astype(jnp.int32)
    return jax.lax.psum(gmm_bf16.gmm_bf16(lhs, rhs, group_sizes, offset), "x")


sharded = jax.jit(jax.shard_map(shard, mesh=mesh, in_specs=(P(), P("x"), P()), out_specs=P()))
got = sharded(lhs, jax.device_put(rhs, jax.NamedSharding(mesh, P("x"))), group_sizes)
want = gmm_bf16.gmm_bf16(lhs, rhs, group_sizes)
assert np.array_equal(np.asarray(got), np.asarray(want)), np.abs(np.asarray(got - want)).max()
print("ok")
"""


@pytest.mark.slow
def test_expert_parallel_under_shard_map(tmp_path):
    """Two CPU devices, two experts each: group_offset = axis_index * 2 is
    traced, read by each device's handler; the psum of the shards equals the
    unsharded call exactly (every row is computed on one device, zero on the
    other). shard_map's default check_vma=True: the FFI call's results are
    typed with the mesh axes its operands vary over, as the Pallas branch's
    (issue 28)."""
    library = emulated_ffi(REPO / "generated" / "moe" / "cuda", "gmm_bf16")
    env = {**os.environ, "PYTHONPATH": str(REPO), **device_env("sm_90a"),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    proc = subprocess.run([sys.executable, "-c", SHARDED, str(library)], capture_output=True,
                          text=True, cwd=REPO, env=env, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


# ---------------------------------------------------------------------------
# sm_100a (docs/cuda-sm100.md): the library `gemmgen compile --emulate`
# writes, on an emulated B200, in a process of its own (the library reads
# the device at its first launch).

SM100_CALL = """\
import pickle
import sys

import jax.numpy as jnp
import numpy as np

from generated.moe.jax import moe_w8a8_grouped_gemm as module

module.register(sys.argv[1], platform="cpu")
with open(sys.argv[2], "rb") as f:
    inputs = pickle.load(f)
args = {a: (jnp.asarray(v) if isinstance(v, np.ndarray) else v) for a, v in inputs.items()}
try:
    out = np.asarray(module.moe_w8a8_grouped_gemm(**args))
except Exception as e:  # the handler's refusal, for the parent to read
    print("refused:", e)
    sys.exit(0)
with open(sys.argv[3], "wb") as f:
    pickle.dump(out, f)
print("ok")
"""


def test_compiled_library_takes_the_sm100_path_on_an_emulated_b200(tmp_path):
    """moe_w8a8_grouped_gemm (FP8, DeepSeek block scales: the sm_100a body's
    FP32 promotion) through `gemmgen compile --emulate`'s library on an
    emulated sm_100a device of 2 SMs (the persistent grid wraps), a shard
    with a zero-size group and existing_out, against the reference. The
    same call on an sm_100a device whose opt-in shared memory is below the
    sm_100a tile's (208,016 bytes) but above the mma.sync tile's is refused
    by the launcher naming the _sm100 launch: the path was the sm_100a one."""
    import pickle

    name = "moe_w8a8_grouped_gemm"
    proc = _gemmgen("compile", str(REPO / "specs" / "moe.gemm"), "--kernel", name,
                    "--emulate", "--out", str(tmp_path / "build"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    library = tmp_path / "build" / f"lib{name}_ffi_emu.so"
    k = kernel("moe", name)
    case = Case("sharded", m=150, n=256, k=272, group_sizes=(40, 0, 75, 20, 5), group_offset=1,
                g_local=3, existing_out=True)
    inputs = poison(case.inputs(k, 41))
    (tmp_path / "inputs.pkl").write_bytes(pickle.dumps(inputs))

    def call(env: dict[str, str]) -> str:
        env = {**os.environ, "PYTHONPATH": str(REPO), **env}
        proc = subprocess.run([sys.executable, "-c", SM100_CALL, str(library),
                               str(tmp_path / "inputs.pkl"), str(tmp_path / "out.pkl")],
                              capture_output=True, text=True, cwd=REPO, env=env, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.strip()

    assert call(device_env("sm_100a", sm_count=2)) == "ok"
    got = pickle.loads((tmp_path / "out.pkl").read_bytes())
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()} (FFI, emulated sm_100a):\n{result.detail}"
    # The launcher's plan: on 10.0 the sm_100a tile needs more than 200,000
    # bytes, the mma.sync path's launches less.
    launcher = importlib.import_module("generated.moe.cuda." + name)
    dims = launcher.validate(**inputs)
    sm100 = launcher.launches(dims, 100, 2)
    assert sm100[-1].entry == f"{name}_sm100" and sm100[-1].smem == 208016
    assert max(s.smem for s in launcher.launches(dims, 0, 0)) <= 200000
    refused = call({**device_env("sm_100a", sm_count=2), "GG_EMU_SMEM_OPTIN": "200000"})
    assert refused == (f"refused: INTERNAL: {name}: launch_{name}() returned "
                       "cudaErrorInvalidValue"), refused


@pytest.mark.slow
def test_compiled_library_runs_a_b200_block_scaled_kernel_on_an_emulated_b200(tmp_path):
    """specs/b200.gemm's MXFP8 experts (e4m3, e8m0 scales of 32, the weights'
    in the atom layout) through `gemmgen compile --emulate`'s library on an
    emulated sm_100a device of 2 SMs: the block-scaled tcgen05 path (its
    _sm100 launch, refused on a device with too little shared memory for
    it), against the reference, with a zero-size group."""
    import pickle

    name = "b200_mxfp8_moe_grouped_gemm"
    proc = _gemmgen("compile", str(REPO / "specs" / "b200.gemm"), "--kernel", name,
                    "--emulate", "--out", str(tmp_path / "build"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    library = tmp_path / "build" / f"lib{name}_ffi_emu.so"
    k = kernel("b200", name)
    case = Case("groups", m=150, n=160, k=160, group_sizes=(100, 0, 50))
    inputs = poison(case.inputs(k, 43))
    (tmp_path / "inputs.pkl").write_bytes(pickle.dumps(inputs))
    script = SM100_CALL.replace("generated.moe.jax import moe_w8a8_grouped_gemm",
                                f"generated.b200.jax import {name}")
    script = script.replace("module.moe_w8a8_grouped_gemm(", f"module.{name}(")

    def call(env: dict[str, str]) -> str:
        env = {**os.environ, "PYTHONPATH": str(REPO), **env}
        proc = subprocess.run([sys.executable, "-c", script, str(library),
                               str(tmp_path / "inputs.pkl"), str(tmp_path / "out.pkl")],
                              capture_output=True, text=True, cwd=REPO, env=env, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.strip()

    assert call(device_env("sm_100a", sm_count=2)) == "ok"
    got = pickle.loads((tmp_path / "out.pkl").read_bytes())
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()} (FFI, emulated sm_100a):\n{result.detail}"
    launcher = importlib.import_module("generated.b200.cuda." + name)
    dims = launcher.validate(**inputs)
    sm100 = launcher.launches(dims, 100, 2)
    assert sm100[-1].entry == f"{name}_sm100" and sm100[-1].smem > 200000
    assert max(s.smem for s in launcher.launches(dims, 0, 0)) <= 200000
    refused = call({**device_env("sm_100a", sm_count=2), "GG_EMU_SMEM_OPTIN": "200000"})
    assert refused == (f"refused: INTERNAL: {name}: launch_{name}() returned "
                       "cudaErrorInvalidValue"), refused
