"""The disk I/O seam of the file backend: every write, sync, rename and unlink of its write
paths goes through one ``Disk`` object the store is constructed with.

The default is the real OS (``Disk``). A fault test hands the store another ``Disk`` (a
subclass that cuts a write short, fails an fdatasync with ``EIO``, ...) to show what the store
does with a fault no failpoint could reach, and the named failpoints of
``journald.failpoints`` fire here, at ``Disk.step``, so the store's logic names where it is
and never asks whether a test is watching. Deliberately wrong variants, which exist only to
prove that the tests catch them, are seams too (``AckBeforeFsync``), chosen by
``default_disk`` when the ``JOURNALD_FAILPOINTS`` contract switches them on.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid

from journald import failpoints


class Disk:
    """The real OS: each method is the one system call (or the few) it names."""

    def step(self, name: str) -> None:
        """A named point of a write path was reached (``journald.failpoints.POINTS``): an
        armed failpoint fires here; the real disk does nothing else."""
        if failpoints.ARMED:
            failpoints.hit(name)

    # -- descriptors ----------------------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        return os.open(path, flags, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwrite(self, fd: int, data: memoryview, offset: int) -> int:
        """One ``pwrite``: may write fewer bytes than given (``write_all`` continues)."""
        return os.pwrite(fd, data, offset)

    def write_all(self, fd: int, data: bytes, offset: int) -> int:
        """pwrite every byte of ``data`` at ``offset``; returns the end offset."""
        view = memoryview(data)
        while view:
            n = self.pwrite(fd, view, offset)
            offset += n
            view = view[n:]
        return offset

    def fdatasync(self, fd: int) -> float:
        """``fdatasync``; returns the seconds it took (for ``telemetry.fsync_took``)."""
        t0 = time.perf_counter()
        os.fdatasync(fd)
        return time.perf_counter() - t0

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def fstat(self, fd: int) -> os.stat_result:
        return os.fstat(fd)

    # -- names ----------------------------------------------------------------------------

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(path, mode)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def link(self, src: str, dst: str) -> None:
        os.link(src, dst)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    # -- the two durable writes every file of the backend is made by -------------------------

    def append_durably(self, fd: int, data: bytes, offset: int) -> tuple[int, float]:
        """A journal's group write: pwrite ``data`` at ``offset``, then fdatasync. Returns
        the end offset and the fdatasync's seconds. Raises ``OSError`` when either failed
        (the caller takes the bytes back)."""
        self.step("before_write")
        end = self.write_all(fd, data, offset)
        self.step("after_write_before_fsync")
        return end, self.fdatasync(fd)

    def atomic_write(
        self,
        path: str,
        data: bytes,
        *,
        failpoint: str = "",
        renamed_failpoint: str = "",
        sync: bool = True,
        sync_dir: bool = True,
    ) -> None:
        """temp file (unique name), write, fsync, rename over ``path``, fsync the directory
        (``failpoint`` is the step before the rename, ``renamed_failpoint`` the one after it;
        ``sync_dir`` False: the caller fsyncs the directory before anything depends on the
        rename)."""
        directory = os.path.dirname(path)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                self.write_all(fd, data, 0)
                if sync:
                    self.fsync(fd)
            finally:
                self.close(fd)
            if failpoint:
                self.step(failpoint)
            self.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                self.unlink(tmp)
            raise
        if renamed_failpoint:
            self.step(renamed_failpoint)
        if sync and sync_dir:
            self.fsync_dir(directory)


class AckBeforeFsync(Disk):
    """Deliberately wrong (``bug_ack_before_fsync=on``): a journal's group write reports
    success whatever happened to it. A write or fdatasync that fails leaves the file as a
    crash before the data reached the disk would (cut back to ``offset``), yet the journal is
    told the group is durable and acknowledges it: acknowledged records are lost, which the
    store state machine (tests/storage/contract/test_store_machine.py) must catch."""

    def append_durably(self, fd: int, data: bytes, offset: int) -> tuple[int, float]:
        try:
            return super().append_durably(fd, data, offset)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, offset)
            return offset + len(data), 0.0


OS = Disk()
"""The real OS, shared: ``Disk`` holds no state."""


def default_disk() -> Disk:
    """The seam a store gets when it is given none: the real OS, or the wrong variant the
    ``JOURNALD_FAILPOINTS`` environment switched on (``bug_ack_before_fsync=on``)."""
    if failpoints.ARMED and failpoints.is_on("bug_ack_before_fsync"):
        return AckBeforeFsync()
    return OS
