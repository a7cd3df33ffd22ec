"""Shared test configuration: the Hypothesis profile (see ``tests/profiles.py``)."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.profiles import PROFILE

settings.load_profile(PROFILE)


@pytest.fixture(scope="session")
def natscli() -> str:
    """The pinned ``nats`` CLI (built into .tools/bin on first use; see tests/natscli.py)."""
    from tests.natscli import natscli_binary

    return natscli_binary()
