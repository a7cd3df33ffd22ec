"""The bookkeeping of a pipelined writer, free of I/O, shared by the sync and the asyncio one.

A pipelined writer keeps up to ``window`` appends in flight on one ``AppendStream``. This
module decides everything that is not moving bytes: the seqs and iterations each submitted
append gets (in submission order), which append an answer acknowledges (answers come in
order), what a failure voids and where the writer resumes (docs/protocol.md#pipelined-writers).
The transports (``pipelined.py``, ``aio_pipelined.py``) only send, wait and wake.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

from journald_proto import journal_pb2 as pb

from journald_client import codec, errors, retry
from journald_client.codec import Entry
from journald_client.state import Ack


@dataclass(slots=True)
class Submitted:
    """One append handed to the writer: its records, then its acks or its error."""

    records: list[pb.Record]
    single: bool
    """Submitted by ``append`` (answers one ``Ack``), not ``append_many`` (a list)."""
    acks: list[Ack] | None = None
    error: errors.JournaldError | None = None
    token: object = field(default=None, repr=False)
    """The transport's waiter for this append (an event, a future)."""

    @property
    def done(self) -> bool:
        return self.acks is not None or self.error is not None


class InFlight:
    """The appends of one pipelined writer that are sent and not yet answered, in order."""

    def __init__(self, run_id: str, window: int, last_seq: int, next_iteration: int) -> None:
        if window < 1:
            raise errors.InvalidRequest(
                f"a pipelined writer needs a window of at least 1 append, not {window}"
            )
        self.run_id = run_id
        self.window = window
        self.items: collections.deque[Submitted] = collections.deque()
        self.acked_seq = last_seq
        self.next_seq = last_seq + 1
        self.next_iteration = next_iteration
        self._error: errors.JournaldError | None = None
        self.broken: errors.JournaldError | None = None
        """Set when the writer cannot go on (the lease is lost for good): every later call
        raises it."""
        self._broken_told = False
        self.closed = False
        self.recovering = False
        """A lost stream is being recovered: new appends wait in ``items`` to be resent."""

    # --- submitting -----------------------------------------------------------------------

    def full(self) -> bool:
        return len(self.items) >= self.window

    def check(self) -> None:
        """Raise the failure the caller has not been told about yet (once), or the reason
        this writer cannot be used any more (every time)."""
        if self.closed:
            raise closed_error(self.run_id)
        if self.broken is not None:
            self._broken_told = True
            raise self.broken
        err, self._error = self._error, None
        if err is not None:
            raise err

    def flush_on_close(self) -> bool:
        """Whether closing should flush: not when the writer is closed already, nor when it
        cannot go on and has said why (closing would only repeat it)."""
        return not self.closed and (self.broken is None or not self._broken_told)

    def submit(self, entries: Sequence[Entry], *, single: bool) -> Submitted:
        """Stamp the next seqs on ``entries`` and put them in flight."""
        self.check()
        records = codec.stamp(entries, self.next_seq, self.next_iteration)
        for rec in records:
            if rec.HasField("assistant"):
                self.next_iteration = rec.assistant.iteration + 1
        self.next_seq += len(records)
        item = Submitted(records, single)
        self.items.append(item)
        return item

    def requests(self, run_id: str, lease_id: str) -> list[pb.AppendRequest]:
        """Every append in flight, to send (again) on a new stream under ``lease_id``."""
        return [request(run_id, lease_id, item) for item in self.items]

    def unacked(self) -> list[pb.Record]:
        return [rec for item in self.items for rec in item.records]

    # --- answers ----------------------------------------------------------------------------

    def answered(self, resp: pb.AppendStreamResponse) -> list[Submitted]:
        """The oldest appends in flight, acknowledged by one stream message: one append's
        ``response``, or the ``responses`` of a coalesced message."""
        if resp.responses:
            return [self.acked(r) for r in resp.responses]
        return [self.acked(resp.response)]

    def acked(self, resp: pb.AppendResponse) -> Submitted:
        """The oldest append in flight, acknowledged by ``resp``."""
        if not self.items:
            raise errors.JournaldError(
                f"run {self.run_id}: the daemon answered an append that was never sent on "
                "this stream; this is a daemon bug"
            )
        item = self.items[0]
        item.acks = codec.acks_from_pb(resp, item.records)
        self.items.popleft()
        self.acked_seq = item.acks[-1].seq
        return item

    def adopted(self, acks: Sequence[Ack]) -> list[Submitted]:
        """Every append in flight, found stored already (acks for all their records)."""
        out, rest = [], list(acks)
        while self.items:
            item = self.items.popleft()
            item.acks, rest = rest[: len(item.records)], rest[len(item.records) :]
            self.acked_seq = item.acks[-1].seq
            out.append(item)
        return out

    def failed(
        self, err: errors.JournaldError, next_iteration: int, *, broken: bool
    ) -> list[Submitted]:
        """The oldest append in flight failed with ``err``: it and every later one are void
        (their seqs are free again), and the writer resumes after the last acknowledged seq
        with ``next_iteration``. ``broken``: the writer cannot go on at all."""
        out = list(self.items)
        self.items.clear()
        for item in out:
            item.error = err
        self.next_seq = self.acked_seq + 1
        self.next_iteration = next_iteration
        if broken:
            self.broken = err
        elif out:
            self._error = err
        return out

    # --- a lost stream ----------------------------------------------------------------------

    def begin_recovery(self) -> list[pb.Record]:
        """The stream failed: the records to recover (none: nothing was lost, and the next
        append starts a new stream)."""
        unacked = [] if self.closed else self.unacked()
        self.recovering = bool(unacked)
        return unacked

    def recovery_failed(
        self, err: errors.JournaldError, next_iteration: int, *, run_closed: bool
    ) -> list[Submitted]:
        """Recovery ended in ``err``: every append in flight fails with it."""
        self.recovering = False
        broken = run_closed or retry.ends_writer(err)
        return self.failed(err, next_iteration, broken=broken)

    def recovered(self, adopted: Sequence[Ack] | None) -> tuple[list[Submitted], bool]:
        """Recovery succeeded: the appends it found stored, and whether a new stream must
        carry the rest."""
        self.recovering = False
        if adopted is not None:
            return self.adopted(adopted), False
        return [], bool(self.items) and not self.closed


