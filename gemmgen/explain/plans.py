"""What each backend would launch for a problem, in words: the CUDA launch
plan evaluated at the shape (grids, threads, shared memory, the LUT entry,
the Hopper path where the kernel has one) with the registers and spills
ptxas reports (through the resource cache `build` warns from,
gemmgen.harness.resources), and the Pallas grid and VMEM."""

from __future__ import annotations

import math

from gemmgen import ir
from gemmgen.archs import sm_count

# The device explain evaluates a Hopper path's persistent grid for.
H200_SMS = 132


def sm90_plan(spec: ir.Spec, kernel: ir.Kernel):
    """The kernel's GemmPlan when it has a Hopper path, else None."""
    p = _tile_plan(spec, kernel)
    return p if p is not None and p.body("wgmma") is not None else None


def _tile_plan(spec: ir.Spec, kernel: ir.Kernel):
    """The kernel's GemmPlan when it is a CUDA tile GEMM, else None."""
    from gemmgen.backends.cuda import gemm as tile_gemm
    from gemmgen.backends.cuda import kinds as cuda_kinds

    if ir.Backend.CUDA not in kernel.backends or cuda_kinds.kind(kernel) is not tile_gemm:
        return None
    return tile_gemm.plan(kernel, spec)


def _path_name(kernel: ir.Kernel, arch: str) -> str:
    if kernel.uses_wgmma(arch):
        return "wgmma (Hopper body)"
    if kernel.uses_tcgen05(arch):
        if kernel.tcgen05_deepseek_mma:
            return "block-scaled tcgen05 (sm_100a body; DeepSeek's e8m0 scales in hardware)"
        if kernel.tcgen05_block_scaled:
            return "block-scaled tcgen05 (sm_100a body)"
        return "tcgen05 (sm_100a body)"
    return "block-scaled mma.sync" if kernel.uses_mx_mma(arch) else "mma.sync"


