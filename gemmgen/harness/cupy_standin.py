"""A CPU stand-in for the part of CuPy and of the CUDA driver that the
generated CuPy launchers use, so that a launcher's own code runs end to end
here: NVRTC build, module load, function lookup, the shared-memory opt-in
attribute, argument packing (pointers, scalars, tensor maps by value), the
launch with grid / block / shared memory / stream. Each launch executes the
emulator build of the source the cubin was compiled from.

What is real: NVRTC (CuPy's own `cupy_backends.cuda.libs.nvrtc`, over the
nvidia-cuda-nvrtc library) compiles the launcher's source with the options
the launcher passes, and the cubin it returns is what `Module.load` checks
(an ELF for the CUDA machine, built for an arch the device runs) and what
`get_function` looks the entry up in (its symbol table). The tensor maps are
encoded by the emulator's cuTensorMapEncodeTiled, reached through
`ctypes.CDLL("libcuda.so.1")` as a C function with the driver's signature,
so the launcher's ctypes declaration and argument order are what the C code
receives.

What the stand-in checks, as CuPy and the driver do (CuPy's
cupy/cuda/function.pyx `_pointer` and `Function.__call__`; the driver API's
cuModuleLoadData, cuModuleGetFunction, cuFuncSetAttribute):

- a kernel argument is None (a null pointer), a CuPy array (its device
  pointer), a NumPy array of size one (passed by value: a tensor map), a
  NumPy scalar or a Python int / float / bool (as CuPy: int64 / float64 /
  bool); a NumPy array of any other size is a TypeError, as in CuPy;
- grid and block are tuples (CuPy types them `tuple`);
- cuFuncSetAttribute takes attribute 8 (max dynamic shared memory) up to the
  device's opt-in limit;
- cuLaunchKernelEx (the cluster launch, through ctypes: CuPy's RawKernel
  has none): the driver's checks, in cupy_standin_driver; `launches`
  records each launch's cluster and attribute ids;
- device memory comes from `cupy.empty` & co. (poisoned: 0xFF bytes) and
  from foreign arrays over it (`UnownedMemory` must lie inside an
  allocation, as a real pointer must).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import struct
import sys
import time
import types
from pathlib import Path

import numpy as np

from gemmgen.archs import parse_arch, sm_count
from gemmgen.harness import cuda_gpu
from gemmgen.harness.cuda_emu import EmuModule, TensorMap
from gemmgen.harness.cubin import EM_CUDA, cubin_arch, cubin_functions
from gemmgen.harness.cupy_standin_driver import (  # noqa: F401 (re-exported)
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
    CUDA_ERROR_INVALID_CLUSTER_SIZE, CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_NOT_FOUND, LAUNCH_ATTRIBUTE, LAUNCH_CONFIG,
    LAUNCH_KERNEL_EX, MAX_CLUSTER_BLOCKS, CUDADriverError, launch_ex,
)
from gemmgen.harness.nvcc import shared_memory_limit

_POINTER_TYPES = {np.dtype(c).type for c in "?bhilqBHILQefdFD"}  # CuPy's _pointer_numpy_types


class CUDARuntimeError(RuntimeError):
    pass


class _Memory:
    """Device memory: 256-byte aligned host buffers, by base address."""

    def __init__(self) -> None:
        self.blocks: dict[int, np.ndarray] = {}

    def allocate(self, nbytes: int) -> int:
        raw = np.full(max(int(nbytes), 1) + 256, 0xFF, np.uint8)
        start = -raw.ctypes.data % 256
        block = raw[start:start + max(int(nbytes), 1)]
        self.blocks[block.ctypes.data] = block
        return block.ctypes.data

    def find(self, address: int, nbytes: int = 1) -> tuple[int, np.ndarray]:
        for base, block in self.blocks.items():
            if base <= address and address + nbytes <= base + block.size:
                return base, block
        raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, f"{nbytes} bytes at {address:#x} are not device memory")


def install(folder: Path, arch: str, *, driver: bool = True, launch: bool = True,
            **mode) -> contextlib.AbstractContextManager:
    """A context in which `import cupy` is the stand-in of an `arch` device
    (the launcher's .cu and .h in `folder`) and, with `driver`,
    `ctypes.CDLL("libcuda.so.1")` is the emulator's encoder; it yields the
    stand-in. `mode` goes to each emulated launch (workers, schedule). With
    `launch` False a launch is checked and recorded but not run (to time the
    launcher's host work)."""
    cupy = StandinCupy(folder, arch, **mode)
    cupy.run_launches = launch
    return _installed(cupy, driver)


@contextlib.contextmanager
def _installed(cupy: StandinCupy, driver: bool):
    from cupy_backends.cuda.libs import nvrtc

    nvrtc.getVersion()  # its first call loads libnvrtc through the real CuPy
    saved = {name: sys.modules.get(name) for name in ("cupy",)}
    real = {name: getattr(nvrtc, name) for name in ("createProgram", "getCUBIN")}
    sources: dict[int, tuple[str, str]] = {}

    def create_program(src, name, headers, include_names):
        program = real["createProgram"](src, name, headers, include_names)
        sources[program] = (src, name)
        return program

    def get_cubin(program):
        cubin = real["getCUBIN"](program)
        cupy.compiled[cubin] = (*sources[program], cupy.options_seen[-1] if cupy.options_seen else ())
        return cubin

    compile_program = nvrtc.compileProgram

    def compile_recorded(program, options):
        cupy.options_seen.append(tuple(options))
        return compile_program(program, options)

    cdll = ctypes.CDLL

    def standin_cdll(name, *args, **kwargs):
        if driver and name == "libcuda.so.1":
            return cupy.libcuda()
        return cdll(name, *args, **kwargs)

    sys.modules["cupy"] = cupy
    nvrtc.createProgram, nvrtc.getCUBIN, nvrtc.compileProgram = create_program, get_cubin, compile_recorded
    ctypes.CDLL = standin_cdll
    try:
        yield cupy
    finally:
        ctypes.CDLL = cdll
        nvrtc.createProgram, nvrtc.getCUBIN, nvrtc.compileProgram = (
            real["createProgram"], real["getCUBIN"], compile_program)
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


class StandinCupy(types.ModuleType):
    """`cupy` for one emulated device."""

    def __init__(self, folder: Path, arch: str, **mode) -> None:
        super().__init__("cupy")
        self.folder, self.arch, self.mode = Path(folder), arch, mode
        self.sm, _ = parse_arch(arch)
        self.optin, self.sms = shared_memory_limit(arch), sm_count(arch)
        self.memory = _Memory()
        self.compiled: dict[bytes, tuple[str, str, tuple[str, ...]]] = {}
        self.options_seen: list[tuple[str, ...]] = []
        self.launches: list[dict] = []  # what each launch got
        self.asked: list[tuple[int, int]] = []  # the device attributes queried
        self.refused: list[str] = []  # why the driver calls that failed did
        self.maps: dict[bytes, dict] = {}  # encoded tensor map -> its encode call's arguments
        self.library: Path | None = None  # the emulator library of the last loaded module
        self._callbacks: list = []
        self._attributes: dict[int, int] = {}
        self.functions: dict[int, object] = {}  # CUfunction -> the stand-in's Function
        self.ndarray = type("ndarray", (StandinArray,), {"_cupy": self})
        self.cuda = _cuda_namespace(self)

    # -- arrays ------------------------------------------------------------
    def empty(self, shape, dtype) -> StandinArray:
        return self.ndarray(shape, dtype)

    def full(self, shape, value, dtype) -> StandinArray:
        a = self.empty(shape, dtype)
        a.host()[...] = value
        return a

    def asarray(self, x) -> StandinArray:
        if isinstance(x, StandinArray):
            return x
        if hasattr(x, "__cuda_array_interface__"):  # no copy: a view of the same memory
            cai = x.__cuda_array_interface__
            dtype = np.dtype(cai["typestr"])
            shape = tuple(cai["shape"])
            address = int(cai["data"][0])
            strides = cai.get("strides")
            span = dtype.itemsize * int(np.prod(shape))
            self.memory.find(address, max(span, 1))
            return self.ndarray(shape, dtype, memptr=types.SimpleNamespace(ptr=address), strides=strides)
        x = np.ascontiguousarray(x)
        a = self.empty(x.shape, x.dtype)
        a.host()[...] = x
        return a

    @staticmethod
    def asnumpy(a) -> np.ndarray:
        return a.host().copy()

    # -- the driver ----------------------------------------------------------
    def libcuda(self):
        """`libcuda.so.1`: cuTensorMapEncodeTiled, a C function with the
        driver's signature that records its arguments and returns what the
        emulator's encoder returns."""
        if self.library is None:
            raise OSError("libcuda.so.1: the stand-in has no module loaded, so no encoder")
        emulated = cuda_gpu.ENCODE_TILED(("gg_emu_cuTensorMapEncodeTiled", ctypes.CDLL(str(self.library))))

        def encode(tensor_map, dtype, rank, address, dims, strides, box, estrides, interleave, swizzle,
                   l2, oob):
            code = emulated(tensor_map, dtype, rank, address, dims, strides, box, estrides, interleave,
                            swizzle, l2, oob)
            if code == 0:
                self.maps[ctypes.string_at(tensor_map, 128)] = dict(
                    dtype=dtype, address=address, dims=tuple(dims[i] for i in range(rank)),
                    strides=tuple(strides[i] for i in range(rank - 1)), box=tuple(box[i] for i in range(rank)),
                    estrides=tuple(estrides[i] for i in range(rank)), interleave=interleave, swizzle=swizzle,
                    l2=l2, oob=oob)
            return code

        callback = cuda_gpu.ENCODE_TILED(encode)
        launch = LAUNCH_KERNEL_EX(self._launch_kernel_ex)
        self._callbacks += [callback, launch]
        # Bare C function pointers: the caller declares their argtypes, as with the real library.
        return types.SimpleNamespace(
            cuTensorMapEncodeTiled=ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.cast(callback, ctypes.c_void_p).value),
            cuLaunchKernelEx=ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.cast(launch, ctypes.c_void_p).value))

    def _launch_kernel_ex(self, config: int | None, function: int | None, params: int | None,
                          extra: int | None) -> int:
        """cuLaunchKernelEx(const CUlaunchConfig*, CUfunction, void** kernelParams, void** extra)."""
        try:
            launch_ex(self, config or 0, function or 0, params or 0, extra or 0)
        except CUDADriverError as e:
            self.refused.append(str(e))
            return e.code
        return 0

