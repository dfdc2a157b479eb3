"""One plan type per op: everything a module template prints, computed once."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import assert_never

from gemmgen import ir
from gemmgen.backends.pallas.backward import TgmmCore, tgmm_core, vjp_supported
from gemmgen.backends.pallas.cores import MatmulCore, matmul_core, plain_core
from gemmgen.backends.pallas.dtypes import f32, held, held_kernel, jnp_name
from gemmgen.backends.pallas.text import (
    AMAX_FLOOR,
    Arg,
    Constant,
    formula,
    matmul_args,
    matmul_constants,
    quantize_text,
    spec_lines,
)
from gemmgen.backends.pallas.tpu import (
    INT_DOT_K,
    MAX_BUFFERS,
    TPU_DEVICE_KINDS,
    TPU_VMEM,
    MiB,
    fp8_mxu,
    int8_as_bf16,
    tpu_of,
    tpus_of,
)
from gemmgen.backends.pallas.vmem import TileRow, quantize_tk, tile_rows, vmem_limit
from gemmgen.ir import Activation, BiasMode, DType, Op, ScaleMode
from gemmgen.ir.targets import JAX_BELOW, JAX_MIN, JAX_RANGE, JAX_VERSION
from gemmgen.render import source_ref

GROUPED_NOTES = """\
The rows of lhs are split into groups by group_sizes, in order. This shard
owns the g = rhs.shape[0] groups [group_offset, group_offset + g); the rows
of other groups, and the rows past sum(group_sizes), are zero, or keep
existing_out when it is given (existing_out is aliased into the output: its
buffer becomes the result). Any integers are valid sizes: a negative size
counts as 0 and no group runs past row m (the running sum saturates at m,
nothing overflows int32)."""

MASKED_NOTES = """\
The masked layout (decode-time MoE): lhs holds m rows (the capacity) for
each of the g groups, and group i's first masked_m[i] rows are valid; out
row r of group i is computed when r < masked_m[i] and is zero otherwise.
Any integers are valid counts: a count is clipped to [0, m]. The kernel
runs on lhs as g * m rows, with one grid step per (group, m tile) pair that
holds valid rows: tiles past a group's count cost nothing."""

VJP_NOTES = """\
{name}_vjp is the same function, differentiable: its backward pass runs
generated kernels too (the grouped matmul with the other B layout for d lhs,
tgmm for d rhs)."""

TGMM_NOTES = """\
The rows of lhs and rhs are split into groups by group_sizes, in order; the
result has one [k, n] block per local group (megablox tgmm: the weight
gradient of a grouped matmul). This shard computes the g groups
[group_offset, group_offset + g): g is existing_out.shape[0] when it is
given, else every group from group_offset on, len(group_sizes) -
group_offset (an output shape: group_offset must then be concrete, not
traced by jax.jit). An empty group gives zeros, plus existing_out, which is
added to every block. Any integers are valid sizes: a negative size counts
as 0 and no group runs past row m (the running sum saturates at m, nothing
overflows int32); a local group that group_sizes does not have is empty."""

