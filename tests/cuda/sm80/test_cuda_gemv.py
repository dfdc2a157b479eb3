"""The CUDA GEMV and batched GEMV kinds (gemmgen/backends/cuda/gemv.py).

A spec of three kernels that between them use every feature (bf16 and f16
weights, e4m3 and e5m2 weights (W8A16), per-tensor / per-token /
per-channel and block scales in f32, bf16 and e8m0, bias, alpha, relu,
gelu, silu_mul, M = 1 .. max_m) is rendered into a temporary folder, then:

- run on the CPU emulator against the reference, at M = 1, 2 and max_m,
  with n that leaves a partial last block and a partial last warp, k with a
  partial last warp step (the 16-byte path) and odd k (the unaligned path),
  and at shapes Hypothesis draws;
- compiled with nvcc for sm_80, sm_89 and sm_90a: no spills, 128-bit weight
  loads (LDG.E.128) in the 16-byte entry point;
- the generated launchers reject bad calls with ValueError on NumPy arrays;
- the plan's arithmetic and the diagnostics are checked directly;
- the gg_convert.cuh helpers these kinds add (16-byte widening of every
  FP8 code, the exact e8m0 round-up) match ml_dtypes and the reference.

The plain bf16 GEMV pair (and its bit-identical rows) is tested with the
dispatcher that uses it, in test_cuda_dispatch.py.
"""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path, PurePosixPath

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemmgen import ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemv as cuda_gemv
from gemmgen.build import render_spec
from gemmgen.diagnostics import SpecError
from gemmgen.reference import compare, random_inputs, reference
from gemmgen.harness import nvcc
from gemmgen.harness.toolchain import find_nvcc
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.harness.runner import load_generated_module

from cuda_helpers import Launchers, build_emulators, render_cuda

SPEC = """\
target cuda {
  archs sm_80 sm_89 sm_90a
}

defaults {
  op dense
  lhs bf16 [m, k]
  backends cuda
}

# dense_gemv_fp8w: W8A16 GEMV, e4m3 weights, here with
# DeepSeek-style block scales (small blocks, so the test shapes cross them).
kernel gemv_w8a16 {
  rhs e4m3 [n, k]
  out bf16
  rhs_scale block n=16 k=64 f32
  bias bf16 [n]
  epilogue gelu alpha=0.5
  algorithm gemv
  tile m=64 n=16 k=64   # ignored by a GEMV (validate checks it against the blocks)
}

# Fused gate-up projection for up to 4 tokens, e5m2 weights.
kernel gemv_batched_gate_up {
  rhs e5m2 [n, k]
  out f32
  lhs_scale per_token f32
  rhs_scale per_tensor e8m0
  bias f32 [n]
  epilogue silu_mul
  algorithm gemv_batched
  max_m 4
}

# f16, 16 rows: two weight rows per warp to stay within the accumulators.
kernel gemv_batched_f16 {
  lhs f16 [m, k]
  rhs f16 [n, k]
  out f16
  lhs_scale per_tensor f32
  rhs_scale per_channel bf16
  epilogue relu
  algorithm gemv_batched
  max_m 16
  threads 128
}
"""

NAMES = ("gemv_w8a16", "gemv_batched_gate_up", "gemv_batched_f16")
ARCHS = ("sm_80", "sm_89", "sm_90a")
MODULES: dict = {}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[ir.Spec, Path]:
    """The spec rendered into a temporary folder, every emulator build done
    (in parallel: each is one g++ run, cached by content)."""
    spec, cuda, files = render_cuda(tmp_path_factory.mktemp("gemv"), "gemv", SPEC)
    build_emulators(cuda, NAMES, source_name, MODULES)
    return spec, cuda


def source_name(name: str) -> str:
    return f"gemv/cuda/{name}.cu"


launcher = Launchers("test_cuda_gemv")


def run(cuda: Path, name: str, inputs: dict):
    return run_launcher(launcher(cuda, name), (cuda / f"{name}.cu").read_text(),
                        source_name(name), inputs, modules=MODULES)


