"""swiglu_clamped (GPT-OSS's gated activation) on the CUDA mma.sync tile
body, on the CPU emulator: interleaved (gate, up) columns and the halves
layout, per-expert bias, at GPT-OSS's n = 5760 and a small awkward n, empty
groups and poisoned outputs, against the float64 reference; planted bugs
(the gate clamped on the wrong side, the pairs read one column off) must
fail. The Hopper and sm_100a bodies run it too (tests/cuda/sm90/
test_cuda_sm90_swiglu.py, tests/cuda/sm100/test_cuda_sm100_swiglu.py) but
for interleaved pairs on weight-only kernels, which stay on this body."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cuda_helpers import Launchers, build_emulators, render_cuda, with_mutated_runtime

from gemmgen import ir
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, random_inputs, reference
from gemmgen.reference.semantics import _evaluate, pair

SPEC = """\
target cuda {
  archs sm_89 sm_90a
}

defaults {
  lhs bf16 [m, k]
  backends cuda
}

# GPT-OSS's gate-up: bf16 experts [g, k, n], per-expert bias, interleaved
# pairs; a small limit so that both clamps bite on random data.
kernel gptoss_gateup {
  op grouped
  rhs bf16 [g, k, n]
  out bf16
  bias bf16 [g, 1, n]
  epilogue swiglu_clamped limit=0.75
  tile m=64 n=128 k=32
}

# The halves layout, rhs [g, n, k], the output scale alpha, other constants.
kernel swiglu_halves {
  op grouped
  rhs bf16 [g, n, k]
  out f32
  bias f32 [g, 1, n]
  epilogue swiglu_clamped pairs=halves alpha=0.5 limit=1.5 alpha_gate=2
  tile m=64 n=128 k=32
}

# Dense, f16 out, per-n bias, int8 weights with per-channel scales.
kernel dense_interleaved {
  op dense
  rhs int8 [n, k]
  out f16
  rhs_scale per_channel f32
  bias f32 [n]
  epilogue swiglu_clamped limit=2
  tile m=64 n=128 k=32
}

# GPT-OSS decode: the batched GEMV (M <= 4), interleaved pairs, bias [n].
kernel gemv_interleaved {
  op dense
  rhs bf16 [n, k]
  out bf16
  bias f32 [n]
  epilogue swiglu_clamped limit=0.75
  algorithm gemv_batched
  max_m 4
  tile m=64 n=128 k=128
}

