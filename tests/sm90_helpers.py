"""A test spec rendered once, whose kernels take the generated Hopper path
on an emulated sm_90a device (tests/cuda/sm90/test_cuda_sm90_generated*.py)."""

from __future__ import annotations

import hashlib

import numpy as np
from cuda_helpers import RenderedSpec

from gemmgen.backends import cuda as cuda_backend
from gemmgen.cache import cache_dir
from gemmgen.cases import Case
from gemmgen.harness.cuda_emu import EmuModule
from gemmgen.harness.verify_cuda import run_cpp_launcher, run_launcher
from gemmgen.reference import compare, reference
from gemmgen.runtime import RUNTIME_INCLUDE_DIR

SM90 = "sm_90a"


class HopperSpec(RenderedSpec):
    """`text` rendered on first use, its CUDA files in a folder of their own;
    its kernels run on an emulated device of `ARCH` (compute capability
    `SM`), whose path's entries end in `SUFFIX`."""

    ARCH, SM, SUFFIX = SM90, 90, "_sm90"

    def run_py(self, name: str, inputs: dict, num_sms: int, **kwargs):
        """Kernel `name` on `inputs` through its Python launcher on the
        emulated device (kwargs: run_launcher's, such as the warp schedule)."""
        path = self.folder / f"{name}.cu"
        return run_launcher(self.launcher(name), path.read_text(), str(path), inputs,
                            modules=self.modules, arch=self.ARCH, num_sms=num_sms, **kwargs)

    def check(self, name: str, case: Case, num_sms: int, seed: int, cpp: bool = False) -> None:
        """The body's path of `name` on `case` against the reference."""
        k = self.kernel(name)
        inputs = case.inputs(k, seed)
        lm = self.launcher(name)
        entries = [s.entry for s in lm.launches(lm.validate(**inputs), self.SM, num_sms)]
        assert entries[-1].endswith(self.SUFFIX), entries  # the body's path runs
        if cpp:
            actual = run_cpp_launcher(cuda_backend.plan(k, self.spec), self.folder, inputs,
                                      arch=self.ARCH, num_sms=num_sms)
        else:
            actual = self.run_py(name, inputs, num_sms)
        result = compare(actual, reference(k, **inputs), k, k=case.k, inputs=inputs)
        assert result.passed, f"{name} {case.describe()}:\n{result.detail}"


    def planted(self, name: str, edits) -> tuple[dict, str]:
        """Kernel `name`'s generated .cu on copies of gg_gemm_sm90.cuh and
        gg_gemm_sm90_mixed.cuh with `edits` (each must match once in the first
        of them that has it), renamed gg::gemm::sm90_planted: the emulator modules keyed as
        run_launcher looks them up, and the key (pass it as run_launcher's
        source name, with an empty source)."""
        headers = ("gg_gemm_sm90.cuh", "gg_gemm_sm90_mixed.cuh")
        texts = {h: (RUNTIME_INCLUDE_DIR / h).read_text() for h in headers}
        for old, new in edits:
            # The first header that has the text (the 16-bit / FP8 body before
            # the weight-only one) must have it once.
            h = next((h for h, t in texts.items() if old in t), None)
            assert h is not None and texts[h].count(old) == 1, \
                f"the planted edit no longer matches the Hopper body: {old!r}"
            texts[h] = texts[h].replace(old, new)
        texts = {h: t.replace("namespace gg::gemm::sm90 {", "namespace gg::gemm::sm90_planted {")
                 for h, t in texts.items()}
        texts[headers[1]] = texts[headers[1]].replace('#include "gg_gemm_sm90.cuh"',
                                                      '#include "sm90_planted.cuh"')
        k = self.kernel(name)
        call = f"gg::gemm::sm90::{'masked' if k.masked else 'grouped' if k.grouped else 'dense'}<"
        source = (self.folder / f"{name}.cu").read_text()
        assert source.count(call) == 1
        source = source.replace(call, call.replace("sm90::", "sm90_planted::")).replace(
            '#include "gg_runtime.cuh"\n',
            '#include "gg_runtime.cuh"\n#include "sm90_planted.cuh"\n'
            '#include "sm90_mixed_planted.cuh"\n')
        digest = hashlib.sha256("\0".join(texts.values()).encode()).hexdigest()[:16]
        out = cache_dir() / "sm90_generated_planted" / digest
        out.mkdir(parents=True, exist_ok=True)
        (out / "sm90_planted.cuh").write_text(texts[headers[0]])
        (out / "sm90_mixed_planted.cuh").write_text(texts[headers[1]])
        key = str(self.folder / f"{name}_planted.cu")
        return {key: EmuModule(source, key, include_dirs=[out, self.folder])}, key


def fresh_seed() -> int:
    return int(np.random.default_rng().integers(1 << 30))


# The weight-only consumers' K loop as it ran on the H200 (docs/cuda-hopper.md,
# "Register-sourced wgmma hazards"): the next K tile's fragments built into a
# second array between the wgmmas and their wait, copied into the wgmmas'
# array at the top of the next K tile. Edits of gg_gemm_sm90_mixed.cuh.
OVERLAPPED_WEIGHT_ONLY_LOOP = [
    ("    TileScales<T> sc{{1.0f, 1.0f}, {1.0f, 1.0f}};\n    for (int kt = 0; kt < ktiles; ++kt, ++it) {",
     ("    u32 next[4][4];\n    if (ktiles > 0) {\n"
     "      gg::mbarrier_wait(&s.full[it % T::kStages], (it / T::kStages) & 1);\n"
     "      load_fragments<T>(s, it % T::kStages, cw, next);\n    }\n"
     "    TileScales<T> sc{{1.0f, 1.0f}, {1.0f, 1.0f}};\n    for (int kt = 0; kt < ktiles; ++kt, ++it) {")),
    (("      u32 a[4][4];\n      gg::mbarrier_wait(&s.full[st], (it / T::kStages) & 1);\n"
     "      load_fragments<T>(s, st, cw, a);\n"),
     ("      u32 a[4][4];\n      for (int kb = 0; kb < 4; ++kb)\n        for (int j = 0; j < 4; ++j)\n"
     "          a[kb][j] = next[kb][j];\n")),
    ("      gg::wgmma_commit_group();\n      gg::wgmma_wait_group<0>();",
     ("      gg::wgmma_commit_group();\n      if (kt + 1 < ktiles) {\n"
     "        gg::mbarrier_wait(&s.full[(it + 1) % T::kStages], ((it + 1) / T::kStages) & 1);\n"
     "        load_fragments<T>(s, (it + 1) % T::kStages, cw, next);\n      }\n"
     "      gg::wgmma_wait_group<0>();")),
]
