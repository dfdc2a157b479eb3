"""The tile GEMM's C++ helpers (runtime/cuda/gg_widen.cuh, gg_scales.cuh,
gg_epilogue.cuh, gg_gemm_config.cuh) on the CPU emulator, one at a time,
against values computed here with NumPy from the formats' definitions
(gemmgen.numerics) and the layouts of docs/spec.md:

- widen: every stored value of every weight format, to every tensor-core
  type the tile GEMM pairs it with, exactly;
- the scale lookup of every scale mode (lhs and rhs, grouped, ragged K), with
  f32, bf16 and e8m0 scales (all 256 bytes, NaN included);
- the activations against float64 formulas;
- the epilogue element: the scales the promotion did not apply (e8m0
  exactly, with products outside f32), alpha, bias per column and per group,
  silu_mul's pairing, and the cast;
- check_config / check_tile: a tile whose numbers do not follow from its
  shape does not compile.
"""

from __future__ import annotations

import functools
import math
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

from gemmgen import numerics
from gemmgen.ir import DType
from gemmgen.harness.cuda_emu import EmuModule
from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR, cuda_include_dir
from gemmgen.reference.blockscale import rows_to_atoms

F = "gg::gemm::Format::"

# (name, stored format, tensor-core C++ type, its NumPy dtype): every pair
# backends/cuda/gemm/contract.compute_dtype accepts.
WIDEN = [
    (f"{src.name.lower()}_{dst.name.lower()}", src, dst)
    for dst, sources in (
        (DType.BF16, (DType.BF16, DType.E4M3, DType.E5M2, DType.INT8, DType.INT4, DType.FP4)),
        (DType.F16, (DType.F16, DType.E4M3, DType.E5M2, DType.INT8, DType.INT4, DType.FP4)),
        (DType.E4M3, (DType.E4M3,)),
        (DType.E5M2, (DType.E5M2,)),
        (DType.INT8, (DType.INT8, DType.INT4)),
    )
    for src in sources
]
# widen_pair: two 8- or 4-bit weights to a 16-bit type in one register (the
# Hopper weight-only tile's A fragments).
WIDEN_PAIRS = [(n, s, d) for n, s, d in WIDEN if d.bits == 16 and s.bits <= 8]
FORMAT = {DType.F32: "kF32", DType.BF16: "kBF16", DType.F16: "kF16", DType.E4M3: "kE4M3",
          DType.E5M2: "kE5M2", DType.INT8: "kInt8", DType.INT4: "kInt4", DType.FP4: "kFp4",
          DType.E8M0: "kE8M0"}
CTYPE = {DType.F32: "float", DType.BF16: "__nv_bfloat16", DType.F16: "__half",
         DType.E4M3: "__nv_fp8_e4m3", DType.E5M2: "__nv_fp8_e5m2", DType.INT8: "signed char",
         DType.E8M0: "unsigned char"}


def _config(name: str, *, lhs=("kNone", "kNone", 0), rhs=("kNone", "kNone", 0, 0),
            bias: str = "kNone", bias_t: str = "void", activation: str = "kNone",
            alpha: float | None = None, out_t: str = "float", fold: bool = False,
            layout: str = "kRows") -> str:
    """A Config with the members the scale and epilogue helpers read (`layout`:
    both sides' ScaleLayout)."""
    lmode, lfmt, lk = lhs
    rmode, rfmt, rn, rk = rhs
    return f"""
struct {name} {{
  using lhs_scale_t = gg::gemm::storage_t<{F}{lfmt}>;
  using rhs_scale_t = gg::gemm::storage_t<{F}{rfmt}>;
  using bias_t = {bias_t};
  using out_t = {out_t};
  static constexpr gg::gemm::ScaleMode kLhsScale = gg::gemm::ScaleMode::{lmode};
  static constexpr gg::gemm::Format kLhsScaleFormat = {F}{lfmt};
  static constexpr int kLhsScaleBlockK = {lk};
  static constexpr gg::gemm::ScaleLayout kLhsScaleLayout = gg::gemm::ScaleLayout::{layout};
  static constexpr gg::gemm::ScaleMode kRhsScale = gg::gemm::ScaleMode::{rmode};
  static constexpr gg::gemm::Format kRhsScaleFormat = {F}{rfmt};
  static constexpr int kRhsScaleBlockN = {rn};
  static constexpr int kRhsScaleBlockK = {rk};
  static constexpr gg::gemm::ScaleLayout kRhsScaleLayout = gg::gemm::ScaleLayout::{layout};
  static constexpr bool kFoldScales = {"true" if fold else "false"};
  static constexpr gg::gemm::Bias kBias = gg::gemm::Bias::{bias};
  static constexpr gg::gemm::Activation kActivation = gg::gemm::Activation::{activation};
  static constexpr bool kHasAlpha = {"true" if alpha is not None else "false"};
  static constexpr float kAlpha = {float(alpha if alpha is not None else 1.0)!r}f;
}};
"""


