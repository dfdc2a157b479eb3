"""The emulator flags kernels that break CUDA's rules (tests/cuda_src/faults.cu),
and rejects bad launches and bad sources with a clear message."""

import numpy as np
import pytest

from cuda_runtime_cases import CUDA_SRC
from gemmgen.harness.cuda_emu import (
    EmuCompileError,
    EmuKernelError,
    EmuLaunchError,
    EmuModule,
    EmuRaceError,
    EmuTimeout,
)


@pytest.fixture(scope="module")
def faults() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "faults.cu")


def out(n: int = 128) -> np.ndarray:
    return np.empty(n, np.float32)


def test_barrier_after_exit_is_reported(faults):
    with pytest.raises(EmuKernelError, match=r"__syncthreads .* can never complete: 64 threads wait at it but 64"):
        faults.launch("barrier_after_exit", 1, 128, 0, [out()], [0])


def test_deadlock_report_lists_thread_states(faults):
    with pytest.raises(EmuKernelError) as e:
        faults.launch("partial_warp_shuffle", 1, 32, 0, [out(32)], [0])
    message = str(e.value)
    assert "deadlock in block (0,0,0)" in message
    assert "threads 0-15: wait at shfl.sync.bfly (mask 0xffffffff)" in message
    assert "threads 16-31: exited" in message


def test_divergent_collectives_are_reported(faults):
    with pytest.raises(EmuKernelError, match=r"warp divergence in warp 0: lane 1 reached __syncwarp .* lane 0 waits at"
                                             r" shfl.sync.bfly"):
        faults.launch("divergent_collectives", 1, 32, 0, [out(32)], [0])


def test_full_mask_in_a_short_warp_is_reported(faults):
    with pytest.raises(EmuKernelError, match="names lanes that do not exist"):
        faults.launch("shuffle_in_short_warp", 1, 16, 0, [out(16)], [0])


def test_write_past_the_end_faults_on_the_guard(faults):
    with pytest.raises(EmuKernelError, match=r"out-of-bounds access at byte offset 4096 of argument #0 \(64 bytes\)"):
        faults.launch("write_at", 1, 32, 0, [out(16), np.int32(16), np.int32(1008)], [0])


def test_write_into_the_slack_is_found_by_the_canary(faults):
    # 3 floats = 12 bytes; byte 12 is inside the 16-byte slack before the guard.
    with pytest.raises(EmuKernelError, match=r"out-of-bounds write at byte offset 12 of argument #0 \(12 bytes\)"):
        faults.launch("write_at", 1, 32, 0, [out(3), np.int32(3), np.int32(0)], [0])


def test_read_before_the_start_faults(faults):
    with pytest.raises(EmuKernelError, match=r"out-of-bounds access \d+ bytes before the start of argument #0"):
        faults.launch("read_before_start", 1, 32, 0, [np.ones(4, np.float32), out(1), np.int32(5000)], [1])


def test_in_bounds_write_passes(faults):
    (result,) = faults.launch("write_at", 1, 32, 0, [np.zeros(4, np.float32), np.int32(3), np.int32(0)], inouts=[0])
    np.testing.assert_array_equal(result, [0, 0, 0, 1])


def test_dynamic_shared_memory_overflow_is_reported(faults):
    with pytest.raises(EmuKernelError, match="byte 259 written, but the launch asked for 256 bytes"):
        faults.launch("dynamic_smem_overflow", 1, 32, 256, [np.int32(256)])


def test_endless_kernel_times_out(faults):
    with pytest.raises(EmuTimeout, match="no result after 1 s"):
        faults.launch("endless", 1, 32, 0, [np.zeros(1, np.int32)], timeout=1.0)


def test_misaligned_cp_async_is_reported(faults):
    with pytest.raises(EmuKernelError, match="cp.async of 16 bytes needs 16-byte aligned addresses"):
        faults.launch("misaligned_cp_async", 1, 32, 0, [np.zeros(8, np.float32)])


def test_ldmatrix_from_global_memory_is_reported(faults):
    with pytest.raises(EmuKernelError, match="ldmatrix row address: address 0x[0-9a-f]+ is not in shared memory"):
        faults.launch("ldmatrix_from_global", 1, 32, 0, [np.zeros(64, np.uint16), np.empty(32, np.uint32)], [1])


def test_failed_assert_is_a_crash(faults):
    with pytest.raises(EmuKernelError, match=r"crashed \(SIGABRT\)(.|\n)*Assertion `n > 0' failed"):
        faults.launch("failed_assert", 1, 32, 0, [np.int32(0)])


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
def test_missing_barrier_reads_poison(faults, schedule):
    (result,) = faults.launch("missing_barrier", 1, 64, 0, [out(64)], [0], schedule=schedule)
    assert np.isnan(result).any()
    (result,) = faults.launch("with_barrier", 1, 64, 0, [out(64)], [0], schedule=schedule)
    np.testing.assert_array_equal(result, np.arange(64) ^ 1)


