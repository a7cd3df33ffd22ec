"""The append handle of the file backend: group commit, durable writes, sealing.

Format, fsync order and recovery rules: see ``journald.storage.file``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from journald import failpoints, telemetry
from journald.core.errors import BackendUnavailable, JournaldError, Locked, SeqConflict
from journald.core.records import Record
from journald.storage.base import FSYNC_LOCAL, AppendResult, RepairReport, RunInfo
from journald.storage.common import SeqTurnstile, plan_append
from journald.storage.info import run_info_from
from journald.storage.io_pool import settle_exc, settle_ok
from journald.storage.segments import (
    DIR_MODE,
    FILE_MODE,
    JOURNAL,
    META_CACHE,
    SEGMENTS,
    Manifest,
    SegmentInfo,
    atomic_write,
    frame,
    fsync_dir,
    message_count,
    storage_error,
    write_all,
    write_manifest,
)

if TYPE_CHECKING:
    from journald.storage.file import FileStore

log = logging.getLogger(__name__)
RECENT = 1024  # records kept in memory per journal for idempotent-retry comparisons


# --- per-run state -----------------------------------------------------------------------


@dataclass(slots=True)
class SegmentStats:
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
class OpenState:
    manifest: Manifest
    size: int
    stats: SegmentStats
    last_seq: int
    last_hash: str
    meta: Record | None
    recent: list[Record] = field(default_factory=list)
    repair: RepairReport | None = None


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def unique_path(path: str) -> str:
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
        self, store: FileStore, run_id: str, lock_fd: int, st: OpenState, first: bool
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
        self._io = store.io_pool.lane()  # this journal's writes, in order, on shared threads
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
                    stored = await self._stored([r.seq for r in records if r.seq <= self._q_seq])
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

    async def _stored(self, seqs: list[int]) -> dict[int, Record]:
        """The stored records at ``seqs`` (consecutive, already written): from the recent
        ones, else from one read of the run from the first seq missing there (a retried batch
        older than them, or any retry right after an open that kept only the last record)."""
        out = {seq: self._recent[seq] for seq in seqs if seq in self._recent}
        missing = [seq for seq in seqs if seq not in out]
        if missing:
            loaded = {r.seq: r for r in await self._store.load(self.run_id, missing[0])}
            for seq in missing:
                if seq not in loaded:
                    raise SeqConflict(
                        f"run {self.run_id}: seq {seq} was pruned or quarantined and the "
                        f"journal is at seq {self._last_seq}; continue at seq "
                        f"{self._last_seq + 1}",
                        metadata={"run_id": self.run_id, "seq": seq, "last_seq": self._last_seq},
                    )
                out[seq] = loaded[seq]
        return out

    async def _flush(self) -> None:
        group: list[tuple[list[Record], asyncio.Future[None]]] = []
        try:
            while self._queue:
                group, self._queue = self._queue, []
                new = [r for batch, _ in group for r in batch]
                data = b"".join(frame(r) for r in new)
                try:
                    await self._io.run(self._write_durable, data, new[0].seq)
                except Exception as exc:
                    if not (failpoints.ARMED and failpoints.is_on("bug_ack_before_fsync")):
                        await self._fail(group, exc)
                        continue
                    # the deliberately wrong variant: acknowledged as if it were durable
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
                    settle_ok(fut, None)
        except BaseException as exc:
            # The flusher itself is dying (cancelled, or a simulated crash): no append may
            # wait forever for a write whose outcome it will never learn.
            for _, fut in group + self._queue:
                settle_exc(fut, exc)
            raise
        finally:
            self._flusher = None

    async def _fail(
        self, group: list[tuple[list[Record], asyncio.Future[None]]], exc: Exception
    ) -> None:
        """A failed write fails its group and everything queued behind it; the journal stays
        at its last durable record."""
        err = (
            exc
            if isinstance(exc, JournaldError)
            else BackendUnavailable(f"run {self.run_id}: write failed: {exc!r}")
        )
        for _, fut in group + self._queue:
            settle_exc(fut, err)
        self._queue = []
        self._q_seq, self._q_hash = self._last_seq, self._last_hash
        await self._turn.reset(self._last_seq + 1)

    def _write_durable(self, data: bytes, seq: int) -> None:
        pre = self._size
        try:
            if failpoints.ARMED:
                failpoints.hit("before_write")
            end = write_all(self._fd, data, pre)
            if failpoints.ARMED:
                failpoints.hit("after_write_before_fsync")
            telemetry.fsync(self._fd, self.run_id, seq, len(data))
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
        self._stats = SegmentStats()
        self._write_cache()

    async def write_listing(self) -> None:
        """Refresh the run's listing cache (``meta.json``; not fsynced: a cache)."""
        await self._io.run(self._write_cache)

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
            "journal_mtime_ns": st.st_mtime_ns,
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
            os.close(self._fd)
            os.close(self._lock_fd)
            self._store.forget(self.run_id, self)
