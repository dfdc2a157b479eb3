"""`gemmgen verify`: run every generated kernel of a spec on each backend
available on this machine against the NumPy reference, and print a table.

Backends (`--backend`):
  pallas-interpret  Pallas kernels in TPU interpret mode on the CPU
  pallas-lower      the real Pallas -> Mosaic TPU lowering, on the CPU
  pallas-tpu        Pallas kernels compiled by Mosaic and run on a real TPU
  cuda-emu          CUDA kernels compiled with g++ and run on CPU fibers,
                    launched by their Python launcher's plan (as the CuPy call)
  cuda-emu-cpp      the same kernels launched by their C++ launcher,
                    launch_<kernel>(), compiled with g++ against the
                    emulator's CUDA runtime
  cuda              CUDA kernels on a real GPU through CuPy

Each backend is a `Runner` (gemmgen.harness.runner) of the harness:
gemmgen.harness.verify_pallas and gemmgen.harness.verify_cuda; this module
runs the cases and prints the table.
The kernels run are the ones `gemmgen build` would write now (rendered in
memory), not whatever is on disk. The cases (gemmgen.cases) cover every
tile of a kernel's LUT, on each backend the LUT that backend uses (its own,
`tile pallas_tpu ...`, or the shared one); the table says which tile each
case ran. The CPU
emulator plays the spec's declared CUDA arch with the least shared memory
per block (`--cuda-arch` picks another, one of the archs a spec may declare).

`--m/--n/--k/--groups/--group-sizes` add a case at the user's own shape
(`your_shape`, gemmgen.cases.user_case) beside the standard ones; a shape
a kernel's launcher refuses (its launch plan's checks, `cases.refused`) is
bad input. The table's header comes first and each row as its case
finishes (in the order of the table, whatever runs at once: `--jobs`, one
thread per core by default, see `gemmgen.verify_run`); Ctrl-C ends the run with the
rows done, a summary saying so, and
status 130.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path
from typing import TextIO

from gemmgen import ir
from gemmgen.build import Rendered
from gemmgen.cases import (
    Case,
    Shape,
    ShapeError,
    check_shape,
    lut_entry,
    refused,
    standard_cases,
    tile_label,
    user_case,
)
from gemmgen.diagnostics import one_of, plural, suggest
from gemmgen.harness import verify_cuda, verify_pallas
from gemmgen.harness.runner import Runner
from gemmgen.verify_run import Execution, Row


def _runners() -> list[Runner]:
    return [*verify_pallas.runners(), *verify_cuda.runners()]


RUNNER_NAMES = ("pallas-interpret", "pallas-lower", "pallas-tpu", "cuda-emu", "cuda-emu-cpp",
                "cuda")


def main(rendered: Rendered, *, backends: list[str] | None, seed: int,
         kernels: list[str] | None, out: TextIO, progress: TextIO,
         cuda_arch: str | None = None, resources: bool = True,
         shape: Shape | None = None, workers: int | None = None) -> int:
    """Run the cases and print the table: its header first, each row as its
    case finishes, then the notes and the summary. Ctrl-C stops the run; the
    rows done so far stay printed, the summary says it was interrupted, and
    the status is 130."""
    spec = rendered.spec
    runners = {r.name: r for r in _runners()}
    chosen = backends or [n for n in RUNNER_NAMES if n in runners]
    for name in chosen:
        if name not in RUNNER_NAMES:
            print(f"gemmgen: error: unknown backend '{name}'{suggest(name, RUNNER_NAMES)} "
                  f"(expected {one_of(RUNNER_NAMES)})", file=progress)
            return 2
    names = [k.name for k in spec.kernels]
    for name in kernels or ():
        if name not in names:
            print(f"gemmgen: error: {spec.path} has no kernel '{name}'{suggest(name, names)}",
                  file=progress)
            return 2
    selected = [k for k in spec.kernels if kernels is None or k.name in kernels]
    mine = _user_cases(spec, selected, shape, progress) if shape is not None and shape.given() \
        else {}
    if mine is None:
        return 2
    rows: list[Row] = []
    skipped: list[str] = []
    active: list[Runner] = []
    jobs: list[tuple[ir.Kernel, Runner, Case]] = []
    interrupted = False
    measured = None
    with tempfile.TemporaryDirectory(prefix="gemmgen-verify-") as tmp:
        try:
            for name in chosen:
                runner = runners.get(name)
                reason = runner.unavailable() if runner else "not built into this gemmgen"
                if reason:
                    skipped.append(f"{name}: {reason}")
                    continue
                runner.cuda_arch = cuda_arch
                runner.prepare(rendered, Path(tmp) / name)
                active.append(runner)
            # Each backend runs the kernel as it sees it, with cases that cover
            # every tile of its own LUT (ir.Kernel.for_backend).
            jobs = [(view, r, c) for k in selected for r in active if r.backend in k.backends
                    for view in [k.for_backend(r.backend)]
                    for c in [*standard_cases(view), *([mine[k.name]] if k.name in mine else [])]]
            if not jobs:
                for s in skipped:
                    print(f"skipped {s}", file=out)
                if active:
                    print(_nothing_targets(spec, selected, active, kernels), file=progress)
                    return 2 if backends else 1
                print("nothing was run: no backend asked for is available here", file=out)
                return 1
            table = _Table(jobs, out)
            table.header()
            # ptxas's figures are measured beside the cases, printed after them.
            measured = _Measurement(rendered, selected, active) if resources else None
            rows, interrupted = Execution(jobs, seed, table, progress, workers, rendered,
                                          cuda_arch).run()
        except KeyboardInterrupt:  # while preparing the runners
            interrupted = True
    for s in skipped:
        print(f"skipped {s}", file=out)
    for r in active:
        note = getattr(r, "note", None)
        if note:
            print(f"{r.name}: {note}", file=out)
    for k in selected:
        seen: set[tuple[str, str]] = set()
        for b in k.backends:
            if any(r.backend is b for r in active):
                # One LUT for every backend: the notes as ever; else per backend.
                label = f"{k.name} ({b.value})" if k.backend_tiles else k.name
                for why in _uncovered_tiles(k.for_backend(b)):
                    if (label, why) not in seen:
                        seen.add((label, why))
                        print(f"note: {label}: {why}", file=out)
    if resources and not interrupted and measured is not None:
        try:
            measured.report(rendered, out)
        except KeyboardInterrupt:  # the rows are all done; only ptxas's figures are lost
            interrupted = True
    failed = [r for r in rows if not r.passed]
    for r in failed:
        print(f"\nFAIL {r.kernel} on {r.backend} ({r.case}):\n{r.detail}", file=out)
    summary = f"{len(rows) - len(failed)} passed, {len(failed)} failed" + (
        f", {plural(len(skipped), 'backend')} unavailable" if skipped else "")
    if interrupted:
        print(f"\ninterrupted (Ctrl-C) after {len(rows)} of {plural(len(jobs), 'case')}: "
              f"{summary}", file=out, flush=True)
        return 130
    print(f"\n{summary}", file=out)
    return 1 if failed else 0


def _user_cases(spec: ir.Spec, selected: list[ir.Kernel], shape: Shape,
                progress: TextIO) -> dict[str, Case] | None:
    """Each selected kernel's case at the user's shape; None (after the
    errors) when the shape is bad or a kernel's launcher refuses it."""
    try:
        check_shape(shape)
    except ShapeError as e:
        print(f"gemmgen: error: {e}", file=progress)
        return None
    cases: dict[str, Case] = {}
    problems: list[str] = []
    for k in selected:
        try:
            case = user_case(k, shape)
        except ShapeError as e:
            problems.append(str(e))
            continue
        bad = refused(k, spec, case)
        if bad:
            why = "; ".join(f"{c.message} ({c.cond.py})" for c in bad)
            problems.append(f"{k.name} refuses {case.describe()}: {why}")
            continue
        cases[k.name] = case
    for p in problems:
        print(f"gemmgen: error: {p}", file=progress)
    if problems:
        if len(problems) < len(selected):
            print("gemmgen: (--kernel picks the kernels to run at this shape)", file=progress)
        return None
    return cases


