"""The devices `gemmgen explain --device` bounds a kernel on: their dense
tensor-core (or MXU) rates and memory bandwidth, each with its source.

Rates are dense (no 2:4 sparsity), per chip. `tflops16` is the 16-bit
(bf16/f16) rate with f32 accumulation, `tflops8` the 8-bit one (FP8 where
the chip multiplies FP8, int8 otherwise; a chip without FP8 tensor cores
converts FP8 operands and multiplies them at the 16-bit rate: `fp8` False),
`tflops4` the fp4 x fp4 one where the vendor publishes it (else fp4 is
bounded at the 8-bit rate).
Where a figure is not confirmed by its vendor's published table it says so
in `note`, and `explain` prints that note beside the bound.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from gemmgen import ir


@dataclass(frozen=True, slots=True)
class Device:
    name: str  # the --device word
    label: str  # as printed: "H200", "TPU v5e"
    tflops16: float
    tflops8: float
    tbps: float
    source: str
    sm: int | None = None  # CUDA compute capability x 10
    sms: int | None = None  # streaming multiprocessors (the persistent grid)
    tpu: str | None = None  # TPU generation (ir.TPU_GENERATIONS)
    fp8: bool = True  # FP8 operands multiplied at the 8-bit rate
    int8: bool = True  # int8 operands multiplied at the 8-bit rate
    note: str = ""  # what is not confirmed
    tflops4: float | None = None  # fp4 x fp4 (the block-scaled MMAs), where published

    def rate(self, bits: int) -> float:
        """TFLOP/s of the tensor cores (MXU) multiplying `bits`-bit operands."""
        if bits <= 4 and self.tflops4 is not None:
            return self.tflops4
        return self.tflops8 if bits <= 8 else self.tflops16


DEVICES: dict[str, Device] = {d.name: d for d in (
    Device("a100", "A100", 312.0, 624.0, 2.039, sm=80, sms=108, fp8=False,
           source="NVIDIA A100 datasheet (SXM 80 GB: bf16 312, int8 624 TOP/s dense; "
                  "2,039 GB/s)"),
    Device("l40s", "L40S", 362.05, 733.0, 0.864, sm=89, sms=142,
           source="NVIDIA L40S datasheet (bf16 362.05, FP8 733 dense; 864 GB/s)"),
    Device("h100", "H100", 989.4, 1978.9, 3.35, sm=90, sms=132,
           source="NVIDIA H100 datasheet (SXM: bf16 989.4, FP8 1,978.9 dense; 3.35 TB/s)"),
    Device("h200", "H200", 790.0, 1580.0, 4.3, sm=90, sms=132,
           source="measured on an H200 (docs/benchmarks.md): 790 TFLOP/s dense bf16, 4.3 TB/s "
                  "copy bandwidth; the datasheet's 989 / 1,979 / 4.8 TB/s are peaks"),
    Device("b200", "B200", 2250.0, 4500.0, 8.0, sm=100, sms=148, tflops4=9000.0,
           source="NVIDIA HGX B200 specifications, per GPU (bf16 2.25, FP8 4.5, FP4 9 PFLOP/s "
                  "dense: half the table's 4.5 / 9 / 18 PFLOP/s with 2:4 sparsity; 8 TB/s)"),
    Device("rtx5090", "RTX 5090", 209.5, 419.0, 1.792, sm=120, sms=170,
           source="NVIDIA RTX Blackwell architecture whitepaper (GeForce RTX 5090: 170 SMs; "
                  "1,792 GB/s)",
           note="the f32-accumulate tensor rates are the whitepaper's, not measured here"),
    Device("rtxpro6000", "RTX PRO 6000 Blackwell", 500.0, 1000.0, 1.792, sm=120, sms=188,
           source="NVIDIA RTX PRO 6000 Blackwell Workstation Edition datasheet (24,064 CUDA "
                  "cores = 188 SMs of 128; 4,000 AI TOPS FP4 with sparsity; 1,792 GB/s)",
           note="the bf16 and FP8 rates are the datasheet's sparse FP4 figure halved for "
                "sparsity and once per doubling of operand width, unconfirmed"),
    Device("gb10", "GB10 (DGX Spark)", 125.0, 250.0, 0.273, sm=121, sms=48,
           source="NVIDIA DGX Spark specifications (6,144 CUDA cores; 273 GB/s; 1 PFLOP/s FP4 "
                  "with sparsity)",
           note="NVIDIA publishes only the sparse FP4 rate, the CUDA cores and the bandwidth: "
                "the bf16 and FP8 rates (1/8 and 1/4 of the dense FP4 rate) and the 48 SMs "
                "(6,144 cores / 128 per SM) are unconfirmed"),
    Device("v4", "TPU v4", 275.0, 275.0, 1.2, tpu=None, fp8=False,
           source="Google Cloud TPU v4 system architecture (275 TFLOP/s bf16 and int8; "
                  "1,200 GB/s)"),
    Device("v5e", "TPU v5e", 197.0, 394.0, 0.819, tpu="v5e", fp8=False,
           source="Google Cloud TPU v5e system architecture (197 TFLOP/s bf16, 394 TOP/s "
                  "int8; 819 GB/s)"),
    Device("v5p", "TPU v5p", 459.0, 918.0, 2.765, tpu="v5p", fp8=False,
           source="Google Cloud TPU v5p system architecture (459 TFLOP/s bf16, 918 TOP/s "
                  "int8; 2,765 GB/s)"),
    Device("v6e", "TPU v6e", 918.0, 1836.0, 1.64, tpu="v6e", fp8=False,
           source="Google Cloud TPU v6e (Trillium) system architecture (918 TFLOP/s bf16, "
                  "1,836 TOP/s int8; 1,640 GB/s)"),
    Device("v7x", "TPU v7x", 2307.0, 4614.0, 7.37, tpu="v7x", int8=False,
           source="Google's Ironwood (TPU v7x) announcement (4,614 TFLOP/s FP8; 7.37 TB/s)",
           note="the bf16 rate (half the FP8 rate) is unconfirmed; int8 at the bf16 rate, as "
                "Mosaic's matmul canonicalization for this generation widens integer operands "
                "to bf16"),
)}

# The device `explain` bounds on when --device is not given: the first of
# these whose arch the spec declares, else the spec's TPU generation.
# sm_103a (B300) has no device of its own: no B300 rate was checked against a
# datasheet, so B200's stand in for it (the same SM count, the same body).
DEFAULT_FOR_ARCH = (("sm_90a", "h200"), ("sm_90", "h200"), ("sm_100a", "b200"), ("sm_103a", "b200"),
                    ("sm_121a", "gb10"), ("sm_121", "gb10"), ("sm_120a", "rtx5090"),
                    ("sm_120", "rtx5090"), ("sm_89", "l40s"), ("sm_86", "a100"),
                    ("sm_80", "a100"))


class UnknownDevice(ValueError):
    pass


def lookup(name: str) -> Device:
    """The device named `name` (case-insensitive); UnknownDevice naming the
    known ones, with the closest as a suggestion."""
    device = DEVICES.get(name.lower())
    if device is not None:
        return device
    close = difflib.get_close_matches(name.lower(), list(DEVICES), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise UnknownDevice(f"unknown device '{name}'{hint} (known: {', '.join(DEVICES)})")


def default_device(spec: ir.Spec, kernel: ir.Kernel) -> Device:
    """The device a kernel is explained on without --device: for a CUDA
    kernel, one that runs the spec's preferred declared arch; for a
    Pallas-only kernel, the spec's TPU generation."""
    target = spec.target(ir.Backend.CUDA)
    if target is not None and ir.Backend.CUDA in kernel.backends:
        for arch, name in DEFAULT_FOR_ARCH:
            if arch in target.cuda_archs:
                return DEVICES[name]
    tpu = spec.target(ir.Backend.PALLAS_TPU)
    generation = tpu.tpu if tpu is not None else "v5e"
    return DEVICES.get(generation, DEVICES["v5e"])


def runs_arch(device: Device, archs: tuple[str, ...]) -> str | None:
    """The declared arch whose code `device` runs: its own arch-specific
    build (sm_90a on 9.0), else the newest declared plain arch of the same
    major version and no newer minor (a cubin runs on later minors of its
    major); None when none does (a TPU, or no compatible build)."""
    if device.sm is None:
        return None
    own = f"sm_{device.sm}a"
    if own in archs:
        return own
    plain = [a for a in archs if not a.endswith("a") and ir.arch_number(a) // 10 == device.sm // 10
             and ir.arch_number(a) <= device.sm]
    return max(plain, key=ir.arch_number) if plain else None
