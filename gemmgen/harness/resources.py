"""Registers and spills of the generated CUDA kernels, as ptxas reports
them, kept in gemmgen's cache so that `gemmgen build` can warn about a tile
that spills without compiling anything (docs/decisions.md, "Spill warnings
from a resource cache").

A record holds, for one kernel's `.cu` on one arch, the `ResourceUsage` of
every entry function ptxas compiled, and the nvcc release that measured it.
It is a JSON file under `$GEMMGEN_CACHE/resources/`, named by a SHA-256 over
the `.cu` text, the text of every generated header it includes (the copies of
the runtime headers beside it in `generated/<stem>/cuda/`, transitively) and
the arch: exactly what nvcc compiles, so an edit to the kernel, its tile or a
runtime header is a new record. The nvcc release is not part of the name:
`build` reads records without running nvcc (not even `nvcc --version`), and
the commands that measure (`explain`, `verify`, `build --resources`) measure
again when the record was made by another release than the nvcc they find.

    records = measure_all(jobs(rendered_specs), nvcc, workers=4)   # fills the cache
    for d in spill_warnings(rendered_specs):                      # reads it
        print(d.render(source))

A missing, unreadable or read-only cache only means no warning: the cache is
a convenience, never an input of the generated files.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from gemmgen import ir
from gemmgen.cache import cache_dir
from gemmgen.diagnostics import Diagnostic

_FORMAT = 1  # bump when a record changes shape
_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Job:
    """One kernel's `.cu` on one arch: what to measure, and where the spec
    declares it."""

    kernel: ir.Kernel
    arch: str
    source: str  # the .cu text
    includes: tuple[tuple[str, str], ...]  # (name, text) of the generated headers it includes
    spec_path: str

    @property
    def key(self) -> str:
        parts = [f"gemmgen-resources {_FORMAT}", self.arch, _sha(self.source)]
        for name, text in self.includes:
            parts += [name, _sha(text)]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()


@functools.lru_cache(maxsize=1024)
def _sha(text: str) -> str:
    """SHA-256 of `text`, once per text: every kernel of a spec includes the
    same runtime headers."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Record:
    """What ptxas reported for one Job."""

    arch: str
    nvcc: str  # the release that measured it, e.g. V13.0.88
    kernels: dict  # entry -> gemmgen.harness.nvcc.ResourceUsage fields

    def spilling(self) -> list[tuple[str, dict]]:
        """(entry, usage) of each entry that spills, by name."""
        return [(e, u) for e, u in sorted(self.kernels.items())
                if u["spill_stores"] + u["spill_loads"] > 0]


def nvcc_release(version_text: str) -> str:
    """`V13.0.88` from `nvcc --version`; the whole text when the line is absent."""
    from gemmgen.harness.toolchain import nvcc_release as release

    return release(version_text)


def _included(cuda: dict[str, str], text: str) -> tuple[tuple[str, str], ...]:
    """The generated `cuda/` files (by name) `text` includes by quoted name,
    transitively."""
    found: dict[str, str] = {}
    todo = list(_includes_of(text))
    while todo:
        name = todo.pop()
        if name in found or name not in cuda:
            continue
        found[name] = cuda[name]
        todo += _includes_of(found[name])
    return tuple(sorted(found.items()))


@functools.lru_cache(maxsize=1024)
def _includes_of(text: str) -> tuple[str, ...]:
    """The quoted includes of `text` (each runtime header is scanned once)."""
    return tuple(_QUOTED_INCLUDE.findall(text))


def jobs(rendered: Iterable) -> list[Job]:
    """Every CUDA kernel of the rendered specs (`gemmgen.build.Rendered`) on
    every arch its spec's cuda target declares."""
    out: list[Job] = []
    for r in rendered:
        target = r.spec.target(ir.Backend.CUDA)
        if target is None:
            continue
        cuda = {p.name: t for p, t in r.files.items() if p.parts[0] == "cuda"}
        for kernel in r.spec.kernels:
            source = cuda.get(f"{kernel.name}.cu")
            if ir.Backend.CUDA not in kernel.backends or source is None:
                continue
            includes = _included(cuda, source)
            out += [Job(kernel, arch, source, includes, r.file.display)
                    for arch in target.cuda_archs]
    return out


def _path(key: str) -> Path:
    return cache_dir() / "resources" / f"{key[:40]}.json"


