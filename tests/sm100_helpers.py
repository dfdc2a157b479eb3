"""A test spec rendered once, whose kernels take the generated sm_100a path
(TMA + tcgen05.mma, gg_gemm_sm100.cuh) on an emulated sm_100a device
(tests/cuda/sm100/test_cuda_sm100_*.py), and what those test files share:
their parametrisation (one fast case, the rest slow), planted bugs in a
copy of the body under a generated kernel, nvcc's view of the entries."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from sm90_helpers import HopperSpec, fresh_seed

from gemmgen.backends import cuda as cuda_backend
from gemmgen.cache import cache_dir
from gemmgen.cases import Case
from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError, EmuModule
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, reference
from gemmgen.runtime import RUNTIME_INCLUDE_DIR

SM100 = "sm_100a"
seed = fresh_seed

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(
    nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


def case_params(rows) -> list:
    """Rows of (kernel, Case, SMs, fast) as pytest params of (name, case,
    num_sms), each `kernel-case` by id and slow unless marked fast."""
    return [pytest.param(n, c, s, id=f"{n}-{c.name}", marks=() if fast else pytest.mark.slow)
            for n, c, s, fast in rows]


def one_fast(names, fast: str) -> list:
    """`names` as pytest params, every one slow but `fast`."""
    return [pytest.param(n, marks=() if n == fast else pytest.mark.slow) for n in names]


def spec_errors(text: str) -> str:
    """The SpecError that validating `text` (as specs/x.gemm) must raise."""
    from gemmgen import backends
    from gemmgen.diagnostics import SpecError
    from gemmgen.parse import parse
    from gemmgen.validate import validate

    with pytest.raises(SpecError) as err:
        validate(parse(text, "specs/x.gemm"), diagnose=backends.diagnose)
    return str(err.value)


def cluster_steps(lp) -> dict:
    """The tcgen05 path's cluster steps (the 2-CTA entries) by entry name."""
    return {s.entry: s for v in lp.variants for s in v.path("tcgen05").steps if s.is_cluster}


def assert_fits(usage, step) -> None:
    """No spills, no stack frame, shared memory within sm_100a's 227 KiB."""
    assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
    assert usage.static_smem + step.smem <= nvcc.shared_memory_limit(SM100) == 227 * 1024


def assert_2cta_mmas(code, mma: str, entry: str) -> None:
    """Every `mma` of `entry`'s SASS the 2-CTA form (at least one), its
    commits multicast to the pair, no mma.sync."""
    assert code.count(mma, "2CTA") == code.count(mma) > 0, entry
    assert code.count("UTCBAR", "2CTA", "MULTICAST") > 0, entry
    assert code.count("HMMA") == 0, entry


