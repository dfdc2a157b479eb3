"""CUDA launchers of a LUT with rules on the groups (issue 41): pick_tile
takes g (len(group_sizes) on the contiguous layout, lhs.shape[0] on the
masked one) in the Python, C++ and Rust launchers, and the Python plan
launches the entry the spec's LUT picks, the same as Pallas's tile_for."""

from __future__ import annotations

import itertools

import pytest

from cuda_helpers import render_cuda
from gemmgen import ir
from gemmgen.harness.runner import load_generated_module

SPEC = """\
target cuda {
  archs sm_80
  launchers cpp cupy rust
}

kernel lutg {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, k, n]
  out bf16
  backends cuda
  tile m=128 n=128 k=32
  tile_rule m/g<=16 -> m=64 n=128 k=32
  tile_rule g>=6 n<=256 -> m=128 n=64 k=32
}

kernel lutg_masked {
  op grouped
  lhs bf16 [g, m, k]
  rhs bf16 [g, k, n]
  out bf16
  backends cuda
  tile m=128 n=128 k=32
  tile_rule m/g<=32 g<=2 -> m=64 n=128 k=32
}
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    root = tmp_path_factory.mktemp("lutg")
    spec, cuda, files = render_cuda(root, "lutg", SPEC)
    mods = {k.name: load_generated_module(cuda / f"{k.name}.py", f"_lutg_{k.name}")
            for k in spec.kernels}
    return spec, mods, files


def test_pick_tile_follows_the_spec_lut(rendered):
    spec, mods, _ = rendered
    for name in ("lutg", "lutg_masked"):
        kernel = spec.kernel(name).for_backend(ir.Backend.CUDA)
        seen = set()
        for m, n, g in itertools.product((0, 1, 16, 17, 64, 100, 4096), (64, 256, 512),
                                         (0, 1, 2, 3, 6, 8)):
            want, _ = kernel.tile_rule_for(m, n, 128, g)
            assert mods[name].pick_tile(m, n, 128, g) == want, (name, m, n, g)
            seen.add(want)
        assert seen == set(range(len(kernel.tile_rules) + 1)), name  # every entry reached


def test_launches_run_the_picked_entry(rendered):
    _, mods, _ = rendered
    mod = mods["lutg"]
    # 4 groups of 64 rows: m/g = 16 -> the 64-row tile (entry 0)
    dims = {"m": 64, "n": 256, "n_out": 256, "k": 128, "g": 4, "num_groups": 4, "group_offset": 0}
    assert [s.entry for s in mod.launches(dims)][-1] == "lutg_t0"
    # 8 groups of 200 rows, n = 256: entry 1; n = 512: the default
    dims.update(m=1600, g=8, num_groups=8)
    assert [s.entry for s in mod.launches(dims)][-1] == "lutg_t1"
    dims.update(n=512, n_out=512)
    assert [s.entry for s in mod.launches(dims)][-1] == "lutg_t2"
    # a shard: the LUT counts every group of group_sizes, not the local ones
    dims.update(n=256, n_out=256, g=2, group_offset=6)
    assert [s.entry for s in mod.launches(dims)][-1] == "lutg_t1"


def test_cpp_and_rust_pick_tile_take_the_groups(rendered):
    _, _, files = rendered
    text = {str(p): t for p, t in files.items()}
    header = text["cuda/lutg.h"]
    assert "inline int lutg_pick_tile(long long m, long long n, [[maybe_unused]] long long k, " \
        "long long g) {" in header
    assert "if (g > 0 && gg_div(m, g) <= 16) {" in header
    assert "lutg_pick_tile(m, n, k, num_groups)" in header
    rust = text["rust/src/lutg.rs"]
    assert "pub fn pick_tile(m: i64, n: i64, _k: i64, g: i64) -> usize {" in rust
    assert "pick_tile(m, n, k, num_groups)" in rust
    masked = text["cuda/lutg_masked.h"]
    assert "if (m <= 32 && g <= 2) {" in masked  # m is a group's capacity
    assert "lutg_masked_pick_tile(m, n, k, g)" in masked
