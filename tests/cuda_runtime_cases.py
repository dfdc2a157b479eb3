"""Test vectors for gemmgen's CUDA runtime: one Case per primitive variant and
sample-GEMM shape, with the NumPy check of its results.

The emulator tests (tests/cuda/emulator/test_cuda_runtime_*.py) and the real-GPU check
(scripts/gpu_check_cuda_runtime.py) run the same cases, through
``EmuModule.launch`` and ``GpuModule.launch`` respectively, which share one
signature. Sources live in tests/cuda_src/.
"""

from __future__ import annotations

import importlib.util
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

CUDA_SRC = Path(__file__).resolve().parent / "cuda_src"


def cutlass_include() -> Path | None:
    """The CuTe / CUTLASS headers of the nvidia-cutlass wheel, or None."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    include = Path(next(iter(spec.submodule_search_locations))) / "source" / "include"
    return include if (include / "cute" / "tensor.hpp").is_file() else None


def run_cute_program(source: str, out_dir: Path) -> str:
    """Compiles tests/cuda_src/`source` against CuTe with the host g++ and
    returns what it prints (the oracle programs of the layout tests)."""
    from gemmgen.harness.toolchain import cuda_include_dir

    cuda = cuda_include_dir()
    exe = out_dir / Path(source).stem
    cmd = ["g++", "-std=c++17", "-O1", "-w", f"-I{cutlass_include()}", f"-I{cuda}",
           f"-I{cuda / 'cccl'}", str(CUDA_SRC / source), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout

# sample_gemm.cu's tiling (its header comment).
GEMM_BLOCK_M = 64
GEMM_BLOCK_N = 64
GEMM_THREADS = 128
GEMM_SMEM_BYTES = 2 * (64 * (32 + 8) + 32 * (64 + 8)) * 2


@dataclass(frozen=True)
class Case:
    """One launch and the check of its results."""

    name: str
    source: str
    kernel: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    smem_bytes: int
    args: tuple[object, ...]
    outputs: tuple[int, ...]
    check: Callable[[list[np.ndarray]], None]
    inouts: tuple[int, ...] = ()
    min_arch: int = 80
    """The oldest compute capability (x10) that has the instruction."""
    emulator_only: bool = False
    """The result is the emulator's model (e.g. cp.async poison), undefined on a GPU."""
    tags: frozenset[str] = field(default_factory=frozenset)


def launch(module, case: Case, **kwargs) -> list[np.ndarray]:
    """Runs `case` on an EmuModule or a GpuModule."""
    return module.launch(
        case.kernel, case.grid, case.block, case.smem_bytes, case.args, case.outputs, inouts=case.inouts, **kwargs
    )


def assert_finite(actual: np.ndarray, what: str) -> None:
    bad = ~np.isfinite(np.asarray(actual, dtype=np.float64))
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} values are NaN or inf (first at {first})")


def assert_close(actual: np.ndarray, expected: np.ndarray, bound: np.ndarray | float, what: str) -> None:
    """|actual - expected| <= bound everywhere, and no NaN."""
    assert_finite(actual, what)
    err = np.abs(np.asarray(actual, np.float64) - expected)
    bad = err > bound
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} values off (first at {first}: "
            f"got {actual[first]!r}, expected {expected[first]!r}; max error {err.max():.3g})"
        )


