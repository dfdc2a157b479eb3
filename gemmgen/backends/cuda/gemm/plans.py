"""The tile GEMM's plan: what gemm.cu.j2 prints, from every body's part.

`plan(kernel, spec)` decides and computes everything the .cu prints: the
Config's members and the launch contract (contract.py), the mma.sync tiles
and entry points (mma_sync.py), and the part of each other tensor-core body
the kernel has (bodies.py), with their layout as clang-format would print
it, so the emitted file is formatted as emitted. `diagnose` names what the
tile GEMM cannot emit. docs/cuda.md describes the kernel.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

from gemmgen import ir
from gemmgen.archs import shared_memory_limit
from gemmgen.backends.cuda.common import Arg, Binding, Check, cond_expr, tuned_where, where
from gemmgen.backends.cuda.gemm import contract, mma_sync, tcgen05
from gemmgen.backends.cuda.gemm.bodies import BODIES
from gemmgen.backends.cuda.gemm.body import BodyPlan
from gemmgen.backends.cuda.gemm.contract import BFeed
from gemmgen.backends.cuda.gemm.mma_sync import TileConfig
from gemmgen.backends.cuda.gemm.text import COLUMNS, Entry, Param
from gemmgen.describe import describe_kernel
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Activation, Algorithm, DType, Layout, Op

@dataclass(frozen=True, slots=True)
class GemmPlan:
    """What gemm.cu.j2 prints (the launchers get the `LaunchPlan`)."""

    kernel: ir.Kernel
    spec_path: str
    where: str
    summary: str
    spec_lines: tuple[str, ...]
    algorithm: tuple[str, ...]  # the file comment's "Algorithm" lines
    archs: tuple[str, ...]
    args: tuple[Arg, ...]  # contract order, then out
    bindings: tuple[Binding, ...]
    checks: tuple[Check, ...]
    tiles: tuple[TileConfig, ...]  # LUT rules, then the default
    grouped: bool
    # Types.
    lhs: DType
    rhs: DType
    out: DType
    compute: DType  # what the tensor cores multiply
    acc: DType  # f32, or int32 for int8 MMAs
    mma: str  # primitive name, e.g. "mma_m16n8k16_bf16"
    kstep: int  # K per MMA (16 or 32)
    rhs_nk: bool
    b_feed: BFeed
    # Scales, bias, epilogue.
    lhs_scale: ir.Scale
    rhs_scale: ir.Scale
    fold_scales: bool  # epilogue scales join the main loop's (see fold_scales())
    scale_block_k: int  # K extent of one promotion (0: no main-loop scale)
    bias: ir.Bias
    activation: Activation
    alpha: float | None
    k_align: int  # k must be a multiple of this (16-byte rows)
    n_align: int
    n_out: str  # output columns, an expression of n
    params: tuple[Param, ...]  # the GEMM entry points' parameters, launch order
    config: tuple[str, ...]  # the members of the generated `Config` struct
    entries: tuple[Entry, ...]  # fill and worklist (grouped), then one GEMM per tile
    # The other tensor-core bodies the kernel has (bodies.py), in the
    # table's order: their tiles, entry points and algorithm items.
    bodies: tuple[BodyPlan, ...] = ()

    @property
    def all_entries(self) -> tuple[Entry, ...]:
        """Every entry point the .cu defines: the mma.sync ones, then each body's."""
        return self.entries + tuple(e for b in self.bodies for e in b.entries)

    def body(self, name: str) -> BodyPlan | None:
        """The plan of the body named `name`, if the kernel has it."""
        return next((b for b in self.bodies if b.name == name), None)

    def body_tiles(self, name: str) -> tuple:
        """The tiles of the body named `name` (none when the kernel lacks it)."""
        bp = self.body(name)
        return bp.tiles if bp is not None else ()

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def summary_lines(self) -> tuple[str, ...]:
        kind = "grouped (mixture-of-experts) GEMM" if self.grouped else "dense GEMM"
        if self.kernel.masked:
            kind = "masked grouped (mixture-of-experts) GEMM"
        return tuple(textwrap.wrap(f"{self.name}: {kind} on tensor cores.", COLUMNS - len("// ")))

    @property
    def mainloop_scale(self) -> bool:
        return self.scale_block_k > 0

    def arg(self, name: str) -> Arg | None:
        for a in self.args:
            if a.name == name:
                return a
        return None

    def promoted(self, scale: ir.Scale) -> bool:
        """Whether `scale` multiplies each K block's partial sum."""
        return scale.enabled and (scale.placement is ir.Placement.MAINLOOP or self.fold_scales)

    @property
    def exact_mainloop(self) -> bool:
        """An e8m0 scale in the promotion: the per-block scale products may
        leave f32 (2^-254 .. 2^254), so they are applied as exponents when a
        thread's products are not all normal (gg::mul_scales_out_of_line)."""
        return any(self.promoted(s) and s.dtype is DType.E8M0
                   for s in (self.lhs_scale, self.rhs_scale))


