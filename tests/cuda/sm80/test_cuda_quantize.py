"""The CUDA per-token-group FP8 quantize kind (gemmgen/backends/cuda/quantize.py).

Four kernels cover the paths: bf16 -> e4m3 with e8m0 scales and G = 128
(16 lanes per group, 16-byte loads), f32 -> e5m2 with f32 scales and
G = 64, f16 -> e5m2 with e8m0 scales and G = 32, and f16 -> e4m3 with
G = 1100 (not a multiple of 8: only the one-element-per-load entry, and too
long to keep in registers, so read twice). Each runs on the CPU emulator
against the reference, with the scales' bits compared to reference_output
(e8m0 bytes, and f32 the correctly rounded quotient), including partial
last groups, rows narrower than one group, odd k, shapes Hypothesis draws,
all-zero groups, amax values exactly at and one ulp either side of the
power-of-two boundaries, and groups holding inf or NaN (NaN scale, NaN q);
planted bugs (reciprocal multiply, fmaxf, a clamped 254) must fail; every
kernel compiles without spills for every arch; and its launcher rejects bad
calls.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemmgen import ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import quantize as cuda_quantize
from gemmgen.reference import compare, random_inputs, reference, reference_output
from gemmgen.harness import nvcc
from gemmgen.harness.toolchain import find_nvcc
from gemmgen.harness.verify_cuda import run_launcher

from cuda_helpers import Launchers, build_emulators, render_cuda

SPEC = """\
target cuda {
  archs sm_80 sm_89 sm_90a
}

# DeepGEMM / SGLang activation quantization: 1 x 128 groups, MX scales.
kernel quant_e8m0 {
  op quantize
  lhs bf16 [m, k]
  out e4m3
  out_scale per_token_group k=128 e8m0
  backends cuda
}

kernel quant_f32_e5m2 {
  op quantize
  lhs f32 [m, k]
  out e5m2
  out_scale per_token_group k=64 f32
  backends cuda
}

# e5m2 with e8m0 scales, f16 input, small groups.
kernel quant_e8m0_e5m2 {
  op quantize
  lhs f16 [m, k]
  out e5m2
  out_scale per_token_group k=32 e8m0
  backends cuda
}

