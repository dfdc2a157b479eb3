"""The `gemmgen` command: build, check, list, verify, explain, compile, tune.

Exit status: 0 success; 1 `check` found stale files or `verify` a failing
kernel; 2 bad input (a spec with errors, a missing file, bad arguments) or a
file-system error; 3 an internal error (a bug in gemmgen).
This module parses the arguments; `gemmgen.commands` does the work.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gemmgen import __version__

EXIT_BAD_INPUT = 2  # argparse's status for bad arguments, and ours for bad input


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 too; keep one format
        self.print_usage(sys.stderr)
        print(f"gemmgen: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _sizes(text: str) -> tuple[int, ...]:
    """`5,0,17` -> (5, 0, 17)."""
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 5,0,17, not {text!r}") from None


def _positive(text: str) -> int:
    """A count of at least 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gemmgen", description="Generate GEMM kernels and launchers from a spec.")
    p.add_argument("--version", action="version", version=f"gemmgen {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    b = sub.add_parser("build", help="render specs into generated/<spec-stem>/")
    b.add_argument("specs", nargs="*", metavar="SPEC",
                   help="default: every specs/*.gemm of the project (found upward from here)")
    b.add_argument("--resources", action="store_true",
                   help="also compile every CUDA kernel for each declared arch with nvcc and "
                        "record ptxas's registers and spills, which every build warns about")
    c = sub.add_parser("check", help="exit 1 if generated/ differs from what build makes")
    c.add_argument("specs", nargs="*", metavar="SPEC",
                   help="default: every specs/*.gemm of the project (found upward from here)")
    ls = sub.add_parser("list", help="print each kernel with its key parameters")
    ls.add_argument("specs", nargs="+", metavar="SPEC")
    v = sub.add_parser("verify", help="run every kernel against the NumPy reference")
    v.add_argument("spec", metavar="SPEC")
    v.add_argument("--backend", action="append", metavar="NAME",
                   help="pallas-interpret, pallas-lower, pallas-tpu, cuda-emu, cuda-emu-cpp, cuda "
                        "(default: all available)")
    v.add_argument("--kernel", action="append", metavar="NAME", help="only these kernels")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("-j", "--jobs", type=_positive, metavar="N", default=None,
                   help="cases run at once, each kernel's on one thread (default: one per "
                        "core); the table is the same for any N")
    v.add_argument("--cuda-arch", metavar="ARCH",
                   help="the arch the CUDA emulator plays (default: the spec's declared arch "
                        "with the least shared memory)")
    v.add_argument("--no-resources", action="store_true",
                   help="skip ptxas's registers and spills of each CUDA kernel (with nvcc "
                        "installed, verify compiles each one for every declared arch)")
    v.add_argument("--m", type=int, metavar="M",
                   help="also run each kernel at your own shape (the case 'your_shape', beside "
                        "the standard cases): rows of lhs; for the masked layout each group's "
                        "capacity")
    v.add_argument("--n", type=int, metavar="N", help="your shape's n (default: the kernel's "
                   "static n, else that of its first standard case)")
    v.add_argument("--k", type=int, metavar="K", help="your shape's k (default: the kernel's "
                   "static k, else that of its first standard case)")
    v.add_argument("--groups", type=int, metavar="G",
                   help="grouped kernels: your shape's number of groups, m rows split evenly "
                        "over them (default: 8)")
    v.add_argument("--group-sizes", type=_sizes, metavar="S,S,...",
                   help="grouped kernels: your shape's group sizes, e.g. 5,0,17 (m defaults to "
                        "their sum); for the masked layout, each group's valid rows")
    e = sub.add_parser("explain", help="the plan of one kernel (or M dispatcher) in words, "
                       "with its cost")
    e.add_argument("spec", metavar="SPEC")
    e.add_argument("kernel", metavar="KERNEL", help="a kernel, or a dispatch (its arms, the "
                   "body each runs per arch, the arm --m picks, explained)")
    e.add_argument("--m", type=int, default=None, metavar="M",
                   help="the problem's m: rows of lhs, for the masked layout each group's "
                        "capacity (default: 4096)")
    e.add_argument("--n", type=int, default=None, metavar="N",
                   help="the problem's n (default: the kernel's static n, else 4096)")
    e.add_argument("--k", type=int, default=None, metavar="K",
                   help="the problem's k (default: the kernel's static k, else 4096)")
    e.add_argument("--groups", type=int, default=8, metavar="G",
                   help="grouped kernels: the number of groups (default: 8)")
    e.add_argument("--counters", action="store_true",
                   help="also run the CUDA kernel once on the CPU emulator and print its counters "
                        "(bank conflicts, sectors, instruction counts)")
    e.add_argument("--device", metavar="NAME", default=None,
                   help="the device the roofline bounds on: a100, l40s, h100, h200, b200, "
                        "rtx5090, gb10, v4, v5e, v5p, v6e, v7x (default: one that runs the "
                        "spec's preferred declared arch, else the spec's TPU)")
    k = sub.add_parser("compile", help="build the XLA FFI libraries of the JAX entry points "
                                        "(generated/<stem>/jax/) with nvcc")
    k.add_argument("spec", metavar="SPEC")
    k.add_argument("--kernel", action="append", metavar="NAME",
                   help="only these kernels (default: every kernel with a JAX entry point)")
    k.add_argument("--out", metavar="DIR", default="build",
                   help="where lib<kernel>_ffi.so goes (default: build/)")
    k.add_argument("--cuda-arch", action="append", metavar="ARCH",
                   help="SASS for these archs (default: the spec's declared archs)")
    k.add_argument("--emulate", action="store_true",
                   help="build lib<kernel>_ffi_emu.so for XLA's CPU platform instead: g++ and "
                        "gemmgen's CPU emulator of CUDA (what the tests run)")
    k.add_argument("--torch", action="store_true",
                   help="build the libraries the PyTorch ops (generated/<stem>/torch/) load "
                        "instead: lib<kernel>.so, the kernel's C ABI, for every CUDA kernel "
                        "(with --emulate: lib<kernel>_emu.so, for CPU tensors)")
    t = sub.add_parser("tune", help="measure tiles of a spec's kernels and write the winners "
                                     "into the spec (a `tuned` block)")
    t.add_argument("spec", metavar="SPEC")
    t.add_argument("--kernel", action="append", metavar="NAME",
                   help="only these kernels (default: every tile GEMM of the device's backend; "
                        "a swept kernel's variants by their names)")
    t.add_argument("--shapes", metavar="'m,n,k[,g];...'",
                   help="the shapes to measure, e.g. '16384,1536,2048,128;128,1536,2048,128' "
                        "(g: groups, for grouped kernels; default 8)")
    t.add_argument("--shapes-file", metavar="FILE",
                   help="shapes one per line (or ';'-separated), '#' comments")
    t.add_argument("--preset", action="append", metavar="NAME",
                   help="a model's shapes: mixtral, qwen3-30b-a3b, gpt-oss-120b, deepseek-v3, "
                        "dense (default, with no shapes given: each kernel's static n and k at a "
                        "few m)")
    t.add_argument("--dry-run", action="store_true",
                   help="print the candidates with VMEM, grid steps and predicted time, and "
                        "stop (no JAX, no device, the spec untouched)")
    t.add_argument("--device", metavar="NAME",
                   help="the device the tiles are for: v5e, v5p, v6e, v7x (Pallas), or a GPU "
                        "such as h100 (CUDA: --dry-run only); default: the spec's TPU")
    t.add_argument("--max-candidates", type=_positive, metavar="N", default=None,
                   help="tiles measured per kernel and shape by the cost model's ranking, "
                        "besides the kernel's current tile (default: 10)")
    t.add_argument("--interpret", action="store_true",
                   help="run in Pallas interpret mode on the CPU (tiny shapes; for testing "
                        "the flow: the times are not measurements)")
    t.add_argument("--samples", type=_positive, metavar="S", default=None,
                   help="timed samples per candidate, the figure their median (default: 5)")
    t.add_argument("--batch", type=_positive, metavar="B", default=None,
                   help="calls per sample, dispatched back to back (default: 10)")
    t.add_argument("--out", metavar="JSON",
                   help="also write every candidate and measurement to this JSON file "
                        "(rewritten after each kernel and shape, as the spec's block is)")
    t.add_argument("--time-budget", type=_positive, metavar="SECONDS", default=None,
                   help="start no kernel and shape past this many seconds; the block gets "
                        "what was measured (the rest is reported skipped)")
    t.add_argument("--measurements", metavar="JSON",
                   help="take the times from an earlier run's --out file instead of timing "
                        "(no device needed; winners are checked against the reference in "
                        "interpret mode, the block's provenance is the file's)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Imported here, after the arguments: `gemmgen --help` and argument errors
    # stay fast because they load neither lark, Jinja nor the backends.
    from gemmgen.commands import run

    return run(args)


def entry() -> None:  # pragma: no cover
    raise SystemExit(main())


if __name__ == "__main__":  # pragma: no cover
    entry()
