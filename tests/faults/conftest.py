"""Fixtures the fault tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.nats_server import NatsCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """A real three-node nats-server cluster on loopback, one per test module (a module kills
    and restarts its nodes), stopped by its pids."""
    c = NatsCluster(tmp_path_factory.mktemp("cluster"))
    c.start()
    try:
        yield c
    finally:
        c.stop()
