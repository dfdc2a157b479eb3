"""What ships with generated code: the CUDA headers in `cuda/` that
generated `.cu` files include (and the CPU emulator's), and where they are.

Generated CuPy launchers compile with `-I RUNTIME_INCLUDE_DIR`; this module
imports nothing else of gemmgen, so running generated code needs no more of
it. The Python that compiles, emulates and checks kernels is
`gemmgen.harness`.
"""

from __future__ import annotations

from pathlib import Path

RUNTIME_INCLUDE_DIR = Path(__file__).resolve().parent / "cuda"
"""The gemmgen CUDA runtime headers (gg_runtime.cuh and what it includes)."""
