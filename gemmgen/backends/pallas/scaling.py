"""A matmul core's scales as the kernel applies them (MatmulCore's third
concern): the XLA preparation of the scale arrays, and per stage and column
half the factors, alpha and e8m0 exponents (`Scaling`).

`ScaleText` is a base of `MatmulCore` (cores.py) and reads its fields and
decisions (decisions.py).
"""

from __future__ import annotations

from gemmgen.backends.pallas.parts import Factor, Half, Scaling, Stage
from gemmgen.ir import DType, ScaleMode


class ScaleText:
    """The scale preparation and scaling of a MatmulCore."""

    __slots__ = ()

    @property
    def scale_prep(self) -> tuple[str, ...]:
        """Lines of the function that bring the scales into the layouts the
        blocks read (XLA, small arrays); comment lines start with '#'."""
        lines = []
        if self.lhs_in_tile:
            lines += self._in_tile_prep("lhs")
        lhs = _as_f32(self.lhs_scale_dtype, "lhs_scale")
        match None if self.lhs_in_tile else self.lhs_scale:
            case ScaleMode.TENSOR:
                lines.append(f"lhs_scale = {lhs}.reshape(1)  # SMEM")
            case ScaleMode.TOKEN:
                lines.append(f"lhs_scale = {lhs}[:, None]  # [m, 1]")
            case ScaleMode.TOKEN_GROUP if self.lhs_sub:
                lines += ["# lhs_scale: the scales of each K tile ([k tiles, m, blocks]).",
                          f"lhs_scale = _k_tiles({lhs}, tk // LHS_SCALE_BLOCK_K, fill=0)"]
            case ScaleMode.TOKEN_GROUP:
                lines.append(f"lhs_scale = {lhs}.T[:, :, None]  # [k blocks, m, 1]")
            case _:
                pass
        if self.rhs_in_tile:
            lines += self._in_tile_prep("rhs")
        else:
            lines += self._rhs_layout("rhs_scale", _as_f32(self.rhs_scale_dtype, "rhs_scale"))
        if self.rhs_zero:
            last = "n" if self.rhs_scale is ScaleMode.KBLOCK else "pl.cdiv(k, RHS_SCALE_BLOCK_K)"
            unpacked = f"_zero_points(rhs_zero, {last})"
            lines.append("# rhs_zero: the uint4 zero points as f32, laid out as rhs_scale is.")
            if self.rhs_scale is ScaleMode.KBLOCK and not self.rhs_sub:
                lines += self._rhs_layout("rhs_zero", unpacked)
            else:
                lines += [f"rhs_zero = {unpacked}", *self._rhs_layout("rhs_zero", "rhs_zero")]
        if self.global_scales:
            names = [f"{side}_global_scale" for side in self.global_scales]
            what = "per group" if self.grouped else "for the tensor"
            value = names[0]
            if len(names) == 2:
                lines.append(f"# The global scales (NVFP4), one f32 {what} each: their product.")
                value = f"({names[0]} * {names[1]})"
            else:
                lines.append(f"# The global scale (NVFP4), one f32 {what}.")
            lines.append(f"global_scale = {value}.reshape({'g' if self.grouped else '1'})"
                         "  # SMEM")
        return tuple(lines)

    def _rhs_layout(self, name: str, expr: str) -> list[str]:
        """The lines that bring an rhs scale array (or the zero points,
        which share its shape) into the layout its blocks read; `expr` is
        its value as f32 (e8m0: int32 exponents)."""
        lines: list[str] = []
        g = "g, " if self.grouped else ""
        match self.rhs_scale:
            case ScaleMode.TENSOR:
                lines.append(f"{name} = {expr}.reshape({'g' if self.grouped else '1'})  # SMEM")
            case ScaleMode.CHANNEL:
                lines.append(f"{name} = {expr}[:, None, :]  # [g, 1, n]" if self.grouped
                             else f"{name} = {expr}[None, :]  # [1, n]")
            case ScaleMode.BLOCK if self.rhs_sub:
                lines += [f"# One scale per RHS_SCALE_BLOCK_N = {self.rhs_block_n} columns: "
                          "repeated to one per",
                          f"# column, then the scales of each K tile ([{g}k tiles, blocks, n]).",
                          f"{name} = jnp.repeat({expr}, RHS_SCALE_BLOCK_N, axis=-2)[..., :n, :]",
                          *_sub_tiles()]
            case ScaleMode.KBLOCK if self.rhs_sub:
                lines += ["# rhs_scale: the scales of each K tile ([g, k tiles, blocks, n]).",
                          f"{name} = jnp.swapaxes({expr}[:, :, 0, :], -1, -2)",
                          *_sub_tiles()]
            case ScaleMode.BLOCK:
                lines += [f"# One scale per RHS_SCALE_BLOCK_N = {self.rhs_block_n} columns: "
                          "repeated to one per",
                          f"# column, the layout of a kblock scale ([{g}k blocks, 1, n]).",
                          f"{name} = jnp.repeat({expr}, RHS_SCALE_BLOCK_N, axis=-2)[..., :n, :]",
                          "rhs_scale = jnp.swapaxes(rhs_scale, -1, -2)[..., None, :]"]
            case ScaleMode.KBLOCK:
                lines.append(f"{name} = {expr}{'' if self.grouped else '[0]'}  "
                             f"# [{g}k blocks, 1, n]")
            case _:
                pass
        return [line.replace("rhs_scale", name) for line in lines]

    # -- the module's helpers for scales applied inside the K tile --------

    @property
    def atoms(self) -> bool:
        """A scale in the 128 x 4 atom layout (`_atoms_to_rows`)."""
        return self.lhs_scale_atoms or self.rhs_scale_atoms

    @property
    def e8m0_blocks(self) -> bool:
        """An e8m0 scale applied inside the K tile (`_e8m0_blocks`)."""
        return self.exponent_input("lhs") or self.exponent_input("rhs")

    @property
    def ue4m3(self) -> bool:
        """A ue4m3 scale, applied inside the K tile (`_ue4m3`)."""
        return any(self.in_tile(side) and not self.exponent_input(side)
                   for side in ("lhs", "rhs"))

    @property
    def k_tiles(self) -> bool:
        return self.e8m0_blocks or self.ue4m3 or self.sub_blocks

    @property
    def spread_lanes(self) -> bool:
        """Scales applied along lanes: lhs, or rhs [n, k]."""
        return self.lhs_in_tile or (self.rhs_in_tile and self.rhs_nk)

    @property
    def scale_rows(self) -> bool:
        """Scales applied along sublanes: rhs [k, n]."""
        return self.rhs_in_tile and not self.rhs_nk

    def _in_tile_prep(self, side: str) -> list[str]:
        """The XLA lines that bring a scale applied inside the K tile into
        its blocks: row-major (from the atom layout), then per K tile of
        `tk // BK` blocks, [k tiles, rows, blocks] ([k tiles, blocks, n]
        for rhs [k, n]); e8m0 as each block's shift below the largest
        exponent of its row in the tile, plus that exponent ([k tiles,
        rows, 1], [k tiles, 1, n] for rhs)."""
        big = side.upper()
        rows = "m" if side == "lhs" else "n"
        g = "g, " if side == "rhs" and self.grouped else ""
        blocks = f"tk // {big}_SCALE_BLOCK_K"
        lines = []
        if getattr(self, f"{side}_scale_atoms"):
            comment = f"# {side}_scale is in the 128 x 4 atom layout: reordered to rows, "
            call = f"{side}_scale = _atoms_to_rows({side}_scale, {rows}, "
            lines += [comment + f"[{g}{rows}, k blocks].",
                      call + f"pl.cdiv(k, {big}_SCALE_BLOCK_K))"]
        kn = side == "rhs" and not self.rhs_nk
        shape = f"[{g}k tiles, blocks, n]" if kn else f"[{g}k tiles, {rows}, blocks]"
        if self._dtype(side) is DType.E8M0:
            exponent = f"[{g}k tiles, 1, n]" if side == "rhs" else "[k tiles, m, 1]"
            lines += [f"# {side}_scale: shifts {shape}; {side}_exponent: {exponent}.",
                      f"{side}_scale, {side}_exponent = _e8m0_blocks({side}_scale, {blocks})"]
            if side == "rhs":
                lines.append("rhs_exponent = jnp.swapaxes(rhs_exponent, -1, -2)")
        else:
            lines += [f"# {side}_scale: ue4m3 bytes {shape}.",
                      f"{side}_scale = _k_tiles({side}_scale, {blocks}, fill=0)"]
        if kn:
            lines.append("rhs_scale = jnp.swapaxes(rhs_scale, -1, -2)")
        return lines

    def scaling(self, stage: Stage, half: Half) -> Scaling:
        """The scales (and alpha) applied at `stage` to the value of `half`."""
        factors, exponents = [], []
        for side in ("lhs", "rhs"):
            if self.scale_stage(side) is not stage:
                continue
            if self.in_tile(side) and not self.exponent_input(side):
                continue  # applied to the operand in VMEM, nothing left for the product
            ref = self._scale_ref(side, half)
            if self._dtype(side) is DType.E8M0:
                exponents.append(ref)
            else:
                factors.append(Factor(ref, self._scale_note(side)))
        if self.global_stage is stage:
            factors.append(Factor(f"global_scale_ref[{'group' if self.grouped else '0'}]",
                                  "  # the global scale(s)"))
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
        if self.sub(side) and mode in (ScaleMode.TOKEN_GROUP, ScaleMode.BLOCK, ScaleMode.KBLOCK):
            # block b of the K tile's scales: a [tm, 1] column or a [1, tn] row
            return ("lhs_scale_ref[:, pl.ds(b, 1)]" if side == "lhs"
                    else f"rhs_scale{half.suffix}_ref[pl.ds(b, 1), :]")
        if self.exponent_input(side):
            return "lhs_exponent_ref[...]" if side == "lhs" else \
                f"rhs_exponent{half.suffix}_ref[...]"
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


def _sub_tiles() -> list[str]:
    """rhs_scale [..., n, k blocks] -> [..., k tiles, blocks, n]: the
    K-block loop's layout (its K tile's scales, a [1, tn] row per block)."""
    return ["rhs_scale = _k_tiles(rhs_scale, tk // RHS_SCALE_BLOCK_K, fill=0)",
            "rhs_scale = jnp.swapaxes(rhs_scale, -1, -2)"]


def _as_f32(dt: DType, name: str) -> str:
    """A scale array as the kernel reads it: f32, or int32 exponents for e8m0."""
    return f"_e8m0_exponent({name})" if dt is DType.E8M0 else f"{name}.astype(jnp.float32)"
