"""scripts/gpu_bench.py without a GPU: it imports, answers --help, and its
DeepSeek-V3 rows are the shapes issue 14 lists, on the kernels of specs/,
beside DeepGEMM's published H800 figures (checked against the traffic they
imply, so a mistyped figure shows); its sm_12x rows (step 5, issue 27) run
on the kernels of specs/gb10.gemm, only on compute capability 12.x, and
its whole flow runs on an emulated GB10."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from gemmgen import ir

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gpu_bench_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dense_rows_are_the_issue_shapes(bench):
    shapes = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
    assert list(bench.DEEPSEEK_DENSE) == [(m, n, k) for m in (64, 128, 4096) for n, k in shapes]


def test_the_grouped_rows_are_deepgemms(bench):
    nk = [(4096, 7168), (7168, 2048)]
    assert list(bench.DEEPSEEK_CONTIGUOUS) == [(g, m, n, k) for g, m in ((4, 8192), (8, 4096))
                                               for n, k in nk]
    assert list(bench.DEEPSEEK_MASKED) == [(g, m, n, k) for g, m in ((1, 1024), (2, 512), (4, 256))
                                           for n, k in nk]
    assert bench.DEEPGEMM_SOURCE == "DeepGEMM README (H800)"


def test_each_published_figure_pair_implies_the_same_time(bench):
    """DeepGEMM counts FP8 A and B and bf16 D once: TFLOP/s and GB/s of one
    row must describe one run time (within the rounding of the figures)."""
    rows = [(1, m, n, k, v) for (m, n, k), v in bench.DEEPSEEK_DENSE.items()]
    rows += [(g, m, n, k, v) for (g, m, n, k), v in bench.DEEPSEEK_CONTIGUOUS.items()]
    rows += [(g, m, n, k, v) for (g, m, n, k), v in bench.DEEPSEEK_MASKED.items()]
    for g, m, n, k, (tflops, gbps) in rows:
        rows_total = g * m
        seconds = 2 * rows_total * n * k / (tflops * 1e12)
        moved = rows_total * k + g * n * k + 2 * rows_total * n
        assert moved / seconds / 1e9 == pytest.approx(gbps, rel=0.01), (g, m, n, k)


def test_the_rows_run_on_the_block_scaled_kernels_of_specs(bench):
    specs = bench._specs()
    plan, skipped = bench.deepseek_plan(specs)
    dense = [r for r in plan if r["layout"] == "dense"]
    contiguous = [r for r in plan if r["layout"] == "contiguous"]
    assert len(dense) == 18 and len(contiguous) == 4
    for r in dense + contiguous:
        k = specs[r["spec"]].kernel(r["kernel"])
        assert ir.Backend.CUDA in k.backends
        assert k.lhs.dtype is ir.DType.E4M3 and k.rhs_operand.dtype is ir.DType.E4M3
        assert k.lhs_scale.mode is ir.ScaleMode.TOKEN_GROUP and k.lhs_scale.block_k == 128
        assert k.rhs_scale.mode is ir.ScaleMode.BLOCK and k.rhs_scale.dtype is ir.DType.F32
        assert (k.rhs_scale.block_n, k.rhs_scale.block_k) == (128, 128)
    assert {specs[r["spec"]].kernel(r["kernel"]).op for r in contiguous} == {ir.Op.GROUPED}
    if bench.find_masked_kernel(specs) is None:
        assert skipped == [("masked: no FP8 CUDA kernel of specs/ has the masked grouped layout, "
                            "so the 6 masked rows are not run")]
        assert not [r for r in plan if r["layout"] == "masked"]


def test_masked_rows_follow_a_masked_kernel_when_there_is_one(bench):
    """The script finds the masked layout by the IR's `masked` field."""
    base = bench._specs()["moe"].kernel("moe_w8a8_grouped_gemm")
    assert not bench.is_masked(base)
    masked = dataclasses.replace(bench._specs()["moe"].kernel("moe_fp8_masked_gemm"),
                                 name="moe_masked")
    contiguous = dataclasses.replace(base, name="moe_contig")
    assert bench.is_masked(masked) and not bench.is_masked(contiguous)

    class Spec:
        kernels = (contiguous, masked)

        def kernels_for(self, backend):
            return self.kernels

    # A masked kernel of its own is picked up...
    plan, skipped = bench.deepseek_plan({"extra": Spec()})
    rows = [r for r in plan if r["layout"] == "masked"]
    assert [(r["groups"], r["m_per_group"], r["n"], r["k"]) for r in rows] == \
        list(bench.DEEPSEEK_MASKED)
    assert {(r["spec"], r["kernel"]) for r in rows} == {("extra", "moe_masked")}
    assert not [s for s in skipped if s.startswith("masked")]
    # ... and specs/moe.gemm's own (moe_fp8_masked_gemm) runs the masked rows.
    plan, skipped = bench.deepseek_plan(bench._specs())
    rows = [r for r in plan if r["layout"] == "masked"]
    assert {(r["spec"], r["kernel"]) for r in rows} == {("moe", "moe_fp8_masked_gemm")}
    assert len(rows) == len(bench.DEEPSEEK_MASKED)


