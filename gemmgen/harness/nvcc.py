"""Static checks of CUDA kernels with nvcc, for machines without a GPU.

    from gemmgen.harness import nvcc

    result = nvcc.compile_check(source, "sm_90a", name_for_errors="gemm.cu")
    usage = result.kernels["gemm"]          # ResourceUsage
    assert usage.spill_stores == usage.spill_loads == 0
    assert usage.static_smem + dynamic_smem <= nvcc.shared_memory_limit("sm_90a")
    sass = nvcc.sass_summary(result.cubin)["gemm"]
    assert sass.tensor_core > 0 and sass.ldsm > 0 and sass.ldgsts > 0

API:

- ``compile_check(source, arch, *, name_for_errors="kernel.cu",
  include_dirs=(), defines=None, extra_flags=()) -> CompileResult``: compiles
  one cubin for `arch` (``sm_80``, ``sm_89``, ``sm_90a``, ``sm_120``, ...;
  ``a``/``f`` archs use the ``-gencode=arch=compute_90a,code=sm_90a`` form)
  with ``--resource-usage`` and returns the cubin and a ``ResourceUsage`` per
  kernel: registers, spill stores and loads, stack frame, static shared
  memory, barriers, constant bank 0. Results are cached by content under
  ``$GEMMGEN_CACHE/nvcc``. Raises ``NvccError`` with nvcc's diagnostics.
- ``resource_usage(nvcc, path, arch, *, include_dirs=()) -> dict[str,
  ResourceUsage]``: ptxas's report for a file as a user compiles it (only
  the given include folders), uncached; gemmgen.harness.resources keeps
  the results for `build`'s spill warnings.
- ``sass_summary(cubin) -> dict[str, SassSummary]``: ``cuobjdump
  --dump-sass`` per kernel: the opcode histogram and the counts that matter
  for a GEMM (tensor-core MMAs, LDSM, LDGSTS, 128-bit global loads);
  ``sass_text(cubin)`` the listing itself and ``sass_instructions(text,
  kernel, opcode)`` one kernel's instructions of an opcode, operands and
  all (e.g. whether an HGMMA's A is a register or a descriptor).
- ``wgmma_register_hazards(sass_text) -> list[WgmmaHazard]``: instructions
  that touch an in-flight wgmma's A registers or accumulators before the
  ``WARPGROUP.DEPBAR`` that retires it, on any control-flow path, and
  wgmmas on registers written after the last ``WARPGROUP.ARRIVE``
  (docs/cuda-hopper.md, "Register-sourced wgmma hazards"); empty when clean.
- ``gencode(arch)``; ``shared_memory_limit(arch)`` (from ``gemmgen.archs``,
  the per-arch limits the plans and the emulator use too); ``find_nvcc()`` and
  ``find_cuda_tool()`` come from ``gemmgen.harness.toolchain``.

Dynamic shared memory is a launch parameter, not a compile result: compare
``static_smem`` plus the plan's dynamic bytes with ``shared_memory_limit``.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gemmgen.archs import parse_arch, shared_memory_limit
from gemmgen.harness.toolchain import (
    RUNTIME_INCLUDE_DIR,
    ToolchainError,
    atomic_write,
    build_lock,
    cache_dir,
    digest,
    find_cuda_tool,
    find_nvcc,
    named_source,
    tool_version,
)
from gemmgen.harness.sass_hazards import WgmmaHazard, wgmma_register_hazards

__all__ = [
    "CompileResult",
    "NvccError",
    "ResourceUsage",
    "SassSummary",
    "WgmmaHazard",
    "compile_check",
    "find_cuda_tool",
    "find_nvcc",
    "gencode",
    "resource_usage",
    "sass_summary",
    "shared_memory_limit",
    "wgmma_register_hazards",
]


class NvccError(RuntimeError):
    """nvcc rejected a kernel; the message holds its diagnostics."""


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """What ptxas reports for one kernel on one arch."""

    kernel: str
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_frame: int
    static_smem: int
    barriers: int
    constant_bytes: int

    @property
    def spills(self) -> int:
        """Spill stores plus spill loads, in bytes."""
        return self.spill_stores + self.spill_loads

    @property
    def dynamic_smem_available(self) -> int:
        """The dynamic shared memory a launch of this kernel may ask for on its arch."""
        return shared_memory_limit(self.arch) - self.static_smem


@dataclass(frozen=True, slots=True)
class CompileResult:
    arch: str
    kernels: Mapping[str, ResourceUsage]
    cubin: bytes
    log: str


@dataclass(frozen=True, slots=True)
class SassSummary:
    """The instruction mix of one kernel's SASS."""

    kernel: str
    opcodes: Mapping[str, int]
    """Full opcode (with modifiers, e.g. ``HMMA.16816.F32.BF16``) -> count."""

    @property
    def instructions(self) -> int:
        return sum(self.opcodes.values())

    def count(self, base: str, *modifiers: str) -> int:
        """Instructions whose opcode is `base` with every one of `modifiers`."""
        total = 0
        for opcode, n in self.opcodes.items():
            parts = opcode.split(".")
            if parts[0] == base and all(m in parts[1:] for m in modifiers):
                total += n
        return total

    @property
    def tensor_core(self) -> int:
        """Tensor-core MMAs: HMMA (f16/bf16), QMMA (fp8), IMMA (int8), HGMMA (wgmma)."""
        return sum(self.count(base) for base in ("HMMA", "QMMA", "IMMA", "HGMMA"))

    @property
    def ldsm(self) -> int:
        """ldmatrix loads (LDSM, including the transposing LDSM.16.MT88)."""
        return self.count("LDSM")

    @property
    def ldgsts(self) -> int:
        """cp.async global-to-shared copies (LDGSTS)."""
        return self.count("LDGSTS")

    @property
    def ldg_128(self) -> int:
        """128-bit global loads (LDG.E.128, LDG.E.128.CONSTANT, ...)."""
        return self.count("LDG", "128")


