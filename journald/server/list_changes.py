"""ListChanges: which runs' listing rows changed, so a live listing (``journald view``'s runs
table) Lists again only when something moved instead of polling (docs/protocol.md#list-changes).

Every change of a ``RunInfo`` this daemon makes passes one of a few places: a record made
durable (the tail hub), a lease granted, released or closed (the lease table), a run deleted
(the hub closes its tails), damage the scrubber found. Each calls ``RunChanges.changed``,
which marks the run on every open stream; a stream sends what is marked once a short
coalescing wait has passed, so a run appending a thousand records a second costs its
follower a few notices a second, and an idle daemon sends nothing at all.

A backend that shares runs between daemons (JetStream with cross-host leases) also changes
under this daemon without passing those places. While at least one stream is open, the
daemon then lists the store every ``SHARED_POLL_S`` (once for all its followers) and marks
what differs from the listing before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from journald_proto import journal_pb2 as pb

from journald.core.errors import JournaldError
from journald.server.edge import streaming
from journald.storage.base import RunInfo

if TYPE_CHECKING:
    from journald.server.runs import Runs

Ctx = grpc.aio.ServicerContext[Any, Any]
log = logging.getLogger("journald.server")

COALESCE_S = 0.2
"""A notice waits this long after the first change it holds: a burst becomes one notice."""
MAX_IDS = 1000
"""More changed runs than this in one notice are sent as ``all`` (List everything)."""
SHARED_POLL_S = 2.0
"""How often a daemon on a shared backend lists the store for other hosts' changes."""

Lister = Callable[[], Awaitable[list[RunInfo]]]
Digest = dict[str, tuple[Any, ...]]


class Follower:
    """One ListChanges stream's marks: the runs changed since its last notice."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.all = False
        self.closed = False
        self.event = asyncio.Event()

    def mark(self, run_id: str) -> None:
        if not self.all:
            self.ids.add(run_id)
            if len(self.ids) > MAX_IDS:
                self.mark_all()
                return
        self.event.set()

    def mark_all(self) -> None:
        self.all = True
        self.ids.clear()
        self.event.set()

    def take(self) -> tuple[list[str], bool]:
        ids, every = sorted(self.ids), self.all
        self.ids, self.all = set(), False
        self.event.clear()
        return ids, every


def digest(infos: Sequence[RunInfo]) -> Digest:
    """What of each listed run a follower would see change."""
    return {
        i.run_id: (i.last_seq, i.status, i.updated, i.record_count, i.bytes, i.error) for i in infos
    }


def differences(before: Digest, after: Digest) -> list[str]:
    """The runs added, removed or changed between two listings."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


class RunChanges:
    """The open ListChanges streams and what changed for them; ``lister`` (shared backends
    only) is listed while any stream is open, for changes made by other daemons."""

    def __init__(self, lister: Lister | None = None) -> None:
        self._followers: set[Follower] = set()
        self._lister = lister
        self._poll: asyncio.Task[None] | None = None
        self.polls = 0  # store listings made for other hosts' changes (tests read it)

    def __len__(self) -> int:
        return len(self._followers)

    def changed(self, run_id: str) -> None:
        for f in self._followers:
            f.mark(run_id)

    def follow(self) -> Follower:
        f = Follower()
        self._followers.add(f)
        if self._lister is not None and self._poll is None:
            self._poll = asyncio.get_running_loop().create_task(self._watch_shared())
        return f

    def unfollow(self, f: Follower) -> None:
        self._followers.discard(f)
        if not self._followers and self._poll is not None:
            self._poll.cancel()
            self._poll = None

    def close_all(self) -> None:
        """The daemon stops: every stream ends after what it was sent."""
        for f in self._followers:
            f.closed = True
            f.event.set()

    async def _watch_shared(self) -> None:
        assert self._lister is not None
        before: Digest | None = None
        while True:
            try:
                after = digest(await self._lister())
                self.polls += 1
            except JournaldError as err:  # the backend is away: tell everyone to List
                log.warning("listing the runs for ListChanges failed: %s", err)
                after = None
            if after is None or before is None:
                if after is None:
                    for f in self._followers:
                        f.mark_all()
            else:
                for run_id in differences(before, after):
                    self.changed(run_id)
            before = after
            await asyncio.sleep(SHARED_POLL_S)


class ListChangesRpcs:
    """The ListChanges RPC over the shared ``Runs``."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self.changes = runs.changes

    @streaming
    async def ListChanges(
        self, request: pb.ListChangesRequest, context: Ctx
    ) -> AsyncIterator[pb.ListChangesResponse]:
        follower = self.changes.follow()
        owners = self.runs.owners
        try:
            yield pb.ListChangesResponse(ready=True)
            while True:
                await follower.event.wait()
                if follower.closed:
                    return
                await asyncio.sleep(COALESCE_S)  # the rest of a burst joins this notice
                if follower.closed:
                    return
                ids, every = follower.take()
                if owners.enforcing:  # a shared socket: only runs this peer may list
                    ids = [i for i in ids if await owners.may_see(i)]
                    if not ids and not every:
                        continue
                yield pb.ListChangesResponse(run_ids=ids, all=every)
        finally:
            with contextlib.suppress(Exception):
                self.changes.unfollow(follower)
