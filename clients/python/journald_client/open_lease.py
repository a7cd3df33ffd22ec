"""The lease an ``Open`` stream holds, for both transports: what a writer keeps of it
(``Held``, ``AsyncHeld``) and the live call kept alive in the background (``_Lease`` by a
daemon thread, ``_AsyncLease`` by a task) until the writer cancels it.

A writer's lease may also be one of a lease set's (``lease_set``, ``aio_lease_set``): the
protocols are what both kinds have in common; only an ``Open`` stream's lease is released
with ``Release`` (within ``RELEASE_TIMEOUT_S``), a set's is released on its own stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, Protocol, cast

import grpc
import grpc.aio
from journald_proto import journal_pb2 as pb

RELEASE_TIMEOUT_S = 2.0
"""How long ``close()`` waits for ``Release`` before cancelling the stream anyway."""


class Held(Protocol):
    """What a writer keeps of its lease: the grant, why it ended, and how to end it (an
    ``Open`` stream's ``_Lease``, or one lease of a ``LeaseSet``'s stream)."""

    lease: pb.Lease
    ended: str | None
    done: threading.Event

    def cancel(self) -> None: ...


class _Lease:
    """One granted lease: the live ``Open`` call, kept alive by a daemon thread."""

    def __init__(self, call: Any, lease: pb.Lease) -> None:
        self.call = call
        self.lease = lease
        self.ended: str | None = None
        self.done = threading.Event()
        self._thread = threading.Thread(
            target=self._drain, name=f"journald-lease-{lease.run_id}", daemon=True
        )
        self._thread.start()

    def _drain(self) -> None:
        try:
            for msg in self.call:
                if msg.HasField("ended"):
                    self.ended = msg.ended.reason or "ended"
        except grpc.RpcError:
            pass
        finally:
            if self.ended is None:
                self.ended = "stream_closed"
            self.done.set()

    def cancel(self) -> None:
        self.call.cancel()
        self._thread.join(timeout=5)


EOF: Any = cast(Any, grpc.aio).EOF


class AsyncHeld(Protocol):
    """What an asyncio writer keeps of its lease (``client.Held`` for asyncio): an ``Open``
    stream's ``_AsyncLease``, or one lease of an ``AsyncLeaseSet``'s stream."""

    lease: pb.Lease
    ended: str | None

    async def cancel(self) -> None: ...


class _AsyncLease:
    def __init__(self, call: Any, lease: pb.Lease) -> None:
        self.call = call
        self.lease = lease
        self.ended: str | None = None
        self.task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while True:
                msg = await self.call.read()
                if msg is EOF:
                    break
                if msg.HasField("ended"):
                    self.ended = msg.ended.reason or "ended"
        except (grpc.RpcError, asyncio.CancelledError):
            pass
        finally:
            if self.ended is None:
                self.ended = "stream_closed"

    async def cancel(self) -> None:
        self.call.cancel()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
