"""Tensor maps as kernel arguments from Python: ``cuda_emu.TensorMap`` in
``EmuModule.launch`` (encoded in the emulator's child against the launch's own
device buffer) and in ``cuda_gpu.GpuModule.launch`` (encoded with the driver's
cuTensorMapEncodeTiled through ctypes against the CuPy buffer's pointer).

The kernels are tests/cuda_src/sm90_tensor_map_args.cu. The expected boxes are
plain NumPy slicing of the global array with zeros outside it; the swizzle is
undone in the kernel with the PTX ISA's Swizzle<B,4,3>, so the expectations
need no model of TMA. Without a GPU, the CuPy path's marshalling (the ctypes
call, the 128 bytes handed to CuPy) is checked by calling the emulator's
encoder, exported with the driver's signature, in place of libcuda's."""

import ctypes
import re
import struct

import ml_dtypes
import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC

from gemmgen.harness import cuda_emu, cuda_gpu, nvcc
from gemmgen.harness.cuda_emu import (
    EmuLaunchError,
    EmuModule,
    TensorMap,
    TensorMapDataType,
    TensorMapOobFill,
    TensorMapSwizzle,
)

BF16 = ml_dtypes.bfloat16
SOURCE = CUDA_SRC / "sm90_tensor_map_args.cu"
SPAN = {TensorMapSwizzle.NONE: 0, TensorMapSwizzle.B32: 32, TensorMapSwizzle.B64: 64, TensorMapSwizzle.B128: 128}


@pytest.fixture(scope="module")
def module() -> EmuModule:
    return EmuModule.from_file(SOURCE)


def values(shape, dtype, seed=0) -> np.ndarray:
    """Distinct nonzero values, so that a zero can only be the OOB fill."""
    n = int(np.prod(shape))
    if np.dtype(dtype) == np.uint8:
        return (np.arange(n) % 251 + 1).astype(np.uint8).reshape(shape)
    rng = np.random.default_rng(seed)
    return (rng.integers(1, 200, n) * np.where(np.arange(n) % 2, 1, -1)).astype(dtype).reshape(shape)


def expected_box(a: np.ndarray, coords, box) -> np.ndarray:
    """The box of `a` at `coords` (innermost first, may be negative), with
    zeros where it lies outside `a`: shape box[::-1], as TMA fills it."""
    out = np.zeros(tuple(reversed(box)), a.dtype)
    src, dst = [], []
    for axis in range(a.ndim):  # NumPy axis 0 is the outermost dimension
        d = a.ndim - 1 - axis
        lo, hi = max(coords[d], 0), min(coords[d] + box[d], a.shape[axis])
        if lo >= hi:
            return out
        src.append(slice(lo, hi))
        dst.append(slice(lo - coords[d], hi - coords[d]))
    out[tuple(dst)] = a[tuple(src)]
    return out


# (NumPy shape, dtype, box innermost first, origin innermost first, swizzle).
# Every case has boxes that run past the last index of some dimension, and
# some start before index 0.
CASES = {
    "2d_none": ((21, 36), np.float32, (8, 8), (-3, -2), TensorMapSwizzle.NONE),
    "2d_32b": ((19, 40), BF16, (16, 8), (0, -1), TensorMapSwizzle.B32),
    "2d_64b": ((13, 96), np.uint8, (64, 8), (0, 0), TensorMapSwizzle.B64),
    "2d_128b": ((30, 72), BF16, (64, 16), (0, 0), TensorMapSwizzle.B128),
    "3d_none": ((3, 10, 24), np.float32, (8, 4, 2), (0, -1, 0), TensorMapSwizzle.NONE),
    "3d_32b": ((5, 9, 16), BF16, (16, 8, 2), (0, 0, 0), TensorMapSwizzle.B32),
    "3d_64b": ((4, 7, 32), np.float16, (32, 8, 3), (0, 0, -1), TensorMapSwizzle.B64),
    "3d_128b": ((3, 12, 64), BF16, (64, 8, 2), (0, 0, 0), TensorMapSwizzle.B128),
}


