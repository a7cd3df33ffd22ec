"""In-memory backend: the reference implementation of the storage contract (tests only).

Its checkpoints, attachments and fold marks are held in the process too: they last as long as
the daemon, like its runs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from journald import failpoints
from journald.core.checkpoints import (
    Checkpoint,
    CheckpointMeta,
    attachment_missing,
    checkpoint_missing,
    valid_sha256,
)
from journald.core.errors import Locked, SessionExists, SessionNotFound, Unsupported
from journald.core.records import GENESIS, Record, sha256_hex, validate_id
from journald.storage.base import (
    DEFAULT_GAP_WAIT_S,
    MEMORY,
    AppendResult,
    QuarantineReport,
    RecordCheck,
    RepairReport,
    RunInfo,
    VerifyReport,
)
from journald.storage.checkpoint_base import MARK_PARTS, MARKS
from journald.storage.info import run_info_from
from journald.storage.pipeline import AppendPipeline
from journald.storage.verify import verify_records


@dataclass
class _Run:
    records: list[Record] = field(default_factory=list)
    journal: MemoryJournal | None = None


class MemoryJournal:
    durability = MEMORY

    def __init__(self, store: MemoryStore, run_id: str, run: _Run, gap_wait_s: float) -> None:
        self.run_id = run_id
        self._store = store
        self._run = run
        last = run.records[-1] if run.records else None
        self.pipeline = AppendPipeline(
            run_id,
            last.seq if last else 0,
            last.hash if last else GENESIS,
            durability=MEMORY,
            gap_wait_s=gap_wait_s,
            write=self._write,
            read_stored=self._stored,
        )
        self._closed = False

    @property
    def last_seq(self) -> int:
        return self.pipeline.last_seq

    @property
    def last_hash(self) -> str:
        return self.pipeline.last_hash

    @property
    def repair(self) -> RepairReport | None:
        return None

    async def append(self, records: Sequence[Record]) -> list[AppendResult]:
        return await self.pipeline.append(records)

    async def _write(self, new: list[Record]) -> None:
        self._run.records.extend(new)

    async def _stored(self, seqs: list[int]) -> dict[int, Record]:
        return {seq: self._run.records[seq - 1] for seq in seqs}

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.pipeline.close("closed")
            if self._run.journal is self:
                self._run.journal = None


class MemoryStore:
    durability = MEMORY

    def __init__(self, gap_wait_s: float = DEFAULT_GAP_WAIT_S) -> None:
        self._runs: dict[str, _Run] = {}
        self._gap_wait_s = gap_wait_s

    def _get(self, run_id: str) -> _Run:
        validate_id(run_id)
        run = self._runs.get(run_id)
        if run is None or not run.records:
            raise SessionNotFound(
                f"run {run_id} does not exist; list runs with `journald ls`",
                metadata={"run_id": run_id},
            )
        return run

    async def create(self, meta: Record) -> MemoryJournal:
        run_id = validate_id(meta.payload.get("run_id"))
        if run_id in self._runs:
            raise SessionExists(
                f"run {run_id} already exists; resume it or pick another id",
                metadata={"run_id": run_id},
            )
        run = _Run()
        self._runs[run_id] = run
        journal = MemoryJournal(self, run_id, run, self._gap_wait_s)
        run.journal = journal
        try:
            await journal.append([meta])
        except BaseException:
            del self._runs[run_id]
            raise
        return journal

    async def open(self, run_id: str) -> MemoryJournal:
        run = self._get(run_id)
        if run.journal is not None:
            raise Locked(
                f"run {run_id} is already open for append in this store",
                metadata={"run_id": run_id},
            )
        run.journal = MemoryJournal(self, run_id, run, self._gap_wait_s)
        return run.journal

    async def exists(self, run_id: str) -> bool:
        validate_id(run_id)
        return run_id in self._runs

    async def iter_records(self, run_id: str, from_seq: int = 1) -> AsyncIterator[Record]:
        for rec in list(self._get(run_id).records):
            if rec.seq >= from_seq:
                yield rec

    async def load(self, run_id: str, from_seq: int = 1) -> list[Record]:
        return [r async for r in self.iter_records(run_id, from_seq)]

    async def info(self, run_id: str) -> RunInfo:
        recs = self._get(run_id).records
        return run_info_from(
            run_id, recs[0], recs[-1], len(recs), sum(len(r.raw) + 1 for r in recs)
        )

    async def list(self) -> list[RunInfo]:
        infos = [await self.info(r) for r, run in self._runs.items() if run.records]
        return sorted(infos, key=lambda i: i.updated, reverse=True)

    async def delete(self, run_id: str) -> bool:
        validate_id(run_id)
        run = self._runs.get(run_id)
        if run is None:
            return False
        if run.journal is not None:
            raise Locked(
                f"run {run_id} is open for append; end its lease before deleting it",
                metadata={"run_id": run_id},
            )
        del self._runs[run_id]
        return True

    async def recover(self, run_id: str, *, check: RecordCheck | None = None) -> QuarantineReport:
        raise Unsupported(
            f"run {run_id}: the memory backend keeps no files, so it has nothing to recover; "
            "recovery works on the file backend",
            metadata={"run_id": run_id, "backend": "memory"},
        )

    async def verify(self, run_id: str) -> VerifyReport:
        return verify_records(run_id, self._get(run_id).records)

    async def close(self) -> None:
        self._runs.clear()


class MemoryCheckpointStore:
    def __init__(self) -> None:
        self._runs: dict[str, dict[str, Checkpoint]] = {}
        self._marks: dict[tuple[str, str], dict[str, Any]] = {}

    async def put(self, cp: Checkpoint) -> None:
        if failpoints.ARMED:
            failpoints.hit("cp_before_write")
        self._runs.setdefault(cp.meta.run_id, {})[cp.checkpoint_id] = cp

    async def get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        cp = self._runs.get(run_id, {}).get(checkpoint_id)
        if cp is None:
            raise checkpoint_missing(run_id, checkpoint_id)
        return cp

    async def list(self, run_id: str) -> list[CheckpointMeta]:
        cps = self._runs.get(run_id, {})
        return [cps[k].meta for k in sorted(cps)]

    async def delete(self, run_id: str, checkpoint_id: str) -> bool:
        return self._runs.get(run_id, {}).pop(checkpoint_id, None) is not None

    async def owner(self, checkpoint_id: str) -> str | None:
        return next((r for r, cps in self._runs.items() if checkpoint_id in cps), None)

    async def newest_id(self) -> str | None:
        return max((cid for cps in self._runs.values() for cid in cps), default=None)

    async def drop_run(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
        for part in MARK_PARTS:
            self._marks.pop((run_id, part), None)

    async def save_mark(self, run_id: str, mark: dict[str, Any], part: str = MARKS) -> None:
        self._marks[(run_id, part)] = dict(mark)

    async def load_mark(self, run_id: str, part: str = MARKS) -> dict[str, Any] | None:
        return self._marks.get((run_id, part))


class MemoryAttachmentStore:
    def __init__(self) -> None:
        self._runs: dict[str, dict[str, bytes]] = {}

    async def put(self, run_id: str, data: bytes) -> tuple[str, bool]:
        digest = sha256_hex(data)
        blobs = self._runs.setdefault(run_id, {})
        existed = digest in blobs
        blobs[digest] = bytes(data)
        return digest, existed

    async def get(self, run_id: str, digest: str) -> bytes:
        data = self._runs.get(run_id, {}).get(valid_sha256(digest))
        if data is None:
            raise attachment_missing(run_id, digest)
        return data

    async def drop_run(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
