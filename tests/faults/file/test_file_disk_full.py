"""Disk full on a real, tiny tmpfs: the append fails with StorageFull, nothing changes, and
the same seq goes through once space is freed."""

from __future__ import annotations

import errno
import os
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from journald import failpoints
from journald.core.errors import StorageFull
from journald.storage.file.segments import JOURNAL
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, user_payload

RUN = "full-run"
FS_SIZE = "512k"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(directory, how): a mounted tmpfs, or a plain directory plus the reason it is not."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE},mode=0700", "tmpfs", str(mnt)],
            check=True,
            capture_output=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        yield mnt, f"mounting a tmpfs is impossible here ({exc}); ENOSPC is injected instead"
        return
    try:
        yield mnt, ""
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True, timeout=20)


def fill(path: Path) -> int:
    """Write until the file system refuses (bounded); returns the bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (65536, 4096, 512):
            for _ in range(4096):
                try:
                    written += os.write(fd, b"\0" * chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return written


def read(p: Path) -> bytes:
    return p.read_bytes()


def remove(p: Path) -> None:
    p.unlink()


async def test_a_full_disk_refuses_the_append_and_leaves_the_journal_unchanged(
    small_disk: tuple[Path, str],
) -> None:
    disk, injected = small_disk
    store = FileStore(disk / "data")
    b = JournalBuilder(RUN)
    b.turn(["a"])
    big = b.add("user", user_payload("y" * 40_000))  # needs fresh pages on any file system
    after = b.add("user", user_payload("after"))
    journal = await store.create(b.records[0])
    await journal.append(b.records[1:3])
    path = disk / "data" / "sessions" / RUN / JOURNAL
    before = read(path)
    filler = disk / "filler"
    if injected:
        warnings.warn(injected, stacklevel=1)
        failpoints.arm("after_write_before_fsync=raise:ENOSPC@1")
    else:
        assert fill(filler) > 0
    try:
        with pytest.raises(StorageFull) as err:
            await journal.append([big])
    finally:
        failpoints.disarm()
    assert err.value.metadata["errno"] == "ENOSPC"
    assert err.value.metadata["seq"] == str(big.seq)
    assert "Free space" in err.value.message
    assert read(path) == before
    assert journal.last_seq == big.seq - 1
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in b.records[:3]]
    if not injected:
        remove(filler)
    [res] = await journal.append([big])
    assert (res.seq, res.duplicate) == (big.seq, False)
    await journal.append([after])
    await journal.close()
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in b.records]
    assert (await store.verify(RUN)).last_seq == after.seq
