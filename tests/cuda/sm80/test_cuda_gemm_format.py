"""The tile GEMM's generated .cu is emitted formatted and warning-free.

Over every tile GEMM of specs/ and of SPEC below (the formats, scale modes,
bias, activations, alpha and LUT rules specs/ does not use), and over kernel
names of every length (the entry points' layout depends on it):

- the kernel part of the .cu (what gemm.cu.j2 prints: everything before the
  host launcher of launch_impl.cuh.j2) passes `clang-format --dry-run
  -Werror` with the repository's .clang-format, and so do the tile GEMM's
  runtime headers; the generator never runs clang-format (the plan lays the
  entry points out as clang-format would);
- nvcc compiles it with `-Werror all-warnings` for each declared arch
  (tests/cuda/sm80/test_cuda_gemm.py compiles specs/ that way too, with the resource
  checks);
- g++ compiles it for the CPU emulation with `-Wall -Wextra -Werror`, with
  the runtime headers other than the tile GEMM's (gg_emu*.h,
  gg_primitives.cuh, gg_convert.cuh) as system headers: their own warnings
  are theirs to fix, and the generated code and gg_gemm*.cuh, gg_widen.cuh,
  gg_scales.cuh, gg_epilogue.cuh and gg_runtime.cuh must not add any.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gemmgen import ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.backends.cuda import kinds as cuda_kinds
from gemmgen.build import render_spec
from gemmgen.render import header_text, render_template
from gemmgen.harness import cuda_emu, nvcc
from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR, cuda_include_dir, find_nvcc

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent
GEMM_HEADERS = ("gg_runtime.cuh", "gg_gemm.cuh", "gg_gemm_config.cuh", "gg_widen.cuh",
                "gg_scales.cuh", "gg_epilogue.cuh")

SPEC = """\
target cuda {
  archs sm_90a
}

defaults {
  op dense
  backends cuda
  lhs bf16 [m, k]
}

kernel f16_e5m2_kn_gelu_alpha {
  lhs f16 [m, k]
  rhs e5m2 [k, n]
  out f16
  epilogue gelu alpha=0.5
  tile m=64 n=128 k=32
}

kernel bf16_fp4_relu_bias {
  rhs fp4 packed [n, k]
  out bf16
  rhs_scale block n=1 k=32 e8m0
  bias bf16 [n]
  epilogue relu
  tile m=64 n=128 k=32
}

kernel int8_int4_lut {
  lhs int8 [m, k]
  rhs int4 packed [n, k]
  out bf16
  lhs_scale per_token f32
  rhs_scale per_channel f32
  tile m=128 n=128 k=64
  tile_rule m<=64 n>=4096 k>=4096 -> m=64 n=128 k=64
  tile_rule m<=128 -> m=64 n=64 k=64
}

kernel grouped_kblock_e8m0_fold {
  op grouped
  lhs e4m3 [m, k]
  rhs e4m3 [g, k, n]
  out bf16
  lhs_scale per_tensor e8m0
  rhs_scale kblock k=128 f32
  bias f32 [g, 1, n]
  epilogue silu_mul
  tile m=64 n=128 k=128
}

kernel grouped_swiglu_interleaved_mma_sync {
  op grouped
  rhs bf16 [g, k, n]
  out bf16
  bias f32 [g, 1, n]
  epilogue swiglu_clamped
  mma mma_sync
  tile m=64 n=128 k=64
}

kernel e5m2_pair_token_group {
  lhs e5m2 [m, k]
  rhs e5m2 [n, k]
  out f32
  lhs_scale per_token_group k=128 bf16
  rhs_scale per_tensor f32
  tile m=64 n=128 k=128
}
"""


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found is None and (VENV_BIN / name).is_file():
        found = str(VENV_BIN / name)
    return found


@functools.cache
def _extra_spec() -> ir.Spec:
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="gemmgen-gemm-format-"))
    (root / "specs").mkdir()
    (root / "specs" / "gemm_format.gemm").write_text(SPEC)
    return render_spec(root / "specs" / "gemm_format.gemm").spec


@functools.cache
def _specs() -> tuple[ir.Spec, ...]:
    return tuple(render_spec(REPO / "specs" / f"{stem}.gemm").spec for stem in ("dense", "moe", "gb10")) + (
        _extra_spec(),)


def _render(kernel: ir.Kernel, spec: ir.Spec) -> tuple[str, str]:
    """The kernel's .cu and .h."""
    lp = cuda_backend.plan(kernel, spec)
    header = header_text(spec.path)
    cu = render_template(lp.template, header=header, plan=lp.detail, launch=lp)
    h = render_template("cuda/launcher.h.j2", header=header, plan=lp)
    return cu, h