def test_help_and_list_need_no_gpu():
    env_run = {"capture_output": True, "text": True, "cwd": ROOT, "timeout": 120}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], **env_run, check=False)
    assert proc.returncode == 0 and "--deepseek-only" in proc.stdout
    proc = subprocess.run([sys.executable, str(SCRIPT), "--list-deepseek"], **env_run, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["dense", "64x2112x7168",
                                    "fp8_gemm_blockscaled_lhs_scale_f32_rhs_scale_f32"]
    assert "(DeepGEMM README (H800): 206 TFLOP/s, 1688 GB/s)" in lines[0]
    assert any(line.startswith("contiguous 4 x 8192 rows, n=4096 k=7168") for line in lines)


def test_deepseek_inputs_have_the_row_shapes(bench):
    """The inputs a row is timed on (small stand-ins for its dims)."""
    import numpy as np

    specs = bench._specs()
    rng = np.random.default_rng(0)
    dense = specs["dense"].kernel(bench.DEEPSEEK_DENSE_KERNEL[1])
    inputs, m, g = bench.deepseek_inputs(
        dense, {"groups": 0, "m_per_group": 64, "n": 384, "k": 512}, rng)
    assert (m, g) == (64, 0)
    assert inputs["lhs"].shape == (64, 512) and inputs["rhs"].shape == (384, 512)
    assert inputs["lhs_scale"].shape == (64, 4) and inputs["rhs_scale"].shape == (3, 4)
    grouped = specs["moe"].kernel(bench.DEEPSEEK_CONTIGUOUS_KERNEL[1])
    inputs, m, g = bench.deepseek_inputs(
        grouped, {"groups": 3, "m_per_group": 128, "n": 256, "k": 256}, rng)
    assert (m, g) == (384, 3)
    assert inputs["lhs"].shape == (384, 256) and inputs["rhs"].shape == (3, 256, 256)
    assert inputs["group_sizes"].tolist() == [128, 128, 128]


def test_sm12x_rows_are_selected_by_compute_capability_12(bench):
    assert [sm for sm in (80, 89, 90, 100, 103, 120, 121) if bench.is_sm12x(sm)] == [120, 121]
    assert bench.sm12x_device(121).name == "gb10" and bench.sm12x_device(121).tbps == 0.273
    assert bench.sm12x_device(120, "NVIDIA GeForce RTX 5090").name == "rtx5090"
    assert bench.sm12x_device(120, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition").name == \
        "rtxpro6000"
    assert bench.sm12x_device(90, "NVIDIA H100") is None


def test_sm12x_rows_run_on_the_gb10_kernels(bench):
    """Every row names a CUDA kernel (or an M dispatcher's arm) of
    specs/gb10.gemm; the MXFP8 rows are MXFP8 kernels, the decode rows the
    dispatchers' GEMV arms, the DeepSeek rows DeepGEMM's shapes, and every
    spec arch is an sm_12x one."""
    specs = bench._sm12x_specs()
    spec = specs[bench.SM12X_SPEC]
    assert set(spec.target(ir.Backend.CUDA).cuda_archs) == {"sm_120a", "sm_121a"}
    plan, skipped = bench.sm12x_plan(specs)
    assert not skipped and len(plan) == len(bench.SM12X_ROWS)
    kinds = set()
    for r in plan:
        k = spec.kernel(r["kernel"])
        assert ir.Backend.CUDA in k.backends
        assert k.grouped == bool(r["groups"]), r
        if "mxfp8" in k.name:
            assert k.uses_mx_mma("sm_121a") and k.lhs_scale.block_k == k.rhs_scale.block_k == 32
            kinds.add("mxfp8 grouped" if k.grouped else "mxfp8 dense")
        if r["via"]:
            assert k.algorithm is (ir.Algorithm.GEMV if r["m_per_group"] == 1
                                   else ir.Algorithm.GEMV_BATCHED), r
            kinds.add("gemv" if r["m_per_group"] == 1 else "gemv_batched")
        if k.lhs_scale.mode is ir.ScaleMode.TOKEN_GROUP and k.lhs_scale.block_k == 128:
            kinds.add("w8a8 masked" if k.masked else "w8a8 grouped" if k.grouped else "w8a8 dense")
        shape = (r["m_per_group"], r["n"], r["k"])
        if r["what"] == "deepseek dense":
            assert shape in bench.DEEPSEEK_DENSE or (4096, *shape[1:]) in bench.DEEPSEEK_DENSE
        if r["what"] == "deepseek grouped":
            assert (r["groups"], *shape) in bench.DEEPSEEK_CONTIGUOUS
    assert kinds == {"mxfp8 dense", "mxfp8 grouped", "gemv", "gemv_batched", "w8a8 dense",
                     "w8a8 grouped", "w8a8 masked"}
    assert any((r["groups"], r["m_per_group"], r["n"], r["k"]) in bench.DEEPSEEK_MASKED
               for r in plan)


def test_sm12x_rows_list_needs_no_gpu():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--list-sm12x"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["deepseek", "dense", "4096x7168x2048", "gb10_fp8_gemm_blockscaled"]
    assert any(line.split()[-3:] == ["gb10_dense_gemv_bf16", "via", "gb10_dense_mm_bf16"]
               for line in lines), lines


def test_sm100_rows_run_on_the_b200_kernels(bench):
    """Step (6): only on compute capability 10.0; every row on a GEMM of
    specs/b200.gemm that takes the block-scaled tcgen05 path, MXFP8, MXFP4
    and NVFP4 both dense and grouped, or the 2-CTA tile at a prefill m (bf16
    and FP8 experts, the bf16 gate-up), at DeepSeek-V3 (DeepGEMM's shapes)
    and GPT-OSS shapes; the published figures beside them are SM100_PUBLISHED's
    (or "not published", never a figure of our own)."""
    assert [sm for sm in (90, 100, 103, 120, 121) if bench.is_sm100(sm)] == [100]
    specs = bench._sm100_specs()
    spec = specs[bench.SM100_SPEC]
    assert spec.target(ir.Backend.CUDA).cuda_archs == ("sm_100a",)
    plan, skipped = bench.sm100_plan(specs)
    assert not skipped and len(plan) == len(bench.SM100_ROWS)
    kinds = set()
    for r in plan:
        k = spec.kernel(r["kernel"])
        assert k.grouped == bool(r["groups"]), r
        if not k.tcgen05_block_scaled:  # the 2-CTA tile: prefill rows, its m >= 512 entry
            assert r["groups"] * r["m_per_group"] >= 512, r
            kinds.add(f"pair {k.lhs.dtype.bits}-bit {'gate-up' if k.epilogue.activation.value == 'silu_mul' else 'grouped'}")
            continue
        fmt = ("mxfp8" if k.lhs.dtype.bits == 8 and k.rhs_operand.dtype.bits == 8 else
               "w4a8" if k.lhs.dtype.bits == 8 else
               "nvfp4" if k.lhs_scale.dtype is ir.DType.UE4M3 else "mxfp4")
        kinds.add(f"{fmt} {'grouped' if k.grouped else 'dense'}")
        shape = (r["m_per_group"], r["n"], r["k"])
        if r["what"] == "deepseek dense":
            assert shape in bench.DEEPSEEK_DENSE or (4096, *shape[1:]) in bench.DEEPSEEK_DENSE
        if r["what"] == "deepseek grouped":
            assert (r["groups"], *shape) in bench.DEEPSEEK_CONTIGUOUS
        published = bench.SM100_PUBLISHED.get((r["kernel"], r["groups"], *shape), {})
        assert r["published"] == {src: published[src].tflops if src in published else None
                                  for src in bench.SM100_REFERENCES}
    assert {"mxfp8 dense", "mxfp8 grouped", "mxfp4 dense", "mxfp4 grouped", "nvfp4 dense",
            "nvfp4 grouped", "w4a8 grouped", "pair 16-bit grouped", "pair 8-bit grouped",
            "pair 16-bit gate-up"} <= kinds
    assert {r["what"].split()[0] for r in plan} >= {"deepseek", "gpt-oss"}
    table = bench.sm100_table([{**plan[0], "tflops": 1.0, "gbps": 2.0, "roofline_fraction": 0.5,
                                "host_seconds": 1e-5}])
    assert not plan[0]["published_sources"] and table[-1].count("not published") == 2, table


def test_each_published_b200_figure_sits_beside_a_row_with_its_source(bench):
    """SM100_PUBLISHED: every figure is at the shape of a B200 row (else it
    would never print), names one of the references, a public page, a date
    and a B200, and lies under the B200's dense rate for the row's operands
    (so a mistyped figure shows); the table and the list of sources print it."""
    import re

    from gemmgen.devices import DEVICES

    spec = bench._sm100_specs()[bench.SM100_SPEC]
    rows = {(name, g, m, n, k) for _, name, g, m, n, k in bench.SM100_ROWS}
    assert bench.SM100_PUBLISHED
    for key, figures in bench.SM100_PUBLISHED.items():
        assert key in rows, key
        kernel = spec.kernel(key[0])
        bits = max(kernel.lhs.dtype.bits, kernel.rhs_operand.dtype.bits)
        assert figures and set(figures) <= set(bench.SM100_REFERENCES), key
        for p in figures.values():
            assert 0 < p.tflops < DEVICES["b200"].rate(bits), (key, p)
            assert re.fullmatch(r"https://[\w./-]+", p.source), p
            assert re.fullmatch(r"20\d\d-\d\d-\d\d", p.date), p
            assert "B200" in p.gpu and "GB200" not in p.gpu and p.what, p
    plan, _ = bench.sm100_plan(bench._sm100_specs())
    row = next(r for r in plan if (r["kernel"], r["groups"], r["m_per_group"], r["n"], r["k"])
               == ("b200_mxfp4_gemm", 0, 8192, 8192, 8192))
    assert row["published"] == {"DeepGEMM": 5702, "cuBLAS": 5239}
    table = bench.sm100_table([{**row, "tflops": 1.0, "gbps": 2.0, "roofline_fraction": 0.5,
                                "host_seconds": 1e-5}])
    assert "| 5702 | 5239 |" in table[-1], table
    sources = bench.sm100_sources([row])
    assert len(sources) == 2 and all("deepseek-ai/DeepGEMM/pull/348" in s for s in sources)


def test_a_2cta_row_says_its_path(bench):
    """A row of a 2-CTA kernel names the body its launcher's plan on a
    B200 (148 SMs) takes: the pair (a cluster launch) at a prefill m, the
    1-CTA tile at a decode m; block-scaled rows say so."""
    import numpy as np

    from gemmgen.harness.runner import load_generated_module

    spec = bench._sm100_specs()[bench.SM100_SPEC]
    name = "b200_fp8_moe_grouped_gemm"
    launcher = load_generated_module(ROOT / "generated" / "b200" / "cuda" / f"{name}.py",
                                     "test_gpu_bench_pair")
    rng = np.random.default_rng(0)
    for g, m, path in ((8, 512, "2-CTA tcgen05"), (2, 8, "tcgen05")):
        row = {"groups": g, "m_per_group": m, "n": 256, "k": 256}
        inputs, _, _ = bench.deepseek_inputs(spec.kernel(name), row, rng)
        assert bench.sm100_path(spec.kernel(name), launcher, inputs) == path, (g, m)
    # The W4A8 experts: block-scaled, on the pair at a prefill m (its LUT's
    # m >= 512 entry), on the 1-CTA tile at a decode m.
    name = "b200_w4a8_moe_grouped_gemm"
    launcher = load_generated_module(ROOT / "generated" / "b200" / "cuda" / f"{name}.py",
                                     "test_gpu_bench_pair_w4a8")
    for g, m, path in ((8, 512, "2-CTA block-scaled tcgen05"), (2, 8, "block-scaled tcgen05")):
        row = {"groups": g, "m_per_group": m, "n": 256, "k": 256}
        inputs, _, _ = bench.deepseek_inputs(spec.kernel(name), row, rng)
        assert bench.sm100_path(spec.kernel(name), launcher, inputs) == path, (g, m)


def test_the_sm100_rows_run_on_an_emulated_b200(tmp_path):
    """Step (6) on an emulated B200: the NVFP4 experts at their first row's
    (shrunk) shape on the block-scaled tcgen05 path, beside the roofline at
    the FP4 rate (9,000 TFLOP/s) and "not published"."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--emulate", "--emulate-arch", "sm_100a",
                           "--sm100-only", "--kernel", "b200_nvfp4_moe_grouped_gemm",
                           "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ERROR" not in proc.stdout, proc.stdout
    assert "B200 deepseek grouped 8 x 4096 rows, n=7168 k=2048 on b200_nvfp4_moe_grouped_gemm: " \
        in proc.stdout, proc.stdout
    assert "at 9000 TFLOP/s" in proc.stdout and "DeepGEMM: not published" in proc.stdout
    import json

    saved = json.loads((tmp_path / "bench_sm100.json").read_text())
    assert [(r["kernel"], r["path"], r["rate"]) for r in saved["sm100"]] == [
        ("b200_nvfp4_moe_grouped_gemm", "block-scaled tcgen05", 9000.0)]


# ---------------------------------------------------------------------------
# The GPU scripts' whole flow on the CPU (--emulate), so that their first run
# on a lent GPU cannot fail on a stale name or a typo.


def test_the_bench_runs_its_flow_on_the_emulator(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--emulate", "--kernel", "dense_gemm_bf16",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dense_gemm_bf16: correct=True" in proc.stdout and "mma.sync path: correct=True" in proc.stdout
    assert "(emulated: the times below are the CPU emulator's, not measurements)" in proc.stdout
    import json

    (row,) = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert row["path"] == "wgmma" and row["correct"] and row["mma_sync_correct"] and row["host_seconds"] > 0


@pytest.mark.slow
def test_the_bench_runs_a_deepseek_row_on_the_emulator(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--emulate", "--deepseek-only", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "deepseek dense" in proc.stdout and "ERROR" not in proc.stdout, proc.stdout


def test_the_sm12x_rows_run_on_an_emulated_gb10(tmp_path):
    """Step (5) on an emulated GB10 (compute capability 12.1): the decode
    rows through the M dispatcher, its GEMV and batched GEMV arms."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--emulate", "--emulate-arch", "sm_121a",
                           "--sm12x-only", "--kernel", "gb10_dense_mm_bf16", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ERROR" not in proc.stdout, proc.stdout
    assert "on gb10_dense_gemv_bf16 via gb10_dense_mm_bf16" in proc.stdout, proc.stdout
    assert "on gb10_dense_gemv_batched_bf16 via gb10_dense_mm_bf16" in proc.stdout, proc.stdout
    import json

    saved = json.loads((tmp_path / "bench_sm12x.json").read_text())
    assert [(r["kernel"], r["path"], r["device"]) for r in saved["sm12x"]] == [
        ("gb10_dense_gemv_bf16", "gemv", "GB10 (DGX Spark)"),
        ("gb10_dense_gemv_batched_bf16", "gemv_batched", "GB10 (DGX Spark)")]
    assert saved["rows"] == [] and saved["deepseek"] == []


@pytest.mark.slow
def test_the_bench_flow_on_an_emulated_gb10(tmp_path):
    """Steps (1), (2) and (5) on an emulated GB10: an MXFP8 kernel of
    specs/gb10.gemm checked against the reference through its block-scaled
    path, a kernel of specs/dense.gemm (sm_89, which 12.1 runs), and a
    kernel of specs/moe.gemm (sm_90a only) skipped, saying why."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--emulate", "--emulate-arch", "sm_121a",
                           "--kernel", "gb10_mxfp8_gemm", "--kernel", "dense_gemv_bf16",
                           "--kernel", "moe_bf16_grouped_gemm", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "gb10_mxfp8_gemm: correct=True" in out and "dense_gemv_bf16: correct=True" in out, out
    assert "moe_bf16_grouped_gemm: skipped on this device: " in out, out
    assert "compute capability 12.1 (sm_121)" in out, out
    assert "sm_12x deepseek dense 4096x7168x2048 on gb10_mxfp8_gemm:" in out, out
    import json

    saved = json.loads((tmp_path / "bench.json").read_text())
    assert {r["kernel"]: r["path"] for r in saved["rows"]} == {
        "dense_gemv_bf16": "gemv", "gb10_mxfp8_gemm": "block-scaled"}


def test_the_runtime_check_runs_its_flow_on_the_emulator():
    script = ROOT / "scripts" / "gpu_check_cuda_runtime.py"
    proc = subprocess.run([sys.executable, str(script), "--emulate"], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(the CPU emulator)" in proc.stdout and " 0 failed" in proc.stdout and "PASS" in proc.stdout


@pytest.mark.parametrize("only", [
    pytest.param(("dense_gemv_bf16",), id="one_row"),
    # Every row: each loads its kernel through the stand-in (NVRTC): a minute.
    pytest.param((), id="every_row", marks=pytest.mark.slow),
])
def test_the_host_overhead_benchmark_runs_on_the_standin(only):
    script = ROOT / "scripts" / "host_overhead.py"
    picks = [a for name in only for a in ("--kernel", name)]
    proc = subprocess.run([sys.executable, str(script), "--standin", "--calls", "3", "--repeats", "2", *picks],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "us/call" not in line]
    assert len(rows) == (len(only) or 4), proc.stdout
    assert all(float(f) > 0 for r in rows for f in r.split("|")[3:6]), proc.stdout
    if only:
        assert rows[0].startswith(f"| {only[0]} |")
