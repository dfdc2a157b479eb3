"""Static checks of CUDA kernels with nvcc, for machines without a GPU.

    from gemmgen.harness import nvcc

    result = nvcc.compile_check(source, "sm_90a", name_for_errors="gemm.cu")
    usage = result.kernels["gemm"]          # ResourceUsage
    assert usage.spill_stores == usage.spill_loads == 0
    assert usage.static_smem + dynamic_smem <= nvcc.shared_memory_limit("sm_90a")
    sass = nvcc.sass_summary(result.cubin)["gemm"]
    assert sass.tensor_core > 0 and sass.ldsm > 0 and sass.ldgsts > 0

API:

- ``compile_check(source, arch, *, name_for_errors="kernel.cu",
  include_dirs=(), defines=None, extra_flags=()) -> CompileResult``: compiles
  one cubin for `arch` (``sm_80``, ``sm_89``, ``sm_90a``, ``sm_120``, ...;
  ``a``/``f`` archs use the ``-gencode=arch=compute_90a,code=sm_90a`` form)
  with ``--resource-usage`` and returns the cubin and a ``ResourceUsage`` per
  kernel: registers, spill stores and loads, stack frame, static shared
  memory, barriers, constant bank 0. Results are cached by content under
  ``$GEMMGEN_CACHE/nvcc``. Raises ``NvccError`` with nvcc's diagnostics.
- ``resource_usage(nvcc, path, arch, *, include_dirs=()) -> dict[str,
  ResourceUsage]``: ptxas's report for a file as a user compiles it (only
  the given include folders), uncached; gemmgen.harness.resources keeps
  the results for `build`'s spill warnings.
- ``sass_summary(cubin) -> dict[str, SassSummary]``: ``cuobjdump
  --dump-sass`` per kernel: the opcode histogram and the counts that matter
  for a GEMM (tensor-core MMAs, LDSM, LDGSTS, 128-bit global loads);
  ``sass_text(cubin)`` the listing itself and ``sass_instructions(text,
  kernel, opcode)`` one kernel's instructions of an opcode, operands and
  all (e.g. whether an HGMMA's A is a register or a descriptor).
- ``wgmma_register_hazards(sass_text) -> list[WgmmaHazard]``: instructions
  that touch an in-flight wgmma's A registers or accumulators before the
  ``WARPGROUP.DEPBAR`` that retires it, on any control-flow path, and
  wgmmas on registers written after the last ``WARPGROUP.ARRIVE``
  (docs/cuda-hopper.md, "Register-sourced wgmma hazards"); empty when clean.
- ``gencode(arch)``; ``shared_memory_limit(arch)`` (from ``gemmgen.archs``,
  the per-arch limits the plans and the emulator use too); ``find_nvcc()`` and
  ``find_cuda_tool()`` come from ``gemmgen.harness.toolchain``.

Dynamic shared memory is a launch parameter, not a compile result: compare
``static_smem`` plus the plan's dynamic bytes with ``shared_memory_limit``.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gemmgen.archs import parse_arch, shared_memory_limit
from gemmgen.harness.toolchain import (
    RUNTIME_INCLUDE_DIR,
    ToolchainError,
    atomic_write,
    build_lock,
    cache_dir,
    digest,
    find_cuda_tool,
    find_nvcc,
    named_source,
    tool_version,
)

__all__ = [
    "CompileResult",
    "NvccError",
    "ResourceUsage",
    "SassSummary",
    "WgmmaHazard",
    "compile_check",
    "find_cuda_tool",
    "find_nvcc",
    "gencode",
    "resource_usage",
    "sass_summary",
    "shared_memory_limit",
    "wgmma_register_hazards",
]


class NvccError(RuntimeError):
    """nvcc rejected a kernel; the message holds its diagnostics."""


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """What ptxas reports for one kernel on one arch."""

    kernel: str
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_frame: int
    static_smem: int
    barriers: int
    constant_bytes: int

    @property
    def spills(self) -> int:
        """Spill stores plus spill loads, in bytes."""
        return self.spill_stores + self.spill_loads

    @property
    def dynamic_smem_available(self) -> int:
        """The dynamic shared memory a launch of this kernel may ask for on its arch."""
        return shared_memory_limit(self.arch) - self.static_smem


@dataclass(frozen=True, slots=True)
class CompileResult:
    arch: str
    kernels: Mapping[str, ResourceUsage]
    cubin: bytes
    log: str


@dataclass(frozen=True, slots=True)
class SassSummary:
    """The instruction mix of one kernel's SASS."""

    kernel: str
    opcodes: Mapping[str, int]
    """Full opcode (with modifiers, e.g. ``HMMA.16816.F32.BF16``) -> count."""

    @property
    def instructions(self) -> int:
        return sum(self.opcodes.values())

    def count(self, base: str, *modifiers: str) -> int:
        """Instructions whose opcode is `base` with every one of `modifiers`."""
        total = 0
        for opcode, n in self.opcodes.items():
            parts = opcode.split(".")
            if parts[0] == base and all(m in parts[1:] for m in modifiers):
                total += n
        return total

    @property
    def tensor_core(self) -> int:
        """Tensor-core MMAs: HMMA (f16/bf16), QMMA (fp8), IMMA (int8), HGMMA (wgmma)."""
        return sum(self.count(base) for base in ("HMMA", "QMMA", "IMMA", "HGMMA"))

    @property
    def ldsm(self) -> int:
        """ldmatrix loads (LDSM, including the transposing LDSM.16.MT88)."""
        return self.count("LDSM")

    @property
    def ldgsts(self) -> int:
        """cp.async global-to-shared copies (LDGSTS)."""
        return self.count("LDGSTS")

    @property
    def ldg_128(self) -> int:
        """128-bit global loads (LDG.E.128, LDG.E.128.CONSTANT, ...)."""
        return self.count("LDG", "128")


