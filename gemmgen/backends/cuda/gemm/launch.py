"""The tile GEMM's LaunchPlan: per LUT entry the mma.sync launches, and the
`Path` of each other body the kernel has, which the launchers take instead
on its device (the generic launcher templates print them all)."""

from __future__ import annotations

from gemmgen import ir
from gemmgen.backends.cuda.common import LaunchPlan, Path, Step, Variant, lut_groups, var
from gemmgen.backends.cuda.gemm import masked as cuda_masked
from gemmgen.backends.cuda.gemm.contract import fill_step, worklist_ints, worklist_step
from gemmgen.backends.cuda.gemm.plans import plan


def launch_plan(kernel: ir.Kernel, spec: ir.Spec) -> LaunchPlan:
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    p = plan(kernel, spec)
    name = kernel.name
    worklist = p.grouped and not kernel.masked
    variants = []
    for t in p.tiles:
        rows = "work items" if p.grouped else "m tiles"
        if kernel.masked:
            rows = "(group, m tile) pairs"
        gemm = Step(t.entry, (t.grid_x, t.grid_y, t.grid_z), t.threads, t.smem_bytes,
                    tuple(prm.launch for prm in p.params),
                    f"{t.bm}x{t.bn_out} output tiles: n tiles, {rows} over y and z")
        steps: list[Step] = []
        if worklist:
            steps += [fill_step(name), worklist_step(name, t.bm, "the (group, m tile) work items")]
        steps.append(gemm)
        paths: list[Path] = []
        bms = [t.bm]
        for bp in p.bodies:
            b = bp.body
            bl = b.launch(kernel, bp, t, tuple(steps))
            paths.append(Path(b.name, b.title, b.arch, b.cc, b.what, bl.label, bl.when, bl.steps))
            if bl.worklist_bm is not None:
                bms.append(bl.worklist_bm)
        # The worklist of the smallest row tile of the bodies bounds them all.
        workspace = worklist_ints(min(bms)) if worklist and len(bms) > 1 else t.workspace_ints
        variants.append(Variant(t.index, t.when, t.where, f"{t.bm}x{t.bn}x{t.bk}", tuple(steps),
                                workspace, tuple(paths)))
    entries = tuple(t.entry for t in p.tiles) + tuple(
        bt.entry for bp in p.bodies for bt in bp.tiles)
    if worklist:
        entries = (f"{name}_fill", f"{name}_worklist") + entries
    return LaunchPlan(
        kernel=kernel, template="cuda/gemm.cu.j2", detail=p, spec_path=spec.path,
        where=p.where, summary=p.summary, spec_lines=p.spec_lines, archs=p.archs, args=p.args,
        bindings=p.bindings, derived=(("n_out", p.n_out),), checks=p.checks,
        variants=tuple(variants), entries=entries,
        empty=cuda_masked.EMPTY if kernel.masked else "m == 0",
        lut_dims=(var("m"), var("n"), var("k"), *lut_groups(kernel)),
    )
