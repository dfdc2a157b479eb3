"""The launchers of a spec built for sm_12x: the CuPy (Python) launcher on
the stand-in device and the C++ launcher on the emulator run the mma.sync
body on 12.0 and 12.1 when the spec declares their arch, and refuse, naming
the device's compute capability and the declared archs, a device none of
the declared archs runs on (an arch-specific build runs on its own compute
capability only: an sm_120a build never runs on a 12.1 GB10). The Rust
launchers share the rule (common.rs `arch_runs_on`, checked against the
Python one by tests/launchers/test_rust_launchers.py's plan cases)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gemmgen.backends import cuda as cuda_backend
from gemmgen.build import render_spec
from gemmgen.cases import Case
from gemmgen.harness import cupy_standin
from gemmgen.harness.runner import load_generated_module
from gemmgen.harness.verify_cuda import CppLaunchError, run_cpp_launcher
from gemmgen.reference import compare, reference

SPEC = """\
target cuda {
  archs ARCHS
}

kernel sm12x_gemm {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [k, n]
  out bf16
  tile m=64 n=128 k=32
  backends cuda
}
"""
BOTH, ONLY_120A = "sm_120a sm_121a", "sm_120a"


@functools.cache
def built(archs: str):
    root = Path(tempfile.mkdtemp(prefix="gemmgen-sm12x-"))
    (root / "specs").mkdir()
    path = root / "specs" / f"sm12x_{len(archs)}.gemm"
    path.write_text(SPEC.replace("ARCHS", archs))
    rendered = render_spec(path)
    cuda = root / "cuda"
    cuda.mkdir()
    for rel, text in rendered.files.items():
        if rel.parts[0] == "cuda":
            (cuda / rel.name).write_text(text)
    kernel = rendered.spec.kernel("sm12x_gemm")
    return kernel, cuda_backend.plan(kernel, rendered.spec), cuda


_loaded = iter(range(10**6))


def launcher(archs: str):
    _, _, cuda = built(archs)
    return load_generated_module(cuda / "sm12x_gemm.py", f"test_sm12x_{next(_loaded)}")


def to_device(cupy, x):
    x = np.asarray(x)
    bits = x.view(np.uint16) if x.dtype.name == "bfloat16" else x
    return cupy.asarray(bits).view(x.dtype) if x.dtype.name == "bfloat16" else cupy.asarray(x)


CASE = Case("small", m=20, n=128, k=64)


def test_arch_rule_of_the_python_launcher():
    both, only = launcher(BOTH), launcher(ONLY_120A)
    assert both.arch_error(120) is None and both.arch_error(121) is None
    assert both.nvrtc_arch(121) == "sm_121a" and both.nvrtc_arch(90) == "sm_90a"
    assert only.arch_error(120) is None
    message = only.arch_error(121)
    assert message and "compute capability 12.1 (sm_121)" in message, message
    assert "(sm_120a) runs on" in message
    assert "older than" in both.arch_error(90) and "older than" in only.arch_error(100)


@pytest.mark.parametrize("device", ["sm_120a", "sm_121a"])
def test_cupy_call_runs_the_mma_sync_body_on_12x(device):
    kernel, _, cuda = built(BOTH)
    module = launcher(BOTH)
    inputs = CASE.inputs(kernel, 3)
    with cupy_standin.install(cuda, device) as cupy:
        out = module.sm12x_gemm(**{a: cupy.asarray(v.view(np.uint16)).view(v.dtype)
                                   if v.dtype.name == "bfloat16" else cupy.asarray(v)
                                   for a, v in inputs.items()})
        got = out.host() if hasattr(out, "host") else cupy.asnumpy(out)
        assert any(f"-arch={device}" in " ".join(map(str, o)) for o in cupy.options_seen), cupy.options_seen
    got = np.asarray(got)
    if got.dtype == np.uint16:
        got = got.view("bfloat16") if hasattr(np, "bfloat16") else got
    import ml_dtypes

    got = got.view(ml_dtypes.bfloat16) if got.dtype == np.uint16 else got
    assert compare(got, reference(kernel, **inputs), kernel, k=CASE.k, inputs=inputs).passed


def test_cupy_call_refuses_a_device_no_declared_arch_runs_on():
    kernel, _, cuda = built(ONLY_120A)
    module = launcher(ONLY_120A)
    inputs = CASE.inputs(kernel, 4)
    with cupy_standin.install(cuda, "sm_121a") as cupy:
        args = {a: cupy.asarray(v.view(np.uint16)).view(v.dtype) for a, v in inputs.items()}
        with pytest.raises(RuntimeError, match=r"compute capability 12\.1 \(sm_121\), which none of the "
                                               r"archs .*sm12x_7\.gemm declares \(sm_120a\) runs on"):
            module.sm12x_gemm(**args)
        assert not cupy.launches and not cupy.options_seen


def test_cpp_launcher_runs_on_12x_and_refuses_a_wrong_arch():
    kernel, plan, cuda = built(BOTH)
    inputs = CASE.inputs(kernel, 5)
    got = run_cpp_launcher(plan, cuda, inputs, arch="sm_121a")
    assert compare(got, reference(kernel, **inputs), kernel, k=CASE.k, inputs=inputs).passed
    kernel, plan, cuda = built(ONLY_120A)
    with pytest.raises(CppLaunchError, match=r"launch_sm12x_gemm returned cudaErrorNoKernelImageForDevice"):
        run_cpp_launcher(plan, cuda, inputs, arch="sm_121a")


MXFP8 = """\
target cuda {
  archs sm_120a sm_121a
}

kernel mxfp8_gemm {
  op dense
  lhs e4m3 [m, k]
  rhs e4m3 [n, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  tile m=64 n=128 k=32
  backends cuda
}
"""


@pytest.mark.slow
def test_mxfp8_with_row_major_scales_runs_on_the_block_scaled_fp8_path(tmp_path):
    """MXFP8 with row-major e8m0 scales per 32 K on both operands is the
    existing block-scaled FP8 GEMM with a K tile of 32: the C++ launcher on
    the emulated sm_120a matches the reference (ragged shape, several K
    blocks, fresh random scales)."""
    (tmp_path / "specs").mkdir()
    path = tmp_path / "specs" / "mxfp8.gemm"
    path.write_text(MXFP8)
    rendered = render_spec(path)
    cuda = tmp_path / "cuda"
    cuda.mkdir()
    for rel, text in rendered.files.items():
        if rel.parts[0] == "cuda":
            (cuda / rel.name).write_text(text)
    kernel = rendered.spec.kernel("mxfp8_gemm")
    case = Case("ragged", m=77, n=200, k=160)
    inputs = case.inputs(kernel, 9)
    got = run_cpp_launcher(cuda_backend.plan(kernel, rendered.spec), cuda, inputs, arch="sm_120a")
    result = compare(got, reference(kernel, **inputs), kernel, k=case.k, inputs=inputs)
    assert result.passed, result.detail
