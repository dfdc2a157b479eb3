"""Launch steps: what one tile of the LUT launches, and on which device.

A `Step` is one kernel launch (entry point, grid, block, dynamic shared
memory, arguments); a `Variant` is one tile of the LUT: the mma.sync body's
steps, which every arch runs, and the `Path`s of the other tensor-core
bodies (gemm/bodies.py), each taken instead on the device its condition
names. CUDA's launch limits and the device names the conditions may use
are here too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gemmgen.backends.cuda.expr import ZERO, Expr, expr
from gemmgen.backends.cuda.layout import (
    COLUMNS,
    comment,
    cpp_assign_string,
    cpp_call,
    one_per_line,
    pack,
    py_call,
    py_tuple,
)
from gemmgen.backends.cuda.tensor_maps import StepArg

__all__ = ["DEFAULT_SMEM", "DEVICE_NAMES", "LIMITS", "MAX_CLUSTER_BLOCKS", "NO_CLUSTER", "WARP",
           "Grid", "Limits", "Path", "Step", "Variant"]

WARP = 32
# The opt-in shared-memory maximum per block of each arch is data in
# gemmgen.archs (shared_memory_limit), which the nvcc checks test. Each
# kind's diagnose() rejects a plan over the limit of a declared arch, and
# both launchers compare every launch with the device's own limit.
DEFAULT_SMEM = 48 * 1024  # above this, cudaFuncSetAttribute is needed


@dataclass(frozen=True, slots=True)
class Limits:
    """CUDA's launch limits, the same on every compute capability from 3.0 on
    (so on every arch gemmgen targets): the CUDA C++ Programming Guide's
    table of technical specifications per compute capability. Both launchers
    check every launch against them before launching anything."""

    grid_x: int = 2**31 - 1
    grid_yz: int = 65535
    block_threads: int = 1024


LIMITS = Limits()

# Thread-block clusters (compute capability 9.0 on): a launch whose cluster
# is not NO_CLUSTER is a cluster launch (cudaLaunchKernelEx /
# cuLaunchKernelEx with the cluster-dimension attribute), which the driver
# refuses unless every grid axis is a multiple of the cluster's and the
# cluster has at most MAX_CLUSTER_BLOCKS blocks (the portable cluster size:
# the CUDA C++ Programming Guide, "Thread Block Clusters"; more needs the
# non-portable-size function attribute, which no launcher sets).
NO_CLUSTER = (1, 1, 1)
MAX_CLUSTER_BLOCKS = 8


# What the launchers know of the device, besides the dims: its compute
# capability as major * 10 + minor (`sm`, 90 on an H100 or H200) and its
# number of SMs (`num_sms`, the persistent grid of the Hopper GEMM). The C++
# launcher asks cudaDeviceGetAttribute, the CuPy call CuPy; `launches()`
# without them (0, 0) is the path every arch runs.
DEVICE_NAMES = ("sm", "num_sms")


@dataclass(frozen=True, slots=True)
class Grid:
    """A launch's grid: one expression per axis."""

    x: Expr
    y: Expr
    z: Expr

    def __post_init__(self) -> None:
        for axis in ("x", "y", "z"):
            object.__setattr__(self, axis, expr(getattr(self, axis)))

    @property
    def axes(self) -> tuple[Expr, Expr, Expr]:
        return (self.x, self.y, self.z)

    def eval(self, env: Mapping[str, int]) -> tuple[int, int, int]:
        return (self.x.eval(env), self.y.eval(env), self.z.eval(env))

    def __iter__(self):
        return iter(self.axes)

    def __getitem__(self, i: int) -> Expr:
        return self.axes[i]


