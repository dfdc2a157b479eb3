"""The table of the tile GEMM's tensor-core bodies besides mma.sync.

Each entry is a `Body` (body.py) in a module of its own. The launchers test
the bodies' conditions in this order and take the first that holds, else
the mma.sync body (mma_sync.py), which every tile GEMM has. A new body is a
module, its .cu partial template and one entry here (docs/architecture.md,
"How to add a CUDA body"): the sm_100a tcgen05 body is
tcgen05.py.
"""

from __future__ import annotations

from gemmgen.backends.cuda.gemm import sm120, tcgen05, wgmma
from gemmgen.backends.cuda.gemm.body import Body

BODIES: tuple[Body, ...] = (
    wgmma.BODY,  # sm_90a: TMA + wgmma (and the weight-only tile), on compute capability 9.0
    tcgen05.BODY,  # sm_100a: TMA + tcgen05.mma, the accumulators in TMEM, on 10.0
    sm120.BODY,  # sm_120a / sm_121a: the block-scaled mma.sync (MXFP8), on 12.0 / 12.1
)


def body(name: str) -> Body:
    """The body named `name`."""
    return next(b for b in BODIES if b.name == name)
