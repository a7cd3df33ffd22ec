"""Differential test (issue 26): one graph driven through InMemorySaver, SqliteSaver (file db)
and JournaldSaver by the same operations, with the normalised ``get_state`` and
``get_state_history`` of every saver compared after each one.

The graph has what real agents use: a ``messages`` channel, a ToolNode answering two parallel
calls (whose ids, ``call_1``/``call_2``, repeat every turn as a scripted model's do), an
``interrupt()`` resumed by ``Command(resume=...)``, ``Send`` fan-out and a subgraph. The
operations: invoke, resume, ``update_state``, time travel (invoke or update from any earlier
checkpoint), ``copy_thread`` (LangGraph's own savers have none: the reference copies by
replaying every checkpoint and write), ``delete_thread``, and a crash (a node raises mid-step
after its siblings' writes are saved) followed by fresh saver objects over the same storage.

Sizes: ``DIFF_SIZES`` by Hypothesis profile; ``JOURNALD_DIFF_EXAMPLES``/``JOURNALD_DIFF_STEPS``
override them for a long local run.
"""

from __future__ import annotations

import operator
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from journald_client.langgraph import JournaldSaver
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, Interrupt, Send, interrupt

from tests.daemon import Daemon
from tests.profiles import PROFILE, MachineRun, run_machine
from tests.waiting import wait_until

DIFF_SIZES = {"ci": MachineRun(5, 10), "dev": MachineRun(3, 8)}


def diff_size() -> MachineRun:
    base = DIFF_SIZES.get(PROFILE, DIFF_SIZES["ci"])
    return MachineRun(
        int(os.environ.get("JOURNALD_DIFF_EXAMPLES", base.examples)),
        int(os.environ.get("JOURNALD_DIFF_STEPS", base.steps)),
    )


class Crash(RuntimeError):
    """A node dying mid-step (its siblings' writes are already saved)."""


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    notes: Annotated[list[str], operator.add]


class Item(TypedDict):
    item: int


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text.upper()


def build(crash: Callable[[], bool]) -> StateGraph[Any]:
    """The graph; ``crash()`` True makes worker 0 die once its siblings' writes are saved."""

    def siblings_saved(config: RunnableConfig, state: Item) -> None:
        # Which siblings finish before a crash is a race in any saver; the crash waits for
        # all of them so that every saver sees the same step (the sub graph and worker 1).
        saver = config["configurable"]["__pregel_checkpointer"]
        latest: Any = {"configurable": {"thread_id": config["configurable"]["thread_id"]}}

        def saved() -> bool:
            t = saver.get_tuple(latest)
            return t is not None and sum(1 for w in t.pending_writes if w[1] == "notes") >= 2

        wait_until(saved, what="the siblings' writes", timeout_s=90)

    def agent(state: State) -> State:
        msgs = state["messages"]
        n = len(msgs)
        last = msgs[-1]
        if isinstance(last, HumanMessage) and "tools" in str(last.content):
            calls = [
                {"id": "call_1", "name": "add", "args": {"a": n, "b": 1}, "type": "tool_call"},
                {"id": "call_2", "name": "echo", "args": {"text": "x"}, "type": "tool_call"},
            ]
            return {"messages": [AIMessage("", tool_calls=calls, id=f"ai-{n}")]}
        return {"messages": [AIMessage(f"reply {n}", id=f"ai-{n}")]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else "review"

    def review(state: State) -> State:
        humans = [m for m in state["messages"] if isinstance(m, HumanMessage)]
        if humans and "review" in str(humans[-1].content):
            return {"notes": [f"review:{interrupt('approve?')}"]}
        return {}

    def fan(state: State) -> list[Any]:
        k = 2 if crash() else 1 + len(state.get("notes", [])) % 2
        return [Send("worker", {"item": i}) for i in range(k)] + ["sub"]

    def worker(state: Item, config: RunnableConfig) -> Any:  # called with the Send's Item
        if state["item"] == 0 and crash():
            siblings_saved(config, state)
            raise Crash("the worker died")
        return {"notes": [f"w{state['item']}"]}

    inner = StateGraph(State)
    inner.add_node("inner", lambda s: {"notes": ["sub"]})
    inner.add_edge(START, "inner")
    inner.add_edge("inner", END)

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([add, echo]))
    g.add_node("review", review)
    g.add_node("worker", worker, input_schema=Item)
    g.add_node("sub", inner.compile())
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", "review"])
    g.add_edge("tools", "agent")
    g.add_conditional_edges("review", fan, ["worker", "sub"])
    g.add_edge("worker", END)
    g.add_edge("sub", END)
    return g


