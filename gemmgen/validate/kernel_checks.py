"""The backends' checks of each kernel, collected with everything else the
validator finds, so that one run reports every problem of a spec.

The layers of a kernel's checks are: its fields (each read on its own),
the semantic rules (`validate.rules`, which relate fields: they run when
every field read) and each listed backend's `diagnose(kernel, spec)`.
A backend's checks of a kernel run whatever the rest of the spec holds (an
error in another kernel, a dispatch or a name clash stops nothing), and on
a kernel with errors of its own too, where their findings cannot follow
from those errors (docs/decisions.md, "Every problem at once"):

- a kernel whose op or operands (op, lhs, rhs, out, acc) do not read is not
  built and has no backend checks: every check reads them;
- otherwise a field that did not read stands at its default in the kernel,
  and the backend's findings are kept only where they lie in a field of the
  kernel that has no error (by its lines): one at a field with an error, at
  the kernel's name (about the kernel as a whole) or nowhere in the kernel
  (a defaulted part has no position) may follow from the bad field and is
  left out, as is one whose `related` fields (the others it follows from)
  include one with an error; the kernel's own errors are reported, so the
  run still fails;
- a backend check that raises on such a kernel is skipped (the checks are
  written for valid kernels); on a valid kernel it is a bug and propagates.

A check reports through the one API every check uses: a list of
`Diagnostic`s positioned at what they concern: `kernel.at("stages")` for a
field, a part's `loc` (`kernel.lhs.loc`, `kernel.epilogue.loc`,
`kernel.rhs_scale.loc`), or a tile's position from `kernel.lut()`; and,
in `related`, the positions of the other fields it follows from (the
silu_mul pairing of n blocks, at the epilogue, follows from `dims`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gemmgen import ir
from gemmgen.diagnostics import Diagnostic
from gemmgen.parse import Field

Diagnose = Callable[[ir.Kernel, ir.Spec], list[Diagnostic]]


@dataclass(frozen=True)
class ReadKernel:
    """One kernel variant as the validator read it."""

    kernel: ir.Kernel
    errors: tuple[Diagnostic, ...]  # its own: fields that did not read, rules that failed
    fields: tuple[frozenset[int], ...]  # the lines of each of its fields


# The lines of a kernel's tile LUTs are one field here: a bad `tile palas_tpu`
# line may be the LUT meant for a backend that now reads the unqualified one.
_ONE_FIELD = {"tile_rule": "tile"}


def field_lines(fields: Iterable[Field]) -> tuple[frozenset[int], ...]:
    """The lines of each field of a kernel (its block's and the defaults'),
    by name: a swept field's alternatives may go on over several lines, and
    the tile LUTs' lines are one field (_ONE_FIELD)."""
    by_name: dict[str, set[int]] = {}
    for f in fields:
        last = max((a.loc.line for a in f.alts), default=f.loc.line)
        by_name.setdefault(_ONE_FIELD.get(f.name, f.name), set()).update(
            range(f.loc.line, last + 1))
    return tuple(frozenset(lines) for _, lines in sorted(by_name.items()))


def backend_checks(kernels: Iterable[ReadKernel], spec: ir.Spec,
                   diagnose: Diagnose) -> list[Diagnostic]:
    """Every backend finding of every kernel that can be trusted (above)."""
    out: list[Diagnostic] = []
    for rk in kernels:
        if not rk.errors:
            out.extend(diagnose(rk.kernel, spec))
        else:
            out.extend(_beside_errors(rk, spec, diagnose))
    return out


def _beside_errors(rk: ReadKernel, spec: ir.Spec, diagnose: Diagnose) -> list[Diagnostic]:
    try:
        found = diagnose(rk.kernel, spec)
    except Exception:  # noqa: BLE001 - a check written for valid kernels; see above
        return []
    path = rk.kernel.loc.path
    bad = {d.loc.line for d in rk.errors if d.loc.path == path}
    sound = frozenset().union(*(lines for lines in rk.fields if not lines & bad))
    return [d for d in found
            if d.loc.path == path and d.loc.line in sound and d.loc != rk.kernel.loc
            and not any(r.path == path and r.line in bad for r in d.related)]
