"""A vLLM-style fused MoE forward in PyTorch on gemmgen's generated ops.

    router -> top-k -> sort the (token, expert) pairs by expert -> FP8
    per-token-group quantization -> grouped gate-up GEMM with silu_mul ->
    quantization -> grouped down GEMM -> unsort and combine

The GEMMs and the quantizer are the PyTorch ops of specs/moe.gemm and
specs/dense.gemm (docs/using-the-output.md, "PyTorch"):

- `gemmgen_dense::per_token_group_quant_fp8_out_scale_f32`: bf16 [m, k] ->
  e4m3 [m, k] and f32 scales [m, k / 128];
- `gemmgen_moe::moe_w8a8_gateup_silu`: DeepSeek block-scaled W8A8, w13 [E, 2F,
  D] (gate rows, then up rows) -> silu(gate) * up, bf16 [m, F];
- `gemmgen_moe::moe_w8a8_grouped_gemm`: w2 [E, D, F] -> bf16 [m, D].

Everything stays on the device: routing, sorting and group sizes are tensor
operations (no `.item()`, no host synchronisation), so the forward can be
captured in a CUDA graph or compiled with torch.compile.

Expert parallelism (`fused_moe_ep`): each rank of a torch.distributed group
owns E / world experts (its slices of w13 and w2) and passes its first
expert as `group_offset`; the tokens are all-gathered, every rank routes all
of them, computes the rows of its own experts (the others come out as
zeros) and the partial outputs are summed with all_reduce; each rank keeps
its own tokens. The same code runs with gloo on CPU processes and with
NCCL on GPUs.

Run from the project root (the folder that holds `generated/`), with the
libraries of the three kernels built by `gemmgen compile --torch`:

    gemmgen compile specs/moe.gemm --torch --emulate --out build/
    gemmgen compile specs/dense.gemm --torch --emulate --out build/
    python -m examples.torch_fused_moe build/ cpu

(without --emulate and with `cuda` for a GPU; scripts/torch_moe_bench.py
times it there).
"""

from __future__ import annotations

import dataclasses
import sys

import torch

import generated.dense.torch as dense_ops
import generated.moe.torch as moe_ops

BLOCK = 128  # the K (and weight N) block of the scales
FP8_MAX = 448.0  # the largest finite e4m3 value


@dataclasses.dataclass(frozen=True)
class Config:
    d_model: int = 256  # D
    d_ff: int = 256  # F, per expert
    experts: int = 4  # E
    top_k: int = 2


def load(folder: str, device: str) -> None:
    """Load the ops' libraries (lib<kernel>.so for "cuda", lib<kernel>_emu.so for "cpu")."""
    for package in (moe_ops, dense_ops):
        package.load_all(folder, device=device)


def quantize_weights(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[E, N, K] float -> e4m3 [E, N, K] and f32 scales [E, N / 128, K / 128],
    one per 128 x 128 block (amax / 448)."""
    e, n, k = w.shape
    blocks = w.float().reshape(e, n // BLOCK, BLOCK, k // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=(2, 4)).clamp(min=1e-12) / FP8_MAX
    q = (blocks / scale[:, :, None, :, None]).reshape(e, n, k).to(torch.float8_e4m3fn)
    return q, scale


def init(cfg: Config, seed: int = 0, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Random router and expert weights, the experts quantized to FP8."""
    gen = torch.Generator().manual_seed(seed)
    d, f, e = cfg.d_model, cfg.d_ff, cfg.experts
    w13 = torch.randn(e, 2 * f, d, generator=gen) / d**0.5
    w2 = torch.randn(e, d, f, generator=gen) / f**0.5
    w13_q, w13_scale = quantize_weights(w13)
    w2_q, w2_scale = quantize_weights(w2)
    params = {
        "router": (torch.randn(d, e, generator=gen) / d**0.5).bfloat16(),
        "w13": w13_q,
        "w13_scale": w13_scale,
        "w2": w2_q,
        "w2_scale": w2_scale,
    }
    return {name: t.to(device) for name, t in params.items()}


def route(x: torch.Tensor, router: torch.Tensor, top_k: int):
    """Softmax top-k routing: (weights [T, K] f32, expert ids [T, K])."""
    probs = torch.softmax((x @ router).float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), ids


def quantize(x: torch.Tensor):
    return torch.ops.gemmgen_dense.per_token_group_quant_fp8_out_scale_f32(x)


def fused_moe(x: torch.Tensor, params: dict[str, torch.Tensor], cfg: Config,
              group_offset: int = 0, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """The MoE layer on tokens x [T, D] bf16 -> [T, D] (bf16, or `out_dtype`:
    the combine is in f32). With `group_offset`, params hold the experts
    [offset, offset + E_local) only, and the rows of the others add zeros."""
    t, k = x.shape[0], cfg.top_k
    weights, ids = route(x, params["router"], k)
    # Sort the T * K (token, expert) pairs by expert: rows of group e are
    # the tokens routed to expert e.
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    token = order // k
    group_sizes = torch.bincount(flat, minlength=cfg.experts).to(torch.int32)
    q, scale = quantize(x[token].contiguous())
    h = torch.ops.gemmgen_moe.moe_w8a8_gateup_silu(
        q, params["w13"], group_sizes, scale, params["w13_scale"], group_offset
    )
    q2, scale2 = quantize(h)
    y = torch.ops.gemmgen_moe.moe_w8a8_grouped_gemm(
        q2, params["w2"], group_sizes, scale2, params["w2_scale"], group_offset
    )
    # Unsort and combine: each token's rows, weighted, summed.
    out = torch.zeros(t, x.shape[1], dtype=torch.float32, device=x.device)
    out.index_add_(0, token, y.float() * weights.reshape(-1)[order, None])
    return out.to(out_dtype)


def expert_slice(params: dict[str, torch.Tensor], rank: int, world: int) -> dict:
    """The experts rank `rank` of `world` owns: [rank * E / world, ...)."""
    local = params["w13"].shape[0] // world
    out = dict(params)
    for name in ("w13", "w13_scale", "w2", "w2_scale"):
        out[name] = params[name][rank * local:(rank + 1) * local].contiguous()
    return out


def fused_moe_ep(x_local: torch.Tensor, params: dict[str, torch.Tensor], cfg: Config,
                 group=None) -> torch.Tensor:
    """Expert parallelism over a torch.distributed group: x_local [T_local, D]
    are this rank's tokens, `params` the full router and this rank's experts
    (expert_slice). Returns this rank's tokens' outputs."""
    import torch.distributed as dist

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    gathered = [torch.empty_like(x_local) for _ in range(world)]
    dist.all_gather(gathered, x_local, group=group)
    x = torch.cat(gathered)
    local = params["w13"].shape[0]
    partial = fused_moe(x, params, cfg, group_offset=rank * local, out_dtype=torch.float32)
    dist.all_reduce(partial, group=group)
    t = x_local.shape[0]
    return partial[rank * t:(rank + 1) * t].to(torch.bfloat16)


def main(argv: list[str]) -> None:
    folder = argv[0] if argv else "build/"
    device = argv[1] if len(argv) > 1 else "cpu"
    load(folder, device)
    cfg = Config()
    params = init(cfg, device=device)
    x = torch.randn(16, cfg.d_model, device=device).bfloat16()
    out = fused_moe(x, params, cfg)
    print(tuple(out.shape), out.dtype, float(out.float().norm()))


if __name__ == "__main__":
    main(sys.argv[1:])