def lookup(job: Job) -> Record | None:
    """The recorded measurement of `job`, whichever nvcc made it; None when
    there is none (or the cache cannot be read)."""
    try:
        data = json.loads(_path(job.key).read_text())
        if data.get("format") != _FORMAT or data.get("key") != job.key:
            return None
        return Record(data["arch"], data["nvcc"], data["kernels"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def measure(job: Job, nvcc: Path, release: str) -> Record:
    """Compile `job` with nvcc as a user compiles the generated files
    (`-I generated/<stem>/cuda`), record what ptxas reports and return it.
    Raises gemmgen.harness.nvcc.NvccError when nvcc rejects the file."""
    import tempfile

    from gemmgen.harness.nvcc import resource_usage

    with tempfile.TemporaryDirectory(prefix="gemmgen-resources-") as tmp:
        folder = Path(tmp)
        for name, text in job.includes:
            (folder / name).write_text(text)
        source = folder / f"{job.kernel.name}.cu"
        source.write_text(job.source)
        usage = resource_usage(nvcc, source, job.arch, include_dirs=(folder,))
    record = Record(job.arch, release, {e: _fields(u) for e, u in sorted(usage.items())})
    store(job, record)
    return record


def store(job: Job, record: Record) -> None:
    """Keep `record` as the measurement of `job` (quietly nothing when the
    cache cannot be written)."""
    from gemmgen.harness.toolchain import atomic_write

    data = {"format": _FORMAT, "key": job.key, "kernel": job.kernel.name, "spec": job.spec_path,
            **asdict(record)}
    try:
        atomic_write(_path(job.key), (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
    except OSError:
        pass


def _fields(usage) -> dict:
    return {f: getattr(usage, f) for f in ("registers", "spill_stores", "spill_loads",
                                            "stack_frame", "static_smem", "barriers",
                                            "constant_bytes")}


def current_release(nvcc: Path) -> str:
    """The release of `nvcc` (`V13.0.88`); NvccError when it cannot run."""
    import subprocess

    from gemmgen.harness.nvcc import NvccError

    try:
        proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True,
                              check=False)
    except OSError as e:
        raise NvccError(f"cannot run {nvcc}: {e.strerror or e}") from None
    if proc.returncode != 0:
        raise NvccError(f"{nvcc} --version failed: {(proc.stdout + proc.stderr).strip()}")
    return nvcc_release(proc.stdout)


def measure_all(todo: Sequence[Job], nvcc: Path, *, workers: int = 4,
                refresh: bool = False) -> list[Record]:
    """The record of every job, measuring (up to `workers` nvcc processes at
    once) those with no record from this nvcc release, or all with `refresh`.
    Raises the first NvccError, after the other compilations ended."""
    release = current_release(nvcc)

    def one(job: Job) -> Record:
        found = None if refresh else lookup(job)
        return found if found is not None and found.nvcc == release else measure(job, nvcc, release)

    if workers <= 1 or len(todo) <= 1:
        return [one(j) for j in todo]
    from concurrent.futures import ThreadPoolExecutor

    # Threads suffice: each one waits on its nvcc process.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, todo))


def spill_warning(job: Job, record: Record) -> Diagnostic | None:
    """The warning for a measured job that spills, positioned at its kernel."""
    spilling = record.spilling()
    if not spilling:
        return None
    where = "; ".join(
        f"{e}: {u['spill_stores']} bytes of spill stores and {u['spill_loads']} of spill loads "
        f"at {u['registers']} registers" for e, u in spilling)
    return Diagnostic(job.kernel.loc, f"kernel '{job.kernel.name}' spills registers on "
                      f"{job.arch} ({where}; ptxas of nvcc {record.nvcc}): every spill is "
                      "local-memory traffic; a smaller tile, another `warp_tile` or `mma` "
                      "choice avoids it",
                      severity="warning")


def spill_warnings(rendered: Iterable) -> list[tuple[Diagnostic, str]]:
    """(warning, the spec's source text) for every recorded measurement of
    the rendered specs' CUDA kernels that spills; reads the cache only."""
    rendered = list(rendered)
    out = []
    sources = {r.file.display: r.file.source for r in rendered}
    for job in jobs(rendered):
        record = lookup(job)
        d = spill_warning(job, record) if record is not None else None
        if d is not None:
            out.append((d, sources.get(job.spec_path, "")))
    return out
