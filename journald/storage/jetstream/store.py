"""JetStream backend: runs shared by a fleet of hosts through one NATS JetStream stream
(docs/design.md#jetstream-backend).

Layout. The store binds an EXISTING stream (the operator owns durability, replicas and limits;
the store never creates or edits a stream). The subject prefix is derived from the stream's
single ``<prefix>.>`` subject. Every record is one message on its own subject::

    <prefix>.<run_id>.<seq>        body = the record's canonical bytes (``Record.raw``)

so a run is the wildcard ``<prefix>.<run_id>.*`` and every run's meta record (always seq 1)
is matched by the one filter ``<prefix>.*.1``: listing needs no separate index subject.
The stream must keep exactly one message per subject and refuse a second one
(``max_msgs_per_subject: 1``, ``discard: new``, ``discard_new_per_subject``), keep records
forever (no ``max_age``) and accept records up to ``RECORD_FLOOR`` bytes; ``connect`` refuses
any other configuration with the commands that fix it (``jetstream.config``). A store opened
``read_only`` (``journald migrate`` reading a stream to rescue its runs) binds an unsafe stream
and refuses every write; on a stream whose retention is not ``limits`` it reads with message
gets only, never with a consumer (whose deliveries such a stream may discard).

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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.js import api as js_api

from journald import failpoints
from journald.core.errors import (
    BackendUnavailable,
    InvalidRecord,
    JournaldError,
    Locked,
    SeqConflict,
    SessionExists,
    SessionNotFound,
    StoreCorrupted,
    Unsupported,
)
from journald.core.records import GENESIS, Record, decode, validate_id
from journald.storage.base import (
    DEFAULT_GAP_WAIT_S,
    JETSTREAM_ACK,
    AppendResult,
    QuarantineReport,
    RecordCheck,
    RepairReport,
    RunInfo,
    VerifyReport,
)
from journald.storage.info import corrupted_info, run_info_from
from journald.storage.jetstream.config import (
    DEFAULT_PREFIX,
    RECORD_FLOOR,
    NatsConfigError,
    Problem,
    StreamConfigError,
    check_stream_config,
    stream_add_command,
    subject_prefix,
)
from journald.storage.jetstream.connect import bind_stream, open_connection, split_servers
from journald.storage.jetstream.errors import BATCH_FAILURES, TRANSIENT, Scope, appending
from journald.storage.jetstream.options import NatsOptions
from journald.storage.jetstream.sync import check_fsync_policy
from journald.storage.pipeline import AppendPipeline
from journald.storage.verify import verify_stream

if TYPE_CHECKING:
    from journald.storage.jetstream.leases import JetStreamLeases

__all__ = [
    "RECORD_FLOOR",
    "JetStreamJournal",
    "JetStreamStore",
    "NatsConfigError",
    "NatsOptions",
    "StreamConfigError",
    "check_stream_config",
    "stream_add_command",
    "subject_prefix",
]

T = TypeVar("T")

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
LIST_CONCURRENCY = 8
"""Runs whose info ``list`` reads at once (each is a few requests and one short consumer)."""
MAX_ATOMIC_BATCH = 1000
"""nats-server's default limit of messages in one atomic batch."""


@dataclass(frozen=True, slots=True)
class StoredMsg:
    """One stored message as the reads need it (``size``: of the body, also when only the
    headers were fetched)."""

    subject: str
    sseq: int
    data: bytes
    size: int


# --- The journal ---------------------------------------------------------------------


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


# --- The store -----------------------------------------------------------------------


