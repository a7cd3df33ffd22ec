"""A LangGraph program whose tool has a side effect, for the lease tests (issue 26).

The graph: ``ask`` (an AIMessage calling a tool), ``tool`` (appends ``<pid>`` to
``<dir>/side.effects``, prints ``TOOL-STARTED``, waits for ``<dir>/go``), ``answer``.

    --mode drive     invoke from a question, then print DONE
    --mode intrude   invoke(None): continue the thread (expects ``locked`` before the tool),
                     then read the thread with get_state and print STATE <next nodes>
    --mode request   two invocations, each with its own saver (the per-request pattern)

Prints ``LOCKED <holder_pid> <message>`` when refused.
"""

from __future__ import annotations

import argparse
import json
import os
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


def build(workdir: Path, wait: bool) -> Any:
    def ask(state: State) -> State:
        call = {"id": "call_1", "name": "charge", "args": {"amount": 5}}
        n = len(state["messages"])
        return {"messages": [AIMessage(content="charging", tool_calls=[call], id=f"ai-{n}")]}

    def tool(state: State) -> State:
        with open(workdir / "side.effects", "a") as fh:
            fh.write(f"{os.getpid()}\n")
        say("TOOL-STARTED")
        if wait:
            wait_until((workdir / "go").exists, what="the test's go file", timeout_s=WAIT_S)
        n = len(state["messages"])
        return {"messages": [ToolMessage("charged", tool_call_id="call_1", id=f"tool-{n}")]}

    def answer(state: State) -> State:
        return {"messages": [AIMessage(content="done", id=f"ai-{len(state['messages'])}")]}

    g = StateGraph(State)
    for name, fn in (("ask", ask), ("tool", tool), ("answer", answer)):
        g.add_node(name, fn)
    g.add_edge(START, "ask")
    g.add_edge("ask", "tool")
    g.add_edge("tool", "answer")
    g.add_edge("answer", END)
    return g


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--thread", required=True)
    ap.add_argument("--mode", choices=["drive", "intrude", "request"], required=True)
    ap.add_argument("--dir", type=Path, required=True)
    args = ap.parse_args()
    config: Any = {"configurable": {"thread_id": args.thread}}
    builder = build(args.dir, wait=args.mode == "drive")
    if args.mode == "request":
        for n in range(2):  # a fresh saver per request, never closed by hand
            saver = JournaldSaver(socket=args.socket, name=f"request-{n}")
            graph = builder.compile(checkpointer=saver)
            graph.invoke({"messages": [HumanMessage(f"q{n}", id=f"h-{n}")]}, config)
        say("DONE")
        return
    with JournaldSaver(socket=args.socket, name=f"worker-{args.mode}") as saver:
        graph = builder.compile(checkpointer=saver)
        if args.mode == "drive":
            final = graph.invoke({"messages": [HumanMessage("pay", id="h-1")]}, config)
            say("DONE", json.dumps([m.content for m in final["messages"]]))
            return
        try:
            graph.invoke(None, config)
            say("NOT-REFUSED")
        except jc.Locked as err:
            say("LOCKED", err.holder_pid, json.dumps(str(err)))
        say("STATE", json.dumps(list(graph.get_state(config).next)))


if __name__ == "__main__":
    main()
