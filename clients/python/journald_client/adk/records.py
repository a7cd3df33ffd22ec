"""How an ADK session lives in a journald run (pure: no I/O, no ADK import).

An event is one ``provider`` block (provider ``google-adk``) holding its JSON and its position
in the session, carried by the conversation record the event maps to: a model's function
calls are an ``assistant`` record with ``tool_use`` blocks, each function response a
``tool_result`` of its open call, text from the user a ``user`` record, any other event an
``assistant`` record. So the events are the run's conversation: History pages serve the
latest events, ``journald replay`` reads them, and the fold keeps every call paired.

The fold may reorder what it merges (the results of one turn follow the order of the calls),
so an event's position, not its place in a message, orders it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from journald_client.codec import Entry
from journald_client.state import Block, Message, PendingTurn

PROVIDER = "google-adk"
NS_STATE = "adk.state"
"""Framework state: one key of state per record (session keys in the session's run, ``app:``
keys in the app's run, ``user:`` keys in the user's run, each without its prefix)."""
NS_SESSION = "adk.session"
INFO_KEY = "info"
"""The session's facts: the next event position and the last update time."""
APP_PREFIX, USER_PREFIX, TEMP_PREFIX = "app:", "user:", "temp:"
ABANDONED = (
    "journald: this function call never returned (the process stopped, or the tool failed, "
    "before its response was saved); its outcome is unknown. Check what it may have changed "
    "before calling it again."
)
Doc = dict[str, Any]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:40]


def session_run_id(app_name: str, user_id: str, session_id: str) -> str:
    return "adk-" + _digest(app_name, user_id, session_id)


def app_run_id(app_name: str) -> str:
    return "adk-app-" + _digest(app_name)


def user_run_id(app_name: str, user_id: str) -> str:
    return "adk-user-" + _digest(app_name, user_id)


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def split_delta(delta: Mapping[str, Any]) -> tuple[Doc, Doc, Doc]:
    """``(app, user, session)`` keys of a state delta, prefixes removed; ``temp:`` dropped."""
    app: Doc = {}
    user: Doc = {}
    session: Doc = {}
    for key, value in delta.items():
        if key.startswith(APP_PREFIX):
            app[key.removeprefix(APP_PREFIX)] = value
        elif key.startswith(USER_PREFIX):
            user[key.removeprefix(USER_PREFIX)] = value
        elif not key.startswith(TEMP_PREFIX):
            session[key] = value
    return app, user, session


def merged_state(
    app: Mapping[str, Any], user: Mapping[str, Any], session: Mapping[str, Any]
) -> Doc:
    """What a session shows: its own keys, then the app's and the user's under their prefix."""
    out = dict(session)
    out.update({APP_PREFIX + k: v for k, v in app.items()})
    out.update({USER_PREFIX + k: v for k, v in user.items()})
    return out


# --- events -> records ------------------------------------------------------------------------


@dataclass(slots=True)
class OpenCall:
    """A function call the conversation has not answered yet, and the event that made it."""

    id: str
    name: str
    event: Doc

    @property
    def long_running(self) -> bool:
        return self.id in (self.event.get("long_running_tool_ids") or ())


def abandoned_response(call: OpenCall) -> Doc:
    """The event that answers a call which never returned: an error response, by the agent
    that made the call, at the call's time (so a time filter keeps the two together)."""
    return {
        "id": f"journald-abandoned-{call.id}",
        "invocation_id": call.event.get("invocation_id", ""),
        "author": call.event.get("author", ""),
        "timestamp": call.event.get("timestamp", 0.0),
        "content": {
            "role": "user",
            "parts": [
                {
                    "function_response": {
                        "id": call.id,
                        "name": call.name,
                        "response": {"error": ABANDONED},
                    }
                }
            ],
        },
    }


def provider_block(n: int, event: Doc | None = None, sha256: str = "") -> Block:
    """The block that carries event number ``n``: its JSON, or the attachment holding it."""
    body: Doc = {"n": n, "event": event} if sha256 == "" else {"n": n, "sha256": sha256}
    return {"type": "provider", "provider": PROVIDER, "data": dumps(body).decode()}


def _parts(event: Mapping[str, Any]) -> list[Doc]:
    content = event.get("content") or {}
    parts = content.get("parts") if isinstance(content, Mapping) else None
    return [p for p in parts or [] if isinstance(p, dict)]


def _readable(parts: Sequence[Mapping[str, Any]]) -> list[Block]:
    return [{"type": "text", "text": str(p["text"])} for p in parts if p.get("text")]


