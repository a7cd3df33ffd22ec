"""Cross-host leases of JetStream runs: one writer per run across every daemon on a stream
(docs/design.md#leases-across-hosts).

A daemon's lease table (``journald.server.leases``) makes a run exclusive within one daemon;
this module makes it exclusive across daemons, through a KV bucket beside the stream,
``<STREAM>_LEASES``, which the operator creates like the run buckets (journald never creates
it; ``jetstream.lease_bucket`` refuses a missing or unsafe one with the commands that fix it).
Two kinds of key:

* ``daemon.<instance>``: one per running daemon (a fresh random instance id per process),
  republished every ``ttl/3`` seconds with a per-message TTL (``Nats-TTL``): the server
  deletes it ``ttl`` seconds after the daemon's last renewal, so a daemon killed -9, frozen
  or cut off from NATS disappears without anyone's clock but the server's.
* ``run.<run_id>``: the run's holder (the client's name, pid, host, cwd and since, and the
  daemon's writer name and instance), created or taken over with compare-and-set on the
  key's last revision (``Nats-Expected-Last-Subject-Sequence``) and deleted, again with
  compare-and-set, when the lease ends. It holds no TTL: it lives while its daemon lives.
  An entry whose daemon key is gone is free: the next acquirer replaces it, on its revision,
  so two contenders cannot both win.

The entry's revision is the fencing token: every write of the run through this daemon
(each append group, each rebase, a delete) goes on only while the entry still carries that
revision, and the daemon refuses every write once its own renewal is overdue: ``valid()``
is false from ``sent + ttl - margin`` after the last acknowledged renewal, where ``sent`` is
when it was sent, so a holder stops writing before the server can expire its key (the server
starts the TTL when the renewal arrives, later than ``sent``). The stream's own fence (the
records' ``Nats-Expected-Last-Subject-Sequence``) stays underneath: a write already in
flight when the holder lost its lease cannot interleave with the next holder's.

How a write learns the entry's revision without a round trip: the daemon watches the whole
bucket (an ordered consumer on ``$KV.<bucket>.>``, which the server pushes every change to)
and keeps the newest revision it saw of each run's key. The watch is trusted only while it is
known to be current: it has delivered this daemon's own latest acknowledged renewal (a
message of the same bucket, so everything stored before it has been delivered too). Then a
write whose entry shows no newer revision goes on at once; otherwise (a change seen, the
watch behind or gone) the write reads the entry back first, as every write did before. A
watch that dies unnoticed is distrusted at the next renewal (``ttl/3``), so the read-back
returns within a renewal period; a change made while the watch is current is seen as soon
as the server delivers it.

A dead daemon therefore blocks its runs for at most ``ttl`` seconds after its last renewal
(3 s by default, ``serve --lease-ttl``, whole seconds: the server keeps a per-message TTL
to the second, cutting off any fraction); a daemon that stops cleanly deletes its entries and
its key at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nats.errors
import nats.js.errors
from nats.js import api as js_api

from journald.clock import utc_ts
from journald.core.errors import BackendUnavailable, LeaseLost, Locked
from journald.storage.jetstream.errors import is_unanswered, retried
from journald.storage.jetstream.lease_bucket import kv_stream

if TYPE_CHECKING:
    from journald.storage.jetstream.store import JetStreamStore

DEFAULT_LEASE_TTL_S = 3.0
MIN_LEASE_TTL_S = 1.0
WRONG_LAST_SEQUENCE = 10071
HDR_EXPECT = "Nats-Expected-Last-Subject-Sequence"
HDR_TTL = "Nats-TTL"
HDR_OPERATION = "KV-Operation"
HDR_MARKER = "Nats-Marker-Reason"
ACQUIRE_ATTEMPTS = 5
MARKER_TTL = "60s"
"""How long the delete marker of a released entry or a stopped daemon's key is kept."""
log = logging.getLogger("journald.leases")


