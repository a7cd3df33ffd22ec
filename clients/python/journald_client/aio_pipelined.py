"""The pipelined writer of the asyncio client: the sync one's semantics (``pipelined.py``)
over ``grpc.aio``.

    async with run.pipelined(window=16) as w:
        await (await w.append(Entry.assistant(calls, stop_reason="tool_use")))
        for call in calls:
            await w.append(codec.tool_entry(call, await run_tool(call)))
    # leaving the block waits for every ack and closes the stream

``append`` is a coroutine because it waits while ``window`` appends are in flight; the handle
it returns is awaited for the ack. A task per stream reads the answers and, after a lost
connection, re-opens the lease (``retry.recover``) and resends what is unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Generator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import grpc
from journald_proto import journal_pb2 as pb

from journald_client import codec, errors, inflight, retry
from journald_client.codec import Entry
from journald_client.pipelined import DEFAULT_WINDOW
from journald_client.state import Ack

if TYPE_CHECKING:
    from journald_client.aio import AsyncRun

T = TypeVar("T", Ack, list[Ack])

__all__ = ["DEFAULT_WINDOW", "AsyncPending", "AsyncPipelinedWriter"]

Requests = asyncio.Queue[pb.AppendRequest | None]


class AsyncPending(inflight.Handle, Generic[T]):
    """One submitted append: ``await`` it for its ack (or acks)."""

    _done: asyncio.Event

    async def ack(self) -> T:
        """Wait until the append is durable; raises its typed error if it failed (or a
        failure before it voided it)."""
        await self._done.wait()
        return cast(T, inflight.answer(self._item))

    def __await__(self) -> Generator[Any, None, T]:
        return self.ack().__await__()


def _take(q: Requests) -> object:
    try:
        return q.get_nowait()
    except asyncio.QueueEmpty:
        return inflight.EMPTY


async def _requests(q: Requests, batches: bool) -> AsyncIterator[pb.AppendStreamRequest]:
    """The stream's messages: each append that is queued when gRPC asks for the next message
    goes into that message (``inflight.coalesce``)."""
    carry: pb.AppendRequest | None = None
    while (first := carry if carry is not None else await q.get()) is not None:
        msg, carry, ended = inflight.coalesce(first, lambda: _take(q), batches)
        yield msg
        if ended:
            return


class AsyncPipelinedWriter(inflight.WriterBase):
    """Appends of one run kept in flight on an ``AppendStream`` (``AsyncRun.pipelined``)."""

    _cond: asyncio.Condition

    def __init__(self, run: AsyncRun, window: int = DEFAULT_WINDOW) -> None:
        super().__init__(run, window, run._client.reconnect_timeout)
        self._run = run
        self._cond = asyncio.Condition()
        self._queue: Requests | None = None
        self._readers: list[asyncio.Task[None]] = []

    async def append(self, entry: Entry) -> AsyncPending[Ack]:
        """Submit one record; returns at once unless ``window`` appends are in flight."""
        return cast(AsyncPending[Ack], await self._submit([entry], single=True))

    async def append_many(self, entries: Sequence[Entry]) -> AsyncPending[list[Ack]]:
        """Submit a batch (one durable write, consecutive seqs)."""
        if not entries:
            raise errors.InvalidRequest("append_many of a pipelined writer needs an entry")
        return cast(AsyncPending[list[Ack]], await self._submit(entries, single=False))

    async def _submit(self, entries: Sequence[Entry], *, single: bool) -> AsyncPending[Any]:
        async with self._cond:
            self._book.check()
            while self._book.full():
                await self._cond.wait()
                self._book.check()
            item = self._book.submit(entries, single=single)
            done = asyncio.Event()
            item.token = done
            if self._queue is not None:
                self._queue.put_nowait(inflight.request(self._run.run_id, self._run.lease_id, item))
            elif not self._book.recovering:
                self._start_stream()
            return AsyncPending(item, done)

    async def flush(self) -> None:
        """Wait until every append in flight is answered; raises the first failure not
        reported yet."""
        async with self._cond:
            await self._cond.wait_for(lambda: not self._book.items)
            self._book.check()

    async def close(self) -> None:
        """Flush, then end the stream (idempotent)."""
        try:
            if self._book.flush_on_close():
                await self.flush()
        finally:
            self._book.closed = True
            self._end_stream()
            for reader in self._readers:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait_for(reader, timeout=10)
            self._run._pipelined = None

    # --- the stream ---------------------------------------------------------------------------

    def _start_stream(self) -> None:
        """A new stream carrying every append in flight (caller holds the condition)."""
        q: Requests = asyncio.Queue()
        for req in self._book.requests(self._run.run_id, self._run.lease_id):
            q.put_nowait(req)
        stub = self._run._client._stub
        batches = self._run.append_stream_batches
        call = stub.AppendStream(_requests(q, batches), metadata=codec.metadata())
        reader = asyncio.get_running_loop().create_task(self._read(call, q))
        self._readers = [r for r in self._readers if not r.done()] + [reader]
        self._queue = q

    def _end_stream(self) -> None:
        if self._queue is not None:
            self._queue.put_nowait(None)
            self._queue = None

    async def _read(self, call: Any, q: Requests) -> None:
        try:
            async for resp in call:
                async with self._cond:
                    self._follow(self._run, self._book.answered(resp))
            return
        except grpc.RpcError as exc:
            failure = self._run._client._error(exc)
        except errors.JournaldError as err:
            failure = err
        except Exception as exc:  # a bug must not leave the waiters hanging
            failure = errors.JournaldError(f"the pipelined writer's reader failed: {exc!r}")
        finally:
            q.put_nowait(None)
        await self._recover(failure)

    async def _recover(self, failure: errors.JournaldError) -> None:
        """After the stream failed: re-open and resend, or void what is in flight."""
        async with self._cond:
            self._queue = None
            unacked = self._book.begin_recovery()
        if not unacked:
            return
        self._budget.start()
        try:
            steps = retry.recover(self._run._retry_writer(), failure, self._budget, unacked)
            adopted = await retry.drive_async(steps, self._run._recovery_step)
        except errors.JournaldError as final:
            async with self._cond:
                run = self._run
                failed = self._book.recovery_failed(
                    final, run.next_iteration, run_closed=run.closed
                )
                self._follow(self._run, failed)
            return
        async with self._cond:
            found, resend = self._book.recovered(adopted)
            self._follow(self._run, found)
            if resend:
                self._start_stream()

    async def __aenter__(self) -> AsyncPipelinedWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if exc_info[1] is None:
            await self.close()
            return
        with contextlib.suppress(errors.JournaldError):  # the block's own exception wins
            await self.close()
