"""A test spec rendered once, whose kernels take the block-scaled body on an
emulated sm_120a / sm_121a device (tests/cuda/sm120/test_cuda_sm120_*.py)."""

from __future__ import annotations


from cuda_helpers import RenderedSpec

from gemmgen.backends import cuda as cuda_backend
from gemmgen.cases import Case
from gemmgen.harness.verify_cuda import device_of, run_cpp_launcher, run_launcher
from gemmgen.reference import compare, reference


class Sm120Spec(RenderedSpec):
    """`text` rendered on first use, its CUDA files in a folder of their own."""

    def __init__(self, text: str, stem: str) -> None:
        super().__init__(stem, text)

    def run(self, name: str, case: Case, arch: str, seed: int = 0, *, source: str | None = None,
            cpp: bool = False):
        """`name` on `case` on an emulated `arch` device: (the result of the
        comparison with the reference, the entry of the GEMM launch)."""
        k = self.spec.kernel(name)
        inputs = case.inputs(k, seed)
        lm = self.launcher(name)
        entry = lm.launches(lm.validate(**inputs), *device_of(arch))[-1].entry
        if cpp:
            actual = run_cpp_launcher(cuda_backend.plan(k, self.spec), self.folder, inputs, arch=arch)
        else:
            path = self.folder / f"{name}.cu"
            text = source if source is not None else path.read_text()
            key = str(path) if source is None else f"{path}#{hash(source)}"
            actual = run_launcher(lm, text, key, inputs, modules=self.modules, arch=arch)
        return compare(actual, reference(k, **inputs), k, k=case.k, inputs=inputs), entry
