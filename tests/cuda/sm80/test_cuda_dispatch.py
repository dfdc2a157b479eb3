"""The CUDA M dispatchers (gemmgen/backends/cuda/dispatch.py).

An M-dispatched dense bf16 GEMM (`dense_mm_bf16`) as a spec: M == 1 -> GEMV, M <= 8 -> batched
GEMV, else the tile GEMM. Checked here:

- the Python `pick()` and the C++ `<name>_pick()` (the header compiled with
  g++ into a small program) choose the arm the spec's IR chooses at every
  threshold, and `launch_<name>` (the .cu, also compiled with g++ against
  stand-in arm launchers) converts the arguments and calls that arm;
- through the Python dispatcher, every arm runs on the CPU emulator and
  matches the reference, and the GEMV and batched GEMV give bit-identical
  rows (same K order and reduction);
- `validate()` delegates to the chosen arm and rejects bad calls;
- arms that cannot share one argument struct are a diagnostic;
- the .h and .cu are clang-format clean for names of every length.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import ml_dtypes
import numpy as np
import pytest

from gemmgen import ir
from gemmgen.backends.cuda import dispatch as cuda_dispatch
from gemmgen.reference import compare, random_inputs, reference
from gemmgen.render import header_text
from gemmgen.harness.toolchain import cuda_include_dir
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.harness.runner import load_generated_module
from gemmgen.parse import parse
from gemmgen.validate import validate

from cuda_helpers import build_emulators, render_cuda

SPEC = """\
target cuda {
  archs sm_80 sm_90a
}

defaults {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  rhs_scale per_channel f32
  bias f32 [n]
  epilogue silu
  backends cuda
}

kernel dense_gemv_bf16 {
  algorithm gemv
}

kernel dense_gemv_batched_bf16 {
  algorithm gemv_batched
  max_m 8
}

kernel dense_gemm_bf16 {
  tile m=32 n=32 k=32
}

dispatch dense_mm_bf16 {
  when m == 1 -> dense_gemv_bf16
  when m <= 8 -> dense_gemv_batched_bf16
  else dense_gemm_bf16
}
"""

NAME = "dense_mm_bf16"
ARMS = ("dense_gemv_bf16", "dense_gemv_batched_bf16", "dense_gemm_bf16")
MODULES: dict = {}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[ir.Spec, Path, dict]:
    spec, cuda, files = render_cuda(tmp_path_factory.mktemp("dispatch"), "dispatch", SPEC)
    build_emulators(cuda, ARMS, source_name, MODULES)
    return spec, cuda, files


def source_name(name: str) -> str:
    return f"dispatch/cuda/{name}.cu"


@pytest.fixture(scope="module")
def dispatcher(built):
    _, cuda, _ = built
    return load_generated_module(cuda / f"{NAME}.py", "test_cuda_dispatch_dense_mm_bf16")


THRESHOLD_MS = (0, 1, 2, 7, 8, 9, 10, 1000, 2**31 - 1)


def test_files_and_headers(built):
    spec, _, files = built
    for suffix in ("h", "cu", "py"):
        first = files[PurePosixPath(f"cuda/{NAME}.{suffix}")].splitlines()[0]
        assert first == ("# " if suffix == "py" else "// ") + header_text(spec.path)


def test_python_pick_follows_the_spec(built, dispatcher):
    spec, _, _ = built
    d = spec.dispatches[0]
    assert dispatcher.ARMS == ARMS
    for m in THRESHOLD_MS:
        assert dispatcher.pick(m) == d.pick(m, 64, 64), m
        assert ARMS[dispatcher.pick_index(m)] == dispatcher.pick(m)


HARNESS = r"""
#include "dense_mm_bf16.h"
#include "dense_mm_bf16.cu"
#include <cstdio>
#include <cstdlib>

