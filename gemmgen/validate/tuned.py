"""`tuned DEVICE { ... }` blocks: tiles measured by `gemmgen tune` on one
device (docs/spec.md, "Tuned tiles").

`read_tuned` reads a block's header and string fields and decides whether
it applies (its device is one the spec targets, its JAX within JAX_RANGE);
`by_kernel` hands each kernel reader the rule lines of the applied blocks
for it (they go first in its LUT for the block's backend, checked like any
tile: `with_tuned`, which the kernel reader calls); `check_kernels` checks, once the
kernels are known, that each rule names a kernel of the spec with the
block's backend; `finish` makes the `ir.Tuned` of each block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gemmgen import ir
from gemmgen.devices import DEVICES, Device, runs_arch
from gemmgen.diagnostics import one_of, suggest
from gemmgen.ir import Backend, Loc
from gemmgen.parse import Block, Field
from gemmgen.validate.common import Collector
from gemmgen.validate.reader import FieldReader

# The string fields of a block, per backend; `tile_rule` lines besides.
TUNED_FIELDS = {
    Backend.PALLAS_TPU: ("device", "jax", "libtpu", "date"),
    Backend.CUDA: ("device", "cuda", "driver", "jax", "date"),
}
# The fields `gemmgen tune` always writes: what was measured, with what.
TUNED_REQUIRED = {Backend.PALLAS_TPU: ("device", "jax", "date"), Backend.CUDA: ("device", "date")}


@dataclass
class TunedBlock:
    """A `tuned` block as read, before the kernels are known."""

    device: str
    backend: Backend
    loc: Loc  # of the device name
    lines: tuple[int, int]
    info: dict[str, str] = field(default_factory=dict)
    rules: list[Field] = field(default_factory=list)  # `tile_rule KERNEL ...`
    why_not: str = ""  # "" when it applies
    # tpu= added to each rule: the device's generation when the pallas_tpu
    # target lists several (one module runs on each of them)
    implicit_tpu: str | None = None

    @property
    def applied(self) -> bool:
        return not self.why_not


def backend_of(device: Device) -> Backend:
    """A GPU (a compute capability) is cuda's; a TPU, pallas_tpu's."""
    return Backend.CUDA if device.sm is not None else Backend.PALLAS_TPU


def read_tuned(c: Collector, block: Block, targets: dict[Backend, ir.Target]) -> TunedBlock | None:
    """The block's device, string fields and rule lines; whether it applies."""
    name = block.name or ""
    device = DEVICES.get(name)
    if device is None:
        c.err(block.name_loc, f"tuned: unknown device '{name}'{suggest(name, DEVICES)} "
              f"(expected {one_of(DEVICES)})", max(len(name), 1))
        return None
    backend = backend_of(device)
    t = TunedBlock(name, backend, block.name_loc, (block.loc.line, block.end_line))
    allowed = TUNED_FIELDS[backend]
    given = {f.name for f in block.fields}
    for f in block.fields:
        if f.name == "tile_rule":
            atoms = f.alts[0].atoms
            if f.swept:
                c.err(f.loc, "tuned: a tile_rule cannot be swept with '|'")
            elif atoms[0].kind != "word":
                c.err(atoms[0].loc, f"tuned {name}: a tile_rule names its kernel first: "
                      f"'tile_rule KERNEL CONDITIONS -> m=.. n=.. k=..', not "
                      f"{atoms[0].describe()}", atoms[0].width)
            else:
                t.rules.append(f)
            continue
        if f.name not in allowed:
            c.err(f.loc, f"tuned {name}: unknown field '{f.name}'"
                  f"{suggest(f.name, allowed + ('tile_rule',))}; expected "
                  f"{one_of(allowed + ('tile_rule',))}", len(f.name))
            continue
        atoms = f.alts[0].atoms
        if f.swept or len(atoms) != 1 or atoms[0].kind != "string":
            shown = atoms[0].describe() if len(atoms) == 1 and not f.swept else "this"
            c.err(f.loc, f"tuned {name}: '{f.name}' takes one quoted string, e.g. "
                  f"'{f.name} \"...\"', not {shown}", len(f.name))
            continue
        if f.name in t.info:
            c.err(f.loc, f"tuned {name}: '{f.name}' given twice", len(f.name))
            continue
        t.info[f.name] = str(atoms[0].value)
    for need in TUNED_REQUIRED[backend]:
        if need not in given:
            c.err(block.name_loc, f"tuned {name}: missing field '{need}' (gemmgen tune writes "
                  f"{', '.join(TUNED_REQUIRED[backend])})", len(name))
    t.why_not = _why_not(t, device, targets)
    target = targets.get(Backend.PALLAS_TPU)
    if backend is Backend.PALLAS_TPU and target is not None and len(target.tpus) > 1:
        t.implicit_tpu = device.tpu
    return t


def _why_not(t: TunedBlock, device: Device, targets: dict[Backend, ir.Target]) -> str:
    """Why the block does not apply ("" when it does): another chip than
    the spec targets, or tiles measured under a JAX outside JAX_RANGE."""
    target = targets.get(t.backend)
    if target is None:
        return f"the spec has no {t.backend.value} target"
    if t.backend is Backend.PALLAS_TPU:
        if device.tpu is None or device.tpu not in target.tpus:
            return (f"{device.label} is not a generation the spec targets "
                    f"(tpu {' '.join(target.tpus)})")
    elif runs_arch(device, target.cuda_archs) is None:
        return (f"{device.label} runs none of the spec's archs "
                f"({' '.join(target.cuda_archs)})")
    jax = t.info.get("jax")
    if jax is not None and not ir.jax_in_range(jax):
        return (f"measured under JAX {jax}, outside the generator's JAX range "
                f"{ir.JAX_RANGE}")
    return ""


