"""Shared machinery of the Pallas tests.

A test writes a small spec, renders it with the Pallas backend into a temp
folder, imports the generated module by path, runs the kernel on CPU in TPU
interpret mode on fresh random inputs and compares with the NumPy reference
(`gemmgen.reference`); and it lowers the same function for TPU with
`jax.export`, which runs the real Pallas -> Mosaic lowering (block shapes,
(8, 128) layout rules) that interpret mode does not check.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas import tpu as pltpu

from gemmgen import backends, ir
from gemmgen import reference as ref
from gemmgen.backends import pallas
from gemmgen.parse import parse
from gemmgen.validate import validate

# One instance: InterpretParams compare equal, so jit caches are shared.
INTERPRET = pltpu.InterpretParams()

_counter = itertools.count()


def spec_text(*kernels: str, tpu: str = "v5e") -> str:
    """A spec with a pallas_tpu target and the given kernel blocks."""
    return f"target pallas_tpu {{\n  tpu {tpu}\n}}\n\n" + "\n".join(kernels)


def kernel_block(name: str, *fields: str) -> str:
    """`kernel NAME { ... backends pallas_tpu }` with one field per line."""
    body = "".join(f"  {f}\n" for f in (*fields, "backends pallas_tpu"))
    return f"kernel {name} {{\n{body}}}\n"


def load_spec(text: str, path: str = "specs/test.gemm") -> ir.Spec:
    """Parse and validate spec text, backend diagnostics included."""
    return validate(parse(text, path), diagnose=backends.diagnose)


def generate(spec: ir.Spec, folder: Path) -> dict[str, ModuleType]:
    """Render the spec's Pallas files into `folder` and import each kernel module."""
    files = pallas.render(spec)
    for rel, text in files.items():
        dest = folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    modules = {}
    for k in spec.kernels_for(ir.Backend.PALLAS_TPU):
        modules[k.name] = import_path(folder / "pallas" / f"{k.name}.py")
    return modules


def import_path(path: Path) -> ModuleType:
    name = f"_gemmgen_test_{path.stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Generated:
    """A rendered and imported spec."""

    spec: ir.Spec
    modules: dict[str, ModuleType]

    def kernel(self, name: str) -> ir.Kernel:
        return self.spec.kernel(name)

    def fn(self, name: str):
        """The generated jax.jit function of kernel `name`."""
        return getattr(self.modules[name], name)


def build(text: str, folder: Path, path: str = "specs/test.gemm") -> Generated:
    spec = load_spec(text, path)
    return Generated(spec, generate(spec, folder))


def run(fn, inputs: dict[str, np.ndarray], **kwargs):
    """Call a generated function in TPU interpret mode on NumPy inputs."""
    args = {name: jnp.asarray(v) for name, v in inputs.items()}
    try:
        out = fn(**args, **kwargs, interpret=INTERPRET)
        return jax.tree.map(np.asarray, out)
    except Exception:
        pltpu.reset_tpu_interpret_mode_state()
        raise


def check(kernel: ir.Kernel, fn, inputs: dict[str, np.ndarray], *, k: int, **kwargs):
    """Run `fn` on `inputs` and assert it matches the reference."""
    actual = run(fn, inputs, **kwargs)
    expected = ref.reference(kernel, **inputs)
    result = ref.compare(actual, expected, kernel, k=k, inputs=inputs)
    assert result.passed, f"{kernel.name}: {result.detail}"
    return actual


def lower_for_tpu(fn, inputs: dict[str, np.ndarray], **static) -> jax.export.Exported:
    """Lower `fn` for TPU on this CPU-only machine (the real Mosaic lowering)."""
    structs = {name: jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype)
               for name, v in inputs.items()}
    f = functools.partial(fn, **static, interpret=False)
    return jax.export.export(jax.jit(f), platforms=["tpu"])(**structs)


# A tpu.matmul of the Mosaic module: its lhs, rhs and accumulator vector types.
_MATMUL = re.compile(r"tpu\.matmul [^\n]*: vector<((?:\d+x)+)(\w+)>, vector<((?:\d+x)+)(\w+)>, ")


def mosaic_text(fn, inputs: dict[str, np.ndarray], **static) -> str:
    """The Mosaic MLIR of every pallas_call `fn` makes, as the Pallas
    lowering hands it to the TPU custom call, captured while `jax.export`
    lowers `fn` for TPU on this CPU (what reaches the MXU: `tpu.matmul`)."""
    from jax._src import tpu_custom_call

    seen = []
    original = tpu_custom_call._lower_mosaic_module_to_asm

    def spy(module, **kw):
        seen.append(str(module))
        return original(module, **kw)

    tpu_custom_call._lower_mosaic_module_to_asm = spy
    try:
        jax.clear_caches()  # a cached lowering would not pass through the spy
        lower_for_tpu(fn, inputs, **static)
    finally:
        tpu_custom_call._lower_mosaic_module_to_asm = original
    assert seen, "no Mosaic module was lowered"
    return "\n".join(seen)


def matmul_types(text: str) -> list[tuple[str, str]]:
    """(lhs, rhs) element types of every tpu.matmul of a Mosaic module, in order."""
    return [(m[1], m[3]) for m in _MATMUL.findall(text)]


def matmul_shapes(text: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(lhs, rhs) shapes of every tpu.matmul of a Mosaic module, in order."""
    def dims(s: str) -> tuple[int, ...]:
        return tuple(int(d) for d in s.rstrip("x").split("x"))
    return [(dims(m[0]), dims(m[2])) for m in _MATMUL.findall(text)]


def random_inputs(kernel: ir.Kernel, *, m: int, n: int, k: int, seed: int = 0, **kwargs):
    return ref.random_inputs(kernel, m=m, n=n, k=k, rng=np.random.default_rng(seed), **kwargs)


def pallas_blocks(fn, inputs: dict[str, np.ndarray]) -> list[tuple[tuple, tuple, np.dtype]]:
    """(block shape, array shape, dtype) of every blocked operand and output of
    the pallas_calls `fn` makes, captured while it is lowered for TPU."""
    from jax.experimental import pallas as pl

    seen = []
    original = pl.pallas_call

    def spy(kernel, *args, **kw):
        call = original(kernel, *args, **kw)
        grid_spec = kw.get("grid_spec")
        in_specs = grid_spec.in_specs if grid_spec is not None else kw.get("in_specs", ())
        out_specs = grid_spec.out_specs if grid_spec is not None else kw.get("out_specs")
        out_shape = kw.get("out_shape", args[0] if args else None)
        # Scalar-prefetch operands come first and have no block.
        prefetch = grid_spec.num_scalar_prefetch if grid_spec is not None else 0

        def run(*operands):
            outs = out_shape if isinstance(out_shape, (list, tuple)) else [out_shape]
            specs = out_specs if isinstance(out_specs, (list, tuple)) else [out_specs]
            ins = in_specs if isinstance(in_specs, (list, tuple)) else [in_specs]
            for spec, x in [*zip(ins, operands[prefetch:]), *zip(specs, outs)]:
                block = getattr(spec, "block_shape", None)
                if block is not None:
                    seen.append((tuple(block), tuple(x.shape), np.dtype(x.dtype)))
            return call(*operands)

        return run

    pl.pallas_call = spy
    try:
        lower_for_tpu(fn, inputs)
    finally:
        pl.pallas_call = original
    return seen
