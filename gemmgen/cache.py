"""gemmgen's cache folder: `$GEMMGEN_CACHE`, else `~/.cache/gemmgen`.

The generator caches what is slow to rebuild and never changes its output:
the LALR tables of the spec grammar, the compiled Jinja templates and the
rendered specs (`gemmgen.build_cache`, keyed by the generator's own bytes
and the spec's text). Every
entry is keyed by a hash of what it was made from, written atomically
(temporary file, then rename), and a missing, unreadable or read-only cache
only costs time. The CUDA toolchain caches its build products here too.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The root of gemmgen's cache (not created here)."""
    root = os.environ.get("GEMMGEN_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "gemmgen"


def usable_subdir(name: str) -> Path | None:
    """`cache_dir() / name`, created if needed; None when that fails."""
    d = cache_dir() / name
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return d if os.access(d, os.W_OK) else None
