"""A whole spec: its targets, kernels and M dispatchers (`Dispatch`, which
picks a kernel by problem shape at run time)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gemmgen.ir.kernel import Kernel
from gemmgen.ir.loc import NO_LOC, Loc
from gemmgen.ir.parts import Cond, TileRule
from gemmgen.ir.targets import Backend, Target


@dataclass(frozen=True, slots=True)
class DispatchRule:
    cond: Cond | None  # None: the default arm
    kernel: str
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Pick a kernel by problem shape at run time (docs/spec.md, "Dispatch")."""

    name: str
    rules: tuple[DispatchRule, ...]
    loc: Loc = field(default=NO_LOC, compare=False)

    def pick(self, m: int, n: int, k: int) -> str:
        for rule in self.rules:
            if rule.cond is None or rule.cond.test(m, n, k):
                return rule.kernel
        raise AssertionError("validated dispatch has a default arm")


@dataclass(frozen=True, slots=True)
class Tuned:
    """A `tuned DEVICE { ... }` block (docs/spec.md, "Tuned tiles"): tiles
    measured by `gemmgen tune` on one device. `info` holds its string fields
    (device, jax, libtpu or cuda, driver, date) as written; `rules` its
    `tile_rule KERNEL ...` lines as (kernel name, rule), in order; `lines`
    the block's first and last line (1-based, inclusive: the `tuned` line
    and its `}`), for a tool that replaces it textually. `applied`: its rules
    are in their kernels' LUTs; else `why_not` says why not (another chip,
    another JAX)."""

    device: str
    backend: Backend
    info: tuple[tuple[str, str], ...]
    rules: tuple[tuple[str, TileRule], ...]
    lines: tuple[int, int]
    applied: bool
    why_not: str = ""
    loc: Loc = field(default=NO_LOC, compare=False)  # of the device name

    def get(self, key: str) -> str | None:
        """The string field `key` (device, jax, ...), None when absent."""
        return dict(self.info).get(key)

    def rules_for(self, kernel: str) -> tuple[TileRule, ...]:
        """The block's rules for one kernel, in order."""
        return tuple(r for name, r in self.rules if name == kernel)


@dataclass(frozen=True, slots=True)
class Spec:
    path: str  # as given on the command line, posix, relative where possible
    stem: str  # generated/<stem>/
    targets: tuple[Target, ...]
    kernels: tuple[Kernel, ...]
    dispatches: tuple[Dispatch, ...] = ()
    tuned: tuple[Tuned, ...] = ()  # in spec order, applied or not

    def tuned_for(self, device: str) -> Tuned | None:
        """The `tuned` block of `device` (at most one per device)."""
        return next((t for t in self.tuned if t.device == device), None)

    def target(self, backend: Backend) -> Target | None:
        for t in self.targets:
            if t.backend is backend:
                return t
        return None

    def kernels_for(self, backend: Backend) -> tuple[Kernel, ...]:
        return tuple(k for k in self.kernels if backend in k.backends)

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)
