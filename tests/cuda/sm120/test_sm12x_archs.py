"""The workstation Blackwell archs (sm_120, sm_120a, sm_121, sm_121a):
declarable, their limits as the toolkit's own headers state them, the
devices `explain` bounds on, the positioned error for what sm_12x lacks,
and a spec built for sm_120a and sm_121a that nvcc compiles for both with
no spill and within 101,376 bytes of shared memory (the mma.sync body)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from gemmgen import archs, devices, ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.diagnostics import SpecError
from gemmgen.harness import nvcc
from gemmgen.harness.toolchain import cuda_include_dir, find_nvcc
from gemmgen.parse import parse
from gemmgen.validate import validate


def parse_spec_text(text: str, path: str) -> ir.Spec:
    return validate(parse(text, path))


SPEC = """\
target cuda {
  archs sm_120a sm_121a
}

kernel mx_archs_gemm {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [k, n]
  out bf16
  tile m=64 n=128 k=32
  backends cuda
}
"""


def test_sm12x_archs_are_declarable():
    for arch in ("sm_120", "sm_120a", "sm_121", "sm_121a"):
        spec = parse_spec_text(SPEC.replace("sm_120a sm_121a", arch), "t.gemm")
        assert spec.target(ir.Backend.CUDA).cuda_archs == (arch,)
        assert archs.shared_memory_limit(arch) == 101376
        assert archs.fp8_mma_sync(arch)
    assert archs.sm_count("sm_121a") == devices.DEVICES["gb10"].sms == 48
    assert archs.sm_count("sm_120a") == devices.DEVICES["rtx5090"].sms == 170
    assert devices.DEVICES["rtxpro6000"].sms == 188


@pytest.mark.parametrize("form", ["sm_120f", "sm_121f", "sm_122a"])
def test_family_forms_and_unknown_sm12x_archs_are_refused(form):
    with pytest.raises(SpecError) as e:
        parse_spec_text(SPEC.replace("sm_120a sm_121a", form), "t.gemm")
    assert f"'{form}'" in str(e.value) and ":2:" in str(e.value), str(e.value)


def test_wgmma_on_sm12x_is_a_positioned_error():
    text = SPEC.replace("archs sm_120a sm_121a", "archs sm_90a sm_121a").replace(
        "  backends cuda", "  mma wgmma\n  backends cuda")
    with pytest.raises(SpecError) as e:
        parse_spec_text(text, "t.gemm")
    message = str(e.value)
    assert "t.gemm:11:3:" in message and "sm_121a" in message and "tcgen05" in message, message


def test_devices_run_the_right_build():
    gb10, rtx = devices.DEVICES["gb10"], devices.DEVICES["rtx5090"]
    assert devices.runs_arch(gb10, ("sm_120a", "sm_121a")) == "sm_121a"
    assert devices.runs_arch(rtx, ("sm_120a", "sm_121a")) == "sm_120a"
    # An arch-specific cubin runs on its own compute capability only.
    assert devices.runs_arch(gb10, ("sm_120a",)) is None
    assert devices.runs_arch(gb10, ("sm_120",)) == "sm_120"
    spec = parse_spec_text(SPEC, "t.gemm")
    assert devices.default_device(spec, spec.kernels[0]).name == "gb10"


def _cutlass_include() -> Path | None:
    found = importlib.util.find_spec("cutlass_library")
    if found is None or not found.submodule_search_locations:
        return None
    include = Path(next(iter(found.submodule_search_locations))) / "source" / "include"
    return include if (include / "cutlass" / "arch" / "arch.h").is_file() else None


@pytest.mark.skipif(_cutlass_include() is None, reason="nvidia-cutlass headers are not installed")
def test_limits_match_cutlass_arch_h():
    text = (_cutlass_include() / "cutlass" / "arch" / "arch.h").read_text()
    found = re.search(r"sm120_smem_capacity_bytes\s*=\s*(\d+)", text)
    assert found and int(found.group(1)) == archs.SMEM_OPTIN[120] == archs.SMEM_OPTIN[121]


def test_limits_match_cccl_arch_traits():
    header = cuda_include_dir() / "cccl" / "cuda" / "__device" / "arch_traits.h"
    if not header.is_file():
        pytest.skip("CCCL's arch_traits.h is not installed")
    text = header.read_text()
    # 12.0: 100 KiB per SM, opt-in = that less the 1 KiB reserved per block
    # (reserved: 1024 from compute capability 8.0); 12.1 takes 12.0's.
    sm120 = re.search(r"arch_traits<arch_id::sm_120>\(\) noexcept\n\{(.*?)\n\}", text, re.S)
    assert sm120, f"no traits of sm_120 in {header}"
    per_sm = re.search(r"max_shared_memory_per_multiprocessor\s*=\s*(\d+)\s*\*\s*1024", sm120.group(1))
    assert per_sm and int(per_sm.group(1)) * 1024 == archs.SMEM_PER_SM_SM12X
    assert "max_shared_memory_per_multiprocessor - __traits.reserved_shared_memory_per_block" in sm120.group(1)
    sm121 = re.search(r"arch_traits<arch_id::sm_121>\(\) noexcept\n\{(.*?)\n\}", text, re.S)
    assert sm121 and "arch_traits<arch_id::sm_120>()" in sm121.group(1)
    assert re.search(r"reserved_shared_memory_per_block\s*=\s*\(__cc >= compute_capability\{80\}\) \? 1024", text)
    assert archs.SMEM_PER_SM_SM12X - 1024 == archs.SMEM_OPTIN[120]


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_spec_for_sm120a_and_sm121a_compiles_without_spills(tmp_path):
    from cuda_helpers import render_cuda

    spec, cuda, _ = render_cuda(tmp_path, "mx_archs", SPEC)
    kernel = spec.kernel("mx_archs_gemm")
    lp = cuda_backend.plan(kernel, spec)
    assert lp.archs == ("sm_120a", "sm_121a")
    smem = {s.entry: s.smem for v in lp.variants for s in v.steps}
    source = (cuda / "mx_archs_gemm.cu").read_text()
    for arch in ("sm_120a", "sm_121a"):
        result = nvcc.compile_check(source, arch, name_for_errors="mx_archs_gemm.cu",
                                    include_dirs=(cuda,), extra_flags=("-Werror", "all-warnings"))
        assert set(result.kernels) == set(lp.entries)
        sass = nvcc.sass_summary(result.cubin)
        for entry, usage in result.kernels.items():
            assert usage.spill_stores == usage.spill_loads == 0, (arch, entry, usage)
            assert usage.static_smem + smem.get(entry, 0) <= 101376, (arch, entry, usage)
        gemm = sass[lp.variants[0].steps[-1].entry]
        assert "HMMA" in " ".join(gemm.opcodes), (arch, gemm.opcodes)