@dataclass(frozen=True, slots=True, kw_only=True)
class ModuleInfo:
    """What every module prints: where it comes from, its docstring and
    arguments, its tile LUT and VMEM budget."""

    kernel: ir.Kernel
    path: PurePosixPath  # relative to generated/<stem>/
    spec_path: str
    where: str  # "specs/moe.gemm"
    title: str  # "grouped matmul"
    summary: str  # one line: what the function computes
    notes: str  # paragraphs of the module docstring after the summary ("": none)
    spec_lines: tuple[str, ...]  # the spec restated for the module docstring
    args: tuple[Arg, ...]
    returns: str
    out_dtype: str  # jnp name
    # f16 arrays the function widens to f32 before the kernel (`dtypes.held`):
    # (name, optional), and the dtype the kernel writes (float32 for f16 out).
    widen: tuple[tuple[str, bool], ...]
    body_out_dtype: str
    tiles: tuple[TileRow, ...]  # the LUT rules, then the default (cond "")
    buffers: int  # per pipelined block: 1 or 2
    vmem_bytes: int  # the largest over the LUT
    vmem_mib: str  # vmem_bytes in MiB, "1.25"
    vmem_limit_bytes: int | None  # passed to Mosaic when over the scoped default
    tpu: str
    lut_groups: bool
    lut_tpu: bool
    tpus: tuple[str, ...]  # the generations it runs on (the first: off a TPU)
    static_n: int | None
    static_k: int | None
    jax_version: str
    jax_range: str = JAX_RANGE
    jax_min: tuple[int, ...] = JAX_MIN
    jax_below: tuple[int, ...] = JAX_BELOW
    device_kinds: tuple[tuple[str, str], ...] = TPU_DEVICE_KINDS  # for tpu_generation()

    @property
    def rules(self) -> tuple[TileRow, ...]:
        return self.tiles[:-1]

    @property
    def default_tile(self) -> TileRow:
        return self.tiles[-1]

    def tile_for_call(self, m: str, groups: str) -> str:  # with g when a rule tests groups
        return f"tile_for({m}, n, k, {groups})" if self.lut_groups else f"tile_for({m}, n, k)"

    @property
    def buffer_arg(self) -> str:
        """Appended to the BlockSpec of a pipelined input: its buffer count."""
        return ", pipeline_mode=pl.Buffered(1)" if self.buffers == 1 else ""

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)

    @property
    def required_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if not a.optional)

    @property
    def checked_args(self) -> tuple[Arg, ...]:
        """The arguments `_validate` checks with `_expect` after lhs and rhs."""
        return tuple(a for a in self.args[2:]
                     if a.name not in ("group_sizes", "group_offset", "masked_m"))


@dataclass(frozen=True, slots=True, kw_only=True)
class MatmulPlan:
    """A dense or grouped matmul module (with `<name>_vjp` when `backward`)."""

    module: ModuleInfo
    grouped: bool
    masked: bool
    core: MatmulCore
    backward: MatmulCore | None  # the plain core of the backward pass
    tgmm: TgmmCore | None  # d rhs of the backward pass
    constants: tuple[Constant, ...]

    @property
    def vjp(self) -> bool:
        return self.backward is not None

    @property
    def masked_call(self) -> tuple[str, ...]:
        """The masked layout: what `_launch` passes for each of the core's
        parameters: lhs and its per-row scales as g * m rows, masked_m as
        group_sizes."""
        rows = "g * m"
        values = {"lhs": f"lhs.reshape({rows}, lhs.shape[2])", "group_sizes": "masked_m"}
        if self.core.lhs_scale in (ScaleMode.TOKEN, ScaleMode.TOKEN_GROUP):
            values["lhs_scale"] = f"lhs_scale.reshape(({rows},) + lhs_scale.shape[2:])"
        return tuple(values.get(name, name) for name in self.core.fn_params)

    @property
    def cores(self) -> tuple[MatmulCore, ...]:
        """The matmul implementations of the module: the spec's, then the
        plain one of the backward pass unless the spec's is plain itself."""
        if self.backward is None or self.backward is self.core:
            return (self.core,)
        return (self.core, self.backward)

    @property
    def unpacks(self) -> frozenset[str]:
        """The 4-bit types the kernel unpacks ("int4", "uint4", "fp4")."""
        return frozenset(d.value for d in (self.core.lhs_packed, self.core.rhs_packed) if d)

    @property
    def silu(self) -> bool:
        return self.core.activation in (Activation.SILU, Activation.SILU_MUL)

    @property
    def relu(self) -> bool:
        return self.core.activation is Activation.RELU

    @property
    def gelu(self) -> bool:
        return self.core.activation is Activation.GELU

    @property
    def rhs_ndim(self) -> int:
        return 3 if self.grouped else 2

    @property
    def k_from_rhs(self) -> str:
        """k from the rhs array in `_validate`."""
        c = self.core
        index = self.rhs_ndim - 1 if c.rhs_nk else self.rhs_ndim - 2
        return f"{'2 * ' if c.rhs_packed_k else ''}rhs.shape[{index}]"

    @property
    def n_from_rhs(self) -> str:
        c = self.core
        index = self.rhs_ndim - 2 if c.rhs_nk else self.rhs_ndim - 1
        return f"{'2 * ' if c.rhs_permute else ''}rhs.shape[{index}]"

    @property
    def vjp_nondiff(self) -> int:
        """The position of `interpret` among _differentiable's arguments."""
        return len(self.vjp_args)

    @property
    def vjp_args(self) -> tuple[str, ...]:
        """_differentiable's array arguments (then `interpret`)."""
        bias = ("bias",) if self.core.bias is not BiasMode.NONE else ()
        return ("lhs", "rhs", "group_sizes", *bias, "group_offset", "existing_out")

    @property
    def vjp_residuals(self) -> tuple[str, ...]:
        return self.vjp_args[:-1]

    @property
    def vjp_grads(self) -> str:
        """What _differentiable_bwd returns, one entry per argument."""
        bias = ("d_bias",) if self.core.bias is not BiasMode.NONE else ()
        return ", ".join(("d_lhs", "d_rhs", "None", *bias, "None", "d_existing"))

    @property
    def vjp_n_out(self) -> str:
        """Columns of the output, from rhs, in `_launch_vjp`."""
        n = "rhs.shape[1]" if self.core.rhs_nk else "rhs.shape[2]"
        return f"{n} // 2" if self.core.paired else n

    @property
    def bias_n(self) -> bool:
        return self.core.bias is BiasMode.N

    @property
    def bias_group(self) -> bool:
        return self.core.bias is BiasMode.GROUP


