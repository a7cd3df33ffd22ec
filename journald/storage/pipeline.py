"""The one append pipeline every backend's journal runs (docs/design.md#the-append-pipeline).

What a journal itself must do about an append lives here, once: the seq turnstile (an append
ahead of the queue waits ``gap_wait_s`` for the seqs before it), the slot a batch is planned in
(the last queued record, where new records link, and the stored records at the seqs a retry
names, read back for the comparison), group commit (every batch queued while a write is in
flight goes out in the next single write) and in-order acknowledgement: a queued batch's future
completes only after the write that covers it, and a failed write voids it and everything
queued behind it (the journal stays at its last durable record, appendable at the same seq).

The pipeline decides nothing about a record and calls nothing of its caller: it answers with
what happened (a ``Slot``, a future per queued batch) and the caller acts on it. The seq and
new-vs-retry decisions are ``journald.core.records.plan_batch``, which the daemon's run writer
(``journald.writer``) calls inside its gate and ``append`` (the store-level API) calls too.

A backend supplies two things: ``write(records)``, which makes new records durable (one call
per group, in seq order), and ``read_stored(seqs)``, which returns the stored records at those
seqs (all at most ``last_seq``) for the retry comparison. Optional: ``check(records)``, a
backend's own limits on new records (refused before anything is queued), and
``after_write(records)``, its bookkeeping once a group is durable (before the acks).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from journald.core.errors import BackendUnavailable, InvalidRecord, JournaldError, Locked, SeqGap
from journald.core.records import Record, check_batch, make_record, plan_batch
from journald.storage.base import AppendResult

WriteGroup = Callable[[list[Record]], Awaitable[None]]
ReadStored = Callable[[list[int]], Awaitable[Mapping[int, Record]]]
AfterWrite = Callable[[list[Record]], Awaitable[None]]


@dataclass(slots=True)
class Slot:
    """Where a batch is planned (the pipeline's plan lock is held while it is open): the last
    record queued (durable or not), onto which new records link, and the stored records at
    the batch's seqs that are already queued (a retry compares itself with them)."""

    at: int
    prev: str
    stored: Mapping[int, Record]
    queued: Queued | None = None
    """The queued batch, once ``AppendPipeline.queue`` took it."""


@dataclass(slots=True)
class Queued:
    """A queued batch's two futures, completed in that order once the write covering it is
    durable (or failed with its typed error): ``durable``, the pipeline's own, which no task
    awaits (a caller that gives up cannot cancel it: react to it with a done callback), then
    ``acked``, for the caller to await."""

    records: list[Record]
    durable: asyncio.Future[None]
    acked: asyncio.Future[None]

    def settle(self, exc: BaseException | None = None) -> None:
        _settle(self.durable, exc)
        _settle(self.acked, exc)


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


def _relinked(rec: Record, prev: str, trace: Mapping[str, str] | None) -> Record:
    """``rec`` linked onto ``prev`` (its own ``prev`` is advisory), re-encoded only if that
    or the trace changes it."""
    stamped = rec.trace if rec.trace is not None else trace
    if rec.prev == prev and stamped == rec.trace:
        return rec
    return make_record(rec.seq, rec.kind, rec.payload, prev, rec.ts, stamped)


class _SlotOpening:
    """The ``async with`` of ``AppendPipeline.slot`` (a plain class: an async generator's
    context manager costs a good part of an append's own bookkeeping)."""

    __slots__ = ("_first", "_last", "_pipeline", "_slot")

    def __init__(self, pipeline: AppendPipeline, first: int, last: int) -> None:
        self._pipeline, self._first, self._last = pipeline, first, last
        self._slot: Slot | None = None

    async def __aenter__(self) -> Slot:
        self._slot = await self._pipeline._enter_slot(self._first, self._last)
        return self._slot

    async def __aexit__(self, *exc: object) -> None:
        assert self._slot is not None
        await self._pipeline._leave_slot(self._slot)


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
        self._queue: list[Queued] = []
        self._tail: asyncio.Future[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._refusal: JournaldError | None = None
        self._open: Slot | None = None

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

    def slot(self, first: int, last: int) -> _SlotOpening:
        """``async with pipeline.slot(first, last) as slot``: where a batch of seqs
        ``first``..``last`` is planned, entered once every seq before ``first`` is queued
        (``SeqGap`` after ``gap_wait_s``) and no write in flight still holds seqs the batch
        retries (a retry of records queued but not yet durable cannot be compared with stored
        bytes: it waits for that write). Batches are planned one at a time; ``queue`` queues
        the slot's new records."""
        return _SlotOpening(self, first, last)

    async def _enter_slot(self, first: int, last: int) -> Slot:
        self._check_refused()
        await self.wait_turn(first)
        for _ in range(last - first + 65):  # bounded: each pass outlasts one queued write
            await self._plan.acquire()
            try:
                self._check_refused()
                in_flight = self.queued_seq > self.last_seq
                if not (in_flight and first <= self.queued_seq and last > self.last_seq):
                    at = self.queued_seq
                    retried = list(range(first, min(last, at) + 1))
                    stored = await self._read_stored(retried) if retried else {}
                    self._open = Slot(at, self.queued_hash, stored)
                    return self._open  # the plan lock stays held until the slot is left
                tail = self._tail
            except BaseException:
                self._plan.release()
                raise
            self._plan.release()
            if tail is not None:
                await asyncio.wait([tail])
        raise BackendUnavailable(  # pragma: no cover - every queued write settles
            f"run {self.run_id}: the append could not be scheduled; retry it",
            metadata={"run_id": self.run_id},
        )

    async def _leave_slot(self, slot: Slot) -> None:
        self._open = None
        try:
            if slot.queued is not None:
                await self._moved()
        finally:
            self._plan.release()

    def check(self, records: list[Record]) -> None:
        """The backend's own limits on new records (before anything about them is done)."""
        if self._check is not None:
            self._check(records)

    def queue(self, slot: Slot, records: list[Record]) -> Queued:
        """Queue the new records planned in ``slot`` (linked after ``slot.prev``, in seq
        order, passed ``check``): its futures complete once the write covering them is
        durable, or fail with that write's typed error (or one queued before it)."""
        assert self._open is slot, "queue() belongs inside its slot"
        assert slot.queued is None, "one batch per slot"
        self._check_refused()
        loop = asyncio.get_running_loop()
        q = Queued(records, loop.create_future(), loop.create_future())
        self._queue.append(q)
        slot.queued = q
        self._tail = q.durable
        self.queued_seq, self.queued_hash = records[-1].seq, records[-1].hash
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        return q

    async def append(self, records: Sequence[Record]) -> list[AppendResult]:
        """The store-level append (migrations, tests): records the caller built, linked onto
        the journal's last hash; the seq rules of ``plan_batch``. Returns once durable."""
        if not records:
            raise InvalidRecord(
                f"run {self.run_id}: an append needs at least one record",
                metadata={"run_id": self.run_id, "seq": 0, "field": "records"},
            )
        check_batch(self.run_id, [r.seq for r in records])
        done = None
        async with self.slot(records[0].seq, records[-1].seq) as slot:
            dups, new = plan_batch(
                self.run_id,
                slot.at,
                slot.prev,
                [r.seq for r in records],
                slot.stored,
                lambda i, prev, _stored: _relinked(records[i], prev, None),
            )
            if new:
                self.check(new)
                done = self.queue(slot, new).acked
        if done is not None:
            await done
        return [AppendResult(r.seq, r.hash, self.durability, True) for r in dups] + [
            AppendResult(r.seq, r.hash, self.durability) for r in new
        ]

    def _check_refused(self) -> None:
        if self._refusal is not None:
            raise self._refusal

    # -- group commit ----------------------------------------------------------------------

    async def _flush(self) -> None:
        group: list[Queued] = []
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
                    q.settle()
                group = []
        except BaseException as exc:
            # The flusher itself is dying (cancelled, or a simulated crash): no append may
            # wait forever for a write whose outcome it will never learn.
            for q in group + self._queue:
                q.settle(exc)
            raise
        finally:
            self._flusher = None

    async def _void(self, group: list[Queued], exc: Exception) -> None:
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
            q.settle(err)
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
