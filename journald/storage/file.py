"""File backend: the embedded default store (SPEC §7).

Layout
------
::

    <data_dir>/                      0700  default: default_data_dir()
      sessions/                      0700
        <run_id>/                    0700  run id checked by records.validate_id first
          journal.jsonl              0600  active segment: one canonical record + "\\n" per line
          segments/000001.jsonl      0600  sealed segments (immutable once listed)
          manifest.json              0600  segment list + chain anchors (absent: single volume)
          meta.json                  0600  listing cache (never truth; ignored when stale)
          journal.lock               0600  flock of the append handle; holds "pid host since"
          journal.jsonl.broken[.N]   0600  torn tails cut by a repair
          journal.jsonl.staged       0600  a prune/recovery volume being put in place
          checkpoints/                     (owned by the checkpoint store)
      quarantine/<run_id>-<stamp>/         recovery evidence, outside every run

A record is one line: its canonical JSON bytes (``journald.records``) followed by ``\\n``.
A line without its newline is not a record.

Manifest (``journald-manifest/1``, JSON): ``generation`` (bumped by every write), ``segments``
(in order: file, first_seq, last_seq, records, messages, bytes, first_hash, last_hash,
first_prev), ``anchors`` (legitimate chain breaks: after_seq/after_hash → resume_seq/
resume_prev, reason ``prune`` or ``quarantine``, dropped_from..dropped_to), and ``pending``
while a volume replacement is committed but not settled. The active segment continues the
chain from the last sealed segment (or from seq 0 / the genesis hash).

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
* Torn tail: bytes after the last newline of ``journal.jsonl``, or a final complete line that
  is not JSON. Readers skip it. An open for append copies it to ``journal.jsonl.broken``
  (``.1``, ``.2`` … if taken), fsyncs the copy, truncates the journal to the last complete
  record, fsyncs, and reports it as ``Journal.repair``. The next record is written at that
  length, on a line of its own.
* Interior damage — a line that does not decode to a canonical record, a seq out of order, a
  hash-chain break not covered by an anchor, a sealed segment with a partial line or
  disagreeing with its manifest entry, a listed segment missing, an unlisted segment that is
  not an interrupted seal — raises ``StoreCorrupted`` naming run, file, line and seq. A run is
  never read as a shorter history.
* ``recover(run_id, quarantine_dir)`` moves damaged interior records out of the run (raw
  bytes to a directory outside it), rewrites the volume without them and anchors each hole
  in the manifest; it returns a ``QuarantineReport`` (positions and hashes, no text).
* Prune (explicit, ``prune``): the new volume (meta + latest rebase onward) is staged in
  ``journal.jsonl.staged`` and fsynced; the manifest committing it (``pending``, a ``prune``
  anchor with the dropped range and the rebase's prev hash) is written atomically; then the
  staged file is renamed over ``journal.jsonl``, old segments are removed and the manifest is
  rewritten without ``pending``. Before the commit a crash rolls back (the staged file is
  removed on the next open); after it readers read the staged volume alone, and the next open
  finishes the rename. seqs keep growing after a prune and are never reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import logging
import os
import queue
import shutil
import socket
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from journald import failpoints
from journald.errors import (
    BackendUnavailable,
    InvalidRecord,
    JournaldError,
    Locked,
    SeqConflict,
    SessionExists,
    SessionNotFound,
    StoreCorrupted,
)
from journald.records import GENESIS, Record, decode, sha256_hex, validate_id
from journald.storage.base import (
    DEFAULT_GAP_WAIT_S,
    FSYNC_LOCAL,
    AppendResult,
    QuarantineReport,
    RepairReport,
    RunInfo,
    VerifyReport,
)
from journald.storage.common import SeqTurnstile, plan_append
from journald.storage.info import run_info_from
from journald.storage.segments import (
    BROKEN,
    DIR_MODE,
    FILE_MODE,
    JOURNAL,
    LOCK,
    META_CACHE,
    SEGMENTS,
    STAGED,
    Anchor,
    ChainReader,
    Line,
    Manifest,
    SegmentInfo,
    atomic_write,
    corrupted,
    file_lines,
    fsync_dir,
    message_count,
    read_manifest,
    split_active,
    split_complete,
    storage_error,
    write_all,
    write_manifest,
)

T = TypeVar("T")
MiB = 1024 * 1024
MISSING = b"\0missing"
log = logging.getLogger(__name__)
RECENT = 1024  # records kept in memory per journal for idempotent-retry comparisons
Files = list[tuple[str, bytes, SegmentInfo | None]]
Records = list[Record]
Infos = list[RunInfo]
PrePrune = Callable[[str, Sequence[Record]], Awaitable[None]]


def default_data_dir() -> Path:
    """``$XDG_STATE_HOME/journald``, else ``~/.local/state/journald``; never the cwd."""
    xdg = os.environ.get("XDG_STATE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "journald"


@dataclass(frozen=True, slots=True)
class PruneReport:
    run_id: str
    pruned: bool
    rebase_seq: int = 0
    dropped_from: int = 0
    dropped_to: int = 0
    dropped_records: int = 0
    kept_records: int = 0


# --- blocking I/O off the event loop -------------------------------------------------------


class _ThreadIO:
    """A dedicated writer thread per journal (FIFO, so writes keep their order)."""

    def __init__(self, name: str) -> None:
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._t = threading.Thread(target=self._loop, name=name, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, args, loop, fut = item
            try:
                res = fn(*args)
            except BaseException as exc:
                loop.call_soon_threadsafe(_settle_exc, fut, exc)
            else:
                loop.call_soon_threadsafe(_settle_ok, fut, res)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self._q.put((fn, args, loop, fut))
        return await fut

    def stop(self) -> None:
        self._q.put(None)
        self._t.join(timeout=5)


class _ExecutorIO:
    """``asyncio.to_thread`` on the loop's default executor."""

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)

    def stop(self) -> None:
        pass


