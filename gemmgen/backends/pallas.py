"""Pallas TPU backend: megablox-style kernels, one self-launching module each.

`plan(kernel, spec)` does all the arithmetic (tiles of the LUT, VMEM bytes
per grid step, the scoped-VMEM limit to request, dtype decisions);
`render(spec)` prints plans through the Jinja templates in
`templates/pallas/`; `diagnose(kernel, spec)` names what this backend cannot
emit and checks the VMEM budget of the declared TPU generation. All three are
pure. docs/pallas.md explains the design decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import assert_never

from gemmgen import ir
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Activation, BiasMode, DType, Layout, Op, ScaleMode
from gemmgen.render import header_text, render_template

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
    shape: str  # "[m, k]"
    dtype: str  # jnp name of the storage dtype
    doc: str
    optional: bool = False


@dataclass(frozen=True, slots=True)
class VmemBlock:
    """One pipelined VMEM buffer of a grid step, for the VMEM accounting."""

    name: str
    shape: tuple[int, ...]
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
    summary: str  # one line: what the function computes
    spec_lines: tuple[str, ...]  # the spec restated for the module docstring
    args: tuple[Arg, ...]
    returns: str
    # Dtypes (jnp names).
    lhs_dtype: str
    rhs_dtype: str
    out_dtype: str
    mxu_dtype: str
    acc_dtype: str
    highest: bool  # f32 products: pass precision=HIGHEST to the dot
    rhs_nk: bool
    # Tiling and pipelining.
    tiles: tuple[TileRow, ...]  # the LUT rules, then the default (cond "")
    buffers: int
    vmem_bytes: int  # the largest over the LUT
    vmem_limit_bytes: int | None  # passed to Mosaic when over the scoped default
    tpu: str
    vmem: TpuVmem
    static_n: int | None
    static_k: int | None
    jax_version: str = JAX_VERSION

    @property
    def rules(self) -> tuple[TileRow, ...]:
        return self.tiles[:-1]

    @property
    def default_tile(self) -> TileRow:
        return self.tiles[-1]

    @property
    def grouped(self) -> bool:
        return self.op == "grouped"


def _where(loc: ir.Loc) -> str:
    return f"{loc.path}:{loc.line}" if loc.line > 0 else loc.path


def _tpu(spec: ir.Spec) -> str:
    target = spec.target(ir.Backend.PALLAS_TPU)
    return target.tpu if target is not None else "v5e"


def vmem_blocks(kernel: ir.Kernel, tile: ir.Tile) -> tuple[VmemBlock, ...]:
    """Every VMEM buffer one grid step holds with `tile` (worst case: every
    optional input present)."""
    tm, tn, tk = tile.m, tile.n, tile.k
    bufs = min(kernel.stages, MAX_BUFFERS)
    assert kernel.rhs is not None
    lhs_b = storage_bytes(kernel.lhs.dtype)
    rhs_b = storage_bytes(kernel.rhs.dtype)
    lhs_k = tk // 2 if kernel.lhs.packed else tk
    out_b = storage_bytes(kernel.out)
    blocks = [VmemBlock("lhs", (tm, lhs_k), lhs_b, bufs)]
    match kernel.op:
        case Op.DENSE | Op.GROUPED:
            if kernel.rhs.layout is Layout.NK:
                rhs_shape = (tn, tk // 2 if kernel.rhs.packed else tk)
            else:
                rhs_shape = (tk, tn // 2 if kernel.rhs.packed else tn)
            blocks.append(VmemBlock("rhs", rhs_shape, rhs_b, bufs))
            blocks.append(VmemBlock("out", (tm, tn), out_b, bufs))
            blocks.append(VmemBlock("acc", (tm, tn), 4, 1))
        case Op.TGMM:
            blocks.append(VmemBlock("rhs", (tm, tn), rhs_b, bufs))
            blocks.append(VmemBlock("out", (tk, tn), out_b, bufs))
            blocks.append(VmemBlock("acc", (tk, tn), 4, 1))
        case Op.QUANTIZE:
            raise AssertionError("quantize has no rhs")
        case _:
            assert_never(kernel.op)
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


def _rhs_shape(kernel: ir.Kernel) -> str:
    assert kernel.rhs is not None
    nk = kernel.rhs.layout is Layout.NK
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


def _spec_lines(kernel: ir.Kernel, tiles: tuple[TileRow, ...], tpu: str, buffers: int,
                need: int) -> tuple[str, ...]:
    lines = [f"op       {kernel.op.value}"]
    lines.append(f"lhs      {kernel.lhs.dtype.value}{' packed' if kernel.lhs.packed else ''} [m, k]")
    if kernel.rhs is not None:
        packed = " packed" if kernel.rhs.packed else ""
        lines.append(f"rhs      {kernel.rhs.dtype.value}{packed} {_rhs_shape(kernel)}")
    lines.append(f"out      {kernel.out.value}, {kernel.acc.value} accumulator")
    default = tiles[-1]
    lines.append(f"tile     m={default.m} n={default.n} k={default.k}")
    for row in tiles[:-1]:
        lines.append(f"  when {row.cond}: m={row.m} n={row.n} k={row.k}")
    vm = TPU_VMEM[tpu]
    lines.append(f"buffers  {buffers} per pipelined block")
    lines.append(f"vmem     {need / MiB:.2f} MiB per grid step (TPU {tpu}: "
                 f"{vm.scoped_default // MiB} MiB scoped default, {vm.physical // MiB} MiB "
                 "physical)")
    return tuple(lines)


def _matmul_args(kernel: ir.Kernel) -> tuple[tuple[Arg, ...], str, str]:
    assert kernel.rhs is not None
    lhs = Arg("lhs", "[m, k]", jnp_name(kernel.lhs.dtype), "the activations.")
    out = jnp_name(kernel.out)
    if kernel.op is Op.DENSE:
        rhs = Arg("rhs", _rhs_shape(kernel), jnp_name(kernel.rhs.dtype), "the weights.")
        return ((lhs, rhs), f"[m, n] {out}.",
                "out = lhs @ rhs" + ("ᵀ" if kernel.rhs.layout is Layout.NK else ""))
    rhs = Arg("rhs", _rhs_shape(kernel), jnp_name(kernel.rhs.dtype),
              "the weights of the g groups this shard owns (g = rhs.shape[0]).")
    sizes = Arg("group_sizes", "[num_groups]", "int32",
                "rows of lhs per group, in order (sum <= m); num_groups >= g.")
    offset = Arg("group_offset", "[]", "int32",
                 "the first group this shard owns (default 0): it computes groups "
                 "[group_offset, group_offset + g).", optional=True)
    existing = Arg("existing_out", "[m, n]", out,
                   "rows this shard does not compute keep these values (default: zeros).",
                   optional=True)
    t = "ᵀ" if kernel.rhs.layout is Layout.NK else ""
    return ((lhs, rhs, sizes, offset, existing),
            f"[m, n] {out}: for each owned group i, its rows are lhs[rows] @ "
            f"rhs[i - group_offset]{t}; all other rows are zero, or existing_out's.",
            f"out[rows of group i] = lhs[rows of group i] @ rhs[i - group_offset]{t}")


def plan(kernel: ir.Kernel, spec: ir.Spec) -> PallasPlan:
    """Everything the templates print, computed once (no I/O)."""
    tpu = _tpu(spec)
    vm = TPU_VMEM[tpu]
    tiles = _tile_rows(kernel)
    need = max(t.vmem_bytes for t in tiles)
    buffers = min(kernel.stages, MAX_BUFFERS)
    assert kernel.rhs is not None, "quantize plans land with phase 2"
    args, returns, summary = _matmul_args(kernel)
    mxu = mxu_dtype(kernel.lhs.dtype, kernel.rhs.dtype)
    acc = DType.INT32 if mxu is DType.INT8 else DType.F32
    return PallasPlan(
        kernel=kernel,
        path=PurePosixPath("pallas") / f"{kernel.name}.py",
        spec_path=spec.path,
        where=_where(kernel.loc),
        op=kernel.op.value,
        summary=summary,
        spec_lines=_spec_lines(kernel, tiles, tpu, buffers, need),
        args=args,
        returns=returns,
        lhs_dtype=jnp_name(kernel.lhs.dtype),
        rhs_dtype=jnp_name(kernel.rhs.dtype),
        out_dtype=jnp_name(kernel.out),
        mxu_dtype=jnp_name(mxu),
        acc_dtype=jnp_name(acc),
        highest=mxu is DType.F32,
        rhs_nk=kernel.rhs.layout is Layout.NK,
        tiles=tiles,
        buffers=buffers,
        vmem_bytes=need,
        vmem_limit_bytes=vmem_limit(need, vm),
        tpu=tpu,
        vmem=vm,
        static_n=kernel.static_n,
        static_k=kernel.static_k,
    )


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


def _not_yet(loc: ir.Loc, kernel: ir.Kernel, what: str) -> Diagnostic:
    return Diagnostic(loc, f"kernel '{kernel.name}': pallas_tpu cannot emit {what} yet")


def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """What this backend cannot emit for `kernel`, and the VMEM budget."""
    out: list[Diagnostic] = []
    name = kernel.name
    if kernel.op is not Op.DENSE and kernel.op is not Op.GROUPED:
        out.append(_not_yet(kernel.loc, kernel, f"op '{kernel.op.value}'"))
        return out
    assert kernel.rhs is not None
    for side, operand in (("lhs", kernel.lhs), ("rhs", kernel.rhs)):
        if operand.dtype not in (DType.F32, DType.BF16):
            out.append(_not_yet(operand.loc, kernel, f"{side} dtype '{operand.dtype.value}'"))
    for side, scale in (("lhs_scale", kernel.lhs_scale), ("rhs_scale", kernel.rhs_scale)):
        if scale.enabled:
            out.append(_not_yet(scale.loc, kernel, f"{side} '{scale.mode.value}'"))
    if kernel.bias.mode is not BiasMode.NONE:
        out.append(_not_yet(kernel.bias.loc, kernel, "a bias"))
    if kernel.epilogue.activation is not Activation.NONE:
        out.append(_not_yet(kernel.epilogue.loc, kernel,
                            f"epilogue '{kernel.epilogue.activation.value}'"))
    if kernel.epilogue.alpha is not None:
        out.append(_not_yet(kernel.epilogue.loc, kernel, "epilogue alpha"))
    if kernel.out not in (DType.F32, DType.BF16):
        out.append(_not_yet(kernel.loc, kernel, f"out dtype '{kernel.out.value}'"))
    out.extend(_check_tiles(kernel))
    if kernel.stages > MAX_BUFFERS:
        out.append(Diagnostic(kernel.loc, f"kernel '{name}': stages {kernel.stages}: Mosaic "
                              f"pipelines each block with 1 or 2 buffers, so pallas_tpu "
                              f"supports stages 1 or 2"))
    out.extend(_check_vmem(kernel, spec))
    return out


def _check_tiles(kernel: ir.Kernel) -> list[Diagnostic]:
    """TPU blocks: the last dim a multiple of 128 lanes, the second-minor a
    multiple of 8 sublanes (what the Mosaic lowering demands of a block that
    is not a whole dimension; the generated code clamps a tile larger than
    its dimension to the whole dimension, which is always legal)."""
    out: list[Diagnostic] = []
    assert kernel.rhs is not None
    k_lanes = LANES * 2 if (kernel.lhs.packed or (kernel.rhs.packed and
                                                   kernel.rhs.layout is Layout.NK)) else LANES
    n_lanes = LANES * 2 if (kernel.rhs.packed and kernel.rhs.layout is Layout.KN) else LANES
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
