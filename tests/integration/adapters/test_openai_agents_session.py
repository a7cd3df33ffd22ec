"""JournaldSession against a real daemon: the SDK's session behaviours, exact round trips,
the conversation mirror, and the Runner (run, run_sync, run_streamed) with the SDK's own
scripted model (agents.testing: no network)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import journald_client as jc
import pytest
from agents import Agent, Runner, TResponseInputItem, function_tool, set_tracing_disabled
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call
from journald_client.openai_agents import JournaldSession

from tests.daemon import Daemon

set_tracing_disabled(True)  # the SDK would otherwise export traces over the network

ITEMS: list[TResponseInputItem] = [
    {"role": "user", "content": "héllo ✓"},
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "lookup",
        "arguments": '{"q": "x"}',
        "id": "fc_1",
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "c1", "output": "42"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [
            {
                "type": "output_text",
                "text": "it is 42",
                "annotations": [],
                "logprobs": [
                    {"token": "42", "logprob": -0.125, "bytes": [52, 50], "top_logprobs": []}
                ],
            }
        ],
    },
]


def session(daemon: Daemon, sid: str, **kw: Any) -> JournaldSession:
    return JournaldSession(sid, socket=str(daemon.socket), **kw)


def contents(items: list[TResponseInputItem]) -> list[Any]:
    """Each item's ``content`` (the SDK types an item as a union without that key)."""
    return [cast(dict[str, Any], i)["content"] for i in items]


def test_items_round_trip_exactly_through_a_fresh_session(daemon: Daemon) -> None:
    # above the inline size: an attachment
    big: TResponseInputItem = {"role": "user", "content": "z" * 20_000}
    s = session(daemon, "exact")
    assert isinstance(s, Session)

    async def scenario() -> None:
        await s.add_items([*ITEMS, big])
        assert await s.get_items() == [*ITEMS, big]
        await s.close()
        again = session(daemon, "exact")  # reads through Fold, not the writer's memory
        assert await again.get_items() == [*ITEMS, big]
        await again.close()

    asyncio.run(scenario())


def test_limits_pop_order_empty_pop_and_isolation_behave_as_the_sdk_says(daemon: Daemon) -> None:
    a, b = session(daemon, "sess-a"), session(daemon, "sess-b")

    async def scenario() -> None:
        assert await a.pop_item() is None  # empty pop
        await a.add_items([{"role": "user", "content": f"m{i}"} for i in range(5)])
        await b.add_items([{"role": "user", "content": "only b"}])
        assert await a.get_items(limit=0) == []
        assert contents(await a.get_items(limit=2)) == ["m3", "m4"]
        assert len(await a.get_items(limit=50)) == 5
        assert contents(await b.get_items()) == ["only b"]
        assert [contents([p]) for _ in range(2) if (p := await a.pop_item())] == [["m4"], ["m3"]]
        assert contents(await a.get_items()) == ["m0", "m1", "m2"]
        limited = session(daemon, "sess-a", session_settings=SessionSettings(limit=1))
        assert contents(await limited.get_items()) == ["m2"]
        await a.clear_session()
        assert await a.get_items() == []
        assert await a.pop_item() is None
        assert contents(await b.get_items()) == ["only b"]
        for s in (a, b, limited):
            await s.close()

    asyncio.run(scenario())


def test_the_conversation_mirrors_the_items_and_a_pop_rewrites_it(daemon: Daemon) -> None:
    s = session(daemon, "mirrored")

    async def scenario() -> None:
        await s.add_items(ITEMS)
        await s.close()

    asyncio.run(scenario())
    with jc.connect(str(daemon.socket)) as client:
        st = client.fold(s.run_id)
        assert [m["role"] for m in st.messages] == ["user", "assistant", "user", "assistant"]
        assert st.messages[1]["content"][0]["id"] == "c1"
        assert st.messages[2]["content"][0]["tool_use_id"] == "c1"
        assert client.governed_messages(s.run_id).synthesized_results == 0

    s = session(daemon, "mirrored")
    assert asyncio.run(s.pop_item()) == ITEMS[-1]
    asyncio.run(s.close())
    with jc.connect(str(daemon.socket)) as client:
        st = client.fold(s.run_id)
        assert [m["role"] for m in st.messages] == ["user", "assistant", "user"]
        rebase = [r for r in client.load(s.run_id) if r.kind == "rebase"][-1]
        assert rebase.payload["reason"] == "edit"


@function_tool
def lookup(q: str) -> str:
    """Look a thing up."""
    return f"found {q}"


def _model() -> ScriptedModel:
    return ScriptedModel(
        [
            [function_call("lookup", {"q": "x"}, call_id="call_1")],
            [assistant_message("it is found")],
            [assistant_message("second answer")],
        ]
    )


@pytest.mark.parametrize("how", ["run", "run_sync", "run_streamed"])
def test_the_runner_keeps_its_history_in_the_session(daemon: Daemon, how: str) -> None:
    model = _model()
    agent = Agent(name="a", model=model, tools=[lookup])
    s = session(daemon, f"runner-{how}")

    async def streamed(text: str) -> str:
        res = Runner.run_streamed(agent, text, session=s)
        async for _ in res.stream_events():
            pass
        return str(res.final_output)

    def turn(text: str) -> str:
        if how == "run_sync":
            return str(Runner.run_sync(agent, text, session=s).final_output)
        if how == "run":
            return str(asyncio.run(Runner.run(agent, text, session=s)).final_output)
        return asyncio.run(streamed(text))

    assert turn("find x") == "it is found"
    assert turn("and again") == "second answer"
    items = asyncio.run(s.get_items())
    kinds = [i.get("type", i.get("role")) for i in items]
    assert kinds == ["user", "function_call", "function_call_output", "message", "user", "message"]
    last_input = model.last_call.input if model.last_call else None
    assert isinstance(last_input, list)
    assert [i.get("type", i.get("role")) for i in last_input] == kinds[:5]
    asyncio.run(s.close())
