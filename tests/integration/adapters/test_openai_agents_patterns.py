"""JournaldSession beside SQLiteSession as agent authors use it (issue 26, items 4, 6, 7, 8):
ids reused across turns, an approval left waiting, limited reads, one session object per
request, ``close()`` called plainly, a LangGraph thread with the same id, errors in the SDK's
words."""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any, cast

import journald_client as jc
import pytest
from agents import (
    Agent,
    Runner,
    SQLiteSession,
    TResponseInputItem,
    function_tool,
    set_tracing_disabled,
)
from agents.testing import ScriptedModel, assistant_message, function_call
from journald_client.langgraph import JournaldSaver
from journald_client.openai_agents import JournaldSession
from langgraph.checkpoint.base import empty_checkpoint

from tests.daemon import Daemon

set_tracing_disabled(True)


def kinds(items: list[Any]) -> list[str]:
    return [str(i.get("type", i.get("role"))) for i in items]


@function_tool
def lookup(q: str) -> str:
    """Look a thing up."""
    return f"found {q}"


@function_tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def test_a_call_id_reused_by_every_turn_is_answered_each_time(daemon: Daemon) -> None:
    steps: list[Any] = []
    for n in range(3):  # a scripted model (or a provider) says call_1 in every turn
        steps += [[function_call("lookup", {"q": f"q{n}"}, call_id="call_1")]]
        steps += [[assistant_message(f"answer {n}")]]
    agent = Agent(name="a", model=ScriptedModel(steps), tools=[lookup])
    s = JournaldSession("reused-ids", socket=str(daemon.socket))

    async def main() -> list[str]:
        return [
            str((await Runner.run(agent, f"turn {n}", session=s)).final_output) for n in range(3)
        ]

    assert asyncio.run(main()) == ["answer 0", "answer 1", "answer 2"]
    with jc.connect(str(daemon.socket)) as client:
        state = client.fold(s.run_id)
        governed = client.governed_messages(s.run_id)
    assert state.pending is None
    assert state.anomalies == []
    assert state.counters.tool_calls == 3
    assert governed.synthesized_results == 0
    s.close()


def test_a_call_waiting_for_approval_gets_no_invented_outcome(daemon: Daemon) -> None:
    async def drive(session: Any) -> tuple[list[str], list[str]]:
        model = ScriptedModel(
            [
                [function_call("pay", {"amount": 5}, call_id="call_1")],
                [assistant_message("ok then")],
            ]
        )
        agent = Agent(name="a", model=model, tools=[pay])
        first = await Runner.run(agent, "pay 5", session=session)
        assert len(first.interruptions) == 1
        waiting = kinds(await session.get_items())
        # the process that held the approval is gone: a new run on the session
        await Runner.run(agent, "hello?", session=session)
        assert model.last_call is not None
        return waiting, kinds(cast(list[Any], model.last_call.input))

    ours = asyncio.run(drive(JournaldSession("approval", socket=str(daemon.socket))))
    theirs = asyncio.run(drive(SQLiteSession("approval")))
    assert ours == theirs == (["user", "function_call"], ["user", "user"])


def test_a_limited_read_returns_as_many_items_as_sqlite_session(daemon: Daemon) -> None:
    items: list[TResponseInputItem] = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "1"},
        {"type": "function_call_output", "call_id": "b", "output": "2"},
        {"type": "message", "role": "assistant", "content": "done"},
    ]
    ours = JournaldSession("limited", socket=str(daemon.socket))
    theirs = SQLiteSession("limited")

    async def reads(s: Any) -> list[list[Any]]:
        await s.add_items(items)
        return [await s.get_items(limit=n) for n in range(len(items) + 2)]

    got, want = asyncio.run(reads(ours)), asyncio.run(reads(theirs))
    assert len(got[3]) >= 3  # SQLiteSession returns 3; today's journald returned 1
    for n, (mine, sqlite) in enumerate(zip(got, want, strict=True)):
        assert len(mine) >= len(sqlite), n
        assert mine[len(mine) - len(sqlite) :] == sqlite  # the same newest items
        called = {i["call_id"] for i in mine if i.get("type") == "function_call"}
        assert all(i["call_id"] in called for i in mine if i.get("type") == "function_call_output")
    ours.close()


def test_a_session_object_per_request_and_a_plain_close_just_work(daemon: Daemon) -> None:
    sock = str(daemon.socket)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a close() left un-awaited would warn
        for n in range(3):  # a web handler: a new session per request, never closed
            s = JournaldSession("per-request", socket=sock)
            asyncio.run(s.add_items([{"role": "user", "content": f"m{n}"}]))
        s.close()  # as SQLiteSession.close(): a plain call
        asyncio.run(JournaldSession("per-request", socket=sock).close())  # or awaited
    again = JournaldSession("per-request", socket=sock)
    assert [i.get("content") for i in asyncio.run(again.get_items())] == ["m0", "m1", "m2"]
    again.close()


def test_a_langgraph_thread_and_a_session_with_one_id_keep_apart(daemon: Daemon) -> None:
    sock = str(daemon.socket)
    cfg: Any = {"configurable": {"thread_id": "shared-id", "checkpoint_ns": ""}}
    with JournaldSaver(socket=sock) as saver:
        saver.put(cfg, empty_checkpoint(), {"step": 7}, {})
        s = JournaldSession("shared-id", socket=sock)
        asyncio.run(s.add_items([{"role": "user", "content": "hi"}]))
        assert [i.get("content") for i in asyncio.run(s.get_items())] == ["hi"]
        got = saver.get_tuple(cfg)
        assert got is not None
        assert got.metadata["step"] == 7
        s.close()


def test_a_refused_write_says_what_happened_to_the_session(daemon: Daemon) -> None:
    sock = str(daemon.socket)
    holder = JournaldSession("busy", socket=sock, hold_lease=True)
    asyncio.run(holder.add_items([{"role": "user", "content": "mine"}]))
    other = JournaldSession("busy", socket=sock, lock_wait_s=0.0)
    with pytest.raises(jc.Locked) as refused:
        asyncio.run(other.add_items([{"role": "user", "content": "theirs"}]))
    message = str(refused.value)
    assert "Agents session 'busy' is being written by pid" in message
    assert "items were not saved" in message
    assert "tool_result" not in message
    assert "append" not in message
    holder.close()
    asyncio.run(other.add_items([{"role": "user", "content": "theirs"}]))
    assert json.dumps([i.get("content") for i in asyncio.run(other.get_items())]) == (
        '["mine", "theirs"]'
    )
    other.close()
