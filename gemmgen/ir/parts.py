"""The parts a kernel is made of: its op and rhs layout, scales (modes,
placement and their runtime shapes, `scale_shape`), bias, epilogue,
operands, tiles and the conditions of a tile LUT, the algorithm and the
tensor-core instruction (`Mma`) of a CUDA tile kernel."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace

from gemmgen.ir.dtypes import DType
from gemmgen.ir.loc import NO_LOC, Loc


class Op(enum.Enum):
    DENSE = "dense"
    GROUPED = "grouped"
    TGMM = "tgmm"
    QUANTIZE = "quantize"


class Layout(enum.Enum):
    """Layout of B (rhs): which of k / n is the contiguous (last) dim."""

    KN = "kn"  # [k, n] / [g, k, n]
    NK = "nk"  # [n, k] / [g, n, k]: K-contiguous, "transposed"


class ScaleMode(enum.Enum):
    """Where a scale factor lives. Shapes for dense/grouped ops.

    `lhs_scale` modes apply to A, `rhs_scale` modes to B; validate checks
    that a mode is used on the operand it belongs to.
    """

    NONE = "none"
    TENSOR = "per_tensor"  # lhs or rhs: [] (grouped rhs: [g])
    TOKEN = "per_token"  # lhs: [m]
    TOKEN_GROUP = "per_token_group"  # lhs: [m, ceil(k/G)]   (1 x G, DeepSeek)
    CHANNEL = "per_channel"  # rhs: [n] (grouped: [g, n])
    BLOCK = "block"  # rhs: [ceil(n/bn), ceil(k/bk)] (grouped: [g, ...])
    KBLOCK = "kblock"  # rhs, megablox rhs_scale: [g, ceil(k/bk), 1, n]


# Which scale modes apply where: the validator accepts, and the reference
# defines, exactly these.
LHS_SCALE_MODES = (ScaleMode.NONE, ScaleMode.TENSOR, ScaleMode.TOKEN, ScaleMode.TOKEN_GROUP)
RHS_SCALE_MODES = (ScaleMode.NONE, ScaleMode.TENSOR, ScaleMode.CHANNEL, ScaleMode.BLOCK,
                   ScaleMode.KBLOCK)
QUANTIZE_SCALE_MODES = (ScaleMode.TENSOR, ScaleMode.TOKEN, ScaleMode.TOKEN_GROUP)


class ScaleLayout(enum.Enum):
    """How a per-row K-blocked scale tensor lies in memory (docs/spec.md,
    "Scale layouts"): `rows` row-major `[rows, ceil(k/BK)]`; `atom128x4`
    CUTLASS's Sm1xxBlockScaledConfig atom (128 rows x 4 K blocks in 512
    bytes, rows padded to 128 and K blocks to 4)."""

    ROWS = "rows"
    ATOM128X4 = "atom128x4"


class ScaleRounding(enum.Enum):
    """How `op quantize` rounds an e8m0 scale to a power of two (docs/spec.md,
    "Quantize"): `up`, DeepGEMM's 2**ceil(log2(amax / max)), so nothing
    saturates; `floor`, OCP MX v1.0's 2**(floor(log2(amax)) - emax_elem)."""

    UP = "up"
    FLOOR = "floor"


# The atom of ScaleLayout.ATOM128X4: 128 rows by 4 K blocks, 512 bytes.
ATOM_ROWS, ATOM_KBLOCKS = 128, 4


class Placement(enum.Enum):
    """Where the scale is applied (docs/spec.md, "Scales")."""

    EPILOGUE = "epilogue"  # once, on the f32/i32 accumulator
    MAINLOOP = "mainloop"  # per K block: partial products promoted to f32


