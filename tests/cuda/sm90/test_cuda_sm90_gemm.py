"""The Hopper tile GEMM body (runtime/cuda/gg_gemm_sm90.cuh) with hand-written
tiles (tests/cuda_src/sm90_gemm.cu) on the CPU emulator against NumPy: dense
bf16 with both rhs layouts and f16 with a bias and relu, at m = 1, ragged m, n
and k, k not a multiple of the 64-wide K tile, and persistent grids smaller
than the tile count; grouped with zero-size groups, group_offset and
existing_out. Then nvcc for sm_90a: no spills, shared memory within the
opt-in limit, and the SASS of HGMMA fed by UTMALDG with no HMMA."""

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


@pytest.fixture(scope="module")
def module() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "sm90_gemm.cu")


def run(module, case, dims, schedule="run-ahead", **arrays):
    r = module.run_host(
        {"case": case.encode(), "dims": np.array(dims, np.int32), **arrays}, schedule=schedule
    )
    assert r.status == 0, r.log
    return r.outputs["out"]


def operands(m, n, k, nk, dtype=BF16, seed=0, g=None):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(dtype)
    shape = (n, k) if nk else (k, n)
    b = rng.standard_normal(shape if g is None else (g, *shape)).astype(dtype)
    return a, b


def product(a, b, nk):
    bt = b.astype(np.float64)
    return a.astype(np.float64) @ (np.swapaxes(bt, -1, -2) if nk else bt)


# (m, n, k, grid): m = 1, ragged everything, k below and not a multiple of
# the 64-wide K tile, more tiles than blocks (the persistent loop carries the
# ring's phase across tiles).
DENSE_SHAPES = [(1, 128, 64, 1), (130, 136, 72, 2), (200, 72, 200, 1), (64, 264, 24, 3)]


@pytest.mark.parametrize("m,n,k,grid", DENSE_SHAPES)
def test_dense_rhs_nk_f32_out(module, m, n, k, grid):
    a, b = operands(m, n, k, nk=True)
    out = np.frombuffer(run(module, "dense_nk", [m, n, k, grid], a=a, b=b), np.float32).reshape(
        m, n
    )
    np.testing.assert_allclose(out, product(a, b, True), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m,n,k,grid", [(1, 64, 64, 1),
                                        pytest.param(150, 320, 136, 2, marks=pytest.mark.slow),
                                        (129, 256, 8, 1)])
def test_dense_rhs_kn_bf16_out(module, m, n, k, grid):
    a, b = operands(m, n, k, nk=False, seed=1)
    out = np.frombuffer(run(module, "dense_kn", [m, n, k, grid], a=a, b=b), BF16).reshape(m, n)
    # One bf16 rounding of an f32 sum: within 2^-8 relative, plus the f32
    # accumulation's error.
    np.testing.assert_allclose(out.astype(np.float64), product(a, b, False), rtol=2**-7, atol=1e-5)


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
def test_dense_f16_bias_relu(module, schedule):
    m, n, k = 140, 100, 96
    a, b = operands(m, n, k, nk=True, dtype=np.float16, seed=2)
    bias = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    out = np.frombuffer(
        run(module, "dense_f16", [m, n, k, 3], schedule, a=a, b=b, bias=bias), np.float16
    )
    expected = np.maximum(product(a, b, True).astype(np.float32) + bias, 0).astype(np.float16)
    np.testing.assert_allclose(
        out.reshape(m, n).astype(np.float32), expected.astype(np.float32), rtol=1e-3, atol=1e-3
    )


def grouped_reference(a, b, nk, sizes, group_offset, g, existing):
    """out = existing (or 0); rows of local group gl (group group_offset + gl
    of `sizes`, clamped to m) = a[rows] @ b[gl]."""
    m = a.shape[0]
    out = existing.astype(np.float64).copy()
    starts = np.minimum(np.concatenate([[0], np.cumsum(np.maximum(sizes, 0))]), m)
    for gl in range(g):
        grp = group_offset + gl
        if 0 <= grp < len(sizes):
            lo, hi = starts[grp], starts[grp + 1]
            out[lo:hi] = product(a[lo:hi], b[gl], nk)
    return out