def gencode(arch: str) -> str:
    """The nvcc flag that builds SASS for `arch`: ``sm_90a`` ->
    ``-gencode=arch=compute_90a,code=sm_90a``."""
    number, suffix = parse_arch(arch)
    return f"-gencode=arch=compute_{number}{suffix},code=sm_{number}{suffix}"


_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPERTIES_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_FIELD_RES = {
    "barriers": re.compile(r"used (\d+) barriers"),
    "static_smem": re.compile(r"(\d+) bytes smem"),
    "constant_bytes": re.compile(r"(\d+) bytes cmem\[0\]"),
}


def _parse_resource_usage(log: str, arch: str) -> dict[str, ResourceUsage]:
    """The ptxas lines of ``--resource-usage``, per entry function:

        ptxas info    : Compiling entry function 'gemm' for 'sm_90a'
        ptxas info    : Function properties for gemm
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 168 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
    """
    kernels: dict[str, ResourceUsage] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    entry: str | None = None
    properties_of: str | None = None
    for line in log.splitlines():
        if m := _ENTRY_RE.search(line):
            entry = m.group(1)
        elif m := _PROPERTIES_RE.search(line):
            properties_of = m.group(1)
        elif (m := _FRAME_RE.search(line)) and properties_of is not None:
            frames[properties_of] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _USED_RE.search(line)) and entry is not None:
            fields = {k: int(f.group(1)) if (f := r.search(line)) else 0 for k, r in _FIELD_RES.items()}
            stack, stores, loads = frames.get(entry, (0, 0, 0))
            kernels[entry] = ResourceUsage(
                kernel=entry,
                arch=arch,
                registers=int(m.group(1)),
                spill_stores=stores,
                spill_loads=loads,
                stack_frame=stack,
                **fields,
            )
            entry = None
    return kernels


def _require(tool: str) -> Path:
    path = find_cuda_tool(tool)
    if path is None:
        raise ToolchainError(f"{tool} not found: set GEMMGEN_{tool.upper()} or CUDA_HOME, "
                              "`pip install nvidia-cuda-nvcc`, or put the CUDA toolkit on PATH")
    return path


