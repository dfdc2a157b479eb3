"""The CUDA quantize kind for the MX / NV formats (templates/cuda/quantize.cu.j2):
MXFP8 (OCP MX v1.0, e8m0 scales rounded down, e4m3 and e5m2), MXFP4 (packed
e2m1, e8m0 round=floor, and DeepGEMM's round-up), NVFP4 (packed e2m1, ue4m3
scales per 16), with bf16, f16 and f32 inputs. Each runs on the CPU
emulator and must be bit for bit `reference_output` (scale bytes and q
bytes): fresh random inputs over both entry points (16-byte loads, and
the unaligned one), m = 1, partial last groups, Hypothesis shapes; the
edge rows of tests/quantize_edges.py (powers of two, ue4m3 ties, element
ties, saturation); zero, non-finite and subnormal groups. Planted bugs
(ties away from even, the OCP exponent off by one, a truncated ue4m3
scale, swapped nibbles, a signed zero in a NaN group) must fail; each
kernel compiles without spills; the launcher refuses an odd k.
"""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path

import numpy as np
import pytest
from cuda_helpers import Launchers, build_emulators, render_cuda
from hypothesis import given
from hypothesis import strategies as st
from quantize_edges import EDGE_GLOBAL, NUMPY_INPUT, edge_rows

from gemmgen import ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import quantize as cuda_quantize
from gemmgen.harness import nvcc
from gemmgen.harness.toolchain import find_nvcc
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, random_inputs, reference

SPEC = """\
target cuda {
  archs sm_89 sm_120a
}

kernel mxfp8_quant {
  op quantize
  lhs bf16 [m, k]
  out e4m3
  out_scale per_token_group k=32 e8m0 round=floor
  backends cuda
}

kernel mxfp8_e5m2_quant {
  op quantize
  lhs f32 [m, k]
  out e5m2
  out_scale per_token_group k=32 e8m0 round=floor
  threads 64
  backends cuda
}

kernel mxfp4_quant {
  op quantize
  lhs bf16 [m, k]
  out fp4 packed
  out_scale per_token_group k=32 e8m0 round=floor
  backends cuda
}

kernel fp4_round_up_quant {
  op quantize
  lhs f16 [m, k]
  out fp4 packed
  out_scale per_token_group k=64 e8m0
  backends cuda
}

kernel nvfp4_quant {
  op quantize
  lhs f32 [m, k]
  out fp4 packed
  out_scale per_token_group k=16 ue4m3
  backends cuda
}

kernel nvfp4_bf16_quant {
  op quantize
  lhs bf16 [m, k]
  out fp4 packed
  out_scale per_token_group k=16 ue4m3
  backends cuda
}

# NVFP4 with its global scale G (an input): block scales of amax / G.
kernel nvfp4_global_quant {
  op quantize
  lhs f32 [m, k]
  out fp4 packed
  out_scale per_token_group k=16 ue4m3 global=f32
  backends cuda
}

kernel nvfp4_global_bf16_quant {
  op quantize
  lhs bf16 [m, k]
  out fp4 packed
  out_scale per_token_group k=16 ue4m3 global=f32
  backends cuda
}
"""

NAMES = ("mxfp8_quant", "mxfp8_e5m2_quant", "mxfp4_quant", "fp4_round_up_quant", "nvfp4_quant",
         "nvfp4_bf16_quant", "nvfp4_global_quant", "nvfp4_global_bf16_quant")
ARCHS = ("sm_89", "sm_120a")
MODULES: dict = {}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[ir.Spec, Path]:
    spec, cuda, _ = render_cuda(tmp_path_factory.mktemp("quantize_mx"), "quantize_mx", SPEC)
    build_emulators(cuda, NAMES, source_name, MODULES)
    return spec, cuda


def source_name(name: str) -> str:
    return f"quantize_mx/cuda/{name}.cu"


launcher = Launchers("test_cuda_quant_mx")


def inputs_of(kernel: ir.Kernel, lhs: np.ndarray, glob: float | None = None) -> dict:
    """The kernel's inputs: lhs, and the global scale G of a `global=f32`
    kernel (default: EDGE_GLOBAL, 24 significant bits)."""
    if not kernel.out_scale.global_scale:
        return {"lhs": lhs}
    return {"lhs": lhs, "global_scale": np.float32(EDGE_GLOBAL if glob is None else glob)}


def run(cuda: Path, name: str, inputs: dict, *, source: str | None = None, tag: str = ""):
    text = source if source is not None else (cuda / f"{name}.cu").read_text()
    return run_launcher(launcher(cuda, name), text, source_name(name) + tag, inputs,
                        modules=MODULES)


