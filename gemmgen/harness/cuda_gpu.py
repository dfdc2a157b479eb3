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
  inouts=(), max_dynamic_smem=None, buffers=())``: arrays are copied to the
  device (outputs first filled with 0xFF bytes), NumPy scalars pass by value
  (``np.int32(m)``), None passes a null pointer, a ``cuda_emu.TensorMap`` is
  encoded with the driver's cuTensorMapEncodeTiled against its buffer's
  device pointer and passed as the 128-byte ``CUtensorMap``; `buffers` are
  device buffers that are not kernel parameters (tensor maps only), indexed
  on from ``len(args)`` as in ``EmuModule.launch``; returns host copies of
  `outputs` then `inouts`.
- ``encode_tensor_map(tensor_map, address, encoder=None) -> bytes``: the
  128 bytes of the CUtensorMap of `tensor_map` over device address
  `address` (its buffer's pointer; the map's offset is added), from the
  driver's cuTensorMapEncodeTiled (libcuda.so.1 through ctypes: no CUDA
  toolkit needed) or `encoder`, a function with its signature
  (``ENCODE_TILED``); raises ``TensorMapEncodeError`` naming the CUresult.
- ``tensor_map_argument(map_bytes)``: what CuPy passes by value for a
  ``const __grid_constant__ CUtensorMap`` parameter (a NumPy array of one
  128-byte element: CuPy passes a size-one NumPy array by value).

CuPy is imported lazily: importing this module never needs it.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from gemmgen.archs import DEFAULT_DYNAMIC_SMEM
from gemmgen.diagnostics import install_hint
from gemmgen.harness.cuda_emu import TensorMap, dim3, tensor_map_problem
from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR, ToolchainError, cuda_include_dir

__all__ = [
    "ENCODE_TILED",
    "GpuLaunchError",
    "GpuModule",
    "TensorMapEncodeError",
    "device_arch",
    "driver_encoder",
    "encode_tensor_map",
    "tensor_map_argument",
    "unavailable_reason",
]


class GpuLaunchError(RuntimeError):
    """A launch refused on the host, before the kernel was launched."""


class TensorMapEncodeError(GpuLaunchError):
    """cuTensorMapEncodeTiled returned an error: `code` is the CUresult, `name` its name."""

    def __init__(self, message: str, code: int, name: str) -> None:
        super().__init__(message)
        self.code = code
        self.name = name


# cuTensorMapEncodeTiled (cuda.h): CUresult (CUtensorMap* tensorMap,
# CUtensorMapDataType, cuuint32_t tensorRank, void* globalAddress,
# const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
# const cuuint32_t* boxDim, const cuuint32_t* elementStrides,
# CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
# CUtensorMapFloatOOBfill). The enums and CUresult are C enums: int-sized.
ENCODE_TILED = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32),
    ctypes.POINTER(ctypes.c_uint32), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
)

# sizeof(CUtensorMap), and its alignment in CUDA 13's cuda.h (the encoder requires 64).
_TENSOR_MAP_BYTES, _TENSOR_MAP_ALIGN = 128, 128

# The CUresults an encode can return without a driver to name them.
_RESULT_NAMES = {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 3: "CUDA_ERROR_NOT_INITIALIZED",
                 4: "CUDA_ERROR_DEINITIALIZED", 201: "CUDA_ERROR_INVALID_CONTEXT", 801: "CUDA_ERROR_NOT_SUPPORTED"}


@functools.cache
def _libcuda() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


@functools.cache
def driver_encoder() -> Callable[..., int]:
    """The driver's cuTensorMapEncodeTiled (libcuda.so.1, the library every
    CUDA program loads: no toolkit and no link step needed)."""
    try:
        return ENCODE_TILED(("cuTensorMapEncodeTiled", _libcuda()))
    except (OSError, AttributeError) as e:  # no driver, or one older than CUDA 12.0
        raise GpuLaunchError(f"the CUDA driver's cuTensorMapEncodeTiled is not available: {e}") from None


def _result_name(code: int) -> str:
    if code in _RESULT_NAMES:
        return _RESULT_NAMES[code]
    try:
        get_name = _libcuda().cuGetErrorName
    except OSError:
        return f"CUresult {code}"
    name = ctypes.c_char_p()
    get_name.argtypes = (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))
    get_name.restype = ctypes.c_int
    if get_name(code, ctypes.byref(name)) != 0 or name.value is None:
        return f"CUresult {code}"
    return name.value.decode()