def shapes(kernel: ir.Kernel, p: cuda_gemv.GemvPlan) -> list[tuple[int, int, int]]:
    """(m, n, k): M = 1, 2, max_m; n with a partial last block and a partial
    last warp; k with a partial last warp step (16-byte path) or odd (the
    unaligned path)."""
    ms = (1,) if p.max_rows == 1 else (1, 2, p.max_rows)
    pair = 2 if p.silu_mul else 1
    n_ragged = pair * (p.cols_per_block + p.out_cols + 1)
    k_tail = p.vec * (32 * p.unroll + 3)
    k_odd = p.vec * 7 + 3
    out = []
    for i, m in enumerate(ms):
        out.append((m, n_ragged, k_tail))
        out.append((m, 2 * pair + (i % 2) * pair, k_odd))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_matches_reference_on_emulator(built, name):
    spec, cuda = built
    kernel = spec.kernel(name)
    p = cuda_gemv.plan(kernel, spec)
    lp = cuda_backend.plan(kernel, spec)
    mod = launcher(cuda, name)
    for m, n, k in shapes(kernel, p):
        rng = np.random.default_rng([m, n, k])
        inputs = random_inputs(kernel, m=m, n=n, k=k, rng=rng)
        dims = mod.validate(**inputs)
        entry = mod.launches(dims)[0].entry
        assert entry == lp.entries[0 if k % p.vec == 0 else 1]
        actual = run(cuda, name, inputs)
        result = compare(actual, reference(kernel, **inputs), kernel, k=k, inputs=inputs)
        assert result.passed, f"{name} m={m} n={n} k={k} ({entry}):\n{result.detail}"


@given(data=st.data())
def test_random_shapes_on_emulator(built, data):
    """Hypothesis draws (m, n, k) for the W8A16 gate-up kernel; a third of
    the k values are not multiples of the 16-byte slice."""
    spec, cuda = built
    kernel = spec.kernel("gemv_batched_gate_up")
    m = data.draw(st.integers(1, 4), label="m")
    n = 2 * data.draw(st.integers(1, 40), label="n / 2")
    k = data.draw(st.one_of(st.integers(1, 60).map(lambda i: 16 * i), st.integers(1, 700)),
                  label="k")
    inputs = random_inputs(kernel, m=m, n=n, k=k, rng=np.random.default_rng([m, n, k]))
    actual = run(cuda, "gemv_batched_gate_up", inputs)
    result = compare(actual, reference(kernel, **inputs), kernel, k=k, inputs=inputs)
    assert result.passed, f"m={m} n={n} k={k}:\n{result.detail}"


def test_m_zero_launches_nothing(built):
    spec, cuda = built
    kernel = spec.kernel("gemv_batched_f16")
    inputs = random_inputs(kernel, m=0, n=8, k=16, rng=np.random.default_rng(0))
    mod = launcher(cuda, "gemv_batched_f16")
    assert mod.launches(mod.validate(**inputs)) == []
    assert run(cuda, "gemv_batched_f16", inputs).shape == (0, 8)


# ---------------------------------------------------------------------------
# nvcc


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_compiles_without_spills_and_streams_with_128_bit_loads(built):
    spec, cuda = built
    jobs = [(name, arch) for name in NAMES for arch in ARCHS]

    def compile_one(job):
        name, arch = job
        return job, nvcc.compile_check((cuda / f"{name}.cu").read_text(), arch,
                                       name_for_errors=f"{name}.cu")

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        results = dict(pool.map(compile_one, jobs))
    for (name, arch), result in results.items():
        lp = cuda_backend.plan(spec.kernel(name), spec)
        assert set(result.kernels) == set(lp.entries)
        for entry, usage in result.kernels.items():
            assert usage.spills == 0 and usage.stack_frame == 0, (arch, entry, usage)
        sass = nvcc.sass_summary(result.cubin)
        fast, unaligned = lp.entries
        assert sass[fast].ldg_128 > 0, (arch, fast, sass[fast].opcodes)
        assert sass[fast].count("SHFL") > 0  # the warp reduction
        assert sass[unaligned].ldg_128 == 0


