"""`gemmgen verify` runs the kernels build would write and fails when one is wrong."""

from __future__ import annotations

from pathlib import Path


from gemmgen import backends
from gemmgen.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_verify_passes_and_prints_a_table(project, capsys):
    code = main(["verify", "specs/moe.gemm", "--kernel", "gmm_bf16_kn",
                 "--backend", "pallas-interpret", "--backend", "pallas-lower"])
    out, err = capsys.readouterr()
    assert code == 0, out
    assert out.splitlines()[0].split() == ["kernel", "backend", "case", "shapes", "tile", "max", "err",
                                           "max", "allowed", "result"]
    assert "512x1024x1024  " in out  # the tile each case ran (the spec's TPU-sized tile)
    assert "gmm_bf16_kn  pallas-interpret  sharded_existing_out" in out
    assert "lowered" in out and "4 passed, 0 failed" in out
    assert "[1/4] gmm_bf16_kn on pallas-interpret" in err  # progress


def test_verify_catches_a_wrong_kernel(project, capsys, monkeypatch):
    # A patch of the generator in this process is not an input of the render
    # cache (gemmgen.build_cache): render into a fresh cache.
    monkeypatch.setenv("GEMMGEN_CACHE", str(project / ".cache"))
    real = backends.module

    class Broken:
        def __init__(self, mod):
            self.mod = mod

        def __getattr__(self, name):
            return getattr(self.mod, name)

        def render(self, spec):
            files = self.mod.render(spec)
            # Plant a bug: every partial product 0.1% too large.
            return {p: t.replace("    return lax.dot_general(", "    return 1.001 * lax.dot_general(", 1)
                    if p.name == "gmm_bf16.py" else t for p, t in files.items()}

    monkeypatch.setattr(backends, "module", lambda b: Broken(real(b)))
    code = main(["verify", "specs/moe.gemm", "--kernel", "gmm_bf16", "--backend",
                 "pallas-interpret"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL gmm_bf16 on pallas-interpret" in out and "out of tolerance" in out


def test_verify_rejects_unknown_names(project, capsys):
    assert main(["verify", "specs/moe.gemm", "--backend", "tpu-silicon"]) == 2
    assert main(["verify", "specs/moe.gemm", "--kernel", "nope"]) == 2


TWO_LUTS = """\
target cuda {
  archs sm_80
}

target pallas_tpu {
  tpu v5e
}

# One LUT per backend: the CUDA tiles, and the TPU's own.
kernel dense_two_luts {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=64 n=64 k=32
  tile_rule m<=16 -> m=16 n=64 k=32
  tile pallas_tpu m=256 n=256 k=256
  tile_rule pallas_tpu m<=32 -> m=32 n=256 k=256
  tile_rule pallas_tpu n<=128 -> m=128 n=128 k=256
  backends pallas_tpu cuda
}
"""


def test_verify_runs_each_backend_on_its_own_lut(tmp_path, monkeypatch, capsys):
    """The Pallas cases cover every tile of the Pallas LUT and the CUDA cases
    every tile of the CUDA one (the CUDA runner also checks that the
    launcher picks the tile the table names); no case runs the other
    backend's tiles."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "lut2.gemm").write_text(TWO_LUTS)
    monkeypatch.chdir(tmp_path)
    code = main(["verify", "specs/lut2.gemm", "--backend", "pallas-interpret", "--backend",
                 "cuda-emu", "--no-resources"])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [line.split("  ") for line in out.splitlines() if line.startswith("dense_two_luts ")]
    tiles: dict[str, set[str]] = {}
    for row in rows:
        cells = [c.strip() for c in row if c.strip()]
        tiles.setdefault(cells[1], set()).add(cells[4])
    assert tiles == {
        "pallas-interpret": {"256x256x256 (default)", "32x256x256 (m <= 32)",
                             "128x128x256 (n <= 128)"},
        "cuda-emu": {"64x64x32 (default)", "16x64x32 (m <= 16)"},
    }, out
    assert "note:" not in out  # every entry of both LUTs ran
