"""A real daemon subprocess per test (file backend on a temp data dir); real nats-servers on
demand (``start_nats``), each stopped by its pid when the test ends."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.daemon import Daemon
from tests.nats_server import NatsServer

BACKEND = os.environ.get("JOURNALD_TEST_BACKEND", "file")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path, BACKEND).start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def start_nats(tmp_path: Path) -> Iterator[Callable[..., NatsServer]]:
    """``start_nats(**NatsServer fields)``: a started server in this test's temp dir."""
    started: list[NatsServer] = []

    def start(**fields: object) -> NatsServer:
        server = NatsServer(tmp_path / f"nats-{len(started)}", **fields)  # type: ignore[arg-type]
        started.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