# The GEMV (M == 1), halves.
kernel gemv_halves {
  op dense
  rhs bf16 [n, k]
  out f32
  epilogue swiglu_clamped pairs=halves limit=1.5 alpha=0.5
  algorithm gemv
  tile m=64 n=128 k=128
}
"""

NAMES = ("gptoss_gateup", "swiglu_halves", "dense_interleaved", "gemv_interleaved",
         "gemv_halves")
MODULES: dict = {}
launcher = Launchers("test_cuda_swiglu")


def source_name(name: str) -> str:
    return f"swiglu/cuda/{name}.cu"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[ir.Spec, Path]:
    spec, cuda, _ = render_cuda(tmp_path_factory.mktemp("swiglu"), "swiglu", SPEC)
    build_emulators(cuda, NAMES, source_name, MODULES)
    return spec, cuda


def verdict(built, name: str, inputs: dict, *, source: str | None = None, tag: str = ""):
    spec, cuda = built
    kernel = spec.kernel(name)
    text = source if source is not None else (cuda / f"{name}.cu").read_text()
    # sm=0: the mma.sync path (the emulated device is an sm_90a, whose
    # Hopper path tests/cuda/sm90/test_cuda_sm90_swiglu.py covers).
    got = run_launcher(launcher(cuda, name), text, source_name(name) + tag, inputs,
                       modules=MODULES, sm=0)
    k = inputs["lhs"].shape[1]
    return got, compare(got, reference(kernel, **inputs), kernel, k=k, inputs=inputs)


def inputs_for(built, name: str, seed: int, **kw) -> dict:
    spec, _ = built
    return random_inputs(spec.kernel(name), rng=np.random.default_rng(seed), **kw)


def _clamps_bite(kernel: ir.Kernel, inputs: dict) -> None:
    gate, up = pair(kernel.epilogue, _evaluate(kernel, **inputs).pre)
    lim = kernel.epilogue.limit
    assert (gate > lim).any() and (up < -lim).any() and (np.abs(up) < lim).any()


def test_sm90a_runs_the_hopper_body_but_for_interleaved_weight_only(built):
    spec, _ = built
    assert spec.kernel("gptoss_gateup").uses_wgmma("sm_90a")
    assert spec.kernel("swiglu_halves").uses_wgmma("sm_90a")
    kernel = spec.kernel("dense_interleaved")  # int8 weights, interleaved pairs
    assert not kernel.uses_wgmma("sm_90a") and "pairs=interleaved" in kernel.wgmma_obstacle()


# n = 5760 is GPT-OSS's (n/2 = 2880, 22.5 tiles of 128 outputs); 200 a small
# awkward one. Group 1 is empty; existing_out is poisoned with NaN.
@pytest.mark.parametrize("n", [200, 5760])
def test_gptoss_gateup_matches_reference(built, n):
    spec, _ = built
    kernel = spec.kernel("gptoss_gateup")
    m, k = 37, 96
    inputs = inputs_for(built, "gptoss_gateup", n, m=m, n=n, k=k,
                        group_sizes=np.array([20, 0, 17]), with_existing_out=True)
    inputs["existing_out"] = np.full_like(inputs["existing_out"], np.nan)
    _clamps_bite(kernel, inputs)
    got, result = verdict(built, "gptoss_gateup", inputs)
    assert result.passed, result.detail
    assert got.shape == (m, n // 2) and not np.isnan(got.astype(np.float32)).any()


@pytest.mark.slow
def test_sharded_rows_keep_existing_out(built):
    inputs = inputs_for(built, "gptoss_gateup", 5, m=40, n=200, k=64, num_groups=5,
                        group_offset=1, g_local=3, with_existing_out=True)
    inputs["existing_out"] = np.full_like(inputs["existing_out"], np.nan)
    got, result = verdict(built, "gptoss_gateup", inputs)
    assert result.passed, result.detail
    assert np.isnan(got.astype(np.float32)).any()


SLOW = pytest.mark.slow


@pytest.mark.parametrize("name, m, n", [
    pytest.param("swiglu_halves", 45, 256, marks=SLOW),
    pytest.param("dense_interleaved", 45, 200, marks=SLOW),
    ("gemv_interleaved", 3, 5760),  # GPT-OSS decode
    pytest.param("gemv_interleaved", 4, 200, marks=SLOW),
    pytest.param("gemv_halves", 1, 200, marks=SLOW),
])
def test_variants_match_reference(built, name, m, n):
    spec, _ = built
    extra = {"num_groups": 3} if spec.kernel(name).grouped else {}
    inputs = inputs_for(built, name, 3, m=m, n=n, k=64, **extra)
    _, result = verdict(built, name, inputs)
    assert result.passed, result.detail


# Planted bugs in the shared body: each must fail on the case above.
PLANTS = {
    "clamp_side": ("gg_convert.cuh", "gate = gate > limit ? limit : gate;",
                   "gate = gate < -limit ? -limit : gate;"),
    "pairs_off_by_one": ("gg_gemm.cuh",
                         "c_tile[r * T::kCStride + 2 * c], c_tile[r * T::kCStride + 2 * c + 1]",
                         "c_tile[r * T::kCStride + 2 * c + 1], c_tile[r * T::kCStride + 2 * c]"),
}


def test_planted_gemv_pair_rows_off_by_one_fail(built):
    """The GEMV reading up row 2j for gate j (and 2j + 1 twice) must fail."""
    _, cuda = built
    text = (cuda / "gemv_interleaved.cu").read_text()
    old = "return a < kOutCols ? 2LL * col : 2LL * col + 1;"
    assert text.count(old) == 1
    bug = text.replace(old, "return a < kOutCols ? 2LL * col + 1 : 2LL * col + 1;")
    inputs = inputs_for(built, "gemv_interleaved", 4, m=3, n=200, k=64)
    _, result = verdict(built, "gemv_interleaved", inputs, source=bug, tag=".pairs")
    assert not result.passed


@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_bug_fails(built, plant):
    _, cuda = built
    header, old, new = PLANTS[plant]
    bug = with_mutated_runtime((cuda / "gptoss_gateup.cu").read_text(), header, old, new)
    inputs = inputs_for(built, "gptoss_gateup", 9, m=37, n=200, k=96, num_groups=3)
    _, result = verdict(built, "gptoss_gateup", inputs, source=bug, tag=f".{plant}")
    assert not result.passed
