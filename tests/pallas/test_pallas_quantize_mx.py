"""The MX / NV quantize kernels in Pallas (templates/pallas/quantize.py.j2):
MXFP8 (OCP MX v1.0: e8m0 scales rounded down; e4m3 and e5m2), MXFP4 (packed
e2m1 with e8m0 round=floor, and DeepGEMM's round-up), NVFP4 (packed e2m1,
ue4m3 scales per 16). In TPU interpret mode they must be bit for bit
`reference_output` (scale bytes, q bytes) on fresh random inputs (m = 1,
partial row tiles and K blocks, partial last groups), on the edge rows of
tests/quantize_edges.py and on zero and non-finite groups; each lowers for
TPU (jax.export runs the Mosaic lowering). The same kernels were run on a
TPU v5e, bit for bit the reference but for subnormal inputs, which the TPU
flushes (docs/pallas.md, "quantize").
"""

from __future__ import annotations

import numpy as np
import pytest
from pathlib import Path

from pallas_helpers import (
    build,
    check,
    import_path,
    kernel_block,
    lower_for_tpu,
    random_inputs,
    run,
    spec_text,
)
from quantize_edges import EDGE_GLOBAL, NUMPY_INPUT, edge_rows

from gemmgen import reference as ref
from gemmgen.backends import pallas as pallas_backend
from gemmgen.ir import DType

KERNELS = {
    "mxfp8_quant": ("op quantize", "lhs bf16 [m, k]", "out e4m3",
                    "out_scale per_token_group k=32 e8m0 round=floor"),
    "mxfp8_e5m2_quant": ("op quantize", "lhs f32 [m, k]", "out e5m2",
                         "out_scale per_token_group k=32 e8m0 round=floor"),
    "mxfp4_quant": ("op quantize", "lhs bf16 [m, k]", "out fp4 packed",
                    "out_scale per_token_group k=32 e8m0 round=floor"),
    "fp4_round_up_quant": ("op quantize", "lhs f32 [m, k]", "out fp4 packed",
                           "out_scale per_token_group k=64 e8m0"),
    "nvfp4_quant": ("op quantize", "lhs bf16 [m, k]", "out fp4 packed",
                    "out_scale per_token_group k=16 ue4m3"),
    # Two 256-column packing steps per K block, and 64-row blocks.
    "nvfp4_f32_quant": ("op quantize", "lhs f32 [m, k]", "out fp4 packed",
                        "out_scale per_token_group k=16 ue4m3", "tile m=64 n=128 k=512"),
    # NVFP4 with its global scale GS (an input): scales of amax / GS.
    "nvfp4_global_quant": ("op quantize", "lhs f32 [m, k]", "out fp4 packed",
                           "out_scale per_token_group k=16 ue4m3 global=f32"),
}
SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_quantize_mx"))


# The f32 NVFP4 kernel (32 groups a block, unrolled) takes half a minute in
# interpret mode; the bf16 one runs the same code in CI.
SLOW = ("nvfp4_f32_quant", "mxfp8_e5m2_quant", "nvfp4_global_quant")


# CI runs the edge cases of NVFP4 on the CUDA emulator
# (tests/cuda/sm80/test_cuda_quantize_mx.py) and here the bit-exact cases.
EDGES_SLOW = SLOW + ("nvfp4_quant",)


def names(*only: str, slow: tuple[str, ...] = SLOW) -> list:
    return [pytest.param(n, marks=pytest.mark.slow) if n in slow else n
            for n in (only or KERNELS)]