# Scale lookups: (name, side, mode, format, block n, block k).
SCALES = [
    ("lhs_tensor", "lhs", "kPerTensor", DType.F32, 0, 0),
    ("lhs_token", "lhs", "kPerToken", DType.BF16, 0, 0),
    ("lhs_token_group", "lhs", "kPerTokenGroup", DType.E8M0, 0, 128),
    ("rhs_tensor", "rhs", "kPerTensor", DType.F32, 0, 0),
    ("rhs_channel", "rhs", "kPerChannel", DType.BF16, 0, 0),
    ("rhs_block", "rhs", "kBlock", DType.F32, 64, 128),
    ("rhs_block_n1", "rhs", "kBlock", DType.E8M0, 1, 32),
    ("rhs_kblock", "rhs", "kKBlock", DType.E8M0, 0, 128),
    # The 128 x 4 atom layout (MX scales, docs/spec.md "Scale layouts").
    ("lhs_token_group_atom", "lhs", "kPerTokenGroup", DType.E8M0, 0, 32),
    ("rhs_block_n1_atom", "rhs", "kBlock", DType.E8M0, 1, 32),
]

# Epilogues: (name, Config keyword arguments).
EPILOGUES = {
    "epi_f32": {"lhs": ("kPerToken", "kF32", 0), "rhs": ("kPerChannel", "kF32", 0, 0), "bias": "kN",
                    "bias_t": "float", "activation": "kRelu", "alpha": 0.5},
    "epi_e8m0": {"lhs": ("kPerToken", "kE8M0", 0), "rhs": ("kPerChannel", "kE8M0", 0, 0)},
    "epi_e8m0_rhs": {"rhs": ("kPerTensor", "kE8M0", 0, 0), "alpha": 3.0},
    "epi_promoted": {"lhs": ("kPerTokenGroup", "kF32", 128), "rhs": ("kPerChannel", "kE8M0", 0, 0),
                         "fold": True},
    "epi_silu_mul": {"bias": "kGroup", "bias_t": "__nv_bfloat16", "activation": "kSiluMul",
                         "out_t": "__nv_bfloat16"},
}
ACTIVATIONS = ("kRelu", "kSilu", "kGelu", "kSiluMul")


