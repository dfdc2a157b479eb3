"""Load specs, render their outputs in memory, write or check `generated/`.

Nothing here prints; the CLI turns results into messages and exit codes.

Paths: a spec at `<root>/specs/<stem>.gemm` renders into
`<root>/generated/<stem>/`, and generated files name it `specs/<stem>.gemm`
whatever the working directory, so output is identical wherever the command
runs. A spec outside a `specs/` folder uses its own folder as the root.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import gemmgen
from gemmgen import backends, ir
from gemmgen.diagnostics import Diagnostic, SpecError
from gemmgen.parse import parse
from gemmgen.project_names import check_project_names
from gemmgen.render import header_text
from gemmgen.validate import validate

MANIFEST = PurePosixPath("MANIFEST.json")
# The JAX release the generated Pallas code is tested with (pyproject pins it).
JAX_VERSION = "0.10.2"


class InputError(Exception):
    """A spec that cannot be read (missing, not UTF-8): exit status 2."""


@dataclass(frozen=True)
class SpecFile:
    path: Path  # as given
    root: Path  # project root: generated/ lives here
    display: str  # posix path relative to root, used in headers and messages
    source: str


@dataclass
class Rendered:
    spec: ir.Spec
    file: SpecFile
    files: dict[PurePosixPath, str]  # relative to out_dir, manifest included

    @property
    def out_dir(self) -> Path:
        return self.file.root / "generated" / self.spec.stem


def locate(path: Path) -> SpecFile:
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: error: no such spec file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: error: cannot read the spec: {e}") from None
    resolved = path.resolve()
    folder = resolved.parent
    root = folder.parent if folder.name == "specs" else folder
    display = resolved.relative_to(root).as_posix()
    return SpecFile(path, root, display, source)


def load(path: Path) -> tuple[ir.Spec, SpecFile]:
    """Read, parse and validate one spec (backend diagnostics included)."""
    sf = locate(path)
    ast = parse(sf.source, sf.display)
    spec = validate(ast, diagnose=backends.diagnose)
    return spec, sf


def render_spec(path: Path) -> Rendered:
    spec, sf = load(path)
    files = dict(sorted(backends.render(spec).items()))
    head = header_text(spec.path)
    for p, text in files.items():
        assert head in text.split("\n", 2)[0] or head in text.split("\n", 2)[1], \
            f"{p} lacks the generated-file header"
    files[MANIFEST] = manifest(spec, files)
    return Rendered(spec, sf, files)


def manifest(spec: ir.Spec, files: dict[PurePosixPath, str]) -> str:
    doc = {
        "comment": header_text(spec.path),
        "generator": f"gemmgen {gemmgen.__version__}",
        "jax": JAX_VERSION,
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
    for p in paths:
        try:
            out.append(render_spec(p))
        except SpecError as e:
            diags.extend(e.diagnostics)
            sources[e.diagnostics[0].loc.path] = locate(p).source
    clashes, clash_sources = check_project_names((r.spec, r.file) for r in out)
    if clashes:  # kernel and dispatch names across the specs of a project
        diags.extend(clashes)
        sources.update(clash_sources)
    if diags:
        err = SpecError(diags)
        err.sources = sources  # type: ignore[attr-defined]
        raise err
    stems: dict[Path, str] = {}
    for r in out:
        if r.out_dir in stems:
            raise InputError(f"{r.file.path}: error: renders into {r.out_dir}, as does "
                             f"{stems[r.out_dir]}")
        stems[r.out_dir] = str(r.file.path)
    return out


def _existing(out_dir: Path) -> dict[PurePosixPath, Path]:
    if not out_dir.is_dir():
        return {}
    found = {}
    for p in sorted(out_dir.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            found[PurePosixPath(p.relative_to(out_dir).as_posix())] = p
    return found


@dataclass
class WriteReport:
    written: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)


def write(rendered: list[Rendered]) -> WriteReport:
    """Write changed files (temp file + os.replace) and remove orphans."""
    report = WriteReport()
    for r in rendered:
        existing = _existing(r.out_dir)
        for rel, text in r.files.items():
            dest = r.out_dir / rel
            data = text.encode()
            if dest.is_file() and dest.read_bytes() == data:
                report.unchanged.append(dest)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.chmod(tmp, 0o644)
                os.replace(tmp, dest)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            report.written.append(dest)
        for rel, p in existing.items():
            if rel not in r.files:
                p.unlink()
                report.removed.append(p)
        for d in sorted((p for p in r.out_dir.rglob("*") if p.is_dir()), reverse=True):
            if d.name != "__pycache__" and not any(d.iterdir()):
                d.rmdir()
    return report


@dataclass
class Problem:
    kind: str  # stale, missing, orphaned
    path: Path
    diff: str = ""


def check(rendered: list[Rendered], *, all_specs_root: Path | None = None) -> list[Problem]:
    """Compare what the generator makes today with what is on disk."""
    problems: list[Problem] = []
    for r in rendered:
        existing = _existing(r.out_dir)
        for rel, text in r.files.items():
            dest = r.out_dir / rel
            if rel not in existing:
                problems.append(Problem("missing", dest))
                continue
            try:
                have = dest.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                have = "<binary>\n"
            if have != text:
                diff = "".join(difflib.unified_diff(
                    have.splitlines(keepends=True), text.splitlines(keepends=True),
                    fromfile=f"{_rel(dest, r.file.root)} (on disk)",
                    tofile=f"{_rel(dest, r.file.root)} (generated)", n=2))
                problems.append(Problem("stale", dest, diff))
        for rel, p in existing.items():
            if rel not in r.files:
                problems.append(Problem("orphaned", p))
    if all_specs_root is not None:
        gen = all_specs_root / "generated"
        stems = {r.out_dir.name for r in rendered}
        if gen.is_dir():
            for d in sorted(gen.iterdir()):
                if d.is_dir() and d.name not in stems:
                    problems.append(Problem("orphaned", d))
    return problems


def _rel(p: Path, root: Path) -> str:
    try:
        return p.relative_to(root).as_posix()
    except ValueError:
        return p.as_posix()
