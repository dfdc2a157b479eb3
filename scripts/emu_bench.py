"""Times of the CPU emulator: building kernel libraries on a cold cache, and
launching a generated GEMM (docs/cuda-emulation.md, "Build times").

    .venv/bin/python scripts/emu_bench.py [--launches N] [--skip-compile]

Each build runs with GEMMGEN_CACHE set to a fresh temporary folder, so
nothing (not even the emulator's core objects) is cached: the first line is
the cold cost including the core, the following ones reuse that cache's core
as every later build of a session does. Then it launches
generated/dense/cuda/dense_gemm_bf16.cu through its Python launcher
(memory checker on, the default) and reports the median of N launches.
The figures depend on the machine and its load: compare runs made side by
side; the CPU seconds of the compilers (user + system) vary less with the
load than the wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TRIVIAL = """\
#include "gg_runtime.cuh"
extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }
"""
GENERATED = ("moe/cuda/moe_bf16_grouped_gemm.cu", "moe/cuda/moe_w8a8_grouped_gemm.cu",
             "dense/cuda/dense_gemm_bf16.cu")


def _children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes (g++)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_builds() -> list[tuple[str, float, float]]:
    from gemmgen.harness import cuda_emu

    rows = []
    with tempfile.TemporaryDirectory(prefix="gemmgen-emu-bench-") as cache:
        os.environ["GEMMGEN_CACHE"] = cache
        builds = [("trivial kernel, fiber mode (first build: + core)", lambda: cuda_emu.EmuModule(
                      TRIVIAL, "trivial.cu", memcheck=False)),
                  ("trivial kernel, memcheck (first build: + core)", lambda: cuda_emu.EmuModule(
                      TRIVIAL, "trivial.cu", memcheck=True)),
                  ("trivial kernel, memcheck, new source", lambda: cuda_emu.EmuModule(
                      TRIVIAL.replace("1.0f", "2.0f"), "trivial.cu", memcheck=True))]
        for rel in GENERATED:
            path = REPO / "generated" / rel
            builds.append((f"{rel}, memcheck", lambda p=path: cuda_emu.EmuModule.from_file(p, memcheck=True)))
        for label, build in builds:
            start, cpu = time.perf_counter(), _children_cpu()
            build()
            rows.append((label, time.perf_counter() - start, _children_cpu() - cpu))
    os.environ.pop("GEMMGEN_CACHE")
    cuda_emu._LIBRARIES.clear()  # their files went with the cache
    return rows


def launch_time(launches: int) -> tuple[float, float]:
    from gemmgen.build import render_spec
    from gemmgen.cases import Case
    from gemmgen.harness.runner import load_generated_module
    from gemmgen.harness.verify_cuda import run_launcher
    from gemmgen.reference import compare, reference

    folder = REPO / "generated" / "dense" / "cuda"
    spec = render_spec(REPO / "specs" / "dense.gemm").spec
    kernel = spec.kernel("dense_gemm_bf16")
    launcher = load_generated_module(folder / "dense_gemm_bf16.py", "bench_dense_gemm_bf16")
    case = Case("bench", m=256, n=256, k=256)
    inputs = case.inputs(kernel, 0)
    source = (folder / "dense_gemm_bf16.cu").read_text()
    modules: dict = {}
    run_launcher(launcher, source, str(folder / "dense_gemm_bf16.cu"), inputs, modules=modules, sm=0)
    times = []
    for _ in range(launches):
        start = time.perf_counter()
        actual = run_launcher(launcher, source, str(folder / "dense_gemm_bf16.cu"), inputs, modules=modules,
                              sm=0, workers=1)
        times.append(time.perf_counter() - start)
    result = compare(actual, reference(kernel, **inputs), kernel, k=case.k, inputs=inputs)
    if not result.passed:
        raise SystemExit(f"the benchmark launch is wrong:\n{result.detail}")
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--skip-compile", action="store_true")
    args = parser.parse_args()
    if not args.skip_compile:
        for label, seconds, cpu in timed_builds():
            print(f"{seconds:7.2f} s  ({cpu:6.2f} s CPU)  build: {label}", flush=True)
    median, best = launch_time(args.launches)
    print(f"{median:7.3f} s  launch: dense_gemm_bf16 256x256x256, 1 worker, memcheck (median of "
          f"{args.launches}; best {best:.3f} s)")


if __name__ == "__main__":
    main()
