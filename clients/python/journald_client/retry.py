"""The reconnect and retry decisions of a writer, free of I/O, shared by the sync and the
asyncio client (and by their pipelined writers).

Each procedure is a generator of *steps*: it yields what it needs done (``Call``, ``Sleep``,
``Probe``, ``Reopen``, ``Load``, ``OpenCall``, ``CreatedBy``, ``CancelLease``), and the
transport does it and sends the answer back in (``send``), or throws the typed error the
attempt raised (``throw``). ``client.py`` and ``aio.py`` each hold one small loop that runs
these steps with their own I/O; every decision (what to do after which error, how long to
keep trying, whether a lost append is already stored) is made here, once.

The rules (docs/protocol.md#retries): an append whose answer was lost is resent with the same
seqs and the same bytes, so the daemon answers ``duplicate`` for what it had stored and never
stores a second copy; after a lost lease the run is re-opened in resume mode first, and the
lease's ``last_seq`` must cover every acknowledged seq.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from journald_proto import journal_pb2 as pb

from journald_client import codec, errors
from journald_client.state import Ack


@dataclass(frozen=True, slots=True)
class Call:
    """Send the pending append again under the current lease; answers its acks."""


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Probe:
    """Wait up to ``timeout_s`` for the daemon to answer; answers whether it did."""

    timeout_s: float


@dataclass(frozen=True, slots=True)
class CancelLease:
    """Drop the writer's current lease stream (it is gone, or about to be replaced)."""


@dataclass(frozen=True, slots=True)
class Reopen:
    """Open the run again in resume mode and make the new lease the writer's; answers the
    lease's ``last_seq``."""


@dataclass(frozen=True, slots=True)
class Load:
    """The run's stored records from ``from_seq``; answers them (None if unreadable)."""

    from_seq: int


@dataclass(frozen=True, slots=True)
class OpenCall:
    """Open with this request; answers the lease handle."""

    request: pb.OpenRequest


@dataclass(frozen=True, slots=True)
class CreatedBy:
    """Whether the run's stored meta is the one ``request`` would have written."""

    request: pb.OpenRequest


Step = Call | Sleep | Probe | CancelLease | Reopen | Load | OpenCall | CreatedBy
Steps = Generator[Step, Any, Any]
"""A procedure: yields steps, receives their answers, returns its result."""

Clock = Callable[[], float]


@dataclass(slots=True)
class Budget:
    """How long a writer keeps retrying after the first failure, and its backoff."""

    timeout_s: float
    clock: Clock = time.monotonic
    deadline: float | None = None
    delays: Iterator[float] | None = None

    def start(self) -> None:
        if self.deadline is None:
            self.deadline = self.clock() + self.timeout_s

    def left_s(self) -> float:
        self.start()
        assert self.deadline is not None
        return self.deadline - self.clock()

    def next_delay(self) -> float:
        if self.delays is None:
            self.delays = codec.backoff()
        return min(next(self.delays), max(0.0, self.left_s()))

    def reset(self) -> None:
        """Progress was made: a later failure gets a fresh budget."""
        self.deadline = None
        self.delays = None


# --- what to do after an error ------------------------------------------------------------

RETRY_IN_PLACE = "retry_in_place"
REOPEN = "reopen"
GIVE_UP = "give_up"


def after_append_error(err: errors.JournaldError) -> str:
    """The one answer to "an append failed with ``err``; now what?"."""
    if codec.retry_in_place(err):
        return RETRY_IN_PLACE
    if codec.needs_reopen(err):
        return REOPEN
    return GIVE_UP


def ends_writer(err: errors.JournaldError) -> bool:
    """Whether a writer whose append failed with ``err`` cannot append again: the run refused
    to be re-opened (a gate, a terminal run) or lost acknowledged records."""
    return isinstance(err, errors.GateError | errors.StoreCorrupted)


def writer_closed(run_id: str) -> errors.LeaseLost:
    return errors.LeaseLost(f"run {run_id}: this writer was closed; open the run again")


def missing_acked(run_id: str, stored_last_seq: int, acked_seq: int) -> errors.StoreCorrupted:
    return errors.StoreCorrupted(
        f"run {run_id}: after reconnecting, the daemon's last seq is {stored_last_seq} but seq "
        f"{acked_seq} was acknowledged before; acknowledged records are missing (run "
        "`journald verify` on the run and restore it from a checkpoint or backup)",
        metadata={"run_id": run_id, "last_seq": str(stored_last_seq)},
    )


def adopted_acks(sent: Sequence[pb.Record], stored: Sequence[pb.Record] | None) -> list[Ack] | None:
    """The acks of ``sent`` if the journal holds exactly these records at their seqs (an
    append whose answer was lost before the run became unopenable), else None."""
    if stored is None or len(stored) < len(sent):
        return None
    if not all(codec.same_record(a, b) for a, b in zip(sent, stored, strict=False)):
        return None
    return [Ack(s.seq, s.hash, "unspecified", True) for s in stored[: len(sent)]]


