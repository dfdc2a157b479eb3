"""The NumPy reference of the MX / NV block-scaled formats (OCP MX v1.0,
NVIDIA's NVFP4) against plain Python: every code of e2m1, e8m0 and ue4m3
decoded by its bit-level definition, the packed fp4 nibble order, and whole
GEMMs (MXFP8, MXFP4, NVFP4, W4A8; row-major and atom128x4 scales; grouped
with empty groups) against a loop over rows, columns and K blocks on fresh
random inputs, with NaN, zero and largest scale bytes planted."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from gemmgen import ir
from gemmgen.diagnostics import SpecError
from gemmgen.numerics import (
    e8m0_to_float,
    float64_to_storage,
    from_fp4_codes,
    pack_nibbles,
    storage_to_float64,
    ue4m3_to_float,
    unpack_nibbles,
)
from gemmgen.parse import parse
from gemmgen.reference import random_group_sizes, random_inputs, reference
from gemmgen.reference.blockscale import atoms_to_rows, rows_to_atoms
from gemmgen.validate import validate


def e2m1_by_definition(code: int) -> float:
    sign = -1.0 if code & 8 else 1.0
    exp, man = (code >> 1) & 3, code & 1
    return sign * (man * 0.5 if exp == 0 else 2.0 ** (exp - 1) * (1 + man / 2))


def e8m0_by_definition(byte: int) -> float:
    return math.nan if byte == 0xFF else 2.0 ** (byte - 127)


def ue4m3_by_definition(byte: int) -> float:
    if byte == 0x7F:
        return math.nan
    exp, man = byte >> 3, byte & 7
    return man * 2.0**-9 if exp == 0 else 2.0 ** (exp - 7) * (1 + man / 8)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_e2m1_codes():
    got = from_fp4_codes(np.arange(16, dtype=np.uint8))
    assert all(same(float(g), e2m1_by_definition(c)) for c, g in enumerate(got))
    assert got.max() == 6.0 and got.min() == -6.0


def test_packed_fp4_nibble_order():
    # Element 2i is the low nibble of byte i, element 2i+1 the high one.
    codes = np.array([[1, 2, 15, 7]], np.uint8)  # 0.5, 1.0, -6.0, 6.0
    packed = pack_nibbles(codes)
    assert packed.tolist() == [[0x21, 0x7F]]
    assert storage_to_float64(packed, ir.DType.FP4).tolist() == [[0.5, 1.0, -6.0, 6.0]]
    assert unpack_nibbles(np.array([0x9A], np.uint8)).tolist() == [0xA, 0x9]


def test_e8m0_bytes():
    got = e8m0_to_float(np.arange(256, dtype=np.uint8))
    assert all(same(float(g), e8m0_by_definition(b)) for b, g in enumerate(got))
    assert got[0] == 2.0**-127 and np.all(got[:255] > 0)  # no zero
    assert math.isnan(got[255])


def test_ue4m3_bytes():
    got = ue4m3_to_float(np.arange(128, dtype=np.uint8))
    assert all(same(float(g), ue4m3_by_definition(b)) for b, g in enumerate(got))
    assert got[0] == 0.0 and got[1] == 2.0**-9 and got[0x7E] == 448.0 and math.isnan(got[0x7F])
    with pytest.raises(ValueError, match="0x80 .* sign bit"):
        ue4m3_to_float(np.array([3, 0x80], np.uint8))


def test_ue4m3_encoding_rounds_to_nearest_and_saturates():
    x = np.array([0.0, 2.0**-10, 2.0**-9 * 1.5, 1.0, 1.0625, 1.1875, 300.0, 448.0, 464.0, 1e9])
    got = float64_to_storage(x, ir.DType.UE4M3)
    assert got.dtype == np.uint8 and got.max() <= 0x7E
    # RNE: 2**-10 ties to 0, 1.5 * 2**-9 to 2 * 2**-9, 1.0625 to 1.0, 1.1875
    # to 1.25; 300 to 288 (spacing 32); above 448 saturates to 0x7E.
    want = [0.0, 0.0, 2.0**-8, 1.0, 1.0, 1.25, 288.0, 448.0, 448.0, 448.0]
    assert ue4m3_to_float(got).tolist() == want
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match="non-negative"):
            float64_to_storage(np.array([bad]), ir.DType.UE4M3)


def test_atom_layout_round_trip():
    rng = np.random.default_rng(1)
    values = rng.integers(0, 255, size=(3, 200, 7), dtype=np.uint8)
    stored = rows_to_atoms(values, fill=0)
    assert stored.shape == (3, 256, 8)
    assert np.array_equal(atoms_to_rows(stored, 200, 7), values)
    # Row 33, K block 5 of matrix 1: atom (0, 1), byte 1 * 16 + 1 * 4 + 1 = 21.
    assert stored[1].reshape(-1)[512 + 21] == values[1, 33, 5]


def load(text: str) -> ir.Spec:
    return validate(parse(text, "t.gemm"))


def kernel_of(lhs: str, rhs: str, lhs_scale: str, rhs_scale: str, op: str = "dense",
              tile_k: int | None = None) -> ir.Kernel:
    if tile_k is None:
        # Row-major e8m0 scales promote per K tile (a tile divides the block);
        # ue4m3 and atom128x4 ones are applied per block inside a tile.
        per_tile = "e8m0" in lhs_scale and "atom128x4" not in lhs_scale
        tile_k = 32 if per_tile else 64
    g = "[g, n, k]" if op == "grouped" else "[n, k]"
    text = f"""