def cuda_lines(spec: ir.Spec, kernel: ir.Kernel, m: int, n: int, k: int, groups: int) -> list[str]:
    """The launch plan evaluated at the problem shape: the plan's own
    expressions (grids, workspace, LUT conditions), never rendered text."""
    from gemmgen.backends import cuda

    lp = cuda.plan(kernel, spec)
    given = {"m": m, "n": n, "k": k, "g": groups, "num_groups": groups, "group_offset": 0}
    env = lp.env({name: value for name, value in given.items() if name in lp.names})
    variant = lp.variant_for(env)
    rule = f" (LUT rule {variant.when.py}, {variant.where})" if variant.when else " (default)"
    lines = [f"cuda ({', '.join(lp.archs)}): tile {variant.label}{rule}"]
    tp = _tile_plan(spec, kernel)
    gp = tp if tp is not None and tp.body("wgmma") is not None else None
    mx = tp.body("sm120") if tp is not None else None
    tc = tp.body("tcgen05") if tp is not None else None
    if gp is not None or mx is not None or tc is not None:
        paths = ", ".join(f"{a}: {_path_name(kernel, a)}" for a in lp.archs)
        picks = [*(["9.0: wgmma"] if gp is not None else []),
                 *(["10.0: tcgen05"] if tc is not None else []),
                 *([f"{', '.join(mx.tiles[0].cc_words)}: block-scaled"] if mx is not None else [])]
        lines.append(f"  path per arch: {paths}; the launchers pick by compute capability "
                     f"({'; '.join(picks)})")
        if kernel.lhs.dtype is ir.DType.FP4:
            lines.append("  mma.sync entries (traps: fp4 has no mma.sync; no other device runs "
                         "this kernel):")
        else:
            lines.append("  mma.sync path (every other device):")
    for step in variant.steps:
        lines.append(f"  launch {step.entry}: grid {step.grid.eval(env)}, {step.block} threads, "
                     f"{step.smem} bytes dynamic shared memory — {step.comment}")
    if variant.has_workspace:
        lines.append(f"  workspace: {variant.workspace_ints.eval(env)} ints")
    entries = [s.entry for s in variant.steps]
    path = variant.path("wgmma")
    if gp is not None and path is not None:
        t = gp.body_tiles("wgmma")[variant.index]
        device = {**env, "sm": 90, "num_sms": H200_SMS}
        lines.append(f"  wgmma path (sm_90a, on an H200 of {H200_SMS} SMs): tile {t.bm}x{t.bn}x{t.bk}, "
                     f"{t.stages} stages of {t.a_stage + t.b_stage} bytes; {t.threads} threads: a "
                     f"producer warpgroup (setmaxnreg {wgmma_regs()[0]}, one thread issues the "
                     f"TMA loads) and two consumer warpgroups (setmaxnreg {wgmma_regs()[1]}, "
                     f"wgmma {t.wgmma}, 64 {'weight ' if t.mixed else ''}rows each); "
                     f"{t.smem_bytes} bytes of shared memory")
        if path.when.eval(device):
            for step in path.steps:
                lines.append(f"  launch {step.entry}: grid {step.grid.eval(device)}, {step.block} "
                             f"threads, {step.smem} bytes dynamic shared memory — {step.comment}")
        else:
            lines.append(f"  (not at this shape: {path.when.py} is false)")
        entries += [s.entry for s in path.steps if s.entry not in entries]
    tc_path = variant.path("tcgen05")
    if tc is not None and tc_path is not None:
        t = tc.tiles[variant.index]
        device = {**env, "sm": 100, "num_sms": sm_count("sm_100a")}
        scales = (f" and {t.sf_stage} of scale atoms (gathered by the producer warp, "
                  f"tcgen05.cp into TMEM, applied by the block-scaled MMA)"
                  if t.block_scaled else "")
        transform = ""
        if t.mixed:  # gg_gemm_sm100_mixed.cuh
            scales = f" and {t.raw_stage} of raw weights"
            transform = ", a transform warpgroup (widens the weights in shared memory)"
        if t.pair:  # (issue 30) the 2-CTA tile: a CTA's share of each number
            cluster = (f"clusters of {2 * t.cluster_n}: {t.cluster_n} pairs along n sharing A "
                       f"by TMA multicast" if t.cluster_n > 1 else "clusters of 2")
            mma = (f"the 2-CTA block-scaled tcgen05.mma {t.mma}, after copying both CTAs' "
                   f"scale atoms with tcgen05.cp.cta_group::2" if t.block_scaled
                   else f"tcgen05.mma {t.mma}")
            pair_scales = (f" and {t.sf_stage} of scale atoms (its A rows', all {t.bn} B "
                           f"rows': the producer warp gathers them)" if t.block_scaled else "")
            lines.append(f"  tcgen05 path (sm_100a, on a B200 of {device['num_sms']} SMs): "
                         f"2-CTA tile {t.bm}x{t.bn}x{t.bk} over a CTA pair ({cluster}), "
                         f"{t.stages} stages of {t.a_stage + t.b_stage} bytes a CTA (128 rows of "
                         f"A, {t.bn // 2} of B){pair_scales}; {t.threads} threads a CTA: a "
                         f"producer warp (TMA), an MMA warp (the even CTA's thread issues {mma}) "
                         f"and an epilogue warpgroup (tcgen05.ld, its CTA's 128 rows); "
                         f"{t.tmem_cols} TMEM columns and {t.smem_bytes} bytes of shared memory "
                         f"a CTA")
        else:
            lines.append(f"  tcgen05 path (sm_100a, on a B200 of {device['num_sms']} SMs): tile "
                         f"{t.bm}x{t.bn}x{t.bk}, {t.stages} stages of {t.a_stage + t.b_stage} "
                         f"bytes{scales}; "
                         f"{t.threads} threads: a producer warp (TMA), an MMA warp (one thread "
                         f"issues tcgen05.mma {t.mma}){transform} and an epilogue warpgroup "
                         f"(tcgen05.ld); "
                         f"{t.tmem_cols} TMEM columns, {t.smem_bytes} bytes of shared memory")
        if t.pair:
            lines.append(pair_tile_loads(kernel, t, m, n, k, groups))
        if tc_path.when.eval(device):
            for step in tc_path.steps:
                cluster = (f", clusters of {' x '.join(map(str, step.cluster))} blocks"
                           if step.is_cluster else "")
                lines.append(f"  launch {step.entry}: grid {step.grid.eval(device)}{cluster}, "
                             f"{step.block} threads, {step.smem} bytes dynamic shared memory — "
                             f"{step.comment}")
        else:
            lines.append(f"  (not at this shape: {tc_path.when.py} is false)")
        entries += [s.entry for s in tc_path.steps if s.entry not in entries]
    mx_path = variant.path("sm120")
    if mx is not None and mx_path is not None:
        t = mx.tiles[variant.index]
        from gemmgen.backends.cuda.gemm.sm120 import mma_words

        kind, sass, _ = mma_words(kernel)
        lines.append(f"  block-scaled path ({' / '.join(t.archs)}): Tile{t.index}'s "
                     f"{t.base.bm}x{t.base.bn}x{t.base.bk}, each K step one mma.sync {kind} "
                     f"per fragment ({sass}), the MX / NV scales in registers")
        for step in mx_path.steps[-1:]:
            lines.append(f"  launch {step.entry}: grid {step.grid.eval(env)}, {step.block} threads, "
                         f"{step.smem} bytes dynamic shared memory — {step.comment}")
        entries += [s.entry for s in mx_path.steps if s.entry not in entries]
    lines += _ptxas(spec, kernel, lp.archs, entries)
    return lines


