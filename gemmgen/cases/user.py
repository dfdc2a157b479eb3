"""The user's own shape (`gemmgen verify --m/--n/--k/--groups/--group-sizes`,
and explain's `--counters`): `Shape` as given, checked (`check_shape`), and
the case `your_shape` built from it (`user_case`), the dims not given taken
from the kernel's first standard case."""

from __future__ import annotations

from dataclasses import dataclass

from gemmgen import ir
from gemmgen.cases.case import Case
from gemmgen.cases.standard import standard_cases
from gemmgen.diagnostics import plural

# Groups of a grouped kernel's own shape when neither --groups nor
# --group-sizes says (explain's default too).
DEFAULT_GROUPS = 8


@dataclass(frozen=True, slots=True)
class Shape:
    """A problem shape as the user gives it; None where not given."""

    m: int | None = None
    n: int | None = None
    k: int | None = None
    groups: int | None = None
    group_sizes: tuple[int, ...] | None = None

    def given(self) -> bool:
        return any(v is not None for v in (self.m, self.n, self.k, self.groups, self.group_sizes))


class ShapeError(ValueError):
    """A shape no case can be built from, or one the kernel's launcher refuses."""


def check_shape(shape: Shape) -> None:
    """A ShapeError for values no kernel takes: negative dims, no groups,
    --groups and --group-sizes that disagree."""
    for name in ("m", "n", "k"):
        v = getattr(shape, name)
        if v is not None and v < (0 if name == "m" else 1):
            raise ShapeError(f"--{name} {v}: must be {'>= 0' if name == 'm' else 'positive'}")
    if shape.groups is not None and shape.groups < 1:
        raise ShapeError(f"--groups {shape.groups}: must be positive")
    sizes = shape.group_sizes
    if sizes is not None:
        if not sizes or any(s < 0 for s in sizes):
            raise ShapeError(f"--group-sizes {','.join(map(str, sizes))}: each size must be >= 0")
        if shape.groups is not None and shape.groups != len(sizes):
            raise ShapeError(f"--groups {shape.groups} but --group-sizes gives "
                             f"{plural(len(sizes), 'group')}")


def _defaults_view(kernel: ir.Kernel) -> ir.Kernel:
    """The view whose first standard case gives `user_case` the dims not
    given: the kernel itself when it is a view or has one LUT, else its CUDA
    view (the smaller tiles: modest defaults), else its first backend's."""
    if kernel.view is not None or not kernel.backend_tiles:
        return kernel
    backend = ir.Backend.CUDA if ir.Backend.CUDA in kernel.backends else kernel.backends[0]
    return kernel.for_backend(backend)


def user_case(kernel: ir.Kernel, shape: Shape) -> Case:
    """The case `your_shape` at the user's shape: dims not given are the
    kernel's first standard case's (its static dims where the spec fixes
    them). A grouped kernel's m rows are split evenly over --groups groups
    (default DEFAULT_GROUPS) unless --group-sizes gives them; the masked
    layout's m is each group's capacity, --group-sizes its valid rows (default:
    all). A ShapeError for values no kernel takes (negative, inconsistent)."""
    check_shape(shape)
    sizes = shape.group_sizes
    base = standard_cases(_defaults_view(kernel))[0]
    if kernel.op is ir.Op.QUANTIZE:
        if shape.n is not None and shape.n != (shape.k or base.k):
            raise ShapeError(f"{kernel.name} (op quantize) has no n: its output is m x k "
                             "(give --k)")
        k = shape.k or base.k
        return Case("your_shape", m=base.m if shape.m is None else shape.m, n=k, k=k)
    grouped = kernel.op in (ir.Op.GROUPED, ir.Op.TGMM)
    if not grouped and (shape.groups is not None or sizes is not None):
        raise ShapeError(f"{kernel.name} is not grouped: --groups and --group-sizes do not "
                         "apply (use --kernel to pick grouped kernels)")
    n = shape.n or base.n
    k = shape.k or base.k
    if not grouped:
        return Case("your_shape", m=base.m if shape.m is None else shape.m, n=n, k=k)
    if kernel.masked:
        cap = shape.m if shape.m is not None else max(sizes) if sizes else base.m
        counts = sizes or (cap,) * (shape.groups or DEFAULT_GROUPS)
        if max(counts) > cap:
            raise ShapeError(f"--group-sizes: a masked group holds at most m = {cap} valid "
                             f"rows (its capacity), not {max(counts)}")
        return Case("your_shape", m=cap, n=n, k=k, masked_m=tuple(counts))
    if sizes is None:
        m = base.m if shape.m is None else shape.m
        g = shape.groups or DEFAULT_GROUPS
        sizes = tuple(m // g + (1 if i < m % g else 0) for i in range(g))
    m = shape.m if shape.m is not None else sum(sizes)
    if sum(sizes) > m:
        raise ShapeError(f"--group-sizes add up to {sum(sizes)} rows, more than m = {m}")
    return Case("your_shape", m=m, n=n, k=k, group_sizes=tuple(sizes))
