"""Linux native AIO fdatasync from the event loop (``journald.storage.aio_sync``): a real
sync completes through the kernel and the eventfd, a failed one raises the errno
``os.fdatasync`` would, and closing the context fails what it can no longer confirm. The
store's use of it: tests/storage/file/test_file_aio_writes.py.
"""

from __future__ import annotations

import asyncio
import errno
import os
import platform
from pathlib import Path

import pytest

from journald.storage import aio_sync


def aio_works() -> bool:
    if platform.machine() != "x86_64":
        return False
    try:
        aio_sync.probe(os.getcwd()).close()
    except OSError:
        return False
    return True


AIO_UNAVAILABLE = pytest.mark.skipif(
    not aio_works(),
    reason="Linux native AIO fdatasync is unavailable here (not x86_64, or the kernel or "
    "filesystem refuses IOCB_CMD_FDSYNC): the store uses its writer threads, tested elsewhere",
)
pytestmark = AIO_UNAVAILABLE


async def test_an_fdatasync_through_aio_completes_on_the_loop_and_reports_its_seconds(
    tmp_path: Path,
) -> None:
    sync = aio_sync.probe(str(tmp_path))
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, b"x" * 1024, 0)
        took = await sync.fdatasync(fd)
        many = await asyncio.gather(*(sync.fdatasync(fd) for _ in range(sync.capacity + 8)))
    finally:
        os.close(fd)
        sync.close()
    assert took >= 0.0
    assert len(many) == sync.capacity + 8, "callers past the capacity waited and completed"
    assert sync.in_flight == 0


async def test_a_sync_of_a_bad_descriptor_raises_the_errno_os_fdatasync_would(
    tmp_path: Path,
) -> None:
    sync = aio_sync.probe(str(tmp_path))
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    with pytest.raises(OSError, match="Bad file descriptor") as by_os:
        os.fdatasync(fd)
    with pytest.raises(OSError, match="Bad file descriptor") as by_aio:
        await sync.fdatasync(fd)
    sync.close()
    assert by_aio.value.errno == by_os.value.errno == errno.EBADF


def test_the_mode_comes_from_the_environment_and_a_wrong_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(aio_sync.ENV, "off")
    assert aio_sync.open_for(str(tmp_path)) is None
    monkeypatch.setenv(aio_sync.ENV, "")
    assert aio_sync.mode_from_env() == "auto"
    monkeypatch.setenv(aio_sync.ENV, "ON")
    assert aio_sync.mode_from_env() == "on"
    with pytest.raises(ValueError, match="JOURNALD_AIO_SYNC='sometimes': use one of auto"):
        aio_sync.mode_from_env("sometimes")


async def test_closing_with_syncs_in_flight_fails_them_with_eio(tmp_path: Path) -> None:
    sync = aio_sync.probe(str(tmp_path))
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    os.pwrite(fd, b"x" * 4096, 0)
    calls = [asyncio.ensure_future(sync.fdatasync(fd)) for _ in range(4)]
    await asyncio.sleep(0)  # each call submitted its iocb; the loop has not reaped them yet
    assert sync.in_flight == 4
    sync.close()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    os.close(fd)
    assert all(isinstance(o, OSError) and o.errno == errno.EIO for o in outcomes), outcomes
    with pytest.raises(OSError, match="closed") as late:
        await sync.fdatasync(0)
    assert late.value.errno == errno.EIO