@dataclass(frozen=True, slots=True)
class Scale:
    mode: ScaleMode
    dtype: DType = DType.F32
    block_m: int = 1  # rows of A / of the output sharing one scale
    block_n: int = 1  # columns of B sharing one scale
    block_k: int = 0  # K extent of one scale (0: all of K)
    layout: ScaleLayout = ScaleLayout.ROWS  # per_token_group / block n=1 only
    rounding: ScaleRounding = ScaleRounding.UP  # e8m0 out_scale of op quantize only
    # NVFP4's second-level scale (`global=f32`): one f32 per tensor (per
    # group of a grouped or masked kernel) multiplying every block scale.
    global_scale: bool = False
    # Asymmetric weights (`zero=uint4`, rhs only): one integer zero point z
    # per scale, stored like the weights (packed two per byte along the
    # scale's last dim); an element is (q - z) * s (docs/semantics.md,
    # "Zero points"). None: symmetric, q * s.
    zero: DType | None = None
    loc: Loc = field(default=NO_LOC, compare=False)
    zero_loc: Loc = field(default=NO_LOC, compare=False)

    @property
    def placement(self) -> Placement:
        if self.mode in (ScaleMode.TOKEN_GROUP, ScaleMode.BLOCK, ScaleMode.KBLOCK):
            return Placement.MAINLOOP
        return Placement.EPILOGUE

    @property
    def enabled(self) -> bool:
        return self.mode is not ScaleMode.NONE

    @property
    def per_mma_block(self) -> bool:
        """An MX / NV block scale (a ue4m3 byte, or any scale in the
        atom128x4 layout): the block-scaled MMAs apply it per K block inside
        a K tile, so a K tile holds whole scale blocks (several of them)
        instead of dividing one (docs/spec.md, "MX and NV block scales")."""
        return self.dtype is DType.UE4M3 or self.layout is ScaleLayout.ATOM128X4

    @property
    def per_row_blocks(self) -> bool:
        """One scale per K block of each row of its operand: lhs
        `per_token_group`, rhs `block n=1` (the form of the MX / NV scales)."""
        return self.mode is ScaleMode.TOKEN_GROUP or (
            self.mode is ScaleMode.BLOCK and self.block_n == 1)

    @property
    def blocks_in_k_tile(self) -> bool:
        """A K tile may hold several of its blocks (docs/spec.md, "MX and NV
        block scales"): an MX / NV block scale (`per_mma_block`), or an e8m0
        scale per K block of one row (MXFP8 / MXFP4 in layout=rows), which a
        backend may apply per block inside a K tile or once per K tile."""
        return self.per_mma_block or (self.dtype is DType.E8M0 and self.per_row_blocks)

    def tile_k_problem(self, tile_k: int, side: str, *, several: bool = False) -> str | None:
        """Why a K tile of `tile_k` cannot apply this scale's K blocks, as
        the words after "tile k=..." (None: it can); `side` names the scale
        ("lhs_scale"). A main-loop scale is applied per K block: a K tile
        divides a block (one scale per K tile), or, where
        `blocks_in_k_tile` or the backend loops over the blocks of a K
        tile (`several`: pallas_tpu, whose tiles are 512 to 1024 deep), holds
        whole blocks (several per K tile); an MX / NV block scale
        (`per_mma_block`) always holds whole blocks."""
        bk = self.block_k
        if self.placement is not Placement.MAINLOOP or not bk:
            return None
        holds, divides = tile_k % bk == 0, bk % tile_k == 0
        if self.per_mma_block:
            return None if holds else (
                f"must hold whole {side} blocks of k={bk}: the block-scaled MMA applies one "
                "scale per block inside a K tile")
        if self.blocks_in_k_tile or several:
            return None if holds or divides else (
                f"must divide the {side} blocks of k={bk} (one scale per K tile) or hold "
                "whole ones (one scale per block inside the K tile)")
        return None if divides else (
            f"cannot tile the {side} blocks of k={bk}: a K tile must divide the scale block "
            "so each partial product is promoted with one scale")


NO_SCALE = Scale(ScaleMode.NONE)


def quantize_rule(out: DType, scale: Scale) -> str | None:
    """How op quantize computes the scale `scale` for values of type `out`
    (docs/semantics.md, "quantize"): "f32" (FP8, rounded to nearest),
    "e8m0_up" (DeepGEMM, rounded up), "e8m0_floor" (OCP MX) or "ue4m3"
    (NVFP4: packed fp4, k=16); None for a pair the validator refuses."""
    fp4 = out is DType.FP4
    match scale.dtype:
        case DType.F32 if not fp4:
            return "f32"
        case DType.E8M0:
            return "e8m0_floor" if scale.rounding is ScaleRounding.FLOOR else "e8m0_up"
        case DType.UE4M3 if fp4 and scale.block_k == 16:
            return "ue4m3"
    return None