target cuda {{
  archs sm_120a
}}
kernel mx {{
  op {op}
  lhs {lhs} [m, k]
  rhs {rhs} {g}
  out f32
  lhs_scale {lhs_scale}
  rhs_scale {rhs_scale}
  tile m=64 n=64 k={tile_k}
  backends cuda
}}
"""
    return load(text.replace("fp4 [", "fp4 packed [")).kernel("mx")


FORMATS = {
    "mxfp8": ("e4m3", "e4m3", "per_token_group k=32 e8m0", "block n=1 k=32 e8m0"),
    "mxfp8_e5m2": ("e5m2", "e4m3", "per_token_group k=32 e8m0", "block n=1 k=32 e8m0"),
    "mxfp4": ("fp4", "fp4", "per_token_group k=32 e8m0", "block n=1 k=32 e8m0"),
    "nvfp4": ("fp4", "fp4", "per_token_group k=16 ue4m3", "block n=1 k=16 ue4m3"),
    "nvfp4_global": ("fp4", "fp4", "per_token_group k=16 ue4m3 global=f32",
                     "block n=1 k=16 ue4m3 global=f32"),
    "w4a8": ("e4m3", "fp4", "per_token_group k=32 e8m0", "block n=1 k=32 e8m0"),
}


def loop_reference(kernel: ir.Kernel, inputs: dict) -> np.ndarray:
    """out[i, j] = sum over K blocks of sa[i, b] * sb[j, b] * sum a[i, kk] * b[j, kk],
    one element at a time, in Python floats."""
    a = storage_to_float64(inputs["lhs"], kernel.lhs.dtype).tolist()
    b = storage_to_float64(inputs["rhs"], kernel.rhs.dtype)
    grouped = kernel.op is ir.Op.GROUPED
    m, k = len(a), len(a[0])
    bk_a, bk_b = kernel.lhs_scale.block_k, kernel.rhs_scale.block_k

    def rows(side: str, count: int, kb: int, array):
        scale = getattr(kernel, f"{side}_scale")
        array = np.asarray(array)
        if scale.layout is ir.ScaleLayout.ATOM128X4:
            flat = array.reshape(array.shape[:-2] + (-1,))
            out = np.empty(array.shape[:-2] + (count, kb), array.dtype)
            for idx in np.ndindex(array.shape[:-2]):
                for r in range(count):
                    for blk in range(kb):
                        out[idx + (r, blk)] = flat[idx + (ir.scale_atom_offset(r, blk, kb),)]
            array = out
        return storage_to_float64(array, scale.dtype)

    sa = rows("lhs", m, -(-k // bk_a), inputs["lhs_scale"]).tolist()
    n = b.shape[-2]
    sb = rows("rhs", n, -(-k // bk_b), inputs["rhs_scale"])
    if grouped:
        starts = np.concatenate([[0], np.cumsum(inputs["group_sizes"])]).tolist()
        group_of = [next(gi for gi in range(len(starts) - 1) if starts[gi] <= i < starts[gi + 1])
                    for i in range(m)]
    def global_of(side: str, gi: int | None) -> float:
        # NVFP4's second level: one f32 per tensor (per group when grouped).
        g = inputs.get(f"{side}_global_scale")
        if g is None:
            return 1.0
        return float(np.float32(g if gi is None else g[gi]))

    out = np.zeros((m, n))
    for i in range(m):
        gi = group_of[i] if grouped else None
        bm = (b[gi] if grouped else b).tolist()
        sbm = (sb[gi] if grouped else sb).tolist()
        both = global_of("lhs", gi) * global_of("rhs", gi)
        for j in range(n):
            total = 0.0
            for kk in range(k):
                total += a[i][kk] * bm[j][kk] * sa[i][kk // bk_a] * sbm[j][kk // bk_b]
            out[i, j] = total * both
    return out


@pytest.mark.parametrize("layout", ["rows", "atom128x4"])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_dense_reference_matches_a_loop(fmt, layout):
    lhs, rhs, ls, rs = FORMATS[fmt]
    kernel = kernel_of(lhs, rhs, f"{ls} layout={layout}", f"{rs} layout={layout}")
    rng = np.random.default_rng(7)
    m, n, k = 37, 19, 96
    inputs = random_inputs(kernel, m=m, n=n, k=k, rng=rng)
    kblocks = k // kernel.lhs_scale.block_k
    want_shape = (128, -(-kblocks // 4) * 4) if layout == "atom128x4" else (m, kblocks)
    assert inputs["lhs_scale"].shape == want_shape
    got = reference(kernel, **inputs)
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, loop_reference(kernel, inputs), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("fmt", ["nvfp4", "nvfp4_global"])
@pytest.mark.parametrize("layout", ["rows", "atom128x4"])
def test_grouped_reference_with_empty_groups(layout, fmt):
    lhs, rhs, ls, rs = FORMATS[fmt]
    kernel = kernel_of(lhs, rhs, ls, f"{rs} layout={layout}", op="grouped")
    rng = np.random.default_rng(3)
    sizes = np.array([5, 0, 11, 0, 4], np.int32)
    inputs = random_inputs(kernel, m=int(sizes.sum()), n=10, k=48, rng=rng, group_sizes=sizes)
    if layout == "atom128x4":
        assert inputs["rhs_scale"].shape == (5, 128, 4)
    got = reference(kernel, **inputs)
    np.testing.assert_allclose(got, loop_reference(kernel, inputs), rtol=1e-12, atol=1e-300)
    assert random_group_sizes  # the default draw is exercised by test_reference.py


def test_scale_edge_bytes():
    """A NaN scale byte makes its row (lhs) NaN, a zero ue4m3 byte removes its
    K block, the largest bytes multiply by 448 and 2**127; padding bytes of
    the atom layout are never read."""
    lhs, rhs, ls, rs = FORMATS["nvfp4"]
    kernel = kernel_of(lhs, rhs, f"{ls} layout=atom128x4", rs)
    rng = np.random.default_rng(11)
    inputs = random_inputs(kernel, m=6, n=5, k=32, rng=rng)
    rows_a = atoms_to_rows(inputs["lhs_scale"], 6, 2).copy()
    rows_a[1, 0] = 0x7F  # NaN
    rows_a[2, 1] = 0x00  # zero: row 2 keeps only its first K block
    rows_a[3, :] = 0x7E  # 448
    stored = rows_to_atoms(rows_a, fill=0xFF)  # padding: bytes no ue4m3 has
    inputs["lhs_scale"] = stored
    got = reference(kernel, **inputs)
    want = loop_reference(kernel, {**inputs, "lhs_scale": rows_to_atoms(rows_a, fill=0)})
    assert np.all(np.isnan(got[1])) and not np.isnan(got[[0, 2, 3, 4, 5]]).any()
    np.testing.assert_allclose(got[[0, 2, 3, 4, 5]], want[[0, 2, 3, 4, 5]], rtol=1e-12)
    a = storage_to_float64(inputs["lhs"], ir.DType.FP4)
    b = storage_to_float64(inputs["rhs"], ir.DType.FP4)
    sb = storage_to_float64(inputs["rhs_scale"], ir.DType.UE4M3)
    first = ue4m3_by_definition(int(rows_a[2, 0])) * (a[2, :16] * b[:, :16] * sb[:, :1]).sum(axis=1)
    np.testing.assert_allclose(got[2], first, rtol=1e-12)
    # A ue4m3 byte with its sign bit set, where a scale is read: a clear error.
    rows_a[0, 0] = 0x85
    inputs["lhs_scale"] = rows_to_atoms(rows_a, fill=0)
    with pytest.raises(ValueError, match="mx: lhs_scale: ue4m3: byte 0x85"):
        reference(kernel, **inputs)

    mx = kernel_of(*FORMATS["mxfp8"])
    inputs = random_inputs(mx, m=4, n=3, k=64, rng=rng)
    inputs["rhs_scale"][1, 1] = 0xFF  # NaN: column 1
    inputs["rhs_scale"][2, :] = 0xFE  # 2**127
    inputs["lhs"][:] = np.asarray(448.0, ml_dtypes.float8_e4m3fn)
    inputs["rhs"][:] = np.asarray(448.0, ml_dtypes.float8_e4m3fn)
    got = reference(mx, **inputs)
    assert np.all(np.isnan(got[:, 1])) and not np.isnan(got[:, [0, 2]]).any()
    np.testing.assert_allclose(got[:, [0, 2]], loop_reference(mx, inputs)[:, [0, 2]], rtol=1e-12)
    assert np.all(np.isinf(got[:, 2]) | (got[:, 2] > 2.0**127))


def test_spelling_and_positioned_errors():
    k = kernel_of(*FORMATS["nvfp4"][:2], "per_token_group k=16 ue4m3 layout=atom128x4",
                  "block n=1 k=16 ue4m3 layout=atom128x4")
    assert k.lhs_scale.layout is k.rhs_scale.layout is ir.ScaleLayout.ATOM128X4
    assert k.lhs_scale.dtype is ir.DType.UE4M3 and k.lhs_scale.per_mma_block
    assert kernel_of(*FORMATS["mxfp8"]).lhs_scale.layout is ir.ScaleLayout.ROWS
    bad = [
        (("fp4", "fp4", "per_token ue4m3", "block n=1 k=16 ue4m3"), "ue4m3 (NVFP4's block scale)"),
        (("e4m3", "e4m3", "per_token_group k=32 e8m0", "block n=128 k=32 e8m0 layout=atom128x4"),
         "layout=atom128x4 is for scales per K block of one row"),
        (("e4m3", "e4m3", "per_token_group k=32 e8m0 layout=swizzled", "block n=1 k=32 e8m0"),
         "unknown lhs_scale layout 'swizzled'"),
        (("fp4", "fp4", "per_token_group k=16 ue4m3", "block n=1 k=16 ue4m3", "dense", 8),
         "tile k=8 must hold whole lhs_scale blocks of k=16"),
        (("e4m3", "e4m3", "per_token_group k=32 e8m0 global=f32", "block n=1 k=32 e8m0"),
         "'global=f32' is NVFP4's per-tensor scale over its ue4m3 block scales"),
        (("fp4", "fp4", "per_token_group k=16 ue4m3", "block n=1 k=16 ue4m3 global=bf16"),
         "unknown rhs_scale global 'bf16' (expected 'f32')"),
    ]
    for args, message in bad:
        with pytest.raises(SpecError) as e:
            kernel_of(*args)
        assert message in str(e.value) and "t.gemm:" in str(e.value), str(e.value)
    with pytest.raises(SpecError) as e:
        kernel_of("fp4", "fp4", "per_token_group k=16 ue4m3 layout=atom128x4",
                  "block n=1 k=16 ue4m3", op="grouped")
    assert "t.gemm:10:3" in str(e.value) and "defined for op dense only" in str(e.value)


def test_global_scale_arguments_are_checked():
    kernel = kernel_of(*FORMATS["nvfp4_global"])
    assert kernel.lhs_scale.global_scale and kernel.rhs_scale.global_scale
    inputs = random_inputs(kernel, m=4, n=3, k=32, rng=np.random.default_rng(5))
    assert inputs["lhs_global_scale"].shape == () and inputs["lhs_global_scale"].dtype == np.float32
    for name, value, message in [
        ("lhs_global_scale", None, "lhs_global_scale .the f32 global scale of lhs_scale. is"),
        ("rhs_global_scale", np.ones(2, np.float32), "rhs_global_scale must have shape ()"),
    ]:
        with pytest.raises(ValueError, match=r"mx: " + message.replace("(", r"\(").replace(
                ")", r"\)")):
            reference(kernel, **{**inputs, name: value})
    plain = kernel_of(*FORMATS["nvfp4"])
    with pytest.raises(ValueError, match="rhs_global_scale given but rhs_scale has no"):
        reference(plain, **random_inputs(plain, m=4, n=3, k=32, rng=np.random.default_rng(5)),
                  rhs_global_scale=np.float32(2.0))
