"""NVRTC through ctypes, for machines without a GPU (and without CuPy).

The CuPy launchers (templates/cuda/launcher.py.j2) compile their ``.cu``
with NVRTC at run time; this module calls the same library, so that what
they will compile on a GPU can be compiled, and its SASS checked, here.
NVRTC needs no driver and no device: only ``libnvrtc.so`` (the
``nvidia-cuda-nvrtc`` wheel, or a CUDA toolkit) and the CUDA headers.

    from gemmgen.harness import nvrtc

    result = nvrtc.compile_program(source, "gemm.cu", ["-std=c++17", "-arch=sm_90a", ...])
    result.cubin      # bytes: the ELF cubin (nvcc.sass_summary reads it)
    result.log        # NVRTC's program log (warnings), may be empty

API:

- ``compile_program(source, name, options) -> NvrtcResult``: one program,
  compiled with exactly `options`; raises ``NvrtcError`` with NVRTC's log
  when the compile fails. Not cached.
- ``version() -> (major, minor)``: nvrtcVersion.
- ``find_library() -> Path | str``: where libnvrtc is loaded from;
  ``load() -> ctypes.CDLL``, cached. Both raise ``NvrtcNotFound`` (a
  ``ToolchainError``) naming every place searched.

Lookup order: ``$GEMMGEN_NVRTC`` (a path to the library), the PyPI wheels
(``site-packages/nvidia/cu13/lib/libnvrtc.so.13``; the CUDA 12 layouts
``nvidia/cu12/lib`` and ``nvidia/cuda_nvrtc/lib`` with ``libnvrtc.so.12``),
``$CUDA_HOME``/``$CUDA_PATH`` and ``/usr/local/cuda`` (``lib64``, ``lib``),
then ``ctypes.util.find_library("nvrtc")`` (the system's loader path).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gemmgen.harness.toolchain import ToolchainError

__all__ = ["NvrtcError", "NvrtcNotFound", "NvrtcResult", "compile_program", "find_library", "load", "version"]

# (folder under site-packages/nvidia, library file names) of NVIDIA's wheels.
_WHEEL_LAYOUTS = (
    ("cu13/lib", ("libnvrtc.so.13",)),
    ("cu12/lib", ("libnvrtc.so.12",)),
    ("cuda_nvrtc/lib", ("libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so")),
)
_TOOLKIT_NAMES = ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12")

NVRTC_SUCCESS = 0


class NvrtcNotFound(ToolchainError):
    """libnvrtc is not installed where gemmgen looks for it."""


class NvrtcError(RuntimeError):
    """NVRTC rejected a program; the message holds its log."""

    def __init__(self, message: str, log: str = "", status: int = -1):
        super().__init__(message)
        self.log = log
        self.status = status


@dataclass(frozen=True, slots=True)
class NvrtcResult:
    name: str
    options: tuple[str, ...]
    cubin: bytes
    log: str


def _candidates() -> list[Path]:
    out: list[Path] = []
    override = os.environ.get("GEMMGEN_NVRTC")
    if override:
        out.append(Path(override))
    try:
        import nvidia  # the namespace package of NVIDIA's PyPI wheels
    except ModuleNotFoundError as e:
        if e.name != "nvidia":
            raise
    else:
        for base in getattr(nvidia, "__path__", []):
            for folder, names in _WHEEL_LAYOUTS:
                out += [Path(base) / folder / n for n in names]
    homes = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    for home in filter(None, homes):
        out += [Path(home) / lib / n for lib in ("lib64", "lib") for n in _TOOLKIT_NAMES]
    return out


def find_library() -> Path | str:
    """The libnvrtc to load: a path, or the name the system's loader finds."""
    candidates = _candidates()
    for path in candidates:
        if path.is_file():
            return path
    system = ctypes.util.find_library("nvrtc")
    if system:
        return system
    searched = "\n  ".join(str(p) for p in candidates)
    raise NvrtcNotFound(
        "libnvrtc not found: `pip install nvidia-cuda-nvrtc` (CUDA 13: "
        "site-packages/nvidia/cu13/lib/libnvrtc.so.13), install a CUDA toolkit, or set "
        f"GEMMGEN_NVRTC to the library. Searched:\n  {searched}\n  ctypes.util.find_library('nvrtc')"
    )


@functools.cache
def load() -> ctypes.CDLL:
    """libnvrtc, loaded once, with the signatures of the calls used here."""
    where = find_library()
    try:
        lib = ctypes.CDLL(str(where))
    except OSError as e:
        raise NvrtcNotFound(f"libnvrtc at {where} does not load: {e}") from e
    program, size, status = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    sigs = {
        "nvrtcVersion": [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
        "nvrtcCreateProgram": [ctypes.POINTER(program), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                               ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)],
        "nvrtcCompileProgram": [program, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        "nvrtcGetProgramLogSize": [program, ctypes.POINTER(size)],
        "nvrtcGetProgramLog": [program, ctypes.c_char_p],
        "nvrtcGetCUBINSize": [program, ctypes.POINTER(size)],
        "nvrtcGetCUBIN": [program, ctypes.c_char_p],
        "nvrtcDestroyProgram": [ctypes.POINTER(program)],
    }
    for fn, args in sigs.items():
        try:
            f = getattr(lib, fn)
        except AttributeError as e:
            raise NvrtcNotFound(f"libnvrtc at {where} has no {fn}") from e
        f.argtypes, f.restype = args, status
    lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [status], ctypes.c_char_p
    return lib


def _error_string(lib: ctypes.CDLL, status: int) -> str:
    text = lib.nvrtcGetErrorString(status)
    return text.decode() if text else f"NVRTC error {status}"


def _check(lib: ctypes.CDLL, status: int, what: str) -> None:
    if status != NVRTC_SUCCESS:
        raise NvrtcError(f"{what} failed: {_error_string(lib, status)}", status=status)


def version() -> tuple[int, int]:
    """NVRTC's (major, minor) CUDA version."""
    lib = load()
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def _log(lib: ctypes.CDLL, program: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    _check(lib, lib.nvrtcGetProgramLogSize(program, ctypes.byref(size)), "nvrtcGetProgramLogSize")
    buf = ctypes.create_string_buffer(max(size.value, 1))
    _check(lib, lib.nvrtcGetProgramLog(program, buf), "nvrtcGetProgramLog")
    return buf.value.decode(errors="replace").strip()


def compile_program(source: str, name: str, options: Iterable[str]) -> NvrtcResult:
    """Compiles `source` (named `name` in diagnostics) with exactly `options`
    and returns the cubin and the log. An ``-arch=sm_XX`` option makes
    NVRTC produce SASS (a cubin); with ``compute_XX`` there is no cubin and
    this raises. Raises NvrtcError with the log on a failed compile."""
    lib = load()
    options = tuple(options)
    program = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), name.encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        argv = (ctypes.c_char_p * max(len(options), 1))(*(o.encode() for o in options))
        status = lib.nvrtcCompileProgram(program, len(options), argv)
        log = _log(lib, program)
        if status != NVRTC_SUCCESS:
            raise NvrtcError(f"{name}: NVRTC failed ({_error_string(lib, status)}) with options "
                             f"{' '.join(options)}:\n{log}", log=log, status=status)
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
        if size.value == 0:
            raise NvrtcError(f"{name}: NVRTC made no cubin (options {' '.join(options)}: "
                             "a virtual compute_XX arch gives PTX only)", log=log)
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetCUBIN(program, buf), "nvrtcGetCUBIN")
        return NvrtcResult(name, options, buf.raw, log)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))
