"""Cores: the matmul implementations a module contains, as typed plans.

A module has one core for the spec's kernel; a grouped module with
`<name>_vjp` adds a plain one (no scales, bias, alpha or activation) for the
backward pass, called with either B layout (`rhs_nk`, a static argument of
the generated function, as megablox's `transpose_rhs`), and a tgmm core.
Every choice the templates print is a field or a property here.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from gemmgen import ir
from gemmgen.backends.pallas.dtypes import cast, f32, jnp_name, mxu_dtype, packed
from gemmgen.backends.pallas.tpu import LANES
from gemmgen.ir import Activation, BiasMode, DType, Layout, Op, ScaleMode


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


@dataclass(frozen=True, slots=True, kw_only=True)
class MatmulCore:
    """One dense or grouped matmul implementation: the function `fn` (XLA
    glue around one `pallas_call`) and its Pallas kernel `kernel_fn`. Both
    take a static `rhs_nk`; packed rhs data is read in the spec's layout only."""

    fn: str  # "_matmul", "_gmm", "_gmm_plain"
    kernel_fn: str  # "_kernel", "_plain_kernel"
    grouped: bool
    rhs_nk: bool  # the spec's B layout: [n, k] (True) or [k, n]
    lhs_packed: DType | None  # INT4 | FP4: two per uint8 along k
    rhs_packed: DType | None  # along k when rhs_nk, else along n
    lhs_cast: DType | None  # what a loaded block converts to (None: nothing)
    rhs_cast: DType | None
    mxu: DType  # what both operands reach the MXU in
    lhs_scale: ScaleMode
    lhs_scale_dtype: DType
    lhs_block_k: int
    rhs_scale: ScaleMode
    rhs_scale_dtype: DType
    rhs_block_k: int
    rhs_block_n: int
    bias: BiasMode
    activation: Activation
    alpha: float | None  # rounded to f32
    # The masked layout: `fn` gets lhs [g * cap, k] and masked_m as
    # group_sizes (no group_offset or existing_out).
    masked: bool = False

    # -- decisions ----------------------------------------------------------

    @property
    def int_dot(self) -> bool:
        """int8 x int8 with int32 products."""
        return self.mxu is DType.INT8

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
    def rhs_permute(self) -> bool:
        """rhs packed along n: its unpacked halves are the even and odd
        columns, re-interleaved in VMEM by a 0/1 matmul."""
        return self.rhs_packed is not None and not self.rhs_nk

    @property
    def silu_mul(self) -> bool:
        return self.activation is Activation.SILU_MUL

    @property
    def mainloop(self) -> bool:
        """A scale applies per K block, inside the main loop."""
        return self.lhs_scale in MAINLOOP_MODES or self.rhs_scale in MAINLOOP_MODES

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
        return self.activation in (Activation.SILU, Activation.GELU, Activation.SILU_MUL)

    @property
    def plain(self) -> bool:
        return (self.lhs_scale is ScaleMode.NONE and self.rhs_scale is ScaleMode.NONE
                and self.bias is BiasMode.NONE and self.activation is Activation.NONE
                and self.alpha is None)

    # -- what the templates print -------------------------------------------

    @property
    def mxu_name(self) -> str:
        return jnp_name(self.mxu)

    @property
    def acc_name(self) -> str:
        return jnp_name(self.acc_dtype)

    @property
    def lhs_convert(self) -> str:
        """Appended to a loaded lhs block: the conversion to the MXU dtype."""
        return f".astype(jnp.{jnp_name(self.lhs_cast)})" if self.lhs_cast else ""

    @property
    def rhs_convert(self) -> str:
        return f".astype(jnp.{jnp_name(self.rhs_cast)})" if self.rhs_cast else ""

    @property
    def lhs_unpack(self) -> str:
        return _unpack_fn(self.lhs_packed)

    @property
    def rhs_unpack(self) -> str:
        return _unpack_fn(self.rhs_packed)

    @property
    def halves(self) -> tuple[Half, ...]:
        if self.silu_mul:
            return (Half("", "j", "gate", "gate: columns of block j"),
                    Half("_up", "j + up", "up", "up: columns of block j + n/2"))
        return (Half("", "j", "y", ""),)

    @property
    def grid_args(self) -> str:
        """The arguments of an index map: the grid indices, then (grouped)
        the scalar-prefetch refs."""
        return "j, w, kk, group_ids, m_tile_ids, *_" if self.grouped else "i, j, kk"

    @property
    def m_block(self) -> str:
        return "m_tile_ids[w]" if self.grouped else "i"

    @property
    def kernel_params(self) -> tuple[ParamGroup, ...]:
        groups = []
        if self.grouped:
            groups.append(ParamGroup("Scalar prefetch (SMEM): the work list.",
                                     ("group_ids_ref", "m_tile_ids_ref", "starts_ref",
                                      "ends_ref")))
        names = ["lhs_even_ref", "lhs_odd_ref"] if self.lhs_split else ["lhs_ref"]
        names += [f"rhs{h.suffix}_ref" for h in self.halves]
        if self.lhs_scale is not ScaleMode.NONE:
            names.append("lhs_scale_ref")
        if self.rhs_scale_per_n:
            names += [f"rhs_scale{h.suffix}_ref" for h in self.halves]
        elif self.rhs_scale is not ScaleMode.NONE:
            names.append("rhs_scale_ref")
        if self.bias is not BiasMode.NONE:
            names += [f"bias{h.suffix}_ref" for h in self.halves]
        if self.grouped and not self.masked:
            names.append("existing_ref")
        groups.append(ParamGroup("Inputs (existing_ref: None unless existing_out is aliased).",
                                 tuple(names)) if self.grouped and not self.masked
                      else ParamGroup("Inputs.", tuple(names)))
        groups.append(ParamGroup("Output and scratch.",
                                 ("out_ref", *(f"acc{h.suffix}_ref" for h in self.halves))))
        return tuple(groups)

    @property
    def kernel_keywords(self) -> tuple[str, ...]:
        return ("rhs_nk: bool", "tiles_k: int", "k_rem: int") + (
            ("tm: int",) if self.grouped else ())

    @property
    def fn_params(self) -> tuple[str, ...]:
        names = ["lhs", "rhs"]
        if self.grouped:
            names.append("group_sizes")
        if self.lhs_scale is not ScaleMode.NONE:
            names.append("lhs_scale")
        if self.rhs_scale is not ScaleMode.NONE:
            names.append("rhs_scale")
        if self.bias is not BiasMode.NONE:
            names.append("bias")
        if self.grouped and not self.masked:
            names += ["group_offset", "existing_out"]
        return tuple(names)

    @property
    def bias_enabled(self) -> bool:
        return self.bias is not BiasMode.NONE

    @property
    def acc_load(self) -> str:
        """Appended to the accumulator in the epilogue: int32 sums become f32."""
        return ".astype(jnp.float32)" if self.acc_dtype is DType.INT32 else ""

    def loop_scaling(self, half: Half) -> Scaling:
        return self.scaling(Stage.LOOP, half)

    def epilogue_scaling(self, half: Half) -> Scaling:
        return self.scaling(Stage.EPILOGUE, half)

    @property
    def fn_doc(self) -> str:
        what = "The grouped matmul" if self.grouped else "The dense matmul"
        if self.fn == "_gmm_plain":
            what += " without scales, bias or activation (the backward pass)"
        g = "g, " if self.grouped else ""
        doc = f"{what} on validated arguments: rhs is [{g}n, k] when rhs_nk, else [{g}k, n]."
        if self.masked:
            doc += ("\n\n    The masked layout: lhs is [g * cap, k], group i owns rows [i * cap, "
                    "i * cap + group_sizes[i])\n    (group_sizes is masked_m, clipped to [0, cap]); "
                    "cap = m / g.\n    ")
        return doc

    @property
    def steps(self) -> tuple[Step, ...]:
        """The function's steps between the tile (1) and the grid."""
        steps: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        if self.scale_prep:
            first = "Scales as f32, in the layouts the blocks read (XLA, small arrays)"
            steps.append(((first + ";", "e8m0 scales as int32 exponents, never as floats "
                           "(see _times_pow2).") if self.e8m0 else (first + ".",),
                          self.scale_prep))
        if self.lhs_split:
            steps.append((("rhs is packed along k, two per byte: the kernel contracts its "
                           "even", "elements with lhs's even columns and its odd ones with the "
                           "odd."), ("lhs_even, lhs_odd = lhs[:, 0::2], lhs[:, 1::2]",)))
        if self.masked:
            steps.append((("The work list: one item per (group, m tile) pair with valid rows "
                           "(lhs is", "[g * cap, k] here: group i owns rows [i * cap, i * cap "
                           "+ masked_m[i]))."),
                          ("starts, ends = _masked_bounds(group_sizes, m=m, g=g)",
                           "metadata, num_work = _group_metadata(starts, ends, m=m, tm=tm, "
                           "visit_empty=False)")))
        elif self.grouped:
            steps.append((("The work list: one item per (group, m tile) pair with rows to "
                           "compute.",),
                          ("starts, ends = _group_bounds(group_sizes, group_offset, m=m, g=g)",
                           "metadata, num_work = _group_metadata(starts, ends, m=m, tm=tm, "
                           "visit_empty=False)")))
        return tuple(Step(i + 2, comment, lines) for i, (comment, lines) in enumerate(steps))

    @property
    def grid_step(self) -> int:
        return len(self.steps) + 2

    @property
    def select_step(self) -> int:
        return len(self.steps) + 3

    @property
    def lhs_k(self) -> str:
        """k from the lhs array."""
        return "2 * lhs.shape[1]" if self.lhs_packed else "lhs.shape[1]"

    @property
    def n_from_rhs(self) -> str:
        """n from the rhs array, for either layout."""
        nk, kn = (1, 2) if self.grouped else (0, 1)
        wide = "2 * " if self.rhs_permute else ""
        return f"rhs.shape[{nk}] if rhs_nk else {wide}rhs.shape[{kn}]"

    @property
    def rhs_block(self) -> str:
        """The rhs block shape for either layout."""
        g = "None, " if self.grouped else ""
        k = "tk // 2" if self.rhs_packed_k else "tk"
        n = "tn // 2" if self.rhs_permute else "tn"
        return f"({g}tn, {k}) if rhs_nk else ({g}tk, {n})"

    @property
    def index_maps(self) -> tuple[IndexMap, ...]:
        """The named index maps of the function's blocks, in order of use."""
        g = "group_ids[w], " if self.grouped else ""
        m = self.m_block
        maps = [IndexMap("lhs_index", f"{m}, kk")]
        for h in self.halves:
            maps.append(IndexMap(f"rhs{h.suffix}_index",
                                 f"({g}{h.column}, kk) if rhs_nk else ({g}kk, {h.column})"))
        match self.lhs_scale:
            case ScaleMode.TOKEN:
                maps.append(IndexMap("lhs_scale_index", f"{m}, 0"))
            case ScaleMode.TOKEN_GROUP:
                maps.append(IndexMap("lhs_scale_index",
                                     f"lax.div(kk * tk, LHS_SCALE_BLOCK_K), {m}, 0"))
            case _:
                pass
        for h in self.halves:
            match self.rhs_scale:
                case ScaleMode.CHANNEL:
                    maps.append(IndexMap(f"rhs_scale{h.suffix}_index", f"{g}0, {h.column}"))
                case ScaleMode.BLOCK | ScaleMode.KBLOCK:
                    maps.append(IndexMap(f"rhs_scale{h.suffix}_index",
                                         f"{g}lax.div(kk * tk, RHS_SCALE_BLOCK_K), 0, "
                                         f"{h.column}"))
                case _:
                    pass
        if self.bias is not BiasMode.NONE:
            gb = g if self.bias is BiasMode.GROUP else ""
            maps += [IndexMap(f"bias{h.suffix}_index", f"{gb}0, {h.column}")
                     for h in self.halves]
        maps.append(IndexMap("out_index", f"{m}, j"))
        return tuple(maps)

    @property
    def in_specs(self) -> tuple[Block, ...]:
        g = "None, " if self.grouped else ""
        blocks = []
        if self.lhs_split:
            blocks += [Block("(tm, tk // 2)", "lhs_index")] * 2
        else:
            blocks.append(Block("(tm, tk // 2)" if self.lhs_packed else "(tm, tk)",
                                "lhs_index"))
        blocks += [Block(self.rhs_block, f"rhs{h.suffix}_index") for h in self.halves]
        match self.lhs_scale:
            case ScaleMode.TENSOR:
                blocks.append(Block("", ""))
            case ScaleMode.TOKEN:
                blocks.append(Block("(tm, 1)", "lhs_scale_index"))
            case ScaleMode.TOKEN_GROUP:
                blocks.append(Block("(None, tm, 1)", "lhs_scale_index"))
            case _:
                pass
        if self.rhs_scale is ScaleMode.TENSOR:
            blocks.append(Block("", ""))
        for h in self.halves:
            match self.rhs_scale:
                case ScaleMode.CHANNEL:
                    blocks.append(Block(f"({g}1, tn)", f"rhs_scale{h.suffix}_index"))
                case ScaleMode.BLOCK | ScaleMode.KBLOCK:
                    blocks.append(Block(f"({g}None, 1, tn)", f"rhs_scale{h.suffix}_index"))
                case _:
                    pass
        for h in self.halves:
            match self.bias:
                case BiasMode.N:
                    blocks.append(Block("(1, tn)", f"bias{h.suffix}_index"))
                case BiasMode.GROUP:
                    blocks.append(Block("(None, 1, tn)", f"bias{h.suffix}_index"))
                case BiasMode.NONE:
                    pass
        return tuple(blocks)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The arrays behind `in_specs`, in order (silu_mul passes the per-n
        ones twice, for the gate and the up half)."""
        twice = len(self.halves)
        names = ["lhs_even", "lhs_odd"] if self.lhs_split else ["lhs"]
        names += ["rhs"] * twice
        if self.lhs_scale is not ScaleMode.NONE:
            names.append("lhs_scale")
        if self.rhs_scale is not ScaleMode.NONE:
            names += ["rhs_scale"] * (twice if self.rhs_scale_per_n else 1)
        if self.bias is BiasMode.N:
            names += ["bias[None, :]"] * twice
        elif self.bias is BiasMode.GROUP:
            names += ["bias"] * twice
        return tuple(names)

    @property
    def scale_prep(self) -> tuple[str, ...]:
        """Lines of the function that bring the scales into the layouts the
        blocks read (XLA, small arrays); comment lines start with '#'."""
        lines = []
        lhs = _as_f32(self.lhs_scale_dtype, "lhs_scale")
        match self.lhs_scale:
            case ScaleMode.TENSOR:
                lines.append(f"lhs_scale = {lhs}.reshape(1)  # SMEM")
            case ScaleMode.TOKEN:
                lines.append(f"lhs_scale = {lhs}[:, None]  # [m, 1]")
            case ScaleMode.TOKEN_GROUP:
                lines.append(f"lhs_scale = {lhs}.T[:, :, None]  # [k blocks, m, 1]")
            case _:
                pass
        rhs = _as_f32(self.rhs_scale_dtype, "rhs_scale")
        g = "g, " if self.grouped else ""
        match self.rhs_scale:
            case ScaleMode.TENSOR:
                lines.append(f"rhs_scale = {rhs}.reshape({'g' if self.grouped else '1'})  # SMEM")
            case ScaleMode.CHANNEL:
                lines.append(f"rhs_scale = {rhs}[:, None, :]  # [g, 1, n]" if self.grouped
                             else f"rhs_scale = {rhs}[None, :]  # [1, n]")
            case ScaleMode.BLOCK:
                lines += [f"# One scale per RHS_SCALE_BLOCK_N = {self.rhs_block_n} columns: "
                          "repeated to one per",
                          f"# column, the layout of a kblock scale ([{g}k blocks, 1, n]).",
                          f"rhs_scale = jnp.repeat({rhs}, RHS_SCALE_BLOCK_N, axis=-2)[..., :n, :]",
                          "rhs_scale = jnp.swapaxes(rhs_scale, -1, -2)[..., None, :]"]
            case ScaleMode.KBLOCK:
                lines.append(f"rhs_scale = {rhs}{'' if self.grouped else '[0]'}  "
                             f"# [{g}k blocks, 1, n]")
            case _:
                pass
        return tuple(lines)

    def scaling(self, stage: Stage, half: Half) -> Scaling:
        """The scales (and alpha) applied at `stage` to the value of `half`."""
        factors, exponents = [], []
        for side in ("lhs", "rhs"):
            if self.scale_stage(side) is not stage:
                continue
            ref = self._scale_ref(side, half)
            if self._dtype(side) is DType.E8M0:
                exponents.append(ref)
            else:
                factors.append(Factor(ref, self._scale_note(side)))
        here = self.alpha_stage is stage
        with_exponent = here and bool(exponents)
        terms = exponents + (["ALPHA_EXPONENT"] if with_exponent else [])
        steps = self.pow2_steps(stage)
        if len(exponents) == 2:
            added = " + ALPHA_EXPONENT" if with_exponent else ""
            comment = (f"e8m0 scales: times 2**(e_lhs + e_rhs{added}), the exponents added",
                       f"as integers and applied in {steps} steps of normal powers of two (as f32",
                       "factors, 2**-127 * 2**100 would flush to 0 at the first).")
        elif exponents:
            power = "2**(e + ALPHA_EXPONENT)" if with_exponent else "2**e"
            comment = (f"e8m0 scale: times {power} in {steps} steps of normal powers of",
                       "two (byte 0, 2**-127, is an f32 subnormal, which TPUs flush to 0).")
        else:
            comment = ()
        return Scaling(
            factors=tuple(factors),
            alpha=here and not exponents,
            alpha_mantissa=with_exponent and self.alpha_split[0] != 1.0,
            exponents=" + ".join(terms),
            comment=comment,
            steps=steps,
        )

    def _scale_ref(self, side: str, half: Half) -> str:
        mode = self.lhs_scale if side == "lhs" else self.rhs_scale
        if mode is ScaleMode.TENSOR:
            return f"{side}_scale_ref[{'group' if side == 'rhs' and self.grouped else '0'}]"
        if side == "lhs":
            return "lhs_scale_ref[...]"
        return f"rhs_scale{half.suffix}_ref[...]"

    def _scale_note(self, side: str) -> str:
        mode = self.lhs_scale if side == "lhs" else self.rhs_scale
        match mode:
            case ScaleMode.TOKEN_GROUP:
                return "  # [tm, 1]: this K block's row scales"
            case ScaleMode.TOKEN:
                return "  # [tm, 1]: the row scales"
            case ScaleMode.BLOCK | ScaleMode.KBLOCK:
                return "  # [1, tn]: this K block's column scales"
            case ScaleMode.CHANNEL:
                return "  # [1, tn]: the column scales"
            case _:
                return ""

    @property
    def epilogue_parts(self) -> str:
        """What the epilogue does before the cast, for the step's comment."""
        parts = []
        if Stage.EPILOGUE in (self.scale_stage("lhs"), self.scale_stage("rhs")):
            parts.append("scales")
        if self.alpha_stage is Stage.EPILOGUE:
            parts.append("alpha")
        if self.bias is not BiasMode.NONE:
            parts.append("bias")
        if self.activation is not Activation.NONE:
            parts.append(self.activation.value)
        return f"the epilogue ({', '.join(parts)}), then " if parts else ""

    @property
    def activation_fn(self) -> str:
        """The module's activation function ("" for none); silu_mul applies _silu."""
        if self.activation is Activation.NONE:
            return ""
        return "_silu" if self.silu_mul else f"_{self.activation.value}"

    @property
    def moved_comment(self) -> str:
        if not self.moved_to_loop:
            return ""
        return (" and ".join(self.moved_to_loop).capitalize() + " apply here too, not in the "
                "epilogue: with an e8m0 scale, every factor of a product meets in one place "
                "(float factors first, then the e8m0 exponents, added as integers), or a "
                "partial product that went subnormal would be flushed to 0 before the "
                "epilogue could scale it back up.")


