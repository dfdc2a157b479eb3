"""CUDA per-token-group activation quantization (op quantize): the plan.

    q[m, k] = sat_fp8(x / s),  s[m, ceil(k/G)] = max(amax(|x_group|), 1e-10) / fp8_max

with e8m0 scales rounded up to a power of two, or (round=floor) OCP MX's
2^(floor(log2(amax)) - emax_elem); packed fp4 (e2m1) values with e8m0
scales (MXFP4) or ue4m3 scales amax / 6 (NVFP4). gemmgen.reference is the
definition; docs/cuda-gemv-quantize.md the design:

  (1) a group of G consecutive elements of a row is one work item; `lanes`
      lanes of a warp share it (G / 8 = 16 for bf16 and G = 128, so a warp
      takes two groups), each lane holding `chunks` slices of `vec` elements
      in registers (16-byte ld.global.nc loads);
  (2) amax over the lanes of the group with butterfly shuffles (the full
      warp: gg::warp_reduce_max);
  (3) the scale: the correctly rounded f32 division (__fdiv_rn), the
      e8m0 byte rounded up exactly (gg::e8m0_round_up_ratio) or down
      (OCP MX: amax's exponent field less emax_elem), or amax / 6 rounded
      to ue4m3 (NVFP4); one lane stores it. A group holding an infinity or
      a NaN gets a NaN scale (e8m0 byte 255, ue4m3 byte 0x7F);
  (4) every lane multiplies its elements by 1 / s (exact for e8m0, the
      correctly rounded reciprocal for f32), casts them to FP8 with
      saturation and stores them (8 bytes per lane for bf16); NaN scales
      give NaN q. fp4: each value's e2m1 code is found by comparisons with
      the rounding boundaries (times s for ue4m3: exact, no quotient is
      rounded) and two codes go in a byte (4 bytes per lane for bf16); a
      NaN scale gives +0, a zero ue4m3 scale zeros with x's sign.

The last group of a row may be partial (k not a multiple of G). When k is
not a multiple of `vec` the rows are not 16-byte aligned and a second entry
point reads one element per lane (two for fp4: k is even); the launch plan
picks it by k.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from gemmgen import ir
from gemmgen.backends.cuda.args import CTYPE, Arg, Binding, Check, Derived, Role, spec_checks
from gemmgen.backends.cuda.expr import Lit, all_of, cdiv, min_, var
from gemmgen.backends.cuda.launch import (
    LIMITS, WARP, Grid, LaunchPlan, Step, Variant, array, i32, where,
)
from gemmgen.backends.cuda.layout import Param, comment, cpp_args, cpp_signature
from gemmgen.diagnostics import Diagnostic
from gemmgen.ir import DType, Op, ScaleMode

DEFAULT_THREADS = 256
LOAD_BYTES = 16
# Slices a lane keeps in registers between the amax pass and the cast pass;
# longer groups are read twice (the second time from L1/L2).
MAX_CACHED_VALUES = 32
AMAX_FLOOR = 1e-10  # gemmgen.reference.AMAX_FLOOR
INPUT_DTYPES = (DType.BF16, DType.F16, DType.F32)


@dataclass(frozen=True, slots=True)
class QuantEntry:
    """One entry point: how the lanes of a warp cover a group."""

    name: str
    vec: int  # elements per lane and slice (one 16-byte load, or scalar loads)
    wide: bool  # the slice is one 16-byte load
    lanes: int  # lanes per group (a power of two <= 32)
    groups_per_warp: int
    chunks: int  # slices of `vec` per lane and group
    cached: bool  # the slices stay in registers for the cast pass
    items_per_block: int  # groups per block
    description: str  # the entry point's comment in the .cu
    signature: str  # its head, laid out
    call: str  # its body: the call of quantize<vec, lanes, chunks, cached>

    @property
    def label(self) -> str:
        return f"{LOAD_BYTES}-byte loads" if self.wide else "unaligned k"


@dataclass(frozen=True, slots=True)
class QuantPlan:
    kernel: ir.Kernel
    spec_lines: tuple[str, ...]
    where: str
    lhs: DType
    out: DType
    scale_dtype: DType
    group: int  # G
    fp8_max: float  # the largest finite value of the out type (fp4: 6)
    amax_floor: float
    threads: int
    warps: int
    e8m0: bool  # e8m0 scales (rule e8m0_up or e8m0_floor)
    rule: str  # the scale: "f32", "e8m0_up", "e8m0_floor" (OCP MX) or "ue4m3" (NVFP4)
    fp4: bool  # packed e2m1 values, two per byte
    global_scale: bool  # NVFP4's global scale G (`global=f32`): an input, s of amax / G
    emax: int  # emax_elem of the out type (OCP MX)
    entries: tuple[QuantEntry, ...]  # the 16-byte path (when G allows it), then unaligned k
    # The .cu's text.
    in_ctype: str
    out_ctype: str
    scale_ctype: str
    out_name: str
    scale_formula: str  # s[r, g] in the header comment
    nan_scale: str  # what a group holding inf or NaN stores
    entries_comment: str
    title: str  # what the kernel does, in the header comment

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def max_const(self) -> str:
        """The name of the out type's largest value in the .cu."""
        return "kFp4Max" if self.fp4 else "kFp8Max"

    @property
    def q_arg(self) -> str:
        """What store_q multiplies or compares with: 1 / s, or s (ue4m3, and
        the global scale G)."""
        if self.rule == "ue4m3":
            return "unit, glob" if self.global_scale else "unit"
        return "inv"

    @property
    def out_offset(self) -> str:
        """The element offset of a lane's slice in `out` (fp4: its byte)."""
        return "(row * k + g0 + off) / 2" if self.fp4 else "row * k + g0 + off"

    @property
    def min_e8m0_code(self) -> int:
        """The e8m0 byte of the floored amax (1e-10f): the smallest scale."""
        return _e8m0_code(struct.unpack("f", struct.pack("f", self.amax_floor))[0], self.fp8_max)

    @property
    def max_e8m0_code(self) -> int:
        """The e8m0 byte of the largest finite amax, f32's largest value."""
        return _e8m0_code(DType.F32.max_finite, self.fp8_max)


