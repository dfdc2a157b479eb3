"""Field readers: one kernel variant's fields into IR values, each problem
a positioned diagnostic. `KernelReader.read` builds the `ir.Kernel` and
runs the semantic rules (`gemmgen.validate.rules`) on it; the atom readers
and positions it shares with the rules are `reader.FieldReader`'s."""

from __future__ import annotations

from gemmgen import ir
from gemmgen.diagnostics import one_of
from gemmgen.ir import (
    Algorithm,
    Backend,
    Bias,
    BiasMode,
    DType,
    Epilogue,
    Layout,
    Mma,
    Op,
    Operand,
    Promotion,
    Scale,
    ScaleMode,
    Tile,
    TileRule,
)
from gemmgen.parse import Atom, Field
from gemmgen.validate import rules as semantic_rules
from gemmgen.validate.common import (
    LHS_SCALE_MODES,
    RHS_SCALE_MODES,
)
from gemmgen.validate.epilogue import read_epilogue
from gemmgen.validate.reader import FieldReader
from gemmgen.validate.tuned import with_tuned

# The lhs shape of the masked grouped layout: g groups of m rows (the
# capacity), of which masked_m[i] are valid (docs/spec.md).
MASKED_LHS = ("g", "m", "k")


class KernelReader(FieldReader):
    """Reads one kernel variant's fields into IR values, collecting errors."""

    # -- fields -----------------------------------------------------------

    def read(self) -> ir.Kernel | None:
        """The kernel, or None when its op or operands do not read. A field
        that does not read leaves its default in the kernel and
        `fields_read` False: the semantic rules, which relate fields, do not
        run then (a default standing for a bad field would make them report
        nonsense), and the backends' checks of it are filtered
        (`validate.kernel_checks`)."""
        n_errors = len(self.c.diags)
        self.fields_read = False
        for req in ("op", "lhs", "out"):
            if req not in self.fields:
                self.err(self.name_loc, f"missing required field '{req}'", len(self.name))
        op_atom = self.only_atom("op")
        op = None
        if op_atom is not None:
            w = self.word(op_atom, [o.value for o in Op], "op")
            op = Op(w) if w else None
        if op is None:
            # No op to read the operands against: still report every other
            # problem of the kernel (a dtype no op accepts, the fields no op
            # decides), so that one run shows them all.
            self.operand_dtypes_without_op()
            self.other_fields()
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
        self.op = op
        f = self.other_fields()
        if self.tuned and f["tile"] is not None:
            f["rules"], f["backend_tiles"] = with_tuned(self, op, f)
        tile = f["tile"] or Tile(128, 128, 128)
        if lhs is None or out is None or acc is None or (op is not Op.QUANTIZE and rhs is None):
            return None
        kernel = ir.Kernel(
            name=self.name, op=op, lhs=lhs, rhs=rhs, out=out, acc=acc,
            lhs_scale=f["lhs_scale"] or ir.NO_SCALE, rhs_scale=f["rhs_scale"] or ir.NO_SCALE,
            out_scale=f["out_scale"] or ir.NO_SCALE, bias=f["bias"] or Bias(),
            epilogue=f["epilogue"] or Epilogue(), tile=tile, tile_rules=f["rules"],
            warp_tile=f["warp"], stages=f["stages"] or 2, threads=f["threads"],
            algorithm=f["algorithm"], max_m=f["max_m"], static_n=f["static_n"],
            static_k=f["static_k"], backends=f["backends"], backend_tiles=f["backend_tiles"],
            mma=f["mma"], promotion=f["promotion"],
            masked=self.masked and op is Op.GROUPED,
            tpus=t.tpus if (t := self.targets.get(Backend.PALLAS_TPU)) else (),
            loc=self.name_loc,
            # a swept field at this variant's alternative
            field_locs=tuple(sorted((name, alt.loc if f.swept else f.loc)
                                    for name, (f, alt) in self.fields.items())),
        )
        self.fields_read = len(self.c.diags) == n_errors
        if self.fields_read:
            semantic_rules.check(self, kernel)
        return kernel

    def operand_dtypes_without_op(self) -> None:
        """lhs, rhs and out dtypes against what some op accepts (the kernel's
        op is unknown or missing)."""
        for field, allowed in (("lhs", ir.OPERAND_DTYPES), ("rhs", ir.OPERAND_DTYPES),
                               ("out", ir.OUTPUT_DTYPES + ir.QUANTIZED_OUTPUT_DTYPES),
                               ("acc", (DType.F32, DType.INT32))):
            atoms = self.atoms(field)
            if atoms:
                self.dtype(atoms[0], allowed, f"{field} dtype")

    def other_fields(self) -> dict:
        """Every field whose reading does not depend on op or the operands
        (errors collected)."""
        lhs_scale = self.scale("lhs_scale", LHS_SCALE_MODES)
        rhs_scale = self.scale("rhs_scale", RHS_SCALE_MODES)
        out_scale = self.scale("out_scale", (ScaleMode.TOKEN_GROUP,)) \
            if "out_scale" in self.fields else ir.NO_SCALE
        bias = self.bias()
        epilogue = self.epilogue()
        tile = (self.tile("tile", ("m", "n", "k"), optional=("cluster_n",)) if "tile" in self.fields
                else Tile(128, 128, 128))
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
        backend_tiles = self.backend_tiles()
        mma = Mma.AUTO
        if a := self.only_atom("mma"):
            w = self.word(a, [x.value for x in Mma], "mma")
            mma = Mma(w) if w else Mma.AUTO
        promotion = Promotion.AUTO
        if a := self.only_atom("promotion"):
            w = self.word(a, [x.value for x in Promotion], "promotion")
            promotion = Promotion(w) if w else Promotion.AUTO
        return dict(lhs_scale=lhs_scale, rhs_scale=rhs_scale, out_scale=out_scale,
                    bias=bias, epilogue=epilogue, tile=tile, rules=rules, warp=warp,
                    stages=stages, threads=threads, algorithm=algorithm, max_m=max_m,
                    static_n=static_n, static_k=static_k, backends=backends,
                    backend_tiles=backend_tiles, mma=mma, promotion=promotion)

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
            if op is Op.GROUPED:  # [g, m, k]: the masked layout (a capacity per group)
                expected[MASKED_LHS] = Layout.KN
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
                hint = ""
                if field == "lhs" and dims == MASKED_LHS:
                    hint = " ([g, m, k] is the masked layout of op 'grouped')"
                elif field == "lhs" and op is Op.GROUPED and len(dims) == 3:
                    hint = (" (a 3-d lhs is the masked layout [g, m, k]: m rows of capacity "
                            "per group)")
                self.err(shape.loc, f"{field} shape must be "
                         f"{one_of('[' + ', '.join(s) + ']' for s in expected)} for op "
                         f"'{op.value}', not {shape.describe()}{hint}", shape.width)
                return None
            layout = expected[dims]
            if field == "lhs":
                self.masked = dims == MASKED_LHS
        return Operand(dt, packed, layout, floc)

    def out_dtype(self, op: Op) -> DType | None:
        if op is not Op.QUANTIZE:
            a = self.only_atom("out")
            return None if a is None else self.dtype(a, ir.OUTPUT_DTYPES, f"out (op '{op.value}')")
        # quantize: e4m3, e5m2, or fp4 stored packed two per byte ('out fp4 packed').
        atoms = self.atoms("out")
        if not atoms:
            return None
        dt = self.dtype(atoms[0], ir.QUANTIZED_OUTPUT_DTYPES, f"out (op '{op.value}')")
        packed = False
        for a in atoms[1:]:
            if a.kind == "word" and a.value == "packed" and not packed:
                packed = True
            else:
                self.err(a.loc, f"unexpected {a.describe()} after the out dtype; 'out' takes a "
                         "dtype, and 'packed' after a 4-bit one", a.width)
        if dt is None:
            return None
        if dt.is_sub_byte and not packed:
            self.err(atoms[0].loc, f"out dtype '{dt.value}' is {dt.bits}-bit and must be stored "
                     f"packed two per byte: write 'out {dt.value} packed'", atoms[0].width)
            return None
        if packed and not dt.is_sub_byte:
            self.err(atoms[0].loc, f"'packed' applies to 4-bit dtypes only, not '{dt.value}'",
                     atoms[0].width)
            return None
        return dt

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
        rounding = ir.ScaleRounding.UP
        if (ra := blocks.pop("round", None)) is not None:
            assert isinstance(ra.value, Atom)
            if field != "out_scale":
                self.err(ra.loc, f"'round=' chooses how op 'quantize' rounds the e8m0 scales it "
                         f"produces (out_scale); {field} is an input", ra.width)
            elif dtype is not DType.E8M0:
                self.err(ra.loc, f"'round=' applies to e8m0 scales (a power of two rounded up or "
                         f"down); {dtype.value} scales are rounded to nearest", ra.width)
            else:
                got_round = self.word(ra.value, [v.value for v in ir.ScaleRounding],
                                      f"{field} round")
                if got_round is not None:
                    rounding = ir.ScaleRounding(got_round)
        global_scale = False
        if (ga := blocks.pop("global", None)) is not None:
            assert isinstance(ga.value, Atom)
            if self.word(ga.value, ["f32"], f"{field} global") is not None:
                global_scale = True
            if dtype is not DType.UE4M3:
                self.err(ga.loc, f"'global=f32' is NVFP4's per-tensor scale over its ue4m3 block "
                         f"scales ('per_token_group k=16 ue4m3 global=f32'); {field} holds "
                         f"{dtype.value} scales", ga.width)
                global_scale = False
        zero, zero_loc = None, ir.NO_LOC
        if (za := blocks.pop("zero", None)) is not None:
            assert isinstance(za.value, Atom)
            zero_loc = za.loc
            if field != "rhs_scale":
                self.err(za.loc, f"'zero=' gives asymmetric weights their zero points; it goes "
                         f"on rhs_scale, not {field}", za.width)
            else:
                zero = self.dtype(za.value, ir.ZERO_DTYPES, f"{field} zero")
        layout = ir.ScaleLayout.ROWS
        if (la := blocks.pop("layout", None)) is not None:
            assert isinstance(la.value, Atom)
            got_layout = self.word(la.value, [v.value for v in ir.ScaleLayout], f"{field} layout")
            if got_layout is not None:
                layout = ir.ScaleLayout(got_layout)
            per_row = mode is ScaleMode.TOKEN_GROUP or (
                mode is ScaleMode.BLOCK and "n" in blocks and blocks["n"].value.value == 1)
            if layout is not ir.ScaleLayout.ROWS and not per_row:
                self.err(la.loc, f"{field} layout={layout.value} is for scales per K block of one "
                         "row: 'per_token_group k=BK' (lhs) or 'block n=1 k=BK' (rhs)", la.width)
                layout = ir.ScaleLayout.ROWS
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
        if dtype is DType.UE4M3 and not (mode is ScaleMode.TOKEN_GROUP or (
                mode is ScaleMode.BLOCK and sizes.get("n") == 1)):
            self.err(floc, f"{field}: ue4m3 (NVFP4's block scale) scales K blocks of one row: "
                     "'per_token_group k=16 ue4m3' (lhs) or 'block n=1 k=16 ue4m3' (rhs), not "
                     f"'{mode.value}'")
            return None
        return Scale(mode, dtype, block_n=sizes.get("n", 1), block_k=sizes.get("k", 0),
                     layout=layout, rounding=rounding, global_scale=global_scale, zero=zero,
                     loc=floc, zero_loc=zero_loc)

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
        return read_epilogue(self)

    def tile_rules(self, fields: list[Field] | None = None,
                   backend: str = "", what: str = "") -> tuple[TileRule, ...]:
        """The unqualified `tile_rule` lines, or `fields`: the lines of
        `backend`'s own LUT (`tile_rule BACKEND ...`, the word skipped; a
        `tuned` block's `tile_rule KERNEL ...` lines likewise, `what`
        naming them in messages)."""
        rules = []
        what = what or (f"tile_rule {backend}" if backend else "tile_rule")
        for f in self.repeated.get("tile_rule", []) if fields is None else fields:
            atoms = f.alts[0].atoms[1 if backend else 0:]
            arrow = next((i for i, a in enumerate(atoms) if a.kind == "arrow"), None)
            if arrow is None or arrow == 0:
                self.err(f.loc, f"{what} is 'CONDITIONS -> m=.. n=.. k=..', "
                         f"e.g. '{what} m<=64 -> m=64 n=128 k=128'")
                continue
            conds = [self.rule_cond(a, backend) for a in atoms[:arrow]]
            got = self.kvs(atoms[arrow + 1:], ("m", "n", "k", "cluster_n"), f"{what} tile",
                           required=("m", "n", "k"))
            vals = {k: self.positive_int(a, f"{what} {k}", 1, 4096) for k, a in got.items()}
            if None in conds or None in vals.values() or len(vals) != 3 + ("cluster_n" in vals):
                continue
            cluster = got.get("cluster_n")
            tile = Tile(vals["m"], vals["n"], vals["k"], vals.get("cluster_n", 1),  # type: ignore[arg-type]
                        cluster.loc if cluster is not None else ir.NO_LOC)
            rules.append(TileRule(tuple(c for c in conds if c), tile, f.loc))  # type: ignore[arg-type]
        return tuple(rules)

    def backend_tiles(self) -> tuple[ir.BackendTiles, ...]:
        """The backends' own tile LUTs (`tile pallas_tpu ...`), in backend
        order. A backend's LUT is its own lines only, so it needs its own
        default tile; a line for a backend the kernel does not list is an
        error (the defaults' lines for such a backend are not used)."""
        listed = [str(a.value) for a in self.atoms("backends") if a.kind == "word"]
        out = []
        for word in sorted(self.own_tiles):
            own = self.own_tiles[word]
            if word not in listed:
                if own.own_lines:
                    q = own.own_lines[0].alts[0].atoms[0]
                    have = f"its backends are {', '.join(listed)}" if listed else \
                        "it lists no backends"
                    self.err(q.loc, f"'{own.own_lines[0].name} {word}' is for backend '{word}', "
                             f"which the kernel does not list ({have})", q.width)
                continue
            if own.tile is None:
                first = own.rules[0]
                self.err(first.loc, f"'tile_rule {word}' needs a 'tile {word} m=.. n=.. k=..' "
                         f"line: the default tile of {word}'s own tile LUT", len(first.name))
                continue
            values = own.tile.alts[0].atoms[1:]
            if not values:
                q = own.tile.alts[0].atoms[0]
                self.err(q.loc, f"'tile {word}' needs its tile: 'tile {word} m=.. n=.. k=..'",
                         q.width)
                continue
            tile = self.tile(f"tile {word}", ("m", "n", "k"), values, optional=("cluster_n",))
            rules = self.tile_rules(own.rules, word)
            if tile is not None:
                out.append(ir.BackendTiles(Backend(word), tile, rules, own.tile.loc))
        return tuple(out)

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
