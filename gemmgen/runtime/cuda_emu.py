"""Run CUDA kernels on the CPU: compile a .cu with g++ and launch its kernels.

A kernel source includes ``gg_runtime.cuh``; under g++ that pulls in the
emulation (``runtime/cuda/gg_emu.h``: one fiber per CUDA thread, a
deterministic run-ahead warp schedule, poisoned shared memory, guarded
device buffers) and the CPU bodies of the ``gg::`` primitives. See
``docs/cuda-emulation.md`` for what is modelled.

Example::

    from gemmgen.runtime.cuda_emu import EmuModule

    module = EmuModule(source, "generated/dense/cuda/gemm.cu")
    (c,) = module.launch(
        "gemm", grid=(m_tiles, n_tiles), block=128, smem_bytes=16384,
        args=[a, b, np.empty((m, n), np.float32), np.int32(m), np.int32(n), np.int32(k)],
        outputs=[2],
    )

API:

- ``EmuModule(source, name_for_errors="kernel.cu", *, include_dirs=(),
  defines=None, tsan=False, memcheck=None)`` compiles `source` (cached by
  content) into a shared library and raises ``EmuCompileError`` with g++'s
  diagnostics. Fiber-mode libraries carry the memory checker (races between
  blocks, misaligned accesses, counters; ``runtime/cuda/gg_emu_memcheck.h``)
  unless ``memcheck=False`` or ``GEMMGEN_EMU_MEMCHECK=0``.
  ``EmuModule.from_file(path, **kw)`` also searches `path`'s directory for
  includes. ``.kernels`` lists the launchable kernels: every
  ``extern "C" __global__`` function, and any named by
  ``GG_EMU_REGISTER_KERNEL(name)`` (for kernels in an ``extern "C" { }``
  block).
- ``.launch(kernel, grid, block, smem_bytes=0, args=(), outputs=(), *,
  inouts=(), schedule="run-ahead", workers=None, timeout=120.0,
  counters=False)`` runs one
  launch in a child process and returns copies of the arrays at the indices in
  `outputs` (filled with 0xFF bytes before the run: NaN in every float format)
  followed by those in `inouts` (passed in with their values). `args` holds,
  per kernel parameter, a NumPy array (a device buffer), a NumPy scalar such
  as ``np.int32(m)`` (passed by value; a Python int is rejected because it has
  no C type; a structured ``np.void`` passes a struct) or ``None`` (a null
  pointer). `schedule` is ``"run-ahead"`` or
  ``"reverse"``; `workers` caps the worker threads (default: one per core).
  Kernel faults raise ``EmuKernelError`` (deadlock, warp divergence,
  out-of-bounds access, crash), ``EmuMemoryError`` (a misaligned access),
  ``EmuRaceError`` (a race between blocks, or a ThreadSanitizer report of a
  ``tsan=True`` module) or ``EmuTimeout``; a rejected launch (unknown kernel,
  wrong argument kinds or sizes, bad grid) raises ``EmuLaunchError``.
  ``.last_log`` keeps the child's output (kernel ``printf``);
  ``counters=True`` fills ``.last_counters`` (``gemmgen.runtime.counters``).
- ``runtime_include_dir()`` and ``cuda_include_dir()``: the ``-I``
  directories a kernel needs.

The child process is ``python -c`` loading the library with ctypes and
calling its ``gg_emu_run_request`` (in TSan mode a small TSan-built C++
program, ``gg_emu_host.cc``, since CPython cannot load TSan-instrumented
code). An abort, deadlock or segfault therefore ends the child, never the
caller.
"""

from __future__ import annotations

import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gemmgen.runtime.toolchain import (
    RUNTIME_INCLUDE_DIR,
    atomic_write,
    build_lock,
    cache_dir,
    cuda_include_dir,
    digest,
    named_source,
    tool_version,
)

__all__ = [
    "EmuCompileError",
    "EmuError",
    "EmuKernelError",
    "EmuLaunchError",
    "EmuMemoryError",
    "EmuModule",
    "EmuRaceError",
    "EmuTimeout",
    "cuda_include_dir",
    "runtime_include_dir",
]