def _e8m0_code(amax: float, fp8_max: float) -> int:
    """The byte of the smallest 2^e with amax <= fp8_max * 2^e (exact
    comparisons in float64: fp8_max * 2^e is exact)."""
    e = math.ceil(math.log2(amax / fp8_max))
    while amax > fp8_max * 2.0**e:
        e += 1
    while amax <= fp8_max * 2.0**(e - 1):
        e -= 1
    return e + 127


def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    assert kernel.op is Op.QUANTIZE
    out: list[Diagnostic] = []
    sc = kernel.out_scale
    if kernel.lhs.dtype not in INPUT_DTYPES:
        out.append(Diagnostic(kernel.lhs.loc, f"kernel '{kernel.name}': cuda cannot emit "
                              f"quantize of lhs '{kernel.lhs.dtype.value}' yet: it reads bf16, "
                              "f16 or f32 activations"))
    if sc.mode is not ScaleMode.TOKEN_GROUP or not sc.block_k:
        out.append(Diagnostic(sc.loc, f"kernel '{kernel.name}': cuda cannot emit "
                              "quantize without 'out_scale per_token_group k=G' yet"))
    if sc.layout is not ir.ScaleLayout.ROWS:
        out.append(Diagnostic(sc.loc, f"kernel '{kernel.name}': cuda quantize writes "
                              "row-major scales (layout=rows)"))
    if ir.quantize_rule(kernel.out, kernel.out_scale) is None:
        out.append(Diagnostic(sc.loc, f"kernel '{kernel.name}': cuda quantize writes f32 or e8m0 "
                              "scales for FP8, e8m0 or ue4m3 (k=16) scales for packed fp4"))
    return out


def _pow2_at_least(x: int) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


def _params(global_scale: bool) -> tuple[Param, ...]:
    """The entry points' parameters: the launch contract's arrays (global
    scale G after lhs when there is one), then the dims."""
    glob = (Param("const float* __restrict__", "global_scale"),) if global_scale else ()
    return (Param("const in_t* __restrict__", "lhs"), *glob, Param("out_t* __restrict__", "out"),
            Param("scale_t* __restrict__", "out_scale"), Param("int", "m"), Param("int", "k"))