@dataclass(frozen=True, slots=True, kw_only=True)
class TgmmCore:
    """The ragged-K matmul: out[i] = alpha * lhs[rows_i]ᵀ @ rhs[rows_i] (+ existing_out)."""

    fn: str
    kernel_fn: str
    lhs_cast: DType | None
    rhs_cast: DType | None
    highest: bool
    alpha: float | None

    @property
    def lhs_convert(self) -> str:
        return f".astype(jnp.{jnp_name(self.lhs_cast)})" if self.lhs_cast else ""

    @property
    def rhs_convert(self) -> str:
        return f".astype(jnp.{jnp_name(self.rhs_cast)})" if self.rhs_cast else ""


def _unpack_fn(dt: DType | None) -> str:
    if dt is None:
        return ""
    return "_unpack_int4" if dt is DType.INT4 else "_unpack_fp4"


def _as_f32(dt: DType, name: str) -> str:
    """A scale array as the kernel reads it: f32, or int32 exponents for e8m0."""
    return f"_e8m0_exponent({name})" if dt is DType.E8M0 else f"{name}.astype(jnp.float32)"


def matmul_core(kernel: ir.Kernel) -> MatmulCore:
    rhs = kernel.rhs_operand
    mxu = mxu_dtype(kernel.lhs.dtype, rhs.dtype)
    grouped = kernel.op is Op.GROUPED
    return MatmulCore(
        fn="_gmm" if grouped else "_matmul",
        kernel_fn="_kernel",
        grouped=grouped,
        masked=kernel.masked,
        rhs_nk=rhs.layout is Layout.NK,
        lhs_packed=packed(kernel.lhs),
        rhs_packed=packed(rhs),
        lhs_cast=cast(kernel.lhs.dtype, mxu),
        rhs_cast=cast(rhs.dtype, mxu),
        mxu=mxu,
        lhs_scale=kernel.lhs_scale.mode,
        lhs_scale_dtype=kernel.lhs_scale.dtype,
        lhs_block_k=kernel.lhs_scale.block_k,
        rhs_scale=kernel.rhs_scale.mode,
        rhs_scale_dtype=kernel.rhs_scale.dtype,
        rhs_block_k=kernel.rhs_scale.block_k,
        rhs_block_n=kernel.rhs_scale.block_n,
        bias=kernel.bias.mode,
        activation=kernel.epilogue.activation,
        alpha=f32(kernel.epilogue.alpha),
    )


