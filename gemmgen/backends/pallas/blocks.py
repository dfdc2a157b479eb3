"""A matmul core's pallas_call (MatmulCore's second concern): the function's
numbered steps, its grid, the blocks and index maps of its inputs.

`Blocks` is a base of `MatmulCore` (cores.py) and reads its fields and
decisions (decisions.py).
"""

from __future__ import annotations

from gemmgen.backends.pallas.parts import Block, IndexMap
from gemmgen.ir import BiasMode, ScaleMode


class Blocks:
    """The grid, blocks and inputs of a MatmulCore's pallas_call."""

    __slots__ = ()

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
            case ScaleMode.TOKEN_GROUP if self.lhs_in_tile:
                maps.append(IndexMap("lhs_scale_index", f"kk, {m}, 0"))
                if self.exponent_input("lhs"):
                    maps.append(IndexMap("lhs_exponent_index", f"kk, {m}, 0"))
            case ScaleMode.TOKEN_GROUP if self.lhs_sub:
                maps.append(IndexMap("lhs_scale_index", f"kk, {m}, 0"))
            case ScaleMode.TOKEN_GROUP:
                maps.append(IndexMap("lhs_scale_index",
                                     f"lax.div(kk * tk, LHS_SCALE_BLOCK_K), {m}, 0"))
            case _:
                pass
        if self.rhs_in_tile:
            for h in self.halves:
                at = f"{g}kk, {h.column}, 0" if self.rhs_nk else f"{g}kk, 0, {h.column}"
                maps.append(IndexMap(f"rhs_scale{h.suffix}_index", at))
            if self.exponent_input("rhs"):
                maps += [IndexMap(f"rhs_exponent{h.suffix}_index", f"{g}kk, 0, {h.column}")
                         for h in self.halves]
        for h in self.halves:
            match None if self.rhs_in_tile else self.rhs_scale:
                case ScaleMode.CHANNEL:
                    maps.append(IndexMap(f"rhs_scale{h.suffix}_index", f"{g}0, {h.column}"))
                case ScaleMode.BLOCK | ScaleMode.KBLOCK if self.rhs_sub:
                    maps.append(IndexMap(f"rhs_scale{h.suffix}_index",
                                         f"{g}kk, 0, {h.column}"))
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
            case ScaleMode.TOKEN_GROUP if self.lhs_in_tile:
                blocks.append(Block("(None, tm, tk // LHS_SCALE_BLOCK_K)", "lhs_scale_index"))
                if self.exponent_input("lhs"):
                    blocks.append(Block("(None, tm, 1)", "lhs_exponent_index"))
            case ScaleMode.TOKEN_GROUP if self.lhs_sub:
                blocks.append(Block("(None, tm, tk // LHS_SCALE_BLOCK_K)", "lhs_scale_index"))
            case ScaleMode.TOKEN_GROUP:
                blocks.append(Block("(None, tm, 1)", "lhs_scale_index"))
            case _:
                pass
        if self.rhs_scale is ScaleMode.TENSOR:
            blocks.append(Block("", ""))
        if self.rhs_in_tile:
            shape = (f"({g}None, tn, tk // RHS_SCALE_BLOCK_K)" if self.rhs_nk
                     else f"({g}None, tk // RHS_SCALE_BLOCK_K, tn)")
            blocks += [Block(shape, f"rhs_scale{h.suffix}_index") for h in self.halves]
            if self.exponent_input("rhs"):
                blocks += [Block(f"({g}None, 1, tn)", f"rhs_exponent{h.suffix}_index")
                           for h in self.halves]
        for h in self.halves:
            match None if self.rhs_in_tile else self.rhs_scale:
                case ScaleMode.CHANNEL:
                    blocks.append(Block(f"({g}1, tn)", f"rhs_scale{h.suffix}_index"))
                case ScaleMode.BLOCK | ScaleMode.KBLOCK if self.rhs_sub:
                    blocks.append(Block(f"({g}None, tk // RHS_SCALE_BLOCK_K, tn)",
                                        f"rhs_scale{h.suffix}_index"))
                case ScaleMode.BLOCK | ScaleMode.KBLOCK:
                    blocks.append(Block(f"({g}None, 1, tn)", f"rhs_scale{h.suffix}_index"))
                case _:
                    pass
        if self.rhs_zero:  # the zero points: the blocks of rhs_scale, same index maps
            blocks += [b for b in blocks if b.index.startswith("rhs_scale")]
        if self.global_scales:
            blocks.append(Block("", ""))
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
    def inputs_fit_one_line(self) -> bool:
        """`    inputs = [...]` fits the 100 columns of generated Python."""
        return len("    inputs = []") + len(", ".join(self.inputs)) <= 100

    @property
    def inputs(self) -> tuple[str, ...]:
        """The arrays behind `in_specs`, in order (silu_mul passes the per-n
        ones twice, for the gate and the up half)."""
        twice = len(self.halves)
        names = ["lhs_even", "lhs_odd"] if self.lhs_split else ["lhs"]
        names += ["rhs"] * twice
        if self.lhs_scale is not ScaleMode.NONE:
            names.append("lhs_scale")
        if self.exponent_input("lhs"):
            names.append("lhs_exponent")
        if self.rhs_scale is not ScaleMode.NONE:
            names += ["rhs_scale"] * (twice if self.rhs_scale_per_n else 1)
        if self.exponent_input("rhs"):
            names += ["rhs_exponent"] * twice
        if self.rhs_zero:
            names += ["rhs_zero"] * twice
        if self.global_scales:
            names.append("global_scale")
        if self.bias is BiasMode.N:
            names += ["bias[None, :]"] * twice
        elif self.bias is BiasMode.GROUP:
            names += ["bias"] * twice
        return tuple(names)
