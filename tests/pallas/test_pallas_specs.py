"""Every Pallas kernel of the repository's specs (specs/*.gemm): lowered for
TPU at several shapes, and run once in interpret mode against the reference.
These are the kernels users commit under generated/."""

from __future__ import annotations

from pathlib import Path

import pytest

from gemmgen import ir
from gemmgen.build import load

from pallas_helpers import Generated, check, generate, lower_for_tpu, pallas_blocks, random_inputs

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "specs").glob("*.gemm"))


def _kernels() -> list[tuple[Path, str]]:
    out = []
    for path in SPECS:
        spec, _ = load(path)
        out += [(path, k.name) for k in spec.kernels_for(ir.Backend.PALLAS_TPU)]
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[Path, Generated]:
    out = {}
    for path in SPECS:
        spec, _ = load(path)
        out[path] = Generated(spec, generate(spec, tmp_path_factory.mktemp(spec.stem)))
    return out


def _inputs(kernel: ir.Kernel, m: int, n: int, k: int, **kw):
    # silu_mul pairs column j with j + n/2 in 128-lane blocks: n % 256 == 0.
    n = kernel.static_n or n * kernel.out_n_divisor
    k = kernel.static_k or k
    extra = {"num_groups": 5, **kw} if kernel.grouped else {}
    return random_inputs(kernel, m=m, n=n, k=k, **extra), k


@pytest.mark.parametrize("path,name", _kernels(), ids=lambda x: getattr(x, "stem", x))
def test_spec_kernel(rendered, path, name):
    gen = rendered[path]
    kernel, fn = gen.kernel(name), gen.fn(name)
    for m, n, k in [(256, 256, 512), (37, 384, 640), (3, 128, 128)]:
        lower_for_tpu(fn, _inputs(kernel, m, n, k)[0])
    inputs, k = _inputs(kernel, 200, 256, 384)
    check(kernel, fn, inputs, k=k)
    differentiable = getattr(gen.modules[name], f"{name}_vjp", None)
    if differentiable is not None:
        lower_for_tpu(differentiable, inputs)


@pytest.mark.parametrize("path,name", _kernels(), ids=lambda x: getattr(x, "stem", x))
def test_blocks_past_m_are_whole_sublane_tiles(rendered, path, name):
    """A block cut from fewer rows than the tile (m = 37 or 165 here, < or
    between tiles) covers whole sublane tiles of its dtype (8 rows of 32-bit,
    16 of 16-bit, 32 of 8-bit data), overrunning the array: a block of exactly
    37 or 165 rows passes the BlockSpec rules and the Mosaic lowering on the
    CPU, but Mosaic cannot compile the masks of its value on a TPU (a v5e
    refused gmm_bf16 with m = 165 under a 256-row tile: "Not implemented:
    Sublane broadcast")."""
    gen = rendered[path]
    kernel, fn = gen.kernel(name), gen.fn(name)
    checked = 0
    for m in (37, 165):
        inputs, _ = _inputs(kernel, m, 256, 384)
        # The masked layout runs its [g, m, k] lhs as [g * m, k] rows.
        rows_dim = {m, m * len(inputs["masked_m"])} if kernel.masked else {m}
        for block, shape, dtype in pallas_blocks(fn, inputs):
            if len(block) < 2 or shape[-2] not in rows_dim or block[-2] in (None, 1):
                continue
            rows = 8 * 4 // min(dtype.itemsize, 4)
            assert block[-2] % rows == 0, (
                f"{name}: a block of {block[-2]} rows of {dtype} on an array {shape} with m = {m}")
            checked += 1
    assert checked, f"{name}: no block of the m dim was seen"
