"""tgmm in Pallas (ragged K, the weight gradient): per group lhsᵢᵀ · rhsᵢ ->
[g, k, n], zero for empty groups, existing_out added, group_offset sharding;
without existing_out, g = len(group_sizes) - group_offset from a concrete
offset."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gemmgen import reference as ref
from pallas_helpers import (INTERPRET, build, check, kernel_block, load_spec, lower_for_tpu,
                            random_inputs, run, spec_text)

KERNELS = {
    "tgmm_bf16": ("op tgmm", "lhs bf16 [m, k]", "rhs bf16 [m, n]", "out f32"),
    "tgmm_f32_alpha": ("op tgmm", "lhs f32 [m, k]", "rhs f32 [m, n]", "out bf16",
                       "epilogue alpha=0.5", "tile m=64 n=128 k=256"),
    "tgmm_f16": ("op tgmm", "lhs f16 [m, k]", "rhs bf16 [m, n]", "out f16", "stages 1"),
}
SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])
M, N, K = 300, 200, 320


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return build(SPEC, tmp_path_factory.mktemp("pallas_tgmm"))


@pytest.mark.parametrize("name", list(KERNELS))
def test_matches_reference(generated, name):
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=5, seed=2)
    out = check(kernel, generated.fn(name), inputs, k=M)
    assert out.shape == (5, K, N)
    lower_for_tpu(generated.fn(name), inputs)


@pytest.mark.parametrize("name", list(KERNELS))
def test_sharded_adds_existing_out(generated, name):
    kernel = generated.kernel(name)
    inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=6, group_offset=2, g_local=3,
                           with_existing_out=True, seed=5)
    check(kernel, generated.fn(name), inputs, k=M)
    lower_for_tpu(generated.fn(name), inputs)


def _trim(sizes: list[int], m: int) -> np.ndarray:
    out, left = [], m
    for s in sizes:
        out.append(min(s, left))
        left -= out[-1]
    return np.asarray(out, np.int32)


@given(sizes=st.lists(st.integers(0, 160), min_size=5, max_size=5))
@example(sizes=[0, 0, 0, 0, 0])
@example(sizes=[0, 0, 300, 0, 0])
@example(sizes=[1, 127, 1, 128, 1])
def test_group_sizes(generated, sizes):
    """Ragged groups at every alignment; an empty group's block is zero."""
    kernel = generated.kernel("tgmm_bf16")
    group_sizes = _trim(sizes, M)
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=group_sizes)
    out = check(kernel, generated.fn("tgmm_bf16"), inputs, k=M)
    assert (out[group_sizes == 0] == 0).all()


@pytest.mark.parametrize("offset", [
    2, np.int64(2), np.asarray(2, np.uint8), 4, -2, 0,
], ids=["int", "numpy_int64", "numpy_uint8_0d", "last_group", "negative", "zero"])
def test_group_offset_without_existing_out(generated, offset):
    """g = len(group_sizes) - group_offset local groups: from group_offset
    on, those before the first group (a negative offset) empty."""
    kernel = generated.kernel("tgmm_bf16")
    inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=5, group_offset=int(offset),
                           seed=12)
    out = _check_offset(kernel, generated.fn("tgmm_bf16"), inputs, offset)
    assert out.shape == (5 - int(offset), K, N)
    if int(offset) < 0:
        assert (out[:-int(offset)] == 0).all()


def _check_offset(kernel, fn, inputs: dict, offset):
    """Run with group_offset passed as is (an int, a NumPy or jax scalar)
    and no existing_out; compare with the reference at that offset."""
    args = {name: v for name, v in inputs.items() if name != "group_offset"}
    actual = run(fn, args, group_offset=offset)
    result = ref.compare(actual, ref.reference(kernel, **inputs), kernel, k=M, inputs=inputs)
    assert result.passed, f"{kernel.name}: {result.detail}"
    return actual


