"""Where gemmgen finds the CUDA toolchain, and where it caches what it builds.

One rule picks every CUDA tool (nvcc, cuobjdump, nvdisasm), here and nowhere
else, from the most explicit setting to the least:

1. ``$GEMMGEN_<TOOL>`` (e.g. ``GEMMGEN_NVCC``): that file, whatever it is;
2. ``$CUDA_HOME/bin`` (then ``$CUDA_PATH/bin``): the toolkit the user named;
3. the PyPI wheels of the Python environment gemmgen runs in
   (``site-packages/nvidia/cu13/bin``, from ``nvidia-cuda-nvcc`` and friends:
   the toolchain ``pip install 'gemmgen[cuda-tools]'`` brought);
4. ``PATH``;
5. ``/usr/local/cuda/bin``.

An older toolkit first on ``PATH`` therefore does not shadow the one the
install brought; ``locate_cuda_tool`` says which rule chose a tool, and
``describe_nvcc`` is the line ``explain``, ``verify`` and ``build
--resources`` print so that every figure names the compiler that measured it.

The CUDA headers (``cuda_bf16.h``, ``cuda_fp16.h``, ``cuda_fp8.h``) come from
``$CUDA_HOME/include``, the PyPI wheels, or ``/usr/local/cuda/include``.

Build products are cached under ``$GEMMGEN_CACHE`` (default
``~/.cache/gemmgen``), keyed by a hash of everything that went into them and
written atomically, so concurrent test processes can share the cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gemmgen.cache import cache_dir as cache_dir  # re-exported for the harness modules
from gemmgen.runtime import RUNTIME_INCLUDE_DIR as RUNTIME_INCLUDE_DIR  # likewise


class ToolchainError(RuntimeError):
    """A CUDA tool or header that gemmgen needs is not installed."""


def _pypi_cuda_roots() -> list[Path]:
    try:
        import nvidia  # the namespace package of NVIDIA's PyPI wheels
    except ModuleNotFoundError as e:
        if e.name != "nvidia":
            raise
        return []
    roots = []
    for base in getattr(nvidia, "__path__", []):
        for version in ("cu13", "cu12"):
            root = Path(base) / version
            if root.is_dir():
                roots.append(root)
    return roots


def _cuda_homes() -> list[Path]:
    """The toolkit folders whose ``include/`` may hold the CUDA headers, in
    the order of the tool rule (module docstring)."""
    return _named_homes() + _pypi_cuda_roots() + [Path("/usr/local/cuda")]


def _named_homes() -> list[Path]:
    return [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]


@dataclass(frozen=True, slots=True)
class Located:
    """A CUDA tool and the rule that chose it."""

    path: Path
    how: str  # e.g. "$GEMMGEN_NVCC", "$CUDA_HOME", "PATH"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def locate_cuda_tool(name: str) -> Located | None:
    """CUDA tool `name` (``nvcc``, ``cuobjdump``, ...) by the rule of the
    module docstring, or None when none is installed."""
    variable = f"GEMMGEN_{name.upper()}"
    if os.environ.get(variable):
        return Located(Path(os.environ[variable]), f"${variable}")
    for v in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(v) and _executable(candidate := Path(os.environ[v]) / "bin" / name):
            return Located(candidate, f"${v}")
    for root in _pypi_cuda_roots():
        if _executable(candidate := root / "bin" / name):
            return Located(candidate, "the PyPI wheels of this Python environment")
    on_path = shutil.which(name)
    if on_path:
        return Located(Path(on_path), "PATH")
    if _executable(candidate := Path("/usr/local/cuda/bin") / name):
        return Located(candidate, "/usr/local/cuda")
    return None


def find_cuda_tool(name: str) -> Path | None:
    """The path of CUDA tool `name` (``nvcc``, ``cuobjdump``, ...), or None."""
    found = locate_cuda_tool(name)
    return found.path if found is not None else None


def find_nvcc() -> Path | None:
    """The nvcc to use, or None when none is installed."""
    return find_cuda_tool("nvcc")


_RELEASE = re.compile(r"release [\d.]+, (V[\d.]+)")


def nvcc_release(version_text: str) -> str:
    """`V13.0.88` from `nvcc --version`; the whole text when the line is absent."""
    m = _RELEASE.search(version_text)
    return m.group(1) if m else version_text.strip()


def describe_nvcc(nvcc: Path) -> str:
    """``nvcc V13.5.37 (/path/to/nvcc, from PATH)``:
    the release and the file of the compiler that measures, and the rule
    that chose it (when `nvcc` is the one the rule picks)."""
    try:
        release = nvcc_release(tool_version(str(nvcc))) or "of unknown release"
    except OSError as e:
        release = f"(cannot run: {e.strerror or e})"
    found = locate_cuda_tool("nvcc")
    how = f", from {found.how}" if found is not None and found.path == nvcc else ""
    return f"nvcc {release} ({nvcc}{how})"


@functools.cache
def cuda_include_dir() -> Path:
    """The directory holding CUDA's ``cuda_bf16.h``, ``cuda_fp16.h`` and ``cuda_fp8.h``.

    Raises:
      ToolchainError: no CUDA headers are installed.
    """
    for home in _cuda_homes():
        include = home / "include"
        if (include / "cuda_bf16.h").is_file() and (include / "cuda_fp8.h").is_file():
            return include
    raise ToolchainError(
        "CUDA headers not found (cuda_bf16.h): set CUDA_HOME, or "
        "`pip install nvidia-cuda-nvcc nvidia-cuda-cccl`"
    )




def digest(*parts: str | bytes) -> str:
    """A hex SHA-256 over `parts`, each length-prefixed so that no two
    different part lists collide."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Writes `path` through a temporary file in the same directory, so that a
    reader sees either nothing or the whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def named_source(source: str, name: str) -> str:
    """`source` behind a ``#line`` directive, so that compiler diagnostics
    cite `name` (the file a user knows) instead of a temporary copy."""
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'#line 1 "{quoted}"\n{source}'


@contextlib.contextmanager
def build_lock(target: Path):
    """Serialises builds of `target` across processes (pytest-xdist workers
    building the same library): the second builder waits, then finds the
    result in the cache."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(f".{target.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@functools.cache
def tool_version(tool: str) -> str:
    """The ``--version`` text of `tool`; part of every cache key built with it."""
    return subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout
