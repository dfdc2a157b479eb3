"""Dispatch blocks: arms that pick a kernel by M at run time."""

from __future__ import annotations

from gemmgen import ir
from gemmgen.diagnostics import suggest
from gemmgen.ir import Algorithm, Cmp, Cond, Op
from gemmgen.parse import Block
from gemmgen.validate.common import DIM_MAX, Collector


def read_dispatch(c: Collector, block: Block, kernels: dict[str, ir.Kernel],
                  failed: frozenset[str] = frozenset()) -> ir.Dispatch | None:
    """The dispatch, or None with its problems collected. An arm naming a
    kernel of `failed` (one whose own fields did not read: reported there)
    is left out of the checks of the arms, and not reported again."""
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
            if kname in failed:
                continue
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


