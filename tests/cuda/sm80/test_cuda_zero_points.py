"""uint4 weights with zero points (`rhs_scale ... zero=uint4`) on the CUDA
tile GEMM's mma.sync body, run on the CPU emulator against the float64
reference: dense (`block n=1`, rhs [k, n]) and grouped / masked (`kblock`,
[g, n, k]), ragged m, n and k, empty groups, odd n, m = 1; plain uint4; and
planted bugs in the shared body (zero point from the wrong nibble, with the
wrong sign, from the wrong K block) that the emulated runs must catch."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_helpers import RenderedSpec, with_mutated_runtime

from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, random_inputs, reference

SPEC = RenderedSpec("zero_points", """
target cuda {
  archs sm_80 sm_90a
}

defaults {
  backends cuda
}

kernel gmm_asym {
  op grouped
  lhs bf16 [m, k]
  rhs uint4 packed [g, n, k]
  out bf16
  rhs_scale kblock k=128 f32 zero=uint4
  bias f32 [g, 1, n]
  tile m=64 n=64 k=64
}

kernel dense_asym_kn {
  op dense
  lhs f16 [m, k]
  rhs uint4 packed [k, n]
  out f32
  rhs_scale block n=1 k=64 bf16 zero=uint4
  tile m=64 n=64 k=32
}

kernel masked_asym_silu {
  op grouped
  lhs bf16 [g, m, k]
  rhs uint4 packed [g, n, k]
  out bf16
  rhs_scale kblock k=64 f32 zero=uint4
  epilogue silu_mul
  tile m=32 n=64 k=64
}

kernel dense_uint4 {
  op dense
  lhs bf16 [m, k]
  rhs uint4 packed [n, k]
  out f32
  rhs_scale per_channel f32
  tile m=64 n=64 k=64
}
""")

_modules: dict = {}


def _run(name: str, inputs: dict, source: str | None = None):
    folder = SPEC.folder
    text = source if source is not None else (folder / f"{name}.cu").read_text()
    key = f"zero_points/{name}.cu" + ("" if source is None else f"#{hash(source)}")
    return run_launcher(SPEC.launcher(name), text, key, inputs, modules=_modules,
                        arch="sm_80")


def _check(name: str, inputs: dict, k: int, source: str | None = None):
    kernel = SPEC.kernel(name)
    result = compare(_run(name, inputs, source), reference(kernel, **inputs), kernel, k=k,
                     inputs=inputs)
    return result


def _inputs(name: str, m: int, n: int, k: int, seed: int, **kw):
    kernel = SPEC.kernel(name)
    if kernel.grouped and not kernel.masked:
        kw.setdefault("num_groups", 3)
    return random_inputs(kernel, m=m, n=n, k=k, rng=np.random.default_rng(seed), **kw)


@pytest.mark.parametrize("name, m, n, k", [
    ("gmm_asym", 70, 100, 224),  # ragged m, n and k; k past the last scale block
    ("gmm_asym", 1, 129, 320),  # m = 1, odd n: the zero points' last nibble unused
    ("dense_asym_kn", 65, 96, 160),
    ("masked_asym_silu", 40, 128, 192),
    ("dense_uint4", 33, 64, 96),
])
def test_matches_reference(name, m, n, k):
    result = _check(name, _inputs(name, m, n, k, seed=m + n + k), k)
    assert result.passed, result.detail


def test_empty_groups_and_group_offset():
    sizes = np.array([0, 30, 0, 41, 0], np.int32)
    inputs = _inputs("gmm_asym", 90, 64, 256, seed=3, group_sizes=sizes, group_offset=1,
                     g_local=3, with_existing_out=True)
    result = _check("gmm_asym", inputs, 256)
    assert result.passed, result.detail


def test_only_the_mma_sync_body():
    """A zero-point kernel never qualifies for the Hopper body: sm_90a runs
    it on mma.sync too."""
    kernel = SPEC.kernel("gmm_asym")
    assert not kernel.uses_wgmma("sm_90a")


@pytest.mark.parametrize("old, new", [
    # the zero point read from the other nibble of its byte
    ("return static_cast<float>((rhs_zero[index >> 1] >> (4 * (index & 1))) & 0xFu);",
     "return static_cast<float>((rhs_zero[index >> 1] >> (4 * (~index & 1))) & 0xFu);"),
    # added instead of subtracted
    ("v = gg::from_float<mma_t>(gg::to_float(v) - z);",
     "v = gg::from_float<mma_t>(gg::to_float(v) + z);"),
    # the K block of the K tile's first element for the whole tile, one block late
    ("const int kb = (k + T::kRhsScaleBlockK - 1) / T::kRhsScaleBlockK, b = kk / T::kRhsScaleBlockK;",
     ("const int kb = (k + T::kRhsScaleBlockK - 1) / T::kRhsScaleBlockK,\n"
      "            b = (kk / T::kRhsScaleBlockK + 1) % kb;")),
], ids=["nibble", "sign", "k_block"])
def test_planted_zero_point_bugs_are_caught(old, new):
    name = "gmm_asym"
    source = (SPEC.folder / f"{name}.cu").read_text()
    inputs = _inputs(name, 48, 64, 256, seed=9)
    assert _check(name, inputs, 256).passed
    mutant = with_mutated_runtime(source, "gg_gemm.cuh", old, new)
    assert not _check(name, inputs, 256, mutant).passed
