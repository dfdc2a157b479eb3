"""What the readers and the semantic rules share about one kernel variant:
its fields as written (`fields`, `repeated`, a backend's own tile lines),
the spec's targets, positions (`field_loc`) and errors (`err`, each a
positioned diagnostic), and the readers of single atoms into values (a
dtype, a word, an integer in range, `key=value` pairs, a condition, a
tile). `FieldReader` is the base of `fields.KernelReader` and what every
rule of `rules` receives."""

from __future__ import annotations

from collections.abc import Iterable

from gemmgen import ir
from gemmgen.diagnostics import one_of, suggest
from gemmgen.ir import Backend, Cmp, Cond, DType, Loc, Tile
from gemmgen.parse import Alt, Atom, Field
from gemmgen.validate.common import DIM_MAX, DTYPE_WORDS, Collector
from gemmgen.validate.sweeps import OwnTiles


class FieldReader:
    """One kernel variant's fields and the atom readers, collecting errors."""

    def __init__(self, c: Collector, name: str, name_loc: Loc,
                 fields: dict[str, tuple[Field, Alt]], repeated: dict[str, list[Field]],
                 targets: dict[Backend, ir.Target], spec_path: str,
                 own_tiles: dict[str, OwnTiles] | None = None):
        self.c = c
        self.own_tiles = own_tiles or {}
        self.name = name
        self.name_loc = name_loc
        self.fields = fields
        self.repeated = repeated
        self.targets = targets
        self.spec_path = spec_path
        self.masked = False  # lhs [g, m, k]: set by KernelReader.operand("lhs")
        self.op: ir.Op | None = None  # set by KernelReader once read
        # The rule lines of the applied `tuned` blocks for this kernel
        # (validate.tuned.by_kernel): (block, line) in spec order.
        self.tuned: list = []

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

    def int_field(self, field: str, lo: int, hi: int, default: int | None) -> int | None:
        a = self.only_atom(field)
        if a is None:
            return default
        return self.positive_int(a, field, lo, hi)

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

    def rule_cond(self, a: Atom, backend: str) -> Cond | None:
        """One condition of a tile rule: on m, n, k; on g or m/g on a grouped
        kernel; `tpu=GEN` in a rule only pallas_tpu uses."""
        if a.kind == "kv" and a.key == ir.TPU_COND:
            return self.tpu_cond(a, backend)
        grouped = self.op in (ir.Op.GROUPED, ir.Op.TGMM)
        dims = ir.COND_DIMS + ir.GROUP_COND_DIMS
        if a.kind == "cond" and a.key in ir.GROUP_COND_DIMS and self.op is not None \
                and not grouped:
            self.err(a.loc, f"a condition on '{a.key}' (the groups) is for grouped and tgmm "
                     f"kernels; this kernel is op '{self.op.value}'", a.width)
            return None
        if a.kind != "cond" or a.key not in dims:
            self.err(a.loc, f"expected a condition on {one_of(dims)} like 'm<=64' or "
                     f"'m/g<=256', or 'tpu=GEN', not {a.describe()}", a.width)
            return None
        return self.cond(a, dims)

    def tpu_cond(self, a: Atom, backend: str) -> Cond | None:
        """`tpu=v6e`: the generation the module runs on, one the pallas_tpu
        target declares, in a rule no CUDA LUT uses."""
        value = a.value
        assert isinstance(value, Atom)
        if backend == Backend.CUDA.value or (not backend and self.unqualified_cuda()):
            why = ("this is cuda's own LUT" if backend else
                   "cuda uses this kernel's unqualified tile rules: write the rule as "
                   "'tile_rule pallas_tpu ...' in a pallas_tpu LUT of its own")
            self.err(a.loc, f"'tpu=' is a condition of pallas_tpu tile rules; {why}", a.width)
            return None
        target = self.targets.get(Backend.PALLAS_TPU)
        declared = target.tpus if target is not None else ()
        if value.kind != "word" or value.value not in declared:
            word = str(value.value)
            hint = suggest(word, declared) if value.kind == "word" else ""
            have = (f"the pallas_tpu target declares {', '.join(declared)}" if declared
                    else "the spec has no pallas_tpu target")
            self.err(value.loc, f"'tpu={word}' is not a generation this spec targets{hint} "
                     f"({have})", value.width)
            return None
        return Cond(ir.TPU_COND, Cmp.EQ, str(value.value))

    def unqualified_cuda(self) -> bool:
        """Whether cuda is listed and uses the unqualified tile LUT."""
        listed = [str(a.value) for a in self.atoms("backends") if a.kind == "word"]
        own = self.own_tiles.get(Backend.CUDA.value)
        return Backend.CUDA.value in listed and (own is None or own.tile is None)

    def tile(self, field: str, keys: tuple[str, ...],
             atoms: tuple[Atom, ...] | None = None, optional: tuple[str, ...] = ()) -> Tile | None:
        """The `key=value` tile of `field` (or of `atoms`, named `field`);
        `optional` keys may be left out (`cluster_n`: 1)."""
        got = self.kvs(self.atoms(field) if atoms is None else atoms, keys + optional, field,
                       required=keys)
        vals = {}
        for key, a in got.items():
            v = self.positive_int(a, f"{field} {key}", 1, 4096)
            if v is None:
                return None
            vals[key] = v
        if not all(key in vals for key in keys):
            return None
        cluster = got.get("cluster_n")
        return Tile(vals["m"], vals["n"], vals.get("k", 0), vals.get("cluster_n", 1),
                    cluster.loc if cluster is not None else ir.NO_LOC)