def assert_equal(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    if actual.shape != expected.shape or not np.array_equal(actual, expected):
        bad = np.argwhere(actual != expected) if actual.shape == expected.shape else None
        where = f" (first difference at {tuple(int(i) for i in bad[0])})" if bad is not None and len(bad) else ""
        raise AssertionError(f"{what}: results differ from the expected values{where}")


# ---------------------------------------------------------------------------
# Fragment layouts, written from the PTX ISA's tables.

def layout_a_m16n8k16(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >= 4)


def layout_b_m16n8k16(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return 2 * t + (i & 1) + 8 * (i >= 2), g


def layout_c_m16n8(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return g + 8 * (i >= 2), 2 * t + (i & 1)


def layout_a_m16n8k32(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >= 8)


def layout_b_m16n8k32(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return 4 * t + (i & 3) + 16 * (i >= 4), g


# name -> (formula, elements per lane, matrix shape)
FRAGMENTS = {
    "a_m16n8k16": (layout_a_m16n8k16, 8, (16, 16)),
    "b_m16n8k16": (layout_b_m16n8k16, 4, (16, 8)),
    "c_m16n8": (layout_c_m16n8, 4, (16, 8)),
    "a_m16n8k32": (layout_a_m16n8k32, 16, (16, 32)),
    "b_m16n8k32": (layout_b_m16n8k32, 8, (32, 8)),
}


def layout_table(name: str) -> np.ndarray:
    """[32 lanes][elements][2]: the (row, col) of every element of fragment `name`."""
    formula, count, _ = FRAGMENTS[name]
    return np.array([[formula(lane, i) for i in range(count)] for lane in range(32)], dtype=np.int32)


def assert_covers_once(table: np.ndarray, shape: tuple[int, int], what: str) -> None:
    """Every element of a `shape` matrix appears exactly once in `table`."""
    hits = np.zeros(shape, dtype=np.int64)
    rows, cols = table[..., 0].ravel(), table[..., 1].ravel()
    if rows.min() < 0 or cols.min() < 0 or rows.max() >= shape[0] or cols.max() >= shape[1]:
        raise AssertionError(f"{what}: positions outside the {shape[0]}x{shape[1]} matrix")
    np.add.at(hits, (rows, cols), 1)
    if not (hits == 1).all():
        never, twice = int((hits == 0).sum()), int((hits > 1).sum())
        raise AssertionError(f"{what}: {never} elements never held, {twice} held more than once")


# ---------------------------------------------------------------------------
# Primitive cases (primitives.cu).

def _finite_fp8(rng: np.random.Generator, dtype, shape) -> np.ndarray:
    """Random bytes that are finite values of `dtype` (subnormals included)."""
    values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    finite = np.flatnonzero(np.isfinite(values)).astype(np.uint8)
    return rng.choice(finite, size=shape)


def _mma16_case(name: str, kernel: str, dtype, rng: np.random.Generator) -> Case:
    a = rng.standard_normal((16, 16)).astype(dtype)
    b = rng.standard_normal((16, 8)).astype(dtype)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected = a64 @ b64 + c
    # The products are exact in f32; allow a few f32 roundings of the sum.
    bound = 2.0**-20 * (np.abs(a64) @ np.abs(b64) + np.abs(c))

    def check(out: list[np.ndarray]) -> None:
        assert_close(out[0], expected, bound, name)

    return Case(name, "primitives.cu", kernel, (1,), (32,), 0,
                (a.view(np.uint16), b.view(np.uint16), c, np.empty((16, 8), np.float32)), (3,), check)


def _mma8_case(name: str, kernel: str, dtype, rng: np.random.Generator) -> Case:
    if dtype is np.int8:
        a = rng.integers(-128, 128, (16, 32)).astype(np.int8).view(np.uint8)
        b = rng.integers(-128, 128, (32, 8)).astype(np.int8).view(np.uint8)
        c = rng.integers(-(2**20), 2**20, (16, 8)).astype(np.int32)
        expected = a.view(np.int8).astype(np.int64) @ b.view(np.int8).astype(np.int64) + c

        def check(out: list[np.ndarray]) -> None:
            assert_equal(out[0].astype(np.int64), expected, name)

        return Case(name, "primitives.cu", kernel, (1,), (32,), 0, (a, b, c, np.empty((16, 8), np.int32)), (3,), check)
    a = _finite_fp8(rng, dtype, (16, 32))
    b = _finite_fp8(rng, dtype, (32, 8))
    c = rng.standard_normal((16, 8)).astype(np.float32)
    a64, b64 = a.view(dtype).astype(np.float64), b.view(dtype).astype(np.float64)
    expected = a64 @ b64 + c
    bound = 2.0**-20 * (np.abs(a64) @ np.abs(b64) + np.abs(c))

    def check(out: list[np.ndarray]) -> None:
        assert_close(out[0], expected, bound, name)

    return Case(name, "primitives.cu", kernel, (1,), (32,), 0, (a, b, c, np.empty((16, 8), np.float32)), (3,), check,
                min_arch=89)


def _layout_case() -> Case:
    names = list(FRAGMENTS)

    def check(out: list[np.ndarray]) -> None:
        for name, table in zip(names, out):
            expected = layout_table(name)
            assert_equal(table.reshape(expected.shape), expected, f"gg::frag::{name}")
            assert_covers_once(table.reshape(expected.shape), FRAGMENTS[name][2], f"gg::frag::{name}")

    args = tuple(np.empty((32, FRAGMENTS[n][1], 2), np.int32) for n in names)
    return Case("fragment_layouts", "primitives.cu", "fragment_layouts", (1,), (32,), 0, args, tuple(range(5)), check)


LDMATRIX_VARIANTS = ("x1", "x2", "x4", "x1.trans", "x2.trans", "x4.trans")


def ldmatrix_expected(src: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """[6 variants][32 lanes][4 regs] of ldmatrix_all: src [4][8][8] uint16,
    rows[8j + r] = the row of matrix j that lane 8j + r addresses."""
    matrices = np.stack([src[j][rows[8 * j : 8 * j + 8]] for j in range(4)]).astype(np.uint32)
    out = np.zeros((6, 32, 4), np.uint32)
    for v, variant in enumerate(LDMATRIX_VARIANTS):
        count = int(variant[1])
        for lane in range(32):
            for j in range(count):
                m = matrices[j]
                if variant.endswith("trans"):
                    lo, hi = m[2 * (lane % 4), lane // 4], m[2 * (lane % 4) + 1, lane // 4]
                else:
                    lo, hi = m[lane // 4, 2 * (lane % 4)], m[lane // 4, 2 * (lane % 4) + 1]
                out[v, lane, j] = lo | (hi << 16)
    return out


def _ldmatrix_case(rng: np.random.Generator) -> Case:
    src = rng.integers(0, 2**16, (4, 8, 8)).astype(np.uint16)
    rows = np.concatenate([rng.permutation(8) for _ in range(4)]).astype(np.int32)
    expected = ldmatrix_expected(src, rows)

    def check(out: list[np.ndarray]) -> None:
        for v, variant in enumerate(LDMATRIX_VARIANTS):
            count = int(variant[1])
            assert_equal(out[0][v, :, :count], expected[v, :, :count], f"ldmatrix.{variant}")

    return Case("ldmatrix", "primitives.cu", "ldmatrix_all", (1,), (32,), 0,
                (src, rows, np.empty((6, 32, 4), np.uint32)), (2,), check)


def _cp_async_sizes_case(rng: np.random.Generator) -> Case:
    src = rng.integers(0, 256, 32 * 64).astype(np.uint8)
    lanes = np.arange(32)
    sizes = np.stack([lanes % 17, lanes % 9, lanes % 5], axis=1).astype(np.int32)
    expected = np.zeros((32, 28), np.uint8)
    for lane in range(32):
        owner = (lane + 1) % 32
        s = src[64 * owner : 64 * owner + 64]
        for offset, size in zip((0, 16, 24), sizes[owner]):
            expected[lane, offset : offset + size] = s[offset : offset + size]

    def check(out: list[np.ndarray]) -> None:
        assert_equal(out[0], expected, "cp.async 16/8/4 bytes with zero-fill")

    return Case("cp_async_zero_fill", "primitives.cu", "cp_async_sizes", (1,), (32,), 32 * 32,
                (src, sizes, np.empty(0, np.uint8), np.empty((32, 28), np.uint8)), (3,), check)


def _cp_async_groups_case(rng: np.random.Generator) -> Case:
    src = rng.integers(0, 255, 32).astype(np.uint8)  # never 0xFF, so poison is recognisable
    poison = np.full(16, 0xFF, np.uint8)
    expected = np.concatenate([poison, src[:16], poison, src[16:]])

    def check(out: list[np.ndarray]) -> None:
        assert_equal(out[0], expected, "cp.async poison until wait_group")

    return Case("cp_async_groups", "primitives.cu", "cp_async_groups", (1,), (32,), 0,
                (src, np.empty(64, np.uint8)), (1,), check, emulator_only=True)


def _butterfly(v: np.ndarray, combine) -> np.ndarray:
    for offset in (16, 8, 4, 2, 1):
        v = combine(v, v[np.arange(32) ^ offset])
    return v


def _shuffle_case(rng: np.random.Generator) -> Case:
    lanes = np.arange(32)
    x = rng.standard_normal(32).astype(np.float32)
    xd = rng.standard_normal(32)
    xi = rng.integers(-1000, 1000, 32).astype(np.int32)

    def down(v, d):
        return v[np.where(lanes + d < 32, lanes + d, lanes)]

    with np.errstate(over="ignore"):
        expected_f = np.stack([
            x[lanes ^ 1], x[lanes ^ 5], x[lanes ^ 16], down(x, 1), down(x, 3), x[(lanes * 7) % 32],
            np.full(32, x[5]), _butterfly(x, np.add), _butterfly(x, np.maximum),
        ])
        expected_d = np.stack([xd[lanes ^ 3], down(xd, 2), xd[31 - lanes], _butterfly(xd, np.add)])
        expected_i = np.stack([xi[lanes ^ 7], down(xi, 16), xi[lanes // 2], _butterfly(xi, np.add),
                               _butterfly(xi, np.maximum)])

    def check(out: list[np.ndarray]) -> None:
        assert_equal(out[0], expected_f, "float shuffles and reductions")
        assert_equal(out[1], expected_d, "double shuffles and reductions")
        assert_equal(out[2], expected_i, "int shuffles and reductions")

    args = (x, xd, xi, np.empty((9, 32), np.float32), np.empty((4, 32), np.float64), np.empty((5, 32), np.int32))
    return Case("shuffles", "primitives.cu", "shuffles", (1,), (32,), 0, args, (3, 4, 5), check)


def _global_128_case(rng: np.random.Generator) -> Case:
    n16 = 40
    src = rng.integers(0, 2**32, 4 * n16, dtype=np.uint64).astype(np.uint32)

    def check(out: list[np.ndarray]) -> None:
        assert_equal(out[0], src, "ld_global_128 / st_global_128")
        assert_equal(out[1], src, "ld_global_nc_128 / st_global_128")

    return Case("global_128", "primitives.cu", "global_128", (2,), (32,), 0,
                (src, np.empty_like(src), np.empty_like(src), np.int32(n16)), (1, 2), check)


def _indexing_case() -> Case:
    grid, block = (2, 3, 2), (4, 2, 3)
    tpb, blocks = int(np.prod(block)), int(np.prod(grid))
    t = np.arange(tpb)
    b = np.arange(blocks)
    thread_xyz = np.stack([t % 4, t // 4 % 2, t // 8], axis=1)
    block_xyz = np.stack([b % 2, b // 2 % 3, b // 6], axis=1)
    expected = np.concatenate(
        [np.tile(thread_xyz, (blocks, 1)), np.repeat(block_xyz, tpb, axis=0)], axis=1
    ).astype(np.int32)

    def check(out: list[np.ndarray]) -> None:
        assert_equal(out[0], expected, "threadIdx / blockIdx over a 3-D grid")
        assert_equal(out[1], np.array([blocks * tpb], np.int32), "atomicAdd(int) from every thread")
        assert_equal(out[2], np.array([blocks * tpb / 2], np.float32), "atomicAdd(float) from every thread")

    args = (np.empty((blocks * tpb, 6), np.int32), np.zeros(1, np.int32), np.zeros(1, np.float32))
    return Case("indexing_atomics", "primitives.cu", "indexing", grid, block, 0, args, (0,), check, inouts=(1, 2))


def primitive_cases(seed: int = 0) -> list[Case]:
    rng = np.random.default_rng(seed)
    return [
        _mma16_case("mma_m16n8k16_bf16", "mma_bf16", ml_dtypes.bfloat16, rng),
        _mma16_case("mma_m16n8k16_f16", "mma_f16", np.float16, rng),
        _mma8_case("mma_m16n8k32_e4m3", "mma_e4m3", ml_dtypes.float8_e4m3fn, rng),
        _mma8_case("mma_m16n8k32_e5m2", "mma_e5m2", ml_dtypes.float8_e5m2, rng),
        _mma8_case("mma_m16n8k32_s8", "mma_s8", np.int8, rng),
        _layout_case(),
        _ldmatrix_case(rng),
        _cp_async_sizes_case(rng),
        _cp_async_groups_case(rng),
        _shuffle_case(rng),
        _global_128_case(rng),
        _indexing_case(),
    ]


# ---------------------------------------------------------------------------
# The sample GEMM (sample_gemm.cu).

# name -> (M, N, K): partial tiles in every dimension, a single partial tile,
# and a 256 x 256 x 128 shape, large enough to time the emulator.
GEMM_SHAPES = {
    "partial_mnk": (100, 72, 88),
    "one_small_tile": (17, 8, 8),
    "full_256x256x128": (256, 256, 128),
}


def gemm_args(m: int, n: int, k: int, seed: int = 0) -> tuple[tuple[object, ...], np.ndarray, np.ndarray]:
    """(args of sample_gemm_bf16, the float64 reference, the error bound)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    # f32 accumulation over k products: a few ulps of sum |a||b| per k step.
    bound = 2.0**-22 * max(k, 1) * (np.abs(a64) @ np.abs(b64)) + 1e-30
    args = (a, b, np.empty((m, n), np.float32), np.int32(m), np.int32(n), np.int32(k))
    return args, a64 @ b64, bound


def gemm_grid(m: int, n: int) -> tuple[int, int]:
    return (-(-n // GEMM_BLOCK_N), -(-m // GEMM_BLOCK_M))


def gemm_case(name: str, m: int, n: int, k: int, kernel: str = "sample_gemm_bf16", seed: int = 0) -> Case:
    args, expected, bound = gemm_args(m, n, k, seed)

    def check(out: list[np.ndarray]) -> None:
        assert_close(out[0], expected, bound, f"{kernel} {m}x{n}x{k}")

    return Case(f"gemm_{name}", "sample_gemm.cu", kernel, gemm_grid(m, n), (GEMM_THREADS,), GEMM_SMEM_BYTES,
                args, (2,), check)


def gemm_cases() -> list[Case]:
    return [gemm_case(name, *shape) for name, shape in GEMM_SHAPES.items()]


def all_cases() -> list[Case]:
    return primitive_cases() + gemm_cases()


def by_name(cases: Sequence[Case]) -> dict[str, Case]:
    return {c.name: c for c in cases}
