"""Compiling for the CPU emulator: preprocess a CUDA source with g++, register
its kernels, rewrite the launch syntax, compile it, and link it with the
emulator's core objects (compiled once per build mode) into a shared
library; everything cached by content (docs/cuda-emulation.md, "Compiling").
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

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
from gemmgen.harness.cuda_emu import direct
from gemmgen.harness.cuda_emu.errors import EmuCompileError


def runtime_include_dir() -> Path:
    """The directory of ``gg_runtime.cuh``; kernels need it on the include path."""
    return RUNTIME_INCLUDE_DIR

_CXX = os.environ.get("GEMMGEN_CXX", "g++")
_STD = "-std=c++20"
# -ftrivial-auto-var-init=pattern: an uninitialised local, even one g++ keeps
# in a register, starts as 0xFE bytes (f32 -1.7e38, int -16843010), never as
# whatever the register held (docs/cuda-emulation.md, "Uninitialised values").
#
# -O1, not -O2: the emulator's builds are g++ compiles of the whole runtime per
# kernel, and they are most of the test suite's time; -O1 compiles them in
# about three quarters of the time (a cold tests/cuda/sm80/test_cuda_swiglu.py:
# 47 s against 62-64 s), and the kernels the tests run are small. The memory
# checker's builds keep -O2 (_MEMCHECK_BASE): the accesses it counts (sectors,
# bank conflicts) are those of the optimised code, as nvcc's would be.
_FIBER_COMMON = ("-fno-strict-aliasing", "-pthread", "-ftrivial-auto-var-init=pattern")
_FIBER_FLAGS = ("-O1", *_FIBER_COMMON)
_MEMCHECK_BASE = ("-O2", *_FIBER_COMMON)
# The memory checker: GCC's ThreadSanitizer instrumentation calls the
# emulator's own __tsan_* functions (gg_emu_memcheck.cc); the library is
# linked without -fsanitize, so no sanitizer runtime comes in.
# -fno-tree-sra: an aggregate load or store (a uint2, a float4, a struct)
# stays one access, as nvcc issues it, instead of one per field, so its size
# and alignment are checked and counted. -g1: line tables, to name the line
# of an access (reports, counters).
_INSTRUMENT_FLAGS = ("-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0")
_MEMCHECK_FLAGS = (*_INSTRUMENT_FLAGS, "-fno-tree-sra", "-DGG_EMU_MEMCHECK=1", "-g1")
_TSAN_FLAGS = ("-O1", "-g", "-fsanitize=thread", "-fno-strict-aliasing", "-pthread", "-DGG_EMU_TSAN=1",
               "-ftrivial-auto-var-init=pattern")
# The memory checker's mode: the fiber flags at -O2, instrumented.
_MEMCHECK_MODE = (*_MEMCHECK_BASE, *_MEMCHECK_FLAGS)
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
# gg_emu_core.h's declaration of the dynamic shared buffer: the unit includes the runtime.
_SMEM_BUFFER_RE = re.compile(r"\bunsigned\s+char\s+gg_emu_dynamic_smem\s*\[")
# kernel<<<grid, block[, smem[, stream]]>>>(: the launch syntax nvcc adds to C++.
_CHEVRON_RE = re.compile(r"\b([A-Za-z_][\w:]*)\s*<<<([^;{}]*?)>>>\s*\(")
_REGISTERED_RE = re.compile(r"\bGG_EMU_REGISTER_KERNEL\s*\(\s*([A-Za-z_]\w*)\s*\)")
_DYNAMIC_SHARED_RE = re.compile(r"\bextern\s+__gg_shared__\b[^;{}]*?\b([A-Za-z_]\w*)\s*\[\s*\]\s*;")
_EXTERN_SHARED_RE = re.compile(r"\bextern(\s+)__gg_shared__\b")
_STATIC_SHARED_RE = re.compile(r"\bstatic\s+__gg_shared__\b")


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


def _run_compiler(cmd: list[str], name: str, what: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EmuCompileError(f"{name}: g++ could not {what}:\n{proc.stderr.strip()}", proc.stderr)
    return proc


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def _preprocess(source: str, name: str, flags: list[str], deps: list[Path] | None = None) -> tuple[str, Path]:
    """The text of `source` after g++ -E, with the emulator's markers left in,
    and the directory it was preprocessed in. The file name is a function of
    the source, so that the text (line markers included) is reproducible.
    `deps` gets the files the preprocessor read."""
    src_dir = cache_dir() / "emu" / "src" / digest(source, name)[:24]
    src = src_dir / (Path(name).name or "kernel.cu")
    if not src.is_file():
        atomic_write(src, named_source(source, name).encode())
    with tempfile.TemporaryDirectory(prefix="gg-emu-deps-") as tmp:
        depfile = Path(tmp) / "deps.d"
        text = _run_compiler([_CXX, "-x", "c++", _STD, "-E", "-DGG_EMU_PREPROCESS=1", "-MD", "-MF", str(depfile),
                              *flags, str(src)], name, "preprocess it").stdout
        if deps is not None and depfile.is_file():
            deps += direct.read_depfile(depfile)
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
    # The core is the emulator, never kernel code: its own loads and stores
    # (wgmma operand checks, TMA copies, bookkeeping) are not the kernel's
    # accesses, so the memory checker's instrumentation stays off here (the
    # hooks it defines and its GG_EMU_MEMCHECK code stay in). Instrumented,
    # they were most of an sm_90 launch's time and put emulator sites in the
    # counters. (TSan mode keeps -fsanitize=thread: there it is ThreadSanitizer.)
    if "-DGG_EMU_MEMCHECK=1" in mode_flags:
        mode_flags = [f for f in mode_flags if f not in _INSTRUMENT_FLAGS]
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
    mode_flags = _TSAN_FLAGS if tsan else (_MEMCHECK_MODE if memcheck else _FIBER_FLAGS)
    define_flags = [f"-D{k}={v}" for k, v in defines]
    include_flags = [f"-I{d}" for d in (RUNTIME_INCLUDE_DIR, cuda_include_dir(), *include_dirs)]
    include_flags += [f"-isystem{d}" for d in system_include_dirs]
    (cache_dir() / "emu").mkdir(parents=True, exist_ok=True)
    link_flags = ([*_MEMCHECK_BASE, *_LIBRARY_FLAGS, "-Wl,-z,defs"] if memcheck and not tsan
                  else [*mode_flags, *_LIBRARY_FLAGS])
    core = core_objects(mode_flags)

    # (0) The direct cache: the library of these sources and these included
    # files, found without preprocessing (direct.py).
    search = (RUNTIME_INCLUDE_DIR, cuda_include_dir(), *include_dirs, *system_include_dirs)
    direct_key = direct.key(
        [*(p for source, name in sources for p in (source, name)), *mode_flags, *define_flags,
         str(len(include_dirs)), str(warnings), " ".join(link_flags), *(o.name for o in core),
         (RUNTIME_INCLUDE_DIR / "gg_emu_compile.h").read_text(), tool_version(_CXX)],
        (RUNTIME_INCLUDE_DIR, *include_dirs, *system_include_dirs))
    found = direct.lookup(direct_key, search)
    if found is not None:
        return _Library(cache_dir() / "emu" / found["library"], tuple(found["kernels"]),
                        dict(found["bounds"]), {k: tuple(v) for k, v in found["params"].items()})

    # (1) Preprocess every unit with the markers left in.
    deps: list[Path] = []
    preprocessed = [_preprocess(source, name, [*mode_flags, *define_flags, *include_flags], deps)
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
    # With the memory checker, link without -fsanitize (link_flags): that would
    # bring in ThreadSanitizer's runtime, whose hooks the emulator replaces.
    objects += core
    key = digest(*(o.name for o in objects), " ".join(link_flags), version)
    library = _compile_cached([_CXX, *link_flags], objects, ".so", key, sources[0][1], "link it")
    params = {k: names for text in texts for k in kernels if (names := _parameter_names(text, k))}
    result = _Library(library, _unique(kernels), bounds, params)
    direct.store(direct_key, search, deps, {
        "library": library.name, "kernels": list(result.kernels), "bounds": result.launch_bounds,
        "params": {k: list(v) for k, v in params.items()}})
    return result


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
