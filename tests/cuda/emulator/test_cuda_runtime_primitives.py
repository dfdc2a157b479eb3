"""Every gg:: primitive on the CPU emulator against NumPy (tests/cuda_runtime_cases.py),
under both deterministic warp schedules."""

import pytest

from cuda_runtime_cases import CUDA_SRC, FRAGMENTS, assert_covers_once, launch, layout_table, primitive_cases
from gemmgen.harness.cuda_emu import EmuModule

CASES = primitive_cases()


@pytest.fixture(scope="module")
def primitives() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "primitives.cu")


@pytest.mark.parametrize("schedule", ["run-ahead", "reverse"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_primitive_matches_numpy(primitives, case, schedule):
    case.check(launch(primitives, case, schedule=schedule))


@pytest.mark.parametrize("name", list(FRAGMENTS))
def test_fragment_layout_covers_matrix_once(name):
    formula, count, shape = FRAGMENTS[name]
    assert_covers_once(layout_table(name), shape, name)


def test_fragment_layouts_match_design_examples():
    # Spot values from the PTX ISA figures: lane 5 is g = 1, t = 1.
    assert FRAGMENTS["a_m16n8k16"][0](5, 0) == (1, 2)
    assert FRAGMENTS["a_m16n8k16"][0](5, 7) == (9, 11)
    assert FRAGMENTS["b_m16n8k16"][0](5, 3) == (11, 1)
    assert FRAGMENTS["c_m16n8"][0](5, 2) == (9, 2)
    assert FRAGMENTS["a_m16n8k32"][0](5, 15) == (9, 23)
    assert FRAGMENTS["b_m16n8k32"][0](5, 6) == (22, 1)


def test_mma_catches_a_wrong_register_order(primitives):
    # Swapping two A registers must change the result: the mma check is
    # sensitive to the layout, not only to the values.
    case = next(c for c in CASES if c.name == "mma_m16n8k16_bf16")
    a = case.args[0].copy()
    a[[0, 8]] = a[[8, 0]]
    args = (a, *case.args[1:])
    (d,) = primitives.launch(case.kernel, case.grid, case.block, 0, args, case.outputs)
    with pytest.raises(AssertionError, match="values off"):
        case.check([d])


def test_workers_do_not_change_results(primitives):
    case = next(c for c in CASES if c.name == "indexing_atomics")
    for workers in (1, 3):
        case.check(launch(primitives, case, workers=workers))