# (nk, m, n, k, sizes, group_offset, g, existing, grid)
GROUPED = [
    (True, 300, 136, 72, [40, 0, 130, 0, 130], 0, 5, False, 3),  # zero-size groups
    (True, 260, 128, 64, [60, 100, 0, 100], 1, 2, True, 2),  # a shard: groups 1, 2 of 4
    (False, 200, 192, 40, [0, 150, 50], 0, 3, True, 4),  # rhs [g, k, n], f32 out
    (False, 64, 64, 64, [0, 0], 0, 2, False, 1),  # every group empty
]


@pytest.mark.parametrize("nk,m,n,k,sizes,group_offset,g,existing,grid", GROUPED)
def test_grouped(module, nk, m, n, k, sizes, group_offset, g, existing, grid):
    a, b = operands(m, n, k, nk=nk, seed=4, g=g)
    out_dtype = BF16 if nk else np.float32
    rng = np.random.default_rng(5)
    before = (
        rng.standard_normal((m, n)).astype(out_dtype) if existing else np.zeros((m, n), out_dtype)
    )
    arrays = {"a": a, "b": b, "group_sizes": np.array(sizes, np.int32)}
    if existing:
        arrays["existing"] = before
    dims = [m, n, k, grid, g, len(sizes), group_offset, int(existing)]
    out = np.frombuffer(
        run(module, "grouped_nk" if nk else "grouped_kn", dims, **arrays), out_dtype
    ).reshape(m, n)
    expected = grouped_reference(a, b, nk, np.array(sizes), group_offset, g, before)
    rtol, atol = (2**-7, 1e-5) if nk else (1e-5, 1e-4)
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------
# Planted bugs in the body itself: each case copies gg_gemm_sm90.cuh, makes
# one edit (the original text must occur exactly once, so the case follows
# the header), renames its namespace to gg::gemm::sm90_planted and builds
# sm90_gemm.cu against the copy (GG_SM90_PLANTED). The emulator must stop
# with the report named.

