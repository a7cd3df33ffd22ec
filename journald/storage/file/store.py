"""The file backend's store: the run directories, their locks, settling a run before it is
opened, create, open, delete and the read calls, each reaching the disk through ``checked``.

The on-disk format, fsync order and recovery rules are those of the package
(docs/design.md#file-backend), and so is how damage is logged.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import shutil
import socket
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import Any, TypeVar

from journald.clock import utc_ts
from journald.core.errors import (
    InvalidRecord,
    JournaldError,
    Locked,
    SessionExists,
    StoreCorrupted,
)
from journald.core.records import GENESIS, Record, validate_id
from journald.paths import default_data_dir
from journald.storage.aio_sync import AioSync, Mode, for_store
from journald.storage.base import (
    DEFAULT_GAP_WAIT_S,
    FSYNC_LOCAL,
    QuarantineReport,
    RecordCheck,
    RunInfo,
    VerifyReport,
)
from journald.storage.file.errors import data_dir_gone, disk_error, vanished
from journald.storage.file.journal import (
    FileJournal,
    OpenState,
    SegmentStats,
)
from journald.storage.file.maintenance import FileMaintenance, PrePrune, PruneReport
from journald.storage.file.manifest_checks import MANIFESTS, has_records, sealed_problem
from journald.storage.file.open_end import open_from_end, open_whole
from journald.storage.file.reads import FileReads, Records
from journald.storage.file.run_info import listed_last_seq
from journald.storage.file.segments import (
    DIR_MODE,
    FILE_MODE,
    JOURNAL,
    LOCK,
    MANIFEST,
    SEGMENTS,
    STAGED,
    Line,
    Manifest,
    SegmentInfo,
    check_format,
    corrupted,
    file_lines,
    read_manifest,
    sealed_facts,
    split_complete,
    unmake_run_dir,
    write_manifest,
)
from journald.storage.io_pool import DEFAULT_IO_THREADS, IOPool
from journald.storage.seam import Disk, default_disk

MiB = 1024 * 1024
PAGE_BYTES = 1 * MiB
"""Stored bytes of records one step of ``iter_records`` reads ahead of its consumer."""


def next_page(walk: Iterator[Record], limit_bytes: int = PAGE_BYTES) -> list[Record]:
    """The next records of ``walk``, up to about ``limit_bytes`` of them (empty at its end)."""
    page: list[Record] = []
    size = 0
    for rec in walk:
        page.append(rec)
        size += len(rec.raw)
        if size >= limit_bytes:
            break
    return page


LOGGED_KEPT = 1024  # damage reports remembered so that each is logged at ERROR once
T = TypeVar("T")
log = logging.getLogger("journald.storage.file")  # the backend's one logger
Infos = list[RunInfo]
Segments = list[SegmentInfo]


class FileStore:
    """Runs as JSON-lines files under ``data_dir`` (see the module docstring)."""

    durability = FSYNC_LOCAL

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        segment_max_bytes: int = 16 * MiB,
        segment_max_records: int = 5000,
        segmentation: bool = True,
        gap_wait_s: float = DEFAULT_GAP_WAIT_S,
        io_threads: int = DEFAULT_IO_THREADS,
        quarantine_dir: str | os.PathLike[str] | None = None,
        disk: Disk | None = None,
        aio: Mode | AioSync | None = None,
    ) -> None:
        self.disk = disk if disk is not None else default_disk()
        """The disk I/O seam every write of the store and its journals goes through."""
        self.data_dir = os.path.abspath(data_dir if data_dir is not None else default_data_dir())
        self.sessions_dir = os.path.join(self.data_dir, "sessions")
        self.quarantine_dir = os.path.abspath(
            quarantine_dir
            if quarantine_dir is not None
            else os.path.join(self.data_dir, "quarantine")
        )
        self.segment_max_bytes = segment_max_bytes
        self.segment_max_records = segment_max_records
        self.segmentation = segmentation
        self.gap_wait_s = gap_wait_s
        # every open journal's writes and fdatasyncs, on io_threads threads at most
        self.io_pool = IOPool(io_threads, "journald-writer")
        self.reads = FileReads(self.sessions_dir, self.disk, self._log_corrupted)
        self.maintenance = FileMaintenance(self)
        for d in (self.data_dir, self.sessions_dir):
            if not os.path.isdir(d):
                os.makedirs(d, DIR_MODE, exist_ok=True)
                os.chmod(d, DIR_MODE)
        self._aio_choice = aio  # a mode (None: JOURNALD_AIO_SYNC), or a test's context
        self._aio: AioSync | None = None
        self._aio_chosen = False  # probed on first use: a store that only reads never probes
        self._open: dict[str, FileJournal] = {}
        self._logged: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._logged_lock = threading.Lock()  # _list logs from a worker thread

    def aio_sync(self) -> AioSync | None:
        """The journals' fdatasync through Linux AIO from the loop, or None: the writer threads
        sync (``aio_sync.for_store``). Chosen at the first call: the daemon's start, else the
        first write that could use it (docs/design.md#durable-writes-without-a-thread-hop)."""
        if not self._aio_chosen:
            plain = type(self.disk) is Disk
            self._aio = for_store(self.sessions_dir, self._aio_choice, plain_disk=plain)
            self._aio_chosen = True
        return self._aio

    # -- damage is logged --------------------------------------------------------------------

    async def checked(
        self, fn: Callable[..., T], *args: Any, run_id: str = "", action: str = ""
    ) -> T:
        """``fn(*args)`` on a worker thread, the one way every call of the store reaches the
        disk: a ``StoreCorrupted`` it raises is logged, an ``OSError`` becomes the journald
        error of ``file.errors.disk_error`` (``action``: what the call was doing)."""
        try:
            return await asyncio.to_thread(fn, *args)
        except StoreCorrupted as exc:
            self._log_corrupted(exc)
            raise
        except OSError as exc:
            err = self.disk_error(exc, run_id, action)
            if isinstance(err, StoreCorrupted):
                self._log_corrupted(err)
            raise err from exc

    def disk_error(self, exc: OSError, run_id: str = "", action: str = "") -> JournaldError:
        return disk_error(exc, root=self.sessions_dir, run_id=run_id, action=action)

    def _log_corrupted(self, exc: StoreCorrupted) -> None:
        """Log a run's damage at ERROR the first time this store meets it (run, file, line,
        seq), at DEBUG after that: every read of a damaged run meets it again."""
        meta = exc.metadata
        key = (
            meta.get("run_id", ""),
            meta.get("file", ""),
            meta.get("line", ""),
            meta.get("seq", ""),
        )
        with self._logged_lock:
            first = key not in self._logged
            self._logged[key] = None
            while len(self._logged) > LOGGED_KEPT:
                self._logged.popitem(last=False)
        log.log(
            logging.ERROR if first else logging.DEBUG,
            "store_corrupted: run %s, file %s, line %s, seq %s: %s. Reads and opens of the "
            "run are refused (nothing was changed); quarantine the damage with `journald "
            "recover %s` or restore the run from a backup",
            *key,
            exc.message,
            key[0],
        )

    # -- paths and locks -------------------------------------------------------------------

    def run_dir(self, run_id: str) -> str:
        return self.reads.run_dir(run_id)

    @property
    def segment_opens(self) -> int:
        """Sealed segment files opened by reads (lets tests prove paging reads the tail)."""
        return self.reads.segment_opens

    async def prune(self, run_id: str, *, before: PrePrune | None = None) -> PruneReport:
        """See ``FileMaintenance.prune``."""
        return await self.maintenance.prune(run_id, before=before)

    async def recover(
        self,
        run_id: str,
        quarantine_dir: str | os.PathLike[str] | None = None,
        *,
        check: RecordCheck | None = None,
    ) -> QuarantineReport:
        """See ``FileMaintenance.recover``."""
        return await self.maintenance.recover(run_id, quarantine_dir, check=check)

    def forget(self, run_id: str, journal: FileJournal) -> None:
        if self._open.get(run_id) is journal:
            del self._open[run_id]

    def _lock(self, run_id: str, run_dir: str) -> int:
        if run_id in self._open:
            raise Locked(
                f"run {run_id} is already open for append in this daemon; end that lease first",
                metadata={"run_id": run_id},
            )
        fd = self.disk.open(os.path.join(run_dir, LOCK), os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "unknown"
            self.disk.close(fd)
            raise Locked(
                f"run {run_id} is open for append by another process ({holder}); end that "
                "lease or wait for it to exit",
                metadata={"run_id": run_id, "holder": holder},
            ) from None
        except BaseException:
            self.disk.close(fd)
            raise
        info = f"pid={os.getpid()} host={socket.gethostname()} since={utc_ts()}\n".encode()
        self.disk.ftruncate(fd, 0)
        self.disk.write_all(fd, info, 0)
        return fd

    def lock_existing(self, run_id: str, run_dir: str, outside: str = "") -> int:
        if not os.path.isdir(run_dir):
            raise self.reads.not_found(run_id)
        check_format(run_dir, run_id)  # a newer journald's run: refused before the lock file
        real = os.path.realpath(run_dir)
        if outside and os.path.commonpath([os.path.realpath(outside), real]) == real:
            raise ValueError(f"the quarantine directory {outside} must be outside the run {real}")
        return self._lock(run_id, run_dir)

    # -- recovery on open ------------------------------------------------------------------

    def settle(self, run_id: str, run_dir: str) -> Manifest:
        """Finish or roll back interrupted seals and volume replacements; drop temp files."""
        for name in self.disk.listdir(run_dir):
            if ".tmp-" in name:
                self.disk.unlink(os.path.join(run_dir, name))
        path = os.path.join(run_dir, JOURNAL)
        m = read_manifest(run_dir, run_id)
        if m is not None and m.pending:
            self.finish_replace(run_dir, run_id, m)
            return m
        staged = os.path.join(run_dir, STAGED)
        if os.path.exists(staged):
            self.disk.unlink(staged)  # an uncommitted prune/recovery: roll back
        m = m or Manifest(run_format=1)  # no manifest: a run from before format identity
        seg_dir = os.path.join(run_dir, SEGMENTS)
        on_disk = sorted(self.disk.listdir(seg_dir)) if os.path.isdir(seg_dir) else []
        listed = {s.file for s in m.segments}
        for name in on_disk:
            seg = os.path.join(seg_dir, name)
            if name in listed:
                continue
            interrupted = (
                name == f"{len(m.segments) + 1:06d}.jsonl"
                and os.path.exists(path)
                and os.path.samefile(seg, path)
            )
            if not interrupted:
                raise corrupted(
                    run_id, Line(seg, 0, b""), 0, "a segment file not listed in the manifest"
                )
            start_seq, start_hash = m.active_start()
            stats = SegmentStats()
            data = self.disk.read(path)
            end = split_complete(data)[1]
            lines = file_lines(seg, data[:end])
            for _, rec in self.reads.chain(run_id, m, lines, start_seq, start_hash):
                stats.add(rec)
            if end != len(data) or not stats.records:
                self.disk.unlink(seg)  # never sealed a partial file; roll the seal back
                self.disk.fsync_dir(seg_dir)
                continue
            sealed = stats.segment(name, end, sealed_facts(seg))
            m = Manifest(m.generation + 1, [*m.segments, sealed], m.anchors)
            write_manifest(self.disk, run_dir, m)
        for s in m.segments:
            if not os.path.exists(os.path.join(seg_dir, s.file)):
                raise corrupted(
                    run_id,
                    Line(os.path.join(seg_dir, s.file), 0, b""),
                    s.first_seq,
                    "a segment listed in the manifest is missing",
                )
        last_seg = os.path.join(seg_dir, m.segments[-1].file) if m.segments else ""
        if last_seg and os.path.exists(path) and os.path.samefile(path, last_seg):
            self.disk.atomic_write(path, b"")  # finish a seal interrupted after its manifest
        return m

    def finish_replace(self, run_dir: str, run_id: str, m: Manifest) -> None:
        staged = os.path.join(run_dir, m.pending)
        if os.path.exists(staged):
            self.disk.replace(staged, os.path.join(run_dir, JOURNAL))
            self.disk.fsync_dir(run_dir)
        self.disk.step("after_prune_rename")
        seg_dir = os.path.join(run_dir, SEGMENTS)
        if os.path.isdir(seg_dir):
            for name in self.disk.listdir(seg_dir):
                self.disk.unlink(os.path.join(seg_dir, name))
            self.disk.fsync_dir(seg_dir)
        m.pending = ""
        m.segments = []
        m.generation += 1
        write_manifest(self.disk, run_dir, m)

    def open_state(self, run_id: str, run_dir: str) -> OpenState:
        floor = listed_last_seq(run_dir)
        m = self.settle(run_id, run_dir)
        problem = sealed_problem(run_id, run_dir, m) if not m.pending else None
        if problem is not None:
            raise problem
        cheap = open_from_end(self, run_id, run_dir, m, floor)
        return cheap if cheap is not None else open_whole(self, run_id, run_dir, m, floor)

    # -- Store protocol --------------------------------------------------------------------

    async def create(self, meta: Record) -> FileJournal:
        run_id = validate_id(meta.payload.get("run_id"))
        if meta.kind != "meta" or meta.seq != 1:
            raise InvalidRecord(
                f"run {run_id}: a run starts with a meta record at seq 1 "
                f"(got {meta.kind} at seq {meta.seq})",
                metadata={"run_id": run_id, "seq": meta.seq},
            )
        run_dir = self.run_dir(run_id)
        made = False

        def prepare() -> tuple[int, OpenState]:
            nonlocal made
            self.disk.step("before_run_create")
            try:
                self.disk.mkdir(run_dir, DIR_MODE)
                made = True
            except FileExistsError:
                if has_records(run_dir):
                    raise SessionExists(
                        f"run {run_id} already exists; resume it or pick another id",
                        metadata={"run_id": run_id},
                    ) from None
            try:
                lock = self._lock(run_id, run_dir)
            except Locked as exc:
                raise SessionExists(
                    f"run {run_id} is being created by another writer", metadata=exc.metadata
                ) from None
            if has_records(run_dir):
                self.disk.close(lock)
                raise SessionExists(
                    f"run {run_id} already exists; resume it or pick another id",
                    metadata={"run_id": run_id},
                )
            m = Manifest(generation=1)
            try:
                fd = self.disk.open(
                    os.path.join(run_dir, JOURNAL), os.O_WRONLY | os.O_CREAT, FILE_MODE
                )
                self.disk.ftruncate(fd, 0)  # a create that crashed before its meta was durable
                self.disk.close(fd)
                # the run's format before its first line; the first write fsyncs the run
                # directory before it is acknowledged, which makes the rename durable too
                self.disk.atomic_write(os.path.join(run_dir, MANIFEST), m.encode(), sync_dir=False)
            except BaseException:
                self.disk.close(lock)
                raise
            return lock, OpenState(m, 0, SegmentStats(), 0, GENESIS, None)

        def start() -> FileJournal:
            lock, st = prepare()
            try:
                return FileJournal(self, run_id, lock, st, first=True)
            except BaseException:
                self.disk.close(lock)
                raise

        try:
            journal = await self.checked(start, run_id=run_id, action="creating the run")
        except JournaldError as exc:
            if made and isinstance(exc.__cause__, OSError):  # nothing of the run stays
                await asyncio.to_thread(unmake_run_dir, run_dir)
            raise
        self._open[run_id] = journal
        try:
            await journal.append([meta])
            # the listing cache from the first record on: evidence that the run held records
            # (a floor for its last seq) even if its writer never closes it
            await journal.write_listing()
        except BaseException:
            await journal.close()
            await asyncio.to_thread(shutil.rmtree, run_dir, True)
            raise
        return journal

    async def open(self, run_id: str) -> FileJournal:
        run_dir = self.run_dir(run_id)

        def start() -> FileJournal:
            lock = self.lock_existing(run_id, run_dir)
            try:
                st = self.open_state(run_id, run_dir)
                if st.last_seq == 0:
                    raise self.reads.not_found(run_id)
                return FileJournal(self, run_id, lock, st, first=False)
            except BaseException:
                self.disk.close(lock)
                raise

        journal = await self.checked(start, run_id=run_id, action="opening the run")
        self._open[run_id] = journal
        return journal

    async def exists(self, run_id: str) -> bool:
        run_dir = self.run_dir(run_id)
        if data_dir_gone(self.sessions_dir):  # not "no such run": there is no data at all
            raise vanished(self.sessions_dir, run_id)
        return await self.checked(has_records, run_dir, run_id=run_id)

    async def iter_records(self, run_id: str, from_seq: int = 1) -> AsyncIterator[Record]:
        """The run's records from ``from_seq``, read and checked a page at a time: a reader
        that stops reading (a Load or Watch whose client does not read) holds one page and
        one sealed segment, never the run. Damage found past what was already yielded ends
        the iteration with ``store_corrupted`` there."""
        walk = await self.checked(
            self._start_walk, run_id, from_seq, run_id=run_id, action="reading the run"
        )
        try:
            first = True
            while True:
                page = await self.checked(next_page, walk, run_id=run_id, action="reading the run")
                if first and not page and from_seq <= 1:
                    raise self.reads.not_found(run_id)
                first = False
                if not page:
                    return
                for rec in page:
                    yield rec
        finally:
            walk.close()

    def _start_walk(self, run_id: str, from_seq: int) -> Generator[Record, None, None]:
        walk = self.reads.walk(run_id, from_seq)
        next(walk)  # the snapshot is taken now, before the first page is asked for
        return walk  # type: ignore[return-value]

    async def load(self, run_id: str, from_seq: int = 1) -> Records:
        return await self.checked(
            self.reads.read_records, run_id, from_seq, run_id=run_id, action="reading the run"
        )

    async def info(self, run_id: str) -> RunInfo:
        return await self.checked(self.reads.info, run_id, run_id=run_id, action="reading the run")

    async def list(self) -> list[RunInfo]:
        return await self.checked(self.reads.list, action="listing the runs")

    async def delete(self, run_id: str) -> bool:
        run_dir = self.run_dir(run_id)
        return await self.checked(
            self._delete, run_id, run_dir, run_id=run_id, action="deleting the run"
        )

    async def verify(self, run_id: str) -> VerifyReport:
        return await self.checked(
            self.reads.verify, run_id, run_id=run_id, action="verifying the run"
        )

    async def segments(self, run_id: str) -> Segments:
        """The sealed segments of a run, oldest first (seq range, record and message counts,
        bytes, first/last hash), from its manifest; empty for a single-volume run. History
        paging walks this from the tail to pick ``from_seq`` without reading old segments."""
        run_dir = self.run_dir(run_id)
        m = await self.checked(
            MANIFESTS.manifest, run_dir, run_id, run_id=run_id, action="reading the run's manifest"
        )
        if m is None or m.pending:
            if not await self.exists(run_id):
                raise self.reads.not_found(run_id)
            return []
        return list(m.segments)

    async def close(self) -> None:
        for journal in list(self._open.values()):
            await journal.close()
        self.io_pool.stop()
        if self._aio is not None:
            self._aio.close()
        self._aio_chosen = True  # a closed store never probes again

    # -- explicit maintenance --------------------------------------------------------------

    # -- reads -----------------------------------------------------------------------------

    def _delete(self, run_id: str, run_dir: str) -> bool:
        if data_dir_gone(self.sessions_dir):
            raise vanished(self.sessions_dir, run_id)
        if os.path.islink(run_dir):
            return self._delete_link(run_id, run_dir)
        if not os.path.isdir(run_dir):
            return False
        lock = self._lock(run_id, run_dir)
        try:
            self.disk.step("before_run_delete")
            trash = os.path.join(self.sessions_dir, f".deleted-{run_id}-{uuid.uuid4().hex[:8]}")
            self.disk.rename(run_dir, trash)
            self.disk.fsync_dir(self.sessions_dir)
        finally:
            self.disk.close(lock)
        MANIFESTS.forget_run(run_dir)  # a run created under the id later is read afresh
        self.reads.sealed.forget(run_dir)
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def _delete_link(self, run_id: str, run_dir: str) -> bool:
        """Delete a run whose directory is a symbolic link: the link alone goes. Delete never
        reaches outside the data directory, so what the link points to stays as it was."""
        if run_id in self._open:
            raise Locked(
                f"run {run_id} is open for append in this daemon; end that lease first",
                metadata={"run_id": run_id},
            )
        target = os.readlink(run_dir)
        self.disk.unlink(run_dir)
        self.disk.fsync_dir(self.sessions_dir)
        log.warning(
            "run %s: its directory was a symbolic link to %s; the link was removed and the "
            "files it points to were left untouched (remove them yourself if they are not "
            "needed)",
            run_id,
            target,
        )
        return True
