"""Many runs' writer leases over one ``Leases`` stream (docs/protocol.md#many-leases-on-one-stream).

    with jc.connect() as client, client.lease_set() as leases:
        runs = [leases.open(f"thread-{i}", fp) for i in range(64)]
        runs[3].assistant(...)          # a Run like any other: appends, pipelined, compact
        runs[3].close()                 # releases that run over the stream

A process that holds many runs at once (a server with a thread per conversation, an agent
pool) would hold one ``Open`` stream, and one thread, per run with ``Client.open``; a
``LeaseSet`` holds them all over one stream and one reader thread. Each ``start``/``open``/
``resume`` is the client's (same arguments, same resume gates, same typed refusals, the same
retries while the daemon restarts) and returns a ``Run``; only the way its lease is held
differs. A run whose lease is lost re-acquires it over the stream (a new stream when the old
one broke). ``close()`` ends every lease of the set at once (the daemon releases them all
and finishes the stream once each run can be opened again).

The bookkeeping of requests and answers (``Answers``) is shared with the asyncio
``AsyncLeaseSet`` (``journald_client.aio_lease_set``).
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
from types import TracebackType
from typing import Any, Generic, TypeVar

import grpc
from journald_proto import journal_pb2 as pb

from journald_client import codec, errors
from journald_client.client import RELEASE_TIMEOUT_S, Client, Run
from journald_client.codec import OpenParams
from journald_client.opening import Opener, Opening

CLOSE_TIMEOUT_S = 30.0
"""How long ``close()`` waits for the daemon to release every lease of the set."""

H = TypeVar("H")


def closed_error() -> errors.LeaseLost:
    return errors.LeaseLost("this lease set is closed; open the runs with a new one")


def stream_finished() -> errors.LeaseLost:
    return errors.LeaseLost(
        "the daemon finished the Leases stream (it is shutting down); every lease on it ended"
    )


class Answers(Generic[H]):
    """Which request each answer belongs to and which lease each ``ended`` ends, free of I/O
    (the sync and the asyncio stream each wrap one). ``H`` is the transport's lease handle."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.waiting: dict[int, Any] = {}
        """Request id -> the transport's waiter (an event, a future)."""
        self.leases: dict[str, H] = {}
        """Run id -> the handle of its lease on this stream."""
        self.failure: errors.JournaldError | None = None
        """Why the stream ended, once it has (every waiter and lease ends with it)."""

    def request(self, waiter: Any, **op: Any) -> pb.LeasesRequest:
        if self.failure is not None:
            raise self.failure
        req = pb.LeasesRequest(request_id=next(self._ids), **op)
        self.waiting[req.request_id] = waiter
        return req

    @staticmethod
    def outcome(resp: pb.LeasesResponse) -> pb.Lease | bool | errors.JournaldError:
        """What an answer says: the lease granted, whether a release released, a refusal."""
        if resp.HasField("lease"):
            return resp.lease
        if resp.HasField("released"):
            return resp.released.released
        if resp.HasField("refused"):
            return errors.from_detail(resp.refused)
        return errors.JournaldError(f"an answer of the Leases stream says nothing: {resp}")


class StreamLease:
    """One lease of a ``LeaseSet``: what a ``Run`` holds (``client.Held``)."""

    def __init__(self, stream: _Stream, lease: pb.Lease) -> None:
        self._stream = stream
        self.lease = lease
        self.ended: str | None = None
        self.done = threading.Event()

    def end(self, reason: str) -> None:
        if not self.done.is_set():
            self.ended = reason
            self.done.set()

    def cancel(self) -> None:
        """Release the lease over the stream now (bounded by ``RELEASE_TIMEOUT_S``; the
        lease ends with the stream at the latest)."""
        if self.done.is_set():
            return
        self._stream.release(self)
        self.end("released")


class _Waiter:
    def __init__(self) -> None:
        self.ready = threading.Event()
        self.answer: pb.LeasesResponse | None = None


