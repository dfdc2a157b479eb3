"""The cost of one call and its roofline bound on a device: FLOPs and the
bytes moved at least once (`cost`), the body a CUDA tile kernel runs on an
arch and the type its tensor cores multiply there (`tensor_path`), and the
time bound of that path at a device's rates (`roofline`; gemmgen.devices
holds the GPUs and TPUs and each rate's source)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from gemmgen import ir
from gemmgen.devices import DEVICES, Device, runs_arch

# H200 figures, measured (the datasheet's dense bf16 peak is 989 TFLOP/s):
# the default device of a spec that declares sm_90a (gemmgen.devices).
# mma.sync kernels do not reach wgmma peaks; the bound is what the hardware
# allows, not a prediction.
H200 = DEVICES["h200"]
H200_TFLOPS_16BIT = H200.tflops16
H200_TFLOPS_8BIT = H200.tflops8  # FP8 / int8 tensor cores: twice the rate
H200_TBPS = H200.tbps


def _bytes(dt: ir.DType, count: int) -> int:
    return count * dt.bits // 8


def cost(kernel: ir.Kernel, m: int, n: int, k: int, groups: int) -> tuple[int, int]:
    """(FLOPs, bytes moved at least once) for one call. The masked layout:
    m is each group's capacity, every row counted valid (the most work a
    call can do)."""
    if kernel.masked:  # the same as g * m contiguous rows
        return cost(dataclasses.replace(kernel, masked=False), groups * m, n, k, groups)
    if kernel.op is ir.Op.QUANTIZE:
        g = kernel.out_scale.block_k or k
        moved = _bytes(kernel.lhs.dtype, m * k) + _bytes(kernel.out, m * k) + \
            _bytes(kernel.out_scale.dtype, m * math.ceil(k / g))
        return 3 * m * k, moved
    flops = 2 * m * n * k
    b_count = k * n * (groups if kernel.op is ir.Op.GROUPED else 1)
    if kernel.op is ir.Op.TGMM:
        out_count = groups * k * n
        moved = _bytes(kernel.lhs.dtype, m * k) + _bytes(kernel.rhs_operand.dtype, m * n) + \
            _bytes(kernel.out, out_count)
        return flops, moved
    n_out = n // kernel.out_n_divisor
    moved = _bytes(kernel.lhs.dtype, m * k) + _bytes(kernel.rhs_operand.dtype, b_count) + \
        _bytes(kernel.out, m * n_out)
    for side, s in (("lhs", kernel.lhs_scale), ("rhs", kernel.rhs_scale)):
        if s.enabled:
            shape = ir.scale_shape(s, side=side, m=m, n=n, k=k,
                                   g=groups if kernel.grouped else None)
            moved += _bytes(s.dtype, math.prod(shape))
    return flops, moved


@dataclass(frozen=True, slots=True)
class TensorPath:
    """The body a CUDA tile kernel runs on one arch, and what its tensor
    cores multiply there."""

    arch: str
    wgmma: bool  # the Hopper body (else the mma.sync body)
    multiplies: ir.DType  # the tensor cores' input type on this path
    why: str = ""  # when `multiplies` is not the kernel's own MMA type
    block_scaled: bool = False  # the sm_120a / sm_121a body: the MMA applies the MX scales
    tcgen05: bool = False  # the sm_100a body: tcgen05.mma, the accumulators in TMEM

    @property
    def name(self) -> str:
        if self.block_scaled:
            return "block-scaled mma.sync (sm_12x body)"
        if self.tcgen05:
            return "tcgen05 (sm_100a body)"
        return "wgmma (Hopper body)" if self.wgmma else "mma.sync"

    @property
    def tflops(self) -> float:
        """At H200 rates."""
        return self.rate(H200)

    def rate(self, device: Device) -> float:
        """TFLOP/s of `device`'s tensor cores multiplying this path's type."""
        if self.multiplies.is_fp8 and not device.fp8:
            return device.tflops16  # converted to 16-bit first
        return device.rate(self.multiplies.bits)

    @property
    def below_peak(self) -> bool:
        """An mma.sync body on Hopper or datacenter Blackwell: the tensor
        cores' full rate needs wgmma there, tcgen05 on sm_100."""
        return (not self.wgmma and not self.tcgen05
                and ir.arch_number(self.arch) in (90, 100))


