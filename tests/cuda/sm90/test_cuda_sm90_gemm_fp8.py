"""The Hopper tile GEMM body (runtime/cuda/gg_gemm_sm90.cuh) on FP8 with
hand-written tiles (tests/cuda_src/sm90_gemm_fp8.cu) on the CPU emulator
against NumPy: e4m3 with per-token x per-channel f32 scales, e5m2 with a
per-tensor f32 and a per-channel e8m0 scale plus bias and gelu, and grouped
e4m3 with zero-size groups, group_offset and existing_out; at m = 1, ragged
m, n and k, k below one 128-wide K tile, persistent grids smaller than the
tile count. Planted bugs in the FP32 promotion. Then nvcc for sm_90a: no
spills and FP8 HGMMA fed by UTMALDG, no HMMA."""

import hashlib

import ml_dtypes
import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC

from gemmgen.cache import cache_dir
from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError, EmuModule
from gemmgen.runtime import RUNTIME_INCLUDE_DIR

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
E5M2 = ml_dtypes.float8_e5m2
SOURCE = CUDA_SRC / "sm90_gemm_fp8.cu"


@pytest.fixture(scope="module")
def module() -> EmuModule:
    return EmuModule.from_file(SOURCE)


def run(module, case, dims, schedule="run-ahead", **arrays):
    r = module.run_host(
        {"case": case.encode(), "dims": np.array(dims, np.int32), **arrays}, schedule=schedule
    )
    assert r.status == 0, r.log
    return r.outputs["out"]


def fp8(rng, shape, dtype):
    """Random FP8 values spread over several binades (not only near 1)."""
    return (rng.standard_normal(shape) * 2.0 ** rng.integers(-3, 4, shape)).astype(dtype)


def product(a, b):
    return a.astype(np.float64) @ np.swapaxes(b.astype(np.float64), -1, -2)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


# (m, n, k, grid): m = 1, ragged everything, k below one K tile of 128, more
# tiles than blocks (the ring's phase carries across tiles).
SHAPES = [(1, 128, 128, 1), (130, 72, 272, 2), (200, 136, 16, 1),
          pytest.param(257, 136, 144, 3, marks=pytest.mark.slow)]


@pytest.mark.parametrize("m,n,k,grid", SHAPES)
def test_e4m3_per_token_per_channel(module, m, n, k, grid):
    rng = np.random.default_rng(m * 7 + k)
    a, b = fp8(rng, (m, k), E4M3), fp8(rng, (n, k), E4M3)
    ls = rng.uniform(0.5, 2.0, m).astype(np.float32)
    rs = rng.uniform(0.01, 0.1, n).astype(np.float32)
    out = run(module, "token_channel", [m, n, k, grid], a=a, b=b, lhs_scale=ls, rhs_scale=rs)
    out = np.frombuffer(out, BF16).reshape(m, n).astype(np.float64)
    expected = product(a, b) * ls[:, None] * rs[None, :]
    # One bf16 rounding of an f32 sum (2^-8 relative), plus f32 accumulation.
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T * ls[:, None] * rs
    np.testing.assert_array_less(np.abs(out - expected), 2**-8 * np.abs(expected) + 1e-6 * scale
                                 + 1e-30)


@pytest.mark.parametrize("schedule", ["run-ahead", pytest.param("reverse", marks=pytest.mark.slow)])
def test_e5m2_per_tensor_e8m0_bias_gelu(module, schedule):
    m, n, k = 140, 100, 160
    rng = np.random.default_rng(11)
    a, b = fp8(rng, (m, k), E5M2), fp8(rng, (n, k), E5M2)
    ls = np.array([0.03125 * 1.5], np.float32)
    rs = rng.integers(120, 131, n).astype(np.uint8)  # e8m0: 2^(byte - 127)
    bias = rng.standard_normal(n).astype(np.float32)
    out = run(module, "e5m2_e8m0", [m, n, k, 2], schedule, a=a, b=b, lhs_scale=ls, rhs_scale=rs,
              bias=bias)
    out = np.frombuffer(out, np.float32).reshape(m, n).astype(np.float64)
    pre = product(a, b) * float(ls[0]) * np.exp2(rs.astype(np.float64) - 127) + bias
    np.testing.assert_allclose(out, gelu_tanh(pre), rtol=2e-5, atol=2e-5)


def grouped_reference(a, b, ls, rs, sizes, group_offset, g, existing):
    m = a.shape[0]
    out = existing.astype(np.float64).copy()
    starts = np.minimum(np.concatenate([[0], np.cumsum(np.maximum(sizes, 0))]), m)
    for gl in range(g):
        grp = group_offset + gl
        if 0 <= grp < len(sizes):
            lo, hi = starts[grp], starts[grp + 1]
            out[lo:hi] = product(a[lo:hi], b[gl]) * ls[lo:hi, None] * rs[gl][None, :]
    return out


