"""Shared test configuration: deterministic hypothesis profiles."""
import os

from hypothesis import HealthCheck, settings

# CI: fixed seed (derandomize), bounded example counts, no deadline (shared noisy machines).
settings.register_profile(
    "ci", derandomize=True, max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
# Wide: for `pytest -m slow` explorations.
settings.register_profile("wide", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