@pytest.mark.parametrize("name", names())
def test_matches_reference_bit_for_bit(generated, name):
    """m = 1, partial row tiles, a partial last K block and group, k smaller
    than a block; then the lowering for TPU."""
    kernel = generated.kernel(name)
    g = kernel.out_scale.block_k
    for m, k in [(37, 600), (1, 70), (130, 2 * g)]:
        inputs = random_inputs(kernel, m=m, n=k, k=k, seed=m + k)
        q, scale = check(kernel, generated.fn(name), inputs, k=k)  # with GS, where it takes one
        packed = kernel.out is DType.FP4
        assert q.shape == (m, k // 2 if packed else k) and scale.shape == (m, -(-k // g))
        assert scale.dtype == np.uint8 and q.dtype == (np.uint8 if packed else
                                                       np.dtype(kernel.out.numpy_name))
    lower_for_tpu(generated.fn(name), inputs)


@pytest.mark.parametrize("name", names(slow=EDGES_SLOW))
def test_edge_rows(generated, name):
    """Amaxes at powers of two (and ue4m3 values and ties), elements on the
    element format's ties and past its largest value, an all-zero row."""
    kernel = generated.kernel(name)
    glob = EDGE_GLOBAL if kernel.out_scale.global_scale else 1.0
    x = edge_rows(kernel, 6 * kernel.out_scale.block_k + 6, np.random.default_rng(5), glob)
    check(kernel, generated.fn(name), with_global(kernel, x), k=x.shape[1])


def with_global(kernel, x, glob=EDGE_GLOBAL) -> dict:
    """The inputs of a quantize kernel: lhs, and GS where it takes one."""
    if not kernel.out_scale.global_scale:
        return {"lhs": x}
    return {"lhs": x, "global_scale": np.float32(glob)}


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_global_scales(generated):
    """NVFP4 with global scales of 24 significant bits at the ue4m3 and
    e2m1 ties (the exact split products decide them), and ones that are not
    positive finite numbers (every scale NaN, q = +0); a wrong GS argument
    is refused naming it."""
    name = "nvfp4_global_quant"
    kernel = generated.kernel(name)
    rng = np.random.default_rng(21)
    for glob in (float(np.float32(rng.uniform(0.01, 100.0))) for _ in range(2)):
        x = edge_rows(kernel, 48, rng, glob)
        check(kernel, generated.fn(name), with_global(kernel, x, glob), k=48)
    x = edge_rows(kernel, 32, rng, 1.0)
    for bad in (0.0, -2.0, np.inf, np.nan):
        q, scale = check(kernel, generated.fn(name), with_global(kernel, x, bad), k=32)
        assert (scale == 0x7F).all() and (q == 0).all()
    with pytest.raises(ValueError, match=r"global_scale must be a float32 scalar"):
        run(generated.fn(name), {"lhs": x, "global_scale": np.ones(2, np.float32)})


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("name", names("mxfp8_quant", "mxfp4_quant", "nvfp4_quant",
                                        "nvfp4_f32_quant", slow=EDGES_SLOW))
def test_zero_and_nonfinite_groups(generated, name):
    """amax 0 (OCP byte 0; a zero ue4m3 scale: zeros with x's sign); a group
    holding inf or NaN: NaN scale (0xFF, ue4m3 0x7F) and NaN q (FP8) or +0
    (fp4), the other groups of the row untouched."""
    kernel = generated.kernel(name)
    g = kernel.out_scale.block_k
    rng = np.random.default_rng(g)
    x = rng.standard_normal((5, 4 * g)) * 4
    x[0] = 0.0
    x[0, ::3] = -0.0
    x[1, 1] = np.inf
    x[2, g + 2] = np.nan
    x[3, 3 * g:] = -np.inf
    x[4, 2 * g + 1] = np.nan
    x[4, 2 * g + 2] = np.inf
    x = x.astype(NUMPY_INPUT[kernel.lhs.dtype])
    q, scale = check(kernel, generated.fn(name), {"lhs": x}, k=x.shape[1])
    nan_byte = 0x7F if kernel.out_scale.dtype is DType.UE4M3 else 0xFF
    np.testing.assert_array_equal(scale == nan_byte, [
        [False] * 4, [True, False, False, False], [False, True, False, False],
        [False, False, False, True], [False, False, True, False]])
    if kernel.out is DType.FP4:
        assert (q[1, :g // 2] == 0).all() and (q[0] & 0x77 == 0).all()


def test_validation_and_empty(generated):
    with pytest.raises(ValueError, match=r"lhs has k = 101: k must be even"):
        run(generated.fn("nvfp4_quant"), {"lhs": np.ones((4, 101), NUMPY_INPUT[DType.BF16])})
    q, scale = run(generated.fn("mxfp4_quant"), {"lhs": np.ones((0, 64), NUMPY_INPUT[DType.BF16])})
    assert q.shape == (0, 32) and scale.shape == (0, 2)


def test_packed_blocks_are_whole_lanes(generated):
    """The K block of a packed fp4 quantize is a multiple of 256 columns (128
    lanes of bytes): the tile's k rounded up to whole groups and 256."""
    assert pallas_backend.quantize_tk(generated.kernel("nvfp4_quant")) == 256
    assert pallas_backend.quantize_tk(generated.kernel("nvfp4_f32_quant")) == 512
    assert pallas_backend.quantize_tk(generated.kernel("mxfp8_quant")) == 128


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("old,new", [
    ("return (a - c * hi) - c * lo", "return a - c * (hi + lo)"),  # the rounded product decides
    ("code = _ue4m3_code_scaled(jnp.where(finite, amax, 0.0), gs, hi, lo)",
     "code = _ue4m3_code(_divide_by_6(jnp.where(finite, amax, 0.0)) / gs)"),  # the guess kept
], ids=["rounded_product", "guess_kept"])
def test_planted_global_scale_bugs(generated, tmp_path, old, new):
    """Ties decided by the rounded product c * GS, or the guess from f32
    divisions kept: the edge rows at a GS of 24 significant bits fail."""
    name = "nvfp4_global_quant"
    text = Path(generated.modules[name].__file__).read_text()
    assert text.count(old) == 1, old
    path = tmp_path / f"{name}_planted.py"
    path.write_text(text.replace(old, new))
    fn = getattr(import_path(path), name)
    kernel = generated.kernel(name)
    x = edge_rows(kernel, 48, np.random.default_rng(21), EDGE_GLOBAL)
    inputs = with_global(kernel, x)
    expected = ref.reference(kernel, **inputs)
    assert not ref.compare(run(fn, inputs), expected, kernel, k=48, inputs=inputs).passed
