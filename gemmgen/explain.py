"""`gemmgen explain SPEC KERNEL`: a kernel's plan in words, with its cost.

For a problem shape (default m=4096 and the spec's static n and k, else
4096), it prints what each backend would launch — grid, block, shared
memory or VMEM, the tile the LUT picks — the registers and spills ptxas
reports when nvcc is available (through the resource cache that `build`
warns from, gemmgen.harness.resources), and the roofline: FLOPs, bytes
moved and the time bound on a device (`--device`, gemmgen.devices: a
table of GPUs and TPUs with each rate's source; by default one that runs
the spec's preferred declared arch, an H200 for sm_90a at about 790 TFLOP/s
dense bf16 and 4.3 TB/s as measured on that part, else the spec's TPU) of
the path that runs there (`tensor_path`), so a reviewer sees the cost of a
variant.

`--counters` also runs each CUDA launch once on the CPU emulator at a modest
shape (`counters_case`) and prints what it would cost a GPU: shared-memory
bank conflicts, global sectors against the ideal, MMA / ldmatrix / cp.async
/ barrier counts (gemmgen.harness.counters, docs/cuda-emulation.md).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from gemmgen import ir
from gemmgen.devices import DEVICES, Device, runs_arch

# The problem's m when --m is not given.
DEFAULT_M = 4096

# H200 figures, measured (the datasheet's dense bf16 peak is 989 TFLOP/s):
# the default device of a spec that declares sm_90a (gemmgen.devices).
# mma.sync kernels do not reach wgmma peaks; the bound is what the hardware
# allows, not a prediction.
H200 = DEVICES["h200"]
H200_TFLOPS_16BIT = H200.tflops16
H200_TFLOPS_8BIT = H200.tflops8  # FP8 / int8 tensor cores: twice the rate
H200_TBPS = H200.tbps


def _bytes(dt: ir.DType, count: int) -> int:
    return count * dt.bits // 8


def cost(kernel: ir.Kernel, m: int, n: int, k: int, groups: int) -> tuple[int, int]:
    """(FLOPs, bytes moved at least once) for one call. The masked layout:
    m is each group's capacity, every row counted valid (the most work a
    call can do)."""
    if kernel.masked:  # the same as g * m contiguous rows
        return cost(dataclasses.replace(kernel, masked=False), groups * m, n, k, groups)
    if kernel.op is ir.Op.QUANTIZE:
        g = kernel.out_scale.block_k or k
        moved = _bytes(kernel.lhs.dtype, m * k) + _bytes(kernel.out, m * k) + \
            _bytes(kernel.out_scale.dtype, m * math.ceil(k / g))
        return 3 * m * k, moved
    flops = 2 * m * n * k
    b_count = k * n * (groups if kernel.op is ir.Op.GROUPED else 1)
    if kernel.op is ir.Op.TGMM:
        out_count = groups * k * n
        moved = _bytes(kernel.lhs.dtype, m * k) + _bytes(kernel.rhs_operand.dtype, m * n) + \
            _bytes(kernel.out, out_count)
        return flops, moved
    n_out = n // kernel.out_n_divisor
    moved = _bytes(kernel.lhs.dtype, m * k) + _bytes(kernel.rhs_operand.dtype, b_count) + \
        _bytes(kernel.out, m * n_out)
    for side, s in (("lhs", kernel.lhs_scale), ("rhs", kernel.rhs_scale)):
        if s.enabled:
            shape = ir.scale_shape(s, side=side, m=m, n=n, k=k,
                                   g=groups if kernel.grouped else None)
            moved += _bytes(s.dtype, math.prod(shape))
    return flops, moved


@dataclass(frozen=True, slots=True)
class TensorPath:
    """The body a CUDA tile kernel runs on one arch, and what its tensor
    cores multiply there."""

    arch: str
    wgmma: bool  # the Hopper body (else the mma.sync body)
    multiplies: ir.DType  # the tensor cores' input type on this path
    why: str = ""  # when `multiplies` is not the kernel's own MMA type

    @property
    def name(self) -> str:
        return "wgmma (Hopper body)" if self.wgmma else "mma.sync"

    @property
    def tflops(self) -> float:
        """At H200 rates."""
        return self.rate(H200)

    def rate(self, device: Device) -> float:
        """TFLOP/s of `device`'s tensor cores multiplying this path's type."""
        if self.multiplies.is_fp8 and not device.fp8:
            return device.tflops16  # converted to 16-bit first
        return device.rate(self.multiplies.bits)

    @property
    def below_peak(self) -> bool:
        """An mma.sync body on Hopper: the tensor cores' full rate needs wgmma."""
        return not self.wgmma and ir.arch_number(self.arch) == 90