class Flag(Protocol):
    def is_set(self) -> bool: ...


class Handle:
    """What both transports' handles share: the append and its done flag."""

    def __init__(self, item: Submitted, done: Flag) -> None:
        self._item = item
        self._done = done

    @property
    def seq(self) -> int:
        """The seq of the append's first record (void if the append fails)."""
        return self._item.records[0].seq

    def done(self) -> bool:
        return self._done.is_set()


class Waker(Protocol):
    def set(self) -> None: ...


class Notifier(Protocol):
    def notify_all(self) -> None: ...


class WriterBase:
    """What the sync and the asyncio pipelined writer hold alike (their I/O aside)."""

    _cond: Notifier

    def __init__(self, run: codec.RunView, window: int, reconnect_timeout_s: float) -> None:
        self._book = InFlight(run.run_id, window, run.last_seq, run.next_iteration)
        self._budget = retry.Budget(reconnect_timeout_s)

    @property
    def window(self) -> int:
        return self._book.window

    def _follow(self, run: codec.RunView, items: Sequence[Submitted]) -> None:
        """Answered appends (caller holds the condition): the run follows the acknowledged
        ones (last seq, iteration, open calls) and every waiter wakes."""
        for item in items:
            if item.acks is not None:
                run.last_seq = max(run.last_seq, item.acks[-1].seq)
                run._appended(item.records)
            cast(Waker, item.token).set()
        self._budget.reset()
        self._cond.notify_all()


def request(run_id: str, lease_id: str, item: Submitted) -> pb.AppendRequest:
    return pb.AppendRequest(run_id=run_id, lease_id=lease_id, records=item.records)


COALESCED_MESSAGE_BYTES = 4 * 1024 * 1024
"""Most bytes of appends a pipelined writer puts into one stream message (a quarter of the
daemon's default 16 MiB message limit); an append above it alone still goes alone."""

EMPTY = object()
"""``take`` of ``coalesce``: nothing more is queued right now."""


def coalesce(
    first: pb.AppendRequest, take: Callable[[], object], batches: bool
) -> tuple[pb.AppendStreamRequest, pb.AppendRequest | None, bool]:
    """One stream message: ``first`` and whatever else is queued already (``take`` gives the
    next queued append without waiting, ``None`` at the end of the stream, ``EMPTY`` when
    nothing is queued), up to ``COALESCED_MESSAGE_BYTES``; only ``first`` when the daemon
    does not take ``batches`` (docs/protocol.md#coalesced-stream-messages). Nothing waits:
    an append that finds nothing queued behind it is sent alone at once. Returns the message,
    the append taken that did not fit (the first of the next message), and whether the end
    of the stream was taken."""
    group, size = [first], first.ByteSize()
    while batches:
        nxt = take()
        if nxt is EMPTY:
            break
        if nxt is None:
            return stream_message(group), None, True
        assert isinstance(nxt, pb.AppendRequest)
        more = nxt.ByteSize()
        if size + more > COALESCED_MESSAGE_BYTES:
            return stream_message(group), nxt, False
        group.append(nxt)
        size += more
    return stream_message(group), None, False


def stream_message(appends: Sequence[pb.AppendRequest]) -> pb.AppendStreamRequest:
    """One append as ``append`` (what every daemon takes), several as ``appends``."""
    if len(appends) == 1:
        return pb.AppendStreamRequest(append=appends[0])
    return pb.AppendStreamRequest(appends=appends)


def answer(item: Submitted) -> Ack | list[Ack]:
    """What waiting on an append gives: its ack (``append``) or acks (``append_many``)."""
    if item.error is not None:
        raise item.error
    assert item.acks is not None, "answer() of an append still in flight"
    return item.acks[0] if item.single else list(item.acks)


def closed_error(run_id: str) -> errors.LeaseLost:
    return errors.LeaseLost(
        f"run {run_id}: this pipelined writer is closed; open a new one with run.pipelined()"
    )
