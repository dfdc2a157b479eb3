"""Load specs, render their outputs in memory, write or check `generated/`.

Nothing here prints; the CLI turns results into messages and exit codes.
Reading a spec file and where its output goes: `gemmgen.specfile`.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import gemmgen
from gemmgen import build_cache, ir, output, runtime
from gemmgen.diagnostics import Diagnostic, SpecError
from gemmgen.output import show
from gemmgen.project_names import check_project_names
from gemmgen.specfile import InputError, SpecFile, locate

MANIFEST = PurePosixPath("MANIFEST.json")


@dataclass
class Rendered:
    spec: ir.Spec
    file: SpecFile
    files: dict[PurePosixPath, str]  # relative to out_dir, manifest included

    @property
    def out_dir(self) -> Path:
        return output.out_dir(self.file.root, self.spec.stem, self.file.output)


def _locate(path: Path) -> SpecFile:
    """The spec file and its project's output folder (gemmgen.project)."""
    from dataclasses import replace

    from gemmgen.project import output_folder

    sf = locate(path)
    return replace(sf, output=output_folder(sf.root).as_posix())


def load(path: Path) -> tuple[ir.Spec, SpecFile]:
    """Read, parse and validate one spec (backend diagnostics included)."""
    sf = _locate(path)
    return _validated(sf), sf


def _validated(sf: SpecFile) -> ir.Spec:
    # Imported here, not at the top: a build whose specs are all in the
    # render cache (gemmgen.build_cache) never loads lark, Jinja or the backends.
    from gemmgen import backends
    from gemmgen.parse import parse
    from gemmgen.validate import validate

    try:
        ast = parse(sf.source, sf.display)
        return validate(ast, stem=sf.stem, diagnose=backends.diagnose)
    except SpecError as e:
        e.sources.setdefault(sf.display, sf.source)
        raise


def render_spec(path: Path) -> Rendered:
    """Read, validate and render one spec: from the render cache when this
    generator rendered this very spec before (gemmgen.build_cache)."""
    sf = _locate(path)
    cached = build_cache.load(sf)
    if cached is not None:
        return Rendered(cached[0], sf, cached[1])
    from gemmgen import backends
    from gemmgen.render import header_text

    spec = _validated(sf)
    files = backends.render(spec)
    files.update(package_files(spec, files, PurePosixPath(sf.output)))
    files.update(runtime_headers(spec, files))
    files = dict(sorted(files.items()))
    head = header_text(spec.path)
    for p, text in files.items():
        assert head in text.split("\n", 2)[0] or head in text.split("\n", 2)[1], \
            f"{p} lacks the generated-file header"
    files[MANIFEST] = manifest(spec, files)
    build_cache.store(sf, spec, files)
    return Rendered(spec, sf, files)


def package_files(spec: ir.Spec, files: dict[PurePosixPath, str],
                  folder: PurePosixPath = PurePosixPath("generated")) -> dict[PurePosixPath, str]:
    """The `__init__.py` files that make `generated/<stem>/` (or the
    project's output `folder`) a Python package (`import
    generated.<stem>.pallas.<kernel>`, `generated.<stem>.cuda.<kernel>` from
    the project root); `pallas/__init__.py` is the Pallas backend's."""
    from gemmgen.project import Output
    from gemmgen.render import header_text, render_template

    folders = sorted({p.parts[0] for p in files if len(p.parts) > 1})
    out = {PurePosixPath("__init__.py"): render_template(
        "package/__init__.py.j2", header=header_text(spec.path), spec_path=spec.path,
        stem=spec.stem, folders=folders, out=Output(folder))}
    if "cuda" in folders:
        launchers = sorted(p.stem for p in files if p.parts[0] == "cuda" and p.suffix == ".py")
        out[PurePosixPath("cuda/__init__.py")] = render_template(
            "package/cuda_init.py.j2", header=header_text(spec.path), spec_path=spec.path,
            launchers=launchers)
    return out