def tensor_path(kernel: ir.Kernel, arch: str) -> TensorPath | None:
    """The path `kernel` takes on `arch`; None when it is not a CUDA tile GEMM
    (GEMV, quantize and tgmm have one body on every arch).

    wgmma multiplies the plan's `compute` type (the operands as the tensor
    cores see them). The mma.sync body issues an MMA of that type too, but
    an FP8 mma.sync exists in hardware only on some archs
    (`archs.fp8_mma_sync`); elsewhere ptxas converts to f16 and the tensor
    cores multiply f16, at the f16 rate. int8 mma.sync is native everywhere.
    """
    from gemmgen.archs import fp8_mma_sync
    from gemmgen.backends.cuda import gemm as tile_gemm
    from gemmgen.backends.cuda import kinds as cuda_kinds

    if ir.Backend.CUDA not in kernel.backends or cuda_kinds.kind(kernel) is not tile_gemm:
        return None
    compute = tile_gemm.compute_dtype(kernel)
    if compute is None:
        return None
    if kernel.uses_wgmma(arch):
        return TensorPath(arch, True, compute)
    if kernel.uses_tcgen05(arch):
        return TensorPath(arch, False, compute, tcgen05=True)
    if kernel.uses_mx_mma(arch):
        return TensorPath(arch, False, compute, block_scaled=True)
    if compute.is_fp8 and not fp8_mma_sync(arch):
        return TensorPath(arch, False, ir.DType.F16,
                          f"{arch} has no FP8 mma.sync: ptxas converts {compute.value} to f16 "
                          "for HMMA")
    return TensorPath(arch, False, compute)


def _tpu_eight_bit(kernel: ir.Kernel, device: Device) -> bool:
    """Whether the Pallas kernel multiplies at the TPU's 8-bit rate: FP8 x
    FP8 (e4m3, e5m2) where the MXU multiplies FP8 (the kernel feeds it FP8
    there) unless a scale applies inside the K tile (MXFP8 multiplies its
    scaled values in bf16), int8 / int4 x int8 / int4 where the MXU
    multiplies int8. FP4 is unpacked to bf16 on every TPU."""
    from gemmgen.backends.pallas.kblocks import in_tile_scale

    dts = (kernel.lhs.dtype, kernel.rhs_operand.dtype)
    if all(d in (ir.DType.E4M3, ir.DType.E5M2) for d in dts):
        view = kernel.for_backend(ir.Backend.PALLAS_TPU)
        return device.fp8 and not any(in_tile_scale(view, s)
                                      for s in (view.lhs_scale, view.rhs_scale))
    return all(d in (ir.DType.INT8, ir.DType.INT4) for d in dts) and device.int8


def _bound(flops: int, moved: int, tflops: float, tbps: float = H200_TBPS) -> tuple[float, str]:
    t_compute = flops / (tflops * 1e12)
    t_memory = moved / (tbps * 1e12)
    return max(t_compute, t_memory), "compute" if t_compute >= t_memory else "memory"