def _gemms() -> list[tuple[str, ir.Kernel, ir.Spec]]:
    out = []
    for spec in _specs():
        for k in spec.kernels_for(ir.Backend.CUDA):
            if cuda_kinds.kind(k) is tile_gemm:
                out.append((k.name, k, spec))
    return out


GEMMS = _gemms()
IDS = [name for name, _, _ in GEMMS]


def test_the_extra_spec_covers_what_specs_do_not():
    plans = [tile_gemm.plan(k, s) for _, k, s in GEMMS]
    assert {p.compute for p in plans} >= {ir.DType.BF16, ir.DType.F16, ir.DType.E4M3,
                                          ir.DType.E5M2, ir.DType.INT8}
    assert {p.rhs for p in plans} >= {ir.DType.INT4, ir.DType.FP4, ir.DType.E5M2, ir.DType.INT8}
    assert set(tile_gemm.BFeed) == {p.b_feed for p in plans}
    assert set(ir.Activation) == {p.activation for p in plans}
    assert set(ir.ScaleMode) == {s.mode for p in plans for s in (p.lhs_scale, p.rhs_scale)}
    assert set(ir.BiasMode) == {p.bias.mode for p in plans}
    assert any(p.fold_scales for p in plans) and any(p.alpha is not None for p in plans)
    assert any(len(p.tiles) > 2 for p in plans)


def kernel_part(cu: str) -> str:
    """What gemm.cu.j2 prints itself: the text before the host launcher."""
    marker = "// Host launcher"
    assert cu.count(marker) == 1
    return cu[:cu.index(marker)].rstrip("\n") + "\n"


def _clang_format(text: str, name: str) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("clang-format"), "--dry-run", "-Werror", "--style=file",
                           f"--assume-filename={REPO / 'generated' / name}"],
                          input=text, capture_output=True, text=True, check=False, cwd=REPO)


needs_clang_format = pytest.mark.skipif(_tool("clang-format") is None,
                                        reason="clang-format not found")


@needs_clang_format
@pytest.mark.parametrize("name,kernel,spec", GEMMS, ids=IDS)
def test_kernel_part_is_clang_formatted(name, kernel, spec):
    cu, _ = _render(kernel, spec)
    proc = _clang_format(kernel_part(cu), f"{name}.cu")
    assert proc.returncode == 0, proc.stderr[:4000]


@needs_clang_format
def test_layout_holds_for_every_name_length():
    """The entry points' signatures and calls wrap with the name's length:
    1 to 64 characters (longer names are laid out as a last resort:
    docs/decisions.md, "Generated C++ layout"), for a dense kernel with a LUT and a grouped one with
    every optional parameter."""
    spec = _extra_spec()
    texts = []
    for base in ("int8_int4_lut", "grouped_kblock_e8m0_fold"):
        kernel = spec.kernel(base)
        for length in range(1, 65):
            name = ("k" + "x" * 64)[:length]
            renamed = dataclasses.replace(kernel, name=name)
            texts.append(kernel_part(_render(renamed, dataclasses.replace(
                spec, kernels=(renamed,)))[0]))
    proc = _clang_format("\n".join(texts), "names.cu")
    assert proc.returncode == 0, proc.stderr[:4000]


MX_SPEC = """\
target cuda {
  archs sm_120a sm_121a
}

defaults {
  lhs e4m3 [m, k]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0
  backends cuda
}

kernel mx_dense_lut {
  op dense
  rhs e4m3 [n, k]
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  bias f32 [n]
  tile m=128 n=64 k=128
  tile_rule m<=64 -> m=64 n=64 k=128
}

kernel mx_grouped {
  op grouped
  rhs e4m3 [g, n, k]
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
  tile m=64 n=64 k=32
}
"""


