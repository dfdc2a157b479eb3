"""Thread-block clusters on the CPU emulator (docs/cuda-emulation.md,
"Clusters"): cudaLaunchKernelEx with cudaLaunchAttributeClusterDimension and
the driver's cluster checks, the C ABI's and the request file's cluster
dimension, the special registers, distributed shared memory (mapa, ld / st
.shared::cluster), barrier.cluster, remote mbarrier arrivals and the
multicast TMA load, with the bugs the emulator must report
(tests/cuda_src/cluster_primitives.cu).

The expected values are computed here from the CUDA programming guide's
definitions (cluster rank x-fastest over the cluster's CTAs, cluster index =
block index / cluster dimension), not read from the emulator."""

import re
import struct
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC

from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError, EmuLaunchError, EmuModule, TensorMap
from gemmgen.harness.cuda_emu.protocol import _decode_response

CUDA_ERROR_INVALID_CLUSTER_SIZE, CUDA_ERROR_NOT_SUPPORTED = 912, 801


@pytest.fixture(scope="module")
def clusters() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "cluster_primitives.cu")


def expected_ids(grid, cluster) -> np.ndarray:
    """cluster_ids' 16 words per block, from the definitions."""
    gx, gy, gz = grid
    cx, cy, cz = cluster
    rows = []
    for bz in range(gz):
        for by in range(gy):
            for bx in range(gx):
                rank = bx % cx + cx * (by % cy + cy * (bz % cz))
                rows.append([rank, cx * cy * cz, bx // cx, by // cy, bz // cz, bx % cx, by % cy, bz % cz,
                             cx, cy, cz, gx // cx, gy // cy, gz // cz, bx + 1000 * by + 1000000 * bz, 0xC1])
    return np.array(rows, np.uint32)


@pytest.mark.parametrize(
    "grid, cluster",
    [((4, 2, 1), (2, 1, 1)),
     pytest.param((2, 4, 2), (1, 2, 2), marks=pytest.mark.slow),
     pytest.param((4, 4, 1), (2, 2, 1), marks=pytest.mark.slow),
     pytest.param((3, 1, 1), (1, 1, 1), marks=pytest.mark.slow)],
)
def test_special_registers(clusters, grid, cluster):
    blocks = grid[0] * grid[1] * grid[2]
    (ids,) = clusters.launch("cluster_ids", grid, 32, args=[np.zeros(16 * blocks, np.uint32)], outputs=[0],
                             cluster=cluster)
    np.testing.assert_array_equal(ids.reshape(blocks, 16), expected_ids(grid, cluster))


def host(module, arch="sm_90a", **inputs):
    result = module.run_host({k: np.uint32(v) for k, v in inputs.items()}, arch=arch)
    assert result.status == 0
    return result


@pytest.mark.parametrize("typed", [0, 1])
def test_launch_kernel_ex_runs_clusters(clusters, typed):
    """cudaLaunchKernelExC, and cuda_runtime.h's cudaLaunchKernelEx template
    on top of it, with the cluster attribute and a hint beside it."""
    r = host(clusters, gx=4, gy=2, cx=2, cy=2, typed=typed)
    assert np.frombuffer(r.outputs["status"], np.int32)[0] == 0
    ids = np.frombuffer(r.outputs["ids"], np.uint32).reshape(8, 16)
    np.testing.assert_array_equal(ids, expected_ids((4, 2, 1), (2, 2, 1)))


@pytest.mark.parametrize(
    "inputs, arch, code, why",
    [({"gx": 3, "cx": 2}, "sm_90a", CUDA_ERROR_INVALID_CLUSTER_SIZE, "x = 3 is not divisible by 2"),
     ({"gx": 16, "cx": 16}, "sm_90a", CUDA_ERROR_INVALID_CLUSTER_SIZE, "over the portable limit of 8"),
     ({"gx": 4, "cx": 0}, "sm_90a", CUDA_ERROR_INVALID_CLUSTER_SIZE, "has a zero size"),
     ({"gx": 4, "cx": 2}, "sm_89", CUDA_ERROR_NOT_SUPPORTED, "need compute capability 9.0"),
     ({"gx": 32, "cx": 32, "non_portable": 1}, "sm_90a", CUDA_ERROR_INVALID_CLUSTER_SIZE,
      "over the non-portable limit of 16"),
     ({"gx": 4, "cx": 2, "cooperative": 1}, "sm_90a", CUDA_ERROR_NOT_SUPPORTED,
      "launch attribute 2 (attrs[1]) is not modelled")],
)
def test_launch_kernel_ex_refuses_what_the_driver_refuses(clusters, inputs, arch, code, why):
    r = host(clusters, arch=arch, **inputs)
    assert np.frombuffer(r.outputs["status"], np.int32)[0] == code
    assert why in r.outputs["message"].decode()
    assert np.frombuffer(r.outputs["last_error"], np.int32)[0] == code  # left for cudaGetLastError


def test_non_portable_cluster_size_with_the_attribute(clusters):
    r = host(clusters, gx=16, cx=16, non_portable=1)
    ids = np.frombuffer(r.outputs["ids"], np.uint32).reshape(16, 16)
    np.testing.assert_array_equal(ids, expected_ids((16, 1, 1), (16, 1, 1)))


def test_harness_checks_the_cluster_as_the_driver(clusters):
    with pytest.raises(EmuLaunchError, match=r"not a multiple of the cluster dimension.*cudaErrorInvalidClusterSize"):
        clusters.launch("cluster_ids", (6, 1, 1), 32, args=[np.zeros(96, np.uint32)], outputs=[0], cluster=(4, 1, 1))
    with pytest.raises(EmuLaunchError, match="compute capability 9.0"):
        clusters.launch("cluster_ids", (4, 1, 1), 32, args=[np.zeros(64, np.uint32)], outputs=[0], cluster=2,
                        arch="sm_89")


def test_version_3_request_files_still_run(clusters):
    """A request of the previous format (no cluster field) is a launch
    without clusters."""
    name = b"cluster_ids"
    request = b"".join([
        b"GGEMUREQ", struct.pack("<II", 3, len(name)), name,
        struct.pack("<6IQqI", 2, 1, 1, 32, 1, 1, 0, -1, 1),
        struct.pack("<IIQ", 0, 3, 2 * 16 * 4),  # a returned, poisoned buffer
    ])
    with tempfile.TemporaryDirectory() as tmp:
        req, resp = Path(tmp) / "request", Path(tmp) / "response"
        req.write_bytes(request)
        proc = clusters._run_child(req, resp, "gg_emu_run_request", "cluster_ids", "sm_90a", "run-ahead", None, 60.0)
        assert proc.returncode == 0, proc.stderr
        ids = _decode_response(resp.read_bytes(), [np.zeros(32, np.uint32)])[0]
    np.testing.assert_array_equal(ids.reshape(2, 16), expected_ids((2, 1, 1), (1, 1, 1)))


def test_the_c_abi_launch_takes_a_cluster(clusters):
    """gg_emu_launch_cluster refuses a bad cluster before any thread runs
    (so this may call it in the test's own process)."""
    import ctypes

    lib = ctypes.CDLL(str(clusters.library))
    lib.gg_emu_launch_cluster.restype = ctypes.c_int
    lib.gg_emu_last_error.restype = ctypes.c_char_p
    dims = ctypes.c_uint * 3
    out = ctypes.c_void_p(0)
    args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(out), ctypes.c_void_p))
    code = lib.gg_emu_launch_cluster(b"cluster_ids", dims(3, 1, 1), dims(32, 1, 1), dims(2, 1, 1),
                                     ctypes.c_size_t(0), args, ctypes.c_size_t(1))
    assert code == CUDA_ERROR_INVALID_CLUSTER_SIZE
    assert b"x = 3 is not divisible by 2" in lib.gg_emu_last_error()


