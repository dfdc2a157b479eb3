"""render: print the plans through templates/pallas/ (no I/O)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import assert_never

from gemmgen import ir
from gemmgen.backends.pallas.plans import (
    JAX_VERSION,
    MatmulPlan,
    PallasPlan,
    QuantizePlan,
    TgmmPlan,
    plan,
)
from gemmgen.backends.pallas.tpu import M_ALIGN
from gemmgen.render import header_text, render_template


def render(spec: ir.Spec) -> dict[PurePosixPath, str]:
    """`pallas/<kernel>.py` per Pallas kernel, plus `pallas/__init__.py`."""
    kernels = spec.kernels_for(ir.Backend.PALLAS_TPU)
    if not kernels:
        return {}
    header = header_text(spec.path)
    files: dict[PurePosixPath, str] = {}
    plans = [plan(k, spec) for k in kernels]
    for p in plans:
        files[p.module.path] = render_template(f"pallas/{_template(p)}", header=header, plan=p,
                                               mod=p.module, m_align=M_ALIGN)
    files[PurePosixPath("pallas/__init__.py")] = render_template(
        "pallas/__init__.py.j2", header=header, spec_path=spec.path,
        modules=[p.module for p in plans], jax_version=JAX_VERSION)
    return dict(sorted(files.items()))


def _template(p: PallasPlan) -> str:
    match p:
        case MatmulPlan():
            return "matmul.py.j2"
        case TgmmPlan():
            return "tgmm.py.j2"
        case QuantizePlan():
            return "quantize.py.j2"
        case _:
            assert_never(p)
