"""Every Pallas kernel of the repository's specs (specs/*.gemm): lowered for
TPU at several shapes, and run once in interpret mode against the reference.
These are the kernels users commit under generated/."""

from __future__ import annotations

from pathlib import Path

import pytest

from gemmgen import ir
from gemmgen.build import load

from pallas_helpers import Generated, check, generate, lower_for_tpu, random_inputs

REPO = Path(__file__).resolve().parent.parent
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
