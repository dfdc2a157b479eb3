#!/usr/bin/env python3
"""Probes for a lent GPU: what the CPU emulator cannot tell.

    python scripts/gpu_probe.py fp8-accumulation   # bits Hopper's FP8 wgmma keeps
    python scripts/gpu_probe.py exact-fp8          # FP8 kernels of specs/ on exactly summable inputs
    python scripts/gpu_probe.py sweep SPEC KERNEL [--m M ...] [--k K ...] [--groups G ...]

`fp8-accumulation` builds a probe kernel (e4m3 x e4m3 -> f32, no scales) and
runs, for each row r, 256 + 2**(8 - r) (and 256 - 2**(8 - r)) with the small
term at K positions inside one wgmma (k < 32), in another wgmma of the same
K tile (k < 128) and in a later K tile: the smallest term that still changes
the f32 result says how many bits the tensor core's accumulator keeps, and
whether it truncates or rounds. `exact-fp8` runs the FP8 x FP8 kernels of
specs/ on small-integer operands (every partial sum exact in 12 bits), so a
mismatch there is a kernel bug, not accumulation precision. `sweep` runs one
kernel of specs/ at a grid of shapes on both of its paths (the Hopper one
and mma.sync) against the NumPy reference and prints where elements go
wrong. Each writes a JSON file to --out (default $OUT, else .).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gemmgen import ir  # noqa: E402
from gemmgen.build import render_spec  # noqa: E402
from gemmgen.harness import cuda_gpu  # noqa: E402
from gemmgen.harness.runner import load_generated_module  # noqa: E402
from gemmgen.reference import compare, random_inputs, reference  # noqa: E402

PROBE_SPEC = """\
target cuda {
  archs sm_90a
}

