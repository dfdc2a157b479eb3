"""The CUDA tile GEMMs of specs/: compiled for every declared arch, run on the
CPU emulator against the reference, and their launchers' validation.

Every CUDA tile GEMM kernel of the project's specs gets one compile check per
arch and one emulated run (its standard ragged case); the grouped kernels
also get Hypothesis-drawn group sizes.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemmgen import ir
from gemmgen.archs import fp8_mma_sync
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.cases import Case, standard_cases
from gemmgen.reference import compare, reference
from gemmgen.harness import nvcc
from gemmgen.harness.toolchain import cuda_include_dir, find_nvcc
from gemmgen.harness.verify_cuda import emulated_arch, run_launcher
from gemmgen.harness.runner import load_generated_module

from cuda_helpers import gemm_kernels, rendered

REPO = Path(__file__).resolve().parents[3]


@functools.cache
def workdir(stem: str) -> Path:
    """The rendered CUDA files of a spec, in a folder of their own."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix=f"gemmgen-cuda-{stem}-"))
    for rel, text in rendered(stem).files.items():
        if rel.parts[0] == "cuda":
            (d / rel.name).write_text(text)
    return d


KERNELS = gemm_kernels()
IDS = [name for _, name in KERNELS]


@functools.cache
def launcher(stem: str, name: str):
    return load_generated_module(workdir(stem) / f"{name}.py", f"test_cuda_gemm_{stem}_{name}")


_modules: dict = {}


def run(stem: str, kernel: ir.Kernel, inputs: dict, schedule: str = "run-ahead"):
    src = (workdir(stem) / f"{kernel.name}.cu").read_text()
    # On the arch `gemmgen verify` emulates: the spec's with the least shared memory.
    return run_launcher(launcher(stem, kernel.name), src, f"{stem}/cuda/{kernel.name}.cu", inputs,
                        schedule=schedule, modules=_modules, arch=emulated_arch(rendered(stem).spec))


def check_case(stem: str, kernel: ir.Kernel, case: Case, seed: int = 0, **kw) -> None:
    inputs = case.inputs(kernel, seed)
    actual = run(stem, kernel, inputs, **kw)
    result = compare(actual, reference(kernel, **inputs), kernel, k=case.k, inputs=inputs)
    assert result.passed, f"{kernel.name} {case.describe()}:\n{result.detail}"


def test_specs_declare_the_seed_kernels():
    names = set(IDS)
    for want in ("moe_bf16_grouped_gemm", "moe_fp8_grouped_gemm", "moe_w8a8_grouped_gemm",
                 "moe_w8a8_gateup_silu", "moe_w4a16_grouped_gemm", "fp8_fp8_gemm_tile_64x128x64",
                 "fp8_weight_gemm", "fp8_gemm_blockscaled_pipe", "dense_gemm_bf16"):
        assert want in names


# ---------------------------------------------------------------------------
# nvcc: every arch, no spills, shared memory within the arch's limit, and the
# SASS of a tensor-core kernel.

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")


@needs_nvcc
@pytest.mark.parametrize("stem,name", KERNELS, ids=IDS)
def test_compiles_for_every_arch_without_spills(stem, name):
    kernel = rendered(stem).spec.kernel(name)
    lp = cuda_backend.plan(kernel, rendered(stem).spec)
    smem = {s.entry: s.smem for v in lp.variants for s in v.steps}
    # The Hopper entries (docs/cuda-hopper.md) run on sm_90a only; elsewhere
    # they are a trap that no launcher picks.
    sm90 = {s.entry: s.smem for v in lp.variants for p in v.paths for s in p.steps if s.entry not in smem}
    source = (workdir(stem) / f"{name}.cu").read_text()
    for arch in lp.archs:
        # -Werror all-warnings: the generated code and the runtime headers
        # compile without a warning (tests/cuda/sm80/test_cuda_gemm_format.py: g++ too).
        result = nvcc.compile_check(source, arch, name_for_errors=f"{name}.cu",
                                    include_dirs=(workdir(stem),),
                                    extra_flags=("-Werror", "all-warnings"))
        assert set(result.kernels) == set(lp.entries)
        sass = nvcc.sass_summary(result.cubin)
        for entry, usage in result.kernels.items():
            assert usage.spill_stores == 0 and usage.spill_loads == 0, (arch, entry, usage)
            need = smem[entry] if entry in smem else sm90[entry] if kernel.uses_wgmma(arch) else 0
            assert usage.static_smem + need <= nvcc.shared_memory_limit(arch)
        for v in lp.variants:
            gemm = sass[v.steps[-1].entry]
            assert gemm.tensor_core > 0, (arch, gemm.opcodes)
            assert gemm.ldsm > 0 and gemm.ldgsts > 0, (arch, gemm.opcodes)
            compute = tile_gemm.compute_dtype(kernel)
            mma = {ir.DType.BF16: "HMMA", ir.DType.F16: "HMMA", ir.DType.E4M3: "QMMA",
                   ir.DType.E5M2: "QMMA", ir.DType.INT8: "IMMA"}[compute]
            if compute.is_fp8 and not fp8_mma_sync(arch):
                # NB: Hopper and sm_100a have no FP8 mma.sync in hardware
                # (their FP8 paths are wgmma and tcgen05); ptxas widens to
                # f16 and issues HMMA (docs/cuda.md).
                mma = "HMMA"
            assert gemm.count(mma) > 0, (arch, mma, gemm.opcodes)


