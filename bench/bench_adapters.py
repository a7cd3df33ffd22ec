"""The framework adapters beside the savers they replace, on one thread / session each:

* LangGraph: ``JournaldSaver`` vs ``SqliteSaver`` — ``put`` (a step that changes one channel
  of two and grows a message list), ``get_tuple`` of the latest checkpoint (by the writer, and
  for journald also by a second saver that does not hold the thread: one Fold), ``list`` of
  the whole thread;
* LangGraph, a whole graph: the same 10-node graph (a ``messages`` channel each node appends
  to, and a counter) invoked on fresh threads through each saver, reported per graph step
  (one node's superstep: its writes and its checkpoint), with the ratio journald/SQLite;
* OpenAI Agents: ``JournaldSession`` (the default lease, given back when idle, and
  ``hold_lease=True``)
  vs ``SQLiteSession`` — ``add_items`` (one ~300-byte item per call) and ``get_items`` (all
  items, and the last 10).

    .venv/bin/python bench/bench_adapters.py [--steps 300] [--graph-runs 20] [--json out.json]

Both sides write to files in one temporary directory; the daemon runs the file backend
(fdatasync per append), SQLite its defaults (WAL for the Agents session, rollback journal for
SqliteSaver). Sequential calls from one thread: this is the cost of one step of one agent,
not a throughput under load (bench/run_all.py measures that).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from common import pct  # noqa: E402


def accepted(cls: Any, **options: Any) -> dict[str, Any]:
    """The options ``cls`` takes (an older client held every lease and took none of them), so
    the same script measures a checkout before the lease options existed."""
    params = inspect.signature(cls).parameters
    return {k: v for k, v in options.items() if k in params}


def timed(fn: Callable[[], Any], n: int) -> dict[str, float]:
    lat = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    return {"per_s": n / wall, "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3}


def langgraph_steps(saver: Any, thread: str, steps: int) -> dict[str, dict[str, float]]:
    from langgraph.checkpoint.base import empty_checkpoint

    context = "c" * 2048
    messages: list[str] = []
    parent: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    step = {"n": 0}

    def put() -> None:
        n = step["n"]
        messages.append(f"message {n} " + "m" * 200)
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": list(messages), "context": context}
        cp["channel_versions"] = {"messages": n + 1, "context": 1}
        new = {"messages": n + 1} if n else {"messages": 1, "context": 1}
        stored = saver.put(parent, cp, {"source": "loop", "step": n}, new)
        parent["configurable"] = dict(stored["configurable"])
        step["n"] += 1

    latest = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    out = {"put": timed(put, steps)}
    out["get_tuple"] = timed(lambda: saver.get_tuple(latest), min(steps, 200))
    out["list"] = timed(lambda: list(saver.list(latest)), 20)
    return out


def bench_langgraph(tmp: Path, socket: str, steps: int) -> dict[str, Any]:
    from journald_client.langgraph import JournaldSaver
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.sqlite import SqliteSaver

    out: dict[str, Any] = {}
    # put called directly is a write outside a graph run: hold the lease throughout, as a
    # graph run does (without it every put would also Open and close the lease)
    with JournaldSaver(socket=socket, **accepted(JournaldSaver, hold_leases=True)) as saver:
        out["JournaldSaver"] = langgraph_steps(saver, "bench-thread", steps)
        with JournaldSaver(socket=socket) as reader:  # does not hold the thread: one Fold
            latest: RunnableConfig = {
                "configurable": {"thread_id": "bench-thread", "checkpoint_ns": ""}
            }
            out["JournaldSaver"]["get_tuple (other process)"] = timed(
                lambda: reader.get_tuple(latest), 50
            )
    conn = sqlite3.connect(str(tmp / "langgraph.db"), check_same_thread=False)
    try:
        out["SqliteSaver"] = langgraph_steps(SqliteSaver(conn), "bench-thread", steps)
    finally:
        conn.close()
    return out


GRAPH_NODES = 10


def ten_step_graph(checkpointer: Any) -> Any:
    import operator
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, AnyMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    # the functional form: annotations evaluated here, not as strings at module scope
    State = TypedDict(  # noqa: UP013
        "State",
        {
            "messages": Annotated[list[AnyMessage], add_messages],
            "count": Annotated[int, operator.add],
        },
    )

    g = StateGraph(State)
    names = [f"n{i}" for i in range(GRAPH_NODES)]
    for i, name in enumerate(names):

        def node(state: Any, i: int = i) -> Any:
            n = len(state["messages"])
            return {"messages": [AIMessage(f"step {i} " + "s" * 200, id=f"m{n}")], "count": 1}

        g.add_node(name, node)
    g.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        g.add_edge(a, b)
    g.add_edge(names[-1], END)
    return g.compile(checkpointer=checkpointer)


def graph_steps(checkpointer: Any, runs: int, prefix: str) -> dict[str, float]:
    """Per graph step of ``runs`` invocations of the 10-node graph, each on a new thread."""
    from langchain_core.messages import HumanMessage

    graph = ten_step_graph(checkpointer)
    lat = []
    for r in range(runs):
        cfg = {"configurable": {"thread_id": f"{prefix}-{r}"}}
        t0 = time.perf_counter()
        graph.invoke({"messages": [HumanMessage("go", id="h")], "count": 0}, cfg)
        lat.append((time.perf_counter() - t0) / GRAPH_NODES)
    return {
        "per_s": 1 / (sum(lat) / len(lat)),
        "p50_ms": pct(lat, 50) * 1e3,
        "p99_ms": pct(lat, 99) * 1e3,
    }


def bench_graph(tmp: Path, socket: str, runs: int) -> dict[str, Any]:
    """The same 10-step graph through both savers, interleaved run by run so that the
    machine's load falls on both alike."""
    from journald_client.langgraph import JournaldSaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(tmp / "graph.db"), check_same_thread=False)
    out: dict[str, list[dict[str, float]]] = {"JournaldSaver": [], "SqliteSaver": []}
    try:
        with JournaldSaver(socket=socket) as saver:
            sqlite = SqliteSaver(conn)
            graph_steps(saver, 2, "warm-j")
            graph_steps(sqlite, 2, "warm-s")
            for r in range(runs):
                out["JournaldSaver"].append(graph_steps(saver, 1, f"j{r}"))
                out["SqliteSaver"].append(graph_steps(sqlite, 1, f"s{r}"))
    finally:
        conn.close()
    merged = {}
    for name, rows in out.items():
        lat = [row["p50_ms"] / 1e3 for row in rows]
        merged[name] = {
            "graph step": {
                "per_s": len(lat) / sum(lat),
                "p50_ms": pct(lat, 50) * 1e3,
                "p99_ms": pct(lat, 99) * 1e3,
            }
        }
    return merged


