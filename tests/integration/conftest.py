"""The one ``daemon`` fixture: a real daemon subprocess on a temp socket and data dir.

Per test by default, on ``$JOURNALD_TEST_BACKEND`` (``file`` unless set). A module whose tests
can share one daemon (distinct run ids, no test stops it) marks itself
``pytestmark = pytest.mark.shared_daemon("file")``: its tests then get one daemon for the
whole module, on the backend the marker names (``file`` when it names none), so its start-up
is paid once. That daemon is also the module-scoped ``module_daemon`` fixture, for module
fixtures that prepare it (e.g. load golden runs into it once).
Real nats-servers on demand (``start_nats``), each stopped by its pid when the test ends.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.daemon import Daemon
from tests.nats_server import NatsServer

BACKEND = os.environ.get("JOURNALD_TEST_BACKEND", "file")
SHARED = "shared_daemon"


def _started(tmp_path: Path, backend: str) -> Iterator[Daemon]:
    d = Daemon(tmp_path, backend).start()
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


@pytest.fixture(scope="module")
def module_daemon(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemon]:
    marker = request.node.get_closest_marker(SHARED)
    backend = str(marker.args[0]) if marker is not None and marker.args else "file"
    name = request.node.name.removesuffix(".py")
    yield from _started(tmp_path_factory.mktemp(name), backend)


@pytest.fixture
def daemon(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemon]:
    if request.node.get_closest_marker(SHARED) is not None:
        shared: Daemon = request.getfixturevalue("module_daemon")
        yield shared
    else:
        yield from _started(tmp_path, BACKEND)