class EmuError(RuntimeError):
    """Base of the emulator's errors; `log` holds the full compiler or child output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class EmuCompileError(EmuError):
    """g++ rejected the kernel source."""


class EmuLaunchError(EmuError):
    """The launch was rejected before any CUDA thread ran."""


class EmuKernelError(EmuError):
    """The kernel misbehaved: deadlock, warp divergence, out-of-bounds access, crash."""


class EmuRaceError(EmuKernelError):
    """ThreadSanitizer reported a data race (``tsan=True`` modules)."""


class EmuMemoryError(EmuKernelError):
    """The memory checker stopped the kernel: a misaligned access (a GPU
    faults on it) found while the kernel ran."""


class EmuTimeout(EmuKernelError):
    """The launch did not finish within its timeout."""


def runtime_include_dir() -> Path:
    """The directory of ``gg_runtime.cuh``; kernels need it on the include path."""
    return RUNTIME_INCLUDE_DIR


SCHEDULES = ("run-ahead", "reverse")

# Exit statuses of the child (gg_emu.h).
_EXIT_REJECTED = 2
_EXIT_TSAN = 66
_EXIT_KERNEL = 70
_EXIT_FAULT = 71
_EXIT_RACE = 72  # the memory checker's race between blocks (gg_emu_memcheck.h)

_CXX = os.environ.get("GEMMGEN_CXX", "g++")
_STD = "-std=c++20"
# -ftrivial-auto-var-init=pattern: an uninitialised local, even one g++ keeps
# in a register, starts as 0xFE bytes (f32 -1.7e38, int -16843010), never as
# whatever the register held (docs/cuda-emulation.md, "Uninitialised values").
_FIBER_FLAGS = ("-O2", "-fno-strict-aliasing", "-pthread", "-ftrivial-auto-var-init=pattern")
# The memory checker: GCC's ThreadSanitizer instrumentation calls the
# emulator's own __tsan_* functions (gg_emu_memcheck.h); the library is
# linked without -fsanitize, so no sanitizer runtime comes in.
# -fno-tree-sra: an aggregate load or store (a uint2, a float4, a struct)
# stays one access, as nvcc issues it, instead of one per field, so its size
# and alignment are checked and counted. -g1: line tables, to name the line
# of an access (reports, counters).
_MEMCHECK_FLAGS = ("-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0", "-fno-tree-sra",
                   "-DGG_EMU_MEMCHECK=1", "-g1")
_TSAN_FLAGS = ("-O1", "-g", "-fsanitize=thread", "-fno-strict-aliasing", "-pthread", "-DGG_EMU_TSAN=1",
               "-ftrivial-auto-var-init=pattern")
_LIBRARY_FLAGS = ("-fPIC", "-shared", "-fvisibility=hidden", "-Wno-attributes")

# Markers of the preprocessed text (gg_emu_compile.h explains them).
_KERNEL_RE = re.compile(r'\bextern\s+"C"\s+__gg_global__\s+void\s+([A-Za-z_]\w*)\s*\(')
_REGISTERED_RE = re.compile(r"\bGG_EMU_REGISTER_KERNEL\s*\(\s*([A-Za-z_]\w*)\s*\)")
_DYNAMIC_SHARED_RE = re.compile(r"\bextern\s+__gg_shared__\b[^;{}]*?\b([A-Za-z_]\w*)\s*\[\s*\]\s*;")
_EXTERN_SHARED_RE = re.compile(r"\bextern(\s+)__gg_shared__\b")
_STATIC_SHARED_RE = re.compile(r"\bstatic\s+__gg_shared__\b")

# The ctypes child of a fiber-mode launch.
_CHILD = """\
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.gg_emu_run_request.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
sys.exit(lib.gg_emu_run_request(sys.argv[2].encode(), sys.argv[3].encode()))
"""


@dataclass(frozen=True, slots=True)
class _Library:
    path: Path
    kernels: tuple[str, ...]
    params: dict[str, tuple[str, ...]]  # kernel -> parameter names


def memcheck_default() -> bool:
    """Fiber-mode modules run the memory checker unless GEMMGEN_EMU_MEMCHECK=0."""
    return os.environ.get("GEMMGEN_EMU_MEMCHECK", "1") != "0"


def _parameter_names(text: str, kernel: str) -> tuple[str, ...]:
    """The parameter names of `kernel` in the preprocessed text (for the
    memory checker's reports); empty names where none can be read."""
    match = re.search(r'\b__gg_global__\s+void\s+' + re.escape(kernel) + r'\s*\(', text)
    if match is None:
        return ()
    depth, i, start, params = 1, match.end(), match.end(), []
    while i < len(text) and depth:
        c = text[i]
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        if (c == "," and depth == 1) or depth == 0:
            params.append(text[start:i])
            start = i + 1
        i += 1
    names = []
    for p in params:
        ids = re.findall(r"[A-Za-z_]\w*", p.split("=")[0])
        names.append(ids[-1] if len(ids) > 1 else "")
    return tuple(n for n in names) if any(names) else ()


_LIBRARIES: dict[tuple, _Library] = {}


def _run_compiler(cmd: list[str], name: str, what: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EmuCompileError(f"{name}: g++ could not {what}:\n{proc.stderr.strip()}", proc.stderr)
    return proc


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def _build_library(
    source: str, name: str, include_dirs: tuple[Path, ...], defines: tuple[tuple[str, str], ...], tsan: bool,
    memcheck: bool = False,
) -> _Library:
    mode_flags = _TSAN_FLAGS if tsan else (_FIBER_FLAGS + _MEMCHECK_FLAGS if memcheck else _FIBER_FLAGS)
    define_flags = [f"-D{k}={v}" for k, v in defines]
    include_flags = [f"-I{d}" for d in (RUNTIME_INCLUDE_DIR, cuda_include_dir(), *include_dirs)]
    root = cache_dir() / "emu"

    # (1) Preprocess with the markers left in. The file name is a function of
    # the source, so that the text (line markers included) is reproducible.
    src_dir = root / "src" / digest(source, name)[:24]
    src = src_dir / (Path(name).name or "kernel.cu")
    if not src.is_file():
        atomic_write(src, named_source(source, name).encode())
    pre = _run_compiler(
        [_CXX, "-x", "c++", _STD, "-E", "-DGG_EMU_PREPROCESS=1", *mode_flags, *define_flags, *include_flags, str(src)],
        name,
        "preprocess it",
    ).stdout

    # (2) Register the kernels and bind the dynamic shared arrays.
    registered = _unique(_REGISTERED_RE.findall(pre))
    unregistered = [k for k in _unique(_KERNEL_RE.findall(pre)) if k not in registered]
    dynamic_shared = _unique(_DYNAMIC_SHARED_RE.findall(pre))
    text = _STATIC_SHARED_RE.sub("__gg_shared__", pre)
    text = _EXTERN_SHARED_RE.sub(r"extern\1__gg_dyn_shared__", text)
    text += "".join(f"\nGG_EMU_REGISTER_KERNEL({k})" for k in unregistered)
    text += "".join(f"\nGG_EMU_DYNAMIC_SHARED({s})" for s in dynamic_shared)
    text += "\n"

    # (3) Compile, cached by everything that determines the library. With the
    # memory checker, compile and link apart: -fsanitize at link time would
    # bring in ThreadSanitizer's runtime, whose hooks the emulator replaces.
    flags = [*mode_flags, *_LIBRARY_FLAGS, "-include", str(RUNTIME_INCLUDE_DIR / "gg_emu_compile.h")]
    compile_header = (RUNTIME_INCLUDE_DIR / "gg_emu_compile.h").read_text()
    key = digest(text, " ".join(flags), compile_header, tool_version(_CXX))
    library = root / f"{key[:32]}.so"
    with build_lock(library):
        if not library.is_file():
            with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as tmp:
                ii = Path(tmp) / "kernel.ii"
                ii.write_text(text)
                out = Path(tmp) / "kernel.so"
                if memcheck and not tsan:
                    obj = Path(tmp) / "kernel.o"
                    _run_compiler([_CXX, "-x", "c++", _STD, *flags, "-c", str(ii), "-o", str(obj)], name, "compile it")
                    _run_compiler([_CXX, "-shared", "-pthread", "-Wl,-z,defs", str(obj), "-o", str(out)], name,
                                  "link it")
                else:
                    _run_compiler([_CXX, "-x", "c++", _STD, *flags, str(ii), "-o", str(out)], name, "compile it")
                os.replace(out, library)
    kernels = (*unregistered, *registered)
    return _Library(library, kernels, {k: _parameter_names(text, k) for k in kernels})


def _tsan_host() -> Path:
    """The TSan-built child program (gg_emu_host.cc), built once per cache."""
    source = RUNTIME_INCLUDE_DIR / "gg_emu_host.cc"
    flags = ["-O1", "-g", "-fsanitize=thread", "-pthread"]
    key = digest(source.read_bytes(), " ".join(flags), tool_version(_CXX))
    host = cache_dir() / "emu" / f"gg_emu_host-{key[:24]}"
    with build_lock(host):
        if not host.is_file():
            with tempfile.TemporaryDirectory(dir=host.parent, prefix=".build-") as tmp:
                out = Path(tmp) / "host"
                cmd = [_CXX, "-std=c++17", *flags, str(source), "-ldl", "-o", str(out)]
                _run_compiler(cmd, str(source), "compile it")
                os.replace(out, host)
    return host


def dim3(value: int | Sequence[int], what: str = "a launch dimension") -> tuple[int, int, int]:
    """A grid or block size as CUDA's (x, y, z): 128 -> (128, 1, 1)."""
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims):
        raise ValueError(f"{what} must be 1 to 3 positive sizes, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


_KIND_BUFFER, _KIND_VALUE, _KIND_NULL = 0, 1, 2
_FLAG_RETURN, _FLAG_POISON = 1, 2


def _encode_request(
    kernel: str,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    smem_bytes: int,
    args: Sequence[object],
    outputs: Sequence[int],
    inouts: Sequence[int],
) -> bytes:
    """The request file of gg_emu.h's run_request."""
    name = kernel.encode()
    parts = [
        b"GGEMUREQ",
        struct.pack("<II", 1, len(name)),
        name,
        struct.pack("<6IQI", *grid, *block, smem_bytes, len(args)),
    ]
    for i, arg in enumerate(args):
        if arg is None:
            parts.append(struct.pack("<IIQ", _KIND_NULL, 0, 0))
        elif isinstance(arg, np.ndarray):
            flags = (_FLAG_RETURN | _FLAG_POISON) if i in outputs else (_FLAG_RETURN if i in inouts else 0)
            parts.append(struct.pack("<IIQ", _KIND_BUFFER, flags, arg.nbytes))
            if not flags & _FLAG_POISON:
                parts.append(np.ascontiguousarray(arg).tobytes())
        elif isinstance(arg, np.generic):
            data = arg.tobytes()
            parts.append(struct.pack("<IIQ", _KIND_VALUE, 0, len(data)))
            parts.append(data)
        else:
            raise TypeError(
                f"argument #{i} of {kernel}: expected a NumPy array, a NumPy scalar (e.g. np.int32(3)) or None, "
                f"got {type(arg).__name__}: a Python {type(arg).__name__} has no C type"
            )
    return b"".join(parts)


def _decode_response(data: bytes, args: Sequence[object]) -> dict[int, np.ndarray]:
    if data[:8] != b"GGEMURSP":
        raise EmuError("malformed response from the emulator child")
    (count,) = struct.unpack_from("<I", data, 8)
    offset = 12
    arrays: dict[int, np.ndarray] = {}
    for _ in range(count):
        index, nbytes = struct.unpack_from("<IQ", data, offset)
        offset += 12
        like = args[index]
        assert isinstance(like, np.ndarray)
        flat = np.frombuffer(data, dtype=like.dtype, count=like.size, offset=offset)
        arrays[index] = flat.reshape(like.shape).copy()
        offset += nbytes
    return arrays


def _name_sites(message: str, library: Path | None, source_name: str) -> str:
    """Replaces the memory checker's "[site 0x...]" by the source line."""
    sites = [int(h, 16) for h in re.findall(r"\[site (0x[0-9a-f]+)\]", message)]
    if not sites or library is None:
        return message
    from gemmgen.runtime.counters import resolve_sites

    where = resolve_sites(library, sites, source_name)
    return re.sub(r"\[site (0x[0-9a-f]+)\]", lambda m: f"({where.get(int(m.group(1), 16)) or 'line unknown'})",
                  message)


def _error_from_child(proc: subprocess.CompletedProcess, kernel: str, library: Path | None = None,
                      source_name: str = "") -> EmuError:
    log = (proc.stdout or "") + (proc.stderr or "")
    stderr = proc.stderr or ""
    start = stderr.find("gg-emu: error:")
    tsan = stderr.find("WARNING: ThreadSanitizer")
    if start < 0 and tsan >= 0:
        end = stderr.find("SUMMARY: ThreadSanitizer", tsan)
        end = stderr.find("\n", end) if end >= 0 else len(stderr)
        return EmuRaceError(f"{kernel}: ThreadSanitizer reported a data race:\n{stderr[tsan:end].strip()}", log)
    if start >= 0:
        message = _name_sites(stderr[start + len("gg-emu: error:") :].strip(), library, source_name)
    else:
        message = "\n".join(stderr.strip().splitlines()[-40:])
    if proc.returncode == _EXIT_REJECTED:
        return EmuLaunchError(f"{kernel}: launch rejected: {message}", log)
    if proc.returncode == _EXIT_RACE:
        return EmuRaceError(f"{kernel}: {message}", log)
    if proc.returncode == _EXIT_FAULT and message.startswith("misaligned"):
        return EmuMemoryError(f"{kernel}: {message}", log)
    if proc.returncode in (_EXIT_KERNEL, _EXIT_FAULT):
        return EmuKernelError(f"{kernel}: {message}", log)
    if proc.returncode < 0:
        reason = signal.Signals(-proc.returncode).name
        return EmuKernelError(f"{kernel}: the emulated kernel crashed ({reason}):\n{message}", log)
    return EmuKernelError(f"{kernel}: the emulator exited with status {proc.returncode}:\n{message}", log)


class EmuModule:
    """A CUDA source compiled for the CPU emulator; see the module docstring."""

    def __init__(
        self,
        source: str,
        name_for_errors: str = "kernel.cu",
        *,
        include_dirs: Iterable[str | os.PathLike[str]] = (),
        defines: Mapping[str, str | int] | None = None,
        tsan: bool = False,
        memcheck: bool | None = None,
    ) -> None:
        self.name = name_for_errors
        self.tsan = tsan
        # The memory checker and ThreadSanitizer both own the __tsan_* hooks.
        self.memcheck = False if tsan else (memcheck_default() if memcheck is None else memcheck)
        dirs = tuple(Path(d).resolve() for d in include_dirs)
        defs = tuple(sorted((str(k), str(v)) for k, v in (defines or {}).items()))
        key = (source, name_for_errors, dirs, defs, tsan, self.memcheck)
        if key not in _LIBRARIES:
            _LIBRARIES[key] = _build_library(source, name_for_errors, dirs, defs, tsan, self.memcheck)
        self._library = _LIBRARIES[key]
        self.last_log = ""
        self.last_counters: dict | None = None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **kwargs) -> EmuModule:
        """Compiles the file at `path`, with its directory on the include path."""
        path = Path(path)
        include_dirs = (path.parent, *kwargs.pop("include_dirs", ()))
        return cls(path.read_text(), str(path), include_dirs=include_dirs, **kwargs)

    @property
    def kernels(self) -> tuple[str, ...]:
        """The launchable kernels: every ``extern "C" __global__`` function
        (and any named by ``GG_EMU_REGISTER_KERNEL``)."""
        return self._library.kernels

    @property
    def library(self) -> Path:
        """The compiled shared library (cached by content)."""
        return self._library.path

    def launch(
        self,
        kernel: str,
        grid: int | Sequence[int],
        block: int | Sequence[int],
        smem_bytes: int = 0,
        args: Sequence[object] = (),
        outputs: Sequence[int] = (),
        *,
        inouts: Sequence[int] = (),
        schedule: str = "run-ahead",
        workers: int | None = None,
        timeout: float = 120.0,
        counters: bool = False,
    ) -> list[np.ndarray]:
        """Runs `kernel` once; returns the arrays at `outputs`, then those at `inouts`.
        `counters=True` (memory-checked modules) also fills `last_counters`
        (see `gemmgen.runtime.counters`)."""
        if kernel not in self.kernels:
            raise EmuLaunchError(
                f"{self.name} has no kernel '{kernel}' (kernels: {', '.join(self.kernels) or 'none'}; "
                'only extern "C" __global__ functions can be launched)'
            )
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        args = list(args)
        for i in (*outputs, *inouts):
            if not 0 <= i < len(args) or not isinstance(args[i], np.ndarray):
                raise ValueError(f"output index {i} of {kernel} does not name an array argument")
        if set(outputs) & set(inouts):
            raise ValueError(f"indices {sorted(set(outputs) & set(inouts))} are in both outputs and inouts")
        request = _encode_request(
            kernel, dim3(grid, "grid"), dim3(block, "block"), int(smem_bytes), args, outputs, inouts
        )
        env = dict(os.environ, GG_EMU_SCHEDULE=schedule)
        env.pop("GG_EMU_COUNTERS", None)
        if workers is not None:
            env["GG_EMU_WORKERS"] = str(int(workers))
        if counters and not self.memcheck:
            raise ValueError("counters need a memory-checked module (memcheck=True, not tsan)")
        params = self._library.params.get(kernel, ())
        if params:
            env["GG_EMU_ARG_NAMES"] = ",".join(params)
        self.last_counters = None
        with tempfile.TemporaryDirectory(prefix="gg-emu-") as tmp:
            req, resp = Path(tmp) / "request", Path(tmp) / "response"
            req.write_bytes(request)
            if counters:
                env["GG_EMU_COUNTERS"] = str(Path(tmp) / "counters.json")
            if self.tsan:
                # The first race ends the launch. The emulator's own fault
                # handler formats its report, and an emulator error ends the
                # process with threads alive: neither is the kernel's bug.
                options = f"halt_on_error=1 exitcode={_EXIT_TSAN} report_signal_unsafe=0 report_thread_leaks=0"
                env["TSAN_OPTIONS"] = f"{options} {env.get('TSAN_OPTIONS', '')}"
                cmd = [str(_tsan_host()), str(self.library), str(req), str(resp)]
            else:
                cmd = [sys.executable, "-I", "-S", "-c", _CHILD, str(self.library), str(req), str(resp)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
            except subprocess.TimeoutExpired as e:
                log = _text(e.stdout) + _text(e.stderr)
                raise EmuTimeout(f"{kernel}: no result after {timeout:g} s (an endless loop?)", log) from None
            self.last_log = proc.stdout + proc.stderr
            if proc.returncode != 0:
                raise _error_from_child(proc, kernel, self.library, self.name)
            arrays = _decode_response(resp.read_bytes(), args)
            if counters:
                from gemmgen.runtime.counters import load_counters

                self.last_counters = load_counters(Path(tmp) / "counters.json", self.library, self.name)
        return [arrays[i] for i in (*outputs, *inouts)]


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
