"""What the `gemmgen` commands do: build, check, list, verify, explain, compile, tune.

`gemmgen.cli` parses the arguments and calls `run`; this module does the
work, turns every error into a message and an exit status, and is the only
module besides the CLI that prints.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from gemmgen.build import InputError, Rendered, check, render_all, write
from gemmgen.diagnostics import SpecError, clip_message, install_hint, plural
from gemmgen.output import OutputError, generated_dir, show
from gemmgen.project import output_folder

EXIT_OK, EXIT_STALE, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
# A spec with thousands of problems shows the first few dozen and a count.
MAX_DIAGNOSTICS_PER_FILE = 40


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
        out.append(f"{show(path)}: note: {plural(n, 'more error')} not shown\n")
    n = len(e.diagnostics) + len(getattr(e, "unreadable", []))
    out.append(f"{plural(n, 'error')}; nothing was written\n")
    return "".join(out)


def project_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` with a `specs/` folder holding
    specs, found upward as git finds `.git`; None if there is none."""
    start = start.absolute()
    for folder in (start, *start.parents):
        if (folder / "specs").is_dir() and any((folder / "specs").glob("*.gemm")):
            return folder
    return None


def _default_specs() -> tuple[Path, list[Path]]:
    """The project root above the working folder and every spec in it."""
    root = project_root(Path.cwd())
    if root is None:
        raise InputError("error: no specs given, and no specs/*.gemm here or in a folder above")
    return root, sorted((root / "specs").glob("*.gemm"))


def _render(paths: Sequence[str]) -> list[Rendered]:
    rendered = render_all([Path(p) for p in paths])
    _print_tuned_notes(rendered)
    return rendered


def _print_tuned_notes(rendered: list[Rendered]) -> None:
    """A positioned `note:` for each `tuned` block kept but not applied
    (another chip, another JAX): the exit status is unchanged."""
    from gemmgen.diagnostics import Diagnostic

    for r in rendered:
        for t in r.spec.tuned:
            if not t.applied:
                d = Diagnostic(t.loc, f"tuned {t.device}: kept, not applied: {t.why_not}",
                               severity="note", width=len(t.device))
                print(d.render(r.file.source), file=sys.stderr)


def cmd_build(args: argparse.Namespace) -> int:
    nvcc = None
    if getattr(args, "resources", False):
        from gemmgen.harness.toolchain import find_nvcc

        nvcc = find_nvcc()
        if nvcc is None:
            print("gemmgen: error: build --resources measures each CUDA kernel with nvcc, and no "
                  "nvcc was found: set GEMMGEN_NVCC or CUDA_HOME, `pip install nvidia-cuda-nvcc`, "
                  "or put the CUDA toolkit on PATH", file=sys.stderr)
            return EXIT_BAD_INPUT
    rendered = _render(args.specs or _default_specs()[1])
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
    print(f"{plural(len(rendered), 'spec')}, {plural(n_files, 'file')}: "
          f"{len(report.written)} written, {len(report.unchanged)} unchanged, "
          f"{len(report.removed)} removed{kept}")
    if nvcc is not None:
        status = _measure_resources(rendered, nvcc)
        if status != EXIT_OK:
            return status
    _print_spill_warnings(rendered)
    return EXIT_OK


