"""Inputs that probe the quantize rules (docs/semantics.md, "quantize"),
shared by the CUDA and Pallas tests of the MX / NV formats: each group is
a case where the rounding of a scale or of an element could go wrong.

- group amaxes exactly at powers of two and one input ulp either side (the
  OCP rule's floor(log2) and the round-up rule flip there), and at the
  input dtype's largest value;
- NVFP4: amax / 6 exactly at ue4m3 values, exactly halfway between two (a
  tie, to even) and one input ulp either side of both, at the largest
  (448) and past it (saturation), and below the smallest (a zero scale);
- elements exactly halfway between two neighbouring values of the element
  type times the group's scale (ties, to even) and one input ulp either
  side, at the largest element and past it (saturation), tiny next to the
  amax (rounding to +-0), negative zeros;
- an all-zero row, and a partial last group when k is not a multiple of G.

Every value is exact in the input dtype and normal or zero: TPUs flush
subnormal inputs (docs/semantics.md), so tests of subnormals stay on CUDA.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from gemmgen import ir
from gemmgen.ir import DType
from gemmgen.numerics import element_dtype, float64_to_storage, ue4m3_to_float
from gemmgen.reference.quantize import scale_values

NUMPY_INPUT = {DType.BF16: ml_dtypes.bfloat16, DType.F16: np.float16, DType.F32: np.float32}


def _neighbours(v: float, dtype) -> list[float]:
    """v and the values of `dtype` just above and below it (v exact in dtype)."""
    with np.errstate(over="ignore"):  # past the dtype's range: inf, dropped by the caller
        a = np.asarray(v, dtype)
    return [float(a), float(np.nextafter(a, dtype(np.inf))), float(np.nextafter(a, dtype(0)))]


def _exact_normal(v: float, dtype) -> bool:
    """v is representable in dtype, finite, and zero or normal."""
    with np.errstate(over="ignore"):
        a = np.asarray(v, dtype)
    return bool(np.isfinite(a)) and float(a) == v and (v == 0 or abs(v) >= float(
        np.finfo(dtype).tiny))


# A global scale for NVFP4 quantizers with `global=f32`: 24 significant
# bits, so 6 x a ue4m3 tie x it is never an f32 and every amax near one is
# decided by the exact comparison alone.
EDGE_GLOBAL = float(np.float32(0.0372314453125 + 2.0**-28 * 1234567))


def _amaxes(kernel: ir.Kernel, dtype, glob: float = 1.0) -> list[float]:
    """Group amaxes at the rule's boundaries (times the global scale)."""
    info = np.finfo(dtype)
    lo, hi = int(np.log2(float(info.tiny))) + 12, int(np.log2(float(info.max))) - 1
    out: list[float] = []
    if kernel.out_scale.dtype is DType.UE4M3:
        for b in range(1, 0x7E, 5):
            here, after = (float(ue4m3_to_float(np.uint8(c))) for c in (b, b + 1))
            out += (_neighbours(6.0 * here * glob, dtype)
                    + _neighbours(3.0 * (here + after) * glob, dtype))
        out += [float(np.asarray(v * glob, dtype)) for v in (6.0 * 448.0, 6.0 * 464.0,
                                                             6.0 * 1000.0, 6.0 * 2.0**-11)]
        out.append(1e-4)
    else:
        for e in range(lo, hi, max((hi - lo) // 24, 1)):
            out += _neighbours(2.0**e, dtype)
            out += _neighbours(kernel.out.max_finite * 2.0 ** (e - kernel.out.emax), dtype)
            out.append(1.9375 * 2.0**e)  # past the element's max for the OCP rule
    out.append(float(info.max))
    return [v for v in out if _exact_normal(v, dtype) and v > 0]


def _ties(out: DType) -> np.ndarray:
    """Midpoints of neighbouring non-negative values of the element type (the
    ties of round-to-nearest-even), its largest value and a value past it."""
    codes = np.arange(8 if out is DType.FP4 else 128, dtype=np.uint8)
    grid = codes.view(element_dtype(out)).astype(np.float64)
    grid = np.unique(grid[np.isfinite(grid)])
    return np.concatenate([(grid[1:] + grid[:-1]) / 2, [grid[-1], grid[-1] * 1.0625]])


def edge_rows(kernel: ir.Kernel, k: int, rng: np.random.Generator,
              glob: float = 1.0) -> np.ndarray:
    """lhs [rows, k] in its storage dtype: one group per special amax, its
    other elements on and around the element type's ties times the group's
    scale (random signs), tiny values and negative zeros; then an all-zero
    row with negative zeros. `glob`: the global scale G of an NVFP4
    quantizer with `global=f32` (the scale is then s * G)."""
    dtype = NUMPY_INPUT[kernel.lhs.dtype]
    group = kernel.out_scale.block_k
    groups = -(-k // group)
    amaxes = _amaxes(kernel, dtype, glob)
    ties = _ties(kernel.out)
    x = np.zeros((-(-len(amaxes) // groups) + 1, k), np.float64)
    for n, amax in enumerate(amaxes):
        r, j = divmod(n, groups)
        cols = np.arange(j * group, min((j + 1) * group, k))
        s = float(scale_values(kernel, np.asarray(amax / glob))) * glob
        values = [v * rng.choice([-1.0, 1.0]) for t in rng.permutation(ties)
                  for v in _neighbours(t * s, dtype)]
        values += [amax * 2.0**-20, -amax * 2.0**-20, -0.0]
        values = [v for v in values if abs(v) <= amax and _exact_normal(v, dtype)]
        fill = rng.uniform(-amax, amax, len(cols))
        fill = np.where(np.abs(fill) < amax * 2.0**-10, amax / 2, fill)  # no subnormals
        take = min(len(values), len(cols) - 1)
        fill[1:1 + take] = rng.permutation(values)[:take]
        fill[0] = amax if n % 2 == 0 else -amax  # the amax, negated in odd groups
        x[r, cols] = fill
    x[-1, ::3] = -0.0  # the all-zero row, with negative zeros
    return float64_to_storage(x.astype(dtype).astype(np.float64), kernel.lhs.dtype)
