"""`gemmgen tune`: the command (arguments in gemmgen/cli.py; exit statuses
as every command's: 0 done, 2 bad input, 3 an internal error)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gemmgen.diagnostics import SpecError
from gemmgen.output import show

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 2, 3


def run_tune(args: argparse.Namespace) -> int:
    """Measure candidate tiles (or, --dry-run, list them) and write the
    winners into the spec's `tuned` block (gemmgen.tune)."""
    import json

    from gemmgen.build import load
    from gemmgen.devices import UnknownDevice, lookup
    from gemmgen.tune import rewrite, session
    from gemmgen.tune import shapes as tshapes
    from gemmgen.tune.candidates import DEFAULT_MAX_CANDIDATES

    spec, _ = load(Path(args.spec))
    path = Path(args.spec)
    text = path.read_bytes().decode("utf-8")  # as it is: CRLF, BOM and all
    try:
        device = lookup(args.device) if args.device else session.default_device(spec)
        asked: list[tshapes.Shape] = []
        if args.shapes:
            asked += tshapes.parse_shapes(args.shapes)
        if args.shapes_file:
            asked += tshapes.parse_shapes(Path(args.shapes_file).read_text(encoding="utf-8"),
                                          show(args.shapes_file))
        for name in args.preset or ():
            asked += tshapes.preset(name)
        previous = next((b.rules for b in rewrite.find_blocks(text, show(path))
                         if b.name == device.name), ())
        recorded = None
        if args.measurements:
            recorded = session.RecordedTimer(json.loads(
                Path(args.measurements).read_text(encoding="utf-8")))
            if recorded.device != device.name:
                raise session.TuneError(f"--measurements {args.measurements}: measured on "
                                        f"{recorded.device}, not {device.name}")
        if recorded is not None:
            if asked:
                raise session.TuneError("--measurements takes its shapes from the file: give "
                                        "no --shapes, --shapes-file or --preset")
            plan = session.replay_plan(spec, device, recorded, args.kernel)
        else:
            plan = session.make_plan(spec, device, args.kernel, asked or None,
                                     previous=previous, max_candidates=args.max_candidates
                                     or DEFAULT_MAX_CANDIDATES)
        if not args.dry_run and not args.measurements:
            session.check_can_time(plan, args.interpret)
    except (UnknownDevice, tshapes.ShapeError, session.TuneError, rewrite.RewriteError,
            OSError, ValueError, KeyError) as e:
        print(f"gemmgen: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.dry_run:
        sys.stdout.write(session.dry_run_text(plan))
        if args.out:
            _write_json(Path(args.out), session.report_json(plan, None, None))
        return EXIT_OK
    import time

    from gemmgen.tune.timing import BATCH, SAMPLES, JaxTimer, Provenance, provenance

    timer = JaxTimer(device, interpret=args.interpret or recorded is not None,
                     samples=args.samples or SAMPLES, batch=args.batch or BATCH)
    prov = Provenance(**recorded.provenance) if recorded is not None else provenance(
        args.interpret)
    order = [x.name for x in spec.kernels]
    notes: list[str] = []  # the last block's notes (kept and dropped rules)

    def write(results: list) -> None:
        """The block and the JSON as they stand: after every job, so that a
        run cut off (a device's time limit) keeps what it measured."""
        if args.out:
            _write_json(Path(args.out), session.report_json(plan, results, prov))
        if not any(r.winner is not None for r in results):
            return
        # The kernels measured so far, in the spec's order.
        kernels = sorted({j.kernel.name: j.kernel for j in plan.jobs
                          if any(r.kernel == j.kernel.name for r in results)}.values(),
                         key=lambda k: order.index(k.name))
        notes[:] = []
        new = session.new_text(spec, text, device, kernels, results, prov, notes)
        session.check_text(new, path)  # a SpecError leaves the spec as it was
        rewrite.write_atomically(path, new)

    start = time.monotonic()
    try:
        results = session.measure(
            plan, spec, recorded or timer, timer.check, previous,
            progress=lambda line: print(line, file=sys.stderr),
            out_of_time=lambda: bool(args.time_budget)
            and time.monotonic() - start > args.time_budget,
            on_result=write)
    except SpecError as e:  # a bug: the candidates are legal tiles
        print(str(e), file=sys.stderr)
        print(f"gemmgen: error: the block did not validate; {show(path)} keeps the block as "
              "written after the previous kernel and shape", file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        timer.close()
    for line in session.summary(results):
        print(line)
    for job in plan.jobs:
        if job.skipped:
            print(f"{job.kernel.name} at {job.shape}: skipped: {job.skipped}")
    if args.out:
        _write_json(Path(args.out), session.report_json(plan, results, prov))
    if not any(r.winner is not None for r in results):
        print(f"gemmgen: error: no candidate tile ran and passed the reference check; "
              f"{show(path)} is unchanged", file=sys.stderr)
        return EXIT_INTERNAL
    for note in [*plan.notes, *notes]:
        print(f"note: {note}")
    print(f"wrote {show(path)}: tuned {device.name} block "
          f"({sum(1 for r in results if r.winner is not None)} shapes measured)")
    return EXIT_OK


def _write_json(path: Path, data: dict) -> None:
    import json

    from gemmgen.tune.rewrite import write_atomically

    write_atomically(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {show(path)}")