def _source() -> str:
    parts = ['#include "gg_runtime.cuh"\n', "namespace {"]
    for name, side, mode, fmt, bn, bk in SCALES:
        layout = "kAtom128x4" if name.endswith("_atom") else "kRows"
        if side == "lhs":
            parts.append(_config(f"C_{name}", lhs=(mode, FORMAT[fmt], bk), layout=layout))
        else:
            parts.append(_config(f"C_{name}", rhs=(mode, FORMAT[fmt], bn, bk), layout=layout))
    for name, kw in EPILOGUES.items():
        parts.append(_config(f"C_{name}", **kw))
    parts.append("}  // namespace\n")
    for name, src, dst in WIDEN:
        parts.append(f"""
extern "C" __global__ void widen_{name}(const unsigned char* row, {CTYPE[dst]}* out, int count) {{
  for (int e = threadIdx.x; e < count; e += blockDim.x) {{
    out[e] = gg::gemm::widen<{F}{FORMAT[src]}, {CTYPE[dst]}>(row, e);
  }}
}}
""")
    for name, src, dst in WIDEN_PAIRS:
        parts.append(f"""
extern "C" __global__ void widen_pair_{name}(const unsigned char* rows, unsigned* out, int count) {{
  for (int e = threadIdx.x; e < count; e += blockDim.x) {{
    out[e] = gg::gemm::widen_pair<{F}{FORMAT[src]}, {CTYPE[dst]}>(rows + e * {src.bits * 2 // 8});
  }}
}}
""")
    for name, side, *_ in SCALES:
        if side == "lhs":
            parts.append(f"""
extern "C" __global__ void scale_{name}(const C_{name}::lhs_scale_t* s, const int* rows,
                                     const int* k0s, int k, float* out, int count) {{
  for (int i = threadIdx.x; i < count; i += blockDim.x) {{
    out[i] = gg::gemm::lhs_scale_at<C_{name}>(s, rows[i], k, k0s[i]);
  }}
}}
""")
        else:
            parts.append(f"""
extern "C" __global__ void scale_{name}(const C_{name}::rhs_scale_t* s, const int* gls,
                                     const int* cols, const int* k0s, int n, int k, float* out,
                                     int count) {{
  for (int i = threadIdx.x; i < count; i += blockDim.x) {{
    out[i] = gg::gemm::rhs_scale_at<C_{name}>(s, gls[i], cols[i], n, k, k0s[i]);
  }}
}}
""")
    for act in ACTIVATIONS:
        parts.append(f"""
extern "C" __global__ void activate_{act}(const float* x, const float* up, float* out, int count) {{
  for (int i = threadIdx.x; i < count; i += blockDim.x) {{
    out[i] = gg::gemm::activate<gg::gemm::Activation::{act}>(x[i], up[i]);
  }}
}}
""")
    parts.append("""
extern "C" __global__ void swiglu_clamped(const float* gate, const float* up, float* out,
                                         int count) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    out[i] = gg::swiglu_clamped(gate[i], up[i], 1.702f, 7.0f);
  }
}
""")
    for name in EPILOGUES:
        c = f"C_{name}"
        parts.append(f"""
extern "C" __global__ void {name}(const float* x, const {c}::lhs_scale_t* lhs_scale,
                                 const {c}::rhs_scale_t* rhs_scale, const {c}::bias_t* bias,
                                 const int* rows, const int* gls, const int* cols, int n,
                                 {c}::out_t* out, int count) {{
  for (int i = threadIdx.x; i < count; i += blockDim.x) {{
    constexpr int kH = gg::gemm::kHalves<{c}>;
    float v[kH];
    int bcol[kH];
    for (int h = 0; h < kH; ++h) {{
      v[h] = x[kH * i + h];
      bcol[h] = cols[i] + h * (n / 2);
    }}
    out[i] = gg::gemm::epilogue_element<{c}>(v, bcol, lhs_scale, rhs_scale, bias, rows[i], gls[i], n);
  }}
}}
""")
    return "".join(parts)


@functools.cache
def module() -> EmuModule:
    return EmuModule(_source(), "gemm_helpers.cu", memcheck=False)


def launch(kernel: str, args: list, outputs: list[int]) -> list[np.ndarray]:
    return module().launch(kernel, 1, 64, args=args, outputs=outputs)


def _f32(x) -> np.ndarray:
    return np.asarray(x, np.float32)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit for bit, NaN to NaN (any payload), -0 to -0."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if got.dtype.kind == "f" or got.dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                              ml_dtypes.float8_e5m2):
        with np.errstate(invalid="ignore"):
            g, w = got.astype(np.float64), want.astype(np.float64)
        nan = np.isnan(w)
        assert (np.isnan(g) == nan).all(), np.flatnonzero(np.isnan(g) != nan)[:10]
        bad = ~nan & ((g != w) | (np.signbit(g) != np.signbit(w)))
        assert not bad.any(), [(i, got[i], want[i]) for i in np.flatnonzero(bad)[:10]]
    else:
        assert (got == want).all(), np.flatnonzero(got != want)[:10]


# ---------------------------------------------------------------------------
# Widening


def _stored_values(src: DType) -> np.ndarray:
    """Every stored value of `src` as bytes: all 256 bytes (two 4-bit codes
    each for int4 and fp4), and for 16-bit types every bit pattern."""
    if src.bits == 16:
        return np.arange(1 << 16, dtype=np.uint16).view(np.uint8)
    return np.arange(256, dtype=np.uint8)


