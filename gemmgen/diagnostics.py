"""Positioned diagnostics: `path:line:col: error: message`, source line, caret.

Every stage reports problems as `Diagnostic`s; a stage that finds any raises
`SpecError` carrying all of them (collected, not first-only). Only the CLI
prints them.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gemmgen.ir import Loc


@dataclass(frozen=True, slots=True)
class Diagnostic:
    loc: Loc  # of the field or value it concerns
    message: str
    severity: str = "error"
    width: int = 1  # caret length
    # The other fields the finding follows from (a check's: `kernel.at("dims")`),
    # not shown: a finding that follows from a field with an error of its
    # own is not reported (gemmgen.validate.kernel_checks).
    related: tuple[Loc, ...] = ()

    def render(self, source: str | None) -> str:
        """The diagnostic as text: bounded in size whatever the input, and
        with no control characters from the spec reaching the terminal."""
        head = f"{printable(str(self.loc))}: {self.severity}: {clip_message(self.message)}"
        if source is None or self.loc.line <= 0:
            return head
        text = _source_line(source, self.loc.line)
        if text is None:
            return head
        shown, caret_col, caret_len = clip_line(
            text, max(self.loc.col - 1, 0), max(self.width, 1))
        caret = " " * caret_col + "^" + "~" * (caret_len - 1)
        return f"{head}\n    {shown}\n    {caret}"


# Bounds on what one diagnostic prints (docs/decisions.md, "Bounded diagnostics").
LINE_WIDTH = 100  # source columns shown around the caret
WORD_WIDTH = 60  # a longer word in a message is cut
MESSAGE_WIDTH = 600


def printable(text: str) -> str:
    """`text` with each invisible or control character as a Python-style
    escape (`\\x1b`, `\\ufeff`), so the reader sees what is there."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def clip_message(message: str) -> str:
    message = re.sub(r"\S{%d,}" % (WORD_WIDTH + 1),
                     lambda m: m.group(0)[:WORD_WIDTH] + "...", printable(message))
    if len(message) > MESSAGE_WIDTH:
        message = message[:MESSAGE_WIDTH] + "..."
    return message


def _source_line(source: str, line: int) -> str | None:
    """Line `line` (1-based; lines end at '\\n', as the parser counts them)."""
    start = 0
    for _ in range(line - 1):
        start = source.find("\n", start) + 1
        if start == 0:
            return None
    end = source.find("\n", start)
    text = source[start:] if end < 0 else source[start:end]
    return text.removesuffix("\r")


def clip_line(text: str, col: int, width: int) -> tuple[str, int, int]:
    """At most LINE_WIDTH columns of `text` around column `col` (0-based),
    '...' where cut; the caret's new column and length. Each character
    shows as one column (tabs as a space, invisible ones as '?')."""
    text = "".join(" " if c == "\t" else c if c.isprintable() else "?" for c in text)
    if len(text) <= LINE_WIDTH:
        return text, col, max(1, min(width, len(text) - col)) if col < len(text) else 1
    start = max(0, min(col - LINE_WIDTH // 3, len(text) - LINE_WIDTH))
    end = start + LINE_WIDTH
    shown = ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")
    caret_col = col - start + (3 if start else 0)
    return shown, caret_col, max(1, min(width, end - col))


class SpecError(Exception):
    """One or more diagnostics; raised by parse, validate and backends."""

    def __init__(self, diagnostics: Sequence[Diagnostic], sources: dict[str, str] | None = None):
        self.diagnostics = tuple(sorted(
            diagnostics, key=lambda d: (d.loc.path, d.loc.line, d.loc.col, d.message)))
        # The text of each spec named in a diagnostic, for showing source lines.
        self.sources: dict[str, str] = dict(sources or {})
        super().__init__("\n".join(f"{d.loc}: {d.message}" for d in self.diagnostics))


def error(loc: Loc, message: str, width: int = 1) -> SpecError:
    return SpecError([Diagnostic(loc, message, width=width)])


def suggest(word: str, choices: Iterable[str]) -> str:
    """`; did you mean 'bf16'?` for the nearest choice, or ''."""
    if len(word) > WORD_WIDTH:
        return ""
    best = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f"; did you mean '{best[0]}'?" if best else ""


def install_hint(extra: str) -> str:
    """How to install one of gemmgen's extras (pyproject.toml); gemmgen is
    not on PyPI, so from a checkout or its git URL."""
    return (f"pip install '.[{extra}]' in a checkout of gemmgen (or \"gemmgen[{extra}] @ "
            "git+URL\" with its repository's git URL)")


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """`1 spec`, `0 specs`, `2 specs` (`nouns` where adding 's' is wrong)."""
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


def one_of(choices: Iterable[str]) -> str:
    items = [f"'{c}'" for c in choices]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]
