"""What every RPC part of the daemon shares: one ``Runs`` object.

It holds the record store, the checkpoint and attachment stores, the registry of writers
(the lease table: one ``journald.writer.run_writer.RunWriter`` per held run, which owns its
acquire, append path and close), the tail hub, the one gate every record passes, and the
state of a run no lease holds (``dormant_state``, the one function for it). The RPC parts
(``service``, ``history``, ``checkpoint_service``, ``attachments``) each hold a ``Runs`` and
nothing else of one another.

Serialization (docs/design.md#checkpoints): every operation that reads the head of a run for a
write or a checkpoint takes the run's lease lock (``head``), so it is ordered with the holder's
appends:

* a lease is held: the operation runs under ``lease.lock`` on its writer's folded state; a write
  goes through the held lease's writer (``commit``) and only for its holder (``lease_id``);
  anyone else gets ``locked`` naming the holder;
* no lease is held and the operation writes: the daemon takes the lease itself for the
  operation (a concurrent ``Open`` gets ``locked`` naming the daemon), then releases it;
* no lease is held and the operation only reads: it takes the dormant state.

Across hosts (JetStream, ``host``): every lease this daemon grants, its own included, first
takes the run's entry in the stream's lease bucket, and an operation that copies the head of
a run no lease here holds is refused ``locked`` while another daemon holds it
(docs/design.md#leases-across-hosts).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from journald_proto import journal_pb2 as pb

from journald.core.errors import LeaseLost, SessionNotFound, StoreCorrupted
from journald.core.fold import RunState
from journald.core.records import Record
from journald.server.leases import Holder, Lease, LeaseTable, WatchHub, new_holder
from journald.server.list_changes import RunChanges
from journald.server.owners import Owners
from journald.server.scrub import ScrubRecords
from journald.storage.base import AppendResult, HostLeases, Store
from journald.storage.checkpoint_base import AttachmentStore, CheckpointStore
from journald.storage.pages import PagedCheckpoints, PageStore, paged_checkpoints
from journald.storage.view_pages import ViewPages
from journald.writer.folding import fold_from_snapshot, fold_stored
from journald.writer.gate import Gate
from journald.writer.marks import FoldMarks
from journald.writer.run_writer import Acquire, Parts, Warnings, acquire

__all__ = ["Held", "Limits", "Runs", "ack_pb", "daemon_holder", "fold_stored"]

DAEMON_HOLDER = "journald daemon"
DORMANT_CACHE_RUNS = 8  # dormant runs whose folded state reads keep
CACHE_BYTES = 64 * 1024 * 1024
"""Stored bytes of the runs whose folded state (or derived view) a read cache keeps,
beyond the newest one: a few readers of large dormant runs do not each pin a run."""
log = logging.getLogger(__name__)
DURABILITY = {
    "memory": pb.DURABILITY_MEMORY,
    "fsync_local": pb.DURABILITY_FSYNC_LOCAL,
    "jetstream_ack": pb.DURABILITY_JETSTREAM_ACK,
}


@dataclass
class Limits:
    max_record_bytes: int = 4 * 1024 * 1024
    gap_wait_s: float = 0.5
    # the largest answer gRPC sends (``serve`` sets it from --max-message-bytes)
    max_message_bytes: int = 1 << 62


def ack_pb(r: AppendResult) -> pb.Ack:
    return pb.Ack(
        seq=r.seq,
        hash=r.hash,
        durability=DURABILITY.get(r.durability, pb.DURABILITY_UNSPECIFIED),
        duplicate=r.duplicate,
    )


class RunCache:
    """The newest ``runs`` entries, and of them only as many as fit ``limit_bytes`` of
    their runs' stored size (the newest always stays: it is the one being paged)."""

    def __init__(self, runs: int, limit_bytes: int = CACHE_BYTES) -> None:
        self.runs, self.limit_bytes = runs, limit_bytes
        self._items: OrderedDict[Any, tuple[Any, Any, int]] = OrderedDict()
        self.size_bytes = 0

    def get(self, name: Any, key: Any) -> Any | None:
        hit = self._items.get(name)
        if hit is None or hit[0] != key:
            return None
        self._items.move_to_end(name)
        return hit[1]

    def put(self, name: Any, key: Any, value: Any, size_bytes: int) -> None:
        old = self._items.pop(name, None)
        if old is not None:
            self.size_bytes -= old[2]
        self._items[name] = (key, value, size_bytes)
        self.size_bytes += size_bytes
        while len(self._items) > 1 and (
            len(self._items) > self.runs or self.size_bytes > self.limit_bytes
        ):
            self.size_bytes -= self._items.popitem(last=False)[1][2]


