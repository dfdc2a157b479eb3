"""The Rust crate's text as rustfmt lays it out: lists, calls, `use`, doc comments.

The crate's rustfmt.toml sets use_small_heuristics = "Max" (the tests check
every file with `rustfmt --check`); these helpers lay out what depends on
the plan, and name what the plan's expressions need of common.rs.
"""

from __future__ import annotations

from gemmgen.backends.cuda.args import Arg
from gemmgen.backends.cuda.expr import Bin, Call, Expr, Fn

# rustfmt's max_width; the crate's rustfmt.toml sets use_small_heuristics =
# "Max", so a list stays on one line exactly when the line fits.
WIDTH = 100
HELPERS = tuple(f.value for f in Fn)  # gg_cdiv, ...: common.rs defines them


def rs_list(head: str, items: list[str], tail: str, indent: int) -> str:
    """`head` items `tail` on one line when rustfmt keeps it there (the
    line fits WIDTH and the items CALL_WIDTH), else one item a line."""
    pad = " " * indent
    inner = ", ".join(items)
    one = f"{pad}{head}{inner}{tail}"
    if len(one) <= WIDTH:
        return one
    lines = [f"{pad}{head}"] + [f"{pad}    {i}," for i in items] + [f"{pad}{tail.lstrip()}"]
    return "\n".join(lines)


def rs_format(head: str, lead: list[str], args: list[str], tail: str, indent: int) -> str:
    """A format macro call (`write!(f, "..", a, b)`): on one line when it
    fits; else `lead` one a line and the arguments on one line after them
    when they fit there (rustfmt's layout of format arguments), else one a
    line."""
    one = rs_list(head, [*lead, *args], tail, indent)
    if "\n" not in one:
        return one
    pad = " " * (indent + 4)
    rest = ", ".join(args) + ","
    if len(pad) + len(rest) <= WIDTH:
        return "\n".join([" " * indent + head, *(f"{pad}{x}," for x in lead), pad + rest,
                          " " * indent + tail])
    return one


def rs_const(head: str, items: list[str]) -> str:
    """`head [items];` (head ends in "= "), broken after `=` when the list
    then fits on the next line, else one item a line."""
    one = f"{head}[{', '.join(items)}];"
    if len(one) <= WIDTH:
        return one
    below = f"    [{', '.join(items)}];"
    if len(below) <= WIDTH:
        return f"{head.rstrip()}\n{below}"
    return rs_list(f"{head}[", items, "];", 0)


def rs_call(head: str, args: list[str], tail: str, indent: int) -> str:
    """A call on one line when it fits, else one argument a line."""
    return rs_list(head, args, tail, indent)


def rs_use(path: str, names: list[str]) -> str:
    """`use path::{a, b};`, wrapped as rustfmt wraps an import list."""
    one = f"use {path}::{{{', '.join(names)}}};"
    if len(one) <= WIDTH:
        return one
    lines, line = [], ""
    for n in names:
        item = f"{n},"
        # rustfmt fills an import list's lines to WIDTH - 1 columns (a line
        # of exactly WIDTH it breaks: gb10_nvfp4_moe_grouped_gemm.rs).
        if line and 4 + len(line) + 1 + len(item) > WIDTH - 1:
            lines.append(line)
            line = item
        else:
            line = f"{line} {item}" if line else item
    lines.append(line)
    return "\n".join([f"use {path}::{{", *(f"    {x}" for x in lines), "};"])


def rs_doc(text: str, indent: int, mark: str = "///") -> str:
    """`text` as doc-comment lines of at most WIDTH columns."""
    pad = " " * indent
    words = text.split()
    lines: list[str] = []
    line = ""
    for w in words:
        if line and len(pad) + len(mark) + 1 + len(line) + 1 + len(w) > WIDTH:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    if line:
        lines.append(line)
    return "\n".join(f"{pad}{mark} {x}" for x in lines)


def used_names(*exprs: Expr | None) -> frozenset[str]:
    return frozenset().union(*(e.names() for e in exprs if e is not None))


def called_helpers(e: Expr) -> set[str]:
    if isinstance(e, Call):
        out = {e.fn.value}
        for a in e.args:
            out |= called_helpers(a)
        return out
    if isinstance(e, Bin):
        return called_helpers(e.left) | called_helpers(e.right)
    return set()


def rank(a: Arg) -> int:
    return len(a.shape)


def field_type(a: Arg) -> str:
    if a.is_scalar:
        return "i64"
    t = f"Array<{rank(a)}>"
    return f"Option<{t}>" if a.optional else t


def field_doc(a: Arg) -> str:
    if a.is_scalar:
        return a.doc[:1].upper() + a.doc[1:] + "."
    opt = " (optional)" if a.optional else ""
    return f"`{a.shape_text}` {a.dtype.value if a.dtype else ''}: {a.doc}{opt}."
