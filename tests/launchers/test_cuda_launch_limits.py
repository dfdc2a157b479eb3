"""CUDA's launch limits in the generated launchers (docs/cuda.md, "Launch
limits"): grid x <= 2**31 - 1, grid y and z <= 65535, at most 1024 threads
per block, and dynamic shared memory within the device's opt-in maximum.

Per kernel kind of the project's specs:

- tile GEMM (dense and grouped): the rows of tiles fold over grid y and z,
  so the largest int32 shapes launch within the limits; the folded kernels
  match the reference on the CPU emulator when a small fold forces several
  z slices (and blocks past the last row);
- tgmm: n and g past grid y / z are rejected, naming the largest n;
- quantize: the blocks fold over grid x and y, and the folded kernel
  matches the reference; past 65535 * (2**31 - 1) blocks it is rejected;
- GEMV: every int32 n fits grid x;
- dispatcher: validate() is the chosen arm's, limits included;
- shared memory: over a declared arch's limit is a spec diagnostic, and the
  CuPy call refuses a launch over the device's limit before allocating
  anything (with a stand-in `cupy`);
- C++: the headers' validate() / launch_error() (g++), and the nvcc host
  launchers run against stand-ins for the CUDA runtime calls they make:
  the launches they would make equal the Python launcher's, and a call
  over a limit launches nothing.

Shapes far beyond memory are checked with array stand-ins that have a shape
and a dtype but no data: validate() reads nothing else from them.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gemmgen import backends, ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.build import render_spec
from gemmgen.cases import Case
from gemmgen.diagnostics import SpecError
from gemmgen.parse import parse
from gemmgen.reference import compare, reference
from gemmgen.harness import nvcc
from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR, cuda_include_dir, find_nvcc
from gemmgen.harness.verify_cuda import _np_dtype, run_launcher
from gemmgen.validate import validate as validate_spec
from gemmgen.harness.runner import load_generated_module

REPO = Path(__file__).resolve().parents[2]
BIG = 2**31 - 2  # the largest int32 dim the launchers accept
MAX_X, MAX_YZ, MAX_THREADS = 2**31 - 1, 65535, 1024


@functools.cache
def rendered(stem: str):
    return render_spec(REPO / "specs" / f"{stem}.gemm")


@functools.cache
def folder(stem: str) -> Path:
    import tempfile

    d = Path(tempfile.mkdtemp(prefix=f"gemmgen-limits-{stem}-"))
    for rel, text in rendered(stem).files.items():
        if rel.parts[0] == "cuda":
            (d / rel.name).write_text(text)
    return d


@functools.cache
def launcher(stem: str, name: str):
    return load_generated_module(folder(stem) / f"{name}.py", f"test_cuda_limits_{stem}_{name}")


def plan(stem: str, name: str):
    spec = rendered(stem).spec
    return cuda_backend.plan(spec.kernel(name), spec)


class Shaped:
    """An array stand-in: a shape and a dtype, no memory."""

    def __init__(self, shape: tuple[int, ...], dtype):
        self.shape = shape
        self.dtype = np.dtype(dtype)


def call(stem: str, name: str, **dims: int) -> dict:
    """Stand-in arguments of `name` for the dims (the required arrays, and
    the scalars named in dims)."""
    lm = launcher(stem, name)
    out = {}
    for a in plan(stem, name).inputs:
        if a.is_scalar:
            if a.name in dims:
                out[a.name] = dims[a.name]
        elif not a.optional:
            shape = tuple(d.eval(dims) for d in a.shape)
            out[a.name] = Shaped(shape, _np_dtype(lm.DTYPES[a.name]))
    return out


def within_limits(steps) -> None:
    for s in steps:
        assert 1 <= s.grid[0] <= MAX_X and 1 <= s.grid[1] <= MAX_YZ and 1 <= s.grid[2] <= MAX_YZ, s
        assert 1 <= s.block[0] * s.block[1] * s.block[2] <= MAX_THREADS, s


# ---------------------------------------------------------------------------
# Tile GEMM: the rows of tiles fold over grid y and z


@pytest.mark.parametrize("m", [65535 * 128, 65535 * 128 + 1, BIG])
def test_dense_gemm_folds_m_tiles_over_grid_y_and_z(m):
    lm = launcher("dense", "dense_gemm_bf16")
    steps = lm.launches(lm.validate(**call("dense", "dense_gemm_bf16", m=m, n=4096, k=64)))
    within_limits(steps)
    (step,) = steps
    rows = -(-m // 128)  # 128x128 tiles
    assert step.grid == (32, min(rows, MAX_YZ), -(-rows // MAX_YZ))


@pytest.mark.parametrize("m,g", [(8 * 2**20, 8), (BIG, 1), (BIG, 4096)])
def test_grouped_gemm_folds_work_items_over_grid_y_and_z(m, g):
    """Before the fold, grid y was cdiv(m, 128) + g: past 65535 from about
    8M rows (an MoE layer's tokens x top-k)."""
    lm = launcher("moe", "moe_bf16_grouped_gemm")
    dims = lm.validate(**call("moe", "moe_bf16_grouped_gemm", m=m, n=4096, k=64, g=g,
                              num_groups=g))
    steps = lm.launches(dims)
    within_limits(steps)
    items = -(-m // 128) + g
    assert steps[-1].grid == (32, min(items, MAX_YZ), -(-items // MAX_YZ))
    assert lm.workspace_ints(dims) == 2 + g + 2 * items


class Folded:
    """A launcher whose last step folds its grid at `width` instead of at
    CUDA's limit, so a small shape runs several slices, the last one with
    blocks past the end: a tile GEMM's rows over grid y and z, quantize's
    blocks over grid x and y. Everything else is the launcher's."""

    def __init__(self, module, width: int):
        self.module, self.width = module, width

    def __getattr__(self, name):
        return getattr(self.module, name)

    def launches(self, dims, *device):
        # The mma.sync path, whatever the device: the Hopper path's
        # persistent grid has nothing to fold (docs/cuda-hopper.md).
        steps = self.module.launches(dims)
        last, w = steps[-1], self.width
        x, y, z = last.grid
        if y > 1:  # GEMM: (n tiles, rows, 1)
            assert z == 1 and y > w and y % w, "the case must fold unevenly"
            grid = (x, w, -(-y // w))
        else:  # quantize: (blocks, 1, 1)
            assert x > w and x % w, "the case must fold unevenly"
            grid = (w, -(-x // w), 1)
        return steps[:-1] + [dataclasses.replace(last, grid=grid)]


_emu_modules: dict = {}


@pytest.mark.parametrize("stem,name,case,width", [
    ("dense", "fp8_fp8_gemm_tile_64x128x64", Case("fold", m=300, n=256, k=128), 2),
    ("dense", "dense_gemm_bf16", Case("fold", m=520, n=384, k=64), 3),
    ("moe", "moe_bf16_grouped_gemm",
     Case("fold", m=300, n=256, k=96, group_sizes=(100, 0, 150, 50), existing_out=True), 3),
    ("moe", "moe_w8a8_gateup_silu",
     Case("fold", m=200, n=256, k=384, group_sizes=(70, 60, 0, 70), group_offset=1, g_local=3),
     2),
    # 37 x 3 groups, 16 per block: 7 blocks over 3 x 3.
    ("dense", "per_token_group_quant_fp8_out_scale_e8m0", Case("fold", m=37, n=1, k=384), 3),
    # k = 250: the unaligned entry, 8 groups per block: 11 blocks over 4 x 3.
    ("dense", "per_token_group_quant_fp8_out_scale_f32", Case("fold", m=43, n=1, k=250), 4),
])
def test_folded_grids_match_the_reference_on_emulator(stem, name, case, width):
    kernel = rendered(stem).spec.kernel(name)
    if kernel.op is ir.Op.QUANTIZE:
        rng = np.random.default_rng([11, case.m, case.k])
        inputs = {"lhs": (rng.standard_normal((case.m, case.k)) * 4).astype(
            _np_dtype(launcher(stem, name).DTYPES["lhs"]))}
    else:
        inputs = case.inputs(kernel, seed=11)
    lm = Folded(launcher(stem, name), width)
    source = (folder(stem) / f"{name}.cu").read_text()
    actual = run_launcher(lm, source, f"{stem}/cuda/{name}.cu", inputs, modules=_emu_modules)
    result = compare(actual, reference(kernel, **inputs), kernel, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()} folded at {width}:\n{result.detail}"


# ---------------------------------------------------------------------------
# tgmm, quantize, GEMV, dispatcher


def test_tgmm_rejects_n_past_grid_y():
    name = "moe_bf16_grad_rhs"  # tile n = 128
    lm = launcher("moe", name)
    ok = lm.validate(**call("moe", name, m=64, n=65535 * 128, k=128, num_groups=2))
    within_limits(lm.launches(ok))
    with pytest.raises(ValueError, match=re.escape(
            f"{name}: n must be at most 8388480: grid y = cdiv(n, 128) is limited to 65535 (")):
        lm.validate(**call("moe", name, m=64, n=65535 * 128 + 8, k=128, num_groups=2))


def test_tgmm_rejects_g_past_grid_z():
    name = "moe_bf16_grad_rhs"
    lm = launcher("moe", name)
    within_limits(lm.launches(lm.validate(**call("moe", name, m=64, n=128, k=128,
                                                  num_groups=65535))))
    with pytest.raises(ValueError, match=re.escape(
            f"{name}: at most 65535 local groups: grid z = g is limited to 65535 (")):
        lm.validate(**call("moe", name, m=64, n=128, k=128, num_groups=65536))


def test_quantize_folds_blocks_over_grid_x_and_y():
    name = "per_token_group_quant_fp8_out_scale_f32"  # G = 128
    lm = launcher("dense", name)
    (step,) = lm.launches(lm.validate(**call("dense", name, m=BIG, k=2**17)))
    within_limits([step])
    blocks = -(-BIG * 2**10 // 16)  # 16 groups per block on the 16-byte path
    assert step.grid == (MAX_X, -(-blocks // MAX_X), 1) and step.grid[1] == 64
    # Only a grid y past 65535 (over 2^46 blocks: petabytes) is rejected.
    with pytest.raises(ValueError, match=(
            rf"^{name}: launch {name}_unaligned_k \(8 groups per block, .*\) needs grid y = "
            rf"\d+, outside CUDA's limit of 1\.\.65535 \(m={BIG}, k={BIG}, groups=16777216\)$")):
        lm.validate(**call("dense", name, m=BIG, k=BIG))


@pytest.mark.parametrize("name", ["dense_gemv_bf16", "dense_gemv_batched_bf16"])
def test_gemv_grid_holds_every_int32_n(name):
    lm = launcher("dense", name)
    for k in (64, 63):  # both entry points
        (step,) = lm.launches(lm.validate(**call("dense", name, m=1, n=BIG, k=k)))
        within_limits([step])
        assert step.grid[1:] == (1, 1)


def test_dispatcher_checks_limits_with_the_chosen_arm():
    d = load_generated_module(folder("dense") / "dense_mm_bf16.py", "test_cuda_limits_dense_mm")
    for m, arm in ((1, "dense_gemv_bf16"), (5, "dense_gemv_batched_bf16"), (BIG, "dense_gemm_bf16")):
        dims = d.validate(**call("dense", "dense_gemm_bf16", m=m, n=BIG - 1, k=64))
        assert d.pick(m) == arm
        within_limits(d.arm(arm).launches(dims))


# ---------------------------------------------------------------------------
# The generic check, and shared memory


def test_launch_error_names_the_launch_the_dimension_the_value_and_the_limit():
    lm = launcher("moe", "moe_bf16_grouped_gemm")
    base = lm.Launch("e", (1, 1, 1), (256, 1, 1), 1000, (), "what it is")
    cases = {
        (2**31, 1, 1): "needs grid x = 2147483648, outside CUDA's limit of 1..2147483647",
        (1, 65536, 1): "needs grid y = 65536, outside CUDA's limit of 1..65535",
        (1, 1, 0): "needs grid z = 0, outside CUDA's limit of 1..65535",
    }
    for grid, why in cases.items():
        assert lm.launch_error(dataclasses.replace(base, grid=grid)) == f"launch e (what it is) {why}"
    assert lm.launch_error(dataclasses.replace(base, block=(1025, 1, 1))) == (
        "launch e (what it is) needs 1025 threads per block, outside CUDA's limit of 1..1024")
    assert lm.launch_error(base, smem_limit=999) == (
        "launch e (what it is) needs 1000 bytes of dynamic shared memory per block, over the "
        "device's opt-in limit of 999")
    assert lm.launch_error(base) is None and lm.launch_error(base, smem_limit=1000) is None


def test_shared_memory_is_checked_against_the_devices_limit():
    name = "moe_bf16_grouped_gemm"
    lm = launcher("moe", name)
    dims = lm.validate(**call("moe", name, m=300, n=256, k=96, g=4, num_groups=4))
    steps = lm.launches(dims)
    smem = max(s.smem for s in steps)
    assert smem > 48 * 1024  # needs the opt-in
    lm.check_launches(steps, dims, smem)
    with pytest.raises(ValueError, match=re.escape(
            f"{name}: launch {name} (128x128 output tiles: n tiles, work items over y and z) "
            f"needs {smem} bytes of dynamic shared memory per block, over the device's opt-in "
            f"limit of {smem - 1} (m=300,")):
        lm.check_launches(steps, dims, smem - 1)


def test_cupy_call_refuses_a_launch_over_the_devices_shared_memory():
    """The CuPy call asks the device (cudaDevAttrMaxSharedMemoryPerBlockOptin)
    and raises before it builds, allocates or launches anything. The device is
    a 9.0 (the CuPy stand-in, gemmgen/harness/cupy_standin.py) whose opt-in limit is
    lowered to 60000 bytes, so the launch checked is the Hopper path's."""
    from gemmgen.harness import cupy_standin

    name = "moe_bf16_grouped_gemm"
    case = Case("smem", m=300, n=256, k=96, group_sizes=(100, 0, 150, 50))
    inputs = case.inputs(rendered("moe").spec.kernel(name), seed=1)
    module = launcher("moe", name)
    with cupy_standin.install(Path(module.__file__).parent, "sm_90a") as cupy:
        cupy.optin = 60000
        args = {a: cupy.asarray(v.view(np.uint16) if v.dtype.name == "bfloat16" else v)
                if isinstance(v, np.ndarray) and v.ndim else v for a, v in inputs.items()}
        with pytest.raises(ValueError, match=f"launch {name}_sm90 .* needs 199760 bytes of dynamic shared "
                                             "memory per block, over the device's opt-in limit of 60000"):
            getattr(module, name)(**args)
        assert sorted(cupy.asked) == [(16, 0), (97, 0)]  # the SM count and the opt-in limit, once
        assert not cupy.launches and not cupy.options_seen


def test_shared_memory_over_a_declared_arch_is_a_diagnostic():
    text = """\
target cuda {
  archs sm_89 sm_90a
}

kernel big_tile {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=256 n=128 k=64
  stages 4
  backends cuda
}
"""
    with pytest.raises(SpecError) as info:
        validate_spec(parse(text, "specs/limits.gemm"), diagnose=backends.diagnose)
    (message,) = [d.message for d in info.value.diagnostics]
    assert "tile 256x128x64 needs 221184 bytes of shared memory, over the 101376 that sm_89" \
        in message
    assert nvcc.shared_memory_limit("sm_89") == 101376 < 221184 <= nvcc.shared_memory_limit("sm_90a")


# ---------------------------------------------------------------------------
# The C++ launchers

CASES = [
    # (stem, kernel, dims, device opt-in shared memory)
    ("moe", "moe_bf16_grouped_gemm", dict(m=300, n=256, k=96, g=4, num_groups=4), 232448),
    ("moe", "moe_bf16_grouped_gemm", dict(m=BIG, n=4096, k=64, g=8, num_groups=8), 232448),
    ("moe", "moe_bf16_grouped_gemm", dict(m=300, n=256, k=96, g=4, num_groups=4), 60000),
    ("dense", "dense_gemm_bf16", dict(m=BIG, n=4096, k=64), 101376),
    ("dense", "dense_gemm_bf16", dict(m=1000, n=256, k=64), 49152),
    ("moe", "moe_bf16_grad_rhs", dict(m=1000, n=256, k=128, g=4, num_groups=4), 232448),
    ("moe", "moe_bf16_grad_rhs", dict(m=64, n=65535 * 128 + 8, k=128, g=2, num_groups=2), 232448),
    ("moe", "moe_bf16_grad_rhs", dict(m=64, n=128, k=128, g=65536, num_groups=65536), 232448),
    ("moe", "moe_bf16_grad_rhs", dict(m=64, n=128, k=128, g=2, num_groups=2), 1024),
    ("dense", "dense_gemv_bf16", dict(m=1, n=BIG, k=64), 0),
    ("dense", "per_token_group_quant_fp8_out_scale_f32", dict(m=1000, k=4096), 0),
    ("dense", "per_token_group_quant_fp8_out_scale_f32", dict(m=BIG, k=2**17), 0),
    ("dense", "per_token_group_quant_fp8_out_scale_f32", dict(m=BIG, k=BIG), 0),
    ("dense", "dense_mm_bf16", dict(m=1, n=4096, k=64), 0),
    ("dense", "dense_mm_bf16", dict(m=BIG, n=4096, k=64), 101376),
]
ARMS = {"dense_mm_bf16": "dense_gemm_bf16"}  # whose struct the dispatcher shares


def python_launcher(stem: str, name: str, dims: dict):
    """The Python launcher a call of `name` runs (a dispatcher's: its arm for m)."""
    if name in ARMS:
        d = load_generated_module(folder(stem) / f"{name}.py", f"test_cuda_limits_d_{name}")
        return d.arm(d.pick(dims["m"]))
    return launcher(stem, name)


def expected(stem: str, name: str, dims: dict, smem_limit: int) -> tuple[str, str, list]:
    """What the Python launcher says: validate()'s message ("ok"), the
    launches' message with the device's limit ("ok"), the launches."""
    if name in ARMS:
        d = load_generated_module(folder(stem) / f"{name}.py", f"test_cuda_limits_d_{name}")
        lm = d.arm(d.pick(dims["m"]))
        args = call(stem, ARMS[name], **dims)
    else:
        lm = launcher(stem, name)
        args = call(stem, name, **dims)
    try:
        got = lm.validate(**args)
    except ValueError as e:
        return str(e), "-", []
    steps = lm.launches(got)
    try:
        lm.check_launches(steps, got, smem_limit)
    except ValueError as e:
        return "ok", str(e), []
    return "ok", "ok", [(*s.grid, *s.block, s.smem) for s in steps]


def harness(cases) -> str:
    """A program that makes each call through the C++ launcher: validate(),
    launch_error() with the device's limit, and (under nvcc) launch_<name>()
    with the stand-in runtime below, printing the launches it would make."""
    heads = sorted({name for _, name, _, _ in cases})
    lines = [f'#include "{h}.h"' for h in heads] + ["#include <cstdio>", r"""
static int optin = 0;
#ifdef __CUDACC__
// Stand-ins for the CUDA runtime calls of the launchers (linked with
// --wrap): a device with `optin` bytes of opt-in shared memory whose
// launches are printed instead of run (a nonzero
// __cudaPushCallConfiguration skips the launch).
extern "C" {
unsigned __wrap___cudaPushCallConfiguration(dim3 g, dim3 b, size_t smem, struct CUstream_st*) {
  std::printf("launch %u %u %u %u %u %u %zu\n", g.x, g.y, g.z, b.x, b.y, b.z, smem);
  return 1;
}
cudaError_t __wrap_cudaGetDevice(int* device) { *device = 0; return cudaSuccess; }
// The device is an sm_89 with 128 SMs: the mma.sync path, which the Python
// launcher's launches(dims) lists (the Hopper path needs compute capability 9.0).
cudaError_t __wrap_cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (device != 0) return cudaErrorInvalidValue;
  switch (attribute) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = optin; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 8; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 9; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 128; return cudaSuccess;
    default: return cudaErrorInvalidValue;
  }
}
cudaError_t __wrap_cudaFuncSetAttribute(const void*, cudaFuncAttribute attribute, int bytes) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || bytes > optin) return cudaErrorInvalidValue;
  return cudaSuccess;
}
cudaError_t __wrap_cudaGetLastError() { return cudaSuccess; }
}
#endif
static void show(const char* what, const char* why) { std::printf("%s %s\n", what, why ? why : "ok"); }
alignas(16) static unsigned char buf[1 << 12];
int main() {"""]
    for i, (stem, name, dims, smem) in enumerate(cases):
        lp = plan(stem, ARMS.get(name, name))
        struct = "".join(p[:1].upper() + p[1:] for p in name.split("_")) + "Args"
        lines.append(f"  {{  // case {i}")
        lines.append(f"    std::printf(\"case {i}\\n\");")
        lines.append(f"    {struct} a;")
        for arr in lp.arrays:
            if not arr.optional:
                lines.append(f"    a.{arr.name} = reinterpret_cast<decltype(a.{arr.name})>(buf);")
        if lp.has_workspace:
            lines.append("    a.workspace = buf;")
        for d in lp.dims + tuple(s.name for s in lp.scalars):
            if d in dims:
                lines.append(f"    a.{d} = {dims[d]};")
        lines.append(f"    optin = {smem};")
        lines.append(f"    show(\"validate\", {name}_validate(a));")
        if name not in ARMS:
            lines.append(f"    show(\"limits\", {name}_validate(a) ? \"-\" : {name}_launch_error(a, optin));")
        lines.append("#ifdef __CUDACC__")
        lines.append(f"    std::printf(\"rc %d\\n\", static_cast<int>(launch_{name}(a, nullptr)));")
        lines.append("#endif")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def parse_output(text: str) -> list[dict]:
    out: list[dict] = []
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "case":
            out.append({"launches": []})
        elif word == "launch":
            out[-1]["launches"].append(tuple(int(v) for v in rest.split()))
        else:
            out[-1][word] = rest
    return out


def check_program_output(text: str, *, launched: bool) -> None:
    results = parse_output(text)
    assert len(results) == len(CASES)
    for (stem, name, dims, smem), got in zip(CASES, results):
        why, limits, steps = expected(stem, name, dims, smem)
        where = f"{name} {dims} optin={smem}"
        # The Python messages end with the dims: " (m=..., ...)".
        if why == "ok":
            assert got["validate"] == "ok", where
        else:
            assert why.startswith(got["validate"] + " ("), (where, why, got)
        if name not in ARMS:
            if limits in ("ok", "-"):
                assert got["limits"] == limits, (where, got)
            else:
                assert limits.startswith(got["limits"] + " ("), (where, limits, got)
        if launched:
            # The stand-in device is an 8.9 (harness): a kernel whose archs do
            # not run there (specs/moe.gemm: sm_90a only) is refused before any
            # launch, with 209, cudaErrorNoKernelImageForDevice, as the Python
            # launcher refuses it (arch_error).
            refused = why == "ok" and bool(python_launcher(stem, name, dims).arch_error(89))
            assert got["launches"] == ([] if refused else steps), where
            assert int(got["rc"]) == (209 if refused else 0 if steps else 1), where  # 1: cudaErrorInvalidValue


def _includes() -> list[str]:
    return [f"-I{folder('dense')}", f"-I{folder('moe')}", f"-I{RUNTIME_INCLUDE_DIR}"]


def test_cases_cover_each_outcome():
    outcomes = [expected(*c) for c in CASES]
    assert any(w != "ok" for w, _, _ in outcomes)  # validate() objects
    assert any(w == "ok" and lim != "ok" for w, lim, _ in outcomes)  # shared memory
    assert any(any(s[2] > 1 for s in steps) for _, _, steps in outcomes)  # a z fold
    assert any(any(s[6] == 0 and s[1] > 1 for s in steps) for _, _, steps in outcomes)  # y


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
def test_cpp_headers_agree_with_the_python_launcher(tmp_path):
    """validate() and launch_error() of the headers, compiled with g++."""
    (tmp_path / "main.cc").write_text(harness(CASES))
    exe = tmp_path / "main"
    proc = subprocess.run(["g++", "-std=c++17", *_includes(), f"-I{cuda_include_dir()}",
                           str(tmp_path / "main.cc"), "-o", str(exe)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    check_program_output(out, launched=False)


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_cpp_host_launchers_make_the_python_launchers_launches(tmp_path):
    """launch_<kernel>() of the .cu files (nvcc's host pass; device code as
    PTX only), linked with stand-ins for the five runtime calls they make:
    each launch it would make is the Python launcher's, and a call that
    fails a check, or needs more shared memory than the device has, makes
    no launch and returns cudaErrorInvalidValue."""
    (tmp_path / "main.cu").write_text(harness(CASES))
    sources = sorted({(stem, n) for stem, name, _, _ in CASES
                      for n in ([name, *load_generated_module(
                          folder(stem) / f"{name}.py", f"test_cuda_limits_d_{name}").ARMS]
                          if name in ARMS else [name])})
    wrapped = ("__cudaPushCallConfiguration", "cudaGetDevice", "cudaDeviceGetAttribute",
               "cudaFuncSetAttribute", "cudaGetLastError")
    exe = tmp_path / "main"
    proc = subprocess.run(
        [str(find_nvcc()), "-std=c++17", "-gencode=arch=compute_90a,code=compute_90a",
         *_includes(), str(tmp_path / "main.cu"),
         *[str(folder(stem) / f"{n}.cu") for stem, n in sources], "-o", str(exe),
         "-Xlinker", ",".join(f"--wrap={w}" for w in wrapped)],
        capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    check_program_output(out, launched=True)
