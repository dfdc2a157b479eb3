"""A whole spec: its targets, kernels and M dispatchers (`Dispatch`, which
picks a kernel by problem shape at run time)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gemmgen.ir.kernel import Kernel
from gemmgen.ir.loc import NO_LOC, Loc
from gemmgen.ir.parts import Cond
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
class Spec:
    path: str  # as given on the command line, posix, relative where possible
    stem: str  # generated/<stem>/
    targets: tuple[Target, ...]
    kernels: tuple[Kernel, ...]
    dispatches: tuple[Dispatch, ...] = ()

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
