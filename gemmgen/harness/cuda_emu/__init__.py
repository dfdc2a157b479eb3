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
  ``runtime/cuda/gg_emu_memcheck.cc``) unless ``memcheck=False`` or
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
  arch="sm_90a", max_dynamic_smem=None, counters=False, buffers=(), cluster=(1, 1, 1))``
  runs one launch (a cluster launch when `cluster` is not (1, 1, 1)) in
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

The package: this module (``EmuModule``, the library table of the session),
``build`` (preprocessing, the kernel rewrite, the emulator's core objects,
the cache), ``protocol`` (request and response files, the child's
environment), ``tensor_map`` (``TensorMap`` and its enums) and ``errors``
(the error classes, and the child's report turned into one). Everything in
``__all__`` and the names the tests use are importable from here.

The child process is ``python -c`` loading the library with ctypes and
calling its ``gg_emu_run_request`` (in TSan mode a small TSan-built C++
program, ``gg_emu_host.cc``, since CPython cannot load TSan-instrumented
code). An abort, deadlock or segfault therefore ends the child, never the
caller.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from gemmgen.archs import DEFAULT_DYNAMIC_SMEM
from gemmgen.harness.cuda_emu.build import (
    cuda_include_dir as cuda_include_dir,
    WARNING_FLAGS as WARNING_FLAGS,
    _build_library as _build_library,
    _CHEVRON_RE as _CHEVRON_RE,
    _EXTERN_SHARED_RE as _EXTERN_SHARED_RE,
    _Library as _Library,
    _STATIC_SHARED_RE as _STATIC_SHARED_RE,
    _tsan_host as _tsan_host,
    core_objects as core_objects,
    memcheck_default as memcheck_default,
    runtime_include_dir as runtime_include_dir,
)
from gemmgen.harness.cuda_emu.errors import (
    EmuCompileError as EmuCompileError,
    EmuError as EmuError,
    EmuKernelError as EmuKernelError,
    EmuLaunchError as EmuLaunchError,
    EmuMemoryError as EmuMemoryError,
    EmuRaceError as EmuRaceError,
    EmuTimeout as EmuTimeout,
    _EXIT_TSAN as _EXIT_TSAN,
    _error_from_child as _error_from_child,
)
from gemmgen.harness.cuda_emu.protocol import (
    _CHILD as _CHILD,
    DEFAULT_ARCH as DEFAULT_ARCH,
    SCHEDULES as SCHEDULES,
    HostResult as HostResult,
    _decode_host_response as _decode_host_response,
    _decode_response as _decode_response,
    _encode_host_request as _encode_host_request,
    _encode_request as _encode_request,
    _response_bytes as _response_bytes,
    device_env as device_env,
    dim3 as dim3,
)
from gemmgen.harness.cuda_emu.tensor_map import (
    _ELEMENT_BYTES as _ELEMENT_BYTES,
    TensorMap as TensorMap,
    TensorMapDataType as TensorMapDataType,
    TensorMapInterleave as TensorMapInterleave,
    TensorMapL2Promotion as TensorMapL2Promotion,
    TensorMapOobFill as TensorMapOobFill,
    TensorMapSwizzle as TensorMapSwizzle,
    tensor_map_dtype as tensor_map_dtype,
    tensor_map_problem as tensor_map_problem,
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


_LIBRARIES: dict[tuple, _Library] = {}


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
        cluster: int | Sequence[int] = (1, 1, 1),
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
        request fail as on a GPU). `cluster` is the launch's cluster
        dimension (cudaLaunchAttributeClusterDimension, x first); the
        default (1, 1, 1) launches without clusters, anything else is
        checked as the driver checks a cluster launch (docs/cuda-emulation.md,
        "Clusters"). `counters=True` (memory-checked modules)
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
            buffers, cluster=dim3(cluster, "cluster"),
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
