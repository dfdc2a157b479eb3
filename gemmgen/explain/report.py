"""The explanation of a kernel (`explain`) or of an M dispatcher
(`explain_dispatch`): the kernel described, the problem, the conditions its
launchers check at that shape, the roofline, then what each backend would
launch (and, with --counters, the emulator's counters)."""

from __future__ import annotations

from gemmgen import ir
from gemmgen.devices import Device
from gemmgen.explain.counters import counters_lines
from gemmgen.explain.plans import cuda_lines, pallas_lines
from gemmgen.explain.roofline import cost, roofline

# The problem's m when --m is not given.
DEFAULT_M = 4096


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
            lines += cuda_lines(spec, view, m, n, k, groups)
            if counters:
                lines += counters_lines(spec, view, asked or {}, groups)
        else:
            lines += pallas_lines(spec, view, m, n, k, groups)
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