@pytest.mark.parametrize("stem,name", KERNELS, ids=IDS)
def test_entry_points_take_the_launch_arguments_in_order(stem, name):
    """The parameter list the .cu prints for each GEMM entry point is the
    argument list both launchers pass (docs/cuda.md, "One plan, three
    launchers"): the same names in the same order."""
    import re

    lp = cuda_backend.plan(rendered(stem).spec.kernel(name), rendered(stem).spec)
    source = (workdir(stem) / f"{name}.cu").read_text()
    for v in lp.variants:
        step = v.steps[-1]
        signature = re.search(rf"\b{step.entry}\(\n(.*?)\) {{", source, re.S)
        assert signature, step.entry
        text = "\n".join(line for line in signature.group(1).splitlines() if "//" not in line)
        params = [p.split()[-1] for p in text.split(",")]
        passed = [a.name if a.kind.value == "array"
                  else re.fullmatch(r"gg_i32\((\w+)\)", a.value.cpp).group(1)
                  for a in step.args]
        assert params == passed, (step.entry, params, passed)


# ---------------------------------------------------------------------------
# The CPU emulator against the reference.


@pytest.mark.parametrize("stem,name", KERNELS, ids=IDS)
def test_matches_reference_on_emulator(stem, name):
    kernel = rendered(stem).spec.kernel(name)
    check_case(stem, kernel, standard_cases(kernel.for_backend(ir.Backend.CUDA))[0])


@pytest.mark.slow
@pytest.mark.parametrize("stem,name", KERNELS, ids=IDS)
def test_every_standard_case_on_emulator(stem, name):
    kernel = rendered(stem).spec.kernel(name)
    for case in standard_cases(kernel.for_backend(ir.Backend.CUDA))[1:]:
        check_case(stem, kernel, case)


def test_reverse_schedule_and_decode_shape():
    kernel = rendered("dense").spec.kernel("fp8_gemm_blockscaled_pipe")
    check_case("dense", kernel, Case("decode", m=3, n=128, k=384), schedule="reverse")


@st.composite
def group_layouts(draw):
    """Group sizes with the edges that matter: empty groups, a group larger
    than a tile, all rows in one group, rows owned by no group."""
    m = draw(st.integers(1, 300))
    num_groups = draw(st.integers(1, 6))
    shape = draw(st.sampled_from(["random", "one_group", "empty_tail"]))
    if shape == "one_group":
        sizes = [0] * num_groups
        sizes[draw(st.integers(0, num_groups - 1))] = m
    else:
        cuts = sorted(draw(st.lists(st.integers(0, m), min_size=num_groups - 1,
                                    max_size=num_groups - 1)))
        total = m if shape == "random" else draw(st.integers(0, m))
        cuts = [min(c, total) for c in cuts]
        sizes = list(np.diff([0, *cuts, total]))
    g_local = draw(st.integers(1, num_groups))
    offset = draw(st.integers(0, num_groups - g_local))
    return m, tuple(int(s) for s in sizes), offset, g_local, draw(st.booleans())


@pytest.mark.slow
@given(layout=group_layouts())
def test_grouped_bf16_with_drawn_groups(layout):
    m, sizes, offset, g_local, existing = layout
    kernel = rendered("moe").spec.kernel("moe_bf16_grouped_gemm")
    case = Case("drawn", m=m, n=256, k=96, group_sizes=sizes, group_offset=offset,
                g_local=g_local, existing_out=existing)
    check_case("moe", kernel, case)


