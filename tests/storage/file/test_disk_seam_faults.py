"""Faults injected through the file backend's disk seam (``journald.storage.seam``).

A failpoint can only stop the store between two of its steps; a seam can make the disk
itself misbehave inside one: a write that lands only in part before the device errors, an
``fdatasync`` that reports ``EIO`` after the bytes reached the page cache, a ``pwrite`` that
writes one byte at a time. Each test asserts what a client is promised: a failed append is
refused with a typed error and leaves the journal byte-identical and appendable at the same
seq, and a store opened afterwards (a restarted daemon) reads exactly the acknowledged
records.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from journald.core.errors import BackendUnavailable, StorageFull
from journald.storage.file.store import FileStore
from journald.storage.seam import Disk
from tests.builders import JournalBuilder


class FaultyDisk(Disk):
    """The real disk, with one fault armed at a time by the test."""

    def __init__(self) -> None:
        self.cut_write_errno = 0  # the next journal write lands in part, then fails so
        self.fdatasync_errno = 0  # the next fdatasync fails so (the bytes were written)
        self.pwrite_max = 0  # every pwrite writes at most this many bytes (0: all)
        self.pwrites = 0

    def pwrite(self, fd: int, data: memoryview, offset: int) -> int:
        self.pwrites += 1
        if self.cut_write_errno and len(data) > 1:
            code, self.cut_write_errno = self.cut_write_errno, 0
            os.pwrite(fd, data[: len(data) // 2], offset)  # half of it reached the file
            raise OSError(code, os.strerror(code))
        if self.pwrite_max:
            data = data[: self.pwrite_max]
        return super().pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> float:
        if self.fdatasync_errno:
            code, self.fdatasync_errno = self.fdatasync_errno, 0
            raise OSError(code, os.strerror(code))
        return super().fdatasync(fd)


def journal_bytes(store: FileStore, run_id: str) -> bytes:
    return (Path(store.run_dir(run_id)) / "journal.jsonl").read_bytes()


@pytest.fixture
def built() -> JournalBuilder:
    b = JournalBuilder("seam")
    b.turn(["t1", "t2"])
    return b


@pytest.mark.parametrize(
    ("code", "error", "named"),
    [(errno.EIO, BackendUnavailable, "EIO"), (errno.ENOSPC, StorageFull, "ENOSPC")],
)
async def test_a_write_cut_short_by_the_device_is_taken_back_and_the_seq_stays_appendable(
    tmp_path: Path, built: JournalBuilder, code: int, error: type[Exception], named: str
) -> None:
    disk = FaultyDisk()
    store = FileStore(tmp_path, disk=disk)
    journal = await store.create(built.records[0])
    await journal.append([built.records[1]])
    before = journal_bytes(store, "seam")

    disk.cut_write_errno = code
    with pytest.raises(error, match=f"{named}.*retry the append at seq 3"):
        await journal.append(built.records[2:])
    assert journal_bytes(store, "seam") == before, "half a write was left in the journal"
    assert journal.last_seq == 2

    await journal.append(built.records[2:])  # the same seq, once the disk answers again
    await journal.close()
    await store.close()
    again = FileStore(tmp_path)
    assert [r.raw for r in await again.load("seam")] == [r.raw for r in built.records]
    await again.close()


async def test_an_fdatasync_that_fails_is_never_acknowledged_and_its_bytes_are_taken_back(
    tmp_path: Path, built: JournalBuilder
) -> None:
    # After a failed fdatasync the written bytes may sit in the page cache and be read back
    # by this process, yet never reach the disk: trusting them would acknowledge records a
    # power cut loses. The store must refuse the append and cut the bytes off.
    disk = FaultyDisk()
    store = FileStore(tmp_path, disk=disk)
    journal = await store.create(built.records[0])
    before = journal_bytes(store, "seam")

    disk.fdatasync_errno = errno.EIO
    with pytest.raises(BackendUnavailable, match=r"EIO.*nothing was acknowledged") as refused:
        await journal.append(built.records[1:3])
    assert refused.value.metadata["seq"] == "2"
    assert journal_bytes(store, "seam") == before
    assert journal.last_seq == 1
    reader = FileStore(tmp_path)  # a second reader sees no unacknowledged record either
    assert [r.seq for r in await reader.load("seam")] == [1]
    await reader.close()

    await journal.append(built.records[1:])
    await journal.close()
    await store.close()
    again = FileStore(tmp_path)
    assert [r.raw for r in await again.load("seam")] == [r.raw for r in built.records]
    await again.close()


async def test_pwrites_that_write_a_few_bytes_at_a_time_still_store_every_byte_in_order(
    tmp_path: Path, built: JournalBuilder
) -> None:
    disk = FaultyDisk()
    store = FileStore(tmp_path, disk=disk)
    journal = await store.create(built.records[0])
    disk.pwrite_max = 7
    disk.pwrites = 0
    await journal.append(built.records[1:])
    assert disk.pwrites > len(built.records) - 1, "the short pwrites were not exercised"
    await journal.close()
    await store.close()
    again = FileStore(tmp_path)
    assert [r.raw for r in await again.load("seam")] == [r.raw for r in built.records]
    report = await again.verify("seam")
    assert (report.records, report.last_seq) == (len(built.records), built.records[-1].seq)
    await again.close()
