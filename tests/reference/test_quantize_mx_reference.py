"""The reference's MX / NV quantize rules (docs/semantics.md, "quantize")
against a plain Python loop that shares none of its code: exact rational
arithmetic (`Fraction`), every element format decoded from its bit-level
definition, and round-to-nearest-even done by searching the format's
values. OCP MX v1.0's shared scale (e8m0 round=floor) for e4m3, e5m2 and
fp4 elements, NVFP4's ue4m3 scale, DeepGEMM's round-up e8m0 scale for fp4,
packed fp4 nibbles; on fresh random inputs, on the edge rows the kernels'
tests use, on zero, non-finite and subnormal groups, m = 1 and k not a
multiple of the group. Then `compare` must pass the reference's own output
and fail one byte off; and the language reads the new spellings.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from quantize_edges import EDGE_GLOBAL, NUMPY_INPUT, edge_rows

from gemmgen import ir
from gemmgen.ir import DType, ScaleRounding
from gemmgen.parse import parse
from gemmgen.reference import compare, random_inputs, reference, reference_output
from gemmgen.validate import validate

SPEC = """\
target cuda {
  archs sm_120a
}

kernel mxfp8 {
  op quantize
  lhs bf16 [m, k]
  out e4m3
  out_scale per_token_group k=32 e8m0 round=floor
  backends cuda
}

kernel mxfp8_e5m2 {
  op quantize
  lhs f32 [m, k]
  out e5m2
  out_scale per_token_group k=32 e8m0 round=floor
  backends cuda
}

kernel mxfp4 {
  op quantize
  lhs bf16 [m, k]
  out fp4 packed
  out_scale per_token_group k=32 e8m0 round=floor
  backends cuda
}

kernel fp4_round_up {
  op quantize
  lhs f32 [m, k]
  out fp4 packed
  out_scale per_token_group k=32 e8m0
  backends cuda
}

kernel nvfp4 {
  op quantize
  lhs f32 [m, k]
  out fp4 packed
  out_scale per_token_group k=16 ue4m3
  backends cuda
}

kernel nvfp4_f16 {
  op quantize
  lhs f16 [m, k]
  out fp4 packed
  out_scale per_token_group k=16 ue4m3
  backends cuda
}

kernel nvfp4_global {
  op quantize
  lhs bf16 [m, k]
  out fp4 packed
  out_scale per_token_group k=16 ue4m3 global=f32
  backends cuda
}

