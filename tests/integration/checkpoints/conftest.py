"""Fixtures of the checkpoint tests: a nats-server whose ``max_payload`` is 1 MiB, the limit
that a conversation carried in one record used to exceed (issue 31)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nats_server import NatsServer


@pytest.fixture
def small_payload_nats(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "nats", extra_config=["max_payload: 1MB"])
    server.start()
    try:
        yield server
    finally:
        server.stop()
