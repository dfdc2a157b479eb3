"""The CUDA kernels of a JAX entry point's backward pass, derived from its
forward kernel (issue 28).

A kernel emitted for both backends whose Pallas module has `<name>_vjp` gets
its backward pass on CUDA too, when both operands are 16-bit of one type
(any bias, alpha, activation and output type): two or three more CUDA
kernels, derived here from the forward kernel's CUDA view, never written in
the spec:

  <name>_grad_lhs   op grouped: d lhs = d out @ rhs per group, the forward's
                    rhs read in the other layout (the weight transposed:
                    [g, n, k] is [g, K, N] of this product), out = lhs's
                    dtype; the forward's CUDA tile with n and k swapped
  <name>_grad_rhs   op tgmm: d rhs[i] = (d out rows of i)ᵀ @ (lhs rows of i)
                    for an [g, n, k] rhs, (lhs rows)ᵀ @ (d out rows) for
                    [g, k, n]; out = rhs's dtype; output blocks of the
                    forward's tile n x k, 32 rows per pipeline stage, the
                    forward's number of stages
  <name>_grad_pre   only with an activation: the forward kernel without
                    it, out f32: the pre-activation alpha * product + bias,
                    recomputed by the forward's own epilogue, from which
                    the entry point takes the activation's derivative

Where a tile so derived does not fit an arch of the spec (the swapped d lhs
tile holds more shared memory than the forward's when n > k), smaller tiles
are tried in order (FALLBACK_TILES, FALLBACK_BLOCKS); none fitting is a
diagnostic at the forward kernel.

All take the forward's group_sizes and group_offset. They are rendered
(.cu, .h and the FFI handler) beside the forward's files and built into its
FFI library by `gemmgen compile`. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from gemmgen import ir
from gemmgen.backends import pallas
from gemmgen.diagnostics import Diagnostic

__all__ = ["FALLBACK_BLOCKS", "FALLBACK_TILES", "GRAD_LHS", "GRAD_PRE", "GRAD_RHS", "SUFFIXES",
           "TGMM_ROWS", "derive", "diagnose", "names", "roles", "supported"]

GRAD_LHS = "_grad_lhs"
GRAD_RHS = "_grad_rhs"
GRAD_PRE = "_grad_pre"
# Every derived kernel's suffix, in the order of `derive`.
SUFFIXES = (GRAD_LHS, GRAD_RHS, GRAD_PRE)
# Rows of lhs / d out per pipeline stage of the derived tgmm (its `tile m`):
# two MMA steps of k = 16, so that a stage of a 128 x 128 output block takes
# 17 KB of shared memory (35 KB with 2 stages, 52 KB with 3): it fits every
# arch a spec may declare.
TGMM_ROWS = 32
# The tiles a derived kernel falls back to, in order, when the one taken
# from the forward's tile does not fit the spec's archs (its shared memory,
# swapped for d lhs, can exceed the forward's): the grouped GEMM's tile of
# specs/moe.gemm's moe_bf16_grouped_gemm, then half its rows; tgmm output
# blocks of 128 x 128, then 64 x 64, TGMM_ROWS rows a stage.
FALLBACK_TILES = (ir.Tile(128, 128, 32), ir.Tile(64, 128, 32), ir.Tile(64, 64, 32))
FALLBACK_BLOCKS = (ir.Tile(TGMM_ROWS, 128, 128), ir.Tile(TGMM_ROWS, 64, 64))
# The operand types the CUDA tgmm multiplies (docs/cuda-tgmm.md).
_SIXTEEN_BIT = (ir.DType.BF16, ir.DType.F16)


def supported(kernel: ir.Kernel) -> bool:
    """Whether the entry point's backward pass runs derived CUDA kernels:
    a `_vjp` kernel with 16-bit operands of one type (the CUDA tgmm's). Its
    bias, alpha, activation and output type are the backward pass's XLA
    part (templates/jax/entry.py.j2) and the pre-activation kernel's."""
    return (pallas.vjp_supported(kernel)
            and kernel.lhs.dtype in _SIXTEEN_BIT
            and kernel.rhs_operand.dtype == kernel.lhs.dtype)


def roles(kernel: ir.Kernel) -> tuple[str, ...]:
    """The derived kernels' roles, in the order of `derive`: grad_lhs,
    grad_rhs, and grad_pre for a kernel with an activation."""
    pre = kernel.epilogue.activation is not ir.Activation.NONE
    return tuple(s[1:] for s in SUFFIXES[:3 if pre else 2])


def names(kernel: ir.Kernel) -> tuple[str, ...]:
    """The derived kernels' names, in the order of `derive`."""
    return tuple(f"{kernel.name}_{role}" for role in roles(kernel))


def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    """A derived kernel's name taken by a kernel or dispatcher of the spec
    (both would write cuda/<name>.cu), or a derived kernel the CUDA backend
    cannot emit with any of its tiles; at the forward kernel, which the spec
    author can change. (The names are not reserved for every kernel, as
    `<name>_vjp` is: a Pallas-only `gmm` may well sit beside its own tgmm
    `gmm_grad_rhs`, as in docs/spec.md.)"""
    from gemmgen.backends import cuda

    both = {ir.Backend.PALLAS_TPU, ir.Backend.CUDA}
    if not (both <= set(kernel.backends) and supported(kernel)):
        return []
    taken = {k.name: k.loc for k in spec.kernels} | {d.name: d.loc for d in spec.dispatches}
    out = [Diagnostic(kernel.loc, f"kernel '{kernel.name}': its JAX entry point's backward "
                                  f"pass on CUDA is a kernel named '{name}', which the spec "
                                  f"names at {taken[name]} too; rename that one")
           for name in names(kernel) if name in taken]
    for candidates in _candidates(kernel):
        if not any(not cuda.diagnose_kernel(c, spec) for c in candidates):
            out.extend(Diagnostic(kernel.loc, f"kernel '{kernel.name}': its JAX entry point's "
                                              "backward pass needs a CUDA kernel derived from "
                                              f"it, and {d.message.removeprefix('kernel ')}")
                       for d in cuda.diagnose_kernel(candidates[0], spec))
    return out


def derive(kernel: ir.Kernel, spec: ir.Spec) -> tuple[ir.Kernel, ...]:
    """The d lhs (grouped), d rhs (tgmm) and, with an activation, the
    pre-activation (grouped, f32) CUDA kernels of `kernel` (`roles`' order):
    each the first of its candidates (_candidates) the CUDA backend can emit
    for the spec's archs."""
    from gemmgen.backends import cuda

    return tuple(next((c for c in candidates if not cuda.diagnose_kernel(c, spec)), candidates[0])
                 for candidates in _candidates(kernel))


def _candidates(kernel: ir.Kernel) -> tuple[tuple[ir.Kernel, ...], ...]:
    """The derived kernels of `kernel` (`roles`' order), each with the tiles
    to try in order: the forward's own (n and k swapped for d lhs, whose n
    is the forward's k; the weight tile n x k as tgmm's output block), then
    smaller ones for the archs whose shared memory the first does not fit
    (FALLBACK_TILES, FALLBACK_BLOCKS)."""
    assert supported(kernel), kernel.name
    view = kernel.for_backend(ir.Backend.CUDA)
    rhs = view.rhs_operand
    flipped = ir.Layout.KN if rhs.layout is ir.Layout.NK else ir.Layout.NK
    tile = view.tile
    lhs_name, rhs_name, *pre_name = names(kernel)
    # Generated files name the spec text a kernel comes from (render.source_ref:
    # its loc's path); a derived kernel's says which kernel it is derived from.
    loc = replace(kernel.loc, path=f"{kernel.loc.path}, the backward pass of {kernel.name}")
    plain = {"epilogue": ir.Epilogue(), "bias": ir.Bias(), "tile_rules": (), "loc": loc,
             "warp_tile": None, "threads": None, "backends": (ir.Backend.CUDA,),
             "backend_tiles": (), "view": None, "tile_at": None, "variant_of": None,
             "static_n": None, "static_k": None}
    # static dims swap with the roles: the forward's n is d lhs's k.
    grad_lhs = replace(
        view, name=lhs_name, **{**plain, "static_n": view.static_k, "static_k": view.static_n},
        lhs=ir.Operand(view.lhs.dtype), rhs=replace(rhs, layout=flipped),
        out=view.lhs.dtype, tile=ir.Tile(tile.m, tile.k, tile.n))
    # tgmm out [g, K, N] = lhsᵀ rhs over the rows: for an [g, n, k] weight the
    # tgmm's lhs is d out ([m, n]) and its rhs the forward's lhs ([m, k]).
    nk = rhs.layout is ir.Layout.NK
    grad_rhs = replace(
        view, name=rhs_name, op=ir.Op.TGMM, **plain,
        lhs=ir.Operand(view.lhs.dtype), rhs=ir.Operand(view.lhs.dtype),
        out=rhs.dtype, tile=ir.Tile(TGMM_ROWS, tile.k if nk else tile.n,
                                    tile.n if nk else tile.k),
        mma=ir.Mma.AUTO)
    lhs_tiles = [grad_lhs.tile, *(t for t in FALLBACK_TILES if t != grad_lhs.tile)]
    rhs_tiles = [grad_rhs.tile, *(t for t in FALLBACK_BLOCKS if t != grad_rhs.tile)]
    out = (tuple(replace(grad_lhs, tile=t) for t in lhs_tiles),
           tuple(replace(grad_rhs, tile=t) for t in rhs_tiles))
    if not pre_name:
        return out
    # The pre-activation: the forward kernel (its operands, layout, tile,
    # bias and alpha) with the activation removed and an f32 output, so the
    # value the activation's derivative is taken at is the one the forward's
    # epilogue computed, and a silu_mul kernel's full [m, n] (gate and up).
    grad_pre = replace(view, name=pre_name[0], **{
        **plain, "static_n": view.static_n, "static_k": view.static_k, "bias": view.bias,
        "epilogue": replace(view.epilogue, activation=ir.Activation.NONE)}, out=ir.DType.F32)
    pre_tiles = [tile, *(t for t in FALLBACK_TILES if t != tile)]
    return (*out, tuple(replace(grad_pre, tile=t) for t in pre_tiles))
