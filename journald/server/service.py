"""The lease, append and read RPCs; and ``JournalService``, the servicer the daemon serves: it
builds the shared ``Runs`` and the RPC parts (this module, ``history``, ``checkpoints``,
``attachments``) and hands them to ``edge.add_service``, which routes each RPC to the one part
that implements it. Each part decodes, calls the core or the store through ``Runs``, encodes."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from journald_proto import journal_pb2 as pb

from journald import telemetry
from journald.clock import utc_ts
from journald.core import governance
from journald.core.checkpoints import CheckpointMeta
from journald.core.errors import InvalidArgumentError, InvalidRecord, clip, limit_reached
from journald.core.fingerprint import check_gates, diff
from journald.core.fold import Message, RunState
from journald.core.records import GENESIS, Record, validate_id
from journald.server.attachments import AttachmentRpcs
from journald.server.checkpoint_service import CheckpointRpcs, meta_to_pb
from journald.server.checkpoint_transfer import CheckpointTransferRpcs
from journald.server.convert import (
    fingerprint_from_pb,
    governance_to_pb,
    incoming_from_pb,
    record_from_pb,
    record_to_pb,
    state_to_pb,
)
from journald.server.edge import streaming, unary
from journald.server.fairness import FLAGS, FairShares, PeerBudget, peer_key
from journald.server.history import HistoryRpcs
from journald.server.lease_stream import LeaseStream
from journald.server.leases import END, Lease, Subscription, WatchHub, new_holder
from journald.server.list_changes import ListChangesRpcs
from journald.server.message_window import ask_for_state, check_fits, fill_window, room_left
from journald.server.paged_edits import page_rebases
from journald.server.runs import Limits, Runs, ack_pb
from journald.server.stream_appends import CallerTrace, StreamMessage, rpc_context, stream_appends
from journald.storage.base import HostLeases, Store
from journald.storage.checkpoint_base import AttachmentStore, CheckpointStore
from journald.storage.memory import MemoryAttachmentStore, MemoryCheckpointStore
from journald.writer.gate import Incoming, at_index, locate
from journald.writer.run_writer import Acquire, Ticket

Ctx = grpc.aio.ServicerContext[Any, Any]


Envelope = TypeVar("Envelope", pb.OpenResponse, pb.LeasesResponse)
"""The message a granted lease goes out in: an Open's first message, a Leases answer."""

STREAM_IN_FLIGHT = 64
"""Messages of one AppendStream queued ahead of the acks sent (read-ahead bound)."""


async def follow_other_hosts(
    runs: Runs, run_id: str, queue: Subscription
) -> Callable[[], Awaitable[None]]:
    """Feed a tail's queue with what other daemons store for the run (records, checkpoints
    created), when the backend shares runs between hosts (its stores can ``follow``); the
    tail drops what it already has by seq and checkpoint id. Returns what stops it."""
    subs: list[Any] = []

    def record(rec: Record) -> None:
        queue.put(WatchHub.encode([rec]), len(rec.raw) or 1)

    def checkpoint(meta: CheckpointMeta) -> None:
        event = pb.CheckpointEvent(kind="created", checkpoint=meta_to_pb(meta))
        queue.put(event, event.ByteSize() or 1)

    for store, deliver in ((runs.store, record), (runs.checkpoints, checkpoint)):
        follow = getattr(store, "follow", None)
        if follow is not None:
            subs.append(await follow(run_id, deliver))

    async def stop() -> None:
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    return stop


