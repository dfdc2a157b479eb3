"""Pallas TPU backend: megablox-style kernels, one self-launching module each.

`plan(kernel, spec)` does all the arithmetic (tiles of the LUT, VMEM bytes
per grid step, the scoped-VMEM limit to request, dtype decisions);
`render(spec)` prints plans through the Jinja templates in
`templates/pallas/`; `diagnose(kernel, spec)` names what this backend cannot
emit and checks the VMEM budget of the declared TPU generation. All three are
pure. docs/pallas.md explains the design decisions.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import assert_never

from gemmgen import ir
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Activation, BiasMode, DType, Layout, Op, ScaleMode
from gemmgen.render import header_text, render_template, source_ref

# The JAX release the generated code is lowered and interpreted with in the
# tests (pyproject pins it; Pallas APIs move between releases).
JAX_VERSION = "0.10.2"

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class TpuVmem:
    """VMEM of one TPU generation, per TensorCore."""

    physical: int
    scoped_default: int  # what Mosaic grants a kernel without vmem_limit_bytes

    @property
    def usable(self) -> int:
        """The most a kernel may ask for: 3/4 of physical VMEM, leaving the
        rest to Mosaic's internal scratch and to the compiler."""
        return self.physical * 3 // 4


TPU_VMEM = {
    "v5e": TpuVmem(physical=128 * MiB, scoped_default=16 * MiB),
    "v5p": TpuVmem(physical=95 * MiB, scoped_default=16 * MiB),
    "v6e": TpuVmem(physical=128 * MiB, scoped_default=32 * MiB),
    "v7x": TpuVmem(physical=64 * MiB, scoped_default=32 * MiB),
}

# Mosaic pipelines a block with one or two buffers (JAX 0.10: "Only single
# (1) and double (2) buffering are supported").
MAX_BUFFERS = 2

LANES = 128  # last dim of a VMEM tile
SUBLANES = 8  # second-minor dim of a 32-bit VMEM tile


# ---------------------------------------------------------------------------
# Dtypes


def jnp_name(dt: DType) -> str:
    """The `jnp.<name>` of the array that holds `dt` in memory."""
    match dt:
        case DType.F32:
            return "float32"
        case DType.BF16:
            return "bfloat16"
        case DType.F16:
            return "float16"
        case DType.E4M3:
            return "float8_e4m3fn"
        case DType.E5M2:
            return "float8_e5m2"
        case DType.INT8:
            return "int8"
        case DType.INT32:
            return "int32"
        case DType.INT4 | DType.FP4 | DType.E8M0:
            return "uint8"  # packed nibbles / exponent bytes
        case _:
            assert_never(dt)


def storage_bytes(dt: DType) -> int:
    """Bytes per stored element (packed sub-byte types: one byte per pair)."""
    return 1 if dt.bits <= 8 else dt.bits // 8


def mxu_dtype(lhs: DType, rhs: DType) -> DType:
    """The dtype both operands are converted to for the MXU.

    int8/int4 x int8/int4 multiply as int8 (int32 products); an f32 or f16
    operand makes the product f32 at HIGHEST precision (TPUs have no f16
    MXU path, and bf16 would round f16 inputs); everything else (bf16, fp8,
    int8 or 4-bit against a float) converts exactly to bf16.
    """
    if not lhs.is_float and not rhs.is_float:
        return DType.INT8
    if DType.F32 in (lhs, rhs) or DType.F16 in (lhs, rhs):
        return DType.F32
    return DType.BF16