@dataclass(frozen=True, slots=True, kw_only=True)
class TgmmPlan:
    """A grouped transposed matmul module (megablox tgmm)."""

    module: ModuleInfo
    tgmm: TgmmCore


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantizePlan:
    """A per-token-group quantization module (FP8, or packed fp4: MXFP4, NVFP4)."""

    module: ModuleInfo
    group: int  # G: elements per scale
    quant_tk: int  # K block of the grid, a multiple of G (of 256 for fp4)
    fp8_max: float  # the largest finite value of the out type (fp4: 6)
    e8m0: bool  # scales as e8m0 exponent bytes
    rule: str  # the scale: "f32", "e8m0_up", "e8m0_floor" (OCP MX) or "ue4m3" (NVFP4)
    fp4: bool  # packed e2m1 values, two per byte
    emax: int  # emax_elem of the out type (OCP MX)
    scale_dtype: str  # jnp name of the returned scales
    scale_out: str  # jnp name of the kernel's scale blocks: f32 scales, or int32 bytes
    out_name: str  # the out dtype's spelling
    doc_title: str  # the function's docstring head
    min_exponent: int  # e8m0_up: the scales lie in 2**-min_exponent .. 2**max_exponent
    max_exponent: int
    global_scale: bool  # NVFP4's global scale GS (`global=f32`): an input

    @property
    def groups(self) -> int:
        """Groups of a K block."""
        return self.quant_tk // self.group

    @property
    def group_rows(self) -> bool:
        """The per-group vectors as [tm, groups] (NVFP4's long scale rule ran
        faster so on a TPU v5e) rather than [groups, tm] (fewer transposes)."""
        return self.rule == "ue4m3"

    @property
    def max_name(self) -> str:
        """The module constant holding fp8_max."""
        return "FP4_MAX" if self.fp4 else "FP8_MAX"

    @property
    def tk_lanes(self) -> int:
        """TK is a multiple of this: 128 lanes of q, of packed bytes for fp4."""
        return 256 if self.fp4 else 128


