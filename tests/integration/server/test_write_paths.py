"""``journald serve --aio-sync``: the daemon chooses its group writes' fdatasync path at start
and serves appends the same way on either (docs/design.md#durable-writes-without-a-thread-hop).
The crash and fault tests run on both paths too (tests/faults/file/test_file_crash.py)."""

from __future__ import annotations

from pathlib import Path

import journald_client as jc
import pytest

from journald.storage.file.store import FileStore
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.storage.file.test_aio_sync import aio_works

AIO_LINE = "fdatasync goes through Linux AIO"


@pytest.mark.parametrize("mode", ["on", "off"])
async def test_the_daemon_logs_its_write_path_and_serves_appends_on_it(
    tmp_path: Path, mode: str
) -> None:
    if mode == "on" and not aio_works():
        pytest.skip("Linux native AIO fdatasync is unavailable here: only the threads' path")
    env = {"JOURNALD_LOG_LEVEL": "INFO"}
    with Daemon(tmp_path, "file", "--aio-sync", mode, env=env) as daemon:
        client = await jc.connect_async(str(daemon.socket), name="paths", reconnect_timeout=0)
        try:
            run = await client.start("paths", FP, "hello")
            for i in range(5):
                await run.user(f"message {i}")
            assert run.last_seq == 6
            await run.close()
        finally:
            await client.close()
        logged = daemon.log()
    assert (AIO_LINE in logged) == (mode == "on"), logged
    store = FileStore(daemon.data_dir, aio="off")
    assert [r.seq for r in await store.load("paths")] == list(range(1, 7))
    await store.close()
