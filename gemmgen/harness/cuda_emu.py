"""Run CUDA kernels on the CPU: compile a .cu with g++ and launch its kernels.

A kernel source includes ``gg_runtime.cuh``; under g++ that pulls in the
emulation (``runtime/cuda/gg_emu.h``: one fiber per CUDA thread, a
deterministic run-ahead warp schedule, poisoned shared memory, guarded
device buffers) and the CPU bodies of the ``gg::`` primitives. See
``docs/cuda-emulation.md`` for what is modelled.

Example::

    from gemmgen.harness.cuda_emu import EmuModule

    module = EmuModule(source, "generated/dense/cuda/gemm.cu")
    (c,) = module.launch(
        "gemm", grid=(m_tiles, n_tiles), block=128, smem_bytes=16384,
        args=[a, b, np.empty((m, n), np.float32), np.int32(m), np.int32(n), np.int32(k)],
        outputs=[2],
    )

API:

- ``EmuModule(source, name_for_errors="kernel.cu", *, include_dirs=(),
  defines=None, tsan=False, extra_sources=(), memcheck=None, warnings=False,
  system_include_dirs=())`` compiles
  `source` (cached by content) into a shared library and raises
  ``EmuCompileError`` with g++'s diagnostics; ``extra_sources`` are more
  ``(text, name)`` translation units linked into the same library (a
  dispatcher's arms, a host program). Fiber-mode libraries carry the memory
  checker (races between blocks, misaligned accesses, counters;
  ``runtime/cuda/gg_emu_memcheck.h``) unless ``memcheck=False`` or
  ``GEMMGEN_EMU_MEMCHECK=0``. ``warnings=True`` compiles with
  ``WARNING_FLAGS`` (``-Wall -Wextra -Werror -Wno-unknown-pragmas``): any
  warning of g++ in the kernel or the headers it includes is an
  ``EmuCompileError``; ``system_include_dirs`` (``-isystem``: third-party
  headers such as XLA's FFI API, whose warnings are not the kernel's) are
  exempt.
  ``EmuModule.from_file(path, **kw)`` also searches `path`'s directory for
  includes. ``.kernels`` lists the launchable kernels: every
  ``extern "C" __global__`` function, and any named by
  ``GG_EMU_REGISTER_KERNEL(name)`` (for kernels in an ``extern "C" { }``
  block); ``.launch_bounds`` their ``__launch_bounds__``.
- ``.launch(kernel, grid, block, smem_bytes=0, args=(), outputs=(), *,
  inouts=(), schedule="run-ahead", workers=None, ftz=False, timeout=120.0,
  arch="sm_90a", max_dynamic_smem=None, counters=False, buffers=())`` runs one launch in
  a child process and returns copies of the arrays at the indices in
  `outputs` (filled with 0xFF bytes before the run: NaN in every float
  format) followed by those in `inouts` (passed in with their values). `args`
  holds, per kernel parameter, a NumPy array (a device buffer), a NumPy
  scalar such as ``np.int32(m)`` (passed by value; a Python int is rejected because it has
  no C type; a structured ``np.void`` passes a struct) or ``None`` (a null
  pointer), or a ``TensorMap`` (a ``const __grid_constant__ CUtensorMap``
  over one of the launch's arrays, encoded in the child with the emulated
  cuTensorMapEncodeTiled; `buffers` adds arrays that are not kernel
  parameters, for maps only). `schedule` is ``"run-ahead"`` or ``"reverse"``; `workers` caps
  the worker threads (default: one per core); ``ftz=True`` flushes f32
  subnormals to zero as a kernel built with -ftz (``--use_fast_math``) does
  on a GPU (x86 MXCSR FTZ and DAZ). `arch` is the device the
  emulator plays: launches are checked against its limits (opt-in shared
  memory from ``gemmgen.archs.shared_memory_limit``).
  `max_dynamic_smem` is the kernel's
  cudaFuncAttributeMaxDynamicSharedMemorySize: None sets it to `smem_bytes`
  above 48 KiB, as GpuModule and the CuPy launchers do; an int is what
  cudaFuncSetAttribute gets (49152 leaves CUDA's default).
  Kernel faults raise ``EmuKernelError`` (deadlock, warp divergence,
  out-of-bounds access, crash), ``EmuMemoryError`` (a misaligned access),
  ``EmuRaceError`` (a race between blocks, or a ThreadSanitizer report of a
  ``tsan=True`` module) or ``EmuTimeout``; a rejected launch (unknown kernel,
  wrong argument kinds or sizes, a grid, block, launch bound or shared
  memory the device refuses) raises ``EmuLaunchError``.
  ``.last_log`` keeps the child's output (kernel ``printf``);
  ``counters=True`` fills ``.last_counters`` (``gemmgen.harness.counters``).
- ``.run_host(inputs, *, schedule, workers, timeout, arch)`` runs the
  library's host program, ``extern "C" int gg_emu_host_main(void)``: C++
  host code calling the emulated CUDA runtime (``gg_emu_cudart.h``:
  cudaMalloc, cudaMemcpy, streams, cudaFuncSetAttribute, ``<<<>>>`` and
  cudaLaunchKernel, device queries, cudaGetLastError). Named inputs and
  outputs travel through ``gg_emu_host_input`` / ``gg_emu_host_output``;
  it returns a ``HostResult`` (status, outputs, log).
- ``device_env(arch, sm_count=None)``: the environment that makes a child an
  `arch` device (its SM count from ``gemmgen.archs.sm_count`` unless given).
- ``runtime_include_dir()`` and ``cuda_include_dir()``: the ``-I``
  directories a kernel needs.

The child process is ``python -c`` loading the library with ctypes and
calling its ``gg_emu_run_request`` (in TSan mode a small TSan-built C++
program, ``gg_emu_host.cc``, since CPython cannot load TSan-instrumented
code). An abort, deadlock or segfault therefore ends the child, never the
caller.
"""

