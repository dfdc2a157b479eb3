"""The CUDA runtime (gemmgen/runtime/cuda: the headers generated kernels
include and the CPU emulator's sources) is read a file at a time: no file is
over MAX_RUNTIME_LINES lines. A file that grows past it splits by what it
holds (an instruction family, a role), as gg_primitives_sm90.cuh and
gg_emu_sm100.cc did, so that a reader finds a thing by its file name
(docs/decisions.md, "The last oversized files")."""

from __future__ import annotations

from pathlib import Path

from gemmgen.runtime import RUNTIME_INCLUDE_DIR

MAX_RUNTIME_LINES = 1000

# The files not split yet, each with its line count when this list was
# written as a ceiling that may only come down; an entry leaves the list
# when its file is split (at or under MAX_RUNTIME_LINES).
OVERSIZED: dict[str, int] = {}


def _problems(folder: Path, oversized: dict[str, int]) -> list[str]:
    out = []
    names = {p.name for p in folder.iterdir() if p.is_file()}
    for name in sorted(names):
        lines = len((folder / name).read_text().splitlines())
        ceiling = oversized.get(name)
        if ceiling is None and lines > MAX_RUNTIME_LINES:
            out.append(f"{name}: {lines} lines, over {MAX_RUNTIME_LINES}: "
                       "split it by what it holds")
        elif ceiling is not None and lines > ceiling:
            out.append(f"{name}: {lines} lines, over its ceiling of {ceiling} (not split yet): "
                       "it may only shrink")
        elif ceiling is not None and lines <= MAX_RUNTIME_LINES:
            out.append(f"{name}: {lines} lines, no longer over {MAX_RUNTIME_LINES}: take it off "
                       "OVERSIZED")
    for name in sorted(set(oversized) - names):
        out.append(f"{name}: in OVERSIZED but not in the runtime: take it off")
    return out


def test_runtime_files_are_short():
    problems = _problems(RUNTIME_INCLUDE_DIR, OVERSIZED)
    assert not problems, "\n".join(problems)


def test_the_size_check_catches_what_it_names(tmp_path):
    def write(name: str, n: int) -> None:
        (tmp_path / name).write_text("".join(f"// {i}\n" for i in range(n)))

    write("fine.cuh", MAX_RUNTIME_LINES)
    write("long.cc", MAX_RUNTIME_LINES + 1)
    write("grown.cuh", 1201)
    write("shrunk.cuh", 1199)
    write("split.cuh", MAX_RUNTIME_LINES)
    oversized = {"grown.cuh": 1200, "shrunk.cuh": 1200, "split.cuh": 1500, "gone.cuh": 1100}
    assert _problems(tmp_path, oversized) == [
        "grown.cuh: 1201 lines, over its ceiling of 1200 (not split yet): it may only shrink",
        "long.cc: 1001 lines, over 1000: split it by what it holds",
        "split.cuh: 1000 lines, no longer over 1000: take it off OVERSIZED",
        "gone.cuh: in OVERSIZED but not in the runtime: take it off"]