class BiasMode(enum.Enum):
    NONE = "none"
    N = "n"  # [n]
    GROUP = "group"  # [g, 1, n] (megablox rhs_bias)


@dataclass(frozen=True, slots=True)
class Bias:
    mode: BiasMode = BiasMode.NONE
    dtype: DType = DType.F32
    loc: Loc = field(default=NO_LOC, compare=False)


class Activation(enum.Enum):
    NONE = "none"
    RELU = "relu"
    SILU = "silu"
    GELU = "gelu"  # tanh approximation
    SILU_MUL = "silu_mul"  # out[:, j] = silu(x[:, j]) * x[:, j + n/2]
    # GPT-OSS's clamped gated activation (docs/semantics.md, "Epilogue"):
    # gate = min(gate, limit), up = clip(up, -limit, limit),
    # out = gate * sigmoid(alpha_gate * gate) * (up + 1); gate and up pair
    # as `Epilogue.pairs` says.
    SWIGLU_CLAMPED = "swiglu_clamped"

    @property
    def paired(self) -> bool:
        """A gated activation: two accumulator columns make one output column."""
        return self in (Activation.SILU_MUL, Activation.SWIGLU_CLAMPED)


class Pairs(enum.Enum):
    """Where a paired activation finds the up column of gate column j."""

    HALVES = "halves"  # gate = x[:, j], up = x[:, j + n/2]
    INTERLEAVED = "interleaved"  # gate = x[:, 2j], up = x[:, 2j + 1]


# GPT-OSS's constants, swiglu_clamped's defaults.
SWIGLU_ALPHA_GATE = 1.702
SWIGLU_LIMIT = 7.0


@dataclass(frozen=True, slots=True)
class Epilogue:
    """y = activation(alpha * acc_scaled + bias), then the output cast.

    alpha_gate, limit: swiglu_clamped's sigmoid scale and clamp (ignored by
    the other activations); pairs: how a paired activation pairs columns
    (silu_mul: halves only)."""

    activation: Activation = Activation.NONE
    alpha: float | None = None
    loc: Loc = field(default=NO_LOC, compare=False)
    alpha_gate: float = SWIGLU_ALPHA_GATE
    limit: float = SWIGLU_LIMIT
    pairs: Pairs = Pairs.HALVES

    @property
    def interleaved(self) -> bool:
        """A paired activation whose gate and up columns alternate."""
        return self.activation.paired and self.pairs is Pairs.INTERLEAVED

    @property
    def halves(self) -> bool:
        """A paired activation whose up columns are the second half of n."""
        return self.activation.paired and self.pairs is Pairs.HALVES


@dataclass(frozen=True, slots=True)
class Operand:
    dtype: DType
    packed: bool = False  # sub-byte: two elements per uint8
    layout: Layout = Layout.KN  # meaningful for rhs only
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True, slots=True)
class Tile:
    m: int
    n: int
    k: int
    # CUDA sm_100a: CTA pairs of the 2-CTA tile (m = 256) per thread-block
    # cluster, along N, sharing A by TMA multicast (`cluster_n=`, CUTLASS's
    # cluster shape along N); 1 is no multicast. `cluster_at`: where it was
    # written (its value), for diagnostics.
    cluster_n: int = 1
    cluster_at: Loc = field(default=NO_LOC, compare=False)

    def __str__(self) -> str:
        cluster = f" cluster_n={self.cluster_n}" if self.cluster_n != 1 else ""
        return f"{self.m}x{self.n}x{self.k}{cluster}"


class Cmp(enum.Enum):
    LT = "<"
    LE = "<="
    EQ = "=="
    GE = ">="
    GT = ">"

    def test(self, a: int, b: int) -> bool:
        match self:
            case Cmp.LT:
                return a < b
            case Cmp.LE:
                return a <= b
            case Cmp.EQ:
                return a == b
            case Cmp.GE:
                return a >= b
            case Cmp.GT:
                return a > b


