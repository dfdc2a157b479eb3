"""Launch gemmgen's CUDA kernels on a real GPU through CuPy.

``GpuModule`` has the launch signature of ``cuda_emu.EmuModule``, so a test
vector runs unchanged on the emulator and on a GPU::

    from gemmgen.harness import cuda_gpu

    if reason := cuda_gpu.unavailable_reason():
        print("skipped:", reason)
    else:
        module = cuda_gpu.GpuModule(source, "gemm.cu")
        (c,) = module.launch("gemm", grid, 128, smem_bytes, args, outputs=[2])

API:

- ``unavailable_reason() -> str | None``: why no GPU launch is possible
  (no CuPy, no device), or None.
- ``device_arch() -> int``: the compute capability of the current device
  times ten plus minor (``90`` for sm_90).
- ``GpuModule(source, name_for_errors="kernel.cu", *, include_dirs=(),
  defines=None, backend="nvrtc")``: compiles with CuPy's ``RawModule``
  (``backend="nvcc"`` uses nvcc instead of NVRTC).
- ``.launch(kernel, grid, block, smem_bytes=0, args=(), outputs=(), *,
  inouts=())``: arrays are copied to the device (outputs first filled with
  0xFF bytes), NumPy scalars pass by value (``np.int32(m)``), None passes a
  null pointer; returns host copies of `outputs` then `inouts`.

CuPy is imported lazily: importing this module never needs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from gemmgen.archs import DEFAULT_DYNAMIC_SMEM
from gemmgen.harness.cuda_emu import dim3
from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR, ToolchainError, cuda_include_dir

__all__ = ["GpuModule", "device_arch", "unavailable_reason"]


def _cupy():
    import cupy  # noqa: PLC0415 - optional dependency, imported on use

    return cupy


def unavailable_reason() -> str | None:
    """Why kernels cannot run on a GPU here, or None when they can."""
    try:
        cupy = _cupy()
    except ImportError as e:  # not installed, or installed without its CUDA libraries
        if e.name == "cupy":
            return "CuPy is not installed (pip install 'gemmgen[gpu]')"
        return f"CuPy cannot be imported ({type(e).__name__}: {e})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError without a driver, among others
        return f"no usable CUDA device ({e})"
    return None if count > 0 else "no CUDA device"


def device_arch() -> int:
    """The current device's compute capability as an int: 90 for sm_90."""
    return int(_cupy().cuda.Device().compute_capability)


class GpuModule:
    """A CUDA source compiled for the current GPU; see the module docstring."""

    def __init__(
        self,
        source: str,
        name_for_errors: str = "kernel.cu",
        *,
        include_dirs: Iterable[str | os.PathLike[str]] = (),
        defines: Mapping[str, str | int] | None = None,
        backend: str = "nvrtc",
    ) -> None:
        reason = unavailable_reason()
        if reason:
            raise ToolchainError(f"{name_for_errors}: cannot run on a GPU: {reason}")
        cupy = _cupy()
        include = cuda_include_dir()
        options = [
            "-std=c++17",
            f"-I{RUNTIME_INCLUDE_DIR}",
            f"-I{include}",
            *([f"-I{include / 'cccl'}"] if (include / "cccl").is_dir() else []),
            *(f"-I{Path(d).resolve()}" for d in include_dirs),
            *(f"-D{k}={v}" for k, v in sorted((defines or {}).items())),
        ]
        self.name = name_for_errors
        self._module = cupy.RawModule(code=source, options=tuple(options), backend=backend)
        self._module.compile()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **kwargs) -> GpuModule:
        path = Path(path)
        include_dirs = (path.parent, *kwargs.pop("include_dirs", ()))
        return cls(path.read_text(), str(path), include_dirs=include_dirs, **kwargs)

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
        max_dynamic_smem: int | None = None,
    ) -> list[np.ndarray]:
        """Runs `kernel` once and waits; returns the arrays at `outputs`, then
        `inouts`. `max_dynamic_smem` is passed to cudaFuncSetAttribute
        (None: `smem_bytes` when that is over 48 KiB), as EmuModule.launch
        takes it."""
        cupy = _cupy()
        function = self._module.get_function(kernel)
        if max_dynamic_smem is not None:
            function.max_dynamic_shared_size_bytes = int(max_dynamic_smem)
        elif smem_bytes > DEFAULT_DYNAMIC_SMEM:
            function.max_dynamic_shared_size_bytes = int(smem_bytes)
        device_args: list[object] = []
        for i, arg in enumerate(args):
            if arg is None:
                device_args.append(np.uint64(0))
            elif isinstance(arg, np.ndarray):
                buffer = cupy.asarray(np.ascontiguousarray(arg).view(np.uint8).reshape(-1))
                if i in outputs:
                    buffer.fill(0xFF)
                device_args.append(buffer)
            elif isinstance(arg, np.generic):
                device_args.append(arg)
            else:
                raise TypeError(f"argument #{i} of {kernel}: expected a NumPy array, a NumPy scalar or None")
        function(dim3(grid, "grid"), dim3(block, "block"), tuple(device_args), shared_mem=int(smem_bytes))
        cupy.cuda.Device().synchronize()
        results = []
        for i in (*outputs, *inouts):
            like = args[i]
            assert isinstance(like, np.ndarray)
            host = cupy.asnumpy(device_args[i])
            results.append(host.view(like.dtype).reshape(like.shape))
        return results
