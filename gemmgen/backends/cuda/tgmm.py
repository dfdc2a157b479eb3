"""CUDA tgmm (ragged K, the MoE backward pass for d rhs) on tensor cores: the plan.

    out[i - group_offset] = existing_out[i - group_offset]
                            + alpha * lhs[rows of group i]ᵀ · rhs[rows of group i]

    lhs [m, k] bf16/f16, rhs [m, n] (the output gradient, same type),
    group_sizes int32 [num_groups], out [g, k, n] f32/bf16/f16.

`plan(kernel, spec)` does every piece of arithmetic for `tgmm.cu.j2`: the
warp layout, fragment counts, shared-memory strides and bytes per stage, the
grid, the alignment rules and the argument list; `launch_plan` wraps it in
the `LaunchPlan` the generic launcher templates print. docs/cuda-tgmm.md
describes the kernel and its decisions.

NB: the spec's tile reads as a GEMM over the output [k, n] with the group's
rows as the contraction: tile m = output rows (k indices) per block, tile
n = output columns, tile k = rows of lhs / rhs per pipeline stage (the
contraction step, a multiple of the MMA's 16). The Pallas backend reads
tile m as its row chunk instead (megablox's tm); see docs/cuda-tgmm.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from gemmgen import ir
from gemmgen.archs import shared_memory_limit
from gemmgen.backends.cuda.args import CTYPE, Arg, Binding, Check, Role, spec_checks
from gemmgen.backends.cuda.expr import Expr, all_of, cdiv, var
from gemmgen.backends.cuda.launch import LIMITS, WARP, Grid, LaunchPlan, Step, Variant, array, i32, where
from gemmgen.backends.cuda.layout import Param, cpp_signature
from gemmgen.describe import describe_kernel
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import DType, Op

MMA_K = 16  # m16n8k16: rows of the contraction per MMA
COPY_BYTES = 16  # one cp.async
_MMA = {DType.BF16: "mma_m16n8k16_bf16", DType.F16: "mma_m16n8k16_f16"}


@dataclass(frozen=True, slots=True)
class TgmmPlan:
    """What tgmm.cu.j2 prints (the launchers get the `LaunchPlan`)."""

    kernel: ir.Kernel
    spec_path: str
    where: str
    spec_lines: tuple[str, ...]
    entry: str
    # Types.
    operand: DType  # lhs and rhs (the tensor-core type)
    out: DType
    mma: str  # primitive name, e.g. "mma_m16n8k16_bf16"
    alpha: float | None
    # The header comment's words for the sum and the epilogue.
    formula: str
    epilogue_steps: str
    # Block tile: output [tile_k, tile_n] of one group, tile_rows rows of
    # lhs / rhs per pipeline stage.
    tile_k: int
    tile_n: int
    tile_rows: int
    warp_k: int  # output rows (k) per warp
    warp_n: int
    warps_k: int
    warps_n: int
    stages: int
    mi: int  # 16-row MMA fragments per warp (along k)
    ni: int  # 8-column MMA fragments per warp (along n)
    ksteps: int  # MMAs along the rows per stage
    elems_per_copy: int  # operand elements per 16-byte copy
    a_chunks_per_row: int  # 16-byte copies per staged lhs row
    b_chunks_per_row: int
    a_stride: int  # bytes per staged lhs row (padded by 16)
    a_stage_bytes: int
    b_stride: int
    b_stage_bytes: int
    smem_bytes: int
    k_align: int  # k and n multiples that keep 16-byte copies aligned
    n_align: int
    threads: int
    # (k tiles, n tiles, local groups). The launchers reject n and g past
    # CUDA's 65535 limit of grid y and z (docs/cuda.md, "Launch limits").
    grid: Grid
    params: tuple[Param, ...]  # the entry point's, in the launch step's order
    entry_signature: str  # its head, laid out

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def operand_ctype(self) -> str:
        return CTYPE[self.operand]

    @property
    def out_ctype(self) -> str:
        return CTYPE[self.out]

    @property
    def out_name(self) -> str:
        return self.out.value


# ---------------------------------------------------------------------------
# Diagnose


def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """What the CUDA tgmm cannot emit, and its shared memory against each arch."""
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    assert kernel.op is Op.TGMM
    out: list[Diagnostic] = []
    lhs, rhs = kernel.lhs.dtype, kernel.rhs_operand.dtype
    if lhs not in _MMA or rhs is not lhs:
        out.append(Diagnostic(kernel.rhs_operand.loc, f"kernel '{kernel.name}': cuda cannot emit tgmm "
                              f"with lhs '{lhs.value}' x rhs '{rhs.value}' yet: the tensor-core "
                              "tgmm takes bf16 x bf16 or f16 x f16"))
    if kernel.stages < 2:
        out.append(Diagnostic(kernel.at("stages"), f"kernel '{kernel.name}': the cuda tgmm "
                              "pipelines with cp.async and needs stages >= 2"))
    if kernel.stages > 9:
        out.append(Diagnostic(kernel.at("stages"), f"kernel '{kernel.name}': cuda: stages "
                              f"{kernel.stages} is more than cp.async.wait_group can track "
                              "(at most 9)"))
    tile_at = kernel.lut()[0][1]  # tgmm has one tile, no rules
    problem = _tile_problem(kernel)
    if problem:
        out.append(Diagnostic(tile_at, f"kernel '{kernel.name}': cuda: {problem}",
                              related=(kernel.at("warp_tile"), kernel.at("threads"))))
    if out:
        return out
    p = plan(kernel, spec)
    target = spec.target(ir.Backend.CUDA)
    for arch in target.cuda_archs if target else ():
        limit = shared_memory_limit(arch)
        if p.smem_bytes > limit:
            out.append(Diagnostic(tile_at, f"kernel '{kernel.name}': tile {kernel.tile} needs "
                                  f"{p.smem_bytes} bytes of shared memory, over the {limit} "
                                  f"that {arch} allows; use a smaller tile or fewer stages"))
    return out


def _warp_tile(kernel: ir.Kernel) -> tuple[int, int]:
    """(output rows, output columns) per warp: the spec's warp tile, or 64 x 32
    where the block tile allows."""
    if kernel.warp_tile is not None:
        return kernel.warp_tile.m, kernel.warp_tile.n
    t = kernel.tile
    wk = 64 if t.k % 64 == 0 else (32 if t.k % 32 == 0 else 16)
    wn = 32 if t.n % 32 == 0 else 16
    return wk, wn


def _tile_problem(kernel: ir.Kernel) -> str | None:
    t = kernel.tile
    if t.m % MMA_K:
        return (f"tile m={t.m} (rows of lhs per pipeline stage: the tgmm contraction) must be a "
                f"multiple of {MMA_K}, one MMA")
    if t.k % 16 or t.n % 16:
        return f"tile k={t.k} n={t.n} (the output block, k x n) must be multiples of 16"
    wk, wn = _warp_tile(kernel)
    if wk % 16 or wn % 16 or t.k % wk or t.n % wn:
        return f"warp tile {wk}x{wn} must be a multiple of 16 and divide the tile k x n {t.k}x{t.n}"
    warps = (t.k // wk) * (t.n // wn)
    if warps * WARP > 1024:
        return f"tile k x n {t.k}x{t.n} with warp tile {wk}x{wn} needs {warps} warps (> 32)"
    if kernel.threads is not None and kernel.threads != warps * WARP:
        return f"threads {kernel.threads} disagrees with {warps} warps of the {wk}x{wn} warp tile"
    return None


# ---------------------------------------------------------------------------
# Plan


def plan(kernel: ir.Kernel, spec: ir.Spec) -> TgmmPlan:
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    assert kernel.op is Op.TGMM
    operand = kernel.lhs.dtype
    assert operand in _MMA and kernel.rhs_operand.dtype is operand, "diagnose() rejects other types"
    t = kernel.tile
    es = operand.bits // 8
    wk, wn = _warp_tile(kernel)
    # Shared-memory rows are padded by 16 bytes, so the eight rows one
    # ldmatrix reads start in different banks.
    # Tile dims are named after the problem dims: the output block is
    # tile.k x tile.n, and each pipeline stage holds tile.m rows of lhs and rhs
    # (the contraction runs over m).
    a_stride = t.k * es + COPY_BYTES
    b_stride = t.n * es + COPY_BYTES
    a_stage = t.m * a_stride
    b_stage = t.m * b_stride
    alpha = kernel.epilogue.alpha
    threads = (t.k // wk) * (t.n // wn) * WARP
    params = _params()
    return TgmmPlan(
        kernel=kernel, spec_path=spec.path, where=where(kernel.loc),
        spec_lines=_spec_lines(kernel), entry=kernel.name,
        operand=operand, out=kernel.out, mma=_MMA[operand], alpha=alpha,
        formula=("" if alpha is None else f"{alpha} * ")
        + "lhs[rows of group i]ᵀ · rhs[rows of group i] (+ existing_out)",
        epilogue_steps=("" if alpha is None else "alpha and ") + "existing_out added in f32",
        tile_k=t.k, tile_n=t.n, tile_rows=t.m, warp_k=wk, warp_n=wn,
        warps_k=t.k // wk, warps_n=t.n // wn, stages=kernel.stages,
        mi=wk // 16, ni=wn // 8, ksteps=t.m // MMA_K,
        elems_per_copy=COPY_BYTES // es,
        a_chunks_per_row=t.k * es // COPY_BYTES, b_chunks_per_row=t.n * es // COPY_BYTES,
        a_stride=a_stride, a_stage_bytes=a_stage, b_stride=b_stride, b_stage_bytes=b_stage,
        # The epilogue stores from registers: the pipeline is all the block needs.
        smem_bytes=kernel.stages * (a_stage + b_stage),
        k_align=COPY_BYTES // es, n_align=COPY_BYTES // es, threads=threads,
        grid=Grid(cdiv(var("k"), t.k), cdiv(var("n"), t.n), var("g")),
        params=params,
        entry_signature=cpp_signature(f'extern "C" __global__ void __launch_bounds__({threads})',
                                      kernel.name, params,
                                      "the launch contract's arrays, then the dims"),
    )


def _params() -> tuple[Param, ...]:
    """The entry point's parameters (in_t and out_t are the .cu's aliases of
    the operand and output types); the launch step passes the same names."""
    in_t, out_t = "const in_t* __restrict__", "out_t* __restrict__"
    return (Param(in_t, "lhs"), Param(in_t, "rhs"), Param("const int* __restrict__", "group_sizes"),
            Param("const out_t* __restrict__", "existing_out"), Param(out_t, "out"),
            Param("int", "m"), Param("int", "n"), Param("int", "k"), Param("int", "num_groups"),
            Param("int", "group_offset"))


def _spec_lines(kernel: ir.Kernel) -> tuple[str, ...]:
    """The spec restated for the comment block at the top of each file."""
    t = kernel.tile
    lines = ["op        tgmm",
             f"lhs       {kernel.lhs.dtype.value} [m, k]",
             f"rhs       {kernel.rhs_operand.dtype.value} [m, n] (the output gradient)",
             f"out       {kernel.out.value} [g, k, n] (accumulator {kernel.acc.value})"]
    if kernel.epilogue.alpha is not None:
        lines.append(f"epilogue  alpha={kernel.epilogue.alpha!r}")
    lines.append(f"tile      m={t.m} n={t.n} k={t.k}, {kernel.stages} stages "
                 f"(out block {t.k} k x {t.n} n, {t.m} rows of m per stage)")
    if kernel.warp_tile is not None:
        lines.append(f"warp_tile m={kernel.warp_tile.m} n={kernel.warp_tile.n}")
    if kernel.static_n or kernel.static_k:
        lines.append("dims     " + (f" n={kernel.static_n}" if kernel.static_n else "")
                     + (f" k={kernel.static_k}" if kernel.static_k else ""))
    return tuple(lines)


# ---------------------------------------------------------------------------
# Launch plan


def _args(kernel: ir.Kernel) -> tuple[tuple[Arg, ...], tuple[Binding, ...]]:
    """The launcher arguments in contract order (docs/cuda.md, launchers), then out."""
    pair = 2 * kernel.out.bits // 8  # the epilogue stores column pairs
    m, n, k, g = var("m"), var("n"), var("k"), var("g")
    args = (
        Arg(name="lhs", role=Role.IN, dtype=kernel.lhs.dtype, shape=(m, k),
            doc="the activations, rows sorted by group", align=COPY_BYTES),
        Arg(name="rhs", role=Role.IN, dtype=kernel.rhs_operand.dtype, shape=(m, n),
            doc="the output gradient, rows aligned with lhs", align=COPY_BYTES),
        Arg(name="group_sizes", role=Role.IN, dtype=DType.INT32, shape=(var("num_groups"),),
            doc="rows of lhs / rhs per group, in order (sum <= m)", align=4),
        Arg(name="group_offset", role=Role.SCALAR, dtype=DType.INT32, shape=(),
            doc="the first group this shard owns (default 0)", optional=True),
        Arg(name="existing_out", role=Role.IN, dtype=kernel.out, shape=(g, k, n),
            doc="added to every local group's block; its leading dim is g", optional=True,
            align=pair),
        Arg(name="out", role=Role.OUT, dtype=kernel.out, shape=(g, k, n),
            doc="per local group i, alpha * lhs[rows]ᵀ · rhs[rows] (+ existing_out); "
            "an empty group gives zeros (or existing_out)", align=pair),
    )
    binds = (
        Binding(dim="m", arg="lhs", axis=0), Binding(dim="k", arg="lhs", axis=1),
        Binding(dim="n", arg="rhs", axis=1),
        Binding(dim="num_groups", arg="group_sizes", axis=0),
        # NB: as in the reference, the number of local groups is
        # existing_out's leading dim when it is given, else every group from
        # group_offset on.
        Binding(dim="g", arg="existing_out", axis=0,
                fallback=var("num_groups") - var("group_offset")),
    )
    return args, binds


def _fits_int32(*names: str) -> Expr:
    return all_of(*(var(d).lt(2147483647) for d in names))


def _checks(kernel: ir.Kernel, p: TgmmPlan) -> tuple[Check, ...]:
    m, n, k, g = var("m"), var("n"), var("k"), var("g")
    offset = var("group_offset")
    checks = [Check(all_of(m.ge(0), n.gt(0), k.gt(0)), "m must be >= 0 and n, k positive"),
              Check((k % p.k_align).eq(0),
                    f"k must be a multiple of {p.k_align}: lhs rows are read in 16-byte copies"),
              Check((n % p.n_align).eq(0),
                    f"n must be a multiple of {p.n_align}: rhs rows are read in 16-byte copies")]
    checks += spec_checks(kernel)
    checks += [
        # NB: any group_offset is defined (docs/semantics.md, "tgmm"): local
        # groups that group_sizes lacks are empty. Only g, an output shape,
        # must be >= 0: without existing_out it is num_groups - group_offset.
        Check(g.ge(0),
              "no local groups: g = num_groups - group_offset is negative (group_offset is "
              "past the end of group_sizes); give existing_out, whose leading dim is g"),
        Check(all_of(offset.ge(-2147483648), offset.le(2147483647)),
              "group_offset must fit in int32"),
        # Grid y and z (docs/cuda.md, "Launch limits"): a clearer message than
        # the launchers' generic check, which would catch these too.
        Check(g.le(LIMITS.grid_yz),
              f"at most {LIMITS.grid_yz} local groups: grid z = g is limited to {LIMITS.grid_yz}"),
        Check(p.grid.y.le(LIMITS.grid_yz),
              f"n must be at most {LIMITS.grid_yz * p.tile_n}: grid y = cdiv(n, {p.tile_n}) is "
              f"limited to {LIMITS.grid_yz}"),
        Check(_fits_int32("m", "n", "k"), "dims must fit in int32"),
    ]
    return tuple(checks)


def launch_plan(kernel: ir.Kernel, spec: ir.Spec) -> LaunchPlan:
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    p = plan(kernel, spec)
    args, binds = _args(kernel)
    t = kernel.tile
    step = Step(entry=p.entry, grid=p.grid, block=p.threads, smem=p.smem_bytes,
                args=tuple(array(q.name) if q.type.endswith("__restrict__") else i32(var(q.name))
                           for q in p.params),
                comment=f"{p.tile_k}x{p.tile_n} blocks of out per local group, "
                f"{p.tile_rows} rows per stage")
    target = spec.target(ir.Backend.CUDA)
    return LaunchPlan(
        kernel=kernel, template="cuda/tgmm.cu.j2", detail=p, spec_path=spec.path,
        where=p.where, summary=describe_kernel(kernel), spec_lines=p.spec_lines,
        archs=target.cuda_archs if target else (), args=args, bindings=binds, derived=(),
        checks=_checks(kernel, p),
        variants=(Variant(index=0, when=None, where=p.where, label=str(t), steps=(step,)),),
        entries=(p.entry,), empty=var("g").eq(0),
    )
