"""The block-scaled mma.sync body of the tile GEMM on sm_120a / sm_121a (a
`Body` of bodies.py).

An MXFP8 kernel (ir.Kernel.mx_mma_obstacle: FP8 operands with e8m0 scales of
32-wide K blocks on both sides) whose spec declares sm_120a or sm_121a gets,
per LUT entry, an `Sm120Tile` deriving from the mma.sync tile (same shape,
pipeline and shared memory; `kBlockScaledMma` set) and an `<entry>_sm120`
entry point with the mma.sync entry's parameters: the body is gg_gemm.cuh's,
whose K steps issue the block-scaled MMA (gg::mma_m16n8k32_mx, SASS
`QMMA.SF`) with the scale bytes in registers instead of promoting partial
sums in software. The launchers take its steps on the compute capabilities
of the declared `a` archs (12.0 for sm_120a, 12.1 for sm_121a: an `a` build
runs on its own chip only). docs/cuda-blackwell.md describes it;
templates/cuda/gemm_sm120.cu.j2 prints its tiles.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from gemmgen import ir
from gemmgen.backends.cuda.common import Step, any_of, var
from gemmgen.backends.cuda.gemm import mma_sync
from gemmgen.backends.cuda.gemm.body import Body, BodyLaunch, BodyPlan
from gemmgen.backends.cuda.gemm.mma_sync import TileConfig
from gemmgen.backends.cuda.gemm.text import COLUMNS, Entry, Param
from gemmgen.ir import DType, Op, arch_number


@dataclass(frozen=True, slots=True)
class Sm120Tile:
    """The block-scaled tile of one LUT entry: the mma.sync tile `base`
    (its struct TileN) multiplied with the block-scaled MMA."""

    index: int
    entry: str  # extern "C" symbol
    base: TileConfig
    archs: tuple[str, ...]  # the declared archs with the block-scaled MMA
    shape: str  # the MMA's shape, "m16n8k32" or "m16n8k64"

    @property
    def cc_words(self) -> tuple[str, ...]:
        """The compute capabilities the launchers take the path on, in words."""
        return tuple(f"{arch_number(a) // 10}.{arch_number(a) % 10}" for a in self.archs)

    @property
    def label(self) -> str:
        b = self.base
        return f"{b.bm}x{b.bn}x{b.bk}, {b.stages} stages"

    @property
    def comment(self) -> tuple[str, ...]:
        b = self.base
        text = (f"Block-scaled tile {self.index} (sm_120a / sm_121a): Tile{self.index}'s "
                f"{b.bm} x {b.bn} x {b.bk} and {b.smem_bytes} bytes of shared memory, its "
                f"{b.ksteps} K steps a K tile the block-scaled {self.shape} MMA.")
        return tuple(textwrap.wrap(text, COLUMNS - len("// ")))


def declared(spec: ir.Spec) -> tuple[str, ...]:
    """The declared archs that have the block-scaled mma.sync."""
    target = spec.target(ir.Backend.CUDA)
    return tuple(a for a in (target.cuda_archs if target else ()) if a in ir.MX_MMA_ARCHS)


def uses_sm120(kernel: ir.Kernel, spec: ir.Spec) -> bool:
    """Whether the kernel gets the block-scaled body: a declared arch where
    ir.Kernel.uses_mx_mma holds."""
    return any(kernel.uses_mx_mma(a) for a in declared(spec))


def _entries(kernel: ir.Kernel, tiles: tuple[Sm120Tile, ...],
             params: tuple[Param, ...]) -> tuple[Entry, ...]:
    """Each tile's entry: the mma.sync entry's parameters and call, laid out
    for its own entry name (`_sm120`) and the Sm120 tile, and compiled only
    for the `a` targets."""
    rows = ("(group, m tile) pairs" if kernel.masked else "work items"
            if kernel.op is Op.GROUPED else "m tiles")
    out = []
    renamed = mma_sync.entries(kernel, [t.base for t in tiles], params, struct="Sm120Tile",
                               suffix="_sm120")
    gemms = renamed[-len(tiles):]  # after fill and worklist (grouped)
    for t, base in zip(tiles, gemms):
        assert any(f" {t.entry}(" in line for line in base.signature), t.entry
        sig, calls = base.signature, base.body
        body = ("#if defined(__CUDA_ARCH__) && !defined(GG_SM12X_BLOCK_SCALED)",
                "  __trap();  // built without sm_120a / sm_121a: the launchers pick this entry "
                "there only",
                "#else",
                *calls,
                "#endif")
        out.append(Entry(
            comment=tuple(textwrap.wrap(
                f"(sm_120a / sm_121a) Block-scaled tile {t.index} ({t.base.label}): "
                f"{t.base.bm} x {t.base.bn_out} output tiles, the MX scales applied by the "
                f"MMA; grid: n tiles, {rows} over y and z.", COLUMNS - len("// "))),
            signature=sig, body=body))
    return tuple(out)


def mma_words(kernel: ir.Kernel) -> tuple[str, str, str]:
    """The block-scaled MMA of a kernel, in words: (the PTX kind, shape and
    types; its SASS opcode; which scale bytes a K step reads)."""
    a, b = kernel.lhs.dtype, kernel.rhs_operand.dtype
    pair = " x ".join("e2m1" if d is DType.FP4 else d.value for d in (a, b))
    if a is DType.FP4 and kernel.lhs_scale.dtype is DType.UE4M3:
        return (f"kind::mxf4nvf4.block_scale.scale_vec::4X m16n8k64 ({pair}, ue4m3 scales)",
                "OMMA.SF", "a 32-bit word of four scales per K step, byte-id 0")
    if a is DType.FP4:
        return (f"kind::mxf4.block_scale.scale_vec::2X m16n8k64 ({pair}, ue8m0 scales)",
                "OMMA.SF", "two scales per K step, byte-id 0 or 2")
    if b is DType.FP4:  # W4A8: the packed weights unpacked to one e2m1 a byte
        return (f"kind::mxf8f6f4.block_scale.scale_vec::1X m16n8k32 ({pair}, ue8m0 scales; "
                "W4A8)", "QMMA.SF", "one scale per K step, byte-id = K step % 4")
    return (f"kind::mxf8f6f4.block_scale.scale_vec::1X m16n8k32 ({pair}, ue8m0 scales)",
            "QMMA.SF", "one scale per K step, byte-id = K step % 4")


def mma_shape(kernel: ir.Kernel) -> str:
    """The block-scaled MMA's shape: m16n8k64 for fp4 x fp4, else m16n8k32."""
    return "m16n8k64" if kernel.lhs.dtype is DType.FP4 else "m16n8k32"


