"""Performance counters of an emulated CUDA launch.

``EmuModule.launch(..., counters=True)`` runs a memory-checked module with
``GG_EMU_COUNTERS`` set; the emulator (``runtime/cuda/gg_emu_memcheck.cc``)
records every access of every lane, groups them per (warp, access site,
n-th execution by the lane) into warp-level requests, and writes per site:

- ``requests``: warp-level instructions (SASS counts these);
- global accesses (``ld.global``, ``st.global``, ``atom.global``,
  ``cp.async.global`` = cp.async's source): ``sectors``, the distinct
  32-byte sectors the request touches, against ``ideal_sectors``,
  ceil(distinct bytes / 32) — what a fully coalesced request needs;
- shared accesses (``ld.shared``, ``st.shared``, ``atom.shared``,
  ``cp.async.shared`` = cp.async's destination, ``ldmatrix``):
  ``wavefronts``, the passes the 32 banks of 4 bytes need, against
  ``ideal_wavefronts`` (one per phase: a request of up to 4 bytes per lane
  is one phase of 32 lanes, 8 bytes two of 16, 16 bytes four of 8; an
  ldmatrix is one phase per 8x8 matrix, its 8 rows of 16 bytes). The
  difference is what Nsight Compute reports as bank conflicts;
- ``mma`` and ``bar.sync``: instruction counts.

docs/cuda-emulation.md ("Counters") says what these model and what not.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

GLOBAL_OPS = ("ld.global", "st.global", "atom.global", "cp.async.global")
SHARED_OPS = ("ld.shared", "st.shared", "atom.shared", "cp.async.shared", "ldmatrix")
COUNT_OPS = ("mma", "bar.sync")
OPS = (*GLOBAL_OPS, *SHARED_OPS, *COUNT_OPS)

_FIELDS = ("requests", "lanes", "bytes", "sectors", "ideal_sectors", "wavefronts", "ideal_wavefronts")


@dataclass
class Site:
    """One access site (a static instruction) of one kind, summed over the launch."""

    op: str
    pc: int = 0
    where: str = ""
    requests: int = 0
    lanes: int = 0
    bytes: int = 0
    sectors: int = 0
    ideal_sectors: int = 0
    wavefronts: int = 0
    ideal_wavefronts: int = 0

    @property
    def conflicts(self) -> int:
        """Extra shared-memory wavefronts (Nsight Compute's bank conflicts)."""
        return self.wavefronts - self.ideal_wavefronts

    @property
    def excess_sectors(self) -> int:
        """Global sectors beyond what the bytes need (uncoalesced accesses)."""
        return self.sectors - self.ideal_sectors

    def add(self, other: Site) -> None:
        for f in _FIELDS:
            setattr(self, f, getattr(self, f) + getattr(other, f))


@dataclass
class LaunchCounters:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    blocks: int
    sites: list[Site] = field(default_factory=list)

    def total(self, op: str) -> Site:
        """The sum over every site of kind `op`."""
        if op not in OPS:
            raise ValueError(f"unknown counter {op!r}; one of {OPS}")
        s = Site(op)
        for site in self.sites:
            if site.op == op:
                s.add(site)
        return s

    def table(self, *, sites: bool = True) -> str:
        """The counters as text: one line per kind, then the sites that cost
        more than ideal."""
        lines = [f"counters of {self.kernel}: grid {self.grid}, block {self.block}, {self.blocks} blocks"]
        for op in OPS:
            t = self.total(op)
            if not t.requests:
                continue
            text = f"  {op:<16} {t.requests:>9} warp requests"
            if op in GLOBAL_OPS:
                eff = 100.0 * t.ideal_sectors / t.sectors if t.sectors else 100.0
                text += f", {t.sectors} sectors (ideal {t.ideal_sectors}, {eff:.0f}% efficient)"
            elif op in SHARED_OPS:
                text += f", {t.wavefronts} wavefronts (ideal {t.ideal_wavefronts}, {t.conflicts} bank conflicts)"
            lines.append(text)
        merged: dict[tuple[str, str], Site] = {}
        for s in self.sites:  # inlined copies of one line (a prologue, a loop) count as one site
            key = (s.op, s.where or hex(s.pc))
            if key not in merged:
                merged[key] = Site(s.op, s.pc, s.where)
            merged[key].add(s)
        costly = [s for s in merged.values() if s.conflicts > 0 or s.excess_sectors > 0]
        if sites and costly:
            lines.append("  sites above ideal:")
            for s in sorted(costly, key=lambda s: -(s.conflicts + s.excess_sectors)):
                extra = (f"{s.conflicts} bank conflicts in {s.requests} requests" if s.op in SHARED_OPS
                         else f"{s.excess_sectors} extra sectors in {s.requests} requests")
                lines.append(f"    {s.op:<16} {s.where or hex(s.pc)}: {extra}")
        return "\n".join(lines)


KERNEL_BODY_HEADERS = ("gg_gemm.cuh", "gg_gemm_sm90.cuh", "gg_gemm_sm90_mixed.cuh", "gg_gemm_sm100.cuh",
                       "gg_gemm_sm100_epilogue.cuh", "gg_gemm_sm100_entry.cuh",
                       "gg_gemm_sm100_mixed.cuh", "gg_gemm_sm100_pair.cuh", "gg_epilogue.cuh",
                       "gg_scales.cuh", "gg_widen.cuh")


def resolve_sites(library: Path, pcs: list[int], source_name: str) -> dict[int, str]:
    """file:line of each pc: the innermost inlined frame in the kernel's own
    source, else the innermost one outside the emulator's headers."""
    if not pcs:
        return {}
    try:
        proc = subprocess.run(["addr2line", "-a", "-i", "-f", "-C", "-e", str(library), *map(hex, pcs)],
                              capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    frames: dict[int, list[tuple[str, str]]] = {}
    current = None
    lines = proc.stdout.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.fullmatch(r"0x[0-9a-f]+", line):
            current = int(line, 16)
            frames[current] = []
            i += 1
            continue
        if current is not None and i + 1 < len(lines):
            frames[current].append((line, lines[i + 1]))
        i += 2
    # The tile GEMM's body is shared C++ in these runtime headers, which its
    # .cu only configures: their lines are the kernel's own.
    own_files = {Path(source_name).name, *KERNEL_BODY_HEADERS}
    out = {}
    for pc, fs in frames.items():
        locs = [(fn, re.sub(r" \(discriminator \d+\)$", "", loc)) for fn, loc in fs if not loc.startswith("??")]
        own = [loc for _, loc in locs if Path(loc.rsplit(":", 1)[0]).name in own_files]
        other = [loc for _, loc in locs if not re.search(r"gg_emu[\w.]*:\d+$", loc)]
        pick = own[0] if own else (other[0] if other else (locs[0][1] if locs else ""))
        out[pc] = pick.split("/")[-1]
    return out


def load_counters(path: Path, library: Path, source_name: str) -> LaunchCounters:
    """Reads the emulator's counters file; names each site's source line."""
    data = json.loads(Path(path).read_text())
    sites = [Site(**{k: v for k, v in s.items()}) for s in data["sites"]]
    where = resolve_sites(library, sorted({s.pc for s in sites}), source_name)
    for s in sites:
        s.where = where.get(s.pc, "")
    return LaunchCounters(data["kernel"], tuple(data["grid"]), tuple(data["block"]), data["blocks"], sites)