def verdict(spec: ir.Spec, cuda: Path, name: str, lhs: np.ndarray, glob: float | None = None,
            **kw):
    kernel = spec.kernel(name)
    inputs = inputs_of(kernel, lhs, glob)
    q, s = run(cuda, name, inputs, **kw)
    return compare((q, s), reference(kernel, **inputs), kernel, k=lhs.shape[1]), q, s


def check(spec: ir.Spec, cuda: Path, name: str, lhs: np.ndarray, glob: float | None = None):
    result, q, s = verdict(spec, cuda, name, lhs, glob)
    assert result.passed, f"{name} {lhs.shape}:\n{result.detail}"
    return q, s


@pytest.mark.parametrize("name", NAMES)
def test_matches_reference_bit_for_bit(built, name):
    """Whole groups, a partial last group, m = 1, a row narrower than one
    group, and an even k that is not a multiple of the 16-byte slice (the
    unaligned entry, pairs of elements)."""
    spec, cuda = built
    kernel = spec.kernel(name)
    p = cuda_quantize.plan(kernel, spec)
    g, vec = p.group, p.entries[0].vec
    mod = launcher(cuda, name)
    entries = set()
    for m, k in [(37, 3 * g), (1, 2 * g + vec), (3, vec), (2, 2 * g + 2), (1, 6)]:
        inputs = random_inputs(kernel, m=m, n=k, k=k, rng=np.random.default_rng([m, k]))
        lhs = inputs["lhs"]
        entries.add(mod.launches(mod.validate(**inputs))[0].entry)
        q, s = check(spec, cuda, name, lhs, inputs.get("global_scale"))
        packed = kernel.out is ir.DType.FP4
        assert q.shape == (m, k // 2 if packed else k) and s.shape == (m, -(-k // g))
        assert q.dtype == (np.uint8 if packed else np.dtype(kernel.out.numpy_name))
    assert entries == {e.name for e in p.entries}


@given(m=st.integers(1, 40), k=st.integers(1, 300).map(lambda i: 2 * i))
def test_random_shapes(built, m, k):
    spec, cuda = built
    for name in ("mxfp4_quant", "nvfp4_quant", "nvfp4_global_quant"):
        kernel = spec.kernel(name)
        inputs = random_inputs(kernel, m=m, n=k, k=k, rng=np.random.default_rng([m, k]))
        check(spec, cuda, name, inputs["lhs"], inputs.get("global_scale"))


@pytest.mark.parametrize("name", NAMES)
def test_edge_rows(built, name):
    """Amaxes at powers of two (and ue4m3 values and ties) and one ulp
    either side; elements on the element format's ties times the scale and
    past its largest value; an all-zero row; a partial last group."""
    spec, cuda = built
    kernel = spec.kernel(name)
    g = kernel.out_scale.block_k
    glob = EDGE_GLOBAL if kernel.out_scale.global_scale else 1.0
    for k in (4 * g, 2 * g + 6):
        check(spec, cuda, name, edge_rows(kernel, k, np.random.default_rng(k), glob))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_global_scales(built):
    """NVFP4 with global scales of 24 significant bits at the ue4m3 ties
    (decided by the exact comparisons alone), and global scales that are not
    positive finite numbers: every scale NaN, q = +0."""
    spec, cuda = built
    name = "nvfp4_global_quant"
    kernel = spec.kernel(name)
    rng = np.random.default_rng(12)
    for glob in (float(np.float32(rng.uniform(0.01, 100.0))) for _ in range(3)):
        check(spec, cuda, name, edge_rows(kernel, 48, rng, glob), glob)
    lhs = edge_rows(kernel, 32, rng, 1.0)
    for bad in (0.0, -2.0, np.inf, np.nan):
        q, s = check(spec, cuda, name, lhs, bad)
        assert (s == 0x7F).all() and (q == 0).all()
    mod = launcher(cuda, name)
    with pytest.raises(ValueError, match="global_scale must have 0 dims"):
        mod.validate(lhs=lhs, global_scale=np.ones(2, np.float32))


def special_groups(kernel: ir.Kernel) -> np.ndarray:
    """Zero, non-finite and subnormal groups, powers of two, the input's
    largest values, negative zeros."""
    dtype = NUMPY_INPUT[kernel.lhs.dtype]
    g = kernel.out_scale.block_k
    rng = np.random.default_rng(g)
    x = rng.standard_normal((7, 3 * g)) * 4
    x[0] = 0.0  # amax 0: OCP byte 0, a zero ue4m3 scale
    x[0, ::2] = -0.0
    x[1, 2] = np.inf
    x[1, g + 3] = np.nan
    x[2, 2 * g:] = -np.inf
    x[2, 5] = np.nan
    tiny = float(np.finfo(dtype).smallest_subnormal)
    x[3, :g] = tiny * np.arange(1, g + 1)  # subnormal inputs: exact on CUDA
    x[3, g:2 * g] = -tiny
    x[4, :g] = 2.0 ** np.arange(-g // 2, g - g // 2)
    x[5, :g] = float(np.finfo(dtype).max) * (-1.0) ** np.arange(g)
    x[6, g:] = 1e-30  # tiny next to nothing larger
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("name", NAMES)
def test_zero_nonfinite_and_subnormal_groups(built, name):
    """A group holding inf or NaN: NaN scale (e8m0 0xFF, ue4m3 0x7F) and
    NaN q (FP8) or +0 (fp4); the rest of the row as if it were not there."""
    spec, cuda = built
    kernel = spec.kernel(name)
    _, s = check(spec, cuda, name, special_groups(kernel), EDGE_GLOBAL)
    nan_byte = 0x7F if kernel.out_scale.dtype is ir.DType.UE4M3 else 0xFF
    assert [s[r, j] == nan_byte for r, j in ((1, 0), (1, 1), (1, 2), (2, 0), (2, 2))] == [
        True, True, False, True, True]


def _planted(cuda: Path, name: str, old: str, new: str) -> str:
    text = (cuda / f"{name}.cu").read_text()
    assert old in text, old
    return text.replace(old, new)


PLANTED = [
    ("ties away from even", "mxfp4_quant", "(a >= 0.75f * unit)", "(a > 0.75f * unit)"),
    ("ties away from even", "nvfp4_quant", "(a >= 3.5f * unit)", "(a > 3.5f * unit)"),
    ("the OCP exponent one low", "mxfp8_quant", "field > kEmax ? field - kEmax : 0u",
     "field > kEmax + 1u ? field - kEmax - 1u : 0u"),
    ("a truncated ue4m3 scale", "nvfp4_quant", "__fdiv_rn(amax, kFp4Max)",
     "__fdiv_rn(amax, kFp4Max) * 0.9999f"),
    ("swapped nibbles", "mxfp4_quant", "c[0] | (c[1] << 4)", "c[1] | (c[0] << 4)"),
    ("a signed zero in a NaN group", "nvfp4_bf16_quant", "c[h] = nan ? 0u : sign |",
     "c[h] = nan ? sign : sign |"),
    ("x / s through an f32 quotient", "nvfp4_quant",
     "e2m1_magnitude(fabsf(v[e + h]), unit)", "e2m1_magnitude(fabsf(v[e + h]) * (1.0f / unit), 1.0f)"),
    ("the global scale left out of the block scale", "nvfp4_global_quant",
     "ue4m3_code(amax, glob)", "ue4m3_code(amax, 1.0f)"),
    ("the global scale left out of q", "nvfp4_global_quant",
     "e2m1_magnitude_scaled(fabsf(v[e + h]), unit, g)",
     "e2m1_magnitude_scaled(fabsf(v[e + h]), unit, 1.0f)"),
    ("ties decided by the rounded product", "nvfp4_global_quant",
     "const float err = fmaf(c, g, -p);", "const float err = 0.0f;"),
]


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("what,name,old,new", PLANTED, ids=[f"{p[0]}-{p[1]}" for p in PLANTED])
def test_planted_bugs_fail(built, what, name, old, new):
    spec, cuda = built
    kernel = spec.kernel(name)
    bug = _planted(cuda, name, old, new)
    g = kernel.out_scale.block_k
    tag = "." + what.replace(" ", "_")
    glob = EDGE_GLOBAL if kernel.out_scale.global_scale else 1.0
    passed = [verdict(spec, cuda, name, lhs, source=bug, tag=tag)[0].passed
              for lhs in (edge_rows(kernel, 3 * g, np.random.default_rng(1), glob),
                          special_groups(kernel))]
    assert not all(passed), what


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_compiles_without_spills(built):
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


def test_launcher_contract(built):
    spec, cuda = built
    mod = launcher(cuda, "nvfp4_quant")
    lhs = np.ones((3, 200), np.float32)
    assert mod.validate(lhs=lhs) == {"m": 3, "k": 200, "groups": 13}
    assert mod.output_shapes(mod.validate(lhs=lhs)) == {"out": (3, 100), "out_scale": (3, 13)}
    with pytest.raises(ValueError, match=r"k must be even: out is fp4, packed two per byte"):
        mod.validate(lhs=np.ones((3, 201), np.float32))
    with pytest.raises(ValueError, match=r"out must have shape \[3, 100\]"):
        mod.validate(lhs=lhs, out=np.zeros((3, 200), np.uint8))
    lines = cuda_quantize.spec_lines(spec.kernel("mxfp4_quant"))
    assert "out       fp4 packed [m, k / 2] (two e2m1 values per byte, max 6)" in lines
    assert any(line.endswith("round=floor (OCP MX)") for line in lines)
