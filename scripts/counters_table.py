"""The emulator's counters for every CUDA kernel of specs/, as the markdown
table of docs/cuda-emulation.md ("Counters of the specs' kernels").

    python scripts/counters_table.py           # print the table
    python scripts/counters_table.py --write   # replace it in the docs
    python scripts/counters_table.py --check   # exit 1 if the docs differ

Each kernel runs once on the CPU emulator at gemmgen.explain.counters_case's
shape; the row is its last launch (the GEMM itself; the fill and worklist
launches of grouped kernels are left out). Numbers are warp-level requests,
and for shared memory wavefronts / ideal, for global memory sectors / ideal.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cuda-emulation.md"
BEGIN = "<!-- counters-table:begin -->"
END = "<!-- counters-table:end -->"


def _ratio(site, actual: str, ideal: str) -> str:
    if not site.requests:
        return "-"
    a, i = getattr(site, actual), getattr(site, ideal)
    return f"{a}" if a == i else f"**{a}** / {i}"


def table() -> str:
    sys.path.insert(0, str(ROOT))
    from gemmgen import ir
    from gemmgen.build import render_spec
    from gemmgen.explain import emulator_counters

    cxx = subprocess.run(["g++", "-dumpfullversion"], capture_output=True, text=True).stdout.strip()
    lines = [
        f"Measured with g++ {cxx}. Cells: shared memory wavefronts, global memory 32-byte sectors; "
        "**bold** / ideal where a kernel needs more than the ideal.",
        "",
        "| kernel | shape | warps x blocks | mma | ldmatrix | cp.async global | cp.async shared | ld.global "
        "| st.global | ld.shared | st.shared | bar.sync |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for spec_path in sorted((ROOT / "specs").glob("*.gemm")):
        spec = render_spec(spec_path).spec
        for kernel in spec.kernels_for(ir.Backend.CUDA):
            case, counters = emulator_counters(spec, kernel)
            c = counters[-1]
            t = c.total
            warps = (c.block[0] * c.block[1] * c.block[2] + 31) // 32
            lines.append(
                f"| {kernel.name} | {case.describe()} | {warps} x {c.blocks} | {t('mma').requests} "
                f"| {_ratio(t('ldmatrix'), 'wavefronts', 'ideal_wavefronts')} "
                f"| {_ratio(t('cp.async.global'), 'sectors', 'ideal_sectors')} "
                f"| {_ratio(t('cp.async.shared'), 'wavefronts', 'ideal_wavefronts')} "
                f"| {_ratio(t('ld.global'), 'sectors', 'ideal_sectors')} "
                f"| {_ratio(t('st.global'), 'sectors', 'ideal_sectors')} "
                f"| {_ratio(t('ld.shared'), 'wavefronts', 'ideal_wavefronts')} "
                f"| {_ratio(t('st.shared'), 'wavefronts', 'ideal_wavefronts')} "
                f"| {t('bar.sync').requests} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = table()
    if not argv:
        print(text)
        return 0
    doc = DOC.read_text()
    pattern = re.compile(re.escape(BEGIN) + r"\n(?:.*?\n)?" + re.escape(END), re.S)
    if not pattern.search(doc):
        print(f"{DOC} has no {BEGIN} ... {END} block", file=sys.stderr)
        return 2
    new = pattern.sub(lambda _: f"{BEGIN}\n{text}\n{END}", doc)
    if argv[0] == "--check":
        if new != doc:
            print(f"{DOC.relative_to(ROOT)}: the counters table is stale; run {Path(__file__).name} --write")
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
