#!/usr/bin/env python3
"""Benchmark the committed Pallas kernels of specs/ on a real TPU.

For every Pallas kernel in generated/<spec>/pallas/ this script
  (1) checks it on the TPU against the float64 NumPy reference on the
      kernel's first standard case (a ragged shape: partial tiles, K not a
      multiple of the tile, empty groups), outputs read back from the device;
  (2) times it at a production shape (dense 4096^3, grouped 8192 x 4096 x
      4096 over 8 equal groups, masked 8 groups of 256 at (4096, 7168), tgmm
      8192 x 4096 x 4096 over 8 groups, quantize 8192 x 7168) and reports
      TFLOP/s, GB/s and the fraction of the chip's peak, next to XLA on the
      same chip: `jnp.dot` of bf16 operands of the same m x n x k (every
      kernel), and `jax.lax.ragged_dot` in bf16 for the grouped layouts
      (what a JAX user would call without a Pallas kernel).

    python scripts/tpu_bench.py [--out DIR] [--kernel NAME ...] [--quick]
    python scripts/tpu_bench.py --interpret --kernel gmm_bf16   # the whole flow on the CPU

Timing: each sample is BATCH calls dispatched back to back and waited for
once (JAX dispatches asynchronously, so the wrapper's Python work overlaps
the TPU's, as in a model's step); the figure is the median of the samples.
`--interpret` runs every step in Pallas TPU interpret mode on the CPU at
tiny shapes, so that the script's first run on a lent TPU cannot fail on a
stale name; its times are not measurements.

It prints a Markdown table (paste into docs/benchmarks.md) and writes
tpu_bench.json to --out (default $OUT, else the current folder), row by
row. Without a TPU (and without --interpret) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gemmgen import ir  # noqa: E402
from gemmgen.build import render_spec  # noqa: E402
from gemmgen.cases import standard_cases  # noqa: E402
from gemmgen.explain import cost  # noqa: E402
from gemmgen.harness.runner import load_generated_module  # noqa: E402
from gemmgen.reference import compare, random_inputs, reference  # noqa: E402
from gemmgen.tune.timing import sample_times  # noqa: E402

# Peak rates per chip, by JAX's device_kind: (bf16 TFLOP/s, int8 TOP/s,
# HBM GB/s), from Google Cloud's TPU system-architecture pages (v5e: 197
# bf16 TFLOP/s, 394 int8 TOP/s, 819 GB/s; v5p: 459 / 918 / 2765; v6e
# (Trillium): 918 / 1836 / 1640; v4: 275 / 275 / 1200). None of these chips
# multiplies FP8 in its MXU at a rate of its own: FP8 operands are
# converted and multiplied at the bf16 rate.
PEAKS = {
    "TPU v5 lite": (197.0, 394.0, 819.0),
    "TPU v5e": (197.0, 394.0, 819.0),
    "TPU v5": (459.0, 918.0, 2765.0),
    "TPU v5p": (459.0, 918.0, 2765.0),
    "TPU v6 lite": (918.0, 1836.0, 1640.0),
    "TPU v6e": (918.0, 1836.0, 1640.0),
    "TPU v4": (275.0, 275.0, 1200.0),
}

# Production shapes: (m, n, k, groups); the masked layout's m is each
# group's capacity (every row valid).
SHAPES = {
    "dense": (4096, 4096, 4096, 0),
    "grouped": (8192, 4096, 4096, 8),
    "masked": (256, 4096, 7168, 8),
    "tgmm": (8192, 4096, 4096, 8),
    "quantize": (8192, 0, 7168, 0),
}
BATCH = 10  # calls per timed sample
SAMPLES = 5
INTERPRET = False  # --interpret: the CPU, tiny shapes, one sample


def shape_for(kernel: ir.Kernel, quick: bool) -> tuple[int, int, int, int]:
    key = "masked" if kernel.masked else kernel.op.value
    m, n, k, g = SHAPES[key]
    if INTERPRET:
        m, n, k, g = min(m, 64 if g else 32), min(n, 256) if n else 0, min(k, 256), min(g, 2)
    elif quick:
        m, n, k = max(m // 8, 8), max(n // 8, 256) if n else 0, max(k // 8, 256)
    n = kernel.static_n or n or k
    k = kernel.static_k or k
    return m, n, k, g


def call_kwargs() -> dict:
    if INTERPRET:
        from jax.experimental.pallas import tpu as pltpu

        return {"interpret": pltpu.InterpretParams()}
    return {}


def device():
    import jax

    return jax.devices("cpu" if INTERPRET else "tpu")[0]


def to_device(inputs: dict) -> dict:
    import jax

    dev = device()
    return {name: jax.device_put(v, dev) if isinstance(v, np.ndarray) else v
            for name, v in inputs.items()}


def time_call(fn) -> float:
    """Median seconds per call over samples of BATCH calls, after a warm-up
    call (which compiles)."""
    import jax

    jax.block_until_ready(fn())
    batch, samples = (1, 1) if INTERPRET else (BATCH, SAMPLES)
    return float(np.median(sample_times(fn, samples, batch)))


def xla_baselines(kernel: ir.Kernel, m: int, n: int, k: int, g: int) -> dict:
    """Seconds per call of XLA on the same chip: a bf16 jnp.dot of the same
    m x n x k, and lax.ragged_dot in bf16 for the grouped layouts."""
    import jax
    import jax.numpy as jnp

    if kernel.op is ir.Op.QUANTIZE:
        return {}
    rows = g * m if kernel.masked else m
    key = jax.random.key(0)
    dev = device()
    a = jax.device_put(jax.random.normal(key, (rows, k), jnp.bfloat16), dev)
    b = jax.device_put(jax.random.normal(key, (k, n), jnp.bfloat16), dev)
    dot = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32)
                  .astype(jnp.bfloat16))
    out = {"xla_dot_s": time_call(lambda: dot(a, b))}
    if kernel.op is ir.Op.GROUPED and g:
        bg = jax.device_put(jax.random.normal(key, (g, k, n), jnp.bfloat16), dev)
        sizes = jnp.full((g,), rows // g, jnp.int32)
        ragged = jax.jit(lambda a, b, s: jax.lax.ragged_dot(
            a, b, s, preferred_element_type=jnp.float32).astype(jnp.bfloat16))
        out["xla_ragged_dot_s"] = time_call(lambda: ragged(a, bg, sizes))
    return out


def _peak(kernel: ir.Kernel, kind: str) -> tuple[float, float] | None:
    """(TFLOP/s of the MXU for this kernel's operands, HBM GB/s) of `kind`."""
    if kind not in PEAKS:
        return None
    bf16, int8, hbm = PEAKS[kind]
    ints = kernel.op is not ir.Op.QUANTIZE and kernel.lhs.dtype is ir.DType.INT8 and \
        kernel.rhs_operand.dtype is ir.DType.INT8
    return (int8 if ints else bf16), hbm


def check(fn, kernel: ir.Kernel) -> tuple[bool, str]:
    """The kernel on its first standard case against the reference."""
    case = standard_cases(kernel.for_backend(ir.Backend.PALLAS_TPU))[0]
    inputs = case.inputs(kernel, 0)
    got = fn(**to_device(inputs), **call_kwargs())
    got = tuple(np.asarray(o) for o in got) if isinstance(got, tuple) else np.asarray(got)
    result = compare(got, reference(kernel, **inputs), kernel, k=case.k, inputs=inputs)
    return bool(result.passed), ("" if result.passed else result.detail)


def bench_one(stem: str, kernel: ir.Kernel, args, kind: str) -> dict:
    row = {"spec": stem, "kernel": kernel.name}
    path = ROOT / "generated" / stem / "pallas" / f"{kernel.name}.py"
    module = load_generated_module(path, f"tpu_bench_{stem}_{kernel.name}")
    fn = getattr(module, kernel.name)
    row["correct"], detail = check(fn, kernel)
    if detail:
        row["detail"] = detail
    m, n, k, g = shape_for(kernel, args.quick)
    kw = {}
    if kernel.masked:
        kw["masked_m"] = np.full(g, m, np.int32)
    elif kernel.op in (ir.Op.GROUPED, ir.Op.TGMM):
        kw["group_sizes"] = np.full(g, m // g, np.int32)
    big = to_device(random_inputs(kernel, m=m, n=n, k=k, rng=np.random.default_rng(0), **kw))
    extra = call_kwargs()
    seconds = time_call(lambda: fn(**big, **extra))
    flops, moved = cost(kernel, m, n, k, g)
    row.update(m=m, n=n, k=k, groups=g, seconds=seconds, tflops=flops / seconds / 1e12,
               gbps=moved / seconds / 1e9)
    peak = _peak(kernel, kind)
    if peak:
        row["peak_fraction"] = max(row["tflops"] / peak[0], row["gbps"] / peak[1])
    row.update(xla_baselines(kernel, m, n, k, g))
    return row


def save(args, kind: str, rows: list[dict]) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tpu_bench.json").write_text(json.dumps(
        {"device": kind, "interpret": INTERPRET, "time": time.time(), "rows": rows}, indent=2))


