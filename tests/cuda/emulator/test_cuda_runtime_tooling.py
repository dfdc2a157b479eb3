"""The plumbing around the CUDA runtime: the build cache, toolchain lookup, the
no-inline-PTX rule for generated code, and the GPU path's clean skip."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import cuda_runtime_cases
from gemmgen.harness import cuda_emu, cuda_gpu, toolchain
from gemmgen.harness.cuda_emu import EmuModule

ROOT = Path(__file__).resolve().parents[3]
# The headers that may hold inline PTX: gg_primitives.cuh and the per-arch
# primitives (gg_primitives_sm90.cuh, gg_primitives_sm100_tmem.cuh, ...).
PRIMITIVES = re.compile(r"gg_primitives(_sm\d+(_\w+)?)?\.cuh")
GPU_SCRIPT = ROOT / "scripts" / "gpu_check_cuda_runtime.py"

TINY = """\
#include "gg_runtime.cuh"
// Doubles x in place; its dynamic shared array is declared at file scope.
extern __shared__ float staging[];
extern "C" __global__ void twice(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  staging[threadIdx.x] = i < n ? 2.0f * x[i] : 0.0f;
  __syncthreads();
  if (i < n) x[i] = staging[threadIdx.x];
}
// A kernel in an extern "C" block, named for the emulator, with a
// namespace-scope __shared__ array: x[i] = (was the array poisoned?) + 31 - i.
__shared__ float scratch[32];
extern "C" {
__global__ void reversed(float* x) {
  const float before = scratch[threadIdx.x];
  __syncthreads();
  scratch[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  x[blockIdx.x * 32 + threadIdx.x] = (before != before) + scratch[31 - threadIdx.x];
}
}
GG_EMU_REGISTER_KERNEL(reversed)
// A struct parameter and CUDA's bf16 / shuffle intrinsics on the host.
struct Scale { int n; float alpha; };
extern "C" __global__ void scale_bf16(const __grid_constant__ Scale s, float* x) {
  const int i = static_cast<int>(threadIdx.x);
  const __nv_bfloat162 pair = __shfl_xor_sync(0xffffffffu, __floats2bfloat162_rn(x[i], 0.0f), 1);
  if (i < s.n) x[i] = s.alpha * __low2float(pair);
}
"""


def test_the_emulator_core_is_compiled_once_and_linked_into_each_library():
    # The kernel-independent emulator (gg_emu_*.cc) is compiled once per
    # build mode into the cache and linked into every library; the kernel's
    # own unit does not compile it again (docs/cuda-emulation.md, "The core
    # objects").
    module = EmuModule(TINY, "tiny.cu", memcheck=False)
    core = cuda_emu.core_objects(cuda_emu.build._FIBER_FLAGS)
    units = sorted(p.name for p in toolchain.RUNTIME_INCLUDE_DIR.glob("gg_emu_*.cc"))
    assert len(core) == len(units) - 1 and "gg_emu_host.cc" in units  # the TSan child is no unit
    stamps = [p.stat().st_mtime_ns for p in core]
    assert cuda_emu.core_objects(cuda_emu.build._FIBER_FLAGS) == core  # cached: not compiled again
    assert [p.stat().st_mtime_ns for p in core] == stamps
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) not found")

    def defined(path: Path, *flags: str) -> set[str]:
        out = subprocess.run([nm, "--defined-only", *flags, str(path)], capture_output=True, text=True,
                             check=True).stdout
        return {line.split()[-1] for line in out.splitlines() if line.strip()}

    abi = {"gg_emu_run_request", "gg_emu_launch", "gg_emu_malloc", "gg_emu_cuTensorMapEncodeTiled"}
    assert abi <= set().union(*(defined(p) for p in core))
    assert abi <= defined(module.library, "-D")
    # The memory checker's core is another object: its hooks are there.
    checked = cuda_emu.core_objects(cuda_emu.build._MEMCHECK_MODE)
    assert not set(checked) & set(core)
    assert "__tsan_read4" in set().union(*(defined(p) for p in checked))


def test_libraries_are_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMGEN_CACHE", str(tmp_path))
    monkeypatch.setattr(cuda_emu, "_LIBRARIES", {})
    first = EmuModule(TINY, "tiny.cu")
    assert first.library.parent == tmp_path / "emu"
    assert first.kernels == ("twice", "scale_bf16", "reversed")
    built = first.library.stat().st_mtime_ns
    monkeypatch.setattr(cuda_emu, "_LIBRARIES", {})  # a new process: only the disk cache is left
    second = EmuModule(TINY, "tiny.cu")
    assert second.library == first.library and second.library.stat().st_mtime_ns == built
    assert not list((tmp_path / "emu").glob(".build-*")), "a build directory was left behind"
    x = np.arange(100, dtype=np.float32)
    (doubled,) = second.launch("twice", 2, 64, 64 * 4, [x, np.int32(100)], inouts=[0])
    np.testing.assert_array_equal(doubled, 2 * x)
    (flipped,) = second.launch("reversed", 3, 32, 0, [np.empty(96, np.float32)], [0], workers=1)
    np.testing.assert_array_equal(flipped, np.tile(32 - np.arange(32), 3))
    scale = np.array((20, 0.5), dtype=[("n", np.int32), ("alpha", np.float32)])[()]
    y = np.arange(32, dtype=np.float32) + 0.25
    (scaled,) = second.launch("scale_bf16", 1, 32, 0, [scale, y], inouts=[1])
    expected = np.where(np.arange(32) < 20, 0.5 * y[np.arange(32) ^ 1].astype(ml_dtypes.bfloat16), y)
    np.testing.assert_array_equal(scaled, expected.astype(np.float32))


def test_atomic_write_replaces_whole_files(tmp_path):
    target = tmp_path / "sub" / "file.bin"
    toolchain.atomic_write(target, b"one")
    toolchain.atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["file.bin"]


def test_digest_separates_parts():
    assert toolchain.digest("ab", "c") != toolchain.digest("a", "bc")


def test_cuda_headers_are_found():
    include = cuda_emu.cuda_include_dir()
    assert (include / "cuda_bf16.h").is_file() and (include / "cuda_fp8.h").is_file()
    assert (cuda_emu.runtime_include_dir() / "gg_runtime.cuh").is_file()


def test_no_inline_ptx_in_generated_code():
    generated = ROOT / "generated"
    if not generated.is_dir():
        pytest.skip("no generated/ directory yet")
    pattern = re.compile(r"\basm\b|__asm__")
    offenders = [
        str(p.relative_to(ROOT))
        for p in sorted(generated.rglob("*"))
        if p.is_file() and not PRIMITIVES.fullmatch(p.name)
        and pattern.search(p.read_text(errors="replace"))
    ]
    # generated/<stem>/cuda/ holds copies of the runtime headers, the
    # primitives headers among them.
    assert not offenders, f"inline asm belongs in the primitives headers only; found in {offenders}"


def test_inline_ptx_lives_in_the_primitives_header_only():
    pattern = re.compile(r"\basm\s*(volatile\s*)?\(")
    runtime = cuda_emu.runtime_include_dir()
    with_ptx = sorted(p.name for p in runtime.iterdir() if p.is_file() and pattern.search(p.read_text()))
    # The Hopper and the sm_12x parts are included by the first; the sm_100
    # part (tcgen05, TMEM) by the kernels that use it. The Hopper and sm_100
    # headers are umbrellas over one file per instruction family.
    assert with_ptx == ["gg_primitives.cuh", "gg_primitives_sm100_mma.cuh",
                        "gg_primitives_sm100_pair.cuh", "gg_primitives_sm100_tmem.cuh",
                        "gg_primitives_sm120.cuh",
                        "gg_primitives_sm90_cluster.cuh", "gg_primitives_sm90_mbarrier.cuh",
                        "gg_primitives_sm90_tma.cuh", "gg_primitives_sm90_wgmma.cuh"]
    assert all(PRIMITIVES.fullmatch(name) for name in with_ptx)


@pytest.mark.skipif(cuda_gpu.unavailable_reason() is None, reason="a GPU is available here")
def test_gpu_path_skips_cleanly_without_a_gpu():
    assert isinstance(cuda_gpu.unavailable_reason(), str)
    with pytest.raises(toolchain.ToolchainError, match="cannot run on a GPU"):
        cuda_gpu.GpuModule(TINY, "tiny.cu")
    proc = subprocess.run([sys.executable, str(GPU_SCRIPT)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("SKIPPED: ")


class EmulatedGpuModule:
    """Stands in for cuda_gpu.GpuModule so the GPU script's logic runs here."""

    @classmethod
    def from_file(cls, path, **kwargs):
        kwargs.pop("backend", None)
        return EmuModule.from_file(path, **kwargs)


def test_gpu_script_table_on_an_emulated_sm_89(monkeypatch, capsys):
    monkeypatch.setattr(cuda_gpu, "unavailable_reason", lambda: None)
    monkeypatch.setattr(cuda_gpu, "device_arch", lambda: 89)
    monkeypatch.setattr(cuda_gpu, "GpuModule", EmulatedGpuModule)
    spec = importlib.util.spec_from_file_location("gpu_check_cuda_runtime", GPU_SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main() == 0
    out = capsys.readouterr().out
    cases = cuda_runtime_cases.all_cases()
    assert f"{len(cases) - 1} passed, 0 failed, 1 skipped" in out
    assert re.search(r"cp_async_groups\s+skip\s+models the emulator", out)


def test_only_shared_memory_is_zero_initialised_thread_local():
    # Fiber mode poisons the library's whole .tbss at every block start, so a
    # runtime thread_local there would be clobbered: the runtime's own
    # (gg::emu::tls, gg::emu::host_thread, the builtin variables gridDim and
    # blockDim) must have a nonzero initialiser and live in .tdata.
    module = EmuModule.from_file(cuda_runtime_cases.CUDA_SRC / "faults.cu")
    sections = subprocess.run(["readelf", "-SW", str(module.library)], capture_output=True, text=True)
    proc = subprocess.run(["readelf", "-sW", "--demangle", str(module.library)], capture_output=True, text=True)
    if proc.returncode != 0 or sections.returncode != 0:
        pytest.skip("readelf is not available")
    lines = proc.stdout.splitlines()
    tls = {line.split()[-1] for line in lines if " TLS " in line and " UND " not in line}
    runtime = {"gg::emu::tls", "gg::emu::host_thread", "gridDim", "blockDim"} | (
        {"gg::emu::mc::worker"} if module.memcheck else set())
    allowed = runtime | {"gg_emu_dynamic_smem", "smem"}
    strays = {s for s in tls - allowed if s.split("::")[0] not in module.kernels}
    assert not strays, f"thread_local variables that are not shared memory: {sorted(strays)}"
    assert runtime | {"gg_emu_dynamic_smem"} <= tls
    # The runtime's own live in .tdata (a nonzero initialiser), not in .tbss.
    sections = subprocess.run(["readelf", "-SW", str(module.library)], capture_output=True, text=True).stdout
    tdata = re.search(r"\[\s*(\d+)\]\s+\.tdata\s", sections).group(1)
    for line in lines:
        if " TLS " in line and line.split()[-1] in runtime:
            assert line.split()[6] == tdata, line


def test_truncated_or_malformed_responses_are_emulator_errors():
    """A child that dies while writing its response leaves a short file: the
    decoder says so as an EmuError, at every cut, never a bare struct.error
    or ValueError."""
    import struct

    import numpy as np

    from gemmgen.harness import cuda_emu

    out = np.arange(6, dtype=np.float32)
    good = b"GGEMURSP" + struct.pack("<I", 1) + struct.pack("<IQ", 0, out.nbytes) + out.tobytes()
    (decoded,) = cuda_emu._decode_response(good, [out]).values()
    assert np.array_equal(decoded, out)
    for cut in range(len(good)):
        with pytest.raises(cuda_emu.EmuError):
            cuda_emu._decode_response(good[:cut], [out])
    wrong_size = good.replace(struct.pack("<IQ", 0, out.nbytes), struct.pack("<IQ", 0, 4))
    with pytest.raises(cuda_emu.EmuError, match="not an array argument of that size"):
        cuda_emu._decode_response(wrong_size, [out])
    host = (b"GGEMUOUT" + struct.pack("<IiI", 1, 0, 1) + struct.pack("<I", 3) + b"out"
            + struct.pack("<Q", 4) + b"\x01\x02\x03\x04")
    assert cuda_emu._decode_host_response(host) == (0, {"out": b"\x01\x02\x03\x04"})
    for cut in range(len(host)):
        with pytest.raises(cuda_emu.EmuError):
            cuda_emu._decode_host_response(host[:cut])
