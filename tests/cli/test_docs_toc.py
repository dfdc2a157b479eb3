"""docs/decisions.md's table of contents lists every section, each link to
an anchor that exists (scripts/decisions_toc.py writes it)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _toc_module():
    spec = importlib.util.spec_from_file_location("decisions_toc", REPO / "scripts" / "decisions_toc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_decisions_toc_is_current():
    toc = _toc_module()
    text = (REPO / "docs" / "decisions.md").read_text()
    assert toc.with_toc(text) == text, "run: python scripts/decisions_toc.py"
    links = re.findall(r"^  - \[(.+)\]\(#(.+)\)$", text, flags=re.MULTILINE)
    assert sorted(links) == sorted(toc.sections(text))
    assert len(links) == text.count("\n## ") >= 80


def test_toc_anchors_follow_headings():
    toc = _toc_module()
    text = "# D\n\nintro\n\n## A `b` (c, 1)\n\nx\n\n## A `b` (c, 1)\n\n## Other: y/z\n"
    assert toc.sections(text) == [("A `b` (c, 1)", "a-b-c-1"), ("A `b` (c, 1)", "a-b-c-1-1"),
                                  ("Other: y/z", "other-yz")]
    out = toc.with_toc(text)
    assert out.index("<!-- toc -->") < out.index("\n## A") and toc.with_toc(out) == out
