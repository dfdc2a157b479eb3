"""What a tensor-core body of the tile GEMM is: the interface of bodies.py.

The mma.sync body (mma_sync.py) is every tile GEMM's: each tile of the LUT
launches it on every device. Another body (TMA + wgmma on sm_90a, and the
Blackwell bodies to come) is a `Body` in the table of bodies.py; for a
kernel it applies to, it contributes

  - per LUT entry a tile of its own (its `plan`), printed in the .cu by its
    partial template (`template`, included by gemm.cu.j2 after the mma.sync
    tiles) and checked there by its own static_asserts;
  - its `extern "C"` entry points, after the mma.sync ones (`BodyPlan.entries`,
    with their parameters in launch order);
  - its item of the file comment's algorithm;
  - per LUT entry its launch steps and the device condition under which the
    launchers take them instead of the mma.sync steps (`launch`), which
    launch.py wraps in a `Path` of the `Variant`: the C++, CuPy, Rust and FFI
    launchers print every path of a variant, in the table's order, with the
    words of the body (`title`, `arch`, `cc`, `what`).

docs/architecture.md, "How to add a CUDA body", walks through adding one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gemmgen import ir
from gemmgen.backends.cuda.common import Expr, Step
from gemmgen.backends.cuda.gemm.mma_sync import TileConfig
from gemmgen.backends.cuda.gemm.text import Entry, Param


@dataclass(frozen=True, slots=True)
class BodyPlan:
    """A body's part of one kernel's GemmPlan."""

    body: Body
    tiles: tuple  # the body's own tile type, one per LUT entry (index, entry, label, comment)
    params: tuple[Param, ...]  # its entry points' parameters, launch order
    entries: tuple[Entry, ...]  # its extern "C" entry points
    algorithm: tuple[str, ...]  # its item of the file comment's "Algorithm" lines

    @property
    def name(self) -> str:
        return self.body.name

    @property
    def template(self) -> str:
        return self.body.template


@dataclass(frozen=True, slots=True)
class BodyLaunch:
    """A body's launches for one LUT entry, and when the launchers take them."""

    steps: tuple[Step, ...]
    when: Expr  # over the dims and DEVICE_NAMES (the compute capability `sm`)
    label: str  # the body's tile, for the launchers' comments
    worklist_bm: int | None = None  # grouped: the row tile of its worklist (the workspace)


@dataclass(frozen=True, slots=True)
class Body:
    """A tensor-core body of the tile GEMM other than mma.sync: its words and
    the three functions that plan it (docstring above)."""

    name: str  # the table key, e.g. "wgmma"
    title: str  # the launchers' name: "Hopper" prints "the Hopper path"
    arch: str  # the arch its entry points need, e.g. "sm_90a"
    cc: str  # the compute capability its condition asks for, in words: "9.0"
    what: str  # what it is, in a few words (the Rust launcher's doc)
    template: str  # the .cu partial printing its tiles, e.g. "cuda/gemm_wgmma.cu.j2"
    # Whether the kernel gets the body (from its declared archs).
    applies: Callable[[ir.Kernel, ir.Spec], bool]
    # Its BodyPlan from the kernel, its spec, the mma.sync tiles (their index
    # and entry name), the LUT's ir.Tile of each, and the number of its
    # algorithm item.
    plan: Callable[[ir.Kernel, ir.Spec, tuple[TileConfig, ...], tuple[ir.Tile, ...], int],
                   BodyPlan]
    # Its launches for one LUT entry, given the entry's mma.sync steps.
    launch: Callable[[ir.Kernel, BodyPlan, TileConfig, tuple[Step, ...]], BodyLaunch]
