"""Shared test configuration."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci")


@pytest.fixture(scope="session")
def natscli() -> str:
    """The pinned ``nats`` CLI (built into .tools/bin on first use; see tests/natscli.py)."""
    from tests.natscli import natscli_binary

    return natscli_binary()
