#!/usr/bin/env python3
"""Check and time the Pallas quantize kernels (FP8 per 128, MXFP8, MXFP4,
NVFP4) on a real TPU.

For each kernel below (and each tile of --tiles) this script
  (1) renders it from templates/pallas/quantize.py.j2 into a temporary
      folder and imports it;
  (2) runs it on the TPU (not interpret mode) on fresh random inputs of
      ragged shapes (m = 1, partial row tiles, a partial last K block and
      group), on the edge rows of tests/quantize_edges.py and on groups
      holding zeros, an infinity or a NaN, and compares every output with
      the NumPy reference, bit for bit (gemmgen.reference.compare);
  (3) times it on bf16 [8192, 7168] (median of samples of back-to-back
      calls) and reports ms and GB/s of input read.

    python scripts/tpu_quant_bench.py [--out DIR] [--only NAME ...] [--tiles MxK ...]
        [--interpret] [--no-check]

`--interpret` runs the same flow in Pallas TPU interpret mode on the CPU at
a small timing shape (its times are not measurements). Without a TPU (and
without --interpret) it says so and exits 0. It prints a Markdown table and
writes tpu_quant_bench.json to --out (default $OUT, else the current
folder), row by row. Exit status 1 when a kernel failed a check.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from gemmgen import ir  # noqa: E402
from gemmgen.reference import compare, random_inputs, reference  # noqa: E402

# name -> the kernel's fields (a tile line is added per --tiles entry).
KERNELS = {
    "nvfp4": ("lhs bf16 [m, k]", "out fp4 packed", "out_scale per_token_group k=16 ue4m3"),
    "mxfp8": ("lhs bf16 [m, k]", "out e4m3", "out_scale per_token_group k=32 e8m0 round=floor"),
    "mxfp4": ("lhs bf16 [m, k]", "out fp4 packed",
              "out_scale per_token_group k=32 e8m0 round=floor"),
    "fp8_128_e8m0": ("lhs bf16 [m, k]", "out e4m3", "out_scale per_token_group k=128 e8m0"),
    "fp8_128_f32": ("lhs bf16 [m, k]", "out e4m3", "out_scale per_token_group k=128 f32"),
    "nvfp4_f32in": ("lhs f32 [m, k]", "out fp4 packed", "out_scale per_token_group k=16 ue4m3"),
    "mxfp8_e5m2_f32in": ("lhs f32 [m, k]", "out e5m2",
                         "out_scale per_token_group k=32 e8m0 round=floor"),
}
TIMED = {"nvfp4", "mxfp8", "mxfp4", "fp8_128_e8m0", "fp8_128_f32"}


def build(tiles: list[str], only: list[str], folder: Path):
    from pallas_helpers import build as build_spec
    from pallas_helpers import kernel_block, spec_text

    blocks = []
    for name, fields in KERNELS.items():
        if only and name not in only:
            continue
        for tile in tiles:
            m, k = tile.split("x")
            blocks.append(kernel_block(f"{name}_{m}x{k}", "op quantize", *fields,
                                       f"tile pallas_tpu m={m} n=128 k={k}"))
    return build_spec(spec_text(*blocks), folder)


def to_device(inputs):
    import jax
    import jax.numpy as jnp

    return {k: jax.device_put(jnp.asarray(v)) for k, v in inputs.items()}


def run_on_chip(fn, inputs, interpret):
    import jax

    kw = {}
    if interpret:
        from pallas_helpers import INTERPRET
        kw["interpret"] = INTERPRET
    out = fn(**to_device(inputs), **kw)
    return jax.tree.map(np.asarray, out)


def correctness(kernel: ir.Kernel, fn, interpret: bool) -> list[str]:
    """Failures (empty when every case matched bit for bit)."""
    import ml_dtypes

    # NumPy 2.3+ refuses np.finfo(bfloat16), which tests/quantize_edges.py
    # asks for; ml_dtypes.finfo answers for NumPy's types too.
    np.finfo = ml_dtypes.finfo
    from quantize_edges import NUMPY_INPUT, edge_rows

    g = kernel.out_scale.block_k
    cases = []
    for m, k in [(37, 600), (1, 70), (130, 2 * g + 2), (300, 3000)]:
        cases.append((f"random {m}x{k}", random_inputs(kernel, m=m, n=k, k=k,
                                                       rng=np.random.default_rng(m + k))))
    x = edge_rows(kernel, 6 * g + 6, np.random.default_rng(5))
    cases.append(("edge rows", {"lhs": x}))
    rng = np.random.default_rng(g)
    x = rng.standard_normal((5, 4 * g)) * 4
    x[0] = 0.0
    x[0, ::3] = -0.0
    x[1, 1] = np.inf
    x[2, g + 2] = np.nan
    x[3, 3 * g:] = -np.inf
    x[4, 2 * g + 1] = np.nan
    x[4, 2 * g + 2] = np.inf
    cases.append(("non-finite groups", {"lhs": x.astype(NUMPY_INPUT[kernel.lhs.dtype])}))
    failures = []
    for label, inputs in cases:
        try:
            got = run_on_chip(fn, inputs, interpret)
            with np.errstate(invalid="ignore"):
                result = compare(got, reference(kernel, **inputs), kernel,
                                 k=inputs["lhs"].shape[1], inputs=inputs)
            if not result.passed:
                failures.append(f"{label}: {result.detail}")
        except Exception as e:  # noqa: BLE001 - reported, the next case runs
            failures.append(f"{label}: {type(e).__name__}: {str(e)[:800]}")
    return failures


def time_it(fn, x, interpret: bool) -> float:
    import jax

    kw = {}
    if interpret:
        from pallas_helpers import INTERPRET
        kw["interpret"] = INTERPRET
    jax.block_until_ready(fn(x, **kw))
    batch, samples = (1, 1) if interpret else (10, 5)
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        outs = [fn(x, **kw) for _ in range(batch)]
        jax.block_until_ready(outs)
        times.append((time.perf_counter() - start) / batch)
    return float(np.median(times))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--tiles", nargs="*", default=["256x1024", "256x2048"])
    p.add_argument("--interpret", action="store_true")
    p.add_argument("--no-check", action="store_true", help="time only")
    args = p.parse_args()
    import jax
    import jax.numpy as jnp

    print("devices:", jax.devices(), flush=True)
    if not args.interpret and jax.devices()[0].platform != "tpu":
        print("no TPU on this machine: nothing to time (--interpret runs the flow on the CPU)")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    m, k = (64, 1024) if args.interpret else (8192, 7168)
    with tempfile.TemporaryDirectory() as tmp:
        generated = build(args.tiles, args.only, Path(tmp))
        for kernel in generated.spec.kernels_for(ir.Backend.PALLAS_TPU):
            fn = generated.fn(kernel.name)
            row = {"kernel": kernel.name}
            try:
                base = kernel.name.rsplit("_", 1)[0]
                if base in TIMED:
                    x = jax.device_put(jax.random.normal(jax.random.key(0), (m, k),
                                                         jnp.bfloat16) * 3)
                    s = time_it(fn, x, args.interpret)
                    row.update(ms=s * 1e3, gbps=m * k * 2 / s / 1e9)
                if not args.no_check:
                    row["failures"] = correctness(kernel, fn, args.interpret)
                    row["correct"] = not row["failures"]
            except Exception:  # noqa: BLE001 - reported, the next kernel runs
                row["error"] = traceback.format_exc()[-3000:]
            rows.append(row)
            print(json.dumps(row)[:2000], flush=True)
            (out / "tpu_quant_bench.json").write_text(json.dumps(rows, indent=1))
    print("\n| kernel | correct | ms | GB/s |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['kernel']} | {r.get('correct')} | {r.get('ms', float('nan')):.3f} | "
              f"{r.get('gbps', float('nan')):.1f} |")
    return 0 if all(r.get("correct", args.no_check) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