_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def runtime_headers(spec: ir.Spec, files: dict[PurePosixPath, str]) -> dict[PurePosixPath, str]:
    """Copies of the runtime headers the generated CUDA code includes, beside
    it in `cuda/`, so that `-I generated/<stem>/cuda` is all an nvcc build
    needs: every `gemmgen/runtime/cuda` header reachable through quoted
    includes, except the CPU emulator's (`runtime.is_emulator_file`; only a
    host compiler reaches those) and the ones for archs the spec does not
    declare (`runtime.tier_archs`: the Hopper headers without sm_90a or
    sm_100a, the tcgen05 ones without sm_100a): their includes become
    comments in the copies that had them. Each copy starts with the
    generated-file header and names its source."""
    from gemmgen.render import header_text

    cuda = [t for p, t in files.items() if p.parts[0] == "cuda" and p.suffix in (".cu", ".h")]
    if not cuda:
        return {}
    target = spec.target(ir.Backend.CUDA)
    declared = set(target.cuda_archs) if target is not None else set()
    available = {p.name for p in runtime.RUNTIME_INCLUDE_DIR.iterdir() if p.is_file()}
    texts: dict[str, str] = {}
    pruned: dict[str, set[str]] = {}  # copy -> the archs of the includes left out
    todo = [name for t in cuda for name in _QUOTED_INCLUDE.findall(t)]
    while todo:
        name = todo.pop()
        if name in texts or name not in available or runtime.is_emulator_file(name):
            continue
        text = (runtime.RUNTIME_INCLUDE_DIR / name).read_text()
        kept, left_out = _without_tier_includes(text, declared)
        if left_out:
            pruned[name] = left_out
        texts[name] = kept
        todo += _QUOTED_INCLUDE.findall(kept)
    head = (f"// {header_text(spec.path)}\n"
            "// A copy of gemmgen's runtime header gemmgen/runtime/cuda/{name}{but}.\n")

    def but(name: str) -> str:
        if name not in pruned:
            return ""
        archs = [a for a in ir.CUDA_ARCHS if a in pruned[name]]
        none = "neither" if len(archs) == 2 else "none of them" if len(archs) > 2 else "no " + archs[0]
        return (f",\n// without its includes for {' / '.join(archs)} only ({spec.path} declares "
                f"{none})")

    return {PurePosixPath("cuda") / name: head.format(name=name, but=but(name)) + text
            for name, text in sorted(texts.items())}


def _without_tier_includes(text: str, declared: set[str]) -> tuple[str, set[str]]:
    """`text` with each quoted include of a runtime header for archs the
    spec does not declare (`runtime.tier_archs`) turned into a comment that
    names it, and the archs of those headers."""
    left_out: set[str] = set()

    def drop(m: re.Match[str]) -> str:
        archs = runtime.tier_archs(m.group(1))
        if not archs or declared & set(archs):
            return m.group(0)
        left_out.update(archs)
        return f'// (not copied, for {" / ".join(archs)} only: #include "{m.group(1)}")'

    return _QUOTED_INCLUDE.sub(drop, text), left_out


def manifest(spec: ir.Spec, files: dict[PurePosixPath, str]) -> str:
    from gemmgen.backends.pallas import JAX_RANGE, JAX_VERSION  # recorded in MANIFEST.json
    from gemmgen.render import header_text

    doc = {
        "comment": header_text(spec.path),
        "generator": f"gemmgen {gemmgen.__version__}",
        "jax": JAX_VERSION,
        "jax_range": JAX_RANGE,
        "spec": spec.path,
        "kernels": [k.name for k in spec.kernels],
        "dispatches": [d.name for d in spec.dispatches],
        "files": {str(p): hashlib.sha256(t.encode()).hexdigest() for p, t in sorted(files.items())},
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def render_all(paths: list[Path]) -> list[Rendered]:
    """Render every spec; raise SpecError with the problems of all of them."""
    out: list[Rendered] = []
    diags: list[Diagnostic] = []
    sources: dict[str, str] = {}
    unreadable: list[str] = []
    for p in paths:
        try:
            out.append(render_spec(p))
        except SpecError as e:
            diags.extend(e.diagnostics)
            sources.update(e.sources)
        except InputError as e:  # go on: report every spec's problems at once
            unreadable.append(str(e))
    clashes, clash_sources = check_project_names((r.spec, r.file) for r in out)
    if clashes:  # kernel and dispatch names across the specs of a project
        diags.extend(clashes)
        sources.update(clash_sources)
    if unreadable and not diags:
        raise InputError("\n".join(unreadable))
    if diags:
        err = SpecError(diags, sources)
        err.unreadable = unreadable  # type: ignore[attr-defined]
        raise err
    stems: dict[tuple[Path, str], Rendered] = {}
    for r in out:
        key = (r.file.root, r.spec.stem.casefold())
        if key in stems:
            other = stems[key].file
            raise InputError(f"{show(r.file.path)}: error: renders into {show(r.out_dir)}, as does "
                             f"{show(other.path)} (output folder names must differ in more "
                             "than case)")
        stems[key] = r
    return out


@dataclass
class WriteReport:
    written: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)


