"""The conditions a call of a kernel must meet, as its launchers check them
(the CUDA launch plan's checks, or what the spec fixes), and which of them
a case fails (`refused`): a case the launchers refuse is not run."""

from __future__ import annotations

from gemmgen import ir
from gemmgen.cases.case import Case


def launch_env(kernel: ir.Kernel, case: Case) -> dict[str, int]:
    """The dims a launcher reads off the arrays of `case`, by the names of
    its launch plan (gemmgen.backends.cuda.launch)."""
    groups = len(case.masked_m if case.masked_m is not None else case.group_sizes or ())
    return {"m": case.m, "n": case.n, "k": case.k, "g": case.g_local or groups,
            "num_groups": groups, "group_offset": case.group_offset or 0}


def launch_conditions(kernel: ir.Kernel, spec: ir.Spec) -> list:
    """The conditions a call of `kernel` must meet (each a `Check`: its
    `cond` expression and the message), as its launchers check them: the
    CUDA launch plan's checks, or for a kernel without CUDA the checks of
    what the spec fixes (`dims`, silu_mul's even n), which both backends'
    launchers make."""
    from gemmgen.backends.cuda.args import spec_checks

    if ir.Backend.CUDA in kernel.backends:
        from gemmgen.backends import cuda

        return list(cuda.plan(kernel, spec).checks)
    return spec_checks(kernel)


def condition_results(kernel: ir.Kernel, spec: ir.Spec,
                      dims: dict[str, int]) -> list[tuple[object, bool | None]]:
    """Each of `launch_conditions` with whether `dims` (named as the launch
    plan names them: m, n, k, g, num_groups, group_offset) meet it; None
    where the condition needs a name `dims` does not give."""
    env = dict(dims)
    if ir.Backend.CUDA in kernel.backends:
        from gemmgen.backends import cuda

        plan = cuda.plan(kernel, spec)
        env = plan.env({name: v for name, v in env.items() if name in plan.names})
    out: list[tuple[object, bool | None]] = []
    for check in launch_conditions(kernel, spec):
        try:
            out.append((check, bool(check.cond.eval(env))))
        except KeyError:
            out.append((check, None))
    return out


def refused(kernel: ir.Kernel, spec: ir.Spec, case: Case) -> list:
    """The conditions of `launch_conditions` that `case` fails."""
    return [c for c, ok in condition_results(kernel, spec, launch_env(kernel, case))
            if ok is False]