def _nothing_targets(spec: ir.Spec, selected: list[ir.Kernel], active: list[Runner],
                     kernels: list[str] | None) -> str:
    """Why no case runs: the kernels chosen target none of the backends
    that run here (or were asked for)."""
    runs = ", ".join(f"{r.name} ({r.backend.value})" for r in active)
    targets = sorted({b.value for k in selected for b in k.backends})
    which = ("no kernel chosen (--kernel) targets", "they target") if kernels else \
        (f"no kernel of {spec.path} targets", "its kernels target")
    return (f"gemmgen: error: nothing was run: {which[0]} {runs}; {which[1]} "
            f"{', '.join(targets)}: run them with "
            f"{one_of(n for n in RUNNER_NAMES if _backend_of(n) in targets)}")


def _backend_of(runner_name: str) -> str:
    return "cuda" if runner_name.startswith("cuda") else "pallas_tpu"


class _Measurement:
    """With nvcc on this machine: ptxas's registers and spills of each CUDA
    kernel that runs, on every declared arch (measured once, then read from
    the resource cache that `build` warns from). The compilations start at
    once on a background thread (one nvcc at a time, beside the cases), and
    `report` prints them, with a warning, never a failure, for each kernel
    that spills."""

    def __init__(self, rendered: Rendered, selected: list[ir.Kernel],
                 active: list[Runner]) -> None:
        from gemmgen.harness import resources
        from gemmgen.harness.toolchain import find_nvcc

        ran = {k.name for k in selected for r in active
               if r.backend is ir.Backend.CUDA and r.backend in k.backends}
        self.nvcc = find_nvcc() if ran else None
        self.todo = [j for j in resources.jobs([rendered]) if j.kernel.name in ran] \
            if self.nvcc is not None else []
        self.records: list | None = None
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._measure, daemon=True,
                                       name="gemmgen-verify-ptxas")
        if self.todo:
            self.thread.start()

    def _measure(self) -> None:
        from gemmgen.harness import resources

        try:
            self.records = resources.measure_all(self.todo, self.nvcc, workers=1)
        except Exception as e:  # reported by `report`, in the main thread
            self.error = e

    def report(self, rendered: Rendered, out: TextIO) -> None:
        from gemmgen.harness import resources
        from gemmgen.harness.nvcc import NvccError
        from gemmgen.harness.toolchain import describe_nvcc

        if not self.todo:
            return
        while self.thread.is_alive():  # a join that Ctrl-C can interrupt
            self.thread.join(0.2)
        if isinstance(self.error, NvccError):
            print(f"note: ptxas could not measure registers and spills: {self.error}", file=out)
            return
        if self.error is not None:
            raise self.error
        print(f"ptxas of {describe_nvcc(self.nvcc)}", file=out)
        for job, record in zip(self.todo, self.records or [], strict=True):
            for entry, u in sorted(record.kernels.items()):
                print(f"ptxas {job.arch} {entry}: {u['registers']} registers, "
                      f"{u['spill_stores'] + u['spill_loads']} bytes spilled", file=out)
            warning = resources.spill_warning(job, record)
            if warning is not None:
                print(warning.render(rendered.file.source), file=out)