def roofline(kernel: ir.Kernel, flops: int, moved: int, *,
             archs: tuple[str, ...] = (), device: Device = H200) -> list[str]:
    """The roofline lines on `device` (gemmgen.devices; default an H200).
    For a CUDA tile GEMM, the bound of the path that actually runs
    (`tensor_path`): on the device, the path of the declared arch it runs
    (`devices.runs_arch`), then the path of every declared arch at the
    device's rates. Only wgmma reaches the figures on Hopper; an mma.sync
    body there is bounded by them but does not reach them. Other kernels
    (and every kernel on a TPU): the rate of their operand width."""
    paths = [p for p in (tensor_path(kernel, a) for a in archs) if p is not None]
    if device.sm is None:
        paths = []  # a TPU runs the Pallas kernel: no CUDA path
    intensity = flops / moved if moved else math.inf
    name = device.label
    lines = [
        f"FLOPs:      {flops / 1e9:.3f} GFLOP",
        f"bytes:      {moved / 1e6:.3f} MB (each operand read once, output written once)",
        f"intensity:  {intensity:.1f} FLOP/byte",
    ]
    note = [f"  ({device.note})"] if device.note else []
    if not paths:
        eight_bit = kernel.rhs is not None and kernel.lhs.dtype.bits <= 8 and \
            kernel.rhs_operand.dtype.bits <= 8
        # FP8 and FP4 operands multiply at 8 bits only where the chip
        # multiplies FP8 (no TPU multiplies FP4: fp4 x fp4 is not int8).
        small_float = kernel.rhs is not None and any(
            d.is_float and d.bits <= 8 for d in (kernel.lhs.dtype, kernel.rhs_operand.dtype))
        eight_bit = eight_bit and (device.fp8 or not small_float)
        if device.tpu is not None:
            eight_bit = eight_bit and _tpu_eight_bit(kernel, device)
        peak = device.rate(8 if eight_bit else 16)
        unit = "MXU" if device.tpu is not None or device.sm is None else "tensor cores"
        t, bound = _bound(flops, moved, peak, device.tbps)
        lines.append(f"{name} bound: {t * 1e6:.2f} us ({bound}-bound; {peak:.0f} TFLOP/s "
                     f"{'8-bit' if eight_bit else '16-bit'} {unit}, {device.tbps} TB/s)")
        return lines + note
    runs = runs_arch(device, archs)
    p = next((p for p in paths if p.arch == runs), paths[0])
    t, bound = _bound(flops, moved, p.rate(device), device.tbps)
    after = ""
    cc = f"{device.sm // 10}.{device.sm % 10}"
    if runs is None:
        how = f"{p.name} (the {p.arch} path)"
        after = f"; no declared arch runs on an {name} (compute capability {cc})"
    elif p.wgmma:
        how = f"wgmma (the {p.arch} path)"
    elif p.tcgen05:
        how = f"tcgen05.mma (the {p.arch} path)"
    elif p.block_scaled:
        how = f"block-scaled mma.sync (the {p.arch} path, MXFP8 at the FP8 rate)"
    else:
        how = f"mma.sync (the {p.arch} path{', FP8 converted to f16' if p.why else ''})"
        if device.sm == 90:
            after = "; mma.sync does not reach this rate: Hopper's full tensor-core rate needs wgmma"
        elif device.sm == 100:
            after = ("; mma.sync does not reach this rate: sm_100's full tensor-core rate needs "
                     "tcgen05")
    bits = 16 if p.multiplies.is_fp8 and not device.fp8 else p.multiplies.bits
    lines.append(f"{name} bound: {t * 1e6:.2f} us ({bound}-bound; {p.rate(device):.0f} TFLOP/s "
                 f"{bits}-bit {how}, {device.tbps} TB/s){after}")
    lines.append(f"bound per declared arch, at {name} rates (the path that runs there and the "
                 "type its tensor cores multiply):")
    for p in paths:
        t, bound = _bound(flops, moved, p.rate(device), device.tbps)
        why = f" ({p.why})" if p.why else ""
        below = "; mma.sync does not reach the full tensor-core rate on Hopper (wgmma does)" \
            if p.below_peak else ""
        if p.multiplies.is_fp8 and not device.fp8:
            why += f" (the {name} has no FP8 tensor cores: at its 16-bit rate)"
        lines.append(f"  {p.arch}: {p.name} multiplies {p.multiplies.value}{why}: "
                     f"{p.rate(device):.0f} TFLOP/s -> {t * 1e6:.2f} us ({bound}-bound){below}")
    return lines + note
