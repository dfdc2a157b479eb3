"""Layout: what clang-format (the committed .clang-format) and ruff format
print for the few data-dependent shapes the CUDA templates emit (a
declaration, a call, a comment, a string literal). Fixed text is written
formatted in the templates themselves; these helpers lay out what depends on
the plan, so the generated files are formatted as emitted
(tests/cli/test_generated_format.py checks them; the generator never runs a
formatter).
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "COLUMNS", "PROSE", "Param", "comment", "comment_item", "cpp_args", "cpp_assign_string",
    "cpp_call", "cpp_decl", "cpp_params", "cpp_signature", "cpp_string", "one_per_line", "pack",
    "prose", "py_call", "py_collection", "py_tuple",
]

COLUMNS = 100  # the column limit of .clang-format and of ruff (line-length)


def pack(first: str, items: Sequence[str], tail: str, indent: int) -> list[str] | None:
    """`first` then `items` separated by ", ", `tail` after the last, filled
    greedily into lines of at most COLUMNS; continuation lines start at
    column `indent`. None when an item does not fit."""
    lines, line = [], first
    for i, item in enumerate(items):
        piece = item + (tail if i == len(items) - 1 else ",")
        sep = "" if line.endswith(("(", "<<<")) or line == " " * indent or not line.strip() else " "
        if len(line) + len(sep) + len(piece) <= COLUMNS:
            line += sep + piece
        else:
            if not line.strip() or line.endswith(("(", "<<<")):
                return None
            lines.append(line)
            line = " " * indent + piece
            if len(line) > COLUMNS:
                return None
    lines.append(line)
    return lines


def one_per_line(items: Sequence[str], tail: str, indent: int) -> list[str]:
    """The layout of last resort, for names too long for any line: one item
    per line, `indent` columns in (lines may pass COLUMNS; clang-format may
    lay such code out otherwise: docs/decisions.md, "Generated C++ layout")."""
    pad = " " * indent
    return [pad + item + ("," if i < len(items) - 1 else tail) for i, item in enumerate(items)]


def cpp_decl(head: str, params: Sequence[str], tail: str, indent: int = 0) -> str:
    """A function declaration `head` (up to its "("), its parameters and
    `tail` (") {" or ");") as clang-format lays it out: one line; else the
    parameters aligned after "(" when they all fit there; else on lines of
    their own, 4 columns in."""
    pad = " " * indent
    one = pad + head + ", ".join(params) + tail
    if len(one) <= COLUMNS:
        return one
    aligned = pack(pad + head, params, tail, indent + len(head))
    if aligned is not None:
        return "\n".join(aligned)
    broken = pack(" " * (indent + 4), params, tail, indent + 4)
    if broken is None or len(pad + head) > COLUMNS:
        return "\n".join([pad + head, *one_per_line(params, tail, indent + 4)])
    return "\n".join([pad + head, *broken])


def cpp_call(head: str, args: Sequence[str], tail: str, indent: int, *, lhs: str = "") -> str:
    """A call statement `head(args tail` (assigned to `lhs` when given) as
    clang-format lays it out: one line; else, for an assignment whose call
    then fits on one line, a break after "="; else the layout with fewer
    lines of (a) the arguments aligned after "(" and (b) a break after "("
    and the arguments 4 columns in (a on a tie). An assignment whose
    arguments, aligned after "(" of the call 4 columns in on the line after
    "=", take fewer lines than aligned after "lhs = head(" gets that break
    after "=" (clang-format breaks an assignment before it breaks an
    argument list once more)."""
    pad = " " * indent
    call = head + ", ".join(args) + tail
    if lhs:
        if len(pad + lhs + " = " + call) <= COLUMNS:
            return pad + lhs + " = " + call
        if len(pad + "    " + call) <= COLUMNS:
            return pad + lhs + " =\n" + pad + "    " + call
        inner = pack(pad + "    " + head, args, tail, indent + 4 + len(head))
        outer = pack(pad + lhs + " = " + head, args, tail, indent + len(lhs + " = " + head))
        if inner is not None and outer is not None and len(inner) < len(outer):
            return "\n".join([pad + lhs + " =", *inner])
        head = lhs + " = " + head
    one = pad + head + ", ".join(args) + tail
    if len(one) <= COLUMNS:
        return one
    aligned = pack(pad + head, args, tail, indent + len(head))
    broken = pack(" " * (indent + 4), args, tail, indent + 4)
    if broken is None:
        return "\n".join([pad + head, *one_per_line(args, tail, indent + 4)])
    broken = [pad + head, *broken]
    if aligned is not None and len(aligned) <= len(broken):
        return "\n".join(aligned)
    return "\n".join(broken)


def py_call(head: str, items: Sequence[str], tail: str, indent: int, *,
            tuple_of_one: bool = False) -> str:
    """`head` + items + `tail` (a call, tuple, list or dict display whose
    items cannot be split further) as ruff format lays it out: one line;
    else the items on one line of their own, 4 columns in; else one item a
    line with a trailing comma."""
    pad = " " * indent
    inner = ", ".join(items) + ("," if tuple_of_one else "")
    one = pad + head + inner + tail
    if len(one) <= COLUMNS:
        return one
    if len(pad) + 4 + len(inner) <= COLUMNS and not tuple_of_one:
        return f"{pad}{head}\n{pad}    {inner}\n{pad}{tail}"
    body = "\n".join(f"{pad}    {item}," for item in items)
    return f"{pad}{head}\n{body}\n{pad}{tail}"


def py_times4(name: str, ints: Sequence[str], indent: int) -> str:
    """`name = 4 * (total)`, total the one int or max(ints), as ruff format
    lays it out: one line; else the parenthesized total on lines of its
    own, 4 columns in (a max() split as py_call splits a call)."""
    pad = " " * indent
    total = ints[0] if len(ints) == 1 else "max(" + ", ".join(ints) + ")"
    one = f"{pad}{name} = 4 * ({total})"
    if len(one) <= COLUMNS:
        return one
    inner = f"{pad}    {total}" if len(ints) == 1 else py_call("max(", list(ints), ")", indent + 4)
    return f"{pad}{name} = 4 * (\n{inner}\n{pad})"


def py_collection(head: str, items: Sequence[str], tail: str, indent: int) -> str:
    """A list, tuple, set or dict display: one line, else one item a line
    with a trailing comma (ruff format never packs a split collection)."""
    pad = " " * indent
    one = pad + head + ", ".join(items) + tail
    if len(one) <= COLUMNS:
        return one
    body = "\n".join(f"{pad}    {item}," for item in items)
    return f"{pad}{head}\n{body}\n{pad}{tail}"


def py_tuple(items: Sequence[str]) -> str:
    """A Python tuple display: `()`, `(a,)`, `(a, b)`."""
    if len(items) == 1:
        return f"({items[0]},)"
    return "(" + ", ".join(items) + ")"


@functools.lru_cache(maxsize=4096)  # the same comments recur in every kernel
def comment(text: str, indent: int = 0, mark: str = "//") -> str:
    """`text` as comment lines of at most COLUMNS columns."""
    pad = " " * indent
    width = COLUMNS - indent - len(mark) - 1
    lines = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)
    return "\n".join(f"{pad}{mark} {line}" for line in lines)


def cpp_string(head: str, text: str, tail: str) -> str:
    """`head "text" tail`; a literal past the column limit is split at spaces
    into adjacent literals aligned under the first, as clang-format does."""
    one = f'{head}"{text}"{tail}'
    if len(one) <= COLUMNS:
        return one
    col = len(head)
    width = COLUMNS - col - 2  # the quotes
    pieces: list[str] = []
    rest = text
    while rest:
        room = width - (len(tail) if len(rest) + len(tail) <= width else 0)
        if len(rest) <= room and len(rest) + len(tail) <= width:
            pieces.append(rest)
            break
        cut = rest.rfind(" ", 0, width)
        if cut <= 0:  # a word longer than the line: split after it
            cut = rest.find(" ", width)
            if cut < 0:
                pieces.append(rest)
                break
        pieces.append(rest[:cut + 1])
        rest = rest[cut + 1:]
    lines = [f'{head}"{pieces[0]}"'] + [f'{" " * col}"{p}"' for p in pieces[1:]]
    lines[-1] += tail
    return "\n".join(lines)


def cpp_assign_string(lhs: str, text: str, indent: int) -> str:
    """`lhs = "text";`: one line, else the literal on the next line 4 columns
    further in, split there when it is still too long."""
    pad = " " * indent
    one = f'{pad}{lhs} = "{text}";'
    if len(one) <= COLUMNS:
        return one
    return f"{pad}{lhs} =\n" + cpp_string(" " * (indent + 4), text, ";")


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of a generated C++ function: `const in_t* __restrict__ lhs`."""

    type: str
    name: str

    @property
    def decl(self) -> str:
        return f"{self.type} {self.name}"


