"""Standard verification cases for a kernel: the shapes `gemmgen verify` and
the backend test suites run, chosen from the kernel's own tile so that every
case exercises the edges: a partial last M tile, K not a multiple of the K
tile, zero-sized groups, rows owned by no group, and group_offset sharding
with existing_out; for the masked grouped layout, valid counts of 0, 1, the
capacity and ragged ones, a capacity that is not a multiple of the M tile,
and 16 groups.

Tile LUTs: every entry (each `tile_rule` and the default tile) gets at least
one case whose shape picks it, built from that entry's tile (`lut_cases`).
A backend with a LUT of its own gets the cases of its own LUT: the cases are
those of the kernel as the backend sees it (`ir.Kernel.for_backend`).

Size: a case costs `case_work(kernel, case)` multiply-adds of the tiles it
runs. Over WORK_BUDGET, the free dims shrink (m first: the fewest rows that
keep a partial tile, then k and n) down to the smallest shape the spec's
`dims` and the LUT entry allow, so that a kernel with large static dims
still runs one row of tiles per case, not several.

The modules, lowest first: `case` (Case, its LUT entry and work), `edges`
(the shapes that make the edges), `lut` (a case per LUT entry; fitting the
budget), `standard` (`standard_cases`), `user` (the user's own shape,
`user_case`) and `launch` (the launchers' conditions, `refused`). This
module re-exports their public names: `from gemmgen.cases import Case`.
"""

from gemmgen.cases.case import WORK_BUDGET, Case, case_groups, case_work, lut_entry, tile_label
from gemmgen.cases.launch import condition_results, launch_conditions, launch_env, refused
from gemmgen.cases.lut import lut_cases
from gemmgen.cases.standard import standard_cases
from gemmgen.cases.user import DEFAULT_GROUPS, Shape, ShapeError, check_shape, user_case

__all__ = [
    "DEFAULT_GROUPS",
    "WORK_BUDGET",
    "Case",
    "Shape",
    "ShapeError",
    "case_groups",
    "case_work",
    "check_shape",
    "condition_results",
    "launch_conditions",
    "launch_env",
    "lut_cases",
    "lut_entry",
    "refused",
    "standard_cases",
    "tile_label",
    "user_case",
]