def test_static_shared_memory_is_poisoned_at_every_block_start(faults):
    (result,) = faults.launch("read_before_write", 4, 32, 0, [out(128), np.int32(1)], [0], workers=1)
    assert np.isnan(result).all()


def test_kernel_printf_is_kept(faults):
    faults.launch("hello", 2, 32, 0, [np.int32(7)], workers=1)
    assert "hello from block 0: 7" in faults.last_log
    assert "hello from block 1: 7" in faults.last_log


@pytest.fixture(scope="module")
def faults_tsan() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "faults.cu", tsan=True)


def test_tsan_mode_reports_the_race(faults_tsan):
    race = r"ThreadSanitizer reported a data race(.|\n)*#0 missing_barrier .*faults\.cu:\d+"
    with pytest.raises(EmuRaceError, match=race):
        faults_tsan.launch("missing_barrier", 1, 64, 0, [out(64)], [0])
    (result,) = faults_tsan.launch("with_barrier", 1, 64, 0, [out(64)], [0])
    np.testing.assert_array_equal(result, np.arange(64) ^ 1)


def test_tsan_mode_sees_no_synchronisation_that_cuda_lacks(faults_tsan):
    # __syncwarp in two warps goes through the block's one mutex; that must
    # not count as ordering between the warps.
    with pytest.raises(EmuRaceError, match=r"#0 race_behind_syncwarp"):
        faults_tsan.launch("race_behind_syncwarp", 1, 64, 0, [out(1), np.int32(50)], [0])


def test_tsan_mode_keeps_the_emulator_checks(faults_tsan):
    with pytest.raises(EmuKernelError, match="out-of-bounds access at byte offset 4096") as e:
        faults_tsan.launch("write_at", 1, 32, 0, [out(16), np.int32(16), np.int32(1008)], [0])
    assert not isinstance(e.value, EmuRaceError)
    with pytest.raises(EmuKernelError, match="deadlock in block") as e:
        faults_tsan.launch("partial_warp_shuffle", 1, 32, 0, [out(32)], [0])
    assert not isinstance(e.value, EmuRaceError)


# ---------------------------------------------------------------------------
# Rejected launches and sources.

def test_unknown_kernel_lists_the_kernels(faults):
    with pytest.raises(EmuLaunchError, match="has no kernel 'nope' .*barrier_after_exit"):
        faults.launch("nope", 1, 32)


def test_argument_count_is_checked(faults):
    with pytest.raises(EmuLaunchError, match="takes 3 arguments, 2 given"):
        faults.launch("write_at", 1, 32, 0, [out(4), np.int32(1)])


def test_argument_kinds_and_sizes_are_checked(faults):
    with pytest.raises(EmuLaunchError, match=r"argument #1 is `int` \(4 bytes\) but a value of 8 bytes was passed"):
        faults.launch("write_at", 1, 32, 0, [out(4), np.int64(1), np.int32(0)])
    with pytest.raises(EmuLaunchError, match=r"argument #0 is `float\*` \(8 bytes\) but a value of 4 bytes"):
        faults.launch("write_at", 1, 32, 0, [np.float32(1), np.int32(1), np.int32(0)])
    with pytest.raises(TypeError, match="a Python int has no C type"):
        faults.launch("write_at", 1, 32, 0, [out(4), 1, np.int32(0)])


def test_launch_configuration_is_checked(faults):
    with pytest.raises(EmuLaunchError, match="invalid block"):
        faults.launch("hello", 1, 2048, 0, [np.int32(0)])
    with pytest.raises(EmuLaunchError, match="MaxDynamicSharedMemorySize, 300000\\): over the opt-in limit of 232448 "
                                             "bytes per block of the emulated sm_90a"):
        faults.launch("hello", 1, 32, 300_000, [np.int32(0)])
    with pytest.raises(ValueError, match="grid must be 1 to 3 positive sizes"):
        faults.launch("hello", (1, 0), 32, 0, [np.int32(0)])


def test_compile_errors_point_at_the_source():
    source = '#include "gg_runtime.cuh"\nextern "C" __global__ void k(float* x) {\n  x[0] = undefined_name;\n}\n'
    with pytest.raises(EmuCompileError, match=r"broken\.cu:3:10: error: .undefined_name. was not declared"):
        EmuModule(source, "broken.cu")
