"""Daemon-owned leases (docs/design.md#leases) and the live-tail hub.

A lease lives exactly as long as its ``Open`` stream (or the ``Leases`` stream it was taken
on): when the client process dies the kernel closes its socket, gRPC cancels the stream, and
the lease is released at once. The
table also remembers who holds a run, so a refused ``Open`` can name the holder (name, pid,
host, since), which a bare flock cannot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from journald_proto import journal_pb2 as pb

from journald.clock import utc_ts
from journald.core.errors import InvalidRequest, LeaseLost, Locked, clip
from journald.core.fold import RunState
from journald.core.records import Record
from journald.server.convert import record_to_pb
from journald.storage.base import Journal
from journald.storage.io_pool import background_context
from journald.writer.run_writer import RunWriter


@dataclass(frozen=True, slots=True)
class Holder:
    name: str
    pid: int
    host: str
    cwd: str
    since: str

    def describe(self) -> str:
        who = self.name or "an unnamed client"
        return f"{who} (pid {self.pid} on {self.host or 'an unknown host'}) since {self.since}"

    def as_doc(self) -> dict[str, object]:
        """What a cross-host lease entry says of its holder."""
        return {
            "name": self.name,
            "pid": self.pid,
            "host": self.host,
            "cwd": self.cwd,
            "since": self.since,
        }


@dataclass(eq=False)
class Lease:
    """Who holds a run and for how long; its ``writer`` owns the journal, the folded state
    and the append path (``journald.writer``)."""

    lease_id: str
    run_id: str
    holder: Holder
    writer: RunWriter
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    end_reason: str = ""
    released: bool = False
    on_end: Callable[[Lease], None] | None = None
    """Called once when the lease ends (a lease of a ``Leases`` stream: the stream's own
    bookkeeping; an ``Open`` stream waits on ``ended`` instead)."""

    @property
    def journal(self) -> Journal:
        return self.writer.journal

    @property
    def state(self) -> RunState:
        """The writer's state (queued appends included; ``writer.settled`` for the stored)."""
        return self.writer.state

    @property
    def lock(self) -> asyncio.Lock:
        return self.writer.lock

    def end(self, reason: str) -> None:
        if not self.ended.is_set():
            self.end_reason = reason
            self.ended.set()
            if self.on_end is not None:
                self.on_end(self)


ABANDON_WAIT_S = 1.0
"""How long cancelled lease closes get to unwind before a shutdown closes the store."""