def encode_tensor_map(tensor_map: TensorMap, address: int, encoder: Callable[..., int] | None = None) -> bytes:
    """The 128 bytes of `tensor_map`'s CUtensorMap over the device buffer at
    `address` (plus the map's offset), as `encoder` (default: the driver's
    cuTensorMapEncodeTiled) writes them into a 128-byte aligned CUtensorMap.
    Raises TensorMapEncodeError with the CUresult when the encoder refuses."""
    fn = driver_encoder() if encoder is None else encoder
    rank = tensor_map.rank
    estrides = tensor_map.element_strides or (1,) * rank
    dims = (ctypes.c_uint64 * max(rank, 1))(*tensor_map.global_dims)
    strides = (ctypes.c_uint64 * max(rank - 1, 1))(*tensor_map.global_strides_bytes)
    box = (ctypes.c_uint32 * max(rank, 1))(*tensor_map.box)
    element_strides = (ctypes.c_uint32 * max(rank, 1))(*estrides)
    storage = ctypes.create_string_buffer(_TENSOR_MAP_BYTES + _TENSOR_MAP_ALIGN)
    map_address = -ctypes.addressof(storage) % _TENSOR_MAP_ALIGN + ctypes.addressof(storage)
    global_address = int(address) + tensor_map.offset_bytes
    code = fn(map_address, tensor_map.dtype, rank, global_address, dims, strides, box, element_strides,
              tensor_map.interleave, tensor_map.swizzle, tensor_map.l2_promotion, tensor_map.oob_fill)
    if code != 0:
        name = _result_name(code)
        raise TensorMapEncodeError(
            f"cuTensorMapEncodeTiled returned {name} ({code}) for the map over address {global_address:#x} "
            f"({tensor_map.describe()})", code, name)
    return ctypes.string_at(map_address, _TENSOR_MAP_BYTES)


def tensor_map_argument(map_bytes: bytes) -> np.ndarray:
    """A ``const __grid_constant__ CUtensorMap`` argument for a CuPy kernel
    call: CuPy passes a NumPy array of size one by value (a pointer to its
    bytes in cuLaunchKernel's kernelParams, whose size the kernel's
    parameter decides), so one 128-byte element is the map."""
    if len(map_bytes) != _TENSOR_MAP_BYTES:
        raise ValueError(f"a CUtensorMap has {_TENSOR_MAP_BYTES} bytes, got {len(map_bytes)}")
    return np.frombuffer(bytes(map_bytes), dtype=np.dtype((np.void, _TENSOR_MAP_BYTES))).copy()


def kernel_arguments(kernel: str, args: Sequence[object], buffers: Sequence[np.ndarray],
                     device: Mapping[int, object], pointers: Mapping[int, int],
                     encoder: Callable[..., int] | None = None) -> list[object]:
    """The arguments of a CuPy kernel call for `args`: `device[i]` (the
    device copy) for an array, the 128-byte map for a TensorMap (encoded
    against ``pointers[buffer]``, the device address of entry `buffer` of
    ``[*args, *buffers]``, and checked to stay inside that array), a zero
    pointer for None, a NumPy scalar as it is. Raises GpuLaunchError (or
    TensorMapEncodeError) before anything is launched."""
    entries = [*args, *buffers]
    out: list[object] = []
    for i, arg in enumerate(args):
        if arg is None:
            out.append(np.uint64(0))
        elif isinstance(arg, np.ndarray):
            out.append(device[i])
        elif isinstance(arg, TensorMap):
            if why := tensor_map_problem(kernel, entries, i):
                raise GpuLaunchError(why)
            target = entries[arg.buffer]
            assert isinstance(target, np.ndarray)
            try:
                map_bytes = encode_tensor_map(arg, pointers[arg.buffer], encoder)
            except TensorMapEncodeError as e:
                raise TensorMapEncodeError(f"{kernel}: argument #{i} (a tensor map over entry #{arg.buffer}): {e}",
                                           e.code, e.name) from None
            extent = arg.extent_bytes()
            if extent is not None and arg.offset_bytes + extent > target.nbytes:
                raise GpuLaunchError(
                    f"{kernel}: argument #{i} (a tensor map over entry #{arg.buffer}, {target.nbytes} bytes) "
                    f"reaches {extent} bytes past the offset {arg.offset_bytes}, beyond the array's end "
                    f"({arg.describe()})")
            out.append(tensor_map_argument(map_bytes))
        elif isinstance(arg, np.generic):
            out.append(arg)
        else:
            raise TypeError(f"argument #{i} of {kernel}: expected a NumPy array, a NumPy scalar, a TensorMap or None")
    return out


def _cupy():
    import cupy  # noqa: PLC0415 - optional dependency, imported on use

    return cupy


