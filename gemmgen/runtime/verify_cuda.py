"""Run generated CUDA kernels for `gemmgen verify` and the tests.

A generated kernel comes with a Python launcher module (`<kernel>.py`) whose
`validate()` and `launches()` are the launch plan: the CuPy call on a GPU
and the CPU emulation here run the same sequence of launches, so the tests
exercise the launcher's grid, block, shared-memory and argument order, not
a copy of them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from gemmgen import ir
from gemmgen.verify import Runner, load_generated_module

# Arrays a launch writes: passed in with their current values and read back.
_WRITTEN = ("out", "workspace")


def poisoned(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An output buffer full of NaN (0xFF bytes for integer types)."""
    dt = np.dtype(dtype)
    if dt.kind == "f" or dt.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return np.full(shape, np.nan, dtype=dt)
    return np.full(shape, 0xFF, dtype=np.uint8).view(dt) if dt.itemsize == 1 else \
        np.full(shape, -1, dtype=dt)


def run_launcher(launcher, source: str, source_name: str, inputs: dict[str, np.ndarray], *,
                 schedule: str = "run-ahead", modules: dict | None = None, workers: int | None = None,
                 counters: list | None = None, memcheck: bool | None = None):
    """Validate `inputs` with the generated launcher and run its launch
    sequence on the CPU emulator; return the output (a tuple when the kernel
    has several, e.g. quantize's values and scales). `counters`, a list,
    receives each launch's `gemmgen.runtime.counters.LaunchCounters`;
    `memcheck` overrides the emulator's default (cuda_emu.memcheck_default)."""
    from gemmgen.runtime.cuda_emu import EmuModule

    dims = launcher.validate(**inputs)
    cache = modules if modules is not None else {}
    key = source_name if memcheck is None else (source_name, memcheck)
    if key not in cache:
        cache[key] = EmuModule(source, source_name, memcheck=memcheck)
    module = cache[key]
    arrays: dict[str, np.ndarray | None] = {name: None for name in launcher.DTYPES}
    arrays.update(inputs)
    for name, shape in launcher.output_shapes(dims).items():
        arrays[name] = poisoned(shape, _np_dtype(launcher.DTYPES[name]))
    arrays["workspace"] = np.full(max(launcher.workspace_ints(dims), 1), -1, np.int32)
    written = set(launcher.OUTPUTS) | {"workspace"}
    for step in launcher.launches(dims):
        args: list[object] = []
        inouts: list[tuple[int, str]] = []
        for i, a in enumerate(step.args):
            if not isinstance(a, str):
                args.append(a)
                continue
            value = arrays[a]
            if value is not None and not isinstance(value, np.ndarray):
                value = np.asarray(value)
            args.append(value)
            if a in written:
                inouts.append((i, a))
        results = module.launch(step.entry, grid=step.grid, block=step.block,
                                smem_bytes=step.smem, args=args,
                                inouts=[i for i, _ in inouts], schedule=schedule, workers=workers,
                                counters=counters is not None)
        if counters is not None:
            counters.append(module.last_counters)
        for (_, name), value in zip(inouts, results):
            arrays[name] = value
    outs = tuple(arrays[name] for name in launcher.OUTPUTS)
    return outs[0] if len(outs) == 1 else outs


def _np_dtype(name: str):
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) and name not in (
        "float32", "float16", "int8", "int32", "uint8") else np.dtype(name)


class CudaEmu(Runner):
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
        for rel, text in rendered.files.items():
            if rel.parts[0] == "cuda":
                dest = workdir / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(text)

    def run(self, kernel, case, inputs):
        if kernel.name not in self.launchers:
            self.launchers[kernel.name] = load_generated_module(
                self.workdir / "cuda" / f"{kernel.name}.py",
                f"gemmgen_verify_cuda_{self.rendered.spec.stem}_{kernel.name}")
        launcher = self.launchers[kernel.name]
        path = self.workdir / "cuda" / f"{kernel.name}.cu"
        return run_launcher(launcher, path.read_text(), f"{self.rendered.spec.stem}/cuda/{path.name}",
                            inputs, modules=self.modules)


class CudaGpu(CudaEmu):
    name = "cuda"

    def unavailable(self) -> str | None:
        try:
            import cupy
            if cupy.cuda.runtime.getDeviceCount() < 1:
                return "no CUDA GPU"
        except Exception as e:  # ImportError, or CUDA driver errors
            return f"CuPy cannot reach a GPU ({type(e).__name__})"
        return None

    def run(self, kernel, case, inputs):
        import cupy

        if kernel.name not in self.launchers:
            self.launchers[kernel.name] = load_generated_module(
                self.workdir / "cuda" / f"{kernel.name}.py",
                f"gemmgen_verify_gpu_{self.rendered.spec.stem}_{kernel.name}")
        launcher = self.launchers[kernel.name]
        fn = getattr(launcher, kernel.name)
        dev = {k: (cupy.asarray(_bits(v)) if isinstance(v, np.ndarray) and v.ndim else v)
               for k, v in inputs.items()}
        outs = fn(**dev)
        outs = outs if isinstance(outs, tuple) else (outs,)
        got = tuple(cupy.asnumpy(o).view(_np_dtype(launcher.DTYPES[name]))
                    for o, name in zip(outs, launcher.OUTPUTS))
        return got[0] if len(got) == 1 else got


def _bits(x: np.ndarray) -> np.ndarray:
    """CuPy has no bf16 / fp8 dtypes: move their bits as unsigned integers."""
    if x.dtype.name in ("bfloat16",):
        return x.view(np.uint16)
    if x.dtype.name.startswith("float8"):
        return x.view(np.uint8)
    return x


def runners() -> list[Runner]:
    return [CudaEmu(), CudaGpu()]
