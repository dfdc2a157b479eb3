"""The pieces of a Pallas core the templates print: where a scale applies
(`Stage`), the column halves, scale factors, index maps, blocks, numbered
steps and parameter groups (cores.py assembles them)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gemmgen.ir import ScaleMode



class Stage(enum.Enum):
    """Where a scale or alpha is applied."""

    LOOP = "loop"  # each K block's product
    EPILOGUE = "epilogue"  # the accumulator, once


MAINLOOP_MODES = (ScaleMode.TOKEN_GROUP, ScaleMode.BLOCK, ScaleMode.KBLOCK)
PER_N_MODES = (ScaleMode.CHANNEL, ScaleMode.BLOCK, ScaleMode.KBLOCK)


@dataclass(frozen=True, slots=True)
class Half:
    """One column half of the per-n inputs (rhs, per-column scales, bias):
    silu_mul reads column block j (gate) and j + up (up); other kernels one."""

    suffix: str  # of the refs: "" or "_up"
    column: str  # the n block index: "j" or "j + up"
    var: str  # the epilogue's value: "y", or "gate" and "up"
    note: str  # a comment line, or ""


@dataclass(frozen=True, slots=True)
class Factor:
    """A float scale as the kernel multiplies by it."""

    ref: str  # "lhs_scale_ref[...]", "rhs_scale_ref[group]"
    note: str  # "  # [tm, 1]: the row scales", or ""


@dataclass(frozen=True, slots=True)
class Scaling:
    """The scales and alpha one stage applies to one value, in order: float
    factors, then alpha (or its mantissa), then the e8m0 exponents, added as
    integers and applied by `_times_pow2` in `steps` normal powers of two."""

    factors: tuple[Factor, ...]
    alpha: bool  # `ALPHA * var`
    alpha_mantissa: bool  # `ALPHA_MANTISSA * var`; ALPHA_EXPONENT is in `exponents`
    exponents: str  # "" or the int32 exponent sum, "e_lhs + e_rhs + ALPHA_EXPONENT"
    comment: tuple[str, ...]  # lines above the _times_pow2 call
    steps: int

    @property
    def applies(self) -> bool:
        return bool(self.factors or self.alpha or self.alpha_mantissa or self.exponents)


@dataclass(frozen=True, slots=True)
class IndexMap:
    """A named block index map: `def name(<grid args>): return returns`."""

    name: str
    returns: str


@dataclass(frozen=True, slots=True)
class Block:
    """One entry of `in_specs`: `pl.BlockSpec(shape, index_map)`, or SMEM."""

    shape: str  # "(tm, tk)"; "" for a whole array in SMEM
    index: str  # an IndexMap name ("" in SMEM)

    @property
    def smem(self) -> bool:
        return not self.shape


@dataclass(frozen=True, slots=True)
class Step:
    """A numbered step of a generated function: `# (number) comment`, then lines."""

    number: int
    comment: tuple[str, ...]  # the first line follows "(number) "
    lines: tuple[str, ...]  # statements; comment lines start with "#"


@dataclass(frozen=True, slots=True)
class ParamGroup:
    comment: str
    names: tuple[str, ...]
