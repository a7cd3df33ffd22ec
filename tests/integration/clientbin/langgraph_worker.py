"""A LangGraph program on JournaldSaver, for the two-process and kill -9 tests.

The graph: ``ask`` (an AIMessage calling a tool), then in one superstep ``fast`` (returns at
once; counts its runs in ``<dir>/fast.runs``) and ``slow`` (prints ``SLOW-STARTED`` and waits
for ``<dir>/go`` before answering the tool call), then ``answer``.

    --mode drive    invoke the graph on the thread from a first question
    --mode intrude  invoke the graph on the thread with a new question (expects ``locked``)
    --mode resume   invoke with no input: continue the thread from its last checkpoint

Prints ``LOCKED <holder_pid> <holder_name>`` when refused, ``DONE <json>`` at the end.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Annotated, Any, TypedDict

import journald_client as jc
from journald_client.langgraph import JournaldSaver
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from tests.integration.clientbin.common import say
from tests.waiting import wait_until

WAIT_S = 120.0


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    fast: str
    slow: str


def build(workdir: Path) -> Any:
    def ask(state: State) -> State:
        call = {"id": "call_1", "name": "lookup", "args": {"q": "answer"}}
        return {"messages": [AIMessage(content="let me look", tool_calls=[call], id="ai-1")]}

    def fast(state: State) -> State:
        with open(workdir / "fast.runs", "a") as fh:
            fh.write("ran\n")
        return {"fast": "F"}

    def slow(state: State) -> State:
        say("SLOW-STARTED")
        wait_until((workdir / "go").exists, what="the test's go file", timeout_s=WAIT_S)
        return {"messages": [ToolMessage("42", tool_call_id="call_1", id="tool-1")], "slow": "S"}

    def answer(state: State) -> State:
        return {"messages": [AIMessage(content="the answer is 42", id="ai-2")]}

    g = StateGraph(State)
    for name, fn in (("ask", ask), ("fast", fast), ("slow", slow), ("answer", answer)):
        g.add_node(name, fn)
    g.add_edge(START, "ask")
    g.add_edge("ask", "fast")
    g.add_edge("ask", "slow")
    g.add_edge(["fast", "slow"], "answer")
    g.add_edge("answer", END)
    return g


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--thread", required=True)
    ap.add_argument("--mode", choices=["drive", "intrude", "resume"], required=True)
    ap.add_argument("--dir", type=Path, required=True)
    args = ap.parse_args()
    config = {"configurable": {"thread_id": args.thread}}
    with JournaldSaver(socket=args.socket, name=f"worker-{args.mode}") as saver:
        graph = build(args.dir).compile(checkpointer=saver)
        question = {"drive": "what is it?", "intrude": "me too"}.get(args.mode)
        inputs = {"messages": [HumanMessage(question, id=f"h-{args.mode}")]} if question else None
        try:
            final = graph.invoke(inputs, config, durability="sync")
        except jc.Locked as err:
            say("LOCKED", err.holder_pid, err.holder_name)
            return
        messages = [[type(m).__name__, m.content] for m in final["messages"]]
        say(
            "DONE", json.dumps({"fast": final["fast"], "slow": final["slow"], "messages": messages})
        )


if __name__ == "__main__":
    main()