class LeaseTable:
    def __init__(self) -> None:
        self._by_run: dict[str, Lease] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._closing: dict[str, asyncio.Task[None]] = {}
        self.on_closed: Callable[[str], Awaitable[None]] | None = None
        """Runs once the journal is closed (the run's cross-host lease is released)."""
        self.on_change: Callable[[str], None] = lambda run_id: None
        """Told the run whose listing row a grant, release or close changed (ListChanges)."""
        self.after_close: Callable[[], None] = lambda: None
        """Told each time a released lease's journal is closed (the daemon's ``Trimmer``)."""

    def __len__(self) -> int:
        return len(self._by_run)

    def opening_lock(self, run_id: str) -> asyncio.Lock:
        return self._opening.setdefault(run_id, asyncio.Lock())

    @contextlib.asynccontextmanager
    async def unheld(self, run_id: str) -> AsyncIterator[None]:
        """While the body runs no lease on ``run_id`` exists or can be granted (``Locked``,
        naming the holder, when one is held now; one that is closing is waited for)."""
        async with self.opening_lock(run_id):
            self.refuse_if_held(run_id)
            await self.wait_closed(run_id)
            yield

    async def wait_closed(self, run_id: str) -> None:
        task = self._closing.get(run_id)
        if task is not None:
            await asyncio.shield(task)

    def held(self, run_id: str) -> Lease | None:
        return self._by_run.get(run_id)

    def refuse_if_held(self, run_id: str) -> None:
        lease = self._by_run.get(run_id)
        if lease is not None:
            h = lease.holder
            raise Locked(
                f"run {run_id} is held by {h.describe()}; wait for it to finish or stop that "
                "process (its lease ends the moment its connection closes)",
                metadata={
                    "run_id": run_id,
                    "holder_name": h.name,
                    "holder_pid": h.pid,
                    "holder_host": h.host,
                    "holder_since": h.since,
                },
            )

    def grant(self, run_id: str, holder: Holder, writer: RunWriter) -> Lease:
        self.refuse_if_held(run_id)
        lease = Lease(secrets.token_hex(16), run_id, holder, writer)
        self._by_run[run_id] = lease
        self.on_change(run_id)  # listed as held from now on
        return lease

    def release(self, lease: Lease) -> None:
        """Drop the lease now; close its journal once any in-flight append has finished.
        Idempotent: Release and the end of the Open stream may both call it."""
        if lease.released:
            return
        lease.released = True
        if self._by_run.get(lease.run_id) is lease:
            del self._by_run[lease.run_id]
        lease.end(lease.end_reason or "released")
        self.on_change(lease.run_id)  # no longer held

        async def close() -> None:
            async with lease.lock:
                try:
                    await lease.writer.close()  # marks, snapshot, then the journal
                finally:
                    self.on_change(lease.run_id)  # what the close wrote is listed now
                    self.after_close()
                    if self.on_closed is not None:
                        await self.on_closed(lease.run_id)

        # background work: a dying client's thousand closes queue on the read threads and
        # behind every foreground write, never in front of an Open (docs/design.md#fair-shares)
        task = asyncio.get_running_loop().create_task(close(), context=background_context())
        self._closing[lease.run_id] = task
        task.add_done_callback(
            lambda t: (
                self._closing.pop(lease.run_id, None)
                if self._closing.get(lease.run_id) is t
                else None
            )
        )

    def check(self, run_id: str, lease_id: str) -> Lease:
        lease = self._by_run.get(run_id)
        if lease is None or lease.lease_id != lease_id or lease.ended.is_set():
            raise LeaseLost(
                f"no live lease {clip(lease_id, 64, keep_tail=False) or '(empty)'} on run "
                f"{run_id}: the lease ended (its "
                "Open stream closed or the daemon restarted); Open the run again and continue "
                "at its last seq + 1",
                metadata={"run_id": run_id},
            )
        return lease

    def all(self) -> list[Lease]:
        return list(self._by_run.values())

    async def end_all(self, reason: str, wait: bool = True) -> None:
        """End every lease; ``wait``: and wait for every close (``closed``, unbounded)."""
        for lease in self.all():
            lease.end(reason)
        if wait:
            await self.closed(None)

    def closing(self) -> list[str]:
        """The runs whose lease close (marks, snapshot, view index, journal) is running."""
        return sorted(r for r, t in self._closing.items() if not t.done())

    async def closed(self, timeout_s: float | None) -> list[str]:
        """Wait for every lease close running, and those that start meanwhile, for at most
        ``timeout_s`` (None: no bound); the runs whose close was still running then."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while running := [t for t in self._closing.values() if not t.done()]:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                break
            await asyncio.wait(running, timeout=left)
        return self.closing()

    async def abandon(self, timeout_s: float = ABANDON_WAIT_S) -> None:
        """Cancel every lease close still running (the shutdown's bound passed) and give them
        ``timeout_s`` to unwind (a cross-host lease is freed as a close ends) before the
        store closes under them."""
        tasks = [t for t in self._closing.values() if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)


MAX_HOLDER_NAME_BYTES = 256
"""Longest client name and host an Open accepts (they are echoed in other callers' errors)."""
MAX_HOLDER_CWD_BYTES = 4096
"""Longest working directory an Open accepts (PATH_MAX on Linux)."""


def new_holder(name: str, pid: int, host: str, cwd: str) -> Holder:
    """The holder an Open names; refuses (``invalid_request``) a name, host or cwd over its
    limit rather than cutting it: a cut name would name nobody."""
    for what, value, limit in (
        ("client.name", name, MAX_HOLDER_NAME_BYTES),
        ("client.host", host, MAX_HOLDER_NAME_BYTES),
        ("client.cwd", cwd, MAX_HOLDER_CWD_BYTES),
    ):
        size = len(value.encode())
        if size > limit:
            raise InvalidRequest(
                f"field {what} is {size} bytes; the limit is {limit} bytes (it is shown to "
                "other clients in `locked` errors): send a shorter one",
                metadata={"field": what, "bytes": size, "limit_bytes": limit},
            )
    return Holder(name, pid, host, cwd, utc_ts())


END = None
log = logging.getLogger("journald.server")
Published = tuple[int, pb.WatchResponse]
"""A record as every tail sends it: (seq, the response built once for all of them)."""
HubItem = Sequence[Published] | pb.CheckpointEvent | None


DEFAULT_WATCH_BUFFER_BYTES = 16 * 1024 * 1024


class Subscription:
    """One tail's queue, bounded in bytes: a tail that falls ``buffer_bytes`` behind the
    appends is cut (its queue dropped at once, ``cut`` set) instead of holding the run's
    growth in the daemon's memory."""

    def __init__(self, buffer_bytes: int) -> None:
        self.buffer_bytes = buffer_bytes
        self.queued_bytes = 0
        self.cut = False
        self._q: asyncio.Queue[tuple[HubItem, int]] = asyncio.Queue()

    def put(self, item: HubItem, size_bytes: int = 0) -> None:
        if self.cut:
            return
        if size_bytes and self.queued_bytes + size_bytes > self.buffer_bytes:
            self.cut = True
            while not self._q.empty():  # freed now, not when the reader comes back
                self._q.get_nowait()
            self.queued_bytes = 0
            self._q.put_nowait((END, 0))
            return
        self.queued_bytes += size_bytes
        self._q.put_nowait((item, size_bytes))

    async def get(self) -> HubItem:
        item, size = await self._q.get()
        self.queued_bytes -= size
        return item


class WatchHub:
    """Fan-out of durable records and checkpoint events to live tails, in the order they
    happened; ``None`` means the run is gone (or, with ``Subscription.cut``, that the tail
    fell too far behind)."""

    def __init__(self, buffer_bytes: int = DEFAULT_WATCH_BUFFER_BYTES) -> None:
        self.buffer_bytes = buffer_bytes
        self._subs: dict[str, set[Subscription]] = {}
        self.on_change: Callable[[str], None] = lambda run_id: None
        """Told every run that got records or was deleted, tailed or not (ListChanges)."""

    def subscribe(self, run_id: str) -> Subscription:
        q = Subscription(self.buffer_bytes)
        self._subs.setdefault(run_id, set()).add(q)
        return q

    def unsubscribe(self, run_id: str, q: Subscription) -> None:
        subs = self._subs.get(run_id)
        if subs is not None:
            subs.discard(q)
            if not subs:
                del self._subs[run_id]

    @staticmethod
    def encode(records: Sequence[Record]) -> list[Published]:
        return [(r.seq, pb.WatchResponse(record=record_to_pb(r, payload=False))) for r in records]

    def publish(self, run_id: str, records: Sequence[Record]) -> None:
        self.on_change(run_id)
        subs = self._subs.get(run_id)
        if not subs:
            return  # no tail: nothing to encode
        out = self.encode(records)
        size = sum(len(r.raw) for r in records) or 1
        for q in subs:
            q.put(out, size)

    def publish_checkpoint(self, run_id: str, event: pb.CheckpointEvent) -> None:
        for q in self._subs.get(run_id, ()):
            q.put(event, event.ByteSize() or 1)

    def close_run(self, run_id: str) -> None:
        self.on_change(run_id)
        for q in self._subs.get(run_id, ()):
            q.put(END)

    def close_all(self) -> None:
        for run_id in list(self._subs):
            self.close_run(run_id)