def _algorithm(kernel: ir.Kernel, number: int, archs: tuple[str, ...]) -> tuple[str, ...]:
    ccs = " and ".join(f"{arch_number(a) // 10}.{arch_number(a) % 10}" for a in archs)
    kind, sass, bytes_ = mma_words(kernel)
    text = (f"on {' / '.join(archs)} (compute capability {ccs}) the launchers run the "
            f"block-scaled body instead (docs/cuda-blackwell.md): the same tiles and "
            f"pipeline, each K step one mma.sync {kind}, SASS {sass}, per fragment, the "
            f"scale bytes of the K tile's MX / NV blocks read into registers one K tile ahead "
            f"({bytes_}), no software promotion.")
    wrapped = textwrap.wrap(text, COLUMNS - len("//   (1) "))
    return (f"({number}) {wrapped[0]}", *(f"    {w}" for w in wrapped[1:]))


def _plan(kernel: ir.Kernel, spec: ir.Spec, tiles: tuple[TileConfig, ...],
          lut: tuple[ir.Tile, ...], number: int) -> BodyPlan:
    """An Sm120Tile per LUT entry over its mma.sync tile, the entry points
    (the mma.sync ones' parameters) and the algorithm item."""
    archs = tuple(a for a in declared(spec) if kernel.uses_mx_mma(a))
    shape = mma_shape(kernel)
    own = tuple(Sm120Tile(t.index, f"{t.entry}_sm120", t, archs, shape) for t in tiles)
    params = mma_sync.params(kernel)
    return BodyPlan(body=BODY, tiles=own, params=params, entries=_entries(kernel, own, params),
                    algorithm=_algorithm(kernel, number, archs))


def _launch(kernel: ir.Kernel, bp: BodyPlan, t: TileConfig,
            steps: tuple[Step, ...]) -> BodyLaunch:
    """The mma.sync steps of LUT entry `t` with the GEMM step's entry
    renamed, taken on the declared `a` archs' compute capabilities."""
    own = bp.tiles[t.index]
    gemm = steps[-1]
    assert gemm.entry == t.entry
    renamed = Step(own.entry, gemm.grid, gemm.block, gemm.smem, gemm.args,
                   gemm.comment + ", block-scaled MMA")
    cond = any_of(*(var("sm").eq(arch_number(a)) for a in own.archs))
    return BodyLaunch(steps[:-1] + (renamed,), cond, own.label)


BODY = Body(name="sm120", title="block-scaled", arch="sm_120a",
            cc="12.0 (sm_120a) / 12.1 (sm_121a)",
            what="the mma.sync tiles with the block-scaled MMA applying the MX scales",
            template="cuda/gemm_sm120.cu.j2", applies=uses_sm120, plan=_plan, launch=_launch)
