"""Many leases over one stream: the ``Leases`` RPC (docs/protocol.md#many-leases-on-one-stream,
docs/design.md#leases).

A process that holds many runs (a server with a thread per conversation, an agent pool) would
otherwise hold one ``Open`` stream per run, and each open gRPC stream costs the daemon tens of
KiB outside Python. Here one stream carries them all: each request acquires one run (an
``OpenRequest``, taken through the same ``JournalService.grant`` as an ``Open``: the one
acquire order, the same gates, the same lease table and writer) or releases one; each answer
names its request. What a lease is does not change: appends, fencing, the marks and snapshot
saved when it ends are the writer's, whichever stream holds it.

* Requests are handled concurrently (at most ``ACQUIRES_IN_FLIGHT`` at once, after which the
  stream is not read: gRPC flow control holds the client back), except that requests naming
  one run are handled in the order they arrived.
* A refused request holds nothing (its budget share is given back, the acquire released what
  it took) and leaves every other lease on the stream held.
* Every lease taken on the stream ends when the stream ends: cancelled, the connection lost
  (a client killed), the client half-closing (then every lease is released and the stream
  finishes OK once each run can be opened again), or the daemon shutting down.
* A lease the daemon ends on its own (shutdown, a ``Release`` from another call, the
  cross-host lease lost) is answered with ``ended`` for its run; the stream goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc
from journald_proto import journal_pb2 as pb

from journald.core.errors import InvalidRequest, JournaldError
from journald.core.records import validate_id
from journald.server.edge import error_detail, internal
from journald.server.leases import Lease

if TYPE_CHECKING:
    from journald.server.service import JournalService

Ctx = grpc.aio.ServicerContext[Any, Any]
log = logging.getLogger("journald.server")

ACQUIRES_IN_FLIGHT = 64
"""Requests of one stream handled at once; the stream is not read further meanwhile."""

_FINISHED = None
Outgoing = tuple[pb.LeasesResponse, bool] | Exception | None
"""An answer (and whether it holds one of the request slots until it is sent), the error
the stream ends with, or the end of the stream."""


class LeaseStream:
    """One ``Leases`` stream: the leases taken on it and the answers still to send."""

    def __init__(self, service: JournalService, context: Ctx) -> None:
        self.service = service
        self.context = context
        self.held: dict[str, tuple[Lease, contextlib.ExitStack]] = {}
        """The leases of this stream by run, each with its share of the peer's budget."""
        self.closed = False
        self._out: asyncio.Queue[Outgoing] = asyncio.Queue()
        self._slots = asyncio.Semaphore(ACQUIRES_IN_FLIGHT)
        self._tasks: set[asyncio.Task[None]] = set()
        self._last: dict[str, asyncio.Task[None]] = {}
        """The newest request of each run still being handled (the next one waits for it)."""

    async def serve(
        self, requests: AsyncIterator[pb.LeasesRequest]
    ) -> AsyncIterator[pb.LeasesResponse]:
        reader = asyncio.create_task(self._read(requests))
        try:
            while (item := await self._out.get()) is not _FINISHED:
                if isinstance(item, Exception):
                    raise item
                answer, holds_slot = item
                if holds_slot:  # answers waiting to be sent count against the requests
                    self._slots.release()
                yield answer
        finally:
            self.closed = True
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            self._end_all()
            # acquires still running are not cancelled (a half-done acquire could leave a
            # journal open): each gives back what it got when it finishes (``closed``)

    def finish(self) -> None:
        """End the stream after the answers already queued (the daemon is shutting down)."""
        self._out.put_nowait(_FINISHED)

    # --- requests -----------------------------------------------------------------------

    async def _read(self, requests: AsyncIterator[pb.LeasesRequest]) -> None:
        try:
            async for req in requests:
                await self._slots.acquire()
                run_id = self._run_of(req)
                task = asyncio.create_task(self._answer(req, self._last.get(run_id)))
                self._tasks.add(task)
                self._last[run_id] = task
                task.add_done_callback(functools.partial(self._done, run_id))
            # half-closed: the client is done; every lease ends, synchronously like Release
            if self._tasks:
                await asyncio.wait(set(self._tasks))
            await self._release_all()
        except Exception as exc:  # an undecodable message: the stream ends with its error
            self._out.put_nowait(exc)
            return
        self._out.put_nowait(_FINISHED)

    def _done(self, run_id: str, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._last.get(run_id) is task:
            del self._last[run_id]

    @staticmethod
    def _run_of(req: pb.LeasesRequest) -> str:
        which = req.WhichOneof("op")
        if which == "acquire":
            return req.acquire.run_id
        if which == "release":
            return req.release.run_id
        return ""

    async def _answer(self, req: pb.LeasesRequest, before: asyncio.Task[None] | None) -> None:
        try:
            if before is not None:  # requests naming one run are handled in order
                await asyncio.wait({before})
            answer = await self._handle(req)
        except JournaldError as err:
            answer = self._refused(req, err)
        except Exception as exc:
            log.exception("unexpected failure in a Leases request")
            answer = self._refused(req, internal(exc))
        except BaseException:
            self._slots.release()
            raise
        if answer is None or self.closed:
            self._slots.release()
            return
        self._out.put_nowait((answer, True))

    async def _handle(self, req: pb.LeasesRequest) -> pb.LeasesResponse | None:
        which = req.WhichOneof("op")
        if which == "acquire":
            return await self._acquire(req)
        if which == "release":
            return await self._release(req)
        raise InvalidRequest(
            f"Leases request {req.request_id} names no operation; set `acquire` (an "
            "OpenRequest) or `release` (run_id and lease_id)",
            metadata={"field": "op"},
        )

    def _refused(self, req: pb.LeasesRequest, err: JournaldError) -> pb.LeasesResponse:
        return pb.LeasesResponse(
            request_id=req.request_id, run_id=self._run_of(req), refused=error_detail(err)
        )

    async def _acquire(self, req: pb.LeasesRequest) -> pb.LeasesResponse | None:
        service, request = self.service, req.acquire
        budget = contextlib.ExitStack()
        budget.enter_context(service.lease_budget(request, self.context))
        try:
            envelope = pb.LeasesResponse(request_id=req.request_id, run_id=request.run_id)
            lease, answer = await service.grant(request, self.context, envelope)
        except BaseException:
            budget.close()
            raise
        if self.closed:  # the stream ended while the acquire ran: keep nothing
            service.leases.release(lease)
            budget.close()
            return None
        self.held[lease.run_id] = (lease, budget)
        lease.on_end = self._ended
        return answer

    async def _release(self, req: pb.LeasesRequest) -> pb.LeasesResponse:
        run_id = validate_id(req.release.run_id)
        answer = pb.LeasesResponse(request_id=req.request_id, run_id=run_id)
        entry = self.held.get(run_id)
        if entry is None or entry[0].lease_id != req.release.lease_id:
            answer.released.released = False  # not a lease of this stream (or ended already)
            return answer
        self._drop(run_id, "released")
        await self.service.leases.wait_closed(run_id)
        answer.released.released = True
        return answer

    # --- the end of leases ------------------------------------------------------------

    def _drop(self, run_id: str, reason: str) -> None:
        """End the stream's lease on ``run_id`` itself (no ``ended`` is sent for it)."""
        lease, budget = self.held.pop(run_id)
        lease.end(reason)
        self.service.leases.release(lease)
        budget.close()

    def _ended(self, lease: Lease) -> None:
        """``Lease.on_end``: the daemon ended a lease of this stream (shutdown, a Release from
        another call, the cross-host lease lost): released here, and said on the stream."""
        entry = self.held.get(lease.run_id)
        if entry is None or entry[0] is not lease:
            return  # the stream ended it itself
        del self.held[lease.run_id]
        self.service.leases.release(lease)
        entry[1].close()
        if self.closed:
            return
        ended = pb.LeaseEnded(
            reason=lease.end_reason,
            message=f"the daemon ended the lease on run {lease.run_id} ({lease.end_reason}); "
            "acquire the run again to continue",
        )
        self._out.put_nowait((pb.LeasesResponse(run_id=lease.run_id, ended=ended), False))

    def _end_all(self) -> None:
        for run_id in list(self.held):
            self._drop(run_id, "released")

    async def _release_all(self) -> None:
        runs = list(self.held)
        self._end_all()
        for run_id in runs:
            await self.service.leases.wait_closed(run_id)
