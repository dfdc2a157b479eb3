"""Run generated CUDA kernels for `gemmgen verify` and the tests.

Two launchers of a generated kernel run on the CPU emulator here:

- `run_launcher`: the Python launcher module (`<kernel>.py`), whose
  `validate()` and `launches()` are the launch plan the CuPy call runs: the
  same sequence of launches, with the same cudaFuncSetAttribute rule (above
  48 KiB), so the tests exercise the launcher's grid, block, shared-memory
  and argument order, not a copy of them;
- `run_cpp_launcher`: the C++ launcher, `launch_<kernel>()` of the `.cu`
  (or of a dispatcher's `.cu` and its arms'), compiled with g++ and called
  by a generated C++ caller (`cpp_caller`) exactly as a user of the `.h`
  calls it: cudaMalloc'd buffers, the argument struct, a stream. Its CUDA
  runtime calls are the emulator's (gg_emu_cudart.h), which checks every
  launch as the driver of the emulated arch would.

Both take `arch`, the device the emulator plays (default sm_90a; `gemmgen
verify` uses `emulated_arch(spec)`: the declared arch with the least shared
memory).
"""

from __future__ import annotations

import inspect
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gemmgen import ir
from gemmgen.archs import DEFAULT_DYNAMIC_SMEM, parse_arch, shared_memory_limit, sm_count
from gemmgen.backends import cuda as cuda_backend
from gemmgen.cases import case_groups, lut_entry, tile_label
from gemmgen.diagnostics import install_hint
from gemmgen.harness.runner import Runner, load_generated_module

DEFAULT_ARCH = "sm_90a"


def emulated_arch(spec: ir.Spec) -> str:
    """The arch `gemmgen verify` emulates for a spec: of the CUDA archs it
    declares, the one with the least opt-in shared memory per block (the
    first such), since every plan must fit each of them; sm_90a when the spec
    declares none."""
    target = spec.target(ir.Backend.CUDA)
    archs = target.cuda_archs if target is not None else ()
    if not archs:
        return DEFAULT_ARCH
    return min(archs, key=shared_memory_limit)  # min() keeps the first of equals

# Arrays a launch writes: passed in with their current values and read back.
_WRITTEN = ("out", "workspace")


