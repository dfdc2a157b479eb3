"""What the kernels are generated for: the backends, a backend's own tile
LUT (`BackendTiles`), the CUDA archs and TPU generations a spec may declare,
the launcher families of the cuda target, and a spec's `Target` blocks."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from gemmgen.ir.loc import NO_LOC, Loc
from gemmgen.ir.parts import Tile, TileRule


class Backend(enum.Enum):
    PALLAS_TPU = "pallas_tpu"
    CUDA = "cuda"


@dataclass(frozen=True, slots=True)
class BackendTiles:
    """A backend's own tile LUT (`tile pallas_tpu ...` and `tile_rule
    pallas_tpu ...` lines, docs/spec.md "A tile per backend"): the backend
    uses it in place of the kernel's unqualified `tile` and `tile_rule`s."""

    backend: Backend
    tile: Tile
    tile_rules: tuple[TileRule, ...] = ()
    loc: Loc = field(default=NO_LOC, compare=False)  # of the `tile BACKEND` line


# The `f` (family) forms of nvcc 12.9+ are not declarable: docs/decisions.md,
# "sm_12x: the `a` archs, no `f` family forms".
CUDA_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_103a", "sm_120",
              "sm_120a", "sm_121", "sm_121a")
# The workstation Blackwell archs (compute capability 12.x): warp-level
# mma.sync only, no wgmma, tcgen05, TMEM or thread-block clusters beyond 1x1x1.
SM12X_ARCHS = ("sm_120", "sm_120a", "sm_121", "sm_121a")
TPU_GENERATIONS = ("v5e", "v5p", "v6e", "v7x")

# The JAX release the generated Pallas code is lowered and interpreted with
# in the tests (build.py records it in MANIFEST.json; Pallas APIs move
# between releases).
JAX_VERSION = "0.10.2"
# The releases the generated code is for: from the tested one up to the next
# minor release, excluded. The `pallas` extra of pyproject.toml states the
# same range (a test keeps them equal), MANIFEST.json records it, each
# generated module warns when it is imported under a JAX outside it, and a
# `tuned` block measured under a JAX outside it is not applied.
JAX_MIN = (0, 10, 2)
JAX_BELOW = (0, 11)
JAX_RANGE = f">={'.'.join(map(str, JAX_MIN))},<{'.'.join(map(str, JAX_BELOW))}"


def jax_in_range(version: str) -> bool:
    """Whether a JAX version ("0.10.2", "0.10.3rc1") is in JAX_RANGE: its
    leading dotted numbers, missing ones counted as 0."""
    head = re.match(r"\d+(\.\d+)*", version.strip())
    if head is None:
        return False
    v = tuple(int(x) for x in head.group().split("."))
    v += (0,) * (len(JAX_MIN) - len(v))
    return JAX_MIN <= v < JAX_BELOW


def arch_number(arch: str) -> int:
    """`sm_90a` -> 90."""
    return int(arch[3:].rstrip("af"))


# The launcher families of the cuda target (`launchers cpp cupy rust`): the
# C++ header and host launcher and the Python (CuPy) launcher are always
# emitted (the .cu holds the C++ launcher; verify runs the Python one);
# `rust` adds a cargo crate of Rust launchers (docs/rust.md).
CUDA_LAUNCHERS = ("cpp", "cupy", "rust")
CUDA_REQUIRED_LAUNCHERS = ("cpp", "cupy")


@dataclass(frozen=True, slots=True)
class Target:
    backend: Backend
    cuda_archs: tuple[str, ...] = ()
    tpu: str = "v5e"  # the first declared generation
    loc: Loc = field(default=NO_LOC, compare=False)
    launchers: tuple[str, ...] = CUDA_REQUIRED_LAUNCHERS  # cuda: CUDA_LAUNCHERS, in spec order
    # pallas_tpu: every declared generation (`tpu v5e v6e`), `tpu` first;
    # () stands for (tpu,).
    tpu_list: tuple[str, ...] = ()

    @property
    def tpus(self) -> tuple[str, ...]:
        """The TPU generations the spec targets, in spec order."""
        return self.tpu_list or (self.tpu,)
