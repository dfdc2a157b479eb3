"""`gemmgen explain`: the plan in words, with independently checked costs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gemmgen import ir
from gemmgen.build import render_spec
from gemmgen.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_explain_cuda_grouped(project, capsys):
    m, n, k, g = 1000, 512, 1024, 4
    assert main(["explain", "specs/moe.gemm", "moe_bf16_grouped_gemm", "--m", str(m), "--n",
                 str(n), "--k", str(k), "--groups", str(g)]) == 0
    out = capsys.readouterr().out
    assert f"FLOPs:      {2 * m * n * k / 1e9:.3f} GFLOP" in out
    # bf16 lhs, g bf16 weights, bf16 out.
    assert f"bytes:      {(2 * m * k + 2 * g * k * n + 2 * m * n) / 1e6:.3f} MB" in out
    # 128 x 128 tiles: n / 128 column tiles; cdiv(m, 128) + g work items at most.
    assert f"grid ({n // 128}, {-(-m // 128) + g}, 1), 256 threads" in out
    assert "moe_bf16_grouped_gemm_worklist: grid (1, 1, 1)" in out
    # sm_90a: the Hopper path, its bound at the wgmma rate, its plan and a
    # persistent grid of min(132 SMs, (cdiv(m, 128) + g) * cdiv(n, 128)) blocks.
    assert "16-bit wgmma (the sm_90a path)" in out
    assert "path per arch: sm_90a: wgmma (Hopper body)" in out
    assert ("wgmma path (sm_90a, on an H200 of 132 SMs): tile 128x128x64, 5 stages of 32768 bytes; "
            "384 threads") in out
    assert "wgmma m64n128k16, 64 rows each" in out  # 256 bits of K: 16 bf16
    assert "  sm_90a: wgmma (Hopper body) multiplies bf16: 790 TFLOP/s" in out
    tiles = (-(-m // 128) + g) * (n // 128)
    assert f"moe_bf16_grouped_gemm_sm90: grid ({min(132, tiles)}, 1, 1), 384 threads, 199760 bytes" in out


def _us(flops: float, moved: float, tflops: float) -> str:
    return f"{max(flops / (tflops * 1e12), moved / 4.3e12) * 1e6:.2f} us"


@pytest.fixture
def no_nvcc(monkeypatch):
    """The roofline needs no compiler: skip ptxas (tests/cli/test_spill_warnings.py
    covers explain's registers and spills)."""
    from gemmgen.harness import toolchain

    monkeypatch.setattr(toolchain, "find_nvcc", lambda: None)


def test_explain_fp8_bound_is_the_rate_of_the_path_that_runs(project, no_nvcc, capsys):
    """dense.gemm declares sm_89 and sm_90a. e4m3 x e4m3 [n, k] runs on FP8
    tensor cores on both: mma.sync (QMMA, the 8-bit rate) on sm_89, the
    Hopper body (wgmma) on sm_90a. moe.gemm's FP8 [g, k, n] kernel cannot
    take wgmma (FP8 B must be K-major): on sm_90a its mma.sync converts to
    f16 for HMMA (Hopper has FP8 only through wgmma), so its H200 bound is
    the f16 one."""
    m = n = k = 4096
    assert main(["explain", "specs/dense.gemm", "fp8_fp8_gemm_tile_128x128x64"]) == 0
    out = capsys.readouterr().out
    flops, moved = 2 * m * n * k, m * k + k * n + 2 * m * n  # e4m3 in, bf16 out
    assert (f"H200 bound: {_us(flops, moved, 1580)} (compute-bound; 1580 TFLOP/s 8-bit wgmma "
            "(the sm_90a path), 4.3 TB/s)") in out
    assert f"  sm_89: mma.sync multiplies e4m3: 1580 TFLOP/s -> {_us(flops, moved, 1580)}" in out
    assert (f"  sm_90a: wgmma (Hopper body) multiplies e4m3: 1580 TFLOP/s -> "
            f"{_us(flops, moved, 1580)}") in out
    assert "wgmma m64n128k32" in out
    assert main(["explain", "specs/moe.gemm", "moe_fp8_grouped_gemm_kn", "--groups", "1"]) == 0
    out = capsys.readouterr().out
    # e4m3 lhs and rhs, f32 per-token [m] and per-channel [1, n] scales, bf16 out.
    moved = m * k + k * n + 4 * m + 4 * n + 2 * m * n
    assert (f"H200 bound: {_us(flops, moved, 790)} (compute-bound; 790 TFLOP/s 16-bit mma.sync "
            "(the sm_90a path, FP8 converted to f16), 4.3 TB/s); mma.sync does not reach this "
            "rate") in out
    assert ("  sm_90a: mma.sync multiplies f16 (sm_90a has no FP8 mma.sync: ptxas converts e4m3 "
            f"to f16 for HMMA): 790 TFLOP/s -> {_us(flops, moved, 790)} (compute-bound); "
            "mma.sync does not reach the full tensor-core rate on Hopper") in out
    assert "1580 TFLOP/s 8-bit" not in out


def test_explain_int8_mma_sync_keeps_the_8bit_rate(project, no_nvcc, capsys):
    assert main(["explain", "specs/dense.gemm", "int8_gemm"]) == 0
    out = capsys.readouterr().out
    assert "1580 TFLOP/s 8-bit mma.sync (the sm_90a path), 4.3 TB/s); mma.sync does not" in out
    assert "  sm_89: mma.sync multiplies int8: 1580 TFLOP/s" in out
    assert "  sm_90a: mma.sync multiplies int8: 1580 TFLOP/s" in out


def test_the_fp8_bound_follows_uses_wgmma(monkeypatch):
    """Once an FP8 kernel takes the Hopper body (Kernel.uses_wgmma), its
    bound is the 8-bit wgmma rate, with no code naming FP8 here."""
    from gemmgen import explain, ir
    from gemmgen.build import load

    spec, _ = load(REPO / "specs" / "moe.gemm")
    kernel = spec.kernel("moe_fp8_grouped_gemm_kn")  # FP8 [g, k, n]: mma.sync on sm_90a
    assert explain.tensor_path(kernel, "sm_90a").multiplies is ir.DType.F16
    monkeypatch.setattr(ir.Kernel, "uses_wgmma", lambda self, arch: arch == "sm_90a")
    p = explain.tensor_path(kernel, "sm_90a")
    assert p.wgmma and p.multiplies is ir.DType.E4M3 and p.tflops == 1580 and not p.below_peak
    lines = explain.roofline(kernel, 2 * 4096**3, 4096**2 * 4, archs=("sm_89", "sm_90a"))
    assert "1580 TFLOP/s 8-bit wgmma (the sm_90a path), 4.3 TB/s)" in lines[3]
    assert lines[-1].startswith("  sm_90a: wgmma (Hopper body) multiplies e4m3: 1580 TFLOP/s")
    # No arch an H200 runs: the bound says so.
    lines = explain.roofline(kernel, 2 * 4096**3, 4096**2 * 4, archs=("sm_89",))
    assert lines[3].endswith("no declared arch runs on an H200 (compute capability 9.0)")


def test_explain_pallas_and_unknown_kernel(project, capsys):
    assert main(["explain", "specs/moe.gemm", "gmm_bf16_lut", "--m", "32"]) == 0
    out = capsys.readouterr().out
    assert "pallas_tpu (v5e): tile m=64 n=1024 k=1024" in out  # the LUT's m<=64 rule
    assert main(["explain", "specs/moe.gemm", "gmm_bf61"]) == 2
    assert "did you mean 'gmm_bf16'" in capsys.readouterr().err


def test_explain_pallas_grouped_grid_counts_work_items(project, capsys):
    """The grouped grid's middle axis is the work list, not the m tiles: 128
    groups over 16384 rows at tm=128 visit 128 to 255 (group, m tile) pairs,
    128 when every group is 128 rows; 100 equal groups of 163-164 rows over
    tm=512 visit each group's tiles from its first row's to its last row's."""
    assert main(["explain", "specs/moe.gemm", "gmm_bf16_out", "--m", "16384", "--n", "1536",
                 "--k", "2048", "--groups", "128"]) == 0
    out = capsys.readouterr().out
    assert "tile m=128 n=1536 k=2048" in out  # the tuned v5e rule
    assert "grid ~ (1, 128..255, 1) (n tiles, work items" in out
    assert "128 for 128 equal groups, at most cdiv(m, tm) + g - 1 = 255" in out
    assert main(["explain", "specs/moe.gemm", "gmm_bf16_kn", "--m", "16384", "--n", "256",
                 "--k", "256", "--groups", "100"]) == 0
    out = capsys.readouterr().out
    sizes = [164] * 84 + [163] * 16
    starts = [sum(sizes[:i]) for i in range(100)]
    want = sum((s + c - 1) // 512 - s // 512 + 1 for s, c in zip(starts, sizes))
    assert "tile m=512 " in out and f"{want} for 100 equal groups" in out
    assert "at most cdiv(m, tm) + g - 1 = 131" in out and want == 131  # every split inside a tile


def test_explain_pallas_grouped_grid_with_more_groups_than_m_tiles(project, capsys):
    """Issue 42: 128 groups over 32 m tiles once read "a grid of 32 m tiles
    for 128 groups"; the middle axis is the work list, 32 to 32 + 128 - 1
    items (each group boundary inside a tile adds one), 128 for equal groups
    of 32 rows (each inside one tile)."""
    m, tm, g = 4096, 128, 128
    assert main(["explain", "specs/moe.gemm", "gmm_bf16_out", "--m", str(m), "--n", "1536",
                 "--k", "2048", "--groups", str(g)]) == 0
    out = capsys.readouterr().out
    assert f"tile m={tm} n=1536 k=2048" in out  # the tuned v5e rule
    tiles = m // tm
    assert f"grid ~ (1, {tiles}..{tiles + g - 1}, 1) (n tiles, work items" in out
    assert f"{g} for {g} equal groups, at most cdiv(m, tm) + g - 1 = {tiles + g - 1}" in out
    assert "m tiles for" not in out


def test_explain_pallas_states_the_aliasing_saving(project, capsys):
    m, n, k = 1000, 512, 1024
    assert main(["explain", "specs/moe.gemm", "gmm_bf16", "--m", str(m), "--n", str(n), "--k",
                 str(k), "--groups", "4"]) == 0
    out = capsys.readouterr().out
    # f32 out [m, n]: the select pass read out and existing_out and wrote the
    # result (3 m n 4 bytes); the kernel reads existing_out's visited blocks
    # instead (at most m n 4 bytes): 2 m n 4 bytes saved.
    assert (f"existing_out is aliased into the output (input_output_aliases): saves "
            f"{2 * m * n * 4} bytes of HBM traffic per call") in out
    assert f"({3 * m * n * 4} bytes: read out and existing_out, write the result)" in out
    # silu_mul halves the output columns.
    assert main(["explain", "specs/moe.gemm", "moe_w8a8_gateup_silu", "--m", str(m), "--n",
                 str(n), "--k", str(k)]) == 0
    assert f"saves {2 * m * (n // 2) * 2} bytes" in capsys.readouterr().out
    # Dense kernels have no existing_out.
    assert main(["explain", "specs/dense.gemm", "dense_bf16_out_f32", "--m", "64"]) == 0
    assert "existing_out" not in capsys.readouterr().out


def test_explain_counters_of_quantize(project, capsys):
    # One run at m=64, k=512 (4 groups of 128 per row): 256 groups, 2 per
    # warp (16 lanes of 8 elements each). Per warp request: 2 x 16 lanes x
    # 16 bytes of bf16 loaded = 512 contiguous bytes = 16 sectors; 2 x 16 x 8
    # FP8 bytes stored = 8 sectors; 2 f32 scales (lanes 0 and 16) = 1 sector.
    assert main(["explain", "specs/dense.gemm", "per_token_group_quant_fp8_out_scale_f32",
                 "--counters"]) == 0
    out = capsys.readouterr().out
    assert "emulator counters, one run at m=64 n=512 k=512" in out
    assert "ld.global              128 warp requests, 2048 sectors (ideal 2048, 100% efficient)" in out
    assert "st.global              256 warp requests, 1152 sectors (ideal 1152, 100% efficient)" in out
    assert "shared" not in out.split("emulator counters")[1]


def test_explain_counters_of_an_fp4_kernel_of_a_b200_only_spec(project, capsys):
    """specs/b200.gemm declares sm_100a alone: an fp4 kernel's counters run
    its block-scaled tcgen05 body on an emulated sm_100a (no mma.sync form
    takes fp4, and the spec builds no sm_120a path; this was an internal
    error, the mma.sync entry's trap). At m = n = 256 the bf16 output is
    256 x 256 x 2 bytes = 4096 sectors, each stored once."""
    assert main(["explain", "specs/b200.gemm", "b200_mxfp4_gemm", "--counters"]) == 0
    out = capsys.readouterr().out
    assert ("emulator counters of the block-scaled path (an emulated sm_100a), one run at "
            "m=256 n=256 k=512") in out
    assert "counters of b200_mxfp4_gemm_t2_sm100: grid (4, 1, 1), block (192, 1, 1)" in out
    assert "st.global              256 warp requests, 4096 sectors (ideal 4096, 100% efficient)" in out


@pytest.mark.slow
def test_docs_counters_table_is_current():
    import subprocess
    import sys

    doc = (REPO / "docs" / "cuda-emulation.md").read_text()
    cxx = subprocess.run(["g++", "-dumpfullversion"], capture_output=True, text=True).stdout.strip()
    if f"Measured with g++ {cxx}." not in doc:
        pytest.skip(f"the table was measured with another g++ than {cxx}")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "counters_table.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------
# Grids as data: the launch plan's expressions evaluated by explain, printed
# as C++ (<name>_launches) and as Python (launches()), on shapes whose grids
# are computed here by hand.

GRID_CASES = [
    # (spec, kernel, dims, [(entry, grid)] computed by hand)
    # tgmm, 128 x 128 output blocks per local group: (cdiv(k, 128), cdiv(n, 128), g).
    ("moe", "moe_bf16_grad_rhs", dict(m=1000, n=200, k=300, num_groups=3, group_offset=0),
     [("moe_bf16_grad_rhs", (3, 2, 3))]),
    # GEMV, 256 threads = 8 warps of 2 output columns: cdiv(n, 16) blocks; k % 8 == 0.
    ("dense", "dense_gemv_bf16", dict(m=1, n=1000, k=64), [("dense_gemv_bf16", (63, 1, 1))]),
    ("dense", "dense_gemv_bf16", dict(m=1, n=1000, k=63),
     [("dense_gemv_bf16_unaligned_k", (63, 1, 1))]),
    # quantize, G = 128 and 8 bf16 per 16-byte load: 16 lanes a group, 2 groups a warp,
    # 16 groups a block: cdiv(m * cdiv(k, 128), 16) blocks.
    ("dense", "per_token_group_quant_fp8_out_scale_f32", dict(m=100, k=1000),
     [("per_token_group_quant_fp8_out_scale_f32", (50, 1, 1))]),
    # ... folded over grid y past 2^31 - 1 blocks: 2^25 rows of 1024 groups, 2^31 blocks.
    ("dense", "per_token_group_quant_fp8_out_scale_f32", dict(m=2**25, k=2**17),
     [("per_token_group_quant_fp8_out_scale_f32", (2**31 - 1, 2, 1))]),
]


def _plan(stem: str, name: str):
    from gemmgen.backends import cuda
    from gemmgen.build import load

    spec, _ = load(REPO / "specs" / f"{stem}.gemm")
    return spec, cuda.plan(spec.kernel(name), spec)


@pytest.mark.parametrize("stem, name, dims, want", GRID_CASES)
def test_grid_expressions_evaluate_to_the_hand_computed_grids(stem, name, dims, want):
    _, lp = _plan(stem, name)
    env = lp.env(dims)
    steps = lp.variant_for(env).steps
    assert [(s.entry, s.grid.eval(env)) for s in steps] == want


@pytest.mark.parametrize("stem, name, dims, want", GRID_CASES)
def test_the_python_launcher_prints_the_same_grids(stem, name, dims, want):
    from gemmgen.harness.runner import load_generated_module

    _, lp = _plan(stem, name)
    launcher = load_generated_module(REPO / "generated" / stem / "cuda" / f"{name}.py",
                                     f"test_explain_grid_{name}")
    got = launcher.launches(lp.env(dims))
    assert [(s.entry, s.grid) for s in got] == want


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
def test_the_cpp_header_prints_the_same_grids(tmp_path):
    import subprocess

    from gemmgen.harness.toolchain import cuda_include_dir

    lines = [f'#include "{name}.h"' for name in sorted({c[1] for c in GRID_CASES})]
    lines += ["#include <cstdio>", "int main() {"]
    for i, (stem, name, dims, _) in enumerate(GRID_CASES):
        _, lp = _plan(stem, name)
        lines.append(f"  {{  // case {i}")
        lines.append(f"    {lp.args_struct} a;")
        lines += [f"    a.{d} = {v};" for d, v in dims.items() if d in lp.names]
        if "g" in lp.dims and "g" not in dims:
            lines.append(f"    a.g = {lp.env(dims)['g']};")
        lines.append(f"    GgLaunch l[{lp.max_steps}];")
        lines.append(f"    const int count = {name}_launches(a, l);")
        lines.append("    for (int i = 0; i < count; ++i)")
        lines.append(f'      std::printf("{i} %s %lld %lld %lld\\n", l[i].entry, l[i].grid[0], '
                     "l[i].grid[1], l[i].grid[2]);")
        lines.append("  }")
    lines.append("}")
    (tmp_path / "main.cc").write_text("\n".join(lines) + "\n")
    includes = [f"-I{REPO / 'generated' / stem / 'cuda'}" for stem in ("dense", "moe")]
    exe = tmp_path / "main"
    proc = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", *includes,
                           f"-I{cuda_include_dir()}", str(tmp_path / "main.cc"), "-o", str(exe)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    got: dict[int, list] = {}
    for line in out.splitlines():
        i, entry, *grid = line.split()
        got.setdefault(int(i), []).append((entry, tuple(int(v) for v in grid)))
    assert got == {i: want for i, (*_, want) in enumerate(GRID_CASES)}


def test_explain_a_dispatcher_names_each_arm_path_and_the_pick(project, no_nvcc, capsys):
    """An M dispatcher: each arm's body per declared arch (dense.gemm: sm_89,
    sm_90a and sm_100a), the arm m picks, then that kernel explained; an unknown
    name suggests dispatchers too."""
    assert main(["explain", "specs/dense.gemm", "dense_mm_bf16", "--m", "4"]) == 0
    out = capsys.readouterr().out
    assert ("  else           -> dense_gemm_bf16 (tile; sm_89: mma.sync, sm_90a: wgmma, "
            "sm_100a: tcgen05)") in out
    assert ("  when m <= 8    -> dense_gemv_batched_bf16 (gemv_batched; every arch: the "
            "gemv_batched body)  <- m=4") in out
    assert "\ndense_gemv_batched_bf16: dense lhs bf16" in out
    assert main(["explain", "specs/dense.gemm", "dense_mm_bf16", "--m", "4096"]) == 0
    out = capsys.readouterr().out
    assert ("-> dense_gemm_bf16 (tile; sm_89: mma.sync, sm_90a: wgmma, sm_100a: tcgen05)  "
            "<- m=4096") in out
    assert "wgmma path (sm_90a" in out and "tcgen05 path (sm_100a" in out
    assert main(["explain", "specs/dense.gemm", "dense_mm_bf61"]) == 2
    assert "did you mean 'dense_mm_bf16'" in capsys.readouterr().err


def test_dispatcher_files_state_each_arm_path():
    text = (REPO / "generated" / "dense" / "cuda" / "dense_mm_bf16.h").read_text()
    assert ("//   else           -> dense_gemm_bf16 (tile, specs/dense.gemm)\n"
            "//                     sm_89: mma.sync, sm_90a: wgmma, sm_100a: tcgen05\n") in text
    py = (REPO / "generated" / "dense" / "cuda" / "dense_mm_bf16.py").read_text()
    assert "                      sm_89: mma.sync, sm_90a: wgmma, sm_100a: tcgen05\n" in py


# ---------------------------------------------------------------------------
# What a new user meets: help for every shape option, the launchers'
# conditions stated and checked, --counters at the shape asked.

def test_every_shape_option_has_help(capsys):
    from gemmgen.cli import build_parser

    explain = next(a for a in build_parser()._subparsers._group_actions[0].choices.items()
                   if a[0] == "explain")[1]
    helps = {a.option_strings[0]: a.help for a in explain._actions if a.option_strings}
    for option in ("--m", "--n", "--k", "--groups"):
        assert helps[option], option
    row = next(line for line in (REPO / "README.md").read_text().splitlines()
               if line.startswith("| `gemmgen explain"))
    assert all(o in row for o in ("--m", "--n", "--k", "--groups", "--counters"))


def test_explain_states_and_checks_the_launchers_conditions(project, no_nvcc, capsys):
    from gemmgen.backends import cuda
    from gemmgen.build import load

    spec, _ = load(REPO / "specs" / "dense.gemm")
    kernel = "fp8_fp8_gemm_tile_64x128x64"
    checks = cuda.plan(spec.kernel(kernel), spec).checks
    assert main(["explain", "specs/dense.gemm", kernel, "--k", "2001"]) == 0
    out = capsys.readouterr().out
    k16 = next(c for c in checks if c.cond.py == "k % 16 == 0")
    assert f"refused: the launchers refuse this shape: {k16.message} (k % 16 == 0)" in out
    for c in checks:  # every condition of the plan, stated once
        assert out.count(f"  {c.cond.py}: {c.message}") == 1
    assert f"  k % 16 == 0: {k16.message}  <- not met at this shape" in out
    assert main(["explain", "specs/dense.gemm", kernel, "--k", "2048"]) == 0
    out = capsys.readouterr().out
    assert "refused:" not in out and "not met" not in out and f"  k % 16 == 0: {k16.message}" in out


def test_explain_refuses_negative_dims(project, capsys):
    assert main(["explain", "specs/dense.gemm", "dense_gemm_bf16", "--n", "-5"]) == 2
    assert "--n -5: must be positive" in capsys.readouterr().err


@pytest.mark.slow  # an emulator run; counters_at's choice is tested unmarked below
def test_counters_run_at_the_asked_shape(project, no_nvcc, capsys):
    assert main(["explain", "specs/dense.gemm", "dense_gemm_bf16", "--m", "64", "--n", "256",
                 "--k", "256", "--counters"]) == 0
    out = capsys.readouterr().out
    assert "one run at m=64 n=256 k=256 (the asked m=64, n=256, k=256;" in out
    # 64 x 256: one 128-row m tile, two 128-column n tiles.
    assert "counters of dense_gemm_bf16: grid (2, 1, 1)" in out


def test_counters_say_why_not_at_the_asked_shape():
    from gemmgen.build import load
    from gemmgen.explain import counters_at, counters_case

    spec, _ = load(REPO / "specs" / "dense.gemm")
    kernel = spec.kernel("dense_gemm_bf16")
    case, note = counters_at(spec, kernel, {"m": 64}, 8)
    assert (case.m, case.n, case.k) == (64, counters_case(kernel).n, counters_case(kernel).k)
    assert note == "the asked m=64; n, k modest"
    case, note = counters_at(spec, kernel, {"m": 4096, "n": 4096, "k": 4096}, 8)
    assert case == counters_case(kernel)
    assert note.startswith("not at the asked m=4096, n=4096, k=4096: m=4096 n=4096 k=4096 is "
                           "6.9e+10 multiply-adds, too many for the CPU emulator")
    fp8 = spec.kernel("fp8_fp8_gemm_tile_64x128x64")
    case, note = counters_at(spec, fp8, {"k": 2001}, 8)
    assert case == counters_case(fp8)
    assert "the launchers refuse m=" in note and "(k % 16 == 0)" in note
    case, note = counters_at(spec, kernel, {}, 8)
    assert case == counters_case(kernel) and note.startswith("a modest shape")


def test_explain_gives_each_backend_its_own_tile(tmp_path, monkeypatch, no_nvcc, capsys):
    """A kernel with a Pallas tile of its own: the Pallas plan uses it, the
    CUDA plan the shared LUT (docs/spec.md, "A tile per backend")."""
    (tmp_path / "both.gemm").write_text(
        "target cuda {\n  archs sm_80\n}\n\ntarget pallas_tpu {\n  tpu v5e\n}\n\n"
        "kernel dense_both {\n  op dense\n  lhs bf16 [m, k]\n  rhs bf16 [n, k]\n  out bf16\n"
        "  tile m=64 n=128 k=128\n  tile pallas_tpu m=512 n=1024 k=512\n"
        "  tile_rule pallas_tpu m<=64 -> m=64 n=1024 k=512\n  backends pallas_tpu cuda\n}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["explain", "both.gemm", "dense_both", "--m", "4096", "--n", "4096", "--k",
                 "4096"]) == 0
    out = capsys.readouterr().out
    assert "(pallas_tpu: tile 512x1024x512 +1 tile rule)" in out  # the kernel line
    assert "pallas_tpu (v5e): tile m=512 n=1024 k=512" in out
    assert "grid ~ (4, 8, 8)" in out  # n / 1024, m / 512, k / 512
    assert "cuda (sm_80): tile 64x128x128" in out
    assert main(["explain", "both.gemm", "dense_both", "--m", "16"]) == 0
    assert "pallas_tpu (v5e): tile m=64 n=1024 k=512" in capsys.readouterr().out


# ---------------------------------------------------------------------------
# explain --device: the roofline on the user's GPU or TPU, from a cited table.

def test_explain_bounds_on_the_device_asked(project, no_nvcc, capsys):
    from gemmgen.devices import DEVICES

    assert main(["explain", "specs/dense.gemm", "fp8_fp8_gemm_tile_64x128x64", "--device",
                 "h100"]) == 0
    out = capsys.readouterr().out
    # wgmma's FP8 rate of the H100's datasheet, not the H200's measured one.
    assert DEVICES["h100"].tflops8 == 1978.9
    assert "H100 bound: " in out and "1979 TFLOP/s 8-bit wgmma (the sm_90a path), 3.35 TB/s" in out
    assert "device: H100 (--device h100; rates: NVIDIA H100 datasheet" in out
    assert "H200" not in out.split("cuda (")[0]
    # A TPU runs the Pallas kernel: its MXU rate and HBM, no CUDA path.
    assert main(["explain", "specs/moe.gemm", "gmm_bf16", "--device", "v6e"]) == 0
    out = capsys.readouterr().out
    assert "TPU v6e bound: " in out and "918 TFLOP/s 16-bit MXU, 1.64 TB/s" in out
    assert "bound per declared arch" not in out


def test_explain_defaults_to_a_device_the_spec_runs_on(project, no_nvcc, capsys):
    # A CUDA kernel of a spec declaring sm_90a: an H200, as before --device.
    assert main(["explain", "specs/dense.gemm", "int8_gemm"]) == 0
    assert "\nH200 bound: " in capsys.readouterr().out
    # A Pallas-only kernel: the spec's own TPU (moe.gemm targets a v5e).
    assert main(["explain", "specs/moe.gemm", "gmm_bf16_out"]) == 0
    out = capsys.readouterr().out
    assert "TPU v5e bound: " in out and "H200" not in out


def test_explain_an_unknown_device_is_bad_input(project, capsys):
    assert main(["explain", "specs/dense.gemm", "int8_gemm", "--device", "h10"]) == 2
    err = capsys.readouterr().err
    assert "unknown device 'h10'; did you mean 'h100'?" in err and "v5e" in err


def test_a_device_runs_its_own_arch_or_a_compatible_one():
    from gemmgen.devices import DEVICES, runs_arch

    assert runs_arch(DEVICES["h200"], ("sm_89", "sm_90a")) == "sm_90a"
    assert runs_arch(DEVICES["h200"], ("sm_89",)) is None  # SASS runs within its major only
    assert runs_arch(DEVICES["gb10"], ("sm_80", "sm_120")) == "sm_120"  # 12.1 runs sm_120 code
    assert runs_arch(DEVICES["a100"], ("sm_86",)) is None  # not on an older minor
    assert runs_arch(DEVICES["v5e"], ("sm_90a",)) is None


def test_counters_case_of_a_masked_kernel_draws_its_inputs():
    """The masked layout takes masked_m (each group's valid rows), not group
    sizes: the counters' case must be one its inputs can be drawn for."""
    from gemmgen.explain.counters import counters_case

    kernel = render_spec(REPO / "specs" / "moe.gemm").spec.kernel("moe_fp8_masked_gemm")
    case = counters_case(kernel)
    t = kernel.for_backend(ir.Backend.CUDA).tile
    assert case.group_sizes is None and case.masked_m == (2 * t.m, 2 * t.m) and case.m == 2 * t.m
    inputs = case.inputs(kernel.for_backend(ir.Backend.CUDA), 0)
    assert inputs["lhs"].shape == (2, 2 * t.m, case.k)


def test_explain_v7x_rates_follow_what_the_kernel_multiplies(project, no_nvcc, capsys):
    """On a TPU v7x the Pallas kernels feed FP8 x FP8 to the MXU (8-bit
    rate); int8 goes at the bf16 rate there (Mosaic widens integer operands
    for that generation), while a v5e multiplies int8 at its 8-bit rate."""
    from gemmgen.devices import DEVICES

    assert main(["explain", "specs/moe.gemm", "moe_fp8_grouped_gemm_kn", "--device", "v7x"]) == 0
    assert "4614 TFLOP/s 8-bit MXU" in capsys.readouterr().out
    assert main(["explain", "specs/dense.gemm", "int8_gemm", "--device", "v7x"]) == 0
    assert "2307 TFLOP/s 16-bit MXU" in capsys.readouterr().out
    assert main(["explain", "specs/dense.gemm", "int8_gemm", "--device", "v5e"]) == 0
    assert "394 TFLOP/s 8-bit MXU" in capsys.readouterr().out
    assert not DEVICES["v7x"].int8 and DEVICES["v5e"].int8 and not DEVICES["v5e"].fp8


def test_explain_says_what_the_mxu_multiplies(tmp_path, monkeypatch, no_nvcc, capsys):
    """The Pallas plan names the MXU's operand type: FP8 on a v7x, bf16 for
    MXFP8 there (its scaled values) and for both on a v6e; the v7x bound
    follows (MXFP8 at the 16-bit rate)."""
    kernels = (
        "kernel fp8 {\n  op dense\n  lhs e4m3 [m, k]\n  rhs e5m2 [n, k]\n  out bf16\n"
        "  tile m=128 n=128 k=256\n  backends pallas_tpu\n}\n\n"
        "kernel mxfp8 {\n  op dense\n  lhs e4m3 [m, k]\n  rhs e4m3 [n, k]\n  out bf16\n"
        "  lhs_scale per_token_group k=32 e8m0\n  rhs_scale block n=1 k=32 e8m0\n"
        "  tile m=128 n=128 k=256\n  backends pallas_tpu\n}\n")
    for tpu in ("v7x", "v6e"):  # one project each: kernel names are unique in a project
        (tmp_path / tpu).mkdir()
        target = f"target pallas_tpu {{\n  tpu {tpu}\n}}\n\n"
        (tmp_path / tpu / "t.gemm").write_text(target + kernels)
    monkeypatch.chdir(tmp_path / "v7x")
    assert main(["explain", "t.gemm", "fp8"]) == 0
    assert "  MXU: FP8 as stored (the chip's MXU multiplies FP8)" in capsys.readouterr().out
    assert main(["explain", "t.gemm", "mxfp8"]) == 0
    out = capsys.readouterr().out
    assert "  MXU: bf16 (every operand converts to it exactly)" in out
    assert "2307 TFLOP/s 16-bit MXU" in out
    monkeypatch.chdir(tmp_path / "v6e")
    for name in ("fp8", "mxfp8"):
        assert main(["explain", "t.gemm", name]) == 0
        assert "  MXU: bf16 (every operand converts to it exactly)" in capsys.readouterr().out


def test_explain_pallas_names_weights_off_the_lane_grid(project, capsys):
    """GPT-OSS's k = 2880 on lanes ([g, n, k] weights): explain says XLA
    relays them out every call and what to do; [g, k, n] weights at the same
    shape (n = 5760 on lanes) and [g, n, k] at k = 3072 get no such line."""
    def explain(name, n, k):
        assert main(["explain", "specs/moe.gemm", name, "--m", "8192", "--n", str(n), "--k",
                     str(k), "--groups", "32"]) == 0
        return capsys.readouterr().out

    out = explain("gmm_bf16_out", 5760, 2880)
    assert "HBM: the weights' rows (k = 2880) are not whole 128-lane tiles" in out
    assert "store them [g, k, n] or pad k to a multiple of 128" in out
    assert "HBM:" not in explain("gmm_bf16_kn_out", 5760, 2880)
    assert "HBM:" not in explain("gmm_bf16_out", 5760, 3072)
    out = explain("gmm_bf16_kn_out", 2944, 2048)  # n on lanes, k whole sublane tiles
    assert "HBM: the weights' rows (n = 2944) are not whole" not in out  # 2944 = 23 * 128
    out = explain("gmm_bf16_kn_out", 2880, 2048)
    assert "(n = 2880)" in out and "store them [g, n, k] or pad n" in out
