"""What aliasing existing_out into a grouped Pallas matmul's output saves
(`gemmgen explain`): HBM bytes per call, against a separate XLA pass."""

from __future__ import annotations

from dataclasses import dataclass

from gemmgen.backends.pallas.dtypes import storage_bytes
from gemmgen.backends.pallas.plans import MatmulPlan, PallasPlan


@dataclass(frozen=True, slots=True)
class AliasSaving:
    """HBM bytes per call that aliasing existing_out into the output saves,
    against writing the output and then selecting the rows the shard does
    not own from existing_out in a separate XLA pass."""

    select_pass: int  # that pass: read out and existing_out, write the result
    block_reads: int  # what the kernel reads instead: existing_out's visited m tiles (at most)
    copy: int  # what XLA adds when it cannot reuse existing_out's buffer (not donated)

    @property
    def saved(self) -> int:
        return self.select_pass - self.block_reads


def existing_out_saving(p: PallasPlan, m: int, n: int) -> AliasSaving | None:
    """The saving at an [m, k] x [n] problem, for a grouped matmul (the only
    op whose existing_out is aliased; not the masked layout, which has no
    existing_out); None for the others."""
    if not isinstance(p, MatmulPlan) or not p.grouped or p.masked:
        return None
    n_out = n // 2 if p.core.paired else n
    array = m * n_out * storage_bytes(p.module.kernel.out)
    return AliasSaving(select_pass=3 * array, block_reads=array, copy=2 * array)
