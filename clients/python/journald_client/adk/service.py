"""``JournaldSessionService``: a Google ADK session service on journald.

A session is a run; its events are the run's conversation (``journald_client.adk.records``)
and its state is framework state in the same run, written in the same durable append as the
event whose ``state_delta`` changed it. ``app:`` keys live in one run per app, ``user:`` keys
in one run per (app, user), so every session of the app or the user sees them; ``temp:``
keys are never written. ``get_session`` with a ``GetSessionConfig`` reads the newest events
from History pages (a page near the end costs its distance from the end, not the session's
length); ``list_sessions`` lists runs once and reads each matching session's state, never its
events.

Writes hold the run's writer lease and give it back ``idle_release_s`` after the last one, so
another process may write the session next (a session with a function call still open in this
process keeps its lease until the call's response is written); a session whose last function
call never returned (the process died in the tool) is shown with an error response for that
call, which the next event's write stores, so the model is never handed a call without its
response.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from pydantic_core import to_jsonable_python

from journald_client import codec, errors
from journald_client._closed import Closed
from journald_client.adk import records as rec
from journald_client.client import Client, Run, connect
from journald_client.codec import Entry
from journald_client.fingerprint import Fingerprint, compute
from journald_client.pb import journal_pb2 as pb
from journald_client.state import Block, HistoryPage, PendingTurn, RunState

FINGERPRINT: Fingerprint = compute(provider="google-adk", model="session", system_prompt=[])
INLINE_MAX_BYTES = 64 * 1024
"""State values and events above this go to an attachment of the run (stored once)."""
IDLE_RELEASE_S = 0.5
LOCK_WAIT_S = 5.0
LIST_READERS = 8
LABEL_APP, LABEL_USER, LABEL_SESSION, LABEL_KIND = "adk.app", "adk.user", "adk.session", "adk.kind"
T = TypeVar("T")


@dataclass(slots=True)
class _Writer:
    """A held lease on one run and what the next write needs to know."""

    run: Run
    mirror: rec.Mirror = field(default_factory=rec.Mirror)
    next_n: int = 0
    last_used: float = 0.0


class JournaldSessionService(BaseSessionService):
    """ADK's ``BaseSessionService`` over a journald daemon (see the module doc)."""

    def __init__(
        self,
        client: Client | None = None,
        *,
        socket: str | None = None,
        name: str = "google-adk",
        idle_release_s: float = IDLE_RELEASE_S,
        lock_wait_s: float = LOCK_WAIT_S,
        list_state: bool = True,
    ) -> None:
        """``list_state=False``: ``list_sessions`` returns each session's ids and update time
        from one listing of the daemon's runs, without its state (which costs a read of every
        session listed, as ADK's own services return it)."""
        self.list_state = list_state
        self._owns_client = client is None
        self.client = client if client is not None else connect(socket, name=name)
        self.name = name
        self.idle_release_s = idle_release_s
        self.lock_wait_s = lock_wait_s
        self._writers: dict[str, _Writer] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="adk-read")
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._release_idle, name="adk-idle", daemon=True)
        self._reaper.start()

    # --- plumbing ---------------------------------------------------------------------------

    def _lock(self, run_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(run_id, threading.Lock())

    async def _in_thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.to_thread(fn)

    def _writer(self, run_id: str, labels: dict[str, str] | None) -> _Writer:
        """The run's writer (caller holds the run's lock): the held lease, or a new one.
        ``labels`` None: the run must exist (a session); else it is created if missing."""
        held = self._writers.get(run_id)
        if held is not None and not held.run.closed and held.run.lease_ended is None:
            held.last_used = time.monotonic()
            return held
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                if labels is None:
                    run = self.client.resume(run_id, FINGERPRINT, name=self.name)
                else:
                    run = self.client.open(run_id, FINGERPRINT, [], labels=labels, name=self.name)
                break
            except errors.Locked:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)
        writer = _Writer(run, last_used=time.monotonic())
        self._adopt(writer, run.state)
        self._writers[run_id] = writer
        return writer

    def _adopt(self, writer: _Writer, state: RunState) -> None:
        info = _info(state)
        writer.next_n = int(info.get("next", 0))
        writer.mirror = rec.Mirror(rec.open_calls_of(state.pending, self._resolver(state.run_id)))

    def _resolver(self, run_id: str) -> Callable[[rec.Carried], rec.Doc]:
        def resolve(c: rec.Carried) -> rec.Doc:
            if c.event is not None:
                return c.event
            doc: rec.Doc = json.loads(self.client.get_attachment(run_id, c.sha256))
            return doc

        return resolve

    def _release_idle(self) -> None:
        while not self._stop.wait(max(0.05, self.idle_release_s / 2)):
            for run_id in list(self._writers):
                lock = self._lock(run_id)
                if not lock.acquire(blocking=False):
                    continue
                try:
                    w = self._writers.get(run_id)
                    # a call this process is still running keeps the lease: a session without
                    # a writer shows its open calls as abandoned, and this one is not
                    running = w is not None and any(not c.long_running for c in w.mirror.open_calls)
                    idle = w is not None and time.monotonic() - w.last_used >= self.idle_release_s
                    if w is not None and idle and not running:
                        del self._writers[run_id]
                        w.run.close()
                finally:
                    lock.release()

    def _drop_writer(self, run_id: str) -> None:
        w = self._writers.pop(run_id, None)
        if w is not None:
            w.run.close()

    def _value(self, run_id: str, namespace: str, key: str, value: Any) -> Entry:
        data = rec.dumps(to_jsonable_python(value, fallback=repr))
        if len(data) <= INLINE_MAX_BYTES:
            return Entry.state(namespace, key, "json", data)
        att = self.client.put_attachment(run_id, data, "application/json", key)
        return Entry.state(namespace, key, "json", sha256=att.sha256, size=att.size)

    def _decoded(self, run_id: str, data: bytes, sha256: str) -> Any:
        return json.loads(self.client.get_attachment(run_id, sha256) if sha256 else data)

    def _state_of(self, state: RunState | None) -> rec.Doc:
        if state is None:
            return {}
        return {
            e.key: self._decoded(state.run_id, e.data, e.sha256)
            for e in state.state
            if e.namespace == rec.NS_STATE
        }

    def _fold_or_none(self, run_id: str, *, messages: bool = False) -> RunState | None:
        try:
            return self.client.fold(run_id, messages=messages)
        except errors.SessionNotFound:
            return None

    def _scoped(self, app_name: str, user_id: str) -> tuple[rec.Doc, rec.Doc]:
        app = self._state_of(self._fold_or_none(rec.app_run_id(app_name)))
        user = self._state_of(self._fold_or_none(rec.user_run_id(app_name, user_id)))
        return app, user

    def _write_scoped(self, app_name: str, user_id: str, app: rec.Doc, user: rec.Doc) -> None:
        """``app:`` and ``user:`` keys, each into its own run (written before the session's
        record, so an acknowledged event never lacks them)."""
        for run_id, values, labels in (
            (rec.app_run_id(app_name), app, {LABEL_APP: app_name, LABEL_KIND: "app"}),
            (
                rec.user_run_id(app_name, user_id),
                user,
                {LABEL_APP: app_name, LABEL_USER: user_id, LABEL_KIND: "user"},
            ),
        ):
            if not values:
                continue
            with self._lock(run_id):
                w = self._writer(run_id, labels)
                w.run.append_many(
                    [self._value(run_id, rec.NS_STATE, k, v) for k, v in values.items()]
                )
                w.last_used = time.monotonic()

    def _session(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        state: rec.Doc,
        events: list[Event],
        updated: float,
        last_seq: int,
    ) -> Session:
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=state,
            events=events,
            last_update_time=updated,
        )
        session._storage_update_marker = str(last_seq)
        return session

    # --- the session service ----------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        sid = session_id.strip() if session_id and session_id.strip() else uuid.uuid4().hex
        return await self._in_thread(lambda: self._create(app_name, user_id, sid, state or {}))

    def _create(self, app_name: str, user_id: str, sid: str, state: rec.Doc) -> Session:
        run_id = rec.session_run_id(app_name, user_id, sid)
        labels = {
            LABEL_APP: app_name,
            LABEL_USER: user_id,
            LABEL_SESSION: sid,
            LABEL_KIND: "session",
        }
        with self._lock(run_id):
            try:
                run = self.client.start(run_id, FINGERPRINT, [], labels=labels, name=self.name)
            except (errors.SessionExists, errors.Locked) as exc:  # held: it exists too
                raise AlreadyExistsError(f"Session with id {sid} already exists.") from exc
            app, user, own = rec.split_delta(state)
            self._write_scoped(app_name, user_id, app, user)
            now = time.time()
            entries = [self._value(run_id, rec.NS_STATE, k, v) for k, v in own.items()]
            entries.append(_info_entry(0, now))
            run.append_many(entries)
            self._writers[run_id] = _Writer(run, last_used=time.monotonic())
            merged = rec.merged_state(*self._scoped(app_name, user_id), _jsonable(own))
            return self._session(app_name, user_id, sid, merged, [], now, run.last_seq)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        sid = session_id.strip() if session_id else session_id
        return await self._in_thread(lambda: self._get(app_name, user_id, sid, config))

    def _get(
        self, app_name: str, user_id: str, sid: str, config: GetSessionConfig | None
    ) -> Session | None:
        run_id = rec.session_run_id(app_name, user_id, sid)
        want = config.num_recent_events if config else None
        after = config.after_timestamp if config else None
        whole = want is None and after is None
        scoped = self._pool.submit(self._scoped, app_name, user_id)  # beside the session's read
        total = 0
        if whole:
            state = self._fold_or_none(run_id, messages=True)
        else:
            state, total = self._facts(run_id)
        if state is None or state.labels.get(LABEL_SESSION) != sid:
            return None
        resolve = self._resolver(run_id)
        if want == 0:
            found: dict[int, rec.Doc] = {}
        elif whole:
            found = self._events(
                [*rec.carried_in_messages(state.messages), *rec.carried_in_pending(state.pending)],
                resolve,
            )
        else:
            found = self._recent(run_id, total, state.pending, want, after, resolve)
        if want != 0 and run_id not in self._writers:  # a call nobody is running any more
            nxt = int(_info(state).get("next", 0))
            for call in rec.open_calls_of(state.pending, resolve):
                if not call.long_running:
                    found[nxt] = rec.abandoned_response(call)
                    nxt += 1
        events = [Event.model_validate(found[n]) for n in sorted(found)]
        if after is not None:
            events = [e for e in events if e.timestamp >= after]
        if want is not None:
            events = events[max(0, len(events) - want) :] if want else []
        merged = rec.merged_state(*scoped.result(), self._state_of(state))
        updated = float(_info(state).get("updated", 0.0))
        return self._session(app_name, user_id, sid, merged, events, updated, state.last_seq)

    def _facts(self, run_id: str) -> tuple[RunState | None, int]:
        """The session's state without its messages, and how many messages it holds (the
        stored view History pages)."""
        try:
            resp = self.client._unary("Fold", pb.FoldRequest(run_id=run_id, omit_messages=True))
        except errors.SessionNotFound:
            return None, 0
        return codec.state_from_pb(resp.state), int(resp.state.messages_total)

    def _events(
        self, carried: Iterable[rec.Carried], resolve: Callable[[rec.Carried], rec.Doc]
    ) -> dict[int, rec.Doc]:
        return {c.n: resolve(c) for c in carried}

    def _recent(
        self,
        run_id: str,
        total: int,
        pending: PendingTurn | None,
        want: int | None,
        after: float | None,
        resolve: Callable[[rec.Carried], rec.Doc],
    ) -> dict[int, rec.Doc]:
        """The newest events, paged back from the end until ``want`` of them are at or after
        ``after``, or one is before it, or the session's start is reached."""
        found = self._events(rec.carried_in_pending(pending), resolve)
        end, step = total, max(want or 0, 16)

        def enough() -> bool:
            kept = [d for d in found.values() if after is None or d.get("timestamp", 0.0) >= after]
            if want is not None and len(kept) >= want:
                return True
            return after is not None and len(kept) < len(found)

        while end > 0 and not enough():
            start = max(0, end - step)
            aligned, at = start, start
            while at < end:  # the daemon may answer fewer messages than asked: follow on
                page: HistoryPage = self.client.history(run_id, at, end - at, stored=True)
                found.update(self._events(rec.carried_in_messages(page.messages), resolve))
                aligned = min(aligned, page.offset)
                if page.next_offset <= at:
                    break
                at = page.next_offset
            end = aligned
            step *= 2
        return found

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        return await self._in_thread(lambda: self._list(app_name, user_id))

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        rows = [
            r
            for r in self.client.list()
            if r.labels.get(LABEL_KIND) == "session"
            and r.labels.get(LABEL_APP) == app_name
            and (user_id is None or r.labels.get(LABEL_USER) == user_id)
        ]
        if not self.list_state:
            return ListSessionsResponse(
                sessions=sorted(
                    (
                        self._session(
                            app_name,
                            r.labels[LABEL_USER],
                            r.labels[LABEL_SESSION],
                            {},
                            [],
                            _epoch(r.updated),
                            r.last_seq,
                        )
                        for r in rows
                    ),
                    key=lambda s: (s.last_update_time, s.user_id, s.id),
                )
            )
        with ThreadPoolExecutor(LIST_READERS) as pool:
            states = list(pool.map(lambda r: self._fold_or_none(r.run_id), rows))
            users = sorted({r.labels[LABEL_USER] for r in rows})
            user_states = dict(
                zip(
                    users,
                    pool.map(
                        lambda u: self._state_of(self._fold_or_none(rec.user_run_id(app_name, u))),
                        users,
                    ),
                    strict=True,
                )
            )
        app = self._state_of(self._fold_or_none(rec.app_run_id(app_name)))
        sessions = []
        for row, state in zip(rows, states, strict=True):
            if state is None:  # deleted meanwhile
                continue
            uid = row.labels[LABEL_USER]
            merged = rec.merged_state(app, user_states.get(uid, {}), self._state_of(state))
            updated = float(_info(state).get("updated", 0.0))
            sid = row.labels[LABEL_SESSION]
            sessions.append(self._session(app_name, uid, sid, merged, [], updated, state.last_seq))
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        run_id = rec.session_run_id(app_name, user_id, session_id.strip())

        def delete() -> None:
            with self._lock(run_id):
                self._drop_writer(run_id)
                self.client.delete(run_id)

        await self._in_thread(delete)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        run_id = rec.user_run_id(app_name, user_id)
        return await self._in_thread(lambda: self._state_of(self._fold_or_none(run_id)))

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await self._in_thread(lambda: self._append(session, event))
        return self._commit_event_to_session(session, event)

    def _append(self, session: Session, event: Event) -> None:
        run_id = rec.session_run_id(session.app_name, session.user_id, session.id)
        delta = event.actions.state_delta if event.actions and event.actions.state_delta else {}
        app, user, own = rec.split_delta(delta)
        with self._lock(run_id):
            try:
                w = self._writer(run_id, None)
            except errors.SessionNotFound as exc:
                raise SessionNotFoundError(f"Session {session.id} not found.") from exc
            marker = session._storage_update_marker
            if marker is not None and marker != str(w.run.last_seq):
                raise StaleSessionError(
                    f"Session {session.id} was written by another process since it was read "
                    f"(stored seq {w.run.last_seq}, read at {marker}): get the session again, "
                    "then append."
                )
            self._write_scoped(session.app_name, session.user_id, app, user)
            doc = event.model_dump(exclude_none=True, mode="json")
            block = self._event_block(run_id, w.next_n, doc)
            entries = [self._value(run_id, rec.NS_STATE, k, v) for k, v in own.items()]
            before = list(w.mirror.open_calls)
            conversation, next_n = w.mirror.entries(doc, block, w.next_n)
            entries += conversation
            entries.append(_info_entry(next_n, event.timestamp))
            try:
                w.run.append_many(entries)
            except BaseException:
                w.mirror.open_calls = before
                self._drop_writer(run_id)
                raise
            w.next_n, w.last_used = next_n, time.monotonic()
            session.last_update_time = event.timestamp
            session._storage_update_marker = str(w.run.last_seq)

    def _event_block(self, run_id: str, n: int, doc: rec.Doc) -> Block:
        data = rec.dumps(doc)
        if len(data) <= INLINE_MAX_BYTES:
            return rec.provider_block(n, doc)
        att = self.client.put_attachment(run_id, data, "application/json", f"event-{n}")
        return rec.provider_block(n, sha256=att.sha256)

    # --- lifecycle --------------------------------------------------------------------------

    def close(self) -> Closed:
        """Give back every lease this service holds (and the connection, if it made it).
        Works called plainly and awaited (``await service.close()``, as ADK's SQL service
        is closed): the work is done by the call, the awaitable is already done."""
        self.close_sync()
        return Closed()

    def close_sync(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False)
        for run_id in list(self._writers):
            with self._lock(run_id):
                self._drop_writer(run_id)
        if self._owns_client:
            self.client.close()


def _info(state: RunState) -> rec.Doc:
    for e in state.state:
        if e.namespace == rec.NS_SESSION and e.key == rec.INFO_KEY:
            doc: rec.Doc = json.loads(e.data)
            return doc
    return {}


def _info_entry(next_n: int, updated: float) -> Entry:
    """The session's facts, last in every write: its record time is the update time, so a
    listing of the runs (``RunInfo.updated``) tells it without reading the session."""
    entry = Entry.state(
        rec.NS_SESSION, rec.INFO_KEY, "json", rec.dumps({"next": next_n, "updated": updated})
    )
    entry.record.ts = datetime.fromtimestamp(updated, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return entry


def _epoch(ts: str) -> float:
    return (
        datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
        if ts
        else 0.0
    )


def _jsonable(values: rec.Doc) -> rec.Doc:
    out: rec.Doc = to_jsonable_python(values, fallback=repr)
    return out
