"""The CUDA tile GEMM (dense, grouped and masked) on tensor cores.

Modules, one concern each:

  contract   what every body shares: the launch contract (arguments,
             checks, alignments), the Config struct, the spec lines
  mma_sync   the mma.sync body (sm_80+), which every tile GEMM has: its
             tiles, entry points and algorithm lines
  body       what another tensor-core body provides (`Body`, `BodyPlan`)
  bodies     the table of those bodies, in the order the launchers test them
  wgmma      the Hopper body: TMA + wgmma on sm_90a (and the weight-only tile)
  masked     how the plan differs for the masked layout
  text       entry points as clang-format lays them out (`Param`, `Entry`)
  plans      `GemmPlan`, which gemm.cu.j2 prints, and `diagnose`
  launch     `launch_plan`: the LaunchPlan with a Path per body

docs/cuda.md describes the kernel, docs/cuda-hopper.md the Hopper body, and
docs/architecture.md how to add a body.
"""

from __future__ import annotations

from gemmgen.backends.cuda.gemm.contract import BFeed, compute_dtype, fold_scales
from gemmgen.backends.cuda.gemm.launch import launch_plan
from gemmgen.backends.cuda.gemm.mma_sync import TileConfig
from gemmgen.backends.cuda.gemm.plans import GemmPlan, diagnose, plan
from gemmgen.backends.cuda.gemm.text import Entry, Param

__all__ = ["BFeed", "Entry", "GemmPlan", "Param", "TileConfig", "compute_dtype", "diagnose",
           "fold_scales", "launch_plan", "plan"]