@pytest.mark.slow  # CI: the standard cases of moe_w8a8_gateup_silu (test_matches_reference_on_emulator)
@given(layout=group_layouts())
def test_grouped_gateup_with_drawn_groups(layout):
    m, sizes, offset, g_local, existing = layout
    kernel = rendered("moe").spec.kernel("moe_w8a8_gateup_silu")
    case = Case("drawn", m=m, n=256, k=384, group_sizes=sizes, group_offset=offset,
                g_local=g_local, existing_out=existing)
    check_case("moe", kernel, case)


def test_zero_rows_launch_nothing():
    kernel = rendered("moe").spec.kernel("moe_bf16_grouped_gemm")
    lm = launcher("moe", kernel.name)
    inputs = Case("empty", m=0, n=128, k=64, group_sizes=(0, 0)).inputs(kernel, 0)
    assert lm.launches(lm.validate(**inputs)) == []


# ---------------------------------------------------------------------------
# Launcher validation: a bad call raises before anything is launched.


def _grouped_inputs():
    kernel = rendered("moe").spec.kernel("moe_w8a8_grouped_gemm")
    case = Case("v", m=70, n=256, k=256, group_sizes=(30, 0, 40), group_offset=1, g_local=2)
    return kernel, case.inputs(kernel, 1)


@pytest.mark.parametrize("change,message", [
    (lambda a: a.update(lhs=np.ascontiguousarray(a["lhs"][:, :128])), "rhs must have shape"),
    (lambda a: a.update(rhs=a["rhs"][:, :, :128]), "rhs must have shape"),
    (lambda a: a.update(lhs=a["lhs"].astype(np.float32)), "lhs must be float8_e4m3fn"),
    (lambda a: a.update(group_sizes=a["group_sizes"].astype(np.int64)), "group_sizes must be int32"),
    (lambda a: a.update(group_offset=np.zeros(2, np.int32)), "group_offset must be a scalar"),
    (lambda a: a.update(rhs_scale=a["rhs_scale"][:1]), "rhs_scale must have shape"),
    (lambda a: a.update(lhs=np.asfortranarray(a["lhs"])), "C-contiguous"),
    (lambda a: a.pop("rhs_scale"), "rhs_scale"),
])
def test_launcher_rejects_bad_calls(change, message, monkeypatch):
    import gemmgen.harness.cuda_emu as emu

    def never(*args, **kwargs):
        raise AssertionError("a kernel was compiled or launched for a bad call")

    monkeypatch.setattr(emu, "EmuModule", never)
    kernel, inputs = _grouped_inputs()
    change(inputs)
    with pytest.raises((ValueError, TypeError), match=message):
        run("moe", kernel, inputs)


def test_offsets_past_group_sizes_are_accepted_and_computed():
    """group_offset + g past len(group_sizes) (or a negative offset) is
    defined: local groups that group_sizes lacks are empty (docs/semantics.md,
    "grouped"). The launcher accepts it and the kernel matches the reference;
    the emulator faults on any read past group_sizes."""
    kernel = rendered("moe").spec.kernel("moe_w8a8_grouped_gemm")
    for offset, existing in ((2, False), (-1, True), (3, True)):
        case = Case("offset", m=70, n=256, k=256, group_sizes=(30, 0, 40), group_offset=offset,
                    g_local=2, existing_out=existing)
        check_case("moe", kernel, case)


def test_launcher_checks_k_alignment():
    kernel = rendered("moe").spec.kernel("moe_w8a8_grouped_gemm")
    inputs = Case("v", m=70, n=256, k=200, group_sizes=(30, 0, 40)).inputs(kernel, 1)
    with pytest.raises(ValueError, match="k must be a multiple of 16"):
        launcher("moe", kernel.name).validate(**inputs)


def test_launcher_accepts_bit_views_for_cupy():
    kernel, inputs = _grouped_inputs()
    lm = launcher("moe", kernel.name)
    views = {k: (v.view(np.uint8) if getattr(v, "dtype", None) is not None
                 and v.dtype.name.startswith("float8") else v) for k, v in inputs.items()}
    assert lm.validate(**views) == lm.validate(**inputs)


