"""``AsyncLeaseSet``: ``journald_client.lease_set`` for asyncio, many runs' leases over one
``Leases`` stream read by one task.

    async with await jc.connect_async() as client, client.lease_set() as leases:
        runs = await asyncio.gather(*(leases.open(f"thread-{i}", fp) for i in range(64)))

The acquires of one set are sent at once and answered as the daemon grants them, so opening
many runs costs one stream, not one stream each. The requests and answers are matched by
``lease_set.Answers``, shared with the sync set.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, cast

import grpc
import grpc.aio
from journald_proto import journal_pb2 as pb

from journald_client import codec, errors
from journald_client.aio import AsyncClient, AsyncRun
from journald_client.client import RELEASE_TIMEOUT_S
from journald_client.codec import OpenParams
from journald_client.lease_set import CLOSE_TIMEOUT_S, Answers, closed_error, stream_finished
from journald_client.opening import AsyncOpener, Opening

EOF: Any = cast(Any, grpc.aio).EOF


class AsyncStreamLease:
    """One lease of an ``AsyncLeaseSet``: what an ``AsyncRun`` holds (``aio.AsyncHeld``)."""

    def __init__(self, stream: _AsyncStream, lease: pb.Lease) -> None:
        self._stream = stream
        self.lease = lease
        self.ended: str | None = None

    def end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = reason

    async def cancel(self) -> None:
        """Release the lease over the stream now (bounded by ``RELEASE_TIMEOUT_S``)."""
        if self.ended is not None:
            return
        await self._stream.release(self)
        self.end("released")


class _AsyncStream:
    """One ``Leases`` call: requests from a queue, answers read by one task."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self.book: Answers[AsyncStreamLease] = Answers()
        self._requests: asyncio.Queue[pb.LeasesRequest | None] = asyncio.Queue()
        self.call: Any = client._stub.Leases(self._sent(), metadata=codec.metadata())
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @property
    def broken(self) -> bool:
        return self.book.failure is not None

    async def _sent(self) -> AsyncIterator[pb.LeasesRequest]:
        while (req := await self._requests.get()) is not None:
            yield req

    async def _ask(self, **op: Any) -> pb.LeasesResponse:
        waiter: asyncio.Future[pb.LeasesResponse] = asyncio.get_running_loop().create_future()
        req = self.book.request(waiter, **op)
        self._requests.put_nowait(req)
        try:
            return await asyncio.shield(waiter)
        finally:
            self.book.waiting.pop(req.request_id, None)

    async def acquire(self, req: pb.OpenRequest) -> AsyncStreamLease:
        answer = await self._ask(acquire=req)
        got = Answers.outcome(answer)
        if isinstance(got, errors.JournaldError):
            raise got
        handle = self.book.leases.get(answer.run_id)
        if handle is None or handle.lease.lease_id != answer.lease.lease_id:
            raise errors.LeaseLost(f"the lease of run {req.run_id} ended as it was granted")
        return handle

    async def release(self, handle: AsyncStreamLease) -> None:
        if self.broken:
            return
        lease = handle.lease
        release = pb.ReleaseRequest(run_id=lease.run_id, lease_id=lease.lease_id)
        with contextlib.suppress(errors.JournaldError, TimeoutError):
            await asyncio.wait_for(self._ask(release=release), RELEASE_TIMEOUT_S)

    async def _read(self) -> None:
        failure: errors.JournaldError = stream_finished()
        try:
            while (resp := await self.call.read()) is not EOF:
                self._route(resp)
        except grpc.RpcError as exc:
            failure = self._client._error(exc)
        except asyncio.CancelledError:
            failure = closed_error()
        finally:
            self.book.failure = failure
            for handle in self.book.leases.values():
                handle.end("stream_closed")
            self.book.leases = {}
            for waiter in self.book.waiting.values():
                if waiter is not None and not waiter.done():
                    waiter.set_exception(failure)
            self.book.waiting = {}

    def _route(self, resp: pb.LeasesResponse) -> None:
        if resp.HasField("ended"):
            handle = self.book.leases.pop(resp.run_id, None)
            if handle is not None:
                handle.end(resp.ended.reason or "ended")
            return
        waiter = self.book.waiting.pop(resp.request_id, None)
        if resp.HasField("lease"):
            if waiter is None:  # its open was cancelled meanwhile: hold nothing for no one
                release = pb.ReleaseRequest(run_id=resp.run_id, lease_id=resp.lease.lease_id)
                self._requests.put_nowait(self.book.request(None, release=release))
                return
            # registered here, before an `ended` can follow
            self.book.leases[resp.run_id] = AsyncStreamLease(self, resp.lease)
        elif resp.HasField("released"):
            gone = self.book.leases.pop(resp.run_id, None)
            if gone is not None:
                gone.end("released")
        if waiter is not None and not waiter.done():
            waiter.set_result(resp)

    async def finish(self, timeout_s: float) -> None:
        """Half-close: the daemon releases every lease on the stream, then finishes it."""
        self._requests.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), timeout_s)
        except TimeoutError:
            self.call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


class AsyncLeaseSet(AsyncOpener):
    """Runs of one ``AsyncClient`` whose leases share one ``Leases`` stream."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._stream: _AsyncStream | None = None
        self._runs: list[AsyncRun] = []
        self.closed = False

    def _current(self) -> _AsyncStream:
        if self.closed:
            raise closed_error()
        if self._stream is None or self._stream.broken:
            self._stream = _AsyncStream(self._client)
        return self._stream

    async def _acquire(self, params: OpenParams, req: pb.OpenRequest) -> AsyncStreamLease:
        req.message_window = self._client.message_window
        handle = await self._current().acquire(req)
        try:
            await self._client._complete(params.run_id, handle.lease.state)
        except BaseException:
            await handle.cancel()
            raise
        return handle

    async def _reacquire(self, params: OpenParams) -> AsyncStreamLease:
        return await self._acquire(params, codec.open_request(params, create=False))

    async def _run(self, params: OpenParams, req: pb.OpenRequest, *, fresh: bool) -> AsyncRun:
        lease, created = await self._client._open_retrying(params, req, self._acquire)
        run = AsyncRun(
            self._client,
            params,
            lease,
            created=created if fresh else None,
            reopen=self._reacquire,
        )
        self._runs = [r for r in self._runs if not r.closed] + [run]
        return run

    @property
    def _writer_name(self) -> str:
        return self._client.name

    async def _opened(self, opening: Opening) -> AsyncRun:
        return await self._run(opening.params, opening.request, fresh=opening.fresh)

    @property
    def runs(self) -> list[AsyncRun]:
        """The runs of the set still open."""
        return [r for r in self._runs if not r.closed]

    async def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """``LeaseSet.close``: every lease of the set ends at once; returns when each run can
        be opened again (at most ``timeout_s``)."""
        if self.closed:
            return
        self.closed = True
        runs, self._runs = self._runs, []
        stream, self._stream = self._stream, None
        for run in runs:
            run.closed = True  # released below, all at once
        if stream is not None:
            await stream.finish(timeout_s)

    async def __aenter__(self) -> AsyncLeaseSet:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