# (m, n, k, sizes, group_offset, g, existing, grid)
GROUPED = [
    pytest.param(300, 72, 144, [40, 0, 130, 0, 130], 0, 5, False, 3,  # zero-size groups
                 marks=pytest.mark.slow),
    pytest.param(260, 128, 256, [60, 100, 0, 100], 1, 2, True, 2,  # a shard: groups 1, 2 of 4
                 marks=pytest.mark.slow),
    (190, 64, 128, [60, 100, 0, 30], 1, 2, True, 2),  # a shard, sums < m
    (64, 64, 128, [0, 0], 0, 2, False, 1),  # every group empty
]


@pytest.mark.parametrize("m,n,k,sizes,group_offset,g,existing,grid", GROUPED)
def test_grouped_e4m3(module, m, n, k, sizes, group_offset, g, existing, grid):
    rng = np.random.default_rng(m + n)
    a, b = fp8(rng, (m, k), E4M3), fp8(rng, (g, n, k), E4M3)
    ls = rng.uniform(0.5, 2.0, m).astype(np.float32)
    rs = rng.uniform(0.01, 0.1, (g, n)).astype(np.float32)
    before = (rng.standard_normal((m, n)).astype(BF16) if existing
              else np.zeros((m, n), BF16))
    arrays = {"a": a, "b": b, "lhs_scale": ls, "rhs_scale": rs,
              "group_sizes": np.array(sizes, np.int32)}
    if existing:
        arrays["existing"] = before
    dims = [m, n, k, grid, g, len(sizes), group_offset, int(existing)]
    out = np.frombuffer(run(module, "grouped", dims, **arrays), BF16).reshape(m, n)
    expected = grouped_reference(a, b, ls, rs, np.array(sizes), group_offset, g, before)
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=2**-7, atol=1e-6)