from __future__ import annotations

import enum
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gemmgen.archs import DEFAULT_DYNAMIC_SMEM, shared_memory_limit
from gemmgen.archs import sm_count as archs_sm_count
from gemmgen.harness.toolchain import (
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
    "TensorMap",
    "TensorMapDataType",
    "TensorMapInterleave",
    "TensorMapL2Promotion",
    "TensorMapOobFill",
    "TensorMapSwizzle",
    "cuda_include_dir",
    "runtime_include_dir",
    "tensor_map_dtype",
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
# EmuModule(warnings=True): the kernel, its launcher header and the runtime
# headers compile without a warning. -Wno-unknown-pragmas: `#pragma unroll`
# is nvcc's (g++ spells it `#pragma GCC unroll`), and a kernel is written
# for nvcc. (-Wno-attributes, always on: the CUDA attributes the emulation
# maps to nothing, such as __launch_bounds__'s, are not g++'s.)
WARNING_FLAGS = ("-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas")

# Markers of the preprocessed text (gg_emu_compile.h explains them).
_BOUNDS = r"__gg_launch_bounds__\s*\(((?:[^()]|\([^()]*\))*)\)\s*"
_KERNEL_RE = re.compile(rf'\bextern\s+"C"\s+__gg_global__\s+(?:{_BOUNDS})?void\s+(?:{_BOUNDS})?([A-Za-z_]\w*)\s*\(')
_BOUNDED_RE = re.compile(rf"\b__gg_global__\s+(?:{_BOUNDS})?void\s+(?:{_BOUNDS})?([A-Za-z_]\w*)\s*\(")
# gg_emu.h's declaration of the dynamic shared buffer: the unit includes the runtime.
_SMEM_BUFFER_RE = re.compile(r"\bunsigned\s+char\s+gg_emu_dynamic_smem\s*\[")
# kernel<<<grid, block[, smem[, stream]]>>>(: the launch syntax nvcc adds to C++.
_CHEVRON_RE = re.compile(r"\b([A-Za-z_][\w:]*)\s*<<<([^;{}]*?)>>>\s*\(")
_REGISTERED_RE = re.compile(r"\bGG_EMU_REGISTER_KERNEL\s*\(\s*([A-Za-z_]\w*)\s*\)")
_DYNAMIC_SHARED_RE = re.compile(r"\bextern\s+__gg_shared__\b[^;{}]*?\b([A-Za-z_]\w*)\s*\[\s*\]\s*;")
_EXTERN_SHARED_RE = re.compile(r"\bextern(\s+)__gg_shared__\b")
_STATIC_SHARED_RE = re.compile(r"\bstatic\s+__gg_shared__\b")

# The ctypes child of a fiber-mode launch.
# The ctypes child: LIBRARY REQUEST RESPONSE [ENTRY] (gg_emu_run_request,
# or gg_emu_run_host for a host program).
_CHILD = """\
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
run = getattr(lib, sys.argv[4] if len(sys.argv) > 4 else "gg_emu_run_request")
run.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
sys.exit(run(sys.argv[2].encode(), sys.argv[3].encode()))
"""


@dataclass(frozen=True, slots=True)
class _Library:
    path: Path
    kernels: tuple[str, ...]
    launch_bounds: dict[str, str]  # kernel -> the arguments of its __launch_bounds__
    params: dict[str, tuple[str, ...]]  # kernel -> parameter names


def memcheck_default() -> bool:
    """Fiber-mode modules run the memory checker unless GEMMGEN_EMU_MEMCHECK=0."""
    return os.environ.get("GEMMGEN_EMU_MEMCHECK", "1") != "0"


def _parameter_names(text: str, kernel: str) -> tuple[str, ...]:
    """The parameter names of `kernel` in the preprocessed text (for the
    memory checker's reports); empty names where none can be read."""
    match = re.search(rf"\b__gg_global__\s+(?:{_BOUNDS})?void\s+(?:{_BOUNDS})?"
                      + re.escape(kernel) + r"\s*\(", text)
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


def _preprocess(source: str, name: str, flags: list[str]) -> tuple[str, Path]:
    """The text of `source` after g++ -E, with the emulator's markers left in,
    and the directory it was preprocessed in. The file name is a function of
    the source, so that the text (line markers included) is reproducible."""
    src_dir = cache_dir() / "emu" / "src" / digest(source, name)[:24]
    src = src_dir / (Path(name).name or "kernel.cu")
    if not src.is_file():
        atomic_write(src, named_source(source, name).encode())
    text = _run_compiler([_CXX, "-x", "c++", _STD, "-E", "-DGG_EMU_PREPROCESS=1", *flags, str(src)], name,
                         "preprocess it").stdout
    return text, src_dir


def _cache_text(text: str, places: Sequence[tuple[Path, str]]) -> str:
    """`text` for the cache key: the directories in `places` (a temporary
    folder of generated files, the source's copy in the cache) replaced by
    fixed names, so that the same sources in another folder find the same
    object. Only line markers (and __FILE__) differ, which name files."""
    for path, label in places:
        text = text.replace(str(path), label)
    return text


def _compile_cached(cmd_head: list[str], inputs: list[Path | str], suffix: str, key: str, name: str,
                    what: str, text: str | None = None) -> Path:
    """Runs `cmd_head + inputs + [-o out]` unless `key` is cached already; the
    result lands in the cache through a temporary directory and os.replace."""
    root = cache_dir() / "emu"
    result = root / f"{key[:32]}{suffix}"
    with build_lock(result):
        if not result.is_file():
            with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as tmp:
                paths = [str(p) for p in inputs]
                if text is not None:
                    ii = Path(tmp) / "unit.ii"
                    ii.write_text(text)
                    paths.append(str(ii))
                out = Path(tmp) / f"out{suffix}"
                _run_compiler([*cmd_head, *paths, "-o", str(out)], name, what)
                os.replace(out, result)
    return result


# The emulator's core: the translation units of the runtime that do not depend
# on the kernel (gg_emu_core.cc, gg_emu_launch.cc, ...). Compiled once per
# mode and cache into objects that every kernel library of that mode links.
def _core_sources() -> list[Path]:
    return sorted(p for p in RUNTIME_INCLUDE_DIR.glob("gg_emu_*.cc") if p.name != "gg_emu_host.cc")


def core_objects(mode_flags: Sequence[str]) -> list[Path]:
    """The emulator's core objects for a build mode (`mode_flags`: the fiber,
    memory-checker or TSan flags), compiled once into the cache: keyed by the
    flags, the compiler's version, the CUDA headers' folder and the bytes of
    every emulator source (gg_emu*), under the build lock, so that pytest
    workers compile each once. Built with WARNING_FLAGS: the core compiles
    without a warning in every mode."""
    runtime = sorted(p for p in RUNTIME_INCLUDE_DIR.iterdir() if p.name.startswith("gg_emu") and p.is_file())
    cuda = cuda_include_dir()
    flags = [*mode_flags, "-fPIC", "-fvisibility=hidden", "-Wno-attributes", *WARNING_FLAGS, "-DGG_EMU_CORE=1",
             f"-I{RUNTIME_INCLUDE_DIR}", f"-I{cuda}"]
    base = digest(*(p.name.encode() + b"\0" + p.read_bytes() for p in runtime), " ".join(flags),
                  tool_version(_CXX))
    (cache_dir() / "emu").mkdir(parents=True, exist_ok=True)

    def build(source: Path) -> Path:
        return _compile_cached([_CXX, "-x", "c++", _STD, "-c", *flags], [source], ".o",
                               digest(base, source.name), str(source), "compile the emulator's core")

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        return list(pool.map(build, _core_sources()))


def _build_library(
    sources: tuple[tuple[str, str], ...],
    include_dirs: tuple[Path, ...],
    defines: tuple[tuple[str, str], ...],
    tsan: bool,
    memcheck: bool = False,
    warnings: bool = False,
    system_include_dirs: tuple[Path, ...] = (),
) -> _Library:
    """One shared library from the translation units `sources` ((text, name)
    pairs). The first unit that includes the runtime defines its dynamic
    shared buffer and binds every unit's dynamic shared arrays to it; the
    others only declare them."""
    mode_flags = _TSAN_FLAGS if tsan else (_FIBER_FLAGS + _MEMCHECK_FLAGS if memcheck else _FIBER_FLAGS)
    define_flags = [f"-D{k}={v}" for k, v in defines]
    include_flags = [f"-I{d}" for d in (RUNTIME_INCLUDE_DIR, cuda_include_dir(), *include_dirs)]
    include_flags += [f"-isystem{d}" for d in system_include_dirs]
    (cache_dir() / "emu").mkdir(parents=True, exist_ok=True)

    # (1) Preprocess every unit with the markers left in.
    preprocessed = [_preprocess(source, name, [*mode_flags, *define_flags, *include_flags])
                    for source, name in sources]
    units = [text for text, _ in preprocessed]
    folders = [(d, f"<include dir {i}>") for i, d in enumerate(include_dirs)]

    # (2) Register the kernels and their launch bounds, rewrite the launch
    # syntax, and bind the dynamic shared arrays (all of them in one unit).
    kernels: list[str] = []
    bounds: dict[str, str] = {}
    texts: list[str] = []
    dynamic_shared = _unique(s for pre in units for s in _DYNAMIC_SHARED_RE.findall(pre))
    runtime_units = [i for i, pre in enumerate(units) if _SMEM_BUFFER_RE.search(pre)]
    if not runtime_units:
        raise EmuCompileError(f"{sources[0][1]}: no translation unit includes gg_runtime.cuh")
    for i, pre in enumerate(units):
        registered = _unique(_REGISTERED_RE.findall(pre))
        unregistered = [k for *_, k in _KERNEL_RE.findall(pre) if k not in registered]
        unregistered = list(_unique(unregistered))
        unit_bounds = {k: (b1 or b2).strip() for b1, b2, k in _BOUNDED_RE.findall(pre) if b1 or b2}
        text = _STATIC_SHARED_RE.sub("__gg_shared__", pre)
        text = _EXTERN_SHARED_RE.sub(r"extern\1__gg_dyn_shared__", text)
        text = _CHEVRON_RE.sub(r"::gg::emu::chevron(\1, \2)(", text)
        text += "".join(f"\nGG_EMU_REGISTER_KERNEL({k})" for k in unregistered)
        for k in (*unregistered, *registered):
            if k in unit_bounds:
                text += f"\nGG_EMU_LAUNCH_BOUNDS({k}, {unit_bounds[k]})"
                bounds[k] = unit_bounds[k]
        if i == runtime_units[0]:
            text += "\nGG_EMU_DYNAMIC_SMEM_BUFFER"
            text += "".join(f"\nGG_EMU_DYNAMIC_SHARED({s})" for s in dynamic_shared)
        texts.append(text + "\n")
        kernels += [*unregistered, *registered]

    # (3) Compile each unit and link them, cached by everything that
    # determines the result.
    flags = [*mode_flags, "-fPIC", "-fvisibility=hidden", "-Wno-attributes",
             *(WARNING_FLAGS if warnings else ()), "-include",
             str(RUNTIME_INCLUDE_DIR / "gg_emu_compile.h")]
    compile_header = (RUNTIME_INCLUDE_DIR / "gg_emu_compile.h").read_text()
    version = tool_version(_CXX)
    objects: list[Path] = []
    for text, (_, name), (_, src_dir) in zip(texts, sources, preprocessed):
        places = [(src_dir, "<source dir>"), *folders]
        key = digest(_cache_text(text, places), " ".join(flags), compile_header, version)
        objects.append(_compile_cached([_CXX, "-x", "c++", _STD, "-c", *flags], [], ".o", key, name,
                                       "compile it", text=text))
    # With the memory checker, link without -fsanitize: that would bring in
    # ThreadSanitizer's runtime, whose hooks the emulator replaces.
    link_flags = ([*_FIBER_FLAGS, *_LIBRARY_FLAGS, "-Wl,-z,defs"] if memcheck and not tsan
                  else [*mode_flags, *_LIBRARY_FLAGS])
    objects += core_objects(mode_flags)
    key = digest(*(o.name for o in objects), " ".join(link_flags), version)
    library = _compile_cached([_CXX, *link_flags], objects, ".so", key, sources[0][1], "link it")
    params = {k: names for text in texts for k in kernels if (names := _parameter_names(text, k))}
    return _Library(library, _unique(kernels), bounds, params)


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


_KIND_BUFFER, _KIND_VALUE, _KIND_NULL, _KIND_TENSOR_MAP = 0, 1, 2, 3
_FLAG_RETURN, _FLAG_POISON, _FLAG_NOT_PARAMETER = 1, 2, 4
_REQUEST_VERSION = 3


class TensorMapDataType(enum.IntEnum):
    """CUtensorMapDataType (cuda.h): the values cuTensorMapEncodeTiled takes."""

    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    INT32 = 3
    UINT64 = 4
    INT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT32_FTZ = 10
    TFLOAT32 = 11
    TFLOAT32_FTZ = 12
    U4X16_ALIGN8B = 13
    U4X16_ALIGN16B = 14
    U6X16_ALIGN16B = 15


class TensorMapSwizzle(enum.IntEnum):
    """CUtensorMapSwizzle: NONE, B32, B64, B128 are CU_TENSOR_MAP_SWIZZLE_{NONE,32B,64B,128B}."""

    NONE = 0
    B32 = 1
    B64 = 2
    B128 = 3
    B128_ATOM_32B = 4
    B128_ATOM_32B_FLIP_8B = 5
    B128_ATOM_64B = 6


class TensorMapInterleave(enum.IntEnum):
    """CUtensorMapInterleave: CU_TENSOR_MAP_INTERLEAVE_{NONE,16B,32B}."""

    NONE = 0
    B16 = 1
    B32 = 2


class TensorMapL2Promotion(enum.IntEnum):
    """CUtensorMapL2promotion: CU_TENSOR_MAP_L2_PROMOTION_{NONE,L2_64B,L2_128B,L2_256B}."""

    NONE = 0
    L2_64B = 1
    L2_128B = 2
    L2_256B = 3


class TensorMapOobFill(enum.IntEnum):
    """CUtensorMapFloatOOBfill: NONE fills out-of-bounds elements with zeros."""

    NONE = 0
    NAN_REQUEST_ZERO_FMA = 1


# The element size in bytes of each data type (the packed 4/6-bit types have none).
_ELEMENT_BYTES = {
    TensorMapDataType.UINT8: 1, TensorMapDataType.UINT16: 2, TensorMapDataType.UINT32: 4,
    TensorMapDataType.INT32: 4, TensorMapDataType.UINT64: 8, TensorMapDataType.INT64: 8,
    TensorMapDataType.FLOAT16: 2, TensorMapDataType.FLOAT32: 4, TensorMapDataType.FLOAT64: 8,
    TensorMapDataType.BFLOAT16: 2, TensorMapDataType.FLOAT32_FTZ: 4, TensorMapDataType.TFLOAT32: 4,
    TensorMapDataType.TFLOAT32_FTZ: 4,
}

# NumPy (and ml_dtypes) element types and the CUtensorMapDataType that moves
# them: the 8-bit floats and signed ints move as UINT8, 16-bit ints as UINT16.
_NUMPY_TO_MAP = {
    "uint8": TensorMapDataType.UINT8, "int8": TensorMapDataType.UINT8,
    "float8_e4m3fn": TensorMapDataType.UINT8, "float8_e5m2": TensorMapDataType.UINT8,
    "float8_e8m0fnu": TensorMapDataType.UINT8,
    "uint16": TensorMapDataType.UINT16, "int16": TensorMapDataType.UINT16,
    "uint32": TensorMapDataType.UINT32, "int32": TensorMapDataType.INT32,
    "uint64": TensorMapDataType.UINT64, "int64": TensorMapDataType.INT64,
    "float16": TensorMapDataType.FLOAT16, "float32": TensorMapDataType.FLOAT32,
    "float64": TensorMapDataType.FLOAT64, "bfloat16": TensorMapDataType.BFLOAT16,
}


def tensor_map_dtype(dtype: object) -> int:
    """The CUtensorMapDataType of `dtype`: a TensorMapDataType (or its int,
    passed through as is, so that the encoder judges it), or a NumPy dtype
    (``np.float32``, ``ml_dtypes.bfloat16``, ...)."""
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        return int(dtype)
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"tensor map dtype: {dtype!r} is neither a TensorMapDataType nor a NumPy dtype") from None
    if name not in _NUMPY_TO_MAP:
        raise TypeError(f"tensor map dtype: no CUtensorMapDataType moves NumPy {name}")
    return int(_NUMPY_TO_MAP[name])


