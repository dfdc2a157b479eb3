"""Spill warnings: `build` warns about a kernel whose tile spills on a
declared arch, from ptxas measurements kept in the resource cache
(gemmgen.harness.resources) that `explain`, `verify` and `build --resources`
fill; it never compiles anything itself, and its output does not change.

The tiles are the issue's: a 128x128x128 block-scaled W8A8 tile on the
mma.sync body spills on sm_90a (nvcc 13.0: 200 bytes; a fused gate-up
silu_mul variant 144), its 64x128x128 twin does not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gemmgen.cli import main
from gemmgen.harness import resources
from gemmgen.harness.toolchain import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")

SPEC = """\
target cuda {
  archs sm_90a
}

defaults {
  op dense
  lhs e4m3 [m, k]
  rhs e4m3 [n, k]
  out bf16
  lhs_scale per_token_group k=128 f32
  rhs_scale block n=128 k=128 f32
  backends cuda
}

# DeepSeek-style block-scaled W8A8 on the mma.sync body: spills on sm_90a.
kernel w8a8_block {
  tile m=128 n=128 k=128
  mma mma_sync
}

# Its 64-row twin: no spill.
kernel w8a8_small {
  tile m=64 n=128 k=128
  mma mma_sync
}
"""

GATE_UP = """\

