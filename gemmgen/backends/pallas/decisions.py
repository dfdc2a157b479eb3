"""A matmul core's decisions (MatmulCore's first concern): the dot's types,
packed data, where each scale and alpha applies, the accumulator.

`Decisions` is a base of `MatmulCore` (cores.py) and reads its fields; the
other concerns are blocks.py (the grid and blocks) and scaling.py (the
scales as the kernel applies them).
"""

from __future__ import annotations

import math

from gemmgen.backends.pallas.dtypes import FP8
from gemmgen.backends.pallas.parts import MAINLOOP_MODES, PER_N_MODES, Stage
from gemmgen.backends.pallas.tpu import LANES
from gemmgen.ir import Activation, BiasMode, DType, Pairs, ScaleMode


class Decisions:
    """The decisions of a MatmulCore, from its fields."""

    __slots__ = ()


    @property
    def int_dot(self) -> bool:
        """int8 x int8 with int32 products."""
        return self.mxu is DType.INT8

    @property
    def fp8_dot(self) -> bool:
        """The operands reach the MXU in their own FP8 types (e4m3, e5m2;
        a chip whose MXU multiplies FP8: `dtypes.mxu_dtype`)."""
        return self.mxu in FP8

    @property
    def highest(self) -> bool:
        """f32 operands: precision=HIGHEST."""
        return self.mxu is DType.F32

    @property
    def rhs_packed_k(self) -> bool:
        return self.rhs_packed is not None and self.rhs_nk

    @property
    def k_pairs(self) -> bool:
        """The contraction runs over the even and the odd elements of k as
        two parts (4-bit data packed along k unpacks into those halves)."""
        return self.lhs_packed is not None or self.rhs_packed_k

    @property
    def lhs_split(self) -> bool:
        """An unpacked lhs against rhs packed along k: XLA splits lhs into its
        even and odd columns, so the kernel never shuffles lanes."""
        return self.lhs_packed is None and self.rhs_packed_k

    @property
    def packed_args(self) -> tuple[tuple[str, str], ...]:
        """The arguments stored two per byte, each with the JAX 4-bit dtype
        the function also takes them in (`_packed_bytes`): the packed
        operands and uint4 zero points."""
        names = {DType.INT4: "int4", DType.UINT4: "uint4", DType.FP4: "float4_e2m1fn"}
        out = [(side, names[dt]) for side, dt in (("lhs", self.lhs_packed),
                                                  ("rhs", self.rhs_packed)) if dt]
        return tuple(out + ([("rhs_zero", "uint4")] if self.rhs_zero else []))

    @property
    def rhs_permute(self) -> bool:
        """rhs packed along n: its unpacked halves are the even and odd
        columns, re-interleaved in VMEM by a 0/1 matmul."""
        return self.rhs_packed is not None and not self.rhs_nk

    @property
    def silu_mul(self) -> bool:
        return self.activation is Activation.SILU_MUL

    @property
    def paired(self) -> bool:
        """A paired activation (silu_mul, swiglu_clamped): out has n/2 columns."""
        return self.activation.paired

    @property
    def split_pairs(self) -> bool:
        """Paired halves: gate block j and up block j + n/2 / tn, two
        accumulators."""
        return self.paired and self.pairs is Pairs.HALVES

    @property
    def interleaved(self) -> bool:
        """Paired interleaved columns: an n tile of tn rhs columns holds tn / 2
        (gate, up) pairs and writes tn / 2 output columns."""
        return self.paired and self.pairs is Pairs.INTERLEAVED

    @property
    def swiglu_clamped(self) -> bool:
        return self.activation is Activation.SWIGLU_CLAMPED

    @property
    def pair_align(self) -> int:
        """An interleaved n tile's multiple: whole rhs lane tiles, and tn / 2
        output columns of whole lane tiles."""
        return math.lcm(self.n_lanes, 2 * LANES)

    @property
    def pair_constant(self) -> tuple[str, str, str]:
        """The module constant of a paired activation's n tiles: name, value, comment."""
        if self.interleaved:
            note = "rhs columns of an n block of (gate, up) pairs: tn / 2 outputs, whole lane tiles"
            return ("PAIR_ALIGN", str(self.pair_align), note)
        return ("N_LANES", str(self.n_lanes), "columns of one lane-aligned rhs block" +
                (" (packed along n: two per byte)" if self.rhs_permute else ""))

    @property
    def out_tn(self) -> str:
        """The output block's columns."""
        return "tn // 2" if self.interleaved else "tn"

    @property
    def mainloop(self) -> bool:
        """A scale applies per K block, inside the main loop."""
        return self.lhs_scale in MAINLOOP_MODES or self.rhs_scale in MAINLOOP_MODES

    def in_tile(self, side: str) -> bool:
        """The lhs or rhs scale applies per block inside each K tile: the
        kernel multiplies the operand by its blocks' scales in VMEM."""
        return self.lhs_in_tile if side == "lhs" else self.rhs_in_tile

    @property
    def sub_blocks(self) -> bool:
        """The kernel loops over the scale blocks of its K tile: each
        block's partial product is promoted with its own scales."""
        return self.lhs_sub or self.rhs_sub

    def sub(self, side: str) -> bool:
        """The lhs or rhs scale is applied per block in that loop."""
        return self.lhs_sub if side == "lhs" else self.rhs_sub

    @property
    def sub_block_k(self) -> str:
        """The constant holding the K width of the loop's blocks (the
        looped scales share it: checks.py)."""
        return "LHS_SCALE_BLOCK_K" if self.lhs_sub else "RHS_SCALE_BLOCK_K"

    def exponent_input(self, side: str) -> bool:
        """An e8m0 scale applied inside the K tile comes with a second input:
        per row and K tile, the largest exponent of its blocks, applied to
        the tile's product (the blocks are scaled by 2**-shift below it)."""
        return self.in_tile(side) and self._dtype(side) is DType.E8M0

    def _dtype(self, side: str) -> DType | None:
        mode, dt = ((self.lhs_scale, self.lhs_scale_dtype) if side == "lhs"
                    else (self.rhs_scale, self.rhs_scale_dtype))
        return None if mode is ScaleMode.NONE else dt

    @property
    def e8m0(self) -> bool:
        """Some scale is stored as e8m0 bytes (applied as an int32 exponent)."""
        return DType.E8M0 in (self._dtype("lhs"), self._dtype("rhs"))

    @property
    def folded(self) -> bool:
        """Every scale and alpha apply per K block: an e8m0 scale meets a
        main-loop scale, so all exponents are added before any product is
        formed (an epilogue scale applied later could not bring back a
        partial product that went subnormal and was flushed)."""
        return self.mainloop and self.e8m0

    def scale_stage(self, side: str) -> Stage | None:
        """Where the lhs or rhs scale is applied (None: no scale)."""
        mode = self.lhs_scale if side == "lhs" else self.rhs_scale
        if mode is ScaleMode.NONE:
            return None
        return Stage.LOOP if self.folded or mode in MAINLOOP_MODES else Stage.EPILOGUE

    @property
    def moved_to_loop(self) -> tuple[str, ...]:
        """What `folded` moves from the epilogue into the main loop, for a comment."""
        if not self.folded:
            return ()
        moved = tuple(f"the {side} scale ({mode.value})" for side, mode in (
            ("lhs", self.lhs_scale), ("rhs", self.rhs_scale))
            if mode in (ScaleMode.TENSOR, ScaleMode.TOKEN, ScaleMode.CHANNEL))
        return moved + (("alpha",) if self.alpha is not None else ())

    @property
    def alpha_stage(self) -> Stage | None:
        """Where alpha is applied: with the scales when they are folded into
        the main loop (so an e8m0 exponent is applied last), else the epilogue."""
        if self.alpha is None:
            return None
        return Stage.LOOP if self.folded else Stage.EPILOGUE

    @property
    def global_stage(self) -> Stage | None:
        """Where the `global=f32` scales are applied: where alpha would be
        (once, on the accumulator, unless everything is folded into the
        main loop), one f32 factor per group."""
        if not self.global_scales:
            return None
        return Stage.LOOP if self.folded else Stage.EPILOGUE

    def e8m0_at(self, stage: Stage) -> int:
        """How many e8m0 scales apply at `stage` (their exponents are added)."""
        return sum(1 for side in ("lhs", "rhs")
                   if self.scale_stage(side) is stage and self._dtype(side) is DType.E8M0)

    @property
    def alpha_in_pow2(self) -> bool:
        """alpha applies where e8m0 exponents do: it is split into
        ALPHA_MANTISSA * 2**ALPHA_EXPONENT and its exponent joins theirs, so
        no product of constants with a power of two can go subnormal (XLA
        folds constants into the smaller operand of a product)."""
        return self.alpha_stage is not None and self.e8m0_at(self.alpha_stage) > 0

    @property
    def alpha_split(self) -> tuple[float, int]:
        """alpha = mantissa * 2**exponent, |mantissa| in [1, 2) (0: 0, 0)."""
        assert self.alpha is not None
        mantissa, exponent = math.frexp(self.alpha)
        return (2.0 * mantissa, exponent - 1) if mantissa else (0.0, 0)

    def pow2_steps(self, stage: Stage) -> int:
        """Normal powers of two (2**-126 .. 2**127) that _times_pow2 needs for
        the exponents summed at `stage`: each e8m0 exponent spans -127..127,
        alpha's exponent is a constant."""
        n = self.e8m0_at(stage)
        shift = self.alpha_split[1] if self.alpha_in_pow2 and self.alpha_stage is stage else 0
        high, low = 127 * n + shift, -127 * n + shift
        return max(1, -(-max(high, 0) // 127), -(-max(-low, 0) // 126))

    @property
    def acc_dtype(self) -> DType:
        return DType.INT32 if self.int_dot and not self.mainloop else DType.F32

    @property
    def rhs_scale_per_n(self) -> bool:
        return self.rhs_scale in PER_N_MODES

    @property
    def n_lanes(self) -> int:
        """Columns of one lane-aligned rhs block: 256 when packed along n."""
        return 2 * LANES if self.rhs_permute else LANES

    @property
    def transcendental(self) -> bool:
        return self.activation in (Activation.SILU, Activation.GELU, Activation.SILU_MUL,
                                   Activation.SWIGLU_CLAMPED)

    @property
    def plain(self) -> bool:
        return (self.lhs_scale is ScaleMode.NONE and self.rhs_scale is ScaleMode.NONE
                and self.bias is BiasMode.NONE and self.activation is Activation.NONE
                and self.alpha is None)