def _ints(values: Iterable[object], what: str) -> tuple[int, ...]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"tensor map {what}: {v!r} is not an int")
        out.append(int(v))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class TensorMap:
    """A ``const __grid_constant__ CUtensorMap`` kernel argument over one of
    the launch's own device buffers: the parameters of cuTensorMapEncodeTiled,
    with `buffer` (the index of an array in the launch's ``args``, or in
    ``buffers`` counting on from ``len(args)``) plus `offset_bytes` in place of
    the global address, which only exists in the process that owns the
    buffer. Dimensions are innermost first, as the driver takes them:
    `global_dims` has `rank` sizes in elements, `global_strides_bytes` the
    byte strides of dimensions 1..rank-1 (rank - 1 of them), `box` the box
    size in elements, `element_strides` the traversal strides (default 1).
    The enums accept their ints, so that any value reaches the encoder, which
    checks them as the driver documents. ``TensorMap.of_array`` fills the
    dims and strides from a C-contiguous array. ``EmuModule.launch`` encodes
    it with the emulated encoder, ``cuda_gpu.GpuModule.launch`` with the
    driver's; both pass the 128 bytes by value."""

    buffer: int
    dtype: int
    global_dims: tuple[int, ...]
    global_strides_bytes: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...] | None = None
    swizzle: int = TensorMapSwizzle.NONE
    interleave: int = TensorMapInterleave.NONE
    l2_promotion: int = TensorMapL2Promotion.L2_256B
    oob_fill: int = TensorMapOobFill.NONE
    offset_bytes: int = 0

    def __post_init__(self) -> None:
        (buffer,) = _ints([self.buffer], "buffer")
        dims = _ints(self.global_dims, "global_dims")
        strides = _ints(self.global_strides_bytes, "global_strides_bytes")
        box = _ints(self.box, "box")
        rank = len(dims)
        estrides = (1,) * rank if self.element_strides is None else _ints(self.element_strides, "element_strides")
        if len(strides) != max(rank - 1, 0) or len(box) != rank or len(estrides) != rank:
            raise ValueError(
                f"tensor map of rank {rank} (global_dims {dims}): global_strides_bytes needs {max(rank - 1, 0)} "
                f"entries (dimensions 1..rank-1), box and element_strides {rank}; got {len(strides)}, "
                f"{len(box)}, {len(estrides)}"
            )
        enums = _ints([self.swizzle, self.interleave, self.l2_promotion, self.oob_fill], "enum")
        (offset,) = _ints([self.offset_bytes], "offset_bytes")
        # What the request's fields hold (u32, u64); the encoder judges the rest.
        for what, values, bits in (("buffer", [buffer], 32), ("global_dims", dims, 64),
                                   ("global_strides_bytes", strides, 64), ("box", box, 32),
                                   ("element_strides", estrides, 32), ("enum", enums, 32),
                                   ("offset_bytes", [offset], 64)):
            if any(not 0 <= v < 1 << bits for v in values):
                raise ValueError(f"tensor map {what} {values}: not an unsigned {bits}-bit value")
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "dtype", tensor_map_dtype(self.dtype))
        object.__setattr__(self, "global_dims", dims)
        object.__setattr__(self, "global_strides_bytes", strides)
        object.__setattr__(self, "box", box)
        object.__setattr__(self, "element_strides", estrides)
        object.__setattr__(self, "offset_bytes", offset)

    @classmethod
    def of_array(cls, buffer: int, array: np.ndarray, box: Sequence[int], **kwargs) -> TensorMap:
        """The map of a whole C-contiguous `array` (as the launch copies it):
        dims and strides from its shape, innermost first, and the data type
        from its dtype unless `dtype` is given. `box` is innermost first too,
        as cuTensorMapEncodeTiled takes it."""
        shape = tuple(int(d) for d in array.shape)
        item = array.dtype.itemsize
        strides, s = [], item
        for d in reversed(shape[1:]):
            s *= d
            strides.append(s)
        kwargs.setdefault("dtype", array.dtype)
        return cls(buffer, global_dims=tuple(reversed(shape)), global_strides_bytes=tuple(strides),
                   box=tuple(box), **kwargs)

    @property
    def rank(self) -> int:
        return len(self.global_dims)

    def element_bytes(self) -> int | None:
        """The size of one element, or None for a type the table does not size."""
        try:
            return _ELEMENT_BYTES.get(TensorMapDataType(self.dtype))
        except ValueError:
            return None

    def extent_bytes(self) -> int | None:
        """How many bytes from the offset the map reaches: every dimension at
        its last index, plus one element (None when the type has no size)."""
        eb = self.element_bytes()
        if eb is None or 0 in self.global_dims:
            return None
        strides = (eb, *self.global_strides_bytes)
        return eb + sum((d - 1) * s for d, s in zip(self.global_dims, strides))

    def describe(self) -> str:
        """The encoder's arguments, for messages."""
        def name(enum_type, value):
            try:
                return enum_type(value).name
            except ValueError:
                return str(value)

        return (f"dtype {name(TensorMapDataType, self.dtype)}, globalDim {list(self.global_dims)}, "
                f"globalStrides {list(self.global_strides_bytes)}, boxDim {list(self.box)}, "
                f"elementStrides {list(self.element_strides or ())}, "
                f"interleave {name(TensorMapInterleave, self.interleave)}, "
                f"swizzle {name(TensorMapSwizzle, self.swizzle)}, "
                f"l2Promotion {name(TensorMapL2Promotion, self.l2_promotion)}, "
                f"oobFill {name(TensorMapOobFill, self.oob_fill)}, offset {self.offset_bytes}")

    def payload(self) -> bytes:
        """The data of the request's tensor-map entry (gg_emu.h, run_request)."""
        rank = self.rank
        estrides = self.element_strides or (1,) * rank
        return b"".join([
            struct.pack("<7IQ", self.buffer, self.dtype, rank, self.interleave, self.swizzle, self.l2_promotion,
                        self.oob_fill, self.offset_bytes),
            struct.pack(f"<{rank}Q", *self.global_dims),
            struct.pack(f"<{len(self.global_strides_bytes)}Q", *self.global_strides_bytes),
            struct.pack(f"<{rank}I", *self.box),
            struct.pack(f"<{rank}I", *estrides),
        ])


