"""gemmgen.harness.nvcc.wgmma_register_hazards: the SASS check for
instructions that touch an in-flight wgmma's registers (docs/cuda-hopper.md,
"Register-sourced wgmma hazards").

Checked on hand-written SASS (a clean batch, and planted hazards: an A
register written before the wait, accumulators read or written before it,
a write on only one branch path, a wait that keeps the newest group in
flight, a wgmma on registers written after the last WARPGROUP.ARRIVE), and on
the real kernels: every Hopper kernel of specs/dense.gemm and specs/moe.gemm
compiled for sm_90a (slow; fp8_weight_gemm and moe_w4a16_grouped_gemm, the
two that computed wrong results on an H200, unmarked) must be hazard-free,
and the weight-only body as it was then (the next K tile's fragments built
while the wgmmas run) must show hazards. tests/launchers/test_cuda_nvrtc.py applies the
same check to NVRTC's builds (the CuPy launchers' path)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sm90_helpers import OVERLAPPED_WEIGHT_ONLY_LOOP

from gemmgen.harness import nvcc
from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR

REPO = Path(__file__).resolve().parents[3]

needs_tools = pytest.mark.skipif(nvcc.find_nvcc() is None or nvcc.find_cuda_tool("cuobjdump") is None,
                                 reason="nvcc and cuobjdump are not installed")


def sass(body: str, name: str = "k") -> str:
    """A cuobjdump-like listing of `body` (one instruction a line, `;`
    optional), addresses 16 apart, an encoding line after each."""
    out = ["", "Fatbin elf code:", "================", "arch = sm_90a", "", "\tcode for sm_90a",
           f"\t\tFunction : {name}", "\t.headerflags\t@\"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)\""]
    for i, ins in enumerate(line.strip() for line in body.strip().splitlines()):
        ins = ins.rstrip(";")
        out.append(f"        /*{16 * i:04x}*/                   {ins} ;   /* 0x000000000000000000 */")
        out.append("                                                                  /* 0x000fe20000000000 */")
    return "\n".join(out) + "\n"


# Two wgmmas of one group (64x64: 32 f32 accumulators R24..R55; A in R88.. and
# R92..), a wait, then the next K tile's fragment built into R88..: clean.
CLEAN = """
    LDS R88, [R2]
    LDS R89, [R2+0x4]
    WARPGROUP.ARRIVE
    HGMMA.64x64x16.F32.BF16 R24, R88, gdesc[UR4], R24
    HGMMA.64x64x16.F32.BF16 R24, R92, gdesc[UR8], R24, gsb0
    IADD3 R4, R4, 0x1, RZ
    ISETP.GE.AND P0, PT, R4, R5, PT
    WARPGROUP.DEPBAR.LE gsb0, 0x0
    LDS R88, [R2+0x40]
    FADD R24, R24, R60
    STG.E desc[UR6][R6.64], R24
    EXIT
