"""Reading the JetStream stream of runs: a run's subjects, the last message stored on a
subject, the messages of a stream-sequence range, and the live tail of a run (``follow``).

A range is read through an ephemeral ordered consumer, or by one message get per message on
a stream whose retention is not ``limits`` (a consumer there could make the server drop what
it delivered; ``JetStreamStore.consumer_reads``). Every read is idempotent, so each is
retried on a transient failure for a bounded time (``_retrying``).

A module apart from ``jetstream.store`` so that the store reads as the Store protocol it
implements on top of these reads. ``StreamReads`` is a base class of ``JetStreamStore``: it
declares the attributes it uses, which ``JetStreamStore.__init__`` sets. The fenced writes
(``jetstream.publish``) read back through it to tell a lost ack from a conflict.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.js.errors
from nats.js import api as js_api

from journald.core.errors import BackendUnavailable, JournaldError, Locked, StoreCorrupted
from journald.core.records import Record, decode, validate_id
from journald.storage.jetstream.errors import Scope

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StoredMsg:
    """One stored message as the reads need it (``size``: of the body, also when only the
    headers were fetched)."""

    subject: str
    sseq: int
    data: bytes
    size: int


class StreamReads:
    """The reads of ``JetStreamStore``, a base class of it (the attributes are the store's)."""

    _nc: Any
    _js: Any
    _jsm: Any
    _closed: bool
    stream: str
    scope: Scope
    prefix: str
    retry_window_s: float
    consumer_reads: bool

    # -- subjects ----------------------------------------------------------------------

    def record_subject(self, run_id: str, seq: int) -> str:
        return f"{self.prefix}.{run_id}.{seq}"

    def run_subject(self, run_id: str) -> str:
        return f"{self.prefix}.{run_id}.*"

    @property
    def meta_filter(self) -> str:
        return f"{self.prefix}.*.1"

    # -- low-level helpers -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailable("the JetStream store is closed")

    async def _retrying(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        """Run an idempotent NATS operation, retrying transient failures for a bounded time."""
        return await self.scope.retrying(
            what, op, self.retry_window_s, lambda: bool(self._nc.is_closed)
        )

    async def _get(self, subject: str) -> tuple[Record, int, dict[str, str]] | None:
        """The (record, stream seq, headers) last stored on ``subject`` (may be a wildcard)."""

        async def op() -> Any:
            try:
                return await self._jsm.get_msg(self.stream, subject=subject)
            except nats.js.errors.NotFoundError:
                return None

        msg = await self._retrying(f"reading {subject}", op)
        if msg is None:
            return None
        headers = msg.headers or {}
        try:
            rec = decode(bytes(msg.data or b""))
        except JournaldError as exc:
            tokens = str(msg.subject).split(".")
            raise StoreCorrupted(
                f"stream {self.stream} subject {msg.subject} (stream seq {msg.seq}) does not "
                f"hold a valid record: {exc.message}",
                metadata={
                    "stream": self.stream,
                    "subject": msg.subject,
                    "file": msg.subject,  # what a subject is to the file backend
                    "run_id": tokens[-2] if len(tokens) >= 2 else "",
                    "seq": tokens[-1],
                },
            ) from exc
        return rec, int(msg.seq), {str(k): str(v) for k, v in headers.items()}

    async def _stored_record(self, run_id: str, seq: int) -> Record:
        got = await self._get(self.record_subject(run_id, seq))
        if got is None:
            raise Locked(
                f"run {run_id}: seq {seq} is no longer stored (the run was deleted or purged "
                "by another writer); reopen the run",
                metadata={"run_id": run_id, "seq": seq},
            )
        return got[0]

    async def _messages(
        self, subject: str, start_sseq: int, end_sseq: int, headers_only: bool = False
    ) -> AsyncIterator[StoredMsg]:
        """Messages on ``subject`` with stream seqs in [start_sseq, end_sseq], in order:
        through an ephemeral ordered consumer, or by message gets when consumers are unsafe."""
        if end_sseq < start_sseq:
            return
        if not self.consumer_reads:
            async for got in self._messages_by_get(subject, start_sseq, end_sseq):
                yield got
            return
        cfg = js_api.ConsumerConfig(
            deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start_sseq,
            headers_only=headers_only or None,
            inactive_threshold=5.0,
        )

        async def make() -> Any:
            return await self._js.subscribe(
                subject, stream=self.stream, ordered_consumer=True, config=cfg
            )

        sub = await self._retrying(f"reading {subject}", make)
        try:
            ci = await self._retrying(f"reading {subject}", sub.consumer_info)
            if int(ci.num_pending or 0) == 0 and not ci.delivered.stream_seq:
                return
            while True:
                with self.scope.stalls(f"reading {subject}"):
                    msg = await sub.next_msg(timeout=self.retry_window_s)
                sseq = int(msg.metadata.sequence.stream)
                if sseq > end_sseq:
                    return
                data = bytes(msg.data or b"")
                size = int((msg.headers or {}).get("Nats-Msg-Size", len(data)))
                yield StoredMsg(msg.subject, sseq, data, size)
                if sseq >= end_sseq or int(msg.metadata.num_pending or 0) == 0:
                    return
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _messages_by_get(
        self, subject: str, start_sseq: int, end_sseq: int
    ) -> AsyncIterator[StoredMsg]:
        """As ``_messages``, one ``next_by_subj`` message get per message: reads nothing but
        what it asks for and leaves no consumer behind (one request per record: slower)."""
        sseq = start_sseq
        for _ in range(end_sseq - start_sseq + 1):

            async def op(at: int = sseq) -> Any:
                try:
                    return await self._jsm.get_msg(self.stream, seq=at, subject=subject, next=True)
                except nats.js.errors.NotFoundError:
                    return None

            msg = await self._retrying(f"reading {subject}", op)
            if msg is None or int(msg.seq) > end_sseq:
                return
            data = bytes(msg.data or b"")
            yield StoredMsg(str(msg.subject), int(msg.seq), data, len(data))
            sseq = int(msg.seq) + 1

    async def follow(self, run_id: str, deliver: Callable[[Record], None]) -> Any:
        """Hand ``deliver`` every record of the run stored from now on, whoever appended it
        (an ordered push consumer on the run's subjects delivering new messages: the live
        tail of another host's writer). Returns the subscription (``unsubscribe()`` ends it).
        A message that is not a record is skipped: a tail only reports, ``verify`` judges."""
        self._check_open()
        validate_id(run_id)

        async def on_msg(msg: Any) -> None:
            try:
                rec = decode(bytes(msg.data or b""))
            except JournaldError:
                return
            deliver(rec)

        async def make() -> Any:
            return await self._js.subscribe(
                self.run_subject(run_id),
                stream=self.stream,
                cb=on_msg,
                ordered_consumer=True,
                deliver_policy=js_api.DeliverPolicy.NEW,
                inactive_threshold=30.0,
            )

        return await self._retrying(f"following run {run_id}", make)