def pair_tile_loads(kernel: ir.Kernel, t, m: int, n: int, k: int, groups: int) -> str:
    """The operand bytes the 2-CTA tile's TMA loads bring from L2 into
    shared memory at a shape (every tile reads its A rows and B columns over
    all of k; grouped: at most cdiv(m, 256) + g row tiles): with cluster_n
    pairs a cluster, each 256-row A tile once per cluster unit (cluster_n n
    tiles), multicast to its pairs; B as stored (packed fp4 and int4 weights
    half a byte an element); the block-scaled MMAs' scale atoms, which are
    not multicast (each CTA its 128 A rows' and all bn B rows', a byte a
    scale block). HBM traffic is the roofline's (each operand once, if L2
    holds the reuse); this is the L2 -> SM side."""
    ea, eb = kernel.lhs.dtype.bits / 8, kernel.rhs_operand.dtype.bits / 8
    n_out = n // kernel.out_n_divisor
    rows = math.ceil(m / t.bm) * (groups if kernel.masked else 1)
    if kernel.op is ir.Op.GROUPED and not kernel.masked:
        rows += groups
    tiles_n = math.ceil(n_out / t.bn_out)
    units = rows * math.ceil(tiles_n / t.cluster_n)
    kp = math.ceil(k / t.bk) * t.bk
    a_bytes, b_bytes = units * t.bm * kp * ea, rows * tiles_n * t.bn * kp * eb
    if t.cluster_n > 1:
        unicast = rows * tiles_n * t.bm * kp * ea
        a_words = (f"A {a_bytes / 1e6:.3f} MB (each 256-row tile loaded once per cluster of "
                   f"{t.cluster_n} pairs and multicast to them; {unicast / 1e6:.3f} MB a pair "
                   f"at a time)")
    else:
        a_words = f"A {a_bytes / 1e6:.3f} MB (each 256-row tile once per pair tile)"
    words = f"{a_words}, B {b_bytes / 1e6:.3f} MB"
    if t.block_scaled:
        blocks = kernel.lhs_scale.block_k or k, kernel.rhs_scale.block_k or k
        sf = rows * tiles_n * kp * (t.bm / blocks[0] + 2 * t.bn / blocks[1])
        words += (f", scale atoms {sf / 1e6:.3f} MB (not multicast: each CTA its 128 A rows' "
                  f"and all {t.bn} B rows')")
    return (f"  tile loads (L2 -> shared memory, at most {rows} row tiles x {tiles_n} n tiles): "
            f"{words}")


