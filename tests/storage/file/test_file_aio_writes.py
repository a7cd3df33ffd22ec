"""The file journal's group writes with their fdatasync through Linux AIO from the loop.

What a client is promised does not depend on which path synced its records: a sync the
device fails refuses the append with the same typed error and leaves the same file as the
writer threads do; a kernel or filesystem that refuses AIO syncs makes the store fall back
to the threads and work as before. The kernel's completion is real in every test here except
where a test's context answers a failure through ``AioSync.result`` (the seam that stands for
the device).
"""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from journald import failpoints
from journald.core.errors import BackendUnavailable, StorageFull
from journald.storage import aio_sync
from journald.storage.aio_sync import AioSync
from journald.storage.file.journal import AIO_WRITE_MAX_BYTES
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, text
from tests.storage.file.test_aio_sync import AIO_UNAVAILABLE
from tests.storage.file.test_disk_seam_faults import FaultyDisk, journal_bytes
from tests.waiting import wait_until_async

pytestmark = AIO_UNAVAILABLE


class CountingSync(AioSync):
    """A real context that counts its completions and can fail the next one like a device."""

    def __init__(self) -> None:
        super().__init__()
        self.synced = 0
        self.fail_next = 0  # an errno the next completion reports instead of its own res

    def result(self, fd: int, res: int) -> int:
        self.synced += 1
        if self.fail_next:
            code, self.fail_next = self.fail_next, 0
            return -code
        return res


def counting_store(tmp_path: Path) -> tuple[FileStore, CountingSync]:
    sync = CountingSync()
    return FileStore(tmp_path, aio=sync), sync


@pytest.fixture
def built() -> JournalBuilder:
    b = JournalBuilder("aio")
    b.turn(["t1", "t2"])
    return b


async def test_a_store_on_the_plain_disk_syncs_each_group_write_through_aio(
    tmp_path: Path, built: JournalBuilder
) -> None:
    store, sync = counting_store(tmp_path)
    journal = await store.create(built.records[0])  # the first write syncs the directories too
    assert sync.synced == 0, "the run's first write (directory syncs) stays on the threads"
    for rec in built.records[1:]:
        await journal.append([rec])
    assert sync.synced == len(built.records) - 1 == journal.commits - 1
    await journal.close()
    await store.close()
    assert sync.closed
    again = FileStore(tmp_path, aio="off")
    assert [r.raw for r in await again.load("aio")] == [r.raw for r in built.records]
    await again.close()


async def test_a_group_larger_than_the_loop_bound_is_written_by_the_threads(
    tmp_path: Path,
) -> None:
    b = JournalBuilder("big")
    store, sync = counting_store(tmp_path)
    journal = await store.create(b.records[0])
    b.add("user", {"content": [text("y" * (AIO_WRITE_MAX_BYTES + 1))]})
    await journal.append([b.records[1]])
    assert (sync.synced, journal.commits) == (0, 2)
    b.add("user", {"content": [text("small")]})
    await journal.append([b.records[2]])
    assert (sync.synced, journal.commits) == (1, 3)
    await store.close()


@pytest.mark.parametrize("path", ["aio", "writer threads"])
async def test_a_sync_the_device_fails_refuses_the_append_and_leaves_the_file_as_before(
    tmp_path: Path, built: JournalBuilder, path: str
) -> None:
    # the same assertions as test_disk_seam_faults' failed fdatasync, on both paths: the
    # client sees the same typed error, and the bytes that reached only the page cache are
    # cut off before anyone can read them back
    sync: CountingSync | None = None
    disk = FaultyDisk()
    if path == "aio":
        store, sync = counting_store(tmp_path)
    else:
        store = FileStore(tmp_path, disk=disk, aio="on")
        assert store.aio_sync() is None, "a fault test's seam keeps the writer threads"
    journal = await store.create(built.records[0])
    before = journal_bytes(store, "aio")

    if sync is not None:
        sync.fail_next = errno.EIO
    else:
        disk.fdatasync_errno = errno.EIO
    with pytest.raises(BackendUnavailable, match=r"EIO.*nothing was acknowledged") as refused:
        await journal.append(built.records[1:3])
    assert refused.value.metadata["seq"] == "2"
    assert journal_bytes(store, "aio") == before
    assert journal.last_seq == 1
    reader = FileStore(tmp_path, aio="off")
    assert [r.seq for r in await reader.load("aio")] == [1]
    await reader.close()

    await journal.append(built.records[1:])  # the same seq, once the disk answers again
    await journal.close()
    await store.close()
    if sync is not None:
        assert sync.synced == 2
    again = FileStore(tmp_path, aio="off")
    assert [r.raw for r in await again.load("aio")] == [r.raw for r in built.records]
    await again.close()