def gencode(arch: str) -> str:
    """The nvcc flag that builds SASS for `arch`: ``sm_90a`` ->
    ``-gencode=arch=compute_90a,code=sm_90a``."""
    number, suffix = parse_arch(arch)
    return f"-gencode=arch=compute_{number}{suffix},code=sm_{number}{suffix}"


_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPERTIES_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_FIELD_RES = {
    "barriers": re.compile(r"used (\d+) barriers"),
    "static_smem": re.compile(r"(\d+) bytes smem"),
    "constant_bytes": re.compile(r"(\d+) bytes cmem\[0\]"),
}


def _parse_resource_usage(log: str, arch: str) -> dict[str, ResourceUsage]:
    """The ptxas lines of ``--resource-usage``, per entry function:

        ptxas info    : Compiling entry function 'gemm' for 'sm_90a'
        ptxas info    : Function properties for gemm
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 168 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
    """
    kernels: dict[str, ResourceUsage] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    entry: str | None = None
    properties_of: str | None = None
    for line in log.splitlines():
        if m := _ENTRY_RE.search(line):
            entry = m.group(1)
        elif m := _PROPERTIES_RE.search(line):
            properties_of = m.group(1)
        elif (m := _FRAME_RE.search(line)) and properties_of is not None:
            frames[properties_of] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _USED_RE.search(line)) and entry is not None:
            fields = {k: int(f.group(1)) if (f := r.search(line)) else 0 for k, r in _FIELD_RES.items()}
            stack, stores, loads = frames.get(entry, (0, 0, 0))
            kernels[entry] = ResourceUsage(
                kernel=entry,
                arch=arch,
                registers=int(m.group(1)),
                spill_stores=stores,
                spill_loads=loads,
                stack_frame=stack,
                **fields,
            )
            entry = None
    return kernels


def _require(tool: str) -> Path:
    path = find_cuda_tool(tool)
    if path is None:
        raise ToolchainError(f"{tool} not found: set GEMMGEN_{tool.upper()} or CUDA_HOME, "
                              "`pip install nvidia-cuda-nvcc`, or put the CUDA toolkit on PATH")
    return path


