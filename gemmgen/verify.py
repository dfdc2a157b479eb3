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
memory), not whatever is on disk. The cases (gemmgen/cases.py) cover every
tile of a kernel's LUT, on each backend the LUT that backend uses (its own,
`tile pallas_tpu ...`, or the shared one); the table says which tile each
case ran. The CPU
emulator plays the spec's declared CUDA arch with the least shared memory
per block (`--cuda-arch` picks another).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from gemmgen import ir
from gemmgen.build import Rendered
from gemmgen.cases import Case, lut_entry, standard_cases, tile_label
from gemmgen.harness import verify_cuda, verify_pallas
from gemmgen.harness.runner import Runner
from gemmgen.reference import compare, reference


@dataclass
class Row:
    kernel: str
    backend: str
    case: str
    shapes: str
    tile: str
    error: str
    tolerance: str
    passed: bool
    detail: str = ""


def _runners() -> list[Runner]:
    return [*verify_pallas.runners(), *verify_cuda.runners()]


RUNNER_NAMES = ("pallas-interpret", "pallas-lower", "pallas-tpu", "cuda-emu", "cuda-emu-cpp",
                "cuda")


def main(rendered: Rendered, *, backends: list[str] | None, seed: int,
         kernels: list[str] | None, out: TextIO, progress: TextIO,
         cuda_arch: str | None = None, resources: bool = True) -> int:
    spec = rendered.spec
    runners = {r.name: r for r in _runners()}
    chosen = backends or [n for n in RUNNER_NAMES if n in runners]
    for name in chosen:
        if name not in RUNNER_NAMES:
            print(f"gemmgen: error: unknown backend '{name}' (expected "
                  f"{', '.join(RUNNER_NAMES)})", file=progress)
            return 2
    selected = [k for k in spec.kernels if kernels is None or k.name in kernels]
    if kernels:
        missing = sorted(set(kernels) - {k.name for k in spec.kernels})
        if missing:
            print(f"gemmgen: error: {spec.path} has no kernel {', '.join(missing)}", file=progress)
            return 2
    rows: list[Row] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gemmgen-verify-") as tmp:
        active: list[Runner] = []
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
                for view in [k.for_backend(r.backend)] for c in standard_cases(view)]
        for i, (kernel, runner, case) in enumerate(jobs, 1):
            print(f"[{i}/{len(jobs)}] {kernel.name} on {runner.name}: {case.name} "
                  f"({case.describe()})", file=progress, flush=True)
            rows.append(_run_one(kernel, runner, case, seed))
    _table(rows, out)
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
    if resources:
        _resources(rendered, selected, active, out)
    failed = [r for r in rows if not r.passed]
    for r in failed:
        print(f"\nFAIL {r.kernel} on {r.backend} ({r.case}):\n{r.detail}", file=out)
    print(f"\n{len(rows) - len(failed)} passed, {len(failed)} failed"
          + (f", {len(skipped)} backend(s) unavailable" if skipped else ""), file=out)
    if not rows:
        print("nothing was run: no kernel targets an available backend", file=out)
        return 1
    return 1 if failed else 0


def _resources(rendered: Rendered, selected: list[ir.Kernel], active: list[Runner],
               out: TextIO) -> None:
    """With nvcc on this machine: ptxas's registers and spills of each CUDA
    kernel that ran, on every declared arch (measured once, then read from
    the resource cache that `build` warns from), and a warning, never a
    failure, for each that spills."""
    from gemmgen.harness import resources
    from gemmgen.harness.nvcc import NvccError
    from gemmgen.harness.toolchain import find_nvcc

    ran = {k.name for k in selected for r in active
           if r.backend is ir.Backend.CUDA and r.backend in k.backends}
    nvcc = find_nvcc() if ran else None
    if nvcc is None:
        return
    todo = [j for j in resources.jobs([rendered]) if j.kernel.name in ran]
    try:
        records = resources.measure_all(todo, nvcc, workers=2)
    except NvccError as e:
        print(f"note: ptxas could not measure registers and spills: {e}", file=out)
        return
    for job, record in zip(todo, records, strict=True):
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


def _run_one(kernel: ir.Kernel, runner: Runner, case: Case, seed: int) -> Row:
    inputs = case.inputs(kernel, seed)
    shapes = case.describe()
    tile = tile_label(kernel, case)
    try:
        t0 = time.perf_counter()
        actual = runner.run(kernel, case, inputs)
        dt = time.perf_counter() - t0
    except Exception as e:
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        if os.environ.get("GEMMGEN_VERIFY_TRACEBACK"):
            detail = traceback.format_exc()
        return Row(kernel.name, runner.name, case.name, shapes, tile, "raised", "-", False, detail)
    if not runner.checks_numbers:
        return Row(kernel.name, runner.name, case.name, shapes, tile, "lowered", "-", True,
                   f"{dt:.2f}s")
    expected = reference(kernel, **inputs)
    result = compare(actual, expected, kernel, k=case.k, inputs=inputs)
    err = f"{result.max_abs_err:.3g}"
    finite = result.allowed[np.isfinite(result.allowed)] if hasattr(result.allowed, "shape") \
        else np.asarray([])
    tol = f"{float(finite.max()):.3g}" if finite.size else "-"
    return Row(kernel.name, runner.name, case.name, shapes, tile, err, tol, result.passed,
               result.detail)


def _table(rows: list[Row], out: TextIO) -> None:
    head = ("kernel", "backend", "case", "shapes", "tile", "max err", "max allowed", "result")
    body = [(r.kernel, r.backend, r.case, r.shapes, r.tile, r.error, r.tolerance,
             "pass" if r.passed else "FAIL") for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    for line in [head, tuple("-" * w for w in widths), *body]:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip(), file=out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `gemmgen verify`")
