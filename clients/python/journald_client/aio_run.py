"""The asyncio writer of one run: ``AsyncRun``, ``run.Run`` for asyncio (``aio.AsyncClient``
opens it).

Its appends take consecutive seqs under an ``asyncio.Lock`` and recover as the sync writer's
do (``retry.send``); ``complete_pending`` runs the open calls concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc
from journald_proto import journal_pb2 as pb

from journald_client import codec, retry
from journald_client.aio_pipelined import DEFAULT_WINDOW, AsyncPipelinedWriter
from journald_client.codec import Entry, OpenParams, Summary
from journald_client.open_lease import RELEASE_TIMEOUT_S, AsyncHeld, _AsyncLease
from journald_client.state import (
    Ack,
    CheckpointMeta,
    CompactResult,
    GovernedView,
    RestoreResult,
    RunState,
    ToolCall,
)

if TYPE_CHECKING:
    from journald_client.aio import AsyncClient

AsyncToolFn = Callable[[ToolCall], Awaitable[Any]]


class AsyncRun(codec.RunView):
    """The asyncio writer of one run, holding its lease. Seq is handled for the caller."""

    _lease: AsyncHeld

    def __init__(
        self,
        client: AsyncClient,
        params: OpenParams,
        lease: AsyncHeld,
        *,
        created: bool | None = None,
        reopen: Callable[[OpenParams], Awaitable[AsyncHeld]] | None = None,
    ) -> None:
        self._client = client
        self._params = params
        self._reopen = reopen or (lambda p: client._open(p, create=False))
        """How a lost lease is taken again (an ``Open``, or the ``AsyncLeaseSet``'s stream)."""
        self._lock = asyncio.Lock()
        self._init_view(params, lease)
        if created is not None:
            self.created = created

    @property
    def lease_ended(self) -> str | None:
        return self._lease.ended

    async def assistant(
        self,
        content: str | Sequence[Mapping[str, Any]],
        *,
        stop_reason: str,
        usage: Mapping[str, int] | None = None,
        iteration: int | None = None,
    ) -> Ack:
        entry = Entry.assistant(content, stop_reason=stop_reason, iteration=iteration, usage=usage)
        return (await self.append_many([entry]))[0]

    async def tool_result(
        self,
        tool_use_id: str,
        content: str | Sequence[Mapping[str, Any]],
        *,
        is_error: bool = False,
        remote: bool = False,
        as_attachment: bool = False,
    ) -> Ack:
        """``Run.tool_result``; ``as_attachment`` stores the content as an attachment first
        and journals the result as its attachment block."""
        if as_attachment:
            data, media_type = codec.result_attachment(content)
            ref = await self._client.put_attachment(self.run_id, data, media_type, tool_use_id)
            content = [ref.block]
        entry = Entry.tool_result(tool_use_id, content, is_error=is_error, remote=remote)
        return (await self.append_many([entry]))[0]

    async def user(self, content: str | Sequence[Mapping[str, Any]]) -> Ack:
        return (await self.append_many([Entry.user(content)]))[0]

    async def terminal(self, reason: str, message: str = "") -> Ack:
        return (await self.append_many([Entry.terminal(reason, message)]))[0]

    async def append_many(self, entries: Sequence[Entry]) -> list[Ack]:
        if not entries:
            return []
        async with self._lock:
            self._check_unary()
            records = codec.stamp(entries, self.last_seq + 1, self.next_iteration)
            acks = await self._send(records)
            self.last_seq = acks[-1].seq
            self._appended(records)
            return acks

    async def _send(self, records: list[pb.Record]) -> list[Ack]:
        async def do(step: retry.Step) -> Any:
            if isinstance(step, retry.Call):
                req = pb.AppendRequest(run_id=self.run_id, lease_id=self.lease_id, records=records)
                try:
                    resp = await self._client._stub.Append(req, metadata=codec.metadata())
                except grpc.RpcError as exc:
                    raise self._client._error(exc) from None
                return codec.acks_from_pb(resp, records)
            return await self._recovery_step(step)

        steps = retry.send(self._retry_writer(), records, self._client.reconnect_timeout)
        acks: list[Ack] = await retry.drive_async(steps, do)
        return acks

    def _retry_writer(self) -> retry.Writer:
        return retry.Writer(self.run_id, self._client.target, lambda: self.closed)

    async def _recovery_step(self, step: retry.Step) -> Any:
        """Do a step of ``retry.recover`` (see ``Run._recovery_step``)."""
        if isinstance(step, retry.CancelLease):
            await self._lease.cancel()
            return None
        if isinstance(step, retry.Reopen):
            lease = await self._reopen(self._params)
            self._lease = lease
            self.reconnects += 1
            self._state_changed(codec.state_from_pb(lease.lease.state, lease.lease.warnings))
            return lease.lease.last_seq
        if isinstance(step, retry.Load):
            req = pb.LoadRequest(run_id=self.run_id, from_seq=step.from_seq)
            try:
                call = self._client._stub.Load(req, metadata=codec.metadata())
                return [m.record async for m in call]
            except grpc.RpcError:
                return None
        return await self._client._wait_step(step)

    async def fold(self) -> RunState:
        return await self._client.fold(self.run_id)

    async def governed_messages(self) -> GovernedView:
        return await self._client.governed_messages(self.run_id)

    async def complete_pending(
        self,
        run_tool: AsyncToolFn | Callable[[ToolCall], Any],
        *,
        remote: bool = False,
        on_result: Callable[[ToolCall, Ack], None] | None = None,
    ) -> list[Ack]:
        """Run the still-unanswered calls (``open_calls``, known from the lease and this
        writer's appends: no round trip) concurrently, journaling each result as it completes
        (in completion order); a raising tool becomes an ``is_error`` result."""

        async def one(call: ToolCall) -> Ack:
            try:
                outcome: Any = run_tool(call)
                if asyncio.iscoroutine(outcome) or isinstance(outcome, asyncio.Future):
                    outcome = await outcome
            except Exception as exc:
                outcome = exc
            entry = codec.tool_entry(call, outcome, remote=remote)
            ack = (await self.append_many([entry]))[0]
            if on_result is not None:
                on_result(call, ack)
            return ack

        acks = await asyncio.gather(*(one(c) for c in self.open_calls))
        return sorted(acks, key=lambda a: a.seq)

    async def checkpoint(self, label: str = "") -> CheckpointMeta:
        """Take a checkpoint of this run (ordered after this writer's appends)."""
        async with self._lock:
            return await self._client.checkpoint(self.run_id, label)

    async def restore(self, checkpoint_id: str, *, checkpoint: bool = True) -> RestoreResult:
        """``AsyncClient.restore`` as the lease holder: the next append follows the rebase;
        ``state`` is refreshed."""
        async with self._lock:
            self._check_unary()
            req = codec.restore_request(
                self.run_id, checkpoint_id, checkpoint=checkpoint, lease_id=self.lease_id
            )
            result = codec.restore_from_pb(await self._client._unary("Restore", req))
            await self._rebased(result.ack)
            return result

    async def compact(
        self,
        summary: Summary,
        *,
        keep_last: int = 0,
        checkpoint: bool = True,
        label: str = "",
    ) -> CompactResult:
        """``AsyncClient.compact`` as the lease holder: when compacted, the next append
        follows the rebase; ``state`` is refreshed."""
        async with self._lock:
            self._check_unary()
            req = codec.compact_request(
                self.run_id,
                summary,
                keep_last=keep_last,
                checkpoint=checkpoint,
                label=label,
                lease_id=self.lease_id,
            )
            result = codec.compact_from_pb(await self._client._unary("Compact", req))
            if result.ack is not None:
                await self._rebased(result.ack)
            return result

    def pipelined(self, window: int = DEFAULT_WINDOW) -> AsyncPipelinedWriter:
        """A writer that keeps up to ``window`` appends in flight on one stream, each with
        its own ack (``journald_client.aio_pipelined``); use it as an ``async with`` block.
        While it is open, append through it only."""
        self._check_unary()
        writer = AsyncPipelinedWriter(self, window)
        self._pipelined = writer
        return writer

    async def _rebased(self, ack: Ack) -> None:
        self.last_seq = max(self.last_seq, ack.seq)
        self._state_changed(
            dataclasses.replace(await self._client.fold(self.run_id), warnings=self.state.warnings)
        )
        self.next_iteration = max(self.next_iteration, self.state.next_iteration)

    async def close(self) -> None:
        """Release the lease: ``Release`` (so a re-open right after never sees ``locked``),
        then cancel the Open stream."""
        if self.closed:
            return
        self.closed = True
        if isinstance(self._lease, _AsyncLease):  # a set's lease is released on its stream
            await self._release(self._lease)
        await self._lease.cancel()

    async def _release(self, lease: _AsyncLease) -> None:
        if lease.task.done():
            return
        req = pb.ReleaseRequest(run_id=self.run_id, lease_id=self.lease_id)
        # the daemon may be gone or too old to know Release: cancelling the stream still
        # releases the lease, only asynchronously
        with contextlib.suppress(grpc.RpcError, asyncio.TimeoutError):
            await self._client._stub.Release(
                req, timeout=RELEASE_TIMEOUT_S, metadata=codec.metadata()
            )

    async def __aenter__(self) -> AsyncRun:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