kernel nvfp4_global_f32 {
  op quantize
  lhs f32 [m, k]
  out fp4 packed
  out_scale per_token_group k=16 ue4m3 global=f32
  backends cuda
}
"""
NAMES = ("mxfp8", "mxfp8_e5m2", "mxfp4", "fp4_round_up", "nvfp4", "nvfp4_f16", "nvfp4_global",
         "nvfp4_global_f32")
KERNELS = {k.name: k for k in validate(parse(SPEC, "mx.gemm")).kernels}


# ---------------------------------------------------------------------------
# The formats by definition: (magnitude, code) of every non-negative finite value.


def float_format(exp_bits: int, man_bits: int, bias: int, top: int) -> list[tuple[Fraction, int]]:
    """Codes 0..top of a sign-magnitude float: exponent field 0 is subnormal."""
    out = []
    for code in range(top + 1):
        e, m = code >> man_bits, code & ((1 << man_bits) - 1)
        if e == 0:
            v = Fraction(m, 1 << man_bits) * Fraction(2) ** (1 - bias)
        else:
            v = (1 + Fraction(m, 1 << man_bits)) * Fraction(2) ** (e - bias)
        out.append((v, code))
    return out


E2M1 = float_format(2, 1, 1, 0x7)  # 0, 0.5, 1, 1.5, 2, 3, 4, 6
E4M3 = float_format(4, 3, 7, 0x7E)  # 0x7F is NaN (e4m3fn: no infinity)
E5M2 = float_format(5, 2, 15, 0x7B)  # 0x7C is infinity
UE4M3 = E4M3  # unsigned: the same codes, no sign bit
GRID = {DType.FP4: E2M1, DType.E4M3: E4M3, DType.E5M2: E5M2}
EMAX = {DType.FP4: 2, DType.E4M3: 8, DType.E5M2: 15}  # OCP MX v1.0, table 1


def round_even(v: Fraction, grid: list[tuple[Fraction, int]]) -> int:
    """The code of the grid value nearest v >= 0, a tie to the even code,
    saturating at the largest."""
    if v >= grid[-1][0]:
        return grid[-1][1]
    best = min(grid, key=lambda g: (abs(g[0] - v), g[1] & 1))
    return best[1]


def floor_log2(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    return e


def loop_scale(kernel: ir.Kernel, amax: float, glob: Fraction | None = Fraction(1)
               ) -> tuple[int, Fraction | None]:
    """(scale byte, scale value; None for NaN) of one group, by the rules;
    `glob` the NVFP4 global scale G (None: not a positive finite number)."""
    sc = kernel.out_scale
    if not math.isfinite(amax) or glob is None:
        return (0x7F if sc.dtype is DType.UE4M3 else 0xFF), None
    a = Fraction(amax)
    if sc.dtype is DType.UE4M3:  # NVFP4: amax / (6 G), to nearest even, saturating
        code = round_even(a / (6 * glob), UE4M3)
        return code, {c: v for v, c in UE4M3}[code]
    if sc.rounding is ScaleRounding.FLOOR:  # OCP MX: 2^(floor(log2 amax) - emax)
        e = -127 if a == 0 else max(-127, min(127, floor_log2(a) - EMAX[kernel.out]))
    else:  # DeepGEMM: the smallest power of two >= max(amax, 1e-10) / max
        s = max(a, Fraction(1e-10)) / Fraction(kernel.out.max_finite)
        e = floor_log2(s)
        e = e if Fraction(2) ** e == s else e + 1
        e = max(-127, min(127, e))
    return e + 127, Fraction(2) ** e


def loop_quantize(kernel: ir.Kernel, x: np.ndarray, glob: float = 1.0
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(q bytes [m, k] unpacked codes, or fp8 bytes; scale bytes [m, groups])."""
    g_exact = Fraction(glob) if math.isfinite(glob) and glob > 0 else None
    xs = x.astype(np.float64)
    m, k = xs.shape
    g = kernel.out_scale.block_k
    grid = GRID[kernel.out]
    sign_bit = 0x8 if kernel.out is DType.FP4 else 0x80
    nan = 0x7F  # e4m3fn and e5m2 both have this NaN
    q = np.zeros((m, k), np.uint8)
    s = np.zeros((m, -(-k // g)), np.uint8)
    for r in range(m):
        for j in range(0, k, g):
            vals = [float(v) for v in xs[r, j:j + g]]
            amax = max((abs(v) if not math.isnan(v) else math.inf for v in vals), default=0.0)
            byte, scale = loop_scale(kernel, amax, g_exact)
            s[r, j // g] = byte
            for c, v in enumerate(vals):
                if scale is None:  # a group holding inf or NaN
                    q[r, j + c] = 0 if kernel.out is DType.FP4 else nan
                    continue
                sign = sign_bit if math.copysign(1.0, v) < 0 else 0
                code = 0 if scale == 0 else round_even(abs(Fraction(v)) / (scale * (g_exact or 1)),
                                                       grid)
                q[r, j + c] = sign | code
    return q, s


def reference_bytes(kernel: ir.Kernel, x: np.ndarray, glob: float = 1.0
                    ) -> tuple[np.ndarray, np.ndarray]:
    """reference_output as unpacked codes / fp8 bytes and scale bytes."""
    extra = {"global_scale": np.float32(glob)} if kernel.out_scale.global_scale else {}
    q, s = reference_output(kernel, lhs=x, **extra)
    if kernel.out is DType.FP4:
        assert q.dtype == np.uint8 and q.shape == (x.shape[0], x.shape[1] // 2)
        q = np.stack([q & 0xF, q >> 4], axis=-1).reshape(x.shape)  # element 2i: low nibble
    else:
        q = q.view(np.uint8)
    assert s.dtype == np.uint8
    return q, s


def same_q(kernel: ir.Kernel, got: np.ndarray, want: np.ndarray) -> np.ndarray:
    if kernel.out is DType.FP4:
        return got == want
    nan_got = (got & 0x7F) >= (0x7F if kernel.out is DType.E4M3 else 0x7D)
    return (got == want) | (nan_got & (want == 0x7F))


def global_of(kernel: ir.Kernel) -> float:
    """The global scale the tests give a `global=f32` kernel (else 1)."""
    return EDGE_GLOBAL if kernel.out_scale.global_scale else 1.0


def check_against_loop(kernel: ir.Kernel, x: np.ndarray, glob: float | None = None) -> None:
    glob = global_of(kernel) if glob is None else glob
    q_loop, s_loop = loop_quantize(kernel, x, glob)
    q_ref, s_ref = reference_bytes(kernel, x, glob)
    bad = np.argwhere(s_ref != s_loop)
    assert not len(bad), f"{kernel.name}: scale {bad[:3].tolist()}: {s_ref[tuple(bad[0])]} " \
                         f"!= loop {s_loop[tuple(bad[0])]}"
    ok = same_q(kernel, q_ref, q_loop)
    bad = np.argwhere(~ok)
    assert ok.all(), (f"{kernel.name}: q at {bad[:3].tolist()}: 0x{q_ref[tuple(bad[0])]:02X} != "
                      f"loop 0x{q_loop[tuple(bad[0])]:02X} (x = {x[tuple(bad[0])]!r})")


# ---------------------------------------------------------------------------


def test_formats_by_definition_agree_with_ml_dtypes():
    """The loop's grids are the formats' values (a check on the loop itself)."""
    for grid, dt in ((E4M3, ml_dtypes.float8_e4m3fn), (E5M2, ml_dtypes.float8_e5m2),
                     (E2M1, ml_dtypes.float4_e2m1fn)):
        codes = np.array([c for _, c in grid], np.uint8)
        values = codes.view(dt).astype(np.float64)
        assert [Fraction(float(v)) for v in values] == [v for v, _ in grid]
    assert E4M3[-1][0] == 448 and E5M2[-1][0] == 57344 and E2M1[-1][0] == 6


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("m,k", [(1, 32), (3, 100), (5, 258), (2, 14)])
def test_random_inputs_match_the_loop(name, m, k):
    """Fresh random rows (magnitudes 2^-6 .. 2^6 apart), m = 1, partial last
    groups, rows narrower than a group."""
    kernel = KERNELS[name]
    inputs = random_inputs(kernel, m=m, n=k, k=k, rng=np.random.default_rng([m, k, len(name)]))
    check_against_loop(kernel, inputs["lhs"], float(inputs.get("global_scale", 1.0)))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("k", [64, 70])
def test_edge_rows_match_the_loop(name, k):
    """Amaxes at powers of two and ue4m3 ties, elements on the element
    format's ties and past its largest value, zero groups (tests/quantize_edges.py)."""
    kernel = KERNELS[name]
    check_against_loop(kernel, edge_rows(kernel, k, np.random.default_rng(k), global_of(kernel)))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("name", NAMES)
def test_zero_nonfinite_and_subnormal_groups_match_the_loop(name):
    kernel = KERNELS[name]
    dtype = NUMPY_INPUT[kernel.lhs.dtype]
    g = kernel.out_scale.block_k
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 3 * g)) * 4).astype(np.float64)
    x[0] = 0.0  # amax 0
    x[0, 1] = -0.0
    x[1, 2] = np.inf
    x[1, g + 3] = np.nan
    x[2, 2 * g:] = -np.inf
    tiny = float(np.finfo(dtype).smallest_subnormal)
    x[3, :g] = tiny * np.arange(1, g + 1)  # a subnormal group
    x[3, g:2 * g] = tiny  # one subnormal value repeated
    x[4, :g] = 2.0 ** np.arange(-g // 2, g - g // 2)  # powers of two
    x[5, :g] = float(np.finfo(dtype).max) * (-1) ** np.arange(g)  # the largest
    check_against_loop(kernel, x.astype(dtype))


def test_ocp_scale_examples():
    """Worked examples of docs/semantics.md: OCP MX's scale and its saturation."""
    kernel = KERNELS["mxfp8"]
    x = np.zeros((4, 32), np.float32)
    x[0, :3] = [448.0, 1.0, -300.0]  # floor(log2 448) = 8: scale 2^0, nothing saturates
    x[1, :2] = [500.0, 3.0]  # floor(log2 500) = 8: scale 1, 500 saturates to 448
    x[2, :2] = [0.001, 1e-6]  # floor(log2 0.001) = -10: scale 2^-18
    x = x.astype(ml_dtypes.bfloat16)
    q, s = reference_output(kernel, lhs=x)
    assert s[:, 0].tolist() == [127, 127, 127 - 18, 0]  # amax 0: byte 0, 2^-127
    qf = q.astype(np.float64)
    assert qf[0, :3].tolist() == [448.0, 1.0, -288.0]  # 300 -> 288 (e4m3, to nearest even)
    assert qf[1, :2].tolist() == [448.0, 3.0]
    assert (qf[3] == 0).all()
    kernel = KERNELS["mxfp4"]
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [7.0, 0.75, -0.25, 5.0]  # floor(log2 7) = 2: scale 1; 7 saturates to 6
    q, s = reference_output(kernel, lhs=x.astype(ml_dtypes.bfloat16))
    assert s[0, 0] == 127
    # codes 7 (6), 2 (0.75 -> 1, the even neighbour), 8 (-0.25 -> -0), 6 (5 -> 4, even)
    assert q[0, :2].tolist() == [0x7 | 0x2 << 4, 0x8 | 0x6 << 4]


def test_nvfp4_scale_examples():
    """amax / 6 to nearest even ue4m3, saturating; a zero scale; elements by
    the decoded scale."""
    kernel = KERNELS["nvfp4"]
    x = np.zeros((4, 16), np.float32)
    x[0, :2] = [6.0, -1.0]  # amax / 6 = 1: byte 0x38, q = 6 (code 7), -1 (code 0xA)
    x[1, :1] = [6.0 * 1.0625]  # halfway between 1 and 1.125: to even, 1.0 (0x38)
    x[2, :1] = [6.0 * 1000.0]  # saturates: 448 (0x7E)
    x[3, :2] = [6.0 * 2.0**-10, -1e-4]  # halfway between 0 and 2^-9: to even, zero scale
    q, s = reference_output(kernel, lhs=x)
    assert s[:, 0].tolist() == [0x38, 0x38, 0x7E, 0x00]
    assert q[0, 0] == (0x7 | 0xA << 4)
    assert q[3, 0] == (0x0 | 0x8 << 4)  # a zero scale: zeros with the sign of x


@pytest.mark.parametrize("name", NAMES)
def test_compare_is_bit_exact(name):
    """The reference's own output passes; one scale byte or one q byte off fails."""
    kernel = KERNELS[name]
    inputs = random_inputs(kernel, m=4, n=96, k=96, rng=np.random.default_rng(9))
    expected = reference(kernel, **inputs)
    q, s = reference_output(kernel, **inputs)
    assert compare((q, s), expected, kernel, k=96).passed
    s_bad = s.copy()
    s_bad[1, 1] ^= 1
    assert not compare((q, s_bad), expected, kernel, k=96).passed
    q_bad = q.view(np.uint8).copy()
    q_bad[2, 7] ^= 1
    assert not compare((q_bad.view(q.dtype), s), expected, kernel, k=96).passed
    assert not compare((q[:, :-1], s), expected, kernel, k=96).passed  # a wrong shape


def test_the_language_reads_the_formats():
    k = KERNELS["mxfp4"]
    assert (k.out, k.out_scale.dtype, k.out_scale.block_k, k.out_scale.rounding) == (
        DType.FP4, DType.E8M0, 32, ScaleRounding.FLOOR)
    assert KERNELS["fp4_round_up"].out_scale.rounding is ScaleRounding.UP  # the default
    k = KERNELS["nvfp4"]
    assert (k.out, k.out_scale.dtype, k.out_scale.block_k) == (DType.FP4, DType.UE4M3, 16)
    assert [ir.quantize_rule(KERNELS[n].out, KERNELS[n].out_scale) for n in NAMES] == [
        "e8m0_floor", "e8m0_floor", "e8m0_floor", "e8m0_up", "ue4m3", "ue4m3", "ue4m3", "ue4m3"]
    assert KERNELS["nvfp4_global"].out_scale.global_scale and not k.out_scale.global_scale


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nvfp4_global_scale():
    """amax / (6 G) near ue4m3 ties for global scales of 24 significant bits
    (no f32 division decides them), and a G that is not a positive finite
    number: every scale NaN, q = +0."""
    kernel = KERNELS["nvfp4_global_f32"]
    rng = np.random.default_rng(8)
    for _ in range(4):
        glob = float(np.float32(rng.uniform(0.01, 100.0)))
        check_against_loop(kernel, edge_rows(kernel, 48, rng, glob), glob)
    x = edge_rows(kernel, 32, rng, 1.0)
    for bad in (0.0, -1.0, np.inf, np.nan):
        q, s = reference_bytes(kernel, x, bad)
        assert (s == 0x7F).all() and (q == 0).all()
    with pytest.raises(ValueError, match="global_scale .the f32 global scale of out_scale. is"):
        reference(kernel, lhs=x)
    with pytest.raises(ValueError, match="global_scale given but out_scale has no"):
        reference(KERNELS["nvfp4"], lhs=x, global_scale=np.float32(1.0))