class StandinArray:
    """`cupy.ndarray`: shape, dtype, strides over stand-in device memory;
    constructed as CuPy's, `ndarray(shape, dtype, memptr=None, strides=None)`
    (each stand-in has its own subclass, bound to its memory)."""

    _cupy: StandinCupy

    def __init__(self, shape, dtype=float, memptr=None, strides=None) -> None:
        shape = (shape,) if isinstance(shape, (int, np.integer)) else shape
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape))
        self.nbytes = self.size * self.dtype.itemsize
        self.ndim = len(self.shape)
        contiguous = tuple(int(np.prod(self.shape[i + 1:])) * self.dtype.itemsize for i in range(self.ndim))
        self.strides = contiguous if strides is None else tuple(int(s) for s in strides)
        address = self._cupy.memory.allocate(self.nbytes) if memptr is None else int(memptr.ptr)
        # CuPy's MemoryPointer: the address and the device it is on (the
        # stand-in's is device 0; a foreign pointer may say otherwise).
        device = 0 if memptr is None else getattr(memptr, "device_id", 0)
        self.data = types.SimpleNamespace(ptr=address, device_id=device)
        self.flags = {"C_CONTIGUOUS": self.strides == contiguous or self.size <= 1}

    def host(self) -> np.ndarray:
        """A NumPy view of the device memory."""
        base, block = self._cupy.memory.find(self.data.ptr, max(self.nbytes, 1))
        return np.ndarray(self.shape, self.dtype, buffer=block.data, offset=self.data.ptr - base,
                          strides=self.strides)

    def _at(self, shape, dtype, strides=None) -> StandinArray:
        return type(self)(shape, dtype, memptr=self.data, strides=strides)

    def view(self, dtype) -> StandinArray:
        dtype = np.dtype(dtype)
        assert dtype.itemsize == self.dtype.itemsize, "the stand-in views same-size dtypes only"
        return self._at(self.shape, dtype, self.strides)

    def reshape(self, shape) -> StandinArray:
        assert self.flags["C_CONTIGUOUS"]
        return self._at(shape, self.dtype)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                "strides": None if self.flags["C_CONTIGUOUS"] else self.strides, "version": 3}


