"""existing_out aliased into the grouped matmul's output (input_output_aliases).

Rows the kernel does not compute must come back exactly as existing_out held
them (docs/semantics.md): other shards' groups, rows past sum(group_sizes),
zero-sized groups, and rows of m tiles the kernel visits for a neighbouring
group. existing_out is poisoned with NaN there so any stray write shows.
Without existing_out nothing is aliased and those rows are zero.

TPU interpret mode (pltpu.InterpretParams) returns an aliased output padded
to whole blocks (JAX 0.10.2), so the generated code aliases there only when
the edge blocks are whole; `interpret=True` (the generic interpreter) and
the TPU lowering alias for every shape, so both run the aliased path with
partial edge blocks here.
"""

from __future__ import annotations

import functools

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from gemmgen import reference as ref

from pallas_helpers import INTERPRET, build, kernel_block, lower_for_tpu, random_inputs, spec_text

GROUPED = ("op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, n, k]", "out f32",
           "tile m=64 n=128 k=128")


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    text = spec_text(
        kernel_block("gmm", *GROUPED),
        kernel_block("gmm_silu_mul", "op grouped", "lhs bf16 [m, k]", "rhs bf16 [g, k, n]",
                     "out bf16", "bias f32 [g, 1, n]", "epilogue silu_mul alpha=0.5",
                     "tile m=64 n=128 k=128"),
    )
    return build(text, tmp_path_factory.mktemp("pallas_aliasing"))


def _pallas_call_aliases(fn, inputs, interpret) -> list[tuple]:
    """The input_output_aliases of every pallas_call `fn` traces to."""
    args = {name: jnp.asarray(v) for name, v in inputs.items()}
    closed = jax.make_jaxpr(functools.partial(fn, interpret=interpret))(**args)
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "pallas_call":
                found.append(tuple(eqn.params["input_output_aliases"]))
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(closed.jaxpr)
    return found


def _poisoned(kernel, *, m, n, k, sizes, offset, g_local, seed=0):
    inputs = random_inputs(kernel, m=m, n=n, k=k, group_sizes=np.array(sizes, np.int32),
                           g_local=g_local, group_offset=offset, with_existing_out=True,
                           seed=seed)
    inputs["existing_out"] = np.full_like(inputs["existing_out"], np.nan)
    return inputs


def _owned(sizes, offset, g_local, m):
    starts = np.concatenate([[0], np.cumsum(sizes)])
    rows = np.zeros(m, bool)
    rows[starts[offset]:starts[min(offset + g_local, len(sizes))]] = True
    return rows


def _call(fn, inputs, interpret):
    out = fn(**{name: jnp.asarray(v) for name, v in inputs.items()}, interpret=interpret)
    return np.asarray(out)


def _check(gen, name, inputs, out, *, k, sizes, offset, g_local):
    kernel = gen.kernel(name)
    m = inputs["lhs"].shape[0]
    owned = _owned(sizes, offset, g_local, m)
    want = ref.reference(kernel, **inputs)
    result = ref.compare(out, want, kernel, k=k, inputs=inputs)
    assert result.passed, result.detail
    # Bit for bit: the NaN poison outside the computed rows is untouched.
    poison = inputs["existing_out"][~owned]
    assert np.array_equal(out[~owned].view(np.uint8), poison.view(np.uint8))
    assert not np.isnan(out[owned]).any()


# m = 256 rows in tiles of 64, n = 256 in tiles of 128: whole edge blocks.
# Groups [1, 4) of 6: rows 40..217; group 2 is empty; group 1 starts and
# group 3 ends mid-tile, so the kernel stores part of tiles 0 and 3.
WHOLE = {"m": 256, "n": 256, "k": 256, "sizes": [40, 100, 0, 77, 9, 30], "offset": 1,
         "g_local": 3}


