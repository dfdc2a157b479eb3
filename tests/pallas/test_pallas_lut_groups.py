"""Tile rules on the groups (`g`, `m/g`) and on the TPU generation
(`tpu=v6e`) in the generated Pallas modules (issue 41): `tile_for` picks
by rows per group and group count (len(group_sizes), all groups also under
group_offset; the masked layout's lhs.shape[0]), and by the device kind the
module runs on; the kernels stay exact against the reference."""

from __future__ import annotations

import types

import numpy as np
import pytest

from pallas_helpers import build, check, kernel_block, lower_for_tpu, random_inputs, spec_text

GROUPED = kernel_block(
    "lut_g", "op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, k, n]", "out f32",
    "tile m=128 n=128 k=128",
    "tile_rule m/g<=16 -> m=32 n=128 k=128",
    "tile_rule g>=6 -> m=64 n=128 k=128",
)
MASKED = kernel_block(
    "lut_masked", "op grouped", "lhs bf16 [g, m, k]", "rhs bf16 [g, k, n]", "out f32",
    "tile m=128 n=128 k=128",
    "tile_rule m/g<=32 g<=2 -> m=32 n=128 k=128",
)
GENERATIONS = kernel_block(
    "lut_tpu", "op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, k, n]", "out f32",
    "tile m=128 n=128 k=128",
    "tile_rule tpu=v6e m/g<=64 -> m=64 n=128 k=128",
)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lut_groups")
    return build(spec_text(GROUPED, MASKED, GENERATIONS, tpu="v5e v6e"), folder)


def test_tile_for_picks_by_rows_per_group_and_groups(generated):
    tile_for = generated.modules["lut_g"].tile_for
    kernel = generated.kernel("lut_g")
    for (m, g), want in {(64, 4): (32, 128, 128),    # 16 rows per group
                         (68, 4): (128, 128, 128),   # 17 per group, 4 groups: default
                         (200, 6): (64, 128, 128),   # 33 per group, 6 groups
                         (90, 6): (32, 128, 128),    # 15 per group: the first rule
                         (10, 0): (128, 128, 128)}.items():  # no groups: no m/g
        assert tile_for(m, 256, 256, g) == want, (m, g)
        t = kernel.tile_for(m, 256, 256, g)
        assert (t.m, t.n, t.k) == want, (m, g)  # the IR's LUT agrees with the module's


def test_masked_rows_per_group_is_the_capacity(generated):
    tile_for = generated.modules["lut_masked"].tile_for
    assert tile_for(32, 128, 128, 2) == (32, 128, 128)
    assert tile_for(32, 128, 128, 3) == (128, 128, 128)  # g > 2
    assert tile_for(40, 128, 128, 2) == (128, 128, 128)


@pytest.mark.parametrize("sizes,m", [((8, 0, 5, 3), 16),  # m/g = 4: the 32-row tile
                                     ((40, 0, 60, 20, 7, 33), 200)])  # 6 groups: 64 rows
def test_grouped_matches_reference_on_each_entry(generated, sizes, m):
    kernel = generated.kernel("lut_g")
    inputs = random_inputs(kernel, m=m, n=256, k=192, group_sizes=np.asarray(sizes, np.int32),
                           seed=len(sizes))
    check(kernel, generated.fn("lut_g"), inputs, k=192)


@pytest.mark.slow
def test_grouped_shard_sees_all_groups(generated):
    """group_offset shards the groups: g is still len(group_sizes)."""
    kernel = generated.kernel("lut_g")
    sizes = np.asarray([30, 10, 0, 50, 40, 20], np.int32)
    inputs = random_inputs(kernel, m=160, n=128, k=128, group_sizes=sizes, g_local=2,
                           group_offset=3, with_existing_out=True, seed=3)
    check(kernel, generated.fn("lut_g"), inputs, k=128)


def test_masked_matches_reference(generated):
    kernel = generated.kernel("lut_masked")
    inputs = random_inputs(kernel, m=32, n=128, k=160, masked_m=np.asarray([5, 32], np.int32),
                           seed=7)
    check(kernel, generated.fn("lut_masked"), inputs, k=160)


@pytest.mark.parametrize("kind,want", [("TPU v6 lite", (64, 128, 128)),
                                       ("TPU v6e", (64, 128, 128)),
                                       ("TPU v5 lite", (128, 128, 128)),
                                       ("TPU7x", (128, 128, 128)),  # not declared: the first
                                       ("cpu", (128, 128, 128))])
def test_generation_from_the_device_kind(generated, monkeypatch, kind, want):
    module = generated.modules["lut_tpu"]
    monkeypatch.setattr(module.jax, "devices",
                        lambda *a: [types.SimpleNamespace(device_kind=kind)])
    assert module.tile_for(256, 128, 128, 8) == want
    gen = {"TPU v6 lite": "v6e", "TPU v6e": "v6e"}.get(kind, "v5e")
    t = generated.kernel("lut_tpu").tile_for(256, 128, 128, 8, gen)
    assert (t.m, t.n, t.k) == want


def test_generation_rule_lowers_for_tpu(generated):
    """On a TPU the device kind decides; here (the CPU), the first declared."""
    kernel = generated.kernel("lut_tpu")
    inputs = random_inputs(kernel, m=128, n=128, k=128,
                           group_sizes=np.asarray([64, 64], np.int32), seed=1)
    assert generated.modules["lut_tpu"].tpu_generation() == "v5e"
    exported = lower_for_tpu(generated.fn("lut_tpu"), inputs)
    assert "tpu_custom_call" in exported.mlir_module()