def poisoned(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An output buffer full of NaN (0xFF bytes for integer types)."""
    dt = np.dtype(dtype)
    if dt.kind == "f" or dt.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return np.full(shape, np.nan, dtype=dt)
    return np.full(shape, 0xFF, dtype=np.uint8).view(dt) if dt.itemsize == 1 else \
        np.full(shape, -1, dtype=dt)


def device_of(arch: str, num_sms: int | None = None) -> tuple[int, int]:
    """(compute capability as major * 10 + minor, SMs) of the `arch` device
    the emulator plays: what a launcher's `launches(dims, sm, num_sms)` gets
    (`num_sms` overrides the count)."""
    number, _ = parse_arch(arch)
    return number, sm_count(arch) if num_sms is None else int(num_sms)


def launch_arguments(step, arrays: dict[str, np.ndarray | None], written) -> tuple[
        list[object], list[int], list[np.ndarray]]:
    """The emulator's arguments of one launch of a generated launcher: an
    array by name, a scalar as it is, and a TensorMapArg (the Hopper path's
    lhs and rhs maps, each with its own swizzle) as a cuda_emu.TensorMap
    over the array, passed in `buffers` (the kernel reaches it through the
    map alone). Returns (args, the indices of the arrays the launch writes,
    buffers)."""
    from gemmgen.harness.cuda_emu import TensorMap

    args: list[object] = []
    inouts: list[int] = []
    maps: list[tuple[int, object]] = []
    for i, a in enumerate(step.args):
        if type(a).__name__ == "TensorMapArg":
            maps.append((i, a))
            args.append(None)
            continue
        if not isinstance(a, str):
            args.append(a)
            continue
        value = arrays[a]
        if value is not None and not isinstance(value, np.ndarray):
            value = np.asarray(value)
        args.append(value)
        if a in written:
            inouts.append(i)
    buffers: list[np.ndarray] = []
    for i, a in maps:
        interleave, l2, oob = _tensor_map_modes(a)
        buffers.append(np.ascontiguousarray(arrays[a.array]))
        args[i] = TensorMap(len(step.args) + len(buffers) - 1, a.dtype, tuple(a.dims),
                            tuple(a.strides), tuple(a.box), swizzle=a.swizzle,
                            interleave=interleave, l2_promotion=l2, oob_fill=oob)
    return args, inouts, buffers


def _tensor_map_modes(a) -> tuple[int, int, int]:
    """The launcher module's TENSOR_MAP_MODES (interleave, L2 promotion, OOB
    fill, the same for every map; the swizzle is the map's own) for a
    TensorMapArg of that module."""
    import sys

    return tuple(sys.modules[type(a).__module__].TENSOR_MAP_MODES)


def run_launcher(launcher, source: str, source_name: str, inputs: dict[str, np.ndarray], *,
                 schedule: str = "run-ahead", modules: dict | None = None, arch: str = DEFAULT_ARCH,
                 workers: int | None = None, ftz: bool = False, counters: list | None = None,
                 memcheck: bool | None = None, num_sms: int | None = None,
                 sm: int | None = None):
    """Validate `inputs` with the generated launcher and run its launch
    sequence on the CPU emulator of an `arch` device, as the CuPy call does
    on a GPU; return the output (a tuple when the kernel has several, e.g.
    quantize's values and scales). A launcher whose path depends on the
    device (the Hopper and the block-scaled bodies) gets the device's
    compute capability and SM count (`device_of`; `num_sms`
    overrides the count; `sm` the compute capability the launcher is told,
    e.g. 0 for the mma.sync path on any arch), as the CuPy call passes them,
    and its tensor maps are encoded by the emulator. `ftz` flushes f32 subnormals as a kernel
    built with -ftz does (EmuModule.launch). `counters`, a list, receives
    each launch's `gemmgen.harness.counters.LaunchCounters`; `memcheck`
    overrides the emulator's default (cuda_emu.memcheck_default)."""
    from gemmgen.harness.cuda_emu import EmuModule  # looked up per call: tests replace it

    dims = launcher.validate(**inputs)
    cache = modules if modules is not None else {}
    key = source_name if memcheck is None else (source_name, memcheck)
    if key not in cache:
        # The .cu includes its .h (the C++ launcher), beside the .py.
        folder = Path(getattr(launcher, "SOURCE", source_name)).parent
        cache[key] = EmuModule(source, source_name, include_dirs=[folder], memcheck=memcheck)
    module = cache[key]
    arrays: dict[str, np.ndarray | None] = {name: None for name in launcher.DTYPES}
    arrays.update(inputs)
    for name, shape in launcher.output_shapes(dims).items():
        arrays[name] = poisoned(shape, _np_dtype(launcher.DTYPES[name]))
    arrays["workspace"] = np.full(max(launcher.workspace_ints(dims), 1), -1, np.int32)
    written = set(launcher.OUTPUTS) | {"workspace"}
    if "sm" in inspect.signature(launcher.launches).parameters:  # the device picks the path
        device_sm, sms = device_of(arch, num_sms)
        steps = launcher.launches(dims, device_sm if sm is None else sm, sms)
    else:
        steps = launcher.launches(dims)
    for step in steps:
        args, inouts, buffers = launch_arguments(step, arrays, written)
        # As the CuPy call: cudaFuncSetAttribute above 48 KiB only.
        attribute = step.smem if step.smem > DEFAULT_DYNAMIC_SMEM else None
        results = module.launch(step.entry, grid=step.grid, block=step.block,
                                smem_bytes=step.smem, args=args, inouts=inouts,
                                schedule=schedule, arch=arch, workers=workers,
                                max_dynamic_smem=attribute, ftz=ftz,
                                counters=counters is not None, buffers=buffers,
                                cluster=getattr(step, "cluster", (1, 1, 1)))
        if counters is not None:
            counters.append(module.last_counters)
        for i, value in zip(inouts, results):
            arrays[step.args[i]] = value
    outs = tuple(arrays[name] for name in launcher.OUTPUTS)
    return outs[0] if len(outs) == 1 else outs


# ---------------------------------------------------------------------------
# The C++ launcher


def cpp_caller(plan) -> str:
    """A C++ caller of `launch_<plan.name>()` for the emulator: allocates
    device buffers with cudaMalloc, copies the inputs, fills the argument
    struct, creates a stream, calls the launcher and copies the outputs back,
    as a user of `<plan.name>.h` would. The arrays and dims come from the
    host program's inputs (EmuModule.run_host): array `x` as input "x" (an
    output as a size-only input), dim or scalar `d` as an int64 "dim.d".
    `plan` is a LaunchPlan or a dispatcher's DispatchPlan."""
    name = plan.name
    lines = [
        f"// C++ caller of launch_{name}() for gemmgen's CPU emulator",
        "// (gemmgen.harness.verify_cuda.run_cpp_launcher): what a user of",
        f"// {name}.h writes, with its arrays and dims handed over by the",
        "// emulator's host I/O (gg_emu_host_input / gg_emu_host_output).",
        f'#include "{name}.h"',
        "",
        "#include <cstring>",
        "#include <vector>",
        "",
        'extern "C" int gg_emu_host_input(const char* name, const void** data, size_t* bytes);',
        'extern "C" void gg_emu_host_output(const char* name, const void* data, size_t bytes);',
        "",
        "namespace {",
        "",
        "std::vector<void*> allocations;",
        "",
        "// A device copy of input `name` (an output: fresh device memory of its",
        "// size); nullptr when the caller passed no such array.",
        "template <class T>",
        "T* device_array(const char* name) {",
        "  const void* host = nullptr;",
        "  size_t bytes = 0;",
        "  if (!gg_emu_host_input(name, &host, &bytes)) return nullptr;",
        "  void* p = nullptr;",
        "  if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;",
        "  allocations.push_back(p);",
        "  if (host != nullptr && cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) return nullptr;",
        "  return static_cast<T*>(p);",
        "}",
        "",
        "int dim(const char* name) {",
        "  const void* host = nullptr;",
        "  size_t bytes = 0;",
        "  long long v = 0;",
        "  if (gg_emu_host_input(name, &host, &bytes) && host != nullptr && bytes == sizeof v) std::memcpy(&v, host, sizeof v);",
        "  return static_cast<int>(v);",
        "}",
        "",
        "// Copies output `name` back to the caller.",
        "void output(const char* name, const void* device) {",
        "  const void* host = nullptr;",
        "  size_t bytes = 0;",
        "  gg_emu_host_input(name, &host, &bytes);",
        "  std::vector<unsigned char> copy(bytes);",
        "  if (cudaMemcpy(copy.data(), device, bytes, cudaMemcpyDeviceToHost) == cudaSuccess)",
        "    gg_emu_host_output(name, copy.data(), bytes);",
        "}",
        "",
        "}  // namespace",
        "",
        'extern "C" int gg_emu_host_main(void) {',
        f"  {plan.args_struct} a;",
    ]
    for arr in plan.arrays:
        const = "" if arr.is_output else "const "
        lines.append(f'  a.{arr.name} = device_array<{const}{arr.ctype}>("{arr.name}");')
    for d in (*plan.dims, *(s.name for s in plan.scalars)):
        lines.append(f'  a.{d} = dim("dim.{d}");')
    if getattr(plan, "has_workspace", False):
        lines += [
            "  void* workspace = nullptr;",
            f"  if (cudaMalloc(&workspace, {name}_workspace_bytes(a)) != cudaSuccess) return 1000;",
            "  allocations.push_back(workspace);",
            "  a.workspace = workspace;",
        ]
    lines += [
        f"  if (const char* why = {name}_validate(a)) gg_emu_host_output(\"validate\", why, std::strlen(why));",
        "  cudaStream_t stream = nullptr;",
        "  if (cudaStreamCreate(&stream) != cudaSuccess) return 1001;",
        f"  const cudaError_t err = launch_{name}(a, stream);",
        "  const cudaError_t sync = cudaStreamSynchronize(stream);",
        "  const char* err_name = cudaGetErrorName(err);",
        '  gg_emu_host_output("error", err_name, std::strlen(err_name));',
        "  if (err == cudaSuccess && sync == cudaSuccess) {",
    ]
    for arr in plan.outputs:
        lines.append(f'    output("{arr.name}", a.{arr.name});')
    lines += [
        "  }",
        "  cudaStreamDestroy(stream);",
        "  for (void* p : allocations) cudaFree(p);",
        "  return err != cudaSuccess ? static_cast<int>(err) : static_cast<int>(sync);",
        "}",
    ]
    return "\n".join(lines) + "\n"


def bound_dims(plan, inputs: dict[str, object]) -> dict[str, int]:
    """The dims and scalars of a call, read off the arrays as the plan's
    bindings say (a missing optional array: its fallback expression), and
    the plan's derived values: what a C++ caller computes from its tensors."""
    values: dict[str, int] = {s.name: int(inputs.get(s.name) or 0) for s in plan.scalars}
    for b in plan.bindings:
        x = inputs.get(b.arg)
        if b.dim not in values and x is not None and b.fallback is None:
            values[b.dim] = int(np.shape(x)[b.axis]) * b.mul
    for b in plan.bindings:
        if b.dim not in values:
            x = inputs.get(b.arg)
            values[b.dim] = (int(np.shape(x)[b.axis]) * b.mul if x is not None
                             else b.fallback.eval(values))
    for d in plan.derived:
        values[d.name] = d.value.eval(values)
    return values


class CppLaunchError(RuntimeError):
    """launch_<kernel>() returned an error: the launcher refused the call, or
    the emulated CUDA runtime refused one of its launches. `log` holds the
    emulator's report ("gg-emu: rejected: ...")."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


def run_cpp_launcher(plan, folder: Path, inputs: dict[str, object], *, arm=None,
                     sources: Sequence[str] | None = None, arch: str = DEFAULT_ARCH,
                     schedule: str = "run-ahead", workers: int | None = None,
                     texts: dict[str, str] | None = None, logs: list[str] | None = None,
                     num_sms: int | None = None):
    """Call `launch_<plan.name>()` from C++ on the CPU emulator of an `arch`
    device, with `inputs` (arrays by name, scalars such as group_offset),
    and return the output (a tuple when there are several). `folder` holds
    the generated `.cu` and `.h` files (`texts` may replace a file's text by
    name, to run a changed launcher); `sources` names the `.cu` files to
    link (default: `<plan.name>.cu`); `arm` is the LaunchPlan whose bindings
    give the dims (default `plan`; a dispatcher's arm). Raises
    CppLaunchError when launch_<kernel>() returns an error, and the
    emulator's errors when a kernel misbehaves. `logs`, when given, gets the
    child's output (kernel printf, "gg-emu: rejected: ..." reports).
    `num_sms` overrides the emulated device's SM count."""
    from gemmgen.harness.cuda_emu import EmuModule  # looked up per call: tests replace it

    texts = texts or {}
    arm = arm or plan
    dims = bound_dims(arm, inputs)
    names = list(sources or [f"{plan.name}.cu"])
    units = [(texts.get(n) or (folder / n).read_text(), str(folder / n)) for n in names]
    caller = cpp_caller(plan)
    module = EmuModule(units[0][0], units[0][1], include_dirs=[folder],
                       extra_sources=[*units[1:], (caller, str(folder / f"{plan.name}_caller.cc"))])
    host: dict[str, object] = {}
    for arr in plan.arrays:
        if arr.is_output:
            shape = tuple(d.eval(dims) for d in arr.shape)
            host[arr.name] = int(np.prod(shape, dtype=np.int64)) * _np_dtype(arr.nptype).itemsize
        elif inputs.get(arr.name) is not None:
            host[arr.name] = np.ascontiguousarray(inputs[arr.name])
    for d in (*plan.dims, *(s.name for s in plan.scalars)):
        host[f"dim.{d}"] = np.int64(dims[d])
    result = module.run_host(host, arch=arch, schedule=schedule, workers=workers, sm_count=num_sms)
    if logs is not None:
        logs.append(result.log)
    if result.status != 0:
        why = result.outputs.get("validate", b"").decode()
        error = result.outputs.get("error", b"").decode() or f"status {result.status}"
        rejected = [line.removeprefix("gg-emu: rejected: ").removeprefix("gg-emu: ")
                    for line in result.log.splitlines() if line.startswith("gg-emu: ")]
        detail = "; ".join(([why] if why else []) + rejected)
        raise CppLaunchError(f"launch_{plan.name} returned {error}" + (f": {detail}" if detail else ""),
                             result.log)
    outs = []
    for arr in plan.outputs:
        shape = tuple(d.eval(dims) for d in arr.shape)
        data = result.outputs[arr.name]
        outs.append(np.frombuffer(data, dtype=_np_dtype(arr.nptype)).reshape(shape).copy())
    return outs[0] if len(outs) == 1 else tuple(outs)


def _np_dtype(name: str):
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) and name not in (
        "float32", "float16", "int8", "int32", "uint8") else np.dtype(name)


class CudaEmu(Runner):
    """Kernels on the CPU emulator, launched by their Python launcher's plan."""

    name = "cuda-emu"
    backend = ir.Backend.CUDA

    def unavailable(self) -> str | None:
        if shutil.which("g++") is None:
            return "g++ is not on PATH"
        return None

    def prepare(self, rendered, workdir: Path) -> None:
        super().prepare(rendered, workdir)
        self.launchers: dict[str, object] = {}
        self.modules: dict[str, object] = {}
        self.arch = self.cuda_arch or emulated_arch(rendered.spec)
        how = "--cuda-arch" if self.cuda_arch else "the declared arch with the least shared memory"
        self.note = f"emulated {self.arch} ({how})"
        if parse_arch(self.arch)[0] == 90:
            # The launchers pick by compute capability (docs/cuda-hopper.md).
            self.note += ("; kernels with a Hopper path run it (TMA + wgmma; the tile column "
                          "shows the mma.sync tile)")
        for rel, text in rendered.files.items():
            if rel.parts[0] == "cuda":
                dest = workdir / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(text)

    def launcher(self, kernel):
        if kernel.name not in self.launchers:
            self.launchers[kernel.name] = load_generated_module(
                self.workdir / "cuda" / f"{kernel.name}.py",
                f"gemmgen_verify_cuda_{self.rendered.spec.stem}_{kernel.name}")
        return self.launchers[kernel.name]

    def check_tile(self, kernel, case) -> None:
        """The table prints the tile the spec's LUT picks; the launcher must
        pick the same."""
        if tile_label(kernel, case) == "-":
            return
        launcher = self.launcher(kernel)
        dims = (case.m, case.n, case.k)
        if any(r.on_groups for r in kernel.tile_rules):  # pick_tile(m, n, k, g)
            dims += (case_groups(case),)
        picked = launcher.pick_tile(*dims)
        if picked != lut_entry(kernel, case):
            raise AssertionError(f"{kernel.name}: the launcher picks LUT entry {picked} for "
                                 f"{case.describe()}, the spec entry {lut_entry(kernel, case)}")

    def run(self, kernel, case, inputs):
        self.check_tile(kernel, case)
        path = self.workdir / "cuda" / f"{kernel.name}.cu"
        return run_launcher(self.launcher(kernel), path.read_text(),
                            f"{self.rendered.spec.stem}/cuda/{path.name}", inputs,
                            modules=self.modules, arch=self.arch)


class CudaEmuCpp(CudaEmu):
    """Kernels on the CPU emulator, launched by their C++ launcher."""

    name = "cuda-emu-cpp"

    def run(self, kernel, case, inputs):
        self.check_tile(kernel, case)
        plan = cuda_backend.plan(kernel, self.rendered.spec)
        return run_cpp_launcher(plan, self.workdir / "cuda", inputs, arch=self.arch)


class CudaGpu(CudaEmu):
    name = "cuda"
    serial = True  # one device

    def unavailable(self) -> str | None:
        try:
            import cupy
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] != "cupy":
                return f"CuPy does not import: {e}"
            return f"CuPy is not installed: install the GPU extra, {install_hint('gpu')}"
        except Exception as e:  # a broken install
            return f"CuPy does not import: {type(e).__name__}: {e}"
        try:
            if cupy.cuda.runtime.getDeviceCount() < 1:
                return "no CUDA GPU"
        except Exception as e:  # CUDA driver errors: no GPU or no driver
            return f"CuPy cannot reach a GPU ({type(e).__name__}: {e})"
        return None

    def prepare(self, rendered, workdir: Path) -> None:
        super().prepare(rendered, workdir)
        self.note = None  # a real device

    def run(self, kernel, case, inputs):
        from gemmgen.harness.cuda_gpu import call_launcher

        if kernel.name not in self.launchers:
            self.launchers[kernel.name] = load_generated_module(
                self.workdir / "cuda" / f"{kernel.name}.py",
                f"gemmgen_verify_gpu_{self.rendered.spec.stem}_{kernel.name}")
        # Outputs are poisoned before the launch, as the emulator's are.
        got = call_launcher(self.launchers[kernel.name], inputs)
        return got[0] if len(got) == 1 else got


def runners() -> list[Runner]:
    return [CudaEmu(), CudaEmuCpp(), CudaGpu()]