def tensor_path(kernel: ir.Kernel, arch: str) -> TensorPath | None:
    """The path `kernel` takes on `arch`; None when it is not a CUDA tile GEMM
    (GEMV, quantize and tgmm have one body on every arch).

    wgmma multiplies the plan's `compute` type (the operands as the tensor
    cores see them). The mma.sync body issues an MMA of that type too, but
    an FP8 mma.sync exists in hardware only on some archs
    (`archs.fp8_mma_sync`); elsewhere ptxas converts to f16 and the tensor
    cores multiply f16, at the f16 rate. int8 mma.sync is native everywhere.
    """
    from gemmgen.archs import fp8_mma_sync
    from gemmgen.backends.cuda import gemm as tile_gemm
    from gemmgen.backends.cuda import kinds as cuda_kinds

    if ir.Backend.CUDA not in kernel.backends or cuda_kinds.kind(kernel) is not tile_gemm:
        return None
    compute = tile_gemm.compute_dtype(kernel)
    if compute is None:
        return None
    if kernel.uses_wgmma(arch):
        return TensorPath(arch, True, compute)
    if compute.is_fp8 and not fp8_mma_sync(arch):
        return TensorPath(arch, False, ir.DType.F16,
                          f"{arch} has no FP8 mma.sync: ptxas converts {compute.value} to f16 "
                          "for HMMA")
    return TensorPath(arch, False, compute)


def _bound(flops: int, moved: int, tflops: float, tbps: float = H200_TBPS) -> tuple[float, str]:
    t_compute = flops / (tflops * 1e12)
    t_memory = moved / (tbps * 1e12)
    return max(t_compute, t_memory), "compute" if t_compute >= t_memory else "memory"


def roofline(kernel: ir.Kernel, flops: int, moved: int, *,
             archs: tuple[str, ...] = (), device: Device = H200) -> list[str]:
    """The roofline lines on `device` (gemmgen.devices; default an H200).
    For a CUDA tile GEMM, the bound of the path that actually runs
    (`tensor_path`): on the device, the path of the declared arch it runs
    (`devices.runs_arch`), then the path of every declared arch at the
    device's rates. Only wgmma reaches the figures on Hopper; an mma.sync
    body there is bounded by them but does not reach them. Other kernels
    (and every kernel on a TPU): the rate of their operand width."""
    paths = [p for p in (tensor_path(kernel, a) for a in archs) if p is not None]
    if device.sm is None:
        paths = []  # a TPU runs the Pallas kernel: no CUDA path
    intensity = flops / moved if moved else math.inf
    name = device.label
    lines = [
        f"FLOPs:      {flops / 1e9:.3f} GFLOP",
        f"bytes:      {moved / 1e6:.3f} MB (each operand read once, output written once)",
        f"intensity:  {intensity:.1f} FLOP/byte",
    ]
    note = [f"  ({device.note})"] if device.note else []
    if not paths:
        eight_bit = kernel.rhs is not None and kernel.lhs.dtype.bits <= 8 and \
            kernel.rhs_operand.dtype.bits <= 8
        fp8 = kernel.rhs is not None and (kernel.lhs.dtype.is_fp8 or kernel.rhs_operand.dtype.is_fp8)
        eight_bit = eight_bit and (device.fp8 or not fp8)
        peak = device.rate(8 if eight_bit else 16)
        unit = "MXU" if device.tpu is not None or device.sm is None else "tensor cores"
        t, bound = _bound(flops, moved, peak, device.tbps)
        lines.append(f"{name} bound: {t * 1e6:.2f} us ({bound}-bound; {peak:.0f} TFLOP/s "
                     f"{'8-bit' if eight_bit else '16-bit'} {unit}, {device.tbps} TB/s)")
        return lines + note
    runs = runs_arch(device, archs)
    p = next((p for p in paths if p.arch == runs), paths[0])
    t, bound = _bound(flops, moved, p.rate(device), device.tbps)
    after = ""
    cc = f"{device.sm // 10}.{device.sm % 10}"
    if runs is None:
        how = f"{p.name} (the {p.arch} path)"
        after = f"; no declared arch runs on an {name} (compute capability {cc})"
    elif p.wgmma:
        how = f"wgmma (the {p.arch} path)"
    else:
        how = f"mma.sync (the {p.arch} path{', FP8 converted to f16' if p.why else ''})"
        if device.sm == 90:
            after = "; mma.sync does not reach this rate: Hopper's full tensor-core rate needs wgmma"
    bits = 16 if p.multiplies.is_fp8 and not device.fp8 else p.multiplies.bits
    lines.append(f"{name} bound: {t * 1e6:.2f} us ({bound}-bound; {p.rate(device):.0f} TFLOP/s "
                 f"{bits}-bit {how}, {device.tbps} TB/s){after}")
    lines.append(f"bound per declared arch, at {name} rates (the path that runs there and the "
                 "type its tensor cores multiply):")
    for p in paths:
        t, bound = _bound(flops, moved, p.rate(device), device.tbps)
        why = f" ({p.why})" if p.why else ""
        below = "; mma.sync does not reach the full tensor-core rate on Hopper (wgmma does)" \
            if p.below_peak else ""
        if p.multiplies.is_fp8 and not device.fp8:
            why += f" (the {name} has no FP8 tensor cores: at its 16-bit rate)"
        lines.append(f"  {p.arch}: {p.name} multiplies {p.multiplies.value}{why}: "
                     f"{p.rate(device):.0f} TFLOP/s -> {t * 1e6:.2f} us ({bound}-bound){below}")
    return lines + note