# --- normalising what a saver shows ---------------------------------------------------------


def norm_message(m: BaseMessage) -> tuple[Any, ...]:
    calls = tuple((c["id"], c["name"], repr(c["args"])) for c in getattr(m, "tool_calls", []))
    return (type(m).__name__, repr(m.content), calls, getattr(m, "tool_call_id", None))


def norm_value(v: Any) -> Any:
    """Values without what differs by construction between savers (message and interrupt
    ids that LangGraph derives from checkpoint ids, which are fresh uuids per saver)."""
    if isinstance(v, BaseMessage):
        return norm_message(v)
    if isinstance(v, Interrupt):
        return ("Interrupt", norm_value(v.value))
    if isinstance(v, dict):
        return {k: norm_value(x) for k, x in sorted(v.items())}
    if isinstance(v, list | tuple):
        return [norm_value(x) for x in v]
    return repr(v)


def norm_history(graph: Any, cfg: Any) -> list[Any]:
    snaps = list(graph.get_state_history(cfg))
    position = {s.config["configurable"]["checkpoint_id"]: n for n, s in enumerate(snaps)}
    out = []
    for s in snaps:
        parent = (s.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        out.append(
            (
                norm_value(s.values),
                s.next,
                s.metadata.get("source"),
                s.metadata.get("step"),
                [
                    (t.name, [i.value for i in t.interrupts], type(t.error).__name__)
                    for t in s.tasks
                ],
                position.get(parent, "root" if parent is None else "missing"),
            )
        )
    return out


def norm_state(graph: Any, cfg: Any) -> Any:
    s = graph.get_state(cfg)
    return (norm_value(s.values), s.next, [i.value for i in s.interrupts])


def copy_by_replay(saver: BaseCheckpointSaver[Any], source: str, target: str) -> None:
    """What ``copy_thread`` means, for savers without one: every checkpoint of every
    namespace, oldest first, with its metadata, parent and pending writes."""
    tuples = list(saver.list({"configurable": {"thread_id": source}}))
    for t in sorted(tuples, key=lambda t: t.checkpoint["id"]):
        conf = dict(t.config["configurable"])
        conf["thread_id"] = target
        parent = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        put_cfg: Any = {"configurable": {**conf, "checkpoint_id": parent}}
        versions = dict(t.checkpoint["channel_versions"])
        saved = saver.put(put_cfg, t.checkpoint, t.metadata, versions)
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in t.pending_writes or []:
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            saver.put_writes(saved, writes, task_id)


# --- the machine ------------------------------------------------------------------------------

SAYINGS = ["hi", "tools please", "review this", "tools then review"]


class Drivers:
    """The three savers, the graph over each, and how to make fresh savers after a crash."""

    def __init__(self, daemon: Daemon, workdir: Path) -> None:
        self.daemon = daemon
        self.db = workdir / "lg.sqlite"
        self.memory = InMemorySaver()
        self.crashing = False
        self.sqlite: SqliteSaver | None = None
        self.journald: JournaldSaver | None = None
        self.fresh()

    def fresh(self) -> None:
        if self.sqlite is not None:
            self.sqlite.conn.close()
        if self.journald is not None:
            self.journald.close()
        self.sqlite = SqliteSaver(sqlite3.connect(self.db, check_same_thread=False))
        self.journald = JournaldSaver(socket=str(self.daemon.socket), name="differential")
        builder = build(lambda: self.crashing)
        self.graphs = {
            name: builder.compile(checkpointer=saver)
            for name, saver in (
                ("memory", self.memory),
                ("sqlite", self.sqlite),
                ("journald", self.journald),
            )
        }

    def close(self) -> None:
        if self.sqlite is not None:
            self.sqlite.conn.close()
        if self.journald is not None:
            self.journald.close()


def run_differential(daemon: Daemon, workdir: Path, test_id: str) -> None:
    counter = iter(range(10**9))

    class LangGraphDifferential(RuleBasedStateMachine):
        @initialize()
        def start(self) -> None:
            self.drivers = Drivers(daemon, workdir)
            self.thread = f"t{next(counter)}"

        def teardown(self) -> None:
            self.drivers.close()

        def cfg(self) -> Any:
            return {"configurable": {"thread_id": self.thread}}

        def each(self, op: Callable[[str, Any], Any]) -> None:
            outcomes = {}
            for name, graph in self.drivers.graphs.items():
                try:
                    outcomes[name] = ("ok", norm_value(op(name, graph)))
                except Exception as exc:  # the same failure everywhere is agreement
                    outcomes[name] = ("error", type(exc).__name__)
            assert outcomes["journald"] == outcomes["memory"] == outcomes["sqlite"], outcomes

        @rule(saying=st.sampled_from(SAYINGS))
        def say(self, saying: str) -> None:
            msg = {"messages": [HumanMessage(saying, id=f"h{next(counter)}")]}
            self.each(lambda _, g: g.invoke(msg, self.cfg()))

        @rule(answer=st.sampled_from(["yes", "no"]))
        def resume(self, answer: str) -> None:
            self.each(lambda _, g: g.invoke(Command(resume=answer), self.cfg()))

        @rule(note=st.sampled_from(["n1", "n2"]))
        def update(self, note: str) -> None:
            self.each(lambda _, g: g.update_state(self.cfg(), {"notes": [note]}) and None)

        @rule(back=st.integers(0, 30), how=st.sampled_from(["invoke", "update"]))
        def travel(self, back: int, how: str) -> None:
            def go(_: str, g: Any) -> Any:
                history = list(g.get_state_history(self.cfg()))
                if not history:
                    return None
                cfg = history[back % len(history)].config
                if how == "update":
                    g.update_state(cfg, {"notes": ["fork"]})
                    return None
                return g.invoke(None, cfg)

            self.each(go)

        @rule()
        def copy(self) -> None:
            target = f"t{next(counter)}"

            def go(name: str, g: Any) -> None:
                if name == "journald":
                    g.checkpointer.copy_thread(self.thread, target)
                else:
                    copy_by_replay(g.checkpointer, self.thread, target)

            self.each(go)
            self.thread = target

        @rule()
        def delete(self) -> None:
            self.each(lambda _, g: g.checkpointer.delete_thread(self.thread))

        @rule()
        def crash_then_fresh_savers(self) -> None:
            self.drivers.crashing = True
            try:
                msg = {"messages": [HumanMessage("hi", id=f"h{next(counter)}")]}
                self.each(lambda _, g: g.invoke(msg, self.cfg()))
            finally:
                self.drivers.crashing = False
            self.drivers.fresh()  # new saver objects over the same storage

        @rule()
        def continue_thread(self) -> None:
            self.each(lambda _, g: g.invoke(None, self.cfg()))

        @invariant()
        def same_state_and_history(self) -> None:
            if not hasattr(self, "drivers"):
                return
            graphs = self.drivers.graphs
            states = {n: norm_state(g, self.cfg()) for n, g in graphs.items()}
            assert states["journald"] == states["memory"] == states["sqlite"], states
            histories = {n: norm_history(g, self.cfg()) for n, g in graphs.items()}
            assert histories["journald"] == histories["memory"], "journald vs InMemorySaver"
            assert histories["sqlite"] == histories["memory"], "SqliteSaver vs InMemorySaver"

    run_machine(LangGraphDifferential, diff_size(), test_id)


def test_journald_saver_shows_what_inmemory_and_sqlite_savers_show(
    daemon: Daemon, tmp_path: Path
) -> None:
    run_differential(
        daemon,
        tmp_path,
        "tests/integration/adapters/test_langgraph_differential.py::"
        "test_journald_saver_shows_what_inmemory_and_sqlite_savers_show",
    )
