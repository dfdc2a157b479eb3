"""The C++ launchers, `launch_<kernel>()`, run on the CPU emulator: a
generated C++ caller (verify_cuda.cpp_caller) allocates device buffers,
fills the argument struct and calls the launcher as a user of the `.h`
would; every CUDA runtime call it makes is the emulator's, which checks each
launch as the driver of the emulated arch would. The CuPy call of the `.py`
runs in tests/launchers/test_cupy_call.py. Results are compared
with gemmgen/reference.py.

- one case per kernel kind (tile GEMM dense and grouped, tgmm, GEMV, batched
  GEMV, quantize, the M dispatcher), on the arch `gemmgen verify` emulates
  for the spec (the declared arch with the least shared memory);
- planted bugs in the rendered launcher text (the attribute call dropped, a
  grid dimension halved, two arguments swapped, a block over the kernel's
  __launch_bounds__; in the Python launcher, a halved grid) that the
  emulator must catch in every mode (1 worker, 2 workers, the reverse
  schedule), while the unmutated launchers pass with no report at all.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gemmgen import ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import dispatch as cuda_dispatch
from gemmgen.build import render_spec
from gemmgen.cases import Case
from gemmgen.reference import compare, reference
from gemmgen.harness.cuda_emu import EmuKernelError
from gemmgen.harness.verify_cuda import CppLaunchError, emulated_arch, run_cpp_launcher, run_launcher
from gemmgen.harness.runner import load_generated_module

REPO = Path(__file__).resolve().parents[2]
MODES = {"1 worker": dict(workers=1), "2 workers": dict(workers=2), "reverse": dict(schedule="reverse")}
# CI runs one schedule; the others are slow (the memory checker finds races
# under any schedule, docs/cuda-emulation.md).
MODE_PARAMS = ["1 worker", *(pytest.param(m, marks=pytest.mark.slow) for m in ("2 workers", "reverse"))]


@functools.cache
def rendered(stem: str):
    return render_spec(REPO / "specs" / f"{stem}.gemm")


@functools.cache
def folder(stem: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=f"gemmgen-cpp-{stem}-"))
    for rel, text in rendered(stem).files.items():
        if rel.parts[0] == "cuda":
            (d / rel.name).write_text(text)
    return d


def kernel(stem: str, name: str) -> ir.Kernel:
    return rendered(stem).spec.kernel(name)


def plan(stem: str, name: str):
    return cuda_backend.plan(kernel(stem, name), rendered(stem).spec)


def arch(stem: str) -> str:
    return emulated_arch(rendered(stem).spec)


def mutate(text: str, old: str, new: str) -> str:
    """`text` with `old` (which must occur exactly once) replaced."""
    assert text.count(old) == 1, f"the planted bug's anchor occurs {text.count(old)} times"
    return text.replace(old, new)


def run_cpp(stem: str, name: str, case: Case, *, seed: int, texts=None, device: str | None = None,
            **mode):
    """Run launch_<name>() on the emulator (of the `device` arch, default the
    spec's emulated arch); `texts` replaces generated files by name (a header
    too: the launcher then compiles a copy of the folder)."""
    k = kernel(stem, name)
    inputs = case.inputs(k, seed)
    headers = {n: t for n, t in (texts or {}).items() if n.endswith(".h")}
    with tempfile.TemporaryDirectory(prefix="gemmgen-planted-") as tmp:
        where = folder(stem)
        if headers:
            where = Path(tmp)
            for f in folder(stem).iterdir():
                if f.suffix in (".cu", ".h"):
                    (where / f.name).write_text(headers.get(f.name) or f.read_text())
        got = run_cpp_launcher(plan(stem, name), where, inputs, arch=device or arch(stem), texts=texts,
                               **mode)
    return k, inputs, got


def check(stem: str, name: str, case: Case, *, seed: int, **mode) -> None:
    k, inputs, got = run_cpp(stem, name, case, seed=seed, **mode)
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()}:\n{result.detail}"


# ---------------------------------------------------------------------------
# One C++ launcher per kernel kind


KINDS = {
    "tile GEMM, dense": ("dense", "dense_gemm_bf16", Case("ragged", m=70, n=256, k=80)),
    "tile GEMM, grouped": ("moe", "moe_bf16_grouped_gemm",
                           Case("sharded", m=150, n=128, k=64, group_sizes=(40, 0, 75, 20, 5),
                                group_offset=1, g_local=3, existing_out=True)),
    "tgmm": ("moe", "moe_bf16_grad_rhs", Case("ragged", m=100, n=128, k=256, group_sizes=(30, 0, 60, 5))),
    "GEMV": ("dense", "dense_gemv_bf16", Case("gemv", m=1, n=40, k=200)),
    "batched GEMV": ("dense", "dense_gemv_batched_bf16", Case("batch", m=5, n=48, k=72)),
    "quantize": ("dense", "per_token_group_quant_fp8_out_scale_e8m0", Case("ragged", m=37, n=384, k=384)),
}


@pytest.mark.parametrize("kind", KINDS)
def test_cpp_launcher_matches_the_reference(kind):
    stem, name, case = KINDS[kind]
    check(stem, name, case, seed=21)


def test_the_emulated_arch_is_the_declared_one_with_the_least_shared_memory():
    assert rendered("dense").spec.target(ir.Backend.CUDA).cuda_archs == ("sm_89", "sm_90a",
                                                                    "sm_100a")
    # sm_90a and sm_100a have the same opt-in shared memory: the first of them.
    assert arch("dense") == "sm_89" and arch("moe") == "sm_90a"


def dispatcher_plans():
    spec = rendered("dense").spec
    (d,) = [d for d in spec.dispatches if d.name == "dense_mm_bf16"]
    arms = [cuda_backend.plan(spec.kernel(r.kernel), spec) for r in d.rules]
    return cuda_dispatch.plan(d, spec), arms


@pytest.mark.parametrize("m", [3, pytest.param(1, marks=pytest.mark.slow), pytest.param(70, marks=pytest.mark.slow)])
def test_cpp_dispatcher_runs_the_arm_for_m(m):
    """launch_dense_mm_bf16 (dense_mm_bf16.cu) linked with its arms' .cu files."""
    dplan, arms = dispatcher_plans()
    sources = ["dense_mm_bf16.cu", *(f"{a.name}.cu" for a in arms)]
    arm_name = load_generated_module(folder("dense") / "dense_mm_bf16.py", "test_cpp_dense_mm").pick(m)
    k = kernel("dense", arm_name)
    case = Case("dispatch", m=m, n=48, k=72)
    inputs = case.inputs(k, 5)
    got = run_cpp_launcher(dplan, folder("dense"), inputs, arm=arms[-1], sources=sources, arch=arch("dense"))
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"dense_mm_bf16 m={m} ({arm_name}):\n{result.detail}"


