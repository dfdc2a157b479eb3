#!/usr/bin/env python3
"""Run the CUDA runtime's test vectors on a real GPU and print a pass/fail table.

The vectors are the emulator tests' own (tests/cuda_runtime_cases.py): every
gg:: primitive (mma.sync bf16/f16/e4m3/e5m2/s8, the fragment layouts,
ldmatrix x1/x2/x4 and .trans, cp.async with zero-fill, shuffles and warp
reductions, 128-bit loads, indexing and atomics) and the sample tiled GEMM,
compiled from tests/cuda_src/ with CuPy (NVRTC, falling back to nvcc) for the
current device. Cases whose result is the emulator's model (cp.async poison)
and cases the device's arch lacks (FP8 mma before sm_89) are listed as
skipped.

    python scripts/gpu_check_cuda_runtime.py
    python scripts/gpu_check_cuda_runtime.py --emulate   # the same flow on the CPU emulator (sm_90a)

`--emulate` runs every step but the GPU's own (the same cases, modules and
checks, on cuda_emu.EmuModule, which has GpuModule's launch signature), so the
script's first run on a lent GPU cannot fail on a stale name; its times are the
emulator's, not a measurement.

Exit status: 0 when every case passed or no GPU is usable (a message says
which), 1 when a case failed.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from gemmgen.harness import cuda_gpu  # noqa: E402


def compile_source(name: str, defines: dict[str, int]) -> cuda_gpu.GpuModule:
    path = ROOT / "tests" / "cuda_src" / name
    try:
        return cuda_gpu.GpuModule.from_file(path, defines=defines)
    except Exception:
        print(f"NVRTC could not compile {name}; retrying with nvcc", file=sys.stderr)
        return cuda_gpu.GpuModule.from_file(path, defines=defines, backend="nvcc")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emulate", action="store_true", help="run on the CPU emulator (sm_90a), not a GPU")
    ap.add_argument("--case", action="append", help="only the cases whose name contains this")
    args = ap.parse_args(argv)
    if args.emulate:
        from gemmgen.harness.cuda_emu import EmuModule

        arch = 90

        def build(name: str, defines: dict[str, int]):
            return EmuModule.from_file(ROOT / "tests" / "cuda_src" / name, defines=defines)
    else:
        reason = cuda_gpu.unavailable_reason()
        if reason:
            print(f"SKIPPED: {reason}; nothing was run.")
            return 0
        arch = cuda_gpu.device_arch()
        build = compile_source
    import cuda_runtime_cases as cases

    defines = {} if arch >= 89 else {"GG_NO_FP8": 1}
    modules: dict[str, cuda_gpu.GpuModule] = {}
    rows: list[tuple[str, str, str]] = []
    for case in cases.all_cases():
        if args.case and not any(c in case.name for c in args.case):
            continue
        if case.emulator_only and not args.emulate:
            rows.append((case.name, "skip", "models the emulator, undefined on a GPU"))
            continue
        if case.min_arch > arch:
            rows.append((case.name, "skip", f"needs sm_{case.min_arch}, device is sm_{arch}"))
            continue
        start = time.perf_counter()
        try:
            if case.source not in modules:
                modules[case.source] = build(case.source, defines)
            case.check(cases.launch(modules[case.source], case))
            rows.append((case.name, "PASS", f"{(time.perf_counter() - start) * 1e3:.1f} ms"))
        except AssertionError as e:
            rows.append((case.name, "FAIL", str(e).splitlines()[0]))
        except Exception as e:
            rows.append((case.name, "ERROR", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
            traceback.print_exc(file=sys.stderr)

    width = max(len(r[0]) for r in rows)
    print(f"device: sm_{arch}{' (the CPU emulator)' if args.emulate else ''}")
    print(f"{'case':<{width}}  result  detail")
    for name, result, detail in rows:
        print(f"{name:<{width}}  {result:<6}  {detail}")
    failed = [r for r in rows if r[1] in ("FAIL", "ERROR")]
    passed = sum(r[1] == "PASS" for r in rows)
    print(f"\n{passed} passed, {len(failed)} failed, {len(rows) - passed - len(failed)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
