"""File backend: the embedded default store (docs/design.md#file-backend).

Layout
------
::

    <data_dir>/                      0700  default: default_data_dir()
      sessions/                      0700
        <run_id>/                    0700  run id checked by records.validate_id first
          journal.jsonl              0600  active segment: one framed record per line
          segments/000001.jsonl      0600  sealed segments (immutable once listed)
          manifest.json              0600  run format, segment list, chain anchors
          meta.json                  0600  listing cache (ignored when stale; its last_seq is
                                           a floor: see "Missing records" below)
          journal.lock               0600  flock of the append handle; holds "pid host since"
          journal.jsonl.broken[.N]   0600  torn tails cut by a repair
          journal.jsonl.staged       0600  a prune/recovery volume being put in place
          checkpoints/                     (owned by the checkpoint store)
      quarantine/<run_id>-<stamp>/         recovery evidence, outside every run

Line framing
------------
A record is stored as one line::

    <canonical JSON bytes of the record> TAB <checksum> LF

``checksum`` is the first 16 lowercase hex digits of the record's sha256 (the record's hash,
already computed when it was built, so framing costs no hashing). The record bytes are
exactly those of ``journald.core.records`` (the hash chain, JetStream message bodies and exports
do not change); canonical JSON never holds a raw tab or newline, so the first tab ends the
record. The checksum is what vouches for the last record of a file, which no ``prev`` of a
later record covers yet. A line without its newline is not a record. Lines written before
the framing existed (``<canonical JSON> LF``, no tab) are still read: they are "legacy"
lines, checked by the chain as before and, when last, by the record schema only.

Format identity: the manifest's format, ``journald-manifest/N`` with N = ``RUN_FORMAT`` (2,
framed lines), is the run's format. A create writes it before the meta record and the first
open for append of an older run (no manifest, or format 1) before its first framed line; a
run of a higher number is refused (``VersionUnsupported``) before anything is written
(docs/design.md#format-identity). OS errors: ``file.errors.disk_error``, once, in ``_checked``.

Manifest (``journald-manifest/2``, JSON): ``generation`` (bumped by every write), ``segments``
(in order: file, first_seq, last_seq, records, messages, bytes, first_hash, last_hash,
first_prev, and sha256 of the whole file and its mtime_ns when sealed, absent from manifests
written before they were recorded), ``anchors`` (legitimate chain breaks: after_seq/
after_hash → resume_seq/resume_prev, reason ``prune`` or ``quarantine``,
dropped_from..dropped_to), and ``pending`` while a volume replacement is committed but not
settled. The active segment continues the chain from the last sealed segment (or from seq 0 /
the genesis hash).

Append (group commit)
---------------------
Appends queued on one journal are written by one ``pwrite`` at the journal's known length,
then ``fdatasync``; on a run's first write (create) the run directory and ``sessions/`` are
fsynced too; only THEN do ``last_seq``/``last_hash`` advance and the appends get their
acknowledgement (durability ``fsync_local``). A failed write (``ENOSPC``/``EDQUOT`` →
``StorageFull``, anything else → ``BackendUnavailable``) truncates the file back to its
pre-write length, so the journal is byte-identical and appendable at the same seq; every
append queued behind the failed one fails with it.

Sealing: when the active segment reaches ``segment_max_records`` or ``segment_max_bytes``,
after an acknowledged write: (1) hard-link ``journal.jsonl`` to ``segments/<n>.jsonl``, fsync
``segments/``; (2) write the manifest listing it atomically (temp, fsync, rename, directory
fsync); (3) atomically replace ``journal.jsonl`` by an empty file. A crash after (1) leaves an
unlisted segment that is the same inode as the active file: the next open completes the seal.
A crash after (2) leaves an active file that is the same inode as the last listed segment:
readers treat it as empty, the next open replaces it.

Exclusion
---------
``open``/``create`` take ``flock(LOCK_EX|LOCK_NB)`` on ``journal.lock``; the kernel releases
it when the process dies. A flock is per open file description, so a second open in the same
process is refused too (``Locked``, naming the holder written into the lock file). Reads take
no lock: they open the active file first, then read the manifest, and retry if the manifest
generation changed while they read.

Recovery rules
--------------
* Torn tail: bytes written after the last acknowledgement, as a crash leaves them
  (``segments.tail_end``). A kill stops a write part way: the bytes after the last newline
  are a strict prefix of a line (the front of a record's bytes, or a complete record and the
  front of its checksum; a record missing only its newline counts). A power cut can leave
  zero-filled sectors: the first line holding a NUL byte starts a torn tail when its first
  NUL run starts at that line or on a 512-byte boundary, ends at the end of the file or on
  such a boundary (and is then longer than one byte: a lone NUL is a changed byte), and the
  bytes before it in the line are such a prefix. Readers skip a torn tail. An
  open for append copies it to ``journal.jsonl.broken`` (``.1``, ``.2`` … if taken), fsyncs
  the copy, truncates the journal to the last complete record, fsyncs, and reports it as
  ``Journal.repair``. The next record is written at that length, on a line of its own.
* Damaged tail: anything else after the last good line is damage, not a tear, because no
  crash writes it: a complete line that fails its checksum, parse or chain (a flipped byte),
  a complete record followed by other bytes (a changed newline merging two lines or trailing
  the last). It is reported like interior damage (below); nothing is cut, and the open is
  refused, so no append can reuse an acknowledged seq.
* Structural check: every read and open stats the sealed segments it does not walk
  (``segments.sealed_problem``): one missing or of another size than its manifest entry is
  ``StoreCorrupted`` without reading any body; one whose mtime is not the one sealed is read
  once and compared with its sealed digest (a match is a restored copy). Rot in place is the
  background scrubber's to find (``file.scrub``, docs/design.md#scrubbing).
* Interior damage — a line that does not decode to a canonical record or fails its
  checksum, a seq out of order, a hash-chain break not covered by an anchor, a sealed
  segment with a partial line or disagreeing with its manifest entry, a listed segment
  missing, an unlisted segment that is not an interrupted seal — raises ``StoreCorrupted``
  naming run, file, line and seq. A run is never read as a shorter history. Reads re-encode
  only the last record to prove it canonical: any other record whose bytes changed since
  they were written fails its checksum and breaks the chain at the record after it (or
  disagrees with its segment's manifest entry); ``verify`` and recovery re-encode every
  record (``segments.ChainReader``).
* Missing records: the writer writes the listing cache (``meta.json``) after the run's
  first record, at each seal and when it closes, always from acknowledged records; only a
  prune or a recovery (which keep or raise the last seq) removes it. Its ``last_seq`` is
  therefore a floor: a run whose files end below it lost acknowledged records (an active
  segment deleted or cut at a line boundary) and is ``StoreCorrupted``, as is a run whose
  manifest lists segments but whose active segment is gone. Such a run still ``exists``
  (an Open resumes and refuses it rather than creating a new run over it).
* ``recover(run_id, quarantine_dir)`` (``journald recover``, with the run locked) moves the
  damaged lines out of the run (their bytes, as stored, to a new directory outside it) and
  rewrites the volume without them, each hole anchored in the manifest. It then records the
  hole in the run itself: a rebase with reason ``quarantine`` whose ``covered`` is the range
  no longer in the run and whose messages are the conversation rebuilt from the records that
  survived (``fold.rebuilt_after_quarantine``), written in the same volume. Its seq is above
  every seq the run may have acknowledged: the damaged ones (two for a line that merged two
  records), the listing's floor and, when the active segment is gone, every seq it could have
  held before its seal. It returns a ``QuarantineReport`` (positions and hashes, no text). A
  run whose meta record is damaged or missing is refused (nothing to rebuild it from).
* Prune (explicit, ``prune``): the new volume (meta + latest rebase onward) is staged in
  ``journal.jsonl.staged`` and fsynced; the manifest committing it (``pending``, a ``prune``
  anchor with the dropped range and the rebase's prev hash) is written atomically; then the
  staged file is renamed over ``journal.jsonl``, old segments are removed and the manifest is
  rewritten without ``pending``. Before the commit a crash rolls back (the staged file is
  removed on the next open); after it readers read the staged volume alone, and the next open
  finishes the rename. seqs keep growing after a prune and are never reused; a retry of a
  pruned seq is ``SeqConflict``. ``verify`` accepts the gap only through the anchor, so a
  pruned run still verifies and any other break is still corruption. The ``pre_prune``
  checkpoint belongs to the checkpoint store: pass it as ``prune(run_id, before=...)``; it
  runs with the run locked and read, before anything changes, and its failure aborts.

Modules: ``segments`` (manifest, line format, the strict chain reader, durable-write helpers),
``file_journal`` (the append handle: group commit, durable writes, sealing), ``file_reads``
(snapshots and the checked walk of the chain; tail reads that start at their seq; what an open
reuses of the read before it; info, listing, verify), ``file_maintenance`` (prune, recovery,
tail repair), this module (the store: layout, locks, settling, opening). Damage is logged
(``journald.storage.file``): each repair at WARNING, each ``StoreCorrupted`` at ERROR the
first time. Failpoints: ``journald.failpoints``.
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
from journald.storage.base import (
    DEFAULT_GAP_WAIT_S,
    FSYNC_LOCAL,
    QuarantineReport,
    RepairReport,
    RunInfo,
    VerifyReport,
)
from journald.storage.file.errors import data_dir_gone, disk_error, vanished
from journald.storage.file.journal import (
    FileJournal,
    OpenState,
    SegmentStats,
    read_file,
)
from journald.storage.file.maintenance import FileMaintenance, PrePrune, PruneReport
from journald.storage.file.reads import (
    FileReads,
    Records,
    has_records,
    listed_last_seq,
    missing_active,
    records_missing,
)
from journald.storage.file.segments import (
    DIR_MODE,
    FILE_MODE,
    JOURNAL,
    LOCK,
    MANIFEST,
    RUN_FORMAT,
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
    sealed_problem,
    split_complete,
    tail_end,
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
log = logging.getLogger(__name__)
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
        self._open: dict[str, FileJournal] = {}
        self._logged: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._logged_lock = threading.Lock()  # _list logs from a worker thread

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
        self, run_id: str, quarantine_dir: str | os.PathLike[str] | None = None
    ) -> QuarantineReport:
        """See ``FileMaintenance.recover``."""
        return await self.maintenance.recover(run_id, quarantine_dir)

    def forget(self, run_id: str, journal: FileJournal) -> None:
        if self._open.get(run_id) is journal:
            del self._open[run_id]

    def _lock(self, run_id: str, run_dir: str) -> int:
        if run_id in self._open:
            raise Locked(
                f"run {run_id} is already open for append in this daemon; end that lease first",
                metadata={"run_id": run_id},
            )
        fd = os.open(os.path.join(run_dir, LOCK), os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise Locked(
                f"run {run_id} is open for append by another process ({holder}); end that "
                "lease or wait for it to exit",
                metadata={"run_id": run_id, "holder": holder},
            ) from None
        except BaseException:
            os.close(fd)
            raise
        info = f"pid={os.getpid()} host={socket.gethostname()} since={utc_ts()}\n".encode()
        self.disk.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
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
        for name in os.listdir(run_dir):
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
        on_disk = sorted(os.listdir(seg_dir)) if os.path.isdir(seg_dir) else []
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
            data = read_file(path)
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
            for name in os.listdir(seg_dir):
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
        path = os.path.join(run_dir, JOURNAL)
        try:
            data = read_file(path)
        except FileNotFoundError:
            if m.segments:
                raise missing_active(run_id, path, m) from None
            data = b""
        end = tail_end(data)
        tail = self.reads.active_tail(run_id, m, path, data[:end])  # damage refuses here, unchanged
        stats = tail.stats
        last_seq, last_hash = (
            (stats.last_seq, stats.last_hash) if stats.records else m.active_start()
        )
        if last_seq < floor:
            raise records_missing(run_id, path, last_seq, floor)
        report = None
        if end < len(data):
            report = self.maintenance.repair_tail(run_id, run_dir, data, end)
            report = RepairReport(report.file, report.dropped_bytes, report.broken_copy, last_seq)
        meta = None
        if m.segments:
            meta = self.reads.first_record(
                run_id, os.path.join(run_dir, SEGMENTS, m.segments[0].file)
            )
        elif tail.first is not None and tail.first.seq == 1:
            meta = tail.first
        if m.run_format < RUN_FORMAT and last_seq > 0:
            # the run's format, before this writer's first framed line (a run made before
            # format identity, or before line framing, that an older journald may also serve)
            m = Manifest(m.generation + 1, m.segments, m.anchors)
            write_manifest(self.disk, run_dir, m)
        return OpenState(m, end, stats, last_seq, last_hash, meta, tail.recent, report)

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
                os.close(lock)
                raise SessionExists(
                    f"run {run_id} already exists; resume it or pick another id",
                    metadata={"run_id": run_id},
                )
            m = Manifest(generation=1)
            try:
                fd = os.open(os.path.join(run_dir, JOURNAL), os.O_WRONLY | os.O_CREAT, FILE_MODE)
                self.disk.ftruncate(fd, 0)  # a create that crashed before its meta was durable
                os.close(fd)
                # the run's format before its first line; the first write fsyncs the run
                # directory before it is acknowledged, which makes the rename durable too
                self.disk.atomic_write(os.path.join(run_dir, MANIFEST), m.encode(), sync_dir=False)
            except BaseException:
                os.close(lock)
                raise
            return lock, OpenState(m, 0, SegmentStats(), 0, GENESIS, None)

        def start() -> FileJournal:
            lock, st = prepare()
            try:
                return FileJournal(self, run_id, lock, st, first=True)
            except BaseException:
                os.close(lock)
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
                os.close(lock)
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
            read_manifest, run_dir, run_id, run_id=run_id, action="reading the run's manifest"
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
            os.close(lock)
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