def unavailable_reason() -> str | None:
    """Why kernels cannot run on a GPU here, or None when they can."""
    try:
        cupy = _cupy()
    except ImportError as e:  # not installed, or installed without its CUDA libraries
        if e.name == "cupy":
            return f"CuPy is not installed ({install_hint('gpu')})"
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
        buffers: Sequence[np.ndarray] = (),
    ) -> list[np.ndarray]:
        """Runs `kernel` once and waits; returns the arrays at `outputs`, then
        `inouts`. `max_dynamic_smem` is passed to cudaFuncSetAttribute
        (None: `smem_bytes` when that is over 48 KiB), as EmuModule.launch
        takes it. A TensorMap in `args` is encoded with the driver against
        its buffer's device pointer; `buffers` are arrays that are not
        kernel parameters (index ``len(args) + j``), as in EmuModule.launch."""
        cupy = _cupy()
        entries = [*args, *buffers]
        for j, b in enumerate(buffers):
            if not isinstance(b, np.ndarray):
                raise TypeError(f"buffers[{j}] of {kernel}: expected a NumPy array, got {type(b).__name__}")
        for i in (*outputs, *inouts):
            if not 0 <= i < len(entries) or not isinstance(entries[i], np.ndarray):
                raise ValueError(f"output index {i} of {kernel} does not name an array argument")
        function = self._module.get_function(kernel)
        if max_dynamic_smem is not None:
            function.max_dynamic_shared_size_bytes = int(max_dynamic_smem)
        elif smem_bytes > DEFAULT_DYNAMIC_SMEM:
            function.max_dynamic_shared_size_bytes = int(smem_bytes)
        device: dict[int, object] = {}
        for i, arg in enumerate(entries):
            if isinstance(arg, np.ndarray):
                buffer = cupy.asarray(np.ascontiguousarray(arg).view(np.uint8).reshape(-1))
                if i in outputs:
                    buffer.fill(0xFF)
                device[i] = buffer
        pointers = {i: int(buffer.data.ptr) for i, buffer in device.items()}
        device_args = kernel_arguments(kernel, args, buffers, device, pointers)
        function(dim3(grid, "grid"), dim3(block, "block"), tuple(device_args), shared_mem=int(smem_bytes))
        cupy.cuda.Device().synchronize()
        results = []
        for i in (*outputs, *inouts):
            like = entries[i]
            assert isinstance(like, np.ndarray)
            host = cupy.asnumpy(device[i])
            results.append(host.view(like.dtype).reshape(like.shape))
        return results


def _device_bits(cupy, x: np.ndarray):
    """A host array on the device; bf16 / FP8 as the unsigned integers of
    their bits (CuPy has neither dtype)."""
    if x.dtype.name == "bfloat16":
        x = x.view(np.uint16)
    elif x.dtype.name.startswith("float8"):
        x = x.view(np.uint8)
    return cupy.asarray(x)


def call_launcher(launcher, inputs: Mapping[str, object], *, mma_sync: bool = False,
                  device_inputs: Mapping[str, object] | None = None) -> tuple[np.ndarray, ...]:
    """Run a generated CuPy launcher on the GPU: `inputs` (host arrays and
    NumPy scalars, as `reference` takes them) copied to the device, every
    output the call may leave out passed poisoned (0xFF bytes), and the
    outputs copied back in their storage dtypes (ml_dtypes for bf16 / FP8).
    `mma_sync` makes the launcher take the path every arch runs even where
    the device has a Hopper one (its device_sm() reports no SM count).
    `device_inputs` are already on the device (then `inputs` only shapes the
    outputs)."""
    import ml_dtypes

    cupy = _cupy()
    dev = dict(device_inputs) if device_inputs is not None else {
        k: (_device_bits(cupy, v) if isinstance(v, np.ndarray) and v.ndim else v)
        for k, v in inputs.items()}
    shapes = launcher.output_shapes(launcher.validate(**inputs))
    for name, shape in shapes.items():
        if name not in dev and name in launcher.MAY_BE_NONE:
            dtype = np.dtype(launcher._VIEWS.get(launcher.DTYPES[name], launcher.DTYPES[name]))
            dev[name] = cupy.full(int(np.prod(shape)) * dtype.itemsize, 0xFF,
                                  np.uint8).view(dtype).reshape(shape)
    real = launcher.device_sm
    if mma_sync:
        sm = real()[0]
        launcher.device_sm = lambda: (sm, 0)
    try:
        outs = getattr(launcher, launcher.NAME)(**dev)
    finally:
        launcher.device_sm = real
    outs = outs if isinstance(outs, tuple) else (outs,)
    host = []
    for o, name in zip(outs, launcher.OUTPUTS):
        want = launcher.DTYPES[name]
        h = cupy.asnumpy(o)
        host.append(h.view(getattr(ml_dtypes, want)) if want in ("bfloat16", "float8_e4m3fn",
                                                                  "float8_e5m2") else h.view(want))
    return tuple(host)
