"""Where does a grouped kernel's time go when experts are many and small?

An experiment for the Pallas kernel bodies (docs/pallas.md, "What the v5e
showed about tiles for grouped kernels"): the grouped matmul of
specs/moe.gemm (`gmm_bf16_out`) at one MoE shape, rendered at several m
tiles, on two routings of the same rows:

- `skewed`: the benchmark's router-like routing (scripts/tpu_peers.py
  `routing`: Dirichlet, an eighth of the experts empty, one heavy expert);
- `aligned`: every expert the same number of rows, a multiple of every m
  tile tried, so that no m tile straddles two groups.

The kernel computes each (group, m tile) work item at full size; rows of a
tile outside its group are computed and dropped. The ratio of the two
routings' times at one tile measures what that costs; the work-item counts
(`items`) are printed beside it. XLA's `ragged_dot` runs on both routings
too. Every result is checked against an f32 reference on the chip (per-group
dots at HIGHEST precision), and the times are medians of batches
(gemmgen.tune.timing.sample_times).

    python scripts/tpu_probe_groups.py [--interpret] [--m M --k K --n N --g G]
        [--tiles 128x2048x2944,256x2048x2944] [--kernel gmm_bf16_kn]
        [--routings aligned] [--k-align 256] [--out DIR]

--kernel picks another grouped kernel of specs/moe.gemm (e.g. gmm_bf16_kn,
rhs [g, k, n]); --k-align overrides the module's K_ALIGN (the multiple the
K block is rounded up to past k), one change at a time against the same
inputs.

--interpret runs a tiny shape in Pallas interpret mode on the CPU (the
tests run it), so the script works the first time on the chip.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import tpu_bench  # noqa: E402
import tpu_tiles  # noqa: E402
from tpu_peers import routing  # noqa: E402

from gemmgen import ir  # noqa: E402
from gemmgen.build import render_spec  # noqa: E402
from gemmgen.tune.timing import sample_times  # noqa: E402

KERNEL = "gmm_bf16_out"


def work_items(sizes: np.ndarray, tm: int) -> int:
    """(group, m tile) pairs with rows of the group: what the grid runs."""
    items, start = 0, 0
    for s in sizes:
        if s:
            items += (start + s - 1) // tm - start // tm + 1
        start += s
    return int(items)


def routings(m: int, g: int, tiles: list[ir.Tile]) -> dict[str, np.ndarray]:
    align = int(np.lcm.reduce([t.m for t in tiles]))
    per = max(align, (m // g) // align * align)
    aligned = np.zeros(g, np.int32)
    count = min(g, m // per)
    aligned[:count] = per
    return {"skewed": routing(m, g, 0), "aligned": aligned}


def reference(lhs, rhs, sizes):
    """f32 per-group dots at HIGHEST precision, rows past the groups zero."""
    import jax.numpy as jnp
    from jax import lax

    outs, start = [], 0
    for i, s in enumerate(np.asarray(sizes).tolist()):
        outs.append(jnp.dot(lhs[start:start + s].astype(jnp.float32), rhs[i].astype(jnp.float32),
                            precision=lax.Precision.HIGHEST))
        start += s
    out = jnp.concatenate(outs, axis=0)
    return jnp.pad(out, ((0, lhs.shape[0] - start), (0, 0)))


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, np.float32), np.asarray(ref, np.float32)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--interpret", action="store_true")
    p.add_argument("--m", type=int, default=8192)
    p.add_argument("--k", type=int, default=2880)
    p.add_argument("--n", type=int, default=5760)
    p.add_argument("--g", type=int, default=32)
    p.add_argument("--tiles", default="128x2048x2944,256x2048x2944,512x2048x2944")
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--kernel", default=KERNEL)
    p.add_argument("--routings", default="skewed,aligned")
    p.add_argument("--k-align", type=int, default=None)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.interpret:
        tpu_bench.INTERPRET = True
        args.m, args.k, args.n, args.g = 256, 320, 256, 4
        args.tiles, args.samples, args.batch = "32x128x128,64x128x128", 1, 1

    import jax
    import jax.numpy as jnp

    spec = render_spec(ROOT / "specs" / "moe.gemm").spec
    kernel = spec.kernel(args.kernel)
    tiles = [tpu_tiles.parse_tile(t) for t in args.tiles.split(",")]
    dev = tpu_bench.device()
    ka, kw = jax.random.split(jax.random.key(0))
    lhs = jax.device_put(jax.random.normal(ka, (args.m, args.k), jnp.bfloat16), dev)
    rhs = jax.device_put((jax.random.normal(kw, (args.g, args.k, args.n), jnp.float32)
                          / np.sqrt(args.k)).astype(jnp.bfloat16), dev)
    rhs_nk = jnp.swapaxes(rhs, 1, 2) if kernel.rhs_operand.layout is ir.Layout.NK else rhs
    flops_all = 2.0 * args.k * args.n
    rows, tmp = [], Path(tempfile.mkdtemp(prefix="probe_groups_"))
    kw_call = tpu_bench.call_kwargs()

    def timed(name, route, sizes, fn, tile="", items=""):
        try:
            out = jax.block_until_ready(fn())
            err = rel_err(out, reference(lhs, rhs, sizes))
            t = float(np.median(sample_times(fn, args.samples, args.batch)))
            row = dict(impl=name, routing=route, tile=tile, items=items, ms=t * 1e3,
                       tflops=flops_all * int(np.sum(sizes)) / t / 1e12, rel_err=err,
                       ok=err < 2e-2)
        except Exception as e:  # noqa: BLE001 - a failing variant is a row
            row = dict(impl=name, routing=route, tile=tile, items=items,
                       error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
        rows.append(row)
        print(json.dumps(row), flush=True)

    wanted = args.routings.split(",")
    for route, sizes in routings(args.m, args.g, tiles).items():
        if route not in wanted:
            continue
        gs = jax.device_put(jnp.asarray(sizes), dev)
        print(f"routing {route}: sizes {sizes.tolist()}", flush=True)
        timed("xla ragged_dot", route, sizes,
              lambda gs=gs: jax.lax.ragged_dot(lhs, rhs, gs, preferred_element_type=jnp.float32))
        for tile in tiles:
            spec2, k2 = tpu_tiles.with_tile(spec, kernel, tile)
            fn = tpu_tiles.module_for(spec2, k2, tmp, f"{tile.m}x{tile.n}x{tile.k}")
            if args.k_align:
                inspect.unwrap(fn).__globals__["K_ALIGN"] = args.k_align
            timed("gemmgen", route, sizes, lambda fn=fn, gs=gs: fn(lhs, rhs_nk, gs, **kw_call),
                  tile=f"{tile.m}x{tile.n}x{tile.k}", items=work_items(sizes, tile.m))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"probe_{args.kernel}_k{args.k}_n{args.n}_ka{args.k_align or 0}.json"
        (args.out / name).write_text(json.dumps(
            dict(shape={"m": args.m, "n": args.n, "k": args.k, "g": args.g},
                 kernel=args.kernel, k_align=args.k_align,
                 jax=jax.__version__, device=str(jax.devices()[0]), rows=rows), indent=1))
    return 0 if all(r.get("ok", False) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