def _uncovered_tiles(kernel: ir.Kernel) -> list[str]:
    """The LUT entries no standard case picks (no valid shape reaches them),
    of `kernel` as one backend sees it (`ir.Kernel.for_backend`)."""
    cases = standard_cases(kernel)
    if not kernel.tile_rules or tile_label(kernel, cases[0]) == "-":
        return []
    hit = {lut_entry(kernel, c) for c in cases}
    out = []
    for i, rule in enumerate(kernel.tile_rules):
        if i not in hit:
            conds = ", ".join(str(c) for c in rule.conds)
            out.append(f"tile_rule {i + 1} ({conds} -> {rule.tile}) was not run: no shape the "
                       "kernel accepts picks it")
    if len(kernel.tile_rules) not in hit:
        out.append(f"the default tile {kernel.tile} was not run: no shape the kernel accepts picks it")
    return out


class _Table:
    """The result table, printed a row at a time: its column widths come
    from the jobs, known before any runs (the number columns are as wide as
    their headers, which fit every value `_run_one` writes)."""

    HEAD = ("kernel", "backend", "case", "shapes", "tile", "max err", "max allowed", "result")

    def __init__(self, jobs: list[tuple[ir.Kernel, Runner, Case]], out: TextIO):
        self.out = out
        cells = [(k.name, r.name, c.name, c.describe(), tile_label(k, c)) for k, r, c in jobs]
        self.widths = [max(len(x) for x in col) for col in zip(self.HEAD[:5], *cells)]
        # "1.23e-05", "raised", "lowered", "-"; then "pass" / "FAIL"
        self.widths += [max(len(h), 9) for h in self.HEAD[5:7]] + [len(self.HEAD[7])]

    def _line(self, cells) -> None:
        print("  ".join(str(x).ljust(w) for x, w in zip(cells, self.widths)).rstrip(),
              file=self.out, flush=True)

    def header(self) -> None:
        self._line(self.HEAD)
        self._line(tuple("-" * w for w in self.widths))

    def row(self, r: Row) -> None:
        self._line((r.kernel, r.backend, r.case, r.shapes, r.tile, r.error, r.tolerance,
                    "pass" if r.passed else "FAIL"))


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `gemmgen verify`")