@pytest.mark.parametrize("name,src,dst", WIDEN, ids=[w[0] for w in WIDEN])
def test_widen_every_stored_value(name, src, dst):
    raw = _stored_values(src)
    stored = raw.view(numerics.storage_dtype(src))
    with np.errstate(invalid="ignore"):  # NaN bit patterns
        values = numerics.storage_to_float64(stored, src)  # the format's definition
    want_dtype = numerics.element_dtype(dst)
    count = values.size
    (got,) = launch(f"widen_{name}", [raw, np.empty(count, want_dtype), np.int32(count)], [1])
    if dst is DType.INT8:
        want = values.astype(np.int8)
    else:
        want = values.astype(want_dtype)  # exact: every value is representable (NaN stays NaN)
        assert (np.isnan(want.astype(np.float64)) == np.isnan(values)).all()
        finite = np.isfinite(values)
        assert (want.astype(np.float64)[finite] == values[finite]).all(), "not exact"
    _same(got, want)


@pytest.mark.parametrize("name,src,dst", WIDEN_PAIRS, ids=[w[0] for w in WIDEN_PAIRS])
def test_widen_pair_every_pair_of_stored_values(name, src, dst):
    """Every pair: all 256 bytes of two 4-bit codes, all 65536 byte pairs of
    an 8-bit format; element 0 in the register's low half."""
    if src.bits == 4:
        raw = np.arange(256, dtype=np.uint8)  # element 2i in the low nibble
        values = numerics.storage_to_float64(raw, src).reshape(-1, 2)
    else:
        raw = np.arange(1 << 16, dtype=np.uint16).view(np.uint8)
        stored = raw.view(numerics.storage_dtype(src))
        with np.errstate(invalid="ignore"):
            values = numerics.storage_to_float64(stored, src).reshape(-1, 2)
    count = values.shape[0]
    (got,) = launch(f"widen_pair_{name}", [raw, np.empty(count, np.uint32), np.int32(count)], [1])
    want = values.astype(numerics.element_dtype(dst))  # exact, as test_widen_every_stored_value shows
    _same(got.view(numerics.element_dtype(dst)).reshape(-1, 2), want)


# ---------------------------------------------------------------------------
# Scale lookups


def _scales(fmt: DType, shape: tuple[int, ...], rng) -> tuple[np.ndarray, np.ndarray]:
    """Random stored scales of `shape` and their values (float64)."""
    if fmt is DType.E8M0:
        stored = rng.integers(0, 256, shape, dtype=np.uint8)
        stored.flat[:3] = (0, 254, 255)  # 2^-127 (an f32 subnormal), 2^127, NaN
    else:
        stored = rng.uniform(-4, 4, shape).astype(numerics.storage_dtype(fmt))
    return stored, numerics.storage_to_float64(stored, fmt)