def _describe_entry(value: object) -> str:
    if value is None:
        return "None (a null pointer)"
    if isinstance(value, TensorMap):
        return "a tensor map"
    if isinstance(value, np.generic):
        return f"a NumPy scalar ({value.dtype})"
    return f"a {type(value).__name__}"


def tensor_map_problem(kernel: str, entries: Sequence[object], index: int) -> str | None:
    """Why the TensorMap at `entries[index]` cannot be encoded for a launch
    whose arrays are `entries` (args, then buffers), or None: its buffer must
    be an array there."""
    tm = entries[index]
    assert isinstance(tm, TensorMap)
    if not 0 <= tm.buffer < len(entries):
        return (f"{kernel}: argument #{index} is a tensor map over entry #{tm.buffer}, but the launch has "
                f"{len(entries)} arguments and buffers")
    target = entries[tm.buffer]
    if not isinstance(target, np.ndarray):
        return (f"{kernel}: argument #{index} is a tensor map over entry #{tm.buffer}, which is "
                f"{_describe_entry(target)}, not an array")
    return None


def _encode_request(
    kernel: str,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    smem_bytes: int,
    max_dynamic_smem: int,
    args: Sequence[object],
    outputs: Sequence[int],
    inouts: Sequence[int],
    buffers: Sequence[np.ndarray] = (),
) -> bytes:
    """The request file of gg_emu.h's run_request (max_dynamic_smem -1: the
    kernel's attribute is left unset). `buffers` follow `args` as entries
    that are not kernel parameters (only tensor maps reach them)."""
    name = kernel.encode()
    entries = [*args, *buffers]
    parts = [
        b"GGEMUREQ",
        struct.pack("<II", _REQUEST_VERSION, len(name)),
        name,
        struct.pack("<6IQqI", *grid, *block, smem_bytes, max_dynamic_smem, len(entries)),
    ]
    for i, arg in enumerate(entries):
        hidden = _FLAG_NOT_PARAMETER if i >= len(args) else 0
        if arg is None:
            parts.append(struct.pack("<IIQ", _KIND_NULL, 0, 0))
        elif isinstance(arg, np.ndarray):
            flags = (_FLAG_RETURN | _FLAG_POISON) if i in outputs else (_FLAG_RETURN if i in inouts else 0)
            parts.append(struct.pack("<IIQ", _KIND_BUFFER, flags | hidden, arg.nbytes))
            if not flags & _FLAG_POISON:
                parts.append(np.ascontiguousarray(arg).tobytes())
        elif isinstance(arg, TensorMap):
            data = arg.payload()
            parts.append(struct.pack("<IIQ", _KIND_TENSOR_MAP, 0, len(data)))
            parts.append(data)
        elif isinstance(arg, np.generic):
            data = arg.tobytes()
            parts.append(struct.pack("<IIQ", _KIND_VALUE, 0, len(data)))
            parts.append(data)
        else:
            raise TypeError(
                f"argument #{i} of {kernel}: expected a NumPy array, a NumPy scalar (e.g. np.int32(3)), a TensorMap "
                f"or None, got {type(arg).__name__}: a Python {type(arg).__name__} has no C type"
            )
    return b"".join(parts)


