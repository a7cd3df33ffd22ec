"""One writer per held run (docs/design.md#the-run-writer): acquire, the append path, close.

``acquire`` is the one way a lease is taken, by a client's ``Open`` and by the daemon's own
lease for an operation (compaction, restore, a fork's new run) alike, in one order:

1. lock: the run's opening lock, the owner check (a client's), no lease held or closing, the
   run's cross-host entry (JetStream) before any state is read;
2. read once and fold: an existing run is folded from its snapshot on (the read leaves the
   active segment's tail for the open below, so it is decoded once), collecting the marks its
   lease saves when it ends; a new run's meta record passes the gate and is created;
3. gates: the resume gates of a client's ``Open`` (the daemon's own lease has none), before
   the journal is opened, so a refused ``Open`` writes nothing (no tail cut, no format stamp);
4. the journal: opened for append (its lock file; a torn tail is repaired here), and the fold
   done again if the journal ends elsewhere than the fold did.

``RunWriter.queue`` is the append path, under the writer's lock: the gate (seq order, the
new-vs-retry plan, schema, size), admission against the state that includes every append
queued before, the fold into that state, the queue; once the write covering them is durable,
their fold mark is noted and they are published to tails (in seq order, before the acks).
``close`` saves the fold marks and the snapshot of the state as stored, then closes the
journal. The store answers with what happened (a slot, a future per queued batch); nothing
in it calls back into the writer.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from journald import telemetry
from journald.core.admission import admit
from journald.core.errors import InvalidRecord, SessionExists, SessionNotFound
from journald.core.fold import RunState, fold_into, resume_warnings
from journald.core.pages import PageResolver
from journald.core.records import Record
from journald.storage.base import AppendResult, HostLeases, Journal, Store
from journald.storage.pages import PageStore
from journald.writer.folding import fold_stored
from journald.writer.gate import Gate, Incoming, Trace, locate
from journald.writer.marks import FoldMarks, mark_of

log = logging.getLogger(__name__)
Warnings = list[tuple[str, str]]
L = TypeVar("L")


class Tails(Protocol):
    """Where durable records go (the daemon's watch hub)."""

    def publish(self, run_id: str, records: list[Record]) -> None: ...


class Registry(Protocol):
    """Who holds which run here (the daemon's lease table)."""

    def opening_lock(self, run_id: str) -> asyncio.Lock: ...

    def refuse_if_held(self, run_id: str) -> None: ...

    async def wait_closed(self, run_id: str) -> None: ...


class Owners(Protocol):
    async def check(self, run_id: str) -> None: ...

    async def claim(self, run_id: str, journal: Journal) -> None: ...


class Damage(Protocol):
    async def refuse_if_damaged(self, run_id: str) -> None: ...


@dataclass(slots=True)
class Parts:
    """What every writer of the daemon shares."""

    store: Store
    gate: Gate
    marks: FoldMarks
    tails: Tails
    registry: Registry
    owners: Owners
    scrubs: Damage
    host: HostLeases | None = None
    pages: PageStore | None = None
    """Where paged rebases' messages are read from (docs/design.md#message-pages)."""


@dataclass(frozen=True, slots=True)
class Acquire:
    """What a lease asks for. ``create`` builds the meta record of a new run (None: the run
    must exist); ``may_resume``: an existing run may be opened; ``gates``: the resume gates
    (a client's), returning their warnings; ``check_owner``: the peer's owner check."""

    run_id: str
    holder: Mapping[str, object]
    create: Callable[[], Record] | None = None
    may_resume: bool = True
    gates: Callable[[RunState], Warnings] | None = None
    check_owner: bool = False
    exists_hint: str = "resume it or pick another id"
    missing_hint: str = "list runs with `journald ls`"


@dataclass(slots=True)
class Ticket:
    """A planned batch: its retried records (already stored) and its queued new ones."""

    durability: str
    dups: list[Record]
    new: list[Record]
    _done: asyncio.Future[None] | None

    async def durable(self) -> list[AppendResult]:
        """The acknowledgements, once the write covering the new records is durable; the
        write's typed error if it (or one queued before it) failed."""
        if self._done is not None:
            await self._done
        return [AppendResult(r.seq, r.hash, self.durability, True) for r in self.dups] + [
            AppendResult(r.seq, r.hash, self.durability) for r in self.new
        ]


class RunWriter:
    """The writer of one held run: its journal, its folded state and the append path."""

    def __init__(self, run_id: str, journal: Journal, state: RunState, parts: Parts) -> None:
        self.run_id = run_id
        self.journal = journal
        self.state = state
        self.parts = parts
        self.lock = asyncio.Lock()
        self._voids = journal.pipeline.voids
        """The journal's ``pipeline.voids`` that ``state`` was folded under: when a failed
        write voids queued records the count moves and the state is refolded from the store."""

    async def settled(self, wait: bool = True) -> RunState:
        """The state as stored (caller holds ``lock``, or the lease has ended): with ``wait``,
        after the queued appends are durable; refolded from the store if a failed write
        voided records it had folded."""
        pipeline = self.journal.pipeline
        if wait:
            await pipeline.settled()
        if self._voids != pipeline.voids:
            await pipeline.settled()  # nothing else is queued: the caller holds the lock
            voids = pipeline.voids
            self.state = await fold_stored(self.parts.store, self.run_id, pages=self.parts.pages)
            self._voids = voids
        return self.state

    async def queue(
        self,
        items: Sequence[Incoming],
        trace: Trace | None,
        rpc: contextvars.Context | None,
        pages: PageResolver | None = None,
    ) -> Ticket:
        """Every append goes through here (caller holds ``lock``): gated, admitted against
        the state that includes everything queued before, folded into it and queued; tails
        and fold marks get the records once they are durable. ``pages`` reads the message
        pages the batch's rebases reference (stored before the batch)."""
        await self.settled(wait=False)
        gate, pipeline = self.parts.gate, self.journal.pipeline
        gate.batch(self.run_id, items)
        async with pipeline.slot(items[0].seq, items[-1].seq) as slot:
            dups, new = gate.plan(self.run_id, slot.at, slot.prev, slot.stored, items, trace)
            if not new:
                return Ticket(pipeline.durability, dups, [], None)
            pipeline.check(new)
            admit(self.state, new)
            try:
                if rpc is None:  # tracing off: no span to parent, no context to copy
                    self._fold(new, pages)
                else:
                    rpc.run(self._fold, new, pages)  # the fold's span belongs to the RPC
            except BaseException:
                self._voids = -1  # half folded: refold before the next use
                raise
            mark = mark_of(self.state) if self.state.pending is None else None
            queued = pipeline.queue(slot, new)
        # completed before ``acked``: tails and marks see a batch before its ack, and a
        # caller that gives up (cancelling ``acked``) does not keep it from them
        queued.durable.add_done_callback(functools.partial(self._durable, new, mark))
        await self.seal()
        return Ticket(pipeline.durability, dups, new, queued.acked)

    async def seal(self) -> None:
        """Keep the held state's message tail bounded (docs/design.md#message-pages): once it
        holds more than two pages' worth, its front is stored as pages and referenced. The
        pages are stored before the snapshot that will name them; a failure leaves the tail
        as it was (the next append tries again), it never fails the append. The answered
        tool_use ids are kept bounded the same way (``journald.core.answered``)."""
        if self.parts.pages is None:
            return
        try:
            await self.parts.pages.seal(self.run_id, self.state.messages)
            await self.parts.pages.seal_answered(self.run_id, self.state.answered_ever)
        except Exception as exc:  # a cache of memory, not of the journal: the append stands
            log.warning(
                "run %s: sealing message pages failed (%s); kept in memory", self.run_id, exc
            )

    def _fold(self, new: list[Record], pages: PageResolver | None) -> None:
        with telemetry.fold_span(self.run_id, len(new)):
            fold_into(self.state, new, pages)

    def _durable(
        self, new: list[Record], mark: dict[str, object] | None, done: asyncio.Future[None]
    ) -> None:
        if done.cancelled() or done.exception() is not None:
            return  # voided: the state is refolded, nothing was stored
        self.parts.marks.note(self.run_id, mark)
        self.parts.tails.publish(self.run_id, new)

    async def commit(
        self, records: list[Record], pages: PageResolver | None = None
    ) -> list[AppendResult]:
        """Append records the daemon built (rebases, forks) through the same gate and wait
        until they are durable (caller holds ``lock``); ``pages`` reads the pages their
        rebases reference."""
        rpc = contextvars.copy_context()
        with telemetry.store_append(self.run_id) as span:
            ticket = await self.queue([Incoming.of(r) for r in records], None, rpc, pages)
            span.records(ticket.new)
            return await ticket.durable()

    async def close(self) -> None:
        """The marks and snapshot of the state as stored, then the journal (caller holds
        ``lock``; the lease has ended)."""
        try:
            await self.parts.marks.save_on_close(self.run_id, await self.settled())
        except Exception:  # the index is a cache: it never keeps a journal open
            log.exception("lease close hook failed for run %s", self.run_id)
        await self.journal.close()


async def acquire(
    parts: Parts, req: Acquire, grant: Callable[[RunWriter], L]
) -> tuple[L, bool, Warnings]:
    """Take a lease on ``req.run_id`` in the one order (module doc); ``grant`` registers the
    writer (under the opening lock). Returns what it returned, whether the run was created,
    and the warnings of the ``Open``. A refusal releases everything taken."""
    run_id = req.run_id
    async with parts.registry.opening_lock(run_id):
        if req.check_owner:  # under the opening lock, before `locked` could name a holder
            await parts.owners.check(run_id)
        parts.registry.refuse_if_held(run_id)
        await parts.registry.wait_closed(run_id)
        if parts.host is not None:  # before any state is read: held elsewhere is refused
            await parts.host.acquire(run_id, req.holder)
        try:
            writer, created, warnings = await _take(parts, req)
            try:
                return grant(writer), created, warnings
            except BaseException:
                await writer.journal.close()
                raise
        except BaseException:
            if parts.host is not None:
                await parts.host.release(run_id)
            raise


async def _take(parts: Parts, req: Acquire) -> tuple[RunWriter, bool, Warnings]:
    run_id, store = req.run_id, parts.store
    exists = await store.exists(run_id)
    if exists and not req.may_resume:
        raise SessionExists(
            f"run {run_id} already exists; {req.exists_hint}", metadata={"run_id": run_id}
        )
    if not exists and req.create is None:
        raise SessionNotFound(
            f"run {run_id} does not exist; {req.missing_hint}", metadata={"run_id": run_id}
        )
    warnings: Warnings = []
    if not exists:
        assert req.create is not None
        meta = req.create()
        try:
            parts.gate.record(meta)
        except InvalidRecord as err:
            raise locate(err, run_id, 1, "meta") from None
        journal = await store.create(meta)
        try:
            state = fold_into(RunState(), (meta,))
            parts.marks.created(run_id)
            await parts.owners.claim(run_id, journal)
        except BaseException:
            await journal.close()
            raise
        return RunWriter(run_id, journal, state, parts), True, warnings
    state = await _fold_for_writer(parts, run_id)
    if req.gates is not None:
        warnings.extend(req.gates(state))
    journal = await store.open(run_id)
    try:
        if journal.repair is not None:
            warnings.append(("torn_tail_repaired", journal.repair.sentence()))
        if journal.last_seq != state.last_seq:  # the run moved between the read and the open
            state = await _fold_for_writer(parts, run_id)
        warnings.extend(resume_warnings(state))
    except BaseException:
        await journal.close()
        raise
    writer = RunWriter(run_id, journal, state, parts)
    await writer.seal()  # a run folded from seq 1 holds every message until sealed
    return writer, False, warnings


async def _fold_for_writer(parts: Parts, run_id: str) -> RunState:
    """The state of a run a lease is about to hold: from its snapshot when that still matches,
    collecting the marks its lease saves when it ends. Refused while the scrubber's finding of
    damage holds (docs/design.md#scrubbing)."""
    await parts.scrubs.refuse_if_damaged(run_id)
    doc = await parts.marks.load_index(run_id)
    snapshot = await parts.marks.load_snapshot(run_id)
    at = snapshot.last_seq if snapshot is not None else 0
    new: list[dict[str, object]] = []
    state = await fold_stored(parts.store, run_id, new, snapshot, parts.pages)
    # a snapshot that did not match is replaced by the next save
    parts.marks.opened(run_id, doc, at if state is snapshot else 0, new)
    return state
