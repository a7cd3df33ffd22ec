"""The pipelined writer of the sync client: up to ``window`` appends in flight on one
``AppendStream``, each with its own ack.

    with run.pipelined(window=16) as w:
        w.append(Entry.assistant(calls, stop_reason="tool_use")).ack()  # wait: tools may run
        for call in calls:
            w.append(codec.tool_entry(call, run_tool(call)))  # streamed behind, not awaited
    # leaving the block waits for every ack and closes the stream

Seqs are given in submission order (``inflight``); a thread per stream reads the answers and
wakes the waiters; after a lost connection that thread re-opens the lease
(``retry.recover``, the unary path's rules) and resends what is unanswered on a new stream.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import grpc
from journald_proto import journal_pb2 as pb

from journald_client import codec, errors, inflight, retry
from journald_client.codec import Entry
from journald_client.state import Ack

if TYPE_CHECKING:
    from journald_client.client import Run

T = TypeVar("T", Ack, list[Ack])

DEFAULT_WINDOW = 16
"""Appends a pipelined writer keeps in flight unless told otherwise."""


class Pending(inflight.Handle, Generic[T]):
    """One submitted append: ``ack()`` waits for it and gives its ack (or acks)."""

    _done: threading.Event

    def ack(self, timeout_s: float | None = None) -> T:
        """Wait until the append is durable; raises its typed error if it failed (or a
        failure before it voided it), ``TimeoutError`` after ``timeout_s``."""
        if not self._done.wait(timeout_s):
            raise TimeoutError(f"seq {self.seq} is not acknowledged after {timeout_s}s")
        return cast(T, inflight.answer(self._item))


Outbox = queue.SimpleQueue[pb.AppendRequest | None]


def _take(q: Outbox) -> object:
    try:
        return q.get_nowait()
    except queue.Empty:
        return inflight.EMPTY


def _requests(q: Outbox, batches: bool) -> Iterator[pb.AppendStreamRequest]:
    """The stream's messages: each append that is queued when gRPC asks for the next message
    goes into that message (``inflight.coalesce``)."""
    carry: pb.AppendRequest | None = None
    while (first := carry if carry is not None else q.get()) is not None:
        msg, carry, ended = inflight.coalesce(first, lambda: _take(q), batches)
        yield msg
        if ended:
            return


class PipelinedWriter(inflight.WriterBase):
    """Appends of one run kept in flight on an ``AppendStream`` (``Run.pipelined``)."""

    _cond: threading.Condition

    def __init__(self, run: Run, window: int = DEFAULT_WINDOW) -> None:
        super().__init__(run, window, run._client.reconnect_timeout)
        self._run = run
        self._cond = threading.Condition()
        self._queue: Outbox | None = None
        self._readers: list[threading.Thread] = []

    def append(self, entry: Entry) -> Pending[Ack]:
        """Submit one record; returns at once unless ``window`` appends are in flight."""
        return cast(Pending[Ack], self._submit([entry], single=True))

    def append_many(self, entries: Sequence[Entry]) -> Pending[list[Ack]]:
        """Submit a batch (one durable write, consecutive seqs)."""
        if not entries:
            raise errors.InvalidRequest("append_many of a pipelined writer needs an entry")
        return cast(Pending[list[Ack]], self._submit(entries, single=False))

    def _submit(self, entries: Sequence[Entry], *, single: bool) -> Pending[Any]:
        with self._cond:
            self._book.check()
            while self._book.full():
                self._cond.wait()
                self._book.check()
            item = self._book.submit(entries, single=single)
            done = threading.Event()
            item.token = done
            if self._queue is not None:
                self._queue.put(inflight.request(self._run.run_id, self._run.lease_id, item))
            elif not self._book.recovering:
                self._start_stream()
            return Pending(item, done)

    def flush(self) -> None:
        """Wait until every append in flight is answered; raises the first failure not
        reported yet."""
        with self._cond:
            while self._book.items:
                self._cond.wait()
            self._book.check()

    def close(self) -> None:
        """Flush, then end the stream (idempotent)."""
        try:
            if self._book.flush_on_close():
                self.flush()
        finally:
            with self._cond:
                self._book.closed = True
                self._end_stream()
            for reader in self._readers:
                reader.join(timeout=10)
            self._run._pipelined = None

    # --- the stream ---------------------------------------------------------------------------

    def _start_stream(self) -> None:
        """A new stream carrying every append in flight (caller holds the condition)."""
        q: Outbox = queue.SimpleQueue()
        for req in self._book.requests(self._run.run_id, self._run.lease_id):
            q.put(req)
        stub = self._run._client._stub
        batches = self._run.append_stream_batches
        responses = stub.AppendStream(_requests(q, batches), metadata=codec.metadata())
        reader = threading.Thread(
            target=self._read, args=(responses, q), name="journald-pipelined", daemon=True
        )
        self._readers = [r for r in self._readers if r.is_alive()] + [reader]
        self._queue = q
        reader.start()

    def _end_stream(self) -> None:
        if self._queue is not None:
            self._queue.put(None)
            self._queue = None

    def _read(self, responses: Any, q: Outbox) -> None:
        try:
            for resp in responses:
                with self._cond:
                    self._follow(self._run, self._book.answered(resp))
            return
        except grpc.RpcError as exc:
            failure = self._run._client._error(exc)
        except errors.JournaldError as err:
            failure = err
        except Exception as exc:  # a bug must not leave the waiters hanging
            failure = errors.JournaldError(f"the pipelined writer's reader failed: {exc!r}")
        finally:
            q.put(None)  # lets gRPC's sending thread leave the request iterator
        self._recover(failure)

    def _recover(self, failure: errors.JournaldError) -> None:
        """After the stream failed: re-open and resend, or void what is in flight."""
        with self._cond:
            self._queue = None
            unacked = self._book.begin_recovery()
        if not unacked:
            return
        self._budget.start()
        try:
            steps = retry.recover(self._run._retry_writer(), failure, self._budget, unacked)
            adopted = retry.drive(steps, self._run._recovery_step)
        except errors.JournaldError as final:
            with self._cond:
                run = self._run
                self._follow(
                    self._run,
                    self._book.recovery_failed(final, run.next_iteration, run_closed=run.closed),
                )
            return
        with self._cond:
            found, resend = self._book.recovered(adopted)
            self._follow(self._run, found)
            if resend:
                self._start_stream()

    def __enter__(self) -> PipelinedWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[1] is None:
            self.close()
            return
        with contextlib.suppress(errors.JournaldError):  # the block's own exception wins
            self.close()
