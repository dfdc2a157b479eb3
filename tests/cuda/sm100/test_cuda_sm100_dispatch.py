"""The M dispatchers of specs/dense.gemm on an emulated B200 (sm_100a,
compute capability 10.0): `dense_mm_bf16` (bf16 weights) and
`fp8_weight_mm` (W8A16: e4m3 weights, per-channel scales) pick the GEMV for
m = 1, the batched GEMV for m <= 8 and the tile GEMM beyond, which on 10.0
is the tcgen05 body (the weight-only tile for W8A16,
gg_gemm_sm100_mixed.cuh). Checked: the arm each dispatcher picks at m = 1,
8, 64 and 300, the launches that arm's launcher makes on 10.0, and the
result of the dispatched call on the emulated device against the reference
(fresh random inputs, poisoned outputs).

Unmarked: the picks and launches (no compiler) and the W8A16 tile arm at
m = 64 on the emulator; the other runs are `slow`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cuda_helpers import REPO, render_cuda
from sm100_helpers import SM100

from gemmgen import ir
from gemmgen.harness.runner import load_generated_module
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, random_inputs, reference

# (dispatcher, m) -> (the arm, its last launch's entry on 10.0)
EXPECTED = {
    ("dense_mm_bf16", 1): ("dense_gemv_bf16", "dense_gemv_bf16"),
    ("dense_mm_bf16", 8): ("dense_gemv_batched_bf16", "dense_gemv_batched_bf16"),
    ("dense_mm_bf16", 64): ("dense_gemm_bf16", "dense_gemm_bf16_sm100"),
    ("dense_mm_bf16", 300): ("dense_gemm_bf16", "dense_gemm_bf16_sm100"),
    ("fp8_weight_mm", 1): ("dense_gemv_fp8w", "dense_gemv_fp8w"),
    ("fp8_weight_mm", 8): ("dense_gemv_batched_fp8w", "dense_gemv_batched_fp8w"),
    ("fp8_weight_mm", 64): ("fp8_weight_gemm", "fp8_weight_gemm_sm100"),
    ("fp8_weight_mm", 300): ("fp8_weight_gemm", "fp8_weight_gemm_sm100"),
}
N, K = 136, 208  # a partial n tile; k not a multiple of the 64-element K tile


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    root = tmp_path_factory.mktemp("sm100dispatch")
    spec, cuda, _ = render_cuda(root, "dense", (REPO / "specs" / "dense.gemm").read_text())
    return spec, cuda


def module(cuda: Path, name: str):
    return load_generated_module(cuda / f"{name}.py", f"test_sm100_dispatch_{name}")


def test_the_dispatchers_pick_their_arms_and_paths_on_10_0(dense):
    spec, cuda = dense
    for (name, m), (arm, entry) in EXPECTED.items():
        d = module(cuda, name)
        assert d.pick(m) == arm, (name, m)
        k = spec.kernel(arm)
        inputs = random_inputs(k, m=m, n=N, k=K, rng=np.random.default_rng(m))
        dims = d.validate(**inputs)
        # A tile GEMM's launcher takes the device (its path), a GEMV's not.
        tile = k.algorithm is ir.Algorithm.TILE
        steps = d.arm(arm).launches(dims, 100, 148) if tile else d.arm(arm).launches(dims)
        assert steps[-1].entry == entry, (name, m, [s.entry for s in steps])
        if entry.endswith("_sm100"):
            # The persistent grid on the B200's 148 SMs: one block per tile.
            tiles = -(-m // 128) * -(-N // 128)
            assert steps[-1].grid == (min(148, tiles), 1, 1)
            assert steps[-1].block == ((320 if arm == "fp8_weight_gemm" else 192), 1, 1)


@pytest.mark.parametrize("name,m", [
    pytest.param(n, m, id=f"{n}-m{m}",
                 marks=() if (n, m) == ("fp8_weight_mm", 64) else pytest.mark.slow)
    for n, m in EXPECTED])
def test_the_dispatched_call_on_an_emulated_b200(dense, name, m):
    spec, cuda = dense
    d = module(cuda, name)
    arm = d.pick(m)
    k = spec.kernel(arm)
    inputs = random_inputs(k, m=m, n=N, k=K, rng=np.random.default_rng())
    source = cuda / f"{arm}.cu"
    actual = run_launcher(d.arm(arm), source.read_text(), str(source), inputs, arch=SM100,
                          num_sms=2)
    result = compare(actual, reference(k, **inputs), k, k=K, inputs=inputs)
    assert result.passed, f"{name} m={m} ({arm}):\n{result.detail}"