def write(rendered: list[Rendered], *, on_wait: Callable[[], None] | None = None) -> WriteReport:
    """Replace each spec's output tree as a whole (see `gemmgen.output`).

    Builds of one project are serialised by a lock on its `generated/`; each
    spec's tree is checked, staged and swapped in before the next one.
    """
    report = WriteReport()
    plans = []
    for r in rendered:  # refuse links and foreign trees before touching anything
        out = output.out_dir(r.file.root, r.spec.stem, r.file.output)
        plans.append((r, out))
    roots = sorted({(r.file.root, r.file.output) for r in rendered})
    with contextlib.ExitStack() as stack:
        for root, folder in roots:
            stack.enter_context(output.project_lock(output.generated_dir(root, folder),
                                                    on_wait=on_wait))
        for r, out in plans:
            out = output.out_dir(r.file.root, r.spec.stem, r.file.output)  # again, under the lock
            output.recover(out.parent, r.spec.stem)
            files = {rel: text.encode() for rel, text in r.files.items()}
            change = output.plan_tree(out, files, r.spec.path)
            output.apply(change, files)
            report.written += [out / p for p in change.written]
            report.unchanged += [out / p for p in change.unchanged]
            report.removed += [out / p for p in change.removed]
            report.kept += [out / p for p in change.kept]
    return report


@dataclass
class Problem:
    kind: str  # stale, missing, orphaned (build fixes these); unexpected (a note)
    path: Path
    diff: str = ""
    note: str = ""

    @property
    def fails(self) -> bool:
        return self.kind != "unexpected"


def check(rendered: list[Rendered], *, all_specs_root: Path | None = None) -> list[Problem]:
    """Compare what the generator makes today with what is on disk.

    A file gemmgen did not write is `unexpected`: reported, not a failure,
    and left alone by `build`. Links are never followed.
    """
    problems: list[Problem] = []
    for r in rendered:
        out = output.out_dir(r.file.root, r.spec.stem, r.file.output)
        existing = output.scan(out)
        doc = output.read_manifest(out)
        recorded: dict[str, str] = doc["files"] if doc else {}  # type: ignore[assignment]
        for rel, text in r.files.items():
            dest = out / rel
            entry = existing.get(rel)
            if entry is None:
                problems.append(Problem("missing", dest))
                continue
            if entry.kind != "file":
                problems.append(Problem("stale", dest, note="not a regular file"))
                continue
            data = dest.read_bytes()
            if data != text.encode():
                have = data.decode("utf-8", "replace")
                diff = "".join(difflib.unified_diff(
                    have.splitlines(keepends=True), text.splitlines(keepends=True),
                    fromfile=f"{_rel(dest, r.file.root)} (on disk)",
                    tofile=f"{_rel(dest, r.file.root)} (generated)", n=2))
                problems.append(Problem("stale", dest, diff))
        for rel, entry in existing.items():
            if rel in r.files or output.is_build_product(entry):
                continue
            if entry.kind == "file" and recorded.get(str(rel)) == \
                    hashlib.sha256(entry.path.read_bytes()).hexdigest():
                problems.append(Problem("orphaned", entry.path, note="no longer generated"))
            else:
                problems.append(Problem("unexpected", entry.path,
                                        note="not written by gemmgen; build leaves it alone"))
    if all_specs_root is not None:
        from gemmgen.project import output_folder

        gen = output.generated_dir(all_specs_root, output_folder(all_specs_root))
        stems = {r.spec.stem for r in rendered}
        if gen.is_dir():
            for d in sorted(gen.iterdir()):
                if d.name in stems or d.name.startswith(".gemmgen-"):
                    continue
                if d.name in _PACKAGE_OWN and not d.is_symlink():
                    continue  # the project's own package files (a configured output folder)
                doc = output.read_manifest(d) if d.is_dir() and not d.is_symlink() else None
                if doc is not None:
                    problems.append(Problem(
                        "orphaned", d, note=f"its spec {doc.get('spec')} is not built any more; "
                        "remove the folder"))
                else:
                    problems.append(Problem("unexpected", d, note="not written by gemmgen"))
    return problems


# What a project's own package holds beside the specs' packages when its
# output folder is a package of its (`[tool.gemmgen] output`): not reported.
_PACKAGE_OWN = frozenset({"__init__.py", "py.typed", "__pycache__"})


def _rel(p: Path, root: Path) -> str:
    try:
        return p.relative_to(root).as_posix()
    except ValueError:
        return p.as_posix()
