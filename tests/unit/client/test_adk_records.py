"""The pure mapping of ADK events onto journald records (journald_client.adk.records): which
record each event becomes, how an unanswered call is closed, how state keys are split."""

from __future__ import annotations

import json
from typing import Any

from journald_client.adk import records as rec
from journald_client.codec import Entry


def call_event(cid: str, *, long_running: bool = False) -> dict[str, Any]:
    event: dict[str, Any] = {
        "id": f"e-{cid}",
        "author": "helper",
        "invocation_id": "inv",
        "timestamp": 10.5,
        "content": {"role": "model", "parts": [{"function_call": {"id": cid, "name": "ask"}}]},
    }
    if long_running:
        event["long_running_tool_ids"] = [cid]
    return event


def text_event(text: str, role: str = "user") -> dict[str, Any]:
    return {
        "id": f"t-{text}",
        "author": "user",
        "content": {"role": role, "parts": [{"text": text}]},
    }


def response_event(cid: str) -> dict[str, Any]:
    part = {"function_response": {"id": cid, "name": "ask", "response": {"ok": True}}}
    return {"id": f"r-{cid}", "author": "user", "content": {"role": "user", "parts": [part]}}


def feed(mirror: rec.Mirror, n: int, event: dict[str, Any]) -> tuple[list[Entry], int]:
    return mirror.entries(event, rec.provider_block(n, event), n)


def blocks(entry: Entry) -> list[dict[str, Any]]:
    r = entry.record
    kind = entry.kind
    raw = r.assistant.message.content_json if kind == "assistant" else getattr(r, kind).content_json
    out: list[dict[str, Any]] = json.loads(raw)
    return out


def carried(entries: list[Entry]) -> list[tuple[int, str]]:
    return [(c.n, (c.event or {})["id"]) for e in entries for c in rec.carried_in(blocks(e))]


def test_a_call_left_open_is_closed_with_an_abandoned_response_event_before_the_next_event() -> (
    None
):
    mirror = rec.Mirror()
    first, n = feed(mirror, 0, call_event("c1"))
    assert [e.kind for e in first] == ["assistant"]
    assert n == 1
    entries, n = feed(mirror, n, text_event("are you there?"))
    assert [e.kind for e in entries] == ["tool_result", "user"]
    assert entries[0].record.tool_result.is_error
    # the abandoned response is event 1, the user's event moves to 2
    assert carried(entries) == [(1, "journald-abandoned-c1"), (2, "t-are you there?")]
    assert n == 3
    assert mirror.open_calls == []


def test_a_long_running_call_gets_no_invented_response_and_its_late_answer_is_kept() -> None:
    mirror = rec.Mirror()
    _, n = feed(mirror, 0, call_event("c1", long_running=True))
    entries, n = feed(mirror, n, text_event("still waiting"))
    assert [e.kind for e in entries] == ["tool_result", "user"]
    assert carried(entries) == [(1, "t-still waiting")]  # no event made up for the call
    late, n = feed(mirror, n, response_event("c1"))
    assert [e.kind for e in late] == ["user"]  # the call is closed: a user event, kept whole
    assert carried(late) == [(2, "r-c1")]
    assert n == 3


def test_a_response_answers_its_open_call_and_carries_its_event_once() -> None:
    mirror = rec.Mirror()
    both = {
        "id": "e-two",
        "author": "helper",
        "content": {
            "role": "model",
            "parts": [{"function_call": {"id": i, "name": "ask"}} for i in ("a", "b")],
        },
    }
    _, n = feed(mirror, 0, both)
    answer = {
        "id": "r-both",
        "author": "helper",
        "content": {
            "role": "user",
            "parts": [
                {"function_response": {"id": i, "name": "ask", "response": {}}} for i in ("b", "a")
            ],
        },
    }
    entries, n = feed(mirror, n, answer)
    assert [e.record.tool_result.tool_use_id for e in entries] == ["b", "a"]
    assert carried(entries) == [(1, "r-both")]
    assert n == 2
    assert mirror.open_calls == []


def test_state_keys_split_by_prefix_and_temp_keys_are_dropped() -> None:
    app, user, session = rec.split_delta(
        {"app:theme": "dark", "user:lang": "en", "temp:scratch": 1, "cart": [1], "apple": 2}
    )
    assert app == {"theme": "dark"}
    assert user == {"lang": "en"}
    assert session == {"cart": [1], "apple": 2}
    assert rec.merged_state(app, user, session) == {
        "cart": [1],
        "apple": 2,
        "app:theme": "dark",
        "user:lang": "en",
    }
