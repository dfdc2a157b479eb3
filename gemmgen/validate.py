"""Syntax tree -> frozen IR, with every problem reported at its position.

The validator collects all problems of a spec before raising, so one run of
`gemmgen build` shows everything that is wrong. It checks, in order:

1. blocks: known kinds, names `gemmgen.names` accepts, one `defaults`
   block, known targets with known archs / TPU generations;
2. fields of each kernel: known names (with a nearest-word suggestion), the
   values each field admits, required fields present, no duplicates;
3. sweeps: a field with alternatives (`out f32 | bf16`) expands the kernel
   into one variant per combination, named `<base>_<field>_<token>`;
4. kernel semantics: dtypes against the op, scale modes against the operand
   they scale, tiles against scale blocks, packing of sub-byte types,
   silu_mul parity, arch features (FP8 MMA needs sm_89+);
5. the spec as a whole: unique names that do not clash (one C++ symbol,
   or equal but for case: `gemmgen.names.collisions`), dispatch arms naming
   compatible kernels, and each declared backend's own diagnostics (a
   feature it cannot emit yet is an error, never wrong code).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from gemmgen import ir
from gemmgen.diagnostics import Diagnostic, SpecError, one_of, suggest
from gemmgen.ir import (
    Activation, Algorithm, Backend, Bias, BiasMode, Cmp, Cond, DType, Epilogue,
    Layout, Loc, Op, Operand, Scale, ScaleMode, Tile, TileRule,
)
from gemmgen.names import collisions, name_problem
from gemmgen.parse import Alt, Atom, Block, Field, SpecAst

DTYPE_ALIASES = {
    "float32": "f32", "fp32": "f32", "bfloat16": "bf16", "float16": "f16",
    "fp16": "f16", "float8_e4m3fn": "e4m3", "fp8_e4m3": "e4m3",
    "float8_e5m2": "e5m2", "fp8_e5m2": "e5m2", "s8": "int8", "i8": "int8",
    "s4": "int4", "i4": "int4", "e2m1": "fp4", "float4_e2m1fn": "fp4",
    "i32": "int32", "s32": "int32", "float8_e8m0fnu": "e8m0",
}
DTYPE_WORDS = {d.value: d for d in DType} | {
    alias: DType(canon) for alias, canon in DTYPE_ALIASES.items()}

KERNEL_FIELDS = (
    "op", "lhs", "rhs", "out", "acc", "lhs_scale", "rhs_scale", "out_scale",
    "bias", "epilogue", "tile", "tile_rule", "warp_tile", "stages", "threads",
    "algorithm", "max_m", "dims", "backends",
)
REPEATABLE = {"tile_rule", "when"}
SWEEPABLE = {"lhs", "rhs", "out", "acc", "lhs_scale", "rhs_scale", "out_scale",
             "bias", "epilogue", "tile", "warp_tile", "stages", "threads"}
TARGET_FIELDS = {Backend.CUDA: ("archs",), Backend.PALLAS_TPU: ("tpu",)}
BLOCK_KINDS = ("kernel", "target", "defaults", "dispatch")

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


class _Collector:
    def __init__(self) -> None:
        self.diags: list[Diagnostic] = []

    def err(self, loc: Loc, message: str, width: int = 1) -> None:
        self.diags.append(Diagnostic(loc, message, width=width))


@dataclass(frozen=True)
class _Variant:
    """One element of a sweep: the chosen alternative for each field."""

    fields: dict[str, tuple[Field, Alt]]
    suffix: str


def _alt_parts(alt: Alt) -> list[str]:
    """The name tokens of an alternative: one per atom, a run of `key=value`
    atoms joined by 'x' (`m=64 n=128 k=64` -> `64x128x64`)."""
    parts: list[str] = []
    kv_run: list[str] = []
    for atom in alt.atoms:
        if atom.kind == "kv":
            assert isinstance(atom.value, Atom)
            kv_run.append(str(atom.value.value).replace(".", "p").replace("-", "m"))
            continue
        if kv_run:
            parts.append("x".join(kv_run))
            kv_run = []
        match atom.kind:
            case "word":
                parts.append(DTYPE_ALIASES.get(str(atom.value), str(atom.value)))
            case "int":
                parts.append(str(atom.value))
            case "float":
                parts.append(str(atom.value).replace(".", "p").replace("-", "m"))
            case "shape":
                assert isinstance(atom.value, tuple)
                parts.append("".join(str(d.value) for d in atom.value))
            case "cond":
                parts.append(f"{atom.key}{atom.value}")
    if kv_run:
        parts.append("x".join(kv_run))
    return parts


def _alt_tokens(field: Field) -> list[str]:
    """The canonical name token of each alternative of a swept field: the
    parts in which the alternatives differ (`out f32 | bf16` -> f32, bf16;
    `lhs_scale per_token_group k=128 f32 | ... e8m0` -> f32, e8m0)."""
    parts = [_alt_parts(alt) for alt in field.alts]
    if len({len(p) for p in parts}) == 1:
        keep = [i for i in range(len(parts[0])) if len({p[i] for p in parts}) > 1]
        if keep:
            parts = [[p[i] for i in keep] for p in parts]
    return ["_".join(p) for p in parts]


class _KernelReader:
    """Reads one kernel variant's fields into IR values, collecting errors."""

    def __init__(self, c: _Collector, name: str, name_loc: Loc,
                 fields: dict[str, tuple[Field, Alt]], repeated: dict[str, list[Field]],
                 targets: dict[Backend, ir.Target], spec_path: str):
        self.c = c
        self.name = name
        self.name_loc = name_loc
        self.fields = fields
        self.repeated = repeated
        self.targets = targets
        self.spec_path = spec_path

    # -- atom helpers -----------------------------------------------------

    def err(self, loc: Loc, msg: str, width: int = 1) -> None:
        self.c.err(loc, f"kernel '{self.name}': {msg}", width)

    def dtype(self, atom: Atom, allowed: Iterable[DType], what: str) -> DType | None:
        allowed = tuple(allowed)
        if atom.kind != "word":
            self.err(atom.loc, f"{what} must be a dtype ({one_of(d.value for d in allowed)}), "
                     f"not {atom.describe()}", atom.width)
            return None
        word = str(atom.value)
        dt = DTYPE_WORDS.get(word)
        if dt is None:
            self.err(atom.loc, f"unknown dtype '{word}'{suggest(word, DTYPE_WORDS)}", atom.width)
            return None
        if dt not in allowed:
            self.err(atom.loc, f"{what} cannot be '{dt.value}'; "
                     f"it must be {one_of(d.value for d in allowed)}", atom.width)
            return None
        return dt

    def word(self, atom: Atom, choices: Iterable[str], what: str) -> str | None:
        choices = tuple(choices)
        if atom.kind != "word" or str(atom.value) not in choices:
            hint = suggest(str(atom.value), choices) if atom.kind == "word" else ""
            self.err(atom.loc, f"unknown {what} {atom.describe()}{hint} "
                     f"(expected {one_of(choices)})", atom.width)
            return None
        return str(atom.value)

    def positive_int(self, atom: Atom, what: str, lo: int = 1, hi: int = 1 << 20) -> int | None:
        if atom.kind != "int":
            self.err(atom.loc, f"{what} must be an integer, not {atom.describe()}", atom.width)
            return None
        v = int(atom.value)  # type: ignore[arg-type]
        if not lo <= v <= hi:
            self.err(atom.loc, f"{what} must be in [{lo}, {hi}], got {v}", atom.width)
            return None
        return v

    def kvs(self, atoms: Iterable[Atom], keys: tuple[str, ...], what: str,
            required: tuple[str, ...] = ()) -> dict[str, Atom]:
        out: dict[str, Atom] = {}
        for a in atoms:
            if a.kind != "kv" or a.key not in keys:
                hint = suggest(a.key, keys) if a.kind == "kv" else ""
                self.err(a.loc, f"unexpected {a.describe()} in {what}{hint}; "
                         f"expected {one_of(k + '=' for k in keys)}", a.width)
                continue
            if a.key in out:
                self.err(a.loc, f"'{a.key}' given twice in {what}", a.width)
                continue
            out[a.key] = a.value  # type: ignore[assignment]
        for key in required:
            if key not in out:
                loc = next(iter(atoms), None)
                self.err(loc.loc if loc else self.name_loc, f"{what} needs '{key}='")
        return out

    def single(self, field: str) -> tuple[Field, Alt] | None:
        return self.fields.get(field)

    def atoms(self, field: str) -> tuple[Atom, ...]:
        got = self.fields.get(field)
        return got[1].atoms if got else ()

    def only_atom(self, field: str) -> Atom | None:
        atoms = self.atoms(field)
        if not atoms:
            return None
        if len(atoms) > 1:
            self.err(atoms[1].loc, f"'{field}' takes one value; unexpected {atoms[1].describe()}",
                     atoms[1].width)
        return atoms[0]

    def field_loc(self, field: str) -> Loc:
        got = self.fields.get(field)
        return got[0].loc if got else self.name_loc

    # -- fields -----------------------------------------------------------

    def read(self) -> ir.Kernel | None:
        n_errors = len(self.c.diags)
        for req in ("op", "lhs", "out"):
            if req not in self.fields:
                self.err(self.name_loc, f"missing required field '{req}'", len(self.name))
        op_atom = self.only_atom("op")
        op = None
        if op_atom is not None:
            w = self.word(op_atom, [o.value for o in Op], "op")
            op = Op(w) if w else None
        if op is None:
            return None
        if op is not Op.QUANTIZE and "rhs" not in self.fields:
            self.err(self.name_loc, f"missing required field 'rhs' (op '{op.value}')",
                     len(self.name))

        lhs = self.operand("lhs", op)
        rhs = None
        if op is Op.QUANTIZE and "rhs" in self.fields:
            self.err(self.field_loc("rhs"), "op 'quantize' has no rhs", 3)
        elif "rhs" in self.fields:
            rhs = self.operand("rhs", op)
        out = self.out_dtype(op)
        acc = self.acc_dtype(lhs, rhs)
        lhs_scale = self.scale("lhs_scale", LHS_SCALE_MODES)
        rhs_scale = self.scale("rhs_scale", RHS_SCALE_MODES)
        out_scale = self.scale("out_scale", (ScaleMode.TOKEN_GROUP,)) \
            if "out_scale" in self.fields else ir.NO_SCALE
        bias = self.bias()
        epilogue = self.epilogue()
        tile = self.tile("tile", ("m", "n", "k")) if "tile" in self.fields else Tile(128, 128, 128)
        rules = self.tile_rules()
        warp = self.tile("warp_tile", ("m", "n")) if "warp_tile" in self.fields else None
        stages = self.int_field("stages", 1, 8, 2)
        threads = self.int_field("threads", 32, 1024, None)
        if threads is not None and threads % 32:
            self.err(self.field_loc("threads"), f"threads must be a multiple of 32, got {threads}")
        algorithm = Algorithm.TILE
        if a := self.only_atom("algorithm"):
            w = self.word(a, [x.value for x in Algorithm], "algorithm")
            algorithm = Algorithm(w) if w else Algorithm.TILE
        max_m = self.int_field("max_m", 1, 64, None)
        static = self.kvs(self.atoms("dims"), ("n", "k"), "dims")
        static_n = self.positive_int(static["n"], "dims n") if "n" in static else None
        static_k = self.positive_int(static["k"], "dims k") if "k" in static else None
        backends = self.backends()

        if lhs is None or out is None or acc is None or tile is None or (
                op is not Op.QUANTIZE and rhs is None):
            return None
        kernel = ir.Kernel(
            name=self.name, op=op, lhs=lhs, rhs=rhs, out=out, acc=acc,
            lhs_scale=lhs_scale or ir.NO_SCALE, rhs_scale=rhs_scale or ir.NO_SCALE,
            out_scale=out_scale or ir.NO_SCALE, bias=bias or Bias(), epilogue=epilogue or Epilogue(),
            tile=tile, tile_rules=rules, warp_tile=warp, stages=stages or 2, threads=threads,
            algorithm=algorithm, max_m=max_m, static_n=static_n, static_k=static_k,
            backends=backends, loc=self.name_loc,
        )
        if len(self.c.diags) > n_errors:
            return None
        self.semantics(kernel)
        return kernel

    def operand(self, field: str, op: Op) -> Operand | None:
        atoms = self.atoms(field)
        if not atoms:
            return None
        floc = self.field_loc(field)
        allowed = ir.OPERAND_DTYPES
        if op is Op.QUANTIZE or op is Op.TGMM:
            allowed = (DType.F32, DType.BF16, DType.F16)
        dt = self.dtype(atoms[0], allowed, f"{field} dtype (op '{op.value}')")
        packed = False
        shape: Atom | None = None
        for a in atoms[1:]:
            if a.kind == "word" and a.value == "packed":
                packed = True
            elif a.kind == "shape" and shape is None:
                shape = a
            else:
                self.err(a.loc, f"unexpected {a.describe()} after the {field} dtype; "
                         "expected 'packed' or a shape like [m, k]", a.width)
        if dt is None:
            return None
        if dt.is_sub_byte and not packed:
            self.err(atoms[0].loc, f"{field} dtype '{dt.value}' is {dt.bits}-bit and must be "
                     f"stored packed two per byte: write '{field} {dt.value} packed ...'",
                     atoms[0].width)
        if packed and not dt.is_sub_byte:
            self.err(atoms[0].loc, f"'packed' applies to 4-bit dtypes only, not '{dt.value}'")
        expected: dict[tuple[str, ...], Layout]
        if field == "lhs":
            expected = {("m", "k"): Layout.KN}
        elif op is Op.DENSE:
            expected = {("k", "n"): Layout.KN, ("n", "k"): Layout.NK}
        elif op is Op.GROUPED:
            expected = {("g", "k", "n"): Layout.KN, ("g", "n", "k"): Layout.NK}
        else:  # tgmm: the second operand is the output gradient [m, n]
            expected = {("m", "n"): Layout.KN}
        layout = Layout.KN
        if shape is None:
            if len(expected) > 1:
                self.err(floc, f"{field} needs a shape to fix its layout: "
                         f"{one_of('[' + ', '.join(s) + ']' for s in expected)}")
                return None
        else:
            assert isinstance(shape.value, tuple)
            dims = tuple(str(d.value) for d in shape.value)
            if dims not in expected:
                self.err(shape.loc, f"{field} shape must be "
                         f"{one_of('[' + ', '.join(s) + ']' for s in expected)} for op "
                         f"'{op.value}', not {shape.describe()}", shape.width)
                return None
            layout = expected[dims]
        return Operand(dt, packed, layout, floc)

    def out_dtype(self, op: Op) -> DType | None:
        a = self.only_atom("out")
        if a is None:
            return None
        allowed = ir.QUANTIZED_OUTPUT_DTYPES if op is Op.QUANTIZE else ir.OUTPUT_DTYPES
        return self.dtype(a, allowed, f"out (op '{op.value}')")

    def acc_dtype(self, lhs: Operand | None, rhs: Operand | None) -> DType | None:
        integer = (lhs is not None and rhs is not None and lhs.dtype is DType.INT8
                   and rhs.dtype in (DType.INT8, DType.INT4))
        default = DType.INT32 if integer else DType.F32
        a = self.only_atom("acc")
        if a is None:
            return default
        dt = self.dtype(a, (DType.F32, DType.INT32), "acc")
        if dt is not None and dt is not default:
            why = "integer operands accumulate in int32" if integer else \
                "only int8 x int8/int4 accumulates in int32"
            self.err(a.loc, f"acc must be '{default.value}' here: {why}", a.width)
            return None
        return dt

    def scale(self, field: str, modes: tuple[ScaleMode, ...]) -> Scale | None:
        atoms = self.atoms(field)
        if not atoms:
            return ir.NO_SCALE
        floc = self.field_loc(field)
        w = self.word(atoms[0], [m.value for m in modes], f"{field} mode")
        if w is None:
            return None
        mode = ScaleMode(w)
        dtype = DType.F32
        blocks: dict[str, Atom] = {}
        for a in atoms[1:]:
            if a.kind == "word":
                got = self.dtype(a, ir.SCALE_DTYPES, f"{field} dtype")
                dtype = got or dtype
            elif a.kind == "kv":
                if a.key in blocks:
                    self.err(a.loc, f"'{a.key}' given twice in {field}")
                blocks[a.key] = a
            else:
                self.err(a.loc, f"unexpected {a.describe()} in {field}; expected a scale "
                         "dtype or a block size like k=128", a.width)
        needs = {ScaleMode.TOKEN_GROUP: ("k",), ScaleMode.BLOCK: ("n", "k"),
                 ScaleMode.KBLOCK: ("k",)}.get(mode, ())
        sizes: dict[str, int] = {}
        for key, a in blocks.items():
            if key not in needs:
                self.err(a.loc, f"{field} mode '{mode.value}' takes "
                         f"{one_of(k + '=' for k in needs) if needs else 'no block sizes'}, "
                         f"not '{key}='", a.width)
                continue
            assert isinstance(a.value, Atom)
            v = self.positive_int(a.value, f"{field} block {key}", 1, 1 << 16)
            if v is not None:
                sizes[key] = v
        for key in needs:
            if key not in blocks:
                self.err(floc, f"{field} mode '{mode.value}' needs a block size '{key}=' "
                         f"(e.g. {key}=128)")
                return None
        if mode is ScaleMode.NONE:
            return ir.NO_SCALE
        return Scale(mode, dtype, block_n=sizes.get("n", 1), block_k=sizes.get("k", 0), loc=floc)

    def bias(self) -> Bias | None:
        atoms = self.atoms("bias")
        if not atoms:
            return Bias()
        floc = self.field_loc("bias")
        if len(atoms) == 1 and atoms[0].kind == "word" and atoms[0].value == "none":
            return Bias()
        dt = self.dtype(atoms[0], ir.BIAS_DTYPES, "bias dtype")
        if len(atoms) != 2 or atoms[1].kind != "shape":
            self.err(floc, "bias is 'none' or a dtype and a shape: [n] or [g, 1, n]")
            return None
        assert isinstance(atoms[1].value, tuple)
        dims = tuple(str(d.value) for d in atoms[1].value)
        modes = {("n",): BiasMode.N, ("g", "1", "n"): BiasMode.GROUP}
        if dims not in modes:
            self.err(atoms[1].loc, f"bias shape must be [n] or [g, 1, n], not "
                     f"{atoms[1].describe()}", atoms[1].width)
            return None
        return Bias(modes[dims], dt, floc) if dt else None

    def epilogue(self) -> Epilogue | None:
        atoms = self.atoms("epilogue")
        if not atoms:
            return Epilogue()
        floc = self.field_loc("epilogue")
        act = Activation.NONE
        alpha: float | None = None
        seen_act: Atom | None = None
        for a in atoms:
            if a.kind == "kv" and a.key == "alpha":
                assert isinstance(a.value, Atom)
                if a.value.kind not in ("int", "float"):
                    self.err(a.value.loc, f"alpha must be a number, not {a.value.describe()}")
                    continue
                alpha = float(a.value.value)  # type: ignore[arg-type]
                if not math.isfinite(alpha) or abs(alpha) > F32_MAX:
                    self.err(a.value.loc, "alpha is out of range: kernels scale in f32, so "
                             f"|alpha| must be at most {F32_MAX!r}", a.value.width)
                elif alpha != 0 and abs(alpha) < F32_MIN_NORMAL:
                    self.err(a.value.loc, "alpha underflows: kernels scale in f32, so a nonzero "
                             f"|alpha| must be at least {F32_MIN_NORMAL!r} (a normal f32)",
                             a.value.width)
                continue
            w = self.word(a, [x.value for x in Activation], "epilogue")
            if w is None:
                continue
            if seen_act is not None and w != "none":
                self.err(a.loc, f"one activation per kernel; {seen_act.describe()} is already "
                         "given", a.width)
                continue
            seen_act = a
            act = Activation(w)
        return Epilogue(act, alpha, floc)

    def tile(self, field: str, keys: tuple[str, ...]) -> Tile | None:
        got = self.kvs(self.atoms(field), keys, field, required=keys)
        vals = {}
        for key, a in got.items():
            v = self.positive_int(a, f"{field} {key}", 1, 4096)
            if v is None:
                return None
            vals[key] = v
        if len(vals) != len(keys):
            return None
        return Tile(vals["m"], vals["n"], vals.get("k", 0))

    def tile_rules(self) -> tuple[TileRule, ...]:
        rules = []
        for f in self.repeated.get("tile_rule", []):
            atoms = f.alts[0].atoms
            arrow = next((i for i, a in enumerate(atoms) if a.kind == "arrow"), None)
            if arrow is None or arrow == 0:
                self.err(f.loc, "tile_rule is 'CONDITIONS -> m=.. n=.. k=..', "
                         "e.g. 'tile_rule m<=64 -> m=64 n=128 k=128'")
                continue
            conds = [self.cond(a, ("m", "n", "k")) for a in atoms[:arrow]]
            got = self.kvs(atoms[arrow + 1:], ("m", "n", "k"), "tile_rule tile",
                           required=("m", "n", "k"))
            vals = {k: self.positive_int(a, f"tile_rule {k}", 1, 4096) for k, a in got.items()}
            if None in conds or None in vals.values() or len(vals) != 3:
                continue
            rules.append(TileRule(tuple(c for c in conds if c), Tile(vals["m"], vals["n"], vals["k"]),  # type: ignore[arg-type]
                                  f.loc))
        return tuple(rules)

    def cond(self, a: Atom, dims: tuple[str, ...]) -> Cond | None:
        if a.kind != "cond" or a.key not in dims:
            self.err(a.loc, f"expected a condition on {one_of(dims)} like 'm<=64', "
                     f"not {a.describe()}", a.width)
            return None
        if not 0 <= int(a.value) <= DIM_MAX:  # type: ignore[call-overload]
            self.err(a.loc, f"a condition compares {a.key} with a value in [0, {DIM_MAX}], "
                     f"not {a.value}", a.width)
            return None
        return Cond(a.key, Cmp(a.cmp), int(a.value))  # type: ignore[arg-type]

    def int_field(self, field: str, lo: int, hi: int, default: int | None) -> int | None:
        a = self.only_atom(field)
        if a is None:
            return default
        return self.positive_int(a, field, lo, hi)

    def backends(self) -> tuple[Backend, ...]:
        atoms = self.atoms("backends")
        out: list[Backend] = []
        for a in atoms:
            w = self.word(a, [b.value for b in Backend], "backend")
            if w is None:
                continue
            b = Backend(w)
            if b not in self.targets:
                self.err(a.loc, f"backend '{w}' has no 'target {w} {{ ... }}' block in this spec",
                         a.width)
            elif b in out:
                self.err(a.loc, f"backend '{w}' listed twice", a.width)
            else:
                out.append(b)
        if not atoms:
            self.err(self.name_loc, "missing required field 'backends' (e.g. "
                     "'backends pallas_tpu cuda')", len(self.name))
        return tuple(sorted(out, key=lambda b: b.value))

    # -- cross-field semantics ----------------------------------------------

    def semantics(self, k: ir.Kernel) -> None:
        err = self.err
        lhs, rhs = k.lhs, k.rhs
        if k.op is Op.QUANTIZE:
            if k.out_scale.mode is not ScaleMode.TOKEN_GROUP:
                err(self.field_loc("out"), "op 'quantize' needs 'out_scale per_token_group k=G "
                    "<f32|e8m0>' for the scales it produces")
            if k.out_scale.enabled and k.out_scale.dtype is DType.BF16:
                err(k.out_scale.loc, "quantize scales are f32 or e8m0")
            for f in ("lhs_scale", "rhs_scale", "bias", "epilogue", "tile_rule"):
                if f in self.fields or f in self.repeated:
                    err(self.field_loc(f), f"op 'quantize' does not take '{f}'")
            return
        if "out_scale" in self.fields:
            err(self.field_loc("out_scale"), "'out_scale' is for op 'quantize' only")
        assert rhs is not None
        # Mixed operand types: A may be wider than B (weight-only quantization)
        # but integer x float and fp8 x int8 have no MMA.
        if lhs.dtype.is_quantized and rhs.dtype.is_quantized:
            both_int = not lhs.dtype.is_float and not rhs.dtype.is_float
            both_fp = lhs.dtype.is_float and rhs.dtype.is_float
            if not (both_int or both_fp):
                err(rhs.loc, f"lhs '{lhs.dtype.value}' x rhs '{rhs.dtype.value}' mixes integer "
                    "and floating-point 8-bit operands; dequantize one side (e.g. bf16 lhs)")
        if lhs.dtype.is_sub_byte and not rhs.dtype.is_sub_byte:
            err(lhs.loc, "a 4-bit lhs needs a 4-bit rhs; 4-bit weights belong on the rhs")
        if k.op is Op.TGMM:
            for f in ("lhs_scale", "rhs_scale", "bias", "tile_rule"):
                if f in self.fields or f in self.repeated:
                    err(self.field_loc(f), f"op 'tgmm' (the backward pass) does not take '{f}'")
            if k.epilogue.activation is not Activation.NONE:
                err(k.epilogue.loc, "op 'tgmm' takes no activation")
        # Scale modes that only make sense for grouped weights.
        if k.rhs_scale.mode is ScaleMode.KBLOCK and k.op is not Op.GROUPED:
            err(k.rhs_scale.loc, "rhs_scale 'kblock' ([g, k/bk, 1, n], megablox) is for op "
                "'grouped'; use 'block' or 'per_channel' for dense")
        if k.bias.mode is BiasMode.GROUP and k.op is not Op.GROUPED:
            err(k.bias.loc, "bias [g, 1, n] is per group: op 'grouped' only")
        if k.lhs_scale.dtype is DType.E8M0 and k.lhs_scale.mode is ScaleMode.TENSOR:
            pass  # allowed: a power-of-two global scale
        # Tiles must tile the scale blocks applied per K block (FP32 promotion
        # happens at the end of each scale block, so a K tile may not straddle
        # two of them) and the N scale blocks.
        # (GEMV kernels have no block tile: their plan ignores `tile`.)
        tiles = [] if k.algorithm is not Algorithm.TILE else [
            (k.tile, self.field_loc("tile"), "tile")] + [
            (r.tile, r.loc, "tile_rule") for r in k.tile_rules]
        for tile, loc, what in tiles:
            for scale, side in ((k.lhs_scale, "lhs_scale"), (k.rhs_scale, "rhs_scale")):
                if scale.placement is ir.Placement.MAINLOOP and scale.block_k:
                    if scale.block_k % tile.k:
                        err(loc, f"{what} k={tile.k} cannot tile the {side} blocks of "
                            f"k={scale.block_k}: a K tile must divide the scale block so "
                            "each partial product is promoted with one scale")
                if scale.mode is ScaleMode.BLOCK and scale.block_n % tile.n and \
                        tile.n % scale.block_n:
                    err(loc, f"{what} n={tile.n} cannot tile the {side} blocks of "
                        f"n={scale.block_n}: one must divide the other")
            if k.epilogue.activation is Activation.SILU_MUL and tile.n % 2:
                err(loc, f"{what} n={tile.n} must be even for silu_mul")
        if k.epilogue.activation is Activation.SILU_MUL and k.static_n is not None and \
                k.static_n % 2:
            err(self.field_loc("dims"), f"silu_mul pairs column j with j + n/2, so n must be "
                f"even; dims n={k.static_n} is odd")
        if k.static_k is not None:
            for scale, side in ((k.lhs_scale, "lhs_scale"), (k.rhs_scale, "rhs_scale")):
                if scale.block_k and k.static_k % scale.block_k and \
                        scale.mode is ScaleMode.BLOCK:
                    pass  # a partial last scale block is allowed (ceil in the shape)
        for dt_op, name in ((lhs, "lhs"), (rhs, "rhs")):
            if dt_op.packed:
                packed_dim = "k" if (name == "lhs" or rhs.layout is Layout.NK) else "n"
                static = k.static_k if packed_dim == "k" else k.static_n
                if static is not None and static % 2:
                    err(dt_op.loc, f"{name} is packed two per byte along {packed_dim}, so "
                        f"{packed_dim} must be even; dims {packed_dim}={static}")
        # Algorithms.
        if k.algorithm is not Algorithm.TILE and k.op is not Op.DENSE:
            err(self.field_loc("algorithm"), f"algorithm '{k.algorithm.value}' is for op 'dense'")
        if k.algorithm is Algorithm.GEMV_BATCHED and k.max_m is None:
            err(self.field_loc("algorithm"), "algorithm 'gemv_batched' needs 'max_m' "
                "(the largest M it serves, e.g. max_m 8)")
        if k.max_m is not None and k.algorithm is not Algorithm.GEMV_BATCHED:
            err(self.field_loc("max_m"), "'max_m' applies to algorithm 'gemv_batched' only")
        # Arch features.
        cuda = self.targets.get(Backend.CUDA)
        if cuda is not None and Backend.CUDA in k.backends and lhs.dtype.is_fp8 and \
                rhs.dtype.is_fp8 and k.algorithm is Algorithm.TILE:
            for arch in cuda.cuda_archs:
                if ir.arch_number(arch) < 89:
                    err(self.field_loc("backends"), f"FP8 x FP8 tensor-core MMA needs sm_89 or "
                        f"newer, but target cuda declares '{arch}'; drop the arch or use "
                        "a bf16 lhs (W8A16)")
        # tgmm's output block is k x n; its backend checks its own warp tile.
        if k.warp_tile is not None and k.op is not Op.TGMM:
            if k.tile.m % k.warp_tile.m or k.tile.n % k.warp_tile.n:
                err(self.field_loc("warp_tile"), f"warp_tile {k.warp_tile.m}x{k.warp_tile.n} "
                    f"must divide the block tile {k.tile.m}x{k.tile.n}")
            elif k.threads is not None and \
                    (k.tile.m // k.warp_tile.m) * (k.tile.n // k.warp_tile.n) * 32 != k.threads:
                err(self.field_loc("threads"), f"threads {k.threads} disagrees with the warp "
                    f"layout: {k.tile.m // k.warp_tile.m} x {k.tile.n // k.warp_tile.n} warps "
                    f"of 32 threads")


def _dispatch(c: _Collector, block: Block, kernels: dict[str, ir.Kernel]) -> ir.Dispatch | None:
    name = block.name or ""
    rules: list[ir.DispatchRule] = []
    default_seen = False
    for f in block.fields:
        if f.name not in ("when", "else"):
            c.err(f.loc, f"dispatch '{name}': unknown field '{f.name}'"
                  f"{suggest(f.name, ('when', 'else'))}; expected 'when' or 'else'", len(f.name))
            continue
        if f.swept:
            c.err(f.loc, f"dispatch '{name}': '{f.name}' cannot be swept with '|'")
            continue
        atoms = f.alts[0].atoms
        if default_seen:
            c.err(f.loc, f"dispatch '{name}': no arm may follow 'else'")
            continue
        if f.name == "when":
            if len(atoms) != 3 or atoms[0].kind != "cond" or atoms[1].kind != "arrow" or \
                    atoms[2].kind != "word":
                c.err(f.loc, f"dispatch '{name}': write 'when m <= 8 -> KERNEL'")
                continue
            if atoms[0].key != "m":
                c.err(atoms[0].loc, f"dispatch '{name}': arms test M only, not "
                      f"'{atoms[0].key}'", atoms[0].width)
                continue
            if not 0 <= int(atoms[0].value) <= DIM_MAX:  # type: ignore[call-overload]
                c.err(atoms[0].loc, f"dispatch '{name}': an arm compares m with a value in "
                      f"[0, {DIM_MAX}], not {atoms[0].value}", atoms[0].width)
                continue
            cond = Cond("m", Cmp(atoms[0].cmp), int(atoms[0].value))  # type: ignore[arg-type]
            target = atoms[2]
        else:
            if len(atoms) != 1 or atoms[0].kind != "word":
                c.err(f.loc, f"dispatch '{name}': write 'else KERNEL'")
                continue
            cond, target = None, atoms[0]
            default_seen = True
        kname = str(target.value)
        if kname not in kernels:
            c.err(target.loc, f"dispatch '{name}': no kernel named '{kname}'"
                  f"{suggest(kname, kernels)}", target.width)
            continue
        rules.append(ir.DispatchRule(cond, kname, f.loc))
    if not default_seen:
        c.err(block.name_loc, f"dispatch '{name}' needs a final 'else KERNEL' arm", len(name))
        return None
    if not rules:
        return None
    # All arms must be interchangeable: same op, operands, output and epilogue.
    ks = [kernels[r.kernel] for r in rules]
    first = ks[0]
    for r, kk in zip(rules[1:], ks[1:]):
        if kk.op is not Op.DENSE or first.op is not Op.DENSE:
            c.err(r.loc, f"dispatch '{name}': arms must be dense kernels")
            break
        same = (kk.lhs.dtype, kk.rhs.dtype if kk.rhs else None, kk.rhs.layout if kk.rhs else None,
                kk.out, kk.lhs_scale, kk.rhs_scale, kk.bias, kk.epilogue.activation,
                kk.epilogue.alpha, kk.backends)
        ref = (first.lhs.dtype, first.rhs.dtype if first.rhs else None,
               first.rhs.layout if first.rhs else None, first.out, first.lhs_scale,
               first.rhs_scale, first.bias, first.epilogue.activation, first.epilogue.alpha,
               first.backends)
        if same != ref:
            c.err(r.loc, f"dispatch '{name}': kernel '{r.kernel}' does not compute the same "
                  f"function as '{first.name}' (operands, scales, bias, epilogue, output and "
                  "backends must match)")
    for r in rules:
        kk = kernels[r.kernel]
        if kk.algorithm is Algorithm.GEMV and (r.cond is None or not _cond_within(r.cond, 1, 1)):
            c.err(r.loc, f"dispatch '{name}': '{r.kernel}' is a GEMV (M == 1) but this arm "
                  "can select it for other M")
        if kk.algorithm is Algorithm.GEMV_BATCHED and kk.max_m is not None and (
                r.cond is None or not _cond_within(r.cond, 1, kk.max_m)):
            c.err(r.loc, f"dispatch '{name}': '{r.kernel}' serves M <= {kk.max_m} but this arm "
                  "can select it for larger M")
    if len(rules) != len(block.fields):
        return None
    return ir.Dispatch(name, tuple(rules), block.name_loc)


def _cond_within(cond: Cond, lo: int, hi: int) -> bool:
    """Whether every M >= 1 that satisfies `cond` lies in [lo, hi]."""
    match cond.cmp:
        case Cmp.EQ:
            return lo <= cond.value <= hi
        case Cmp.LE:
            return cond.value <= hi
        case Cmp.LT:
            return cond.value - 1 <= hi
        case _:
            return False


def _target(c: _Collector, block: Block) -> ir.Target | None:
    name = block.name or ""
    backends = [b.value for b in Backend]
    if name not in backends:
        c.err(block.name_loc, f"unknown target '{name}'{suggest(name, backends)}; "
              f"expected {one_of(backends)}", max(len(name), 1))
        return None
    backend = Backend(name)
    archs: list[str] = []
    tpu = "v5e"
    allowed = TARGET_FIELDS[backend]
    for f in block.fields:
        if f.name not in allowed:
            c.err(f.loc, f"target {name}: unknown field '{f.name}'{suggest(f.name, allowed)}; "
                  f"expected {one_of(allowed)}", len(f.name))
            continue
        if f.swept:
            c.err(f.loc, f"target {name}: '{f.name}' cannot be swept with '|'")
            continue
        for a in f.alts[0].atoms:
            choices = ir.CUDA_ARCHS if f.name == "archs" else ir.TPU_GENERATIONS
            if a.kind != "word" or a.value not in choices:
                hint = suggest(str(a.value), choices) if a.kind == "word" else ""
                c.err(a.loc, f"target {name}: unknown {f.name[:-1] if f.name == 'archs' else 'tpu'} "
                      f"{a.describe()}{hint} (expected {one_of(choices)})", a.width)
            elif f.name == "archs":
                if a.value in archs:
                    c.err(a.loc, f"target {name}: arch '{a.value}' listed twice", a.width)
                archs.append(str(a.value))
            else:
                tpu = str(a.value)
        if f.name == "tpu" and len(f.alts[0].atoms) != 1:
            c.err(f.loc, f"target {name}: give one TPU generation")
    if backend is Backend.CUDA and not archs and not any(f.name == "archs" for f in block.fields):
        c.err(block.name_loc, "target cuda needs 'archs' (e.g. 'archs sm_80 sm_90a')", len(name))
    return ir.Target(backend, tuple(archs), tpu, block.name_loc)


def _expand(c: _Collector, block: Block, defaults: tuple[Field, ...]) -> tuple[
        list[_Variant], dict[str, list[Field]]]:
    """Check field names and duplicates; expand sweeps into variants."""
    own: dict[str, Field] = {}
    repeated: dict[str, list[Field]] = {}
    for f in block.fields:
        if f.name not in KERNEL_FIELDS:
            c.err(f.loc, f"kernel '{block.name}': unknown field '{f.name}'"
                  f"{suggest(f.name, KERNEL_FIELDS)}", len(f.name))
            continue
        if f.name in REPEATABLE:
            if f.swept:
                c.err(f.loc, f"'{f.name}' cannot be swept with '|'; write one line per rule")
                continue
            repeated.setdefault(f.name, []).append(f)
            continue
        if f.name in own:
            c.err(f.loc, f"kernel '{block.name}': field '{f.name}' given twice (first at line "
                  f"{own[f.name].loc.line}); sweep alternatives with '|'", len(f.name))
            continue
        if f.swept and f.name not in SWEEPABLE:
            c.err(f.loc, f"field '{f.name}' cannot be swept; sweepable fields: "
                  f"{', '.join(sorted(SWEEPABLE))}", len(f.name))
            f = Field(f.name, f.alts[:1], f.loc)  # go on with the first value
        own[f.name] = f
    merged = dict(own)
    for f in defaults:
        if f.name in REPEATABLE:
            if f.name not in repeated:
                repeated.setdefault(f.name, []).append(f)
        elif f.name not in merged:
            merged[f.name] = f
    ordered = [merged[name] for name in KERNEL_FIELDS if name in merged]
    swept = [f for f in ordered if f.swept]
    count = math.prod(len(f.alts) for f in swept)
    if count > MAX_VARIANTS:
        c.err(block.name_loc, f"kernel '{block.name}': its sweeps make {count} variants; at most "
              f"{MAX_VARIANTS} per kernel block (split it into several blocks)", len(block.name))
        return [], repeated
    tokens = {f.name: _alt_tokens(f) for f in swept}
    variants: list[_Variant] = []
    for combo in itertools.product(*[range(len(f.alts)) for f in swept]):
        chosen = {f.name: (f, f.alts[0]) for f in ordered}
        suffix = []
        for f, i in zip(swept, combo):
            chosen[f.name] = (f, f.alts[i])
            suffix.append(f"{f.name}_{tokens[f.name][i]}")
        variants.append(_Variant(chosen, "_".join(suffix)))
    return variants, repeated


def validate(ast: SpecAst, *, stem: str | None = None,
             diagnose: Callable[[ir.Kernel, ir.Spec], list[Diagnostic]] | None = None) -> ir.Spec:
    """Check a parsed spec and build its IR; raise SpecError with all problems.

    `diagnose(kernel, spec)` is each backend's own check (see
    `gemmgen.backends.diagnose`); it runs only when the spec is otherwise valid.
    """
    c = _Collector()
    targets: dict[Backend, ir.Target] = {}
    defaults: tuple[Field, ...] = ()
    kernel_blocks: list[Block] = []
    dispatch_blocks: list[Block] = []
    names: dict[str, tuple[Loc, str]] = {}

    def claim(name: str, loc: Loc, kind: str) -> None:
        if name in names:
            c.err(loc, f"duplicate name '{name}' (first defined at {names[name][0]})", len(name))
        else:
            names[name] = (loc, kind)

    for block in ast.blocks:
        if block.kind == "defaults":
            if block.name is not None:
                c.err(block.name_loc, "a defaults block has no name")
            if defaults:
                c.err(block.loc, "only one defaults block per spec")
            for f in block.fields:
                if f.name not in KERNEL_FIELDS:
                    c.err(f.loc, f"defaults: unknown field '{f.name}'"
                          f"{suggest(f.name, KERNEL_FIELDS)}", len(f.name))
            defaults = tuple(f for f in block.fields if f.name in KERNEL_FIELDS)
            continue
        if block.name is None:
            c.err(block.loc, f"a {block.kind} block needs a name: '{block.kind} NAME {{'",
                  len(block.kind))
            continue
        if block.kind == "target":
            if (t := _target(c, block)) is not None:
                if t.backend in targets:
                    c.err(block.name_loc, f"target '{block.name}' declared twice")
                targets[t.backend] = t
            continue
        if problem := name_problem(block.name):
            c.err(block.name_loc, f"{block.kind} name {problem}", len(block.name))
            continue
        (kernel_blocks if block.kind == "kernel" else dispatch_blocks).append(block)

    kernels: dict[str, ir.Kernel] = {}
    block_names: dict[str, Loc] = {}
    for block in kernel_blocks:
        assert block.name is not None
        if block.name in block_names:
            c.err(block.name_loc, f"kernel '{block.name}' is defined twice (first at "
                  f"{block_names[block.name]})", len(block.name))
            continue
        block_names[block.name] = block.name_loc
        variants, repeated = _expand(c, block, defaults)
        for v in variants:
            name = f"{block.name}_{v.suffix}" if v.suffix else block.name
            if v.suffix and (problem := name_problem(name)):
                c.err(block.name_loc, f"variant name {problem}", len(block.name))
                continue
            claim(name, block.name_loc, "kernel")
            k = _KernelReader(c, name, block.name_loc, v.fields, repeated, targets,
                              ast.path).read()
            if k is not None:
                if v.suffix:
                    k = replace(k, variant_of=block.name)
                kernels.setdefault(name, k)
    dispatches = []
    for block in dispatch_blocks:
        assert block.name is not None
        claim(block.name, block.name_loc, "dispatch")
        if (d := _dispatch(c, block, kernels)) is not None:
            dispatches.append(d)
    c.diags.extend(collisions((name, loc, kind) for name, (loc, kind) in names.items()))
    if not kernel_blocks and not c.diags:
        c.err(Loc(ast.path, 1, 1), "the spec declares no kernel")
    if c.diags:
        raise SpecError(c.diags)

    spec = ir.Spec(
        path=ast.path,
        stem=stem or PurePosixPath(ast.path).stem,
        targets=tuple(sorted(targets.values(), key=lambda t: t.backend.value)),
        kernels=tuple(kernels.values()),
        dispatches=tuple(dispatches),
    )
    if diagnose is not None:
        for k in spec.kernels:
            c.diags.extend(diagnose(k, spec))
        if c.diags:
            raise SpecError(c.diags)
    return spec
