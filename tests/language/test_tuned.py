"""The `tuned` block and the conditions of issue 41 in the IR: tuned rules
first in their kernel's LUT for their backend (with an implicit tpu= when
the target lists several generations), blocks for another chip or another
JAX kept and reported with a `note:`, ir.Spec.tuned_for, and the conservative generation facts
of a several-generation target."""

from __future__ import annotations

import pytest

from gemmgen import backends, ir
from gemmgen.backends.pallas import tpu as tpu_facts
from gemmgen.cli import main
from gemmgen.parse import parse
from gemmgen.validate import validate

KERNEL = """\
kernel gmm {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, k, n]
  out bf16
  backends %s
  tile m=128 n=128 k=128
  tile_rule m<=64 -> m=64 n=128 k=128
}
"""

TUNED_V5E = """\
# Tiles measured by `gemmgen tune`, which rewrites this block.
tuned v5e {
  device "TPU v5 lite"
  jax "0.10.2"
  libtpu "0.0.42.1"
  date "2026-12-07"
  # m=16384 n=1536 k=2048 g=128: 0.812 ms
  tile_rule gmm m/g<=192 n==1536 -> m=128 n=512 k=256
  tile_rule gmm g>=64 -> m=256 n=256 k=256
}
"""


def spec(text: str) -> ir.Spec:
    return validate(parse(text, "specs/t.gemm"), diagnose=backends.diagnose)


def target(tpu: str = "v5e", cuda: bool = False) -> str:
    out = f"target pallas_tpu {{\n  tpu {tpu}\n}}\n"
    if cuda:
        out += "target cuda {\n  archs sm_80 sm_90a\n}\n"
    return out


def test_tuned_rules_come_first_in_the_lut():
    s = spec(target() + KERNEL % "pallas_tpu" + TUNED_V5E)
    k = s.kernel("gmm").for_backend(ir.Backend.PALLAS_TPU)
    assert [(str(r.tile), r.tuned) for r in k.tile_rules] == [
        ("128x512x256", "v5e"), ("256x256x256", "v5e"), ("64x128x128", "")]
    assert [str(c) for c in k.tile_rules[0].conds] == ["m/g <= 192", "n == 1536"]
    assert k.tile_rules[0].loc.line == 20 and k.tile_rules[0].loc.col == 3
    t = s.tuned_for("v5e")
    assert t is not None and t.applied and t.backend is ir.Backend.PALLAS_TPU
    assert t.get("libtpu") == "0.0.42.1" and t.get("cuda") is None
    assert t.lines == (14, 22)
    assert [r.tile.m for r in t.rules_for("gmm")] == [128, 256]
    assert str(k.tile_for(16384, 1536, 2048, 128)) == "128x512x256"  # m/g = 128
    assert k.tile_for(16384 * 4, 1024, 2048, 128).m == 256  # g >= 64
    assert k.tile_for(32, 1024, 2048, 8).m == 64  # the kernel's own rule


def test_several_generations_add_the_device_condition():
    s = spec(target("v5e v6e") + KERNEL % "pallas_tpu" + TUNED_V5E)
    k = s.kernel("gmm").for_backend(ir.Backend.PALLAS_TPU)
    assert [str(c) for c in k.tile_rules[0].conds] == ["m/g <= 192", "n == 1536", "tpu=v5e"]
    assert str(k.tile_for(16384, 1536, 2048, 128, "v5e")) == "128x512x256"
    assert str(k.tile_for(16384, 1536, 2048, 128, "v6e")) == "128x128x128"  # default tile
    assert str(k.tile_for(16384, 1536, 2048, 128)) == "128x512x256"  # off a TPU: v5e


def test_a_shared_lut_gets_a_pallas_lut_of_its_own():
    """cuda keeps the unqualified LUT; pallas_tpu's is the tuned rules, then it."""
    s = spec(target(cuda=True) + KERNEL % "pallas_tpu cuda" + TUNED_V5E)
    k = s.kernel("gmm")
    assert [r.tuned for r in k.for_backend(ir.Backend.PALLAS_TPU).tile_rules] == ["v5e", "v5e", ""]
    assert [r.tuned for r in k.for_backend(ir.Backend.CUDA).tile_rules] == [""]
    assert k.for_backend(ir.Backend.PALLAS_TPU).tile == k.for_backend(ir.Backend.CUDA).tile


def test_a_cuda_block_applies_to_an_arch_the_spec_declares():
    text = target(cuda=True) + KERNEL % "pallas_tpu cuda" + """\
tuned h100 {
  device "NVIDIA H100 80GB HBM3"
  cuda "12.8"
  driver "570.86"
  date "2026-12-07"
  tile_rule gmm g>=8 -> m=128 n=256 k=64
}
"""
    k = spec(text).kernel("gmm")
    assert [r.tuned for r in k.for_backend(ir.Backend.CUDA).tile_rules] == ["h100", ""]
    assert [r.tuned for r in k.for_backend(ir.Backend.PALLAS_TPU).tile_rules] == [""]


@pytest.mark.parametrize("block,why", [
    (TUNED_V5E.replace("v5e {", "v6e {"), "TPU v6e is not a generation the spec targets (tpu v5e)"),
    (TUNED_V5E.replace('"0.10.2"', '"0.9.1"'), "measured under JAX 0.9.1, outside"),
])
def test_a_block_not_applied_is_kept_and_noted(tmp_path, monkeypatch, capsys, block, why):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEMMGEN_CACHE", str(tmp_path / "cache"))
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "t.gemm").write_text(target() + KERNEL % "pallas_tpu" + block)
    s = spec(target() + KERNEL % "pallas_tpu" + block)
    assert not s.tuned[0].applied and why in s.tuned[0].why_not
    assert [r.tuned for r in s.kernel("gmm").tile_rules] == [""]
    for command in (["list", "specs/t.gemm"], ["build", "specs/t.gemm"], ["check", "specs/t.gemm"]):
        assert main(command) == 0
        err = capsys.readouterr().err
        assert f"specs/t.gemm:14:7: note: tuned {s.tuned[0].device}: kept, not applied: " in err
        assert why in err


def test_cond_positions_are_exact():
    ast = parse("kernel a {\n  tile_rule   m / g <= 256 g>=4 tpu=v6e -> m=1\n}\n", "x.gemm")
    atoms = ast.blocks[0].fields[0].alts[0].atoms
    assert [(a.kind, a.key, a.loc.col, a.width) for a in atoms[:3]] == [
        ("cond", "m/g", 15, 12), ("cond", "g", 28, 4), ("kv", "tpu", 33, 7)]


def test_several_generations_choose_conservatively():
    one = spec(target("v7x") + KERNEL % "pallas_tpu")
    both = spec(target("v7x v6e") + KERNEL % "pallas_tpu")
    assert both.target(ir.Backend.PALLAS_TPU).tpus == ("v7x", "v6e")
    assert tpu_facts.fp8_mxu(one) and not tpu_facts.fp8_mxu(both)  # v6e has no FP8 MXU
    assert tpu_facts.int8_as_bf16(both)  # v7x multiplies int8 as bf16: chunk on both
    assert tpu_facts.tpu_of(spec(target("v6e v7x") + KERNEL % "pallas_tpu")) == "v7x"  # least VMEM
