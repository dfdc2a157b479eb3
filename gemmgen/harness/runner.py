"""What every way of running generated kernels shares: the `Runner`
interface `gemmgen verify` drives, and loading a generated Python module.

`gemmgen.verify` (the Pallas runners and the command) and
`verify_cuda` (the CUDA runners) both build on this module; neither imports
the other's runners by name.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

from gemmgen import ir
from gemmgen.build import Rendered
from gemmgen.cases import Case


class Runner:
    """One way of running kernels. Subclasses set `name` and `backend`."""

    name = ""
    backend = ir.Backend.PALLAS_TPU
    checks_numbers = True
    # True: one case at a time for the whole run (state global to the
    # process, or one device); else `gemmgen verify` runs different kernels'
    # cases on separate threads at once.
    serial = False
    # True: `gemmgen verify` runs its cases in worker processes, one at a time
    # per process (work that holds the GIL, or state global to a process).
    processes = False
    cuda_arch: str | None = None  # the arch CUDA emulation plays (None: the spec's)

    def unavailable(self) -> str | None:
        return None

    def prepare(self, rendered: Rendered, workdir: Path) -> None:
        self.rendered = rendered
        self.workdir = workdir

    def run(self, kernel: ir.Kernel, case: Case, inputs: dict[str, np.ndarray]):
        raise NotImplementedError


def load_generated_module(path: Path, name: str) -> ModuleType:
    """Import the generated Python file `path` as module `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module