kernel probe_fp8_f32 {
  op dense
  lhs e4m3 [m, k]
  rhs e4m3 [n, k]
  out f32
  tile m=128 n=128 k=128
  backends cuda
}
"""
# K positions of the small term: the same wgmma (k32), another wgmma of the
# K tile (128), later K tiles.
POSITIONS = (1, 8, 31, 32, 64, 127, 128, 255, 256, 511)


EMULATE = False  # --emulate: the CPU emulator of an sm_90a device stands in for the GPU


def _run(launcher, inputs: dict, *, mma_sync: bool = False) -> tuple[np.ndarray, ...]:
    """The launcher's outputs for `inputs`: on the GPU, or with --emulate on
    the CPU emulator through the same launch plan (docs/cuda-emulation.md)."""
    if not EMULATE:
        return cuda_gpu.call_launcher(launcher, inputs, mma_sync=mma_sync)
    from gemmgen.harness.verify_cuda import run_launcher

    source = Path(launcher.SOURCE)
    got = run_launcher(launcher, source.read_text(), str(source), inputs, arch="sm_90a",
                       sm=90, num_sms=0 if mma_sync else None)
    return got if isinstance(got, tuple) else (got,)


def _launcher_of(spec_text: str, kernel: str):
    tmp = Path(tempfile.mkdtemp(prefix="gemmgen-probe-"))
    (tmp / "probe.gemm").write_text(spec_text)
    rendered = render_spec(tmp / "probe.gemm")
    for rel, text in rendered.files.items():
        if rel.parts[0] == "cuda":
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
    return load_generated_module(tmp / "cuda" / f"{kernel}.py", f"probe_{kernel}")


def fp8_accumulation(out: Path) -> dict:
    import ml_dtypes

    launcher = _launcher_of(PROBE_SPEC, "probe_fp8_f32")
    e4m3 = ml_dtypes.float8_e4m3fn
    k, n, rows = 1024, 128, 17  # 2**(8 - r) for r = 1..17 reaches e4m3's 2**-9
    lhs = np.zeros((2 * rows, k), np.float32)
    for r in range(1, rows + 1):
        lhs[r - 1, 0] = lhs[rows + r - 1, 0] = 256.0
        for p in POSITIONS:
            lhs[r - 1, p] = 2.0 ** (8 - r)
            lhs[rows + r - 1, p] = -(2.0 ** (8 - r))
    rhs = np.zeros((n, k), np.float32)
    for c, p in enumerate(POSITIONS):
        rhs[c, 0] = rhs[c, p] = 1.0
    # Column len(POSITIONS) + c: the small term first, the big one last (k - 1).
    lhs[:, k - 1] = 256.0
    for c, p in enumerate(POSITIONS):
        rhs[len(POSITIONS) + c, p] = rhs[len(POSITIONS) + c, k - 1] = 1.0
    lhs2 = lhs.copy()
    inputs = {"lhs": lhs.astype(e4m3), "rhs": rhs.astype(e4m3)}
    (got,) = _run(launcher, inputs)
    (got_sync,) = _run(launcher, inputs, mma_sync=True)
    result = {"positions": list(POSITIONS), "rows": []}
    print("r  small       " + " ".join(f"k={p:<5}" for p in POSITIONS) + "  (kept fraction of the small "
          "term: wgmma path | mma.sync path)")
    for i in range(2 * rows):
        r = i % rows + 1
        small = float(lhs2[i, POSITIONS[0]])
        kept = [(float(got[i, c]) - 256.0) / small for c in range(len(POSITIONS))]
        kept_sync = [(float(got_sync[i, c]) - 256.0) / small for c in range(len(POSITIONS))]
        later = [(float(got[i, len(POSITIONS) + c]) - 256.0) / small for c in range(len(POSITIONS))]
        result["rows"].append({"r": r, "small": small, "kept": kept, "kept_mma_sync": kept_sync,
                               "kept_big_last": later,
                               "raw": [float(x) for x in got[i, :2 * len(POSITIONS)]]})
        print(f"{r:<2} {small:<11.4g} " + " ".join(f"{x:<7.3g}" for x in kept) + " | "
              + " ".join(f"{x:.3g}" for x in kept_sync) + " | big last: "
              + " ".join(f"{x:.3g}" for x in later))
    (out / "fp8_accumulation.json").write_text(json.dumps(result, indent=1))
    return result


def _specs() -> dict:
    return {stem: render_spec(ROOT / "specs" / f"{stem}.gemm") for stem in ("dense", "moe")}


def _launcher(stem: str, name: str):
    return load_generated_module(ROOT / "generated" / stem / "cuda" / f"{name}.py",
                                 f"probe_{stem}_{name}")


def _check(kernel, launcher, inputs, *, mma_sync: bool) -> dict:
    got = _run(launcher, inputs, mma_sync=mma_sync)
    want = reference(kernel, **inputs)
    res = compare(got[0] if len(got) == 1 else got, want, kernel, k=int(inputs["lhs"].shape[-1]),
                  inputs=inputs)
    row = {"passed": bool(res.passed), "max_err": float(res.max_abs_err)}
    if not res.passed and len(got) == 1:
        a = np.asarray(got[0], np.float64)
        w = np.asarray(want, np.float64)
        bad = ~(np.abs(a - w) <= res.allowed)
        row["bad"] = int(bad.sum())
        row["size"] = int(bad.size)
        idx = np.argwhere(bad)
        # Which output rows / columns go wrong, modulo a few tile sizes.
        for axis, name in ((-2, "rows"), (-1, "cols")):
            vals = np.unique(idx[:, axis]) if len(idx) else np.array([], int)
            row[f"bad_{name}"] = vals[:64].tolist()
            row[f"bad_{name}_count"] = int(len(vals))
        row["first"] = [[int(x) for x in i] + [float(a[tuple(i)]), float(w[tuple(i)])]
                        for i in idx[:6]]
        row["nan"] = int(np.isnan(a).sum())
    return row


def exact_fp8(out: Path) -> list[dict]:
    rows = []
    for stem, rendered in _specs().items():
        for kernel in rendered.spec.kernels_for(ir.Backend.CUDA):
            if not (kernel.lhs.dtype.is_fp8 and kernel.rhs.dtype.is_fp8):
                continue
            launcher = _launcher(stem, kernel.name)
            rng = np.random.default_rng(1)
            kw = {}
            m, n, k = (40, 128, 256) if EMULATE else (160, 256, 384)
            if kernel.masked:
                kw["masked_m"] = np.array([0, m, 1, m - 3], np.int32)
            elif kernel.grouped:
                kw["group_sizes"] = np.array([0, m // 2, 0, m // 3, m - m // 2 - m // 3], np.int32)
            inputs = random_inputs(kernel, m=m, n=n, k=k, rng=rng, **kw)
            for side in ("lhs", "rhs"):
                x = inputs[side]
                ints = rng.integers(-4, 5, size=x.shape)
                ints = np.where(ints == 0, 1, ints)
                inputs[side] = ints.astype(x.dtype)
            for path in ("hopper", "mma.sync"):
                row = {"kernel": kernel.name, "path": path}
                try:
                    row.update(_check(kernel, launcher, inputs, mma_sync=path == "mma.sync"))
                except Exception as e:  # noqa: BLE001 - report and go on
                    row["error"] = f"{type(e).__name__}: {e}"
                print(json.dumps(row), flush=True)
                rows.append(row)
    (out / "exact_fp8.json").write_text(json.dumps(rows, indent=1))
    return rows


def sweep(out: Path, stem: str, name: str, ms, ks, groups, n: int) -> list[dict]:
    rendered = _specs()[stem]
    kernel = rendered.spec.kernel(name)
    launcher = _launcher(stem, name)
    rows = []
    for m, k, g in itertools.product(ms, ks, groups):
        rng = np.random.default_rng(m * 7 + k)
        kw = {}
        if kernel.masked:
            kw["masked_m"] = np.full(g, m, np.int32)
        elif kernel.grouped:
            kw["group_sizes"] = np.full(g, m // g, np.int32)
        inputs = random_inputs(kernel, m=m, n=n, k=k, rng=rng, **kw)
        for path in ("hopper", "mma.sync"):
            row = {"kernel": name, "m": m, "k": k, "n": n, "groups": g, "path": path}
            try:
                row.update(_check(kernel, launcher, inputs, mma_sync=path == "mma.sync"))
            except Exception as e:  # noqa: BLE001 - report and go on
                row["error"] = f"{type(e).__name__}: {e}"
            print(json.dumps(row), flush=True)
            rows.append(row)
    (out / f"sweep_{name}.json").write_text(json.dumps(rows, indent=1))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("fp8-accumulation", "exact-fp8", "sweep"))
    ap.add_argument("spec", nargs="?")
    ap.add_argument("kernel", nargs="?")
    ap.add_argument("--m", type=int, action="append")
    ap.add_argument("--k", type=int, action="append")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--groups", type=int, action="append")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--emulate", action="store_true",
                    help="run on the CPU emulator of an sm_90a device (small shapes; no GPU)")
    args = ap.parse_args()
    global EMULATE
    EMULATE = args.emulate
    if not EMULATE and (reason := cuda_gpu.unavailable_reason()):
        print(f"gpu_probe: skipped: {reason}")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.what == "fp8-accumulation":
        fp8_accumulation(out)
    elif args.what == "exact-fp8":
        exact_fp8(out)
    else:
        if not (args.spec and args.kernel):
            ap.error("sweep needs SPEC and KERNEL")
        sweep(out, args.spec, args.kernel, args.m or [64], args.k or [256], args.groups or [1],
              args.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