# The device explain evaluates a Hopper path's persistent grid for.
H200_SMS = 132


def _sm90_plan(spec: ir.Spec, kernel: ir.Kernel):
    """The kernel's GemmPlan when it has a Hopper path, else None."""
    from gemmgen.backends.cuda import gemm as tile_gemm
    from gemmgen.backends.cuda import kinds as cuda_kinds

    if ir.Backend.CUDA not in kernel.backends or cuda_kinds.kind(kernel) is not tile_gemm:
        return None
    p = tile_gemm.plan(kernel, spec)
    return p if p.body("wgmma") is not None else None


def _cuda(spec: ir.Spec, kernel: ir.Kernel, m: int, n: int, k: int, groups: int) -> list[str]:
    """The launch plan evaluated at the problem shape: the plan's own
    expressions (grids, workspace, LUT conditions), never rendered text."""
    from gemmgen.backends import cuda

    lp = cuda.plan(kernel, spec)
    given = {"m": m, "n": n, "k": k, "g": groups, "num_groups": groups, "group_offset": 0}
    env = lp.env({name: value for name, value in given.items() if name in lp.names})
    variant = lp.variant_for(env)
    rule = f" (LUT rule {variant.when.py}, {variant.where})" if variant.when else " (default)"
    lines = [f"cuda ({', '.join(lp.archs)}): tile {variant.label}{rule}"]
    gp = _sm90_plan(spec, kernel)
    if gp is not None:
        paths = ", ".join(f"{a}: {'wgmma (Hopper body)' if kernel.uses_wgmma(a) else 'mma.sync'}"
                          for a in lp.archs)
        lines.append(f"  path per arch: {paths}; the launchers pick by compute capability "
                     "(9.0: wgmma)")
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
    lines += _ptxas(spec, kernel, lp.archs, entries)
    return lines


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


def _pallas(spec: ir.Spec, kernel: ir.Kernel, m: int, n: int, k: int,
            groups: int = 1) -> list[str]:
    from gemmgen.backends import pallas

    p = pallas.plan(kernel, spec)
    mod = p.module
    t = kernel.tile_for(m, n, k)
    lines = [f"pallas_tpu ({mod.tpu}): tile m={t.m} n={t.n} k={t.k}"]
    if kernel.masked:  # every (group, m tile) pair holding valid rows, at most
        grid = (math.ceil(n / t.n), groups * math.ceil(m / t.m), math.ceil(k / t.k))
        what = "n tiles, (group, m tile) pairs with valid rows (at most), k tiles"
    else:
        grid = (math.ceil(n / t.n), math.ceil(m / t.m), math.ceil(k / t.k))
        what = "n tiles, m tiles [+ groups], k tiles"
    lines.append(f"  grid ~ {grid} ({what}); {mod.buffers} buffers per block")
    lines.append(f"  VMEM per grid step: {mod.vmem_bytes / 2**20:.2f} MiB")
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
        run_launcher(launcher, source, f"{Path(spec.path).stem}/cuda/{kernel.name}.cu", case.inputs(kernel, 0),
                     counters=counters, memcheck=True, sm=0)
    return case, counters


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


def _counters(spec: ir.Spec, kernel: ir.Kernel, asked: dict[str, int],
              groups: int) -> list[str]:
    case, note = counters_at(spec, kernel, asked, groups)
    case, counters = emulator_counters(spec, kernel, case)
    path = " of the mma.sync path" if _sm90_plan(spec, kernel) is not None else ""
    lines = [f"emulator counters{path}, one run at {case.describe()} ({note}; "
             "docs/cuda-emulation.md, \"Counters\"):"]
    for c in counters:
        lines += ["  " + line for line in c.table().splitlines()]
    return lines