# ---------------------------------------------------------------------------
# Launcher validation (NumPy arrays, no GPU)


def test_launcher_rejects_bad_calls(built):
    spec, cuda = built
    kernel = spec.kernel("gemv_batched_gate_up")
    mod = launcher(cuda, "gemv_batched_gate_up")
    good = random_inputs(kernel, m=3, n=8, k=32, rng=np.random.default_rng(1))
    assert mod.validate(**good) == {"m": 3, "k": 32, "n": 8, "n_out": 4}

    def bad(match, **change):
        with pytest.raises(ValueError, match=match):
            mod.validate(**{**good, **change})

    big = random_inputs(kernel, m=5, n=8, k=32, rng=np.random.default_rng(2))
    bad(r"gemv_batched serves m <= 4", lhs=big["lhs"], lhs_scale=big["lhs_scale"])
    bad(r"rhs must have shape \[8, 32\]", rhs=good["rhs"][:, :16])
    bad(r"rhs must be float8_e5m2, got float8_e4m3fn", rhs=good["rhs"].view("float8_e4m3fn"))
    bad(r"lhs must have 2 dims", lhs=good["lhs"][None])
    bad(r"bias must have shape \[8\]", bias=good["bias"][:4])
    bad(r"lhs_scale is required", lhs_scale=None)
    odd = random_inputs(kernel, m=3, n=10, k=32, rng=np.random.default_rng(3))
    odd["rhs"], odd["bias"] = odd["rhs"][:9].copy(), odd["bias"][:9].copy()
    bad(r"silu_mul needs an even n", rhs=odd["rhs"], bias=odd["bias"])
    bad(r"out must have shape \[3, 4\]", out=np.zeros((3, 8), np.float32))
    # A weight that starts 2 bytes into an allocation: no 16-byte loads.
    raw = np.zeros(8 * 32 + 16, np.uint8)
    shifted = raw[2:2 + 8 * 32].view(good["rhs"].dtype).reshape(8, 32)
    bad(r"rhs must be 16-byte aligned", rhs=shifted)
    bad(r"rhs must be C-contiguous", rhs=np.asfortranarray(good["rhs"]))


def test_static_dims_are_checked(tmp_path):
    (tmp_path / "specs").mkdir()
    spec_path = tmp_path / "specs" / "s.gemm"
    spec_path.write_text(SPEC.replace("  max_m 16\n", "  max_m 16\n  dims n=64 k=128\n"))
    rendered = render_spec(spec_path)
    path = tmp_path / "gemv_batched_f16.py"
    path.write_text(rendered.files[PurePosixPath("cuda/gemv_batched_f16.py")])
    mod = load_generated_module(path, "test_cuda_gemv_static_dims")
    kernel = rendered.spec.kernel("gemv_batched_f16")
    inputs = random_inputs(kernel, m=2, n=64, k=120, rng=np.random.default_rng(4))
    with pytest.raises(ValueError, match=r"the spec fixes k = 128"):
        mod.validate(**inputs)
    inputs = random_inputs(kernel, m=2, n=64, k=128, rng=np.random.default_rng(4))
    assert mod.validate(**inputs)["k"] == 128


# ---------------------------------------------------------------------------
# Plan and diagnostics


