"""The tile GEMM's entry points as text: their parameters and layout.

Every body of the tile GEMM (mma_sync.py, and each of bodies.py) prints its
`extern "C"` entry points as `Entry`s: signature and body laid out as
clang-format would print them (the .cu is emitted formatted, docs/cuda.md);
`Param` is one parameter with what the launchers pass for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gemmgen.backends.cuda.common import StepArg

COLUMNS = 100  # the .clang-format column limit the emitted text keeps
INDENT = 4  # clang-format's continuation indent (Google style)


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of an entry point, in launch order: its C++ type and
    name, and what the launchers pass for it."""

    ctype: str  # e.g. "const __nv_bfloat16* __restrict__", "int"
    name: str
    launch: StepArg

    @property
    def decl(self) -> str:
        return f"{self.ctype} {self.name}"


@dataclass(frozen=True, slots=True)
class Entry:
    """An `extern "C"` entry point of the .cu, laid out as clang-format
    would (the file is emitted formatted, docs/cuda.md)."""

    comment: tuple[str, ...]  # the lines of the comment above it
    signature: tuple[str, ...]  # through the opening brace
    body: tuple[str, ...]  # the statements, indented


def cbool(value: bool) -> str:
    return "true" if value else "false"


def _pack(items: list[str], indent: int, first: str, last: str) -> list[str]:
    """`first` + the comma-separated `items` + `last`, filled greedily into
    lines of at most COLUMNS, continuation lines at `indent`: how
    clang-format bin-packs a parameter or argument list it cannot fit on one
    line (tests/cuda/sm80/test_cuda_gemm_format.py checks the emitted files)."""
    lines: list[str] = []
    line = first
    for i, item in enumerate(items):
        text = item + (last if i == len(items) - 1 else ",")
        sep = "" if line == first or line.endswith("(") else " "
        if line.strip() and len(line) + len(sep) + len(text) > COLUMNS:
            lines.append(line)
            line = " " * indent + text
        else:
            line += sep + text
    lines.append(line)
    return lines


def signature(head: str, name: str, params: list[str], note: str) -> tuple[str, ...]:
    """`head name(` then a comment line (which makes clang-format break
    there) and the parameters bin-packed. When the first line does not fit,
    clang-format breaks after the return type: the name starts a line of its
    own, indented after an attribute such as `__launch_bounds__(256)`."""
    first = f"{head} {name}("
    if len(first) <= COLUMNS:
        lines = [first]
        indent = INDENT
    else:
        name_indent = INDENT if head.endswith(")") else 0
        lines = [head, " " * name_indent + f"{name}("]
        indent = name_indent + INDENT
    lines.append(" " * indent + f"// {note}")
    return tuple(lines + _pack(params, indent, " " * indent, ") {"))


def call(callee: str, args: list[str]) -> tuple[str, ...]:
    """`callee(args);` as a statement, arguments aligned after the paren."""
    first = f"  {callee}("
    one = first + ", ".join(args) + ");"
    if len(one) <= COLUMNS:
        return (one,)
    return tuple(_pack(args, len(first), first, ");"))