def launcher_conditions(spec: ir.Spec, kernel: ir.Kernel, m: int, n: int, k: int,
                        groups: int) -> tuple[list[str], list[str]]:
    """(the lines stating the conditions every call of the kernel must meet,
    as its launchers check them, each marked when the problem fails it; the
    failed ones). The conditions are the launch plan's own checks
    (gemmgen.cases.launch_conditions), evaluated, never restated."""
    from gemmgen.cases import condition_results

    dims = {"m": m, "n": n, "k": k, "g": groups, "num_groups": groups, "group_offset": 0}
    lines, failed = [], []
    for check, ok in condition_results(kernel, spec, dims):
        if ok is False:
            failed.append(f"{check.message} ({check.cond.py})")
        mark = "" if ok else "  <- not met at this shape" if ok is False else ""
        lines.append(f"  {check.cond.py}: {check.message}{mark}")
    return lines, failed


def explain(spec: ir.Spec, name: str, *, m: int, n: int | None, k: int | None,
            groups: int, counters: bool = False,
            asked: dict[str, int] | None = None, device: Device | None = None) -> str:
    """`asked`: the dims the user gave (--m, --n, --k), which `--counters`
    runs at (the others modest); by default a modest shape. `device`: the
    roofline's (--device; default `devices.default_device`: one that runs
    the spec's preferred arch, else the spec's TPU)."""
    from gemmgen.devices import default_device

    kernel = spec.kernel(name)
    device = device or default_device(spec, kernel)
    n = n or kernel.static_n or 4096
    k = k or kernel.static_k or 4096
    from gemmgen.describe import describe_kernel
    from gemmgen.diagnostics import plural

    what = (f", {plural(groups, 'group')} of m rows of capacity, all valid (masked layout)"
            if kernel.masked else f", {plural(groups, 'group')}" if kernel.grouped else "")
    lines = [describe_kernel(kernel), "", f"problem: m={m} n={n} k={k}" + what]
    conditions, failed = launcher_conditions(spec, kernel, m, n, k, groups)
    for why in failed:
        lines.append(f"refused: the launchers refuse this shape: {why}")
    flops, moved = cost(kernel, m, n, k, groups)
    target = spec.target(ir.Backend.CUDA)
    archs = target.cuda_archs if target is not None and ir.Backend.CUDA in kernel.backends else ()
    lines += roofline(kernel, flops, moved, archs=archs, device=device)
    lines.append(f"device: {device.label} (--device {device.name}; rates: {device.source})")
    for backend in kernel.backends:
        lines.append("")
        view = kernel.for_backend(backend)  # the backend's own tile LUT, if any
        if backend is ir.Backend.CUDA:
            lines += _cuda(spec, view, m, n, k, groups)
            if counters:
                lines += _counters(spec, view, asked or {}, groups)
        else:
            lines += _pallas(spec, view, m, n, k, groups)
    if conditions:
        lines += ["", "launcher conditions (a call that fails one is refused before any "
                  "launch):", *conditions]
    return "\n".join(lines)


def explain_dispatch(spec: ir.Spec, dispatch: ir.Dispatch, *, m: int, n: int | None,
                     k: int | None, groups: int, counters: bool = False,
                     asked: dict[str, int] | None = None, device: Device | None = None) -> str:
    """An M dispatcher: its arms, the body each arm's kernel runs on each
    declared CUDA arch, the arm the problem's m picks, then that kernel's
    explanation (its roofline is the bound of the path that runs)."""
    from gemmgen.backends.cuda.dispatch import arm_paths

    target = spec.target(ir.Backend.CUDA)
    archs = target.cuda_archs if target is not None else ()
    first = spec.kernel(dispatch.rules[0].kernel)
    n = n or first.static_n or 4096
    k = k or first.static_k or 4096
    picked = dispatch.pick(m, n, k)
    lines = [f"dispatch {dispatch.name}: the kernel for each M (first matching arm), and the "
             f"body it runs on each declared arch ({', '.join(archs) or 'none'}):"]
    for r in dispatch.rules:
        kernel = spec.kernel(r.kernel)
        label = f"when {r.cond}" if r.cond is not None else "else"
        paths = arm_paths(kernel, archs) if ir.Backend.CUDA in kernel.backends else "no cuda"
        mark = "  <- m=%d" % m if r.kernel == picked else ""
        lines.append(f"  {label:<14} -> {r.kernel} ({kernel.algorithm.value}; {paths}){mark}")
    lines += ["", explain(spec, picked, m=m, n=n, k=k, groups=groups, counters=counters,
                          asked=asked, device=device)]
    return "\n".join(lines)
