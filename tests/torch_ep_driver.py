"""One rank of the expert-parallel MoE forward of examples/torch_fused_moe.py
(tests/launchers/test_torch_fused_moe.py starts several, with gloo on CPU).

    python tests/torch_ep_driver.py RANK WORLD INIT_FILE OUT_FILE

Each rank loads the ops' emulated libraries (GEMMGEN_TORCH_LIBS), builds
the same parameters and tokens from fixed seeds, keeps its experts and its
slice of the tokens, runs fused_moe_ep and saves its output to OUT_FILE.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from examples import torch_fused_moe as fm


def main() -> None:
    rank, world, init_file, out_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    fm.load(os.environ["GEMMGEN_TORCH_LIBS"], "cpu")
    cfg = fm.Config()
    params = fm.expert_slice(fm.init(cfg, seed=1), rank, world)
    x = torch.randn(24, cfg.d_model, generator=torch.Generator().manual_seed(2)).bfloat16()
    t = x.shape[0] // world
    out = fm.fused_moe_ep(x[rank * t:(rank + 1) * t].contiguous(), params, cfg)
    torch.save(out, out_file)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