@dataclass(frozen=True, slots=True)
class Step:
    entry: str
    grid: Grid
    block: int  # threads per block (x; y and z are 1)
    smem: int
    args: tuple[StepArg, ...]
    comment: str
    # Blocks per cluster along x, y, z: NO_CLUSTER is a plain launch; any
    # other shape makes every launcher launch clusters (a body asks for
    # one, e.g. (2, 1, 1) for the 2-CTA MMA).
    cluster: tuple[int, int, int] = NO_CLUSTER

    def __post_init__(self) -> None:
        if not isinstance(self.grid, Grid):
            object.__setattr__(self, "grid", Grid(*self.grid))
        object.__setattr__(self, "cluster", tuple(int(c) for c in self.cluster))
        assert len(self.cluster) == 3 and min(self.cluster) >= 1, self.cluster
        assert self.cluster_blocks <= MAX_CLUSTER_BLOCKS, self.cluster

    @property
    def is_cluster(self) -> bool:
        """Whether it is a cluster launch."""
        return self.cluster != NO_CLUSTER

    @property
    def cluster_blocks(self) -> int:
        return self.cluster[0] * self.cluster[1] * self.cluster[2]

    @property
    def needs_attribute(self) -> bool:
        return self.smem > DEFAULT_SMEM

    @property
    def cpp_comment(self) -> str:
        return self.cpp_comment_at(6)

    def cpp_comment_at(self, indent: int) -> str:
        return comment(f"{self.entry}: {self.comment}", indent)

    def cpp_what(self, i: int, indent: int = 6) -> str:
        return cpp_assign_string(f"out[{i}].what", self.comment, indent)

    @property
    def cpp_set_attribute(self) -> str:
        return self.cpp_set_attribute_at(6)

    def cpp_set_attribute_at(self, indent: int) -> str:
        args = [self.entry, "cudaFuncAttributeMaxDynamicSharedMemorySize", str(self.smem)]
        return cpp_call("cudaFuncSetAttribute(", args, ");", indent, lhs="err")

    def cpp_launch(self, i: int) -> str:
        """The launch of step `i` of launch_<name>, with the sizes of `l[i]`,
        at indent 6."""
        return self.cpp_launch_at(i, 6)

    def cpp_launch_at(self, i: int, indent: int) -> str:
        """The launch of step `i` at `indent`."""
        if self.is_cluster:
            return self.cpp_cluster_launch_at(i, indent)
        config = [f"gg_grid(l[{i}])", f"gg_block(l[{i}])", f"l[{i}].smem", "stream"]
        head = f"{self.entry}<<<{', '.join(config)}>>>("
        if len(head) + indent <= COLUMNS:
            return cpp_call(head, list(self.cpp_args), ");", indent)
        # A long entry name: clang-format breaks the launch configuration,
        # aligned after "<<<" or, when that takes more lines, 4 columns in
        # on the line after "<<<".
        cont = indent + 4
        first = " " * indent + f"{self.entry}<<<"
        aligned = pack(first, config, ">>>(", len(first))
        below_config = (pack(" " * cont, config, ">>>(", cont)
                        or one_per_line(config, ">>>(", cont))
        broken = [first, *below_config]
        lines = aligned if aligned is not None and len(aligned) <= len(broken) else broken
        # The arguments: after ">>>(" (aligned there) or on lines of their
        # own 4 columns in, whichever breaks fewer lines (aligned on a tie).
        after = pack(lines[-1], list(self.cpp_args), ");", len(lines[-1]))
        below = (pack(" " * cont, list(self.cpp_args), ");", cont)
                 or one_per_line(list(self.cpp_args), ");", cont))
        if after is not None and len(after) - 1 <= len(below):
            return "\n".join(lines[:-1] + after)
        lines += below
        return "\n".join(lines)

    def cpp_cluster_launch_at(self, i: int, indent: int) -> str:
        """A cluster launch of step `i` at `indent`: cudaLaunchKernelEx with
        the cluster-dimension attribute (the runtime's C++ template, which
        converts the arguments to the kernel's parameter types as `<<<>>>`
        does), its error returned at once."""
        pad, inner = " " * indent, " " * (indent + 2)
        x, y, z = self.cluster
        lines = [
            f"{pad}{{",
            comment(f"A cluster launch: clusters of {x} x {y} x {z} blocks.", indent + 2),
            f"{inner}cudaLaunchAttribute cluster[1] = {{}};",
            f"{inner}cluster[0].id = cudaLaunchAttributeClusterDimension;",
            f"{inner}cluster[0].val.clusterDim.x = {x};",
            f"{inner}cluster[0].val.clusterDim.y = {y};",
            f"{inner}cluster[0].val.clusterDim.z = {z};",
            # Positional: gridDim and blockDim are macros of the CPU emulator.
            comment("grid, block, dynamic shared memory (below), stream, attributes", indent + 2),
            (f"{inner}cudaLaunchConfig_t config = {{gg_grid(l[{i}]), gg_block(l[{i}]), 0, "
             "stream, cluster, 1};"),
            f"{inner}config.dynamicSmemBytes = l[{i}].smem;",
            cpp_call("cudaLaunchKernelEx(", ["&config", self.entry, *self.cpp_args], ");",
                     indent + 2, lhs="err"),
            f"{pad}}}",
            f"{pad}if (err != cudaSuccess) {{",
            f"{pad}  return err;",
            f"{pad}}}",
        ]
        return "\n".join(lines)

    def cpp_grid_at(self, i: int, axis: int, indent: int) -> str:
        """`out[i].grid[axis] = ...;` at `indent`, broken after "=" (4
        columns in) as clang-format breaks it when it does not fit."""
        head = " " * indent + f"out[{i}].grid[{axis}] ="
        value = self.grid[axis].cpp
        if len(head) + 1 + len(value) + 1 <= COLUMNS:
            return f"{head} {value};"
        return f"{head}\n{' ' * (indent + 4)}{value};"

    def py_launch(self, indent: int) -> str:
        """`Launch(...)` of this step, an item of a list (ends in ",")."""
        args = list(self.py_args)
        parts: list[str | list[str]] = [
            f'"{self.entry}"', [a.py for a in self.grid], [str(self.block), "1", "1"],
            str(self.smem), args, f'"{self.comment}"']
        if self.is_cluster:
            parts.append([str(c) for c in self.cluster])
        items = [p if isinstance(p, str) else py_tuple(p) for p in parts]
        pad = " " * indent
        one = f"{pad}Launch({', '.join(items)}),"
        if len(one) <= COLUMNS:
            return one
        body = f"{pad}    {', '.join(items)}"
        if len(body) <= COLUMNS:
            return f"{pad}Launch(\n{body}\n{pad}),"
        lines = [f"{pad}Launch("]
        for p, item in zip(parts, items):
            if p is args and len(pad) + 5 + len(item) > COLUMNS:  # one argument a line
                lines += [f"{pad}    (", *(a.py_item(indent + 8) for a in self.args),
                          f"{pad}    ),"]
            elif isinstance(p, list) and len(pad) + 5 + len(item) > COLUMNS:
                lines += [f"{pad}    (", *(_py_item(x, indent + 8) for x in p), f"{pad}    ),"]
            else:
                lines.append(f"{pad}    {item},")
        return "\n".join([*lines, f"{pad}),"])

    @property
    def py_args(self) -> tuple[str, ...]:
        return tuple(a.py for a in self.args)

    @property
    def cpp_args(self) -> tuple[str, ...]:
        return tuple(a.cpp for a in self.args)


