#!/usr/bin/env python3
"""Sweep the Pallas tile of kernels of specs/ on a real TPU.

For each kernel named and each tile given, the kernel's module is rendered
with that tile as its only tile (no LUT), checked against the float64 NumPy
reference on the kernel's standard cases at that tile (`--cases N`: the
first N), and timed at the
production shape of scripts/tpu_bench.py. Tiles that the Pallas backend
refuses for the kernel (VMEM budget, scale blocks, layout) are listed with
the reason and skipped. The table it prints is what docs/benchmarks.md's
TPU tile figures and the specs' Pallas tiles come from.

    python scripts/tpu_tiles.py dense:dense_bf16_out_bf16 moe:gmm_bf16 \\
        --tiles 128x128x128,512x512x512,512x1024x1024
    python scripts/tpu_tiles.py --interpret moe:gmm_bf16 --tiles 128x128x128
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import tpu_bench  # noqa: E402

from gemmgen import ir  # noqa: E402
from gemmgen.backends import pallas  # noqa: E402
from gemmgen.build import render_spec  # noqa: E402
from gemmgen.cases import standard_cases  # noqa: E402
from gemmgen.explain import cost  # noqa: E402
from gemmgen.harness.runner import load_generated_module  # noqa: E402
from gemmgen.reference import compare, random_inputs, reference  # noqa: E402


def parse_tile(text: str) -> ir.Tile:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return ir.Tile(m, n, k)


def with_tile(spec: ir.Spec, kernel: ir.Kernel, tile: ir.Tile) -> tuple[ir.Spec, ir.Kernel]:
    # The kernel as the Pallas backend sees it (its own LUT, if the spec
    # gives it one), with `tile` as that LUT's only entry.
    k2 = dataclasses.replace(kernel.for_backend(ir.Backend.PALLAS_TPU), tile=tile, tile_rules=())
    return dataclasses.replace(spec, kernels=(k2,), dispatches=()), k2


def module_for(spec: ir.Spec, kernel: ir.Kernel, tmp: Path, tag: str):
    files = pallas.render(spec)
    path = tmp / f"{kernel.name}_{tag}.py"
    path.write_text(next(t for p, t in files.items() if p.name == f"{kernel.name}.py"))
    return getattr(load_generated_module(path, f"tpu_tiles_{kernel.name}_{tag}"), kernel.name)


def sweep_one(stem: str, name: str, tiles: list[ir.Tile], args, tmp: Path) -> list[dict]:
    spec = render_spec(ROOT / "specs" / f"{stem}.gemm").spec
    kernel = spec.kernel(name)
    m, n, k, g = tpu_bench.shape_for(kernel, args.quick)
    kw = {}
    if kernel.masked:
        kw["masked_m"] = np.full(g, m, np.int32)
    elif kernel.op in (ir.Op.GROUPED, ir.Op.TGMM):
        kw["group_sizes"] = np.full(g, m // g, np.int32)
    big = tpu_bench.to_device(random_inputs(kernel, m=m, n=n, k=k, rng=np.random.default_rng(0),
                                            **kw))
    flops, moved = cost(kernel, m, n, k, g)
    rows = []
    for tile in tiles:
        row = {"spec": stem, "kernel": name, "tile": str(tile), "m": m, "n": n, "k": k,
               "groups": g}
        spec2, k2 = with_tile(spec, kernel, tile)
        problems = [d.message for d in pallas.diagnose(k2, spec2)]
        if problems:
            row["refused"] = "; ".join(problems)
            rows.append(row)
            print(f"{name} {tile}: refused: {row['refused']}", flush=True)
            continue
        try:
            fn = module_for(spec2, k2, tmp, str(tile))
            bad = []
            for case in standard_cases(k2)[:args.cases]:
                inputs = case.inputs(k2, 0)
                got = fn(**tpu_bench.to_device(inputs), **tpu_bench.call_kwargs())
                got = tuple(np.asarray(o) for o in got) if isinstance(got, tuple) \
                    else np.asarray(got)
                if not compare(got, reference(k2, **inputs), k2, k=case.k, inputs=inputs).passed:
                    bad.append(case.name)
            row["correct"] = not bad
            if bad:
                row["failed_cases"] = bad
            extra = tpu_bench.call_kwargs()
            seconds = tpu_bench.time_call(lambda: fn(**big, **extra))
            row.update(seconds=seconds, tflops=flops / seconds / 1e12, gbps=moved / seconds / 1e9)
            print(f"{name} {tile}: correct={row['correct']} {seconds * 1e3:.3f} ms "
                  f"{row['tflops']:.1f} TFLOP/s", flush=True)
        except Exception as e:  # report and go on
            row["error"] = f"{type(e).__name__}: {e}"[:2000]
            row["traceback"] = traceback.format_exc()[-4000:]
            print(f"{name} {tile}: ERROR {row['error'][:300]}", flush=True)
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels", nargs="+", metavar="STEM:KERNEL")
    ap.add_argument("--tiles", required=True, help="comma-separated MxNxK tiles")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="1/8 of the production shapes")
    ap.add_argument("--cases", type=int, default=None,
                    help="check only the first N standard cases at each tile (default: all)")
    ap.add_argument("--interpret", action="store_true",
                    help="interpret mode on the CPU at tiny shapes (a dry run)")
    args = ap.parse_args()
    tpu_bench.INTERPRET = args.interpret
    if not args.interpret:
        from gemmgen.harness.verify_pallas import tpu_device

        if tpu_device() is None:
            print("tpu_tiles: skipped: JAX sees no TPU on this machine")
            return 0
    tiles = [parse_tile(t) for t in args.tiles.split(",")]
    rows = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for item in args.kernels:
            stem, name = item.split(":")
            rows += sweep_one(stem, name, tiles, args, Path(tmp))
            (out / "tpu_tiles.json").write_text(json.dumps(rows, indent=2))
    print("\n| kernel | shape | tile | correct | ms | TFLOP/s |\n|---|---|---|---|---|---|")
    for r in rows:
        shape = f"{r['m']}x{r['n']}x{r['k']}" + (f" g={r['groups']}" if r["groups"] else "")
        if "seconds" in r:
            print(f"| {r['kernel']} | {shape} | {r['tile']} | {r['correct']} | "
                  f"{r['seconds'] * 1e3:.3f} | {r['tflops']:.1f} |")
        else:
            print(f"| {r['kernel']} | {shape} | {r['tile']} | - | "
                  f"{'refused' if 'refused' in r else 'error'} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
