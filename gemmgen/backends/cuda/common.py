"""The CUDA kinds' shared plan vocabulary, one import away.

The pieces live in modules of one concern each:

  expr          launch-plan expressions as data (`Expr` trees printing C++,
                Python and Rust, evaluated by `gemmgen explain`)
  layout        clang-format / ruff format layout of data-dependent text
                (declarations, calls, comments, string literals)
  args          the argument tables: `Arg`, `Binding`, `Check`, `Derived`,
                the dtype -> C type table
  tensor_maps   a launch step's arguments (`StepArg`), tensor maps
  steps         `Step`, and `Variant`: a LUT tile's steps and its `Path`s
  launch        the `LaunchPlan` the generic launcher templates print

This module re-exports their public names, so a kind may import what it
needs from here or from the module itself.
"""

from __future__ import annotations

from gemmgen.backends.cuda.args import CTYPE, Arg, Binding, Check, Derived, Role, spec_checks
from gemmgen.backends.cuda.expr import (
    COMPARISONS, ZERO, Bin, Call, Expr, Fn, Lit, Op, Var, all_of, any_of, cdiv, div, expr, exprs,
    min_, parse_expr, var,
)
from gemmgen.backends.cuda.launch import (
    DEFAULT_SMEM, DEVICE_NAMES, LIMITS, WARP, ArgKind, Grid, LaunchPlan, Limits, Path, Step,
    StepArg, TensorMapSpec, Variant, array, cond_expr, i32, i64, lut_groups, tensor_map,
    tuned_where, where,
)
from gemmgen.backends.cuda.layout import (
    COLUMNS, comment, cpp_assign_string, cpp_call, cpp_decl, cpp_string, py_call, py_collection,
    py_tuple,
)

__all__ = [
    "COLUMNS", "COMPARISONS", "CTYPE", "DEFAULT_SMEM", "DEVICE_NAMES", "LIMITS", "WARP", "ZERO",
    "Arg", "ArgKind", "Bin", "Binding", "Call", "Check", "Derived", "Expr", "Fn", "Grid",
    "LaunchPlan", "Limits", "Lit", "Op", "Path", "Role", "Step", "StepArg", "TensorMapSpec", "Var",
    "Variant", "all_of", "any_of", "array", "cdiv", "comment", "cond_expr", "lut_groups", "tuned_where", "cpp_assign_string",
    "cpp_call", "cpp_decl", "cpp_string", "div", "expr", "exprs", "i32", "i64", "min_",
    "parse_expr", "py_call", "py_collection", "py_tuple", "spec_checks", "tensor_map", "var",
    "where",
]
