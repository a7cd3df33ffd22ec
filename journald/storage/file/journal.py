"""The append handle of the file backend: group commit, durable writes, sealing.

Format, fsync order and recovery rules: docs/design.md#file-backend (#fsync-order).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from journald import failpoints, telemetry
from journald.core.errors import BackendUnavailable, JournaldError, SeqConflict
from journald.core.records import Record, decode_stored
from journald.storage.base import FSYNC_LOCAL, AppendResult, RepairReport, RunInfo
from journald.storage.file.errors import storage_error, vanished
from journald.storage.file.segments import (
    DIR_MODE,
    FILE_MODE,
    JOURNAL,
    META_CACHE,
    SEGMENTS,
    Manifest,
    SegmentInfo,
    frame,
    message_count,
    sealed_facts,
    unframe,
    write_manifest,
)
from journald.storage.info import run_info_from
from journald.storage.pipeline import AppendPipeline

if TYPE_CHECKING:
    from journald.storage.aio_sync import AioSync
    from journald.storage.file.store import FileStore

log = logging.getLogger(__name__)
RECENT = 1024  # records kept in memory per journal for idempotent-retry comparisons
RECENT_BYTES = 4 * 1024 * 1024
"""...and at most this many of their stored bytes (beyond one record): a retry of an older
seq reads it back from the disk instead."""
AIO_WRITE_MAX_BYTES = 256 * 1024
"""A group write of at most this many bytes is written on the event loop (a buffered
``pwrite`` into the page cache, ~1 µs a KiB) and synced through AIO; a larger one keeps the
writer threads, so that copying it never holds the loop for long."""


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
    counted: bool = True
    """Whether ``messages`` counts the whole segment: False after an open that read only its
    end (``open_end``); the seal then counts them from the file (``messages_in``)."""

    def add(self, rec: Record) -> None:
        if not self.records:
            self.first_seq, self.first_hash, self.first_prev = rec.seq, rec.hash, rec.prev
        self.records += 1
        self.messages += message_count(rec)
        self.last_seq, self.last_hash = rec.seq, rec.hash

    def segment(self, name: str, size: int, facts: tuple[str, int]) -> SegmentInfo:
        """The manifest entry of the segment ``name`` (``size`` bytes, sealed now; ``facts``:
        the sha256 of its bytes and its mtime, ``segments.sealed_facts``)."""
        digest, mtime_ns = facts
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
            digest,
            mtime_ns,
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


def messages_in(path: str, size: int) -> int:
    """The messages the first ``size`` bytes of a segment hold (complete lines written and
    acknowledged by this store, read a chunk at a time: a line that does not decode counts
    none; Verify names it)."""
    n, rest, left = 0, b"", size
    with open(path, "rb") as f:
        while left > 0 and (chunk := f.read(min(left, 1 << 20))):
            left -= len(chunk)
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for raw in lines:
                try:
                    n += message_count(decode_stored(unframe(raw)[0]))
                except JournaldError:
                    continue
    return n


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
        self._disk = store.disk
        self._fd = self._disk.open(self._path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
        self._manifest = st.manifest
        self._size = st.size
        self._stats = st.stats
        self._meta = st.meta
        self._recent: OrderedDict[int, Record] = OrderedDict((r.seq, r) for r in st.recent)
        self._recent_bytes = sum(len(r.raw) for r in st.recent)
        self._repair = st.repair
        self._first_write = first
        # the active segment's sha256, fed by every write, when this journal saw it from its
        # first byte (else a seal reads the file back for it)
        self._digest = hashlib.sha256() if st.size == 0 else None
        self._io = store.io_pool.lane()  # this journal's writes, in order, on shared threads
        self.pipeline = AppendPipeline(
            run_id,
            st.last_seq,
            st.last_hash,
            durability=FSYNC_LOCAL,
            gap_wait_s=store.gap_wait_s,
            write=self._write_group,
            read_stored=self._stored,
            after_write=self._written,
        )
        self.commits = 0
        """Durable writes (write + fdatasync) done; group commit makes it < appends."""
        self._closed = False

    @property
    def last_seq(self) -> int:
        return self.pipeline.last_seq

    @property
    def last_hash(self) -> str:
        return self.pipeline.last_hash

    @property
    def repair(self) -> RepairReport | None:
        return self._repair

    # -- append ----------------------------------------------------------------------------

    async def append(self, records: Sequence[Record]) -> list[AppendResult]:
        return await self.pipeline.append(records)

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
                        f"journal is at seq {self.last_seq}; continue at seq "
                        f"{self.last_seq + 1}",
                        metadata={"run_id": self.run_id, "seq": seq, "last_seq": self.last_seq},
                    )
                out[seq] = loaded[seq]
        return out

    async def _write_group(self, new: list[Record]) -> None:
        data = b"".join(frame(r) for r in new)
        aio = None
        if not self._first_write and len(data) <= AIO_WRITE_MAX_BYTES:
            aio = self._store.aio_sync()  # fdatasync without a thread, when proven
        if aio is None or aio.closed:
            await self._io.run(self._write_durable, data, new[0].seq)
            return
        async with self._io.turn:  # never beside a seal or a listing write of the lane
            await self._write_durable_aio(aio, data, new[0].seq)

    async def _written(self, new: list[Record]) -> None:
        for r in new:
            self._stats.add(r)
            self._recent[r.seq] = r
            self._recent_bytes += len(r.raw)
            if self._meta is None:
                self._meta = r
        while len(self._recent) > RECENT or (
            self._recent_bytes > RECENT_BYTES and len(self._recent) > 1
        ):
            self._recent_bytes -= len(self._recent.popitem(last=False)[1].raw)
        if self._should_seal():
            # Sealed before the acknowledgement so an acked append finds the run settled; the
            # records are durable either way. A seal that fails before its manifest rolls
            # back (retried after the next append); after it, the journal refuses appends
            # until reopened (the open completes the seal).
            try:
                await self._io.run(self._seal)
            except Exception as exc:
                log.warning("run %s: sealing a segment failed: %r", self.run_id, exc)

    def _write_durable(self, data: bytes, seq: int) -> None:
        pre = self._size
        disk = self._disk
        try:
            end, fsync_s = disk.append_durably(self._fd, data, pre)
            telemetry.fsync_took(fsync_s, self.run_id, seq, len(data))
            if self._first_write:
                disk.fsync_dir(self._dir)
                disk.fsync_dir(os.path.dirname(self._dir))
                self._first_write = False
            if disk.fstat(self._fd).st_nlink == 0:
                # the run's files were deleted under the lease (the data directory removed):
                # the write reached only an unlinked file, which no one can read back
                raise self._unlinked(seq)
            disk.step("after_fsync_before_advance")
        except OSError as exc:
            self._take_back(pre)
            raise storage_error(
                exc, self.run_id, self._path, seq, root=self._store.sessions_dir
            ) from exc
        self._size = end
        if self._digest is not None:
            self._digest.update(data)
        self.commits += 1

    async def _write_durable_aio(self, aio: AioSync, data: bytes, seq: int) -> None:
        """``_write_durable`` with the pwrite on the loop and the fdatasync through AIO: the
        same steps, failpoints, telemetry and taking back of a failed write (docs/design.md
        #durable-writes-without-a-thread-hop). Only for a store on the plain ``Disk``."""
        pre = self._size
        disk = self._disk
        try:
            await self._step("before_write")
            end = disk.write_all(self._fd, data, pre)
            await self._step("after_write_before_fsync")
            fsync_s = await aio.fdatasync(self._fd)
            telemetry.fsync_took(fsync_s, self.run_id, seq, len(data))
            if disk.fstat(self._fd).st_nlink == 0:
                raise self._unlinked(seq)  # as in _write_durable
            await self._step("after_fsync_before_advance")
        except OSError as exc:
            # rare: the cut back and its own sync on a writer thread (the lane's turn is ours)
            await self._store.io_pool.run(self._take_back, pre)
            raise storage_error(
                exc, self.run_id, self._path, seq, root=self._store.sessions_dir
            ) from exc
        self._size = end
        if self._digest is not None:
            self._digest.update(data)
        self.commits += 1

    async def _step(self, name: str) -> None:
        if failpoints.ARMED:
            if failpoints.blocks(name):  # a sleep or wait holds this write, not the loop
                await asyncio.to_thread(self._disk.step, name)
            else:
                self._disk.step(name)

    def _take_back(self, pre: int) -> None:
        with contextlib.suppress(OSError):
            self._disk.ftruncate(self._fd, pre)
            self._disk.fdatasync(self._fd)

    def _unlinked(self, seq: int) -> BackendUnavailable:
        root = self._store.sessions_dir
        if not os.path.isdir(root):
            return vanished(root, self.run_id, self._path)
        return BackendUnavailable(
            f"run {self.run_id}: its journal {self._path} was deleted while the run was open "
            f"for append; the append at seq {seq} was not acknowledged. End this lease; the "
            "run's records are gone unless restored from a backup",
            metadata={"run_id": self.run_id, "seq": seq, "path": self._path},
        )

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
        disk = self._disk
        if not os.path.isdir(seg_dir):
            disk.mkdir(seg_dir, DIR_MODE)
            disk.fsync_dir(self._dir)
        seg = os.path.join(seg_dir, name)
        try:
            disk.link(self._path, seg)
        except FileExistsError:
            if not os.path.samefile(self._path, seg):
                raise
        disk.fsync_dir(seg_dir)
        disk.step("mid_seal")
        facts = (
            (self._digest.hexdigest(), os.fstat(self._fd).st_mtime_ns)
            if self._digest is not None
            else sealed_facts(seg)
        )
        if not self._stats.counted:
            self._stats.messages, self._stats.counted = messages_in(seg, self._size), True
        nm = Manifest(
            m.generation + 1,
            [*m.segments, self._stats.segment(name, self._size, facts)],
            list(m.anchors),
        )
        try:
            write_manifest(disk, self._dir, nm)
        except BaseException:
            with contextlib.suppress(OSError):
                disk.unlink(seg)
            raise
        self._manifest = nm
        try:
            disk.step("after_seal_manifest")
            disk.atomic_write(self._path, b"")
            fd = disk.open(self._path, os.O_WRONLY, FILE_MODE)
        except OSError as exc:
            self.pipeline.refuse(
                BackendUnavailable(
                    f"run {self.run_id}: sealing segment {name} stopped half way ({exc}); end this "
                    "lease and open the run again (the open completes the seal)",
                    metadata={"run_id": self.run_id},
                )
            )
            raise
        disk.close(self._fd)
        self._fd = fd
        self._size = 0
        self._digest = hashlib.sha256()
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
            self._disk.atomic_write(
                os.path.join(self._dir, META_CACHE),
                json.dumps(obj, sort_keys=True).encode(),
                sync=False,
            )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.pipeline.close("closed")
        try:
            await self._io.run(self._write_cache)
        finally:
            self._disk.close(self._fd)
            self._disk.close(self._lock_fd)
            self._store.forget(self.run_id, self)
            self._recent.clear()  # whoever still holds the journal holds no records
            self._recent_bytes = 0
