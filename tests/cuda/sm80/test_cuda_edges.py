"""The CUDA kernels at the edges of docs/semantics.md (project issue #10).

Every kernel runs on the CPU emulator through its own launcher and is
compared with `gemmgen.reference` (`compare(..., inputs=...)`), on fresh
random non-zero inputs and poisoned outputs:

- **e8m0, every byte.** Each position an e8m0 scale takes in a CUDA kernel
  (tile GEMM: lhs per-token-group and rhs block / kblock in the main loop;
  lhs per-tensor / per-token and rhs per-tensor / per-channel in the
  epilogue; GEMV: the same epilogue positions and rhs block) gets every byte
  0..255, most against every byte of the other side. Byte 0 is 2^-127, an
  f32 subnormal, and two scales multiply to anything in 2^-254 .. 2^254. The
  same runs are repeated with the emulator flushing f32 subnormals
  (`ftz=True`: a kernel built with -ftz, as nvcc --use_fast_math does), where
  only results that are themselves f32 subnormals may differ. Planted bugs
  (the decode `e << 23`, the f32 product of two scales) must fail.
- **group_sizes / group_offset.** Sizes whose sums overflow int32, negative
  sizes, offsets before, past and across the ends of group_sizes, g = 0:
  the launchers accept them and the grouped GEMM computes what the reference
  does (the emulator faults on any out-of-range read of group_sizes).
- **Non-finite inputs and overflow.** inf / NaN in lhs and rhs (in partial
  tiles, in rows of other groups, in rows no group owns, in existing_out)
  and outputs that overflow f16: the same infinities and NaNs as the
  reference, and no contamination of other elements.

tgmm's and quantize's edges are in test_cuda_tgmm.py and
test_cuda_quantize.py, next to their kernels.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from cuda_helpers import Launchers, build_emulators, render_cuda, with_mutated_runtime

from gemmgen import ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.reference import compare, random_inputs, reference
from gemmgen.harness import nvcc
from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR, find_nvcc
from gemmgen.harness.verify_cuda import run_launcher

SPEC = """\
target cuda {
  archs sm_89 sm_90a
}

defaults {
  op dense
  lhs bf16 [m, k]
  backends cuda
}

# MX-style W8A8, both main-loop scales e8m0: 1 x 128 activation groups and
# 8 x 128 weight blocks (n=8, so that 2048 columns hold every byte).
kernel mx_blocks {
  lhs e4m3 [m, k]
  rhs e4m3 [n, k]
  out f32
  lhs_scale per_token_group k=128 e8m0
  rhs_scale block n=8 k=128 e8m0
  tile m=64 n=128 k=128
}

# e8m0 epilogue scales, per token and per channel.
kernel epi_scales {
  rhs bf16 [n, k]
  out f32
  lhs_scale per_token e8m0
  rhs_scale per_channel e8m0
  tile m=64 n=128 k=32
}

# Per-tensor e8m0 scales of a grouped GEMM (rhs_scale [g]).
kernel tensor_grouped {
  op grouped
  rhs bf16 [g, n, k]
  out f32
  lhs_scale per_tensor e8m0
  rhs_scale per_tensor e8m0
  tile m=64 n=128 k=32
}

# A per-tensor e8m0 lhs scale with per-channel e8m0 weights (one launch a
# call, for sweeping the per-tensor byte).
kernel dense_tensor {
  rhs bf16 [n, k]
  out f32
  lhs_scale per_tensor e8m0
  rhs_scale per_channel e8m0
  tile m=64 n=128 k=32
}

# megablox rhs_scale [g, k/128, 1, n] in e8m0, the only main-loop scale.
kernel kblock_grouped {
  op grouped
  rhs int8 [g, n, k]
  out f32
  rhs_scale kblock k=128 e8m0
  tile m=64 n=128 k=64
}

# Batched GEMV: per-token e8m0 activation scales, 1 x 128 e8m0 weight blocks.
# bf16 out: every lane's scaled partial sum rounds on its own, and in the f32
# subnormal range each rounding is off by up to 2^-150 absolute, which an f32
# output's half ulp there (2^-150) cannot cover.
kernel gemv_blocks {
  rhs e4m3 [n, k]
  out bf16
  lhs_scale per_token e8m0
  rhs_scale block n=1 k=128 e8m0
  algorithm gemv_batched
  max_m 4
  tile m=64 n=128 k=128
}

# GEMV: per-tensor and per-channel e8m0 scales.
kernel gemv_channels {
  rhs bf16 [n, k]
  out f32
  lhs_scale per_tensor e8m0
  rhs_scale per_channel e8m0
  algorithm gemv
}