def padded_bytes(shape: tuple[int, ...], itemsize: int) -> int:
    """VMEM bytes of a block: the last two dims padded to the native tile
    (128 lanes x 8 sublanes of 32 bits, so 16 rows of bf16, 32 of 8-bit)."""
    dims = list(shape)
    while len(dims) < 2:
        dims.insert(0, 1)
    *lead, rows, cols = dims
    sub = SUBLANES * max(1, 4 // itemsize)
    rows = -(-rows // sub) * sub
    cols = -(-cols // LANES) * LANES
    total = rows * cols * itemsize
    for d in lead:
        total *= d
    return total


# ---------------------------------------------------------------------------
# Cores: the implementations a module contains


@dataclass(frozen=True, slots=True)
class MatmulCore:
    """One dense or grouped matmul implementation of a module: the function
    `fn` (XLA glue around one `pallas_call`) and its Pallas kernel.

    A module has one for the spec's kernel; a grouped module with `<name>_vjp`
    adds plain ones (no scales, bias, alpha or activation) for the backward
    pass, one of them with the other B layout.
    """

    fn: str  # "_matmul", "_gmm", "_gmm_linear", "_gmm_t"
    kernel_fn: str
    grouped: bool
    rhs_nk: bool
    lhs_packed: str  # "" | "int4" | "fp4": two per uint8 along k
    rhs_packed: str  # "" | "int4" | "fp4": along k when rhs_nk, else along n
    lhs_cast: str  # jnp dtype a loaded lhs block converts to ("": none)
    rhs_cast: str
    mxu: str  # jnp dtype both operands reach the MXU in
    int_dot: bool  # int8 x int8 with int32 products
    highest: bool  # f32 operands: precision=HIGHEST
    lhs_scale: str = "none"  # ir.ScaleMode value
    rhs_scale: str = "none"
    lhs_block_k: int = 0
    rhs_block_k: int = 0
    rhs_block_n: int = 1
    lhs_scale_dtype: str = "f32"  # ir.DType value
    rhs_scale_dtype: str = "f32"
    bias: str = "none"  # ir.BiasMode value
    activation: str = "none"  # ir.Activation value
    alpha: float | None = None

    @property
    def k_pairs(self) -> bool:
        """The contraction runs over the even and the odd elements of k as
        two parts (4-bit data packed along k unpacks into those halves)."""
        return bool(self.lhs_packed) or (bool(self.rhs_packed) and self.rhs_nk)

    @property
    def lhs_split(self) -> bool:
        """An unpacked lhs against rhs packed along k: XLA splits lhs into its
        even and odd columns, so the kernel never shuffles lanes."""
        return not self.lhs_packed and bool(self.rhs_packed) and self.rhs_nk

    @property
    def rhs_permute(self) -> bool:
        """rhs packed along n: its unpacked halves are the even and odd
        columns, re-interleaved in VMEM by a 0/1 matmul."""
        return bool(self.rhs_packed) and not self.rhs_nk

    @property
    def silu_mul(self) -> bool:
        return self.activation == Activation.SILU_MUL.value

    @property
    def mainloop(self) -> bool:
        """A scale applies per K block, inside the main loop."""
        return self.lhs_scale == ScaleMode.TOKEN_GROUP.value or self.rhs_scale in (
            ScaleMode.BLOCK.value, ScaleMode.KBLOCK.value)

    @property
    def e8m0(self) -> bool:
        """Some scale is stored as e8m0 bytes (applied as an int32 exponent)."""
        return DType.E8M0.value in (self.lhs_scale_dtype if self.lhs_scale != "none" else "",
                                    self.rhs_scale_dtype if self.rhs_scale != "none" else "")

    @property
    def folded(self) -> bool:
        """Every scale and alpha apply per K block: an e8m0 scale meets a
        main-loop scale, so all exponents are added before any product is
        formed (an epilogue scale applied later could not bring back a
        partial product that went subnormal and was flushed)."""
        return self.mainloop and self.e8m0

    def scale_stage(self, side: str) -> str:
        """Where the lhs or rhs scale is applied: "loop" (each K block),
        "epilogue" (once), or "" (no scale)."""
        mode = self.lhs_scale if side == "lhs" else self.rhs_scale
        if mode == ScaleMode.NONE.value:
            return ""
        if self.folded or mode in (ScaleMode.TOKEN_GROUP.value, ScaleMode.BLOCK.value,
                                   ScaleMode.KBLOCK.value):
            return "loop"
        return "epilogue"

    @property
    def moved_to_loop(self) -> tuple[str, ...]:
        """What `folded` moves from the epilogue into the main loop, for a comment."""
        if not self.folded:
            return ()
        out = tuple(f"the {side} scale ({mode})" for side, mode in (
            ("lhs", self.lhs_scale), ("rhs", self.rhs_scale))
            if mode in (ScaleMode.TENSOR.value, ScaleMode.TOKEN.value, ScaleMode.CHANNEL.value))
        return out + (("alpha",) if self.alpha is not None else ())

    @property
    def alpha_stage(self) -> str:
        """Where alpha is applied: with the scales when they are folded into
        the main loop (so an e8m0 exponent is applied last), else the epilogue."""
        if self.alpha is None:
            return ""
        return "loop" if self.folded else "epilogue"

    def e8m0_at(self, stage: str) -> int:
        """How many e8m0 scales apply at `stage` (their exponents are added)."""
        return sum(1 for side in ("lhs", "rhs") if self.scale_stage(side) == stage and (
            self.lhs_scale_dtype if side == "lhs" else self.rhs_scale_dtype) == DType.E8M0.value)

    @property
    def alpha_in_pow2(self) -> bool:
        """alpha applies where e8m0 exponents do: it is split into
        ALPHA_MANTISSA * 2**ALPHA_EXPONENT and its exponent joins theirs, so
        no product of constants with a power of two can go subnormal (XLA
        folds constants into the smaller operand of a product)."""
        return bool(self.alpha_stage) and self.e8m0_at(self.alpha_stage) > 0

    @property
    def alpha_split(self) -> tuple[float, int]:
        """alpha = mantissa * 2**exponent, |mantissa| in [1, 2) (0: 0, 0)."""
        assert self.alpha is not None
        mantissa, exponent = math.frexp(self.alpha)
        return (2.0 * mantissa, exponent - 1) if mantissa else (0.0, 0)

    def pow2_steps(self, stage: str) -> int:
        """Normal powers of two (2**-126 .. 2**127) that _times_pow2 needs for
        the exponents summed at `stage`: each e8m0 exponent spans -127..127,
        alpha's exponent is a constant."""
        n = self.e8m0_at(stage)
        shift = self.alpha_split[1] if self.alpha_in_pow2 and self.alpha_stage == stage else 0
        high, low = 127 * n + shift, -127 * n + shift
        return max(1, -(-max(high, 0) // 127), -(-max(-low, 0) // 126))

    @property
    def acc_dtype(self) -> str:
        return "int32" if self.int_dot and not self.mainloop else "float32"

    @property
    def halves(self) -> tuple[str, ...]:
        """Suffixes of the per-column refs: silu_mul reads column block j
        (gate) and j + n/2 (up) of every per-n input."""
        return ("", "_up") if self.silu_mul else ("",)

    @property
    def rhs_scale_per_n(self) -> bool:
        return self.rhs_scale in (ScaleMode.CHANNEL.value, ScaleMode.BLOCK.value,
                                  ScaleMode.KBLOCK.value)

    @property
    def n_lanes(self) -> int:
        """Columns of one lane-aligned rhs block: 256 when packed along n."""
        return 2 * LANES if self.rhs_permute else LANES

    @property
    def transcendental(self) -> bool:
        return self.activation in (Activation.SILU.value, Activation.GELU.value,
                                   Activation.SILU_MUL.value)

    @property
    def plain(self) -> bool:
        return (self.lhs_scale == "none" and self.rhs_scale == "none" and self.bias == "none"
                and self.activation == "none" and self.alpha is None)


@dataclass(frozen=True, slots=True)
class TgmmCore:
    """The ragged-K matmul: out[i] = alpha * lhs[rows_i]ᵀ @ rhs[rows_i] (+ existing_out)."""

    fn: str
    kernel_fn: str
    lhs_cast: str
    rhs_cast: str
    highest: bool
    alpha: float | None = None


def _packed_kind(op: ir.Operand) -> str:
    if not op.packed:
        return ""
    return "int4" if op.dtype is DType.INT4 else "fp4"


def _cast(operand: DType, mxu: DType) -> str:
    """The conversion a loaded block needs before the dot ("" for none)."""
    if operand.is_sub_byte:
        return ""  # unpacked straight into the MXU dtype
    return "" if operand is mxu else jnp_name(mxu)


def matmul_core(kernel: ir.Kernel) -> MatmulCore:
    mxu = mxu_dtype(kernel.lhs.dtype, kernel.rhs_operand.dtype)
    return MatmulCore(
        fn="_gmm" if kernel.op is Op.GROUPED else "_matmul",
        kernel_fn="_kernel",
        grouped=kernel.op is Op.GROUPED,
        rhs_nk=kernel.rhs_operand.layout is Layout.NK,
        lhs_packed=_packed_kind(kernel.lhs),
        rhs_packed=_packed_kind(kernel.rhs_operand),
        lhs_cast=_cast(kernel.lhs.dtype, mxu),
        rhs_cast=_cast(kernel.rhs_operand.dtype, mxu),
        mxu=jnp_name(mxu),
        int_dot=mxu is DType.INT8,
        highest=mxu is DType.F32,
        lhs_scale=kernel.lhs_scale.mode.value,
        rhs_scale=kernel.rhs_scale.mode.value,
        lhs_block_k=kernel.lhs_scale.block_k,
        rhs_block_k=kernel.rhs_scale.block_k,
        rhs_block_n=kernel.rhs_scale.block_n,
        lhs_scale_dtype=kernel.lhs_scale.dtype.value,
        rhs_scale_dtype=kernel.rhs_scale.dtype.value,
        bias=kernel.bias.mode.value,
        activation=kernel.epilogue.activation.value,
        alpha=_f32(kernel.epilogue.alpha),
    )


def _f32(x: float | None) -> float | None:
    """The spec's constant rounded to f32, as every backend holds it."""
    if x is None:
        return None
    return struct.unpack("f", struct.pack("f", x))[0]


def vjp_supported(kernel: ir.Kernel) -> bool:
    """Grouped kernels with f32/bf16 operands and no scales get `<name>_vjp`."""
    return (kernel.op is Op.GROUPED
            and kernel.lhs.dtype in (DType.F32, DType.BF16)
            and kernel.rhs_operand.dtype in (DType.F32, DType.BF16)
            and not kernel.lhs_scale.enabled and not kernel.rhs_scale.enabled)


def _plain(core: MatmulCore, fn: str, kernel_fn: str, rhs_nk: bool) -> MatmulCore:
    return replace(core, fn=fn, kernel_fn=kernel_fn, rhs_nk=rhs_nk, lhs_scale="none",
                   rhs_scale="none", bias="none", activation="none", alpha=None)


def _tgmm_core(lhs: DType, rhs: DType, alpha: float | None, fn: str = "_tgmm") -> TgmmCore:
    mxu = mxu_dtype(lhs, rhs)
    return TgmmCore(fn=fn, kernel_fn=f"{fn}_kernel", lhs_cast=_cast(lhs, mxu),
                    rhs_cast=_cast(rhs, mxu), highest=mxu is DType.F32, alpha=alpha)


# ---------------------------------------------------------------------------
# The plan


@dataclass(frozen=True, slots=True)
class TileRow:
    """One row of the tile LUT as the generated code sees it."""

    cond: str  # a Python condition on m, n, k; "" for the default tile
    m: int
    n: int
    k: int
    where: str  # spec position, for a comment
    vmem_bytes: int  # VMEM per grid step with this tile


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of the generated function, for `Args:` and `_validate`."""

    name: str
    shape: str  # "[m, k]", for people
    shape_expr: str  # "(m, k)", checked by _validate once m, n, k, g are known
    dtype: str  # jnp name of the storage dtype
    doc: str
    optional: bool = False


@dataclass(frozen=True, slots=True)
class VmemBlock:
    """One VMEM buffer of a grid step, for the VMEM accounting."""

    name: str
    shape: tuple[int, ...]  # as it sits in VMEM (squeezed dims dropped)
    itemsize: int
    buffers: int

    @property
    def bytes(self) -> int:
        return padded_bytes(self.shape, self.itemsize) * self.buffers


@dataclass(frozen=True, slots=True)
class PallasPlan:
    kernel: ir.Kernel
    path: PurePosixPath  # relative to generated/<stem>/
    spec_path: str
    where: str  # "specs/moe.gemm:18"
    op: str
    title: str  # "grouped matmul"
    summary: str  # one line: what the function computes
    spec_lines: tuple[str, ...]  # the spec restated for the module docstring
    args: tuple[Arg, ...]
    returns: str
    out_dtype: str
    # Tiling and pipelining.
    tiles: tuple[TileRow, ...]  # the LUT rules, then the default (cond "")
    buffers: int
    vmem_bytes: int  # the largest over the LUT
    vmem_limit_bytes: int | None  # passed to Mosaic when over the scoped default
    tpu: str
    static_n: int | None
    static_k: int | None
    # What the module implements.
    core: MatmulCore | None = None  # dense, grouped
    vjp_cores: tuple[MatmulCore, ...] = ()  # grouped with <name>_vjp
    tgmm: TgmmCore | None = None  # tgmm, and the backward of <name>_vjp
    # quantize
    group: int = 0  # G: elements per scale
    quant_tk: int = 0  # K block of the quantize grid (a multiple of G)
    fp8_max: float = 0.0
    e8m0: bool = False
    jax_version: str = JAX_VERSION

    @property
    def rules(self) -> tuple[TileRow, ...]:
        return self.tiles[:-1]

    @property
    def default_tile(self) -> TileRow:
        return self.tiles[-1]

    @property
    def grouped(self) -> bool:
        return self.op == Op.GROUPED.value

    @property
    def vjp(self) -> bool:
        return bool(self.vjp_cores)

    @property
    def linear_fn(self) -> str:
        """The core computing lhs @ rhs alone for the backward pass."""
        for c in self.vjp_cores:
            if c.fn == "_gmm_linear":
                return c.fn
        assert self.core is not None
        return self.core.fn

    @property
    def cores(self) -> tuple[MatmulCore, ...]:
        return ((self.core,) if self.core else ()) + self.vjp_cores

    @property
    def e8m0_scales(self) -> bool:
        """Some input scale is stored as e8m0 bytes."""
        return self.core is not None and self.core.e8m0


def _where(loc: ir.Loc) -> str:
    return source_ref(loc)


def _tpu(spec: ir.Spec) -> str:
    target = spec.target(ir.Backend.PALLAS_TPU)
    return target.tpu if target is not None else "v5e"


def vmem_blocks(kernel: ir.Kernel, tile: ir.Tile) -> tuple[VmemBlock, ...]:
    """Every VMEM buffer one grid step holds with `tile`, optional inputs
    included (the worst case)."""
    tm, tn, tk = tile.m, tile.n, tile.k
    bufs = min(kernel.stages, MAX_BUFFERS)
    lhs_b = storage_bytes(kernel.lhs.dtype)
    out_b = storage_bytes(kernel.out)
    match kernel.op:
        case Op.QUANTIZE:
            q = _quantize_tk(kernel)
            groups = max(q // max(kernel.out_scale.block_k, 1), 1)
            return (VmemBlock("lhs", (tm, q), lhs_b, bufs),
                    VmemBlock("out", (tm, q), out_b, bufs),
                    VmemBlock("scale", (groups, tm, 1), 4, bufs))
        case Op.TGMM:
            return (VmemBlock("lhs", (tm, tk), lhs_b, bufs),
                    VmemBlock("rhs", (tm, tn), storage_bytes(kernel.rhs_operand.dtype), bufs),
                    VmemBlock("existing_out", (tk, tn), out_b, bufs),
                    VmemBlock("out", (tk, tn), out_b, bufs),
                    VmemBlock("acc", (tk, tn), 4, 1))
        case Op.DENSE | Op.GROUPED:
            pass
        case _:
            assert_never(kernel.op)
    core = matmul_core(kernel)
    rhs_b = storage_bytes(kernel.rhs_operand.dtype)
    halves = len(core.halves)
    blocks: list[VmemBlock] = []
    if core.lhs_split:
        blocks += [VmemBlock("lhs_even", (tm, tk // 2), lhs_b, bufs),
                   VmemBlock("lhs_odd", (tm, tk // 2), lhs_b, bufs)]
    else:
        blocks.append(VmemBlock("lhs", (tm, tk // 2 if core.lhs_packed else tk), lhs_b, bufs))
    if core.rhs_nk:
        rhs_shape = (tn, tk // 2 if core.rhs_packed else tk)
    else:
        rhs_shape = (tk, tn // 2 if core.rhs_packed else tn)
    blocks.append(VmemBlock("rhs", rhs_shape, rhs_b, bufs * halves))
    match kernel.lhs_scale.mode:
        case ScaleMode.TOKEN | ScaleMode.TOKEN_GROUP:
            blocks.append(VmemBlock("lhs_scale", (tm, 1), 4, bufs))
        case _:
            pass  # none, or a scalar in SMEM
    if core.rhs_scale_per_n:
        blocks.append(VmemBlock("rhs_scale", (1, tn), 4, bufs * halves))
    if kernel.bias.mode is not BiasMode.NONE:
        blocks.append(VmemBlock("bias", (1, tn), storage_bytes(kernel.bias.dtype),
                                bufs * halves))
    blocks.append(VmemBlock("out", (tm, tn), out_b, bufs))
    blocks.append(VmemBlock("acc", (tm, tn), 4, halves))
    return tuple(blocks)


def vmem_bytes(kernel: ir.Kernel, tile: ir.Tile) -> int:
    return sum(b.bytes for b in vmem_blocks(kernel, tile))


def vmem_limit(need: int, vmem: TpuVmem) -> int | None:
    """The scoped-VMEM limit to request: None (Mosaic's default) when the
    kernel fits it, else the need plus a quarter, in whole MiB, capped at
    the usable VMEM."""
    if need <= vmem.scoped_default:
        return None
    want = -(-(need + need // 4) // MiB) * MiB
    return min(want, vmem.usable)


def _tile_rows(kernel: ir.Kernel) -> tuple[TileRow, ...]:
    rows = []
    for rule in kernel.tile_rules:
        cond = " and ".join(f"{c.dim} {c.cmp.value} {c.value}" for c in rule.conds)
        rows.append(TileRow(cond, rule.tile.m, rule.tile.n, rule.tile.k, _where(rule.loc),
                            vmem_bytes(kernel, rule.tile)))
    t = kernel.tile
    rows.append(TileRow("", t.m, t.n, t.k, _where(kernel.loc), vmem_bytes(kernel, t)))
    return tuple(rows)


def _quantize_tk(kernel: ir.Kernel) -> int:
    """The K block of the quantize grid: the tile's k rounded to whole groups."""
    g = kernel.out_scale.block_k or kernel.tile.k
    return max(g, kernel.tile.k // g * g)


# ---------------------------------------------------------------------------
# Arguments and docstrings


_PACKED_NOTE = {"int4": "int4 packed two per byte, element 2i in the low nibble",
                "fp4": "fp4 e2m1 packed two per byte, element 2i in the low nibble"}


def _operand_arg(name: str, operand: ir.Operand, dims: tuple[str, ...], doc: str) -> Arg:
    kind = _packed_kind(operand)
    if kind:
        dims = dims[:-1] + (f"{dims[-1]}/2",)
        doc = f"{doc.rstrip('.')} ({_PACKED_NOTE[kind]})."
    expr = ", ".join(d.replace("/2", " // 2") for d in dims)
    return Arg(name, "[" + ", ".join(dims) + "]", f"({expr},)" if len(dims) == 1 else f"({expr})",
               jnp_name(operand.dtype), doc)


def _scale_arg(side: str, scale: ir.Scale, grouped: bool) -> Arg:
    g = ("g",) if grouped else ()
    bk = scale.block_k
    match scale.mode:
        case ScaleMode.TENSOR:
            dims: tuple[str, ...] = g if side == "rhs" else ()
            what = "one scale" + (" per group" if dims else " for the whole tensor")
        case ScaleMode.TOKEN:
            dims, what = ("m",), "one scale per row of lhs"
        case ScaleMode.TOKEN_GROUP:
            dims, what = ("m", f"cdiv(k, {bk})"), f"one scale per row and {bk} columns of lhs"
        case ScaleMode.CHANNEL:
            dims, what = g + ("n",), "one scale per column of the output"
        case ScaleMode.BLOCK:
            dims = g + (f"cdiv(n, {scale.block_n})", f"cdiv(k, {bk})")
            what = f"one scale per {scale.block_n} x {bk} block of rhs (n x k)"
        case ScaleMode.KBLOCK:
            dims = ("g" if grouped else "1", f"cdiv(k, {bk})", "1", "n")
            what = f"one scale per column and {bk} rows of k (megablox rhs_scale)"
        case ScaleMode.NONE:
            raise AssertionError("no scale")
        case _:
            assert_never(scale.mode)
    # cdiv(x, b) is written -(-x // b) in the generated check.
    expr = ", ".join(_cdiv_expr(d) for d in dims)
    dt = scale.dtype
    note = " (e8m0: exponent byte e means 2**(e - 127))" if dt is DType.E8M0 else ""
    return Arg(f"{side}_scale", "[" + ", ".join(dims) + "]",
               f"({expr},)" if len(dims) == 1 else f"({expr})",
               jnp_name(dt), f"{scale.mode.value}: {what}{note}.")


def _cdiv_expr(dim: str) -> str:
    if dim.startswith("cdiv("):
        a, b = dim[5:-1].split(", ")
        return f"-(-{a} // {b})"
    return dim


def _matmul_args(kernel: ir.Kernel, core: MatmulCore) -> tuple[Arg, ...]:
    grouped = core.grouped
    lhs = _operand_arg("lhs", kernel.lhs, ("m", "k"), "the activations.")
    dims = ("n", "k") if core.rhs_nk else ("k", "n")
    if grouped:
        rhs = _operand_arg("rhs", kernel.rhs_operand, ("g",) + dims,
                           "the weights of the g groups this shard owns (g = rhs.shape[0]).")
    else:
        rhs = _operand_arg("rhs", kernel.rhs_operand, dims, "the weights.")
    args = [lhs, rhs]
    if grouped:
        args.append(Arg("group_sizes", "[num_groups]", "(num_groups,)", "int32",
                        "rows of lhs per group, in order; num_groups >= g. Any integer "
                        "array-like (a list or tuple too): a negative size counts as 0, "
                        "no group runs past row m."))
    for side, scale in (("lhs", kernel.lhs_scale), ("rhs", kernel.rhs_scale)):
        if scale.enabled:
            args.append(_scale_arg(side, scale, grouped))
    match kernel.bias.mode:
        case BiasMode.N:
            args.append(Arg("bias", "[n]", "(n,)", jnp_name(kernel.bias.dtype),
                            "added to every row, after alpha, before the activation."))
        case BiasMode.GROUP:
            args.append(Arg("bias", "[g, 1, n]", "(g, 1, n)", jnp_name(kernel.bias.dtype),
                            "added to the rows of each group (megablox rhs_bias)."))
        case BiasMode.NONE:
            pass
        case _:
            assert_never(kernel.bias.mode)
    out_n = "n // 2" if core.silu_mul else "n"
    if grouped:
        args.append(Arg("group_offset", "[]", "()", "int32",
                        "the first group this shard owns (default 0, an int is fine): it "
                        "computes groups [group_offset, group_offset + g); a local group "
                        "that group_sizes does not have is empty.", optional=True))
        args.append(Arg("existing_out", f"[m, {out_n.replace(' // ', '/')}]", f"(m, {out_n})",
                        jnp_name(kernel.out), "rows this shard does not compute keep these "
                        "values (default: zeros).", optional=True))
    return tuple(args)


def _formula(kernel: ir.Kernel, core: MatmulCore) -> str:
    t = "ᵀ" if core.rhs_nk else ""
    b = f"rhs[i - group_offset]{t}" if core.grouped else f"rhs{t}"
    a = "lhs[rows of group i]" if core.grouped else "lhs"
    prod = f"{a} @ {b}"
    scales = []
    if kernel.lhs_scale.enabled:
        scales.append("lhs_scale")
    if kernel.rhs_scale.enabled:
        scales.append("rhs_scale")
    if scales:
        prod = f"({prod}) * " + " * ".join(scales)
    if kernel.epilogue.alpha is not None:
        prod = f"{core.alpha!r} * {prod}"
    if kernel.bias.mode is not BiasMode.NONE:
        prod += " + bias"
    act = kernel.epilogue.activation
    if act is not Activation.NONE:
        prod = f"{act.value}({prod})"
    lhs_side = "out[rows of group i]" if core.grouped else "out"
    return f"{lhs_side} = {prod}"


def _spec_lines(kernel: ir.Kernel, tiles: tuple[TileRow, ...], tpu: str, buffers: int,
                need: int) -> tuple[str, ...]:
    lines = [f"op        {kernel.op.value}"]
    lines.append(f"lhs       {kernel.lhs.dtype.value}{' packed' if kernel.lhs.packed else ''} "
                 "[m, k]")
    if kernel.rhs is not None:
        packed = " packed" if kernel.rhs_operand.packed else ""
        lines.append(f"rhs       {kernel.rhs_operand.dtype.value}{packed} {_rhs_shape(kernel)}")
    if kernel.op is Op.QUANTIZE:
        lines.append(f"out       {kernel.out.value} [m, k]")
    else:
        lines.append(f"out       {kernel.out.value}, {kernel.acc.value} accumulator")
    for name, scale in (("lhs_scale", kernel.lhs_scale), ("rhs_scale", kernel.rhs_scale),
                        ("out_scale", kernel.out_scale)):
        if scale.enabled:
            sizes = (f" n={scale.block_n}" if scale.mode is ScaleMode.BLOCK else "") + \
                (f" k={scale.block_k}" if scale.block_k else "")
            where = "" if name == "out_scale" else f" ({scale.placement.value})"
            lines.append(f"{name:<9} {scale.mode.value}{sizes} {scale.dtype.value}{where}")
    if kernel.bias.mode is not BiasMode.NONE:
        shape = "[n]" if kernel.bias.mode is BiasMode.N else "[g, 1, n]"
        lines.append(f"bias      {kernel.bias.dtype.value} {shape}")
    ep = kernel.epilogue
    if ep.activation is not Activation.NONE or ep.alpha is not None:
        alpha = f" alpha={ep.alpha!r}" if ep.alpha is not None else ""
        lines.append(f"epilogue  {ep.activation.value}{alpha}")
    default = tiles[-1]
    if kernel.op is Op.QUANTIZE:
        lines.append(f"tile      m={default.m} k={_quantize_tk(kernel)}")
    else:
        lines.append(f"tile      m={default.m} n={default.n} k={default.k}")
    for row in tiles[:-1]:
        lines.append(f"  when {row.cond}: m={row.m} n={row.n} k={row.k}")
    if kernel.static_n or kernel.static_k:
        lines.append("dims     " + (f" n={kernel.static_n}" if kernel.static_n else "")
                     + (f" k={kernel.static_k}" if kernel.static_k else ""))
    vm = TPU_VMEM[tpu]
    lines.append(f"buffers   {buffers} per pipelined block")
    lines.append(f"vmem      {need / MiB:.2f} MiB per grid step (TPU {tpu}: "
                 f"{vm.scoped_default // MiB} MiB scoped default, {vm.physical // MiB} MiB "
                 "physical)")
    return tuple(lines)


def _rhs_shape(kernel: ir.Kernel) -> str:
    nk = kernel.rhs_operand.layout is Layout.NK
    match kernel.op:
        case Op.DENSE:
            return "[n, k]" if nk else "[k, n]"
        case Op.GROUPED:
            return "[g, n, k]" if nk else "[g, k, n]"
        case Op.TGMM:
            return "[m, n]"
        case Op.QUANTIZE:
            raise AssertionError("quantize has no rhs")
        case _:
            assert_never(kernel.op)


# ---------------------------------------------------------------------------
# plan


def plan(kernel: ir.Kernel, spec: ir.Spec) -> PallasPlan:
    """Everything the templates print, computed once (no I/O)."""
    tpu = _tpu(spec)
    vm = TPU_VMEM[tpu]
    tiles = _tile_rows(kernel)
    need = max(t.vmem_bytes for t in tiles)
    buffers = min(kernel.stages, MAX_BUFFERS)
    common = dict(
        kernel=kernel,
        path=PurePosixPath("pallas") / f"{kernel.name}.py",
        spec_path=spec.path,
        where=_where(kernel.loc),
        op=kernel.op.value,
        spec_lines=_spec_lines(kernel, tiles, tpu, buffers, need),
        out_dtype=jnp_name(kernel.out),
        tiles=tiles,
        buffers=buffers,
        vmem_bytes=need,
        vmem_limit_bytes=vmem_limit(need, vm),
        tpu=tpu,
        static_n=kernel.static_n,
        static_k=kernel.static_k,
    )
    out = jnp_name(kernel.out)
    match kernel.op:
        case Op.DENSE | Op.GROUPED:
            core = matmul_core(kernel)
            out_n = "n/2" if core.silu_mul else "n"
            vjp_cores: tuple[MatmulCore, ...] = ()
            tgmm = None
            if vjp_supported(kernel):
                vjp_cores = (_plain(core, "_gmm_t", "_kernel_t", not core.rhs_nk),)
                if core.activation != Activation.NONE.value:  # recompute the pre-activation
                    vjp_cores = (_plain(core, "_gmm_linear", "_kernel_linear", core.rhs_nk),
                                 ) + vjp_cores
                tgmm = _tgmm_core(kernel.lhs.dtype, kernel.lhs.dtype, None)
            if core.grouped:
                returns = (f"[m, {out_n}] {out}: the rows of each owned group i as above; all "
                           "other rows are zero, or existing_out's.")
            else:
                returns = f"[m, {out_n}] {out}."
            return PallasPlan(
                **common,
                title="grouped matmul" if core.grouped else "dense matmul",
                summary=_formula(kernel, core),
                args=_matmul_args(kernel, core),
                returns=returns,
                core=core,
                vjp_cores=vjp_cores,
                tgmm=tgmm,
            )
        case Op.TGMM:
            args = (
                Arg("lhs", "[m, k]", "(m, k)", jnp_name(kernel.lhs.dtype),
                    "the activations (rows sorted by group)."),
                Arg("rhs", "[m, n]", "(m, n)", jnp_name(kernel.rhs_operand.dtype),
                    "the output gradient, rows aligned with lhs."),
                Arg("group_sizes", "[num_groups]", "(num_groups,)", "int32",
                    "rows per group, in order. Any integer array-like (a list or tuple "
                    "too): a negative size counts as 0, no group runs past row m."),
                Arg("group_offset", "[]", "()", "int32",
                    "the first group this shard computes (default 0, an int is fine); "
                    "without existing_out it must be concrete (not traced), as g = "
                    "num_groups - group_offset; a local group that group_sizes does not "
                    "have is empty.", optional=True),
                Arg("existing_out", "[g, k, n]", "(g, k, n)", out,
                    "added to the result (megablox tgmm); its leading dim is the number "
                    "g of local groups (default: g = num_groups - group_offset).",
                    optional=True),
            )
            alpha = _f32(kernel.epilogue.alpha)
            a = f"{alpha!r} * " if alpha is not None else ""
            return PallasPlan(
                **common,
                title="grouped transposed matmul (tgmm)",
                summary=f"out[i - group_offset] = {a}lhs[rows of group i]ᵀ @ rhs[rows of "
                        "group i] (+ existing_out)",
                args=args,
                returns=f"[g, k, n] {out}; an empty group gives zeros (or existing_out).",
                tgmm=_tgmm_core(kernel.lhs.dtype, kernel.rhs_operand.dtype, alpha),
            )
        case Op.QUANTIZE:
            group = kernel.out_scale.block_k
            scale_dt = "uint8" if kernel.out_scale.dtype is DType.E8M0 else "float32"
            args = (Arg("lhs", "[m, k]", "(m, k)", jnp_name(kernel.lhs.dtype),
                        "the activations to quantize."),)
            return PallasPlan(
                **common,
                title="per-token-group FP8 quantization",
                summary=f"q = saturate(lhs / scale), one scale per row and {group} columns",
                args=args,
                returns=f"(q [m, k] {out}, scale [m, cdiv(k, {group})] {scale_dt}"
                        + (", e8m0 exponent bytes" if scale_dt == "uint8" else "") + ").",
                group=group,
                quant_tk=_quantize_tk(kernel),
                fp8_max=kernel.out.max_finite,
                e8m0=kernel.out_scale.dtype is DType.E8M0,
            )
        case _:
            assert_never(kernel.op)


# ---------------------------------------------------------------------------
# Render


def render(spec: ir.Spec) -> dict[PurePosixPath, str]:
    """`pallas/<kernel>.py` per Pallas kernel, plus `pallas/__init__.py`."""
    kernels = spec.kernels_for(ir.Backend.PALLAS_TPU)
    if not kernels:
        return {}
    header = header_text(spec.path)
    files: dict[PurePosixPath, str] = {}
    plans = [plan(k, spec) for k in kernels]
    for p in plans:
        files[p.path] = render_template(f"pallas/{_template(p.kernel)}", header=header, plan=p)
    files[PurePosixPath("pallas/__init__.py")] = render_template(
        "pallas/__init__.py.j2", header=header, spec_path=spec.path, plans=plans,
        jax_version=JAX_VERSION)
    return dict(sorted(files.items()))


def _template(kernel: ir.Kernel) -> str:
    match kernel.op:
        case Op.DENSE | Op.GROUPED:
            return "matmul.py.j2"
        case Op.TGMM:
            return "tgmm.py.j2"
        case Op.QUANTIZE:
            return "quantize.py.j2"
        case _:
            assert_never(kernel.op)


# ---------------------------------------------------------------------------
# Diagnose


def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """What this backend cannot emit for `kernel`, and the VMEM budget."""
    out: list[Diagnostic] = []
    name = kernel.name
    if kernel.algorithm is not ir.Algorithm.TILE:
        out.append(Diagnostic(kernel.loc, f"kernel '{name}': pallas_tpu cannot emit algorithm "
                              f"'{kernel.algorithm.value}' (a CUDA GEMV); use the tile "
                              "algorithm, whose m tile clamps to small m"))
    if kernel.op is Op.QUANTIZE:
        out.extend(_check_quantize(kernel))
    else:
        out.extend(_check_tiles(kernel))
    if kernel.stages > MAX_BUFFERS:
        out.append(Diagnostic(kernel.loc, f"kernel '{name}': stages {kernel.stages}: Mosaic "
                              f"pipelines each block with 1 or 2 buffers, so pallas_tpu "
                              f"supports stages 1 or 2"))
    out.extend(_check_vmem(kernel, spec))
    return out


def _check_quantize(kernel: ir.Kernel) -> list[Diagnostic]:
    out = []
    g = kernel.out_scale.block_k
    if kernel.out_scale.mode is not ScaleMode.TOKEN_GROUP or not g:
        out.append(Diagnostic(kernel.out_scale.loc, f"kernel '{kernel.name}': pallas_tpu "
                              "cannot emit quantize with out_scale "
                              f"'{kernel.out_scale.mode.value}' yet (per_token_group k=G only)"))
        return out
    if _quantize_tk(kernel) % LANES:
        out.append(Diagnostic(kernel.out_scale.loc, f"kernel '{kernel.name}': the K block of "
                              f"quantize ({_quantize_tk(kernel)}: tile k={kernel.tile.k} rounded "
                              f"to whole groups of {g}) must be a multiple of {LANES} lanes; "
                              f"choose a group size that divides {LANES} or is a multiple of it"))
    if kernel.tile.m % SUBLANES:
        out.append(Diagnostic(kernel.loc, f"kernel '{kernel.name}': tile m={kernel.tile.m} is "
                              f"not a multiple of {SUBLANES}, as a TPU block needs"))
    return out


def _check_tiles(kernel: ir.Kernel) -> list[Diagnostic]:
    """TPU blocks: the last dim a multiple of 128 lanes, the second-minor a
    multiple of 8 sublanes (what the Mosaic lowering demands of a block that
    is not a whole dimension; the generated code clamps a tile larger than
    its dimension to the whole dimension, which is always legal)."""
    out: list[Diagnostic] = []
    k_lanes = LANES * 2 if (kernel.lhs.packed or (kernel.rhs_operand.packed and
                                                   kernel.rhs_operand.layout is Layout.NK)) else LANES
    n_lanes = LANES * 2 if (kernel.rhs_operand.packed and kernel.rhs_operand.layout is Layout.KN) else LANES
    tiles = [(kernel.tile, kernel.loc, "tile")] + [(r.tile, r.loc, "tile_rule")
                                                     for r in kernel.tile_rules]
    for tile, loc, what in tiles:
        problems = []
        if tile.m % SUBLANES:
            problems.append(f"m={tile.m} is not a multiple of {SUBLANES}")
        if tile.n % n_lanes:
            problems.append(f"n={tile.n} is not a multiple of {n_lanes}")
        if tile.k % k_lanes:
            problems.append(f"k={tile.k} is not a multiple of {k_lanes}")
        for p in problems:
            out.append(Diagnostic(loc, f"kernel '{kernel.name}': {what} {tile}: {p}, as a TPU "
                                  "block needs (8 sublanes x 128 lanes; 4-bit data packed two "
                                  "per byte doubles the lanes)"))
    return out


def _check_vmem(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    tpu = _tpu(spec)
    vm = TPU_VMEM[tpu]
    out = []
    for tile, loc in [(kernel.tile, kernel.loc)] + [(r.tile, r.loc) for r in kernel.tile_rules]:
        blocks = vmem_blocks(kernel, tile)
        need = sum(b.bytes for b in blocks)
        if need > vm.usable:
            parts = ", ".join(f"{b.name} {b.bytes / MiB:.1f}" for b in blocks)
            out.append(Diagnostic(loc, f"kernel '{kernel.name}': tile {tile} needs "
                                  f"{need / MiB:.1f} MiB of VMEM per grid step ({parts}), over "
                                  f"the {vm.usable // MiB} MiB a kernel may use on TPU {tpu} "
                                  f"(3/4 of {vm.physical // MiB} MiB)"))
    return out