class Sm100Spec(HopperSpec):
    """HopperSpec on an emulated sm_100a device: the `_sm100` entries."""

    ARCH, SM, SUFFIX = SM100, 100, "_sm100"

    def tiles(self, name: str) -> list:
        """Kernel `name`'s planned tcgen05 body tiles."""
        from gemmgen.backends.cuda import gemm as tile_gemm

        return tile_gemm.plan(self.kernel(name), self.spec).body_tiles("tcgen05")

    def matches(self, name: str, case: Case, inputs: dict, actual) -> bool:
        """Whether `actual` (kernel `name` on `inputs` of `case`) passes the
        comparison with the reference."""
        k = self.kernel(name)
        return compare(actual, reference(k, **inputs), k, k=case.k, inputs=inputs).passed

    def build(self, name: str):
        """nvcc for sm_100a (-Werror all-warnings) on kernel `name`'s .cu: its
        launch plan, the compile result and the SASS summary by entry."""
        lp = cuda_backend.plan(self.kernel(name), self.spec)
        source = (self.folder / f"{name}.cu").read_text()
        result = nvcc.compile_check(source, self.ARCH, name_for_errors=f"{name}.cu",
                                    include_dirs=(self.folder,),
                                    extra_flags=("-Werror", "all-warnings"))
        return lp, result, nvcc.sass_summary(result.cubin)

    def planted(self, name: str, edits) -> tuple[dict, str]:
        """Kernel `name`'s generated .cu on a copy of gg_gemm_sm100.cuh (its
        epilogue's gg_gemm_sm100_epilogue.cuh and its entry points'
        gg_gemm_sm100_entry.cuh, with the 2-CTA tile's gg_gemm_sm100_pair.cuh,
        in their places) with `edits` (each
        must match it once), renamed gg::gemm::sm100_planted: the emulator
        modules keyed as run_launcher looks them up, and the key (pass it as
        run_launcher's source name, with an empty source)."""
        text = (RUNTIME_INCLUDE_DIR / "gg_gemm_sm100.cuh").read_text()
        pair = (RUNTIME_INCLUDE_DIR / "gg_gemm_sm100_pair.cuh").read_text()
        pair = pair.replace("#pragma once\n", "").replace('#include "gg_gemm_sm100.cuh"\n', "")
        # The entry points (gg_gemm_sm100_entry.cuh, which includes the pair).
        entry = (RUNTIME_INCLUDE_DIR / "gg_gemm_sm100_entry.cuh").read_text()
        entry = entry.replace("#pragma once\n", "").replace('#include "gg_gemm_sm100.cuh"\n', "")
        assert entry.count('#include "gg_gemm_sm100_pair.cuh"\n') == 1
        entry = entry.replace('#include "gg_gemm_sm100_pair.cuh"\n', pair)
        assert text.count('#include "gg_gemm_sm100_entry.cuh"\n') == 1
        text = text.replace('#include "gg_gemm_sm100_entry.cuh"\n', entry)
        # The epilogue warps and the 1-CTA block (gg_gemm_sm100_epilogue.cuh).
        epilogue = (RUNTIME_INCLUDE_DIR / "gg_gemm_sm100_epilogue.cuh").read_text()
        epilogue = epilogue.replace("#pragma once\n", "").replace(
            '#include "gg_gemm_sm100.cuh"\n', "")
        assert text.count('#include "gg_gemm_sm100_epilogue.cuh"\n') == 1
        text = text.replace('#include "gg_gemm_sm100_epilogue.cuh"\n', epilogue)
        for old, new in edits:
            assert text.count(old) == 1, f"the planted edit no longer matches the body: {old!r}"
            text = text.replace(old, new)
        text = text.replace("namespace gg::gemm::sm100 {", "namespace gg::gemm::sm100_planted {")
        text = text.replace("}  // namespace gg::gemm::sm100\n", "}  // namespace gg::gemm::sm100_planted\n")
        text = text.replace("sm100::", "sm100_planted::")
        k = self.kernel(name)
        call = f"gg::gemm::sm100::{'masked' if k.masked else 'grouped' if k.grouped else 'dense'}<"
        return self._planted_module(name, text, call, call.replace("sm100::", "sm100_planted::"),
                                    "sm100_planted.cuh", "sm100_generated_planted")

    def planted_mixed(self, name: str, edits) -> tuple[dict, str]:
        """As `planted`, for a dense weight-only kernel: its .cu on a copy of
        gg_gemm_sm100_mixed.cuh with `edits` (each must match once), renamed
        gg::gemm::sm100_mixed_planted."""
        text = (RUNTIME_INCLUDE_DIR / "gg_gemm_sm100_mixed.cuh").read_text()
        for old, new in edits:
            assert text.count(old) == 1, f"the planted edit no longer matches the header: {old!r}"
            text = text.replace(old, new)
        text = text.replace("sm100_mixed", "sm100_mixed_planted")
        return self._planted_module(name, text, "gg::gemm::sm100_mixed::dense<",
                                    "gg::gemm::sm100_mixed_planted::dense<", "wp_planted.cuh",
                                    "sm100_pair_weight_only_planted")

    def _planted_module(self, name: str, text: str, call: str, planted_call: str, header: str,
                        cache: str) -> tuple[dict, str]:
        """Kernel `name`'s .cu calling `planted_call` (in place of its one
        `call`) from `text`, written as `header` to a folder under the cache
        named by `cache` and the text's digest: the modules and the key."""
        source = (self.folder / f"{name}.cu").read_text()
        assert source.count(call) == 1
        source = source.replace(call, planted_call).replace(
            '#include "gg_runtime.cuh"\n', f'#include "gg_runtime.cuh"\n#include "{header}"\n')
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        out = cache_dir() / cache / digest
        out.mkdir(parents=True, exist_ok=True)
        (out / header).write_text(text)
        key = str(self.folder / f"{name}_planted.cu")
        return {key: EmuModule(source, key, include_dirs=[out, self.folder])}, key

    def run_planted(self, name: str, edits, inputs: dict, num_sms: int, mixed: bool = False,
                    **kwargs):
        """Kernel `name` on `inputs` through its Python launcher, on the body
        (`mixed`: the weight-only header) with `edits` planted, on an
        emulated device of `num_sms` SMs (kwargs: run_launcher's, such as
        the warp schedule)."""
        modules, key = (self.planted_mixed if mixed else self.planted)(name, edits)
        return run_launcher(self.launcher(name), "", key, inputs, modules=modules,
                            arch=self.ARCH, num_sms=num_sms, **kwargs)

    def expect_report(self, name: str, edits, inputs: dict, report: str, num_sms: int,
                      **kwargs) -> None:
        """`run_planted` stops with an emulator report that matches `report`."""
        with pytest.raises(EmuKernelError, match=report):
            self.run_planted(name, edits, inputs, num_sms, **kwargs)

    def run_cupy(self, name: str, case: Case, sms: int):
        """Kernel `name` (16-bit lhs and rhs) on `case` through the generated
        CuPy launcher on the CuPy stand-in of a device of `sms` SMs: whether
        it matches the reference, its launches as (entry, grid, cluster,
        attribute ids), and the refused ones."""
        from gemmgen.harness import cupy_standin

        k, module = self.kernel(name), self.launcher(name)
        inputs = case.inputs(k, seed())
        with cupy_standin.install(self.folder, self.ARCH) as cupy:
            cupy.sms = sms
            lhs, rhs = (cupy.asarray(np.asarray(inputs[a]).view(np.uint16).reshape(-1)).reshape(
                np.shape(inputs[a])) for a in ("lhs", "rhs"))
            got = getattr(module, name)(lhs=lhs, rhs=rhs).host().copy()
        launches = [(x["entry"], x["grid"], x["cluster"], x["attribute_ids"])
                    for x in cupy.launches]
        return self.matches(name, case, inputs, got), launches, cupy.refused
