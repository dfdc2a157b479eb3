"""The emulator rejects a launch the way the driver of the emulated arch
would (docs/cuda-emulation.md, "Launch checks"): block size against the
kernel's __launch_bounds__ and CUDA's 1024 threads, grid x < 2^31, y and z
<= 65535, dynamic shared memory against the kernel's
cudaFuncAttributeMaxDynamicSharedMemorySize (48 KiB until cudaFuncSetAttribute
raises it) and the arch's opt-in limit; and host code sees the emulated CUDA
runtime (tests/cuda_src/runtime_api.cu): device queries, attributes, streams,
copies and the last error.

The limits come from gemmgen.harness.nvcc.shared_memory_limit and
backends.cuda.common.LIMITS, never from the emulator under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from cuda_runtime_cases import CUDA_SRC
from gemmgen import ir
from gemmgen.backends.cuda.common import DEFAULT_SMEM, LIMITS
from gemmgen.harness.cuda_emu import EmuLaunchError, EmuModule
from gemmgen.harness.nvcc import shared_memory_limit


@pytest.fixture(scope="module")
def api() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "runtime_api.cu")


def out(n: int = 1024) -> np.ndarray:
    return np.empty(n, np.int32)


def report(module: EmuModule, arch: str, **inputs) -> dict[str, str]:
    result = module.run_host({k: np.int32(v) for k, v in inputs.items()}, arch=arch)
    assert result.status == 0
    lines = result.outputs["report"].decode().splitlines()
    return dict(line.split(" ", 1) for line in lines)


def test_launch_bounds_are_recorded_per_kernel(api):
    assert api.launch_bounds == {"bounded": "128"}
    (result,) = api.launch("bounded", 2, 128, 0, [out()], [0])
    np.testing.assert_array_equal(result[:256], np.arange(1, 257))


@pytest.mark.parametrize("block", [256, (64, 4), (129, 1, 1)])
def test_a_block_over_the_launch_bounds_is_rejected(api, block):
    with pytest.raises(EmuLaunchError, match=r"over the kernel's __launch_bounds__\(128\) "
                                             r"\(cudaErrorLaunchOutOfResources\)"):
        api.launch("bounded", 1, block, 0, [out()], [0])


@pytest.mark.parametrize("grid,block", [
    (1, LIMITS.block_threads + 1),
    (1, (1, 1, 65)),
    (LIMITS.grid_x + 1, 32),
    ((1, LIMITS.grid_yz + 1), 32),
    ((1, 1, LIMITS.grid_yz + 1), 32),
])
def test_cuda_grid_and_block_limits(api, grid, block):
    with pytest.raises(EmuLaunchError, match=r"invalid (grid|block) .*\(cudaErrorInvalidConfiguration\)"):
        api.launch("count_blocks", grid, block, 0, [np.zeros(1, np.uint32)], inouts=[0])


def test_dynamic_shared_memory_needs_the_attribute_above_48k(api):
    n = DEFAULT_SMEM + 16
    with pytest.raises(EmuLaunchError, match=rf"{n} bytes of dynamic shared memory requested, over the kernel's "
                                             rf"limit of {DEFAULT_SMEM} .*\(cudaErrorInvalidValue\)"):
        api.launch("fill_smem", 1, 64, n, [out(1), np.int32(n)], [0], max_dynamic_smem=DEFAULT_SMEM)
    # The attribute set by hand, or as GpuModule / CuPy do (the default).
    for attribute in (n, None):
        (total,) = api.launch("fill_smem", 1, 64, n, [out(1), np.int32(n)], [0], max_dynamic_smem=attribute)
        assert total[0] == n


@pytest.mark.parametrize("arch", ir.CUDA_ARCHS)
def test_dynamic_shared_memory_is_limited_by_the_emulated_arch(api, arch):
    limit = shared_memory_limit(arch)
    (total,) = api.launch("fill_smem", 1, 64, limit, [out(1), np.int32(limit)], [0], arch=arch)
    assert total[0] == limit
    with pytest.raises(EmuLaunchError, match=rf"cudaFuncSetAttribute\(fill_smem, cudaFuncAttributeMaxDynamic"
                                             rf"SharedMemorySize, {limit + 16}\): over the opt-in limit of {limit} "
                                             rf"bytes per block of the emulated {arch}"):
        api.launch("fill_smem", 1, 64, limit + 16, [out(1), np.int32(limit + 16)], [0], arch=arch)


def test_an_arch_without_a_known_limit_is_refused(api):
    with pytest.raises(ValueError, match="no (shared-memory limit|SM count) known for sm_75"):
        api.launch("bounded", 1, 128, 0, [out()], [0], arch="sm_75")


def expected_report(arch: str) -> dict[str, str]:
    limit = shared_memory_limit(arch)
    ok = "cudaSuccess"
    return {
        "bounds_128": ok, "bounds_128_last": "256",
        "bounds_256": "cudaErrorLaunchOutOfResources", "bounds_64x4": "cudaErrorLaunchOutOfResources",
        "block_1025": "cudaErrorInvalidConfiguration", "block_z_65": "cudaErrorInvalidConfiguration",
        "grid_x_2pow31": "cudaErrorInvalidConfiguration", "grid_y_65536": "cudaErrorInvalidConfiguration",
        "grid_z_65536": "cudaErrorInvalidConfiguration", "grid_x_0": "cudaErrorInvalidConfiguration",
        "optin": str(limit), "smem_default": str(DEFAULT_SMEM), "cc": str(ir.arch_number(arch)),
        "props": ok, "props_optin": str(limit), "props_cc": str(ir.arch_number(arch)),
        "props_threads": str(LIMITS.block_threads),
        "props_grid": str(LIMITS.grid_x + 2 * LIMITS.grid_yz),
        "attr_unmodelled": "cudaErrorNotSupported",
        "smem_48k": ok, "smem_48k_16_unset": "cudaErrorInvalidValue",
        "set_optin_plus_1": "cudaErrorInvalidValue", "set_optin": ok,
        "smem_optin": ok, "smem_optin_sum": str(limit), "smem_optin_16": "cudaErrorInvalidValue",
        "func_max_threads": "128", "func_max_dynamic_smem": str(limit),
        "launch_kernel_256": "cudaErrorLaunchOutOfResources",
        "launch_kernel_not_a_kernel": "cudaErrorInvalidDeviceFunction",
        "stream_create": ok, "stream_launch": ok, "stream_sync": ok, "stream_destroy": ok,
        "stream_destroy_again": "cudaErrorInvalidResourceHandle",
        "destroyed_stream_launch": "cudaErrorInvalidResourceHandle",
        "copy_past_end": "cudaErrorInvalidValue", "copy_in_bounds": ok,
        "free_not_allocated": "cudaErrorInvalidValue",
        "set_device_1": "cudaErrorInvalidDevice", "string": "invalid device ordinal", "free": ok,
    }


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90a", "sm_120"])
def test_host_code_sees_the_emulated_runtime(api, arch):
    assert report(api, arch, big_grid=0) == expected_report(arch)


def test_host_code_launches_up_to_the_grid_limit(api):
    got = report(api, "sm_90a", big_grid=1)
    assert got["grid_y_65535"] == "cudaSuccess"
    assert got["grid_y_65535_blocks"] == str(LIMITS.grid_yz)


def test_rejected_calls_are_reported_on_stderr(api):
    result = api.run_host({"big_grid": np.int32(0)}, arch="sm_89")
    assert "gg-emu: rejected: kernel bounded: a block of 256 threads is over the kernel's __launch_bounds__(128)" \
        in result.log
    assert ("gg-emu: rejected: cudaFuncSetAttribute(fill_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, "
            f"{shared_memory_limit('sm_89') + 1}): over the opt-in limit") in result.log