HEADER = RUNTIME_INCLUDE_DIR / "gg_gemm_sm90.cuh"
FULL_WAIT = "gg::mbarrier_wait(&s.full[st], (it / T::kStages) & 1);"
EMPTY_RELEASE = "if (kt > 0) {\n          gg::mbarrier_arrive(&s.empty[(it - 1) % T::kStages]);"
PLANTED = {
    "expect_tx_too_many": (
        [("T::kAStage + T::kBStage);", "T::kAStage + T::kBStage + 1024);")],
        r"1024 transaction bytes missing \(expect_tx announced \d+, TMA delivered \d+\)",
    ),
    "no_full_wait": (
        [(FULL_WAIT + "\n        gg::wgmma_fence();\n        gg::wgmma_fence_operand(d);",
          "gg::wgmma_fence();\n        gg::wgmma_fence_operand(d);")],
        (
            r"no thread waited (for it|on that phase)|no thread has waited on that barrier phase|the wgmma was "
            r"issued before the data it reads had arrived"
        ),
    ),
    "release_before_wgmma_retired": (
        [
            (EMPTY_RELEASE, EMPTY_RELEASE.replace("kt > 0", "true").replace("(it - 1)", "it")),
            ("if (ktiles > 0) {", "if (false) {"),
        ],
        (
            r"a TMA load overwrites shared memory \[0x[0-9a-f]+, 0x[0-9a-f]+\) that a wgmma.mma_async of thread \d+ "
            r"\(warpgroup [12], commit group \d+\) still reads: the stage was released before wgmma.wait_group"
        ),
    ),
    "wrong_swizzle": (
        [
            (
                "gg::make_smem_desc(sa + kb * 32, 16, 1024, gg::SmemSwizzle::b128)",
                "gg::make_smem_desc(sa + kb * 32, 16, 1024, gg::SmemSwizzle::b64)",
            )
        ],
        r"wgmma.mma_async: the A descriptor says 64-byte swizzle, but a TMA load with 128-byte swizzle filled",
    ),
    "no_mbarrier_init_fence": (
        [("    gg::fence_mbarrier_init();\n", "")],
        r"missing fence.mbarrier_init: a TMA load signals the mbarrier at shared address 0x[0-9a-f]+",
    ),
    "missing_last_release": (
        [("if (ktiles > 0) {", "if (false) {")],
        # The producer waits for a stage that the consumers never gave back.
        (
            r"(?s)deadlock in block \(0,0,0\).*thread 0: wait at mbarrier.try_wait.parity \(mbarrier at shared "
            r"address (0x[0-9a-f]+), parity 0\).*\1: phase 0 \(parity 0\): none of 256 arrivals yet"
        ),
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
    return EmuModule.from_file(
        CUDA_SRC / "sm90_gemm.cu", include_dirs=(folder,), defines={"GG_SM90_PLANTED": 1}
    )


# The generated kernel's tests plant all of them again
# (tests/cuda/sm90/test_cuda_sm90_generated.py); CI runs two here.
@pytest.mark.parametrize("bug", [b if b in ("expect_tx_too_many", "missing_last_release")
                                 else pytest.param(b, marks=pytest.mark.slow) for b in PLANTED])
def test_planted_bug_in_the_body_is_caught(bug):
    edits, report = PLANTED[bug]
    m, n, k = 200, 136, 200  # 4 tiles of 4 K tiles on one block: the 4-stage ring wraps
    a, b = operands(m, n, k, nk=True)
    with pytest.raises(EmuKernelError, match=report):
        run(planted_module(edits), "dense_nk", [m, n, k, 1], a=a, b=b)


@pytest.mark.slow
def test_the_unplanted_copy_passes():
    """The copy mechanism itself changes nothing: no edit, the right product."""
    m, n, k = 200, 136, 200
    a, b = operands(m, n, k, nk=True)
    out = np.frombuffer(run(planted_module([]), "dense_nk", [m, n, k, 1], a=a, b=b), np.float32)
    np.testing.assert_allclose(out.reshape(m, n), product(a, b, True), rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------
# nvcc for sm_90a.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(
    nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed"
)
GEMMS = ["sm90_dense_nk", "sm90_dense_kn", "sm90_dense_f16", "sm90_grouped_nk", "sm90_grouped_kn"]


@needs_nvcc
@needs_cuobjdump
def test_sm90_gemm_builds_without_spills_and_runs_hgmma_on_tma():
    source = (CUDA_SRC / "sm90_gemm.cu").read_text()
    result = nvcc.compile_check(source, "sm_90a", name_for_errors="tests/cuda_src/sm90_gemm.cu")
    sass = nvcc.sass_summary(result.cubin)
    for name in GEMMS:
        usage = result.kernels[name]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
        code = sass[name]
        assert code.count("HGMMA") > 0 and code.count("HMMA") == 0, name
        assert code.count("UTMALDG") > 0 and code.count("USETMAXREG") == 2, name
        assert code.count("SYNCS", "PHASECHK") > 0, name
    # The dynamic shared memory each tile asks for (sm90_gemm.cu's Tile, its
    # sum written out) fits sm_90's opt-in limit next to the static one.
    for name, smem in {
        "sm90_dense_nk": 1024 + 4 * 32768 + 8 * 16 * 132 * 4 + 64,
        "sm90_dense_kn": 1024 + 3 * 49152 + 8 * 16 * 264 * 2 + 48,
    }.items():
        assert smem <= result.kernels[name].dynamic_smem_available, name
