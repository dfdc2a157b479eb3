"""What every part of the validator shares: the words of the language, the
limits on numbers, and the collector of diagnostics."""

from __future__ import annotations

from gemmgen import ir
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import Backend, DType, Loc, ScaleMode
from gemmgen.names import name_problem

DTYPE_ALIASES = {
    "float32": "f32", "fp32": "f32", "bfloat16": "bf16", "float16": "f16",
    "fp16": "f16", "float8_e4m3fn": "e4m3", "fp8_e4m3": "e4m3",
    "float8_e5m2": "e5m2", "fp8_e5m2": "e5m2", "s8": "int8", "i8": "int8",
    "s4": "int4", "i4": "int4", "u4": "uint4", "e2m1": "fp4", "float4_e2m1fn": "fp4",
    "i32": "int32", "s32": "int32", "float8_e8m0fnu": "e8m0",
}
DTYPE_WORDS = {d.value: d for d in DType} | {
    alias: DType(canon) for alias, canon in DTYPE_ALIASES.items()}

KERNEL_FIELDS = (
    "op", "lhs", "rhs", "out", "acc", "lhs_scale", "rhs_scale", "out_scale",
    "bias", "epilogue", "tile", "tile_rule", "warp_tile", "stages", "threads",
    "algorithm", "max_m", "dims", "backends", "mma", "promotion",
)
REPEATABLE = {"tile_rule", "when"}
# Fields a backend may have its own of: `tile pallas_tpu m=1024 n=1024 k=512`.
QUALIFIABLE = {"tile", "tile_rule"}
SWEEPABLE = {"lhs", "rhs", "out", "acc", "lhs_scale", "rhs_scale", "out_scale",
             "bias", "epilogue", "tile", "warp_tile", "stages", "threads", "mma",
             "promotion"}
TARGET_FIELDS = {Backend.CUDA: ("archs", "launchers"), Backend.PALLAS_TPU: ("tpu",)}
BLOCK_KINDS = ("kernel", "target", "defaults", "dispatch", "tuned")

# A kernel block's sweeps expand into at most this many variants.
MAX_VARIANTS = 256
# alpha is applied in f32: finite and, when nonzero, a normal f32.
F32_MAX = 3.4028234663852886e38
F32_MIN_NORMAL = 1.1754943508222875e-38
# Dims are int32 in every launcher: conditions on them compare in that range.
DIM_MAX = 2**31 - 1

SCALE_MODE_WORDS = {m.value: m for m in ScaleMode}
LHS_SCALE_MODES, RHS_SCALE_MODES = ir.LHS_SCALE_MODES, ir.RHS_SCALE_MODES

# Whether a name is usable is gemmgen.names' business; the old name stays for
# callers that imported it from here.
identifier_problem = name_problem



class Collector:
    """Diagnostics found so far; the validator raises them all at once."""

    def __init__(self) -> None:
        self.diags: list[Diagnostic] = []

    def err(self, loc: Loc, message: str, width: int = 1) -> None:
        self.diags.append(Diagnostic(loc, message, width=width))


