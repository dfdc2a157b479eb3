"""How fast do Pallas blocks stream from HBM when the array's rows are not
whole lane tiles?

An experiment for the Pallas kernel bodies (docs/pallas.md, "Weights whose
rows are not whole lane tiles"): on a v5e, the grouped matmul with weights
[g, n, k] ran at under half of XLA's rate at GPT-OSS's k = 2880 (22.5 lane
tiles) and above it at k = 3072, with the same kernel, tile and rows; with
the weights [g, k, n] (k on sublanes) it matched XLA at k = 2880. This script
isolates the copy: a Pallas kernel that streams [rows, cols] bf16 arrays
through VMEM in blocks of `block_rows` rows (the whole row, or 1024-column
blocks), for cols on and off the 128 grid, beside XLA's own copy, and prints
each array's HBM layout as XLA assigns it. Each copy is checked against its
input; times are medians (gemmgen.tune.timing.sample_times), GB/s counts the
bytes read and written.

    python scripts/tpu_probe_dma.py [--interpret] [--rows 16384]
        [--cols 2880,2944,3072] [--out DIR]

--interpret runs tiny shapes in Pallas interpret mode on the CPU (the tests
run it), so the script works the first time on the chip.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import tpu_bench  # noqa: E402

from gemmgen.tune.timing import sample_times  # noqa: E402


def hbm_layout(x) -> str:
    """The layout XLA gives x as a parameter, e.g. `{1,0:T(8,128)(2,1)}`."""
    import jax

    text = jax.jit(lambda a: a * 2).lower(x).compile().as_text()
    found = re.search(r"bf16\[[0-9,]+\]\{[^}]*\}", text)
    return found.group(0) if found else "?"


def copy_kernel(x, block: tuple[int, int], interpret):
    """out = x through VMEM, one (rows, cols) block per grid step."""
    import jax
    from jax.experimental import pallas as pl

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    rows, cols = x.shape
    grid = (pl.cdiv(rows, block[0]), pl.cdiv(cols, block[1]))
    spec = pl.BlockSpec(block, lambda i, j: (i, j))
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=grid,
                          in_specs=[spec], out_specs=spec, interpret=interpret)(x)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--interpret", action="store_true")
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--cols", default="2880,2944,3072")
    p.add_argument("--block-rows", type=int, default=512)
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.interpret:
        tpu_bench.INTERPRET = True
        args.rows, args.cols, args.block_rows = 64, "320,384", 32
        args.samples, args.batch = 1, 1

    import jax
    import jax.numpy as jnp

    kw = tpu_bench.call_kwargs()
    interpret = kw.get("interpret", False)
    dev = tpu_bench.device()
    rows = []
    for cols in (int(c) for c in args.cols.split(",")):
        x = jax.device_put(jax.random.normal(jax.random.key(cols), (args.rows, cols), jnp.bfloat16),
                           dev)
        layout = hbm_layout(x)
        variants = {"xla copy": jax.jit(lambda a: a + jnp.zeros((), a.dtype))}
        # The whole row per block (a block dim equal to the array's is legal
        # at any size), and 1024-column blocks (the last one partial).
        for bc in (cols, 1024 if not args.interpret else 128):
            block = (args.block_rows, bc)
            variants[f"pallas {block[0]}x{block[1]}"] = jax.jit(
                lambda a, block=block: copy_kernel(a, block, interpret))
        for name, fn in variants.items():
            try:
                out = jax.block_until_ready(fn(x))
                ok = bool(np.array_equal(np.asarray(out), np.asarray(x)))
                t = float(np.median(sample_times(lambda fn=fn: fn(x), args.samples, args.batch)))
                row = dict(cols=cols, layout=layout, impl=name, ms=t * 1e3,
                           gb_s=2 * x.size * x.itemsize / t / 1e9, ok=ok)
            except Exception as e:  # noqa: BLE001 - a failing variant is a row
                row = dict(cols=cols, layout=layout, impl=name,
                           error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "probe_dma.json").write_text(json.dumps(
            dict(rows_per_array=args.rows, jax=jax.__version__, device=str(jax.devices()[0]),
                 rows=rows), indent=1))
    return 0 if all(r.get("ok", False) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
