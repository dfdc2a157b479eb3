"""Kernel and dispatch names across the specs of one project.

The specs of one folder (usually `specs/`) render into one `generated/`
tree, and a program may link the CUDA code of several of them: the
`extern "C"` entry points, `launch_<name>` and the argument structs of all
its specs then share one namespace. So names must not clash across specs
either: `gemmgen.names.collisions` over all of them, without the case rule
(each spec has its own folder of files). `validate` checks the names within
one spec; this module only compares names of different specs.

`gemmgen build specs/a.gemm` checks a.gemm's names against the other specs
of its folder as well, parsed and validated but not rendered, so that
building clashing specs one at a time fails too. A sibling spec with errors
of its own is left out: it does not block building a different spec.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gemmgen import build_cache, ir
from gemmgen.diagnostics import Diagnostic, SpecError
from gemmgen.names import collisions
from gemmgen.specfile import InputError, SpecFile, locate


def spec_names(spec: ir.Spec) -> list[tuple[str, ir.Loc, str]]:
    """The kernel and dispatch names of a spec, with their positions."""
    return ([(k.name, k.loc, "kernel") for k in spec.kernels]
            + [(d.name, d.loc, "dispatch") for d in spec.dispatches])


def _names_of(sf: SpecFile) -> ir.Spec:
    """A sibling's spec IR, enough for its names: from the render cache when
    it was built before, else parsed (lark loaded only then)."""
    cached = build_cache.load(sf)
    if cached is not None:
        return cached[0]
    from gemmgen.parse import parse
    from gemmgen.validate import validate

    return validate(parse(sf.source, sf.display))


def check_project_names(
        specs: Iterable[tuple[ir.Spec, SpecFile]]) -> tuple[list[Diagnostic], dict[str, str]]:
    """Names of `specs` that clash with names of another spec of their project
    (given, or a sibling in the same folder). Returns the diagnostics and the
    source text of every spec, by the path diagnostics name it with."""
    given: dict[Path, tuple[ir.Spec, SpecFile]] = {}
    for spec, sf in specs:
        given.setdefault(sf.path.resolve(), (spec, sf))
    siblings: dict[Path, tuple[ir.Spec, SpecFile]] = {}
    for folder in sorted({p.parent for p in given}):
        for p in sorted(folder.glob("*.gemm")):
            if p.resolve() in given or p.resolve() in siblings:
                continue
            try:
                sf = locate(p)
                spec = _names_of(sf)
            except (InputError, SpecError):
                continue  # its own errors are reported when it is built
            siblings[p.resolve()] = (spec, sf)

    # Per project, siblings first: a clash is reported at the later name,
    # so at a spec being built whenever one of the two is.
    projects: dict[Path, list[tuple[int, str, ir.Spec]]] = {}
    sources: dict[str, str] = {}
    for rank, group in ((0, siblings), (1, given)):
        for spec, sf in group.values():
            projects.setdefault(sf.root, []).append((rank, sf.display, spec))
            sources[sf.display] = sf.source
    diags: list[Diagnostic] = []
    for members in projects.values():
        if len(members) > 1:
            entries = [e for _, _, spec in sorted(members, key=lambda m: m[:2])
                       for e in spec_names(spec)]
            diags += collisions(entries, case=False, across_files=True)
    return diags, sources
