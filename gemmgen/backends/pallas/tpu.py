"""The TPU facts the plans use: VMEM per generation, VMEM tiling, buffering."""

from __future__ import annotations

from dataclasses import dataclass

from gemmgen import ir

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class TpuVmem:
    """VMEM of one TPU generation, per TensorCore."""

    physical: int
    scoped_default: int  # what Mosaic grants a kernel without vmem_limit_bytes

    @property
    def usable(self) -> int:
        """The most a kernel may ask for: 3/4 of physical VMEM, leaving the
        rest to Mosaic's internal scratch and to the compiler."""
        return self.physical * 3 // 4


TPU_VMEM = {
    "v5e": TpuVmem(physical=128 * MiB, scoped_default=16 * MiB),
    "v5p": TpuVmem(physical=95 * MiB, scoped_default=16 * MiB),
    "v6e": TpuVmem(physical=128 * MiB, scoped_default=32 * MiB),
    "v7x": TpuVmem(physical=64 * MiB, scoped_default=32 * MiB),
}

# What `jax.devices()[0].device_kind` says on each generation, as the
# generated `tpu_generation()` maps it (a module built for several
# generations picks its `tpu=` tile rules by it): JAX's names ("TPU v5
# lite", "TPU v6 lite", "TPU7x") and the marketing ones.
TPU_DEVICE_KINDS = (
    ("TPU v5 lite", "v5e"),
    ("TPU v5e", "v5e"),
    ("TPU v5", "v5p"),
    ("TPU v5p", "v5p"),
    ("TPU v6 lite", "v6e"),
    ("TPU v6e", "v6e"),
    ("TPU7x", "v7x"),
    ("TPU v7x", "v7x"),
)

# The generations whose MXU multiplies FP8 (e4m3, e5m2) itself, at twice its
# bf16 rate: TPU v7x (Ironwood). Mosaic's matmul canonicalization for that
# generation passes FP8 x FP8 operands through (e4m3 x e5m2 too) and widens
# FP8 against bf16 or f32 to bf16 ("no hardware support for f8 @ bf16/f32");
# earlier generations have no FP8 MXU, and the kernels widen FP8 to bf16.
FP8_MXU = frozenset({"v7x"})

# The generations whose MXU does not multiply int8 itself: Mosaic's matmul
# canonicalization for TPU v7x converts 8-bit integer operands to bf16 and
# sums the products in f32 (then converts back to int32), which is exact
# only while every partial sum stays within 2^24: at most INT_DOT_K terms of
# |a * b| <= 2^14 per dot. The kernels split longer int8 dots into chunks.
INT8_AS_BF16 = frozenset({"v7x"})
INT_DOT_K = 1024

# Mosaic pipelines a block with one or two buffers (JAX 0.10: "Only single
# (1) and double (2) buffering are supported").
MAX_BUFFERS = 2

LANES = 128  # last dim of a VMEM tile
# Rows of a block cut from a dim shorter than the tile: a multiple of every
# dtype's sublane tiling (8 rows of 32-bit, 16 of 16-bit, 32 of 8-bit data).
# A block of exactly the dim's odd size is legal as a BlockSpec, but Mosaic
# cannot lower the masks and relayouts of such a block's value on a TPU
# ("Not implemented: Sublane broadcast", seen on a v5e with m = 165 rows of
# bf16 under a 256-row tile); a block that overruns the array is partial,
# like any edge block.
M_ALIGN = 32
SUBLANES = 8  # second-minor dim of a 32-bit VMEM tile


def tpus_of(spec: ir.Spec) -> tuple[str, ...]:
    """Every TPU generation the spec targets (`tpu v5e v6e`), v5e when absent."""
    target = spec.target(ir.Backend.PALLAS_TPU)
    return target.tpus if target is not None else ("v5e",)


def tpu_of(spec: ir.Spec) -> str:
    """The generation whose VMEM bounds the spec's kernels: with one
    declared, that one; with several (one module runs on each of them), the
    one with the least usable VMEM (the first such in spec order), so that
    the VMEM checks and the limit asked of Mosaic hold on every one."""
    return min(tpus_of(spec), key=lambda t: TPU_VMEM[t].usable)


def fp8_mxu(spec: ir.Spec) -> bool:
    """Whether the spec's TPU multiplies FP8 on its MXU (`FP8_MXU`): every
    declared generation must (widening FP8 to bf16 is right on all of them,
    an FP8 dot only on those with an FP8 MXU)."""
    return all(t in FP8_MXU for t in tpus_of(spec))


def int8_as_bf16(spec: ir.Spec) -> bool:
    """Whether the spec's TPU multiplies int8 as bf16 with f32 sums
    (`INT8_AS_BF16`): any declared generation that does makes the kernels
    split long int8 dots (exact on every generation)."""
    return any(t in INT8_AS_BF16 for t in tpus_of(spec))