@dataclass(frozen=True, slots=True)
class Entry:
    """A run's lease entry as stored (``revision``: its stream sequence)."""

    revision: int
    doc: Mapping[str, Any]

    @property
    def instance(self) -> str:
        return str(self.doc.get("instance", ""))

    def describe(self) -> str:
        who = self.doc.get("name") or "an unnamed client"
        return (
            f"{who} (pid {self.doc.get('pid', 0)} on {self.doc.get('host') or 'an unknown host'}) "
            f"through daemon {self.doc.get('writer') or '(unnamed)'} since "
            f"{self.doc.get('since', '?')}"
        )


class JetStreamLeases:
    """This daemon's side of the cross-host leases of one stream (see the module doc)."""

    def __init__(
        self,
        store: JetStreamStore,
        bucket: str,
        *,
        ttl_s: float = DEFAULT_LEASE_TTL_S,
    ) -> None:
        nc, ack_timeout_s = store.connection, store.ack_timeout_s
        self._store = store
        self._nc = nc
        self._js = nc.jetstream(timeout=ack_timeout_s)
        self._jsm = nc.jsm(timeout=ack_timeout_s)
        self.bucket = bucket
        self.stream = kv_stream(bucket)
        self.writer = store.writer
        # whole seconds: the server truncates a per-message TTL to them (1500ms lives 1 s)
        self.ttl_s = float(max(math.ceil(ttl_s), MIN_LEASE_TTL_S))
        self.renew_s = self.ttl_s / 3
        self.margin_s = min(0.5, self.ttl_s / 4)
        self.instance = secrets.token_hex(8)
        self._deadline = 0.0
        self._held: dict[str, int] = {}
        self._unreleased: dict[str, int] = {}
        self._beating: asyncio.Task[None] | None = None
        self._closing = False
        """Set by ``close``: the renewal loop ends at its next turn even when a cancel was
        lost (Python 3.11's ``wait_for``, inside nats-py, can swallow one that lands as its
        inner call completes, which left ``close`` awaiting the loop forever under load)."""
        self._expired_told = False
        self._watch: Any = None
        self._seen_seq = 0
        """The newest bucket stream seq the watch delivered."""
        self._beat_seq = 0
        """The bucket stream seq of this daemon's last acknowledged renewal."""
        self._latest: dict[str, int] = {}
        """The newest revision the watch saw of each live run entry (any daemon's)."""
        self.read_backs = 0
        """Writes that read their entry back (the watch not current, or a change seen)."""
        self.on_lost: Callable[[list[str]], None] | None = None
        """Called with the runs whose leases this daemon can no longer vouch for (its own
        renewal overdue, or an entry taken over): their local leases must end."""

    # --- keys ---------------------------------------------------------------------------

    def _subject(self, key: str) -> str:
        return f"$KV.{self.bucket}.{key}"

    def _run_key(self, run_id: str) -> str:
        return self._subject(f"run.{run_id}")

    def _daemon_key(self, instance: str) -> str:
        return self._subject(f"daemon.{instance}")

    async def _call(self, what: str, op: Callable[[], Awaitable[Any]]) -> Any:
        """``op()``, retried for up to a renewal period while NATS does not answer or is
        electing a leader; then ``BackendUnavailable`` (an ``APIError`` with an answer, such
        as a compare-and-set refused, is the caller's to read)."""

        def gave_up(failure: BaseException) -> BackendUnavailable:
            return BackendUnavailable(
                f"JetStream bucket {self.bucket}: {what} failed ({type(failure).__name__}); "
                "check the NATS servers and retry",
                metadata={"bucket": self.bucket},
            )

        return await retried(
            op,
            window_s=self.renew_s,
            closed=lambda: bool(self._nc.is_closed),
            gave_up=gave_up,
            retry=is_unanswered,
            max_delay_s=0.5,
        )

    async def _last(self, subject: str) -> tuple[int, dict[str, str], bytes] | None:
        """The key's last message, None when absent or a delete/expiry marker."""

        async def op() -> Any:
            try:
                return await self._jsm.get_last_msg(self.stream, subject)
            except nats.js.errors.NotFoundError:
                return None

        msg = await self._call(f"reading {subject}", op)
        if msg is None:
            return None
        headers = {str(k): str(v) for k, v in (msg.headers or {}).items()}
        return int(msg.seq), headers, bytes(msg.data or b"")

    @staticmethod
    def _is_marker(headers: Mapping[str, str]) -> bool:
        return headers.get(HDR_OPERATION) in ("DEL", "PURGE") or HDR_MARKER in headers

    async def _entry(self, run_id: str) -> tuple[int, Entry | None]:
        """(the key's revision, 0 when absent; the live entry or None)."""
        got = await self._last(self._run_key(run_id))
        if got is None:
            return 0, None
        seq, headers, data = got
        if self._is_marker(headers):
            return seq, None
        try:
            doc = json.loads(data)
        except ValueError:
            doc = {}
        return seq, Entry(seq, doc if isinstance(doc, dict) else {})

    async def _alive(self, instance: str) -> bool:
        if instance == self.instance:
            return True
        got = await self._last(self._daemon_key(instance))
        return got is not None and not self._is_marker(got[1])

    # --- the daemon's heartbeat ---------------------------------------------------------

    def valid(self) -> bool:
        """Whether this daemon may still write: its last renewal is younger than the TTL
        minus the margin (measured from when it was sent)."""
        return time.monotonic() < self._deadline

    async def _beat(self) -> None:
        sent = time.monotonic()
        doc = {"writer": self.writer, "host": socket.gethostname(), "pid": os.getpid()}
        ttl = f"{int(self.ttl_s)}s"

        async def op() -> Any:
            return await self._js.publish(
                self._daemon_key(self.instance),
                json.dumps(doc).encode(),
                stream=self.stream,
                headers={HDR_TTL: ttl},
            )

        ack = await self._call("renewing this daemon's key", op)
        self._beat_seq = max(self._beat_seq, int(getattr(ack, "seq", 0) or 0))
        self._deadline = max(self._deadline, sent + self.ttl_s - self.margin_s)
        self._expired_told = False

    async def start(self) -> None:
        """Publish this daemon's key (refused with ``BackendUnavailable`` when the bucket does
        not take it), keep renewing it, and fence every write of the store on it."""
        deadline = time.monotonic() + self._store.leader_wait_s
        try:
            while True:
                try:
                    await self._beat()
                    break
                except BackendUnavailable as exc:  # the bucket's leader is being elected
                    if time.monotonic() + 0.5 > deadline:
                        raise
                    log.warning("%s; waiting for the bucket to have a leader", exc.message)
                    await asyncio.sleep(0.5)
        except nats.js.errors.APIError as exc:
            raise BackendUnavailable(
                f"JetStream bucket {self.bucket} refused this daemon's key: {exc}; check that "
                "it allows per-key TTLs (`nats kv edit {self.bucket} --marker-ttl=1s`)",
                metadata={"bucket": self.bucket},
            ) from exc
        await self._start_watch()
        self._beating = asyncio.get_running_loop().create_task(self._keep_beating())
        self._store.leases = self

    # --- the watch of the bucket --------------------------------------------------------

    async def _start_watch(self) -> None:
        """Watch every change of the bucket from this daemon's first renewal on. Without a
        watch (refused, say, by a server that allows no consumer here) every write reads its
        entry back: slower, as safe."""
        prefix = self._subject("")
        run_prefix = self._subject("run.")

        async def on_msg(msg: Any) -> None:
            seq = int(msg.metadata.sequence.stream)
            subject = str(msg.subject)
            if subject.startswith(run_prefix):
                run_id = subject[len(run_prefix) :]
                if self._is_marker(msg.headers or {}) and run_id not in self._held:
                    self._latest.pop(run_id, None)  # keep only live entries
                else:
                    self._latest[run_id] = max(self._latest.get(run_id, 0), seq)
            self._seen_seq = max(self._seen_seq, seq)

        cfg = js_api.ConsumerConfig(
            deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(self._beat_seq, 1),
            inactive_threshold=30.0,
        )
        try:
            self._watch = await self._js.subscribe(
                f"{prefix}>", stream=self.stream, cb=on_msg, ordered_consumer=True, config=cfg
            )
        except Exception as exc:
            log.warning(
                "lease bucket %s: could not watch it (%s); every write reads its lease entry "
                "back instead",
                self.bucket,
                exc,
            )

    def _watch_current(self) -> bool:
        """The watch has delivered this daemon's latest acknowledged renewal."""
        return self._watch is not None and 0 < self._beat_seq <= self._seen_seq

    async def _keep_beating(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.renew_s if self.valid() else min(0.2, self.renew_s))
            try:
                await self._renew_once()
            except Exception:  # the loop outlives any one failure: writes stop meanwhile
                log.exception("lease bucket %s: the renewal loop failed; retrying", self.bucket)

    async def _renew_once(self) -> None:
        try:
            await self._beat()
        except (BackendUnavailable, nats.js.errors.APIError) as exc:
            log.warning("lease bucket %s: renewing this daemon's key failed: %s", self.bucket, exc)
        if not self.valid() and not self._expired_told and self._held:
            self._expired_told = True
            lost = list(self._held)
            log.error(
                "lease bucket %s: this daemon's key was not renewed for %gs; ending its %d "
                "lease(s): another host may take those runs now",
                self.bucket,
                self.ttl_s,
                len(lost),
            )
            self._tell_lost(lost)
        for run_id, revision in list(self._unreleased.items()):
            if await self._delete_entry(run_id, revision):
                self._unreleased.pop(run_id, None)

    def _tell_lost(self, runs: list[str]) -> None:
        if self.on_lost is not None:
            self.on_lost(runs)

    # --- run entries --------------------------------------------------------------------

    def _locked(self, run_id: str, entry: Entry) -> Locked:
        d = entry.doc
        return Locked(
            f"run {run_id} is held by {entry.describe()}; wait for it to finish or stop that "
            "process (its lease ends the moment its connection closes; if that daemon died, "
            f"within {self.ttl_s:g}s of its last renewal)",
            metadata={
                "run_id": run_id,
                "holder_name": str(d.get("name", "")),
                "holder_pid": int(d.get("pid", 0) or 0),
                "holder_host": str(d.get("host", "")),
                "holder_since": str(d.get("since", "")),
                "holder_writer": str(d.get("writer", "")),
                "lease_ttl_s": self.ttl_s,
            },
        )

    def _not_valid(self, run_id: str, doing: str) -> BackendUnavailable:
        return BackendUnavailable(
            f"run {run_id}: {doing} refused: this daemon could not renew its key in bucket "
            f"{self.bucket} within {self.ttl_s:g}s, so it may no longer hold any run; check "
            "its connection to NATS and retry",
            metadata={"run_id": run_id, "bucket": self.bucket},
        )

    async def acquire(self, run_id: str, holder: Mapping[str, Any]) -> int:
        """Take the run for ``holder`` (name, pid, host, cwd, since); its revision. Raises
        ``Locked`` naming the holder when a live daemon holds it."""
        if not self.valid():
            raise self._not_valid(run_id, "taking the run")
        doc = {
            **holder,
            "writer": self.writer,
            "instance": self.instance,
            "granted": utc_ts(),
        }
        payload = json.dumps(doc, sort_keys=True).encode()
        for _ in range(ACQUIRE_ATTEMPTS):
            revision, entry = await self._entry(run_id)
            if entry is not None and entry.instance != self.instance:
                if await self._alive(entry.instance):
                    raise self._locked(run_id, entry)
                log.info(
                    "run %s: taking over the lease of %s (its daemon's key expired)",
                    run_id,
                    entry.describe(),
                )

            async def op(expect: int = revision) -> Any:
                return await self._js.publish(
                    self._run_key(run_id),
                    payload,
                    stream=self.stream,
                    headers={HDR_EXPECT: str(expect)},
                )

            try:
                ack = await self._call(f"taking run {run_id}", op)
            except nats.js.errors.APIError as exc:
                if getattr(exc, "err_code", None) == WRONG_LAST_SEQUENCE:
                    continue  # another daemon wrote the entry in between: read it again
                raise BackendUnavailable(
                    f"JetStream bucket {self.bucket}: taking run {run_id} failed: {exc}",
                    metadata={"bucket": self.bucket, "run_id": run_id},
                ) from exc
            self._held[run_id] = int(ack.seq)
            self._unreleased.pop(run_id, None)
            return int(ack.seq)
        raise Locked(
            f"run {run_id} is being taken by other daemons at this moment; retry",
            metadata={"run_id": run_id},
        )

    async def _delete_entry(self, run_id: str, revision: int) -> bool:
        """Delete our entry (compare-and-set on our revision); True when it is gone or no
        longer ours."""

        async def op() -> Any:
            return await self._js.publish(
                self._run_key(run_id),
                b"",
                stream=self.stream,
                # the marker expires too: a bucket of many runs keeps no marker per run
                headers={HDR_EXPECT: str(revision), HDR_OPERATION: "DEL", HDR_TTL: MARKER_TTL},
            )

        try:
            await self._call(f"releasing run {run_id}", op)
        except nats.js.errors.APIError as exc:
            return getattr(exc, "err_code", None) == WRONG_LAST_SEQUENCE  # taken over: not ours
        except BackendUnavailable:
            return False
        return True

    async def release(self, run_id: str) -> None:
        """End this daemon's lease on the run (its entry is deleted now, or by the renewal
        loop once NATS answers: until then the run stays held by this daemon)."""
        revision = self._held.pop(run_id, None)
        self._latest.pop(run_id, None)
        if revision is not None and not await self._delete_entry(run_id, revision):
            self._unreleased[run_id] = revision

    def holds(self, run_id: str) -> bool:
        return run_id in self._held

    def confirmed(self, run_id: str) -> bool:
        """``confirm``'s answer when it needs no read and refuses nothing: this daemon holds
        the run, its renewal is not overdue, and the current watch saw no change of the run's
        entry since we took it. False: call ``confirm`` (it reads back, or raises)."""
        revision = self._held.get(run_id)
        return (
            revision is not None
            and self.valid()
            and self._watch_current()
            and self._latest.get(run_id, 0) <= revision
        )

    async def confirm(self, run_id: str, doing: str) -> None:
        """Before a write: this daemon still holds the run at its revision (the fencing
        token) and its own renewal is not overdue."""
        if self.confirmed(run_id):
            return  # no change of the entry since we took it, and the watch is current
        revision = self._held.get(run_id)
        if revision is None:
            raise LeaseLost(
                f"run {run_id}: {doing} refused: this daemon holds no lease on the run in "
                f"bucket {self.bucket}; Open the run again",
                metadata={"run_id": run_id},
            )
        if not self.valid():
            raise self._not_valid(run_id, doing)
        self.read_backs += 1
        now, entry = await self._entry(run_id)
        if now != revision:
            self._held.pop(run_id, None)
            self._tell_lost([run_id])
            if entry is not None:
                raise self._locked(run_id, entry)
            raise LeaseLost(
                f"run {run_id}: {doing} refused: its lease entry in bucket {self.bucket} was "
                "removed (by an operator?); Open the run again",
                metadata={"run_id": run_id},
            )

    async def refuse_if_held_elsewhere(self, run_id: str) -> None:
        """``Locked`` naming the holder when a live daemon other than this one holds the run."""
        _, entry = await self._entry(run_id)
        if (
            entry is not None
            and entry.instance != self.instance
            and await self._alive(entry.instance)
        ):
            raise self._locked(run_id, entry)

    async def close(self) -> None:
        """Stop renewing; delete what this daemon still holds and its key, so other hosts
        need not wait for the TTL."""
        self._store.leases = None
        self._closing = True
        if self._beating is not None:
            self._beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beating
            self._beating = None
        if self._watch is not None:
            watch, self._watch = self._watch, None
            with contextlib.suppress(Exception):
                await watch.unsubscribe()
        for run_id in list(self._held):
            await self.release(run_id)
        with contextlib.suppress(Exception):
            await self._js.publish(
                self._daemon_key(self.instance),
                b"",
                stream=self.stream,
                headers={HDR_OPERATION: "DEL", HDR_TTL: MARKER_TTL},
            )
        self._deadline = 0.0
