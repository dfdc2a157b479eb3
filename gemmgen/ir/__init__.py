"""The validated, frozen intermediate representation of a spec.

Everything a backend or the reference needs is here, already checked by
`gemmgen.validate`: backends never see the syntax tree. Every user-facing node
carries the `Loc` of the spec text it came from, so later stages (a backend's
budget check, say) can still report a positioned diagnostic.

Shapes use these names (docs/semantics.md):

    dense     lhs [m, k]   rhs [k, n] or [n, k]         out [m, n]
    grouped   lhs [m, k]   rhs [g, k, n] or [g, n, k]   out [m, n]
    masked    lhs [g, m, k] rhs [g, k, n] or [g, n, k]  out [g, m, n]
              (op grouped with a 3-d lhs: m is the per-group capacity and
              `masked_m` [g] the valid rows of each group)
    tgmm      lhs [m, k]   rhs [m, n]                   out [g, k, n]
    quantize  lhs [m, k]                                out [m, k] + scale [m, k/G]

NB: `g` is the number of groups *held by this shard* (rhs.shape[0]); the
`group_sizes` argument has the total number of groups, and `group_offset`
says which of them this shard owns.

The IR is a package of small modules, one concern each; import it as
`from gemmgen import ir` and use `ir.Kernel`, `ir.DType`, ... (this module
re-exports every public name):

- `loc`: `Loc`, a position in a spec file;
- `dtypes`: `DType` and its tables (bits, NumPy names, largest finite
  values), the dtypes each role admits;
- `parts`: what a kernel is made of (op, layout, scales and `scale_shape`,
  bias, epilogue, operands, tiles and LUT conditions, algorithm, `Mma`);
- `targets`: backends, a backend's own tile LUT, CUDA archs and TPU
  generations, launcher families, `Target`;
- `kernel`: `Kernel`, its per-backend view and the Hopper (wgmma) body's
  conditions;
- `spec`: `Dispatch` and `Spec`.
"""

from __future__ import annotations

from gemmgen.ir.dtypes import (
    BIAS_DTYPES,
    MX_SCALE_DTYPES,
    OPERAND_DTYPES,
    OUTPUT_DTYPES,
    QUANTIZED_OUTPUT_DTYPES,
    SCALE_DTYPES,
    ZERO_DTYPES,
    DType,
)
from gemmgen.ir.kernel import (
    MX_BLOCK_K,
    MX_MMA_ARCHS,
    TCGEN05_ARCHS,
    WGMMA_ARCHS,
    WGMMA_FP8_BK,
    WGMMA_MIXED_BK,
    WGMMA_WEIGHTS,
    Kernel,
)
from gemmgen.ir.loc import (
    NO_LOC,
    Loc,
)
from gemmgen.ir.parts import (
    ATOM_KBLOCKS,
    ATOM_ROWS,
    COND_DIMS,
    GROUP_COND_DIMS,
    LHS_SCALE_MODES,
    NO_SCALE,
    QUANTIZE_SCALE_MODES,
    RHS_SCALE_MODES,
    SWIGLU_ALPHA_GATE,
    SWIGLU_LIMIT,
    TPU_COND,
    Activation,
    Algorithm,
    Bias,
    BiasMode,
    Cmp,
    Cond,
    Epilogue,
    Layout,
    Mma,
    Op,
    Operand,
    Pairs,
    Placement,
    Promotion,
    Scale,
    ScaleLayout,
    ScaleMode,
    ScaleRounding,
    Tile,
    TileRule,
    cdiv,
    fold_scales_of,
    global_scale_shape,
    lcm,
    quantize_rule,
    rows_per_group,
    scale_atom_offset,
    scale_shape,
    zero_shape,
)
from gemmgen.ir.spec import (
    Dispatch,
    DispatchRule,
    Spec,
    Tuned,
)
from gemmgen.ir.targets import (
    CUDA_ARCHS,
    CUDA_LAUNCHERS,
    CUDA_REQUIRED_LAUNCHERS,
    JAX_RANGE,
    SM12X_ARCHS,
    TPU_GENERATIONS,
    Backend,
    BackendTiles,
    Target,
    arch_number,
    jax_in_range,
)

__all__ = [
    "JAX_RANGE",
    "jax_in_range",
    "ATOM_KBLOCKS",
    "ATOM_ROWS",
    "BIAS_DTYPES",
    "ZERO_DTYPES",
    "CUDA_ARCHS",
    "CUDA_LAUNCHERS",
    "CUDA_REQUIRED_LAUNCHERS",
    "LHS_SCALE_MODES",
    "MX_BLOCK_K",
    "MX_MMA_ARCHS",
    "MX_SCALE_DTYPES",
    "NO_LOC",
    "NO_SCALE",
    "OPERAND_DTYPES",
    "OUTPUT_DTYPES",
    "QUANTIZED_OUTPUT_DTYPES",
    "QUANTIZE_SCALE_MODES",
    "RHS_SCALE_MODES",
    "SCALE_DTYPES",
    "SM12X_ARCHS",
    "TPU_GENERATIONS",
    "TCGEN05_ARCHS",
    "WGMMA_ARCHS",
    "WGMMA_FP8_BK",
    "WGMMA_MIXED_BK",
    "WGMMA_WEIGHTS",
    "Activation",
    "Algorithm",
    "Backend",
    "BackendTiles",
    "Bias",
    "BiasMode",
    "Cmp",
    "Cond",
    "COND_DIMS",
    "GROUP_COND_DIMS",
    "TPU_COND",
    "rows_per_group",
    "Tuned",
    "DType",
    "Dispatch",
    "DispatchRule",
    "Epilogue",
    "Pairs",
    "SWIGLU_ALPHA_GATE",
    "SWIGLU_LIMIT",
    "Kernel",
    "Layout",
    "Loc",
    "Mma",
    "Op",
    "Operand",
    "Placement",
    "Promotion",
    "Scale",
    "ScaleLayout",
    "ScaleMode",
    "ScaleRounding",
    "Spec",
    "Target",
    "Tile",
    "TileRule",
    "arch_number",
    "cdiv",
    "fold_scales_of",
    "lcm",
    "quantize_rule",
    "scale_atom_offset",
    "global_scale_shape",
    "zero_shape",
    "scale_shape",
]
