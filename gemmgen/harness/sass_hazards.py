"""wgmma register hazards in SASS (docs/cuda-hopper.md, "Register-sourced
wgmma hazards"): instructions that touch an in-flight wgmma's A registers or
accumulators before the ``WARPGROUP.DEPBAR`` that retires it, on any
control-flow path, and wgmmas on registers written after the last
``WARPGROUP.ARRIVE``. ``gemmgen.harness.nvcc`` re-exports
``wgmma_register_hazards`` and ``WgmmaHazard``; the SASS text comes from its
``sass_text``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The header of each kernel's listing (as in gemmgen.harness.nvcc's parse_sass).
_FUNCTION_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")

@dataclass(frozen=True, slots=True)
class WgmmaHazard:
    """One instruction that touches an in-flight wgmma's registers, or a
    wgmma issued on registers written since the last ``WARPGROUP.ARRIVE``."""

    kernel: str
    line: int
    """1-based line of `instruction` in the SASS text given to the checker."""
    instruction: str
    kind: str
    """``a-write`` (writes an in-flight wgmma's A fragment), ``acc-write`` /
    ``acc-read`` (writes or reads its accumulators), or ``no-fence`` (a wgmma
    whose A or accumulators were written after the last WARPGROUP.ARRIVE)."""
    registers: tuple[int, ...]
    wgmma_line: int
    """The line of the wgmma concerned (the one in flight, or the unfenced one)."""

    def __str__(self) -> str:
        regs = ", ".join(f"R{r}" for r in self.registers)
        return f"{self.kernel}:{self.line}: {self.kind} {regs} (wgmma at line {self.wgmma_line}): {self.instruction}"


_SASS_LINE_RE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*([^;]*);")
_REG_RE = re.compile(r"(?<![A-Za-z0-9_.])R(\d+)(?![0-9])")
_GMMA_SHAPE_RE = re.compile(r"^(\d+)x(\d+)x(\d+)$")
_GMMA_OPS = ("HGMMA", "QGMMA", "IGMMA", "BGMMA")
# Opcodes whose register operands are all sources (no destination register).
_NO_DEST = ("ST", "STS", "STG", "STL", "STSM", "RED", "REDG", "REDUX", "BAR", "SYNCS", "WARPSYNC", "BRA",
            "BRX", "EXIT", "RET", "CALL", "BSSY", "BSYNC", "NOP", "WARPGROUP", "UTMALDG", "UTMASTG",
            "UTMACCTL", "UBLKCP", "UTMAPF", "MEMBAR", "FENCE", "CCTL", "ERRBAR", "DEPBAR", "YIELD",
            "ELECT", "ARRIVES", "LDGDEPBAR", "BPT", "KILL", "NANOSLEEP")


def _operand_split(operands: str) -> list[str]:
    """Top-level comma-separated operands (brackets and braces kept whole)."""
    out, depth, cur = [], 0, []
    for ch in operands:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _dest_width(opcode: str) -> int:
    parts = opcode.split(".")
    base = parts[0]
    if "128" in parts:
        return 4
    if "64" in parts or base in ("DADD", "DMUL", "DFMA", "DSETP") or (base == "IMAD" and "WIDE" in parts):
        return 2
    if base == "LDSM":  # LDSM.16.M88.4: four 8x8 matrices, one register each
        return int(parts[-1]) if parts[-1] in ("2", "4") else 1
    if base in ("HMMA", "IMMA", "QMMA"):
        return 4
    return 1


def _mask(first: int, count: int) -> int:
    return ((1 << count) - 1) << first


def _regs_of(mask: int) -> tuple[int, ...]:
    return tuple(i for i in range(mask.bit_length()) if mask >> i & 1)


def wgmma_register_hazards(sass: str) -> list[WgmmaHazard]:
    """Register hazards of the wgmma instructions (``HGMMA``, ``QGMMA``,
    ``IGMMA``) in ``cuobjdump --dump-sass`` text, every function.

    A wgmma reads its A fragment (``R<a>`` .. ``R<a+3>``, when A is a
    register operand) and reads and writes its accumulators (``N/2`` 32-bit
    or ``N/4`` f16x2 registers from its destination) asynchronously, until a
    ``WARPGROUP.DEPBAR.LE gsb0, <k>`` retires its group (``gsb0`` on a wgmma
    closes a group; ``k`` groups may stay pending). Until then, any other
    instruction that writes one of those A registers, or writes or reads one
    of the accumulators, is a hazard (the PTX ISA leaves it undefined). And
    a ``WARPGROUP.ARRIVE`` (``wgmma.fence``) must separate the last write
    of a wgmma's A or accumulator registers from the wgmma.

    The walk follows the control flow (branch targets, fall-through after a
    predicated branch or EXIT, none after an unconditional one), so a hazard
    on any path from a wgmma to its wait counts. Returns the hazards found
    (empty for a clean kernel), each once."""
    funcs: list[tuple[str, list[tuple[int, int, str, str, str, str]]]] = []
    for lineno, line in enumerate(sass.splitlines(), 1):
        if m := _FUNCTION_RE.match(line):
            funcs.append((m.group(1), []))
        elif funcs and (m := _SASS_LINE_RE.match(line)):
            text = line[m.start(2) if m.group(2) else m.start(3):m.end(4)].strip()
            funcs[-1][1].append((lineno, int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3),
                                 m.group(4).strip(), text))
    hazards: list[WgmmaHazard] = []
    for name, instrs in funcs:
        hazards.extend(_function_hazards(name, instrs))
    return hazards


def _function_hazards(name: str, instrs: list[tuple[int, int, str, str, str, str]]) -> list[WgmmaHazard]:
    index = {addr: i for i, (_, addr, *_rest) in enumerate(instrs)}
    # Per instruction: its successors, the registers it writes and reads, and its wgmma facts.
    succs: list[list[int]] = []
    writes: list[int] = []
    reads: list[int] = []
    gmma: list[tuple[int, int, bool] | None] = []  # (A mask, accumulator mask, closes a group)
    for i, (_, _addr, pred, opcode, ops, _text) in enumerate(instrs):
        base = opcode.split(".")[0]
        operands = _operand_split(ops)
        nxt = [i + 1] if i + 1 < len(instrs) else []
        if base in ("BRA", "BRX", "JMP", "JMX"):
            targets = [index[int(t, 16)] for t in re.findall(r"0x([0-9a-f]+)", ops) if int(t, 16) in index]
            if base in ("BRX", "JMX"):
                targets = list(range(len(instrs)))  # an indirect branch: anywhere
            succs.append(targets + (nxt if pred else []))
        elif base in ("EXIT", "RET"):
            succs.append(nxt if pred else [])
        else:
            succs.append(nxt)
        w = r = 0
        info = None
        if base in _GMMA_OPS:
            shape = _GMMA_SHAPE_RE.match(opcode.split(".")[1])
            n = int(shape.group(2)) if shape else 256
            # HGMMA.64xNx16.<accumulator type>.<input types>: f16x2 accumulators take N/4 registers.
            acc_count = n // 4 if opcode.split(".")[2:3] == ["F16"] else n // 2
            d = _REG_RE.fullmatch(operands[0]) if operands else None
            a = _REG_RE.fullmatch(operands[1]) if len(operands) > 1 else None
            acc = _mask(int(d.group(1)), acc_count) if d else 0
            amask = _mask(int(a.group(1)), 4) if a else 0
            info = (amask, acc, "gsb0" in operands[-1:] or "gsb0" in ops.split(",")[-1])
        else:
            dest_i = None
            if base not in _NO_DEST:
                for j, op in enumerate(operands):
                    if re.fullmatch(r"!?U?P[T0-9]+", op):
                        continue
                    if _REG_RE.fullmatch(op):
                        dest_i = j
                    break
            for j, op in enumerate(operands):
                for reg in _REG_RE.findall(op):
                    if j == dest_i:
                        w |= _mask(int(reg), _dest_width(opcode))
                    else:
                        width = _dest_width(opcode) if base.startswith("ST") and j == len(operands) - 1 else 1
                        r |= _mask(int(reg), width)
        writes.append(w)
        reads.append(r)
        gmma.append(info)
    # Forward dataflow. State: (in-flight wgmmas as (index, group age; -1 while
    # its group is open), registers written since the last WARPGROUP.ARRIVE).
    State = tuple[frozenset[tuple[int, int]], int]
    states: list[State | None] = [None] * len(instrs)
    if not instrs:
        return []
    states[0] = (frozenset(), 0)
    work = [0]
    found: dict[tuple[int, str], WgmmaHazard] = {}
    while work:
        i = work.pop()
        inflight, dirty = states[i]
        lineno, _addr, _pred, opcode, ops, text = instrs[i]
        base = opcode.split(".")[0]
        info = gmma[i]
        if info is not None:
            amask, acc, closes = info
            if (amask | acc) & dirty:
                found.setdefault((i, "no-fence"), WgmmaHazard(name, lineno, text, "no-fence",
                                                               _regs_of((amask | acc) & dirty), lineno))
            inflight = inflight | {(i, -1)}
            if closes:
                inflight = frozenset((j, 0 if age < 0 else min(age + 1, 8)) for j, age in inflight)
        else:
            for j, _age in inflight:
                amask, acc, _ = gmma[j]
                hit = [("a-write", writes[i] & amask), ("acc-write", writes[i] & acc), ("acc-read", reads[i] & acc)]
                for kind, regs in hit:
                    if regs:
                        old = found.get((i, kind))
                        if old is not None:
                            regs |= sum(1 << r for r in old.registers)
                        found[(i, kind)] = WgmmaHazard(name, lineno, text, kind, _regs_of(regs),
                                                       old.wgmma_line if old else instrs[j][0])
            if opcode.startswith("WARPGROUP.ARRIVE"):
                dirty = 0
            elif opcode.startswith("WARPGROUP.DEPBAR"):
                keep = re.search(r"gsb0\s*,\s*0x([0-9a-f]+)", ops)
                k = int(keep.group(1), 16) if keep else 0
                inflight = frozenset((j, age) for j, age in inflight if age < 0 or age < k)
            dirty |= writes[i]
        for s in succs[i]:
            old = states[s]
            new = (inflight, dirty) if old is None else (old[0] | inflight, old[1] | dirty)
            if new != old:
                states[s] = new
                work.append(s)
    return sorted(found.values(), key=lambda h: (h.kernel, h.line, h.kind))