DEFAULT_ARCH = "sm_90a"


def device_env(arch: str, sm_count: int | None = None) -> dict[str, str]:
    """The environment that makes the emulator an `arch` device: its name, its
    opt-in shared memory per block and its SM count (gemmgen.archs's tables;
    `sm_count` overrides the count, e.g. to give a persistent kernel fewer
    blocks than tiles)."""
    count = archs_sm_count(arch) if sm_count is None else int(sm_count)
    return {"GG_EMU_ARCH": arch, "GG_EMU_SMEM_OPTIN": str(shared_memory_limit(arch)),
            "GG_EMU_SM_COUNT": str(count)}


def _encode_host_request(inputs: Mapping[str, object]) -> bytes:
    """The request of gg_emu_cudart.h's run_host: named byte strings; an int
    value stands for a size-only input of that many bytes."""
    parts = [b"GGEMUHST", struct.pack("<II", 1, len(inputs))]
    for name, value in inputs.items():
        key = name.encode()
        if isinstance(value, int) and not isinstance(value, bool):
            parts += [struct.pack("<I", len(key)), key, struct.pack("<IQ", 1, value)]
            continue
        data = np.ascontiguousarray(value).tobytes() if isinstance(value, (np.ndarray, np.generic)) else bytes(value)
        parts += [struct.pack("<I", len(key)), key, struct.pack("<IQ", 0, len(data)), data]
    return b"".join(parts)


