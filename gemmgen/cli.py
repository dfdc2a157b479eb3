"""The `gemmgen` command: build, check, list, verify, explain.

Exit status: 0 success; 1 `check` found stale files or `verify` a failing
kernel; 2 bad input (a spec with errors, a missing file, bad arguments) or a
file-system error; 3 an internal error (a bug in gemmgen).
This is the only module that prints or exits.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from gemmgen import __version__
from gemmgen.build import InputError, Rendered, check, render_all, write
from gemmgen.diagnostics import SpecError, clip_message
from gemmgen.output import OutputError, show

EXIT_OK, EXIT_STALE, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
# A spec with thousands of problems shows the first few dozen and a count.
MAX_DIAGNOSTICS_PER_FILE = 40


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 too; keep one format
        self.print_usage(sys.stderr)
        print(f"gemmgen: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _print_spec_error(e: SpecError) -> None:
    sys.stderr.write(render_report(e))


def render_report(e: SpecError, limit: int = MAX_DIAGNOSTICS_PER_FILE) -> str:
    """Every diagnostic of `e`, at most `limit` per file, then a count of the rest."""
    out: list[str] = [f"gemmgen: {u}\n" for u in getattr(e, "unreadable", [])]
    shown_per_file: dict[str, int] = {}
    hidden: dict[str, int] = {}
    for d in e.diagnostics:
        n = shown_per_file.get(d.loc.path, 0)
        if n >= limit:
            hidden[d.loc.path] = hidden.get(d.loc.path, 0) + 1
            continue
        shown_per_file[d.loc.path] = n + 1
        out.append(d.render(e.sources.get(d.loc.path)) + "\n")
    for path, n in sorted(hidden.items()):
        out.append(f"{show(path)}: note: {n} more error{'s' if n != 1 else ''} not shown\n")
    n = len(e.diagnostics) + len(getattr(e, "unreadable", []))
    out.append(f"{n} error{'s' if n != 1 else ''}; nothing was written\n")
    return "".join(out)


def _default_specs() -> list[Path]:
    specs = sorted(Path("specs").glob("*.gemm"))
    if not specs:
        raise InputError("error: no specs given and no specs/*.gemm here")
    return specs


def _render(paths: Sequence[str]) -> list[Rendered]:
    return render_all([Path(p) for p in paths])


def cmd_build(args: argparse.Namespace) -> int:
    rendered = _render(args.specs)
    report = write(rendered, on_wait=lambda: print(
        "gemmgen: waiting for another build of this project to finish", file=sys.stderr))
    for p in report.written:
        print(f"wrote {show(p)}")
    for p in report.removed:
        print(f"removed {show(p)} (no longer generated)")
    for p in report.kept:
        print(f"kept {show(p)} (not written by gemmgen)")
    n_files = sum(len(r.files) for r in rendered)
    kept = f", {len(report.kept)} kept" if report.kept else ""
    print(f"{len(rendered)} spec{'s' if len(rendered) != 1 else ''}, {n_files} files: "
          f"{len(report.written)} written, {len(report.unchanged)} unchanged, "
          f"{len(report.removed)} removed{kept}")
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    paths = args.specs or [str(p) for p in _default_specs()]
    rendered = _render(paths)
    problems = check(rendered, all_specs_root=Path(".") if not args.specs else None)
    for p in problems:
        note = f" ({p.note})" if p.note else ""
        print(f"{p.kind}: {show(p.path)}{note}", file=sys.stderr)
        if p.diff:
            sys.stderr.write(p.diff if p.diff.endswith("\n") else p.diff + "\n")
    failing = [p for p in problems if p.fails]
    if not failing:
        n_files = sum(len(r.files) for r in rendered)
        print(f"gemmgen check: {len(rendered)} specs, {n_files} files up to date")
        return EXIT_OK
    fix = "gemmgen build " + " ".join(show(r.file.path) for r in rendered)
    print(f"\ngenerated/ is out of date ({len(failing)} problem"
          f"{'s' if len(failing) != 1 else ''}); fix it with:\n    {fix}", file=sys.stderr)
    gone = [p for p in failing if p.kind == "orphaned" and p.path.parent.name == "generated"]
    for p in gone:
        print(f"and remove {show(p.path)}, whose spec is gone", file=sys.stderr)
    return EXIT_STALE


def cmd_list(args: argparse.Namespace) -> int:
    from gemmgen.describe import describe_kernel, describe_dispatch

    for r in _render(args.specs):
        print(f"{r.spec.path}:")
        for k in r.spec.kernels:
            print("  " + describe_kernel(k))
        for d in r.spec.dispatches:
            print("  " + describe_dispatch(d))
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from gemmgen import verify

    rendered = _render([args.spec])
    return verify.main(rendered[0], backends=args.backend, seed=args.seed,
                       kernels=args.kernel, out=sys.stdout, progress=sys.stderr)


def cmd_explain(args: argparse.Namespace) -> int:
    from gemmgen import explain

    rendered = _render([args.spec])
    spec = rendered[0].spec
    try:
        spec.kernel(args.kernel)
    except KeyError:
        names = [k.name for k in spec.kernels]
        from gemmgen.diagnostics import suggest
        print(f"gemmgen: error: {spec.path} has no kernel '{args.kernel}'"
              f"{suggest(args.kernel, names)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(explain.explain(spec, args.kernel, m=args.m, n=args.n, k=args.k, groups=args.groups,
                          counters=args.counters))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gemmgen", description="Generate GEMM kernels and launchers from a spec.")
    p.add_argument("--version", action="version", version=f"gemmgen {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    b = sub.add_parser("build", help="render specs into generated/<spec-stem>/")
    b.add_argument("specs", nargs="+", metavar="SPEC")
    b.set_defaults(func=cmd_build)
    c = sub.add_parser("check", help="exit 1 if generated/ differs from what build makes")
    c.add_argument("specs", nargs="*", metavar="SPEC", help="default: every specs/*.gemm")
    c.set_defaults(func=cmd_check)
    ls = sub.add_parser("list", help="print each kernel with its key parameters")
    ls.add_argument("specs", nargs="+", metavar="SPEC")
    ls.set_defaults(func=cmd_list)
    v = sub.add_parser("verify", help="run every kernel against the NumPy reference")
    v.add_argument("spec", metavar="SPEC")
    v.add_argument("--backend", action="append", metavar="NAME",
                   help="pallas-interpret, pallas-lower, cuda-emu, cuda (default: all available)")
    v.add_argument("--kernel", action="append", metavar="NAME", help="only these kernels")
    v.add_argument("--seed", type=int, default=0)
    v.set_defaults(func=cmd_verify)
    e = sub.add_parser("explain", help="the plan of one kernel in words, with its cost")
    e.add_argument("spec", metavar="SPEC")
    e.add_argument("kernel", metavar="KERNEL")
    e.add_argument("--m", type=int, default=4096)
    e.add_argument("--n", type=int, default=None)
    e.add_argument("--k", type=int, default=None)
    e.add_argument("--groups", type=int, default=8)
    e.add_argument("--counters", action="store_true",
                   help="also run the CUDA kernel once on the CPU emulator and print its counters "
                        "(bank conflicts, sectors, instruction counts)")
    e.set_defaults(func=cmd_explain)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SpecError as e:
        _print_spec_error(e)
        return EXIT_BAD_INPUT
    except (InputError, OutputError) as e:
        for line in str(e).splitlines():
            print(f"gemmgen: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except OSError as e:  # anything the file system refuses that no rule above names
        where = f" ({show(e.filename)})" if getattr(e, "filename", None) else ""
        print(f"gemmgen: error: {os.strerror(e.errno) if e.errno else e}{where}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:  # a bug in gemmgen: say so briefly, traceback on request
        if os.environ.get("GEMMGEN_DEBUG"):
            raise
        print(f"gemmgen: internal error: {type(e).__name__}: {clip_message(str(e))}\n"
              "gemmgen: this is a bug in gemmgen; rerun with GEMMGEN_DEBUG=1 for the traceback",
              file=sys.stderr)
        return EXIT_INTERNAL


def entry() -> None:  # pragma: no cover
    raise SystemExit(main())


if __name__ == "__main__":  # pragma: no cover
    entry()
