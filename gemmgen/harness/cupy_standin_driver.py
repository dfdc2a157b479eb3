"""The CUDA driver's cluster launch as gemmgen.harness.cupy_standin models
it, kept apart from the stand-in's CuPy surface (cupy_standin re-exports
the names).

cuLaunchKernelEx reads the CUlaunchConfig and its CUlaunchAttribute array at
cuda.h's offsets, refuses a null config, an unknown function, `extra`, an
attribute other than the cluster dimension, a cluster on a device older
than 9.0, a grid axis that is not a multiple of the cluster's or a cluster
of more than 8 blocks (CUDA_ERROR_INVALID_CLUSTER_SIZE), and reads each
kernel parameter with the size the cubin's EIATTR_KPARAM_INFO gives it, as
the driver does; the emulator launches the clusters.
"""

from __future__ import annotations

import ctypes
import struct
import types

import numpy as np

from gemmgen.harness.cubin import cubin_params

CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NO_BINARY_FOR_GPU = 209
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_INVALID_CLUSTER_SIZE = 912
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
MAX_CLUSTER_BLOCKS = 8  # the portable cluster size (no non-portable attribute here)
# cuda.h's CUlaunchConfig and CUlaunchAttribute on x86-64: field offsets and
# sizes (tests/launchers/test_cluster_launch.py checks them against cuda.h
# with gcc's offsetof / sizeof).
LAUNCH_CONFIG = {"gridDimX": 0, "blockDimX": 12, "sharedMemBytes": 24, "hStream": 32, "attrs": 40,
                 "numAttrs": 48, "sizeof": 56}
LAUNCH_ATTRIBUTE = {"id": 0, "value": 8, "sizeof": 72}

class CUDADriverError(RuntimeError):
    def __init__(self, code: int, what: str) -> None:
        super().__init__(f"CUDA driver error {code}: {what}")
        self.code = code



# cuLaunchKernelEx's C signature.
LAUNCH_KERNEL_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_void_p)


def launch_ex(cupy, config: int, function: int, params: int, extra: int) -> None:
    """cuLaunchKernelEx on the stand-in `cupy` (cupy_standin.StandinCupy):
    the checks the driver makes, then the launch through the stand-in's call."""
    if config == 0:
        raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernelEx: config is NULL")
    f = cupy.functions.get(function)
    if f is None:
        raise CUDADriverError(CUDA_ERROR_INVALID_HANDLE, f"cuLaunchKernelEx: {function:#x} is no CUfunction")
    if extra != 0:
        raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernelEx: the launchers pass kernelParams, "
                              "never extra")
    raw = ctypes.string_at(config, LAUNCH_CONFIG["sizeof"])
    grid = struct.unpack_from("<3I", raw, LAUNCH_CONFIG["gridDimX"])
    block = struct.unpack_from("<3I", raw, LAUNCH_CONFIG["blockDimX"])
    (smem,) = struct.unpack_from("<I", raw, LAUNCH_CONFIG["sharedMemBytes"])
    (stream,) = struct.unpack_from("<Q", raw, LAUNCH_CONFIG["hStream"])
    (attrs,) = struct.unpack_from("<Q", raw, LAUNCH_CONFIG["attrs"])
    (count,) = struct.unpack_from("<I", raw, LAUNCH_CONFIG["numAttrs"])
    if count and not attrs:
        raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, f"cuLaunchKernelEx: {count} attributes at NULL")
    cluster, ids = (1, 1, 1), []
    for i in range(count):
        attribute = ctypes.string_at(attrs + i * LAUNCH_ATTRIBUTE["sizeof"], LAUNCH_ATTRIBUTE["sizeof"])
        (kind,) = struct.unpack_from("<i", attribute, LAUNCH_ATTRIBUTE["id"])
        ids.append(kind)
        if kind != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, f"cuLaunchKernelEx: launch attribute {kind} is not "
                                  "the cluster dimension, the one the stand-in knows")
        cluster = struct.unpack_from("<3I", attribute, LAUNCH_ATTRIBUTE["value"])
    if any(c == 0 for c in (*grid, *block)):
        raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, f"cuLaunchKernelEx: grid {grid}, block {block}")
    if cluster != (1, 1, 1):
        if cupy.sm < 90:
            raise CUDADriverError(CUDA_ERROR_INVALID_CLUSTER_SIZE, f"cuLaunchKernelEx: clusters on compute "
                                  f"capability {cupy.sm // 10}.{cupy.sm % 10}, before 9.0")
        if 0 in cluster or cluster[0] * cluster[1] * cluster[2] > MAX_CLUSTER_BLOCKS:
            raise CUDADriverError(CUDA_ERROR_INVALID_CLUSTER_SIZE, f"cuLaunchKernelEx: a cluster of {cluster}, "
                                  f"not 1..{MAX_CLUSTER_BLOCKS} blocks")
        if any(g % c for g, c in zip(grid, cluster)):
            raise CUDADriverError(CUDA_ERROR_INVALID_CLUSTER_SIZE, f"cuLaunchKernelEx: grid {grid} is not a "
                                  f"multiple of the cluster {cluster}")
    sizes = cubin_params(f.module.cubin, f.name)
    if sizes is None:
        raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, f"cuLaunchKernelEx: no parameter info of {f.name}")
    if sizes and not params:
        raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernelEx: kernelParams is NULL")
    args = []
    for i, size in enumerate(sizes):
        (at,) = struct.unpack("<Q", ctypes.string_at(params + 8 * i, 8))
        args.append(kernel_parameter(cupy, ctypes.string_at(at, size)))
    f(grid, block, tuple(args), shared_mem=smem, stream=cupy.cuda.Stream(stream),
      cluster=tuple(cluster), attribute_ids=tuple(ids))


def kernel_parameter(cupy, raw: bytes):
    """A kernel parameter's bytes as the stand-in's call takes it: a device
    pointer (8 bytes inside an allocation) as an array over it, a tensor
    map (128 bytes) by value, other values as NumPy scalars of their size."""
    if len(raw) == 8:
        (value,) = struct.unpack("<Q", raw)
        try:
            cupy.memory.find(value)
        except CUDADriverError:
            return np.frombuffer(raw, np.int64)[0]
        return cupy.ndarray((1,), np.uint8, memptr=types.SimpleNamespace(ptr=value))
    if len(raw) == 128:
        return np.frombuffer(raw, np.dtype((np.void, 128))).copy()
    kinds = {1: np.int8, 2: np.int16, 4: np.int32}
    if len(raw) not in kinds:
        raise CUDADriverError(CUDA_ERROR_INVALID_VALUE, f"a {len(raw)}-byte kernel parameter")
    return np.frombuffer(raw, kinds[len(raw)])[0]
