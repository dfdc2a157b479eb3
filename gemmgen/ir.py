"""The validated, frozen intermediate representation of a spec.

Everything a backend or the reference needs is here, already checked by
`gemmgen.validate`: backends never see the syntax tree. Every user-facing node
carries the `Loc` of the spec text it came from, so later stages (a backend's
budget check, say) can still report a positioned diagnostic.

Shapes use these names (docs/semantics.md):

    dense     lhs [m, k]   rhs [k, n] or [n, k]         out [m, n]
    grouped   lhs [m, k]   rhs [g, k, n] or [g, n, k]   out [m, n]
    masked    lhs [g, m, k] rhs [g, k, n] or [g, n, k]  out [g, m, n]
              (op grouped with a 3-d lhs: m is the per-group capacity and
              `masked_m` [g] the valid rows of each group)
    tgmm      lhs [m, k]   rhs [m, n]                   out [g, k, n]
    quantize  lhs [m, k]                                out [m, k] + scale [m, k/G]

NB: `g` is the number of groups *held by this shard* (rhs.shape[0]); the
`group_sizes` argument has the total number of groups, and `group_offset`
says which of them this shard owns.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class Loc:
    """A position in a spec file (1-based line and column)."""

    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


NO_LOC = Loc("<builtin>", 0, 0)


# ---------------------------------------------------------------------------
# Number formats


class DType(enum.Enum):
    """Element types. The value is the canonical spelling in a spec."""

    F32 = "f32"
    BF16 = "bf16"
    F16 = "f16"
    E4M3 = "e4m3"  # float8_e4m3fn: no infinity, max 448
    E5M2 = "e5m2"  # float8_e5m2: max 57344
    INT8 = "int8"
    INT4 = "int4"  # stored packed, two per uint8 (low nibble = even element)
    FP4 = "fp4"  # float4_e2m1fn, stored packed like int4
    E8M0 = "e8m0"  # scale-only: byte e means 2**(e - 127)
    INT32 = "int32"  # accumulator of int8 x int8

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def is_float(self) -> bool:
        return self not in (DType.INT8, DType.INT4, DType.INT32)

    @property
    def is_fp8(self) -> bool:
        return self in (DType.E4M3, DType.E5M2)

    @property
    def is_sub_byte(self) -> bool:
        return self.bits < 8

    @property
    def is_quantized(self) -> bool:
        """8 bits or fewer: an operand that usually comes with scales."""
        return self.bits <= 8

    @property
    def numpy_name(self) -> str:
        """The `ml_dtypes` / NumPy name of the unpacked element type."""
        return _NUMPY_NAME[self]

    @property
    def storage_numpy_name(self) -> str:
        """The NumPy dtype of an array holding this type in memory.

        Sub-byte types are stored packed two per byte in uint8; e8m0 scales
        are stored as their raw exponent byte.
        """
        if self.is_sub_byte or self is DType.E8M0:
            return "uint8"
        return self.numpy_name

    @property
    def max_finite(self) -> float:
        return _MAX_FINITE[self]


_BITS = {
    DType.F32: 32, DType.BF16: 16, DType.F16: 16, DType.E4M3: 8,
    DType.E5M2: 8, DType.INT8: 8, DType.INT4: 4, DType.FP4: 4,
    DType.E8M0: 8, DType.INT32: 32,
}
_NUMPY_NAME = {
    DType.F32: "float32", DType.BF16: "bfloat16", DType.F16: "float16",
    DType.E4M3: "float8_e4m3fn", DType.E5M2: "float8_e5m2",
    DType.INT8: "int8", DType.INT4: "int4", DType.FP4: "float4_e2m1fn",
    DType.E8M0: "float8_e8m0fnu", DType.INT32: "int32",
}
_MAX_FINITE = {
    DType.F32: 3.4028234663852886e38, DType.BF16: 3.3895313892515355e38,
    DType.F16: 65504.0, DType.E4M3: 448.0, DType.E5M2: 57344.0,
    DType.INT8: 127.0, DType.INT4: 7.0, DType.FP4: 6.0,
    DType.E8M0: 2.0**127, DType.INT32: 2147483647.0,
}

OPERAND_DTYPES = (
    DType.F32, DType.BF16, DType.F16, DType.E4M3, DType.E5M2, DType.INT8,
    DType.INT4, DType.FP4,
)
OUTPUT_DTYPES = (DType.F32, DType.BF16, DType.F16)
QUANTIZED_OUTPUT_DTYPES = (DType.E4M3, DType.E5M2)  # op quantize
SCALE_DTYPES = (DType.F32, DType.BF16, DType.E8M0)
BIAS_DTYPES = (DType.F32, DType.BF16, DType.F16)


# ---------------------------------------------------------------------------
# Kernel description


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
    loc: Loc = field(default=NO_LOC, compare=False)

    @property
    def placement(self) -> Placement:
        if self.mode in (ScaleMode.TOKEN_GROUP, ScaleMode.BLOCK, ScaleMode.KBLOCK):
            return Placement.MAINLOOP
        return Placement.EPILOGUE

    @property
    def enabled(self) -> bool:
        return self.mode is not ScaleMode.NONE


NO_SCALE = Scale(ScaleMode.NONE)


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


@dataclass(frozen=True, slots=True)
class Epilogue:
    """y = activation(alpha * acc_scaled + bias), then the output cast."""

    activation: Activation = Activation.NONE
    alpha: float | None = None
    loc: Loc = field(default=NO_LOC, compare=False)


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

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


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


@dataclass(frozen=True, slots=True)
class Cond:
    """`dim cmp value`, dim one of m, n, k."""

    dim: str
    cmp: Cmp
    value: int

    def test(self, m: int, n: int, k: int) -> bool:
        return self.cmp.test({"m": m, "n": n, "k": k}[self.dim], self.value)

    def __str__(self) -> str:
        return f"{self.dim} {self.cmp.value} {self.value}"


@dataclass(frozen=True, slots=True)
class TileRule:
    """One row of a tile LUT: when all conds hold, use `tile`."""

    conds: tuple[Cond, ...]
    tile: Tile
    loc: Loc = field(default=NO_LOC, compare=False)


class Backend(enum.Enum):
    PALLAS_TPU = "pallas_tpu"
    CUDA = "cuda"


@dataclass(frozen=True, slots=True)
class BackendTiles:
    """A backend's own tile LUT (`tile pallas_tpu ...` and `tile_rule
    pallas_tpu ...` lines, docs/spec.md "A tile per backend"): the backend
    uses it in place of the kernel's unqualified `tile` and `tile_rule`s."""

    backend: Backend
    tile: Tile
    tile_rules: tuple[TileRule, ...] = ()
    loc: Loc = field(default=NO_LOC, compare=False)  # of the `tile BACKEND` line


class Algorithm(enum.Enum):
    TILE = "tile"  # block-tiled GEMM (tensor cores on CUDA)
    GEMV = "gemv"  # M == 1, memory bound
    GEMV_BATCHED = "gemv_batched"  # M in 1..max_m, one pass over B


CUDA_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120")
TPU_GENERATIONS = ("v5e", "v5p", "v6e", "v7x")


class Mma(enum.Enum):
    """Which tensor-core instruction a CUDA tile kernel is built on
    (docs/spec.md, "The mma field")."""

    AUTO = "auto"  # wgmma on sm_90a where the kernel qualifies, else mma.sync
    WGMMA = "wgmma"  # the Hopper body (gg_gemm_sm90.cuh) on every declared arch
    MMA_SYNC = "mma_sync"  # the mma.sync + ldmatrix + cp.async body everywhere


# The archs with wgmma: it is an sm_90a instruction (PTX ISA), absent on
# sm_90 without the `a` and on sm_100a.
WGMMA_ARCHS = ("sm_90a",)
# K elements of the Hopper body's FP8 K tile (one 128-byte swizzle row).
WGMMA_FP8_BK = 128
# K elements of the weight-only Hopper tile's K tile (a 128-byte row of its
# 16-bit activations).
WGMMA_MIXED_BK = 64
# The weight formats the weight-only Hopper tile widens into 16-bit wgmma
# operands (gg_gemm_sm90.cuh: runs_mixed).
WGMMA_WEIGHTS = frozenset({DType.INT8, DType.INT4, DType.FP4, DType.E4M3, DType.E5M2})


def arch_number(arch: str) -> int:
    """`sm_90a` -> 90."""
    return int(arch[3:].rstrip("af"))


# The launcher families of the cuda target (`launchers cpp cupy rust`): the
# C++ header and host launcher and the Python (CuPy) launcher are always
# emitted (the .cu holds the C++ launcher; verify runs the Python one);
# `rust` adds a cargo crate of Rust launchers (docs/rust.md).
CUDA_LAUNCHERS = ("cpp", "cupy", "rust")
CUDA_REQUIRED_LAUNCHERS = ("cpp", "cupy")


@dataclass(frozen=True, slots=True)
class Target:
    backend: Backend
    cuda_archs: tuple[str, ...] = ()
    tpu: str = "v5e"
    loc: Loc = field(default=NO_LOC, compare=False)
    launchers: tuple[str, ...] = CUDA_REQUIRED_LAUNCHERS  # cuda: CUDA_LAUNCHERS, in spec order


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
    bias: Bias = Bias()
    epilogue: Epilogue = Epilogue()
    tile: Tile = Tile(128, 128, 128)
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
    # The masked grouped layout (op grouped, `lhs [g, m, k]`): each group's
    # rows padded to a capacity m, `masked_m` [g] the valid rows of each.
    masked: bool = False
    # Fields that were swept to produce this variant, for `gemmgen list`.
    variant_of: str | None = None
    loc: Loc = field(default=NO_LOC, compare=False)

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

    @property
    def tile_loc(self) -> Loc:
        """Where the default tile was stated, for diagnostics and the spec
        references in generated code: a backend's own `tile BACKEND` line,
        else (the unqualified tile) the kernel's name."""
        return self.tile_at if self.tile_at is not None else self.loc

    def tile_for(self, m: int, n: int, k: int) -> Tile:
        """The tile LUT: the first rule whose conditions hold, else `tile`."""
        for rule in self.tile_rules:
            if all(c.test(m, n, k) for c in rule.conds):
                return rule.tile
        return self.tile

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
        if self.op not in (Op.DENSE, Op.GROUPED):
            return f"it runs ops 'dense' and 'grouped', not '{self.op.value}'"
        if self.algorithm is not Algorithm.TILE:
            return f"it is a tile GEMM, not algorithm '{self.algorithm.value}'"
        rhs = self.rhs_operand
        lhs_t, rhs_t = self.lhs.dtype, rhs.dtype
        sixteen = lhs_t in (DType.BF16, DType.F16)
        if sixteen and rhs_t in WGMMA_WEIGHTS:
            return self._mixed_obstacle()
        if lhs_t not in (DType.BF16, DType.F16, DType.E4M3, DType.E5M2) or rhs_t is not lhs_t:
            return (f"it takes lhs and rhs of one tensor-core type (bf16, f16, e4m3 or e5m2) "
                    f"or bf16 / f16 lhs with int8, int4, fp4, e4m3 or e5m2 weights, not lhs "
                    f"'{lhs_t.value}' x rhs '{rhs_t.value}'")
        if not sixteen and rhs.layout is not Layout.NK:
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
        widened in registers, the operands swapped."""
        return (self.lhs.dtype in (DType.BF16, DType.F16)
                and self.rhs_operand.dtype in WGMMA_WEIGHTS)

    def _mixed_obstacle(self) -> str | None:
        """wgmma_obstacle for 16-bit lhs times 8- or 4-bit weights (C++:
        runs_mixed and qualifies in gg_gemm_sm90.cuh)."""
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
        if Backend.CUDA not in self.backends or self.mma is Mma.MMA_SYNC:
            return False
        return arch in WGMMA_ARCHS and self.wgmma_obstacle() is None

    @property
    def out_n_divisor(self) -> int:
        """silu_mul halves n: out has n/2 columns."""
        return 2 if self.epilogue.activation is Activation.SILU_MUL else 1


@dataclass(frozen=True, slots=True)
class DispatchRule:
    cond: Cond | None  # None: the default arm
    kernel: str
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Pick a kernel by problem shape at run time (docs/spec.md, "Dispatch")."""

    name: str
    rules: tuple[DispatchRule, ...]
    loc: Loc = field(default=NO_LOC, compare=False)

    def pick(self, m: int, n: int, k: int) -> str:
        for rule in self.rules:
            if rule.cond is None or rule.cond.test(m, n, k):
                return rule.kernel
        raise AssertionError("validated dispatch has a default arm")


@dataclass(frozen=True, slots=True)
class Spec:
    path: str  # as given on the command line, posix, relative where possible
    stem: str  # generated/<stem>/
    targets: tuple[Target, ...]
    kernels: tuple[Kernel, ...]
    dispatches: tuple[Dispatch, ...] = ()

    def target(self, backend: Backend) -> Target | None:
        for t in self.targets:
            if t.backend is backend:
                return t
        return None

    def kernels_for(self, backend: Backend) -> tuple[Kernel, ...]:
        return tuple(k for k in self.kernels if backend in k.backends)

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def scale_shape(scale: Scale, *, side: str, m: int, n: int, k: int,
                g: int | None, masked: bool = False) -> tuple[int, ...]:
    """The runtime shape of a scale tensor (docs/semantics.md, "Operations").

    masked: the masked grouped layout, whose per-row lhs scales gain a
    leading g ([g, m] and [g, m, ceil(k/G)], m the capacity)."""
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


def lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


def fold_scales_of(kernel: Kernel) -> bool:
    """Whether the mma.sync body folds the epilogue scales into the FP32
    promotion (its kFoldScales): a main-loop scale, an epilogue scale, and
    an e8m0 one among them."""
    on = [s for s in (kernel.lhs_scale, kernel.rhs_scale) if s.enabled]
    return (any(s.placement is Placement.MAINLOOP for s in on)
            and any(s.placement is Placement.EPILOGUE for s in on)
            and any(s.dtype is DType.E8M0 for s in on))