def wgmma_regs() -> tuple[int, int]:
    """setmaxnreg of the producer and the consumer warpgroups."""
    from gemmgen.backends.cuda.gemm import wgmma

    return wgmma.SM90_PRODUCER_REGS, wgmma.SM90_CONSUMER_REGS


def _ptxas(spec: ir.Spec, kernel: ir.Kernel, archs: tuple[str, ...],
           entries: list[str]) -> list[str]:
    """Registers, spills and static shared memory of `entries` as ptxas
    reports them for the files `build` writes, measured through the
    resource cache (gemmgen.harness.resources), which this fills for
    `build`'s spill warnings; and the warning itself when a tile spills."""
    from pathlib import Path

    from gemmgen.build import render_spec
    from gemmgen.harness import resources
    from gemmgen.harness.toolchain import describe_nvcc, find_nvcc

    lines: list[str] = []
    try:
        nvcc = find_nvcc()
        if nvcc is None:
            raise FileNotFoundError("nvcc")
        lines.append(f"  ptxas of {describe_nvcc(nvcc)}")
        todo = [j for j in resources.jobs([render_spec(Path(spec.path))])
                if j.kernel.name == kernel.name and j.arch in archs]
        for job, record in zip(todo, resources.measure_all(todo, nvcc, workers=2), strict=True):
            for entry in entries:
                if not _built_for(kernel, entry, job.arch):
                    continue
                u = record.kernels[entry]
                lines.append(f"  ptxas {job.arch} {entry}: {u['registers']} registers, "
                             f"{u['spill_stores'] + u['spill_loads']} bytes spilled, "
                             f"{u['static_smem']} bytes static shared memory")
            warning = resources.spill_warning(job, record)
            if warning is not None:
                lines.append(f"  warning: {warning.message}")
    except Exception as e:  # noqa: BLE001 (no nvcc, or it failed: the plan is still useful)
        lines.append(f"  (registers: nvcc unavailable: {type(e).__name__}: {e})")
    return lines


def _built_for(kernel: ir.Kernel, entry: str, arch: str) -> bool:
    """Whether `entry` is compiled for `arch` (a body's entry is a trap
    elsewhere: the Hopper one off sm_90a, the block-scaled one off sm_120a /
    sm_121a)."""
    if entry.endswith("_sm90"):
        return kernel.uses_wgmma(arch)
    if entry.endswith("_sm100"):
        return kernel.uses_tcgen05(arch)
    if entry.endswith("_sm120"):
        return kernel.uses_mx_mma(arch)
    return True


def _work_items(sizes: list[int], tm: int) -> int:
    """Work items of the grouped Pallas grid for these group sizes: each
    non-empty group's m tiles, from its first row's to its last row's."""
    items, start = 0, 0
    for c in sizes:
        if c > 0:
            items += (start + c - 1) // tm - start // tm + 1
        start += c
    return items