def cpp_signature(head: str, name: str, params: Sequence[Param], note: str) -> str:
    """A kernel's head: `head name(`, a comment line `// note` (which makes
    clang-format break there), the parameters packed 4 columns in, `) {`.
    When `head name(` does not fit, clang-format breaks after the return
    type: the name starts a line of its own, 4 columns in after an attribute
    such as `__launch_bounds__(256)`."""
    first = f"{head} {name}("
    if len(first) <= COLUMNS:
        lines, indent = [first], 4
    else:
        name_indent = 4 if head.endswith(")") else 0
        lines, indent = [head, " " * name_indent + f"{name}("], name_indent + 4
    lines.append(comment(note, indent))
    decls = [p.decl for p in params]
    packed = pack(" " * indent, decls, ") {", indent) or one_per_line(decls, ") {", indent)
    return "\n".join(lines + packed)


def cpp_params(head: str, params: Sequence[Param], indent: int = 0) -> str:
    """A device function's head `head(params) {` as clang-format lays it out."""
    return cpp_decl(head, [p.decl for p in params], ") {", indent)


def cpp_args(head: str, params: Sequence[Param], tail: str, indent: int) -> str:
    """A call passing `params` by their names: `head(a, b, c tail`."""
    return cpp_call(head, [p.name for p in params], tail, indent)


def comment_item(label: str, text: str, indent: int = 0, width: int = 80) -> str:
    """A numbered item of a comment block, `//   (2) text`, wrapped at
    `width` columns with a hanging indent under the text. A no-break space
    (U+00A0) in `text` holds its words together and prints as a space."""
    first = " " * indent + f"//   {label} "
    rest = " " * indent + "//" + " " * (len(first) - indent - 2)
    text = textwrap.fill(text, min(width, COLUMNS), initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False)
    return text.replace("\u00a0", " ")


# The width of the comments and docstrings the templates wrap by hand; the
# sentences that depend on the plan (which bodies a kernel has) are wrapped
# to it too, so they read as the fixed text around them.
PROSE = 77


def prose(text: str, first: str, rest: str | None = None, width: int = PROSE) -> str:
    """`text` filled to `width` columns, the first line after `first`, the
    others after `rest` (default: `first`)."""
    return textwrap.fill(text, width, initial_indent=first,
                         subsequent_indent=first if rest is None else rest,
                         break_long_words=False, break_on_hyphens=False)