@dataclass(slots=True)
class Mirror:
    """Turns events into conversation records, keeping the open calls across events."""

    open_calls: list[OpenCall] = field(default_factory=list)

    def close_open(self, next_n: int) -> tuple[list[Entry], int]:
        """Error results for every open call (the conversation moves on without them). A
        call that is not long-running also gets an event of its own, the one ``get_session``
        showed for it while it was open; a long-running one waits for its real response,
        which arrives later as a user event."""
        out: list[Entry] = []
        for call in self.open_calls:
            content: list[Block] = [{"type": "text", "text": ABANDONED}]
            if not call.long_running:
                content.insert(0, provider_block(next_n, abandoned_response(call)))
                next_n += 1
            out.append(Entry.tool_result(call.id, content, is_error=True))
        self.open_calls.clear()
        return out, next_n

    def entries(self, event: Doc, block: Block, next_n: int) -> tuple[list[Entry], int]:
        """The records of one event whose provider block is ``block`` (numbered ``next_n``,
        after any abandoned calls this event closes); returns them and the next number."""
        parts = _parts(event)
        out: list[Entry] = []
        carried = False
        open_ids = {c.id: c for c in self.open_calls}
        for part in parts:
            resp = part.get("function_response")
            if not isinstance(resp, Mapping):
                continue
            rid = str(resp.get("id") or "")
            if rid in open_ids:
                self.open_calls.remove(open_ids.pop(rid))
                content: list[Block] = [
                    {"type": "text", "text": dumps(resp.get("response")).decode()}
                ]
                if not carried:
                    content.insert(0, block)
                    carried = True
                out.append(Entry.tool_result(rid, content))
        calls = _calls(parts)
        if carried:  # numbered already; calls it also makes close what is still open after it
            if not calls:
                return out, next_n + 1
            closing, after = self.close_open(next_n + 1)
        else:
            closing, next_n = self.close_open(next_n)
            block, after = _renumbered(block, next_n), next_n + 1
        out.extend(closing)
        blocks = ([] if carried else [block]) + _readable(parts)
        if calls:
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dumps(a).decode()}
                for c, a in calls
            ]
            out.append(Entry.assistant(blocks, stop_reason="tool_use"))
            self.open_calls.extend(OpenCall(c.id, c.name, event) for c, _ in calls)
        elif _from_user(event):
            out.append(Entry.user(blocks))
        else:
            out.append(Entry.assistant(blocks, stop_reason="end_turn"))
        return out, after


def _calls(parts: Sequence[Mapping[str, Any]]) -> list[tuple[OpenCall, Any]]:
    seen: set[str] = set()
    out: list[tuple[OpenCall, Any]] = []
    for part in parts:
        call = part.get("function_call")
        if not isinstance(call, Mapping) or not call.get("id") or call["id"] in seen:
            continue
        seen.add(str(call["id"]))
        out.append(
            (
                OpenCall(str(call["id"]), str(call.get("name") or "function"), {}),
                call.get("args") or {},
            )
        )
    return out


def _renumbered(block: Block, n: int) -> Block:
    body = json.loads(block["data"])
    if body["n"] == n:
        return block
    return provider_block(n, body.get("event"), body.get("sha256", ""))


def _from_user(event: Mapping[str, Any]) -> bool:
    content = event.get("content")
    if isinstance(content, Mapping) and content.get("role"):
        return content.get("role") == "user"
    return event.get("author") == "user"


# --- records -> events ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Carried:
    """An event found in the conversation: its number, and its JSON or attachment."""

    n: int
    event: Doc | None
    sha256: str


def carried_in(blocks: Iterable[Mapping[str, Any]]) -> Iterator[Carried]:
    for b in blocks:
        if b.get("type") == "provider" and b.get("provider") == PROVIDER:
            body = json.loads(str(b.get("data", "")))
            yield Carried(int(body["n"]), body.get("event"), str(body.get("sha256", "")))
        elif b.get("type") == "tool_result":
            yield from carried_in(b.get("content") or [])


def carried_in_messages(messages: Iterable[Message]) -> Iterator[Carried]:
    for m in messages:
        yield from carried_in(m.get("content") or [])


def carried_in_pending(pending: PendingTurn | None) -> Iterator[Carried]:
    if pending is None:
        return
    yield from carried_in(pending.message.get("content") or [])
    for r in pending.results:
        yield from carried_in(r.content)


def open_calls_of(pending: PendingTurn | None, resolve: Callable[[Carried], Doc]) -> list[OpenCall]:
    """The pending turn's unanswered calls, each with the event that made it (``resolve``
    reads an event kept in an attachment)."""
    if pending is None:
        return []
    made = next(iter(carried_in(pending.message.get("content") or [])), None)
    event = resolve(made) if made is not None else {}
    return [OpenCall(c.id, c.name, event) for c in pending.unanswered]
