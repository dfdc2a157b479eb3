#!/usr/bin/env python3
"""How long the checks a developer and a user run take on this machine.

The times README.md states (CI's test command, the whole suite, `gemmgen
verify`) are kept true by this script, not by a timed test: run it on a
quiet machine after a change that may move them, and write what it prints
into README.md and docs/decisions.md.

    python scripts/check_times.py verify [SPEC ...]   # cold cache, then warm
    python scripts/check_times.py ci                  # README's test command, cold
    python scripts/check_times.py suite               # every test, slow ones too, cold

"Cold" is a fresh, empty gemmgen cache (`GEMMGEN_CACHE`): every emulator
library, nvcc measurement, LALR table and rendered spec is built again, as
on a fresh clone; pytest's own cache is off. "Warm" runs the same command
again on the cache the cold run filled. Each run's wall time and exit
status are printed; `--keep` keeps the cache folder for a look.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider"]


def timed(label: str, cmd: list[str], env: dict[str, str]) -> float:
    """Runs `cmd` in the repository; prints and returns its wall time."""
    print(f"{label}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, check=False, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    dt = time.perf_counter() - t0
    tail = proc.stdout.strip().splitlines()[-1:] or [""]
    print(f"  {dt:7.1f} s  exit {proc.returncode}  {tail[0]}", flush=True)
    return dt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("verify", "ci", "suite"))
    p.add_argument("specs", nargs="*", default=["specs/moe.gemm"])
    p.add_argument("--keep", action="store_true", help="keep the cache folder")
    args = p.parse_args(argv)
    cache = Path(tempfile.mkdtemp(prefix="gemmgen-times-"))
    env = dict(os.environ, GEMMGEN_CACHE=str(cache))
    gemmgen = [sys.executable, "-m", "gemmgen"]
    try:
        print(f"{os.cpu_count()} cores, cache {cache}", flush=True)
        if args.what == "verify":
            for spec in args.specs:
                timed(f"verify {spec} (cold)", [*gemmgen, "verify", spec], env)
                timed(f"verify {spec} (warm)", [*gemmgen, "verify", spec], env)
        elif args.what == "ci":
            timed("CI's test command (cold)", [*PYTEST, "-m", "not slow"], env)
        else:
            timed("every test (cold)", PYTEST, env)
    finally:
        if args.keep:
            print(f"cache kept: {cache}")
        else:
            shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
