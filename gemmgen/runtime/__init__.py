"""What ships with generated code: the CUDA headers in `cuda/` that
generated `.cu` files include (and the CPU emulator's), and where they are.

`gemmgen build` copies the headers generated code reaches through its
includes, except the emulator's, into `generated/<stem>/cuda/`
(`gemmgen.build.runtime_headers`), so generated code and its CuPy launchers
need nothing of gemmgen at run time. The Python that compiles, emulates and
checks kernels is `gemmgen.harness`; it compiles against this folder.
"""

from __future__ import annotations

from pathlib import Path

RUNTIME_INCLUDE_DIR = Path(__file__).resolve().parent / "cuda"
"""The gemmgen CUDA runtime headers (gg_runtime.cuh and what it includes)."""


def is_emulator_file(name: str) -> bool:
    """Whether a runtime file belongs to the CPU emulator (gg_emu*.h, its core
    units gg_emu_*.cc and gg_emu_host.cc), which only a host compiler
    reaches: gg_runtime.cuh
    includes gg_emu.h only when __CUDACC__ is undefined. `gemmgen build` does
    not copy these into generated/."""
    return name.startswith("gg_emu")


CRATE = "rust"
"""The folder of a spec's output that holds its Rust crate."""

CRATE_BUILD_PRODUCTS = ("target", "Cargo.lock")
"""What `cargo build` writes in the crate when a user builds it in place:
listed in the crate's generated `.gitignore`, carried over by every build and
never reported by `check` (gemmgen.output)."""


HOPPER_ARCH = "sm_90a"
"""The arch whose kernels get the Hopper (TMA + wgmma) body."""

SM100_ARCHS = ("sm_100a", "sm_103a")
"""The archs whose kernels get the tcgen05 (TMA + tcgen05.mma) body, which
also includes the Hopper headers (TMA, mbarriers, the shared producer)."""

# The runtime headers that serve some archs only, by the marker in their
# names, and those archs: `gemmgen build` copies them for a spec that
# declares one of the archs, and leaves their includes out of the other
# headers' copies otherwise.
TIERS = (("_sm90", (HOPPER_ARCH, *SM100_ARCHS)), ("_sm100", SM100_ARCHS))


def tier_archs(name: str) -> tuple[str, ...]:
    """The archs a runtime header serves alone (gg_*_sm90*: TMA, wgmma,
    mbarriers, the warp-specialized tile GEMM, for sm_90a, sm_100a and
    sm_103a; gg_*_sm100*: tcgen05 and TMEM, for sm_100a and sm_103a); () for
    a header every arch
    needs."""
    if not name.startswith("gg_"):
        return ()
    return next((archs for marker, archs in TIERS if marker in name), ())


def is_hopper_file(name: str) -> bool:
    """Whether a runtime header serves only the TMA bodies of sm_90a and
    sm_100a (gg_*_sm90*.cuh: TMA, wgmma, mbarriers, the warp-specialized
    tile GEMM)."""
    return name.startswith("gg_") and "_sm90" in name