def boxes_launch(a: np.ndarray, box, origin, swizzle, tensor_map=None):
    """The launch of tma_boxes over `a` (a buffer after the arguments),
    covering it with boxes from `origin`; and the expected output."""
    rank = a.ndim
    box3, origin3 = (*box, *[1] * (3 - rank)), (*origin, *[0] * (3 - rank))
    dims = tuple(reversed(a.shape))
    grid = tuple(-(-(dims[d] - origin[d]) // box[d]) if d < rank else 1 for d in range(3))
    box_bytes = int(np.prod(box)) * a.dtype.itemsize
    blocks = grid[0] * grid[1] * grid[2]
    args = [
        tensor_map or TensorMap.of_array(11, a, box, swizzle=swizzle),
        np.zeros(blocks * box_bytes, np.uint8),
        *map(np.int32, (rank, box_bytes, SPAN[swizzle], *box3, *origin3)),
    ]
    expected = [expected_box(a, [origin3[d] + (b // (grid[0] * grid[1]) if d == 2 else
                                                b // grid[0] % grid[1] if d == 1 else b % grid[0]) * box3[d]
                                 for d in range(rank)], box)
                for b in range(blocks)]
    return grid, box_bytes, args, np.stack(expected)


def check_boxes(out: np.ndarray, expected: np.ndarray) -> None:
    got = out.view(expected.dtype).reshape(expected.shape)
    np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize("name", list(CASES))
def test_tma_boxes_through_a_python_tensor_map(module, name):
    shape, dtype, box, origin, swizzle = CASES[name]
    a = values(shape, dtype)
    grid, box_bytes, args, expected = boxes_launch(a, box, origin, swizzle)
    (out,) = module.launch("tma_boxes", grid, 128, box_bytes + 1024, args, outputs=[1], buffers=[a])
    check_boxes(out, expected)
    assert (expected == 0).any() and (expected != 0).any()  # the case does run past an edge


def test_a_map_with_an_offset_and_a_row_stride(module):
    # Every other row of a, from row 4 on: the map's address is the buffer's
    # device address plus offset_bytes, and its rows are 2 rows apart.
    a = values((20, 32), np.float32)
    view = a[4::2][:7]
    tm = TensorMap(11, np.float32, global_dims=(32, 7), global_strides_bytes=(2 * 128,), box=(8, 4),
                   offset_bytes=4 * 128)
    grid, box_bytes, args, expected = boxes_launch(np.ascontiguousarray(view), (8, 4), (0, 0),
                                                   TensorMapSwizzle.NONE, tensor_map=tm)
    (out,) = module.launch("tma_boxes", grid, 128, box_bytes + 1024, args, outputs=[1], buffers=[a])
    check_boxes(out, expected)


@pytest.mark.parametrize(("shape", "dtype", "box", "swizzle"), [
    ((37, 72), BF16, (64, 16), TensorMapSwizzle.B128),
    ((3, 10, 24), np.float32, (8, 4, 2), TensorMapSwizzle.NONE),
    ((5, 9, 16), BF16, (16, 8, 2), TensorMapSwizzle.B32),
])
def test_a_tma_copy_through_maps_alone(module, shape, dtype, box, swizzle):
    # tma_copy takes no pointers: both arrays are buffers that only the maps
    # reach, and the output comes back through its buffer index.
    a = values(shape, dtype)
    out = np.zeros_like(a)
    rank = a.ndim
    dims = tuple(reversed(a.shape))
    grid = tuple(-(-dims[d] // box[d]) if d < rank else 1 for d in range(3))
    box_bytes = int(np.prod(box)) * a.dtype.itemsize
    args = [TensorMap.of_array(7, a, box, swizzle=swizzle), TensorMap.of_array(8, out, box, swizzle=swizzle),
            *map(np.int32, (rank, box_bytes, *box, *[1] * (3 - rank)))]
    (got,) = module.launch("tma_copy", grid, 128, box_bytes + 1024, args, outputs=[8], buffers=[a, out])
    np.testing.assert_array_equal(got.view(np.uint8), a.view(np.uint8))


# ---------------------------------------------------------------------------
# Maps the encoder refuses: EmuLaunchError before any thread runs, naming the
# CUresult and the driver's reason.

BAD_MAPS = {
    "stride_not_multiple_of_16": (
        {"dtype": BF16, "global_dims": (60, 32), "global_strides_bytes": (120,), "box": (16, 16)},
        "CUDA_ERROR_INVALID_VALUE", "globalStrides[0] = 120 is not a multiple of 16"),
    "box_over_256": (
        {"dtype": np.uint8, "global_dims": (512, 4), "global_strides_bytes": (512,), "box": (16, 257)},
        "CUDA_ERROR_INVALID_VALUE", "boxDim[1] = 257 is not in 1..256"),
    "inner_box_over_swizzle_span": (
        {"dtype": BF16, "global_dims": (64, 32), "global_strides_bytes": (128,), "box": (32, 16),
         "swizzle": TensorMapSwizzle.B32},
        "CUDA_ERROR_INVALID_VALUE", "the inner box dimension is 64 bytes (boxDim[0] = 32), over the 32-byte"),
    "misaligned_address": (
        {"dtype": BF16, "global_dims": (56, 32), "global_strides_bytes": (128,), "box": (8, 8), "offset_bytes": 8},
        "CUDA_ERROR_INVALID_VALUE", "is not 16-byte aligned"),
    "not_a_swizzle": (
        {"dtype": BF16, "global_dims": (64, 32), "global_strides_bytes": (128,), "box": (8, 8), "swizzle": 9},
        "CUDA_ERROR_INVALID_VALUE", "swizzle 9 is not a CUtensorMapSwizzle"),
    "rank_6": (
        {"dtype": np.float32, "global_dims": (2,) * 6, "global_strides_bytes": (8, 16, 32, 64, 128), "box": (4,) * 6},
        "CUDA_ERROR_INVALID_VALUE", "tensorRank 6 is not in 1..5"),
    "nan_fill_not_modelled": (
        {"dtype": BF16, "global_dims": (64, 32), "global_strides_bytes": (128,), "box": (8, 8),
         "oob_fill": TensorMapOobFill.NAN_REQUEST_ZERO_FMA},
        "CUDA_ERROR_NOT_SUPPORTED", "NaN out-of-bounds fill is not modelled"),
}


@pytest.mark.parametrize("name", list(BAD_MAPS))
def test_a_map_the_encoder_refuses_is_a_launch_error(module, name):
    kwargs, result, reason = BAD_MAPS[name]
    buffer = np.zeros(4096, np.uint8)
    with pytest.raises(EmuLaunchError) as e:
        module.launch("map_probe", 1, 32, 0, [TensorMap(2, **kwargs), np.zeros(1, np.int32)], outputs=[1],
                      buffers=[buffer])
    message = str(e.value)
    assert "launch rejected" in message
    assert "argument #0 (a tensor map over buffer #2, 4096 bytes)" in message
    assert f"cuTensorMapEncodeTiled returned {result}" in message
    assert reason in message


def test_a_good_map_runs_the_probe(module):
    # The counterpart of the refusals above: the same kernel and buffer run.
    tm = TensorMap(2, BF16, global_dims=(64, 32), global_strides_bytes=(128,), box=(8, 8))
    (flag,) = module.launch("map_probe", 1, 32, 0, [tm, np.zeros(1, np.int32)], outputs=[1],
                            buffers=[np.zeros(4096, np.uint8)])
    assert flag[0] == 1


def test_a_map_past_its_buffer_is_a_launch_error(module):
    # The driver cannot see the allocation; the emulator refuses a map whose
    # last element lies beyond its buffer (TMA's copies are not bounds-checked).
    a = np.zeros((32, 64), BF16)
    tm = TensorMap(2, BF16, global_dims=(64, 33), global_strides_bytes=(128,), box=(64, 8))
    with pytest.raises(EmuLaunchError, match=r"the map reaches 4224 bytes past the offset 0 \(globalDim \{64, 33\}"):
        module.launch("map_probe", 1, 32, 0, [tm, np.zeros(1, np.int32)], outputs=[1], buffers=[a])
    tm = TensorMap(2, BF16, global_dims=(64, 32), global_strides_bytes=(128,), box=(64, 8), offset_bytes=16)
    with pytest.raises(EmuLaunchError, match="beyond the buffer's end"):
        module.launch("map_probe", 1, 32, 0, [tm, np.zeros(1, np.int32)], outputs=[1], buffers=[a])


@pytest.mark.parametrize(("entry", "what"), [
    (None, "None (a null pointer)"),
    (np.int32(3), "a NumPy scalar (int32)"),
    ("map", "a tensor map"),
])
def test_a_map_over_something_that_is_not_an_array(module, entry, what):
    other = TensorMap(2, np.float32, global_dims=(4,), global_strides_bytes=(), box=(4,))
    args = [TensorMap(1, np.float32, global_dims=(4,), global_strides_bytes=(), box=(4,)),
            other if entry == "map" else entry]
    with pytest.raises(EmuLaunchError, match=re.escape(f"argument #0 is a tensor map over entry #1, which is {what}")):
        module.launch("map_probe", 1, 32, 0, args)


def test_a_map_over_an_index_outside_the_launch(module):
    tm = TensorMap(5, np.float32, global_dims=(4,), global_strides_bytes=(), box=(4,))
    with pytest.raises(EmuLaunchError, match="over entry #5, but the launch has 3 arguments and buffers"):
        module.launch("map_probe", 1, 32, 0, [tm, np.zeros(1, np.int32)], buffers=[np.zeros(16, np.float32)])


def test_the_child_checks_the_buffer_entry_too(module, monkeypatch):
    # The request is the interface: the child refuses a map over a non-array
    # entry by itself, whatever wrote the request.
    monkeypatch.setattr(cuda_emu, "tensor_map_problem", lambda *a: None)
    tm = TensorMap(1, np.float32, global_dims=(4,), global_strides_bytes=(), box=(4,))
    with pytest.raises(EmuLaunchError, match="argument #0 is a tensor map over entry #1, which is not an array"):
        module.launch("map_probe", 1, 32, 0, [tm, None])


def test_the_kernel_signature_is_checked(module):
    a = np.zeros((8, 8), np.float32)
    tm = TensorMap.of_array(2, a, (8, 8))
    with pytest.raises(EmuLaunchError, match=r"argument #1 is `int\*` \(8 bytes\) but a tensor map was passed"):
        module.launch("map_probe", 1, 32, 0, [tm, tm], buffers=[a])
    with pytest.raises(EmuLaunchError, match=r"argument #0 is `CUtensorMap.*` \(128 bytes\) but an array was passed"):
        module.launch("map_probe", 1, 32, 0, [a, np.zeros(1, np.int32)])


# ---------------------------------------------------------------------------
# The TensorMap description and the request bytes.


def test_of_array_gives_the_driver_order():
    a = np.zeros((5, 6, 8), BF16)
    tm = TensorMap.of_array(3, a, (8, 2, 1), swizzle=TensorMapSwizzle.B32)
    assert tm.dtype == TensorMapDataType.BFLOAT16
    assert tm.global_dims == (8, 6, 5)
    assert tm.global_strides_bytes == (16, 96)
    assert tm.element_strides == (1, 1, 1)
    assert tm.extent_bytes() == a.nbytes
    assert TensorMap.of_array(0, np.zeros(3, ml_dtypes.float8_e4m3fn), (16,)).dtype == TensorMapDataType.UINT8


def test_a_tensor_map_entry_in_the_request():
    tm = TensorMap(1, np.float16, global_dims=(64, 10), global_strides_bytes=(144,), box=(64, 8),
                   swizzle=TensorMapSwizzle.B128, offset_bytes=32)
    request = cuda_emu._encode_request("k", (1, 1, 1), (32, 1, 1), 0, -1, [tm], (), (),
                                       [np.zeros(16, np.uint8)])
    head = 8 + 8 + 1 + 24 + 12 + 8 + 8 + 4  # version 4: the cluster dimension after the block
    assert request[:12] == b"GGEMUREQ" + struct.pack("<I", 4)
    assert request[17 + 24 : 17 + 36] == struct.pack("<3I", 1, 1, 1)
    # The map: kind 3, flags 0, 36 + 16 + 8 + 8 + 8 bytes of data.
    assert request[head : head + 16] == struct.pack("<IIQ", 3, 0, 76)
    data = request[head + 16 : head + 16 + 76]
    # buffer 1, FLOAT16 (6), rank 2, no interleave, 128B (3), L2_256B (3), zero fill, offset 32.
    assert data[:36] == struct.pack("<7IQ", 1, 6, 2, 0, 3, 3, 0, 32)
    assert data[36:] == struct.pack("<2Q1Q2I2I", 64, 10, 144, 64, 8, 1, 1)
    # The buffer after it: kind 0, flag 4 (not a kernel parameter), 16 bytes.
    assert request[head + 16 + 76 : head + 32 + 76] == struct.pack("<IIQ", 0, 4, 16)


def test_malformed_tensor_maps_are_refused_in_python():
    with pytest.raises(ValueError, match="global_strides_bytes needs 1 entries"):
        TensorMap(0, np.float32, global_dims=(4, 4), global_strides_bytes=(16, 64), box=(4, 4))
    with pytest.raises(ValueError, match="not an unsigned 32-bit value"):
        TensorMap(0, np.float32, global_dims=(4,), global_strides_bytes=(), box=(-1,))
    with pytest.raises(TypeError, match="is not an int"):
        TensorMap(0, np.float32, global_dims=(4.0,), global_strides_bytes=(), box=(4,))
    with pytest.raises(TypeError, match="no CUtensorMapDataType moves NumPy complex64"):
        TensorMap(0, np.complex64, global_dims=(4,), global_strides_bytes=(), box=(4,))


# ---------------------------------------------------------------------------
# The CuPy path without a GPU: cuda_gpu's ctypes call goes to the emulator's
# encoder (gg_emu_cuTensorMapEncodeTiled, the driver's signature), whose
# 128 bytes (gg_emu_sm90.h, MapBits) say what arrived.

MAP_BITS = struct.Struct("<I4BQ5Q5Q5I")  # magic, dtype, rank, swizzle, element bytes, address, dims, strides, box


@pytest.fixture(scope="module")
def emu_encoder(module):
    library = ctypes.CDLL(str(module.library))
    return cuda_gpu.ENCODE_TILED(("gg_emu_cuTensorMapEncodeTiled", library))


def decode(map_bytes: bytes) -> dict:
    magic, dtype, rank, swizzle, eb, address, *rest = MAP_BITS.unpack_from(map_bytes)
    assert magic == 0x4D544747
    return {"dtype": dtype, "rank": rank, "swizzle": swizzle, "eb": eb, "address": address,
            "dims": tuple(rest[:rank]), "strides": tuple(rest[5 : 5 + rank]), "box": tuple(rest[10 : 10 + rank])}


@pytest.mark.parametrize("name", list(CASES))
def test_the_gpu_path_calls_the_encoder_with_the_maps_arguments(emu_encoder, name):
    shape, dtype, box, _, swizzle = CASES[name]
    a = np.zeros(shape, dtype)
    tm = TensorMap.of_array(0, a, box, swizzle=swizzle, offset_bytes=0)
    bits = decode(cuda_gpu.encode_tensor_map(tm, 0x7F0000001000, emu_encoder))
    assert bits == {"dtype": int(tm.dtype), "rank": a.ndim, "swizzle": int(swizzle), "eb": a.dtype.itemsize,
                    "address": 0x7F0000001000, "dims": tuple(reversed(shape)),
                    "strides": tuple(a.strides[::-1]), "box": tuple(box)}


def test_the_gpu_path_names_the_encoders_curesult(emu_encoder):
    kwargs, result, _ = BAD_MAPS["box_over_256"]
    with pytest.raises(cuda_gpu.TensorMapEncodeError) as e:
        cuda_gpu.encode_tensor_map(TensorMap(0, **kwargs), 0x10000, emu_encoder)
    assert (e.value.code, e.value.name) == (1, result)
    assert "boxDim [16, 257]" in str(e.value) and "over address 0x10000" in str(e.value)


def test_the_gpu_path_marshals_maps_buffers_and_scalars(emu_encoder):
    a = np.zeros((16, 64), BF16)
    out = np.zeros(8, np.float32)
    tm = TensorMap(4, BF16, global_dims=(64, 8), global_strides_bytes=(128,), box=(64, 8),
                   swizzle=TensorMapSwizzle.B128, offset_bytes=1024)
    device = {1: "device copy of out", 4: "device copy of a"}
    pointers = {1: 0x20000, 4: 0x30000}
    got = cuda_gpu.kernel_arguments("k", [tm, out, None, np.int32(5)], [a], device, pointers, emu_encoder)
    assert len(got) == 4  # the buffer is no kernel parameter
    assert got[1] == "device copy of out" and got[2] == np.uint64(0) and got[3] == np.int32(5)
    arg = got[0]
    assert isinstance(arg, np.ndarray) and arg.size == 1 and arg.itemsize == 128
    bits = decode(arg.tobytes())
    assert bits["address"] == 0x30000 + 1024 and bits["swizzle"] == 3 and bits["dims"] == (64, 8)
    # What CuPy hands to cuLaunchKernel for a size-one NumPy array: a pointer to its bytes.
    address = arg.__array_interface__["data"][0]
    assert ctypes.string_at(address, 128) == arg.tobytes()

    too_far = TensorMap(4, BF16, global_dims=(64, 16), global_strides_bytes=(128,), box=(64, 8), offset_bytes=16)
    with pytest.raises(cuda_gpu.GpuLaunchError, match="beyond the array's end"):
        cuda_gpu.kernel_arguments("k", [too_far, out, None, np.int32(5)], [a], device, pointers, emu_encoder)
    with pytest.raises(cuda_gpu.GpuLaunchError, match="which is None"):
        cuda_gpu.kernel_arguments("k", [TensorMap(1, **BAD_MAPS["box_over_256"][0]), None], [], {}, {}, emu_encoder)
    with pytest.raises(cuda_gpu.TensorMapEncodeError, match=r"k: argument #0 \(a tensor map over entry #1\)"):
        cuda_gpu.kernel_arguments("k", [TensorMap(1, **BAD_MAPS["box_over_256"][0])], [np.zeros(4096, np.uint8)],
                                  {1: "buffer"}, {1: 0x10000}, emu_encoder)


# ---------------------------------------------------------------------------
# On a GPU: the same launches through CuPy and the driver's encoder.


def _gpu_module():
    if reason := cuda_gpu.unavailable_reason():
        pytest.skip(reason)
    if cuda_gpu.device_arch() < 90:
        pytest.skip("TMA needs sm_90 or later")
    return cuda_gpu.GpuModule.from_file(SOURCE)


@pytest.mark.gpu
def test_tensor_map_arguments_on_a_gpu():
    gpu = _gpu_module()
    for (shape, dtype, box, origin, swizzle) in CASES.values():
        a = values(shape, dtype)
        grid, box_bytes, args, expected = boxes_launch(a, box, origin, swizzle)
        (out,) = gpu.launch("tma_boxes", grid, 128, box_bytes + 1024, args, outputs=[1], buffers=[a])
        check_boxes(out, expected)
    a = values((37, 72), BF16)
    box = (64, 16)
    args = [TensorMap.of_array(7, a, box, swizzle=TensorMapSwizzle.B128),
            TensorMap.of_array(8, np.zeros_like(a), box, swizzle=TensorMapSwizzle.B128),
            *map(np.int32, (2, 64 * 16 * 2, 64, 16, 1))]
    (got,) = gpu.launch("tma_copy", (2, 3, 1), 128, 64 * 16 * 2 + 1024, args, outputs=[8],
                        buffers=[a, np.zeros_like(a)])
    np.testing.assert_array_equal(got.view(np.uint8), a.view(np.uint8))


@pytest.mark.skipif(nvcc.find_nvcc() is None or nvcc.find_cuda_tool("cuobjdump") is None,
                    reason="nvcc or cuobjdump is not installed")
def test_the_kernels_assemble_for_sm_90_with_tma():
    # What the GPU test launches is real sm_90 code: TMA loads and stores, no spills.
    result = nvcc.compile_check(SOURCE.read_text(), "sm_90", name_for_errors=str(SOURCE))
    assert set(result.kernels) == {"tma_boxes", "tma_copy", "map_probe"}, result.log
    for usage in result.kernels.values():
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
    sass = nvcc.sass_summary(result.cubin)
    assert sass["tma_boxes"].count("UTMALDG", "2D") == 1 and sass["tma_boxes"].count("UTMALDG", "3D") == 1
    assert sass["tma_copy"].count("UTMASTG", "2D") == 1 and sass["tma_copy"].count("UTMASTG", "3D") == 1


@pytest.mark.skipif(cuda_gpu.unavailable_reason() is None, reason="a GPU is available here")
def test_without_a_driver_the_encoder_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(cuda_gpu, "_libcuda", lambda: ctypes.CDLL("libcuda-that-does-not-exist.so"))
    cuda_gpu.driver_encoder.cache_clear()
    try:
        with pytest.raises(cuda_gpu.GpuLaunchError, match="cuTensorMapEncodeTiled is not available"):
            cuda_gpu.encode_tensor_map(TensorMap(0, np.float32, global_dims=(4,), global_strides_bytes=(),
                                                 box=(4,)), 0x10000)
    finally:
        cuda_gpu.driver_encoder.cache_clear()