# What a tile rule's condition may test (docs/spec.md, "Tile LUTs"): the
# problem dims; on grouped kernels the groups `g` and the rows per group
# `m/g`; on pallas_tpu the TPU generation the module runs on (`tpu=v6e`).
COND_DIMS = ("m", "n", "k")
GROUP_COND_DIMS = ("g", "m/g")
TPU_COND = "tpu"


def rows_per_group(m: int, g: int, masked: bool) -> int | None:
    """What `m/g` means: m // g (the rows of lhs over the groups), or on the
    masked layout m itself (the LUT's m is already a group's capacity);
    None without groups (g = 0), where no condition on m/g holds."""
    if masked:
        return m
    return m // g if g > 0 else None


@dataclass(frozen=True, slots=True)
class Cond:
    """`dim cmp value`: dim one of m, n, k, g, m/g (value an int), or
    `tpu=GEN` (dim "tpu", cmp ==, value the generation's name)."""

    dim: str
    cmp: Cmp
    value: int | str

    def test(self, m: int, n: int, k: int, g: int | None = None, tpu: str | None = None,
             masked: bool = False) -> bool:
        """Whether the condition holds at this problem. `g` (the groups of
        the problem) is needed by a condition on g or m/g, `tpu` by one on
        the generation; asking without them is a bug (ValueError)."""
        if self.dim == TPU_COND:
            if tpu is None:
                raise ValueError(f"the condition '{self}' needs the TPU generation")
            return tpu == self.value
        if self.dim in GROUP_COND_DIMS:
            if g is None:
                raise ValueError(f"the condition '{self}' needs the group count g")
            got = g if self.dim == "g" else rows_per_group(m, g, masked)
            if got is None:
                return False
        else:
            got = {"m": m, "n": n, "k": k}[self.dim]
        assert isinstance(self.value, int)
        return self.cmp.test(got, self.value)

    @property
    def on_groups(self) -> bool:
        return self.dim in GROUP_COND_DIMS

    def __str__(self) -> str:
        if self.dim == TPU_COND:
            return f"tpu={self.value}"
        return f"{self.dim} {self.cmp.value} {self.value}"


@dataclass(frozen=True, slots=True)
class TileRule:
    """One row of a tile LUT: when all conds hold, use `tile`. `tuned`: the
    device of the `tuned` block the row comes from ("" for the kernel's
    own `tile_rule` lines)."""

    conds: tuple[Cond, ...]
    tile: Tile
    loc: Loc = field(default=NO_LOC, compare=False)
    tuned: str = ""

    @property
    def on_groups(self) -> bool:
        return any(c.on_groups for c in self.conds)

    @property
    def on_tpu(self) -> bool:
        return any(c.dim == TPU_COND for c in self.conds)


class Algorithm(enum.Enum):
    TILE = "tile"  # block-tiled GEMM (tensor cores on CUDA)
    GEMV = "gemv"  # M == 1, memory bound
    GEMV_BATCHED = "gemv_batched"  # M in 1..max_m, one pass over B


class Mma(enum.Enum):
    """Which tensor-core instruction a CUDA tile kernel is built on
    (docs/spec.md, "The mma field")."""

    AUTO = "auto"  # wgmma on sm_90a, tcgen05 on sm_100a where the kernel qualifies, else mma.sync
    WGMMA = "wgmma"  # the Hopper body (gg_gemm_sm90.cuh) on every declared arch
    TCGEN05 = "tcgen05"  # the sm_100a body (gg_gemm_sm100.cuh) on every declared arch
    MMA_SYNC = "mma_sync"  # the mma.sync + ldmatrix + cp.async body everywhere


