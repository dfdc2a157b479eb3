"""Cores: the matmul implementations a module contains, as typed plans.

A module has one core for the spec's kernel; a grouped module with
`<name>_vjp` adds a plain one (no scales, bias, alpha or activation) for the
backward pass, called with either B layout (`rhs_nk`, a static argument of
the generated function, as megablox's `transpose_rhs`), and a tgmm core.
Every choice the templates print is a field or a property of a core: a
MatmulCore's decisions (decisions.py), its pallas_call's grid and blocks
(blocks.py) and its scales (scaling.py) are bases of the class, by concern;
parts.py holds the small types they return.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gemmgen import ir
from gemmgen.backends.pallas.blocks import Blocks
from gemmgen.backends.pallas.decisions import Decisions
from gemmgen.backends.pallas.dtypes import cast, f32, jnp_name, mxu_dtype, packed
from gemmgen.backends.pallas.kblocks import in_tile_scale, k_lanes, sub_block_sides
from gemmgen.backends.pallas.parts import Half, ParamGroup, Scaling, Stage, Step
from gemmgen.backends.pallas.scaling import ScaleText
from gemmgen.backends.pallas.tpu import LANES
from gemmgen.ir import (
    Activation,
    BiasMode,
    DType,
    Layout,
    Op,
    Pairs,
    ScaleLayout,
    ScaleMode,
    lcm,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MatmulCore(Decisions, Blocks, ScaleText):
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
    # A paired activation's layout, and swiglu_clamped's constants (f32).
    pairs: Pairs = Pairs.HALVES
    alpha_gate: float = 0.0
    limit: float = 0.0
    # The masked layout: `fn` gets lhs [g * cap, k] and masked_m as
    # group_sizes (no group_offset or existing_out).
    masked: bool = False
    # MX / NV block scales applied per block inside each K tile: the kernel
    # multiplies the operand by them in VMEM (decisions.in_tile_scale).
    lhs_in_tile: bool = False
    rhs_in_tile: bool = False
    # The scale is stored in the 128 x 4 atom layout (XLA reorders it to rows).
    lhs_scale_atoms: bool = False
    rhs_scale_atoms: bool = False
    # The K tile clamps to a multiple of this past k: whole lane tiles, and
    # whole scale blocks when a scale applies in the tile.
    k_align: int = LANES
    # The operands whose block scales carry a `global=f32` scale (NVFP4):
    # `fn` takes `<side>_global_scale` and the kernel one f32 per group, their
    # product (`global_scale_ref`, SMEM), applied where alpha is.
    global_scales: tuple[str, ...] = ()
    # Main-loop scales applied one K block at a time inside a K tile that
    # holds several (`sub_block_sides`): the kernel loops over the tile's
    # blocks, each a dot of the block's slices times its scales.
    lhs_sub: bool = False
    rhs_sub: bool = False
    # The most K terms one int8 dot may sum (0: any): on a TPU that
    # multiplies int8 as bf16 with f32 sums (tpu.INT8_AS_BF16), longer
    # contractions are split into chunks whose int32 results are added.
    int_dot_k: int = 0
    # uint4 weights with zero points (`zero=uint4`): `fn` takes rhs_zero, the
    # kernel a [1, tn] row of them per K block beside the scale's, and
    # subtracts (sum_k x) * z from each K block's product (`zero_lines`).
    rhs_zero: bool = False

    # -- what the templates print -------------------------------------------

    @property
    def k_align_scales(self) -> bool:
        """K_ALIGN also makes a K block whole scale blocks."""
        return self.lhs_in_tile or self.rhs_in_tile or self.lhs_sub or self.rhs_sub

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

    def dequant(self, side: str, half: Half) -> tuple[str, ...]:
        """The kernel's lines that multiply the loaded operand (its even and
        odd halves when 4-bit data is packed along k) by the scales of its
        blocks in this K tile, in VMEM; () unless that scale applies inside
        the K tile. Blocks along lanes take `_spread_lanes` (a 0/1 matmul),
        along sublanes (rhs [k, n]) `_scale_rows` (a reshape)."""
        if not self.in_tile(side):
            return ()
        big = side.upper()
        ref = f"{side}_scale{half.suffix if side == 'rhs' else ''}_ref[...]"
        if side == "lhs":
            parts = ("lhs_even", "lhs_odd") if self.k_pairs else ("lhs",)
            lanes = True
        else:
            parts = ("rhs_even", "rhs_odd") if self.k_pairs else ("rhs",)
            lanes = self.rhs_nk
        width = f"{big}_SCALE_BLOCK_K // 2" if len(parts) == 2 else f"{big}_SCALE_BLOCK_K"
        row = "row" if lanes else "column"
        if self.exponent_input(side):
            lines = [f"# {side}_scale, in VMEM: each block of the K tile times 2**-shift, its e8m0",
                     f"# scale relative to its {row}'s largest in the tile (which scales the",
                     f"# product), exactly in {self.mxu_name}."]
            factors = f"_pow2(-{ref}.astype(jnp.int32))"
        else:
            lines = [f"# {side}_scale, in VMEM: each block of the K tile times its ue4m3 scale,",
                     f"# exactly in {self.mxu_name}."]
            factors = f"_ue4m3({ref})"
        lines.append(f"factors = {factors}")
        if lanes:
            lines.append(f"scale = _spread_lanes(factors, {width})")
            lines += [f"{p} = ({p}.astype(jnp.float32) * scale).astype({p}.dtype)" for p in parts]
        else:
            lines += [f"{p} = _scale_rows({p}, factors, {width})" for p in parts]
        return tuple(lines)

    @property
    def mxu_summary(self) -> str:
        """What the MXU multiplies, in words (`gemmgen explain`)."""
        if self.fp8_dot:
            return "FP8 as stored (the chip's MXU multiplies FP8), f32 products"
        if self.int_dot:
            return "int8, int32 products"
        if self.highest:
            return "f32 at Precision.HIGHEST"
        return "bf16 (every operand converts to it exactly), f32 products"

    @property
    def in_tile_scales(self) -> bool:
        """Some scale applies inside the K tile (the module's helpers for it)."""
        return self.lhs_in_tile or self.rhs_in_tile

    @property
    def halves(self) -> tuple[Half, ...]:
        if self.split_pairs:
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
        if self.exponent_input("lhs"):
            names.append("lhs_exponent_ref")
        if self.rhs_scale_per_n:
            names += [f"rhs_scale{h.suffix}_ref" for h in self.halves]
        elif self.rhs_scale is not ScaleMode.NONE:
            names.append("rhs_scale_ref")
        if self.exponent_input("rhs"):
            names += [f"rhs_exponent{h.suffix}_ref" for h in self.halves]
        if self.rhs_zero:
            names += [f"rhs_zero{h.suffix}_ref" for h in self.halves]
        if self.global_scales:
            names.append("global_scale_ref")
        if self.bias is not BiasMode.NONE:
            names += [f"bias{h.suffix}_ref" for h in self.halves]
        if self.grouped and not self.masked:
            names.append("existing_ref")
        groups.append(ParamGroup("Inputs (existing_ref: None unless existing_out is aliased).",
                                 tuple(names)) if self.grouped and not self.masked
                      else ParamGroup("Inputs.", tuple(names)))
        wide = ("wide_ref",) if self.rows_scratch else ()
        wide += ("pairs_ref",) if self.interleaved else ()
        groups.append(ParamGroup("Output and scratch.",
                                 ("out_ref", *(f"acc{h.suffix}_ref" for h in self.halves),
                                  *wide)))
        return tuple(groups)

    @property
    def rows_scratch(self) -> bool:
        """rhs packed along n against lhs packed along k reads the even and
        odd rows of its bytes with strided loads, which Mosaic implements
        for 32-bit data only (a TPU v5e refused 8-bit ones: "Strided load
        with non 32-bit data"): the block widens to int32 in a scratch."""
        return self.rhs_permute and self.k_pairs

    @property
    def scratch_shapes(self) -> str:
        """The pallas_call's scratch: the accumulator(s), and the int32 rows
        of `rows_scratch`."""
        acc = f"[pltpu.VMEM((tm, tn), jnp.{self.acc_name})]" + (" * 2" if self.split_pairs else "")
        acc += " + [pltpu.VMEM((tk, tn // 2), jnp.int32)]" if self.rows_scratch else ""
        return acc + (" + [pltpu.VMEM((tn, min(tm, 128)), jnp.float32)]" if self.interleaved
                      else "")

    def scratch_arg(self, indent: int) -> str:
        """`scratch_shapes=...,` at `indent` spaces, wrapped at its sums as
        ruff formats a line past 100 columns."""
        line = f"scratch_shapes={self.scratch_shapes},"
        if indent + len(line) <= 100:
            return line
        return line.replace(" + ", "\n" + " " * indent + "+ ")

    @property
    def kernel_keywords(self) -> tuple[str, ...]:
        return ("rhs_nk: bool", "tiles_k: int", "k_rem: int") + (
            ("k_blocks: int",) if self.sub_blocks else ()) + (
            ("tm: int",) if self.grouped else ())

    @property
    def sub_widths(self) -> tuple[tuple[str, str], ...]:
        """The operand values the K-block loop slices, each with the axis of
        K in it: lhs along its columns, rhs along axis `1 if rhs_nk else 0`
        (the even and odd halves of 4-bit data packed along k)."""
        rhs_axis = "0" if self.rhs_permute else "1 if rhs_nk else 0"
        if self.k_pairs:
            return (("lhs_even", "1"), ("lhs_odd", "1"), ("rhs_even", rhs_axis),
                    ("rhs_odd", rhs_axis))
        return (("lhs", "1"), ("rhs", rhs_axis))

    @property
    def sub_width(self) -> str:
        """The K width of one block in the sliced values."""
        return f"{self.sub_block_k} // 2" if self.k_pairs else self.sub_block_k

    @property
    def fn_params(self) -> tuple[str, ...]:
        names = ["lhs", "rhs"]
        if self.grouped:
            names.append("group_sizes")
        if self.lhs_scale is not ScaleMode.NONE:
            names.append("lhs_scale")
        if self.rhs_scale is not ScaleMode.NONE:
            names.append("rhs_scale")
        if self.rhs_zero:
            names.append("rhs_zero")
        names += [f"{side}_global_scale" for side in self.global_scales]
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

    def zero_lines(self, half: Half, *, block: bool) -> tuple[str, ...]:
        """The kernel's lines that turn this K block's `part`, x . q, into
        x . (q - z): minus (sum_k x) * z, the row sums of the lhs block
        (f32, [tm, 1]) times the block's zero points ([1, tn]); `block`: inside
        the K-block loop (block b of the tile). () without zero points."""
        if not self.rhs_zero:
            return ()
        ref = f"rhs_zero{half.suffix}_ref" + ("[pl.ds(b, 1), :]" if block else "[...]")
        sfx = "_b" if block else ""
        parts = ("lhs_even", "lhs_odd") if self.k_pairs else ("lhs",)
        sums = " + ".join(f"_row_sum({p}{sfx})" for p in parts)
        return ("# Zero points: x . (q - z) = x . q - (sum_k x) z, per column.",
                f"row_sums = {sums}  # [tm, 1]",
                f"part = part - row_sums * {ref}")

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
            if self.in_tile_scales:
                comment: tuple[str, ...] = (
                    "Scales in the layouts the blocks read (XLA, small arrays): MX / NV",
                    "block scales stay bytes, one block of them per K tile, applied to the",
                    "operands in VMEM; e8m0 exponents never become floats (see _times_pow2).")
            elif self.e8m0:
                comment = ("Scales as f32, in the layouts the blocks read (XLA, small arrays);",
                           "e8m0 scales as int32 exponents, never as floats (see _times_pow2).")
            else:
                comment = ("Scales as f32, in the layouts the blocks read (XLA, small arrays).",)
            steps.append((comment, self.scale_prep))
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
    def epilogue_parts(self) -> str:
        """What the epilogue does before the cast, for the step's comment."""
        parts = []
        if Stage.EPILOGUE in (self.scale_stage("lhs"), self.scale_stage("rhs")):
            parts.append("scales")
        if self.global_scales and self.global_stage is Stage.EPILOGUE:
            parts.append("global scale")
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
    def pairs_note(self) -> str:
        """How a paired activation pairs columns, in words."""
        if self.interleaved:
            return "gate column 2j with up column 2j + 1"
        return "column j with j + n/2"

    @property
    def moved_comment(self) -> str:
        if not self.moved_to_loop:
            return ""
        return (" and ".join(self.moved_to_loop).capitalize() + " apply here too, not in the "
                "epilogue: with an e8m0 scale, every factor of a product meets in one place "
                "(float factors first, then the e8m0 exponents, added as integers), or a "
                "partial product that went subnormal would be flushed to 0 before the "
                "epilogue could scale it back up.")


def _unpack_fn(dt: DType | None) -> str:
    if dt is None:
        return ""
    return f"_unpack_{dt.value}"


def matmul_core(kernel: ir.Kernel, *, fp8_mxu: bool = False,
                int_dot_k: int = 0) -> MatmulCore:
    """The spec's matmul, for the kernel as the Pallas backend sees it (its
    own tile LUT, if any: `ir.Kernel.for_backend`); fp8_mxu: the spec's TPU
    multiplies FP8 (`tpu.fp8_mxu`), int_dot_k: the longest int8 dot it sums
    exactly (`tpu.INT_DOT_K` where int8 multiplies as bf16, else 0); what
    the blocks and checks read depends on neither."""
    rhs = kernel.rhs_operand
    lhs_in_tile = in_tile_scale(kernel, kernel.lhs_scale)
    rhs_in_tile = in_tile_scale(kernel, kernel.rhs_scale)
    mxu = mxu_dtype(kernel.lhs.dtype, rhs.dtype,
                    lhs_scale=kernel.lhs_scale.dtype if lhs_in_tile else None,
                    rhs_scale=kernel.rhs_scale.dtype if rhs_in_tile else None, fp8=fp8_mxu)
    grouped = kernel.op is Op.GROUPED
    lhs_sub, rhs_sub = sub_block_sides(kernel)
    # A K block is whole lane tiles, also past k (the ragged last block is
    # masked one lane tile at a time: `_zero_past`), and whole blocks of the
    # scales applied inside it.
    k_align = k_lanes(kernel)
    if lhs_in_tile or rhs_in_tile or lhs_sub or rhs_sub:
        for scale, here in ((kernel.lhs_scale, lhs_in_tile or lhs_sub),
                            (kernel.rhs_scale, rhs_in_tile or rhs_sub)):
            k_align = lcm(k_align, scale.block_k) if here else k_align
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
        pairs=kernel.epilogue.pairs,
        alpha_gate=f32(kernel.epilogue.alpha_gate),
        limit=f32(kernel.epilogue.limit),
        lhs_in_tile=lhs_in_tile,
        rhs_in_tile=rhs_in_tile,
        lhs_scale_atoms=kernel.lhs_scale.layout is ScaleLayout.ATOM128X4,
        rhs_scale_atoms=kernel.rhs_scale.layout is ScaleLayout.ATOM128X4,
        k_align=k_align,
        lhs_sub=lhs_sub,
        rhs_sub=rhs_sub,
        global_scales=tuple(side for side in ("lhs", "rhs")
                            if getattr(kernel, f"{side}_scale").global_scale),
        int_dot_k=int_dot_k if mxu is DType.INT8 else 0,
        rhs_zero=kernel.rhs_scale.zero is not None,
    )


def plain_core(core: MatmulCore) -> MatmulCore:
    """`core` without scales, bias, alpha or activation: lhs @ rhs for the
    backward pass (the pre-activation, and d lhs with the other B layout)."""
    return replace(core, fn="_gmm_plain", kernel_fn="_plain_kernel",
                   lhs_scale=ScaleMode.NONE, rhs_scale=ScaleMode.NONE, bias=BiasMode.NONE,
                   activation=Activation.NONE, alpha=None, pairs=Pairs.HALVES, lhs_in_tile=False,
                   rhs_in_tile=False, lhs_scale_atoms=False, rhs_scale_atoms=False, k_align=LANES,
                   lhs_sub=False, rhs_sub=False, global_scales=(), rhs_zero=False)