def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """What the tile GEMM cannot emit for a dense / grouped kernel, and the
    shared memory each tile needs against each declared arch."""
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    out: list[Diagnostic] = []
    assert kernel.algorithm is Algorithm.TILE
    if contract.compute_dtype(kernel) is None:
        out.append(Diagnostic(kernel.rhs_operand.loc, f"kernel '{kernel.name}': cuda cannot emit lhs "
                              f"'{kernel.lhs.dtype.value}' x rhs '{kernel.rhs_operand.dtype.value}' yet: "
                              "tensor cores take bf16, f16, e4m3, e5m2 or int8 on both sides "
                              "(a narrower rhs is widened exactly); f32 has no path"))
        return out
    # fp4 x fp4 and W4A8 (FP8 x fp4); a 16-bit lhs times fp4 weights is
    # weight-only, widened on the mma.sync body like int4.
    if DType.FP4 in (kernel.lhs.dtype, kernel.rhs_operand.dtype) and kernel.lhs.dtype in (
            DType.FP4, DType.E4M3, DType.E5M2):
        out += _fp4_problems(kernel, spec)
        if out:
            return out
    if kernel.stages < 2:
        out.append(Diagnostic(kernel.at("stages"), f"kernel '{kernel.name}': the cuda tile GEMM "
                              "pipelines with cp.async and needs stages >= 2"))
    target = spec.target(ir.Backend.CUDA)
    archs = target.cuda_archs if target else ()
    for rule_tile, loc in tiles_with_loc(kernel):
        problem = mma_sync.tile_problem(kernel, rule_tile)
        if problem:  # of the tile with its warp tile and threads
            out.append(Diagnostic(loc, f"kernel '{kernel.name}': cuda: {problem}",
                                  related=(kernel.at("warp_tile"), kernel.at("threads"))))
    if out:
        return out
    # A cluster_n on an m=256 entry the sm_100a body keeps on the 1-CTA tile.
    sm100 = [a for a in archs if a in ir.TCGEN05_ARCHS]
    if sm100 and kernel.uses_tcgen05(sm100[0]):
        for rule_tile, loc in tiles_with_loc(kernel):
            if rule_tile.cluster_n > 1 and (why := tcgen05.pair_entry_obstacle(kernel, rule_tile)):
                at = rule_tile.cluster_at if rule_tile.cluster_at != ir.NO_LOC else loc
                out.append(Diagnostic(at, f"kernel '{kernel.name}': cluster_n="
                                      f"{rule_tile.cluster_n} clusters CTA pairs, but this "
                                      f"m={rule_tile.m} entry keeps the 1-CTA tile on sm_100a: "
                                      f"{why}; drop cluster_n",
                                      width=len(str(rule_tile.cluster_n))))
        if out:
            return out
    p = plan(kernel, spec)
    locs = [loc for _, loc in tiles_with_loc(kernel)]  # at each tile line of the LUT
    for t in p.tiles:
        for arch in archs:
            if t.smem_bytes > shared_memory_limit(arch):
                out.append(Diagnostic(locs[t.index], f"kernel '{kernel.name}': tile "
                                      f"{t.bm}x{t.bn}x{t.bk} needs {t.smem_bytes} bytes of shared "
                                      f"memory, over the {shared_memory_limit(arch)} that {arch} allows; "
                                      "use a smaller tile or fewer stages"))
    return out


