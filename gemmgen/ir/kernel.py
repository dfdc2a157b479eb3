"""The `Kernel`: one validated kernel variant, its view per backend
(`for_backend`, the tile LUT a backend uses) and whether the Hopper body
(wgmma, gg_gemm_sm90.cuh) runs it (`wgmma_obstacle`, `uses_wgmma`), with
the facts of that body it is checked against."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gemmgen.ir.dtypes import DType
from gemmgen.ir.loc import NO_LOC, Loc
from gemmgen.ir.parts import (
    NO_SCALE,
    Activation,
    Algorithm,
    Bias,
    Epilogue,
    Layout,
    Mma,
    Op,
    Operand,
    Placement,
    Promotion,
    Scale,
    ScaleMode,
    Tile,
    TileRule,
    fold_scales_of,
)
from gemmgen.ir.targets import Backend, BackendTiles

# The archs with wgmma: it is an sm_90a instruction (PTX ISA), absent on
# sm_90 without the `a` and on sm_100a.
WGMMA_ARCHS = ("sm_90a",)
# The archs with tcgen05 and tensor memory: the datacenter Blackwell chips'
# `a` targets (PTX ISA: tcgen05 needs sm_100a / sm_101a / sm_103a, or the
# `f` family forms; sm_12x has none).
TCGEN05_ARCHS = ("sm_100a", "sm_103a")
# The archs with the block-scaled mma.sync (kind::mxf8f6f4.block_scale): the
# `a` targets of the Blackwell workstation chips (PTX ISA; plain sm_120 /
# sm_121 reject it).
MX_MMA_ARCHS = ("sm_120a", "sm_121a")
# The K blocks of the MX formats (OCP MX: 32) and of NVFP4 (16).
MX_BLOCK_K = 32
NV_BLOCK_K = 16
# K elements of the Hopper body's FP8 K tile (one 128-byte swizzle row).
WGMMA_FP8_BK = 128
# K elements of the weight-only Hopper tile's K tile (a 128-byte row of its
# 16-bit activations).
WGMMA_MIXED_BK = 64
# The weight formats the weight-only Hopper tile widens into 16-bit wgmma
# operands (gg_gemm_sm90.cuh: runs_mixed).
WGMMA_WEIGHTS = frozenset({DType.INT8, DType.INT4, DType.FP4, DType.E4M3, DType.E5M2})

# The defaults of a kernel's bias, epilogue and tile (frozen values).
_NO_BIAS = Bias()
_NO_EPILOGUE = Epilogue()
_SWIGLU_OBSTACLE = "its block-scaled tile runs swiglu_clamped pairs=halves only"
_INTERLEAVED_OBSTACLE = ("its weight-only tile runs swiglu_clamped pairs=halves, not "
                         "pairs=interleaved (a pair would straddle threads)")
_DEFAULT_TILE = Tile(128, 128, 128)


@dataclass(frozen=True, slots=True)
class Kernel:
    name: str
    op: Op
    lhs: Operand
    rhs: Operand | None  # None for quantize
    out: DType
    acc: DType
    lhs_scale: Scale = NO_SCALE
    rhs_scale: Scale = NO_SCALE
    out_scale: Scale = NO_SCALE  # quantize: the scale it produces
    bias: Bias = _NO_BIAS
    epilogue: Epilogue = _NO_EPILOGUE
    tile: Tile = _DEFAULT_TILE
    tile_rules: tuple[TileRule, ...] = ()
    warp_tile: Tile | None = None  # CUDA: m, n per warp (k = tile.k)
    stages: int = 2
    threads: int | None = None  # CUDA threads per block (None: derived)
    algorithm: Algorithm = Algorithm.TILE
    max_m: int | None = None  # gemv_batched: largest M it serves
    # Problem dims fixed by the spec (`dims n=.. k=..`): weights usually have
    # a fixed shape, which lets validation check alignment and silu_mul
    # parity at generation time and launchers reject any other shape.
    static_n: int | None = None
    static_k: int | None = None
    backends: tuple[Backend, ...] = ()
    # The backends with a tile LUT of their own (`tile pallas_tpu ...`); every
    # other backend uses `tile` and `tile_rules`. Read through for_backend().
    backend_tiles: tuple[BackendTiles, ...] = ()
    # for_backend(): the backend this kernel is the view of (None: the kernel
    # as the spec states it), and where its default tile was written when
    # that is a line of its own (None: the kernel's name, see tile_loc).
    view: Backend | None = None
    tile_at: Loc | None = field(default=None, compare=False)
    mma: Mma = Mma.AUTO  # CUDA tile kernels: wgmma, mma.sync or auto
    # Who applies DeepSeek's e8m0 block scales on the sm_100a body: the
    # block-scaled tcgen05.mma (hardware) or the FP32 promotion (software).
    promotion: Promotion = Promotion.AUTO
    # The masked grouped layout (op grouped, `lhs [g, m, k]`): each group's
    # rows padded to a capacity m, `masked_m` [g] the valid rows of each.
    masked: bool = False
    # The TPU generations the spec's pallas_tpu target declares (first: the
    # one a `tpu=` condition sees off a TPU, e.g. in interpret mode); ()
    # without a pallas_tpu target.
    tpus: tuple[str, ...] = ()
    # Fields that were swept to produce this variant, for `gemmgen list`.
    variant_of: str | None = None
    loc: Loc = field(default=NO_LOC, compare=False)
    field_locs: tuple[tuple[str, Loc], ...] = field(default=(), compare=False)  # see `at`

    def __post_init__(self) -> None:
        # The validator reports a missing or stray rhs at its position; an IR
        # built any other way must hold the same invariant.
        if (self.op is Op.QUANTIZE) != (self.rhs is None):
            has = "has no rhs" if self.rhs is None else "has an rhs"
            raise ValueError(f"kernel {self.name}: a {self.op.value} kernel {has}")
        if self.masked and self.op is not Op.GROUPED:
            raise ValueError(f"kernel {self.name}: the masked layout is op 'grouped' only")

    @property
    def rhs_operand(self) -> Operand:
        """The rhs of a matmul (every op but quantize has one: __post_init__)."""
        if self.rhs is None:
            raise TypeError(f"kernel {self.name}: a {self.op.value} kernel has no rhs")
        return self.rhs

    @property
    def grouped(self) -> bool:
        return self.op in (Op.GROUPED, Op.TGMM)

    def own_tiles(self, backend: Backend) -> BackendTiles | None:
        """The tile LUT `backend` has of its own, if the spec gives it one."""
        return next((t for t in self.backend_tiles if t.backend is backend), None)

    def for_backend(self, backend: Backend) -> Kernel:
        """The kernel as `backend` sees it: `tile` and `tile_rules` are that
        backend's own LUT when the spec gives it one, else the unqualified
        ones. Backends, their checks and the verification cases of a backend
        read this view. A view is its own view; asking a view for another
        backend's is a bug (its tile is no longer the unqualified one)."""
        if self.view is not None:
            if self.view is not backend:
                raise ValueError(f"kernel {self.name}: the {self.view.value} view asked for "
                                 f"the {backend.value} view")
            return self
        own = self.own_tiles(backend)
        if own is None:
            return replace(self, view=backend)
        return replace(self, tile=own.tile, tile_rules=own.tile_rules, tile_at=own.loc,
                       view=backend)

    def at(self, name: str) -> Loc:
        """Where field `name` is written, else the kernel's name (checks report there)."""
        return next((loc for f, loc in self.field_locs if f == name), self.loc)

    @property
    def tile_loc(self) -> Loc:
        """Where generated code's spec references place the default tile: a backend's
        own `tile BACKEND` line, else the kernel's name (diagnostics: `lut`)."""
        return self.tile_at if self.tile_at is not None else self.loc

    def tile_for(self, m: int, n: int, k: int, g: int | None = None,
                 tpu: str | None = None) -> Tile:
        """The tile LUT: the first rule whose conditions hold, else `tile`.
        `g`: the problem's groups (len(group_sizes); the masked layout's
        lhs.shape[0]), needed by rules on g or m/g; `tpu`: the generation a
        `tpu=` condition tests (default: the first declared, what a module
        off a TPU sees)."""
        return self.tile_rule_for(m, n, k, g, tpu)[1]

    def tile_rule_for(self, m: int, n: int, k: int, g: int | None = None,
                      tpu: str | None = None) -> tuple[int, Tile]:
        """(index of the LUT entry picked: a rule, or len(tile_rules) for
        the default tile; its tile), as `tile_for`."""
        gen = tpu if tpu is not None else (self.tpus[0] if self.tpus else "v5e")
        for i, rule in enumerate(self.tile_rules):
            if all(c.test(m, n, k, g, gen, self.masked) for c in rule.conds):
                return i, rule.tile
        return len(self.tile_rules), self.tile

    def lut(self) -> list[tuple[Tile, Loc, str]]:
        """The tiles of this view's LUT with their positions and what to call
        them in a diagnostic: "tile" and "tile_rule", or "tile BACKEND" and
        "tile_rule BACKEND" when the backend has a LUT of its own."""
        own = f" {self.view.value}" if self.view is not None and self.tile_at is not None else ""
        at = self.tile_at if self.tile_at is not None else self.at("tile")
        return [(self.tile, at, f"tile{own}")] + [
            (r.tile, r.loc, f"tile_rule{own}") for r in self.tile_rules]

    def several_scale_blocks_per_k_tile(self) -> list[tuple[Loc, str]]:
        """Where a tile of this view's LUT holds several K blocks of a scale
        that allows it (`Scale.blocks_in_k_tile`, tile k > block k), as
        (position, phrase "tile k=256 holds 8 lhs_scale blocks of k=32")."""
        out = []
        for tile, loc, what in self.lut():
            for side in ("lhs", "rhs"):
                scale: Scale = getattr(self, f"{side}_scale")
                if scale.blocks_in_k_tile and scale.block_k and tile.k > scale.block_k:
                    held = f"{tile.k // scale.block_k} {side}_scale blocks of k={scale.block_k}"
                    out.append((loc, f"{what} k={tile.k} holds {held}"))
        return out

    def block_scale_format(self) -> tuple[Loc, str] | None:
        """The first MX / NV block scale of the kernel (`Scale.per_mma_block`:
        a ue4m3 scale or the atom128x4 layout), as its position and a phrase
        for a backend's "not emitted yet" diagnostic; None without one."""
        for side in ("lhs", "rhs"):
            scale = getattr(self, f"{side}_scale")
            if scale.per_mma_block:
                what = (f"ue4m3 block scales ({side}_scale, NVFP4)" if scale.dtype is DType.UE4M3
                        else f"{side}_scale layout=atom128x4 (the 128 x 4 scale atom)")
                return scale.loc, what
        return None

    def wgmma_obstacle(self) -> str | None:
        """Why the Hopper body (gg_gemm_sm90.cuh) cannot run this kernel,
        as a phrase for a diagnostic; None when it can (on sm_90a).

        The body's `qualifies<C>()` in C++ states the same conditions on a
        Config: lhs and rhs of one tensor-core type as stored (bf16, f16,
        e4m3, e5m2; FP8 rhs K-major, [n, k]); scales the epilogue applies
        (per tensor, per token, per channel) and, for FP8, the block scales
        of the FP32 promotion (lhs per_token_group, rhs block) with K blocks
        of whole 128-element K tiles; no e8m0 folding. The
        rest follow from what it is: a tile GEMM for dense and grouped, fed
        by TMA, whose global strides must be multiples of 16 bytes.
        """
        return self._tma_tile_obstacle("wgmma")

    def tcgen05_obstacle(self) -> str | None:
        """Why the sm_100a body (TMA + tcgen05.mma, gg_gemm_sm100.cuh)
        cannot run this kernel, as a phrase; None when it can (on sm_100a).
        The same kernels as the Hopper body's (`wgmma_obstacle`; the C++
        `qualifies<C>()` of gg::gemm::sm100 says the same; the weight-only
        ones, `wgmma_mixed`, on gg_gemm_sm100_mixed.cuh's tile, whose
        `qualifies` states `_mixed_obstacle`); and the MX
        kernels of the block-scaled body (`mx_mma_obstacle` is None) whose
        format it runs on the block-scaled tcgen05.mma (`tcgen05_block_scaled`)."""
        if self.mx_mma_obstacle() is None:
            if self.epilogue.interleaved:
                return _SWIGLU_OBSTACLE
            return self._tcgen05_block_scaled_obstacle()
        return self._tma_tile_obstacle("tcgen05")

    @property
    def tcgen05_block_scaled(self) -> bool:
        """Whether the sm_100a body would run this kernel on the block-scaled
        tcgen05.mma (the hardware applying the scales): an MX kernel of
        the block-scaled body (`mx_mma_obstacle` is None), or DeepSeek's
        e8m0 block scales promoted in hardware (`tcgen05_deepseek_mma`)."""
        return self.mx_mma_obstacle() is None or self.tcgen05_deepseek_mma

    @property
    def tcgen05_deepseek_mma(self) -> bool:
        """Whether the sm_100a body applies this kernel's DeepSeek block
        scales (e8m0, lhs per_token_group, rhs block) with the block-scaled
        tcgen05.mma (kind::mxf8f6f4, scale_vec::1X: each scale repeated over
        its 32-wide K blocks and its rows) instead of the FP32 promotion:
        `promotion auto` or `hardware` and a kernel that qualifies
        (`hardware_promotion_obstacle` is None)."""
        return (self.promotion is not Promotion.SOFTWARE
                and self.hardware_promotion_obstacle() is None)

    def hardware_promotion_obstacle(self) -> str | None:
        """Why the block-scaled tcgen05.mma cannot apply this kernel's block
        scales (`promotion hardware`), as a phrase; None when it can, on the
        sm_100a body (C++: gg::gemm::sm100::runs_deepseek_mma). It takes
        DeepSeek's FP8 recipe with power-of-two scales: e4m3 or e5m2 on both
        sides, lhs `per_token_group` and rhs `block`, both e8m0, on a kernel
        the sm_100a body runs with the FP32 promotion."""
        if self.rhs is None:
            return f"op '{self.op.value}' has no block scales to promote"
        if self.mx_mma_obstacle() is None:
            return ("it is an MX / NV kernel, whose block scales the block-scaled MMAs apply "
                    "wherever one runs ('mma mma_sync' promotes them in software)")
        if self.epilogue.activation is Activation.SWIGLU_CLAMPED:
            return "it does not run swiglu_clamped yet (the FP32 promotion does: 'software')"
        lhs_t, rhs_t = self.lhs.dtype, self.rhs_operand.dtype
        if not lhs_t.is_fp8 or rhs_t is not lhs_t:
            return (f"the block-scaled tcgen05.mma promotes FP8 (e4m3 or e5m2 on both sides), "
                    f"not lhs '{lhs_t.value}' x rhs '{rhs_t.value}'")
        ls, rs = self.lhs_scale, self.rhs_scale
        if not (ls.mode is ScaleMode.TOKEN_GROUP and rs.mode is ScaleMode.BLOCK):
            return ("the block-scaled tcgen05.mma applies DeepSeek's block scales on both "
                    "sides: lhs_scale 'per_token_group' and rhs_scale 'block'")
        for side, scale in (("lhs_scale", ls), ("rhs_scale", rs)):
            if scale.dtype is not DType.E8M0:
                return (f"the block-scaled tcgen05.mma reads e8m0 scales (powers of two), but "
                        f"{side} is '{scale.dtype.value}'")
        why = self._tma_tile_obstacle("tcgen05")
        if why is not None:
            return f"the sm_100a body does not run it: {why}"
        return None

    def _tcgen05_block_scaled_obstacle(self) -> str | None:
        """tcgen05_obstacle of an MX kernel (C++: gg::gemm::sm100::
        runs_block_scaled): MXFP8 (e4m3 or e5m2 on both sides, rhs [n, k] or
        [k, n]: B MN-major, but silu_mul), MXFP4 and NVFP4 (fp4 on both sides)
        and W4A8 (e4m3 x fp4) with rhs [n, k], dense, grouped or masked, TMA
        rows of 16 bytes."""
        lhs_t, rhs = self.lhs.dtype, self.rhs_operand
        # mx_mma_obstacle leaves one type on both sides, or W4A8 (e4m3 x
        # fp4 [n, k]), which the body runs too; fp4 weights are [n, k] there.
        per_row = 16 * 8 // lhs_t.bits
        if rhs.layout is Layout.KN:
            # MXFP8 [k, n] (issue 30): B MN-major, in boxes of 128 columns.
            if self.epilogue.activation is Activation.SILU_MUL:
                return ("its FP8 rhs [k, n] boxes are 128 columns, so a silu_mul tile needs 256 "
                        "of them, but a block-scaled tile holds at most 192 (two accumulators "
                        "and the scale columns in TMEM's 512)")
            if self.static_n is not None and self.static_n % per_row:
                return (f"its TMA rows of rhs [k, n] must be multiples of 16 bytes "
                        f"(n % {per_row} == 0), but dims n={self.static_n}")
        if self.static_k is not None and self.static_k % per_row:
            return (f"its TMA rows must be multiples of 16 bytes (k % {per_row} == 0), but "
                    f"dims k={self.static_k}")
        return None

    def _tma_tile_obstacle(self, mma: str) -> str | None:
        """wgmma_obstacle and tcgen05_obstacle: `mma` names the instruction
        (both bodies have a weight-only tile, `_mixed_obstacle`)."""
        if self.op not in (Op.DENSE, Op.GROUPED):
            return f"it runs ops 'dense' and 'grouped', not '{self.op.value}'"
        if self.algorithm is not Algorithm.TILE:
            return f"it is a tile GEMM, not algorithm '{self.algorithm.value}'"
        rhs = self.rhs_operand
        lhs_t, rhs_t = self.lhs.dtype, rhs.dtype
        sixteen = lhs_t in (DType.BF16, DType.F16)
        if sixteen and rhs_t in WGMMA_WEIGHTS:
            if self.epilogue.interleaved:
                return _INTERLEAVED_OBSTACLE
            return self._mixed_obstacle()
        if lhs_t not in (DType.BF16, DType.F16, DType.E4M3, DType.E5M2) or rhs_t is not lhs_t:
            return (f"it takes lhs and rhs of one tensor-core type (bf16, f16, e4m3 or e5m2) "
                    f"or bf16 / f16 lhs with int8, int4, fp4, e4m3 or e5m2 weights, not lhs "
                    f"'{lhs_t.value}' x rhs '{rhs_t.value}'")
        if not sixteen and rhs.layout is not Layout.NK and mma == "wgmma":
            # tcgen05 transposes FP8 operands too (its instruction
            # descriptor's transpose bits hold for .kind::f8f6f4).
            return ("wgmma reads FP8 operands K-major only, so rhs must be [n, k] "
                    "([g, n, k] grouped), not [k, n]")
        scales = (("lhs_scale", self.lhs_scale, ScaleMode.TOKEN_GROUP),
                  ("rhs_scale", self.rhs_scale, ScaleMode.BLOCK))
        for side, scale, promoted in scales:
            if scale.placement is not Placement.MAINLOOP or not scale.enabled:
                continue
            if sixteen:
                return (f"it applies per-K-block scales to FP8 operands only, and {side} "
                        f"is '{scale.mode.value}' on {lhs_t.value}")
            if scale.mode is not promoted:
                return (f"its per-K-block scales are lhs per_token_group and rhs block, "
                        f"and {side} is '{scale.mode.value}'")
            if scale.block_k % WGMMA_FP8_BK:
                return (f"its K tile is {WGMMA_FP8_BK} FP8 elements, so a scale's K block "
                        f"must be a multiple of it, but {side} has k={scale.block_k}")
            if scale.mode is ScaleMode.BLOCK and scale.block_n % 64:
                return (f"its N tile (64 or 128 for FP8) must lie in one scale block, so "
                        f"rhs_scale's n must be a multiple of 64, not {scale.block_n}")
        if fold_scales_of(self):
            return ("it does not fold an epilogue scale into the promotion (an e8m0 scale "
                    "beside a per-K-block one: the mma.sync body's kFoldScales)")
        blocks = any(s.enabled and s.placement is Placement.MAINLOOP
                     for s in (self.lhs_scale, self.rhs_scale))
        if not sixteen and rhs.layout is Layout.KN and blocks:
            # tcgen05 only: FP8 rhs [k, n] comes in boxes of 128 columns, and
            # a promoted tile (its sums in registers) holds at most 128.
            if self.epilogue.activation.paired:
                return ("its FP8 rhs [k, n] boxes are 128 columns, so a gate-up tile needs 256 "
                        "of them, but a tile with per-K-block scales holds at most 128")
            if self.rhs_scale.mode is ScaleMode.BLOCK and self.rhs_scale.block_n % 128:
                return ("its FP8 rhs [k, n] boxes are 128 columns, so rhs_scale's n must be a "
                        f"multiple of 128, not {self.rhs_scale.block_n}")
        per_row = 16 * 8 // lhs_t.bits
        if self.static_k is not None and self.static_k % per_row:
            return (f"its TMA rows must be multiples of 16 bytes (k % {per_row} == 0), but "
                    f"dims k={self.static_k}")
        if rhs.layout is Layout.KN and self.static_n is not None and self.static_n % per_row:
            return (f"its TMA rows of rhs [k, n] must be multiples of 16 bytes "
                    f"(n % {per_row} == 0), but dims n={self.static_n}")
        return None

    @property
    def wgmma_mixed(self) -> bool:
        """Whether the Hopper body would run this kernel as a weight-only
        tile (gg_gemm_sm90_mixed.cuh): 16-bit lhs times narrower weights
        widened in registers, the operands swapped; the sm_100a body's
        weight-only tile (gg_gemm_sm100_mixed.cuh, widened in shared memory)
        takes the same kernels."""
        return (self.lhs.dtype in (DType.BF16, DType.F16)
                and self.rhs_operand.dtype in WGMMA_WEIGHTS)

    def _mixed_obstacle(self) -> str | None:
        """wgmma_obstacle and tcgen05_obstacle for 16-bit lhs times 8- or
        4-bit weights (C++: runs_mixed and qualifies in gg_gemm_sm90.cuh,
        qualifies in gg_gemm_sm100_mixed.cuh)."""
        rhs = self.rhs_operand
        if rhs.layout is not Layout.NK:
            return ("its weight-only tile reads the weights [n, k] ([g, n, k] grouped), "
                    "not [k, n]")
        if self.lhs_scale.enabled and self.lhs_scale.placement is Placement.MAINLOOP:
            return (f"its weight-only tile applies lhs scales in the epilogue only, and "
                    f"lhs_scale is '{self.lhs_scale.mode.value}'")
        rs = self.rhs_scale
        if rs.enabled and rs.placement is Placement.MAINLOOP and rs.block_k % WGMMA_MIXED_BK:
            return (f"its K tile is {WGMMA_MIXED_BK} elements, so a scale's K block must be a "
                    f"multiple of it, but rhs_scale has k={rs.block_k}")
        if fold_scales_of(self):
            return ("it does not fold an epilogue scale into the promotion (an e8m0 scale "
                    "beside a per-K-block one: the mma.sync body's kFoldScales)")
        # TMA rows of 16 bytes: lhs k % 8, the weights' k * bits / 8 % 16.
        per_row = 16 * 8 // rhs.dtype.bits
        if self.static_k is not None and self.static_k % per_row:
            return (f"its TMA rows must be multiples of 16 bytes (k % {per_row} == 0 for "
                    f"{rhs.dtype.value} weights), but dims k={self.static_k}")
        return None

    def uses_wgmma(self, arch: str) -> bool:
        """Whether the CUDA kernel for `arch` is the Hopper (wgmma) body
        (the backend asks for each arch of the spec's cuda target).

        `mma_sync`: never. `wgmma`: on sm_90a (validation rejects any other
        arch and any kernel that does not qualify). `auto`: on sm_90a when
        the kernel qualifies (`wgmma_obstacle()` is None); every other arch,
        and a kernel that does not qualify, gets the mma.sync body.
        """
        if Backend.CUDA not in self.backends or self.mma not in (Mma.AUTO, Mma.WGMMA):
            return False
        return arch in WGMMA_ARCHS and self.wgmma_obstacle() is None

    def uses_tcgen05(self, arch: str) -> bool:
        """Whether the CUDA kernel for `arch` is the sm_100a body (TMA +
        tcgen05.mma, gg_gemm_sm100.cuh): `auto` or `tcgen05`, a
        TCGEN05_ARCHS arch and a kernel that qualifies (`tcgen05_obstacle()`
        is None); validation rejects `tcgen05` elsewhere."""
        if Backend.CUDA not in self.backends or self.mma not in (Mma.AUTO, Mma.TCGEN05):
            return False
        return arch in TCGEN05_ARCHS and self.tcgen05_obstacle() is None

    def tcgen05_multicast_obstacle(self) -> str | None:
        """Why this kernel's LUT entries cannot ask for `cluster_n` > 1 (CTA
        pairs of the sm_100a 2-CTA tile sharing A by TMA multicast); None
        when they can: the sm_100a body runs it (`tcgen05_obstacle`), every
        kind of it on the pair (C++: check_tile_sm100's kClusterN clause in
        gg_gemm_sm100.cuh, check_tile_mixed's in gg_gemm_sm100_mixed.cuh)."""
        return self.tcgen05_obstacle()

    def mx_mma_obstacle(self) -> str | None:
        """Why the block-scaled mma.sync body (sm_120a / sm_121a,
        gg_primitives_sm120.cuh) cannot run this kernel, as a phrase; None
        when it can. It is the tile GEMM (dense, grouped, masked) whose
        operands are one type as stored, with one format's block scales on
        both sides (lhs `per_token_group`, rhs `block n=1`, either layout):
        MXFP8 (e4m3 or e5m2, e8m0 scales of k=32), MXFP4 (fp4, e8m0 of
        k=32) or NVFP4 (fp4, ue4m3 of k=16), or W4A8 (e4m3 lhs x fp4 rhs,
        MXFP8's scales); fp4 rhs [n, k] (the C++ kMxSupported states the
        same)."""
        if self.op not in (Op.DENSE, Op.GROUPED):
            return f"it runs ops 'dense' and 'grouped', not '{self.op.value}'"
        if self.algorithm is not Algorithm.TILE:
            return f"it is a tile GEMM, not algorithm '{self.algorithm.value}'"
        lhs_t, rhs_t = self.lhs.dtype, self.rhs_operand.dtype
        w4a8 = lhs_t is DType.E4M3 and rhs_t is DType.FP4
        if not w4a8 and (not (lhs_t.is_fp8 or lhs_t is DType.FP4) or rhs_t is not lhs_t):
            return (f"it multiplies e4m3, e5m2 or fp4 on both sides as stored, or e4m3 x fp4 "
                    f"(W4A8), not lhs '{lhs_t.value}' x rhs '{rhs_t.value}'")
        if rhs_t is DType.FP4 and self.rhs_operand.layout is not Layout.NK:
            return "it reads fp4 weights K-major: rhs [n, k] or [g, n, k]"
        ls, rs = self.lhs_scale, self.rhs_scale
        fp4 = lhs_t is DType.FP4
        formats = [(DType.E8M0, MX_BLOCK_K)] + ([(DType.UE4M3, NV_BLOCK_K)] if fp4 else [])
        lhs_ok = ls.mode is ScaleMode.TOKEN_GROUP and (ls.dtype, ls.block_k) in formats
        rhs_ok = (rs.mode is ScaleMode.BLOCK and rs.block_n == 1
                  and (rs.dtype, rs.block_k) == (ls.dtype, ls.block_k))
        if not (lhs_ok and rhs_ok):
            if w4a8:
                return ("its W4A8 scales are MX's on both sides: lhs 'per_token_group k=32 "
                        "e8m0' and rhs 'block n=1 k=32 e8m0'")
            if fp4:
                return ("its scales are MXFP4's ('e8m0', k=32) or NVFP4's ('ue4m3', k=16), "
                        "the same on both sides: lhs 'per_token_group', rhs 'block n=1'")
            return ("its scales are MXFP8's on both sides: lhs 'per_token_group k=32 e8m0' "
                    "and rhs 'block n=1 k=32 e8m0'")
        return None

    def uses_mx_mma(self, arch: str) -> bool:
        """Whether the CUDA kernel for `arch` gets the block-scaled mma.sync
        body: an MX_MMA_ARCHS arch, a kernel that qualifies
        (`mx_mma_obstacle()` is None), and `mma auto` (`mma_sync` keeps the
        portable mma.sync body, which promotes the MX scales in software)."""
        if Backend.CUDA not in self.backends or self.mma is not Mma.AUTO:
            return False
        return arch in MX_MMA_ARCHS and self.mx_mma_obstacle() is None

    @property
    def out_n_divisor(self) -> int:
        """A paired activation (silu_mul, swiglu_clamped) halves n: out has n/2 columns."""
        return 2 if self.epilogue.activation.paired else 1