def stored_bytes(key: Any) -> int:
    """The stored size of a run in a dormant cache key (0 when the key does not say)."""
    return key[4] if isinstance(key, tuple) and len(key) == 5 else 0


def daemon_holder() -> Holder:
    """The holder the daemon names when it holds a run itself for an operation."""
    return new_holder(DAEMON_HOLDER, os.getpid(), socket.gethostname(), "")


@dataclass(slots=True)
class Held:
    """The run's state for an operation, and the lease to append through (if writing)."""

    state: RunState
    lease: Lease | None
    cwd: str


class Runs:
    def __init__(
        self,
        store: Store,
        limits: Limits,
        checkpoints: CheckpointStore,
        checkpoint_max: int,
        attachments: AttachmentStore,
        host: HostLeases | None = None,
    ) -> None:
        self.store = store
        self.host = host
        """Who holds each run across hosts (JetStream), None when runs stay on one host."""
        self.limits = limits
        self.gate = Gate(limits.max_record_bytes)
        """The one gate every record the daemon writes passes (``journald.writer.gate``)."""
        self.checkpoints = paged_checkpoints(checkpoints, attachments)
        self.checkpoint_max = checkpoint_max
        self.attachments = attachments
        cps = self.checkpoints
        # one decoded-page cache per daemon (its bound is the daemon's), forgotten on Delete
        shared = isinstance(cps, PagedCheckpoints) and cps.pages.attachments is attachments
        self.pages: PageStore = (
            cps.pages if isinstance(cps, PagedCheckpoints) and shared else PageStore(attachments)
        )
        """Message pages of rebases, checkpoints and snapshots (docs/design.md#message-pages)."""
        self.views = ViewPages(checkpoints, self.pages)
        """The cleaned-up and governed views' page index (docs/design.md#view-pages)."""
        self.marks = FoldMarks(checkpoints, self.pages, self.views)
        self.owners = Owners(checkpoints, store.exists)
        self.leases = LeaseTable()
        """The registry of writers: one lease, and its ``RunWriter``, per held run."""
        self.leases.on_closed = self.free_host
        if host is not None:
            host.on_lost = self._host_leases_lost
        self.hub = WatchHub()
        self.scrubs = ScrubRecords(store, checkpoints)
        # every place a listing row changes tells the ListChanges streams; a backend shared
        # with other daemons is also listed while a stream is open (docs/protocol.md#list-changes)
        self.changes = RunChanges(store.list if host is not None else None)
        self.hub.on_change = self.leases.on_change = self.scrubs.on_change = self.changes.changed
        self.parts = Parts(
            store,
            self.gate,
            self.marks,
            self.hub,
            self.leases,
            self.owners,
            self.scrubs,
            host,
            self.pages,
        )
        self._dormant = RunCache(DORMANT_CACHE_RUNS)

    # --- leases: every one is taken by ``journald.writer.acquire`` ---------------------------

    async def acquire(self, req: Acquire, holder: Holder) -> tuple[Lease, bool, Warnings]:
        """A lease on ``req.run_id`` for ``holder`` (a client's Open or the daemon's own), in
        the one acquire order: (the lease, whether the run was created, the Open's warnings)."""
        return await acquire(
            self.parts, req, lambda writer: self.leases.grant(req.run_id, holder, writer)
        )

    # --- cross-host leases (docs/design.md#leases-across-hosts) ------------------------------

    async def take_host(self, run_id: str, holder: Holder) -> None:
        """Hold the run across hosts for ``holder`` (caller holds the run's opening lock and
        no local lease exists): ``Locked`` naming the holder when another daemon has it."""
        if self.host is not None:
            await self.host.acquire(run_id, holder.as_doc())

    async def free_host(self, run_id: str) -> None:
        if self.host is not None:
            await self.host.release(run_id)

    def _host_leases_lost(self, runs: list[str]) -> None:
        for run_id in runs:
            lease = self.leases.held(run_id)
            if lease is not None:
                log.warning("run %s: the cross-host lease is lost; ending its lease", run_id)
                lease.end("lease_lost")

    @contextlib.asynccontextmanager
    async def unheld(self, run_id: str) -> AsyncIterator[None]:
        """No lease on the run exists, here or on another host, while the body runs (the
        daemon holds it across hosts): ``Locked`` naming the holder otherwise."""
        async with self.leases.unheld(run_id):
            await self.take_host(run_id, daemon_holder())
            try:
                yield
            finally:
                await self.free_host(run_id)

    # --- state ----------------------------------------------------------------------------

    async def state_of(self, run_id: str) -> RunState:
        """The run's folded state: its writer's (queued appends settled) when held, else the
        dormant state."""
        lease = self.leases.held(run_id)
        if lease is not None:
            async with lease.lock:
                return await lease.writer.settled()
        return (await self.dormant_state(run_id))[1]

    async def dormant_state(self, run_id: str) -> tuple[Any, RunState]:
        """The one state of a run no lease holds, for every read: folded from its snapshot when
        that still matches, kept under a cache key (None when the store cannot say; then it is
        folded every time). The key is what ``Store.info`` reports, so any append, prune or
        re-creation changes it. Writes nothing; refused while the scrubber's finding of
        damage holds (docs/design.md#scrubbing)."""
        got = await self._dormant_state(run_id, full=True)
        assert got is not None  # a full fold answers or raises
        return got

    async def snapshot_state(self, run_id: str) -> tuple[Any, RunState] | None:
        """``dormant_state`` when it costs no fold from seq 1: kept, or folded from a fold
        snapshot that still matches the run; None otherwise (no snapshot, or one the run no
        longer matches), for a read that has a cheaper way than the full fold."""
        return await self._dormant_state(run_id, full=False)

    async def _dormant_state(self, run_id: str, full: bool) -> tuple[Any, RunState] | None:
        await self.scrubs.refuse_if_damaged(run_id)
        key = None
        try:
            info = await self.store.info(run_id)
        except (OSError, StoreCorrupted):  # the fold below names the damage precisely
            pass
        else:
            key = (info.created, info.updated, info.last_seq, info.record_count, info.bytes)
            hit = self._dormant.get(run_id, key)
            if hit is not None:
                return key, hit
        # a read writes nothing: the run's index (fold marks, snapshot) is taken when a
        # writer (a lease, the daemon's own) folds it and saved when it ends
        snapshot = await self.marks.load_snapshot(run_id)
        if full:
            st = await fold_stored(self.store, run_id, None, snapshot, self.pages)
        elif snapshot is None:
            return None
        else:
            after = await fold_from_snapshot(self.store, run_id, snapshot, self.pages)
            if after is None:
                return None
            st = after
        if key is not None:
            self._dormant.put(run_id, key, st, stored_bytes(key))
        return key, st

    async def require_run(self, run_id: str) -> None:
        if not await self.store.exists(run_id):
            raise SessionNotFound(
                f"run {run_id} does not exist; list runs with `journald ls`",
                metadata={"run_id": run_id},
            )

    # --- the daemon's own lease -----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def daemon_lease(self, run_id: str, create: Record | None = None) -> AsyncIterator[Lease]:
        """Hold ``run_id`` as the daemon for one operation (``create``: make the run first),
        through the same acquire as a client's Open."""
        holder = daemon_holder()
        req = Acquire(
            run_id,
            holder.as_doc(),
            create=None if create is None else (lambda: create),
            may_resume=create is None,
            exists_hint="fork into another id",
        )
        lease = (await self.acquire(req, holder))[0]
        try:
            async with lease.lock:
                yield lease
        finally:
            self.leases.release(lease)
            await self.leases.wait_closed(run_id)

    @contextlib.asynccontextmanager
    async def head(
        self, run_id: str, lease_id: str, write: bool, exclusive: bool = True
    ) -> AsyncIterator[Held]:
        """The run's head, serialized with its appends (see the module doc); ``exclusive``
        (an operation that checkpoints or copies the head): refused ``locked`` while another
        host holds the run, whose head moves under it."""
        lease = self.leases.held(run_id)
        if lease is None and lease_id:
            raise LeaseLost(
                f"no live lease {lease_id} on run {run_id}: the lease ended; Open the run "
                "again, or omit lease_id to let the daemon hold the run for the operation",
                metadata={"run_id": run_id},
            )
        if lease is not None:
            if write and lease.lease_id != lease_id:
                self.leases.refuse_if_held(run_id)  # raises locked naming the holder
            async with lease.lock:
                if lease.ended.is_set():
                    raise LeaseLost(
                        f"the lease on run {run_id} ended during the operation; retry",
                        metadata={"run_id": run_id},
                    )
                st = await self.pages.whole_state(run_id, await lease.writer.settled())
                yield Held(st, lease, lease.holder.cwd)
            return
        if write:
            async with self.daemon_lease(run_id) as own:
                yield Held(await self.pages.whole_state(run_id, own.state), own, "")
            return
        if exclusive and self.host is not None:
            await self.host.refuse_if_held_elsewhere(run_id)
        await self.require_run(run_id)
        # an operation on the head walks the whole conversation (a checkpoint, compaction,
        # a fork): every sealed page is read (docs/design.md#message-pages)
        st = (await self.dormant_state(run_id))[1]
        yield Held(await self.pages.whole_state(run_id, st), None, "")
