"""A tile per backend (docs/spec.md, "A tile per backend"): `tile BACKEND
...` and `tile_rule BACKEND ...` give one backend a tile LUT of its own; the
unqualified `tile` and `tile_rule`s stay the LUT of every other backend.
Parsing and the IR view here; rendering in tests/pallas/test_pallas_plan.py, the
bad specs in tests/cases/tile_backend_*, verify in tests/cli/test_verify.py."""

from __future__ import annotations

import pytest

from gemmgen import ir
from gemmgen.cases import lut_entry, standard_cases
from gemmgen.describe import describe_kernel
from gemmgen.diagnostics import SpecError
from gemmgen.ir import Backend, Tile
from gemmgen.parse import parse
from gemmgen.validate import validate

TARGETS = """\
target cuda {
  archs sm_80 sm_90a
}

target pallas_tpu {
  tpu v5e
}
"""

DENSE = ("op dense", "lhs bf16 [m, k]", "rhs bf16 [n, k]", "out bf16")


def spec(*blocks: str) -> ir.Spec:
    return validate(parse(TARGETS + "\n".join(blocks), "t.gemm"))


def kernel(name: str, *fields: str, backends: str = "pallas_tpu cuda") -> str:
    body = "".join(f"  {f}\n" for f in (*fields, f"backends {backends}"))
    return f"kernel {name} {{\n{body}}}\n"


BOTH = kernel("dense_both", *DENSE, "tile m=64 n=128 k=128",
              "tile_rule m<=32 -> m=32 n=128 k=128",
              "tile pallas_tpu m=512 n=1024 k=512",
              "tile_rule pallas_tpu m<=64 -> m=64 n=1024 k=512",
              "tile_rule pallas_tpu n<=512 -> m=256 n=512 k=512")


def test_a_qualified_tile_is_that_backends_lut_and_the_rest_keep_theirs():
    k = spec(BOTH).kernel("dense_both")
    # The kernel as stated: the unqualified LUT, and the Pallas one beside it.
    assert k.tile == Tile(64, 128, 128) and len(k.tile_rules) == 1 and k.view is None
    (own,) = k.backend_tiles
    assert own.backend is Backend.PALLAS_TPU and own.tile == Tile(512, 1024, 512)
    assert (own.loc.line, own.loc.col) == (15, 3)  # the `tile pallas_tpu` line
    tpu = k.for_backend(Backend.PALLAS_TPU)
    assert tpu.view is Backend.PALLAS_TPU and tpu.tile == Tile(512, 1024, 512)
    assert [r.tile for r in tpu.tile_rules] == [Tile(64, 1024, 512), Tile(256, 512, 512)]
    assert tpu.tile_for(16, 4096, 4096) == Tile(64, 1024, 512)
    assert tpu.tile_for(4096, 256, 4096) == Tile(256, 512, 512)
    assert tpu.tile_for(4096, 4096, 4096) == Tile(512, 1024, 512)
    assert tpu.tile_loc == own.loc
    gpu = k.for_backend(Backend.CUDA)
    assert gpu.tile == Tile(64, 128, 128) and gpu.tile_rules == k.tile_rules
    assert gpu.tile_for(16, 4096, 4096) == Tile(32, 128, 128)
    assert gpu.tile_loc == k.loc  # the unqualified tile: positioned as ever
    # A view is its own view; another backend's view of it is a bug.
    assert tpu.for_backend(Backend.PALLAS_TPU) is tpu
    with pytest.raises(ValueError, match="pallas_tpu view asked for the cuda view"):
        tpu.for_backend(Backend.CUDA)


def test_without_qualified_tiles_a_view_is_the_kernel():
    k = spec(kernel("plain", *DENSE, "tile m=64 n=128 k=128")).kernel("plain")
    assert k.backend_tiles == ()
    for b in Backend:
        v = k.for_backend(b)
        assert (v.tile, v.tile_rules, v.tile_loc) == (k.tile, k.tile_rules, k.loc)


def test_a_backend_lut_is_its_own_lines_only():
    """`tile pallas_tpu` alone: the Pallas LUT has no rules, whatever the
    unqualified `tile_rule`s say (they are the other backends')."""
    k = spec(kernel("d", *DENSE, "tile m=64 n=128 k=128", "tile_rule m<=32 -> m=32 n=128 k=128",
                    "tile pallas_tpu m=256 n=256 k=256")).kernel("d")
    tpu = k.for_backend(Backend.PALLAS_TPU)
    assert tpu.tile_rules == () and tpu.tile_for(8, 8, 8) == Tile(256, 256, 256)


def test_defaults_give_backend_tiles_and_a_kernel_overrides_them():
    s = spec("defaults {\n  tile pallas_tpu m=512 n=512 k=512\n"
             "  tile_rule pallas_tpu m<=64 -> m=64 n=512 k=512\n"
             "  tile_rule pallas_tpu m<=128 -> m=128 n=512 k=512\n}\n",
             kernel("inherits", *DENSE, "tile m=64 n=128 k=128"),
             kernel("overrides", *DENSE, "tile m=64 n=128 k=128",
                    "tile pallas_tpu m=1024 n=1024 k=512"),
             # a CUDA-only kernel does not take the defaults' Pallas tiles
             kernel("gpu_only", *DENSE, "tile m=64 n=128 k=32", backends="cuda"))
    inherits = s.kernel("inherits").for_backend(Backend.PALLAS_TPU)
    assert inherits.tile == Tile(512, 512, 512)
    assert [r.tile.m for r in inherits.tile_rules] == [64, 128]  # every default rule
    overrides = s.kernel("overrides").for_backend(Backend.PALLAS_TPU)
    assert overrides.tile == Tile(1024, 1024, 512)
    assert [r.tile.m for r in overrides.tile_rules] == [64, 128]  # its own tile, default rules
    assert s.kernel("gpu_only").backend_tiles == ()


