"""Build the libraries of the kernels' C ABI that the PyTorch ops load
(`gemmgen compile --torch`).

Every CUDA kernel's `.cu` defines `gg_<kernel>_launch()`, the C ABI of
`launch_<kernel>()` (its `.h` declares it; the XLA FFI handler calls it too).
`generated/<stem>/torch/<kernel>.py` calls it through ctypes from one of two
shared libraries built from that `.cu` alone:

- `compile_abi(folder, kernel, out_dir, archs)`: `lib<kernel>.so`, with nvcc
  for the GPU (SASS for each arch, the CUDA runtime linked statically, so it
  shares PyTorch's device and streams through the driver);
- `emulated_abi(folder, kernel)`: the same source with g++ against gemmgen's
  CPU emulator (`cuda_emu`), whose launches run on the CPU in the calling
  process: what the ops run on CPU tensors (`lib<kernel>_emu.so`).

`folder` holds the kernel's generated `.cu` and `.h` and the runtime headers.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from gemmgen.diagnostics import install_hint
from gemmgen.harness.cuda_emu import EmuModule
from gemmgen.harness.nvcc import NvccError, gencode
from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR, ToolchainError, atomic_write, find_nvcc

__all__ = ["compile_abi", "emulated_abi", "library_name", "nvcc_command"]


def library_name(kernel: str, emulated: bool = False) -> str:
    """The file the op's load() takes (its LIBRARY / EMULATED_LIBRARY)."""
    return f"lib{kernel}_emu.so" if emulated else f"lib{kernel}.so"


def nvcc_command(nvcc: Path | str, folder: Path, kernel: str, archs: Sequence[str],
                 output: Path) -> list[str]:
    """The nvcc command line `gemmgen compile --torch` runs."""
    return [
        str(nvcc), "-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC,-Wall,-Wextra",
        "-Werror", "all-warnings", *(gencode(a) for a in archs),
        f"-I{folder}", f"-I{RUNTIME_INCLUDE_DIR}", str(folder / f"{kernel}.cu"), "-o", str(output),
    ]


def compile_abi(folder: Path, kernel: str, out_dir: Path, archs: Sequence[str]) -> Path:
    """`kernel`'s .cu built with nvcc into `out_dir/lib<kernel>.so` (written
    atomically); returns its path. ToolchainError without nvcc, NvccError
    when it fails."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise ToolchainError(f"nvcc not found: {install_hint('cuda-tools')}, set "
                             "GEMMGEN_NVCC or CUDA_HOME, or put the CUDA toolkit on PATH")
    target = out_dir / library_name(kernel)
    with tempfile.TemporaryDirectory(prefix="gemmgen-compile-") as tmp:
        built = Path(tmp) / target.name
        proc = subprocess.run(nvcc_command(nvcc, folder, kernel, archs, built),
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise NvccError(f"{kernel}: nvcc failed:\n{(proc.stdout + proc.stderr).strip()}")
        atomic_write(target, built.read_bytes())
    return target


def emulated_abi(folder: Path, kernel: str) -> Path:
    """`kernel`'s .cu built with g++ against the CPU emulator (cached by
    content, warnings as errors); returns the library. Set GG_EMU_ARCH and
    GG_EMU_SMEM_OPTIN (cuda_emu.device_env) before its first launch to play
    another arch than an sm_90a."""
    cu = folder / f"{kernel}.cu"
    module = EmuModule(cu.read_text(), str(cu), include_dirs=[folder], memcheck=False,
                       warnings=True)
    return module.library
