"""K tiles against MX / NV scale blocks (docs/spec.md, "MX and NV block
scales"): an e8m0 scale per K block of one row (MXFP8 / MXFP4 in
layout=rows) may be divided by a K tile, as every K-blocked scale may, or
held whole by it (several blocks per K tile, what the Pallas backend does
with a 256-wide TPU K tile and blocks of 32); every other K-blocked scale
keeps its rule. The CUDA backend takes several blocks per K tile, and
refuses blocks narrower than its MMA step with a positioned diagnostic (not
a wrong kernel)."""

from __future__ import annotations

import pytest

from gemmgen import backends, ir
from gemmgen.diagnostics import SpecError
from gemmgen.parse import parse
from gemmgen.validate import validate

TARGETS = """\
target cuda {
  archs sm_120a
}

target pallas_tpu {
  tpu v5e
}
"""

MXFP8 = ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16")


def kernel(name: str, *fields: str, backends: str = "pallas_tpu") -> str:
    body = "".join(f"  {f}\n" for f in (*fields, f"backends {backends}"))
    return f"kernel {name} {{\n{body}}}\n"


def messages(*blocks: str, diagnose: bool = True) -> list[tuple[int, str]]:
    """(line, message) of every diagnostic of the spec; [] when it is valid."""
    try:
        validate(parse(TARGETS + "\n".join(blocks), "t.gemm"),
                 diagnose=backends.diagnose if diagnose else None)
    except SpecError as e:
        return [(d.loc.line, d.message) for d in e.diagnostics]
    return []


@pytest.mark.parametrize("tile", ["k=32", "k=256", "k=512"])
def test_an_e8m0_row_scale_may_hold_whole_blocks_or_divide_one(tile):
    for scales in (("lhs_scale per_token_group k=32 e8m0", "rhs_scale block n=1 k=32 e8m0"),
                   ("lhs_scale per_token_group k=256 e8m0",)):
        assert messages(kernel("mx", *MXFP8, *scales, f"tile m=128 n=128 {tile}"),
                        diagnose=False) == []


def test_other_k_blocked_scales_keep_their_rule():
    cases = [
        ("rhs_scale block n=1 k=32 bf16", "tile k=256 cannot tile the rhs_scale blocks of k=32"),
        ("rhs_scale block n=128 k=32 e8m0",
         "tile k=256 cannot tile the rhs_scale blocks of k=32"),
        ("lhs_scale per_token_group k=32 f32",
         "tile k=256 cannot tile the lhs_scale blocks of k=32"),
        ("lhs_scale per_token_group k=96 e8m0",
         ("tile k=256 must divide the lhs_scale blocks of k=96 (one scale per K tile) or hold "
         "whole ones (one scale per block inside the K tile)")),
    ]
    for scale, message in cases:  # a tile the CUDA kernel uses divides the block
        got = messages(kernel("bad", *MXFP8, scale, "tile m=128 n=128 k=256",
                              backends="pallas_tpu cuda"), diagnose=False)
        assert len(got) == 1 and message in got[0][1], got
    # A tile only pallas_tpu uses may hold whole blocks of any of them (its
    # kernels loop over the blocks: docs/pallas.md), never straddle one.
    for scale, message in cases:
        got = messages(kernel("bad", *MXFP8, scale, "tile m=128 n=128 k=256"), diagnose=False)
        if "k=96" in scale:  # at the tile line
            assert len(got) == 1 and got[0][0] == 14 and message in got[0][1], got
        else:
            assert got == [], got


def test_cuda_takes_several_e8m0_blocks_per_k_tile():
    """The CUDA backend runs a K tile holding several MX blocks (the
    block-scaled MMA on sm_120a, a promotion after each block elsewhere)."""
    mx = (*MXFP8, "lhs_scale per_token_group k=32 e8m0", "rhs_scale block n=1 k=32 e8m0")
    assert messages(kernel("mx", *mx, "tile m=128 n=128 k=64", "tile_rule m<=64 -> m=64 n=128 "
                           "k=32", "tile pallas_tpu m=256 n=256 k=256",
                           backends="pallas_tpu cuda")) == []


def test_cuda_refuses_blocks_narrower_than_its_mma_step():
    """Blocks of 16 held several to a K tile: the mma.sync body promotes
    after whole FP8 MMA steps of 32, so it cannot split them; a positioned
    diagnostic at the LUT line of cuda's own (not a wrong kernel)."""
    mx16 = (*MXFP8, "lhs_scale per_token_group k=16 e8m0")
    got = messages(kernel("mx", *mx16, "tile cuda m=128 n=128 k=32",
                          "tile_rule cuda m<=64 -> m=64 n=128 k=64",
                          "tile pallas_tpu m=256 n=256 k=256", backends="pallas_tpu cuda"))
    assert got == [
        (14, "kernel 'mx': tile cuda k=32 holds 2 lhs_scale blocks of k=16, but cuda's mma.sync "
             "body promotes after whole e4m3 MMA steps of k=32, and lhs_scale blocks of k=16 are "
             "not; give cuda K tiles that divide the block (a 'tile cuda' LUT of its own)"),
        (15, "kernel 'mx': tile_rule cuda k=64 holds 4 lhs_scale blocks of k=16, but cuda's "
             "mma.sync body promotes after whole e4m3 MMA steps of k=32, and lhs_scale blocks of "
             "k=16 are not; give cuda K tiles that divide the block (a 'tile cuda' LUT of its "
             "own)")], got


def test_the_ir_names_the_tiles_that_hold_several_blocks():
    s = validate(parse(TARGETS + kernel(
        "mx", *MXFP8, "lhs_scale per_token_group k=32 e8m0", "tile m=128 n=128 k=32",
        "tile pallas_tpu m=256 n=256 k=256", "tile_rule pallas_tpu m<=64 -> m=64 n=256 k=128",
        backends="pallas_tpu cuda"), "t.gemm"))
    k = s.kernel("mx")
    assert k.for_backend(ir.Backend.CUDA).several_scale_blocks_per_k_tile() == []
    held = k.for_backend(ir.Backend.PALLAS_TPU).several_scale_blocks_per_k_tile()
    assert [what for _, what in held] == [
        "tile pallas_tpu k=256 holds 8 lhs_scale blocks of k=32",
        "tile_rule pallas_tpu k=128 holds 4 lhs_scale blocks of k=32"]
    assert k.lhs_scale.blocks_in_k_tile and not k.lhs_scale.per_mma_block
