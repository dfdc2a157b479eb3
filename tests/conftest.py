"""Shared pytest setup: CPU-only JAX and a deterministic Hypothesis profile."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

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