def _line(row: dict) -> str:
    if "error" in row:
        return f"{row['kernel']}: ERROR {row['error']}"
    line = (f"{row['kernel']}: correct={row['correct']} {row['m']}x{row['n']}x{row['k']}"
            f"{' g=' + str(row['groups']) if row['groups'] else ''} {row['seconds'] * 1e3:.3f} ms "
            f"{row['tflops']:.1f} TFLOP/s {row['gbps']:.0f} GB/s")
    if "peak_fraction" in row:
        line += f" ({row['peak_fraction'] * 100:.0f} % of peak)"
    return line


def table(rows: list[dict]) -> list[str]:
    flops_of = {}
    lines = ["| kernel | shape | correct | ms | TFLOP/s | GB/s | % of peak | XLA bf16 dot "
             "TFLOP/s | XLA ragged_dot TFLOP/s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "seconds" not in r:
            lines.append(f"| {r['kernel']} | - | {r.get('correct', False)} | error | | | | | |")
            continue
        flops_of[r["kernel"]] = flops = r["tflops"] * r["seconds"] * 1e12
        dot = f"{flops / r['xla_dot_s'] / 1e12:.1f}" if "xla_dot_s" in r else "-"
        ragged = f"{flops / r['xla_ragged_dot_s'] / 1e12:.1f}" if "xla_ragged_dot_s" in r else "-"
        peak = f"{r['peak_fraction'] * 100:.0f}" if "peak_fraction" in r else "-"
        shape = f"{r['m']}x{r['n']}x{r['k']}" + (f" g={r['groups']}" if r["groups"] else "")
        lines.append(f"| {r['kernel']} | {shape} | {r['correct']} | {r['seconds'] * 1e3:.3f} | "
                     f"{r['tflops']:.1f} | {r['gbps']:.0f} | {peak} | {dot} | {ragged} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--kernel", action="append", help="only these kernels")
    ap.add_argument("--quick", action="store_true", help="1/8 of the production shapes")
    ap.add_argument("--interpret", action="store_true",
                    help="run the whole flow in Pallas TPU interpret mode on the CPU (tiny "
                         "shapes); its times are not measurements")
    args = ap.parse_args()
    global INTERPRET
    INTERPRET = args.interpret
    if not INTERPRET:
        from gemmgen.harness.verify_pallas import tpu_device

        if tpu_device() is None:
            print("tpu_bench: skipped: JAX sees no TPU on this machine")
            return 0
    kind = "CPU (interpret mode)" if INTERPRET else device().device_kind
    rows, failed = [], 0
    for stem in ("dense", "moe"):
        rendered = render_spec(ROOT / "specs" / f"{stem}.gemm")
        for kernel in rendered.spec.kernels_for(ir.Backend.PALLAS_TPU):
            if args.kernel and kernel.name not in args.kernel:
                continue
            try:
                row = bench_one(stem, kernel, args, kind)
            except Exception as e:  # report and go on
                row = {"spec": stem, "kernel": kernel.name, "error": f"{type(e).__name__}: {e}",
                       "traceback": traceback.format_exc()}
            failed += not row.get("correct", False)
            rows.append(row)
            print(_line(row), flush=True)
            save(args, kind, rows)  # so far: a run cut short keeps its rows
    print(f"\n{kind}\n")
    if INTERPRET:
        print("(interpret mode: the times below are the CPU's, not measurements)")
    print("\n".join(table(rows)))
    print(f"\n{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
