"""`gemmgen explain --counters`: one run of a kernel's generated CUDA code
on the CPU emulator, at the asked shape or a modest one of whole tiles
(`counters_case`, `counters_at`), and what it would cost a GPU: bank
conflicts, sectors, instruction counts (gemmgen.harness.counters,
docs/cuda-emulation.md, "Counters")."""

from __future__ import annotations

import dataclasses

from gemmgen import ir
from gemmgen.explain.plans import sm90_plan


def counters_case(kernel: ir.Kernel):
    """The modest problem the emulator runs for the counters: whole tiles
    (two along M, the LUT's own N and K tiles twice), so the numbers show the
    steady state rather than the edges."""
    from gemmgen.cases import Case, standard_cases

    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    base = standard_cases(kernel)[0]
    t = kernel.tile
    if kernel.op is ir.Op.QUANTIZE:
        k = kernel.static_k or 4 * (kernel.out_scale.block_k or 128)
        return Case("counters", m=64, n=k, k=k)
    if kernel.op is ir.Op.TGMM:
        # tgmm contracts over rows, t.m of them per stage: two groups of two stages.
        return Case("counters", m=4 * t.m, n=base.n, k=base.k, group_sizes=(2 * t.m, 2 * t.m))
    k = kernel.static_k or max([2 * t.k] + [2 * s.block_k for s in (kernel.lhs_scale, kernel.rhs_scale)
                                            if s.enabled and s.block_k])
    if kernel.algorithm is ir.Algorithm.GEMV:
        return Case("counters", m=1, n=base.n, k=k)
    if kernel.algorithm is ir.Algorithm.GEMV_BATCHED:
        return Case("counters", m=kernel.max_m or 8, n=base.n, k=k)
    if kernel.masked:
        # Two groups of two whole M tiles each (m is each group's capacity).
        return Case("counters", m=2 * t.m, n=base.n, k=k, masked_m=(2 * t.m, 2 * t.m))
    if kernel.op is ir.Op.GROUPED:
        return Case("counters", m=2 * t.m, n=base.n, k=k, group_sizes=(t.m, t.m))
    return Case("counters", m=2 * t.m, n=base.n, k=k)


def emulator_counters(spec: ir.Spec, kernel: ir.Kernel, case=None):
    """(the case, each launch's LaunchCounters) of one run of `kernel`'s
    generated CUDA code on the CPU emulator."""
    import tempfile
    from pathlib import Path

    from gemmgen.build import render_spec
    from gemmgen.harness.runner import load_generated_module
    from gemmgen.harness.verify_cuda import run_launcher

    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    case = case or counters_case(kernel)
    rendered = render_spec(Path(spec.path))
    with tempfile.TemporaryDirectory(prefix="gemmgen-counters-") as tmp:
        folder = Path(tmp)
        for rel, text in rendered.files.items():
            if rel.parts[0] == "cuda":
                (folder / rel.name).write_text(text)
        launcher = load_generated_module(folder / f"{kernel.name}.py", f"gemmgen_counters_{kernel.name}")
        source = (folder / f"{kernel.name}.cu").read_text()
        counters: list = []
        # The mma.sync path (sm=0): the counters see no TMA or wgmma traffic.
        # fp4 has no mma.sync form: an fp4 kernel runs its block-scaled body,
        # on an emulated sm_120a where the spec declares an sm_12x arch, else
        # the tcgen05 body on an emulated sm_100a (specs/b200.gemm).
        where = ({"arch": block_scaled_arch(spec)} if block_scaled_only(kernel)
                 else {"sm": 0})
        run_launcher(launcher, source, f"{Path(spec.path).stem}/cuda/{kernel.name}.cu", case.inputs(kernel, 0),
                     counters=counters, memcheck=True, **where)
    return case, counters


def block_scaled_only(kernel: ir.Kernel) -> bool:
    """An fp4 operand under MX / NV block scales (MXFP4, NVFP4, W4A8): the
    block-scaled body of sm_120a / sm_121a is the kernel's only path."""
    if kernel.op is ir.Op.QUANTIZE:
        return False
    return (ir.DType.FP4 in (kernel.lhs.dtype, kernel.rhs_operand.dtype)
            and kernel.uses_mx_mma("sm_120a"))


def block_scaled_arch(spec: ir.Spec) -> str:
    """The arch whose block-scaled body an fp4 kernel's counters run on:
    sm_120a where the spec declares an sm_12x arch, else sm_100a (the
    block-scaled tcgen05.mma)."""
    target = spec.target(ir.Backend.CUDA)
    archs = target.cuda_archs if target else ()
    return "sm_120a" if any(a.startswith("sm_12") for a in archs) else "sm_100a"


def counters_at(spec: ir.Spec, kernel: ir.Kernel, asked: dict[str, int],
                groups: int) -> tuple[object, str]:
    """The case `--counters` runs and a note on its shape: the dims the
    user asked for (`asked`: m, n, k given on the command line), the others
    from `counters_case`'s modest shape; that modest shape alone when
    nothing was asked, or when the asked shape is refused by the launchers
    or too large for the CPU emulator (over WORK_BUDGET multiply-adds),
    saying why."""
    from gemmgen.cases import WORK_BUDGET, Shape, ShapeError, case_work, refused, user_case

    modest = counters_case(kernel)
    if not asked:
        return modest, "a modest shape of whole tiles; --m, --n, --k set the one it runs at"
    quantize = kernel.op is ir.Op.QUANTIZE
    shape = Shape(m=asked.get("m", modest.m), n=None if quantize else asked.get("n", modest.n),
                  k=asked.get("k", modest.k), groups=groups if kernel.grouped else None)
    given = ", ".join(f"{d}={v}" for d, v in asked.items())
    try:
        case = dataclasses.replace(user_case(kernel, shape), name="counters")
    except ShapeError as e:
        return modest, f"not at the asked {given}: {e}"
    bad = refused(kernel, spec, case)
    if bad:
        return modest, (f"not at the asked {given}: the launchers refuse "
                        f"{case.describe()}: {bad[0].message} ({bad[0].cond.py})")
    work = case_work(kernel, case)
    if work > WORK_BUDGET:
        return modest, (f"not at the asked {given}: {case.describe()} is {work:.2g} "
                        f"multiply-adds, too many for the CPU emulator (at most "
                        f"{WORK_BUDGET:.2g}); this is a modest shape of whole tiles")
    rest = [d for d in "mnk" if d not in asked and not (quantize and d == "n")]
    return case, f"the asked {given}" + (
        f"; {', '.join(rest)} modest" if rest else "")


def counters_lines(spec: ir.Spec, kernel: ir.Kernel, asked: dict[str, int],
                   groups: int) -> list[str]:
    case, note = counters_at(spec, kernel, asked, groups)
    case, counters = emulator_counters(spec, kernel, case)
    path = " of the mma.sync path" if sm90_plan(spec, kernel) is not None else ""
    if block_scaled_only(kernel.for_backend(ir.Backend.CUDA)):
        path = f" of the block-scaled path (an emulated {block_scaled_arch(spec)})"
    lines = [f"emulator counters{path}, one run at {case.describe()} ({note}; "
             "docs/cuda-emulation.md, \"Counters\"):"]
    for c in counters:
        lines += ["  " + line for line in c.table().splitlines()]
    return lines
