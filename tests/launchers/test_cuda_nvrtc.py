"""The CuPy launchers' NVRTC build, without a GPU: every generated kernel
`.cu` is compiled with the real NVRTC (gemmgen.harness.nvrtc, libnvrtc
through ctypes) with exactly the options its own launcher's
`compile_options(sm)` returns, for each arch its spec declares, and the
cubin is held to nvcc's build of the same file:

- NVRTC compiles it (its log is the failure message) into SASS for that arch;
- no entry function has a stack frame or local memory, and none touches local
  memory (LDL/STL: spills), in NVRTC's cubin; nvcc's has no spill stores,
  spill loads or stack frame (ptxas's report, as tests/cuda/emulator/test_cuda_runtime_nvcc.py
  checks it);
- neither build touches an in-flight wgmma's registers
  (nvcc.wgmma_register_hazards: docs/cuda-hopper.md, "Register-sourced
  wgmma hazards");
- the same entry functions, each with the same multiset of tensor-core
  instructions with their full modifiers (HMMA/IMMA/QMMA,
  HGMMA.64x128x16.F32.BF16/QGMMA/IGMMA, LDSM/STSM, the TMA copies
  UTMALDG/UTMASTG/..., the wgmma fences WARPGROUP.*, USETMAXREG), and the
  same static shared memory;
- when nvcc is of NVRTC's own CUDA release: the same opcode histogram and
  register count for every entry function (one ptxas; every kernel here had
  identical SASS statistics with 13.5 and 13.5).

Both builds read the same files: the rendered `cuda/` folder (kernel, launcher
and runtime header copies) in a temporary folder. nvcc compiles it with that
folder as its only include folder, as a user builds generated/<stem>/cuda/
(nvcc.compile_check would put the live gemmgen/runtime/cuda first, which
need not be what was rendered). The nvcc is the one of NVRTC's own CUDA
release where one is installed (reference_nvcc).

What differs between the two builds and is not compared:
- NVRTC defines __CUDACC_RTC__ (gg_primitives_sm90.cuh then declares
  CUtensorMap itself instead of including <cuda.h>), and its front end keeps
  the `static constexpr` members of the Config/Tile structs as device
  globals: a `.nv.global.init` section (GLOBAL:227 bytes in cuobjdump's
  resource usage) that nvcc's cubin lacks. Neither changes the code of a
  kernel (see above). With nvcc of another release (13.0 against NVRTC 13.5)
  ptxas picks other scalar instructions (a NOP for a UIADD3, an IMAD.MOV.U32
  for a LOP3.LUT, a few dozen per kernel), so then only the tensor-core
  instructions and shared memory are compared.
- nvcc's build takes -O3 (host code only; ptxas's default is -O3 in both),
  and neither build has -lineinfo or -G: no line tables to differ.

CI time: one case of each kernel kind runs by default (DEFAULT_CASES); every
other (file, arch) of specs/*.gemm and of the test specs that render
(tests/specs, tests/cases) is marked slow, so the two together cover each
(file, arch) once. nvcc's builds are cached under $GEMMGEN_CACHE; NVRTC's are
not (they are what is under test).
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from gemmgen import ir, runtime
from gemmgen.build import InputError, render_spec
from gemmgen.diagnostics import SpecError
from gemmgen.harness import nvcc, nvrtc, toolchain
from gemmgen.harness.runner import load_generated_module
from gemmgen.harness.toolchain import tool_version

REPO = Path(__file__).resolve().parents[2]


def _nvrtc_missing() -> str | None:
    try:
        nvrtc.load()
    except nvrtc.NvrtcNotFound as e:
        return str(e)
    return None


NVRTC_MISSING = _nvrtc_missing()
needs_nvrtc = pytest.mark.skipif(NVRTC_MISSING is not None, reason=f"NVRTC is not installed: {NVRTC_MISSING}")


# ---------------------------------------------------------------------------
# The specs, their rendered CUDA folders and launchers.

def _spec_paths() -> list[Path]:
    paths = sorted((REPO / "specs").glob("*.gemm")) + sorted((REPO / "tests/specs").glob("*.gemm"))
    paths += sorted((REPO / "tests/cases").glob("*/spec.gemm"))
    paths += sorted((REPO / "tests/cases").glob("*/specs/*.gemm"))
    return paths


@functools.cache
def rendered(spec: str):
    """render_spec of `spec` (relative to the repo), or None for a spec that
    does not build (the diagnostics' golden cases, tests/specs/everything.gemm)."""
    try:
        return render_spec(REPO / spec)
    except (SpecError, InputError):
        return None


@functools.cache
def folder(spec: str) -> Path:
    """The rendered `cuda/` files of `spec` (kernels, launchers, runtime
    header copies) in a folder of their own, as `gemmgen build` writes them."""
    d = Path(tempfile.mkdtemp(prefix="gemmgen-nvrtc-"))
    atexit.register(shutil.rmtree, d, True)
    for rel, text in rendered(spec).files.items():
        if rel.parts[0] == "cuda":
            (d / rel.name).write_text(text)
    return d


@functools.cache
def launcher(spec: str, name: str):
    safe = re.sub(r"\W", "_", f"{spec}_{name}")
    return load_generated_module(folder(spec) / f"{name}.py", f"gg_nvrtc_{safe}")


def archs(spec: str) -> tuple[str, ...]:
    return tuple(rendered(spec).spec.target(ir.Backend.CUDA).cuda_archs)


def dispatch_names(spec: str) -> set[str]:
    return {d.name for d in rendered(spec).spec.dispatches}


def kernel_files(spec: str) -> list[str]:
    """The stems of the `.cu` files that a launcher compiles with NVRTC: every
    CUDA `.cu` but the dispatchers' (host code only; their `.py` dispatches to
    the arms' launchers)."""
    return sorted(rel.stem for rel in rendered(spec).files
                  if rel.parts[0] == "cuda" and rel.suffix == ".cu" and rel.stem not in dispatch_names(spec))


def sm_of(arch: str) -> int:
    """The compute capability a device of `arch` reports: sm_90a -> 90."""
    return int(re.fullmatch(r"sm_(\d+)[af]?", arch).group(1))


def case_id(spec: str, name: str, arch: str) -> str:
    """specs/moe.gemm -> moe/..., tests/cases/<case>/specs/dense.gemm -> <case>-dense/..."""
    parts = Path(spec).with_suffix("").parts
    owner = parts[-1] if parts[0] == "specs" else "-".join(p for p in parts[1:] if p not in ("specs", "spec"))
    return f"{owner}/{name}@{arch}"


def _all_cases() -> list[tuple[str, str, str]]:
    cases = []
    for path in _spec_paths():
        spec = str(path.relative_to(REPO))
        r = rendered(spec)
        if r is None or not any(rel.parts[0] == "cuda" for rel in r.files):
            continue
        cases += [(spec, name, arch) for name in kernel_files(spec) for arch in archs(spec)]
    return cases


ALL_CASES = _all_cases()
CUDA_SPECS = sorted({spec for spec, _, _ in ALL_CASES})

# One (spec, kernel file, arch) of each kernel kind: the default run.
DEFAULT_CASES = {
    "tile dense bf16, mma.sync (sm_89)": ("specs/dense.gemm", "dense_gemm_bf16", "sm_89"),
    "tile dense bf16, wgmma (sm_90a)": ("specs/dense.gemm", "dense_gemm_bf16", "sm_90a"),
    "tile dense fp8 x fp8, wgmma": ("specs/dense.gemm", "fp8_fp8_gemm_tile_64x128x64", "sm_90a"),
    "weight-only mixed (w4a16), wgmma": ("specs/dense.gemm", "w4a16_gemm", "sm_90a"),
    "grouped MoE bf16": ("specs/moe.gemm", "moe_bf16_grouped_gemm", "sm_90a"),
    "masked grouped fp8": ("specs/moe.gemm", "moe_fp8_masked_gemm", "sm_90a"),
    "gate-up silu w8a8": ("specs/moe.gemm", "moe_w8a8_gateup_silu", "sm_90a"),
    "tgmm (grad rhs)": ("specs/moe.gemm", "moe_bf16_grad_rhs", "sm_90a"),
    "gemv bf16": ("specs/dense.gemm", "dense_gemv_bf16", "sm_89"),
    "batched gemv bf16": ("specs/dense.gemm", "dense_gemv_batched_bf16", "sm_90a"),
    "quantize per-token-group fp8 (e8m0)": ("specs/dense.gemm", "per_token_group_quant_fp8_out_scale_e8m0",
                                            "sm_90a"),
    # The GB10 (sm_121a), where NVRTC defines no __CUDA_ARCH_FEAT_SM121_ALL.
    "block-scaled mxfp8 (sm_121a)": ("specs/gb10.gemm", "gb10_mxfp8_gemm", "sm_121a"),
    "block-scaled w4a8 (sm_121a)": ("specs/gb10.gemm", "gb10_w4a8_moe_grouped_gemm", "sm_121a"),
    # Datacenter Blackwell (sm_100a): the tcgen05 body beside the mma.sync one.
    "grouped MoE w8a8 block scales, tcgen05 (sm_100a)": ("specs/moe.gemm", "moe_w8a8_grouped_gemm",
                                                        "sm_100a"),
    # specs/b200.gemm: the block-scaled tcgen05.mma, kind::mxf4nvf4 and kind::mxf8f6f4 (W4A8).
    "block-scaled nvfp4 grouped, tcgen05 (sm_100a)": ("specs/b200.gemm", "b200_nvfp4_moe_grouped_gemm",
                                                     "sm_100a"),
}
# Base opcodes that each default case's NVRTC SASS must have somewhere (both
# builds lacking them would pass the comparison with nvcc).
EXPECTED_OPCODES: dict[str, set[str]] = {
    "tile dense bf16, mma.sync (sm_89)": {"HMMA", "LDSM"},
    "tile dense bf16, wgmma (sm_90a)": {"HGMMA", "UTMALDG", "WARPGROUP"},
    "tile dense fp8 x fp8, wgmma": {"QGMMA", "UTMALDG"},
    "weight-only mixed (w4a16), wgmma": {"HGMMA"},
    "grouped MoE bf16": {"HGMMA", "UTMALDG"},
    "masked grouped fp8": {"QGMMA"},
    "gate-up silu w8a8": {"QGMMA"},
    "tgmm (grad rhs)": {"HMMA"},
    "block-scaled mxfp8 (sm_121a)": {"QMMA", "LDSM"},
    "block-scaled w4a8 (sm_121a)": {"QMMA", "LDSM"},
    "grouped MoE w8a8 block scales, tcgen05 (sm_100a)": {"UTCQMMA", "UTMALDG", "LDTM", "UTCBAR"},
    "block-scaled nvfp4 grouped, tcgen05 (sm_100a)": {"UTCOMMA", "UTCCP", "UTMALDG", "LDTM"},
}
SLOW_CASES = [c for c in ALL_CASES if c not in DEFAULT_CASES.values()]


# ---------------------------------------------------------------------------
# SASS: opcodes with all their modifiers (nvcc.parse_sass stops a modifier at
# a lower-case letter, HGMMA.64x128x16.F32.BF16 -> HGMMA.64).

_FUNCTION_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
_ARCH_RE = re.compile(r"^\s*code for (sm_\w+)", re.MULTILINE)
_INSTRUCTION_RE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")
_TENSOR_CORE_RE = re.compile(r"[A-Z]*MMA|UTMA[A-Z]*|UBLK[A-Z]*|WARPGROUP|USETMAXREG|LDSM|STSM")
_LOCAL_MEMORY = ("LDL", "STL")
_RES_FUNCTION_RE = re.compile(r"^\s*Function\s+(\S+):\s*$")
_RES_FIELD_RE = re.compile(r"(\w+(?:\[\d+\])?):(\d+)")


def base(opcode: str) -> str:
    return opcode.split(".")[0]


def opcodes(sass: str) -> dict[str, Counter[str]]:
    """Every entry function's opcode histogram (full opcodes)."""
    out: dict[str, Counter[str]] = {}
    current = None
    for line in sass.splitlines():
        if m := _FUNCTION_RE.match(line):
            current = out.setdefault(m.group(1), Counter())
        elif current is not None and (m := _INSTRUCTION_RE.match(line)):
            current[m.group(1)] += 1
    return out


def tensor_core(histogram: Counter[str]) -> Counter[str]:
    return Counter({op: n for op, n in histogram.items() if _TENSOR_CORE_RE.fullmatch(base(op))})


def cuobjdump(cubin: bytes, *flags: str) -> str:
    tool = nvcc.find_cuda_tool("cuobjdump")
    with tempfile.TemporaryDirectory(prefix="gg-nvrtc-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([str(tool), *flags, str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"cuobjdump {' '.join(flags)} failed:\n{proc.stderr}"
    return proc.stdout


def resource_usage(cubin: bytes) -> dict[str, dict[str, int]]:
    """``cuobjdump --dump-resource-usage`` per entry function:
    {"REG": 168, "STACK": 0, "SHARED": 1024, "LOCAL": 0, ...}."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in cuobjdump(cubin, "--dump-resource-usage").splitlines():
        if m := _RES_FUNCTION_RE.match(line):
            current = out.setdefault(m.group(1), {})
        elif current is not None and "REG:" in line:
            current.update((k, int(v)) for k, v in _RES_FIELD_RE.findall(line))
    return out


# ---------------------------------------------------------------------------
# The two builds of one case.

def nvrtc_build(spec: str, name: str, arch: str) -> tuple[nvrtc.NvrtcResult, tuple[str, ...]]:
    """NVRTC's build of kernel `name`, as its launcher's _module(sm) does it:
    SOURCE's text under SOURCE's name, with compile_options(sm)."""
    mod = launcher(spec, name)
    source = Path(mod.SOURCE)
    assert source.resolve() == (folder(spec) / f"{name}.cu").resolve(), f"{name}.py compiles {source}, not {name}.cu"
    sm = sm_of(arch)
    assert mod.nvrtc_arch(sm) == arch, f"{name}.py builds {mod.nvrtc_arch(sm)} for a {arch} device"
    options = tuple(mod.compile_options(sm))
    try:
        return nvrtc.compile_program(source.read_text(), source.name, options), options
    except nvrtc.NvrtcError as e:
        pytest.fail(f"{case_id(spec, name, arch)}: {versions()}: NVRTC cannot compile {source.name} "
                    f"with its launcher's options:\n{e}", pytrace=False)


def _release(nvcc_path: Path) -> str | None:
    m = re.search(r"release (\d+\.\d+)", tool_version(str(nvcc_path)))
    return m.group(1) if m else None


@functools.cache
def reference_nvcc() -> Path | None:
    """The nvcc to compare NVRTC with: $GEMMGEN_NVCC if set, else the first
    nvcc (the toolchain rule's, then $CUDA_HOME, the PyPI wheels, /usr/local/cuda) of NVRTC's own
    CUDA release, else the project's usual one (nvcc.find_nvcc). Of one
    release, the two builds have had identical SASS; across releases ptxas
    schedules the scalar code differently."""
    default = nvcc.find_nvcc()
    if default is None or os.environ.get("GEMMGEN_NVCC"):
        return default
    want = ".".join(map(str, nvrtc.version()))
    for candidate in [default, *(home / "bin" / "nvcc" for home in toolchain._cuda_homes())]:
        if candidate.is_file() and _release(candidate) == want:
            return candidate
    return default


@functools.cache
def nvcc_build(spec: str, name: str, arch: str) -> tuple[bytes, dict[str, nvcc.ResourceUsage]]:
    """nvcc's build of the same file, `-cubin --resource-usage -std=c++17 -O3
    -gencode=...` with the rendered folder as the only include folder (how a
    user builds generated/<stem>/cuda/, nvcc.resource_usage), so that both
    builds read the same header copies. Cached by the folder's sources, the
    flags and the nvcc version under $GEMMGEN_CACHE/nvcc-nvrtc-ref."""
    tool = reference_nvcc()
    source = folder(spec) / f"{name}.cu"
    flags = ["-cubin", "--resource-usage", "-std=c++17", "-O3", nvcc.gencode(arch), f"-I{folder(spec)}"]
    sources = [f"{p.name}\n{p.read_text()}" for p in sorted(folder(spec).iterdir())
               if p.suffix in (".cu", ".cuh", ".h")]
    key = toolchain.digest(source.name, " ".join(flags[:-1]), *sources, tool_version(str(tool)))
    cached = toolchain.cache_dir() / "nvcc-nvrtc-ref" / key[:32]
    cubin_path, log_path = cached.with_suffix(".cubin"), cached.with_suffix(".log")
    with toolchain.build_lock(cubin_path):
        if not (cubin_path.is_file() and log_path.is_file()):
            with tempfile.TemporaryDirectory(prefix="gg-nvcc-") as tmp:
                out = Path(tmp) / "kernel.cubin"
                proc = subprocess.run([str(tool), *flags, str(source), "-o", str(out)],
                                      capture_output=True, text=True, check=False)
                log = proc.stdout + proc.stderr
                assert proc.returncode == 0, f"{case_id(spec, name, arch)}: nvcc ({tool}) failed:\n{log}"
                toolchain.atomic_write(cubin_path, out.read_bytes())
                toolchain.atomic_write(log_path, log.encode())
    return cubin_path.read_bytes(), nvcc._parse_resource_usage(log_path.read_text(), arch)


def versions() -> str:
    tool = reference_nvcc()
    return (f"NVRTC {'.'.join(map(str, nvrtc.version()))} ({nvrtc.find_library()}), "
            f"nvcc {_release(tool) if tool else None} ({tool})")


def check_case(spec: str, name: str, arch: str, expected: frozenset[str] = frozenset()) -> None:
    """NVRTC's build of one (file, arch), checked on its own and against
    nvcc's; `expected`: base opcodes that NVRTC's SASS must have."""
    case = case_id(spec, name, arch)
    result, options = nvrtc_build(spec, name, arch)
    if nvcc.find_cuda_tool("cuobjdump") is None:
        pytest.skip(f"{case}: NVRTC compiled it; checking its SASS needs cuobjdump "
                    "(`pip install nvidia-cuda-cuobjdump`)")

    sass = cuobjdump(result.cubin, "--dump-sass")
    assert _ARCH_RE.findall(sass) == [arch], f"{case}: {' '.join(options)} built {_ARCH_RE.findall(sass)}"
    ours = opcodes(sass)
    usage = resource_usage(result.cubin)
    assert set(usage) == set(ours), f"{case}: resource usage {sorted(usage)} vs SASS {sorted(ours)}"
    for entry, res in usage.items():
        assert res["STACK"] == res["LOCAL"] == 0, f"{case}: NVRTC's {entry} has a stack frame or local memory: {res}"
        local = {op: n for op, n in ours[entry].items() if base(op) in _LOCAL_MEMORY}
        assert not local, f"{case}: NVRTC's {entry} spills (local memory accesses {local})"
    found = {base(op) for h in ours.values() for op in h}
    assert expected <= found, f"{case}: no {sorted(expected - found)} in NVRTC's SASS"
    for entry, histogram in ours.items():  # the block-scaled body (docs/cuda-blackwell.md)
        if entry.endswith("_sm120"):
            assert any(op.startswith("QMMA.SF.") for op in histogram), (
                f"{case}: NVRTC's {entry} has no block-scaled MMA (QMMA.SF): its arch guard "
                f"compiled it to the trap ({versions()})")
        if entry.endswith("_sm100") and arch in ("sm_100a", "sm_103a"):  # docs/cuda-sm100.md
            # UTCOMMA: fp4 x fp4 (kind::mxf4 / mxf4nvf4, specs/b200.gemm).
            assert any(base(op) in ("UTCHMMA", "UTCQMMA", "UTCOMMA") for op in histogram), (
                f"{case}: NVRTC's {entry} has no tcgen05.mma (UTCHMMA / UTCQMMA / UTCOMMA): its arch guard "
                f"compiled it to the trap ({versions()})")
            assert not any(base(op) == "HMMA" for op in histogram), f"{case}: {entry} has HMMA"
    hazards = nvcc.wgmma_register_hazards(sass)
    assert not hazards, (f"{case}: NVRTC's SASS touches an in-flight wgmma's registers "
                         f"({versions()}):\n" + "\n".join(map(str, hazards[:20])))

    if reference_nvcc() is None:
        pytest.skip(f"{case}: NVRTC's build is clean; comparing it with nvcc's needs nvcc "
                    "(`pip install nvidia-cuda-nvcc`)")
    cubin, kernels = nvcc_build(spec, name, arch)
    for u in kernels.values():  # the check of tests/cuda/emulator/test_cuda_runtime_nvcc.py
        assert u.spill_stores == u.spill_loads == u.stack_frame == 0, f"{case}: nvcc's build spills: {u}"
    their_sass = cuobjdump(cubin, "--dump-sass")
    hazards = nvcc.wgmma_register_hazards(their_sass)
    assert not hazards, f"{case}: nvcc's SASS touches an in-flight wgmma's registers:\n" + "\n".join(
        map(str, hazards[:20]))
    theirs = opcodes(their_sass)
    their_usage = resource_usage(cubin)
    assert sorted(ours) == sorted(theirs) == sorted(kernels), \
        f"{case}: NVRTC's entry functions {sorted(ours)} are not nvcc's {sorted(theirs)} ({versions()})"
    diffs = []
    for entry in sorted(ours):
        a, b = tensor_core(ours[entry]), tensor_core(theirs[entry])
        if a != b:
            diffs.append(f"  {entry}: only NVRTC {dict(a - b)}, only nvcc {dict(b - a)}")
        if usage[entry]["SHARED"] != their_usage[entry]["SHARED"]:
            diffs.append(f"  {entry}: static shared memory NVRTC {usage[entry]['SHARED']}, "
                         f"nvcc {their_usage[entry]['SHARED']}")
    assert not diffs, (f"{case}: NVRTC's SASS ({' '.join(options)}) differs from nvcc's "
                       f"({versions()}):\n" + "\n".join(diffs))
    if _release(reference_nvcc()) == ".".join(map(str, nvrtc.version())):
        # One release, one ptxas: the whole kernel is the same, registers included.
        for entry in sorted(ours):
            if ours[entry] != theirs[entry]:
                diffs.append(f"  {entry}: {sum(ours[entry].values())} instructions, nvcc's "
                             f"{sum(theirs[entry].values())}; only NVRTC {dict(ours[entry] - theirs[entry])}, "
                             f"only nvcc {dict(theirs[entry] - ours[entry])}")
            if usage[entry]["REG"] != their_usage[entry]["REG"]:
                diffs.append(f"  {entry}: {usage[entry]['REG']} registers, nvcc's {their_usage[entry]['REG']}")
        assert not diffs, (f"{case}: NVRTC and nvcc of one release ({versions()}) built different "
                           "SASS from the same files:\n" + "\n".join(diffs))


@needs_nvrtc
@pytest.mark.parametrize("kind", list(DEFAULT_CASES))
def test_nvrtc_builds_what_nvcc_builds(kind, monkeypatch, tmp_path):
    spec, name, arch = DEFAULT_CASES[kind]
    assert (spec, name, arch) in ALL_CASES, f"{kind}: {spec} has no kernel {name} for {arch} any more"
    monkeypatch.chdir(tmp_path)  # NVRTC finds quoted includes only through the launcher's -I
    check_case(spec, name, arch, frozenset(EXPECTED_OPCODES.get(kind, ())))


@needs_nvrtc
@pytest.mark.slow
@pytest.mark.parametrize(("spec", "name", "arch"), SLOW_CASES, ids=[case_id(*c) for c in SLOW_CASES])
def test_every_kernel_builds_with_nvrtc_as_with_nvcc(spec, name, arch, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    check_case(spec, name, arch)


# ---------------------------------------------------------------------------
# The launchers' options, and the dispatchers.

@needs_nvrtc  # compile_options() finds the CUDA headers, which come with NVRTC's toolkit or wheels
@pytest.mark.parametrize("spec", CUDA_SPECS)
def test_launcher_compile_options(spec):
    """Each launcher's options for each declared arch: C++17, its own folder
    (INCLUDE_DIR: where `gemmgen build` puts the runtime header copies), the
    CUDA headers (cuda_include_dir(), with cuda_bf16.h) and one -arch, sm_90a
    on a 9.0 device."""
    declared = archs(spec)
    for name in kernel_files(spec):
        mod = launcher(spec, name)
        assert tuple(mod.ARCHS) == declared
        assert mod.MIN_SM == min(sm_of(a) for a in declared)
        include = mod.cuda_include_dir()
        assert (Path(include) / "cuda_bf16.h").is_file(), include
        assert Path(mod.INCLUDE_DIR) == folder(spec).resolve() == Path(mod.SOURCE).resolve().parent
        # Every header the kernel includes by quote, transitively, is in
        # INCLUDE_DIR (but the CPU emulator's, which __CUDACC__ keeps out).
        todo, seen = [Path(mod.SOURCE).read_text()], set()
        while todo:
            for header in re.findall(r'^\s*#\s*include\s+"([^"]+)"', todo.pop(), re.MULTILINE):
                if header not in seen and not runtime.is_emulator_file(header):
                    seen.add(header)
                    assert (Path(mod.INCLUDE_DIR) / header).is_file(), f"{name}.cu includes {header}"
                    todo.append((Path(mod.INCLUDE_DIR) / header).read_text())
        assert "gg_runtime.cuh" in seen, f"{name}.cu does not include the runtime ({sorted(seen)})"
        for arch in declared:
            options = tuple(mod.compile_options(sm_of(arch)))
            assert f"-arch={arch}" in options, options
            assert f"-I{mod.INCLUDE_DIR}" in options and f"-I{include}" in options, options
            assert [o for o in options if o.startswith("-arch")] == [f"-arch={arch}"], options
        assert "-arch=sm_90a" in mod.compile_options(90)
        assert "-arch=sm_89" in mod.compile_options(89)


DISPATCHERS = [(spec, name) for spec in CUDA_SPECS for name in sorted(dispatch_names(spec))]


@pytest.mark.parametrize(("spec", "name"), DISPATCHERS, ids=[f"{s}:{n}" for s, n in DISPATCHERS])
def test_dispatchers_build_through_their_arms(spec, name, monkeypatch, tmp_path):
    """A dispatcher's `.cu` is host code for nvcc: its `.py` has no NVRTC build
    and dispatches to its arms, kernels that the cases here compile; under
    NVRTC the whole `.cu` is behind `#if !defined(__CUDACC_RTC__)`."""
    mod = launcher(spec, name)
    assert not hasattr(mod, "compile_options") and not hasattr(mod, "SOURCE"), name
    assert mod.ARMS and set(mod.ARMS) <= set(kernel_files(spec)), (name, mod.ARMS)
    if NVRTC_MISSING is not None or nvcc.find_cuda_tool("cuobjdump") is None:
        return
    monkeypatch.chdir(tmp_path)
    arm = launcher(spec, mod.ARMS[0])
    source = folder(spec) / f"{name}.cu"
    for arch in archs(spec):
        result = nvrtc.compile_program(source.read_text(), source.name, arm.compile_options(sm_of(arch)))
        assert opcodes(cuobjdump(result.cubin, "--dump-sass")) == {}, (name, arch)


# ---------------------------------------------------------------------------
# The ctypes wrapper itself.

@needs_nvrtc
def test_nvrtc_version_and_library():
    major, minor = nvrtc.version()
    assert major >= 12 and minor >= 0
    assert "nvrtc" in str(nvrtc.find_library())


@needs_nvrtc
def test_nvrtc_reports_errors_with_its_log():
    with pytest.raises(nvrtc.NvrtcError, match=r"(?s)broken\.cu.*undefined_thing") as info:
        nvrtc.compile_program('extern "C" __global__ void k() { undefined_thing(); }', "broken.cu",
                              ["-arch=sm_90a"])
    assert "undefined_thing" in info.value.log


@needs_nvrtc
def test_a_launcher_without_its_include_folder_fails(monkeypatch, tmp_path):
    """The check can fail: without the launcher's -I the runtime headers are missing."""
    monkeypatch.chdir(tmp_path)
    mod = launcher("specs/dense.gemm", "dense_gemv_bf16")
    options = [o for o in mod.compile_options(89) if o != f"-I{mod.INCLUDE_DIR}"]
    with pytest.raises(nvrtc.NvrtcError, match="gg_runtime.cuh"):
        nvrtc.compile_program(Path(mod.SOURCE).read_text(), Path(mod.SOURCE).name, options)


def test_a_missing_nvrtc_is_named(monkeypatch):
    monkeypatch.setattr(nvrtc, "_candidates", lambda: [Path("/nonexistent/libnvrtc.so.13")])
    monkeypatch.setattr(nvrtc.ctypes.util, "find_library", lambda name: None)
    with pytest.raises(nvrtc.NvrtcNotFound, match=r"(?s)nvidia-cuda-nvrtc.*/nonexistent/libnvrtc\.so\.13"):
        nvrtc.find_library()


def test_sass_opcodes_keep_lower_case_modifiers():
    sass = """\
\t\tFunction : k
        /*1420*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], R24 ;
        /*1430*/              @!P0 UTMALDG.2D [UR16], [UR8] ;
        /*1440*/                   STL.64 [R1], R2 ;
        /*1450*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
"""
    h = opcodes(sass)["k"]
    assert tensor_core(h) == Counter({"HGMMA.64x128x16.F32.BF16": 1, "UTMALDG.2D": 1, "WARPGROUP.DEPBAR.LE": 1})
    assert h["STL.64"] == 1
