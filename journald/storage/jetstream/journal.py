"""The append handle of a JetStream run: ``JetStreamJournal``, what ``JetStreamStore.create``
and ``open`` return (docs/design.md#jetstream-backend).

A thin shell over the one append pipeline (``journald.storage.pipeline``): it keeps the run's
fence (the stream sequence of its last message as this journal knows it) and its per-open
nonce (the message ids that let a lost ack be adopted), checks the run's cross-host lease
before each group, and hands each group to the store's fenced publish
(``jetstream.publish``). Apart from ``jetstream.store`` because it is per run, the store per
stream.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

from journald import failpoints
from journald.core.records import GENESIS, Record
from journald.storage.base import JETSTREAM_ACK, AppendResult, RepairReport
from journald.storage.jetstream.publish import (
    HDR_LAST_SUBJECT_SEQ,
    HDR_LAST_SUBJECT_SEQ_SUBJECT,
    HDR_MSG_ID,
    HDR_WRITER,
)
from journald.storage.pipeline import AppendPipeline

if TYPE_CHECKING:
    from journald.storage.jetstream.store import JetStreamStore


class JetStreamJournal:
    durability = JETSTREAM_ACK

    def __init__(self, store: JetStreamStore, run_id: str, last: Record | None, fence: int) -> None:
        self.run_id = run_id
        self._store = store
        self._fence = fence
        self._nonce = secrets.token_hex(8)
        self._subject_prefix = f"{store.prefix}.{run_id}."
        self._run_subject = store.run_subject(run_id)
        """The run's wildcard subject, the fence's scope (built once, not per publish)."""
        self.pipeline = AppendPipeline(
            run_id,
            last.seq if last else 0,
            last.hash if last else GENESIS,
            durability=JETSTREAM_ACK,
            gap_wait_s=store.gap_wait_s,
            write=self._write,
            read_stored=self._stored,
            check=store._check_sizes,
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
        return None  # a JetStream message is atomic: there is no torn tail

    @property
    def fence(self) -> int:
        """The stream sequence of the run's last message as this journal knows it."""
        return self._fence

    def msg_id(self, seq: int) -> str:
        return f"{self._nonce}.{seq}"

    def subject(self, seq: int) -> str:
        """``record_subject(run_id, seq)``, from the prefix this journal built once."""
        return f"{self._subject_prefix}{seq}"

    def fenced_headers(self, seq: int, fence: int) -> dict[str, str]:
        """The headers of the fenced publish of the record at ``seq`` on ``fence``."""
        return {
            HDR_MSG_ID: f"{self._nonce}.{seq}",
            HDR_WRITER: self._store.writer,
            HDR_LAST_SUBJECT_SEQ: str(fence),
            HDR_LAST_SUBJECT_SEQ_SUBJECT: self._run_subject,
        }

    async def append(self, records: Sequence[Record]) -> list[AppendResult]:
        return await self.pipeline.append(records)

    async def _stored(self, seqs: list[int]) -> dict[int, Record]:
        return {seq: await self._store._stored_record(self.run_id, seq) for seq in seqs}

    async def _write(self, new: list[Record]) -> None:
        """Publish one group, fenced on the run's last stream sequence; the fence moves only
        once every record of it is acknowledged."""
        fence = self._fence
        store = self._store
        leases = store.leases
        # the run's lease entry still carries our revision (awaited only when the watch
        # cannot tell: a coroutine per append costs more than the check itself)
        if leases is not None and not leases.confirmed(self.run_id):
            await leases.confirm(self.run_id, f"appending seq {new[0].seq}")
        if failpoints.ARMED:
            failpoints.hit("before_write")
        batch_fence = (
            await store._publish_atomic(self, new, fence)
            if store.atomic_batches and len(new) > 1
            else None
        )
        if batch_fence is not None:
            fence = batch_fence
        else:
            for rec in new:
                fence = await store._publish(self, rec, fence)
        if failpoints.ARMED:
            failpoints.hit("after_fsync_before_advance")
        self._fence = fence

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                await self.pipeline.close("closed")
            finally:
                self._store._release(self)