def claim_devices(c: Collector, blocks: list[TunedBlock]) -> None:
    """At most one block per device."""
    seen: dict[str, Loc] = {}
    for t in blocks:
        if t.device in seen:
            c.err(t.loc, f"tuned {t.device}: a second block for this device (the first is at "
                  f"{seen[t.device]}); gemmgen tune keeps one per device", len(t.device))
        else:
            seen[t.device] = t.loc


def by_kernel(blocks: list[TunedBlock]) -> dict[str, list[tuple[TunedBlock, Field]]]:
    """Each kernel name's rule lines of the applied blocks, in spec order."""
    out: dict[str, list[tuple[TunedBlock, Field]]] = {}
    for t in blocks:
        if t.applied:
            for f in t.rules:
                out.setdefault(str(f.alts[0].atoms[0].value), []).append((t, f))
    return out


def with_tuned(r: FieldReader, op: ir.Op, f: dict) -> tuple[tuple[ir.TileRule, ...],
                                                     tuple[ir.BackendTiles, ...]]:
    """The kernel's unqualified rules and backends' own LUTs with the
    rules of the applied `tuned` blocks for it first in its LUT for
    their backend: in that backend's own LUT; in the unqualified one
    when no other backend uses it; else in a LUT of the backend's own
    made of the unqualified tile and rules (the other backend keeps
    those alone)."""
    rules: tuple[ir.TileRule, ...] = f["rules"]
    own_luts: list[ir.BackendTiles] = list(f["backend_tiles"])
    backends: tuple[ir.Backend, ...] = f["backends"]
    per_backend: dict[ir.Backend, list[ir.TileRule]] = {}
    for block, line in r.tuned:
        name = line.alts[0].atoms[0]
        if op in (ir.Op.QUANTIZE, ir.Op.TGMM) or f["algorithm"] is not ir.Algorithm.TILE:
            what = f"op '{op.value}'" if op in (ir.Op.QUANTIZE, ir.Op.TGMM) else \
                f"algorithm '{f['algorithm'].value}'"
            r.c.err(name.loc, f"tuned {block.device}: kernel '{r.name}' ({what}) has "
                    "no tile LUT", name.width)
            continue
        if block.backend not in backends:
            continue  # reported by tuned.check_kernels, once per line
        read = r.tile_rules([line], block.backend.value,  # type: ignore[attr-defined]
                            f"tuned {block.device} tile_rule")
        for rule in read:
            conds = rule.conds
            if block.implicit_tpu is not None and not rule.on_tpu:
                conds += (ir.Cond(ir.TPU_COND, ir.Cmp.EQ, block.implicit_tpu),)
            per_backend.setdefault(block.backend, []).append(
                ir.TileRule(conds, rule.tile, rule.loc, block.device))
    for backend, tuned in per_backend.items():
        i = next((i for i, t in enumerate(own_luts) if t.backend is backend), None)
        if i is not None:
            own = own_luts[i]
            own_luts[i] = ir.BackendTiles(backend, own.tile, (*tuned, *own.tile_rules),
                                          own.loc)
        elif all(b is backend or any(t.backend is b for t in own_luts) for b in backends):
            rules = (*tuned, *rules)
        else:
            own_luts.append(ir.BackendTiles(backend, f["tile"], (*tuned, *rules),
                                            r.field_loc("tile")))
            own_luts.sort(key=lambda t: t.backend.value)
    return rules, tuple(own_luts)


def check_kernels(c: Collector, blocks: list[TunedBlock], kernels: dict[str, ir.Kernel],
                  names: dict[str, tuple[Loc, str]]) -> None:
    """Every rule names a kernel of the spec (after sweeps) that has the
    block's backend; a kernel whose own errors kept it out of `kernels` is
    not reported again."""
    known = [n for n, (_, kind) in names.items() if kind == "kernel"]
    for t in blocks:
        for f in t.rules:
            a = f.alts[0].atoms[0]
            name = str(a.value)
            if name not in known:
                c.err(a.loc, f"tuned {t.device}: no kernel '{name}' in this spec"
                      f"{suggest(name, known)}", a.width)
                continue
            k = kernels.get(name)
            if k is not None and t.backend not in k.backends:
                have = ", ".join(b.value for b in k.backends) or "none"
                c.err(a.loc, f"tuned {t.device}: kernel '{name}' is not built for "
                      f"{t.backend.value} (its backends: {have}), the backend of the "
                      f"{DEVICES[t.device].label}", a.width)


def finish(blocks: list[TunedBlock], kernels: dict[str, ir.Kernel]) -> tuple[ir.Tuned, ...]:
    """The `ir.Tuned` of each block: its rules as read into the kernels'
    LUTs where it applies (else none)."""
    out = []
    for t in blocks:
        rules: list[tuple[str, ir.TileRule]] = []
        if t.applied:
            for name, k in kernels.items():
                view = k.for_backend(t.backend) if t.backend in k.backends else None
                if view is None:
                    continue
                rules += [(name, r) for r in view.tile_rules if r.tuned == t.device]
            order = {f.loc: i for i, f in enumerate(t.rules)}
            rules.sort(key=lambda nr: order.get(nr[1].loc, 0))
        out.append(ir.Tuned(t.device, t.backend, tuple(t.info.items()), tuple(rules),
                            t.lines, t.applied, t.why_not, t.loc))
    return tuple(out)
