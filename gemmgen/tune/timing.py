"""Measuring a candidate tile: render the kernel's Pallas module with that
tile as its only one, import it, compile it and time it with JAX (on a TPU,
or in Pallas interpret mode on the CPU), and check a winner against the
NumPy reference. JAX and NumPy are imported inside the functions: the
module loads without them (`--dry-run`).
"""

from __future__ import annotations

import datetime
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from gemmgen import ir
from gemmgen.devices import Device
from gemmgen.tune.candidates import spec_for, with_tile
from gemmgen.tune.shapes import Shape, group_sizes, masked_counts

SAMPLES = 5  # timed samples per candidate; the figure is their median
BATCH = 10  # calls dispatched back to back per sample, waited for once


@dataclass(frozen=True, slots=True)
class Measurement:
    """One candidate's timing: seconds per call (median of the samples) and
    the noise, (max - min) / median of the samples; or why it failed."""

    seconds: float | None
    noise: float = 0.0
    compile_s: float = 0.0
    error: str = ""


@dataclass(frozen=True, slots=True)
class Provenance:
    """What measured the tiles: written into the block."""

    device: str  # JAX's device_kind ("TPU v5 lite"), "cpu (interpret mode)" under --interpret
    jax: str
    jaxlib: str
    libtpu: str
    date: str  # UTC, ISO


def provenance(interpret: bool) -> Provenance:
    """The running process's JAX stack and device."""
    import importlib.metadata

    import jax
    import jaxlib

    def version(*names: str) -> str:
        for name in names:
            try:
                return importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                continue
        return "none"

    kind = "cpu (interpret mode)" if interpret else jax.devices()[0].device_kind
    return Provenance(device=kind, jax=jax.__version__, jaxlib=jaxlib.__version__,
                      libtpu=version("libtpu", "libtpu-nightly"),
                      date=datetime.datetime.now(datetime.UTC).date().isoformat())


def render_module(kernel: ir.Kernel, spec: ir.Spec, device: Device, folder: Path) -> Path:
    """Write the Pallas module of `kernel` (a `with_tile` kernel) into
    `folder`, rendered for the device's TPU generation; return its path."""
    from gemmgen.backends import pallas

    one = replace(spec_for(spec, device), kernels=(kernel,), dispatches=())
    files = pallas.render(one)
    rel = next(p for p in files if p.name == f"{kernel.name}.py")
    path = folder / rel.name
    path.write_text(files[rel])
    return path


def has_tpu() -> bool:
    import jax

    try:
        return bool(jax.devices("tpu"))
    except RuntimeError:
        return False


def sample_times(call, samples: int, batch: int) -> list[float]:
    """Seconds per call of each of `samples` samples of `batch` calls of
    `call`, dispatched back to back and waited for once: JAX dispatches
    asynchronously, so the wrapper's Python work overlaps the device's, as
    in a model's step (scripts/tpu_bench.py and the tuner time alike). Each
    output is dropped when the next call is dispatched, so at most two are
    alive (ten f32 [128, 2048, 1536] tgmm outputs were 16 GB, more than a
    v5e's HBM); the device runs the calls in order, the last ends the batch."""
    import jax

    times = []
    for _ in range(samples):
        start = time.perf_counter()
        out = None
        for _ in range(batch):
            out = call()
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / batch)
    return times


def tpu_kind() -> tuple[str, str | None]:
    """JAX's device_kind of this machine's TPU and the generation it names
    (`TPU_DEVICE_KINDS`; None for a kind that table does not know)."""
    import jax

    from gemmgen.backends.pallas.tpu import TPU_DEVICE_KINDS

    kind = jax.devices("tpu")[0].device_kind
    return kind, dict(TPU_DEVICE_KINDS).get(kind)


class PooledRng:
    """The few `numpy.random.Generator` draws `random_inputs` makes, each
    array cut from a pool of POOL fresh draws repeated (`np.resize`): the
    values have the distribution of real ones, at the cost of a copy. A
    Mixtral-sized rhs (940M elements) took about a minute of random numbers
    on the host per job; timing needs operands of the right kind, not of
    full entropy (the winners are checked on fresh inputs, `check`)."""

    POOL = 1 << 20

    def __init__(self, rng) -> None:
        self._rng = rng

    def _cut(self, draw, size, dtype=None):
        import numpy as np

        if size is None:
            return draw(None)
        count = int(np.prod(size))
        pool = draw(min(count, self.POOL))
        out = np.resize(pool, count).reshape(size)
        return out if dtype is None else out.astype(dtype, copy=False)

    def standard_normal(self, size=None, dtype=None):
        import numpy as np

        dtype = np.float64 if dtype is None else dtype
        return self._cut(lambda c: self._rng.standard_normal(c, dtype=dtype), size)

    def integers(self, low, high=None, size=None):
        return self._cut(lambda c: self._rng.integers(low, high, size=c), size)

    def random(self, size=None):
        return self._cut(lambda c: self._rng.random(c), size)

    def uniform(self, low=0.0, high=1.0, size=None):
        return self._cut(lambda c: self._rng.uniform(low, high, size=c), size)

    def permutation(self, x):
        return self._rng.permutation(x)


