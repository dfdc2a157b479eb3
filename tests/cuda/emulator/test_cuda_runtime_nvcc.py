"""Static nvcc checks: the runtime's PTX assembles for every target arch, the
sample GEMM has no spills and the SASS mix a tensor-core GEMM should have;
and the parsers behind those checks."""

import pytest

from cuda_runtime_cases import CUDA_SRC, GEMM_SMEM_BYTES
from gemmgen.harness import nvcc

ARCHS = ("sm_80", "sm_89", "sm_90a")

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


def compile_file(name: str, arch: str, **kwargs) -> nvcc.CompileResult:
    path = CUDA_SRC / name
    return nvcc.compile_check(path.read_text(), arch, name_for_errors=f"tests/cuda_src/{name}", **kwargs)


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_sample_gemm_compiles_without_spills(arch):
    result = compile_file("sample_gemm.cu", arch)
    usage = result.kernels["sample_gemm_bf16"]
    assert usage.arch == arch
    assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
    assert 0 < usage.registers <= 255
    assert GEMM_SMEM_BYTES <= usage.dynamic_smem_available
    assert set(result.kernels) >= {"sample_gemm_bf16", "sample_gemm_bf16_bug_no_sync"}


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("arch", ARCHS)
def test_sample_gemm_sass_uses_tensor_cores_ldmatrix_and_cp_async(arch):
    sass = nvcc.sass_summary(compile_file("sample_gemm.cu", arch).cubin)["sample_gemm_bf16"]
    # 2 k16 steps x 2 x 4 mma tiles per warp.
    assert sass.count("HMMA", "16816", "F32", "BF16") == 16
    assert sass.count("LDSM", "M88", "4") > 0 and sass.count("LDSM", "MT88", "4") > 0
    assert sass.count("LDGSTS", "128", "ZFILL") > 0


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("arch", ARCHS)
def test_every_primitive_assembles(arch):
    defines = {"GG_NO_FP8": 1} if arch == "sm_80" else None
    result = compile_file("primitives.cu", arch, defines=defines)
    assert all(u.spills == 0 for u in result.kernels.values())
    sass = nvcc.sass_summary(result.cubin)
    assert sass["mma_bf16"].count("HMMA", "BF16") == 1
    assert sass["mma_f16"].count("HMMA") == 1
    assert sass["mma_s8"].count("IMMA", "16832") == 1
    ldsm = sass["ldmatrix_all"]
    for variant in ("M88", "M88.2", "M88.4", "MT88", "MT88.2", "MT88.4"):
        assert f"LDSM.16.{variant}" in ldsm.opcodes, variant
    assert sass["cp_async_sizes"].ldgsts == 3
    assert sass["global_128"].count("LDG", "128") == 2
    assert sass["global_128"].count("LDG", "128", "CONSTANT") == 1
    if arch == "sm_89":
        assert sass["mma_e4m3"].count("QMMA", "E4M3") == 1
        assert sass["mma_e5m2"].count("QMMA", "E5M2") == 1
    if arch == "sm_90a":
        # NB: Hopper has no QMMA for mma.sync; ptxas emulates FP8 mma.sync
        # with HMMA (FP8 at full rate needs wgmma there).
        assert sass["mma_e4m3"].tensor_core > 0


@needs_nvcc
def test_fp8_mma_before_sm_89_is_a_compile_error():
    with pytest.raises(nvcc.NvccError, match="needs sm_89 or newer"):
        compile_file("primitives.cu", "sm_80")


def test_gencode_flags():
    assert nvcc.gencode("sm_80") == "-gencode=arch=compute_80,code=sm_80"
    assert nvcc.gencode("sm_90a") == "-gencode=arch=compute_90a,code=sm_90a"
    assert nvcc.gencode("sm_100f") == "-gencode=arch=compute_100f,code=sm_100f"
    with pytest.raises(ValueError, match="not a CUDA arch"):
        nvcc.gencode("compute_90")
    assert nvcc.shared_memory_limit("sm_90a") == 232448
    assert nvcc.shared_memory_limit("sm_89") == 101376


PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm_a' for 'sm_90a'
ptxas info    : Function properties for gemm_a
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 4096 bytes smem
ptxas info    : Compiling entry function 'gemm_b' for 'sm_90a'
ptxas info    : Function properties for gemm_b
    48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads
ptxas info    : Used 255 registers, 400 bytes cmem[0]
"""


def test_resource_usage_parser():
    kernels = nvcc._parse_resource_usage(PTXAS_LOG, "sm_90a")
    assert kernels["gemm_a"] == nvcc.ResourceUsage("gemm_a", "sm_90a", 168, 0, 0, 0, 4096, 1, 0)
    b = kernels["gemm_b"]
    assert (b.registers, b.spill_stores, b.spill_loads, b.stack_frame, b.constant_bytes) == (255, 40, 36, 48, 400)
    assert b.spills == 76


SASS = """\
\tcode for sm_90a
\t\tFunction : gemm
        /*0000*/                   LDC R1, c[0x0][0x28] ;                     /* 0x00000a00ff017b82 */
        /*0010*/                   LDGSTS.E.BYPASS.128.ZFILL [R3], desc[UR4][R4.64], P0 ;
        /*0020*/              @!P0 LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*0030*/                   LDSM.16.MT88.4 R8, [R6] ;
        /*0040*/                   HMMA.16816.F32.BF16 R12, R8, R4, R12 ;
        /*0050*/                   HMMA.16816.F32.BF16 R16, R8, R6, R16 ;
        /*0060*/                   EXIT ;
\t\tFunction : other
        /*0000*/                   IMMA.16832.S8.S8 R4, R8, R12, R4 ;
"""


def test_sass_parser():
    summary = nvcc.parse_sass(SASS)
    gemm = summary["gemm"]
    assert gemm.instructions == 7
    assert (gemm.tensor_core, gemm.ldsm, gemm.ldgsts, gemm.ldg_128) == (2, 1, 1, 1)
    assert gemm.opcodes["HMMA.16816.F32.BF16"] == 2
    assert summary["other"].tensor_core == 1