def plain_core(core: MatmulCore) -> MatmulCore:
    """`core` without scales, bias, alpha or activation: lhs @ rhs for the
    backward pass (the pre-activation, and d lhs with the other B layout)."""
    return replace(core, fn="_gmm_plain", kernel_fn="_plain_kernel",
                   lhs_scale=ScaleMode.NONE, rhs_scale=ScaleMode.NONE, bias=BiasMode.NONE,
                   activation=Activation.NONE, alpha=None)


def vjp_supported(kernel: ir.Kernel) -> bool:
    """Grouped kernels with f32/bf16 operands and no scales get `<name>_vjp`."""
    return (kernel.op is Op.GROUPED and not kernel.masked
            and kernel.lhs.dtype in (DType.F32, DType.BF16)
            and kernel.rhs_operand.dtype in (DType.F32, DType.BF16)
            and not kernel.lhs_scale.enabled and not kernel.rhs_scale.enabled)


def tgmm_core(lhs: DType, rhs: DType, alpha: float | None) -> TgmmCore:
    mxu = mxu_dtype(lhs, rhs)
    return TgmmCore(fn="_tgmm", kernel_fn="_tgmm_kernel", lhs_cast=cast(lhs, mxu),
                    rhs_cast=cast(rhs, mxu), highest=mxu is DType.F32, alpha=alpha)
