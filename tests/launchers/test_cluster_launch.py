"""The cluster launch of every launcher family (docs/cuda.md, "Cluster
launch"): a launch plan step whose `cluster` is not (1, 1, 1) is launched
as thread-block clusters (cudaLaunchKernelEx / cuLaunchKernelEx with the
cluster-dimension attribute), every other one exactly as before.

No body asks for a cluster yet, so these tests force one: `clustered()`
plans the sm_100a body's persistent launch of a specs/b200.gemm kernel
with clusters of 2 x 1 x 1 (its grid rounded up to a multiple of 2; the
extra block finds no tile), a test-only override of the plan. Through it:

- the CuPy launcher calls the driver's cuLaunchKernelEx (ctypes) on the
  stand-in (gemmgen/harness/cupy_standin.py), which reads the CUlaunchConfig
  at cuda.h's offsets (checked here against cuda.h with gcc) and refuses
  what the driver refuses; the output matches the reference;
- the C++ launcher (and through it the JAX FFI handler and the PyTorch op,
  which call gg_<kernel>_launch) compiles with nvcc for sm_100a and runs on
  the emulator (its cudaLaunchKernelExC launches the clusters), and its
  launch_error refuses a grid its cluster does not divide;
- specs/ has cluster launches in its 2-CTA kernels only (specs/b200.gemm's
  m=256 entries); every other generated file is what it was.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gemmgen import ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda.expr import cdiv
from gemmgen.backends.cuda.gemm import plans as gemm_plans
from gemmgen.backends.cuda.gemm import tcgen05
from gemmgen.backends.cuda.steps import Grid
from gemmgen.build import render_spec
from gemmgen.cases import Case
from gemmgen.harness import cupy_standin
from gemmgen.harness.runner import load_generated_module
from gemmgen.reference import compare, reference

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "specs" / "b200.gemm"
# A kernel of specs/b200.gemm without a 2-CTA entry (the MXFP8 experts):
# fill, worklist, then the clustered _sm100 launch.
NAME = "b200_mxfp8_moe_grouped_gemm"
CASE = Case("groups", m=150, n=192, k=320, group_sizes=(100, 0, 50))
CLUSTER = (2, 1, 1)


_LAUNCH = tcgen05.BODY.launch  # the body's own


def _clustered_launch(kernel, bp, t, steps, round_up: bool = True):
    """The sm_100a body's launches with its last (the persistent kernel) in
    clusters of CLUSTER, its grid x rounded up to a multiple of 2 (or, with
    `round_up` False, left as the body's: an odd SM count makes a grid the
    driver refuses)."""
    bl = _LAUNCH(kernel, bp, t, steps)
    last = bl.steps[-1]
    x = cdiv(last.grid.x, CLUSTER[0]) * CLUSTER[0] if round_up else last.grid.x
    grid = Grid(x, last.grid.y, last.grid.z)
    return dataclasses.replace(bl, steps=(*bl.steps[:-1],
                                          dataclasses.replace(last, grid=grid, cluster=CLUSTER)))


@functools.cache
def clustered(round_up: bool = True) -> tuple[ir.Kernel, object, Path]:
    """(kernel, its clustered LaunchPlan, a folder of specs/b200.gemm's cuda/
    files with the kernel's own three rendered from that plan)."""
    rendered = render_spec(SPEC)
    folder = Path(tempfile.mkdtemp(prefix="gemmgen-cluster-"))
    for rel, text in rendered.files.items():
        if rel.parts[0] == "cuda":
            (folder / rel.name).write_text(text)
    kernel = rendered.spec.kernel(NAME)
    with clustered_plans(round_up):
        plan = cuda_backend.plan(kernel, rendered.spec)
        for rel, text in cuda_backend.render_kernel(kernel, rendered.spec).items():
            (folder / rel.name).write_text(text)
    return kernel, plan, folder


@contextlib.contextmanager
def clustered_plans(round_up: bool = True):
    """Within it, the sm_100a body's plans launch in clusters (the override)."""
    saved = gemm_plans.BODIES, tcgen05.BODY
    body = dataclasses.replace(tcgen05.BODY, launch=functools.partial(_clustered_launch,
                                                                      round_up=round_up))
    gemm_plans.BODIES = tuple(body if b is tcgen05.BODY else b for b in saved[0])
    tcgen05.BODY = body  # tcgen05._plan's BodyPlan is a copy of it
    try:
        yield
    finally:
        gemm_plans.BODIES, tcgen05.BODY = saved


_loaded = iter(range(10**6))


def launcher():
    return load_generated_module(clustered()[2] / f"{NAME}.py", f"test_cluster_{next(_loaded)}")


def test_the_override_plans_a_cluster_launch():
    _, plan, folder = clustered()
    assert plan.has_clusters
    steps = plan.default.path("tcgen05").steps
    assert [s.cluster for s in steps] == [(1, 1, 1), (1, 1, 1), CLUSTER]
    assert "cudaLaunchKernelEx(&config, " + NAME + "_sm100" in (folder / f"{NAME}.cu").read_text()
    module = launcher()
    dims = module.validate(**CASE.inputs(plan.kernel, 1))
    launches = module.launches(dims, 100, 3)  # 3 SMs: the grid rounds up to 4
    assert launches[-1].cluster == CLUSTER and launches[-1].grid == (4, 1, 1)
    assert [x.cluster for x in launches[:-1]] == [(1, 1, 1)] * 2
    odd = dataclasses.replace(launches[-1], grid=(3, 1, 1))
    assert "not a multiple of its cluster's 2" in module.launch_error(odd)
    big = dataclasses.replace(launches[-1], cluster=(4, 2, 2), grid=(16, 2, 2))
    assert "over the portable 8" in module.launch_error(big)


# The kernels of specs/ with a 2-CTA tile (an m=256 LUT entry on sm_100a:
# docs/cuda-sm100.md, "The 2-CTA tile"), whose launches are cluster ones.
PAIR_KERNELS = {"b200_bf16_moe_grouped_gemm", "b200_fp8_moe_grouped_gemm",
                "b200_bf16_moe_gateup_silu", "b200_fp8_blockscaled_moe_grouped_gemm",
                "b200_mxfp4_gemm", "b200_mxfp4_moe_grouped_gemm", "b200_nvfp4_gemm",
                "b200_nvfp4_moe_grouped_gemm", "b200_nvfp4_moe_gateup_silu",
                "b200_w4a8_moe_grouped_gemm", "b200_w4a16_moe_grouped_gemm"}


def test_only_the_pair_kernels_of_specs_have_a_cluster_launch():
    """Every launch of specs/ is a plain one but the 2-CTA tile's, and no
    generated launcher of another kernel (the runtime headers' copies
    aside) carries the cluster launch; the Rust crate of a spec with one
    has it once, in its shared modules."""
    for path in sorted((REPO / "specs").glob("*.gemm")):
        rendered = render_spec(path)
        for k in rendered.spec.kernels_for(ir.Backend.CUDA):
            assert cuda_backend.plan(k, rendered.spec).has_clusters == (k.name in PAIR_KERNELS), \
                k.name
        for rel, text in rendered.files.items():
            if rel.name.startswith("gg_") or rel.parts[0] != "cuda":
                continue  # runtime header copies; the Rust crate and the torch ops are per spec
            clustered = bool(re.search(r"LaunchKernelEx|MAX_CLUSTER_BLOCKS|clusterDim", text))
            assert clustered == (rel.stem in PAIR_KERNELS and rel.suffix in (".cu", ".py")), rel


DTYPE_BITS = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e8m0fnu": np.uint8}


def _device(cupy, module, name, x):
    if x is None or name not in module.DTYPES:
        return x
    x = np.asarray(x)
    bits = DTYPE_BITS.get(x.dtype.name)
    return cupy.asarray((x.view(bits) if bits else x).reshape(-1)).reshape(x.shape)


def _run_cupy(num_sms: int | None = None, **mode):
    kernel, _, folder = clustered()
    module = launcher()
    inputs = CASE.inputs(kernel, 53)
    with cupy_standin.install(folder, "sm_100a", **mode) as cupy:
        if num_sms is not None:
            cupy.sms = num_sms
        out = getattr(module, NAME)(**{a: _device(cupy, module, a, v) for a, v in inputs.items()})
        import ml_dtypes

        got = out.host().copy().view(ml_dtypes.bfloat16)
    return kernel, inputs, got, cupy


def test_cupy_launcher_launches_clusters_on_the_standin():
    """On 3 SMs (an odd persistent grid, rounded up to 4 blocks): the fill
    and worklist launched by CuPy's RawKernel, the tcgen05 kernel by
    cuLaunchKernelEx with the cluster attribute; the output matches the
    reference."""
    kernel, inputs, got, cupy = _run_cupy(num_sms=3)
    result = compare(got, reference(kernel, **inputs), kernel, k=CASE.k, inputs=inputs)
    assert result.passed, result.detail
    assert [(x["entry"], x["cluster"], x["attribute_ids"]) for x in cupy.launches] == [
        (f"{NAME}_fill", (1, 1, 1), ()), (f"{NAME}_worklist", (1, 1, 1), ()),
        (f"{NAME}_sm100", CLUSTER, (cupy_standin.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,))]
    assert cupy.launches[-1]["grid"] == (4, 1, 1) and cupy.launches[-1]["block"] == (192, 1, 1)
    assert not cupy.refused


def _standin_call(config_changes: dict, cluster=CLUSTER, attribute_id=4, extra=None):
    """cuLaunchKernelEx of the stand-in on the clustered kernel with a
    config changed from a valid one; its CUresult."""
    folder = clustered()[2]
    module = launcher()
    with cupy_standin.install(folder, "sm_100a", launch=False) as cupy:
        function = module._function(100, f"{NAME}_sm100", 0)
        attribute = module._LaunchAttribute(id=attribute_id)
        attribute.value[0] = cluster[0] | cluster[1] << 32
        attribute.value[1] = cluster[2]
        values = {"grid": (2, 1, 1), "block": (192, 1, 1), "shared_mem_bytes": 0, "stream": 0,
                  "attrs": ctypes.pointer(attribute), "num_attrs": 1} | config_changes
        config = module._LaunchConfig(grid=(ctypes.c_uint * 3)(*values["grid"]),
                                      block=(ctypes.c_uint * 3)(*values["block"]),
                                      shared_mem_bytes=values["shared_mem_bytes"],
                                      stream=values["stream"], attrs=values["attrs"],
                                      num_attrs=values["num_attrs"])
        params = (ctypes.c_void_p * 1)()
        code = module._launch_kernel_ex()(ctypes.byref(config), function.ptr, params, extra)
        return code, cupy


@pytest.mark.parametrize("changes, cluster, attribute_id, code, why", [
    ({"grid": (3, 1, 1)}, CLUSTER, 4, 912, "not a multiple of the cluster"),
    ({"grid": (16, 1, 1)}, (16, 1, 1), 4, 912, "not 1..8 blocks"),
    ({}, CLUSTER, 5, 1, "is not the cluster dimension"),
    ({"attrs": None}, CLUSTER, 4, 1, "attributes at NULL"),
])
def test_the_standin_refuses_what_the_driver_refuses(changes, cluster, attribute_id, code, why):
    got, cupy = _standin_call(changes, cluster, attribute_id)
    assert got == code and why in cupy.refused[-1], cupy.refused
    assert not cupy.launches


def test_the_standin_reads_cuda_h_layouts():
    """The stand-in's offsets of CUlaunchConfig and CUlaunchAttribute, and
    the attribute id, are cuda.h's (gcc's offsetof / sizeof)."""
    from gemmgen.harness.toolchain import cuda_include_dir

    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    c = cupy_standin.LAUNCH_CONFIG
    a = cupy_standin.LAUNCH_ATTRIBUTE
    source = "\n".join([
        "#include <cuda.h>", "#include <stddef.h>", "#include <stdio.h>", "int main(void) {",
        *(f'  printf("{f} %zu\\n", offsetof(CUlaunchConfig, {f}));' for f in c if f != "sizeof"),
        '  printf("config %zu\\n", sizeof(CUlaunchConfig));',
        '  printf("id %zu\\n", offsetof(CUlaunchAttribute, id));',
        '  printf("value %zu\\n", offsetof(CUlaunchAttribute, value));',
        '  printf("clusterDim %zu\\n", offsetof(CUlaunchAttributeValue, clusterDim.x));',
        '  printf("attribute %zu\\n", sizeof(CUlaunchAttribute));',
        '  printf("cluster_id %d\\n", (int)CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);',
        '  printf("invalid_cluster %d\\n", (int)CUDA_ERROR_INVALID_CLUSTER_SIZE);',
        "  return 0;", "}"])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "layout.c").write_text(source)
        subprocess.run(["gcc", f"-I{cuda_include_dir()}", "-o", f"{tmp}/layout", f"{tmp}/layout.c"],
                       check=True)
        out = dict(line.split() for line in subprocess.run(
            [f"{tmp}/layout"], capture_output=True, text=True, check=True).stdout.splitlines())
    for f in c:
        if f != "sizeof":
            assert int(out[f]) == c[f], f
    assert int(out["config"]) == c["sizeof"] and int(out["attribute"]) == a["sizeof"]
    assert int(out["id"]) == a["id"] and int(out["value"]) == a["value"]
    assert int(out["clusterDim"]) == 0
    assert int(out["cluster_id"]) == cupy_standin.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION == 4
    assert int(out["invalid_cluster"]) == cupy_standin.CUDA_ERROR_INVALID_CLUSTER_SIZE
    module = launcher()
    assert ctypes.sizeof(module._LaunchConfig) == c["sizeof"]
    assert ctypes.sizeof(module._LaunchAttribute) == a["sizeof"]
    assert module._LaunchConfig.attrs.offset == c["attrs"]
    assert module._LaunchConfig.stream.offset == c["hStream"]
    assert module._LaunchConfig.num_attrs.offset == c["numAttrs"]
    assert module._LaunchAttribute.value.offset == a["value"]