class JournalService:
    """The lease, append and read RPCs over one ``Runs``; ``parts()`` are every RPC part."""

    def __init__(
        self,
        store: Store,
        limits: Limits | None = None,
        checkpoints: CheckpointStore | None = None,
        checkpoint_max: int = 0,
        attachments: AttachmentStore | None = None,
        host: HostLeases | None = None,
        budget: PeerBudget | None = None,
    ) -> None:
        self.budget = budget or PeerBudget(FairShares().resolved())
        self.runs = Runs(
            store,
            limits or Limits(),
            checkpoints or MemoryCheckpointStore(),
            checkpoint_max,
            attachments or MemoryAttachmentStore(),
            host,
        )
        self.store, self.limits = self.runs.store, self.runs.limits
        self.leases, self.hub = self.runs.leases, self.runs.hub
        self.lease_streams: set[LeaseStream] = set()

    def parts(self) -> list[Any]:
        runs = self.runs
        checkpoints = CheckpointRpcs(runs)
        return [
            self,
            HistoryRpcs(runs),
            checkpoints,
            CheckpointTransferRpcs(checkpoints, self.budget),
            AttachmentRpcs(runs),
            ListChangesRpcs(runs),
        ]

    # --- leases -------------------------------------------------------------------------

    @streaming
    async def Open(self, request: pb.OpenRequest, context: Ctx) -> AsyncIterator[pb.OpenResponse]:
        with self.lease_budget(request, context):
            async for item in self._open(request, context):
                yield item
                del item  # the first answer (the state) is not kept while the lease lives

    async def _open(self, request: pb.OpenRequest, context: Ctx) -> AsyncIterator[pb.OpenResponse]:
        lease, first = await self.grant(request, context, pb.OpenResponse())
        try:
            yield first
            del first  # sent: the lease keeps no copy of the state it answered with
            await lease.ended.wait()
            yield pb.OpenResponse(
                ended=pb.LeaseEnded(
                    reason=lease.end_reason,
                    message=f"the daemon ended the lease on run {request.run_id} "
                    f"({lease.end_reason}); Open the run again to continue",
                )
            )
        finally:
            self.leases.release(lease)

    @streaming
    async def Leases(
        self, request_iterator: AsyncIterator[pb.LeasesRequest], context: Ctx
    ) -> AsyncIterator[pb.LeasesResponse]:
        """Many leases over one stream (``journald.server.lease_stream``)."""
        stream = LeaseStream(self, context)
        self.lease_streams.add(stream)
        try:
            async for item in stream.serve(request_iterator):
                yield item
        finally:
            self.lease_streams.discard(stream)

    def lease_budget(
        self, request: pb.OpenRequest, context: Ctx
    ) -> contextlib.AbstractContextManager[None]:
        """The share of its peer's lease budget a lease holds while it lives."""
        return self.budget.take(
            peer_key(context),
            "max_leases_per_peer",
            1,
            f"a lease on run {clip(request.run_id, 128, keep_tail=False)}",
            "end the leases you no longer write: Release them or close their Open streams",
        )

    async def grant(
        self, request: pb.OpenRequest, context: Ctx, envelope: Envelope
    ) -> tuple[Lease, Envelope]:
        """The lease an ``OpenRequest`` asks for, through the one acquire, and ``envelope``
        (the message it goes out in) holding it; a refusal after the acquire (an answer over
        the max message size) releases it: nothing was granted to anyone."""
        run_id = validate_id(request.run_id)
        lease, created, warnings = await self._acquire_open(run_id, request, context)
        try:
            state = lease.state
            envelope.lease.CopyFrom(
                pb.Lease(
                    lease_id=lease.lease_id,
                    run_id=run_id,
                    created=created,
                    last_seq=state.last_seq,
                    last_hash=state.last_hash,
                    state=state_to_pb(state, messages=False),
                    warnings=[pb.Warning(code=k, message=m) for k, m in warnings],
                    resume_at_input_boundary=state.resume_at_input_boundary,
                    append_stream_batches=True,
                )
            )
            limit, window = self.limits.max_message_bytes, request.message_window
            # the pages of the window alone (docs/design.md#message-windows)
            msgs = await self.runs.pages.window(run_id, state.messages, window)
            envelope.lease.state.messages_offset = fill_window(
                envelope.lease.state.messages, msgs, window, room_left(envelope, limit)
            )
            check_fits(envelope, limit, "the folded state", ask_for_state(window), run_id)
        except BaseException:
            self.leases.release(lease)
            raise
        return lease, envelope

    async def _acquire_open(
        self, run_id: str, request: pb.OpenRequest, context: Ctx
    ) -> tuple[Lease, bool, list[tuple[str, str]]]:
        c = request.client
        holder = new_holder(c.name, c.pid, c.host, c.cwd)
        mode = request.mode or pb.OPEN_MODE_CREATE_OR_RESUME

        def create() -> Record:
            telemetry.stamp_open(request, context)
            return self._meta_record(run_id, request)

        def gates(state: RunState) -> list[tuple[str, str]]:
            assert state.fingerprint is not None
            current = fingerprint_from_pb(request.fingerprint)
            check_gates(
                run_id=run_id,
                stored=state.fingerprint,
                stored_interactive=state.interactive,
                completed=state.completed,
                current=current,
                current_interactive=request.interactive,
                force=request.force,
            )
            drift = diff(state.fingerprint, current)
            if not drift:
                return []
            return [
                (
                    "fingerprint_drift_forced",
                    "resumed with force despite drift: " + "; ".join(drift),
                )
            ]

        return await self.runs.acquire(
            Acquire(
                run_id,
                holder.as_doc(),
                create=None if mode == pb.OPEN_MODE_RESUME else create,
                may_resume=mode != pb.OPEN_MODE_CREATE,
                gates=gates,
                check_owner=True,
                missing_hint="start it instead of resuming (list runs with `journald ls`)",
            ),
            holder,
        )

    def _meta_record(self, run_id: str, request: pb.OpenRequest) -> Record:
        if not request.HasField("fingerprint") or not request.fingerprint.provider:
            raise InvalidRecord(
                "field fingerprint: creating a run needs a fingerprint with at least a provider",
                metadata={"field": "fingerprint", "seq": 1, "run_id": run_id},
            )
        meta = pb.Record(
            seq=1,
            ts=request.created,
            meta=pb.MetaPayload(
                run_id=run_id,
                created=request.created or utc_ts(),
                fingerprint=request.fingerprint,
                prompt_json=request.prompt_json,
                interactive=request.interactive,
                labels=request.labels,
            ),
        )
        if request.HasField("trace"):
            meta.trace.CopyFrom(request.trace)
        try:
            return record_from_pb(meta, prev=GENESIS, ts=request.created or utc_ts())
        except InvalidRecord as err:  # the writer's gate checks what this built
            raise locate(err, run_id, 1, "meta") from None

    # --- appends ------------------------------------------------------------------------

    async def _append(
        self, request: pb.AppendRequest, context: Ctx | None = None
    ) -> pb.AppendResponse:
        rpc = rpc_context()
        with self._in_flight(request, context), telemetry.store_append(request.run_id) as span:
            ticket = await self._enqueue(request, CallerTrace(context), rpc)
            span.records(ticket.new)
            results = await ticket.durable()
        return pb.AppendResponse(acks=[ack_pb(r) for r in results])

    def _in_flight(
        self, request: pb.AppendRequest, context: Ctx | None
    ) -> contextlib.AbstractContextManager[None]:
        """The bytes of an append held against its peer's budget until it is answered."""
        if context is None:
            return contextlib.nullcontext()
        size = request.ByteSize()
        return self.budget.take(
            peer_key(context),
            "max_inflight_bytes_per_peer",
            size,
            lambda: f"an append of {size} bytes to run {clip(request.run_id, 128, False)}",
            "wait for the acks of the appends already sent before sending more",
        )

    async def _enqueue(
        self, request: pb.AppendRequest, caller: CallerTrace, rpc: contextvars.Context | None
    ) -> Ticket:
        """Check the lease, build, admit and queue an append (the lease lock is held only
        until it is queued); ``Ticket.durable`` gives the acks once it is durable."""
        run_id = validate_id(request.run_id)
        lease = self.leases.check(run_id, request.lease_id)
        if not request.records:
            raise InvalidRecord(
                f"run {run_id}: an Append with no records writes nothing and is refused; "
                "send at least one record",
                metadata={"run_id": run_id, "seq": 0, "field": "records"},
            )
        first_seq = request.records[0].seq
        try:
            await lease.journal.pipeline.wait_turn(first_seq)
            items = [self._incoming(r, i) for i, r in enumerate(request.records)]
            # a writer's rebase is stored paged: its pages first (docs/design.md#message-pages)
            items, pages = await page_rebases(self.runs.pages, run_id, items)
            async with lease.lock:
                self.leases.check(run_id, request.lease_id)
                trace = caller.for_records(request.records)
                return await lease.writer.queue(items, trace, rpc, pages)
        except InvalidRecord as err:
            raise locate(err, run_id, first_seq, "records") from None

    @staticmethod
    def _incoming(msg: pb.Record, index: int) -> Incoming:
        """A received record decoded once (the writer links, encodes and gates it)."""
        try:
            return incoming_from_pb(msg, index=index, ts=msg.ts or utc_ts())
        except InvalidArgumentError as err:
            raise at_index(err, index, msg.seq) from None

    @unary
    async def Release(self, request: pb.ReleaseRequest, context: Ctx) -> pb.ReleaseResponse:
        run_id = validate_id(request.run_id)
        lease = self.leases.held(run_id)
        if lease is None or lease.lease_id != request.lease_id:
            return pb.ReleaseResponse(released=False)
        lease.end("released")
        self.leases.release(lease)
        await self.leases.wait_closed(run_id)
        return pb.ReleaseResponse(released=True)

    @unary
    async def Append(self, request: pb.AppendRequest, context: Ctx) -> pb.AppendResponse:
        return await self._append(request, context)

    @streaming
    async def AppendStream(
        self, request_iterator: AsyncIterator[pb.AppendStreamRequest], context: Ctx
    ) -> AsyncIterator[pb.AppendStreamResponse]:
        """Pipelined: every message already received is queued (up to ``STREAM_IN_FLIGHT``
        ahead of the acks sent) so they share group commits; responses go out in order. A
        message of several appends (``appends``) is queued whole before the next write, so
        it is one group commit, and answered by one message. The first append that fails
        ends the stream with its error after the acks before it; nothing after it is queued
        (a failed write voids what was queued behind it)."""
        window: asyncio.Queue[StreamMessage | Exception | None]
        window = asyncio.Queue(STREAM_IN_FLIGHT)
        held: set[contextlib.ExitStack] = set()  # bytes of the queued appends not yet acked
        caller = CallerTrace(context)  # one stream, one caller: its metadata is read once

        async def read_ahead() -> None:
            try:
                async for req in request_iterator:
                    msg = StreamMessage(batched=len(req.appends) > 0)
                    try:
                        for append in stream_appends(req):
                            bytes_held = contextlib.ExitStack()
                            held.add(bytes_held)
                            bytes_held.enter_context(self._in_flight(append, context))
                            rpc = rpc_context()
                            with telemetry.store_append(append.run_id) as span:
                                ticket = await self._enqueue(append, caller, rpc)
                                span.records(ticket.new)
                            msg.queued.append((ticket, bytes_held))
                    except Exception as exc:  # the appends before it in the message stand
                        if not msg.queued:
                            raise
                        msg.refusal = exc
                        await window.put(msg)
                        return
                    await window.put(msg)
            except Exception as exc:  # the message's own refusal, sent after the acks before
                await window.put(exc)
                return
            await window.put(None)

        reader = asyncio.create_task(read_ahead())
        try:
            while (item := await window.get()) is not None:
                if isinstance(item, Exception):
                    raise item
                response, failure = await item.answer(held)
                if response is not None:
                    yield response
                if failure is not None:
                    raise failure
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            for bytes_held in held:
                bytes_held.close()  # idempotent: what was acked is already given back

    # --- reads --------------------------------------------------------------------------

    @streaming
    async def Load(self, request: pb.LoadRequest, context: Ctx) -> AsyncIterator[pb.LoadResponse]:
        run_id = validate_id(request.run_id)
        async for rec in self.store.iter_records(run_id, max(1, request.from_seq)):
            yield pb.LoadResponse(record=record_to_pb(rec))

    @unary
    async def Fold(self, request: pb.FoldRequest, context: Ctx) -> pb.FoldResponse:
        run_id = validate_id(request.run_id)
        # a held run's state as stored (queued appends settled); a dormant run's fold is kept
        # for the History pages that complete a window
        state = await self.runs.state_of(run_id)
        out = pb.FoldResponse(state=state_to_pb(state, messages=False))
        governed: list[Message] = []
        if request.governed:  # governance walks the whole conversation: every page
            whole = await self.runs.pages.whole_state(run_id, state)
            governed, report = governance.governed_messages(whole)
            out.governance.CopyFrom(governance_to_pb(report))
            out.governed_total = len(governed)
        limit, window = self.limits.max_message_bytes, request.message_window
        room = room_left(out, limit)
        if request.omit_messages:  # the facts alone (no page read); History pages the messages
            out.state.messages_offset = len(state.messages)
        else:
            msgs = await self.runs.pages.window(run_id, state.messages, window)
            out.state.messages_offset = fill_window(
                out.state.messages, msgs, window, room // 2 if request.governed else room
            )
        if request.governed:
            out.governed_offset = fill_window(
                out.governed_messages, governed, window, room_left(out, limit)
            )
        check_fits(out, limit, "the folded state", ask_for_state(window), run_id)
        return out

    @unary
    async def List(self, request: pb.ListRequest, context: Ctx) -> pb.ListResponse:
        infos = await self.store.list()
        if self.runs.owners.enforcing:
            infos = [i for i in infos if await self.runs.owners.may_see(i.run_id)]
        if request.limit:
            infos = infos[: request.limit]
        infos = await self.runs.scrubs.listed(infos)  # damage the scrubber found
        rows = []
        for i in infos:
            lease = self.leases.held(i.run_id)
            row = pb.RunInfo(
                run_id=i.run_id,
                created=i.created,
                updated=i.updated,
                model=i.model,
                prompt_preview=i.prompt_preview,
                status="held" if lease and i.status == "open" else i.status,
                record_count=i.record_count,
                bytes=i.bytes,
                last_seq=i.last_seq,
                labels=i.labels,
                error=i.error,
            )
            if lease is not None:
                h = lease.holder
                row.holder.CopyFrom(pb.ClientInfo(name=h.name, pid=h.pid, host=h.host, cwd=h.cwd))
                row.held_since = h.since
                p = lease.state.pending
                row.pending_calls = len(p.unanswered) if p is not None else 0
            rows.append(row)
        return pb.ListResponse(runs=rows)

    @unary
    async def Delete(self, request: pb.DeleteRequest, context: Ctx) -> pb.DeleteResponse:
        run_id = validate_id(request.run_id)
        async with self.runs.unheld(run_id):
            deleted = await self.store.delete(run_id)
            # even when the records were already gone: a Delete re-issued after a crash
            # between the two steps removes what the first one left behind
            await self.runs.checkpoints.drop_run(run_id)
            await self.runs.attachments.drop_run(run_id)
            self.runs.pages.forget(run_id)
            await self.runs.scrubs.forget(run_id, deleted=True)
        self.runs.owners.forget(run_id)
        if deleted:
            self.hub.close_run(run_id)
        return pb.DeleteResponse(deleted=deleted)

    @unary
    async def Verify(self, request: pb.VerifyRequest, context: Ctx) -> pb.VerifyResponse:
        rep = await self.store.verify(validate_id(request.run_id))
        # every page its rebases reference, every answered-id chunk its snapshot does
        await self.runs.pages.check_run(self.store, request.run_id, self.runs.checkpoints)
        return pb.VerifyResponse(
            records=rep.records,
            last_seq=rep.last_seq,
            last_hash=rep.last_hash,
            segments=rep.segments,
        )

    @unary
    async def Recover(self, request: pb.RecoverRequest, context: Ctx) -> pb.RecoverResponse:
        """Hold the run as the daemon (no writer may hold it), quarantine its damage."""
        run_id = validate_id(request.run_id)
        async with self.runs.unheld(run_id):
            # the rebase recording the hole passes the one gate, like every record written
            rep = await self.store.recover(run_id, check=self.runs.gate.record)
            # a snapshot naming an answered-id chunk that is gone is a cache to drop
            await self.runs.pages.drop_unreadable_snapshot(run_id, self.runs.checkpoints)
            self.runs.pages.forget(run_id)  # decoded pages are read again from what is left
            await self.runs.scrubs.forget(run_id)  # the next pass verifies what is left
        if rep.rebase is not None:
            self.hub.publish(run_id, [rep.rebase])  # tails see the hole recorded
        return pb.RecoverResponse(
            quarantined=rep.quarantined,
            records=[
                pb.QuarantinedRecord(
                    file=str(p["file"]),
                    line=int(str(p["line"])),
                    seq=int(str(p["seq"])),
                    sha256=str(p["sha256"]),
                    bytes=int(str(p["bytes"])),
                    evidence=str(p["evidence"]),
                    reason=str(p["reason"]),
                )
                for p in rep.positions
            ],
            directory=rep.directory,
            hole=pb.SeqRange(from_seq=rep.hole_from, to_seq=rep.hole_to),
            rebase_seq=rep.rebase.seq if rep.rebase is not None else 0,
            repaired=rep.repaired,
            last_seq=rep.last_seq,
        )

    @streaming
    async def Watch(
        self, request: pb.WatchRequest, context: Ctx
    ) -> AsyncIterator[pb.WatchResponse]:
        run_id = validate_id(request.run_id)
        queue = self.hub.subscribe(run_id)
        # before the replay, so nothing appended through another daemon falls in between
        stop_following = await follow_other_hosts(self.runs, run_id, queue)
        created: set[str] = set()  # a checkpoint made here arrives from the hub and the bucket
        try:
            last = max(1, request.from_seq) - 1
            async for rec in self.store.iter_records(run_id, last + 1):
                yield pb.WatchResponse(record=record_to_pb(rec, payload=False))
                last = rec.seq
            while True:
                batch = await queue.get()
                if batch is END and queue.cut:
                    raise limit_reached(
                        f"the Watch of run {run_id} fell behind the appends by more than "
                        f"{queue.buffer_bytes} bytes and was cut after seq {last}",
                        "watch_buffer_bytes",
                        queue.buffer_bytes,
                        FLAGS["watch_buffer_bytes"],
                        f"read it faster; Watch again from seq {last + 1} to go on",
                        run_id=run_id,
                        last_seq=last,
                    )
                if batch is END:
                    return
                if isinstance(batch, pb.CheckpointEvent):
                    if batch.kind == "created":
                        if batch.checkpoint.checkpoint_id in created:
                            continue
                        created.add(batch.checkpoint.checkpoint_id)
                    yield pb.WatchResponse(checkpoint=batch)
                    continue
                for seq, response in batch:  # encoded once by the hub for every tail
                    if seq > last:
                        yield response
                        last = seq
        finally:
            self.hub.unsubscribe(run_id, queue)
            await stop_following()

    async def shutdown(self, wait_closes: bool = True) -> None:
        """End every lease stream and tail; wait for in-flight appends to reach the disk
        (``wait_closes``: and for the lease closes then running; the daemon waits for them
        itself, bounded, once its Open streams have released theirs)."""
        self.hub.close_all()
        self.runs.changes.close_all()
        await self.leases.end_all("shutdown", wait=wait_closes)
        for stream in list(self.lease_streams):
            stream.finish()  # after the `ended` of each of its leases
        await asyncio.sleep(0)
