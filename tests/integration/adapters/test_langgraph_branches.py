"""JournaldSaver under time travel and LangGraph's own handling of what it loads (issue 26,
items 1, 2 and the async patterns of item 8): branches forked from one checkpoint keep their
own values, a loaded checkpoint is the caller's to change, and both async entry styles work."""

from __future__ import annotations

import asyncio
import itertools
import operator
from typing import Annotated, Any, TypedDict

import journald_client as jc
import pytest
from journald_client.langgraph import AsyncJournaldSaver, JournaldSaver
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

from tests.daemon import Daemon


class Counted(TypedDict):
    log: Annotated[list[str], operator.add]


def counting_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    tick = itertools.count()
    g = StateGraph(Counted)
    g.add_node("a", lambda s: {"log": [f"a{next(tick)}"]})
    g.add_node("b", lambda s: {"log": [f"b{next(tick)}"]})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    return g.compile(checkpointer=saver)


def _branch(saver: BaseCheckpointSaver[Any]) -> tuple[Any, Any, dict[str, Any]]:
    """Invoke, then time travel to the checkpoint after ``a``: (graph, old head, config)."""
    graph = counting_graph(saver)
    cfg: Any = {"configurable": {"thread_id": "tt"}}
    graph.invoke({"log": ["hi"]}, cfg)
    head = graph.get_state(cfg)
    after_a = next(s for s in graph.get_state_history(cfg) if s.metadata["step"] == 1)
    graph.invoke(None, after_a.config)
    return graph, head, cfg


def test_time_travel_leaves_the_other_branch_values_as_they_were(daemon: Daemon) -> None:
    with JournaldSaver(socket=str(daemon.socket)) as saver:
        graph, head, cfg = _branch(saver)
        assert head.values["log"] == ["hi", "a0", "b1"]
        assert graph.get_state(head.config).values["log"] == ["hi", "a0", "b1"]
        assert graph.get_state(cfg).values["log"] == ["hi", "a0", "b2"]
    with JournaldSaver(socket=str(daemon.socket)) as fresh:  # read back from the journal
        again = counting_graph(fresh)
        assert again.get_state(head.config).values["log"] == ["hi", "a0", "b1"]
        assert again.get_state(cfg).values["log"] == ["hi", "a0", "b2"]
    memory, mem_head, _ = _branch(InMemorySaver())  # what LangGraph's own saver does
    assert memory.get_state(mem_head.config).values["log"] == ["hi", "a0", "b1"]


def test_a_loaded_checkpoint_is_a_copy_the_caller_may_change(daemon: Daemon) -> None:
    with JournaldSaver(socket=str(daemon.socket)) as saver:
        graph = counting_graph(saver)
        cfg: Any = {"configurable": {"thread_id": "copies"}}
        graph.invoke({"log": ["hi"]}, cfg)
        first = saver.get_tuple(cfg)
        assert first is not None
        first.checkpoint["channel_versions"]["log"] = "mutated"
        first.checkpoint["versions_seen"].setdefault("a", {})["log"] = "mutated"
        first.metadata["step"] = 99
        again = saver.get_tuple(cfg)
        assert again is not None
        assert again.checkpoint["channel_versions"]["log"] != "mutated"
        assert again.checkpoint["versions_seen"].get("a", {}).get("log") != "mutated"
        assert again.metadata["step"] != 99


@pytest.mark.parametrize("style", ["constructor", "connect", "await-connect", "sync-saver"])
def test_the_async_saver_works_entered_or_awaited(daemon: Daemon, style: str) -> None:
    sock = str(daemon.socket)

    async def drive(saver: BaseCheckpointSaver[Any]) -> list[str]:
        graph = counting_graph(saver)
        cfg: Any = {"configurable": {"thread_id": f"async-{style}"}}
        out = await graph.ainvoke({"log": ["hi"]}, cfg)
        with jc.connect(sock) as client:  # the run ended, so did its lease (saver still open)
            (info,) = [i for i in client.list() if i.run_id == f"async-{style}"]
            assert info.status != "held"
        return list(out["log"])

    async def main() -> list[str]:
        if style == "constructor":
            async with AsyncJournaldSaver(socket=sock) as saver:
                return await drive(saver)
        if style == "sync-saver":  # the sync saver under an async graph
            with JournaldSaver(socket=sock) as sync:
                return await drive(sync)
        if style == "connect":
            async with AsyncJournaldSaver.connect(sock) as saver:
                return await drive(saver)
        saver = await AsyncJournaldSaver.connect(sock)
        try:
            return await drive(saver)
        finally:
            await saver.aclose()

    assert asyncio.run(main()) == ["hi", "a0", "b1"]
