"""Shared setup of the CUDA kind tests: render a spec's CUDA files into a
folder, build their emulator libraries in parallel, load their launchers."""

from __future__ import annotations

import concurrent.futures
import functools
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from gemmgen import ir
from gemmgen.build import render_spec
from gemmgen.harness.runner import load_generated_module

REPO = Path(__file__).resolve().parent.parent
SPECS = ("moe", "dense")


@functools.cache
def rendered(stem: str):
    """specs/<stem>.gemm rendered (once per process)."""
    return render_spec(REPO / "specs" / f"{stem}.gemm")


def gemm_kernels() -> list[tuple[str, str]]:
    """(spec stem, kernel name) of every CUDA tile GEMM of specs/."""
    from gemmgen.backends.cuda import gemm as tile_gemm
    from gemmgen.backends.cuda import kinds as cuda_kinds

    out = []
    for stem in SPECS:
        for k in rendered(stem).spec.kernels_for(ir.Backend.CUDA):
            if cuda_kinds.kind(k) is tile_gemm:
                out.append((stem, k.name))
    return out


def render_cuda(root: Path, stem: str, spec_text: str) -> tuple[ir.Spec, Path, dict]:
    """Write `spec_text` as `root/specs/<stem>.gemm`, render it, and put its
    CUDA files in `root/cuda/`. Returns (spec, cuda folder, rendered files)."""
    (root / "specs").mkdir()
    (root / "specs" / f"{stem}.gemm").write_text(spec_text)
    rendered = render_spec(root / "specs" / f"{stem}.gemm")
    cuda = root / "cuda"
    cuda.mkdir()
    for rel, text in rendered.files.items():
        if rel.parts[0] == "cuda":
            (cuda / rel.name).write_text(text)
    return rendered.spec, cuda, rendered.files


class RenderedSpec:
    """A test spec's `text` rendered on first use, its CUDA files in a
    folder of their own, its generated Python launchers loaded once each
    (the sm_90 and sm_12x test specs build on it)."""

    def __init__(self, stem: str, text: str) -> None:
        self.stem, self.text = stem, text
        self.modules: dict = {}
        self._launchers: dict = {}

    @functools.cached_property
    def _rendered(self) -> tuple[ir.Spec, Path]:
        import tempfile

        root = Path(tempfile.mkdtemp(prefix=f"gemmgen-{self.stem}-"))
        spec, cuda, _ = render_cuda(root, self.stem, self.text)
        return spec, cuda

    @property
    def spec(self) -> ir.Spec:
        return self._rendered[0]

    @property
    def folder(self) -> Path:
        return self._rendered[1]

    def kernel(self, name: str) -> ir.Kernel:
        return self.spec.kernel(name)

    def launcher(self, name: str):
        if name not in self._launchers:
            self._launchers[name] = load_generated_module(self.folder / f"{name}.py",
                                                          f"test_{self.stem}_{name}")
        return self._launchers[name]


def build_emulators(cuda: Path, names: Iterable[str], source_name: Callable[[str], str],
                    modules: dict) -> None:
    """One g++ build per kernel (cached by content), in parallel."""
    from gemmgen.harness.cuda_emu import EmuModule

    def build(name: str) -> None:
        modules[source_name(name)] = EmuModule((cuda / f"{name}.cu").read_text(),
                                               source_name(name), include_dirs=[cuda])

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(build, names))


class Launchers:
    """The generated Python launchers of a folder, each loaded once."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.loaded: dict[str, object] = {}

    def __call__(self, cuda: Path, name: str):
        if name not in self.loaded:
            self.loaded[name] = load_generated_module(cuda / f"{name}.py", f"{self.prefix}_{name}")
        return self.loaded[name]


def with_mutated_runtime(source: str, header: str, old: str, new: str, count: int = 1) -> str:
    """`source` compiled against a copy of the runtime headers in which
    `header` has `old` (which must occur `count` times) replaced by `new`: for
    planting a bug in the shared tile GEMM body (gg_gemm.cuh and its helpers),
    which the generated .cu only configures. The copy is a folder named by its
    content (so emulator builds stay cached); the source's runtime include
    names it by absolute path, and the copy's own quoted includes resolve
    beside it."""
    import hashlib
    import shutil

    from gemmgen.cache import usable_subdir
    from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR

    text = (RUNTIME_INCLUDE_DIR / header).read_text()
    assert text.count(old) == count, f"the planted bug's anchor occurs {text.count(old)} times in {header}"
    mutated = text.replace(old, new)
    root = usable_subdir("emu") or Path(os.environ.get("TMPDIR", "/tmp"))
    digest = hashlib.sha256((header + "\0" + mutated).encode())
    for path in sorted(RUNTIME_INCLUDE_DIR.iterdir()):  # the copy is of these very headers
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    folder = Path(root) / "runtime-mutants" / digest.hexdigest()[:16]
    if not (folder / header).is_file():
        staging = folder.with_name(folder.name + f".{os.getpid()}")
        shutil.copytree(RUNTIME_INCLUDE_DIR, staging, dirs_exist_ok=True)
        (staging / header).write_text(mutated)
        try:
            staging.rename(folder)
        except OSError:  # another process made it first
            shutil.rmtree(staging, ignore_errors=True)
    include = '#include "gg_runtime.cuh"'
    assert source.count(include) == 1
    return source.replace(include, f'#include "{folder / "gg_runtime.cuh"}"')
