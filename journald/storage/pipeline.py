"""The one append pipeline every backend's journal runs (docs/design.md#the-append-pipeline).

Everything a journal decides about an append lives here, once: the seq turnstile (an append
ahead of the queue waits ``gap_wait_s`` for the seqs before it), the new-vs-retry plan (a seq
already stored is compared with the stored record re-linked onto its ``prev``; a retry that
carries no trace takes the stored one's), the admission hook (the daemon admits and folds the
new records while they are queued), group commit (every batch queued while a write is in flight
goes out in the next single write) and in-order acknowledgement: a batch is acknowledged only
after the write that covers it, and a failed write voids it and everything queued behind it
(the journal stays at its last durable record, appendable at the same seq).

A backend supplies two things: ``write(records)``, which makes new records durable (one call
per group, in seq order), and ``read_stored(seqs)``, which returns the stored records at those
seqs (all at most ``last_seq``) for the retry comparison. Optional: ``check(records)``, a
backend's own limits on new records (refused before anything is queued), and
``after_write(records)``, its bookkeeping once a group is durable (before the acks).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from journald.core.errors import BackendUnavailable, InvalidRecord, JournaldError, Locked, SeqGap
from journald.core.records import APPEND, Record, check_append, make_record
from journald.storage.base import AppendResult

Trace = Mapping[str, str]
WriteGroup = Callable[[list[Record]], Awaitable[None]]
ReadStored = Callable[[list[int]], Awaitable[Mapping[int, Record]]]
AfterWrite = Callable[[list[Record]], Awaitable[None]]
OnDurable = Callable[[], None]
OnQueued = Callable[[list[Record]], OnDurable | None]
"""Called with a batch's new records (linked, in order) just before they are queued; raising
refuses the batch (nothing is queued). What it returns runs once they are durable, in seq
order, before their acknowledgement."""


class Draft(Protocol):
    """A record to append, built once its ``prev`` (and a trace it lacks) is known."""

    @property
    def seq(self) -> int: ...

    @property
    def traced(self) -> bool: ...

    def build(self, prev: str, trace: Trace | None) -> Record:
        """The record linked onto ``prev``, stamped with ``trace`` if it has none."""
        ...


@dataclass(frozen=True, slots=True)
class RecordDraft:
    """A record already built (its ``prev`` advisory: the pipeline links it)."""

    rec: Record

    @property
    def seq(self) -> int:
        return self.rec.seq

    @property
    def traced(self) -> bool:
        return self.rec.trace is not None

    def build(self, prev: str, trace: Trace | None) -> Record:
        r = self.rec
        stamped = r.trace if r.trace is not None else trace
        if r.prev == prev and stamped == r.trace:
            return r
        return make_record(r.seq, r.kind, r.payload, prev, r.ts, stamped)


@dataclass(slots=True)
class Ticket:
    """A planned batch: its retried records (already stored) and its queued new ones."""

    run_id: str
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


@dataclass(slots=True)
class _Queued:
    records: list[Record]
    done: asyncio.Future[None]
    on_durable: OnDurable | None


def _settle(fut: asyncio.Future[None], exc: BaseException | None = None) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)
        fut.exception()  # a voided append nobody awaits any more is not an error to log


async def _closed_write(records: list[Record]) -> None:
    raise AssertionError("a closed pipeline wrote")  # refused before any write


async def _closed_read(seqs: list[int]) -> dict[int, Record]:
    raise AssertionError("a closed pipeline read")


class AppendPipeline:
    """Seq rules, group commit and acknowledgement order of one journal."""

    def __init__(
        self,
        run_id: str,
        last_seq: int,
        last_hash: str,
        *,
        durability: str,
        gap_wait_s: float,
        write: WriteGroup,
        read_stored: ReadStored,
        after_write: AfterWrite | None = None,
        check: Callable[[list[Record]], None] | None = None,
    ) -> None:
        self.run_id = run_id
        self.durability = durability
        self.last_seq, self.last_hash = last_seq, last_hash
        """The last durable record."""
        self.queued_seq, self.queued_hash = last_seq, last_hash
        """The last record queued (durable or not): where the next new record links."""
        self.voids = 0
        """How many times a failed write voided queued records (a holder of state folded
        from queued records refolds when this moves)."""
        self._gap_wait_s = gap_wait_s
        self._write = write
        self._read_stored = read_stored
        self._after_write = after_write
        self._check = check
        self._turn = asyncio.Condition()
        self._turn_waiters = 0  # appends in ``wait_turn``'s slow path: only they need a notify
        self._plan = asyncio.Lock()
        self._queue: list[_Queued] = []
        self._tail: asyncio.Future[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._refusal: JournaldError | None = None

    def refuse(self, err: JournaldError) -> None:
        """Refuse every later append with ``err`` (closed, or broken half way)."""
        if self._refusal is None:
            self._refusal = err

    @property
    def flushing(self) -> bool:
        return self._flusher is not None

    # -- planning --------------------------------------------------------------------------

    async def wait_turn(self, seq: int) -> None:
        """Return once every seq before ``seq`` is queued, or raise ``SeqGap`` after
        ``gap_wait_s`` (parallel tools finishing together append without a client queue)."""
        if seq <= self.queued_seq + 1:
            return
        self._turn_waiters += 1
        try:
            async with self._turn:
                await asyncio.wait_for(
                    self._turn.wait_for(lambda: seq <= self.queued_seq + 1), self._gap_wait_s
                )
        except TimeoutError:
            nxt = self.queued_seq + 1
            raise SeqGap(
                f"run {self.run_id}: append at seq {seq} but the next seq is {nxt} and it "
                f"did not arrive within {self._gap_wait_s}s; append seq {nxt} first "
                "(reload the run to resync)",
                metadata={"run_id": self.run_id, "seq": seq, "next_seq": nxt},
            ) from None
        finally:
            self._turn_waiters -= 1

    async def _moved(self) -> None:
        if not self._turn_waiters:  # the usual case: no append ahead of the queue waits
            return
        async with self._turn:
            self._turn.notify_all()

    async def append(self, records: Sequence[Record]) -> list[AppendResult]:
        ticket = await self.submit([RecordDraft(r) for r in records])
        return await ticket.durable()

    async def submit(
        self,
        drafts: Sequence[Draft],
        *,
        trace: Trace | None = None,
        on_queued: OnQueued | None = None,
    ) -> Ticket:
        """Plan a batch and queue its new records; returns once they are queued (await
        ``Ticket.durable`` for the acknowledgement). ``trace``: stamped into new records
        without one; a retried record without one takes the stored record's. Nothing is
        queued when this raises."""
        self._check_refused()
        if not drafts:
            raise InvalidRecord(
                f"run {self.run_id}: an append needs at least one record",
                metadata={"run_id": self.run_id, "seq": 0, "field": "records"},
            )
        for a, b in itertools.pairwise(drafts):
            if b.seq != a.seq + 1:
                raise InvalidRecord(
                    f"run {self.run_id}: a batch needs consecutive seqs; seq {b.seq} follows "
                    f"{a.seq} (send seq {a.seq + 1} next, or split the batch)",
                    metadata={"seq": b.seq, "run_id": self.run_id, "field": "records"},
                )
        first, last = drafts[0].seq, drafts[-1].seq
        await self.wait_turn(first)
        # A retry of records queued but not yet durable cannot be compared with stored bytes:
        # it waits for the write in flight (bounded: each pass outlasts one queued write).
        for _ in range(len(drafts) + 64):
            async with self._plan:
                self._check_refused()
                in_flight = self.queued_seq > self.last_seq
                if not (in_flight and first <= self.queued_seq and last > self.last_seq):
                    return await self._plan_and_queue(drafts, trace, on_queued)
                tail = self._tail
            if tail is not None:
                await asyncio.wait([tail])
        raise BackendUnavailable(  # pragma: no cover - every queued write settles
            f"run {self.run_id}: the append could not be scheduled; retry it",
            metadata={"run_id": self.run_id},
        )

    async def _plan_and_queue(
        self, drafts: Sequence[Draft], trace: Trace | None, on_queued: OnQueued | None
    ) -> Ticket:
        at, prev = self.queued_seq, self.queued_hash
        retried = [d.seq for d in drafts if d.seq <= at]
        stored = await self._read_stored(retried) if retried else {}
        dups: list[Record] = []
        new: list[Record] = []
        for d in drafts:
            if d.seq <= at:
                have = stored[d.seq]
                inherit = have.trace if trace is not None and not d.traced else None
                again = d.build(have.prev, inherit)
                check_append(at, d.seq, have.hash, again.hash, self.run_id)
                dups.append(have)
                continue
            if check_append(at + len(new), d.seq, None, "", self.run_id) == APPEND:
                rec = d.build(prev, None if d.traced else trace)
                new.append(rec)
                prev = rec.hash
        if not new:
            return Ticket(self.run_id, self.durability, dups, [], None)
        if self._check is not None:
            self._check(new)
        on_durable = on_queued(new) if on_queued is not None else None
        done = asyncio.get_running_loop().create_future()
        self._queue.append(_Queued(new, done, on_durable))
        self._tail = done
        self.queued_seq, self.queued_hash = new[-1].seq, new[-1].hash
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        await self._moved()
        return Ticket(self.run_id, self.durability, dups, new, done)

    def _check_refused(self) -> None:
        if self._refusal is not None:
            raise self._refusal

    # -- group commit ----------------------------------------------------------------------

    async def _flush(self) -> None:
        group: list[_Queued] = []
        try:
            while self._queue:
                group, self._queue = self._queue, []
                new = [r for q in group for r in q.records]
                try:
                    await self._write(new)
                except Exception as exc:
                    await self._void(group, exc)
                    continue
                self.last_seq, self.last_hash = new[-1].seq, new[-1].hash
                if self._after_write is not None:
                    await self._after_write(new)
                for q in group:
                    if q.on_durable is not None:
                        q.on_durable()
                    _settle(q.done)
                group = []
        except BaseException as exc:
            # The flusher itself is dying (cancelled, or a simulated crash): no append may
            # wait forever for a write whose outcome it will never learn.
            for q in group + self._queue:
                _settle(q.done, exc)
            raise
        finally:
            self._flusher = None

    async def _void(self, group: list[_Queued], exc: Exception) -> None:
        """A failed write fails its group and everything queued behind it; the journal
        stays at its last durable record."""
        err = (
            exc
            if isinstance(exc, JournaldError)
            else BackendUnavailable(
                f"run {self.run_id}: write failed: {exc!r}; retry the append at the same seq",
                metadata={"run_id": self.run_id},
            )
        )
        for q in group + self._queue:
            _settle(q.done, err)
        self._queue = []
        self.queued_seq, self.queued_hash = self.last_seq, self.last_hash
        self.voids += 1
        await self._moved()

    async def settled(self) -> None:
        """Wait until nothing queued is still in flight (written, or voided)."""
        for _ in range(1 << 20):
            flusher = self._flusher
            if flusher is None:
                return
            await asyncio.wait([flusher])

    async def close(self, what: str) -> None:
        """Refuse later appends and wait for the queued ones to settle."""
        self.refuse(
            Locked(
                f"journal of run {self.run_id} is {what}; open it again",
                metadata={"run_id": self.run_id},
            )
        )
        await self.settled()
        # the hooks are the journal's bound methods (a journal <-> pipeline cycle that only
        # the cycle collector would break): a closed journal is freed by its last reference
        self._write, self._read_stored = _closed_write, _closed_read
        self._after_write = self._check = None