def block_product(a, b, ls, rs):
    """sum over K blocks of 128: (a_kb @ b_kb^T) * ls[:, kb] * rs[col // 128, kb]."""
    m, k = a.shape
    n = b.shape[0]
    out = np.zeros((m, n))
    for kb in range(-(-k // 128)):
        part = product(a[:, 128 * kb:128 * (kb + 1)], b[:, 128 * kb:128 * (kb + 1)])
        out += part * ls[:, kb][:, None] * np.repeat(rs[:, kb], 128)[:n][None, :]
    return out


@pytest.mark.parametrize("m,n,k,grid", [(1, 128, 128, 1), (70, 200, 272, 1),
                                        pytest.param(130, 200, 272, 2, marks=pytest.mark.slow)])
def test_block_scaled_f32(module, m, n, k, grid):
    """DeepSeek-style W8A8: 1 x 128 activation scales, 128 x 128 weight
    scales, k ragged (the last K block is partial)."""
    rng = np.random.default_rng(m + k)
    a, b = fp8(rng, (m, k), E4M3), fp8(rng, (n, k), E4M3)
    kb, nb = -(-k // 128), -(-n // 128)
    ls = rng.uniform(0.01, 1.0, (m, kb)).astype(np.float32)
    rs = rng.uniform(0.001, 0.1, (nb, kb)).astype(np.float32)
    out = run(module, "block", [m, n, k, grid], a=a, b=b, lhs_scale=ls, rhs_scale=rs)
    out = np.frombuffer(out, BF16).reshape(m, n).astype(np.float64)
    expected = block_product(a, b, ls.astype(np.float64), rs.astype(np.float64))
    bound = block_product(np.abs(a.astype(np.float64)).astype(np.float64),
                          np.abs(b.astype(np.float64)), ls.astype(np.float64),
                          rs.astype(np.float64))
    np.testing.assert_array_less(np.abs(out - expected), 2**-8 * np.abs(expected) + 1e-6 * bound
                                 + 1e-30)


def test_block_scaled_e8m0_exact_when_products_leave_f32(module):
    """e8m0 scales whose products lie below f32's normal range for some rows
    (2^-125 x 2^-9): the threads holding those rows take the exact path
    (each partial sum scaled by gg::mul_scales_out_of_line), the others the
    fast one; both must give the reference."""
    m, n, k = 70, 136, 272
    rng = np.random.default_rng(7)
    a, b = fp8(rng, (m, k), E4M3), fp8(rng, (n, k), E4M3)
    kb, nb = 3, 2
    lsb = rng.choice(np.array([2, 3, 120, 130], np.uint8), (m, kb))
    rsb = rng.choice(np.array([118, 125, 136], np.uint8), (nb, kb))
    out = run(module, "block_e8m0", [m, n, k, 1], a=a, b=b, lhs_scale=lsb, rhs_scale=rsb)
    out = np.frombuffer(out, BF16).reshape(m, n).astype(np.float64)
    ls, rs = np.exp2(lsb.astype(np.float64) - 127), np.exp2(rsb.astype(np.float64) - 127)
    expected = block_product(a, b, ls, rs)
    # bf16 rounding; results below 2^-126 may flush (docs/semantics.md).
    np.testing.assert_array_less(np.abs(out - expected), 2**-8 * np.abs(expected) + 2.0**-125)
    assert np.count_nonzero(lsb < 10) > 0 and np.count_nonzero(np.abs(out) > 0) > m * n // 2


def test_block_scaled_grouped_shard(module):
    m, n, k, g = 260, 128, 256, 2
    sizes, group_offset = [60, 100, 0, 100], 1
    rng = np.random.default_rng(21)
    a, b = fp8(rng, (m, k), E4M3), fp8(rng, (g, n, k), E4M3)
    ls = rng.uniform(0.01, 1.0, (m, 2)).astype(np.float32)
    rs = rng.uniform(0.001, 0.1, (g, 1, 2)).astype(np.float32)
    before = rng.standard_normal((m, n)).astype(BF16)
    dims = [m, n, k, 2, g, len(sizes), group_offset, 1]
    out = run(module, "block_grouped", dims, a=a, b=b, lhs_scale=ls, rhs_scale=rs,
              group_sizes=np.array(sizes, np.int32), existing=before)
    out = np.frombuffer(out, BF16).reshape(m, n).astype(np.float64)
    expected = before.astype(np.float64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for gl in range(g):
        lo, hi = starts[group_offset + gl], starts[group_offset + gl + 1]
        expected[lo:hi] = block_product(a[lo:hi], b[gl], ls[lo:hi].astype(np.float64),
                                        rs[gl].astype(np.float64))
    np.testing.assert_allclose(out, expected, rtol=2**-7, atol=1e-6)


# ---------------------------------------------------------------------------
# Planted bugs in the FP8 promotion of the body (the copy mechanism of
# tests/cuda/sm90/test_cuda_sm90_gemm.py: one edit that must match exactly once, the
# namespace renamed, the source built with GG_SM90_PLANTED).

HEADER = RUNTIME_INCLUDE_DIR / "gg_gemm_sm90.cuh"
WAIT_THEN_RELEASE = "gg::wgmma_wait_group<0>();\n    gg::wgmma_fence_operand(part);\n" \
    "    gg::mbarrier_arrive(&s.empty[st]);"
PLANTED = {
    # The stage goes back to the producer before the wgmmas reading it retired.
    "release_before_retire": (
        [(WAIT_THEN_RELEASE, "gg::mbarrier_arrive(&s.empty[st]);\n    gg::wgmma_wait_group<0>();\n"
                             "    gg::wgmma_fence_operand(part);")],
        r"a TMA load overwrites shared memory .* still reads: the stage was released before "
        r"wgmma.wait_group",
    ),
    # The partial sums are read while their wgmmas may still run.
    "add_before_wait": (
        [(WAIT_THEN_RELEASE, "gg::wgmma_wait_group<1>();\n    gg::wgmma_fence_operand(part);\n"
                             "    gg::mbarrier_arrive(&s.empty[st]);")],
        r"an accumulator was read before wgmma.wait_group retired its wgmma",
    ),
}


def planted_module(edits) -> EmuModule:
    text = HEADER.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"the planted edit no longer matches gg_gemm_sm90.cuh: {old!r}"
        text = text.replace(old, new)
    text = text.replace("namespace gg::gemm::sm90 {", "namespace gg::gemm::sm90_planted {")
    folder = cache_dir() / "sm90_planted" / hashlib.sha256(text.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sm90_planted.cuh").write_text(text)
    return EmuModule.from_file(SOURCE, include_dirs=(folder,), defines={"GG_SM90_PLANTED": 1})


@pytest.mark.parametrize("bug", ["release_before_retire",
                                 pytest.param("add_before_wait", marks=pytest.mark.slow)])
def test_planted_bug_in_the_promotion_is_caught(bug):
    edits, report = PLANTED[bug]
    m, n, k = 100, 64, 640  # 5 K tiles on one block: the 4-stage ring wraps
    rng = np.random.default_rng(3)
    a, b = fp8(rng, (m, k), E4M3), fp8(rng, (n, k), E4M3)
    ones_m, ones_n = np.ones(m, np.float32), np.ones(n, np.float32)
    with pytest.raises(EmuKernelError, match=report):
        run(planted_module(edits), "token_channel", [m, n, k, 1], a=a, b=b, lhs_scale=ones_m,
            rhs_scale=ones_n)


# ---------------------------------------------------------------------------
# nvcc for sm_90a.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(
    nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed"
)
GEMMS = ["sm90_fp8_token_channel", "sm90_fp8_e5m2_e8m0", "sm90_fp8_grouped", "sm90_fp8_block",
         "sm90_fp8_block_e8m0", "sm90_fp8_block_grouped"]


@needs_nvcc
@needs_cuobjdump
def test_fp8_gemm_builds_without_spills_and_runs_fp8_hgmma_on_tma():
    result = nvcc.compile_check(SOURCE.read_text(), "sm_90a",
                                name_for_errors="tests/cuda_src/sm90_gemm_fp8.cu")
    sass = nvcc.sass_summary(result.cubin)
    for name in GEMMS:
        usage = result.kernels[name]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
        code = sass[name]
        # FP8 wgmma is QGMMA in SASS (HGMMA is the 16-bit one).
        assert code.count("QGMMA") > 0 and code.count("HGMMA") == code.count("HMMA") == 0, name
        assert code.count("UTMALDG") > 0 and code.count("USETMAXREG") == 2, name
