"""Rewrite the by-topic table of contents at the top of docs/decisions.md.

Each `## ` section is listed under the first topic whose pattern its
heading matches (TOPICS, in order; the last takes the rest), in the order
the sections were written. Run it after adding a section:

    python scripts/decisions_toc.py

tests/cli/test_docs_toc.py fails while the list and the sections differ.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

DECISIONS = Path(__file__).resolve().parent.parent / "docs" / "decisions.md"
START, END = "<!-- toc -->", "<!-- /toc -->"
TOPICS = (
    ("Tests and CI time", r"ci's time|suite's|ci runs|^tests:"),
    ("Tuning and benchmarks on a TPU", r"\btune\b|peer benchmark|tuning"),
    ("The spec language and its semantics",
     r"spec language|^semantics|`mma` field|new user|tile per backend|tile rules|diagnostic"),
    ("Pallas on a TPU", r"\bpallas\b|\btpu\b|v5e|v7x|\bf16\b"),
    ("Launchers and entry points: CuPy, Rust, JAX FFI, PyTorch",
     r"rust|cupy|\bffi\b|pytorch|torch|jax training|gpu training|shard_map"),
    ("CUDA: sm_100a (tcgen05)", r"sm_100a|tcgen05|umma|issue 30|2-cta|multicast|b200"),
    ("CUDA: mma.sync, Hopper, sm_12x, and the emulator",
     (r"hopper|wgmma|sm_12x|sm_120|mma|tensor map|swizzle|fp8|weight-only|w4a8|global scale"
      r"|mx / nv|cuda|tile gemm|honest bounds|masked grouped|gb10|emulat")),
    ("Build, output, layers and generated code", r"."),
)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading (before de-duplication)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def without_toc(text: str) -> str:
    if START not in text:
        return text
    a, b = text.index(START), text.index(END) + len(END)
    return text[:a].rstrip("\n") + "\n\n" + text[b:].lstrip("\n")


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, anchor) of every `## ` section, in order."""
    seen: Counter[str] = Counter()
    out = []
    for heading in re.findall(r"^## (.+)$", without_toc(text), flags=re.MULTILINE):
        s = slug(heading)
        out.append((heading, s if not seen[s] else f"{s}-{seen[s]}"))
        seen[s] += 1
    return out


def toc(text: str) -> str:
    """The table of contents block for `text`."""
    groups: dict[str, list[tuple[str, str]]] = {topic: [] for topic, _ in TOPICS}
    for heading, anchor in sections(text):
        topic = next(t for t, rx in TOPICS if re.search(rx, heading.lower()))
        groups[topic].append((heading, anchor))
    lines = [START, ("Contents, by topic; the sections below are in the order they were "
                     "written (`scripts/decisions_toc.py` writes this list)."), ""]
    for topic, items in groups.items():
        if items:
            lines.append(f"- **{topic}**")
            lines += [f"  - [{heading}](#{anchor})" for heading, anchor in items]
    lines.append(END)
    return "\n".join(lines)


def with_toc(text: str) -> str:
    """`text` with its table of contents (re)written after the introduction."""
    body = without_toc(text)
    intro = body.index("\n## ")
    return body[:intro].rstrip("\n") + "\n\n" + toc(body) + "\n" + body[intro:]


def main() -> int:
    DECISIONS.write_text(with_toc(DECISIONS.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
