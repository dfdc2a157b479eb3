"""Positioned diagnostics: `path:line:col: error: message`, source line, caret.

Every stage reports problems as `Diagnostic`s; a stage that finds any raises
`SpecError` carrying all of them (collected, not first-only). Only the CLI
prints them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gemmgen.ir import Loc


@dataclass(frozen=True, slots=True)
class Diagnostic:
    loc: Loc
    message: str
    severity: str = "error"
    width: int = 1  # caret length

    def render(self, source: str | None) -> str:
        head = f"{self.loc}: {self.severity}: {self.message}"
        if source is None or self.loc.line <= 0:
            return head
        lines = source.splitlines()
        if self.loc.line > len(lines):
            return head
        text = lines[self.loc.line - 1].expandtabs(1)
        caret = " " * max(self.loc.col - 1, 0) + "^" + "~" * max(self.width - 1, 0)
        return f"{head}\n    {text}\n    {caret}"


class SpecError(Exception):
    """One or more diagnostics; raised by parse, validate and backends."""

    def __init__(self, diagnostics: Sequence[Diagnostic]):
        self.diagnostics = tuple(sorted(
            diagnostics, key=lambda d: (d.loc.path, d.loc.line, d.loc.col, d.message)))
        super().__init__("\n".join(f"{d.loc}: {d.message}" for d in self.diagnostics))


def error(loc: Loc, message: str, width: int = 1) -> SpecError:
    return SpecError([Diagnostic(loc, message, width=width)])


def suggest(word: str, choices: Iterable[str]) -> str:
    """`; did you mean 'bf16'?` for the nearest choice, or ''."""
    best = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f"; did you mean '{best[0]}'?" if best else ""


def one_of(choices: Iterable[str]) -> str:
    items = [f"'{c}'" for c in choices]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]