@dataclass(frozen=True, slots=True)
class Writer:
    """What the retry procedures need to know of the writer they serve."""

    run_id: str
    target: str
    closed: Callable[[], bool]


def recover(
    w: Writer, err: errors.JournaldError, budget: Budget, unacked: Sequence[pb.Record]
) -> Steps:
    """After a failed append of ``unacked`` (in seq order): raise ``err`` when it is final,
    else wait or re-open so that the caller resends the same records. Returns their acks
    instead when they turn out to be stored already and the run cannot be opened again
    (a lost answer to a ``completed`` terminal)."""
    what = after_append_error(err)
    if what == GIVE_UP:
        raise err
    if budget.left_s() <= 0:
        raise err
    if what == RETRY_IN_PLACE:
        yield Sleep(budget.next_delay())
        return None
    return (yield from reopen(w, budget, unacked, err))


def reopen(
    w: Writer, budget: Budget, unacked: Sequence[pb.Record], cause: errors.JournaldError
) -> Steps:
    """Reconnect and re-open in resume mode, within the budget."""
    yield CancelLease()
    last = cause
    while True:
        remaining = budget.left_s()
        if remaining <= 0:
            raise last
        if w.closed():
            raise writer_closed(w.run_id) from cause
        if not (yield Probe(min(remaining, 1.0))):
            last = errors.unreachable(w.target, "reconnecting")
            continue
        try:
            stored_last_seq = yield Reopen()
        except errors.Completed as done:
            acks = adopted_acks(unacked, (yield Load(unacked[0].seq))) if unacked else None
            if acks is None:
                raise done from None
            return acks
        except errors.JournaldError as failed:
            if not codec.reopen_retryable(failed):
                raise
            last = failed
            yield Sleep(budget.next_delay())
            continue
        if w.closed():  # closed while we were re-opening: do not keep the new lease
            yield CancelLease()
            raise writer_closed(w.run_id) from cause
        if unacked and stored_last_seq < unacked[0].seq - 1:
            raise missing_acked(w.run_id, stored_last_seq, unacked[0].seq - 1)
        return None


def send(w: Writer, records: Sequence[pb.Record], timeout_s: float) -> Steps:
    """One append (``Call``), retried until acknowledged or the failure is final."""
    budget = Budget(timeout_s)
    while True:
        try:
            acks: list[Ack] = yield Call()
            return acks
        except errors.JournaldError as err:
            failure = err
        budget.start()
        adopted = yield from recover(w, failure, budget, records)
        if adopted is not None:
            return adopted


def open_run(request: pb.OpenRequest, timeout_s: float) -> Steps:
    """A fresh start/open/resume: the same Open retried while the daemon restarts. A create
    whose reply was lost finds its own run on the next attempt and resumes it. Returns the
    lease handle and whether this call created the run."""
    budget = Budget(timeout_s)
    attempted = adopted = lost = False
    while True:
        try:
            lease = yield OpenCall(request)
            return lease, bool(lease.lease.created) or adopted
        except errors.SessionExists:
            if not attempted or not (yield CreatedBy(request)):
                raise
            request = codec.resume_of(request)  # our own create went through
            adopted = True
            continue
        except errors.JournaldError as err:
            # after an attempt of ours that failed in transit, a `locked` naming this process
            # is most likely that attempt's lease, granted before its answer was lost and
            # released once the daemon sees its stream end: wait that out like a reopen does
            ours = lost and codec.locked_by_self(err)
            lost = codec.open_retryable(err) or ours
            if not (lost or ours) or budget.left_s() <= 0:
                raise
            if ours or (yield Probe(min(budget.left_s(), 1.0))):
                yield Sleep(budget.next_delay())
        finally:
            attempted = True


# --- running a procedure ------------------------------------------------------------------


class Runner:
    """Steps a procedure: ``next_step`` feeds it the last answer (or failure)."""

    def __init__(self, steps: Steps) -> None:
        self._steps = steps
        self.answer: Any = None
        self.failure: errors.JournaldError | None = None
        self.result: Any = None

    def next_step(self) -> Step | None:
        """The next step to do, or None when the procedure has returned (``result``)."""
        failure, self.failure = self.failure, None
        try:
            if failure is not None:
                step = self._steps.throw(failure)
            else:
                step = self._steps.send(self.answer)
        except StopIteration as done:
            self.result = done.value
            return None
        self.answer = None
        return step


def drive(steps: Steps, do: Callable[[Step], Any]) -> Any:
    """Run a procedure with ``do`` doing each step (blocking I/O)."""
    run = Runner(steps)
    while (step := run.next_step()) is not None:
        try:
            run.answer = do(step)
        except errors.JournaldError as err:
            run.failure = err
    return run.result


async def drive_async(steps: Steps, do: Callable[[Step], Awaitable[Any]]) -> Any:
    """Run a procedure with ``do`` doing each step (asyncio I/O)."""
    run = Runner(steps)
    while (step := run.next_step()) is not None:
        try:
            run.answer = await do(step)
        except errors.JournaldError as err:
            run.failure = err
    return run.result
