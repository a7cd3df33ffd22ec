"""Two ADK session services driven the same way: ADK's own ``DatabaseSessionService`` on a
SQLite file and ``JournaldSessionService`` on a real daemon, and the events the tests feed
them (user text, a model's function calls, their responses, replies, state deltas)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.session import Session
from google.genai import types
from journald_client.adk import JournaldSessionService

from tests.daemon import Daemon

APP = "shop"
_clock = itertools.count(1)
_last_ts = [0.0]


def next_ts() -> float:
    """Increasing event times, at least a millisecond apart and never before now (as real
    events are; the SQL service orders events by time)."""
    _last_ts[0] = max(time.time(), _last_ts[0] + 0.001)
    return _last_ts[0]


def user_text(text: str, delta: dict[str, Any] | None = None) -> Event:
    return Event(
        id=f"ev-{next(_clock)}",
        invocation_id="inv",
        author="user",
        timestamp=next_ts(),
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta or {}),
    )


def reply(text: str, delta: dict[str, Any] | None = None) -> Event:
    return Event(
        id=f"ev-{next(_clock)}",
        invocation_id="inv",
        author="helper",
        timestamp=next_ts(),
        content=types.Content(role="model", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta or {}),
    )


def calls(*ids: str) -> Event:
    parts = [
        types.Part(function_call=types.FunctionCall(id=i, name="lookup", args={"q": i}))
        for i in ids
    ]
    return Event(
        id=f"ev-{next(_clock)}",
        invocation_id="inv",
        author="helper",
        timestamp=next_ts(),
        content=types.Content(role="model", parts=parts),
    )


def responses(*ids: str, delta: dict[str, Any] | None = None) -> Event:
    parts = [
        types.Part(function_response=types.FunctionResponse(id=i, name="lookup", response={"r": i}))
        for i in ids
    ]
    return Event(
        id=f"ev-{next(_clock)}",
        invocation_id="inv",
        author="helper",
        timestamp=next_ts(),
        content=types.Content(role="user", parts=parts),
        actions=EventActions(state_delta=delta or {}),
    )


def view(session: Session | None) -> Any:
    """What a caller sees of a session: ids, state, events as JSON, update time (to the
    microsecond the SQL service keeps)."""
    if session is None:
        return None
    return {
        "id": session.id,
        "user": session.user_id,
        "state": session.state,
        "events": [e.model_dump(mode="json", exclude_none=True) for e in session.events],
        "updated": round(session.last_update_time, 6),
    }


class Sides:
    """The reference service and journald's, side by side."""

    def __init__(self, daemon: Daemon, workdir: Path, app: str = APP) -> None:
        """``app``: one per test on a shared daemon (app state is shared by its sessions)."""
        self.app = app
        workdir.mkdir(parents=True, exist_ok=True)
        self.db = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{workdir / 'adk.db'}")
        self.jd = JournaldSessionService(socket=str(daemon.socket))
        # each side appends to the session objects it returned, as a Runner does
        self.held: dict[tuple[str, str, str], tuple[Session, Session]] = {}

    @property
    def services(self) -> tuple[BaseSessionService, BaseSessionService]:
        return self.db, self.jd

    async def create(self, user: str, sid: str, state: dict[str, Any] | None = None) -> Any:
        got = [
            await s.create_session(app_name=self.app, user_id=user, session_id=sid, state=state)
            for s in self.services
        ]
        self.held[(self.app, user, sid)] = (got[0], got[1])
        return [_created(view(g)) for g in got]

    async def append(self, user: str, sid: str, event: Event) -> None:
        db_session, jd_session = self.held[(self.app, user, sid)]
        await self.db.append_event(db_session, event.model_copy(deep=True))
        await self.jd.append_event(jd_session, event.model_copy(deep=True))
        ours, theirs = view(jd_session), view(db_session)
        assert ours == theirs, _difference(theirs, ours)

    async def get(self, user: str, sid: str, **config: Any) -> list[Any]:
        from google.adk.sessions.base_session_service import GetSessionConfig

        cfg = GetSessionConfig(**config) if config else None
        return [
            _created(
                view(
                    await s.get_session(app_name=self.app, user_id=user, session_id=sid, config=cfg)
                )
            )
            for s in self.services
        ]

    async def listed(self, user: str | None = None) -> list[Any]:
        out = []
        for s in self.services:
            got = await s.list_sessions(app_name=self.app, user_id=user)
            # in update order; creation times come from each service's own clock
            out.append([{k: view(x)[k] for k in ("id", "user", "state")} for x in got.sessions])
        return out

    async def delete(self, user: str, sid: str) -> None:
        for s in self.services:
            await s.delete_session(app_name=self.app, user_id=user, session_id=sid)
        self.held.pop((self.app, user, sid), None)

    async def close(self) -> None:
        await self.db.close()
        self.jd.close()


def _created(v: Any) -> Any:
    """A view without the creation time, which each service takes from its own clock."""
    if v is None or v["events"]:
        return v
    return {**v, "updated": None}


def _difference(theirs: Any, ours: Any) -> str:
    """The first place two views differ (this module's asserts are not rewritten by pytest)."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        for k in sorted(set(theirs) | set(ours)):
            if theirs.get(k) != ours.get(k):
                return f"{k}: " + _difference(theirs.get(k), ours.get(k))
    if isinstance(theirs, list) and isinstance(ours, list):
        for n, (a, b) in enumerate(zip(theirs, ours, strict=False)):
            if a != b:
                return f"[{n}] " + _difference(a, b)
        return f"lengths {len(theirs)} (ADK) != {len(ours)} (journald)"
    return f"{theirs!r} (ADK) != {ours!r} (journald)"