def bench_agents(tmp: Path, socket: str, steps: int) -> dict[str, Any]:
    from agents.memory import SQLiteSession
    from journald_client.openai_agents import JournaldSession

    async def one(session: Any) -> dict[str, dict[str, float]]:
        n = {"i": 0}

        async def add() -> None:
            i = n["i"]
            n["i"] += 1
            await session.add_items([{"role": "user", "content": f"item {i} " + "x" * 300}])

        async def run(fn: Callable[[], Any], count: int) -> dict[str, float]:
            lat = []
            start = time.perf_counter()
            for _ in range(count):
                t0 = time.perf_counter()
                await fn()
                lat.append(time.perf_counter() - t0)
            wall = time.perf_counter() - start
            return {
                "per_s": count / wall,
                "p50_ms": pct(lat, 50) * 1e3,
                "p99_ms": pct(lat, 99) * 1e3,
            }

        return {
            "add_items": await run(add, steps),
            "get_items (all)": await run(lambda: session.get_items(), 50),
            "get_items (last 10)": await run(lambda: session.get_items(limit=10), 50),
        }

    async def both() -> dict[str, Any]:
        res = {}
        for label, hold in (("JournaldSession", False), ("JournaldSession hold_lease", True)):
            opts = accepted(JournaldSession, hold_lease=hold)
            journald = JournaldSession(f"bench-session-{hold}", socket=socket, **opts)
            try:
                res[label] = await one(journald)
            finally:
                await journald.close()
        res["SQLiteSession"] = await one(SQLiteSession("bench-session", str(tmp / "agents.db")))
        return res

    return asyncio.run(both())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--graph-runs", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from agents import set_tracing_disabled

    from tests.daemon import Daemon

    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory(prefix="bench-adapters-") as d:
        tmp = Path(d)
        daemon = Daemon(tmp, "file").start()
        try:
            results = {
                "graph": bench_graph(tmp, str(daemon.socket), args.graph_runs),
                "langgraph": bench_langgraph(tmp, str(daemon.socket), args.steps),
                "agents": bench_agents(tmp, str(daemon.socket), args.steps),
            }
        finally:
            daemon.stop()
    print(f"| adapter | operation | calls/s | p50 ms | p99 ms |  (steps={args.steps})")
    print("|---|---|---:|---:|---:|")
    for group in results.values():
        for system, ops in group.items():
            for op, r in ops.items():
                rate, p50, p99 = r["per_s"], r["p50_ms"], r["p99_ms"]
                print(f"| {system} | {op} | {rate:,.0f} | {p50:.2f} | {p99:.2f} |")
    ratio = {
        "graph step": (
            results["graph"]["JournaldSaver"]["graph step"]["p50_ms"]
            / results["graph"]["SqliteSaver"]["graph step"]["p50_ms"]
        ),
        "add_items": (
            results["agents"]["JournaldSession"]["add_items"]["p50_ms"]
            / results["agents"]["SQLiteSession"]["add_items"]["p50_ms"]
        ),
        "add_items (hold_lease)": (
            results["agents"]["JournaldSession hold_lease"]["add_items"]["p50_ms"]
            / results["agents"]["SQLiteSession"]["add_items"]["p50_ms"]
        ),
    }
    for what, x in ratio.items():
        print(f"journald / SQLite p50, {what}: {x:.2f}x")
    results["ratio_p50"] = ratio
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