def test_every_default_tile_rule_reaches_a_kernel_without_rules():
    s = spec("defaults {\n  tile_rule m<=32 -> m=32 n=128 k=128\n"
             "  tile_rule m<=64 -> m=64 n=128 k=128\n}\n",
             kernel("d", *DENSE, "tile m=128 n=128 k=128"))
    assert [r.tile.m for r in s.kernel("d").tile_rules] == [32, 64]


def test_a_qualified_tile_makes_no_variants():
    s = spec(kernel("gmm", *DENSE[:3], "out f32 | bf16", "tile m=64 n=128 k=128",
                    "tile pallas_tpu m=512 n=512 k=512"))
    assert [k.name for k in s.kernels] == ["gmm_out_f32", "gmm_out_bf16"]
    assert all(k.for_backend(Backend.PALLAS_TPU).tile == Tile(512, 512, 512) for k in s.kernels)
    assert all(k.for_backend(Backend.CUDA).tile == Tile(64, 128, 128) for k in s.kernels)


def test_each_lut_is_checked_against_the_scale_blocks_the_unused_one_is_not():
    """Every listed backend has its own LUT: the unqualified tile (here the
    128x128x128 default) is no backend's and not checked; the own ones are."""
    fp8 = ("op dense", "lhs bf16 [m, k]", "rhs int8 [n, k]", "out bf16",
           "rhs_scale block n=128 k=256")
    s = spec(kernel("ok", *fp8, "tile pallas_tpu m=512 n=128 k=64",
                    "tile cuda m=64 n=128 k=64"))
    assert s.kernel("ok").tile == Tile(128, 128, 128)  # unchecked: no backend uses it
    # pallas_tpu's own tile may divide the block or hold whole ones (its
    # kernels loop over them), never straddle one; the CUDA tile divides it.
    with pytest.raises(SpecError) as e:
        spec(kernel("bad", *fp8, "tile m=64 n=128 k=64", "tile pallas_tpu m=512 n=128 k=384"))
    msgs = [(d.loc.line, d.message) for d in e.value.diagnostics]
    assert msgs == [(15, "kernel 'bad': tile pallas_tpu k=384 must divide the rhs_scale "
                         "blocks of k=256 (one scale per K tile) or hold whole ones (one scale "
                         "per block inside the K tile)")]
    with pytest.raises(SpecError) as e:
        spec(kernel("bad", *fp8, "tile m=64 n=128 k=512", "tile pallas_tpu m=512 n=128 k=512"))
    msgs = [(d.loc.line, d.message) for d in e.value.diagnostics]
    assert msgs == [(14, "kernel 'bad': tile k=512 cannot tile the rhs_scale blocks of k=256: "
                         "a K tile must divide the scale block so each partial product is "
                         "promoted with one scale")]
    spec(kernel("fine", *fp8, "tile m=64 n=128 k=128", "tile pallas_tpu m=512 n=128 k=512"))


def test_warp_tile_splits_the_cuda_tile():
    s = spec(kernel("w", *DENSE, "tile m=128 n=128 k=128", "tile cuda m=64 n=64 k=32",
                    "warp_tile m=32 n=32", "threads 128"))
    assert s.kernel("w").for_backend(Backend.CUDA).tile == Tile(64, 64, 32)
    with pytest.raises(SpecError, match="threads 256 disagrees with the warp layout: 2 x 2"):
        spec(kernel("w", *DENSE, "tile m=128 n=128 k=128", "tile cuda m=64 n=64 k=32",
                    "warp_tile m=32 n=32", "threads 256"))


def test_list_describes_each_backends_lut_and_a_view_its_own():
    k = spec(BOTH).kernel("dense_both")
    text = describe_kernel(k)
    assert "tile 64x128x128 +1 tile rule (pallas_tpu: tile 512x1024x512 +2 tile rules)" in text
    assert "pallas_tpu:" not in describe_kernel(k.for_backend(Backend.CUDA))
    assert "tile 512x1024x512 +2 tile rules stages" in describe_kernel(
        k.for_backend(Backend.PALLAS_TPU))


def test_cases_cover_the_lut_of_the_backend_that_runs_them():
    k = spec(BOTH).kernel("dense_both")
    with pytest.raises(ValueError, match="a tile LUT per backend"):
        standard_cases(k)
    for backend, entries in ((Backend.PALLAS_TPU, 3), (Backend.CUDA, 2)):
        view = k.for_backend(backend)
        assert len(view.tile_rules) + 1 == entries
        hit = {lut_entry(view, c) for c in standard_cases(view)}
        assert hit == set(range(entries)), (backend, hit)
    # Each backend's cases are shaped from its own tiles: two n tiles.
    tpu_cases = standard_cases(k.for_backend(Backend.PALLAS_TPU))
    assert tpu_cases[0].name == "ragged" and tpu_cases[0].n == 2 * 1024
    gpu_cases = standard_cases(k.for_backend(Backend.CUDA))
    assert gpu_cases[0].name == "ragged" and gpu_cases[0].n == 2 * 128