@needs_clang_format
def test_block_scaled_entries_layout_holds_for_every_name_length(tmp_path):
    """The `<entry>_sm120` entry points (sm_120a / sm_121a, MXFP8) are laid
    out for their own name and tile struct (`_sm120`, `Sm120TileN`): 1 to 64
    characters, dense with a LUT and grouped with every pointer."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "mx_format.gemm").write_text(MX_SPEC)
    spec = render_spec(tmp_path / "specs" / "mx_format.gemm").spec
    texts = []
    for base in ("mx_dense_lut", "mx_grouped"):
        kernel = spec.kernel(base)
        for length in range(1, 65):
            name = ("k" + "x" * 64)[:length]
            renamed = dataclasses.replace(kernel, name=name)
            cu = kernel_part(_render(renamed, dataclasses.replace(spec, kernels=(renamed,)))[0])
            assert "_sm120(" in cu and "<Sm120Tile0>(" in cu, name
            texts.append(cu)
    proc = _clang_format("\n".join(texts), "names.cu")
    assert proc.returncode == 0, proc.stderr[:4000]


@needs_clang_format
@pytest.mark.parametrize("header", GEMM_HEADERS)
def test_gemm_runtime_headers_are_clang_formatted(header):
    proc = subprocess.run([_tool("clang-format"), "--dry-run", "-Werror", "--style=file",
                           str(RUNTIME_INCLUDE_DIR / header)],
                          capture_output=True, text=True, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[:4000]


def test_no_template_leftovers():
    for name, kernel, spec in GEMMS:
        cu, _ = _render(kernel, spec)
        assert "(void)" not in cu and "{{" not in cu and "{%" not in cu, name
        assert "\n\n\n" not in cu and not any(line.rstrip() != line for line in cu.splitlines()), name


# ---------------------------------------------------------------------------
# Warnings


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("name,kernel,spec", [g for g in GEMMS if g[2] is _extra_spec()],
                         ids=[g[0] for g in GEMMS if g[2] is _extra_spec()])
def test_nvcc_compiles_without_warnings(name, kernel, spec, tmp_path):
    cu, h = _render(kernel, spec)
    (tmp_path / f"{name}.h").write_text(h)
    for arch in spec.target(ir.Backend.CUDA).cuda_archs:
        result = nvcc.compile_check(cu, arch, name_for_errors=f"{name}.cu", include_dirs=(tmp_path,),
                                    extra_flags=("-Werror", "all-warnings"))
        assert set(result.kernels) == set(cuda_backend.plan(kernel, spec).entries)


@functools.cache
def _split_runtime(root: Path) -> tuple[Path, Path]:
    """The runtime headers in two folders: the tile GEMM's (and
    gg_runtime.cuh), checked; the others, included as system headers."""
    own, system = root / "own", root / "system"
    own.mkdir(parents=True)
    system.mkdir()
    for path in RUNTIME_INCLUDE_DIR.iterdir():
        if path.is_file():
            shutil.copy(path, (own if path.name in GEMM_HEADERS else system) / path.name)
    return own, system


# Each g++ build takes ~20 s: these run always, the others under -m slow.
GXX_QUICK = {"dense_gemm_bf16_kn", "moe_w8a8_gateup_silu", "fp8_gemm_blockscaled_lhs_scale_e8m0_rhs_scale_bf16",
             "int8_int4_lut", "grouped_kblock_e8m0_fold", "bf16_fp4_relu_bias"}


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.parametrize("name,kernel,spec", [
    pytest.param(*g, marks=() if g[0] in GXX_QUICK else pytest.mark.slow) for g in GEMMS], ids=IDS)
def test_gxx_emulation_compiles_without_warnings(name, kernel, spec, tmp_path_factory):
    """The emulator's own two steps (cuda_emu: preprocess with its markers,
    rewrite the launch syntax, compile with gg_emu_compile.h), at its
    optimisation level, with -Wall -Wextra -Werror."""
    own, system = _split_runtime(tmp_path_factory.getbasetemp() / "runtime")
    work = tmp_path_factory.mktemp(name)
    cu, h = _render(kernel, spec)
    (work / f"{name}.cu").write_text(cu)
    (work / f"{name}.h").write_text(h)
    includes = [f"-I{own}", f"-isystem{system}", f"-isystem{cuda_include_dir()}", f"-I{work}"]
    pre = subprocess.run(["g++", "-x", "c++", "-std=c++20", "-E", "-DGG_EMU_PREPROCESS=1", *includes,
                          str(work / f"{name}.cu")], capture_output=True, text=True, check=False)
    assert pre.returncode == 0, pre.stderr[-4000:]
    text = cuda_emu._STATIC_SHARED_RE.sub("__gg_shared__", pre.stdout)
    text = cuda_emu._EXTERN_SHARED_RE.sub(r"extern\1__gg_dyn_shared__", text)
    text = cuda_emu._CHEVRON_RE.sub(r"::gg::emu::chevron(\1, \2)(", text)
    (work / "unit.ii").write_text(text)
    proc = subprocess.run(["g++", "-x", "c++", "-std=c++20", "-c", "-O2", "-fno-strict-aliasing",
                           "-pthread", "-fPIC", "-Wall", "-Wextra", "-Werror", "-include",
                           str(system / "gg_emu_compile.h"), str(work / "unit.ii"), "-o",
                           str(work / "unit.o")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-6000:]