kernel quant_long_groups {
  op quantize
  lhs f16 [m, k]
  out e4m3
  out_scale per_token_group k=1100 f32
  threads 64
  backends cuda
}
"""

NAMES = ("quant_e8m0", "quant_f32_e5m2", "quant_e8m0_e5m2", "quant_long_groups")
ARCHS = ("sm_80", "sm_89", "sm_90a")
MODULES: dict = {}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[ir.Spec, Path]:
    spec, cuda, files = render_cuda(tmp_path_factory.mktemp("quantize"), "quantize", SPEC)
    build_emulators(cuda, NAMES, source_name, MODULES)
    return spec, cuda


def source_name(name: str) -> str:
    return f"quantize/cuda/{name}.cu"


launcher = Launchers("test_cuda_quant")


def run(cuda: Path, name: str, lhs: np.ndarray, *, source: str | None = None, tag: str = "",
        ftz: bool = False):
    """The kernel's (q, scale) on the emulator; `source` replaces the
    generated .cu (a planted bug), built as its own module."""
    text = source if source is not None else (cuda / f"{name}.cu").read_text()
    return run_launcher(launcher(cuda, name), text, source_name(name) + tag, {"lhs": lhs},
                        modules=MODULES, ftz=ftz)


def verdict(spec: ir.Spec, cuda: Path, name: str, lhs: np.ndarray, **kw):
    """compare(), and for every scale dtype the scales' bits against
    reference_output: e8m0 bytes, f32 the correctly rounded quotient."""
    kernel = spec.kernel(name)
    q, s = run(cuda, name, lhs, **kw)
    result = compare((q, s), reference(kernel, lhs=lhs), kernel, k=lhs.shape[1])
    _, s_ref = reference_output(kernel, lhs=lhs)
    same_bits = np.array_equal(np.asarray(s).view(np.uint8), np.asarray(s_ref).view(np.uint8))
    return result, same_bits, q, s


def check(spec: ir.Spec, cuda: Path, name: str, lhs: np.ndarray, **kw
          ) -> tuple[np.ndarray, np.ndarray]:
    result, same_bits, q, s = verdict(spec, cuda, name, lhs, **kw)
    assert result.passed, f"{name} {lhs.shape}:\n{result.detail}"
    assert same_bits, f"{name}: scales differ from reference_output's bits"
    return q, s


def shapes(p: cuda_quantize.QuantPlan) -> list[tuple[int, int]]:
    """(m, k): whole groups, a partial last group, a row narrower than one
    group, and k that is not a multiple of the 16-byte slice (odd)."""
    g, vec = p.group, p.entries[0].vec
    return [(37, 3 * g), (5, 2 * g + vec * (g // vec // 2 or 1)), (3, vec), (2, 2 * g + 3)]


@pytest.mark.parametrize("name", NAMES)
def test_matches_reference_on_emulator(built, name):
    spec, cuda = built
    kernel = spec.kernel(name)
    p = cuda_quantize.plan(kernel, spec)
    mod = launcher(cuda, name)
    entries = set()
    for m, k in shapes(p):
        lhs = random_inputs(kernel, m=m, n=k, k=k, rng=np.random.default_rng([m, k]))["lhs"]
        entries.add(mod.launches(mod.validate(lhs=lhs))[0].entry)
        q, s = check(spec, cuda, name, lhs)
        assert q.dtype == np.dtype(kernel.out.numpy_name) and q.shape == (m, k)
        assert s.shape == (m, -(-k // p.group))
    assert entries == {e.name for e in p.entries}


@given(m=st.integers(1, 40), k=st.one_of(st.integers(1, 80).map(lambda i: 8 * i),
                                         st.integers(1, 700)))
def test_random_shapes_on_emulator(built, m, k):
    spec, cuda = built
    kernel = spec.kernel("quant_e8m0")
    lhs = random_inputs(kernel, m=m, n=k, k=k, rng=np.random.default_rng([m, k]))["lhs"]
    check(spec, cuda, "quant_e8m0", lhs)


@pytest.mark.parametrize("name", NAMES)
def test_all_zero_groups_get_the_floor_scale(built, name):
    spec, cuda = built
    kernel = spec.kernel(name)
    g = kernel.out_scale.block_k
    k = 2 * g + 8
    lhs = random_inputs(kernel, m=4, n=k, k=k, rng=np.random.default_rng(7))["lhs"]
    lhs[1] = 0  # a zero row
    lhs[2, g:2 * g] = 0  # a zero group inside a row
    lhs[3, 2 * g:] = 0  # a zero partial last group
    q, s = check(spec, cuda, name, lhs)
    assert not np.any(q.astype(np.float32)[1])
    floor = reference(kernel, lhs=np.zeros((1, g), lhs.dtype))[1][0, 0]
    scales = s.astype(np.float64) if s.dtype != np.uint8 else np.exp2(s.astype(np.float64) - 127)
    assert scales[1, 0] == scales[2, 1] == scales[3, 2] == pytest.approx(floor, rel=2**-22)


def test_e8m0_scales_round_up_exactly_at_power_of_two_boundaries(built):
    """amax = 448 * 2^e gives scale 2^e exactly; the next bf16 above it gives
    2^(e+1); one below keeps 2^e. The reference rounds the same way."""
    spec, cuda = built
    bf16 = ml_dtypes.bfloat16
    rows = []
    for e in (-20, -3, 0, 1, 7, 40):
        at = 448.0 * 2.0**e
        for amax in (at, float(np.nextafter(bf16(at), bf16(np.inf))),
                     float(np.nextafter(bf16(at), bf16(0)))):
            row = np.full(256, amax / 3, np.float64)
            row[5] = -amax  # the group's amax, negative
            row[128 + 77] = amax  # the second group's
            rows.append(row)
    lhs = np.asarray(rows).astype(bf16)
    _, s = check(spec, cuda, "quant_e8m0", lhs)
    want = []
    for e in (-20, -3, 0, 1, 7, 40):
        want += [127 + e, 128 + e, 127 + e]
    np.testing.assert_array_equal(s[:, 0], want)
    np.testing.assert_array_equal(s[:, 1], want)


def test_saturation_and_tiny_values(built):
    """Values far apart in one group: the largest maps to +-fp8_max, tiny
    ones to zero or subnormals, as the reference casts them."""
    spec, cuda = built
    lhs = np.zeros((2, 64), np.float32)
    lhs[0, :4] = [1e30, -1e30, 1e-30, 3.0]
    lhs[1, :3] = [-7.5e-7, 2.5e-39, 1.0]  # an f32 subnormal input
    q, _ = check(spec, cuda, "quant_f32_e5m2", lhs)
    assert q.astype(np.float32)[0, 0] == 57344.0 and q.astype(np.float32)[0, 1] == -57344.0


# ---------------------------------------------------------------------------
# The edges of docs/semantics.md, "quantize": bit-exact scales, non-finite
# groups.


def boundary_rows(dtype, fp8_max: float, exponents, group: int, k: int) -> np.ndarray:
    """One row per amax: exactly fp8_max * 2^e, one input ulp above and below,
    and exact powers of two; the amax sits in each group (negated in odd
    groups), the other elements a third of it."""
    amaxes = []
    for e in exponents:
        at = dtype(fp8_max * 2.0**e)
        amaxes += [at, np.nextafter(at, dtype(np.inf)), np.nextafter(at, dtype(0)), dtype(2.0**e)]
    rows = []
    for amax in amaxes:
        row = np.full(k, float(amax) / 3)
        for g0 in range(0, k, group):
            row[min(g0 + 5, k - 1)] = float(amax) * (-1 if (g0 // group) % 2 else 1)
        rows.append(row)
    return np.asarray(rows).astype(dtype)


@pytest.mark.parametrize("name", NAMES)
def test_scales_are_bit_exact_at_boundaries_and_on_random_values(built, name):
    """f32 scales are RNE(amax / fp8_max) (one correctly rounded division),
    e8m0 scales 2^ceil(log2(amax / fp8_max)): the bits of reference_output,
    at amax = fp8_max * 2^e and one input ulp either side, at powers of two,
    and on random magnitudes (2^-60 .. 2^60 times normal values)."""
    spec, cuda = built
    kernel = spec.kernel(name)
    dtype = {ir.DType.BF16: ml_dtypes.bfloat16, ir.DType.F16: np.float16,
             ir.DType.F32: np.float32}[kernel.lhs.dtype]
    group, fp8_max = kernel.out_scale.block_k, kernel.out.max_finite
    top = 100 if dtype is not np.float16 else 0  # f16 stops at 65504
    lo = -20 if dtype is not np.float16 else -25
    exps = [e for e in range(lo, top, 3) if fp8_max * 2.0**e < float(np.finfo(dtype).max)]
    k = 2 * group + 3
    rows = boundary_rows(dtype, fp8_max, exps, group, k)
    rng = np.random.default_rng(len(name))
    span = 60 if dtype is not np.float16 else 8
    noise = rng.standard_normal((40, k)) * np.exp2(rng.uniform(-span, span, (40, 1)))
    lhs = np.concatenate([rows, noise.astype(dtype)])
    check(spec, cuda, name, lhs)


def nonfinite_rows(dtype, group: int) -> np.ndarray:
    """Rows of three groups and a partial fourth: inf, -inf or NaN in some
    groups (first, middle, last element of a group; the partial group too),
    finite groups around them."""
    k = 3 * group + group // 2
    rng = np.random.default_rng(group)
    lhs = (rng.standard_normal((5, k)) * 3).astype(dtype)
    lhs[0, 0] = np.inf
    lhs[1, group + group // 2] = -np.inf
    lhs[2, 2 * group - 1] = np.nan
    lhs[3, k - 1] = np.nan  # the partial last group
    lhs[3, 5] = np.inf
    lhs[4, 1] = np.nan  # NaN and inf in one group
    lhs[4, 2] = -np.inf
    return lhs


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("name", NAMES)
def test_nonfinite_groups_get_nan_scales_and_nan_q(built, name):
    """A group holding inf or NaN: scale NaN (e8m0 byte 255, not a clamped
    254) and every q of the group NaN; the other groups of the row as if the
    values were not there."""
    spec, cuda = built
    kernel = spec.kernel(name)
    dtype = {ir.DType.BF16: ml_dtypes.bfloat16, ir.DType.F16: np.float16,
             ir.DType.F32: np.float32}[kernel.lhs.dtype]
    group = kernel.out_scale.block_k
    lhs = nonfinite_rows(dtype, group)
    q, s = check(spec, cuda, name, lhs)
    bad = {(0, 0), (1, 1), (2, 1), (3, 0), (3, 3), (4, 0)}
    for r in range(lhs.shape[0]):
        for g in range(s.shape[1]):
            scale = s[r, g]
            nan_scale = scale == 255 if s.dtype == np.uint8 else np.isnan(scale)
            assert nan_scale == ((r, g) in bad), (r, g, scale)
            cols = q[r, g * group:(g + 1) * group].astype(np.float32)
            assert np.isnan(cols).all() == ((r, g) in bad) and (np.isnan(cols).any() == ((r, g) in bad))


def _planted(cuda: Path, name: str, old: str, new: str) -> str:
    text = (cuda / f"{name}.cu").read_text()
    assert old in text, old
    return text.replace(old, new)


def test_planted_bugs_fail_the_edge_tests(built):
    """The bugs these tests are for: a reciprocal multiply for f32 scales,
    fmaxf (which drops NaN) for amax, an inf group's scale clamped to a
    finite one."""
    spec, cuda = built
    # f32: amax * (1 / fp8_max) instead of the correctly rounded quotient.
    bug = _planted(cuda, "quant_f32_e5m2", "__fdiv_rn(floored, kFp8Max)", "floored * (1.0f / kFp8Max)")
    rng = np.random.default_rng(1)
    lhs = (rng.standard_normal((64, 128)) * np.exp2(rng.uniform(-30, 30, (64, 1)))).astype(np.float32)
    result, same_bits, _, _ = verdict(spec, cuda, "quant_f32_e5m2", lhs, source=bug, tag=".rcp")
    assert not (result.passed and same_bits)
    # fmaxf: a NaN element no longer makes its group's amax NaN.
    for name in ("quant_e8m0", "quant_f32_e5m2"):
        bug = _planted(cuda, name, "amax = nan_max(amax, fabsf(", "amax = fmaxf(amax, fabsf(")
        kernel = spec.kernel(name)
        dtype = ml_dtypes.bfloat16 if kernel.lhs.dtype is ir.DType.BF16 else np.float32
        lhs = nonfinite_rows(dtype, kernel.out_scale.block_k)
        result, same_bits, _, _ = verdict(spec, cuda, name, lhs, source=bug, tag=".fmaxf")
        assert not (result.passed and same_bits), name
    # e8m0: an infinite amax clamped to byte 254, as before.
    bug = _planted(cuda, "quant_e8m0", "gg::e8m0_round_up_ratio(floored, kFp8Max)",
                   "(floored > 3.4e38f ? (unsigned char)254 : gg::e8m0_round_up_ratio(floored, kFp8Max))")
    lhs = nonfinite_rows(ml_dtypes.bfloat16, 128)
    result, same_bits, _, _ = verdict(spec, cuda, "quant_e8m0", lhs, source=bug, tag=".clamp")
    assert not (result.passed and same_bits)


# ---------------------------------------------------------------------------
# nvcc


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
        if name == "quant_e8m0":
            sass = nvcc.sass_summary(result.cubin)["quant_e8m0"]
            assert sass.ldg_128 > 0 and sass.count("STG", "64") > 0, (arch, sass.opcodes)
            if arch != "sm_80":  # FP8 conversion instructions from sm_89
                assert sass.count("F2FP") > 0, (arch, sass.opcodes)


# ---------------------------------------------------------------------------
# Launcher validation, plan, diagnostics


def test_launcher_rejects_bad_calls(built):
    spec, cuda = built
    mod = launcher(cuda, "quant_e8m0")
    lhs = np.ones((3, 200), ml_dtypes.bfloat16)
    assert mod.validate(lhs=lhs) == {"m": 3, "k": 200, "groups": 2}
    assert mod.output_shapes(mod.validate(lhs=lhs)) == {"out": (3, 200), "out_scale": (3, 2)}
    with pytest.raises(ValueError, match=r"lhs must be bfloat16, got float32"):
        mod.validate(lhs=np.ones((3, 200), np.float32))
    with pytest.raises(ValueError, match=r"lhs must have 2 dims"):
        mod.validate(lhs=np.ones((200,), ml_dtypes.bfloat16))
    with pytest.raises(ValueError, match=r"k positive"):
        mod.validate(lhs=np.ones((3, 0), ml_dtypes.bfloat16))
    with pytest.raises(ValueError, match=r"out_scale must have shape \[3, 2\]"):
        mod.validate(lhs=lhs, out_scale=np.zeros((3, 1), np.uint8))
    with pytest.raises(ValueError, match=r"out_scale must be uint8"):
        mod.validate(lhs=lhs, out_scale=np.zeros((3, 2), np.float32))
    raw = np.zeros(3 * 200 * 2 + 16, np.uint8)
    with pytest.raises(ValueError, match=r"lhs must be 16-byte aligned"):
        mod.validate(lhs=raw[2:2 + 1200].view(ml_dtypes.bfloat16).reshape(3, 200))
    assert mod.launches(mod.validate(lhs=np.ones((0, 200), ml_dtypes.bfloat16))) == []


def test_plan_arithmetic(built):
    spec, _ = built
    e8m0 = cuda_quantize.plan(spec.kernel("quant_e8m0"), spec)
    fast = e8m0.entries[0]
    assert (fast.vec, fast.lanes, fast.groups_per_warp, fast.chunks, fast.cached) == \
        (8, 16, 2, 1, True)
    assert fast.items_per_block == 16 and e8m0.entries[1].lanes == 32
    f32 = cuda_quantize.plan(spec.kernel("quant_f32_e5m2"), spec)
    assert (f32.entries[0].vec, f32.entries[0].lanes, f32.fp8_max) == (4, 16, 57344.0)
    long = cuda_quantize.plan(spec.kernel("quant_long_groups"), spec)
    assert len(long.entries) == 1  # 1100 is not a multiple of 8: no 16-byte path
    only = long.entries[0]
    assert (only.vec, only.lanes, only.chunks, only.cached, only.items_per_block) == \
        (1, 32, 35, False, 2)
    lp = cuda_backend.plan(spec.kernel("quant_e8m0"), spec)
    assert [v.when and v.when.py for v in lp.variants] == ["k % 8 == 0", None]
    assert [e.py for e in lp.lut_dims] == ["m", "0", "k"]
    # The blocks fold over grid x and y (docs/cuda.md, "Launch limits").
    assert [tuple(g.py for g in s.grid) for v in lp.variants for s in v.steps] == [
        (f"gg_min(gg_cdiv(m * groups, {b}), 2147483647)",
         f"gg_cdiv(gg_cdiv(m * groups, {b}), 2147483647)", "1") for b in (16, 8)]


def test_diagnose_guards_what_validate_lets_through(built):
    """validate admits f32 / bf16 / f16 inputs and f32 / e8m0 scales only; the
    kind still names anything else instead of emitting it."""
    spec, _ = built
    kernel = spec.kernel("quant_e8m0")
    assert cuda_quantize.diagnose(kernel, spec) == []
    odd = dataclasses.replace(kernel, lhs=ir.Operand(ir.DType.INT8),
                              out_scale=dataclasses.replace(kernel.out_scale, dtype=ir.DType.BF16))
    messages = [d.message for d in cuda_quantize.diagnose(odd, spec)]
    assert messages == [
        "kernel 'quant_e8m0': cuda cannot emit quantize of lhs 'int8' yet: it reads bf16, f16 "
        "or f32 activations",
        "kernel 'quant_e8m0': cuda quantize writes f32 or e8m0 scales for FP8, e8m0 or ue4m3 "
        "(k=16) scales for packed fp4"]