def test_plan_arithmetic(built):
    spec, _ = built
    w8 = cuda_gemv.plan(spec.kernel("gemv_w8a16"), spec)
    assert (w8.vec, w8.warps, w8.out_cols, w8.acc_cols, w8.unroll) == (16, 8, 2, 2, 4)
    assert w8.entries[0].lhs_loads == 2  # 16 bf16 activations per 16 fp8 weights
    gate_up = cuda_gemv.plan(spec.kernel("gemv_batched_gate_up"), spec)
    assert (gate_up.out_cols, gate_up.acc_cols, gate_up.cols_per_block, gate_up.unroll) == \
        (2, 4, 16, 2)
    f16 = cuda_gemv.plan(spec.kernel("gemv_batched_f16"), spec)
    assert (f16.vec, f16.warps, f16.acc_cols, f16.max_rows) == (8, 4, 2, 16)
    lp = cuda_backend.plan(spec.kernel("gemv_batched_f16"), spec)
    assert [v.when and v.when.py for v in lp.variants] == ["k % 8 == 0", None]
    assert [g.py for g in lp.variants[0].steps[0].grid] == ["gg_cdiv(n_out, 8)", "1", "1"]
    assert lp.variants[0].steps[0].block == 128


def test_plan_fields_are_typed_and_the_parameters_listed_once(built):
    spec, _ = built
    gate_up = cuda_gemv.plan(spec.kernel("gemv_batched_gate_up"), spec)
    assert gate_up.activation is ir.Activation.SILU_MUL and gate_up.silu_mul is True
    assert gate_up.rows_per_column == 2 and gate_up.n_out == "n / 2"
    lp = cuda_backend.plan(spec.kernel("gemv_batched_gate_up"), spec)
    for p, entry, variant in ((gate_up, gate_up.entries[0], lp.variants[0]),
                              (gate_up, gate_up.entries[1], lp.variants[1])):
        (step,) = variant.steps
        names = [q.name for q in p.params]
        assert [a.name or a.value.py for a in step.args] == \
            [n if n not in ("m", "n", "k") else f"gg_i32({n})" for n in names]
        assert " ".join(entry.call.split()) == f"gemv<{entry.vec}>({', '.join(names)});"
    w8 = cuda_gemv.plan(spec.kernel("gemv_w8a16"), spec)
    assert w8.lhs_scale_ctype is None and w8.bias_ctype == "__nv_bfloat16"
    assert w8.rhs_scale_ctype == "float" and w8.rhs_scale_to_float == "gg::to_float"
    assert w8.scales.rhs_block and not w8.scales.fold_lhs and not w8.scales.epilogue_rhs
    # e8m0 per-tensor weight scale in the epilogue: multiplied exactly.
    assert gate_up.scales.exact_epilogue and gate_up.rhs_scale_to_float == "gg::e8m0_to_float"


@pytest.mark.parametrize("change,message", [
    (("rhs e4m3 [n, k]", "rhs e4m3 [k, n]"),
     "cuda cannot emit a gemv with rhs [k, n] yet: the GEMV streams K-contiguous weight rows"),
    (("rhs e4m3 [n, k]", "rhs int8 [n, k]"),
     "cuda cannot emit a gemv with rhs 'int8' yet: the weights must be 'bf16' like lhs, or e4m3"),
    (("rhs_scale block n=16 k=64 f32\n  bias bf16 [n]\n  epilogue gelu alpha=0.5\n"
      "  algorithm gemv\n  tile m=64 n=16 k=64",
      "rhs_scale block n=16 k=8 f32\n  bias bf16 [n]\n  epilogue gelu alpha=0.5\n"
      "  algorithm gemv\n  tile m=64 n=16 k=8"),
     "cuda cannot emit a gemv with rhs_scale block k=8 yet: a lane's 16-byte slice of 16 weights"),
    (("lhs_scale per_token f32", "lhs_scale per_token_group k=128 f32"),
     "cuda cannot emit a gemv_batched with lhs_scale 'per_token_group' yet"),
])
def test_diagnostics_name_what_is_not_supported(tmp_path, change, message):
    (tmp_path / "specs").mkdir()
    path = tmp_path / "specs" / "bad.gemm"
    assert change[0] in SPEC
    path.write_text(SPEC.replace(*change, 1))
    with pytest.raises(SpecError) as e:
        render_spec(path)
    assert any(message in d.message for d in e.value.diagnostics), e.value


