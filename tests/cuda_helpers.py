"""Shared setup of the CUDA kind tests: render a spec's CUDA files into a
folder, build their emulator libraries in parallel, load their launchers."""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from gemmgen import ir
from gemmgen.build import render_spec
from gemmgen.harness.runner import load_generated_module


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