async def test_a_failed_probe_falls_back_to_the_writer_threads_and_the_store_still_works(
    tmp_path: Path, built: JournalBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a filesystem without fsync for AIO answers the probe's FDSYNC with EINVAL
    monkeypatch.setattr(AioSync, "result", lambda self, fd, res: -errno.EINVAL)
    store = FileStore(tmp_path, aio="auto")
    journal = await store.create(built.records[0])
    await journal.append(built.records[1:])  # the first write that could use AIO probes
    assert store.aio_sync() is None
    assert not [n for n in os.listdir(store.sessions_dir) if n.startswith(".aio-probe")]
    assert journal.commits == 2
    await store.close()

    refusing = FileStore(tmp_path, aio="on")
    journal = await refusing.open("aio")
    more = JournalBuilder("aio")
    more.records = list(built.records)
    more.add("user", {"content": [text("one more")]})
    with pytest.raises(BackendUnavailable, match=r"AIO was asked for .*Invalid argument"):
        await journal.append(more.records[-1:])
    assert journal.last_seq == len(built.records)
    await refusing.close()
    monkeypatch.undo()
    again = FileStore(tmp_path)
    assert [r.raw for r in await again.load("aio")] == [r.raw for r in built.records]
    await again.close()


async def test_a_store_that_only_reads_never_probes(
    tmp_path: Path, built: JournalBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = FileStore(tmp_path, aio="off")
    journal = await writer.create(built.records[0])
    await journal.append(built.records[1:])
    await writer.close()
    probes: list[str] = []
    real = aio_sync.probe

    def counted(directory: str) -> AioSync:
        probes.append(directory)
        return real(directory)

    monkeypatch.setattr(aio_sync, "probe", counted)
    reader = FileStore(tmp_path, aio="on")
    assert [r.seq for r in await reader.load("aio")] == [r.seq for r in built.records]
    await reader.verify("aio")
    await reader.close()
    assert probes == []


async def test_short_pwrites_and_a_write_cut_by_a_full_disk_are_handled_on_the_loop_as_before(
    tmp_path: Path, built: JournalBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the loop's pwrite is the plain Disk's, so os.pwrite itself stands for the device here
    real = os.pwrite
    state = {"max": 7, "cut": 0, "calls": 0}

    def device(fd: int, data: bytes | memoryview, offset: int) -> int:
        state["calls"] += 1
        if state["cut"] and len(data) > 1:
            state["cut"] = 0
            real(fd, data[: len(data) // 2], offset)  # half of it reached the file
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data[: state["max"]], offset)

    store, sync = counting_store(tmp_path)
    journal = await store.create(built.records[0])
    monkeypatch.setattr(os, "pwrite", device)
    await journal.append(built.records[1:2])
    assert state["calls"] > 1, "the short pwrites were not exercised"
    before = journal_bytes(store, "aio")

    state["cut"] = 1
    with pytest.raises(StorageFull, match=r"ENOSPC.*retry the append at seq 3"):
        await journal.append(built.records[2:])
    assert journal_bytes(store, "aio") == before, "half a write was left in the journal"
    assert journal.last_seq == 2
    await journal.append(built.records[2:])
    monkeypatch.undo()
    assert sync.synced == 2, "the cut write never reached its fdatasync"
    await store.close()
    again = FileStore(tmp_path, aio="off")
    assert [r.raw for r in await again.load("aio")] == [r.raw for r in built.records]
    assert (await again.verify("aio")).last_seq == built.records[-1].seq
    await again.close()


async def test_a_failpoint_that_holds_a_write_on_the_loop_holds_that_write_only(
    tmp_path: Path,
) -> None:
    # a wait (or sleep) failpoint fires on a thread: the held run's write waits, another
    # run's append is served meanwhile, as when every write ran on a writer thread
    store, sync = counting_store(tmp_path)
    held_b, other_b = JournalBuilder("held"), JournalBuilder("other")
    held_b.turn(["t1"])
    other_b.turn(["t1"])
    held = await store.create(held_b.records[0])
    other = await store.create(other_b.records[0])
    release = tmp_path / "release"
    failpoints.arm(f"before_write=wait:{release}@1")
    try:
        writing = asyncio.ensure_future(held.append(held_b.records[1:]))
        await wait_until_async(
            lambda: Path(f"{release}.reached").exists(), what="the held write's failpoint"
        )
        await other.append(other_b.records[1:])
        assert not writing.done(), "the held write went on before it was released"
        release.touch()
        await writing
    finally:
        failpoints.disarm()
    assert (held.last_seq, other.last_seq) == (3, 3)
    assert sync.synced == 2
    await store.close()