def _entry(name: str, vec: int, group: int, warps: int, threads: int, *,
           wide: bool, global_scale: bool) -> QuantEntry:
    lanes = min(WARP, _pow2_at_least(-(-group // vec)))
    chunks = -(-group // (lanes * vec))
    per_warp = WARP // lanes
    cached = chunks * vec <= MAX_CACHED_VALUES
    plural = "s" if chunks > 1 else ""
    if wide:
        unit, head = f"slice{plural} of {LOAD_BYTES} bytes", f"k a multiple of {vec}"
    elif vec == 2:  # packed fp4: a lane's elements are pairs, k is even
        unit, head = f"pair{plural} of elements", "Any even k"
    else:
        unit, head = f"element{plural}", "Any k"
    tail = "" if cached else ", read twice"
    template_args = f"{vec}, {lanes}, {chunks}, {'true' if cached else 'false'}"
    params = _params(global_scale)
    return QuantEntry(
        name=name, vec=vec, wide=wide, lanes=lanes, groups_per_warp=per_warp, chunks=chunks,
        cached=cached, items_per_block=warps * per_warp,
        description=f"{head}: {lanes} lanes per group, up to {chunks} {unit} per lane{tail}.",
        signature=cpp_signature(f'extern "C" __global__ void __launch_bounds__({threads})', name,
                                params, "the launch contract's arrays, then the dims"),
        call=cpp_args(f"quantize<{template_args}>(", params, ");", 2),
    )


def plan(kernel: ir.Kernel, spec: ir.Spec) -> QuantPlan:
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    group = kernel.out_scale.block_k
    threads = kernel.threads or DEFAULT_THREADS
    warps = threads // WARP
    vec = LOAD_BYTES * 8 // kernel.lhs.dtype.bits
    fp4 = kernel.out is DType.FP4
    rule = ir.quantize_rule(kernel.out, kernel.out_scale)
    assert rule is not None, "diagnose refuses the kernel"
    glob = kernel.out_scale.global_scale
    entries = []
    if group % vec == 0:
        entries.append(_entry(kernel.name, vec, group, warps, threads, wide=True,
                              global_scale=glob))
    # The other entry reads single elements, in pairs for packed fp4 (k is even).
    entries.append(_entry(f"{kernel.name}_unaligned_k", 2 if fp4 else 1, group, warps, threads,
                          wide=False, global_scale=glob))
    e8m0 = kernel.out_scale.dtype is DType.E8M0
    fp8_max = kernel.out.max_finite
    emax = kernel.out.emax
    amax = "amax(|x[r, gG : (g+1)G]|)"
    floor = f"max({amax}, {AMAX_FLOOR}) / {int(fp8_max)}"
    formula = {"f32": floor, "e8m0_up": f"2^ceil(log2({floor}))",
               "e8m0_floor": f"2^max(floor(log2({amax})) - {emax}, -127)",
               "ue4m3": f"rne_ue4m3({amax} / {'(6 G)' if glob else '6'}), saturated at 448"}[rule]
    what = [f"{e.name} (k a multiple of {e.vec}: 16-byte loads)" if e.wide
            else f"{e.name} (any {'even ' if fp4 else ''}k)" for e in entries]
    title = {("f32", False): "per-token-group FP8 activation quantization",
             ("e8m0_up", False): "per-token-group FP8 activation quantization",
             ("e8m0_floor", False): f"MX{kernel.out.value.upper()} activation quantization "
                                    "(OCP MX v1.0)",
             ("e8m0_up", True): "per-token-group fp4 (e2m1) activation quantization",
             ("e8m0_floor", True): "MXFP4 activation quantization (OCP MX v1.0)",
             ("ue4m3", True): "NVFP4 activation quantization (one ue4m3 scale per 16)"}[rule, fp4]
    p = QuantPlan(
        kernel=kernel, spec_lines=spec_lines(kernel), where=where(kernel.loc),
        lhs=kernel.lhs.dtype, out=kernel.out, scale_dtype=kernel.out_scale.dtype, group=group,
        fp8_max=fp8_max, amax_floor=AMAX_FLOOR, threads=threads, warps=warps, e8m0=e8m0,
        rule=rule, fp4=fp4, global_scale=glob, emax=emax, entries=tuple(entries),
        in_ctype=CTYPE[kernel.lhs.dtype], out_ctype=CTYPE[kernel.out],
        scale_ctype=CTYPE[kernel.out_scale.dtype], out_name=kernel.out.value,
        scale_formula=formula,
        nan_scale={"f32": "f32 NaN", "ue4m3": "byte 0x7F"}.get(rule, "byte 255"),
        entries_comment=comment("Entry points: " + ", ".join(what) + "."),
        title=title,
    )
    # The kernel computes 1 / s = 2^(127 - code) as one normal f32.
    assert rule != "e8m0_up" or 1 <= p.min_e8m0_code <= p.max_e8m0_code <= 253
    return p


def spec_lines(kernel: ir.Kernel) -> tuple[str, ...]:
    sc = kernel.out_scale
    fp4 = kernel.out is DType.FP4
    rounding = ""
    if sc.dtype is DType.E8M0:
        rounding = (" round=floor (OCP MX)" if sc.rounding is ir.ScaleRounding.FLOOR
                    else " (rounded up to a power of two)")
    out = (f"{kernel.out.value} packed [m, k / 2] (two e2m1 values per byte, max 6)" if fp4
           else f"{kernel.out.value} [m, k] (max finite {kernel.out.max_finite:g})")
    glob = " global=f32 (global_scale G [], an input)" if sc.global_scale else ""
    lines = [f"op        {kernel.op.value}",
             f"lhs       {kernel.lhs.dtype.value} [m, k]",
             f"out       {out}",
             f"out_scale {sc.mode.value} k={sc.block_k} {sc.dtype.value} "
             f"[m, ceil(k / {sc.block_k})]" + rounding + glob]
    if kernel.static_k:
        lines.append(f"dims      k={kernel.static_k}")
    return tuple(lines)


def _args(p: QuantPlan) -> tuple[Arg, ...]:
    # bytes per lane store: a byte per FP8 value, half a byte per fp4 value
    store = p.entries[0].vec // (2 if p.fp4 else 1)
    m, k = var("m"), var("k")
    scale_doc = {"e8m0_up": " (e8m0 exponent bytes)", "e8m0_floor": " (e8m0 exponent bytes)",
                 "ue4m3": " (ue4m3 bytes)"}.get(p.rule, "")
    glob = (Arg(name="global_scale", role=Role.IN, dtype=DType.F32, shape=(),
                doc="NVFP4's global scale G: the block scales are of amax / G", align=4),
            ) if p.global_scale else ()
    return (
        Arg(name="lhs", role=Role.IN, dtype=p.lhs, shape=(m, k), doc="the activations",
            align=LOAD_BYTES),
        *glob,
        Arg(name="out", role=Role.OUT, dtype=p.out, shape=(m, "gg_div(k, 2)") if p.fp4 else (m, k),
            doc="the e2m1 values, two per byte (the even column in the low nibble)" if p.fp4
            else "the FP8 values", align=store),
        Arg(name="out_scale", role=Role.OUT, dtype=p.scale_dtype, shape=(m, var("groups")),
            doc=f"one scale per group of {p.group} columns" + scale_doc,
            align=p.scale_dtype.bits // 8),
    )


def _checks(kernel: ir.Kernel) -> tuple[Check, ...]:
    m, k = var("m"), var("k")
    checks = [Check(all_of(m.ge(0), k.gt(0)), "m must be >= 0 and k positive")]
    if kernel.out is DType.FP4:
        checks.append(Check((k % 2).eq(0), "k must be even: out is fp4, packed two per byte"))
    checks += spec_checks(kernel)
    checks.append(Check(all_of(m.lt(2147483647), k.lt(2147483647)), "dims must fit in int32"))
    # The grid (the groups' blocks over grid x and y) is checked with every
    # other launch limit by the launchers themselves.
    return tuple(checks)


def summary(kernel: ir.Kernel) -> str:
    sc = kernel.out_scale
    dims = f" dims k={kernel.static_k}" if kernel.static_k else ""
    packed = " packed" if kernel.out is DType.FP4 else ""
    rounding = " round=floor" if sc.rounding is ir.ScaleRounding.FLOOR else ""
    rounding += " global=f32" if sc.global_scale else ""
    return (f"{kernel.name}: quantize lhs {kernel.lhs.dtype.value} [m, k] -> "
            f"{kernel.out.value}{packed}, out_scale {sc.mode.value} k={sc.block_k} "
            f"{sc.dtype.value}{rounding}{dims} [cuda]")


def launch_plan(kernel: ir.Kernel, spec: ir.Spec) -> LaunchPlan:
    kernel = kernel.for_backend(ir.Backend.CUDA)  # its own tile LUT, if any
    p = plan(kernel, spec)
    target = spec.target(ir.Backend.CUDA)
    step_args = tuple(array(q.name) if q.type.endswith("__restrict__") else i32(var(q.name))
                      for q in _params(p.global_scale))
    variants = []
    for i, e in enumerate(p.entries):
        last = i == len(p.entries) - 1
        # The blocks fold over grid x and y (block = x + y * gridDim.x), so
        # more than 2^31 - 1 of them still launch (docs/cuda.md, "Launch
        # limits"); blocks past the last group idle, as lanes past it do.
        blocks = cdiv(var("m") * var("groups"), e.items_per_block)
        grid = Grid(min_(blocks, LIMITS.grid_x), cdiv(blocks, LIMITS.grid_x), Lit(1))
        comment = (f"{e.items_per_block} groups per block, {e.lanes} lanes per group"
                   + (f", {LOAD_BYTES}-byte loads" if e.wide else ", one element per load"))
        variants.append(Variant(
            index=i, when=None if last else (var("k") % e.vec).eq(0), where=p.where,
            label=e.label, steps=(Step(entry=e.name, grid=grid, block=p.threads, smem=0,
                                       args=step_args, comment=comment),)))
    return LaunchPlan(
        kernel=kernel, template="cuda/quantize.cu.j2", detail=p, spec_path=spec.path,
        where=p.where, summary=summary(kernel), spec_lines=p.spec_lines,
        archs=target.cuda_archs if target else (), args=_args(p),
        bindings=(Binding(dim="m", arg="lhs", axis=0), Binding(dim="k", arg="lhs", axis=1)),
        derived=(Derived(name="groups", value=cdiv(var("k"), p.group)),),
        checks=_checks(kernel), variants=tuple(variants),
        entries=tuple(e.name for e in p.entries), empty=var("m").eq(0),
        lut_dims=(var("m"), Lit(0), var("k")),
    )