def compile_check(
    source: str,
    arch: str,
    *,
    name_for_errors: str = "kernel.cu",
    include_dirs: Iterable[str | Path] = (),
    defines: Mapping[str, str | int] | None = None,
    extra_flags: Iterable[str] = (),
) -> CompileResult:
    """Compiles `source` for `arch` with ``--resource-usage``; see the module docstring."""
    nvcc = _require("nvcc")
    flags = [
        "-cubin",
        "--resource-usage",
        "-std=c++17",
        "-O3",
        gencode(arch),
        f"-I{RUNTIME_INCLUDE_DIR}",
        *(f"-I{Path(d).resolve()}" for d in include_dirs),
        *(f"-D{k}={v}" for k, v in sorted((defines or {}).items())),
        *extra_flags,
    ]
    runtime = b"".join(p.read_bytes() for p in sorted(RUNTIME_INCLUDE_DIR.iterdir()) if p.is_file())
    key = digest(source, name_for_errors, " ".join(flags), runtime, tool_version(str(nvcc)))
    cached = cache_dir() / "nvcc" / key[:32]
    cubin_path, log_path = cached.with_suffix(".cubin"), cached.with_suffix(".log")
    with build_lock(cubin_path):
        if not (cubin_path.is_file() and log_path.is_file()):
            _nvcc(nvcc, flags, source, name_for_errors, arch, cubin_path, log_path)
    log = log_path.read_text()
    return CompileResult(arch, _parse_resource_usage(log, arch), cubin_path.read_bytes(), log)


def _nvcc(nvcc: Path, flags: list[str], source: str, name: str, arch: str, cubin_path: Path, log_path: Path) -> None:
    """Runs nvcc on `source` and stores the cubin and the log in the cache."""
    with tempfile.TemporaryDirectory(prefix="gg-nvcc-") as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text(named_source(source, name))
        out = Path(tmp) / "kernel.cubin"
        proc = subprocess.run([str(nvcc), *flags, str(src), "-o", str(out)], capture_output=True, text=True, check=False)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise NvccError(f"{name}: nvcc failed for {arch}:\n{log.strip()}")
        atomic_write(cubin_path, out.read_bytes())
        atomic_write(log_path, log.encode())


def resource_usage(nvcc: Path, source: Path, arch: str, *,
                   include_dirs: Iterable[str | Path] = ()) -> dict[str, ResourceUsage]:
    """What ptxas reports for every entry function of the file `source`
    compiled for `arch` (``-O3 -std=c++17``, the include folders and no
    others: how a user compiles ``generated/<stem>/cuda/``). Not cached here
    (gemmgen.harness.resources keeps the results). Raises NvccError."""
    with tempfile.TemporaryDirectory(prefix="gg-nvcc-") as tmp:
        proc = subprocess.run([str(nvcc), "-cubin", "--resource-usage", "-std=c++17", "-O3",
                               gencode(arch), *(f"-I{Path(d).resolve()}" for d in include_dirs),
                               str(source), "-o", str(Path(tmp) / "kernel.cubin")],
                              capture_output=True, text=True, check=False)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise NvccError(f"{source.name}: nvcc failed for {arch}:\n{log.strip()}")
    return _parse_resource_usage(log, arch)


_FUNCTION_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTRUCTION_RE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def parse_sass(text: str) -> dict[str, SassSummary]:
    """Opcode histograms per function of ``cuobjdump --dump-sass`` output."""
    histograms: dict[str, Counter[str]] = {}
    current: Counter[str] | None = None
    for line in text.splitlines():
        if m := _FUNCTION_RE.match(line):
            current = histograms.setdefault(m.group(1), Counter())
        elif current is not None and (m := _INSTRUCTION_RE.match(line)):
            current[m.group(1)] += 1
    return {name: SassSummary(name, dict(sorted(h.items()))) for name, h in histograms.items()}


def sass_text(cubin: bytes) -> str:
    """``cuobjdump --dump-sass`` of `cubin`."""
    cuobjdump = _require("cuobjdump")
    with tempfile.TemporaryDirectory(prefix="gg-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([str(cuobjdump), "--dump-sass", str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NvccError(f"cuobjdump --dump-sass failed:\n{proc.stderr.strip()}")
    return proc.stdout


def sass_summary(cubin: bytes) -> dict[str, SassSummary]:
    """The SASS instruction mix of every kernel in `cubin` (``cuobjdump --dump-sass``)."""
    return parse_sass(sass_text(cubin))


def sass_instructions(text: str, kernel: str, opcode: str) -> list[str]:
    """The instructions (opcode with modifiers, then operands) of `kernel` in
    ``cuobjdump --dump-sass`` output whose base opcode is `opcode`."""
    out, inside = [], False
    for line in text.splitlines():
        if m := _FUNCTION_RE.match(line):
            inside = m.group(1) == kernel
        elif inside and (m := _INSTRUCTION_RE.match(line)) and m.group(1).split(".")[0] == opcode:
            out.append(line[m.start(1):].split(";")[0].strip())
    return out