def _response_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise EmuError("the emulator child exited without writing its response") from None


class _Reader:
    """Reads a response file; a short or inconsistent one is an EmuError
    (a child that died while writing it), never a bare struct/ValueError."""

    def __init__(self, data: bytes, magic: bytes) -> None:
        if data[:8] != magic:
            raise EmuError(f"malformed response from the emulator child: expected {magic.decode()}, "
                           f"got {len(data)} bytes starting {data[:8]!r}")
        self.data, self.offset = data, 8

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        self._need(size)
        values = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += size
        return values

    def raw(self, nbytes: int) -> bytes:
        self._need(nbytes)
        chunk = self.data[self.offset : self.offset + nbytes]
        self.offset += nbytes
        return chunk

    def _need(self, nbytes: int) -> None:
        if self.offset + nbytes > len(self.data):
            raise EmuError(f"truncated response from the emulator child: {len(self.data)} bytes, "
                           f"needed {self.offset + nbytes}")


def _decode_host_response(data: bytes) -> tuple[int, dict[str, bytes]]:
    r = _Reader(data, b"GGEMUOUT")
    _version, status, count = r.take("<IiI")
    outputs: dict[str, bytes] = {}
    for _ in range(count):
        (name_len,) = r.take("<I")
        name = r.raw(name_len).decode(errors="replace")
        (nbytes,) = r.take("<Q")
        outputs[name] = r.raw(nbytes)
    return status, outputs