def _cuda_namespace(cupy: StandinCupy):
    memory = cupy.memory

    class Stream:
        null: Stream
        _current: list[Stream] = []

        def __init__(self, ptr: int | None = None) -> None:
            self.ptr = next(_stream_ids) if ptr is None else int(ptr)

        @classmethod
        def from_external(cls, obj) -> Stream:
            version, ptr = obj.__cuda_stream__()
            assert version == 0, f"__cuda_stream__ version {version}"
            return cls(ptr)

        def __enter__(self):
            Stream._current.append(self)
            return self

        def __exit__(self, *exc):
            Stream._current.pop()

    Stream.null = Stream(0)

    def get_current_stream():
        return Stream._current[-1] if Stream._current else Stream.null

    class UnownedMemory:
        def __init__(self, ptr: int, size: int, owner, device_id: int = -1) -> None:
            memory.find(int(ptr), max(int(size), 1))
            self.ptr, self.size, self.owner, self.device_id = int(ptr), int(size), owner, device_id

    class MemoryPointer:
        def __init__(self, mem, offset: int) -> None:
            self.mem, self.ptr = mem, mem.ptr + int(offset)
            # As CuPy: an UnownedMemory of device -1 is on the device its pointer is on (0 here).
            self.device_id = mem.device_id if mem.device_id >= 0 else 0

    def device_get_attribute(attribute: int, device: int) -> int:
        cupy.asked.append((attribute, device))
        if device != 0:
            raise CUDARuntimeError(f"cudaErrorInvalidDevice: device {device}")
        values = {16: cupy.sms, 97: cupy.optin}
        if attribute not in values:
            raise CUDARuntimeError(f"the stand-in has no device attribute {attribute}")
        return values[attribute]

    def device_properties(device: int) -> dict:
        device_get_attribute(16, device)
        return {"name": f"CPU emulator ({cupy.arch})".encode(), "major": cupy.sm // 10, "minor": cupy.sm % 10,
                "multiProcessorCount": cupy.sms, "sharedMemPerBlockOptin": cupy.optin}

    runtime = types.SimpleNamespace(
        cudaDevAttrMultiProcessorCount=16, cudaDevAttrMaxSharedMemoryPerBlockOptin=97,
        deviceGetAttribute=device_get_attribute, getDeviceCount=lambda: 1, getDevice=lambda: 0,
        getDeviceProperties=device_properties, CUDARuntimeError=CUDARuntimeError)

    class Device:
        def __init__(self, device: int | None = None) -> None:
            self.id = 0 if device is None else int(device)
            self.compute_capability = str(cupy.sm)

        def synchronize(self) -> None:
            """Every emulated launch has finished when its call returns."""

    class Event:
        """A CUDA event: the host clock when recorded (emulated launches run
        synchronously), so elapsed times are the emulator's, not a GPU's."""

        def __init__(self) -> None:
            self.time: float | None = None

        def record(self, stream=None) -> None:
            self.time = time.perf_counter()

        def synchronize(self) -> None:
            if self.time is None:
                raise CUDARuntimeError("cudaErrorInvalidResourceHandle: the event was never recorded")

    def get_elapsed_time(start: Event, stop: Event) -> float:
        start.synchronize()
        stop.synchronize()
        return (stop.time - start.time) * 1e3

    def func_set_attribute(function: int, attribute: int, value: int) -> None:
        if attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, f"the stand-in has no function attribute {attribute}")
        if not 0 <= value <= cupy.optin:
            raise CUDADriverError(CUDA_ERROR_INVALID_VALUE,
                                  f"{value} bytes of dynamic shared memory, over the opt-in {cupy.optin}")
        cupy._attributes[int(function)] = int(value)

    driver = types.SimpleNamespace(funcSetAttribute=func_set_attribute, CUDADriverError=CUDADriverError)

    class Module:
        def __init__(self) -> None:
            self.cubin: bytes | None = None

        def load(self, cubin: bytes) -> None:
            if not isinstance(cubin, bytes) or cubin[:4] != b"\x7fELF":
                raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, "cuModuleLoadData: not an ELF image")
            shoff, = struct.unpack_from("<Q", cubin, 40)
            shentsize, shnum = struct.unpack_from("<HH", cubin, 58)
            if len(cubin) < shoff + shentsize * shnum:
                raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, f"cuModuleLoadData: a truncated ELF image "
                                      f"({len(cubin)} bytes, its section headers end at {shoff + shentsize * shnum})")
            (machine,) = struct.unpack_from("<H", cubin, 18)
            built = cubin_arch(cubin)
            if machine != EM_CUDA or built // 10 != cupy.sm // 10 or built > cupy.sm:
                raise CUDADriverError(CUDA_ERROR_NO_BINARY_FOR_GPU,
                                      f"a cubin for sm_{built} on a device of compute capability {cupy.sm}")
            if cubin not in cupy.compiled:
                raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, "a cubin the stand-in did not see NVRTC build")
            source, name, options = cupy.compiled[cubin]
            dirs = [o[2:] for o in options if o.startswith("-I") and not (Path(o[2:]) / "cuda_bf16.h").is_file()]
            where = str(Path(dirs[0]) / name) if dirs else name
            self.cubin, self.emu = cubin, EmuModule(source, where, include_dirs=dirs)
            self.functions = cubin_functions(cubin)
            cupy.library = self.emu.library

        def get_function(self, name: str):
            if not isinstance(name, str):
                raise TypeError(f"get_function takes a str, got {type(name).__name__}")
            if self.cubin is None or name not in self.functions:
                raise CUDADriverError(CUDA_ERROR_NOT_FOUND, f"cuModuleGetFunction: no kernel {name!r}")
            return Function(self, name)

    class Function:
        def __init__(self, module: Module, name: str) -> None:
            self.module, self.name, self.ptr = module, name, next(_function_ids)
            cupy.functions[self.ptr] = self

        def __call__(self, grid, block, args, shared_mem: int = 0, stream=None,
                     enable_cooperative_groups: bool = False, *, cluster=(1, 1, 1), attribute_ids=()):
            """CuPy's call; `cluster` and `attribute_ids` are the stand-in's
            cuLaunchKernelEx's, which comes through here."""
            if not isinstance(grid, tuple) or not isinstance(block, tuple):
                raise TypeError(f"grid and block must be tuples, got {type(grid).__name__} and "
                                f"{type(block).__name__}")
            grid = tuple(max(1, int(g)) for g in (grid + (1, 1))[:3])
            block = tuple(max(1, int(b)) for b in (block + (1, 1))[:3])
            stream = get_current_stream() if stream is None else stream
            values = [self._argument(a) for a in args]
            # Memory the kernel reaches: each pointer argument's region (from
            # the pointer on) and, not kernel parameters, each tensor map's
            # allocation, all written back after the launch.
            emu_args, inouts, writes, buffers = [], [], [], []
            for i, (kind, value) in enumerate(values):
                if kind == "region":
                    inouts.append(i)
                    writes.append(value)
                emu_args.append(value if kind != "map" else None)
            for i, (kind, value) in enumerate(values):
                if kind == "map":
                    base, block_memory = memory.find(value["address"])
                    buffers.append(block_memory)
                    j = len(emu_args) + len(buffers) - 1
                    inouts.append(j)
                    writes.append(block_memory)
                    emu_args[i] = TensorMap(
                        j, value["dtype"], value["dims"], value["strides"], value["box"],
                        element_strides=value["estrides"], swizzle=value["swizzle"],
                        interleave=value["interleave"], l2_promotion=value["l2"], oob_fill=value["oob"],
                        offset_bytes=value["address"] - base)
            # As CUDA: 48 KiB of dynamic shared memory until cuFuncSetAttribute raises it.
            attribute = cupy._attributes.get(self.ptr, 48 * 1024)
            cupy.launches.append(dict(entry=self.name, grid=grid, block=block, smem=int(shared_mem),
                                      stream=stream.ptr, attribute=attribute, cluster=tuple(cluster),
                                      attribute_ids=tuple(attribute_ids)))
            if not cupy.run_launches:
                return
            results = self.module.emu.launch(self.name, grid, block, int(shared_mem), emu_args, inouts=inouts,
                                             arch=cupy.arch, max_dynamic_smem=attribute, buffers=buffers,
                                             cluster=tuple(cluster), **cupy.mode)
            for target, value in zip(writes, results):
                np.copyto(target, np.ascontiguousarray(value).view(np.uint8).reshape(target.shape))

        @staticmethod
        def _argument(a):
            """(kind, value) of kernel argument `a`, taken as CuPy's _pointer takes it."""
            if a is None:
                return "null", None
            if isinstance(a, StandinArray):
                base, block_memory = memory.find(a.data.ptr)
                return "region", block_memory[a.data.ptr - base:]
            if isinstance(a, np.ndarray):
                if a.size != 1:
                    raise TypeError(f"You are trying to pass a numpy.ndarray of shape {a.shape} as a kernel "
                                    "parameter. Only numpy.ndarrays of size one can be passed by value.")
                raw = a.tobytes()
                if raw in cupy.maps:
                    return "map", cupy.maps[raw]
                return "value", a.reshape(())[()]
            if type(a) in _POINTER_TYPES:
                return "value", a
            if isinstance(a, bool):
                return "value", np.bool_(a)
            if isinstance(a, int):
                return "value", np.int64(a)
            if isinstance(a, float):
                return "value", np.float64(a)
            raise TypeError(f"Unsupported type {type(a)}")

    cuda = types.SimpleNamespace(
        runtime=runtime, driver=driver, Device=Device, Stream=Stream, get_current_stream=get_current_stream,
        UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer, function=types.SimpleNamespace(Module=Module),
        get_cuda_path=lambda: None, Event=Event, get_elapsed_time=get_elapsed_time)  # CuPy's: None where it finds no toolkit
    return cuda


_stream_ids = itertools.count(0x5000)
_function_ids = itertools.count(0xF000)
