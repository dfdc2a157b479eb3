"""The NumPy reference: the definition of what every generated kernel computes.

- `semantics`: `reference(kernel, lhs=..., ...)` in float64 and
  `reference_output` in the output's storage format (docs/semantics.md says
  the same in prose), from its parts: `decode` (the arguments checked and
  decoded, `group_starts`), `scales` (how each scale mode multiplies) and
  `quantize` (op quantize, `AMAX_FLOOR`);
- `tolerance`: `compare(actual, expected, kernel, ...)` decides whether a
  kernel's output matches, by the policy of docs/semantics.md, "Tolerance";
- `inputs`: `random_inputs` / `random_group_sizes` draw operands;
- `weights`: `quantize_uint4_asymmetric`, float weights as GPTQ / AWQ's
  uint4 codes, scales and zero points.
"""

from gemmgen.reference.decode import group_starts
from gemmgen.reference.inputs import random_group_sizes, random_inputs, random_masked_m
from gemmgen.reference.quantize import AMAX_FLOOR
from gemmgen.reference.quantize import _e8m0_scale_bytes as _e8m0_scale_bytes
from gemmgen.reference.semantics import _LIPSCHITZ as _LIPSCHITZ
from gemmgen.reference.semantics import _activate as _activate
from gemmgen.reference.semantics import _evaluate as _evaluate
from gemmgen.reference.semantics import reference, reference_output
from gemmgen.reference.tolerance import CompareResult, Tolerance, compare, tolerance
from gemmgen.reference.weights import quantize_uint4_asymmetric

__all__ = [
    "AMAX_FLOOR",
    "CompareResult",
    "Tolerance",
    "compare",
    "group_starts",
    "quantize_uint4_asymmetric",
    "random_group_sizes",
    "random_inputs",
    "random_masked_m",
    "reference",
    "reference_output",
    "tolerance",
]
# _LIPSCHITZ, _activate, _e8m0_scale_bytes and _evaluate are re-exported for
# the tests that check the tolerance policy and the e8m0 rounding directly.
