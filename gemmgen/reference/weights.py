"""Asymmetric 4-bit weights from float weights, GPTQ / AWQ's min-max rule,
in the layouts a `rhs_scale kblock k=BK f32 zero=uint4` kernel reads
(docs/spec.md, "Zero points"): for examples, tests and checkpoint
conversion. Per K block of BK rows and column, with lo = min(w, 0) and
hi = max(w, 0) over the block:

    s = (hi - lo) / 15 (1 where hi == lo), z = round(-lo / s) in 0..15,
    q = clip(round(w / s) + z, 0, 15),

so that (q - z) * s is within s / 2 of w wherever w lies in [lo, hi]
(rounding half to even, as `numerics.saturating_cast` does)."""

from __future__ import annotations

import numpy as np

from gemmgen.ir import DType
from gemmgen.numerics import float64_to_storage


def quantize_uint4_asymmetric(w, block_k: int) -> dict[str, np.ndarray]:
    """Float weights [g, k, n] -> {"rhs": uint8 [g, k, n/2] (uint4 packed
    along n), "rhs_scale": f32 [g, ceil(k/BK), 1, n], "rhs_zero": uint8
    [g, ceil(k/BK), 1, ceil(n/2)]}, the arguments of a grouped kernel with
    rhs `uint4 packed [g, k, n]` and `rhs_scale kblock k=BK f32 zero=uint4`.
    n must be even (the weights pack along it)."""
    w = np.asarray(w, np.float64)
    if w.ndim != 3 or w.shape[-1] % 2:
        raise ValueError(f"weights must be [g, k, n] with n even, got shape {w.shape}")
    g, k, n = w.shape
    kb = -(-k // block_k)
    padded = np.zeros((g, kb * block_k, n))
    padded[:, :k] = w
    blocks = padded.reshape(g, kb, block_k, n)
    lo = np.minimum(blocks.min(axis=2), 0.0)  # [g, kb, n]
    hi = np.maximum(blocks.max(axis=2), 0.0)
    scale = np.where(hi > lo, (hi - lo) / 15.0, 1.0).astype(np.float32).astype(np.float64)
    zero = np.clip(np.rint(-lo / scale), 0, 15)
    q = np.clip(np.rint(blocks / scale[:, :, None]) + zero[:, :, None], 0, 15)
    q = q.reshape(g, kb * block_k, n)[:, :k]
    return {"rhs": float64_to_storage(q, DType.UINT4),
            "rhs_scale": scale[:, :, None, :].astype(np.float32),
            "rhs_zero": float64_to_storage(zero[:, :, None, :], DType.UINT4)}