def test_aliased_in_tpu_interpret_mode_keeps_rows_it_does_not_compute(gen):
    case = dict(WHOLE)
    m, n, k = case.pop("m"), case.pop("n"), case.pop("k")
    inputs = _poisoned(gen.kernel("gmm"), m=m, n=n, k=k, **case)
    launch = gen.modules["gmm"]._launch
    aliases = _pallas_call_aliases(launch, inputs, INTERPRET)
    assert len(aliases) == 1 and len(aliases[0]) == 1  # existing_out -> out
    out = _call(gen.fn("gmm"), inputs, INTERPRET)
    _check(gen, "gmm", inputs, out, k=k, **case)


@pytest.mark.parametrize("m,n,k,sizes,offset,g_local", [
    (300, 200, 320, [40, 0, 77, 50, 1, 90], 2, 3),  # partial m, n and k blocks
    (300, 200, 320, [0, 0, 0, 0], 0, 4),  # every local group empty
    (70, 200, 128, [30, 40], 1, 1),  # the last group only, ending at m
    pytest.param(300, 200, 320, [300], 0, 1, marks=pytest.mark.slow),  # one group, all rows
])
def test_aliased_with_partial_edge_blocks(gen, m, n, k, sizes, offset, g_local):
    """interpret=True: the aliased path with partial edge blocks. With
    InterpretParams the same call falls back to the select (and agrees)."""
    kernel = gen.kernel("gmm")
    inputs = _poisoned(kernel, m=m, n=n, k=k, sizes=sizes, offset=offset, g_local=g_local)
    launch = gen.modules["gmm"]._launch
    assert [len(a) for a in _pallas_call_aliases(launch, inputs, True)] == [1]
    assert [len(a) for a in _pallas_call_aliases(launch, inputs, INTERPRET)] == [0]
    out = _call(gen.fn("gmm"), inputs, True)
    _check(gen, "gmm", inputs, out, k=k, sizes=sizes, offset=offset, g_local=g_local)
    fallback = _call(gen.fn("gmm"), inputs, INTERPRET)
    np.testing.assert_array_equal(fallback.view(np.uint8), out.view(np.uint8))


def test_silu_mul_with_bias_aliased(gen):
    name = "gmm_silu_mul"
    case = {"sizes": [64, 0, 100, 20], "offset": 1, "g_local": 2}
    inputs = _poisoned(gen.kernel(name), m=256, n=512, k=128, **case, seed=3)
    assert [len(a) for a in _pallas_call_aliases(gen.modules[name]._launch, inputs,
                                                  INTERPRET)] == [1]
    out = _call(gen.fn(name), inputs, INTERPRET)
    _check(gen, name, inputs, out, k=128, **case)


def test_not_aliased_without_existing_out(gen):
    case = dict(WHOLE)
    m, n, k = case.pop("m"), case.pop("n"), case.pop("k")
    inputs = _poisoned(gen.kernel("gmm"), m=m, n=n, k=k, **case)
    del inputs["existing_out"]
    launch = gen.modules["gmm"]._launch
    for interpret in (INTERPRET, True):
        assert _pallas_call_aliases(functools.partial(launch, existing_out=None), inputs,
                                    interpret) == [()]
    out = _call(gen.fn("gmm"), inputs, INTERPRET)
    owned = _owned(case["sizes"], case["offset"], case["g_local"], m)
    assert np.array_equal(out[~owned], np.zeros_like(out[~owned]))
    want = ref.reference(gen.kernel("gmm"), **inputs)
    assert ref.compare(out, want, gen.kernel("gmm"), k=k, inputs=inputs).passed


def test_tpu_lowering_aliases_existing_out(gen):
    """The Mosaic lowering of a partial-edge-block shape: the custom call
    aliases its last operand (existing_out) to its output; without
    existing_out it aliases nothing."""
    kernel = gen.kernel("gmm")
    inputs = _poisoned(kernel, m=300, n=200, k=320, sizes=[40, 0, 77, 50, 1, 90], offset=2,
                       g_local=3)
    text = lower_for_tpu(gen.modules["gmm"]._launch, inputs).mlir_module()
    assert text.count("output_operand_aliases") == 1
    del inputs["existing_out"]
    text = lower_for_tpu(functools.partial(gen.modules["gmm"]._launch, existing_out=None),
                         inputs).mlir_module()
    assert "output_operand_aliases" not in text