class JaxTimer:
    """Times candidates of one kernel with JAX: a callable
    `(kernel, spec, shape, tile) -> Measurement`, as the tuner takes it
    (tests inject a fake one instead)."""

    def __init__(self, device: Device, *, interpret: bool, samples: int = SAMPLES,
                 batch: int = BATCH, seed: int = 0) -> None:
        self.device = device
        self.interpret = interpret
        self.samples, self.batch, self.seed = samples, batch, seed
        self._dir = tempfile.TemporaryDirectory(prefix="gemmgen-tune-")
        self._count = 0
        self._functions: dict[tuple[str, ir.Tile], object] = {}
        # The operands of the (kernel, shape) being measured: its candidates
        # run one after another on the same arrays, so they are made (on the
        # host, then copied to the device) once per job, not per candidate;
        # the previous job's are dropped first (a Mixtral-sized rhs is 1.9 GB).
        self._inputs_key: tuple[str, Shape] | None = None
        self._inputs: dict = {}

    def close(self) -> None:
        self._dir.cleanup()

    def _kwargs(self) -> dict:
        if not self.interpret:
            return {}
        from jax.experimental.pallas import tpu as pltpu

        return {"interpret": pltpu.InterpretParams()}

    def function(self, kernel: ir.Kernel, spec: ir.Spec, tile: ir.Tile):
        """The generated entry point of `kernel` with `tile`, imported by path
        under a module name of its own (rendered once per kernel and tile)."""
        from gemmgen.harness.runner import load_generated_module

        key = (kernel.name, tile)
        if key not in self._functions:
            self._count += 1
            one = with_tile(kernel, ir.Backend.PALLAS_TPU, tile)
            path = render_module(one, spec, self.device, Path(self._dir.name))
            module = load_generated_module(path, f"gemmgen_tune_{self._count}_{kernel.name}")
            self._functions[key] = getattr(module, kernel.name)
        return self._functions[key]

    def _device_inputs(self, inputs: dict) -> dict:
        import jax
        import numpy as np

        dev = jax.devices("cpu" if self.interpret else "tpu")[0]
        return {k: jax.device_put(v, dev) if isinstance(v, np.ndarray) else v
                for k, v in inputs.items()}

    def inputs(self, kernel: ir.Kernel, shape: Shape) -> dict:
        """Random operands of the shape (fixed seed); a grouped shape's rows
        split by the skewed `group_sizes` (masked: `masked_counts`)."""
        import numpy as np

        from gemmgen.reference import random_inputs

        kw: dict = {}
        if kernel.masked:
            kw = {"g_local": shape.g, "masked_m": np.array(masked_counts(shape), np.int32)}
        elif kernel.op is ir.Op.GROUPED:
            kw = {"group_sizes": np.array(group_sizes(shape), np.int32)}
        return random_inputs(kernel, m=shape.m, n=shape.n, k=shape.k,
                             rng=PooledRng(np.random.default_rng(self.seed)), **kw)

    def __call__(self, kernel: ir.Kernel, spec: ir.Spec, shape: Shape,
                 tile: ir.Tile) -> Measurement:
        import jax

        try:
            fn = self.function(kernel, spec, tile)
            if self._inputs_key != (kernel.name, shape):
                self._inputs_key, self._inputs = None, {}
                self._inputs = self._device_inputs(self.inputs(kernel, shape))
                self._inputs_key = (kernel.name, shape)
            args = self._inputs
            extra = self._kwargs()
            start = time.perf_counter()
            jax.block_until_ready(fn(**args, **extra))  # traces and compiles
            compile_s = time.perf_counter() - start
            times = sample_times(lambda: fn(**args, **extra), self.samples, self.batch)
        except Exception as e:  # noqa: BLE001 - a candidate that fails is recorded, skipped
            return Measurement(None, error=f"{type(e).__name__}: {_first_line(str(e))}")
        median = statistics.median(times)
        noise = (max(times) - min(times)) / median if median > 0 else 0.0
        return Measurement(median, noise, compile_s)

    def check(self, kernel: ir.Kernel, spec: ir.Spec, tile: ir.Tile) -> str:
        """"" when `kernel` with `tile` matches the NumPy reference on its
        first standard case (a small ragged shape: partial tiles, K not a
        multiple of the tile, empty groups), else what went wrong."""
        import numpy as np

        from gemmgen.cases import standard_cases
        from gemmgen.reference import compare, reference

        one = with_tile(kernel, ir.Backend.PALLAS_TPU, tile)
        try:
            fn = self.function(kernel, spec, tile)
            case = standard_cases(one.for_backend(ir.Backend.PALLAS_TPU))[0]
            inputs = case.inputs(one, self.seed)
            got = fn(**self._device_inputs(inputs), **self._kwargs())
            got = tuple(np.asarray(o) for o in got) if isinstance(got, tuple) else np.asarray(got)
            result = compare(got, reference(one, **inputs), one, k=case.k, inputs=inputs)
        except Exception as e:  # noqa: BLE001 - a failing winner is dropped for the next
            return f"{type(e).__name__}: {_first_line(str(e))}"
        return "" if result.passed else f"case {case.name}: {_first_line(result.detail)}"


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 200 else line[:197] + "..."