def _measure_resources(rendered: list[Rendered], nvcc: Path) -> int:
    """`build --resources`: every CUDA kernel x declared arch through ptxas,
    a few nvcc processes at once, into the resource cache."""
    from gemmgen.harness import resources
    from gemmgen.harness.nvcc import NvccError
    from gemmgen.harness.toolchain import describe_nvcc

    todo = resources.jobs(rendered)
    workers = max(1, min(4, os.cpu_count() or 1))
    try:
        records = resources.measure_all(todo, nvcc, workers=workers)
    except NvccError as e:
        for line in clip_message(str(e)).splitlines():
            print(f"gemmgen: error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    spilling = sum(1 for r in records if r.spilling())
    print(f"resources: {plural(len(todo), 'kernel x arch build')} measured with "
          f"{describe_nvcc(nvcc)}: {plural(spilling, 'spill')}")
    return EXIT_OK


def _print_spill_warnings(rendered: list[Rendered]) -> None:
    """A warning for each kernel and arch whose recorded ptxas measurement
    spills (gemmgen.harness.resources: read from the cache, never compiled
    here)."""
    from gemmgen.harness import resources

    for d, source in sorted(resources.spill_warnings(rendered),
                            key=lambda w: (w[0].loc.path, w[0].loc.line, w[0].loc.col,
                                           w[0].message)):
        print(d.render(source), file=sys.stderr)


def cmd_check(args: argparse.Namespace) -> int:
    root, paths = (None, args.specs) if args.specs else _default_specs()
    rendered = _render(paths)
    problems = check(rendered, all_specs_root=root)
    for p in problems:
        note = f" ({p.note})" if p.note else ""
        print(f"{p.kind}: {show(p.path)}{note}", file=sys.stderr)
        if p.diff:
            sys.stderr.write(p.diff if p.diff.endswith("\n") else p.diff + "\n")
    failing = [p for p in problems if p.fails]
    if not failing:
        n_files = sum(len(r.files) for r in rendered)
        print(f"gemmgen check: {plural(len(rendered), 'spec')}, {plural(n_files, 'file')} "
              "up to date")
        return EXIT_OK
    fix = "gemmgen build " + " ".join(show(os.path.relpath(r.file.path)) for r in rendered)
    where = sorted({r.file.output for r in rendered})
    print(f"\n{', '.join(f'{w}/' for w in where)} is out of date ({plural(len(failing), 'problem')}); fix it with:\n"
          f"    {fix}", file=sys.stderr)
    gone = [p for p in failing if p.kind == "orphaned" and root is not None
            and p.path.parent == generated_dir(root, output_folder(root))]
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


# What `verify` needs beyond the generator's own dependencies, by import name.
VERIFY_EXTRAS = {"numpy": "numpy", "ml_dtypes": "ml-dtypes"}


def cmd_verify(args: argparse.Namespace) -> int:
    # verify runs its cases side by side on every core; BLAS threads of the
    # references (OpenBLAS spins while it waits) would only compete with
    # them. Read when NumPy loads, so set before any import of it; a
    # user's own setting wins.
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    rendered = _render([args.spec])
    # Running kernels needs the `verify` extra; say so instead of a traceback
    # (looked up, not imported: a broken install still fails loudly below).
    missing = [pip for name, pip in VERIFY_EXTRAS.items() if importlib.util.find_spec(name) is None]
    if missing:
        print(f"gemmgen: error: verify needs {', '.join(missing)}, which "
              f"{'is' if len(missing) == 1 else 'are'} not installed; "
              f"install the verification extras: {install_hint('verify')}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.cuda_arch is not None and (problem := arch_problem(args.cuda_arch)):
        print(f"gemmgen: error: --cuda-arch {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from gemmgen import verify
    from gemmgen.cases import Shape

    shape = Shape(m=args.m, n=args.n, k=args.k, groups=args.groups,
                  group_sizes=args.group_sizes)
    return verify.main(rendered[0], backends=args.backend, seed=args.seed,
                       kernels=args.kernel, out=sys.stdout, progress=sys.stderr,
                       cuda_arch=args.cuda_arch, resources=not args.no_resources, shape=shape,
                       workers=args.jobs)


def arch_problem(arch: str) -> str | None:
    """What is wrong with a CUDA arch given on the command line, or None:
    the archs a spec may declare (ir.CUDA_ARCHS), the one list of archs
    gemmgen knows."""
    from gemmgen import ir
    from gemmgen.diagnostics import one_of, suggest

    if arch in ir.CUDA_ARCHS:
        return None
    return (f"{arch}: not an arch gemmgen knows{suggest(arch, ir.CUDA_ARCHS)} (expected "
            f"{one_of(ir.CUDA_ARCHS)}, the archs a spec may declare)")


def cmd_explain(args: argparse.Namespace) -> int:
    from gemmgen import explain

    rendered = _render([args.spec])
    spec = rendered[0].spec
    for name in ("m", "n", "k", "groups"):
        v = getattr(args, name)
        if v is not None and v < (0 if name == "m" else 1):
            print(f"gemmgen: error: --{name} {v}: must be {'>= 0' if name == 'm' else 'positive'}",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
    device = None
    if args.device is not None:
        from gemmgen.devices import UnknownDevice, lookup
        try:
            device = lookup(args.device)
        except UnknownDevice as e:
            print(f"gemmgen: error: --device: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    # --counters runs at the dims given; explain's default m is for the roofline.
    asked = {d: getattr(args, d) for d in ("m", "n", "k") if getattr(args, d) is not None}
    m = args.m if args.m is not None else explain.DEFAULT_M
    dispatch = next((d for d in spec.dispatches if d.name == args.kernel), None)
    if dispatch is not None:
        print(explain.explain_dispatch(spec, dispatch, m=m, n=args.n, k=args.k,
                                       groups=args.groups, counters=args.counters, asked=asked,
                                       device=device))
        return EXIT_OK
    try:
        spec.kernel(args.kernel)
    except KeyError:
        names = [k.name for k in spec.kernels] + [d.name for d in spec.dispatches]
        from gemmgen.diagnostics import suggest
        print(f"gemmgen: error: {spec.path} has no kernel or dispatch '{args.kernel}'"
              f"{suggest(args.kernel, names)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(explain.explain(spec, args.kernel, m=m, n=args.n, k=args.k, groups=args.groups,
                          counters=args.counters, asked=asked, device=device))
    return EXIT_OK


def cmd_compile(args: argparse.Namespace) -> int:
    """Build the FFI library of each JAX entry point: the kernel's .cu and its
    _ffi.cc, as `build` renders them, with nvcc (or, with --emulate, g++ and
    the CPU emulator); with --torch, the library of each CUDA kernel's C ABI
    that its PyTorch op loads."""
    from gemmgen.backends.cuda import ffi as jax_ffi
    from gemmgen.backends.cuda import torch_ops

    rendered = _render([args.spec])[0]
    spec = rendered.spec
    if getattr(args, "torch", False):
        from gemmgen.harness import abi

        def build_abi(folder: Path, name: str, out: Path, archs: list[str]) -> tuple[Path, str]:
            if args.emulate:
                target = out / abi.library_name(name, emulated=True)
                shutil.copyfile(abi.emulated_abi(folder, name), target)
                return target, "CPU tensors, gemmgen's CUDA emulator"
            return abi.compile_abi(folder, name, out, archs), ", ".join(archs)

        names = [k.name for k in torch_ops.kernels(spec)]
        return _compile_each(args, rendered, names, build_abi, none="no CUDA kernel, so no "
                             "PyTorch op to compile", unknown="no CUDA kernel")
    from gemmgen.harness import ffi

    def build_ffi(folder: Path, name: str, out: Path, archs: list[str]) -> tuple[Path, str]:
        if args.emulate:
            target = out / ffi.library_name(name).replace(".so", "_emu.so")
            shutil.copyfile(ffi.emulated_ffi(folder, name), target)
            return target, "XLA's cpu platform, gemmgen's CUDA emulator"
        return ffi.compile_ffi(folder, name, out, archs), ", ".join(archs)

    names = [k.name for k in jax_ffi.kernels(spec)]
    return _compile_each(args, rendered, names, build_ffi,
                         none="no kernel emitted for both pallas_tpu and cuda, so no JAX entry "
                              "point to compile",
                         unknown="no JAX entry point",
                         listing=f" (kernels emitted for both backends: {', '.join(names)})")


def _compile_each(args: argparse.Namespace, rendered: Rendered, names: list[str], build, *,
                  none: str, unknown: str, listing: str = "") -> int:
    """`gemmgen compile`'s loop: check the kernels and archs asked for, render
    the spec's CUDA files into a temporary folder and build each library
    there with `build(folder, name, out, archs) -> (its path, what for)`."""
    import tempfile

    from gemmgen import ir
    from gemmgen.diagnostics import suggest
    from gemmgen.harness.cuda_emu import EmuCompileError
    from gemmgen.harness.nvcc import NvccError
    from gemmgen.harness.toolchain import ToolchainError

    spec = rendered.spec
    if not names:
        print(f"gemmgen: error: {spec.path} has {none}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for name in args.kernel or ():
        if name not in names:
            print(f"gemmgen: error: {spec.path} has {unknown} '{name}'"
                  f"{suggest(name, names)}{listing}", file=sys.stderr)
            return EXIT_BAD_INPUT
    archs = args.cuda_arch or list(spec.target(ir.Backend.CUDA).cuda_archs)
    for arch in archs:
        if problem := arch_problem(arch):
            print(f"gemmgen: error: --cuda-arch {problem}", file=sys.stderr)
            return EXIT_BAD_INPUT
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gemmgen-compile-") as tmp:
        folder = Path(tmp)
        for rel, text in rendered.files.items():
            if rel.parts[0] == "cuda":
                (folder / rel.name).write_text(text)
        for name in args.kernel or names:
            try:
                target, what = build(folder, name, out, archs)
            except (ToolchainError, NvccError, EmuCompileError) as e:
                print(f"gemmgen: error: {e}", file=sys.stderr)
                return EXIT_BAD_INPUT
            print(f"wrote {show(target)} ({what})")
    return EXIT_OK


def cmd_tune(args: argparse.Namespace) -> int:
    """Measure candidate tiles (or, --dry-run, list them) and write the
    winners into the spec's `tuned` block (gemmgen.tune.command)."""
    from gemmgen.tune.command import run_tune

    return run_tune(args)


def run(args: argparse.Namespace) -> int:
    """Run the parsed command; every error becomes a message and a status."""
    try:
        return COMMANDS[args.command](args)
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


COMMANDS = {"build": cmd_build, "check": cmd_check, "list": cmd_list, "verify": cmd_verify,
            "explain": cmd_explain, "compile": cmd_compile, "tune": cmd_tune}