def test_cpp_cluster_launch_compiles_with_nvcc(tmp_path):
    """The C++ launcher's cluster launch (cudaLaunchKernelEx of the real
    cuda_runtime.h, the cluster attribute) through nvcc's host and device
    passes for sm_100a."""
    from gemmgen.harness.toolchain import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    _, _, folder = clustered()
    proc = subprocess.run([str(nvcc), "-c", "-std=c++17", "-gencode", "arch=compute_100a,code=sm_100a",
                           f"-I{folder}", "-o", str(tmp_path / "k.o"),
                           str(folder / f"{NAME}.cu")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    symbols = subprocess.run(["nm", "-C", str(tmp_path / "k.o")], capture_output=True, text=True,
                             check=False).stdout
    assert "cudaLaunchKernelExC" in symbols, "the host launcher does not call cudaLaunchKernelEx"


def test_cpp_launcher_launches_clusters_on_the_emulator():
    """launch_<kernel>() on an emulated B200 of 3 SMs: the fill and worklist
    by <<<>>>, the tcgen05 kernel by cudaLaunchKernelEx as 2 clusters of 2
    blocks (a grid of 4); the output matches the reference."""
    from gemmgen.harness.verify_cuda import run_cpp_launcher

    kernel, plan, folder = clustered()
    inputs = CASE.inputs(kernel, 59)
    logs: list[str] = []
    got = run_cpp_launcher(plan, folder, inputs, arch="sm_100a", num_sms=3, logs=logs)
    result = compare(got, reference(kernel, **inputs), kernel, k=CASE.k, inputs=inputs)
    assert result.passed, result.detail


BODY_GRID = "gg_min(num_sms, (gg_cdiv(m, 128) + g) * gg_cdiv(n_out, 128))"
OVERRIDE_GRID = f"gg_cdiv({BODY_GRID}, 2) * 2"


def test_the_clustered_files_are_formatted():
    """The cluster launch's text is laid out as the formatters lay it out:
    clang-format (the repository's style) for the .cu and .h, ruff for the
    Python launcher."""
    _, _, folder = clustered()
    bin_dir = Path(sys.executable).parent
    clang_format = shutil.which("clang-format", path=str(bin_dir)) or shutil.which("clang-format")
    ruff = shutil.which("ruff", path=str(bin_dir)) or shutil.which("ruff")
    if clang_format is None or ruff is None:
        pytest.skip("clang-format or ruff not found")
    # The override's own grid (the body's, rounded up to an even count) is
    # longer than a line: the C++ launcher breaks its line after "=", the
    # Python one has no layout for `f(...) * 2`, so there the body's grid is
    # checked in its place.
    for suffix in (".cu", ".h"):
        text = (folder / f"{NAME}{suffix}").read_text()
        # The C++ grid line breaks after "=" as clang-format does (steps'
        # cpp_grid_at), so the override's own grid is checked there.
        assert (OVERRIDE_GRID in text) == (suffix == ".h")
        where = REPO / "generated" / "b200" / "cuda" / f"{NAME}{suffix}"
        proc = subprocess.run([clang_format, "--dry-run", "-Werror", "--style=file",
                               f"--assume-filename={where}"],
                              input=text, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr[:4000]
    text = (folder / f"{NAME}.py").read_text()
    assert OVERRIDE_GRID in text
    text = text.replace(OVERRIDE_GRID, BODY_GRID)
    for args in (["format", "--check", "--diff"], ["check", "--no-fix"]):
        proc = subprocess.run([ruff, *args, "--line-length", "100", "--stdin-filename",
                               str(REPO / "generated" / "b200" / "cuda" / f"{NAME}.py"), "-"],
                              input=text, capture_output=True, text=True, check=False, cwd=REPO)
        assert proc.returncode == 0, proc.stdout[:4000] + proc.stderr[:2000]


CPP_CHECK = """\
#include "@NAME@.h"

#include <cstdio>

int main() {
  @ARGS@ a;
  a.m = 150;
  a.n = 192;
  a.k = 320;
  a.g = 3;
  a.num_groups = 3;
  // On 10.0 with 3 SMs (grid 3: not a multiple of 2) and with 4 (grid 4).
  const char* odd = @NAME@_launch_error(a, -1, 100, 3);
  const char* even = @NAME@_launch_error(a, -1, 100, 4);
  std::printf("%s\\n%s\\n", odd ? odd : "ok", even ? even : "ok");
  return 0;
}
"""


def test_the_cpp_launch_error_refuses_a_grid_its_cluster_does_not_divide(tmp_path):
    """`<kernel>_launch_error` of the C++ header (the check launch_<kernel>
    makes before any launch) on a plan whose cluster launch keeps the
    body's grid: on 3 SMs (a grid of 3 blocks in clusters of 2) it names
    the launch, on 4 it passes; the Python launcher agrees."""
    from gemmgen.harness.toolchain import cuda_include_dir

    if shutil.which("g++") is None:
        pytest.skip("no g++")
    kernel, plan, folder = clustered(round_up=False)
    source = CPP_CHECK.replace("@NAME@", NAME).replace("@ARGS@", plan.args_struct)
    (tmp_path / "check.cc").write_text(source)
    subprocess.run(["g++", "-std=c++17", f"-I{folder}", f"-I{cuda_include_dir()}", "-o",
                    str(tmp_path / "check"), str(tmp_path / "check.cc")], check=True)
    odd, even = subprocess.run([str(tmp_path / "check")], capture_output=True, text=True,
                               check=True).stdout.splitlines()
    assert odd == (f"{NAME}: launch {NAME}_sm100 needs a grid that is a multiple of its "
                   "cluster"), odd
    assert even == "ok"
    module = load_generated_module(folder / f"{NAME}.py", f"test_cluster_odd_{next(_loaded)}")
    dims = module.validate(**CASE.inputs(kernel, 2))
    with pytest.raises(ValueError, match="needs grid x = 3, not a multiple of its cluster's 2"):
        module.launches(dims, 100, 3)
    assert module.launches(dims, 100, 4)[-1].grid == (4, 1, 1)