def test_unaligned_pointer_is_rejected():
    kernel, inputs = _grouped_inputs()
    lm = launcher("moe", kernel.name)
    raw = np.zeros(inputs["lhs"].size + 1, np.uint8)[1:].view(inputs["lhs"].dtype)
    inputs["lhs"] = raw.reshape(inputs["lhs"].shape)
    with pytest.raises(ValueError, match="lhs must be 16-byte aligned"):
        lm.validate(**inputs)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
def test_cpp_header_validates_without_a_gpu(tmp_path):
    """The C++ launcher header's validation compiles and runs on the CPU."""
    name = "moe_w8a8_grouped_gemm"
    program = tmp_path / "main.cc"
    program.write_text(f"""
#include <cstdio>
#include "{name}.h"
int main() {{
  alignas(16) static unsigned char buf[1 << 16];
  MoeW8a8GroupedGemmArgs a;
  a.lhs = reinterpret_cast<const __nv_fp8_e4m3*>(buf);
  a.rhs = reinterpret_cast<const __nv_fp8_e4m3*>(buf);
  a.group_sizes = reinterpret_cast<const int*>(buf);
  a.lhs_scale = reinterpret_cast<const float*>(buf);
  a.rhs_scale = reinterpret_cast<const float*>(buf);
  a.out = reinterpret_cast<__nv_bfloat16*>(buf);
  a.workspace = buf;
  a.m = 70; a.n = 256; a.k = 256; a.g = 2; a.num_groups = 3; a.group_offset = 1;
  const char* ok = {name}_validate(a);
  a.group_offset = 2;  // local groups past group_sizes: empty, not an error
  const char* past_end = {name}_validate(a);
  a.group_offset = -7;
  const char* negative = {name}_validate(a);
  a.group_offset = 1; a.k = 200;
  const char* bad_k = {name}_validate(a);
  a.k = 256; a.lhs = reinterpret_cast<const __nv_fp8_e4m3*>(buf + 1);
  const char* bad_align = {name}_validate(a);
  a.lhs = reinterpret_cast<const __nv_fp8_e4m3*>(buf);
  std::printf("%s|%s|%s|%s|%s|%zu|%d\\n", ok ? ok : "ok", past_end ? past_end : "ok",
              negative ? negative : "ok", bad_k, bad_align,
              {name}_workspace_bytes(a), {name}_pick_tile(70, 256, 256));
}}
""")
    exe = tmp_path / "main"
    subprocess.run(["g++", "-std=c++17", f"-I{workdir('moe')}", f"-I{cuda_include_dir()}",
                    str(program), "-o", str(exe)], check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.strip()
    ok, past_end, negative, bad_k, bad_align, ws, tile = out.split("|")
    assert ok == past_end == negative == "ok"
    assert "multiple of 16" in bad_k
    assert "lhs must be 16-byte aligned" in bad_align
    lm = launcher("moe", name)
    dims = {"m": 70, "n": 256, "k": 256, "g": 2, "num_groups": 3, "group_offset": 1, "n_out": 256}
    assert int(ws) == 4 * lm.workspace_ints(dims)
    assert int(tile) == lm.pick_tile(70, 256, 256)


def test_plan_arithmetic():
    """Shared memory, warps and grids follow from the tile (hand-computed)."""
    spec = rendered("dense").spec
    p = tile_gemm.plan(spec.kernel("dense_gemm_bf16"), spec)
    (t,) = p.tiles
    assert (t.bm, t.bn, t.bk, t.wm, t.wn, t.threads) == (128, 128, 32, 64, 32, 256)
    # A and B stages: 128 rows x (32 bf16 + 16 pad bytes) = 10240 bytes each.
    assert t.a_stage_bytes == t.b_stage_bytes == 128 * 80
    assert t.pipeline_bytes == 3 * 2 * 10240
    assert t.epilogue_bytes == 128 * 132 * 4 == t.smem_bytes
    # n tiles on x, m tiles folded over y and z (docs/cuda.md, "Launch limits").
    assert (t.grid_x, t.grid_y, t.grid_z) == (
        "gg_cdiv(n_out, 128)", "gg_min(gg_cdiv(m, 128), 65535)", "gg_cdiv(gg_cdiv(m, 128), 65535)")
    g = tile_gemm.plan(rendered("moe").spec.kernel("moe_w8a8_gateup_silu"), rendered("moe").spec)
    (t,) = g.tiles
    assert t.bn_out == 64 and t.wm == 32  # silu_mul halves n; main-loop scales: 32-row warps
    assert t.grid_y == "gg_min(gg_cdiv(m, 64) + g, 65535)"
