#!/usr/bin/env python3
"""Time examples/torch_fused_moe.py's fused MoE forward on a GPU.

The layer runs on the generated PyTorch ops (their CUDA implementations,
the kernels' C ABI on torch.cuda.current_stream()), at DeepSeek-V3-like
expert sizes by default, for several token counts: eager, and replayed from
a CUDA graph captured once per token count (the ops synchronise nothing, so
the whole forward, routing included, is captured). Times are CUDA events
over `--iters` runs after `--warmup`; the output of the first eager run is
checked against the graph's replay (the same bits).

    gemmgen compile specs/moe.gemm --torch --out build/
    gemmgen compile specs/dense.gemm --torch --kernel per_token_group_quant_fp8_out_scale_f32 \
        --out build/
    python scripts/torch_moe_bench.py --libs build/

Needs a CUDA GPU of an arch the specs declare (sm_90a for specs/moe.gemm)
and PyTorch with CUDA (the `torch` extra installs the CPU build; install a
CUDA build of the same release on the GPU machine).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _time(fn, warmup: int, iters: int) -> float:
    """Milliseconds per call of fn(), by CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--libs", default="build/", help="the folder `gemmgen compile --torch` wrote")
    p.add_argument("--tokens", default="1,16,128,1024,4096", help="token counts, comma-separated")
    p.add_argument("--d-model", type=int, default=7168)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=50)
    args = p.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("torch_moe_bench: no CUDA device (or a CPU build of PyTorch)", file=sys.stderr)
        return 2
    from examples import torch_fused_moe as fm

    fm.load(args.libs, "cuda")
    cfg = fm.Config(d_model=args.d_model, d_ff=args.d_ff, experts=args.experts, top_k=args.top_k)
    params = fm.init(cfg, device="cuda")
    print(f"{torch.cuda.get_device_name()}: D={cfg.d_model} F={cfg.d_ff} E={cfg.experts} "
          f"top-k={cfg.top_k}")
    print(f"{'tokens':>7} {'eager ms':>9} {'graph ms':>9} {'TFLOP/s':>8}")
    for t in (int(v) for v in args.tokens.split(",")):
        x = torch.randn(t, cfg.d_model, device="cuda").bfloat16()
        eager_out = fm.fused_moe(x, params, cfg)
        eager = _time(lambda x=x: fm.fused_moe(x, params, cfg), args.warmup, args.iters)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fm.fused_moe(x, params, cfg)  # warm the allocator on the side stream
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            graph_out = fm.fused_moe(x, params, cfg)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(graph_out, eager_out), f"tokens={t}: the graph's output differs"
        replay = _time(graph.replay, args.warmup, args.iters)
        flops = 2 * t * cfg.top_k * (2 * cfg.d_ff * cfg.d_model + cfg.d_model * cfg.d_ff)
        print(f"{t:>7} {eager:>9.3f} {replay:>9.3f} {flops / replay / 1e9:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
