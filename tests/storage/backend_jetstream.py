"""Contract-suite factory for the JetStream backend.

One nats-server per test session (started on first use, stopped at interpreter exit by its
pid); a fresh stream with a fresh subject prefix per test, created here through nats-py's
management API (the store itself never creates a stream).
"""

from __future__ import annotations

import atexit
import itertools
import tempfile
from pathlib import Path
from typing import Any

from journald.storage.registry import BackendOptions
from tests.nats_server import NatsServer, create_stream

_server: NatsServer | None = None
_counter = itertools.count(1)


def session_server() -> NatsServer:
    """The shared single-node server of this test session (JetStream, sync_interval: always)."""
    global _server
    if _server is None or _server.proc is None or _server.proc.poll() is not None:
        workdir = Path(tempfile.mkdtemp(prefix="journald-nats-"))
        server = NatsServer(workdir, name="session")
        server.start()
        atexit.register(server.stop)
        _server = server
    return _server


async def fresh_stream(**overrides: Any) -> tuple[str, str, str]:
    """Create a new journald stream on the session server: (url, stream name, prefix)."""
    server = session_server()
    n = next(_counter)
    name, prefix = f"JD{n}", f"jd{n}"
    await create_stream(server.url, name, prefix, **overrides)
    return server.url, name, prefix


async def options(tmp_path: Path) -> BackendOptions:
    """A fresh stream for this test, created on the first call; later calls (a reopen) bind
    the same one (its URL and name are kept in ``tmp_path``). The contract suite runs with
    atomic batches on (as deploy/nats/stream.json); the per-record path is exercised by the
    test_jetstream_* suites on default streams."""
    kept = tmp_path / "jetstream-stream"
    if not kept.exists():
        url, name, _ = await fresh_stream(allow_atomic=True)
        kept.write_text(f"{url}\n{name}\n")
    url, name = kept.read_text().split()
    return BackendOptions(
        data_dir=tmp_path / "data", nats_url=url, stream=name, gap_wait_s=0.2, ack_timeout_s=2.0
    )