// Stand-ins for the arms' nvcc host launchers: validate like them, then
// record the call instead of launching.
static int g_called = -1;
static long long g_fields = 0;
template <class A>
static cudaError_t record(int arm, const A& a, const char* why) {
  if (why != nullptr) return cudaErrorInvalidValue;
  g_called = arm;
  g_fields = a.m * 1000000LL + a.n * 1000LL + a.k +
             (a.lhs != nullptr) + 2 * (a.rhs != nullptr) + 4 * (a.bias != nullptr) +
             8 * (a.out != nullptr) + 16 * (a.rhs_scale != nullptr);
  return cudaSuccess;
}
cudaError_t launch_dense_gemv_bf16(const DenseGemvBf16Args& a, cudaStream_t) {
  return record(0, a, dense_gemv_bf16_validate(a));
}
cudaError_t launch_dense_gemv_batched_bf16(const DenseGemvBatchedBf16Args& a, cudaStream_t) {
  return record(1, a, dense_gemv_batched_bf16_validate(a));
}
cudaError_t launch_dense_gemm_bf16(const DenseGemmBf16Args& a, cudaStream_t) {
  return record(2, a, dense_gemm_bf16_validate(a));
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const long long m = std::atoll(argv[i]);
    std::printf("pick %lld %d\n", m, dense_mm_bf16_pick(m));
  }
  alignas(16) static unsigned char buf[64];
  DenseMmBf16Args a;
  a.lhs = reinterpret_cast<const __nv_bfloat16*>(buf);
  a.rhs = reinterpret_cast<const __nv_bfloat16*>(buf);
  a.bias = reinterpret_cast<const float*>(buf);
  a.rhs_scale = reinterpret_cast<const float*>(buf);
  a.out = reinterpret_cast<__nv_bfloat16*>(buf);
  a.n = 24;
  a.k = 16;
  for (int m : {1, 5, 9}) {
    a.m = m;
    const cudaError_t err = launch_dense_mm_bf16(a, nullptr);
    std::printf("launch %d %d %lld %d\n", m, g_called, g_fields, static_cast<int>(err));
  }
  a.m = 3;
  a.k = 0;  // the batched GEMV's own check rejects it; nothing is launched
  g_called = -1;
  const char* why = dense_mm_bf16_validate(a);
  const cudaError_t err = launch_dense_mm_bf16(a, nullptr);
  std::printf("invalid %d %d %s\n", static_cast<int>(err), g_called, why ? why : "(null)");
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
def test_cpp_pick_and_launch_route_to_the_arm(built, tmp_path):
    spec, cuda, _ = built
    d = spec.dispatches[0]
    (tmp_path / "harness.cc").write_text(HARNESS)
    exe = tmp_path / "harness"
    proc = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{cuda}",
                           f"-I{cuda_include_dir()}", str(tmp_path / "harness.cc"), "-o", str(exe)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run([str(exe), *map(str, THRESHOLD_MS)], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    picks = {int(line.split()[1]): int(line.split()[2]) for line in out if line.startswith("pick")}
    assert picks == {m: ARMS.index(d.pick(m, 24, 16)) for m in THRESHOLD_MS}
    launches = [line.split()[1:] for line in out if line.startswith("launch")]
    # m, arm, m * 1e6 + n * 1e3 + k + (pointer bits: every field copied), cudaSuccess
    assert launches == [["1", "0", str(1024016 + 31), "0"], ["5", "1", str(5024016 + 31), "0"],
                        ["9", "2", str(9024016 + 31), "0"]]
    invalid = next(line for line in out if line.startswith("invalid")).split(maxsplit=3)
    assert invalid[1:3] == [str(1), "-1"]  # cudaErrorInvalidValue, no arm called
    assert invalid[3] == "dense_gemv_batched_bf16: n and k must be positive"


def run_dispatched(built, dispatcher, inputs: dict):
    _, cuda, _ = built
    name = dispatcher.pick(inputs["lhs"].shape[0])
    arm = dispatcher.arm(name)
    return name, run_launcher(arm, (cuda / f"{name}.cu").read_text(), source_name(name), inputs,
                              modules=MODULES)


@pytest.mark.parametrize("m", [1, 2, 8, 9, 40])
def test_every_arm_matches_the_reference(built, dispatcher, m):
    spec, _, _ = built
    n, k = 40, 72
    kernel = spec.kernel(spec.dispatches[0].pick(m, n, k))
    inputs = random_inputs(kernel, m=m, n=n, k=k, rng=np.random.default_rng(m))
    assert dispatcher.validate(**inputs) == {"m": m, "k": k, "n": n, "n_out": n}
    name, actual = run_dispatched(built, dispatcher, inputs)
    assert name == kernel.name
    result = compare(actual, reference(kernel, **inputs), kernel, k=k, inputs=inputs)
    assert result.passed, f"{name} m={m}:\n{result.detail}"


def test_gemv_and_batched_gemv_rows_are_bit_identical(built, dispatcher):
    """Each row of the batched GEMV follows the GEMV's K order and reduction
    tree, so a token's result does not depend on the batch it came in."""
    spec, cuda, _ = built
    kernel = spec.kernel("dense_gemv_batched_bf16")
    for k in (200, 61):  # the 16-byte path, and odd k
        inputs = random_inputs(kernel, m=6, n=52, k=k, rng=np.random.default_rng(k))
        _, batched = run_dispatched(built, dispatcher, inputs)
        for r in range(6):
            one = dict(inputs, lhs=inputs["lhs"][r:r + 1].copy())
            _, row = run_dispatched(built, dispatcher, one)
            np.testing.assert_array_equal(row.view(np.uint16), batched[r:r + 1].view(np.uint16))


def test_validate_delegates_to_the_chosen_arm(built, dispatcher):
    spec, _, _ = built
    kernel = spec.kernel("dense_gemv_batched_bf16")
    inputs = random_inputs(kernel, m=3, n=8, k=16, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"dense_gemv_batched_bf16: rhs must have shape \[8, 16\]"):
        dispatcher.validate(**dict(inputs, rhs=inputs["rhs"][:, :8].copy()))
    with pytest.raises(ValueError, match=r"dense_gemm_bf16: bias must be float32"):
        big = random_inputs(kernel, m=20, n=8, k=16, rng=np.random.default_rng(0))
        dispatcher.validate(**dict(big, bias=big["bias"].astype(ml_dtypes.bfloat16)))
    with pytest.raises(ValueError, match=r"dense_mm_bf16: lhs must be a 2-d array \[m, k\]"):
        dispatcher.validate(**dict(inputs, lhs=inputs["lhs"][0]))
    with pytest.raises(ValueError, match=r"no arm named 'nope'"):
        dispatcher.arm("nope")


def test_arms_that_cannot_share_a_struct_are_diagnosed(built):
    """validate already requires the arms to compute the same function; the
    backend still checks that their launch plans take the same arguments."""
    spec, _, _ = built
    d = spec.dispatches[0]
    assert cuda_dispatch.arm_mismatch(d, spec) is None
    assert cuda_dispatch.diagnose_dispatch(d, spec) == []
    gemv = spec.kernel("dense_gemv_bf16")
    other = dataclasses.replace(gemv, bias=ir.Bias())
    odd = dataclasses.replace(spec, kernels=tuple(other if k is gemv else k for k in spec.kernels))
    (diag,) = cuda_dispatch.diagnose_dispatch(d, odd)
    assert diag.message.startswith("dispatch 'dense_mm_bf16': cuda: kernels 'dense_gemv_bf16' "
                                   "and 'dense_gemv_batched_bf16' take different launcher "
                                   "arguments (lhs, rhs, rhs_scale, out / "
                                   "lhs, rhs, rhs_scale, bias, out)")


CLANG_FORMAT = shutil.which("clang-format") or next(
    (str(p) for p in [Path(sys.executable).parent / "clang-format"] if p.is_file()), None)
REPO = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(CLANG_FORMAT is None, reason="clang-format not found")
def test_layout_holds_for_every_name_length():
    """The dispatcher's .h and .cu (the comment naming the arms' files, the
    `<name>_as_<arm>()` heads, the `return <arm>_validate(...)` and `return
    launch_<arm>(...)` calls) are laid out for the names' lengths: names of
    1 to 40 characters for the dispatcher and its three arms (two names
    make `<name>_as_<arm>`, so longer ones are laid out as a last resort,
    docs/decisions.md, "Generated C++ layout")."""
    texts: dict[str, list[str]] = {"h": [], "cu": []}
    for length in range(1, 41):
        names = {old: (tag + "x" * 40)[:length] for old, tag in
                 ((NAME, "p"), (ARMS[0], "q"), (ARMS[1], "v"), (ARMS[2], "w"))}
        text = SPEC
        for old, new in sorted(names.items(), key=lambda x: -len(x[0])):
            text = text.replace(old, new)
        spec = validate(parse(text, "specs/names.gemm"), stem="names")
        files = cuda_dispatch.render_dispatch(spec.dispatches[0], spec)
        for suffix, parts in texts.items():
            parts.append(files[PurePosixPath(f"cuda/{names[NAME]}.{suffix}")])
    for suffix, parts in texts.items():
        proc = subprocess.run([CLANG_FORMAT, "--dry-run", "-Werror", "--style=file",
                               f"--assume-filename={REPO / 'generated' / f'names.{suffix}'}"],
                              input="\n".join(parts), capture_output=True, text=True, check=False,
                              cwd=REPO)
        assert proc.returncode == 0, proc.stderr[:4000]
