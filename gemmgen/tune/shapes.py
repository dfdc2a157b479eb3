"""The problem shapes `gemmgen tune` measures: `--shapes` text, presets, the
default set, and the realistic (skewed) group sizes of a grouped shape.

Pure Python (no NumPy): `--dry-run` runs on a machine with the generator only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gemmgen import ir

# Groups of a grouped shape given without `g`.
DEFAULT_GROUPS = 8
# The launchers' dims are int32.
INT32_MAX = 2**31 - 1


class ShapeError(ValueError):
    """A `--shapes` / `--shapes-file` / `--preset` the user must fix."""


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    """One problem shape. `g` is the number of groups (0: dense). For the
    masked layout, `m` is each group's capacity, as everywhere else."""

    m: int
    n: int
    k: int
    g: int = 0

    def __str__(self) -> str:
        groups = f" g={self.g}" if self.g else ""
        return f"m={self.m} n={self.n} k={self.k}{groups}"

    @property
    def rows_per_group(self) -> int:
        """m/g as a `tile_rule` condition reads it (m // g); m when dense."""
        return self.m // self.g if self.g else self.m


# `--preset NAME`: the shapes of a few models' MoE / dense layers.
PRESETS: dict[str, tuple[Shape, ...]] = {
    # Mixtral 8x7B experts (w1/w3 fused: n=2*14336), prefill and decode.
    "mixtral": (Shape(8192, 28672, 4096, 8), Shape(128, 28672, 4096, 8)),
    # Qwen3-30B-A3B: gate-up (n=2*768) and the down projection.
    "qwen3-30b-a3b": (Shape(16384, 1536, 2048, 128), Shape(16384, 2048, 768, 128)),
    # gpt-oss-120b: gate-up (n=2*2880) and the down projection.
    "gpt-oss-120b": (Shape(8192, 5760, 2880, 32), Shape(8192, 2880, 2880, 32)),
    # DeepSeek-V3 routed experts, gate-up (n=2*2048) over k=7168, as one
    # expert-parallel shard holds them: 32 of the 256 experts (all 256 would
    # be 15 GB of bf16 weights, more than a TPU v5e's HBM) and the ~2048 of
    # 8192 tokens x top-8 rows routed to them.
    "deepseek-v3": (Shape(2048, 4096, 7168, 32),),
    "dense": (Shape(4096, 4096, 4096), Shape(8192, 8192, 8192)),
}

# Shapes measured when none is given (n and k: the kernel's static dims where
# it has them): decode, small and large prefill.
DEFAULT_M_DENSE = (128, 1024, 4096, 8192)
DEFAULT_M_GROUPED = (512, 4096, 16384)
DEFAULT_M_MASKED = (64, 256)  # each group's capacity
DEFAULT_NK = 4096


def parse_shapes(text: str, where: str = "--shapes") -> list[Shape]:
    """`m,n,k[,g];m,n,k[,g];...` (newlines separate shapes too; `#` starts a
    comment in a shapes file) -> shapes, or a ShapeError naming the bad one."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0]
        for item in line.split(";"):
            item = item.strip()
            if not item:
                continue
            at = f"{where}:{number}" if "\n" in text.strip() else where
            parts = [p.strip() for p in item.split(",")]
            try:
                dims = [int(p) for p in parts]
            except ValueError:
                raise ShapeError(f"{at}: '{item}': expected m,n,k or m,n,k,g (integers)") from None
            if len(dims) not in (3, 4):
                raise ShapeError(f"{at}: '{item}': expected m,n,k or m,n,k,g, not "
                                 f"{len(dims)} numbers")
            if any(d < 1 for d in dims) or any(d > INT32_MAX for d in dims):
                raise ShapeError(f"{at}: '{item}': each dim must be in [1, 2^31 - 1]")
            out.append(Shape(*dims))
    if not out:
        raise ShapeError(f"{where}: no shapes given")
    return out


def preset(name: str) -> tuple[Shape, ...]:
    from gemmgen.diagnostics import suggest

    if name not in PRESETS:
        raise ShapeError(f"--preset {name}: not a preset{suggest(name, PRESETS)} "
                         f"(presets: {', '.join(PRESETS)})")
    return PRESETS[name]


def default_shapes(kernel: ir.Kernel) -> list[Shape]:
    """The shapes of a kernel when none is given: its static n and k (else
    4096) at a decode and a few prefill m."""
    n = kernel.static_n or DEFAULT_NK
    k = kernel.static_k or DEFAULT_NK
    if kernel.masked:
        return [Shape(m, n, k, DEFAULT_GROUPS) for m in DEFAULT_M_MASKED]
    if kernel.op is ir.Op.GROUPED:
        return [Shape(m, n, k, DEFAULT_GROUPS) for m in DEFAULT_M_GROUPED]
    return [Shape(m, n, k) for m in DEFAULT_M_DENSE]


def fit_to_kernel(kernel: ir.Kernel, shape: Shape) -> tuple[Shape | None, str]:
    """The shape as `kernel` takes it (a grouped kernel given no `g` gets
    DEFAULT_GROUPS), or None and why the kernel cannot run it."""
    if kernel.static_n is not None and shape.n != kernel.static_n:
        return None, f"the kernel's n is fixed at {kernel.static_n}"
    if kernel.static_k is not None and shape.k != kernel.static_k:
        return None, f"the kernel's k is fixed at {kernel.static_k}"
    if kernel.op is ir.Op.GROUPED:
        return (shape if shape.g else Shape(shape.m, shape.n, shape.k, DEFAULT_GROUPS)), ""
    if shape.g:
        return None, "a dense kernel has no groups"
    return shape, ""


def group_sizes(shape: Shape, seed: int = 0) -> tuple[int, ...]:
    """Rows per group of a contiguous grouped shape as a router spreads them:
    log-normal shares (sigma 0.6: the hottest of 8 experts gets about twice
    the mean, a few get half), summing to m exactly; deterministic in `seed`
    (Python's own generator, the same on every machine)."""
    rng = random.Random(seed)
    weights = [rng.lognormvariate(0.0, 0.6) for _ in range(shape.g)]
    total = sum(weights)
    sizes = [int(shape.m * w / total) for w in weights]
    for i in range(shape.m - sum(sizes)):  # the rounding remainder, one row each
        sizes[i % shape.g] += 1
    return tuple(sizes)


def masked_counts(shape: Shape, seed: int = 0) -> tuple[int, ...]:
    """Valid rows per group of a masked shape (capacity m): the same skew over
    3/4 of the total capacity (decode buffers run partly full), each count
    clipped to the capacity."""
    filled = group_sizes(Shape(shape.m * shape.g * 3 // 4, shape.n, shape.k, shape.g), seed)
    return tuple(min(c, shape.m) for c in filled)