PallasPlan = MatmulPlan | TgmmPlan | QuantizePlan


def module_info(kernel: ir.Kernel, spec: ir.Spec, *, title: str, summary: str, notes: str,
                args: tuple[Arg, ...], returns: str) -> ModuleInfo:
    kernel = kernel.for_backend(ir.Backend.PALLAS_TPU)
    tpu = tpu_of(spec)
    tiles = tile_rows(kernel)
    need = max(t.vmem_bytes for t in tiles)
    buffers = min(kernel.stages, MAX_BUFFERS)
    return ModuleInfo(
        kernel=kernel,
        path=PurePosixPath("pallas") / f"{kernel.name}.py",
        spec_path=spec.path,
        where=source_ref(kernel.loc),
        title=title,
        summary=summary,
        notes=notes,
        spec_lines=spec_lines(kernel, tiles, tpu, buffers, need),
        args=args,
        returns=returns,
        out_dtype=jnp_name(kernel.out),
        widen=tuple((a.name, a.optional) for a in args if a.dtype == jnp_name(DType.F16)),
        body_out_dtype=jnp_name(held(kernel.out)),
        tiles=tiles,
        buffers=buffers,
        vmem_bytes=need,
        vmem_mib=f"{need / MiB:.2f}",
        vmem_limit_bytes=vmem_limit(need, TPU_VMEM[tpu]),
        tpu=tpu,
        lut_groups=any(r.on_groups for r in kernel.tile_rules),
        lut_tpu=any(r.on_tpu for r in kernel.tile_rules),
        tpus=tpus_of(spec),
        static_n=kernel.static_n,
        static_k=kernel.static_k,
        jax_version=JAX_VERSION,
    )


def plan(kernel: ir.Kernel, spec: ir.Spec) -> PallasPlan:
    """Everything the templates print, computed once (no I/O), for the
    kernel as this backend sees it (its own tile LUT, if the spec gives it
    one: `ir.Kernel.for_backend`)."""
    kernel = kernel.for_backend(ir.Backend.PALLAS_TPU)
    match kernel.op:
        case Op.DENSE | Op.GROUPED:
            return matmul_plan(kernel, spec)
        case Op.TGMM:
            return tgmm_plan(kernel, spec)
        case Op.QUANTIZE:
            return quantize_plan(kernel, spec)
        case _:
            assert_never(kernel.op)


def matmul_plan(kernel: ir.Kernel, spec: ir.Spec) -> MatmulPlan:
    core = matmul_core(held_kernel(kernel), fp8_mxu=fp8_mxu(spec),
                       int_dot_k=INT_DOT_K if int8_as_bf16(spec) else 0)
    grouped = kernel.op is Op.GROUPED
    out = jnp_name(kernel.out)
    out_n = "n/2" if core.paired else "n"
    backward = tgmm = None
    if vjp_supported(kernel):
        backward = core if core.plain else plain_core(core)
        tgmm = tgmm_core(held(kernel.lhs.dtype), held(kernel.lhs.dtype), None)
    notes = ""
    if kernel.masked:
        notes = MASKED_NOTES
    elif grouped:
        notes = GROUPED_NOTES
        if backward is not None:
            notes += "\n\n" + VJP_NOTES.format(name=kernel.name)
    if kernel.masked:
        returns = (f"[g, m, {out_n}] {out}: the first masked_m[i] rows of each group i as "
                   "above; the rows past them are zero.")
    elif grouped:
        returns = (f"[m, {out_n}] {out}: the rows of each owned group i as above; all "
                   "other rows are zero, or existing_out's.")
    else:
        returns = f"[m, {out_n}] {out}."
    return MatmulPlan(
        module=module_info(kernel, spec, title="grouped matmul" if grouped else "dense matmul",
                           summary=formula(kernel, core), notes=notes,
                           args=matmul_args(kernel, core), returns=returns),
        grouped=grouped,
        masked=kernel.masked,
        core=core,
        backward=backward,
        tgmm=tgmm,
        constants=matmul_constants(core),
    )