@dataclass(frozen=True, slots=True)
class HostResult:
    """What a host program (EmuModule.run_host) returned: gg_emu_host_main's
    status, its outputs by name, and the child's output (kernel printf,
    "gg-emu: rejected: ..." lines of failed runtime calls)."""

    status: int
    outputs: dict[str, bytes]
    log: str


def _decode_response(data: bytes, args: Sequence[object]) -> dict[int, np.ndarray]:
    r = _Reader(data, b"GGEMURSP")
    (count,) = r.take("<I")
    arrays: dict[int, np.ndarray] = {}
    for _ in range(count):
        index, nbytes = r.take("<IQ")
        like = args[index] if index < len(args) else None
        if not isinstance(like, np.ndarray) or nbytes != like.nbytes:
            raise EmuError(f"malformed response from the emulator child: buffer #{index} of {nbytes} bytes "
                           "is not an array argument of that size")
        flat = np.frombuffer(r.raw(nbytes), dtype=like.dtype, count=like.size)
        arrays[index] = flat.reshape(like.shape).copy()
    return arrays


def _name_sites(message: str, library: Path | None, source_name: str) -> str:
    """Replaces the memory checker's "[site 0x...]" by the source line."""
    sites = [int(h, 16) for h in re.findall(r"\[site (0x[0-9a-f]+)\]", message)]
    if not sites or library is None:
        return message
    from gemmgen.harness.counters import resolve_sites

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
        extra_sources: Sequence[tuple[str, str]] = (),
        memcheck: bool | None = None,
        warnings: bool = False,
        system_include_dirs: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        self.name = name_for_errors
        self.tsan = tsan
        # The memory checker and ThreadSanitizer both own the __tsan_* hooks.
        self.memcheck = False if tsan else (memcheck_default() if memcheck is None else memcheck)
        dirs = tuple(Path(d).resolve() for d in include_dirs)
        defs = tuple(sorted((str(k), str(v)) for k, v in (defines or {}).items()))
        sources = ((source, name_for_errors), *((str(t), str(n)) for t, n in extra_sources))
        system_dirs = tuple(Path(d).resolve() for d in system_include_dirs)
        key = (sources, dirs, defs, tsan, self.memcheck, warnings, system_dirs)
        if key not in _LIBRARIES:
            _LIBRARIES[key] = _build_library(sources, dirs, defs, tsan, self.memcheck, warnings,
                                             system_dirs)
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
    def launch_bounds(self) -> dict[str, str]:
        """Each kernel's ``__launch_bounds__`` arguments as written (launches
        over the bound are rejected)."""
        return dict(self._library.launch_bounds)

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
        ftz: bool = False,
        timeout: float = 120.0,
        arch: str = DEFAULT_ARCH,
        max_dynamic_smem: int | None = None,
        counters: bool = False,
        buffers: Sequence[np.ndarray] = (),
    ) -> list[np.ndarray]:
        """Runs `kernel` once on an emulated `arch` device; returns the arrays
        at `outputs`, then those at `inouts`. A `TensorMap` in `args` is
        encoded in the child against its buffer's device address (an
        encoder's refusal raises EmuLaunchError before any thread runs);
        `buffers` are device buffers that are not kernel parameters, which
        only tensor maps reach: index ``len(args) + j`` in a TensorMap's
        `buffer`, `outputs` and `inouts` names ``buffers[j]``. `max_dynamic_smem` is the
        kernel's cudaFuncAttributeMaxDynamicSharedMemorySize for the launch:
        None sets it to `smem_bytes` when that is over 48 KiB (as
        cuda_gpu.GpuModule and the CuPy launchers do); an int is passed to
        cudaFuncSetAttribute as is (49152, CUDA's default, makes a larger
        request fail as on a GPU). `counters=True` (memory-checked modules)
        also fills `last_counters` (see `gemmgen.harness.counters`)."""
        if counters and not self.memcheck:
            raise ValueError("counters need a memory-checked module (memcheck=True, not tsan)")
        if kernel not in self.kernels:
            raise EmuLaunchError(
                f"{self.name} has no kernel '{kernel}' (kernels: {', '.join(self.kernels) or 'none'}; "
                'only extern "C" __global__ functions can be launched)'
            )
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        args = list(args)
        buffers = list(buffers)
        for j, b in enumerate(buffers):
            if not isinstance(b, np.ndarray):
                raise TypeError(f"buffers[{j}] of {kernel}: expected a NumPy array, got {type(b).__name__}")
        entries = [*args, *buffers]
        for i in (*outputs, *inouts):
            if not 0 <= i < len(entries) or not isinstance(entries[i], np.ndarray):
                raise ValueError(f"output index {i} of {kernel} does not name an array argument")
        for i, arg in enumerate(args):
            if isinstance(arg, TensorMap) and (why := tensor_map_problem(kernel, entries, i)):
                raise EmuLaunchError(why)
        if set(outputs) & set(inouts):
            raise ValueError(f"indices {sorted(set(outputs) & set(inouts))} are in both outputs and inouts")
        if max_dynamic_smem is None:
            attribute = int(smem_bytes) if smem_bytes > DEFAULT_DYNAMIC_SMEM else -1
        else:
            attribute = int(max_dynamic_smem)
        request = _encode_request(
            kernel, dim3(grid, "grid"), dim3(block, "block"), int(smem_bytes), attribute, args, outputs, inouts,
            buffers,
        )
        extra_env = {}
        params = self._library.params.get(kernel, ())
        if params:
            extra_env["GG_EMU_ARG_NAMES"] = ",".join(params)
        self.last_counters = None
        with tempfile.TemporaryDirectory(prefix="gg-emu-") as tmp:
            req, resp = Path(tmp) / "request", Path(tmp) / "response"
            req.write_bytes(request)
            if counters:
                extra_env["GG_EMU_COUNTERS"] = str(Path(tmp) / "counters.json")
            proc = self._run_child(req, resp, "gg_emu_run_request", kernel, arch, schedule, workers,
                                   timeout, ftz=ftz, extra_env=extra_env)
            if proc.returncode != 0:
                raise _error_from_child(proc, kernel, self.library, self.name)
            arrays = _decode_response(_response_bytes(resp), entries)
            if counters:
                from gemmgen.harness.counters import load_counters

                self.last_counters = load_counters(Path(tmp) / "counters.json", self.library, self.name)
        return [arrays[i] for i in (*outputs, *inouts)]

    def run_host(
        self,
        inputs: Mapping[str, object],
        *,
        schedule: str = "run-ahead",
        workers: int | None = None,
        timeout: float = 120.0,
        arch: str = DEFAULT_ARCH,
        sm_count: int | None = None,
    ) -> HostResult:
        """Runs the library's host program, ``extern "C" int
        gg_emu_host_main(void)``, on an emulated `arch` device. `inputs` maps
        names to arrays, bytes or NumPy scalars (read in C++ with
        ``gg_emu_host_input``), or to an int: a size-only input of that many
        bytes. Raises like `launch` when the emulator stops the program (a
        kernel fault, a crash, a timeout); a CUDA call that returns an error
        does not raise: the program decides, and its status and outputs
        (``gg_emu_host_output``) come back in the HostResult. `sm_count`
        overrides the device's SM count (cudaDevAttrMultiProcessorCount)."""
        if self.tsan:
            raise EmuError(f"{self.name}: host programs run in fiber mode only, not with tsan=True")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        with tempfile.TemporaryDirectory(prefix="gg-emu-") as tmp:
            req, resp = Path(tmp) / "request", Path(tmp) / "response"
            req.write_bytes(_encode_host_request(inputs))
            proc = self._run_child(req, resp, "gg_emu_run_host", "host program", arch, schedule, workers, timeout,
                                   sm_count=sm_count)
            if proc.returncode != 0:
                raise _error_from_child(proc, f"{self.name} (host program)")
            status, outputs = _decode_host_response(_response_bytes(resp))
        return HostResult(status, outputs, self.last_log)

    def _run_child(self, req: Path, resp: Path, entry: str, what: str, arch: str, schedule: str,
                   workers: int | None, timeout: float, *, ftz: bool = False,
                   extra_env: Mapping[str, str] | None = None,
                   sm_count: int | None = None) -> subprocess.CompletedProcess:
        env = dict(os.environ, GG_EMU_SCHEDULE=schedule, GG_EMU_FTZ="1" if ftz else "0",
                   **device_env(arch, sm_count))
        env.pop("GG_EMU_COUNTERS", None)
        env.update(extra_env or {})
        if workers is not None:
            env["GG_EMU_WORKERS"] = str(int(workers))
        if self.tsan:
            # The first race ends the launch. The emulator's own fault
            # handler formats its report, and an emulator error ends the
            # process with threads alive: neither is the kernel's bug.
            options = f"halt_on_error=1 exitcode={_EXIT_TSAN} report_signal_unsafe=0 report_thread_leaks=0"
            env["TSAN_OPTIONS"] = f"{options} {env.get('TSAN_OPTIONS', '')}"
            cmd = [str(_tsan_host()), str(self.library), str(req), str(resp)]
        else:
            cmd = [sys.executable, "-I", "-S", "-c", _CHILD, str(self.library), str(req), str(resp), entry]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            log = _text(e.stdout) + _text(e.stderr)
            raise EmuTimeout(f"{what}: no result after {timeout:g} s (an endless loop?)", log) from None
        self.last_log = proc.stdout + proc.stderr
        return proc


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