def pallas_lines(spec: ir.Spec, kernel: ir.Kernel, m: int, n: int, k: int,
                 groups: int = 1) -> list[str]:
    from gemmgen.backends import pallas

    p = pallas.plan(kernel, spec)
    mod = p.module
    # the groups for rules on g and m/g; a `tpu=` rule sees the generation
    # explained (the module's own: the one whose VMEM bounds it)
    view = mod.kernel
    i, t = view.tile_rule_for(m, n, k, groups if kernel.grouped else None, mod.tpu)
    rule = ""
    if i < len(view.tile_rules):
        r = view.tile_rules[i]
        tuned = f"tuned {r.tuned}, " if r.tuned else ""
        rule = f" (LUT rule {', '.join(str(c) for c in r.conds)}, {tuned}{r.loc.path})"
    lines = [f"pallas_tpu ({mod.tpu}): tile m={t.m} n={t.n} k={t.k}{rule}"]
    if kernel.masked:  # every (group, m tile) pair holding valid rows, at most
        grid = (math.ceil(n / t.n), groups * math.ceil(m / t.m), math.ceil(k / t.k))
        what = "n tiles, (group, m tile) pairs with valid rows (at most), k tiles"
    elif kernel.op is ir.Op.GROUPED and groups > 1:
        # The work axis: one item per (group, m tile) pair holding rows of
        # the group (`_group_metadata`); a tile two groups share is visited
        # by both, so the count depends on where the groups split.
        tiles_m = math.ceil(m / t.m)
        most = tiles_m + min(groups, m) - 1
        equal = _work_items([m // groups + (i < m % groups) for i in range(groups)], t.m)
        grid = f"({math.ceil(n / t.n)}, {tiles_m}..{most}, {math.ceil(k / t.k)})"
        what = (f"n tiles, work items: one per (group, m tile) pair with rows, {tiles_m} when "
                f"the groups split at tile boundaries, {equal} for {groups} equal groups, at "
                f"most cdiv(m, tm) + g - 1 = {most}; k tiles")
    else:
        grid = (math.ceil(n / t.n), math.ceil(m / t.m), math.ceil(k / t.k))
        what = "n tiles, m tiles, k tiles"
    lines.append(f"  grid ~ {grid} ({what}); {mod.buffers} buffers per block")
    lines.append(f"  VMEM per grid step: {mod.vmem_bytes / 2**20:.2f} MiB")
    lines += _weights_layout_lines(kernel, n, k)
    if isinstance(p, pallas.MatmulPlan):
        lines.append(f"  MXU: {p.core.mxu_summary}")
    saving = pallas.existing_out_saving(p, m, n)
    if saving is not None:
        lines.append(
            f"  existing_out is aliased into the output (input_output_aliases): saves "
            f"{saving.saved} bytes of HBM traffic per call ({saving.saved / 2**20:.2f} MiB): "
            f"the select pass that took the rows the shard does not own from existing_out "
            f"({saving.select_pass} bytes: read out and existing_out, write the result) "
            f"against the kernel reading existing_out's blocks of the m tiles it visits (at "
            f"most {saving.block_reads} bytes); when existing_out is not donated and is live "
            f"after the call, XLA copies it first ({saving.copy} bytes)")
    return lines


def _weights_layout_lines(kernel: ir.Kernel, n: int, k: int) -> list[str]:
    """Weights whose minor dimension is not whole 128-lane tiles, while the
    dimension before it is: on a TPU, XLA stores such an array with that
    other dimension minor, and relays it out to row-major for the Pallas
    call, every call (docs/pallas.md, "Weights whose rows are not whole lane
    tiles")."""
    if kernel.op not in (ir.Op.GROUPED, ir.Op.DENSE) or kernel.masked:
        return []
    rhs = kernel.rhs_operand
    nk = rhs.layout is ir.Layout.NK
    minor, other = (k, n) if nk else (n, k)
    if minor % 128 == 0 or other % 128:
        return []
    name = "k" if nk else "n"
    flip = ("[k, n]" if nk else "[n, k]").replace("[", "[g, " if kernel.grouped else "[")
    return [(f"  HBM: the weights' rows ({name} = {minor}) are not whole 128-lane tiles: on a "
             f"TPU, XLA stores such weights with their {other}-long dimension minor and copies "
             f"them to row-major before every call (on a v5e, GPT-OSS's [g, 5760, 2880] ran at "
             f"0.41x of the same kernel at k = 3072); store them {flip} or pad {name} to a "
             f"multiple of 128 (docs/pallas.md, \"Weights whose rows are not whole lane tiles\")")]