def test_cpp_launcher_refuses_a_bad_call_before_launching():
    """A shape its _validate() rejects: launch_ returns cudaErrorInvalidValue
    and the kernel never runs."""
    k = kernel("dense", "dense_gemm_bf16")
    inputs = Case("bad", m=8, n=128, k=64).inputs(k, 1)
    inputs["lhs"] = np.ascontiguousarray(inputs["lhs"][:, :60])  # k = 60: not a multiple of 8
    inputs["rhs"] = np.ascontiguousarray(inputs["rhs"][:, :60])
    with pytest.raises(CppLaunchError, match=r"launch_dense_gemm_bf16 returned cudaErrorInvalidValue: "
                                             r"dense_gemm_bf16: k must be a multiple of 8"):
        run_cpp_launcher(plan("dense", "dense_gemm_bf16"), folder("dense"), inputs, arch="sm_89")


def test_cpp_launcher_refuses_a_device_with_too_little_shared_memory(tmp_path):
    """A 165888-byte tile built for a plain sm_80 (opt-in 166912) runs on an
    8.9 (a plain build runs on newer devices), whose 101376 bytes launch_
    reads with cudaDeviceGetAttribute: refused before any launch."""
    from cuda_helpers import render_cuda

    spec, cuda, _ = render_cuda(tmp_path, "big_tile", """\
target cuda {
  archs sm_80
}

kernel big_tile {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=256 n=128 k=64
  stages 3
  backends cuda
}
""")
    k = spec.kernel("big_tile")
    lp = cuda_backend.plan(k, spec)
    assert max(s.smem for v in lp.variants for s in v.steps) == 165888
    case = Case("small", m=20, n=128, k=128)
    with pytest.raises(CppLaunchError, match=r"launch_big_tile returned cudaErrorInvalidValue$"):
        run_cpp_launcher(lp, cuda, case.inputs(k, 2), arch="sm_89")