def test_group_offset_concrete_jax_array(generated):
    """A concrete (not traced) jax array as group_offset fixes g too; under
    jax.jit the offset is traced, and existing_out must fix g."""
    kernel = generated.kernel("tgmm_f16")
    fn = generated.fn("tgmm_f16")
    inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=4, group_offset=1, seed=13)
    assert _check_offset(kernel, fn, inputs, jnp.asarray(1, jnp.int32)).shape == (3, K, N)
    lhs, rhs, sizes = (jnp.asarray(inputs[x]) for x in ("lhs", "rhs", "group_sizes"))
    with pytest.raises(ValueError, match="group_offset is traced .* pass existing_out to fix g"):
        jax.jit(lambda o: fn(lhs, rhs, sizes, o, interpret=INTERPRET))(jnp.int32(1))
    # existing_out (NaN-free, fresh) fixes g = 3 under jax.jit.
    sharded = random_inputs(kernel, m=M, n=N, k=K, group_sizes=inputs["group_sizes"],
                            group_offset=1, g_local=3, with_existing_out=True, seed=14)
    got = np.asarray(jax.jit(lambda o, e: fn(lhs, rhs, sizes, o, e, interpret=INTERPRET))(
        jnp.int32(1), jnp.asarray(sharded["existing_out"])))
    sharded = {**sharded, "lhs": inputs["lhs"], "rhs": inputs["rhs"]}
    result = ref.compare(got, ref.reference(kernel, **sharded), kernel, k=M, inputs=sharded)
    assert result.passed, result.detail


@pytest.mark.parametrize("offset", [5, 6, 2**40], ids=["num_groups", "past_end", "huge"])
def test_group_offset_leaving_no_groups(generated, offset):
    """g = len(group_sizes) - group_offset <= 0: a clear error (existing_out
    would fix g: then every local group is empty)."""
    kernel = generated.kernel("tgmm_bf16")
    inputs = random_inputs(kernel, m=16, n=128, k=128, num_groups=5, seed=15)
    with pytest.raises(ValueError, match=f"group_offset = {offset} leaves no local groups: "
                       rf"g = len\(group_sizes\) - group_offset = 5 - {offset}"):
        run(generated.fn("tgmm_bf16"), inputs, group_offset=offset)


def test_group_offset_too_negative(generated):
    kernel = generated.kernel("tgmm_bf16")
    inputs = random_inputs(kernel, m=16, n=128, k=128, num_groups=5, seed=16)
    with pytest.raises(ValueError, match="more than MAX_GROUPS"):
        run(generated.fn("tgmm_bf16"), inputs, group_offset=-(2**40))


def test_existing_out_with_more_groups_than_group_sizes(generated):
    """existing_out fixes g = 4 with 3 sizes at offset -1: local groups 0
    and 3 do not exist in group_sizes, so they are existing_out's blocks."""
    kernel = generated.kernel("tgmm_bf16")
    inputs = random_inputs(kernel, m=M, n=N, k=K, group_sizes=np.array([100, 0, 150], np.int32),
                           group_offset=-1, g_local=4, with_existing_out=True, seed=17)
    check(kernel, generated.fn("tgmm_bf16"), inputs, k=M)


def test_tile_rules_on_rows_per_group(tmp_path):
    """`tile_rule pallas_tpu` on m/g picks tgmm's tile at trace time (many
    small experts: short m tiles); both arms match the reference, and the
    module's LUT says which tile each shape gets."""
    text = spec_text(kernel_block(
        "tgmm_lut", "op tgmm", "lhs bf16 [m, k]", "rhs bf16 [m, n]", "out f32",
        "tile pallas_tpu m=256 n=128 k=128", "tile_rule pallas_tpu m/g<=64 -> m=32 n=256 k=128"))
    generated = build(text, tmp_path)
    module = generated.modules["tgmm_lut"]
    assert module.tile_for(300, 200, 320, 5) == (32, 256, 128)  # 60 rows per group
    assert module.tile_for(300, 200, 320, 4) == (256, 128, 128)  # 75
    kernel = generated.kernel("tgmm_lut")
    for groups in (5, 4):
        inputs = random_inputs(kernel, m=M, n=N, k=K, num_groups=groups, seed=groups)
        check(kernel, generated.fn("tgmm_lut"), inputs, k=M)


@pytest.mark.parametrize("rule, said", [
    ("tile_rule m/g<=64 -> m=32 n=256 k=128", "does not take 'tile_rule'"),
    ("tile_rule cuda m/g<=64 -> m=32 n=128 k=32",
     "takes only 'tile_rule pallas_tpu', not 'tile_rule cuda'"),
])
def test_tile_rules_for_other_backends_are_refused(rule, said):
    from gemmgen.diagnostics import SpecError

    text = "target cuda {\n  archs sm_90a\n}\n\n" + spec_text(kernel_block(
        "tgmm_lut", "op tgmm", "lhs bf16 [m, k]", "rhs bf16 [m, n]", "out f32",
        "tile m=64 n=128 k=32", "tile cuda m=64 n=128 k=32", rule,
        "backends pallas_tpu cuda"))
    with pytest.raises(SpecError) as e:
        load_spec(text)
    assert said in str(e.value)
