"""How the scales of a kernel multiply its products in the reference: the
K blocks of the main loop (the union of every main-loop scale's block
edges) and, per block and in the epilogue, the lhs and rhs factors of each
scale mode (docs/semantics.md, "Scales")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemmgen import ir
from gemmgen.ir import ScaleMode


@dataclass(frozen=True, slots=True)
class Scales:
    """Decoded scales and the lookups the GEMM needs.

    lhs_* return [rows, 1] factors, rhs_* return [1, n] factors; `main`
    looks up the K block starting at k0, `epi` the epilogue factor.
    """

    kernel: ir.Kernel
    lhs: np.ndarray | None
    rhs: np.ndarray | None
    n: int
    k: int
    # The `global=f32` scales (NVFP4): [] or [g] per operand, None without.
    lhs_global: np.ndarray | None = None
    rhs_global: np.ndarray | None = None

    def absolute(self) -> Scales:
        return self._map(np.abs)

    def squared(self) -> Scales:
        return self._map(np.square)

    def ones(self) -> Scales:
        """Unit scales: what a kernel sums before it applies the scales."""
        return self._map(np.ones_like)

    @property
    def enabled(self) -> bool:
        return self.lhs is not None or self.rhs is not None

    def _map(self, f) -> Scales:
        lhs, rhs, lg, rg = (None if s is None else f(s)
                            for s in (self.lhs, self.rhs, self.lhs_global, self.rhs_global))
        return Scales(self.kernel, lhs, rhs, self.n, self.k, lg, rg)

    def global_epi(self, group: int | None) -> float:
        """The product of the global scales of a dense kernel or of local
        group `group`, applied once to the accumulator in the epilogue."""
        out = 1.0
        for s in (self.lhs_global, self.rhs_global):
            if s is not None:
                out *= float(s if group is None else s[group])
        return out

    def k_blocks(self) -> list[tuple[int, int]]:
        """The K blocks of the main loop: the union of all scale block edges."""
        cuts = {0, self.k}
        for scale in (self.kernel.lhs_scale, self.kernel.rhs_scale):
            if scale.enabled and scale.placement is ir.Placement.MAINLOOP:
                cuts.update(range(0, self.k, scale.block_k or self.k))
        edges = sorted(cuts)
        return list(zip(edges[:-1], edges[1:]))

    def lhs_main(self, rows: slice, k0: int) -> np.ndarray | float:
        if self.kernel.lhs_scale.mode is ScaleMode.TOKEN_GROUP:
            return self.lhs[rows, k0 // (self.kernel.lhs_scale.block_k or self.k), None]
        return 1.0

    def lhs_epi(self, rows: slice) -> np.ndarray | float:
        match self.kernel.lhs_scale.mode:
            case ScaleMode.TENSOR:
                return float(self.lhs)
            case ScaleMode.TOKEN:
                return self.lhs[rows, None]
        return 1.0

    def rhs_main(self, group: int | None, k0: int) -> np.ndarray | float:
        scale = self.kernel.rhs_scale
        bk = scale.block_k or self.k
        match scale.mode:
            case ScaleMode.BLOCK:
                # [n / bn, k / bk], grouped [g, n / bn, k / bk]
                s = self.rhs if group is None else self.rhs[group]
                return np.repeat(s[:, k0 // bk], scale.block_n)[None, : self.n]
            case ScaleMode.KBLOCK:
                # [g, k / bk, 1, n]; a dense kernel has g = 1.
                return self.rhs[group or 0, k0 // bk, 0][None, :]
        return 1.0

    def rhs_epi(self, group: int | None) -> np.ndarray | float:
        match self.kernel.rhs_scale.mode:
            case ScaleMode.TENSOR:
                return float(self.rhs if group is None else self.rhs[group])
            case ScaleMode.CHANNEL:
                return (self.rhs if group is None else self.rhs[group])[None, :]
        return 1.0

    def lhs_elementwise(self, rows: slice) -> np.ndarray | float:
        """tgmm: the lhs scale of each element of lhs[rows] ([r, k] or less)."""
        match self.kernel.lhs_scale.mode:
            case ScaleMode.TOKEN_GROUP:
                bk = self.kernel.lhs_scale.block_k or self.k
                return np.repeat(self.lhs[rows], bk, axis=1)[:, : self.k]
        return self.lhs_epi(rows)
