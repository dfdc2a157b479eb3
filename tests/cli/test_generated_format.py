"""Generated CUDA code is emitted formatted and warning-free.

Over every CUDA kernel and dispatcher the backend can emit from specs/,
tests/specs/ and tests/cases/ (rendered in memory, one kernel at a time, so
a spec that fails for another reason still contributes its good kernels):

- every generated .h, .cu and FFI handler .cc (backends/cuda/ffi.py) passes
  `clang-format
  --dry-run -Werror` with the repository's .clang-format, and so do the
  runtime headers that ship with the generated code;
- every generated CUDA launcher .py and JAX entry point passes `ruff format
  --check` and `ruff check` (line length 100);
- nvcc compiles every generated .cu (minus GEMM_EXCLUDED) for each arch its
  spec declares with `-Werror all-warnings`, and the host launcher of every
  generated non-GEMM .cu with `-Xcompiler -Wall,-Wextra,-Werror` as well
  (`-cubin` only compiles the device pass);
- g++ compiles every generated non-GEMM .cu (with the launcher .h it
  includes and the runtime headers) for the CPU emulator with `-Wall -Wextra
  -Werror` (cuda_emu.EmuModule(warnings=True), cuda_emu.WARNING_FLAGS).

The formatters are the pinned dev dependencies (pyproject.toml); the
generator never runs them: the templates and the layout helpers of
gemmgen.backends.cuda.layout emit formatted text.

CI time: specs/gb10.gemm's and specs/b200.gemm's compiles (nvcc and g++)
are slow-marked: their GEMV, quantize and dispatcher files are the kinds of
specs/dense.gemm under other names and archs (sm_120a / sm_121a, sm_100a),
about 30 s more on two cores each; their formatting, where the names
matter, is checked unmarked.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from gemmgen import ir
from gemmgen.backends import cuda, pallas
from gemmgen.backends.cuda import dispatch as cuda_dispatch
from gemmgen.backends.cuda import ffi as jax_ffi
from gemmgen.build import InputError, locate
from gemmgen.diagnostics import SpecError
from gemmgen.parse import parse
from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR, find_nvcc
from gemmgen.validate import validate

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # the dev extra installs the formatters here

# clang-format checks every generated .h and .cu (EXCLUDED is empty: adding a
# template there needs a reason). The tile GEMM's .cu files compile under
# nvcc -Werror all-warnings in tests/cuda/sm80/test_cuda_gemm.py and warning-free under
# g++ in tests/cuda/sm80/test_cuda_gemm_format.py, so the compile checks here skip them.
EXCLUDED: dict[str, str] = {}
GEMM_EXCLUDED = {"cuda/gemm.cu.j2": "compiled with -Werror by test_cuda_gemm.py and "
                                    "test_cuda_gemm_format.py"}
RUNTIME_HEADERS = ("gg_runtime.cuh", "gg_primitives.cuh", "gg_convert.cuh")


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found is None and (VENV_BIN / name).is_file():
        found = str(VENV_BIN / name)
    return found


def _spec_paths() -> list[Path]:
    paths = sorted((REPO / "specs").glob("*.gemm")) + sorted((REPO / "tests" / "specs").glob("*.gemm"))
    paths += sorted((REPO / "tests" / "cases").glob("*/spec.gemm"))
    paths += sorted((REPO / "tests" / "cases").glob("*/specs/*.gemm"))
    return paths


def _specs() -> list[ir.Spec]:
    out = []
    for path in _spec_paths():
        try:
            sf = locate(path)  # the path as a build names it: specs/<stem>.gemm
            out.append(validate(parse(sf.source, sf.display), stem=sf.stem))
        except (SpecError, InputError):
            continue  # a spec the golden tests keep for its diagnostics
    return out


def _rendered() -> list[tuple[ir.Spec, str | None, PurePosixPath, str]]:
    """(spec, the kind's .cu template or None, path, text) of every file."""
    files = []
    for spec in _specs():
        for k in spec.kernels_for(ir.Backend.CUDA):
            if cuda.diagnose_kernel(k, spec):
                continue
            template = cuda.plan(k, spec).template
            for path, text in cuda.render_kernel(k, spec).items():
                files.append((spec, template if path.suffix == ".cu" else None, path, text))
        for d in spec.dispatches:
            arms = [spec.kernel(r.kernel) for r in d.rules]
            if not all(ir.Backend.CUDA in k.backends and not cuda.diagnose_kernel(k, spec)
                       for k in arms):
                continue
            if cuda_dispatch.diagnose_dispatch(d, spec):
                continue
            for path, text in cuda_dispatch.render_dispatch(d, spec).items():
                files.append((spec, None, path, text))
        # The JAX entry points and their FFI handlers (backends/cuda/ffi.py).
        for k in jax_ffi.kernels(spec):
            if cuda.diagnose_kernel(k, spec) or pallas.diagnose(k, spec):
                continue
            for path, text in jax_ffi.render_kernel(k, spec).items():
                files.append((spec, None, path, text))
    return files


RENDERED = _rendered()
CPP = [(p, t, spec) for spec, tpl, p, t in RENDERED
       if p.suffix in (".h", ".cu", ".cc") and tpl not in EXCLUDED]
HEADERS = [(p, t) for _, _, p, t in RENDERED if p.suffix == ".h"]
CU = [(p, t, spec) for spec, tpl, p, t in RENDERED
      if p.suffix == ".cu" and tpl not in GEMM_EXCLUDED]
PY = [(p, t) for _, _, p, t in RENDERED if p.suffix == ".py"]


def test_every_kind_is_rendered():
    templates = {tpl for _, tpl, _, _ in RENDERED if tpl}
    assert templates == {"cuda/gemm.cu.j2", "cuda/gemv.cu.j2", "cuda/quantize.cu.j2",
                         "cuda/tgmm.cu.j2"}
    assert any(p.name.endswith(".h") for p, _, _ in CPP) and PY


@pytest.mark.skipif(_tool("clang-format") is None, reason="clang-format not found")
@pytest.mark.parametrize("path, text", [(p, t) for p, t, _ in CPP], ids=lambda v: str(v)[:60])
def test_cpp_is_clang_formatted(path, text):
    proc = subprocess.run([_tool("clang-format"), "--dry-run", "-Werror", "--style=file",
                           f"--assume-filename={REPO / 'generated' / path}"],
                          input=text, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[:4000]


@pytest.mark.skipif(_tool("clang-format") is None, reason="clang-format not found")
@pytest.mark.parametrize("name", RUNTIME_HEADERS)
def test_runtime_headers_are_clang_formatted(name):
    proc = subprocess.run([_tool("clang-format"), "--dry-run", "-Werror", "--style=file",
                           str(RUNTIME_INCLUDE_DIR / name)],
                          capture_output=True, text=True, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[:4000]


def _ruff(*args: str, text: str, path: PurePosixPath) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("ruff"), *args, "--line-length", "100", "--stdin-filename",
                           str(REPO / "generated" / path), "-"],
                          input=text, capture_output=True, text=True, check=False, cwd=REPO)


@pytest.mark.skipif(_tool("ruff") is None, reason="ruff not found")
@pytest.mark.parametrize("path, text", PY, ids=lambda v: str(v)[:60])
def test_python_launchers_pass_ruff(path, text):
    fmt = _ruff("format", "--check", "--diff", text=text, path=path)
    assert fmt.returncode == 0, fmt.stdout[:4000] + fmt.stderr[:2000]
    check = _ruff("check", "--no-fix", "--output-format", "concise", text=text, path=path)
    assert check.returncode == 0, check.stdout[:4000] + check.stderr[:2000]


SLOW_STEMS = ("gb10", "b200")  # compiled under -m slow (module docstring, "CI time")


def _param(spec: ir.Spec, *values):
    return pytest.param(*values, marks=pytest.mark.slow if spec.stem in SLOW_STEMS else ())


def _marked(cases: list[tuple], spec_of) -> list:
    return [_param(spec_of(c), *c) for c in cases]


NVCC_CASES = [_param(spec, p, t, arch) for p, t, spec in CU
              for arch in (spec.target(ir.Backend.CUDA).cuda_archs
                           if spec.target(ir.Backend.CUDA) else ())]


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("path, text, arch", NVCC_CASES, ids=lambda v: str(v)[:60])
def test_nvcc_compiles_without_warnings(path, text, arch, tmp_path):
    from gemmgen.harness import nvcc

    # The launcher headers the .cu includes, beside it.
    for other, other_text in HEADERS:
        (tmp_path / other.name).write_text(other_text)
    nvcc.compile_check(text, arch, name_for_errors=str(path), include_dirs=(tmp_path,),
                       extra_flags=("-Werror", "all-warnings"))


# The kernels of every kind but the tile GEMM (GEMM_EXCLUDED), one per file.
KINDS = [(spec, tpl, p, t) for spec, tpl, p, t in RENDERED
         if tpl is not None and tpl not in GEMM_EXCLUDED]
KINDS_CU = [(p, t, spec) for spec, _, p, t in KINDS]


def test_kinds_cu_cover_every_kind():
    assert {tpl for _, tpl, _, _ in KINDS} == {"cuda/gemv.cu.j2", "cuda/quantize.cu.j2",
                                               "cuda/tgmm.cu.j2"}


def _headers_in(folder: Path) -> Path:
    for other, other_text in HEADERS:
        (folder / other.name).write_text(other_text)
    return folder


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("path, text, spec", _marked(KINDS_CU, lambda c: c[2]),
                         ids=lambda v: str(v)[:60])
def test_nvcc_host_launcher_compiles_without_warnings(path, text, spec, tmp_path):
    """Both passes of `nvcc -c`: the host launcher (launch_<name>, under
    `#if !defined(__CUDA_ARCH__)`) too, with the host compiler's -Wall
    -Wextra -Werror."""
    arch = (spec.target(ir.Backend.CUDA).cuda_archs or ("sm_90a",))[0]
    from gemmgen.harness import nvcc

    folder = _headers_in(tmp_path)
    src = folder / path.name
    src.write_text(text)
    proc = subprocess.run([str(find_nvcc()), "-c", "-std=c++17", "-O3", nvcc.gencode(arch),
                           f"-I{RUNTIME_INCLUDE_DIR}", f"-I{folder}", "-Werror", "all-warnings",
                           "-Xcompiler", "-Wall,-Wextra,-Werror", str(src), "-o",
                           str(folder / "kernel.o")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.parametrize("path, text, spec", _marked(KINDS_CU, lambda c: c[2]),
                         ids=lambda v: str(v)[:60])
def test_gxx_emulation_compiles_without_warnings(path, text, spec, tmp_path):
    """The emulator's own build (its preprocessing, its launch rewrite, its
    flags) with -Wall -Wextra -Werror: the generated .cu, its .h and every
    runtime header it includes."""
    from gemmgen.harness.cuda_emu import EmuModule

    folder = _headers_in(tmp_path)
    module = EmuModule(text, str(path), include_dirs=[folder], warnings=True, memcheck=False)
    assert set(cuda.plan(spec.kernel(path.stem), spec).entries) <= set(module.kernels)