# ---------------------------------------------------------------------------
# The gg_convert.cuh helpers the GEMV and quantize kinds rely on, for every
# code (the emulator runs the bodies that sm_80 uses; from sm_89 FP8 goes
# through CUDA's own conversion instructions).

HELPERS = r"""
#include "gg_runtime.cuh"
#include "gg_convert.cuh"

// 16 threads: thread t widens bytes [16t, 16t + 16) of the 256 codes.
template <class T>
__device__ void widen_all(const unsigned char* codes, float* out) {
  constexpr int kElems = gg::Vec16<T>::kElems;
  uint4 v;
  memcpy(&v, codes + 16 * threadIdx.x, 16);
  float f[kElems];
  gg::widen16<T>(v, f);
  for (int e = 0; e < kElems; ++e) out[kElems * threadIdx.x + e] = f[e];
}
extern "C" __global__ void widen_e4m3(const unsigned char* c, float* o) { widen_all<__nv_fp8_e4m3>(c, o); }
extern "C" __global__ void widen_e5m2(const unsigned char* c, float* o) { widen_all<__nv_fp8_e5m2>(c, o); }
extern "C" __global__ void widen_bf16(const unsigned char* c, float* o) { widen_all<__nv_bfloat16>(c, o); }
extern "C" __global__ void widen_f16(const unsigned char* c, float* o) { widen_all<__half>(c, o); }

extern "C" __global__ void e8m0_scales(const float* amax, float fp8_max, int count, unsigned char* out) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) out[i] = gg::e8m0_round_up_ratio(amax[i], fp8_max);
}
"""


@pytest.fixture(scope="module")
def helpers():
    from gemmgen.harness.cuda_emu import EmuModule

    return EmuModule(HELPERS, "test_cuda_gemv/helpers.cu")


@pytest.mark.parametrize("kind,dtype", [("e4m3", "float8_e4m3fn"), ("e5m2", "float8_e5m2"),
                                        ("bf16", "bfloat16"), ("f16", "float16")])
def test_widen16_is_exact_for_every_code(helpers, kind, dtype):
    import ml_dtypes

    codes = np.arange(256, dtype=np.uint8)
    if dtype in ("bfloat16", "float16"):  # 16-bit: a spread of codes, both bytes varied
        codes = np.random.default_rng(0).integers(0, 256, 256, dtype=np.uint8)
        codes[:4] = [0x80, 0x7F, 0xFF, 0x7C]
    elems = 256 // (2 if dtype in ("bfloat16", "float16") else 1)
    (got,) = helpers.launch(f"widen_{kind}", grid=1, block=16,
                            args=[codes, np.empty(elems, np.float32)], outputs=[1])
    want = codes.view(getattr(ml_dtypes, dtype) if dtype != "float16" else np.float16)
    want = want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


def test_e8m0_round_up_ratio_matches_the_reference(helpers):
    from gemmgen.reference import _e8m0_scale_bytes

    rng = np.random.default_rng(0)
    for fp8_max in (448.0, 57344.0):
        powers = fp8_max * np.exp2(np.arange(-60, 80, dtype=np.float64))
        amax = np.concatenate([
            np.exp2(rng.uniform(-40, 100, 2000)),  # anywhere
            powers,  # exactly at a boundary: 2^e
            np.nextafter(powers.astype(np.float32), np.float32(np.inf)),  # one ulp past: 2^(e+1)
            np.nextafter(powers.astype(np.float32), np.float32(0)),
            [1e-10, np.float32(1e-10), 3e38, 1e-30 * fp8_max],
        ]).astype(np.float32)
        # The kernel floors amax at 1e-10f first, as the quantize kernel does.
        floored = np.maximum(amax, np.float32(1e-10))
        (got,) = helpers.launch("e8m0_scales", grid=1, block=64,
                                args=[floored, np.float32(fp8_max), np.int32(amax.size),
                                      np.empty(amax.size, np.uint8)], outputs=[3])
        np.testing.assert_array_equal(got, _e8m0_scale_bytes(amax.astype(np.float64), fp8_max))
