"""Shared test configuration: the Hypothesis profile (see ``tests/profiles.py``) and the
``jetstream`` mark (tests that need a real nats-server; ``make test-fast`` leaves them out)."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.profiles import PROFILE

settings.load_profile(PROFILE)

# fixtures that start a nats-server (tests/integration/conftest.py, tests/faults/conftest.py)
NATS_FIXTURES = {"start_nats", "cluster"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test under a ``jetstream/`` directory, or one using a nats-server fixture, is a
    ``jetstream`` test; a backend param or a test elsewhere that reaches the session server
    (tests/storage/backend_jetstream.py) carries the mark itself."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.path.parent.name == "jetstream" or fixtures & NATS_FIXTURES:
            item.add_marker(pytest.mark.jetstream)


@pytest.fixture(scope="session")
def natscli() -> str:
    """The pinned ``nats`` CLI (built into .tools/bin on first use; see tests/natscli.py)."""
    from tests.natscli import natscli_binary

    return natscli_binary()