# Overflow to f16's infinity, through bias and silu, [k, n] weights.
kernel dense_f16 {
  rhs bf16 [k, n]
  out f16
  bias f32 [n]
  epilogue silu
  tile m=64 n=128 k=32
}

# A grouped gate-up projection with f16 out, per-group bias and silu_mul.
kernel grouped_f16 {
  op grouped
  rhs bf16 [g, n, k]
  out f16
  bias f32 [g, 1, n]
  epilogue silu_mul
  tile m=64 n=128 k=32
}
"""

NAMES = ("mx_blocks", "epi_scales", "tensor_grouped", "dense_tensor", "kblock_grouped",
         "gemv_blocks", "gemv_channels", "dense_f16", "grouped_f16")
MODULES: dict = {}
F32_TINY = 2.0**-126  # the smallest normal f32
FTZ_ABS = 2.0**-120  # 64 flushed partial sums just below F32_TINY


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[ir.Spec, Path]:
    spec, cuda, _ = render_cuda(tmp_path_factory.mktemp("edges"), "edges", SPEC)
    build_emulators(cuda, NAMES, source_name, MODULES)
    return spec, cuda


def source_name(name: str) -> str:
    return f"edges/cuda/{name}.cu"


launcher = Launchers("test_cuda_edges")


def run(built, name: str, inputs: dict, *, ftz: bool = False, source: str | None = None,
        tag: str = "", sm: int | None = None):
    """The kernel's output on the emulator; `source` replaces the generated
    .cu (a planted bug), built as its own module; `sm` the compute capability
    the launcher is told (0: the mma.sync path on the sm_90a device)."""
    _, cuda = built
    text = source if source is not None else (cuda / f"{name}.cu").read_text()
    return run_launcher(launcher(cuda, name), text, source_name(name) + tag, inputs,
                        modules=MODULES, ftz=ftz, sm=sm)


def verdict(built, name: str, inputs: dict, *, ftz: bool = False, **kw):
    """compare() of the kernel's output with the reference. Under ftz, f32
    subnormals flush to zero, as on a GPU built with -ftz: a result that is
    itself subnormal, or a sum of partial sums that are (a GEMV adds up each
    lane's scaled partial sum), may be off by up to FTZ_ABS. Only elements
    within FTZ_ABS of the reference take the reference's value before the
    comparison; every other element is compared as usual."""
    spec, _ = built
    kernel = spec.kernel(name)
    got = run(built, name, inputs, ftz=ftz, **kw)
    expected = reference(kernel, **inputs)
    if ftz:
        with np.errstate(invalid="ignore"):
            sub = np.abs(got.astype(np.float64) - expected) <= FTZ_ABS
        got = np.where(sub, expected, got.astype(np.float64)).astype(got.dtype)
    return compare(got, expected, kernel, k=inputs["lhs"].shape[1], inputs=inputs)


def check(built, name: str, inputs: dict, **kw) -> None:
    result = verdict(built, name, inputs, **kw)
    assert result.passed, f"{name}:\n{result.detail}"


def inputs_for(built, name: str, seed, **kw) -> dict[str, np.ndarray]:
    spec, _ = built
    return random_inputs(spec.kernel(name), rng=np.random.default_rng(seed), **kw)


def every_byte(rng: np.random.Generator) -> np.ndarray:
    """0..255 in a random order, so that neighbours differ from run to run."""
    return rng.permutation(256).astype(np.uint8)


# CI runs the IEEE build of each edge test; the -ftz builds are slow (and
# test_planted_old_decode_fails runs both).
FTZ = pytest.mark.parametrize("ftz", [False, pytest.param(True, marks=pytest.mark.slow)],
                              ids=["ieee", "ftz"])


# ---------------------------------------------------------------------------
# e8m0: every byte in every position


def mx_every_pair(built, seed: int) -> dict[str, np.ndarray]:
    """mx_blocks with k = 128 (one K block, so every output is one partial
    sum times one pair of scales): 256 rows x 256 column blocks, each side
    taking every byte once, so the output holds all 65536 pairs. In the
    column block of byte 254 half the weight columns are zero: partial sums
    of exactly 0 times a product past f32 must stay 0, not 0 * inf = NaN."""
    rng = np.random.default_rng(seed)
    inputs = inputs_for(built, "mx_blocks", seed, m=256, n=256 * 8, k=128)
    inputs["lhs_scale"][:, 0] = every_byte(rng)
    inputs["rhs_scale"][:, 0] = every_byte(rng)
    block = int(np.flatnonzero(inputs["rhs_scale"][:, 0] == 254)[0])
    inputs["rhs"][block * 8:block * 8 + 4] = 0
    return inputs


@FTZ
def test_main_loop_e8m0_every_byte_pair(built, ftz):
    check(built, "mx_blocks", mx_every_pair(built, 1), ftz=ftz)


@FTZ
def test_epilogue_e8m0_every_byte_pair(built, ftz):
    rng = np.random.default_rng(2)
    inputs = inputs_for(built, "epi_scales", 2, m=256, n=256, k=64)
    inputs["lhs_scale"][:] = every_byte(rng)
    inputs["rhs_scale"][:] = every_byte(rng)
    check(built, "epi_scales", inputs, ftz=ftz)


def kblock_every_byte(built) -> dict[str, np.ndarray]:
    """kblock_grouped, k = 128: three groups (one empty), each with every
    byte across its 256 columns."""
    rng = np.random.default_rng(3)
    inputs = inputs_for(built, "kblock_grouped", 3, m=150, n=256, k=128,
                        group_sizes=np.array([70, 0, 60], np.int32))
    for g in range(3):
        inputs["rhs_scale"][g, 0, 0] = every_byte(rng)
    return inputs


@FTZ
def test_kblock_e8m0_every_byte(built, ftz):
    """Three groups (one empty), each with every byte across its 256 columns;
    the lhs is unscaled, so the kblock scale is the only factor."""
    check(built, "kblock_grouped", kblock_every_byte(built), ftz=ftz)


# Per-tensor scales hold one byte per call: the byte sweeps run over calls.
SWEEP_FAST = (0, 1, 2, 104, 126, 127, 128, 150, 253, 254, 255)


def grouped_tensor_inputs(built, lhs_byte: int, seed: int) -> dict[str, np.ndarray]:
    """tensor_grouped with 256 one-row groups whose rhs_scale [g] take every
    byte, and one lhs per-tensor byte."""
    rng = np.random.default_rng([seed, lhs_byte])
    inputs = inputs_for(built, "tensor_grouped", [seed, lhs_byte], m=256, n=16, k=32,
                        group_sizes=np.ones(256, np.int32))
    inputs["rhs_scale"][:] = every_byte(rng)
    inputs["lhs_scale"] = np.asarray(lhs_byte, np.uint8)
    return inputs


def dense_tensor_inputs(built, lhs_byte: int, seed: int) -> dict[str, np.ndarray]:
    """dense_tensor (one launch per call): rhs_scale [n = 256] takes every
    byte, lhs_scale [] the given one."""
    rng = np.random.default_rng([seed, lhs_byte])
    inputs = inputs_for(built, "dense_tensor", [seed, lhs_byte], m=16, n=256, k=32)
    inputs["rhs_scale"][:] = every_byte(rng)
    inputs["lhs_scale"] = np.asarray(lhs_byte, np.uint8)
    return inputs


def _tensor_sweep(built, name, make, bytes_, ftz):
    # tensor_grouped's 256 one-row groups are 256 Hopper tiles of 128 rows,
    # minutes per call on the emulator: its sweep runs the mma.sync body.
    # The e8m0 epilogue is the same code in both bodies (gg_epilogue.cuh), and
    # dense_tensor's sweep runs it on the Hopper body.
    sm = 0 if name == "tensor_grouped" else None
    for b in bytes_:
        result = verdict(built, name, make(built, b, 4), ftz=ftz, sm=sm)
        assert result.passed, f"lhs byte {b}:\n{result.detail}"


@FTZ
def test_per_tensor_e8m0_bytes(built, ftz):
    """Grouped: rhs_scale [g] takes every byte (g = 256), lhs a sweep;
    dense: the same lhs sweep against every per-channel byte."""
    _tensor_sweep(built, "tensor_grouped", grouped_tensor_inputs, SWEEP_FAST, ftz)
    _tensor_sweep(built, "dense_tensor", dense_tensor_inputs, SWEEP_FAST, ftz)


@pytest.mark.slow
@FTZ
def test_per_tensor_e8m0_every_byte_pair(built, ftz):
    _tensor_sweep(built, "dense_tensor", dense_tensor_inputs, range(256), ftz)


def gemv_block_inputs(built, lhs_bytes_: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """gemv_blocks, M = 4, k = 128: rhs_scale [n, 1] takes every byte over
    256 weight rows, lhs_scale [4] the given bytes."""
    rng = np.random.default_rng(seed)
    inputs = inputs_for(built, "gemv_blocks", seed, m=len(lhs_bytes_), n=256, k=128)
    inputs["rhs_scale"][:, 0] = every_byte(rng)
    inputs["lhs_scale"][:] = lhs_bytes_
    return inputs


def _gemv_sweep(built, bytes_, ftz):
    bytes_ = np.asarray(list(bytes_), np.uint8)
    for i in range(0, len(bytes_), 4):
        chunk = bytes_[i:i + 4]
        check(built, "gemv_blocks", gemv_block_inputs(built, chunk, 5 + i), ftz=ftz)
        inputs = inputs_for(built, "gemv_channels", [6, i], m=1, n=256, k=96)
        inputs["rhs_scale"][:] = every_byte(np.random.default_rng([6, i]))
        for b in chunk:
            inputs["lhs_scale"] = np.asarray(b, np.uint8)
            result = verdict(built, "gemv_channels", inputs, ftz=ftz)
            assert result.passed, f"lhs byte {b}:\n{result.detail}"


@FTZ
def test_gemv_e8m0_bytes(built, ftz):
    _gemv_sweep(built, SWEEP_FAST + (7, 60, 200, 240, 251), ftz)


@pytest.mark.slow
@FTZ
def test_gemv_e8m0_every_byte_pair(built, ftz):
    _gemv_sweep(built, range(256), ftz)


def test_e8m0_results_span_subnormal_normal_and_overflow(built):
    """The all-pairs case exercises what it claims: results that are f32
    subnormals, normal, and past f32 (and the byte-0 row is not all zero)."""
    spec, _ = built
    inputs = mx_every_pair(built, 1)
    expected = reference(spec.kernel("mx_blocks"), **inputs)
    mag = np.abs(expected[np.isfinite(expected)])
    assert ((mag > 0) & (mag < F32_TINY)).sum() > 1000
    assert ((mag >= F32_TINY) & (mag < 3e38)).sum() > 100000
    assert (~np.isfinite(expected)).sum() > 1000
    row0 = int(np.flatnonzero(inputs["lhs_scale"][:, 0] == 0)[0])
    assert (np.abs(expected[row0]) >= F32_TINY).sum() > 500


# Planted bugs: the new tests must fail on the old decode and the old product.
# The tile GEMMs' scale code is the shared C++ of runtime/cuda (gg_scales.cuh,
# gg_gemm.cuh, gg_epilogue.cuh), so it is planted in a copy of those headers;
# the GEMV's is in its .cu.
OLD_DECODE = "gg::bits_to_float(static_cast<unsigned>(s[i]) << 23)"  # byte 0 -> 0.0f


def planted(built, name: str, old: str, new: str, count: int | None = None) -> str:
    _, cuda = built
    text = (cuda / f"{name}.cu").read_text()
    assert old in text and (count is None or text.count(old) == count), old
    return text.replace(old, new)


def planted_runtime(built, name: str, header: str, old: str, new: str) -> str:
    _, cuda = built
    return with_mutated_runtime((cuda / f"{name}.cu").read_text(), header, old, new)


@pytest.mark.parametrize("ftz", [False, True], ids=["ieee", "ftz"])
def test_planted_old_decode_fails(built, ftz):
    """`e << 23` decodes byte 0 as 0: the all-pairs cases catch it in the
    main loop and in the epilogue, with or without flushing."""
    bug = planted_runtime(built, "mx_blocks", "gg_scales.cuh", "gg::e8m0_to_float(s[i])", OLD_DECODE)
    assert not verdict(built, "mx_blocks", mx_every_pair(built, 1), ftz=ftz, source=bug,
                       tag=".old_decode").passed
    rng = np.random.default_rng(2)
    inputs = inputs_for(built, "epi_scales", 2, m=256, n=256, k=64)
    inputs["lhs_scale"][:] = every_byte(rng)
    inputs["rhs_scale"][:] = every_byte(rng)
    bug = planted_runtime(built, "epi_scales", "gg_scales.cuh", "gg::e8m0_to_float(s[i])", OLD_DECODE)
    assert not verdict(built, "epi_scales", inputs, ftz=ftz, source=bug,
                       tag=".old_decode").passed


def test_planted_f32_scale_product_fails(built):
    """The old promotion, acc * (sa * sb) in f32 for every pair: the product
    of two e8m0 scales underflows to 0 (or overflows to inf, and 0 * inf is
    NaN) where the exact result is an f32."""
    bug = planted_runtime(built, "mx_blocks", "gg_gemm.cuh",
                          "gg::product_is_normal(lo_a, hi_a, lo_b, hi_b)", "true")
    result = verdict(built, "mx_blocks", mx_every_pair(built, 1), source=bug, tag=".f32_product")
    assert not result.passed
    assert "NaN" in result.detail or "nan" in result.detail or "0.0" in result.detail


# The exact-promotion test of each body that runs kblock_grouped (W8A16, e8m0
# kblock scales) on an sm_90a device: the mma.sync body (the launcher told
# compute capability 0) and the Hopper weight-only tile (told 9.0).
SUBNORMAL_PLANTS = {
    "mma_sync": (0, "gg_gemm.cuh", "gg::product_is_normal(lo_a, hi_a, lo_b, hi_b)", "true"),
    "hopper": (None, "gg_gemm_sm90.cuh", "fast = gg::product_is_normal(",
               "fast = true || gg::product_is_normal("),
}


@pytest.mark.parametrize("body", list(SUBNORMAL_PLANTS))
def test_planted_subnormal_scale_fails_only_when_flushing(built, body):
    """The old promotion multiplied by 2^-127 as an f32 subnormal: right on
    x86 and on a GPU built without -ftz, wrong on one built with it. The
    emulator shows the difference only with ftz=True."""
    sm, header, old, new = SUBNORMAL_PLANTS[body]
    bug = planted_runtime(built, "kblock_grouped", header, old, new)
    inputs = kblock_every_byte(built)
    tag = f".subnormal_{body}"
    assert verdict(built, "kblock_grouped", inputs, source=bug, tag=tag, sm=sm).passed
    assert not verdict(built, "kblock_grouped", inputs, ftz=True, source=bug, tag=tag,
                       sm=sm).passed


def test_planted_sequential_epilogue_fails(built):
    """The old epilogue, v *= sa; v *= sb: the first product overflows where
    the second would bring it back."""
    rng = np.random.default_rng(2)
    inputs = inputs_for(built, "epi_scales", 2, m=256, n=256, k=64)
    inputs["lhs_scale"][:] = every_byte(rng)
    inputs["rhs_scale"][:] = every_byte(rng)
    bug = planted_runtime(built, "epi_scales", "gg_epilogue.cuh",
                          "return gg::mul_scales(v, lhs_scale_at<C>(lhs_scale, row, 0, 0),",
                          "return v * lhs_scale_at<C>(lhs_scale, row, 0, 0) * (")
    assert not verdict(built, "epi_scales", inputs, source=bug, tag=".sequential").passed


def test_generated_code_never_multiplies_by_a_decoded_e8m0_directly(built):
    """Every e8m0 scale reaches arithmetic through gg::mul_scale(s) or the
    checked fast path of the main loop, never as `v *= scale`. The tile
    GEMMs name their e8m0 scales in their Config, and the shared epilogue
    multiplies a scale directly only when none is e8m0 (kExactEpilogue); the
    GEMV's code is in its .cu."""
    _, cuda = built
    for name in ("mx_blocks", "epi_scales", "tensor_grouped", "dense_tensor", "kblock_grouped"):
        text = (cuda / f"{name}.cu").read_text()
        assert "ScaleFormat = gg::gemm::Format::kE8M0;" in text, name
    epilogue = (RUNTIME_INCLUDE_DIR / "gg_epilogue.cuh").read_text()
    direct = epilogue[epilogue.index("  } else {\n    if constexpr (kLhs) {"):]
    assert "v *= lhs_scale_at" in direct and "if constexpr (kExactEpilogue<C>" in epilogue
    # the two non-exact scales, NVFP4's global scale (its block scales are
    # ue4m3, never e8m0) and alpha
    assert epilogue.count("v *= ") == 4
    for name in ("gemv_blocks", "gemv_channels"):
        text = (cuda / f"{name}.cu").read_text()
        assert "scale_value(" in text
        assert "*= lhs_scale_value" not in text and "*= rhs_scale_value" not in text, name
        assert "dot * sw[a]" not in text, name


# ---------------------------------------------------------------------------
# group_sizes and group_offset: every value is defined

BIG = 2**31 - 1
HOSTILE_SIZES = {
    # The prefix sums overflow int32 (2^32); the first group is cut at m.
    "four_2^30": ([2**30] * 4, None, None),
    "int32_max_first": ([BIG, 5, 7], None, None),
    "negative_mixed": ([5, -3, BIG, 7], None, None),
    "int32_min": ([-(2**31), 40, -1, 30], None, None),
    "sum_past_m": ([60, 50, 70], None, None),  # the last group is cut at m = 150
    # Offsets: before group_sizes, across its start, across its end, past it.
    "offset_negative_across": ([30, 40, 50], -1, 3),
    "offset_far_negative": ([30, 40, 50], -(2**31), 2),
    "offset_across_end": ([30, 40, 50], 2, 3),
    "offset_past_end": ([30, 40, 50], 5, 2),
    "offset_int32_max": ([30, 40, 50], BIG, 2),
    "offset_and_huge_sizes": ([2**30, -7, 2**30, 2**30], 1, 3),
}


def grouped_case(built, name: str, sizes, offset, g_local, existing: bool, seed):
    m = 150
    sizes = np.asarray(sizes, np.int64).astype(np.int32)
    g = g_local if g_local is not None else len(sizes)
    return inputs_for(built, name, seed, m=m, n=256, k=128, group_sizes=sizes, g_local=g,
                      group_offset=offset, with_existing_out=existing)


@pytest.mark.parametrize("existing", [False, True], ids=["zeros", "existing_out"])
@pytest.mark.parametrize("case", list(HOSTILE_SIZES))
def test_grouped_any_group_sizes_and_offset(built, case, existing):
    sizes, offset, g_local = HOSTILE_SIZES[case]
    inputs = grouped_case(built, "kblock_grouped", sizes, offset, g_local, existing, [7, len(case)])
    check(built, "kblock_grouped", inputs)


def test_grouped_zero_local_groups(built):
    """g = rhs.shape[0] = 0: nothing is computed, out is zeros or existing_out."""
    spec, _ = built
    for existing in (False, True):
        inputs = grouped_case(built, "tensor_grouped", [20, 30], 1, 0, existing, 8)
        assert inputs["rhs"].shape[0] == 0 and inputs["rhs_scale"].shape == (0,)
        check(built, "tensor_grouped", inputs)


def test_grouped_launcher_accepts_every_offset(built):
    _, cuda = built
    lm = launcher(cuda, "kblock_grouped")
    inputs = grouped_case(built, "kblock_grouped", [30, 40, 50], None, None, False, 9)
    for offset in (-(2**31), -5, -1, 0, 3, 4, BIG):
        dims = lm.validate(**dict(inputs, group_offset=np.int32(offset)))
        assert dims["group_offset"] == offset
    with pytest.raises(ValueError, match="group_offset must fit in int32"):
        lm.validate(**dict(inputs, group_offset=2**31))


# ---------------------------------------------------------------------------
# Non-finite inputs and overflow

INF, NAN = np.inf, np.nan


def poke(a: np.ndarray, index, value) -> None:
    """Sets one element of a storage-format array (bf16, f16, fp8, f32)."""
    a[index] = np.asarray(value).astype(a.dtype)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_dense_nonfinite_and_f16_overflow(built):
    """dense_f16 (m = 100: a partial M tile; n = 200: a partial N tile; k =
    72: a partial K tile): inf and NaN in lhs and rhs at the tiles' last
    rows, columns and k; one row that overflows f16 (the same infinity as the
    reference) and one past f32; every other element finite and right."""
    inputs = inputs_for(built, "dense_f16", 10, m=100, n=200, k=72)
    lhs, rhs = inputs["lhs"], inputs["rhs"]  # rhs [k, n]
    poke(lhs, (99, 71), INF)  # last row (partial M tile), last k (partial K tile)
    poke(lhs, (64, 3), NAN)  # first row of the partial tile
    poke(rhs, (71, 199), -INF)  # last column (partial N tile), last k
    poke(rhs, (5, 130), NAN)
    lhs[40] = (np.abs(lhs[40].astype(np.float32)) * 1e4).astype(lhs.dtype)  # past f16 at many columns
    lhs[41] = (lhs[41].astype(np.float32) * 1e37).astype(lhs.dtype)  # past f32 too
    spec, _ = built
    expected = reference(spec.kernel("dense_f16"), **inputs)
    assert (np.abs(expected[40]) > 65504).sum() > 20 and np.isnan(expected[64]).all()
    check(built, "dense_f16", inputs)
    got = run(built, "dense_f16", inputs).astype(np.float64)
    clean = np.ones(expected.shape, bool)
    clean[[40, 41, 64, 99]] = False
    clean[:, [130, 199]] = False
    assert np.isfinite(got[clean]).all()  # nothing else is contaminated


def test_main_loop_scaled_nonfinite(built):
    """mx_blocks (k = 384: three K blocks, promoted in f32): e4m3 NaN codes
    in lhs and rhs; rows and columns without them stay finite."""
    inputs = inputs_for(built, "mx_blocks", 11, m=70, n=136, k=384)
    inputs["lhs"][69, 383] = np.uint8(0x7F).view(ml_dtypes.float8_e4m3fn)  # NaN, last row / k
    inputs["rhs"][135, 200] = np.uint8(0xFF).view(ml_dtypes.float8_e4m3fn)  # NaN, last column
    check(built, "mx_blocks", inputs)
    got = run(built, "mx_blocks", inputs)
    assert np.isnan(got[69]).all() and np.isnan(got[:, 135]).all()
    assert np.isfinite(np.delete(np.delete(got, 69, 0), 135, 1)).all()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("existing", [False, True], ids=["zeros", "existing_out"])
def test_grouped_nonfinite_in_and_out_of_the_shard(built, existing):
    """grouped_f16 (silu_mul, f16 out) on a shard owning groups 1 and 2 of
    four: inf / NaN in the rows of group 0 and group 3 (another shard's),
    in rows past sum(group_sizes) and in existing_out's rows there (copied
    bit for bit); inf in an owned row and in an owned group's weights."""
    spec, _ = built
    sizes = np.array([20, 45, 40, 15], np.int32)  # rows 0-19, 20-64, 65-104, 105-119; m = 130
    inputs = inputs_for(built, "grouped_f16", 12, m=130, n=256, k=96, group_sizes=sizes,
                        group_offset=1, g_local=2, with_existing_out=existing)
    lhs = inputs["lhs"]
    poke(lhs, (3, 10), INF)  # group 0: another shard's
    poke(lhs, (110, 0), NAN)  # group 3: another shard's
    poke(lhs, (125, 95), -INF)  # past sum(group_sizes)
    poke(lhs, (64, 95), INF)  # last row of owned group 1, last k
    poke(inputs["rhs"], (1, 255, 7), NAN)  # group 2, last up column
    if existing:
        poke(inputs["existing_out"], (4, 1), NAN)
        poke(inputs["existing_out"], (126, 2), -INF)
        poke(inputs["existing_out"], (30, 3), INF)  # an owned row: overwritten
    check(built, "grouped_f16", inputs)
    got = run(built, "grouped_f16", inputs).astype(np.float64)
    if existing:
        assert np.isnan(got[4, 1]) and got[126, 2] == -INF and np.isfinite(got[30, 3])
    else:
        assert not got[list(range(20)) + list(range(105, 130))].any()  # zeros, not NaN
    assert np.isfinite(got[20:64]).all()  # group 1 apart from its inf row


def test_gemv_nonfinite(built):
    """gemv_blocks with m = 3, odd k (the one-element path) and n with a
    partial last warp: inf in one row of lhs, NaN in the last weight row's
    last k, and an e8m0 NaN scale (byte 255) in one weight block."""
    inputs = inputs_for(built, "gemv_blocks", 13, m=3, n=37, k=131)
    poke(inputs["lhs"], (1, 130), INF)
    inputs["rhs"][36, 130] = np.uint8(0x7F).view(ml_dtypes.float8_e4m3fn)
    inputs["rhs_scale"][5, 1] = 255
    check(built, "gemv_blocks", inputs)
    got = run(built, "gemv_blocks", inputs)
    assert np.isnan(got[:, 36]).all() and np.isnan(got[:, 5]).all()
    keep = np.delete(np.delete(got, [5, 36], 1), 1, 0)
    assert np.isfinite(keep).all()


# ---------------------------------------------------------------------------
# nvcc: the exact paths cost no spills


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("name", NAMES)
def test_compiles_without_spills(built, name):
    spec, cuda = built
    lp = cuda_backend.plan(spec.kernel(name), spec)
    for arch in lp.archs:
        result = nvcc.compile_check((cuda / f"{name}.cu").read_text(), arch,
                                    name_for_errors=f"{name}.cu")
        assert set(result.kernels) == set(lp.entries)
        for entry, usage in result.kernels.items():
            assert usage.spill_stores == usage.spill_loads == 0, (arch, entry, usage)


# ---------------------------------------------------------------------------
# The gg_convert.cuh primitives on their own

PRIMITIVES = r"""
#include "gg_runtime.cuh"
#include "gg_convert.cuh"

// out[i] = x[i] * e8m0(a[i]) * e8m0(b[i]) through the kernels' three paths.
extern "C" __global__ void scale_pairs(const float* x, const unsigned char* a, const unsigned char* b,
                                       int count, float* pair, float* exact, float* single) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const float sa = gg::e8m0_to_float(a[i]), sb = gg::e8m0_to_float(b[i]);
    pair[i] = gg::mul_scales(x[i], sa, sb);
    exact[i] = gg::mul_scales_out_of_line(x[i], gg::float_to_bits(sa), gg::float_to_bits(sb));
    single[i] = gg::mul_scale(x[i], sa);
  }
}

// out[i] = x[i] * 2^e[i] and the split of x[i].
extern "C" __global__ void exp2_ops(const float* x, const int* e, int count, float* scaled, float* mant,
                                    int* expo) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    scaled[i] = gg::mul_exp2(x[i], e[i]);
    mant[i] = gg::split_exp2(x[i], expo[i]);
  }
}
"""


@pytest.fixture(scope="module")
def primitives():
    from gemmgen.harness.cuda_emu import EmuModule

    return EmuModule(PRIMITIVES, "test_cuda_edges/primitives.cu")


def _f32(values: np.ndarray) -> np.ndarray:
    """float64 -> f32 with one RNE rounding (inf past the range)."""
    with np.errstate(over="ignore"):
        return np.asarray(values, np.float64).astype(np.float32)


@FTZ
def test_scale_primitives_are_exact_for_every_byte_pair(primitives, ftz):
    """x * 2^(a-127) * 2^(b-127) rounded once, for all 65536 byte pairs (255:
    NaN), from each helper the kernels use; under ftz only results that are
    f32 subnormals may flush."""
    a, b = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    a, b = a.ravel().astype(np.uint8), b.ravel().astype(np.uint8)
    rng = np.random.default_rng(20)
    x = (rng.standard_normal(a.size) * np.exp2(rng.integers(-20, 21, a.size))).astype(np.float32)
    x[:256] = 0.0  # zero partial sums: 0 * 2^254 is 0, not NaN
    n = np.int32(a.size)
    pair, exact, single = primitives.launch(
        "scale_pairs", grid=1, block=256, ftz=ftz,
        args=[x, a, b, n, np.empty(a.size, np.float32), np.empty(a.size, np.float32),
              np.empty(a.size, np.float32)], outputs=[4, 5, 6])
    sa = np.where(a == 255, np.nan, np.exp2(a.astype(np.float64) - 127))
    sb = np.where(b == 255, np.nan, np.exp2(b.astype(np.float64) - 127))
    for got, want in ((pair, _f32(x * sa * sb)), (exact, _f32(x * sa * sb)), (single, _f32(x * sa))):
        flushed = ftz & (np.abs(want) < np.float32(F32_TINY)) & (got == 0)
        same = (got == want) | (np.isnan(got) & np.isnan(want)) | flushed
        assert same.all(), (np.flatnonzero(~same)[:5], got[~same][:5], want[~same][:5])


@FTZ
def test_mul_exp2_and_split_exp2(primitives, ftz):
    rng = np.random.default_rng(21)
    count = 4096
    x = (rng.standard_normal(count) * np.exp2(rng.integers(-149, 128, count))).astype(np.float32)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0**-149, -(2.0**-127), 3.4e38]
    e = rng.integers(-300, 300, count).astype(np.int32)
    scaled, mant, expo = primitives.launch(
        "exp2_ops", grid=1, block=128, ftz=ftz,
        args=[x, e, np.int32(count), np.empty(count, np.float32), np.empty(count, np.float32),
              np.empty(count, np.int32)], outputs=[3, 4, 5])
    x64 = x.astype(np.float64)
    want = _f32(x64 * np.exp2(e.astype(np.float64)))
    subnormal_in = np.abs(x) < np.float32(F32_TINY)
    ok = (scaled == want) | (np.isnan(scaled) & np.isnan(want))
    if ftz:  # a subnormal x (as an input) or result may flush
        ok |= (subnormal_in | (np.abs(want) < np.float32(F32_TINY))) & (np.abs(scaled) <= np.abs(want))
    assert ok.all(), (x[~ok][:5], e[~ok][:5], scaled[~ok][:5], want[~ok][:5])
    # split: m * 2^e == x exactly, m in [1, 2) for finite nonzero x (subnormals
    # too: integer arithmetic, unaffected by ftz)
    finite = np.isfinite(x64) & (x64 != 0)
    assert np.array_equal(mant[finite].astype(np.float64) * np.exp2(expo[finite].astype(np.float64)),
                          x64[finite])
    assert ((np.abs(mant[finite]) >= 1) & (np.abs(mant[finite]) < 2)).all()
    special = ~finite
    assert (expo[special] == 0).all()
    assert np.array_equal(mant[special], x[special], equal_nan=True)
