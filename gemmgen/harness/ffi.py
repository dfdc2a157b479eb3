"""Build the XLA FFI handlers of the JAX entry points (`gemmgen compile`).

A kernel emitted for both backends has a JAX entry point
(`generated/<stem>/jax/<kernel>.py`) and an FFI handler
(`generated/<stem>/cuda/<kernel>_ffi.cc`, which calls `launch_<kernel>()`).
This module compiles the handler with the kernel's `.cu` into one shared
library, `lib<kernel>_ffi.so`, that the entry point's `register()` loads:

- `compile_ffi(folder, kernel, out_dir, archs)`: with nvcc, for the GPU
  (XLA's CUDA platform): SASS for each arch, the CUDA runtime linked
  statically, warnings as errors (XLA's headers are system headers);
- `emulated_ffi(folder, kernel)`: with g++ against gemmgen's CPU emulator
  (`cuda_emu`, `GG_FFI_EMULATED`), for XLA's CPU platform: the same handler
  and launcher, whose launches run on the emulator inside XLA's process.

`folder` holds the kernel's generated `.cu`, `.h` and `_ffi.cc`. An entry
point whose `_vjp` runs its backward pass on CUDA (issue 28) has two more
kernels there, `<kernel>_grad_lhs` and `<kernel>_grad_rhs` (and
`<kernel>_grad_pre` with an activation), each with its `_ffi.cc`: both
functions build them into the same library (`backward_kernels`).
"""

from __future__ import annotations

import importlib.util
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from gemmgen.diagnostics import install_hint
from gemmgen.harness.cuda_emu import EmuModule
from gemmgen.harness.nvcc import NvccError, gencode
from gemmgen.harness.toolchain import (
    RUNTIME_INCLUDE_DIR,
    ToolchainError,
    atomic_write,
    find_nvcc,
)

__all__ = ["backward_kernels", "compile_ffi", "emulated_ffi", "library_name", "nvcc_command",
           "xla_include_dir"]

# The backward pass's kernels of an entry point (backends/cuda/backward.py):
# d lhs and d rhs, and the pre-activation's for a kernel with an activation.
_BACKWARD_SUFFIXES = ("_grad_lhs", "_grad_rhs")
_PRE_SUFFIX = "_grad_pre"


def library_name(kernel: str) -> str:
    """The file the entry point's register() expects (its LIBRARY)."""
    return f"lib{kernel}_ffi.so"


def backward_kernels(folder: Path, kernel: str) -> tuple[str, ...]:
    """The backward kernels of `kernel` whose files `folder` holds: () for an
    entry point without a CUDA backward pass."""
    names = tuple(kernel + s for s in _BACKWARD_SUFFIXES)
    if not all((folder / f"{n}_ffi.cc").is_file() for n in names):
        return ()
    # A kernel without an activation has no pre-activation kernel, and the
    # spec may then name one of its own kernels <kernel>_grad_pre: only a
    # handler generated for this library belongs in it.
    pre = folder / f"{kernel}{_PRE_SUFFIX}_ffi.cc"
    if pre.is_file() and f"into {library_name(kernel)})" in " ".join(
            pre.read_text().replace("//", " ").split()):  # its header, however wrapped
        return (*names, kernel + _PRE_SUFFIX)
    return names


def _sources(folder: Path, kernel: str) -> list[Path]:
    """The library's translation units: each kernel's `.cu`, then each `_ffi.cc`."""
    names = (kernel, *backward_kernels(folder, kernel))
    return [folder / f"{n}.cu" for n in names] + [folder / f"{n}_ffi.cc" for n in names]


def xla_include_dir() -> Path:
    """XLA's FFI headers, as jax.ffi.include_dir() names them (found without
    importing JAX)."""
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or spec.origin is None:
        raise ToolchainError("XLA's FFI headers come with jaxlib, which is not installed: "
                             f"{install_hint('pallas')}")
    include = Path(spec.origin).parent / "include"
    if not (include / "xla" / "ffi" / "api" / "ffi.h").is_file():
        raise ToolchainError(f"{include} has no xla/ffi/api/ffi.h: jaxlib is too old for XLA's FFI")
    return include


def nvcc_command(nvcc: Path | str, folder: Path, kernel: str, archs: Sequence[str],
                 output: Path) -> list[str]:
    """The nvcc command line `gemmgen compile` runs (docs/using-the-output.md)."""
    return [
        str(nvcc), "-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC,-Wall,-Wextra",
        "-Werror", "all-warnings", *(gencode(a) for a in archs),
        f"-I{folder}", f"-I{RUNTIME_INCLUDE_DIR}", "-isystem", str(xla_include_dir()),
        *(str(p) for p in _sources(folder, kernel)), "-o", str(output),
    ]


def compile_ffi(folder: Path, kernel: str, out_dir: Path, archs: Sequence[str]) -> Path:
    """Compile `kernel`'s handler and kernel with nvcc into
    `out_dir/lib<kernel>_ffi.so` (written atomically); returns its path.

    Raises ToolchainError without nvcc or jaxlib, NvccError when nvcc fails."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise ToolchainError(f"nvcc not found: {install_hint('cuda-tools')}, set "
                             "GEMMGEN_NVCC or CUDA_HOME, or put the CUDA toolkit on PATH")
    target = out_dir / library_name(kernel)
    with tempfile.TemporaryDirectory(prefix="gemmgen-compile-") as tmp:
        built = Path(tmp) / target.name
        cmd = nvcc_command(nvcc, folder, kernel, archs, built)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise NvccError(f"{kernel}: nvcc failed:\n{(proc.stdout + proc.stderr).strip()}")
        atomic_write(target, built.read_bytes())
    return target


def emulated_ffi(folder: Path, kernel: str) -> Path:
    """`kernel`'s handler and kernel built with g++ against the CPU emulator
    (cached by content, warnings as errors); returns the library, which a
    process registers for XLA's "cpu" platform. Its launches run on the
    emulator in that process: set GG_EMU_ARCH and GG_EMU_SMEM_OPTIN
    (cuda_emu.device_env) before the first call to play another arch than an
    sm_90a."""
    cu, *others = _sources(folder, kernel)
    module = EmuModule(cu.read_text(), str(cu), include_dirs=[folder],
                       system_include_dirs=[xla_include_dir()],
                       extra_sources=[(p.read_text(), str(p)) for p in others],
                       defines={"GG_FFI_EMULATED": 1}, memcheck=False, warnings=True)
    return module.library
