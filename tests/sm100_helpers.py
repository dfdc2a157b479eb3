"""A test spec rendered once, whose kernels take the generated sm_100a path
(TMA + tcgen05.mma, gg_gemm_sm100.cuh) on an emulated sm_100a device
(tests/cuda/sm100/test_cuda_sm100_generated.py)."""

from __future__ import annotations

import hashlib

from sm90_helpers import HopperSpec

from gemmgen.cache import cache_dir
from gemmgen.harness.cuda_emu import EmuModule
from gemmgen.runtime import RUNTIME_INCLUDE_DIR

SM100 = "sm_100a"


class Sm100Spec(HopperSpec):
    """HopperSpec on an emulated sm_100a device: the `_sm100` entries."""

    ARCH, SM, SUFFIX = SM100, 100, "_sm100"

    def planted(self, name: str, edits) -> tuple[dict, str]:
        """Kernel `name`'s generated .cu on a copy of gg_gemm_sm100.cuh (the
        2-CTA tile's gg_gemm_sm100_pair.cuh in its place) with `edits` (each
        must match it once), renamed gg::gemm::sm100_planted: the emulator
        modules keyed as run_launcher looks them up, and the key (pass it as
        run_launcher's source name, with an empty source)."""
        text = (RUNTIME_INCLUDE_DIR / "gg_gemm_sm100.cuh").read_text()
        pair = (RUNTIME_INCLUDE_DIR / "gg_gemm_sm100_pair.cuh").read_text()
        pair = pair.replace("#pragma once\n", "").replace('#include "gg_gemm_sm100.cuh"\n', "")
        assert text.count('#include "gg_gemm_sm100_pair.cuh"\n') == 1
        text = text.replace('#include "gg_gemm_sm100_pair.cuh"\n', pair)
        for old, new in edits:
            assert text.count(old) == 1, f"the planted edit no longer matches the body: {old!r}"
            text = text.replace(old, new)
        text = text.replace("namespace gg::gemm::sm100 {", "namespace gg::gemm::sm100_planted {")
        text = text.replace("}  // namespace gg::gemm::sm100\n", "}  // namespace gg::gemm::sm100_planted\n")
        text = text.replace("sm100::", "sm100_planted::")
        k = self.kernel(name)
        call = f"gg::gemm::sm100::{'masked' if k.masked else 'grouped' if k.grouped else 'dense'}<"
        source = (self.folder / f"{name}.cu").read_text()
        assert source.count(call) == 1
        source = source.replace(call, call.replace("sm100::", "sm100_planted::")).replace(
            '#include "gg_runtime.cuh"\n', '#include "gg_runtime.cuh"\n#include "sm100_planted.cuh"\n')
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        out = cache_dir() / "sm100_generated_planted" / digest
        out.mkdir(parents=True, exist_ok=True)
        (out / "sm100_planted.cuh").write_text(text)
        key = str(self.folder / f"{name}_planted.cu")
        return {key: EmuModule(source, key, include_dirs=[out, self.folder])}, key
