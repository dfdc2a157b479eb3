"""One `gemmgen tune` run: which kernels and shapes, their candidates (the
dry run's table), the measurements, the winners and the new block.

The timer and the winner check are parameters (`Timer`, `Check`), so the
choice of winners and the rewrite are tested with a fake timer and no JAX.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gemmgen import ir
from gemmgen.devices import Device
from gemmgen.tune.candidates import Candidate, candidates, tile_text
from gemmgen.tune.rewrite import (
    Block,
    TunedRule,
    block_text,
    find_blocks,
    parse_rule,
    rule_sections,
)
from gemmgen.tune.shapes import Shape, default_shapes, fit_to_kernel
from gemmgen.tune.timing import Measurement, Provenance
from gemmgen.tune.winners import Measured, ShapeResult, choose, previous_tile, synthesize

Timer = Callable[[ir.Kernel, ir.Spec, Shape, ir.Tile], Measurement]
Check = Callable[[ir.Kernel, ir.Spec, ir.Tile], str]


class TuneError(ValueError):
    """Bad input to tune: an unknown kernel, a device without a backend."""


@dataclass(frozen=True, slots=True)
class Job:
    """One kernel at one shape, with its candidates (or why it is skipped)."""

    kernel: ir.Kernel  # the backend's view
    shape: Shape
    candidates: tuple[Candidate, ...] = ()
    skipped: str = ""


@dataclass
class Plan:
    backend: ir.Backend
    device: Device
    jobs: list[Job] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # kernels skipped, and why


def backend_of(device: Device) -> ir.Backend:
    return ir.Backend.PALLAS_TPU if device.tpu is not None else ir.Backend.CUDA


def _tunable(kernel: ir.Kernel) -> str:
    """Why tune does not tune `kernel` ("" if it does): tile GEMMs only."""
    if kernel.algorithm is not ir.Algorithm.TILE:
        return f"algorithm '{kernel.algorithm.value}' has no block tile"
    if kernel.op in (ir.Op.TGMM, ir.Op.QUANTIZE):
        return (f"op '{kernel.op.value}' is not tuned (its grid is not the matmul's: the cost "
                "model does not cover it)")
    return ""


def select(spec: ir.Spec, backend: ir.Backend, names: list[str] | None,
           notes: list[str]) -> list[ir.Kernel]:
    """The kernels to tune, as the backend sees them: `names` (each must be
    a tunable kernel of the backend), else every tunable one (a swept
    kernel's variants are kernels of their own)."""
    from gemmgen.diagnostics import suggest

    mine = spec.kernels_for(backend)
    if not mine:
        raise TuneError(f"{spec.path} has no {backend.value} kernel to tune")
    if names:
        out = []
        by_name = {k.name: k for k in mine}
        for name in names:
            if name not in by_name:
                others = [k.name for k in spec.kernels]
                why = "is not built for " + backend.value if name in others else "is not a kernel"
                raise TuneError(f"--kernel {name}: {why} of {spec.path}"
                                f"{suggest(name, list(by_name))}")
            if why := _tunable(by_name[name]):
                raise TuneError(f"--kernel {name}: {why}")
            out.append(by_name[name])
        return [k.for_backend(backend) for k in out]
    out = []
    for k in mine:
        if why := _tunable(k):
            notes.append(f"{k.name}: skipped: {why}")
        else:
            out.append(k.for_backend(backend))
    if not out:
        raise TuneError(f"{spec.path} has no {backend.value} tile GEMM to tune")
    return out


def make_plan(spec: ir.Spec, device: Device, names: list[str] | None,
              shapes: list[Shape] | None, *, max_candidates: int,
              previous: tuple[TunedRule, ...] = ()) -> Plan:
    """Every (kernel, shape) job with its candidates: the best by the cost
    model, plus the kernel's LUT tile for the shape and the previous
    block's tile (baselines, measured whatever the model says)."""
    backend = backend_of(device)
    plan = Plan(backend, device)
    for kernel in select(spec, backend, names, plan.notes):
        for asked in shapes or default_shapes(kernel):
            shape, why = fit_to_kernel(kernel, asked)
            if shape is None:
                plan.jobs.append(Job(kernel, asked, skipped=why))
                continue
            baselines = {"LUT": lut_tile(kernel, shape)}
            if (old := previous_tile(previous, kernel.name, shape)) is not None:
                baselines["tuned"] = old
            found = candidates(kernel, spec, shape, backend, device,
                               max_candidates=max_candidates, baselines=baselines)
            plan.jobs.append(Job(kernel, shape, tuple(found),
                                 "" if found else "no legal tile at this shape"))
    return plan


def replay_plan(spec: ir.Spec, device: Device, recorded: RecordedTimer,
                names: list[str] | None) -> Plan:
    """The plan of `--measurements`: each (kernel, shape) the file measured,
    with the tiles it measured that are legal tiles of the kernel now (a
    spec's tile dims are at most TILE_MAX; the checks of `problems`)."""
    from gemmgen.tune.candidates import TILE_MAX, predict, problems, spec_for, with_tile

    backend = backend_of(device)
    plan = Plan(backend, device)
    sp = spec_for(spec, device)
    for kernel in select(spec, backend, names, plan.notes):
        for shape in recorded.shapes(kernel.name):
            lut = lut_tile(kernel, shape)
            found = []
            for tile in recorded.tiles(kernel.name, shape):
                if max(tile.m, tile.n, tile.k) > TILE_MAX or problems(
                        with_tile(kernel, backend, tile), sp, backend):
                    continue
                steps, seconds = predict(kernel, shape, tile, device)
                found.append(Candidate(tile, 0, steps, seconds,
                                       "LUT" if tile == ir.Tile(lut.m, lut.n, lut.k) else ""))
            plan.jobs.append(Job(kernel, shape, tuple(found),
                                 "" if found else "no measured tile is legal now"))
    return plan


def lut_tile(kernel: ir.Kernel, shape: Shape) -> ir.Tile:
    """The tile the kernel's LUT picks at the shape today."""
    return kernel.tile_for(shape.m, shape.n, shape.k, g=shape.g or None)


def dry_run_text(plan: Plan) -> str:
    """The candidates of each job: tile, VMEM (or shared memory), grid steps,
    predicted time, and which is a baseline."""
    memory = "VMEM MiB" if plan.backend is ir.Backend.PALLAS_TPU else "smem KiB"
    unit = 2**20 if plan.backend is ir.Backend.PALLAS_TPU else 2**10
    lines = [f"device {plan.device.name} ({plan.device.label}), backend {plan.backend.value}"]
    lines += [f"note: {n}" for n in plan.notes]
    for job in plan.jobs:
        lines.append("")
        lines.append(f"{job.kernel.name} at {job.shape}:")
        if job.skipped:
            lines.append(f"  skipped: {job.skipped}")
            continue
        lines.append(f"  {'tile':<22} {memory:>9} {'steps':>9} {'predicted':>12}")
        for c in sorted(job.candidates, key=lambda c: c.predicted_s):
            mark = f"  ({_baseline_words(c.why)})" if c.why else ""
            lines.append(f"  {c.label:<22} {c.vmem_bytes / unit:>9.2f} {c.steps:>9} "
                         f"{c.predicted_s * 1e3:>9.3f} ms{mark}")
    return "\n".join(lines) + "\n"


def _baseline_words(why: str) -> str:
    return {"LUT": "the kernel's LUT tile", "tuned": "the previous tuned tile"}.get(why, why)


def measure(plan: Plan, spec: ir.Spec, timer: Timer, check: Check,
            previous: tuple[TunedRule, ...] = (),
            progress: Callable[[str], None] = lambda s: None,
            out_of_time: Callable[[], bool] = lambda: False,
            on_result: Callable[[list[ShapeResult]], None] = lambda r: None,
            ) -> list[ShapeResult]:
    """Time every candidate of every job, then choose each job's winner.
    `on_result` gets the results so far after each job (the command writes
    the block then, so a run cut off loses only the job in progress); once
    `out_of_time()` holds, the jobs not started are marked skipped."""
    results: list[ShapeResult] = []
    for i, job in enumerate(plan.jobs):
        if job.skipped:
            continue
        if out_of_time():
            plan.jobs[i] = Job(job.kernel, job.shape, job.candidates,
                               skipped="the time budget (--time-budget) ran out first")
            continue
        measured = []
        for c in job.candidates:
            m = timer(job.kernel, spec, job.shape, c.tile)
            measured.append(Measured(c, m))
            what = f"{m.seconds * 1e3:.3f} ms" if m.seconds is not None else f"failed: {m.error}"
            progress(f"{job.kernel.name} at {job.shape}, tile {c.label}: {what}")
        result = choose(job.kernel.name, job.shape, measured,
                        lambda tile, k=job.kernel: check(k, spec, tile),
                        previous_tile(previous, job.kernel.name, job.shape))
        results.append(result)
        on_result(results)
    return results


class RecordedTimer:
    """A `Timer` that reads the measurements of an earlier run (the JSON of
    `--out`) instead of timing: `gemmgen tune --measurements FILE` writes the
    block from what a device measured, with the winner check run here (in
    interpret mode), e.g. after a run on a lent TPU was cut off before it
    wrote its block. A tile the file lacks counts as failed."""

    def __init__(self, data: dict) -> None:
        self.provenance = data.get("provenance") or {}
        self.device = data.get("device")
        self._seen: dict[tuple[str, Shape, tuple[int, int, int]], Measurement] = {}
        for job in data.get("jobs", ()):
            shape = Shape(job["m"], job["n"], job["k"], job.get("g", 0))
            for c in job.get("candidates", ()):
                if "seconds" not in c and not c.get("error"):
                    continue  # listed, not measured (a dry run)
                self._seen[(job["kernel"], shape, tuple(c["tile"]))] = Measurement(
                    c.get("seconds"), c.get("noise") or 0.0, c.get("compile_s") or 0.0,
                    c.get("error") or "")

    def shapes(self, kernel: str) -> list[Shape]:
        """The shapes the file measured `kernel` at, in its order."""
        out: list[Shape] = []
        for name, shape, _ in self._seen:
            if name == kernel and shape not in out:
                out.append(shape)
        return out

    def tiles(self, kernel: str, shape: Shape) -> list[ir.Tile]:
        return [ir.Tile(*t) for (name, s, t) in self._seen if name == kernel and s == shape]

    def __call__(self, kernel: ir.Kernel, spec: ir.Spec, shape: Shape,
                 tile: ir.Tile) -> Measurement:
        got = self._seen.get((kernel.name, shape, (tile.m, tile.n, tile.k)))
        return got if got is not None else Measurement(None, error="not in the measurements")


def block_body(spec: ir.Spec, kernels: list[ir.Kernel], results: list[ShapeResult],
               text: str, old: Block | None, notes: list[str]) -> list[str]:
    """The block's comments and rules: the kernels measured now, then the
    previous block's rules (with their comments) of kernels not measured
    now that the spec still has."""
    body: list[str] = []
    tuned = {k.name for k in kernels}
    previous = rule_sections(text, old) if old is not None else []
    for kernel in kernels:
        mine = [r for r in results if r.kernel == kernel.name]
        for lines in synthesize(kernel, mine):
            body += [f"# {c}" for c in lines.comments]
            body.append(lines.rule.text())
        # The kernel's previous rules for shapes this run did not measure
        # (another n and k) stay: tuning a kernel at one shape must not drop
        # what an earlier run measured at another.
        shapes = [r.shape for r in mine]
        for name, lines in previous:
            if name == kernel.name and not superseded(parse_rule(lines[-1]), shapes):
                body += lines
    if old is not None:
        names = {k.name for k in spec.kernels}
        for kernel, lines in previous:
            if kernel in tuned:
                continue
            if kernel not in names:
                notes.append(f"dropped the previous rule for '{kernel}', which {spec.path} no "
                             "longer has")
                continue
            body += lines
    return body


def superseded(rule: TunedRule, shapes: list[Shape]) -> bool:
    """Whether a run that measured `shapes` rewrites `rule`: its n and k
    (the `n==` / `k==` conditions synthesized rules carry) are those of a
    measured shape, or, for a rule without them, it covers one."""
    fixed = [(var, value) for var, cmp, value in rule.conds
             if var in ("n", "k") and cmp is ir.Cmp.EQ]
    for s in shapes:
        if fixed and all(getattr(s, var) == value for var, value in fixed):
            return True
        if not fixed and rule.covers(s.m, s.n, s.k, s.g):
            return True
    return False


def provenance_fields(p: Provenance) -> dict[str, str]:
    """The block's fields. jaxlib is not one: JAX refuses to run with any
    jaxlib but its own release's, so `jax` names both (--out records it)."""
    return {"device": p.device, "jax": p.jax, "libtpu": p.libtpu, "date": p.date}


def new_text(spec: ir.Spec, text: str, device: Device, kernels: list[ir.Kernel],
             results: list[ShapeResult], prov: Provenance, notes: list[str]) -> str:
    """The spec's text with the device's tuned block replaced (or appended)."""
    from gemmgen.tune.rewrite import replace_block

    blocks = find_blocks(text, spec.path)
    old = next((b for b in blocks if b.name == device.name), None)
    for b in blocks:
        if b.name != device.name:
            notes.append(f"kept the tuned block for {b.name} (line {b.start + 1}) untouched")
    body = block_body(spec, kernels, results, text, old, notes)
    return replace_block(text, device.name, block_text(device.name, provenance_fields(prov), body),
                         spec.path)


def summary(results: list[ShapeResult]) -> list[str]:
    """A line per job: the winner against the kernel's LUT tile."""
    out = []
    for r in results:
        if r.winner is None:
            failed = sum(1 for m in r.measured if not m.ok)
            out.append(f"{r.kernel} at {r.shape}: no tile ran and passed ({failed} failed)")
            continue
        w = r.winner
        line = f"{r.kernel} at {r.shape}: {tile_text(w.candidate.tile)} " \
               f"{w.measurement.seconds * 1e3:.3f} ms"
        lut = next((m for m in r.measured if m.candidate.why == "LUT"
                    and m.measurement.seconds is not None), None)
        if lut is not None and lut is not w:
            line += f" (LUT tile {tile_text(lut.candidate.tile)}: " \
                    f"{lut.measurement.seconds * 1e3:.3f} ms)"
        if r.kept_previous:
            line += " (previous tile kept)"
        failed = [m for m in r.measured if not m.ok]
        if failed:
            line += f"; {len(failed)} failed: " + ", ".join(
                f"{tile_text(m.candidate.tile)} ({m.check or m.measurement.error})"
                for m in failed)
        out.append(line)
    return out


def report_json(plan: Plan, results: list[ShapeResult] | None,
                prov: Provenance | None) -> dict:
    """Everything a run saw, for --out."""
    by_job = {(r.kernel, r.shape): r for r in results or []}
    jobs = []
    for job in plan.jobs:
        entry: dict = {"kernel": job.kernel.name, "m": job.shape.m, "n": job.shape.n,
                       "k": job.shape.k, "g": job.shape.g}
        if job.skipped:
            entry["skipped"] = job.skipped
        r = by_job.get((job.kernel.name, job.shape))
        rows = []
        for i, c in enumerate(job.candidates):
            row = {"tile": [c.tile.m, c.tile.n, c.tile.k], "memory_bytes": c.vmem_bytes,
                   "steps": c.steps, "predicted_s": c.predicted_s, "baseline": c.why}
            if r is not None:
                m = r.measured[i]
                row.update(seconds=m.measurement.seconds, noise=m.measurement.noise,
                           compile_s=m.measurement.compile_s, error=m.measurement.error,
                           check=m.check)
            rows.append(row)
        entry["candidates"] = rows
        if r is not None and r.winner is not None:
            t = r.winner.candidate.tile
            entry.update(winner=[t.m, t.n, t.k], kept_previous=r.kept_previous)
        jobs.append(entry)
    out: dict = {"device": plan.device.name, "backend": plan.backend.value, "jobs": jobs,
                 "notes": plan.notes}
    if prov is not None:
        out["provenance"] = {**provenance_fields(prov), "jaxlib": prov.jaxlib}
    return out


def default_device(spec: ir.Spec) -> Device:
    """The spec's TPU (`target pallas_tpu { tpu ... }`) when it has Pallas
    kernels; a CUDA-only spec must name its GPU."""
    from gemmgen.devices import DEVICES

    if not spec.kernels_for(ir.Backend.PALLAS_TPU):
        raise TuneError(f"{spec.path} has no pallas_tpu kernel: name the GPU whose CUDA tiles to "
                        "list with --device (e.g. --device h100 --dry-run)")
    target = spec.target(ir.Backend.PALLAS_TPU)
    return DEVICES[target.tpu if target is not None else "v5e"]


def check_can_time(plan: Plan, interpret: bool) -> None:
    """A TuneError unless this machine can time the plan's candidates."""
    import importlib.util

    if plan.backend is ir.Backend.CUDA:
        raise TuneError(f"--device {plan.device.name}: gemmgen tune times Pallas tiles only "
                        "(on a TPU, or --interpret); CUDA tiles need a GPU and are not timed "
                        "by this version: only --dry-run works here")
    missing = [n for n in ("jax", "numpy", "ml_dtypes") if importlib.util.find_spec(n) is None]
    if missing:
        raise TuneError(f"timing tiles needs {', '.join(missing)}, not installed here (install "
                        "the verification extras and JAX); --dry-run works without them")
    if not interpret:
        from gemmgen.tune.timing import has_tpu, tpu_kind

        if not has_tpu():
            raise TuneError("no TPU here: run gemmgen tune on a TPU, or pass --interpret to run "
                            "the whole flow on the CPU (tiny shapes; its times are not "
                            "measurements), or --dry-run to list the candidates")
        kind, generation = tpu_kind()
        if generation != plan.device.name:
            # Tiles measured on one generation are written as another's
            # only by mistake: the block would be applied on the wrong chip.
            raise TuneError(f"--device {plan.device.name}: this machine's TPU is "
                            f"{generation or 'not a known generation'} ({kind!r}); tune "
                            f"{plan.device.name} tiles on a {plan.device.name}, or pass "
                            f"--device {generation}" if generation else
                            f"--device {plan.device.name}: this machine's TPU ({kind!r}) is "
                            "not a generation gemmgen knows")


def check_text(text: str, path) -> None:
    """Parse and validate the rewritten spec before it is written (a
    SpecError leaves the file as it was)."""
    from gemmgen import backends
    from gemmgen.parse import parse
    from gemmgen.validate import validate

    display = str(path)
    validate(parse(text, display), stem=path.stem, diagnose=backends.diagnose)
