"""From measurements to rules: the winner of each shape (checked against the
reference, kept from the previous block when the gain is within the noise)
and the `tile_rule`s that cover the measured shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from gemmgen import ir
from gemmgen.tune.candidates import Candidate, tile_text
from gemmgen.tune.rewrite import TunedRule
from gemmgen.tune.shapes import Shape
from gemmgen.tune.timing import Measurement

# A previous rule's tile is kept unless the new winner beats it by more than
# the measured noise, and at least by this much (no churn on re-runs).
MIN_GAIN = 0.03


@dataclass(frozen=True, slots=True)
class Measured:
    candidate: Candidate
    measurement: Measurement
    check: str = ""  # why the winner check failed ("" if passed or not run)

    @property
    def ok(self) -> bool:
        return self.measurement.seconds is not None and not self.check


@dataclass(frozen=True, slots=True)
class ShapeResult:
    """One kernel at one shape: every candidate's measurement, the winner,
    the runner-up, and whether the previous block's tile was kept."""

    kernel: str
    shape: Shape
    measured: tuple[Measured, ...]
    winner: Measured | None
    runner_up: Measured | None
    kept_previous: bool = False

    def comment(self) -> str:
        """`m=... n=... k=... g=...: 0.812 ms; runner-up m=256 n=1536 k=1024 0.840 ms (+3.4 %)`."""
        if self.winner is None:
            return f"{self.shape}: no candidate ran"
        t = self.winner.measurement.seconds
        text = f"{self.shape}: {_ms(t)}"
        if self.kept_previous:
            text += " (previous tile kept: within the noise of the best)"
        if self.runner_up is not None:
            r = self.runner_up.measurement.seconds
            text += (f"; runner-up {tile_text(self.runner_up.candidate.tile)} {_ms(r)} "
                     f"({(r / t - 1) * 100:+.1f} %)")
        return text


def _ms(seconds: float | None) -> str:
    return f"{(seconds or 0.0) * 1e3:.3f} ms"


def choose(kernel: str, shape: Shape, measured: list[Measured],
           check: Callable[[ir.Tile], str], previous: ir.Tile | None) -> ShapeResult:
    """The winner among the candidates that ran: the fastest whose `check`
    (the NumPy reference at a small shape) passes; a failing one is dropped
    for the next. If `previous` (the tile the old block gave this shape) ran
    and passes, and is within max(noise, MIN_GAIN) of the winner, it stays."""
    ran = sorted((m for m in measured if m.measurement.seconds is not None),
                 key=lambda m: m.measurement.seconds)
    done = {id(m): m for m in measured}
    winner = None
    for m in ran:
        problem = check(m.candidate.tile)
        if problem:
            done[id(m)] = Measured(m.candidate, m.measurement, problem)
            continue
        winner = m
        break
    kept = False
    if winner is not None and previous is not None and winner.candidate.tile != previous:
        old = next((m for m in ran if m.candidate.tile == previous), None)
        slack = max(winner.measurement.noise, MIN_GAIN)
        if old is not None:
            slack = max(slack, old.measurement.noise)
        if old is not None and old.measurement.seconds <= winner.measurement.seconds * (1 + slack):
            if problem := check(previous):
                done[id(old)] = Measured(old.candidate, old.measurement, problem)
            else:
                winner, kept = old, True
    runner_up = None
    if winner is not None:
        runner_up = next((m for m in ran if m is not winner and not done[id(m)].check
                          and m.candidate.tile != winner.candidate.tile), None)
    final = tuple(done[id(m)] for m in measured)
    winner = done[id(winner)] if winner is not None else None
    return ShapeResult(kernel, shape, final, winner, runner_up, kept)


@dataclass(frozen=True, slots=True)
class RuleLines:
    """A synthesized rule and the comment lines (one per measured shape) above it."""

    comments: tuple[str, ...]
    rule: TunedRule


def synthesize(kernel: ir.Kernel, results: list[ShapeResult]) -> list[RuleLines]:
    """Rules covering the measured shapes of one kernel: per (n, k) (sorted),
    the shapes in order of m/g (contiguous grouped; m for dense and masked
    kernels, whose m is already per group); neighbours with the same winner
    merge; between neighbours whose winners differ, the rule ends at the
    geometric mean of their m/g (rounded down); the last rule of each (n, k)
    has no bound on m."""
    var = "m/g" if kernel.op is ir.Op.GROUPED and not kernel.masked else "m"
    by_nk: dict[tuple[int, int], list[ShapeResult]] = {}
    for r in results:
        if r.winner is not None:
            by_nk.setdefault((r.shape.n, r.shape.k), []).append(r)
    out: list[RuleLines] = []
    for (n, k), group in sorted(by_nk.items()):
        group.sort(key=lambda r: (_x(r.shape, var), r.shape.g, r.shape.m))
        # Runs of neighbours with one winner. Two shapes with the same m/g
        # cannot be told apart by a rule: the first's winner covers both.
        runs: list[tuple[ir.Tile, list[ShapeResult]]] = []
        for r in group:
            tile = _plain(r.winner.candidate.tile)
            if runs and (runs[-1][0] == tile or _x(runs[-1][1][-1].shape, var) == _x(r.shape, var)):
                runs[-1][1].append(r)
            else:
                runs.append((tile, [r]))
        for i, (tile, rs) in enumerate(runs):
            conds: list[tuple[str, ir.Cmp, int]] = []
            if i + 1 < len(runs):
                below, above = _x(rs[-1].shape, var), _x(runs[i + 1][1][0].shape, var)
                conds.append((var, ir.Cmp.LE, math.isqrt(below * above)))
            conds += [("n", ir.Cmp.EQ, n), ("k", ir.Cmp.EQ, k)]
            comments = tuple(_comment(r, tile) for r in rs)
            out.append(RuleLines(comments, TunedRule(kernel.name, tuple(conds), tile)))
    return out


def _comment(r: ShapeResult, tile: ir.Tile) -> str:
    text = r.comment()
    if _plain(r.winner.candidate.tile) != tile:
        text += f" (its best, {tile_text(r.winner.candidate.tile)}, shares its m/g with the " \
                "shape before: this rule's tile covers both)"
    return text


def _x(shape: Shape, var: str) -> int:
    return shape.rows_per_group if var == "m/g" else shape.m


def _plain(tile: ir.Tile) -> ir.Tile:
    return ir.Tile(tile.m, tile.n, tile.k)


def previous_tile(rules: tuple[TunedRule, ...], kernel: str, shape: Shape) -> ir.Tile | None:
    """The tile the previous block gave `kernel` at `shape`: its first rule
    for the kernel that covers the shape (first match wins, as in a LUT)."""
    for rule in rules:
        if rule.kernel == kernel and rule.covers(shape.m, shape.n, shape.k, shape.g):
            return rule.tile
    return None