def test_cpp_launcher_refuses_a_device_no_declared_arch_runs_on():
    """moe_w4a16_grouped_gemm is built for sm_90a only: an 8.9 is refused
    before any launch (cudaErrorNoKernelImageForDevice), as the Python
    launcher refuses it."""
    name = "moe_w4a16_grouped_gemm"
    case = Case("small", m=20, n=128, k=256, group_sizes=(12, 8))
    with pytest.raises(CppLaunchError, match=rf"launch_{name} returned cudaErrorNoKernelImageForDevice$"):
        run_cpp_launcher(plan("moe", name), folder("moe"), case.inputs(kernel("moe", name), 2), arch="sm_89")


# ---------------------------------------------------------------------------
# Planted bugs: each caught in every mode; the unmutated launcher passes
# in the same modes with no report.

GROUPED = ("moe", "moe_bf16_grouped_gemm", Case("groups", m=40, n=128, k=32, group_sizes=(25, 15)))
DENSE = ("dense", "dense_gemm_bf16", Case("two n tiles", m=20, n=256, k=32))
TGMM = ("moe", "moe_bf16_grad_rhs", Case("two k tiles", m=24, n=128, k=256, group_sizes=(20, 4)))
GEMV = ("dense", "dense_gemv_bf16", Case("gemv", m=1, n=80, k=48))


def planted(stem: str, name: str, old: str, new: str, suffix: str = ".cu") -> dict[str, str]:
    """The kernel's .cu (or, with suffix ".h", its header: the launch list)
    with one planted bug."""
    file = f"{name}{suffix}"
    return {file: mutate((folder(stem) / file).read_text(), old, new)}


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_dropped_attribute_call_is_caught(mode):
    """The mma.sync path (an sm_89 device, which specs/dense.gemm declares:
    dense_gemm_bf16's Hopper path runs on compute capability 9.0 only)."""
    stem, name, case = DENSE
    texts = planted(stem, name,
                    "      err =\n"
                    f"          cudaFuncSetAttribute({name}, cudaFuncAttributeMaxDynamicSharedMemorySize, 67584);\n"
                    "      if (err != cudaSuccess) {\n        return err;\n      }\n", "")
    with pytest.raises(CppLaunchError, match=rf"launch_{name} returned cudaErrorInvalidValue: kernel {name}: 67584 "
                                             r"bytes of dynamic shared memory requested, over the kernel's limit "
                                             r"of 49152"):
        run_cpp(stem, name, case, seed=3, texts=texts, device="sm_89", **MODES[mode])