def compile_check(
    source: str,
    arch: str,
    *,
    name_for_errors: str = "kernel.cu",
    include_dirs: Iterable[str | Path] = (),
    defines: Mapping[str, str | int] | None = None,
    extra_flags: Iterable[str] = (),
) -> CompileResult:
    """Compiles `source` for `arch` with ``--resource-usage``; see the module docstring."""
    nvcc = _require("nvcc")
    flags = [
        "-cubin",
        "--resource-usage",
        "-std=c++17",
        "-O3",
        gencode(arch),
        f"-I{RUNTIME_INCLUDE_DIR}",
        *(f"-I{Path(d).resolve()}" for d in include_dirs),
        *(f"-D{k}={v}" for k, v in sorted((defines or {}).items())),
        *extra_flags,
    ]
    runtime = b"".join(p.read_bytes() for p in sorted(RUNTIME_INCLUDE_DIR.iterdir()) if p.is_file())
    key = digest(source, name_for_errors, " ".join(flags), runtime, tool_version(str(nvcc)))
    cached = cache_dir() / "nvcc" / key[:32]
    cubin_path, log_path = cached.with_suffix(".cubin"), cached.with_suffix(".log")
    with build_lock(cubin_path):
        if not (cubin_path.is_file() and log_path.is_file()):
            _nvcc(nvcc, flags, source, name_for_errors, arch, cubin_path, log_path)
    log = log_path.read_text()
    return CompileResult(arch, _parse_resource_usage(log, arch), cubin_path.read_bytes(), log)


def _nvcc(nvcc: Path, flags: list[str], source: str, name: str, arch: str, cubin_path: Path, log_path: Path) -> None:
    """Runs nvcc on `source` and stores the cubin and the log in the cache."""
    with tempfile.TemporaryDirectory(prefix="gg-nvcc-") as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text(named_source(source, name))
        out = Path(tmp) / "kernel.cubin"
        proc = subprocess.run([str(nvcc), *flags, str(src), "-o", str(out)], capture_output=True, text=True, check=False)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise NvccError(f"{name}: nvcc failed for {arch}:\n{log.strip()}")
        atomic_write(cubin_path, out.read_bytes())
        atomic_write(log_path, log.encode())


def resource_usage(nvcc: Path, source: Path, arch: str, *,
                   include_dirs: Iterable[str | Path] = ()) -> dict[str, ResourceUsage]:
    """What ptxas reports for every entry function of the file `source`
    compiled for `arch` (``-O3 -std=c++17``, the include folders and no
    others: how a user compiles ``generated/<stem>/cuda/``). Not cached here
    (gemmgen.harness.resources keeps the results). Raises NvccError."""
    with tempfile.TemporaryDirectory(prefix="gg-nvcc-") as tmp:
        proc = subprocess.run([str(nvcc), "-cubin", "--resource-usage", "-std=c++17", "-O3",
                               gencode(arch), *(f"-I{Path(d).resolve()}" for d in include_dirs),
                               str(source), "-o", str(Path(tmp) / "kernel.cubin")],
                              capture_output=True, text=True, check=False)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise NvccError(f"{source.name}: nvcc failed for {arch}:\n{log.strip()}")
    return _parse_resource_usage(log, arch)


_FUNCTION_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTRUCTION_RE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def parse_sass(text: str) -> dict[str, SassSummary]:
    """Opcode histograms per function of ``cuobjdump --dump-sass`` output."""
    histograms: dict[str, Counter[str]] = {}
    current: Counter[str] | None = None
    for line in text.splitlines():
        if m := _FUNCTION_RE.match(line):
            current = histograms.setdefault(m.group(1), Counter())
        elif current is not None and (m := _INSTRUCTION_RE.match(line)):
            current[m.group(1)] += 1
    return {name: SassSummary(name, dict(sorted(h.items()))) for name, h in histograms.items()}


def sass_text(cubin: bytes) -> str:
    """``cuobjdump --dump-sass`` of `cubin`."""
    cuobjdump = _require("cuobjdump")
    with tempfile.TemporaryDirectory(prefix="gg-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([str(cuobjdump), "--dump-sass", str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NvccError(f"cuobjdump --dump-sass failed:\n{proc.stderr.strip()}")
    return proc.stdout


def sass_summary(cubin: bytes) -> dict[str, SassSummary]:
    """The SASS instruction mix of every kernel in `cubin` (``cuobjdump --dump-sass``)."""
    return parse_sass(sass_text(cubin))


def sass_instructions(text: str, kernel: str, opcode: str) -> list[str]:
    """The instructions (opcode with modifiers, then operands) of `kernel` in
    ``cuobjdump --dump-sass`` output whose base opcode is `opcode`."""
    out, inside = [], False
    for line in text.splitlines():
        if m := _FUNCTION_RE.match(line):
            inside = m.group(1) == kernel
        elif inside and (m := _INSTRUCTION_RE.match(line)) and m.group(1).split(".")[0] == opcode:
            out.append(line[m.start(1):].split(";")[0].strip())
    return out


# ---------------------------------------------------------------------------
# wgmma register hazards in SASS.

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
