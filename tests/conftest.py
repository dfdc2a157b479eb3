"""Shared pytest setup: CPU-only JAX, a deterministic Hypothesis profile,
and the `project` fixture."""

import os
import shutil
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Deterministic: the same examples on every run and machine, so CI never
# flakes; `HYPOTHESIS_PROFILE=explore` draws fresh ones locally.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=6,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("explore", deadline=None, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The time per folder, the slowest tests, and the budgets (tests/time_budget.py).
pytest_plugins = ["time_budget"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the repository's specs in a fresh project folder (the cwd)."""
    shutil.copytree(Path(__file__).resolve().parent.parent / "specs", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    return tmp_path