def test_dropped_attribute_call_of_the_hopper_path_is_caught():
    """The same on sm_90a, where the launcher takes the Hopper path."""
    stem, name, case = GROUPED
    texts = planted(stem, name,
                    f"        err = cudaFuncSetAttribute({name}_sm90,\n"
                    "                                   cudaFuncAttributeMaxDynamicSharedMemorySize, 199760);\n"
                    "        if (err != cudaSuccess) {\n          return err;\n        }\n", "")
    with pytest.raises(CppLaunchError, match=rf"launch_{name} returned cudaErrorInvalidValue: kernel {name}_sm90: "
                                             r"199760 bytes of dynamic shared memory requested, over the kernel's "
                                             r"limit of 49152"):
        run_cpp(stem, name, case, seed=3, texts=texts, device="sm_90a", **MODES["1 worker"])


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_halved_grid_is_caught(mode):
    stem, name, case = DENSE
    texts = planted(stem, name, "out[0].grid[0] = gg_cdiv(n_out, 128);",
                    "out[0].grid[0] = gg_cdiv(n_out, 128) / 2;", ".h")
    k, inputs, got = run_cpp(stem, name, case, seed=4, texts=texts, **MODES[mode])
    # The blocks of the second n tile never ran: their columns keep the
    # poison cudaMalloc'd memory starts with, which no comparison accepts.
    assert np.isnan(got[:, 128:].astype(np.float32)).all()
    assert np.isfinite(got[:, :128].astype(np.float32)).all()
    assert not compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_swapped_arguments_are_caught(mode):
    """lhs [m, k] and rhs [m, n] have the same type: swapped, the kernel
    reads lhs's k = 256 columns from rhs's 128 and runs off its end."""
    stem, name, case = TGMM
    texts = planted(stem, name, "a.lhs, a.rhs, a.group_sizes", "a.rhs, a.lhs, a.group_sizes")
    with pytest.raises(EmuKernelError, match=r"out-of-bounds (access|write)"):
        run_cpp(stem, name, case, seed=5, texts=texts, **MODES[mode])


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_swapped_dims_are_caught(mode):
    """n = 80 and k = 48 swapped in the GEMV launch: the kernel takes rhs
    for [48, 80] and lhs for 80 wide, and reads past lhs's 48 elements."""
    stem, name, case = GEMV
    tail = ");\n      err = cudaGetLastError();\n      if (err != cudaSuccess) {\n        return err;\n" \
        "      }\n      return cudaSuccess;\n    case 1:"
    texts = planted(stem, name, "a.lhs, a.rhs, a.out, gg_i32(m), gg_i32(n), gg_i32(k)" + tail,
                    "a.lhs, a.rhs, a.out, gg_i32(m), gg_i32(k), gg_i32(n)" + tail)
    with pytest.raises(EmuKernelError, match=r"out-of-bounds access .* \(96 bytes\)\n  in kernel dense_gemv_bf16"):
        run_cpp(stem, name, case, seed=6, texts=texts, **MODES[mode])


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_block_over_the_launch_bounds_is_caught(mode):
    stem, name, case = GEMV
    anchor = "      out[0].threads = {};\n      out[0].smem = 0;\n      return 1;\n    case 1:"
    texts = planted(stem, name, anchor.format(256), anchor.format(512), ".h")
    with pytest.raises(CppLaunchError, match=rf"launch_{name} returned cudaErrorLaunchOutOfResources: kernel {name}: "
                                             r"a block of 512 threads is over the kernel's __launch_bounds__\(256\)"):
        run_cpp(stem, name, case, seed=7, texts=texts, **MODES[mode])


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_python_launcher_with_a_halved_grid_is_caught(mode, tmp_path):
    """The Python (CuPy) launcher's plan, mutated the same way."""
    stem, name, case = GEMV
    source = (folder(stem) / f"{name}.py").read_text()
    anchor = f'                    "{name}",\n                    (gg_cdiv(n_out, 16){{}}, 1, 1),'
    (tmp_path / f"{name}.py").write_text(mutate(source, anchor.format(""), anchor.format(" // 2")))
    for suffix in (".cu", ".h"):
        (tmp_path / f"{name}{suffix}").write_text((folder(stem) / f"{name}{suffix}").read_text())
    launcher = load_generated_module(tmp_path / f"{name}.py", f"test_cpp_planted_{name}_{mode.replace(' ', '_')}")
    k = kernel(stem, name)
    inputs = case.inputs(k, 8)
    got = run_launcher(launcher, (tmp_path / f"{name}.cu").read_text(), str(tmp_path / f"{name}.cu"), inputs,
                       arch=arch(stem), **MODES[mode])
    assert np.isnan(got.astype(np.float32)).any()
    assert not compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed


@pytest.mark.parametrize("mode", MODE_PARAMS)
@pytest.mark.parametrize("target", ["grouped", "dense", "tgmm", "gemv"])
def test_unmutated_launchers_pass_with_no_report(target, mode):
    stem, name, case = {"grouped": GROUPED, "dense": DENSE, "tgmm": TGMM, "gemv": GEMV}[target]
    k = kernel(stem, name)
    inputs = case.inputs(k, 9)
    logs: list[str] = []
    got = run_cpp_launcher(plan(stem, name), folder(stem), inputs, arch=arch(stem), logs=logs, **MODES[mode])
    assert compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs).passed
    assert logs and "gg-emu:" not in logs[0], logs