@dataclass(frozen=True, slots=True)
class Path:
    """What a tensor-core body other than mma.sync (gemm/bodies.py) launches
    for one tile of the LUT: the launchers run `steps` instead of the
    variant's own when `when` holds (over the dims and DEVICE_NAMES; the
    device's compute capability names the body's arch). The words say it
    in the launchers' comments and docstrings."""

    body: str  # its name in the table of bodies, e.g. "wgmma"
    title: str  # the launchers' name for it: "Hopper" prints "the Hopper path"
    arch: str  # the arch it is compiled for, e.g. "sm_90a"
    cc: str  # the compute capability `when` asks for, in words: "9.0"
    what: str  # what it is, in a few words (the Rust launcher's doc)
    label: str  # its tile, e.g. "128x128x64, 5 stages"
    when: Expr
    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "when", expr(self.when))
        assert self.steps, "a path launches something"

    @property
    def maps(self) -> tuple[StepArg, ...]:
        """Its tensor-map arguments, once per array, in launch order."""
        seen: dict[str, StepArg] = {}
        for s in self.steps:
            for a in s.args:
                if a.tmap is not None:
                    seen.setdefault(a.name, a)
        return tuple(seen.values())

    @property
    def map_names(self) -> str:
        """The arrays of its tensor maps: "lhs and rhs"."""
        names = [a.name for a in self.maps]
        return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)

    @property
    def uses_sms(self) -> bool:
        """Whether its grids or arguments use the device's SM count."""
        names = frozenset().union(*(g.names() for s in self.steps for g in s.grid),
                                  *(a.names() for s in self.steps for a in s.args))
        return "num_sms" in names


@dataclass(frozen=True, slots=True)
class Variant:
    """One tile of the LUT: when it applies and what it launches: the
    mma.sync body's `steps` on every device, or the first of its `paths`
    (in the table order of the bodies) whose condition holds."""

    index: int
    when: Expr | None  # condition on the dims; None for the default
    where: str  # spec position
    label: str  # e.g. "128x128x32"
    steps: tuple[Step, ...]
    workspace_ints: Expr = ZERO
    paths: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.when, str):
            object.__setattr__(self, "when", expr(self.when) if self.when else None)
        object.__setattr__(self, "workspace_ints", expr(self.workspace_ints))
        assert len({p.body for p in self.paths}) == len(self.paths), "one path per body"

    def path(self, body: str) -> Path | None:
        """The path of the body named `body`, if the variant has one."""
        return next((p for p in self.paths if p.body == body), None)

    def steps_for(self, env: Mapping[str, int]) -> tuple[Step, ...]:
        """The launches for these dims and device (env has DEVICE_NAMES)."""
        for p in self.paths:
            if p.when.eval(env):
                return p.steps
        return self.steps

    @property
    def all_steps(self) -> tuple[Step, ...]:
        return self.steps + tuple(s for p in self.paths for s in p.steps)

    @property
    def has_workspace(self) -> bool:
        return self.workspace_ints != ZERO

    def applies(self, env: Mapping[str, int]) -> bool:
        return self.when is None or bool(self.when.eval(env))


def _split_args(text: str) -> list[str]:
    """The top-level comma-separated parts of a call's argument text."""
    parts, depth, start = [], 0, 0
    for j, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:j].strip())
            start = j + 1
    return [*parts, text[start:].strip()]


def _py_item(value: str, indent: int) -> str:
    """An item of a split tuple at `indent` (ending in ","), as ruff format
    lays it out: one line; else `N * f(args)` (the 2-CTA tile's grid, `2 *
    gg_min(...)`) split before "*" with f's arguments as a call's."""
    pad = " " * indent
    one = f"{pad}{value},"
    m = re.fullmatch(r"(\d+) \* (\w+)\((.*)\)", value)
    if len(one) <= COLUMNS or m is None:
        return one
    return f"{pad}{m.group(1)}\n" + py_call(f"* {m.group(2)}(", _split_args(m.group(3)), "),", indent)