class _Stream:
    """One ``Leases`` call: requests fed from a queue, answers read by one daemon thread."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self.book: Answers[StreamLease] = Answers()
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[pb.LeasesRequest | None] = queue.SimpleQueue()
        self.call: Any = client._stub.Leases(
            iter(self._requests.get, None), metadata=codec.metadata()
        )
        self._reader = threading.Thread(target=self._read, name="journald-leases", daemon=True)
        self._reader.start()

    @property
    def broken(self) -> bool:
        return self.book.failure is not None

    def _ask(self, timeout_s: float | None = None, **op: Any) -> pb.LeasesResponse | None:
        waiter = _Waiter()
        with self._lock:
            req = self.book.request(waiter, **op)
            self._requests.put(req)
        if not waiter.ready.wait(timeout_s):
            return None
        if waiter.answer is None:
            assert self.book.failure is not None
            raise self.book.failure
        return waiter.answer

    def acquire(self, req: pb.OpenRequest) -> StreamLease:
        answer = self._ask(acquire=req)
        assert answer is not None
        got = Answers.outcome(answer)
        if isinstance(got, errors.JournaldError):
            raise got
        with self._lock:
            handle = self.book.leases.get(answer.run_id)
        if handle is None or handle.lease.lease_id != answer.lease.lease_id:  # ended already
            raise errors.LeaseLost(f"the lease of run {req.run_id} ended as it was granted")
        return handle

    def release(self, handle: StreamLease) -> None:
        if self.broken:
            return
        lease = handle.lease
        release = pb.ReleaseRequest(run_id=lease.run_id, lease_id=lease.lease_id)
        with contextlib.suppress(errors.JournaldError):  # the stream ended: so did the lease
            self._ask(RELEASE_TIMEOUT_S, release=release)

    def _read(self) -> None:
        failure: errors.JournaldError = stream_finished()
        try:
            for resp in self.call:
                self._route(resp)
        except grpc.RpcError as exc:
            failure = self._client._error(exc)
        with self._lock:
            self.book.failure = failure
            waiting, self.book.waiting = self.book.waiting, {}
            leases, self.book.leases = self.book.leases, {}
        for handle in leases.values():
            handle.end("stream_closed")
        for waiter in waiting.values():
            waiter.ready.set()

    def _route(self, resp: pb.LeasesResponse) -> None:
        with self._lock:
            if resp.HasField("ended"):
                handle = self.book.leases.pop(resp.run_id, None)
                waiter = None
            else:
                handle = None
                waiter = self.book.waiting.pop(resp.request_id, None)
                if resp.HasField("lease"):  # registered here, before an `ended` can follow
                    self.book.leases[resp.run_id] = StreamLease(self, resp.lease)
                elif resp.HasField("released"):
                    gone = self.book.leases.pop(resp.run_id, None)
                    if gone is not None:
                        gone.end("released")
        if handle is not None:
            handle.end(resp.ended.reason or "ended")
        if waiter is not None:
            waiter.answer = resp
            waiter.ready.set()

    def finish(self, timeout_s: float) -> None:
        """Half-close: the daemon releases every lease on the stream, then finishes it."""
        self._requests.put(None)
        self._reader.join(timeout_s)
        if self._reader.is_alive():
            self.call.cancel()
            self._reader.join(5)

    def cancel(self) -> None:
        self.call.cancel()
        self._reader.join(5)


class LeaseSet(Opener):
    """Runs of one ``Client`` whose leases share one ``Leases`` stream (module doc)."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._stream: _Stream | None = None
        self._runs: list[Run] = []
        self.closed = False

    def _current(self) -> _Stream:
        with self._lock:
            if self.closed:
                raise closed_error()
            if self._stream is None or self._stream.broken:
                self._stream = _Stream(self._client)
            return self._stream

    def _acquire(self, params: OpenParams, req: pb.OpenRequest) -> StreamLease:
        req.message_window = self._client.message_window
        return self._current().acquire(req)

    def _reacquire(self, params: OpenParams) -> StreamLease:
        return self._acquire(params, codec.open_request(params, create=False))

    def _run(self, params: OpenParams, req: pb.OpenRequest, *, fresh: bool) -> Run:
        lease, created = self._client._open_retrying(params, req, self._acquire)
        run = Run(
            self._client,
            params,
            lease,
            created=created if fresh else None,
            reopen=self._reacquire,
        )
        with self._lock:
            self._runs = [r for r in self._runs if not r.closed] + [run]
        return run

    @property
    def _writer_name(self) -> str:
        return self._client.name

    def _opened(self, opening: Opening) -> Run:
        return self._run(opening.params, opening.request, fresh=opening.fresh)

    @property
    def runs(self) -> list[Run]:
        """The runs of the set still open."""
        with self._lock:
            return [r for r in self._runs if not r.closed]

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """End every lease of the set at once and return when each run can be opened again
        (at most ``timeout_s``; the stream is cancelled then, which ends them too)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            runs, self._runs = self._runs, []
            stream, self._stream = self._stream, None
        for run in runs:
            run.closed = True  # released below, all at once
        if stream is not None:
            stream.finish(timeout_s)

    def __enter__(self) -> LeaseSet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