def _fp4_problems(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """fp4 x fp4 and W4A8 (e4m3 x fp4) multiply on block-scaled MMAs alone
    (no mma.sync form takes e2m1, and the mma.sync body does not widen fp4
    weights for FP8 activations): the block-scaled mma.sync of sm_120a /
    sm_121a and the block-scaled tcgen05.mma of sm_100a / sm_103a
    (ir.Kernel.tcgen05_block_scaled). The kernel must qualify for
    those bodies and every declared arch must have one of them."""
    target = spec.target(ir.Backend.CUDA)
    archs = target.cuda_archs if target else ()
    what = (f"{kernel.lhs.dtype.value} x {kernel.rhs_operand.dtype.value}"
            + (" (W4A8)" if kernel.lhs.dtype is not DType.FP4 else ""))
    where = ("the block-scaled MMAs of sm_120a / sm_121a (mma.sync) and sm_100a / sm_103a "
             "(tcgen05)")
    obstacle = kernel.mx_mma_obstacle()
    if obstacle is not None:
        return [Diagnostic(kernel.lhs.loc, f"kernel '{kernel.name}': cuda multiplies {what} "
                           f"on {where} only, and "
                           f"{obstacle.replace('it ', 'that body ', 1)}")]
    if kernel.mma not in (ir.Mma.AUTO, ir.Mma.TCGEN05):
        return [Diagnostic(kernel.lhs.loc, f"kernel '{kernel.name}': {what} has no "
                           f"'{kernel.mma.value}' body: it multiplies on {where} (mma auto)")]
    others = [a for a in archs if not (a in ir.MX_MMA_ARCHS or kernel.uses_tcgen05(a))]
    if others:
        why = ""
        if any(a in ir.TCGEN05_ARCHS for a in others) and kernel.tcgen05_obstacle() is not None:
            why = f"; on sm_100a / sm_103a: {kernel.tcgen05_obstacle()}"
        return [Diagnostic(kernel.lhs.loc, f"kernel '{kernel.name}': cuda multiplies {what} "
                           f"on {where} only; the cuda target declares {', '.join(others)} too "
                           f"(declare only those, or drop the cuda backend for this "
                           f"kernel){why}")]
    return []


def tiles_with_loc(kernel: ir.Kernel) -> list[tuple[ir.Tile, ir.Loc]]:
    """The LUT's tiles in plan order (the rules, then the default tile), each
    with its position for a diagnostic (`ir.Kernel.lut`)."""
    default, *rules = kernel.lut()
    return [(t, loc) for t, loc, _ in rules] + [(default[0], default[1])]


def plan(kernel: ir.Kernel, spec: ir.Spec) -> GemmPlan:
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    assert kernel.op in (Op.DENSE, Op.GROUPED)
    compute = contract.compute_dtype(kernel)
    assert compute is not None
    target = spec.target(ir.Backend.CUDA)
    tiles = []
    rules = list(kernel.tile_rules)
    for i, rule in enumerate(rules):
        tiles.append(mma_sync.tile_config(kernel, rule.tile, i, f"{kernel.name}_t{i}",
                                          cond_expr(rule.conds, kernel.masked),
                                          tuned_where(rule), compute))
    default_entry = f"{kernel.name}_t{len(rules)}" if rules else kernel.name
    tiles.append(mma_sync.tile_config(kernel, kernel.tile, len(rules), default_entry, "",
                                      where(kernel.tile_loc), compute))
    args, binds = contract.args(kernel)
    k_align, n_align = contract.alignments(kernel, compute)
    mainloop = [s for s in (kernel.lhs_scale, kernel.rhs_scale)
                if s.enabled and s.placement is ir.Placement.MAINLOOP]
    # Promote at the gcd of the scale blocks so no partial sum straddles a
    # block of either side (the tile's K divides both: validated).
    block_k = 0
    for sc in mainloop:
        block_k = math.gcd(block_k, sc.block_k)
    b_feed = mma_sync.b_feed(kernel, compute)
    params = mma_sync.params(kernel)
    lut = tuple(r.tile for r in rules) + (kernel.tile,)
    algorithm = mma_sync.algorithm(kernel, tiles, compute, b_feed, block_k)
    bodies: list[BodyPlan] = []
    for body in BODIES:
        if body.applies(kernel, spec):
            bodies.append(body.plan(kernel, spec, tuple(tiles), lut, 5 + len(bodies)))
            algorithm += bodies[-1].algorithm
    return GemmPlan(
        kernel=kernel, spec_path=spec.path, where=where(kernel.loc),
        summary=describe_kernel(kernel),
        spec_lines=contract.spec_lines(kernel),
        algorithm=algorithm,
        archs=target.cuda_archs if target else (),
        args=args, bindings=binds, checks=contract.checks(kernel, k_align, n_align),
        tiles=tuple(tiles), grouped=kernel.op is Op.GROUPED,
        lhs=kernel.lhs.dtype, rhs=kernel.rhs_operand.dtype, out=kernel.out,
        compute=compute, acc=DType.INT32 if compute is DType.INT8 else DType.F32,
        mma=mma_sync.MMA[compute], kstep=mma_sync.kstep(compute),
        rhs_nk=kernel.rhs_operand.layout is Layout.NK, b_feed=b_feed,
        lhs_scale=kernel.lhs_scale, rhs_scale=kernel.rhs_scale,
        fold_scales=contract.fold_scales(kernel), scale_block_k=block_k, bias=kernel.bias,
        activation=kernel.epilogue.activation, alpha=kernel.epilogue.alpha,
        k_align=k_align, n_align=n_align,
        n_out="gg_div(n, 2)" if kernel.epilogue.activation.paired else "n",
        params=params, config=contract.config(kernel, compute, b_feed, block_k),
        entries=mma_sync.entries(kernel, tiles, params),
        bodies=tuple(bodies),
    )
