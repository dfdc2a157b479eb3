"""Run generated Pallas kernels for `gemmgen verify`: in TPU interpret mode
on the CPU (`pallas-interpret`), through the real Pallas -> Mosaic TPU
lowering without running (`pallas-lower`), and compiled by Mosaic and run on
a real TPU when JAX sees one (`pallas-tpu`).

JAX is imported when a runner first needs it, so importing this module
(and `gemmgen verify --backend cuda-emu`) does not load JAX.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gemmgen import ir
from gemmgen.build import Rendered
from gemmgen.harness.runner import Runner, load_generated_module


class _PallasBase(Runner):
    backend = ir.Backend.PALLAS_TPU

    def unavailable(self) -> str | None:
        try:
            import jax  # noqa: F401
            from jax.experimental.pallas import tpu  # noqa: F401
        except Exception as e:  # pragma: no cover - jax is a dependency
            return f"JAX Pallas is not importable: {e}"
        return None

    def prepare(self, rendered: Rendered, workdir: Path) -> None:
        super().prepare(rendered, workdir)
        self.modules = {}
        for rel, text in rendered.files.items():
            if rel.parts[0] == "pallas":
                dest = workdir / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(text)

    def module(self, kernel: ir.Kernel):
        if kernel.name not in self.modules:
            path = self.workdir / "pallas" / f"{kernel.name}.py"
            self.modules[kernel.name] = load_generated_module(
                path, f"gemmgen_verify_{self.rendered.spec.stem}_{kernel.name}")
        return getattr(self.modules[kernel.name], kernel.name)


class PallasInterpret(_PallasBase):
    name = "pallas-interpret"
    # The interpreter's simulated TPU memory is global to the process, and its
    # callbacks hold the GIL: each worker process runs one case at a time.
    processes = True

    def run(self, kernel, case, inputs):
        import jax.numpy as jnp
        from jax.experimental.pallas import tpu as pltpu

        fn = self.module(kernel)
        args = {key: jnp.asarray(v) for key, v in inputs.items()}
        try:
            out = fn(**args, interpret=pltpu.InterpretParams())
        except Exception:
            from jax._src.pallas.mosaic import interpret as _interp
            reset = getattr(_interp, "reset_tpu_interpret_mode_state", None)
            if reset is not None:
                reset()
            raise
        if isinstance(out, tuple):
            return tuple(np.asarray(o) for o in out)
        return np.asarray(out)


class PallasLower(_PallasBase):
    name = "pallas-lower"
    checks_numbers = False
    processes = True  # tracing and lowering hold the GIL

    def run(self, kernel, case, inputs):
        import jax

        fn = self.module(kernel)
        names = list(inputs)
        structs = [jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype) for v in inputs.values()]

        def call(*xs):
            return fn(**dict(zip(names, xs)))

        exported = jax.export.export(jax.jit(call), platforms=["tpu"])(*structs)
        return exported.mlir_module()


def tpu_device():
    """The first TPU device JAX sees, or None (no TPU, or no TPU runtime)."""
    import jax

    try:
        devices = jax.devices("tpu")
    except RuntimeError:  # "Unknown backend: 'tpu' requested ..."
        return None
    return devices[0] if devices else None


class PallasTPU(_PallasBase):
    """The generated kernel as a user on a TPU calls it: inputs placed on the
    TPU, compiled by Mosaic for that chip, run, and read back."""

    name = "pallas-tpu"
    serial = True  # one device

    def unavailable(self) -> str | None:
        reason = super().unavailable()
        if reason:
            return reason
        if tpu_device() is None:
            return "JAX sees no TPU on this machine"
        return None

    def run(self, kernel, case, inputs):
        import jax

        device = tpu_device()
        fn = self.module(kernel)
        args = {key: jax.device_put(v, device) for key, v in inputs.items()}
        out = jax.block_until_ready(fn(**args))
        if isinstance(out, tuple):
            return tuple(np.asarray(o) for o in out)
        return np.asarray(out)

    @property
    def note(self) -> str:
        device = tpu_device()
        return f"ran on {device.device_kind}" if device is not None else ""


def runners() -> list[Runner]:
    return [PallasInterpret(), PallasLower(), PallasTPU()]