@pytest.mark.parametrize("name,side,mode,fmt,bn,bk", SCALES, ids=[s[0] for s in SCALES])
def test_scale_lookup(name, side, mode, fmt, bn, bk):
    rng = np.random.default_rng(1)
    m, n, k, g = 37, 200, 300, 3  # k not a multiple of the K blocks
    kblocks = -(-k // bk) if bk else 1
    count = 500
    rows = rng.integers(0, m, count).astype(np.int32)
    cols = rng.integers(0, n, count).astype(np.int32)
    gls = rng.integers(0, g, count).astype(np.int32)
    k0s = (rng.integers(0, -(-k // 32), count) * 32).astype(np.int32)  # K tiles of 32
    shape = {  # docs/spec.md, "Scales" (grouped rhs shapes)
        "kPerTensor": () if side == "lhs" else (g,),
        "kPerToken": (m,),
        "kPerTokenGroup": (m, kblocks),
        "kPerChannel": (g, n),
        "kBlock": (g, -(-n // bn) if bn else 1, kblocks),
        "kKBlock": (g, kblocks, 1, n),
    }[mode]
    stored, values = _scales(fmt, shape, rng)
    if name.endswith("_atom"):  # the same values, stored in atom order (padding NaN bytes)
        stored = rows_to_atoms(stored, 255)
    want = {
        "kPerTensor": lambda: values[()] if side == "lhs" else values[gls],
        "kPerToken": lambda: values[rows],
        "kPerTokenGroup": lambda: values[rows, k0s // max(bk, 1)],
        "kPerChannel": lambda: values[gls, cols],
        "kBlock": lambda: values[gls, cols // max(bn, 1), k0s // max(bk, 1)],
        "kKBlock": lambda: values[gls, k0s // max(bk, 1), 0, cols],
    }[mode]()
    want = np.broadcast_to(np.asarray(want, np.float64), (count,)).astype(np.float32)
    flat = np.ascontiguousarray(stored).reshape(-1) if stored.ndim else stored.reshape(1)
    if side == "lhs":
        args = [flat, rows, k0s, np.int32(k), np.empty(count, np.float32), np.int32(count)]
        (got,) = launch(f"scale_{name}", args, [4])
    else:
        args = [flat, gls, cols, k0s, np.int32(n), np.int32(k), np.empty(count, np.float32),
                np.int32(count)]
        (got,) = launch(f"scale_{name}", args, [6])
    _same(got, want)


# ---------------------------------------------------------------------------
# Activations and the epilogue element


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_activation(act):
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(0, 4, 400), [0.0, -0.0, 1e-30, -1e-30, 90.0, -90.0, 1e30,
                                                -1e30, np.inf, -np.inf, np.nan]]).astype(np.float32)
    up = rng.normal(0, 2, x.size).astype(np.float32)
    (got,) = launch(f"activate_{act}", [x, up, np.empty(x.size, np.float32), np.int32(x.size)], [2])
    xd = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        want = {"kRelu": lambda: np.where(xd < 0, 0.0, xd), "kSilu": lambda: _silu(xd),
                "kGelu": lambda: _gelu_tanh(xd),
                "kSiluMul": lambda: _silu(xd) * up.astype(np.float64)}[act]()
    if act == "kRelu":
        _same(got, want.astype(np.float32))
        return
    finite = np.isfinite(want)
    assert (np.isnan(got) == np.isnan(want)).all()
    assert (got[~finite & ~np.isnan(want)] == want[~finite & ~np.isnan(want)]).all()
    err = np.abs(got[finite].astype(np.float64) - want[finite])
    # f32 formulas: a few ulps of the result, plus the cancellation in
    # 1 + tanh(.) (or 1 + exp(.)) near -1, up to an ulp of |x| (of |x * up|).
    scale = np.abs(xd[finite]) * (np.abs(up[finite]) if act == "kSiluMul" else 1.0)
    assert (err <= 4e-6 * np.abs(want[finite]) + 2 * 2.0**-23 * scale + 1e-37).all(), err.max()


def test_swiglu_clamped():
    """GPT-OSS's activation against the float64 reference's, at the clamps'
    edges and on non-finite inputs (a NaN gate or up stays NaN)."""
    from gemmgen import ir
    from gemmgen.reference.semantics import swiglu_clamped

    rng = np.random.default_rng(5)
    edges = [0.0, -0.0, 6.999, 7.0, 7.001, -7.001, -7.0, 90.0, -90.0, 1e30, -1e30, np.inf,
             -np.inf, np.nan]
    gate = np.concatenate([rng.normal(0, 6, 400), edges, rng.normal(0, 6, len(edges))])
    up = np.concatenate([rng.normal(0, 6, 400), rng.normal(0, 6, len(edges)), edges])
    gate, up = gate.astype(np.float32), up.astype(np.float32)
    (got,) = launch("swiglu_clamped", [gate, up, np.empty(gate.size, np.float32),
                                       np.int32(gate.size)], [2])
    ep = ir.Epilogue(ir.Activation.SWIGLU_CLAMPED, alpha_gate=float(np.float32(1.702)))
    with np.errstate(over="ignore", invalid="ignore"):
        want = swiglu_clamped(ep, gate.astype(np.float64), up.astype(np.float64))
    assert (np.isnan(got) == np.isnan(want)).all()
    ok = ~np.isnan(want)
    assert np.isfinite(want[ok]).all()  # the clamps bound it: |out| <= 7 * 8
    err = np.abs(got[ok].astype(np.float64) - want[ok])
    assert (err <= 4e-6 * np.abs(want[ok]) + 1e-6).all(), err.max()


def _epilogue_case(name: str, rng):
    m, n, g, count = 20, 64, 3, 300
    rows = rng.integers(0, m, count).astype(np.int32)
    gls = rng.integers(0, g, count).astype(np.int32)
    halves = 2 if name == "epi_silu_mul" else 1
    cols = rng.integers(0, n // halves, count).astype(np.int32)
    x = rng.normal(0, 8, (count, halves)).astype(np.float32)
    return m, n, g, rows, gls, cols, x


def test_epilogue_f32_scales_alpha_bias_relu():
    rng = np.random.default_rng(3)
    m, n, g, rows, gls, cols, x = _epilogue_case("epi_f32", rng)
    ls = rng.uniform(-2, 2, m).astype(np.float32)
    rs = rng.uniform(-2, 2, (g, n)).astype(np.float32)
    bias = rng.normal(0, 1, n).astype(np.float32)
    (got,) = launch("epi_f32", [x, ls, rs, bias, rows, gls, cols, np.int32(n),
                                np.empty(rows.size, np.float32), np.int32(rows.size)], [8])
    # One f32 operation at a time, in the documented order.
    v = x[:, 0] * ls[rows]
    v = v * rs[gls, cols]
    v = v * np.float32(0.5)
    v = v + bias[cols]
    _same(got, np.where(v < 0, np.float32(0), v))


def test_epilogue_e8m0_scales_are_exact_outside_f32():
    """Two e8m0 epilogue scales multiply to 2^-254 .. 2^254: the result is
    the exact product rounded once, including where each scale alone or
    their f32 product would under- or overflow."""
    rng = np.random.default_rng(4)
    m, n, g, rows, gls, cols, x = _epilogue_case("epi_e8m0", rng)
    ls = rng.integers(0, 255, m).astype(np.uint8)  # 255 (NaN) is checked below
    rs = rng.integers(0, 255, (g, n)).astype(np.uint8)
    ls[rows[:40]] = np.arange(40, dtype=np.uint8)  # tiny lhs scales ...
    rs[gls[:40], cols[:40]] = 254 - np.arange(40, dtype=np.uint8)  # ... with huge rhs ones
    ls[rows[40]], rs[gls[41], cols[41]] = 255, 0
    (got,) = launch("epi_e8m0", [x, ls, rs, np.zeros(1, np.uint8), rows, gls, cols, np.int32(n),
                                 np.empty(rows.size, np.float32), np.int32(rows.size)], [8])
    exact = (x[:, 0].astype(np.float64) * numerics.e8m0_to_float(ls[rows])
             * numerics.e8m0_to_float(rs[gls, cols]))
    with np.errstate(over="ignore"):
        _same(got, exact.astype(np.float32))


def test_epilogue_one_e8m0_scale_and_alpha():
    rng = np.random.default_rng(5)
    _m, n, _g, rows, gls, cols, x = _epilogue_case("epi_e8m0_rhs", rng)
    rs = np.array([0, 127, 254], np.uint8)  # 2^-127, 1, 2^127 per group
    (got,) = launch("epi_e8m0_rhs", [x, np.zeros(1, np.uint8), rs, np.zeros(1, np.uint8), rows,
                                     gls, cols, np.int32(n), np.empty(rows.size, np.float32),
                                     np.int32(rows.size)], [8])
    with np.errstate(over="ignore"):
        scaled = (x[:, 0].astype(np.float64) * numerics.e8m0_to_float(rs[gls])).astype(np.float32)
        _same(got, scaled * np.float32(3.0))


def test_epilogue_leaves_promoted_scales_to_the_main_loop():
    """With kFoldScales, both scales join the promotion: the epilogue applies
    neither (the rhs one is e8m0, so a stray multiply would show)."""
    rng = np.random.default_rng(6)
    m, n, g, rows, gls, cols, x = _epilogue_case("epi_promoted", rng)
    (got,) = launch("epi_promoted", [x, np.full(m * 3, 7.0, np.float32),
                                     np.full(g * n, 200, np.uint8), np.zeros(1, np.uint8), rows,
                                     gls, cols, np.int32(n), np.empty(rows.size, np.float32),
                                     np.int32(rows.size)], [8])
    _same(got, x[:, 0])


def test_epilogue_silu_mul_with_group_bias_to_bf16():
    rng = np.random.default_rng(7)
    _m, n, g, rows, gls, cols, x = _epilogue_case("epi_silu_mul", rng)
    bias = rng.normal(0, 1, (g, n)).astype(ml_dtypes.bfloat16)
    (got,) = launch("epi_silu_mul", [x.reshape(-1), np.zeros(1, np.uint8), np.zeros(1, np.uint8),
                                     bias, rows, gls, cols, np.int32(n),
                                     np.empty(rows.size, ml_dtypes.bfloat16), np.int32(rows.size)],
                    [8])
    b = bias.astype(np.float64)
    gate = (x[:, 0] + b[gls, cols].astype(np.float32)).astype(np.float64)
    up = (x[:, 1] + b[gls, n // 2 + cols].astype(np.float32)).astype(np.float64)
    want = _silu(gate) * up
    # The f32 result rounds once to bf16: within one bf16 step of the exact value.
    step = numerics.spacing(want, DType.BF16)
    assert (np.abs(got.astype(np.float64) - want) <= step).all()


# ---------------------------------------------------------------------------
# The configuration checks


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.parametrize("old,new", [
    ("", ""),  # the plan's numbers for dense_gemm_bf16: accepted
    ("kAStride = 80,", "kAStride = 64,"),  # not the padded row: 32 bf16 + 16 bytes
    ("kNI = 4,", "kNI = 2,"),  # not the warp tile's 32 / 8 fragments
    ("kSmemBytes = 67584;", "kSmemBytes = 1000;"),  # smaller than the pipeline
    ("using acc_t = float;", "using acc_t = int;"),  # bf16 MMAs accumulate in f32
    ("kFoldScales = false;", "kFoldScales = true;"),  # nothing to fold into
    ("BFeed::kLdmatrix;", "BFeed::kLdmatrixTrans;"),  # rhs is [n, k]
    ("kLhsScaleFormat = gg::gemm::Format::kNone;", "kLhsScaleFormat = gg::gemm::Format::kF32;"),
])
def test_check_tile_rejects_numbers_that_do_not_follow(old, new, tmp_path):
    source = """#include "gg_runtime.cuh"
struct Config {
  using lhs_t = __nv_bfloat16;
  using rhs_t = __nv_bfloat16;
  using mma_t = __nv_bfloat16;
  using acc_t = float;
  using out_t = __nv_bfloat16;
  using lhs_scale_t = void;
  using rhs_scale_t = void;
  using bias_t = void;
  static constexpr gg::gemm::Format kRhs = gg::gemm::Format::kBF16;
  static constexpr bool kRhsNK = true;
  static constexpr gg::gemm::BFeed kBFeed = gg::gemm::BFeed::kLdmatrix;
  static constexpr gg::gemm::ScaleMode kLhsScale = gg::gemm::ScaleMode::kNone;
  static constexpr gg::gemm::Format kLhsScaleFormat = gg::gemm::Format::kNone;
  static constexpr int kLhsScaleBlockK = 0;
  static constexpr gg::gemm::ScaleLayout kLhsScaleLayout = gg::gemm::ScaleLayout::kRows;
  static constexpr gg::gemm::ScaleMode kRhsScale = gg::gemm::ScaleMode::kNone;
  static constexpr gg::gemm::Format kRhsScaleFormat = gg::gemm::Format::kNone;
  static constexpr int kRhsScaleBlockN = 0;
  static constexpr int kRhsScaleBlockK = 0;
  static constexpr gg::gemm::ScaleLayout kRhsScaleLayout = gg::gemm::ScaleLayout::kRows;
  static constexpr bool kFoldScales = false;
  static constexpr int kScaleBlockK = 0;
  static constexpr gg::gemm::Bias kBias = gg::gemm::Bias::kNone;
  static constexpr gg::gemm::Activation kActivation = gg::gemm::Activation::kNone;
  static constexpr bool kHasAlpha = false;
  static constexpr float kAlpha = 1.0f;
};
struct Tile0 : Config {
  static constexpr int kBM = 128, kBN = 128, kBK = 32, kBNOut = 128;
  static constexpr int kWM = 64, kWN = 32, kWarpsN = 4, kThreads = 256;
  static constexpr int kStages = 3, kMI = 4, kNI = 4, kKSteps = 2;
  static constexpr int kAStride = 80, kAStage = 10240;
  static constexpr int kBRows = 128, kBRowBytes = 64;
  static constexpr int kBStride = 80, kBStage = 10240;
  static constexpr int kBConvStride = 80, kCStride = 132;
  static constexpr int kSmemBytes = 67584;
};
static_assert(gg::gemm::check_tile<Tile0>(), "check_tile");
"""
    assert source.count(old) == 1 or not old
    source = source.replace(old, new)
    ok = not old
    (tmp_path / "check.cu").write_text(source)
    proc = subprocess.run(["g++", "-x", "c++", "-std=c++20", "-fsyntax-only", "-Wno-attributes",
                           f"-I{RUNTIME_INCLUDE_DIR}", f"-I{cuda_include_dir()}",
                           str(tmp_path / "check.cu")], capture_output=True, text=True, check=False)
    assert (proc.returncode == 0) == ok, proc.stderr[-3000:]
    if not ok:
        assert "check_tile" in proc.stderr
