"""What every RPC part of the daemon shares: one ``Runs`` object.

It holds the record store, the checkpoint and attachment stores, the lease table, the tail hub
and the fold marks, and owns the operations more than one RPC needs: the one commit path
(admission, write, fold into the lease's cached state, publish to tails), the one fold of a
stored run, the state of a run whether held or dormant, and the daemon's own lease for an
operation on a run no client holds. The RPC parts (``service``, ``history``,
``checkpoints``, ``attachments``) each hold a ``Runs`` and nothing else of one another.

Serialization (docs/design.md#checkpoints): every operation that reads the head of a run for a
write or a checkpoint takes the run's lease lock (``head``), so it is ordered with the holder's
appends:

* a lease is held: the operation runs under ``lease.lock`` on the cached folded state; a write
  goes through the held lease's journal (``commit``) and only for its holder (``lease_id``);
  anyone else gets ``locked`` naming the holder;
* no lease is held and the operation writes: the daemon takes the lease itself for the
  operation (a concurrent ``Open`` gets ``locked`` naming the daemon), then releases it;
* no lease is held and the operation only reads: it folds the stored records (from the run's
  snapshot on, when that still matches).

Across hosts (JetStream, ``host``): every lease this daemon grants, its own included, first
takes the run's entry in the stream's lease bucket, and an operation that copies the head of
a run no lease here holds is refused ``locked`` while another daemon holds it
(docs/design.md#leases-across-hosts).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import socket
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from journald_proto import journal_pb2 as pb

from journald import telemetry
from journald.core.admission import admit
from journald.core.errors import (
    InvalidRecord,
    LeaseLost,
    SessionExists,
    SessionNotFound,
    StoreCorrupted,
)
from journald.core.fold import QUARANTINE, RunState, fold_into
from journald.core.records import Record
from journald.core.schema import validate_record
from journald.server.leases import Holder, Lease, LeaseTable, WatchHub, new_holder
from journald.server.marks import FoldMarks, mark_due, mark_of
from journald.server.owners import Owners
from journald.server.scrub import ScrubRecords
from journald.storage.base import AppendResult, HostLeases, Store
from journald.storage.checkpoint_base import AttachmentStore, CheckpointStore
from journald.storage.pipeline import Draft, OnDurable, RecordDraft, Ticket

DAEMON_HOLDER = "journald daemon"
DORMANT_CACHE_RUNS = 8  # dormant runs whose folded state reads keep
CACHE_BYTES = 64 * 1024 * 1024
"""Stored bytes of the runs whose folded state (or derived view) a read cache keeps,
beyond the newest one: a few readers of large dormant runs do not each pin a run."""
_FOLD_REFUSALS: OrderedDict[tuple[str, str], None] = OrderedDict()  # logged at ERROR once
log = logging.getLogger(__name__)
DURABILITY = {
    "memory": pb.DURABILITY_MEMORY,
    "fsync_local": pb.DURABILITY_FSYNC_LOCAL,
    "jetstream_ack": pb.DURABILITY_JETSTREAM_ACK,
}


@dataclass
class Limits:
    max_record_bytes: int = 4 * 1024 * 1024
    gap_wait_s: float = 0.5
    # the largest answer gRPC sends (``serve`` sets it from --max-message-bytes)
    max_message_bytes: int = 1 << 62


def ack_pb(r: AppendResult) -> pb.Ack:
    return pb.Ack(
        seq=r.seq,
        hash=r.hash,
        durability=DURABILITY.get(r.durability, pb.DURABILITY_UNSPECIFIED),
        duplicate=r.duplicate,
    )


def naming_run(exc: StoreCorrupted, run_id: str) -> StoreCorrupted:
    """A fold's refusal of stored records (``journald.core.fold`` is pure: it knows no run) with
    the run named, logged at ERROR the first time it is seen and at DEBUG after."""
    if exc.metadata.get("run_id") != run_id:
        exc.metadata["run_id"] = run_id
        exc.message = f"run {run_id}: {exc.message}"
    key = (run_id, exc.metadata.get("seq", ""))
    first = key not in _FOLD_REFUSALS
    _FOLD_REFUSALS[key] = None
    while len(_FOLD_REFUSALS) > 1024:
        _FOLD_REFUSALS.popitem(last=False)
    log.log(
        logging.ERROR if first else logging.DEBUG,
        "store_corrupted: run %s, seq %s: %s (the fold refuses the stored records; reads of "
        "the run fail until it is restored or recovered)",
        run_id,
        key[1],
        exc.message,
    )
    return exc


def _fold(state: RunState, rec: Record, run_id: str) -> None:
    try:
        fold_into(state, (rec,))
    except StoreCorrupted as exc:
        raise naming_run(exc, run_id) from None


def _hides_earlier_records(rec: Record, seq: int) -> bool:
    """A recovery's rebase saying records at or before ``seq`` were moved out: a snapshot
    there folded records the run no longer holds."""
    covered = rec.payload.get("covered") if rec.kind == "rebase" else None
    return (
        rec.payload.get("reason") == QUARANTINE
        and isinstance(covered, Mapping)
        and not (type(covered.get("from_seq")) is int and covered["from_seq"] > seq)
    )


async def _fold_after(
    store: Store, run_id: str, start: RunState, marks: list[dict[str, Any]] | None
) -> RunState | None:
    """``start`` (folded in place) continued with the records after its seq; None when the
    stored run no longer holds the record ``start`` ends on (pruned, recovered, restored
    from a backup, deleted and created again) or a recovery moved earlier records out."""
    seq = start.last_seq
    first = True
    try:
        async for rec in store.iter_records(run_id, seq):
            if first:
                if rec.seq != seq or rec.hash != start.last_hash:
                    return None
                first = False
                continue
            if _hides_earlier_records(rec, seq):
                return None
            _fold(start, rec, run_id)
            if marks is not None and mark_due(marks, start, seq):
                marks.append(mark_of(start))
    except SessionNotFound:
        return None  # the full fold says so for the run as a whole
    return None if first else start


async def fold_stored(
    store: Store,
    run_id: str,
    marks: list[dict[str, Any]] | None = None,
    snapshot: RunState | None = None,
) -> RunState:
    """The one fold of a run's stored records: from ``snapshot`` on (consumed) when the run
    still holds the record it ends on (docs/design.md#fold-snapshots), else from seq 1. With
    ``marks``, collect a fold mark every ``MARK_EVERY`` records (where no turn is open)."""
    with telemetry.fold_span(run_id) as span:
        state = None
        if snapshot is not None and snapshot.last_seq > 0:
            state = await _fold_after(store, run_id, snapshot, marks)
            if state is None:
                log.debug(
                    "run %s: the fold snapshot at seq %d no longer matches the stored run; "
                    "folding it in full",
                    run_id,
                    snapshot.last_seq,
                )
                if marks is not None:
                    marks.clear()
        if state is None:
            state = RunState()
            async for rec in store.iter_records(run_id):
                _fold(state, rec, run_id)
                if marks is not None and mark_due(marks, state):
                    marks.append(mark_of(state))
        span.set("journald.seq.last", state.last_seq)
    if state.last_seq == 0:
        raise SessionNotFound(f"run {run_id} has no records", metadata={"run_id": run_id})
    return state


class RunCache:
    """The newest ``runs`` entries, and of them only as many as fit ``limit_bytes`` of
    their runs' stored size (the newest always stays: it is the one being paged)."""

    def __init__(self, runs: int, limit_bytes: int = CACHE_BYTES) -> None:
        self.runs, self.limit_bytes = runs, limit_bytes
        self._items: OrderedDict[Any, tuple[Any, Any, int]] = OrderedDict()
        self.size_bytes = 0

    def get(self, name: Any, key: Any) -> Any | None:
        hit = self._items.get(name)
        if hit is None or hit[0] != key:
            return None
        self._items.move_to_end(name)
        return hit[1]

    def put(self, name: Any, key: Any, value: Any, size_bytes: int) -> None:
        old = self._items.pop(name, None)
        if old is not None:
            self.size_bytes -= old[2]
        self._items[name] = (key, value, size_bytes)
        self.size_bytes += size_bytes
        while len(self._items) > 1 and (
            len(self._items) > self.runs or self.size_bytes > self.limit_bytes
        ):
            self.size_bytes -= self._items.popitem(last=False)[1][2]


def stored_bytes(key: Any) -> int:
    """The stored size of a run in a dormant cache key (0 when the key does not say)."""
    return key[4] if isinstance(key, tuple) and len(key) == 5 else 0


def daemon_holder() -> Holder:
    """The holder the daemon names when it holds a run itself for an operation."""
    return new_holder(DAEMON_HOLDER, os.getpid(), socket.gethostname(), "")


@dataclass(slots=True)
class Held:
    """The run's state for an operation, and the lease to append through (if writing)."""

    state: RunState
    lease: Lease | None
    cwd: str


class Runs:
    def __init__(
        self,
        store: Store,
        limits: Limits,
        checkpoints: CheckpointStore,
        checkpoint_max: int,
        attachments: AttachmentStore,
        host: HostLeases | None = None,
    ) -> None:
        self.store = store
        self.host = host
        """Who holds each run across hosts (JetStream), None when runs stay on one host."""
        self.limits = limits
        self.checkpoints = checkpoints
        self.checkpoint_max = checkpoint_max
        self.attachments = attachments
        self.marks = FoldMarks(checkpoints)
        self.owners = Owners(checkpoints, store.exists)
        self.leases = LeaseTable()
        self.leases.on_close = self._lease_closed
        self.leases.on_closed = self.free_host
        if host is not None:
            host.on_lost = self._host_leases_lost
        self.hub = WatchHub()
        self.scrubs = ScrubRecords(store, checkpoints)
        self._dormant = RunCache(DORMANT_CACHE_RUNS)

    # --- records --------------------------------------------------------------------------

    def check(self, rec: Record) -> None:
        """The daemon's size limit and the record schema, before anything is written."""
        if len(rec.raw) > self.limits.max_record_bytes:
            raise InvalidRecord(
                f"record seq {rec.seq} is {len(rec.raw)} bytes; the daemon's limit is "
                f"{self.limits.max_record_bytes} bytes (--max-record-bytes): store large tool "
                "output elsewhere and journal a reference",
                metadata={"seq": rec.seq, "field": "record"},
            )
        validate_record(rec)

    async def commit(self, lease: Lease, records: list[Record]) -> list[AppendResult]:
        """Append records the daemon built (rebases, forks) and wait until they are durable
        (caller holds ``lease.lock``)."""
        rpc = contextvars.copy_context()
        with telemetry.store_append(lease.run_id) as span:
            ticket = await self.queue(lease, [RecordDraft(r) for r in records], None, rpc)
            span.records(ticket.new)
            return await ticket.durable()

    async def queue(
        self,
        lease: Lease,
        drafts: Sequence[Draft],
        trace: Mapping[str, str] | None,
        rpc: contextvars.Context | None,
    ) -> Ticket:
        """Every append path goes through here (caller holds ``lease.lock``): the new records
        are admitted against the state that includes everything queued before them, folded
        into it, and queued; tails and fold marks get them once they are durable
        (docs/design.md#the-append-pipeline)."""
        await self.settled_state(lease, wait=False)
        run_id = lease.run_id

        def fold(new: list[Record]) -> None:
            with telemetry.fold_span(run_id, len(new)):
                fold_into(lease.state, new)

        def admit_and_fold(new: list[Record]) -> OnDurable:
            admit(lease.state, new)
            try:
                if rpc is None:  # tracing off: no span to parent, no context to copy
                    fold(new)
                else:
                    rpc.run(fold, new)  # the fold's span belongs to the RPC, not the write
            except BaseException:
                lease.state_voids = -1  # half folded: refold before the next use
                raise
            st = lease.state
            mark = mark_of(st) if st.pending is None else None

            def durable() -> None:
                self.marks.note(run_id, mark)
                self.hub.publish(run_id, new)

            return durable

        return await lease.journal.pipeline.submit(drafts, trace=trace, on_queued=admit_and_fold)

    async def settled_state(self, lease: Lease, wait: bool = True) -> RunState:
        """The lease's state as stored (caller holds ``lease.lock``, or the lease has ended):
        with ``wait``, after the queued appends are durable; refolded from the store if a
        failed write voided records it had folded."""
        pipeline = lease.journal.pipeline
        if wait:
            await pipeline.settled()
        if lease.state_voids != pipeline.voids:
            await pipeline.settled()  # nothing else is queued: the caller holds the lock
            voids = pipeline.voids
            lease.state = await fold_stored(self.store, lease.run_id)
            lease.state_voids = voids
        return lease.state

    async def _lease_closed(self, lease: Lease) -> None:
        """Lease-close hook: the marks and snapshot of the state as stored."""
        await self.marks.save_on_close(lease, await self.settled_state(lease))

    # --- cross-host leases (docs/design.md#leases-across-hosts) ------------------------------

    async def take_host(self, run_id: str, holder: Holder) -> None:
        """Hold the run across hosts for ``holder`` (caller holds the run's opening lock and
        no local lease exists): ``Locked`` naming the holder when another daemon has it."""
        if self.host is not None:
            await self.host.acquire(run_id, holder.as_doc())

    async def free_host(self, run_id: str) -> None:
        if self.host is not None:
            await self.host.release(run_id)

    def _host_leases_lost(self, runs: list[str]) -> None:
        for run_id in runs:
            lease = self.leases.held(run_id)
            if lease is not None:
                log.warning("run %s: the cross-host lease is lost; ending its lease", run_id)
                lease.end("lease_lost")

    @contextlib.asynccontextmanager
    async def unheld(self, run_id: str) -> AsyncIterator[None]:
        """No lease on the run exists, here or on another host, while the body runs (the
        daemon holds it across hosts): ``Locked`` naming the holder otherwise."""
        async with self.leases.unheld(run_id):
            await self.take_host(run_id, daemon_holder())
            try:
                yield
            finally:
                await self.free_host(run_id)

    # --- state ----------------------------------------------------------------------------

    async def fold_for_read(self, run_id: str) -> RunState:
        """A dormant run's state for a read: from its snapshot when that still matches.
        Writes nothing. Refused while the scrubber's finding of damage holds."""
        await self.scrubs.refuse_if_damaged(run_id)
        return await fold_stored(self.store, run_id, None, await self.marks.load_snapshot(run_id))

    async def fold_for_writer(self, run_id: str) -> RunState:
        """The run's state for a lease about to be granted: from its snapshot when that still
        matches, collecting the marks its lease saves when it ends. Refused while the
        scrubber's finding of damage holds (docs/design.md#scrubbing)."""
        await self.scrubs.refuse_if_damaged(run_id)
        doc = await self.marks.load_index(run_id)
        snapshot = await self.marks.load_snapshot(run_id)
        at = snapshot.last_seq if snapshot is not None else 0
        new: list[dict[str, Any]] = []
        state = await fold_stored(self.store, run_id, new, snapshot)
        # a snapshot that did not match is replaced by the next save
        self.marks.opened(run_id, doc, at if state is snapshot else 0, new)
        return state

    async def state_of(self, run_id: str) -> RunState:
        """The run's folded state: the lease's cached one when held, else a dormant fold."""
        lease = self.leases.held(run_id)
        if lease is not None:
            async with lease.lock:  # its state as stored: queued appends settled
                return await self.settled_state(lease)
        return (await self.dormant_state(run_id))[1]

    async def dormant_state(self, run_id: str) -> tuple[Any, RunState]:
        """The folded state of a run no lease holds, and its cache key (None when the store
        cannot say; then it is folded every time). The key is what ``Store.info`` reports, so
        any append, prune or re-creation changes it. A kept state is not served once the
        scrubber found the run damaged."""
        await self.scrubs.refuse_if_damaged(run_id)
        try:
            info = await self.store.info(run_id)
        except (OSError, StoreCorrupted):  # the fold below names the damage precisely
            return None, await self.fold_for_read(run_id)
        key = (info.created, info.updated, info.last_seq, info.record_count, info.bytes)
        hit = self._dormant.get(run_id, key)
        if hit is not None:
            return key, hit
        # a read writes nothing: the run's index (fold marks, snapshot) is taken when a
        # writer (a lease, the daemon's own) folds it and saved when it ends
        st = await self.fold_for_read(run_id)
        self._dormant.put(run_id, key, st, stored_bytes(key))
        return key, st

    async def require_run(self, run_id: str) -> None:
        if not await self.store.exists(run_id):
            raise SessionNotFound(
                f"run {run_id} does not exist; list runs with `journald ls`",
                metadata={"run_id": run_id},
            )

    # --- the daemon's own lease -----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def daemon_lease(self, run_id: str, create: Record | None = None) -> AsyncIterator[Lease]:
        """Hold ``run_id`` as the daemon for one operation (``create``: make the run first)."""
        holder = daemon_holder()
        async with self.leases.opening_lock(run_id):
            self.leases.refuse_if_held(run_id)
            await self.leases.wait_closed(run_id)
            await self.take_host(run_id, holder)
            try:
                lease = await self._grant_own(run_id, holder, create)
            except BaseException:
                await self.free_host(run_id)
                raise
        try:
            async with lease.lock:
                yield lease
        finally:
            self.leases.release(lease)
            await self.leases.wait_closed(run_id)

    async def _grant_own(self, run_id: str, holder: Holder, create: Record | None) -> Lease:
        if create is not None:
            if await self.store.exists(run_id):
                raise SessionExists(
                    f"run {run_id} already exists; fork into another id",
                    metadata={"run_id": run_id},
                )
            journal = await self.store.create(create)
            state = fold_into(RunState(), (create,))
            self.marks.created(run_id)
            await self.owners.claim(run_id, journal)
        else:
            await self.require_run(run_id)
            journal = await self.store.open(run_id)
            try:
                state = await self.fold_for_writer(run_id)
            except BaseException:
                await journal.close()
                raise
        return self.leases.grant(run_id, holder, journal, state)

    @contextlib.asynccontextmanager
    async def head(
        self, run_id: str, lease_id: str, write: bool, exclusive: bool = True
    ) -> AsyncIterator[Held]:
        """The run's head, serialized with its appends (see the module doc); ``exclusive``
        (an operation that checkpoints or copies the head): refused ``locked`` while another
        host holds the run, whose head moves under it."""
        lease = self.leases.held(run_id)
        if lease is None and lease_id:
            raise LeaseLost(
                f"no live lease {lease_id} on run {run_id}: the lease ended; Open the run "
                "again, or omit lease_id to let the daemon hold the run for the operation",
                metadata={"run_id": run_id},
            )
        if lease is not None:
            if write and lease.lease_id != lease_id:
                self.leases.refuse_if_held(run_id)  # raises locked naming the holder
            async with lease.lock:
                if lease.ended.is_set():
                    raise LeaseLost(
                        f"the lease on run {run_id} ended during the operation; retry",
                        metadata={"run_id": run_id},
                    )
                yield Held(await self.settled_state(lease), lease, lease.holder.cwd)
            return
        if write:
            async with self.daemon_lease(run_id) as own:
                yield Held(own.state, own, "")
            return
        if exclusive and self.host is not None:
            await self.host.refuse_if_held_elsewhere(run_id)
        await self.require_run(run_id)
        yield Held(await self.fold_for_read(run_id), None, "")