# The fused gate-up variant: spills on sm_90a too.
kernel w8a8_gateup {
  epilogue silu_mul
  tile m=128 n=128 k=128
  mma mma_sync
}
"""

WARNING = re.compile(
    r"^specs/spill\.gemm:(\d+):(\d+): warning: kernel '(\w+)' spills registers on sm_90a "
    r"\((\w+): (\d+) bytes of spill stores and (\d+) of spill loads at (\d+) registers; "
    r"ptxas of nvcc (V[\d.]+)\): every spill is local-memory traffic", re.MULTILINE)


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "spill.gemm").write_text(SPEC)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEMMGEN_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _jobs(project: Path) -> dict[str, resources.Job]:
    from gemmgen.build import render_spec

    rendered = render_spec(project / "specs" / "spill.gemm")
    return {j.kernel.name: j for j in resources.jobs([rendered])}


def test_build_warns_from_a_recorded_measurement_and_writes_the_same_files(project, capsys):
    """No nvcc needed: a record in the cache is what build reads."""
    assert main(["build"]) == 0
    assert "warning" not in capsys.readouterr().err  # nothing measured yet
    before = _tree(project / "generated")
    jobs = _jobs(project)
    usage = {"registers": 128, "spill_stores": 96, "spill_loads": 104, "stack_frame": 96,
             "static_smem": 0, "barriers": 1, "constant_bytes": 500}
    resources.store(jobs["w8a8_block"],
                    resources.Record("sm_90a", "V13.0.88", {"w8a8_block": usage}))
    resources.store(jobs["w8a8_small"], resources.Record(
        "sm_90a", "V13.0.88", {"w8a8_small": {**usage, "spill_stores": 0, "spill_loads": 0}}))
    assert main(["build"]) == 0
    err = capsys.readouterr().err
    found = WARNING.findall(err)
    # Positioned at the kernel's name (line 16, column 8), with ptxas's figures.
    assert found == [("16", "8", "w8a8_block", "w8a8_block", "96", "104", "128", "V13.0.88")], err
    assert "    kernel w8a8_block {\n           ^" in err
    assert _tree(project / "generated") == before  # the warning changes no byte
    assert main(["check"]) == 0
    # Another tile is another .cu: the record no longer applies.
    spec = project / "specs" / "spill.gemm"
    spec.write_text(SPEC.replace("tile m=128 n=128 k=128", "tile m=128 n=64 k=128"))
    assert main(["build"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_record_is_named_by_what_nvcc_compiles(project):
    jobs = _jobs(project)
    block, small = jobs["w8a8_block"], jobs["w8a8_small"]
    assert block.key != small.key
    # The .cu and the copies of the runtime headers it includes, transitively.
    names = [name for name, _ in block.includes]
    assert "gg_runtime.cuh" in names and "gg_gemm.cuh" in names and names == sorted(names)
    # Its own header, and no other kernel's: an edit to w8a8_small keeps this record.
    assert "w8a8_block.h" in names and "w8a8_small.h" not in names
    changed = resources.Job(block.kernel, block.arch, block.source,
                            tuple((n, t + "\n") if n == "gg_gemm.cuh" else (n, t)
                                  for n, t in block.includes), block.spec_path)
    assert changed.key != block.key
    assert resources.Job(block.kernel, "sm_89", block.source, block.includes,
                         block.spec_path).key != block.key


def test_a_corrupt_record_is_no_record(project, capsys):
    job = _jobs(project)["w8a8_block"]
    resources.store(job, resources.Record("sm_90a", "V13.0.88", {"w8a8_block": {}}))
    path = next((project / "cache" / "resources").glob("*.json"))
    path.write_text("{not json")
    assert resources.lookup(job) is None
    assert main(["build"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_build_resources_without_nvcc_is_a_clear_error(project, capsys, monkeypatch):
    from gemmgen.harness import toolchain

    monkeypatch.setattr(toolchain, "find_nvcc", lambda: None)
    assert main(["build", "--resources"]) == 2
    err = capsys.readouterr().err
    assert "gemmgen: error: build --resources measures each CUDA kernel with nvcc, and no nvcc " \
           "was found" in err
    assert "Traceback" not in err
    assert not (project / "generated").exists()


def test_build_resources_with_a_broken_nvcc_is_a_clear_error(project, capsys, monkeypatch):
    monkeypatch.setenv("GEMMGEN_NVCC", "no-such-nvcc")
    assert main(["build", "--resources"]) == 2
    err = capsys.readouterr().err
    assert "gemmgen: error: cannot run no-such-nvcc: No such file or directory" in err
    assert "Traceback" not in err and "internal error" not in err


def test_nvcc_release():
    text = ("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, "
            "V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n")
    assert resources.nvcc_release(text) == "V13.0.88"


@needs_nvcc
def test_build_resources_measures_and_every_build_warns(project, capsys):
    """ptxas itself: the 128-row tile spills on sm_90a, the 64-row one does not."""
    assert main(["build", "--resources"]) == 0
    out, err = capsys.readouterr()
    assert re.search(r"^resources: 2 kernel x arch builds measured with nvcc V[\d.]+ \(.*\): 1 spill$",
                     out, re.MULTILINE), out
    found = WARNING.findall(err)
    assert [f[:3] for f in found] == [("16", "8", "w8a8_block")], err
    stores, loads = int(found[0][4]), int(found[0][5])
    assert stores > 0 and loads > 0
    # The next build compiles nothing and warns the same from the cache.
    assert main(["build"]) == 0
    assert WARNING.findall(capsys.readouterr().err) == found
    # explain reads the same record.
    assert main(["explain", "specs/spill.gemm", "w8a8_block"]) == 0
    out = capsys.readouterr().out
    assert f"ptxas sm_90a w8a8_block: 128 registers, {stores + loads} bytes spilled" in out
    assert "  warning: kernel 'w8a8_block' spills registers on sm_90a" in out
    assert main(["explain", "specs/spill.gemm", "w8a8_small"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"ptxas sm_90a w8a8_small: \d+ registers, 0 bytes spilled", out), out
    assert "warning" not in out


@needs_nvcc
@pytest.mark.slow
def test_the_gate_up_variant_spills_too(project, capsys):
    (project / "specs" / "spill.gemm").write_text(SPEC + GATE_UP)
    assert main(["build", "--resources"]) == 0
    found = WARNING.findall(capsys.readouterr().err)
    assert [f[2] for f in found] == ["w8a8_block", "w8a8_gateup"]


@needs_nvcc
@pytest.mark.slow
def test_verify_warns_and_does_not_fail(project, capsys):
    assert main(["verify", "specs/spill.gemm", "--backend", "cuda-emu"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^ptxas sm_90a w8a8_block: 128 registers, [1-9]\d* bytes spilled$", out,
                     re.MULTILINE)
    assert re.search(r"^ptxas sm_90a w8a8_small: \d+ registers, 0 bytes spilled$", out,
                     re.MULTILINE)
    assert [f[2] for f in WARNING.findall(out)] == ["w8a8_block"]
    assert ", 0 failed" in out
