"""The `tuned` block of a spec: finding it, reading back its rules, writing
a new one in place of the old (every other byte of the file untouched), and
writing the file atomically.

A block `gemmgen tune` owns is its header comment (HEADER) and `tuned NAME {
... }`, NAME the device generation (`v5e`). Blocks for other devices are
left as they are. The text is read line by line, not through the spec
parser: tune rewrites exactly the lines it wrote, whatever else the file
holds.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gemmgen import ir

HEADER = ("# Tiles measured by `gemmgen tune`, which rewrites this block "
          "(docs/spec.md, \"Tuned tiles\").")

_OPEN = re.compile(r"^tuned[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*\{[ \t]*(#.*)?$")
_RULE = re.compile(r"^tile_rule[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]+(.*?)[ \t]*->[ \t]*"
                   r"m=(\d+)[ \t]+n=(\d+)[ \t]+k=(\d+)[ \t]*(#.*)?$")
_COND = re.compile(r"^(m/g|m|n|k|g)(<=|>=|==|<|>)(\d+)$")
_CMPS = {c.value: c for c in ir.Cmp}


class RewriteError(ValueError):
    """The spec's text cannot take a new block (an unclosed `tuned` block)."""


@dataclass(frozen=True, slots=True)
class TunedRule:
    """A `tile_rule KERNEL conditions -> m= n= k=` line of a tuned block.
    Conditions are (variable, comparison, value); variables are m, n, k, g
    and m/g (m // g)."""

    kernel: str
    conds: tuple[tuple[str, ir.Cmp, int], ...]
    tile: ir.Tile

    def covers(self, m: int, n: int, k: int, g: int) -> bool:
        values = {"m": m, "n": n, "k": k, "g": g, "m/g": m // g if g else m}
        return all(cmp.test(values[var], value) for var, cmp, value in self.conds)

    def text(self) -> str:
        conds = "".join(f"{var}{cmp.value}{value} " for var, cmp, value in self.conds)
        t = self.tile
        return f"tile_rule {self.kernel} {conds}-> m={t.m} n={t.n} k={t.k}"


@dataclass(frozen=True, slots=True)
class Block:
    """A `tuned NAME { ... }` block: lines [start, end) of the file, its
    header comment included when it has one, and its rules."""

    name: str
    start: int
    end: int
    rules: tuple[TunedRule, ...]


def find_blocks(text: str, path: str = "spec") -> list[Block]:
    """Every tuned block of `text`, in order."""
    lines = text.splitlines(keepends=True)
    blocks = []
    i = 0
    while i < len(lines):
        match = _OPEN.match(lines[i].strip())
        if not match:
            i += 1
            continue
        start = i - 1 if i > 0 and lines[i - 1].strip() == HEADER else i
        rules = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != "}":
            if (rule := parse_rule(lines[j].strip())) is not None:
                rules.append(rule)
            j += 1
        if j == len(lines):
            raise RewriteError(f"{path}:{i + 1}:1: error: the tuned block '{match.group(1)}' "
                               "is not closed (no line '}' after it); fix it or delete it, "
                               "and run gemmgen tune again")
        blocks.append(Block(match.group(1), start, j + 1, tuple(rules)))
        i = j + 1
    return blocks


def rule_sections(text: str, block: Block) -> list[tuple[str, list[str]]]:
    """The rules of `block` with the comment lines just above each, as
    (kernel, lines without their newlines): what tune carries over
    verbatim for the kernels a run does not measure."""
    lines = text.splitlines()[block.start:block.end]
    out, pending = [], []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#") and stripped != HEADER:
            pending.append(stripped)
        elif (rule := parse_rule(stripped)) is not None:
            out.append((rule.kernel, [*pending, stripped]))
            pending = []
        else:
            pending = []
    return out


def parse_rule(line: str) -> TunedRule | None:
    """A rule line of a tuned block, None for any other line (comments,
    provenance fields)."""
    match = _RULE.match(line)
    if not match:
        return None
    conds = []
    for word in match.group(2).split():
        c = _COND.match(word)
        if not c:
            return None
        conds.append((c.group(1), _CMPS[c.group(2)], int(c.group(3))))
    return TunedRule(match.group(1), tuple(conds),
                     ir.Tile(int(match.group(3)), int(match.group(4)), int(match.group(5))))


def _quoted(value: str) -> str:
    """A string of the language: no escapes, so a double quote (which no
    device kind or version holds) becomes a single one, a newline a space."""
    return '"' + value.replace('"', "'").replace("\n", " ").replace("\r", " ") + '"'


def block_text(name: str, provenance: dict[str, str], body: list[str]) -> str:
    """The block: header comment, `tuned NAME {`, the provenance fields in
    order, the body lines (comments and rules), `}`."""
    lines = [HEADER, f"tuned {name} {{"]
    lines += [f"  {key} {_quoted(value)}" for key, value in provenance.items()]
    lines += [f"  {line}" for line in body]
    lines.append("}")
    return "\n".join(lines) + "\n"


def replace_block(text: str, name: str, block: str, path: str = "spec") -> str:
    """`text` with its tuned block `name` replaced by `block` (the first, if
    several), or `block` appended after a blank line when it has none; every
    other line is kept byte for byte."""
    lines = text.splitlines(keepends=True)
    if "\r\n" in text:  # the block's lines end as the file's do
        block = block.replace("\n", "\r\n")
    mine = [b for b in find_blocks(text, path) if b.name == name]
    if mine:
        b = mine[0]
        after = "".join(lines[b.end:])
        # The block's last line may have had no newline (end of file): keep that.
        ending = block if lines[b.end - 1].endswith("\n") else block.rstrip("\r\n")
        return "".join(lines[:b.start]) + ending + after
    if not text:
        return block
    nl = "\r\n" if "\r\n" in text else "\n"
    sep = "" if text.endswith("\n") else nl
    blank = "" if text.endswith(nl + nl) else nl
    return text + sep + blank + block


def write_atomically(path: Path, text: str) -> None:
    """Replace the file at `path` with `text` by writing a temporary file in
    its folder and renaming it over the original: a reader (or a crash)
    sees the old file or the new one, never part of one. Keeps the
    original's permission bits."""
    folder = path.parent
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tune", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
