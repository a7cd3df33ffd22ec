"""How the store state machine gets, restarts and crashes each backend's store.

A restart is clean (journals closed, store closed, a new store over the same data); a crash
leaves the store as a killed daemon would (file: descriptors closed, flocks released, nothing
written); a second reader is another process's view of the same data.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from journald.storage.base import Store
from journald.storage.checkpoint_base import CheckpointStore
from journald.storage.file.store import FileStore
from journald.storage.memory import MemoryCheckpointStore
from journald.storage.registry import BackendOptions, OpenedBackend, open_backend

GAP_WAIT_S = 0.01
SEGMENT_MAX_RECORDS = 4  # small, so runs seal segments often


class Backend:
    """How the machine gets, restarts and crashes one kind of store."""

    name = ""
    durable = False  # data outlives the store object (a restart reads it back)
    tearable = False  # a torn write can be simulated (bytes at the end of a file)
    undoes_failed_writes = False  # a write that raised leaves nothing behind
    crash_points: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix=f"jd-machine-{self.name}-"))
        self.checkpoints: CheckpointStore = MemoryCheckpointStore()

    async def start(self) -> Store:
        raise NotImplementedError

    async def restart(self, store: Store) -> Store:
        """A clean daemon restart: every journal closed, the store closed, a new one opened."""
        await store.close()
        return await self.start()

    async def crash(self, store: Store) -> Store:
        """What a killed daemon leaves: nothing closed cleanly; a new store over the data."""
        raise NotImplementedError

    async def second_reader(self) -> Store | None:
        """Another store over the same data (as another process would open it), if any."""
        return None

    def active_segment(self, store: Store, run_id: str) -> Path:
        raise NotImplementedError

    async def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


class MemoryBackend(Backend):
    name = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.opened: OpenedBackend | None = None

    async def start(self) -> Store:
        if self.opened is None:
            self.opened = await open_backend("memory", BackendOptions(gap_wait_s=GAP_WAIT_S))
            self.checkpoints = self.opened.checkpoints
        return self.opened.records

    async def restart(self, store: Store) -> Store:
        return store  # nothing outlives the process: the same object stands for "after"


def abandon_file_store(store: FileStore) -> None:
    """Do to a file store what the kernel does to a killed daemon: its descriptors are closed
    (so its flocks are released) and nothing more is written (no cache, no close)."""
    for journal in list(store._open.values()):
        for fd in (journal._fd, journal._lock_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
    store._open.clear()
    store.io_pool.stop()


class FileBackend(Backend):
    name = "file"
    durable = True
    tearable = True
    undoes_failed_writes = True  # truncated back to the length before the write
    crash_points = ("before_write", "after_write_before_fsync", "after_fsync_before_advance")

    def __init__(self) -> None:
        super().__init__()
        self.data_dir = self.workdir / "data"

    async def _open(self) -> OpenedBackend:
        opts = BackendOptions(
            data_dir=self.data_dir, gap_wait_s=GAP_WAIT_S, segment_max_records=SEGMENT_MAX_RECORDS
        )
        return await open_backend("file", opts)

    async def start(self) -> Store:
        opened = await self._open()
        self.checkpoints = opened.checkpoints
        return opened.records

    async def crash(self, store: Store) -> Store:
        assert isinstance(store, FileStore)
        abandon_file_store(store)
        return await self.start()

    async def second_reader(self) -> Store | None:
        return (await self._open()).records

    def active_segment(self, store: Store, run_id: str) -> Path:
        assert isinstance(store, FileStore)
        return Path(store.run_dir(run_id)) / "journal.jsonl"


class JetStreamBackend(Backend):
    name = "jetstream"
    durable = True
    crash_points = ("before_write", "after_fsync_before_advance")

    def __init__(self) -> None:
        super().__init__()
        self.url = self.stream = ""

    async def start(self) -> Store:
        from tests.storage.backend_jetstream import fresh_stream

        if not self.stream:
            self.url, self.stream, _ = await fresh_stream(allow_atomic=True)
        opts = BackendOptions(
            nats_url=self.url,
            stream=self.stream,
            gap_wait_s=GAP_WAIT_S,
            ack_timeout_s=5.0,
            retry_window_s=10.0,
        )
        # the stream's own checkpoint bucket, bound on the new connection as a daemon does
        opened = await open_backend("jetstream", opts)
        self.checkpoints = opened.checkpoints
        return opened.records

    async def crash(self, store: Store) -> Store:
        # A JetStream journal holds nothing the server does not: dropping the connection is
        # all a killed daemon does to it.
        await store.close()
        return await self.start()

    async def cleanup(self) -> None:
        from tests.nats_server import delete_stream

        if self.stream:
            with contextlib.suppress(Exception):
                await delete_stream(self.url, self.stream)
        await super().cleanup()


BACKENDS: dict[str, type[Backend]] = {
    "memory": MemoryBackend,
    "file": FileBackend,
    "jetstream": JetStreamBackend,
}