class Promotion(enum.Enum):
    """Who applies DeepSeek's e8m0 block scales on the sm_100a body
    (docs/spec.md, "The promotion field"; docs/semantics.md, "FP8 block
    scales: software and hardware promotion")."""

    AUTO = "auto"  # the block-scaled tcgen05.mma where the kernel qualifies, else software
    HARDWARE = "hardware"  # the block-scaled tcgen05.mma, or an error
    SOFTWARE = "software"  # the FP32 promotion of each K tile's partial sums, everywhere


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def scale_shape(scale: Scale, *, side: str, m: int, n: int, k: int,
                g: int | None, masked: bool = False) -> tuple[int, ...]:
    """The runtime shape of a scale tensor (docs/semantics.md, "Operations").

    masked: the masked grouped layout, whose per-row lhs scales gain a
    leading g ([g, m] and [g, m, ceil(k/G)], m the capacity)."""
    if scale.layout is ScaleLayout.ATOM128X4:
        # The row-major shape's last two dims padded to whole atoms; the
        # bytes lie in atom order (scale_atom_offset).
        *lead, rows, kblocks = scale_shape(replace(scale, layout=ScaleLayout.ROWS), side=side,
                                           m=m, n=n, k=k, g=g, masked=masked)
        return (*lead, cdiv(rows, ATOM_ROWS) * ATOM_ROWS, cdiv(kblocks, ATOM_KBLOCKS) * ATOM_KBLOCKS)
    bk = scale.block_k or k
    grp: tuple[int, ...] = (g,) if g is not None else ()
    if masked and side == "lhs" and scale.mode in (ScaleMode.TOKEN, ScaleMode.TOKEN_GROUP):
        return grp + scale_shape(scale, side=side, m=m, n=n, k=k, g=None)
    match scale.mode:
        case ScaleMode.NONE:
            return ()
        case ScaleMode.TENSOR:
            return grp if side == "rhs" else ()
        case ScaleMode.TOKEN:
            return (m,)
        case ScaleMode.TOKEN_GROUP:
            return (m, cdiv(k, bk))
        case ScaleMode.CHANNEL:
            return grp + (n,)
        case ScaleMode.BLOCK:
            return grp + (cdiv(n, scale.block_n), cdiv(k, bk))
        case ScaleMode.KBLOCK:
            return (g if g is not None else 1, cdiv(k, bk), 1, n)
    raise AssertionError(scale.mode)


def zero_shape(scale: Scale, *, n: int, k: int, g: int | None) -> tuple[int, ...]:
    """The runtime shape of an rhs scale's zero points (`zero=uint4`): the
    scale's shape with its last dim packed two per byte (uint8, ceil(d/2)
    bytes; the high nibble of an odd dim's last byte is unused)."""
    *lead, last = scale_shape(scale, side="rhs", m=0, n=n, k=k, g=g)
    return (*lead, cdiv(last, 2))


def global_scale_shape(*, g: int | None) -> tuple[int, ...]:
    """The runtime shape of a `global=f32` scale (docs/semantics.md, "MX
    and NV block scales"): one f32 for a dense kernel, one per local group
    ([g]) for a grouped or masked one, on either operand."""
    return (g,) if g is not None else ()


def scale_atom_offset(row: int, kblock: int, kblocks: int) -> int:
    """The byte of scale (row, kblock) in one ScaleLayout.ATOM128X4 matrix of
    `kblocks` K blocks (before padding): atoms follow each other along K
    first, then along rows; in an atom, byte (row % 32) * 16 + (row / 32 % 4)
    * 4 + kblock % 4 (CUTLASS `Sm1xxBlockScaledConfig`, checked entry by
    entry against CuTe in tests/reference/test_mx_scale_layout.py)."""
    k_atoms = cdiv(kblocks, ATOM_KBLOCKS)
    atom = (row // ATOM_ROWS) * k_atoms + kblock // ATOM_KBLOCKS
    return atom * ATOM_ROWS * ATOM_KBLOCKS + (row % 32) * 16 + (row // 32 % 4) * 4 + kblock % 4


def lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


def fold_scales_of(kernel) -> bool:
    """Whether the mma.sync body folds the epilogue scales into the FP32
    promotion (its kFoldScales): a main-loop scale, an epilogue scale, and
    an e8m0 one among them. `kernel`: an `ir.Kernel` (its two scales)."""
    on = [s for s in (kernel.lhs_scale, kernel.rhs_scale) if s.enabled]
    return (any(s.placement is Placement.MAINLOOP for s in on)
            and any(s.placement is Placement.EPILOGUE for s in on)
            and any(s.dtype is DType.E8M0 for s in on))
