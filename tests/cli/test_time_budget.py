"""tests/time_budget.py: what breaks the suite's time budgets."""

from __future__ import annotations

from time_budget import _folder, over_budget


def test_a_test_past_its_budget_is_named():
    lines = over_budget({"tests/a/test_x.py::t1": 10.0, "tests/b/test_y.py::t2": 400.0},
                        wall=100.0, per_test=300.0, session=2700.0)
    assert len(lines) == 1 and "tests/b/test_y.py::t2 took 400 s" in lines[0]


def test_the_session_past_its_budget_fails():
    assert over_budget({"t": 1.0}, wall=3000.0, per_test=300.0, session=2700.0) == [
        "the session took 3000 s, past its 2700 s budget (GEMMGEN_SUITE_BUDGET_S)"]


def test_within_budgets_and_budgets_off():
    assert over_budget({"t": 299.0}, wall=2699.0, per_test=300.0, session=2700.0) == []
    assert over_budget({"t": 1e6}, wall=1e6, per_test=0.0, session=0.0) == []


def test_folders():
    assert _folder("tests/cuda/sm90/test_x.py::test_y[a/b]") == "tests/cuda/sm90"
    assert _folder("test_top.py::t") == "test_top.py"
