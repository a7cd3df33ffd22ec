"""The fenced writes of the JetStream backend: each record published so that a stale
writer is refused instead of interleaving (docs/design.md#jetstream-backend).

Fencing. Each append publishes with ``Nats-Expected-Last-Subject-Sequence: <F>`` and
``Nats-Expected-Last-Subject-Sequence-Subject: <prefix>.<run>.*`` (nats-server >= 2.11), where
``F`` is the stream sequence of the run's last message as this journal knows it. Any other
writer that appended in between moves the run's last stream sequence, so the server rejects the
stale writer (``wrong last sequence``) instead of interleaving. Each publish carries
``Nats-Msg-Id: <per-open nonce>.<seq>``; on a wrong-last-sequence reply the target subject is
read back: our own message id with our bytes is a lost ack, adopted (success); our id with other
bytes is a ``SeqConflict``; anything else is ``Locked`` (``SessionExists`` at seq 1).

A multi-record append is one atomic batch (``Nats-Batch-Id``/``-Sequence``/``-Commit``, the
fence on its first message: one round trip, all or nothing) when the stream has
``allow_atomic`` (nats-server >= 2.12). Otherwise, and after any batch failure, records are
published in order, one fenced publish each (the fence of record n+1 is the stream sequence
the server assigned to record n). The journal's ``last_seq``/``last_hash``/fence advance only
when the whole batch is acknowledged; after a partial failure the records that did land carry
our message ids, so the retry at the same seq adopts them one by one and continues.

Acks carry durability ``jetstream_ack``: what the server promised on ack (with
``sync_interval: always`` an fsync on every node that acknowledged; the daemon logs at start-up
whether each server does, ``jetstream.sync``).

A module apart from ``jetstream.store`` because this is the one part of the store that
writes records; the journal (``jetstream.journal``) calls it once per append group.
``FencedPublish`` is a base class of ``JetStreamStore`` (the attributes it declares are set by
``JetStreamStore.__init__``); it reads back through ``StreamReads`` to resolve a refused
publish.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import nats.errors
import nats.js.errors

from journald.core.errors import (
    BackendUnavailable,
    InvalidRecord,
    Locked,
    SeqConflict,
    SessionExists,
    StoreCorrupted,
)
from journald.core.records import Record
from journald.storage.jetstream.errors import BATCH_FAILURES, TRANSIENT, appending
from journald.storage.jetstream.reads import StreamReads

if TYPE_CHECKING:
    from journald.storage.jetstream.journal import JetStreamJournal
    from journald.storage.jetstream.leases import JetStreamLeases

HEADER_ROOM = 1024
"""Bytes reserved for the NATS headers of a record publish (fence, msg id, protocol line)."""
WRONG_LAST_SEQUENCE = 10071
MAX_MSGS_PER_SUBJECT_EXCEEDED = 10077
HDR_MSG_ID = "Nats-Msg-Id"
HDR_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
HDR_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
HDR_WRITER = "Journald-Writer"
"""Who wrote a record (``<host> pid <pid>`` or the daemon's name): named in ``Locked``."""
HDR_BATCH_ID = "Nats-Batch-Id"
HDR_BATCH_SEQ = "Nats-Batch-Sequence"
HDR_BATCH_COMMIT = "Nats-Batch-Commit"
MAX_ATOMIC_BATCH = 1000
"""nats-server's default limit of messages in one atomic batch."""


class FencedPublish(StreamReads):
    """The record writes of ``JetStreamStore``, a base class of it (the attributes are the
    store's)."""

    max_record_bytes: int
    ack_timeout_s: float
    atomic_batches: bool
    writer: str
    leases: JetStreamLeases | None

    def _check_sizes(self, records: Sequence[Record]) -> None:
        for rec in records:
            if len(rec.raw) > self.max_record_bytes:
                raise InvalidRecord(
                    f"record seq {rec.seq} is {len(rec.raw)} bytes; this JetStream server "
                    f"stores at most {self.max_record_bytes} bytes per record (the server's "
                    f"max_payload/stream max_msg_size minus {HEADER_ROOM} bytes of headers); "
                    "shrink the record (e.g. truncate the tool result) or raise max_payload",
                    metadata={"seq": rec.seq, "limit": self.max_record_bytes},
                )

    async def _stored_ack(self, subject: str, data: bytes, headers: dict[str, str]) -> Any:
        """Publish and wait for the stream's PubAck (parsed JSON), raising what nats-py's
        ``js.publish`` raises (``NoStreamResponseError``, ``APIError`` for an error answer)
        without building its ``PubAck`` object: the fields read here are two."""
        try:
            reply = await self._nc.request(
                subject, data, timeout=self.ack_timeout_s, headers=headers
            )
        except nats.errors.NoRespondersError:
            raise nats.js.errors.NoStreamResponseError from None
        ack = json.loads(reply.data)
        if "error" in ack:
            raise nats.js.errors.APIError.from_error(ack["error"])
        return ack

    async def _publish(self, journal: JetStreamJournal, rec: Record, fence: int) -> int:
        """Publish one record fenced on ``fence``; return the new fence (its stream seq)."""
        run_id = journal.run_id
        subject = journal.subject(rec.seq)
        msg_id = journal.msg_id(rec.seq)
        deadline = time.monotonic() + self.retry_window_s
        delay = 0.05
        with appending(self.scope, run_id, rec.seq):
            while True:
                try:
                    ack = await self._stored_ack(
                        subject, rec.raw, journal.fenced_headers(rec.seq, fence)
                    )
                    if ack.get("stream") != self.stream:
                        raise StoreCorrupted(
                            f"subject {subject} was stored by stream {ack.get('stream')}, not "
                            f"{self.stream}; two streams overlap on the journald prefix",
                            metadata={"subject": subject},
                        )
                    return int(ack["seq"])
                except nats.js.errors.APIError as exc:  # the fence refused it, or no leader
                    code = getattr(exc, "err_code", None)
                    if code in (WRONG_LAST_SEQUENCE, MAX_MSGS_PER_SUBJECT_EXCEEDED):
                        return await self._resolve(run_id, rec, msg_id, subject)
                    if not isinstance(exc, nats.js.errors.ServiceUnavailableError):
                        raise  # a refusal: ``appending`` names it
                    last_exc: BaseException = exc
                except TRANSIENT as exc:  # no answer: published again below
                    last_exc = exc
                # Unacknowledged: the record may or may not be stored. Publishing again with
                # the same fence is safe: if it landed, the fence rejects the copy and we
                # adopt it. No retry once this daemon's lease renewal is overdue: another
                # host may hold the run by now.
                lapsed = self.leases is not None and not self.leases.valid()
                if lapsed or time.monotonic() + delay >= deadline or self._nc.is_closed:
                    raise BackendUnavailable(
                        f"run {run_id}: no JetStream ack for seq {rec.seq} within "
                        f"{self.retry_window_s:g}s ({type(last_exc).__name__}); the record may "
                        "or may not be stored: retry the append at the same seq (a stored copy "
                        "is adopted, never duplicated)",
                        metadata={"run_id": run_id, "seq": rec.seq},
                    ) from last_exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _publish_atomic(
        self, journal: JetStreamJournal, records: Sequence[Record], fence: int
    ) -> int | None:
        """Publish ``records`` as one atomic batch fenced on ``fence`` (first message) and
        return the new fence, or None when the per-record path must run instead: atomic
        batches off, a single record, or any failure. The batch is all-or-nothing on the
        server, so after a failure the per-record path either finds nothing and publishes,
        or finds the whole batch (our message ids, our bytes) and adopts it record by record.
        """
        if not self.atomic_batches or not 1 < len(records) <= MAX_ATOMIC_BATCH:
            return None
        run_id = journal.run_id
        batch_id = f"{journal.msg_id(records[0].seq)}.{secrets.token_hex(4)}"
        last = len(records)
        try:
            for k, rec in enumerate(records, start=1):
                headers = {
                    HDR_MSG_ID: journal.msg_id(rec.seq),
                    HDR_WRITER: self.writer,
                    HDR_BATCH_ID: batch_id,
                    HDR_BATCH_SEQ: str(k),
                }
                if k == 1:
                    headers[HDR_LAST_SUBJECT_SEQ] = str(fence)
                    headers[HDR_LAST_SUBJECT_SEQ_SUBJECT] = self.run_subject(run_id)
                subject = self.record_subject(run_id, rec.seq)
                if k < last:
                    await self._nc.publish(subject, rec.raw, headers=headers)
                    continue
                headers[HDR_BATCH_COMMIT] = "1"
                reply = await self._nc.request(
                    subject, rec.raw, timeout=self.ack_timeout_s, headers=headers
                )
        except BATCH_FAILURES:
            return None
        try:
            resp = json.loads(reply.data)
        except ValueError:
            return None
        if "error" in resp or resp.get("stream") != self.stream or "seq" not in resp:
            return None
        if int(resp.get("count", last)) != last:
            return None
        return int(resp["seq"])

    async def _resolve(self, run_id: str, rec: Record, msg_id: str, subject: str) -> int:
        """A fenced publish was refused: adopt our own lost ack, or name the conflict."""
        got = await self._get(subject)
        if got is not None:
            stored, sseq, headers = got
            if headers.get(HDR_MSG_ID) == msg_id:
                if stored.raw == rec.raw:
                    return sseq  # our own write whose ack was lost: adopt it
                raise SeqConflict(
                    f"run {run_id}: seq {rec.seq} was already written by this journal with "
                    "different content; reload and continue after the stored record",
                    metadata={"run_id": run_id, "seq": rec.seq},
                )
            if rec.seq == 1:
                raise SessionExists(
                    f"run {run_id} already exists in stream {self.stream}; resume it or pick "
                    "another id",
                    metadata={"run_id": run_id},
                )
        writer = got[2].get(HDR_WRITER, "") if got is not None else ""
        holder = f" ({writer or 'an unnamed writer'} wrote seq {rec.seq})" if got else ""
        raise Locked(
            f"run {run_id} was appended to by another writer{holder} after this journal's "
            f"last record; this journal is stale and may not write seq {rec.seq}: reopen "
            "the run to continue from its real end",
            metadata={
                "run_id": run_id,
                "seq": rec.seq,
                "holder": holder.strip(" ()"),
                "holder_name": writer,
            },
        )
