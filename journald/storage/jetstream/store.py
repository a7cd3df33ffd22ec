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

The store binds the stream (``connect``) and implements the Store protocol (create, open,
reads, listing, delete, verify). Its parts are modules of their own: the reads of the stream
(``jetstream.reads``, its base class ``StreamReads``), the fenced writes and how a refused
one is resolved (``jetstream.publish``, ``FencedPublish``), and the per-run append handle
(``jetstream.journal``, ``JetStreamJournal``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from journald.core.errors import (
    BackendUnavailable,
    JournaldError,
    Locked,
    SessionExists,
    SessionNotFound,
    StoreCorrupted,
    Unsupported,
)
from journald.core.records import Record, decode, validate_id
from journald.storage.base import (
    DEFAULT_GAP_WAIT_S,
    JETSTREAM_ACK,
    QuarantineReport,
    RecordCheck,
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
from journald.storage.jetstream.errors import Scope
from journald.storage.jetstream.journal import JetStreamJournal
from journald.storage.jetstream.options import NatsOptions
from journald.storage.jetstream.publish import HEADER_ROOM, FencedPublish
from journald.storage.jetstream.sync import check_fsync_policy
from journald.storage.verify import verify_stream

if TYPE_CHECKING:
    from journald.storage.jetstream.leases import JetStreamLeases

__all__ = [
    "RECORD_FLOOR",
    "JetStreamStore",
    "NatsConfigError",
    "NatsOptions",
    "StreamConfigError",
    "check_stream_config",
    "stream_add_command",
    "subject_prefix",
]

LIST_CONCURRENCY = 8
"""Runs whose info ``list`` reads at once (each is a few requests and one short consumer)."""


class JetStreamStore(FencedPublish):
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

    # -- low-level helpers -------------------------------------------------------------

    def _check_writable(self, what: str) -> None:
        self._check_open()
        if self.read_only:
            raise BackendUnavailable(
                f"stream {self.stream} is open read-only (to copy its runs out); {what} needs "
                "a store bound normally, to a stream that is safe for journald",
                metadata={"stream": self.stream},
            )

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