# ---------------------------------------------------------------------------
# Distributed shared memory.


def dsmem(module, bug, grid=(4, 1, 1), cluster=(2, 1, 1), schedule="run-ahead"):
    blocks = grid[0] * grid[1] * grid[2]
    words = np.random.default_rng(7 + bug).integers(1, 2**31, size=256 * blocks, dtype=np.uint32)
    (out,) = module.launch("dsmem_exchange", grid, 256, 8192,
                           args=[words, np.zeros(3 * 256 * blocks, np.uint32), np.int32(bug)], outputs=[1],
                           cluster=cluster, schedule=schedule)
    return words.reshape(blocks, 256), out.reshape(blocks, 256, 3)


@pytest.mark.parametrize(
    "cluster, schedule",
    [((2, 1, 1), "run-ahead"),
     pytest.param((2, 1, 1), "reverse", marks=pytest.mark.slow),
     pytest.param((4, 1, 1), "run-ahead", marks=pytest.mark.slow)],
)
def test_distributed_shared_memory(clusters, cluster, schedule):
    n = cluster[0]
    words, out = dsmem(clusters, 0, grid=(8, 1, 1), cluster=cluster, schedule=schedule)
    nxt = [(b // n) * n + (b % n + 1) % n for b in range(8)]
    prv = [(b // n) * n + (b % n + n - 1) % n for b in range(8)]
    np.testing.assert_array_equal(out[:, :, 0], words[nxt])  # generic mapa pointer
    np.testing.assert_array_equal(out[:, :, 1], words[prv])  # ld.shared::cluster
    np.testing.assert_array_equal(out[:, :, 2], words + 1)  # st.shared::cluster from the previous CTA


@pytest.mark.parametrize(
    "bug, message",
    [(1, (r"access to the shared memory of CTA rank 1 \(block \(\d,0,0\)\) of cluster \(\d,0,0\) after every "
          r"thread of that CTA exited.*barrier.cluster.arrive \+ barrier.cluster.wait before exiting")),
     (2, r"ld.shared::cluster: CTA rank 1 .* whose threads have all exited: its shared memory is released"),
     (3, r"mapa \(generic\): CTA rank 2 is not in the cluster \(of 2 CTAs: ranks 0..1\)"),
     (4, (r"mapa.shared::cluster: bytes \[1[23]\d+, 1[23]\d+\) of the dynamic shared memory of CTA rank \d .* "
          r"the launch gave each CTA 8192 bytes"))],
)
def test_distributed_shared_memory_bugs(clusters, bug, message):
    with pytest.raises(EmuKernelError, match=message):
        dsmem(clusters, bug)


# ---------------------------------------------------------------------------
# Remote mbarrier arrivals and barrier.cluster.


def test_remote_arrivals(clusters):
    (out,) = clusters.launch("remote_arrive", (6, 1, 1), 64, args=[np.zeros(6 * 3 * 16, np.uint32), np.int32(0)],
                             outputs=[0], cluster=(3, 1, 1))
    out = out.reshape(6, 3, 16)[:, :, :3]
    for b in range(6):
        for rnd in range(3):
            # word r of CTA b: written by CTA rank r for the receiver rank b % 3
            np.testing.assert_array_equal(out[b, rnd], [100 * rnd + 10 * r + b % 3 for r in range(3)])


def test_a_missing_remote_arrival_is_a_cluster_deadlock(clusters):
    with pytest.raises(EmuKernelError) as e:
        clusters.launch("remote_arrive", (3, 1, 1), 64, args=[np.zeros(3 * 3 * 16, np.uint32), np.int32(1)],
                        outputs=[0], cluster=(3, 1, 1))
    text = str(e.value)
    assert "deadlock in cluster (0,0,0) of 3 CTAs" in text
    assert "CTA rank 0, block (0,0,0):\n  threads 0-63: wait at mbarrier.try_wait.parity" in text
    assert "1 of 3 arrivals missing" in text
    assert "CTA rank 1, block (1,0,0):\n  threads 0-63: wait at barrier.cluster.wait" in text


# ---------------------------------------------------------------------------
# The multicast TMA load.


def multicast(module, bug, n=4, rows=64, clusters_=2, schedule="run-ahead"):
    a = np.random.default_rng(3).standard_normal((clusters_ * rows, 64)).astype(ml_dtypes.bfloat16)
    assert np.all(a != 0)
    blocks = n * clusters_
    tm = TensorMap.of_array(4, a, box=(64, rows // n))
    (out,) = module.launch("multicast_tile", (blocks, 1, 1), 128, rows * 128 + 1024,
                           args=[tm, np.zeros(blocks * rows * 64, np.uint16), np.int32(rows), np.int32(bug)],
                           outputs=[1], buffers=[a], cluster=(n, 1, 1), schedule=schedule)
    return a.view(np.uint16), out.reshape(clusters_, n, rows, 64)


@pytest.mark.parametrize(
    "n, schedule",
    [(4, "run-ahead"), pytest.param(2, "reverse", marks=pytest.mark.slow),
     pytest.param(8, "run-ahead", marks=pytest.mark.slow)],
)
def test_multicast_lands_in_every_cta_of_the_mask(clusters, n, schedule):
    a, out = multicast(clusters, 0, n=n, schedule=schedule)
    for c in range(2):
        for r in range(n):
            np.testing.assert_array_equal(out[c, r], a[c * 64:(c + 1) * 64])


def test_a_mask_missing_a_cta_leaves_it_waiting(clusters):
    with pytest.raises(EmuKernelError) as e:
        multicast(clusters, 1)
    text = str(e.value)
    # Every cluster of the grid deadlocks alike; which one the emulator
    # reports first depends on its worker threads' timing.
    found = re.search(r"deadlock in cluster \((\d+),0,0\) of 4 CTAs", text)
    assert found, text
    block = 4 * int(found.group(1)) + 3
    assert (f"CTA rank 3, block ({block},0,0):\n  threads 0-127: wait at mbarrier.try_wait.parity"
            in text), text
    assert "8192 transaction bytes missing (expect_tx announced 8192, TMA delivered 0)" in text


def test_a_mask_naming_a_cta_outside_the_cluster(clusters):
    with pytest.raises(EmuKernelError, match=r"ctaMask 0x001f names CTA rank 4, but the cluster has 4 CTAs"):
        multicast(clusters, 2)


# ---------------------------------------------------------------------------
# The PTX spellings, through nvcc.

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
def test_cluster_primitives_assemble_for_sm_90a():
    source = (CUDA_SRC / "cluster_primitives.cu").read_text()
    result = nvcc.compile_check(source, "sm_90a", name_for_errors="tests/cuda_src/cluster_primitives.cu")
    assert set(result.kernels) == {"cluster_ids", "dsmem_exchange", "remote_arrive", "multicast_tile"}, result.log
    sass = nvcc.sass_summary(result.cubin)
    assert sass["multicast_tile"].count("UTMALDG", "2D", "MULTICAST") == 1
    for kernel in ("dsmem_exchange", "remote_arrive", "multicast_tile"):
        assert sass[kernel].count("UCGABAR_ARV") > 0 and sass[kernel].count("UCGABAR_WAIT") > 0, kernel


@needs_nvcc
def test_cluster_primitives_before_sm_90_are_a_compile_error():
    source = (CUDA_SRC / "cluster_primitives.cu").read_text()
    with pytest.raises(nvcc.NvccError, match="need sm_90 or newer|needs sm_90 or newer"):
        nvcc.compile_check(source, "sm_80", name_for_errors="tests/cuda_src/cluster_primitives.cu")
