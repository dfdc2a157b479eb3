#!/usr/bin/env python3
"""Per-call host work of the generated CuPy launchers at decode shapes.

A repeated call of the same shape (what a decode step does) finds its
signature (shapes, strides, dtypes, devices, alignment, scalars) among
those already checked and runs their launch plan: its arrays taken in,
the signature looked up, the arguments picked by position, the launch
calls. A new signature runs every check (validate() and the device's) and
plans its launches first. This script times that host work per call:

    python scripts/host_overhead.py            # on the GPU, with CuPy: whole calls
    python scripts/host_overhead.py --standin  # no GPU: the CuPy stand-in, launches not run
    python scripts/host_overhead.py --kernel dense_gemv_bf16  # one row

With `--standin` (gemmgen/harness/cupy_standin.py) each kernel launch is
replaced by a no-op, so the figure is the launcher's own Python work and
excludes CuPy's kernel-call cost (a few microseconds per launch on a GPU
host). Output and callers' workspace are passed in, as a serving loop would.
Each figure is the median of --repeats batches (the machine may be shared).
Results go in docs/benchmarks.md ("Host overhead"); nothing asserts them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gemmgen.build import render_spec  # noqa: E402
from gemmgen.cases import Case  # noqa: E402
from gemmgen.harness.runner import load_generated_module  # noqa: E402

CASES = [
    ("dense", "dense_gemm_bf16", Case("decode", m=16, n=4096, k=4096)),
    ("dense", "dense_gemv_bf16", Case("decode", m=1, n=4096, k=4096)),
    ("moe", "moe_bf16_grouped_gemm", Case("decode", m=64, n=4096, k=4096, group_sizes=(8,) * 8)),
    ("moe", "moe_w8a8_grouped_gemm", Case("decode", m=64, n=4096, k=4096, group_sizes=(8,) * 8)),
]
BITS = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}


def measure(cupy, stem: str, name: str, case: Case, calls: int, repeats: int,
            no_launch: bool) -> tuple[float, float, float]:
    """Seconds per call, each the median of `repeats` batches of `calls`: a
    repeated call, a call of a signature not seen before (its checks and
    planning: the launcher's cache of signatures emptied before each), and
    validate() alone."""
    kernel = render_spec(ROOT / "specs" / f"{stem}.gemm").spec.kernel(name)
    inputs = case.inputs(kernel, 0)
    module = load_generated_module(ROOT / "generated" / stem / "cuda" / f"{name}.py", f"host_overhead_{name}")
    args = {a: cupy.asarray(v.view(BITS[v.dtype.name]) if v.dtype.name in BITS else v)
            if isinstance(v, np.ndarray) and v.ndim else v for a, v in inputs.items()}
    dims = module.validate(**inputs)
    for out, shape in module.output_shapes(dims).items():
        dtype = module.DTYPES[out]
        args[out] = cupy.empty(shape, BITS.get(dtype, dtype))
    args["workspace"] = cupy.empty(max(module.workspace_ints(dims), 4), np.int32)
    fn = getattr(module, name)
    fn(**args)  # builds the module, fills the caches
    if no_launch:
        module._function = lambda sm, entry, smem: (lambda grid, block, a, shared_mem=0, stream=None: None)
        module._CALLS.clear()
        module._plan.cache_clear()
        fn(**args)  # the call's plan again, over no-op launches

    def repeated():
        fn(**args)

    def new_signature():
        module._CALLS.clear()
        fn(**args)

    checks = {a: v for a, v in args.items() if a != "workspace"}

    def validate():
        module.validate(**checks)

    def median(what) -> float:
        cupy.cuda.Device().synchronize()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                what()
            times.append((time.perf_counter() - start) / calls)
        cupy.cuda.Device().synchronize()
        return statistics.median(times)

    return median(repeated), median(new_signature), median(validate)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--standin", action="store_true", help="no GPU: the CuPy stand-in, launches not run")
    ap.add_argument("--calls", type=int, default=2000, help="calls per timed batch")
    ap.add_argument("--repeats", type=int, default=5, help="batches; the median is reported")
    ap.add_argument("--kernel", action="append", choices=[name for _, name, _ in CASES],
                    help="only this kernel's row (repeat for more; default: every row)")
    args = ap.parse_args()
    if args.standin:
        from gemmgen.harness import cupy_standin

        context = cupy_standin.install(ROOT / "generated", "sm_90a", launch=False)
    else:
        import contextlib

        from gemmgen.harness import cuda_gpu

        if reason := cuda_gpu.unavailable_reason():
            print(f"host_overhead: skipped: {reason} (--standin runs without a GPU)")
            return 0
        context = contextlib.nullcontext()
    with context:
        import cupy

        print("| kernel | shape | host us/call | a new signature | validate() alone |")
        print("|---|---|---|---|---|")
        for stem, name, case in CASES:
            if args.kernel and name not in args.kernel:
                continue
            times = measure(cupy, stem, name, case, args.calls, args.repeats, args.standin)
            figures = " | ".join(f"{t * 1e6:.1f}" for t in times)
            print(f"| {name} | {case.describe()} | {figures} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
