"""The render cache (gemmgen.build_cache): a build or check of an unchanged
spec by an unchanged generator is served from it without loading lark, Jinja
or the backends, and nothing that could change the output is served stale:
an edited spec, a spec with errors, any changed byte of the generator, a
corrupt or unusable cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from gemmgen import build_cache
from gemmgen.specfile import SpecFile

REPO = Path(__file__).resolve().parents[2]

SPEC = """\
target pallas_tpu {
  tpu v6e
}

kernel mm {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out f32
  tile m=128 n=128 k=128
  backends pallas_tpu
}
"""

# Runs the CLI in a fresh interpreter and reports which of the slow-to-load
# parts of the generator it loaded.
PROBE = """\
import sys
from gemmgen.cli import main
code = main(sys.argv[1:])
loaded = sorted(m for m in ("lark", "jinja2", "gemmgen.backends", "gemmgen.parse")
                if m in sys.modules)
print("LOADED", " ".join(loaded))
sys.exit(code)
"""


def run(args: list[str], cwd: Path, cache: Path) -> tuple[int, str, list[str]]:
    env = dict(os.environ, GEMMGEN_CACHE=str(cache))
    r = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stdout.splitlines()
    loaded = [ln for ln in lines if ln.startswith("LOADED")]
    return r.returncode, r.stdout + r.stderr, loaded[-1].split()[1:] if loaded else []


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "rendered").glob("*.pickle"))


def test_warm_build_and_check_skip_parse_and_render(tmp_path):
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    cache = tmp_path / "cache"
    specs = sorted(f"specs/{p.name}" for p in (REPO / "specs").glob("*.gemm"))
    code, out, loaded = run(["build", *specs], tmp_path, cache)
    assert code == 0, out
    assert loaded == ["gemmgen.backends", "gemmgen.parse", "jinja2", "lark"]
    assert len(entries(cache)) == len(specs)
    cold = tree(tmp_path / "generated")
    assert cold == tree(REPO / "generated")
    shutil.rmtree(tmp_path / "generated")

    code, out, loaded = run(["build", *specs], tmp_path, cache)
    assert code == 0, out
    assert loaded == []
    assert tree(tmp_path / "generated") == cold
    code, out, loaded = run(["check"], tmp_path, cache)
    assert (code, loaded) == (0, []), out
    # A sibling that was built before answers the project-name check from
    # the cache too.
    code, out, loaded = run(["build", "specs/moe.gemm"], tmp_path, cache)
    assert (code, loaded) == (0, []), out


def test_edited_spec_is_rendered_again(tmp_path):
    (tmp_path / "specs").mkdir()
    spec = tmp_path / "specs" / "one.gemm"
    spec.write_text(SPEC)
    cache = tmp_path / "cache"
    assert run(["build", "specs/one.gemm"], tmp_path, cache)[0] == 0
    first = tree(tmp_path / "generated")

    spec.write_text(SPEC.replace("out f32", "out bf16"))
    code, out, loaded = run(["build", "specs/one.gemm"], tmp_path, cache)
    assert code == 0, out
    assert "lark" in loaded and "jinja2" in loaded
    second = tree(tmp_path / "generated")
    assert second != first
    # ... to exactly what a build without any cache writes.
    fresh = tmp_path / "fresh"
    shutil.copytree(tmp_path / "specs", fresh / "specs")
    unusable = tmp_path / "not-a-folder"
    unusable.write_text("")
    code, out, loaded = run(["build", "specs/one.gemm"], fresh, unusable)
    assert code == 0, out
    assert tree(fresh / "generated") == second

    # Back to the first text: served from the cache again, byte-identical.
    spec.write_text(SPEC)
    code, out, loaded = run(["build", "specs/one.gemm"], tmp_path, cache)
    assert (code, loaded) == (0, []), out
    assert tree(tmp_path / "generated") == first


def test_spec_with_errors_is_never_cached(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "bad.gemm").write_text(SPEC.replace("lhs bf16", "lhs bf61"))
    cache = tmp_path / "cache"
    for _ in range(2):
        code, out, loaded = run(["build", "specs/bad.gemm"], tmp_path, cache)
        assert code == 2
        assert "unknown dtype 'bf61'" in out and "did you mean 'bf16'" in out
        assert "lark" in loaded
    assert entries(cache) == []
    assert not (tmp_path / "generated").exists()


def test_every_generator_byte_is_in_the_key(tmp_path):
    pkg, tpl = tmp_path / "pkg", tmp_path / "tpl"
    (pkg / "sub").mkdir(parents=True)
    tpl.mkdir()
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.lark").write_text("start: A\n")
    (tpl / "t.j2").write_text("{{ x }}\n")

    def fp() -> str:
        build_cache.fingerprint.cache_clear()
        return build_cache.fingerprint((pkg, tpl), ("jinja2",))

    seen = {fp()}
    for path, text in ((pkg / "a.py", "x = 2\n"), (pkg / "sub" / "b.lark", "start: B\n"),
                       (tpl / "t.j2", "{{ y }}\n"), (tpl / "new.j2", ""),
                       (pkg / "sub" / "c.cuh", "// a runtime header\n")):
        path.write_text(text)
        seen.add(fp())
    (pkg / "sub" / "c.cuh").rename(pkg / "c.cuh")  # same bytes, another place
    seen.add(fp())
    assert len(seen) == 7
    # Compiled bytecode is not an input.
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert fp() in seen
    build_cache.fingerprint.cache_clear()


def test_corrupt_entry_is_rendered_again(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "one.gemm").write_text(SPEC)
    cache = tmp_path / "cache"
    assert run(["build", "specs/one.gemm"], tmp_path, cache)[0] == 0
    good = tree(tmp_path / "generated")
    (entry,) = entries(cache)
    for junk in (b"", b"\x80\x05garbage", entry.read_bytes()[:100]):
        entry.write_bytes(junk)
        shutil.rmtree(tmp_path / "generated")
        code, out, loaded = run(["build", "specs/one.gemm"], tmp_path, cache)
        assert code == 0, out
        assert "lark" in loaded
        assert tree(tmp_path / "generated") == good


def test_old_entries_are_pruned(tmp_path):
    (tmp_path / "specs").mkdir()
    spec = tmp_path / "specs" / "one.gemm"
    cache = tmp_path / "cache"
    for i in range(build_cache.KEEP_PER_STEM + 3):
        spec.write_text(SPEC + f"# revision {i}\n")
        assert run(["build", "specs/one.gemm"], tmp_path, cache)[0] == 0
    kept = entries(cache)
    assert len(kept) == build_cache.KEEP_PER_STEM
    assert all(p.name.startswith("one-") for p in kept)
    # The newest revision is among them: building it again loads nothing.
    assert run(["build", "specs/one.gemm"], tmp_path, cache)[2] == []
    manifest = json.loads((tmp_path / "generated" / "one" / "MANIFEST.json").read_text())
    assert manifest["kernels"] == ["mm"]


def test_key_covers_text_path_and_stem(tmp_path):
    """Generated headers name the spec's path and its folder is the stem, so
    the same text under another path or stem is another entry."""
    base = SpecFile(path=tmp_path / "one.gemm", root=tmp_path, display="specs/one.gemm",
                    source=SPEC, stem="one")
    variants = [base, replace(base, display="other/one.gemm"), replace(base, stem="two"),
                replace(base, source=SPEC + "\n"), replace(base, path=tmp_path / "x.gemm")]
    keys = [build_cache.key(v) for v in variants]
    assert len(set(keys[:4])) == 4
    assert keys[4] == keys[0]  # where the file sits on disk is not an input
