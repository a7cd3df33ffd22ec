"""Which uid a run belongs to, and whether the peer of a call may touch it.

A daemon on a private socket (the default) has one peer uid, its own, and checks nothing:
``Owners.enforcing`` is false and every call is let through as before. A daemon whose socket is
shared learns each peer's uid from the kernel (``journald.server.peers``); the edge sets
``PEER_UID`` for the call, and:

* a run created by a peer (``Open`` of a new run, a fork's new run) belongs to that peer: its
  uid is kept in the ``owner`` part of the run's index (``CheckpointStore.save_mark``), so every
  backend keeps it beside the run (the file backend: ``checkpoints/run-owner.json``; JetStream:
  an object of the run's checkpoint bucket) and it goes when the run is deleted. The records,
  and so their bytes and hashes, are untouched;
* a run without an owner part (created before, or by a private daemon) belongs to the daemon's
  uid;
* root and the daemon's uid may touch every run; any other uid only its own, unless the
  operator shares them all (``serve --shared-runs``). Refusals are ``permission_denied``.

Owners are remembered in memory once read (an owner never changes while its run lives) and
forgotten when this daemon deletes the run. See docs/design.md#who-may-talk-to-whom.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Awaitable, Callable
from typing import Any

from journald.core.errors import PermissionDenied
from journald.storage.checkpoint_base import OWNER, CheckpointStore

PEER_UID: contextvars.ContextVar[int | None] = contextvars.ContextVar("PEER_UID", default=None)
"""The uid of the peer of the call being served (None: the daemon's own socket, its uid)."""

ROOT_UID = 0


class Owners:
    def __init__(
        self,
        checkpoints: CheckpointStore,
        exists: Callable[[str], Awaitable[bool]],
        *,
        enforcing: bool = False,
        shared_runs: bool = False,
        daemon_uid: int | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.exists = exists
        self.enforcing = enforcing
        """True when peers of several uids can reach the daemon (a shared socket)."""
        self.shared_runs = shared_runs
        self.daemon_uid = os.geteuid() if daemon_uid is None else daemon_uid
        self._known: dict[str, int] = {}

    def _peer(self) -> int:
        uid = PEER_UID.get()
        return self.daemon_uid if uid is None else uid

    def _sees_all(self, uid: int) -> bool:
        return not self.enforcing or self.shared_runs or uid in (ROOT_UID, self.daemon_uid)

    async def owner(self, run_id: str) -> int:
        """The uid the run belongs to (the daemon's when it has no owner part)."""
        known = self._known.get(run_id)
        if known is not None:
            return known
        part = await self.checkpoints.load_mark(run_id, OWNER)
        uid = part.get("uid") if part else None
        if not isinstance(uid, int) or isinstance(uid, bool):
            return self.daemon_uid  # not remembered: the part may be written later
        self._known[run_id] = uid
        return uid

    async def may_see(self, run_id: str) -> bool:
        uid = self._peer()
        return self._sees_all(uid) or await self.owner(run_id) == uid

    async def check(self, run_id: str, *, missing_ok: bool = True) -> None:
        """Refuse with ``permission_denied`` unless the peer may touch ``run_id``. A run that
        does not exist is let through (``missing_ok``: the call answers ``session_not_found``
        itself) rather than refused, so a typo reads as one."""
        uid = self._peer()
        if self._sees_all(uid):
            return
        owner = await self.owner(run_id)
        if owner == uid:
            return
        if missing_ok and owner == self.daemon_uid and not await self.exists(run_id):
            return
        raise PermissionDenied(
            f"run {run_id} belongs to uid {owner}, and this daemon does not let uid {uid} read, "
            "write or delete another uid's runs; use a run of your own, ask the run's owner, "
            "or have the operator start the daemon with --shared-runs",
            metadata={"run_id": run_id, "owner_uid": str(owner), "peer_uid": str(uid)},
        )

    async def claim(self, run_id: str, journal: Any = None) -> None:
        """Record the peer as the owner of the run it just created (before anyone is told
        the run exists: callers hold the run's opening lock). If that fails, ``journal`` (the
        new run's append handle) is closed and the run stays the daemon's uid's."""
        if not self.enforcing:
            return
        uid = self._peer()
        try:
            await self.checkpoints.save_mark(run_id, {"uid": uid}, OWNER)
        except BaseException:
            if journal is not None:
                await journal.close()
            raise
        self._known[run_id] = uid

    def forget(self, run_id: str) -> None:
        self._known.pop(run_id, None)