def tgmm_plan(kernel: ir.Kernel, spec: ir.Spec) -> TgmmPlan:
    out = jnp_name(kernel.out)
    args = (
        Arg("lhs", "[m, k]", "(m, k)", jnp_name(kernel.lhs.dtype),
            "the activations (rows sorted by group)."),
        Arg("rhs", "[m, n]", "(m, n)", jnp_name(kernel.rhs_operand.dtype),
            "the output gradient, rows aligned with lhs."),
        Arg("group_sizes", "[num_groups]", "(num_groups,)", "int32",
            "rows per group, in order. Any integer array-like (a list or tuple "
            "too): a negative size counts as 0, no group runs past row m."),
        Arg("group_offset", "[]", "()", "int32",
            "the first group this shard computes (default 0, an int is fine); "
            "without existing_out it must be concrete (not traced), as g = "
            "num_groups - group_offset; a local group that group_sizes does not "
            "have is empty.", optional=True),
        Arg("existing_out", "[g, k, n]", "(g, k, n)", out,
            "added to the result (megablox tgmm); its leading dim is the number "
            "g of local groups (default: g = num_groups - group_offset).",
            optional=True),
    )
    alpha = f32(kernel.epilogue.alpha)
    a = f"{alpha!r} * " if alpha is not None else ""
    return TgmmPlan(
        module=module_info(
            kernel, spec, title="grouped transposed matmul (tgmm)",
            summary=f"out[i - group_offset] = {a}lhs[rows of group i]ᵀ @ rhs[rows of "
                    "group i] (+ existing_out)",
            notes=TGMM_NOTES,
            args=args,
            returns=f"[g, k, n] {out}; an empty group gives zeros (or existing_out)."),
        tgmm=tgmm_core(held(kernel.lhs.dtype), held(kernel.rhs_operand.dtype), alpha),
    )


def quantize_plan(kernel: ir.Kernel, spec: ir.Spec) -> QuantizePlan:
    group = kernel.out_scale.block_k
    rule = ir.quantize_rule(kernel.out, kernel.out_scale)
    assert rule is not None, "the validator refuses the kernel"
    fp4 = kernel.out is DType.FP4
    out_max = kernel.out.max_finite
    words = quantize_text(kernel, rule)
    args = (Arg("lhs", "[m, k]", "(m, k)", jnp_name(kernel.lhs.dtype),
                "the activations to quantize" + (" (k even)." if fp4 else ".")),)
    glob = kernel.out_scale.global_scale
    if glob:
        args += (Arg("global_scale", "[]", "()", "float32",
                     "NVFP4's global scale GS (a decode multiplier, the GEMM's "
                     "lhs_global_scale): the block scales are those of amax / GS, q the e2m1 "
                     "rounding of x / (scale * GS); a GS that is not a positive finite number "
                     "makes every scale NaN."),)
    return QuantizePlan(
        module=module_info(kernel, spec, title=words.title, summary=words.summary,
                           notes=words.notes, args=args, returns=words.returns),
        group=group,
        quant_tk=quantize_tk(kernel),
        fp8_max=out_max,
        e8m0=kernel.out_scale.dtype is DType.E8M0,
        rule=rule,
        fp4=fp4,
        emax=kernel.out.emax,
        scale_dtype=words.scale_dtype,
        scale_out="int32" if rule in ("e8m0_floor", "ue4m3") else "float32",
        out_name=kernel.out.value,
        doc_title=words.title[0].upper() + words.title[1:],
        # e8m0_up: the powers of two of the floored amax and of f32's largest.
        min_exponent=-math.ceil(math.log2(AMAX_FLOOR / out_max)),
        max_exponent=math.ceil(math.log2(DType.F32.max_finite / out_max)),
        global_scale=glob,
    )