def _settle_ok(fut: asyncio.Future[Any], res: Any) -> None:
    if not fut.done():
        fut.set_result(res)


def _settle_exc(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


# --- per-run state -----------------------------------------------------------------------


@dataclass(slots=True)
class _Stats:
    """Running figures of the active segment (become its manifest entry when sealed)."""

    records: int = 0
    messages: int = 0
    first_seq: int = 0
    first_hash: str = ""
    first_prev: str = ""
    last_seq: int = 0
    last_hash: str = ""

    def add(self, rec: Record) -> None:
        if not self.records:
            self.first_seq, self.first_hash, self.first_prev = rec.seq, rec.hash, rec.prev
        self.records += 1
        self.messages += message_count(rec)
        self.last_seq, self.last_hash = rec.seq, rec.hash

    def segment(self, name: str, size: int) -> SegmentInfo:
        return SegmentInfo(
            name,
            self.first_seq,
            self.last_seq,
            self.records,
            self.messages,
            size,
            self.first_hash,
            self.last_hash,
            self.first_prev,
        )


@dataclass(slots=True)
class _OpenState:
    manifest: Manifest
    size: int
    stats: _Stats
    last_seq: int
    last_hash: str
    meta: Record | None
    recent: list[Record] = field(default_factory=list)
    repair: RepairReport | None = None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _unique(path: str) -> str:
    if not os.path.exists(path):
        return path
    for i in range(1, 10_000):
        cand = f"{path}.{i}"
        if not os.path.exists(cand):
            return cand
    return f"{path}.{uuid.uuid4().hex}"


class FileJournal:
    """The exclusive append handle of one run in a ``FileStore``."""

    durability = FSYNC_LOCAL

    def __init__(
        self, store: FileStore, run_id: str, lock_fd: int, st: _OpenState, first: bool
    ) -> None:
        self.run_id = run_id
        self._store = store
        self._dir = store.run_dir(run_id)
        self._path = os.path.join(self._dir, JOURNAL)
        self._lock_fd = lock_fd
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
        self._manifest = st.manifest
        self._size = st.size
        self._stats = st.stats
        self._meta = st.meta
        self._last_seq, self._last_hash = st.last_seq, st.last_hash
        self._q_seq, self._q_hash = st.last_seq, st.last_hash
        self._recent: OrderedDict[int, Record] = OrderedDict((r.seq, r) for r in st.recent)
        self._repair = st.repair
        self._first_write = first
        self._turn = SeqTurnstile(st.last_seq + 1)
        self._plan_lock = asyncio.Lock()
        self._queue: list[tuple[list[Record], asyncio.Future[None]]] = []
        self._tail: asyncio.Future[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._io: _ThreadIO | _ExecutorIO = (
            _ThreadIO(f"journald-writer-{run_id[:32]}") if store.io == "thread" else _ExecutorIO()
        )
        self._poisoned: JournaldError | None = None
        self.commits = 0
        """Durable writes (write + fdatasync) done; group commit makes it < appends."""
        self._closed = False

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def last_hash(self) -> str:
        return self._last_hash

    @property
    def repair(self) -> RepairReport | None:
        return self._repair

    # -- append ----------------------------------------------------------------------------

    async def append(self, records: Sequence[Record]) -> list[AppendResult]:
        if self._closed:
            raise Locked(
                f"journal of run {self.run_id} is closed; open it again",
                metadata={"run_id": self.run_id},
            )
        if self._poisoned is not None:
            raise self._poisoned
        if not records:
            plan_append(records, self._q_seq, self._q_hash, {}, self.run_id)
        await self._turn.wait_for(records[0].seq, self._store.gap_wait_s, self.run_id)
        for _ in range(len(records) + 64):
            async with self._plan_lock:
                inflight = self._q_seq > self._last_seq
                overlaps = records[0].seq <= self._q_seq and records[-1].seq > self._last_seq
                if not (inflight and overlaps):
                    stored = {
                        r.seq: await self._stored(r.seq) for r in records if r.seq <= self._q_seq
                    }
                    dups, new = plan_append(records, self._q_seq, self._q_hash, stored, self.run_id)
                    fut: asyncio.Future[None] | None = None
                    if new:
                        fut = asyncio.get_running_loop().create_future()
                        self._queue.append((new, fut))
                        self._tail = fut
                        self._q_seq, self._q_hash = new[-1].seq, new[-1].hash
                        await self._turn.advance(self._q_seq + 1)
                        if self._flusher is None:
                            self._flusher = asyncio.create_task(self._flush())
                    break
                tail = self._tail
            if tail is not None:
                await asyncio.wait([tail])
        else:  # pragma: no cover - every queued batch settles
            raise BackendUnavailable(f"run {self.run_id}: append could not be scheduled")
        if fut is not None:
            await fut
        return [AppendResult(r.seq, r.hash, FSYNC_LOCAL, True) for r in dups] + [
            AppendResult(r.seq, r.hash, FSYNC_LOCAL) for r in new
        ]

    async def _stored(self, seq: int) -> Record:
        rec = self._recent.get(seq)
        if rec is not None:
            return rec
        for r in await self._store.load(self.run_id, seq):
            if r.seq == seq:
                return r
        raise SeqConflict(
            f"run {self.run_id}: seq {seq} was pruned or quarantined and the journal is at "
            f"seq {self._last_seq}; continue at seq {self._last_seq + 1}",
            metadata={"run_id": self.run_id, "seq": seq, "last_seq": self._last_seq},
        )

    async def _flush(self) -> None:
        try:
            while self._queue:
                group, self._queue = self._queue, []
                new = [r for batch, _ in group for r in batch]
                data = b"".join(r.raw + b"\n" for r in new)
                try:
                    await self._io.run(self._write_durable, data, new[0].seq)
                except Exception as exc:
                    err = (
                        exc
                        if isinstance(exc, JournaldError)
                        else BackendUnavailable(f"run {self.run_id}: write failed: {exc!r}")
                    )
                    for _, fut in group + self._queue:
                        _settle_exc(fut, err)
                    self._queue = []
                    self._q_seq, self._q_hash = self._last_seq, self._last_hash
                    self._turn.next_seq = self._last_seq + 1
                    continue
                for r in new:
                    self._stats.add(r)
                    self._recent[r.seq] = r
                    if self._meta is None:
                        self._meta = r
                while len(self._recent) > RECENT:
                    self._recent.popitem(last=False)
                self._last_seq, self._last_hash = new[-1].seq, new[-1].hash
                if self._should_seal():
                    # Sealed before the acknowledgement so an acked append finds the run
                    # settled; the records are durable either way. A seal that fails before
                    # its manifest rolls back (retried after the next append); after it, the
                    # journal refuses appends until reopened (the open completes the seal).
                    try:
                        await self._io.run(self._seal)
                    except Exception as exc:
                        log.warning("run %s: sealing a segment failed: %r", self.run_id, exc)
                for _, fut in group:
                    _settle_ok(fut, None)
        finally:
            self._flusher = None

    def _write_durable(self, data: bytes, seq: int) -> None:
        pre = self._size
        try:
            if failpoints.ARMED:
                failpoints.hit("before_write")
            end = write_all(self._fd, data, pre)
            if failpoints.ARMED:
                failpoints.hit("after_write_before_fsync")
            os.fdatasync(self._fd)
            if self._first_write:
                fsync_dir(self._dir)
                fsync_dir(os.path.dirname(self._dir))
                self._first_write = False
            if failpoints.ARMED:
                failpoints.hit("after_fsync_before_advance")
        except OSError as exc:
            try:
                os.ftruncate(self._fd, pre)
                os.fdatasync(self._fd)
            except OSError:
                pass
            raise storage_error(exc, self.run_id, self._path, seq) from exc
        self._size = end
        self.commits += 1

    def _should_seal(self) -> bool:
        s = self._store
        return (
            s.segmentation
            and self._stats.records > 0
            and (self._stats.records >= s.segment_max_records or self._size >= s.segment_max_bytes)
        )

    def _seal(self) -> None:
        m = self._manifest
        name = f"{len(m.segments) + 1:06d}.jsonl"
        seg_dir = os.path.join(self._dir, SEGMENTS)
        if not os.path.isdir(seg_dir):
            os.mkdir(seg_dir, DIR_MODE)
            fsync_dir(self._dir)
        seg = os.path.join(seg_dir, name)
        try:
            os.link(self._path, seg)
        except FileExistsError:
            if not os.path.samefile(self._path, seg):
                raise
        fsync_dir(seg_dir)
        if failpoints.ARMED:
            failpoints.hit("mid_seal")
        nm = Manifest(
            m.generation + 1,
            [*m.segments, self._stats.segment(name, self._size)],
            list(m.anchors),
        )
        try:
            write_manifest(self._dir, nm)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(seg)
            raise
        self._manifest = nm
        try:
            if failpoints.ARMED:
                failpoints.hit("after_seal_manifest")
            atomic_write(self._path, b"")
            fd = os.open(self._path, os.O_WRONLY, FILE_MODE)
        except OSError as exc:
            self._poisoned = BackendUnavailable(
                f"run {self.run_id}: sealing segment {name} stopped half way ({exc}); end this "
                "lease and open the run again (the open completes the seal)",
                metadata={"run_id": self.run_id},
            )
            raise
        os.close(self._fd)
        self._fd = fd
        self._size = 0
        self._stats = _Stats()
        self._write_cache()

    def _write_cache(self) -> None:
        if self._meta is None or not self._recent:
            return
        last = self._recent[next(reversed(self._recent))]
        count = sum(s.records for s in self._manifest.segments) + self._stats.records
        size = sum(s.bytes for s in self._manifest.segments) + self._size
        info = run_info_from(self.run_id, self._meta, last, count, size)
        st = os.fstat(self._fd)
        obj = {
            "info": {k: getattr(info, k) for k in RunInfo.__dataclass_fields__},
            "journal_ino": st.st_ino,
            "journal_size": self._size,
            "generation": self._manifest.generation,
        }
        with contextlib.suppress(OSError):  # a cache: list() recomputes it when stale
            atomic_write(
                os.path.join(self._dir, META_CACHE),
                json.dumps(obj, sort_keys=True).encode(),
                sync=False,
            )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        flusher = self._flusher
        if flusher is not None:
            await asyncio.wait([flusher])
        try:
            await self._io.run(self._write_cache)
        finally:
            self._io.stop()
            os.close(self._fd)
            os.close(self._lock_fd)
            self._store.forget(self.run_id, self)


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
        io: str = "thread",
        quarantine_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if io not in ("thread", "executor"):
            raise ValueError("io must be 'thread' or 'executor'")
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
        self.io = io
        self.segment_opens = 0
        """Sealed segment files opened by reads (lets tests prove paging reads the tail)."""
        for d in (self.data_dir, self.sessions_dir):
            if not os.path.isdir(d):
                os.makedirs(d, DIR_MODE, exist_ok=True)
                os.chmod(d, DIR_MODE)
        self._open: dict[str, FileJournal] = {}

    # -- paths and locks -------------------------------------------------------------------

    def run_dir(self, run_id: str) -> str:
        return os.path.join(self.sessions_dir, validate_id(run_id))

    def forget(self, run_id: str, journal: FileJournal) -> None:
        if self._open.get(run_id) is journal:
            del self._open[run_id]

    def _not_found(self, run_id: str) -> SessionNotFound:
        return SessionNotFound(
            f"run {run_id} does not exist in {self.sessions_dir}; list runs with `journald ls`",
            metadata={"run_id": run_id},
        )

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
        info = f"pid={os.getpid()} host={socket.gethostname()} since={_now()}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        return fd

    def _lock_existing(self, run_id: str, run_dir: str, outside: str = "") -> int:
        if not os.path.isdir(run_dir):
            raise self._not_found(run_id)
        real = os.path.realpath(run_dir)
        if outside and os.path.commonpath([os.path.realpath(outside), real]) == real:
            raise ValueError(f"the quarantine directory {outside} must be outside the run {real}")
        return self._lock(run_id, run_dir)

    # -- recovery on open ------------------------------------------------------------------

    def _settle(self, run_id: str, run_dir: str) -> Manifest:
        """Finish or roll back interrupted seals and volume replacements; drop temp files."""
        for name in os.listdir(run_dir):
            if ".tmp-" in name:
                os.unlink(os.path.join(run_dir, name))
        path = os.path.join(run_dir, JOURNAL)
        m = read_manifest(run_dir, run_id)
        if m is not None and m.pending:
            self._finish_replace(run_dir, run_id, m)
            return m
        staged = os.path.join(run_dir, STAGED)
        if os.path.exists(staged):
            os.unlink(staged)  # an uncommitted prune/recovery: roll back
        m = m or Manifest()
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
            stats = _Stats()
            data = _read(path)
            end = split_complete(data)[1]
            for _, rec in self._chain(run_id, m, file_lines(seg, data), start_seq, start_hash):
                stats.add(rec)
            if end != len(data) or not stats.records:
                os.unlink(seg)  # never sealed a partial file; roll the seal back
                fsync_dir(seg_dir)
                continue
            m = Manifest(m.generation + 1, [*m.segments, stats.segment(name, end)], m.anchors)
            write_manifest(run_dir, m)
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
            atomic_write(path, b"")  # finish a seal interrupted after its manifest
        return m

    def _finish_replace(self, run_dir: str, run_id: str, m: Manifest) -> None:
        staged = os.path.join(run_dir, m.pending)
        if os.path.exists(staged):
            os.replace(staged, os.path.join(run_dir, JOURNAL))
            fsync_dir(run_dir)
        if failpoints.ARMED:
            failpoints.hit("after_prune_rename")
        seg_dir = os.path.join(run_dir, SEGMENTS)
        if os.path.isdir(seg_dir):
            for name in os.listdir(seg_dir):
                os.unlink(os.path.join(seg_dir, name))
            fsync_dir(seg_dir)
        m.pending = ""
        m.segments = []
        m.generation += 1
        write_manifest(run_dir, m)

    def _repair_tail(self, run_id: str, run_dir: str, data: bytes, end: int) -> RepairReport:
        path = os.path.join(run_dir, JOURNAL)
        broken = _unique(os.path.join(run_dir, BROKEN))
        fd = os.open(broken, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            write_all(fd, data[end:], 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(run_dir)
        if failpoints.ARMED:
            failpoints.hit("mid_repair")
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, end)
            os.fsync(fd)
        finally:
            os.close(fd)
        return RepairReport(path, len(data) - end, broken, 0)

    def _chain(
        self, run_id: str, m: Manifest, lines: Any, start_seq: int, start_hash: str
    ) -> ChainReader:
        pos = None
        if m.segments and start_seq == m.segments[-1].last_seq:
            last = m.segments[-1]
            pos = Line(
                os.path.join(self.sessions_dir, run_id, SEGMENTS, last.file), last.records, b""
            )
        return ChainReader(run_id, lines, start_seq, start_hash, pos, m.anchor_after())

    def _open_state(self, run_id: str, run_dir: str) -> _OpenState:
        m = self._settle(run_id, run_dir)
        path = os.path.join(run_dir, JOURNAL)
        data = _read(path) if os.path.exists(path) else b""
        end = split_active(data)[1]
        report = None
        if end < len(data):
            report = self._repair_tail(run_id, run_dir, data, end)
        start_seq, start_hash = m.active_start()
        stats = _Stats()
        recent: list[Record] = []
        for _, rec in self._chain(run_id, m, file_lines(path, data[:end]), start_seq, start_hash):
            stats.add(rec)
            recent.append(rec)
            if len(recent) > 2 * RECENT:
                del recent[:RECENT]
        last_seq, last_hash = (
            (stats.last_seq, stats.last_hash)
            if stats.records
            else (
                start_seq,
                start_hash,
            )
        )
        if report is not None:
            report = RepairReport(report.file, report.dropped_bytes, report.broken_copy, last_seq)
        meta = None
        if m.segments:
            first = os.path.join(run_dir, SEGMENTS, m.segments[0].file)
            with open(first, "rb") as f:
                meta = decode(f.readline().rstrip(b"\n"))
        elif recent and recent[0].seq == 1:
            meta = recent[0]
        return _OpenState(m, end, stats, last_seq, last_hash, meta, recent[-RECENT:], report)

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

        def prepare() -> tuple[int, _OpenState]:
            try:
                os.mkdir(run_dir, DIR_MODE)
            except FileExistsError:
                if self._has_records(run_dir):
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
            if self._has_records(run_dir):
                os.close(lock)
                raise SessionExists(
                    f"run {run_id} already exists; resume it or pick another id",
                    metadata={"run_id": run_id},
                )
            fd = os.open(os.path.join(run_dir, JOURNAL), os.O_WRONLY | os.O_CREAT, FILE_MODE)
            os.ftruncate(fd, 0)  # a create that crashed before its meta was durable
            os.close(fd)
            return lock, _OpenState(Manifest(), 0, _Stats(), 0, GENESIS, None)

        lock, st = await asyncio.to_thread(prepare)
        journal = FileJournal(self, run_id, lock, st, first=True)
        self._open[run_id] = journal
        try:
            await journal.append([meta])
        except BaseException:
            await journal.close()
            await asyncio.to_thread(shutil.rmtree, run_dir, True)
            raise
        return journal

    def _has_records(self, run_dir: str) -> bool:
        if os.path.exists(os.path.join(run_dir, "manifest.json")):
            return True
        try:
            return os.path.getsize(os.path.join(run_dir, JOURNAL)) > 0
        except FileNotFoundError:
            return False

    async def open(self, run_id: str) -> FileJournal:
        run_dir = self.run_dir(run_id)
        lock = await asyncio.to_thread(self._lock_existing, run_id, run_dir)
        try:
            st = await asyncio.to_thread(self._open_state, run_id, run_dir)
            if st.last_seq == 0:
                raise self._not_found(run_id)
            journal = FileJournal(self, run_id, lock, st, first=False)
        except BaseException:
            os.close(lock)
            raise
        self._open[run_id] = journal
        return journal

    async def exists(self, run_id: str) -> bool:
        run_dir = self.run_dir(run_id)
        return await asyncio.to_thread(self._has_records, run_dir)

    async def iter_records(self, run_id: str, from_seq: int = 1) -> AsyncIterator[Record]:
        for rec in await asyncio.to_thread(self._read_records, run_id, from_seq):
            yield rec

    async def load(self, run_id: str, from_seq: int = 1) -> Records:
        return await asyncio.to_thread(self._read_records, run_id, from_seq)

    async def info(self, run_id: str) -> RunInfo:
        return await asyncio.to_thread(self._info, run_id)

    async def list(self) -> list[RunInfo]:
        return await asyncio.to_thread(self._list)

    async def delete(self, run_id: str) -> bool:
        run_dir = self.run_dir(run_id)
        return await asyncio.to_thread(self._delete, run_id, run_dir)

    async def verify(self, run_id: str) -> VerifyReport:
        return await asyncio.to_thread(self._verify, run_id)

    async def close(self) -> None:
        for journal in list(self._open.values()):
            await journal.close()

    # -- explicit maintenance --------------------------------------------------------------

    async def prune(self, run_id: str, *, before: PrePrune | None = None) -> PruneReport:
        """Rewrite a run to its meta record plus everything from its latest rebase onward.

        ``before(run_id, records)`` runs after the run is locked and read, before anything
        changes: the checkpoint store hooks its ``pre_prune`` checkpoint here (its failure
        aborts the prune). Refused with ``Locked`` while the run is open for append.
        """
        run_dir = self.run_dir(run_id)
        lock = await asyncio.to_thread(self._lock_existing, run_id, run_dir)
        try:
            await asyncio.to_thread(self._open_state, run_id, run_dir)
            records = await asyncio.to_thread(self._read_records, run_id, 1)
            rebases = [r for r in records if r.kind == "rebase"]
            if (
                not records
                or not rebases
                or rebases[-1].seq <= 2
                or records[1].seq >= rebases[-1].seq
            ):
                return PruneReport(run_id, False)
            if before is not None:
                await before(run_id, records)
            rb = rebases[-1]
            meta = records[0]
            kept = [meta] + [r for r in records if r.seq >= rb.seq]
            m = read_manifest(run_dir, run_id) or Manifest()
            anchors = [a for a in m.anchors if a.after_seq >= rb.seq]
            anchors.insert(
                0, Anchor(meta.seq, meta.hash, rb.seq, rb.prev, "prune", meta.seq + 1, rb.seq - 1)
            )
            await asyncio.to_thread(
                self._replace_volume, run_id, run_dir, m, [r.raw for r in kept], anchors
            )
            return PruneReport(
                run_id, True, rb.seq, meta.seq + 1, rb.seq - 1, len(records) - len(kept), len(kept)
            )
        finally:
            os.close(lock)

    def _replace_volume(
        self,
        run_id: str,
        run_dir: str,
        m: Manifest,
        lines: Sequence[bytes],
        anchors: Sequence[Anchor],
    ) -> None:
        staged = os.path.join(run_dir, STAGED)
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            write_all(fd, b"".join(raw + b"\n" for raw in lines), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(run_dir)
        if failpoints.ARMED:
            failpoints.hit("mid_prune_stage")
        nm = Manifest(m.generation + 1, [], list(anchors), STAGED)
        write_manifest(run_dir, nm)  # the commit point
        if failpoints.ARMED:
            failpoints.hit("mid_prune_rename")
        self._finish_replace(run_dir, run_id, nm)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(run_dir, META_CACHE))

    async def recover(
        self, run_id: str, quarantine_dir: str | os.PathLike[str] | None = None
    ) -> QuarantineReport:
        """Recovery mode: move damaged interior records out of the run (see module doc)."""
        qdir = str(quarantine_dir if quarantine_dir is not None else self.quarantine_dir)
        run_dir = self.run_dir(run_id)
        lock = await asyncio.to_thread(self._lock_existing, run_id, run_dir, qdir)
        try:
            return await asyncio.to_thread(self._recover, run_id, run_dir, qdir)
        finally:
            os.close(lock)

    def _recover(self, run_id: str, run_dir: str, qdir: str) -> QuarantineReport:
        m = self._settle(run_id, run_dir)
        path = os.path.join(run_dir, JOURNAL)
        data = _read(path) if os.path.exists(path) else b""
        lines_a, end = split_active(data)
        if end < len(data):
            self._repair_tail(run_id, run_dir, data, end)
        lines: list[Line] = []
        for s in m.segments:
            seg = os.path.join(run_dir, SEGMENTS, s.file)
            lines.extend(file_lines(seg, _read(seg)))
        lines.extend(Line(path, i, raw) for i, raw in enumerate(lines_a, 1))
        anchors = {a.after_seq: a for a in m.anchors}
        bad: list[tuple[Line, int, str]] = []
        for _ in range(len(lines) + 1):
            reader = ChainReader(run_id, iter(lines), 0, GENESIS, None, anchors)
            try:
                for _ in reader:
                    pass
                break
            except StoreCorrupted as exc:
                idx = next(
                    i
                    for i, ln in enumerate(lines)
                    if ln.file == exc.metadata["file"] and str(ln.line) == exc.metadata["line"]
                )
                bad.append((lines.pop(idx), int(exc.metadata["seq"]), exc.message))
                pred = _decoded(lines[idx - 1]) if idx > 0 else None
                succ = _decoded(lines[idx]) if idx < len(lines) else None
                if succ is not None:
                    p_seq, p_hash = (pred.seq, pred.hash) if pred else (0, GENESIS)
                    anchors[p_seq] = Anchor(
                        p_seq, p_hash, succ.seq, succ.prev, "quarantine", p_seq + 1, succ.seq - 1
                    )
        report = QuarantineReport(run_id)
        if not bad:
            return report
        out = os.path.join(qdir, f"{run_id}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}")
        os.makedirs(out, DIR_MODE, exist_ok=True)
        for i, (ln, seq, why) in enumerate(bad, 1):
            digest = sha256_hex(ln.raw)
            name = f"{i:04d}-seq{seq}-{digest[:16]}.bad"
            fd = os.open(os.path.join(out, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            try:
                write_all(fd, ln.raw, 0)
                os.fsync(fd)
            finally:
                os.close(fd)
            reason = why.split(": ", 1)[-1].split(" (", 1)[0].split(".", 1)[0]
            report.positions.append(
                {
                    "file": ln.file,
                    "line": ln.line,
                    "seq": seq,
                    "sha256": digest,
                    "bytes": len(ln.raw),
                    "evidence": name,
                    "reason": reason,
                }
            )
        fsync_dir(out)
        report.quarantined = len(bad)
        report.directory = out
        kept = [ln.raw for ln in lines]
        live = {_decoded(ln).seq for ln in lines if _decoded(ln) is not None}  # type: ignore[union-attr]
        used = [a for a in anchors.values() if a.after_seq in live or a.after_seq == 0]
        self._replace_volume(run_id, run_dir, m, kept, sorted(used, key=lambda a: a.after_seq))
        return report

    # -- reads -----------------------------------------------------------------------------

    def _snapshot(self, run_id: str, from_seq: int) -> tuple[Manifest, Files, int, str]:
        """A consistent view: the files to read (sealed segments needed for ``from_seq`` and
        the active segment without its torn tail) and the chain state before the first."""
        run_dir = self.run_dir(run_id)
        path = os.path.join(run_dir, JOURNAL)
        for _ in range(16):
            if not os.path.isdir(run_dir):
                raise self._not_found(run_id)
            try:
                afd: int | None = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                afd = None
            try:
                m = read_manifest(run_dir, run_id) or Manifest()
                files: Files = []
                start_seq, start_hash = 0, GENESIS
                if m.pending:
                    staged = os.path.join(run_dir, m.pending)
                    try:
                        data = _read(staged)
                        name = staged
                    except FileNotFoundError:
                        data, name = _read(path), path
                    files.append((name, data[: split_active(data)[1]], None))
                else:
                    segs = m.segments
                    idx = next((i for i, s in enumerate(segs) if s.last_seq >= from_seq), len(segs))
                    if idx > 0:
                        start_seq, start_hash = segs[idx - 1].last_seq, segs[idx - 1].last_hash
                    for s in segs[idx:]:
                        seg = os.path.join(run_dir, SEGMENTS, s.file)
                        try:
                            data = _read(seg)
                        except FileNotFoundError:
                            data = MISSING
                        self.segment_opens += 1
                        files.append((seg, data, s))
                    active = b""
                    if afd is not None:
                        st = os.fstat(afd)
                        same = bool(segs) and any(
                            st.st_ino == s_st.st_ino and st.st_dev == s_st.st_dev
                            for s_st in _stat_last(run_dir, segs)
                        )
                        if not same:
                            with os.fdopen(os.dup(afd), "rb") as f:
                                active = f.read()
                    files.append((path, active[: split_active(active)[1]], None))
                again = read_manifest(run_dir, run_id) or Manifest()
                if again.generation == m.generation:
                    return m, files, start_seq, start_hash
            finally:
                if afd is not None:
                    os.close(afd)
        raise BackendUnavailable(
            f"run {run_id} kept changing while it was read; retry",
            metadata={"run_id": run_id},
        )

    def _iter_checked(self, run_id: str, from_seq: int) -> tuple[Manifest, Files, Records]:
        """Read and check a snapshot; records with seq >= ``from_seq``."""
        m, files, start_seq, start_hash = self._snapshot(run_id, from_seq)
        for name, data, info in files:
            if info is None:
                continue
            if data == MISSING:
                raise corrupted(
                    run_id,
                    Line(name, 0, b""),
                    info.first_seq,
                    "a segment listed in the manifest is missing",
                )
            if not data.endswith(b"\n"):
                raise corrupted(
                    run_id,
                    Line(name, data.count(b"\n") + 1, b""),
                    info.last_seq,
                    "a sealed segment ends in a partial line",
                )
        reader = self._chain(
            run_id,
            m,
            itertools.chain.from_iterable(file_lines(n, d) for n, d, _ in files),
            start_seq,
            start_hash,
        )
        first_info = files[0][2] if files else None
        if first_info is not None and start_seq:
            prev = m.segments[m.segments.index(first_info) - 1]
            reader.pos = Line(self._seg_path(run_id, prev.file), prev.records, b"")
        out: Records = []
        tally: dict[str, list[Any]] = {}
        for line, rec in reader:
            t = tally.setdefault(line.file, [0, ""])
            t[0] += 1
            t[1] = rec.hash
            if rec.seq >= from_seq:
                out.append(rec)
        for name, data, info in files:
            if info is None:
                continue
            count, last_hash = tally.get(name, [0, ""])
            if count != info.records or last_hash != info.last_hash or len(data) != info.bytes:
                raise corrupted(
                    run_id,
                    Line(name, count, b""),
                    info.last_seq,
                    f"the segment holds {count} records ({len(data)} bytes) ending in "
                    f"{str(last_hash)[:12]}, the manifest says {info.records} ({info.bytes} "
                    f"bytes) ending in {info.last_hash[:12]}",
                )
        return m, files, out

    def _seg_path(self, run_id: str, name: str) -> str:
        return os.path.join(self.sessions_dir, run_id, SEGMENTS, name)

    def _read_records(self, run_id: str, from_seq: int) -> Records:
        _, _, out = self._iter_checked(run_id, from_seq)
        if not out and from_seq <= 1:
            raise self._not_found(run_id)
        return out

    def _info(self, run_id: str) -> RunInfo:
        m, files, _ = self._iter_checked(run_id, 1 << 62)
        active = files[-1][1]
        lines, _ = split_complete(active)
        last = decode(lines[-1]) if lines else None
        first = decode(lines[0]) if lines and (m.pending or not m.segments) else None
        if m.segments and not m.pending:
            with open(self._seg_path(run_id, m.segments[0].file), "rb") as f:
                first = decode(f.readline().rstrip(b"\n"))
            if last is None:
                seg = _read(self._seg_path(run_id, m.segments[-1].file))
                last = decode(split_complete(seg)[0][-1])
        if first is None or last is None:
            raise self._not_found(run_id)
        count = sum(s.records for s in m.segments) + len(lines)
        size = sum(s.bytes for s in m.segments) + len(active)
        return run_info_from(run_id, first, last, count, size)

    def _list(self) -> Infos:
        out: Infos = []
        for name in sorted(os.listdir(self.sessions_dir)):
            try:
                validate_id(name)
            except JournaldError:
                continue
            run_dir = os.path.join(self.sessions_dir, name)
            if not os.path.isdir(run_dir) or not self._has_records(run_dir):
                continue
            cached = _cached_info(run_dir)
            if cached is None:
                try:
                    cached = self._info(name)
                except SessionNotFound:
                    continue
            out.append(cached)
        return sorted(out, key=lambda i: i.updated, reverse=True)

    def _delete(self, run_id: str, run_dir: str) -> bool:
        if not os.path.isdir(run_dir):
            return False
        lock = self._lock(run_id, run_dir)
        try:
            trash = os.path.join(self.sessions_dir, f".deleted-{run_id}-{uuid.uuid4().hex[:8]}")
            os.rename(run_dir, trash)
            fsync_dir(self.sessions_dir)
        finally:
            os.close(lock)
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def _verify(self, run_id: str) -> VerifyReport:
        from journald.validation import validate_record

        m, _, recs = self._iter_checked(run_id, 1)
        if not recs:
            raise self._not_found(run_id)
        run_dir = self.run_dir(run_id)
        seg_dir = os.path.join(run_dir, SEGMENTS)
        listed = {s.file for s in m.segments}
        if os.path.isdir(seg_dir) and not m.pending:
            for name in sorted(os.listdir(seg_dir)):
                seg = os.path.join(seg_dir, name)
                active = os.path.join(run_dir, JOURNAL)
                interrupted = (
                    name == f"{len(m.segments) + 1:06d}.jsonl"
                    and os.path.exists(active)
                    and os.path.samefile(seg, active)
                )
                if name not in listed and not interrupted:
                    raise corrupted(
                        run_id, Line(seg, 0, b""), 0, "a segment file not listed in the manifest"
                    )
        for s in m.segments:
            inside = [r for r in recs if s.first_seq <= r.seq <= s.last_seq]
            msgs = sum(message_count(r) for r in inside)
            if not inside or inside[0].hash != s.first_hash or msgs != s.messages:
                raise corrupted(
                    run_id,
                    Line(os.path.join(seg_dir, s.file), 1, b""),
                    s.first_seq,
                    "the segment's first record or message count disagrees with the manifest",
                )
        for rec in recs:
            try:
                validate_record(rec)
            except InvalidRecord as exc:
                raise StoreCorrupted(
                    f"run {run_id}: seq {rec.seq} does not match the record schema ({exc.message})",
                    metadata={"run_id": run_id, "seq": rec.seq},
                ) from exc
        return VerifyReport(len(recs), recs[-1].seq, recs[-1].hash, len(m.segments) + 1)


def _stat_last(run_dir: str, segs: list[SegmentInfo]) -> list[os.stat_result]:
    try:
        return [os.stat(os.path.join(run_dir, SEGMENTS, segs[-1].file))]
    except FileNotFoundError:
        return []


def _decoded(line: Line) -> Record | None:
    try:
        return decode(line.raw)
    except JournaldError:
        return None


def _cached_info(run_dir: str) -> RunInfo | None:
    """The listing row from ``meta.json`` if it still describes the files, else None."""
    try:
        obj = json.loads(_read(os.path.join(run_dir, META_CACHE)))
        st = os.stat(os.path.join(run_dir, JOURNAL))
        m = read_manifest(run_dir, "")
        gen = m.generation if m else 0
        if (
            obj["journal_ino"] != st.st_ino
            or obj["journal_size"] != st.st_size
            or obj["generation"] != gen
        ):
            return None
        return RunInfo(**obj["info"])
    except (OSError, ValueError, TypeError, KeyError, StoreCorrupted):
        return None