class JetStreamStore:
    """Runs in one existing JetStream stream. Create with ``await JetStreamStore.connect(...)``."""

    durability = JETSTREAM_ACK

    def __init__(
        self,
        nc: Any,
        stream: str,
        prefix: str,
        max_record_bytes: int,
        *,
        gap_wait_s: float,
        ack_timeout_s: float,
        retry_window_s: float,
        atomic_batches: bool = False,
        writer: str | None = None,
        read_only: bool = False,
        consumer_reads: bool = True,
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream(timeout=ack_timeout_s)
        self._jsm = nc.jsm(timeout=ack_timeout_s)
        self.stream = stream
        self.scope = Scope.stream(stream)
        self.prefix = prefix
        self.max_record_bytes = max_record_bytes
        self.gap_wait_s = gap_wait_s
        self.ack_timeout_s = ack_timeout_s
        self.retry_window_s = retry_window_s
        self.atomic_batches = atomic_batches
        """The stream allows atomic batch publish (nats-server >= 2.12, ``allow_atomic``): a
        multi-record append is then one all-or-nothing batch, one round trip."""
        self.writer = writer or f"{socket.gethostname()} pid {os.getpid()}"
        self.read_only = read_only
        """Opened to copy runs out (``journald migrate``): every write is refused."""
        self.consumer_reads = consumer_reads
        """Reads may use ordered consumers; off for a stream whose retention is not
        ``limits``, where a consumer could make the server drop what it delivered."""
        self.unsafe: list[Problem] = []
        """Config problems a read-only store tolerated (the stream is unsafe to write)."""
        self.replicas = 1
        """The stream's replicas (the buckets beside it must have at least as many)."""
        self.leader_wait_s = 0.0
        self.leases: JetStreamLeases | None = None
        """Set while the daemon's cross-host leases run (``JetStreamLeases.start``): every
        write of a run then first checks that this daemon still holds it."""
        self._open: dict[str, JetStreamJournal | None] = {}
        self._closed = False

    @classmethod
    async def connect(
        cls,
        url: str | list[str],
        stream: str,
        *,
        options: NatsOptions | None = None,
        read_only: bool = False,
        check_fsync: bool = False,
        gap_wait_s: float = DEFAULT_GAP_WAIT_S,
        ack_timeout_s: float = 5.0,
        retry_window_s: float = 15.0,
        connect_timeout_s: float = 5.0,
        connect_attempts: int = 3,
        reconnect_attempts: int = -1,
        reconnect_time_wait_s: float = 0.5,
        add_prefix_hint: str = DEFAULT_PREFIX,
        leader_wait_s: float = 0.0,
        **nats_options: Any,
    ) -> JetStreamStore:
        """Connect, bind ``stream`` and check its configuration.

        ``url`` is one server URL, a comma-separated list, or a list (a cluster's seeds).
        ``options`` carries credentials, TLS, the writer's name (header ``Journald-Writer`` on
        every record, so a stale writer's ``Locked`` names who moved on) and monitoring
        endpoints; anything in ``nats_options`` goes to ``nats.connect`` as is.
        ``read_only`` binds a stream even when it is unsafe to write (to copy its runs out:
        reads then never create a consumer on a non-``limits`` stream) and refuses writes.
        ``check_fsync`` logs whether every server fsyncs each write (``jetstream.sync``).
        ``leader_wait_s``: how long the binding waits, with a log line, for the stream (and
        then its buckets) to answer, as after a cluster lost the node that led them.
        Raises ``NatsConfigError`` (a ``BackendUnavailable``; ``StreamConfigError`` for the
        stream, with its fix) when the configuration must change, and ``BackendUnavailable``
        when no server can be reached.
        """
        options = options or NatsOptions()
        servers = split_servers(url)
        where = ", ".join(servers)
        nc = await open_connection(
            servers,
            options,
            connect_timeout_s=connect_timeout_s,
            connect_attempts=connect_attempts,
            reconnect_time_wait_s=reconnect_time_wait_s,
            extra=nats_options,
        )
        # Reconnect forever (by default) once connected: a restarted server is waited for.
        nc.options["max_reconnect_attempts"] = reconnect_attempts
        try:
            bound = await bind_stream(
                nc,
                stream,
                where,
                options.cli(",".join(servers)),
                ack_timeout_s=ack_timeout_s,
                read_only=read_only,
                add_prefix_hint=add_prefix_hint,
                leader_wait_s=leader_wait_s,
            )
            if check_fsync:
                await check_fsync_policy(nc, options.monitor_urls, where)
        except BaseException:
            with contextlib.suppress(Exception):
                await nc.close()
            raise
        store = cls(
            nc,
            stream,
            bound.prefix,
            bound.max_payload - HEADER_ROOM,
            gap_wait_s=gap_wait_s,
            ack_timeout_s=ack_timeout_s,
            retry_window_s=retry_window_s,
            atomic_batches=bound.atomic,
            writer=options.writer_name,
            read_only=read_only,
            consumer_reads=bound.consumer_reads,
        )
        store.unsafe = bound.unsafe
        store.replicas = bound.replicas
        store.leader_wait_s = leader_wait_s
        return store

    @property
    def connection(self) -> Any:
        """The nats-py client, shared with the run's buckets (``jetstream.checkpoint_store``)."""
        return self._nc

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

    def _check_writable(self, what: str) -> None:
        self._check_open()
        if self.read_only:
            raise BackendUnavailable(
                f"stream {self.stream} is open read-only (to copy its runs out); {what} needs "
                "a store bound normally, to a stream that is safe for journald",
                metadata={"stream": self.stream},
            )

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

    def _release(self, journal: JetStreamJournal) -> None:
        if self._open.get(journal.run_id) is journal:
            del self._open[journal.run_id]

    # -- the Store protocol ------------------------------------------------------------

    async def create(self, meta: Record) -> JetStreamJournal:
        self._check_writable("creating a run")
        run_id = validate_id(meta.payload.get("run_id"))
        if run_id in self._open:
            raise SessionExists(
                f"run {run_id} already exists; resume it or pick another id",
                metadata={"run_id": run_id},
            )
        self._open[run_id] = None  # reserve before the first await
        journal = JetStreamJournal(self, run_id, None, 0)
        try:
            await journal.append([meta])
        except BaseException:
            self._open.pop(run_id, None)
            raise
        self._open[run_id] = journal
        return journal

    async def open(self, run_id: str) -> JetStreamJournal:
        self._check_writable("opening a run for append")
        validate_id(run_id)
        if run_id in self._open:
            raise Locked(
                f"run {run_id} is already open for append in this store",
                metadata={"run_id": run_id},
            )
        self._open[run_id] = None
        try:
            got = await self._get(self.run_subject(run_id))
            if got is None:
                raise SessionNotFound(
                    f"run {run_id} does not exist; list runs with `journald ls`",
                    metadata={"run_id": run_id},
                )
            last, sseq, _ = got
            journal = JetStreamJournal(self, run_id, last, sseq)
        except BaseException:
            self._open.pop(run_id, None)
            raise
        self._open[run_id] = journal
        return journal

    async def exists(self, run_id: str) -> bool:
        self._check_open()
        validate_id(run_id)
        return await self._get(self.run_subject(run_id)) is not None

    async def _last_or_missing(self, run_id: str) -> tuple[Record, int]:
        validate_id(run_id)
        got = await self._get(self.run_subject(run_id))
        if got is None:
            raise SessionNotFound(
                f"run {run_id} does not exist; list runs with `journald ls`",
                metadata={"run_id": run_id},
            )
        return got[0], got[1]

    async def iter_records(self, run_id: str, from_seq: int = 1) -> AsyncIterator[Record]:
        self._check_open()
        last, end_sseq = await self._last_or_missing(run_id)
        from_seq = max(from_seq, 1)
        if from_seq > last.seq:
            return
        start_sseq = 1
        if from_seq > 1:
            got = await self._get(self.record_subject(run_id, from_seq))
            if got is None:
                raise StoreCorrupted(
                    f"run {run_id}: seq {from_seq} is missing although the run's last seq is "
                    f"{last.seq}",
                    metadata={"run_id": run_id, "seq": from_seq},
                )
            start_sseq = got[1]
        expected = from_seq
        async for msg in self._messages(self.run_subject(run_id), start_sseq, end_sseq):
            try:
                rec = decode(msg.data)
            except JournaldError as exc:
                raise StoreCorrupted(
                    f"run {run_id}: subject {msg.subject} (seq {expected}) does not hold a "
                    f"valid record: {exc.message}",
                    metadata={
                        "run_id": run_id,
                        "subject": msg.subject,
                        "file": msg.subject,
                        "seq": expected,
                    },
                ) from exc
            token = msg.subject.rsplit(".", 1)[-1]
            if rec.seq != expected or token != str(rec.seq):
                raise StoreCorrupted(
                    f"run {run_id}: expected seq {expected}, found seq {rec.seq} on subject "
                    f"{msg.subject}",
                    metadata={"run_id": run_id, "seq": expected},
                )
            expected += 1
            yield rec
        if expected <= last.seq:
            raise StoreCorrupted(
                f"run {run_id}: records {expected}..{last.seq} are missing",
                metadata={"run_id": run_id, "seq": expected},
            )

    async def load(self, run_id: str, from_seq: int = 1) -> list[Record]:
        return [r async for r in self.iter_records(run_id, from_seq)]

    async def info(self, run_id: str) -> RunInfo:
        self._check_open()
        last, end_sseq = await self._last_or_missing(run_id)
        meta_got = await self._get(self.record_subject(run_id, 1))
        if meta_got is None:
            raise StoreCorrupted(
                f"run {run_id}: the meta record (seq 1) is missing",
                metadata={"run_id": run_id, "seq": 1},
            )
        meta, first_sseq, _ = meta_got
        count = 0
        size = 0
        async for msg in self._messages(
            self.run_subject(run_id), first_sseq, end_sseq, headers_only=True
        ):
            count += 1
            size += msg.size + 1
        return run_info_from(run_id, meta, last, count, size)

    async def _run_ids(self) -> list[str]:
        info = await self._retrying(
            "reading the stream state", lambda: self._jsm.stream_info(self.stream)
        )
        end = int(info.state.last_seq)
        first = int(info.state.first_seq or 1)
        ids: list[str] = []
        async for msg in self._messages(self.meta_filter, first, end, headers_only=True):
            tokens = msg.subject.split(".")
            run_id = tokens[-2] if len(tokens) >= 2 else ""
            try:
                ids.append(validate_id(run_id))
            except JournaldError:
                continue
        return ids

    async def list(self) -> list[RunInfo]:
        self._check_open()
        gate = asyncio.Semaphore(LIST_CONCURRENCY)

        async def one(run_id: str) -> RunInfo | None:
            async with gate:
                try:
                    return await self.info(run_id)
                except SessionNotFound:  # deleted while listing
                    return None
                except StoreCorrupted as exc:  # one damaged run does not hide the others
                    return corrupted_info(run_id, exc)

        found = await asyncio.gather(*(one(r) for r in await self._run_ids()))
        infos = [i for i in found if i is not None]
        return sorted(infos, key=lambda i: i.updated, reverse=True)

    async def delete(self, run_id: str) -> bool:
        self._check_writable("deleting a run")
        validate_id(run_id)
        if run_id in self._open:
            raise Locked(
                f"run {run_id} is open for append; end its lease before deleting it",
                metadata={"run_id": run_id},
            )
        if await self._get(self.run_subject(run_id)) is None:
            return False
        if self.leases is not None:
            await self.leases.confirm(run_id, "deleting the run")
        # `<prefix>.<run>.>`: the records and anything else kept under the run (checkpoints).
        subject = f"{self.prefix}.{run_id}.>"
        await self._retrying(
            f"purging {subject}", lambda: self._jsm.purge_stream(self.stream, subject=subject)
        )
        return True

    async def recover(self, run_id: str, *, check: RecordCheck | None = None) -> QuarantineReport:
        raise Unsupported(
            f"run {run_id}: the JetStream backend has no recovery (quarantine); the stream "
            "keeps its own checksums and replicas: restore the stream from a backup "
            "(`nats stream backup` / `nats stream restore`)",
            metadata={"run_id": run_id, "backend": "jetstream"},
        )

    async def verify(self, run_id: str) -> VerifyReport:
        return await verify_stream(run_id, self.iter_records(run_id))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for journal in [j for j in self._open.values() if j is not None]:
            await journal.close()
        self._open.clear()
        with contextlib.suppress(Exception):
            await self._nc.close()