"""


def test_a_clean_batch_has_no_hazards():
    assert nvcc.wgmma_register_hazards(sass(CLEAN)) == []


def _only(hazards, kind):
    assert len(hazards) == 1, [str(h) for h in hazards]
    assert hazards[0].kind == kind, str(hazards[0])
    return hazards[0]


def test_a_register_written_before_the_wait_is_a_hazard():
    text = sass(CLEAN.replace("    IADD3 R4, R4, 0x1, RZ", "    LDS R94, [R2+0x48]"))
    h = _only(nvcc.wgmma_register_hazards(text), "a-write")
    assert h.registers == (94,) and h.kernel == "k" and h.instruction.startswith("LDS R94")
    # Lines: the listing's own (header lines first), the LDS and the second wgmma.
    lines = text.splitlines()
    assert lines[h.line - 1].lstrip().startswith("/*0050*/") and "LDS R94" in lines[h.line - 1]
    assert "R92, gdesc" in lines[h.wgmma_line - 1]
    assert str(h).startswith("k:") and "a-write R94" in str(h)


@pytest.mark.parametrize(("planted", "kind", "registers"), [
    ("    FADD R30, R60, R61", "acc-write", (30,)),
    ("    FMUL R60, R55, R61", "acc-read", (55,)),
    ("    STS.64 [R2], R40", "acc-read", (40, 41)),
    ("    IMAD.WIDE R54, R4, 0x4, R6", "acc-write", (54, 55)),
    ("    LDS.128 R56, [R2]", None, ()),  # R56..R59: neither A nor accumulators
])
def test_accumulators_touched_before_the_wait_are_hazards(planted, kind, registers):
    hazards = nvcc.wgmma_register_hazards(sass(CLEAN.replace("    IADD3 R4, R4, 0x1, RZ", planted)))
    if kind is None:
        assert hazards == []
    else:
        h = _only(hazards, kind)
        assert h.registers == registers


def test_a_write_on_one_branch_path_is_a_hazard():
    # The write sits past an unconditional branch on the straight line, and is
    # reached only through the predicated branch before it.
    body = """
        WARPGROUP.ARRIVE
        HGMMA.64x64x16.F32.BF16 R24, R88, gdesc[UR4], R24, gsb0
        @P0 BRA 0x0050
        WARPGROUP.DEPBAR.LE gsb0, 0x0
        EXIT
        SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR6], R4
        LOP3.LUT R91, R10, 0x30, R12, 0xf8, !PT
        BRA 0x0030
    """
    h = _only(nvcc.wgmma_register_hazards(sass(body)), "a-write")
    assert h.registers == (91,) and h.instruction.startswith("LOP3.LUT R91")
    # The same code never reached (no branch to it): clean.
    assert nvcc.wgmma_register_hazards(sass(body.replace("@P0 BRA 0x0050", "NOP"))) == []


def test_a_wait_that_keeps_a_group_keeps_its_registers_in_flight():
    body = """
        WARPGROUP.ARRIVE
        HGMMA.64x64x16.F32.BF16 R24, R88, gdesc[UR4], R24, gsb0
        WARPGROUP.ARRIVE
        HGMMA.64x64x16.F32.BF16 R120, R92, gdesc[UR8], R120, gsb0
        WARPGROUP.DEPBAR.LE gsb0, 0x1
        LDS R88, [R2]
        LDS R92, [R2]
        WARPGROUP.DEPBAR.LE gsb0, 0x0
        LDS R93, [R2]
        EXIT
    """
    h = _only(nvcc.wgmma_register_hazards(sass(body)), "a-write")
    assert h.registers == (92,)  # the first group retired at 0x1: R88 is free, R92 is not


def test_a_wgmma_on_registers_written_after_the_fence_is_a_hazard():
    body = CLEAN.replace("    WARPGROUP.ARRIVE\n", "    WARPGROUP.ARRIVE\n    MOV R93, R7\n    FADD R25, R25, R8\n")
    hazards = nvcc.wgmma_register_hazards(sass(body))
    assert [(h.kind, h.registers) for h in hazards] == [("no-fence", (25,)), ("no-fence", (25, 93))]
    assert [h.wgmma_line for h in hazards] == [h.line for h in hazards]
    # Before the fence the same writes are fine.
    body = CLEAN.replace("    WARPGROUP.ARRIVE\n", "    MOV R93, R7\n    FADD R25, R25, R8\n    WARPGROUP.ARRIVE\n")
    assert nvcc.wgmma_register_hazards(sass(body)) == []


def test_every_function_is_checked_on_its_own():
    text = sass(CLEAN, "clean") + sass(CLEAN.replace("    IADD3 R4, R4, 0x1, RZ", "    MOV R89, R3"), "bad")
    h = _only(nvcc.wgmma_register_hazards(text), "a-write")
    assert h.kernel == "bad" and h.registers == (89,)


# ---------------------------------------------------------------------------
# The real kernels.

def _hopper_kernels(stem: str) -> list[str]:
    folder = REPO / "generated" / stem / "cuda"
    return sorted(p.stem for p in folder.glob("*.cu") if re.search(r"\w_sm90\(", p.read_text()))


HOPPER = [(stem, name) for stem in ("dense", "moe") for name in _hopper_kernels(stem)]
FAILED_ON_THE_H200 = {("dense", "fp8_weight_gemm"), ("moe", "moe_w4a16_grouped_gemm")}


def compiled_sass(stem: str, name: str, headers: Path | None = None) -> tuple[str, nvcc.CompileResult]:
    """generated/<stem>/cuda/<name>.cu for sm_90a against the live runtime
    headers (or the copies in `headers`), and its SASS."""
    source = (REPO / "generated" / stem / "cuda" / f"{name}.cu").read_text()
    if headers is not None:
        source = source.replace('#include "gg_', f'#include "{headers}/gg_')
    result = nvcc.compile_check(source, "sm_90a", name_for_errors=f"{name}.cu")
    return nvcc.sass_text(result.cubin), result


def test_the_hopper_kernels_are_found():
    assert FAILED_ON_THE_H200 <= set(HOPPER) and len(HOPPER) >= 15, HOPPER


@needs_tools
@pytest.mark.parametrize(("stem", "name"), [
    pytest.param(s, n, id=f"{s}/{n}", marks=() if (s, n) in FAILED_ON_THE_H200 else pytest.mark.slow)
    for s, n in HOPPER])
def test_hopper_kernels_have_no_wgmma_register_hazards(stem, name):
    text, result = compiled_sass(stem, name)
    entries = [k for k in result.kernels if "_sm90" in k]
    assert entries, sorted(result.kernels)
    gmma = [ln for ln in text.splitlines() if re.search(r"\b[HQI]GMMA\.", ln)]
    assert gmma, f"{name}: no wgmma in the SASS"
    hazards = nvcc.wgmma_register_hazards(text)
    assert hazards == [], "\n".join(map(str, hazards[:20]))
    for k in entries:
        u = result.kernels[k]
        assert u.spill_stores == u.spill_loads == u.stack_frame == 0, u


@needs_tools
@pytest.mark.slow
def test_the_overlapped_weight_only_loop_has_hazards(tmp_path):
    for p in RUNTIME_INCLUDE_DIR.iterdir():
        if p.is_file():
            (tmp_path / p.name).write_text(p.read_text())
    mixed = tmp_path / "gg_gemm_sm90_mixed.cuh"
    text = mixed.read_text()
    for old, new in OVERLAPPED_WEIGHT_ONLY_LOOP:
        assert text.count(old) == 1, f"the weight-only K loop changed: update the plant ({old!r})"
        text = text.replace(old, new)
    mixed.write_text(text)
    sass_text, _ = compiled_sass("dense", "fp8_weight_gemm", tmp_path)
    hazards = nvcc.wgmma_register_hazards(sass_text)
    assert hazards and {h.kind for h in hazards} == {"a-write"}, [str(h) for h in hazards[:5]]
    assert {h.kernel for h in hazards} == {"fp8_weight_gemm_sm90"}
