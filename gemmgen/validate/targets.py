"""Target blocks: which backends a spec builds for, with archs / TPU generation."""

from __future__ import annotations

from gemmgen import ir
from gemmgen.diagnostics import one_of, suggest
from gemmgen.ir import Backend
from gemmgen.parse import Block, Field
from gemmgen.validate.common import TARGET_FIELDS, Collector


def read_target(c: Collector, block: Block) -> ir.Target | None:
    name = block.name or ""
    backends = [b.value for b in Backend]
    if name not in backends:
        c.err(block.name_loc, f"unknown target '{name}'{suggest(name, backends)}; "
              f"expected {one_of(backends)}", max(len(name), 1))
        return None
    backend = Backend(name)
    archs: list[str] = []
    tpus: list[str] = []
    launchers = ir.CUDA_REQUIRED_LAUNCHERS
    allowed = TARGET_FIELDS[backend]
    for f in block.fields:
        if f.name not in allowed:
            c.err(f.loc, f"target {name}: unknown field '{f.name}'{suggest(f.name, allowed)}; "
                  f"expected {one_of(allowed)}", len(f.name))
            continue
        if f.swept:
            c.err(f.loc, f"target {name}: '{f.name}' cannot be swept with '|'")
            continue
        if f.name == "launchers":
            launchers = _read_launchers(c, f)
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
            elif a.value in tpus:
                c.err(a.loc, f"target {name}: tpu '{a.value}' listed twice", a.width)
            else:
                # several generations (`tpu v5e v6e`): one module for all of
                # them; `tpu=v6e` in a tile rule picks by the chip it runs on
                tpus.append(str(a.value))
        if f.name == "tpu" and not f.alts[0].atoms:
            c.err(f.loc, f"target {name}: give a TPU generation")
    if backend is Backend.CUDA and not archs and not any(f.name == "archs" for f in block.fields):
        c.err(block.name_loc, "target cuda needs 'archs' (e.g. 'archs sm_80 sm_90a')", len(name))
    tpu = tpus[0] if tpus else "v5e"
    return ir.Target(backend, tuple(archs), tpu, block.name_loc, launchers,
                     tuple(tpus) if len(tpus) > 1 else ())


def _read_launchers(c: Collector, f: Field) -> tuple[str, ...]:
    """`launchers cpp cupy rust`: the launcher families of the cuda target.
    cpp and cupy must be listed (the .cu holds the C++ launcher, and
    `gemmgen verify` runs the Python one); rust is optional."""
    seen: list[str] = []
    for a in f.alts[0].atoms:
        if a.kind != "word" or a.value not in ir.CUDA_LAUNCHERS:
            hint = suggest(str(a.value), ir.CUDA_LAUNCHERS) if a.kind == "word" else ""
            c.err(a.loc, f"target cuda: unknown launcher {a.describe()}{hint} "
                  f"(expected {one_of(ir.CUDA_LAUNCHERS)})", a.width)
        elif a.value in seen:
            c.err(a.loc, f"target cuda: launcher '{a.value}' listed twice", a.width)
        else:
            seen.append(str(a.value))
    for need in ir.CUDA_REQUIRED_LAUNCHERS:
        if need not in seen:
            c.err(f.loc, f"target cuda: launchers must include '{need}' (the C++ and CuPy "
                  "launchers are always emitted; list them with the optional 'rust')",
                  len(f.name))
    return tuple(seen)


