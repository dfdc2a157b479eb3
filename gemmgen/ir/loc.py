"""Positions in a spec file: every user-facing IR node carries the `Loc` of
the spec text it came from, so that later stages (a backend's budget check,
say) can still report a positioned diagnostic."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Loc:
    """A position in a spec file (1-based line and column)."""

    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


NO_LOC = Loc("<builtin>", 0, 0)
