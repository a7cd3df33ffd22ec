"""The Claude Agent SDK session stores side by side, in one run: ``JournaldSessionStore`` (file
backend, fdatasync per append) beside the SDK's ``InMemorySessionStore`` (the SDK ships no
file store) and, as the cost of local durability, a JSON-lines file with an fsync per append
(what the CLI itself writes under ``CLAUDE_CONFIG_DIR``; not a ``SessionStore`` of the SDK).

* ``append``: one session, ``--turns`` sequential appends of one turn's batch (a user prompt,
  an assistant text and tool call, the tool result, two markers: ~4.5 KB in 6 entries, as the
  SDK flushes once per turn), calls/s, entries/s and latency;
* ``load``: the whole session read back, ``--loads`` times (what a resume on another host
  does first), latency and entries/s; for journald both a short session (the first turns,
  inline in the run's fold) and the long one (most batches past the inline budget, read from
  run attachments);
* ``list_sessions`` and ``list_session_summaries`` of a project of ``--sessions`` sessions
  (the JSON-lines reference has no listing).

    .venv/bin/python bench/bench_claude_agent.py [--turns 300] [--loads 20] [--quick]
        [--jetstream] [--json out.json]

``--jetstream`` adds ``JournaldSessionStore`` on a daemon of a JetStream stream (a local
nats-server with ``sync_interval: always``), the store hosts share.

``--quick`` (60 turns, 5 loads, 50 sessions) finishes in well under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from common import pct  # noqa: E402

KEY: dict[str, str] = {"project_key": "-home-dev-app", "session_id": "bench-session"}
SHORT: dict[str, str] = {"project_key": "-home-dev-app", "session_id": "bench-short"}
SHORT_TURNS = 20


def turn(n: int) -> list[dict[str, Any]]:
    """One turn's entries, shaped like Claude Code's transcript lines."""
    parent = f"t{n - 1}-4" if n else None
    base = {"sessionId": KEY["session_id"], "cwd": "/home/dev/app", "version": "2.1.332"}
    result = "line of a file that the Read tool returned\n" * 60

    def line(kind: str, n_uuid: int, **fields: Any) -> dict[str, Any]:
        parent_uuid = parent if n_uuid == 0 else f"t{n}-{n_uuid - 1}"
        return {**base, "type": kind, "uuid": f"t{n}-{n_uuid}", "parentUuid": parent_uuid, **fields}

    prompt = f"step {n}: look at the next file"
    call = {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"file_path": "x"}}
    answer = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": result}
    usage = {"input_tokens": 1200 + n, "output_tokens": 40}
    text = [{"type": "text", "text": "Reading it."}]
    return [
        line(
            "user",
            0,
            timestamp="2026-12-01T00:00:00.000Z",
            message={"role": "user", "content": prompt},
        ),
        line("assistant", 1, message={"role": "assistant", "content": text, "usage": usage}),
        line("assistant", 2, message={"role": "assistant", "content": [call]}),
        line("user", 3, message={"role": "user", "content": [answer]}),
        {"type": "last-prompt", "lastPrompt": prompt, "sessionId": KEY["session_id"]},
        line("attachment", 4, attachment={"kind": "todo"}),
    ]


class JsonlFileStore:
    """The reference for local durability: one JSON-lines file per transcript, appended and
    fsynced per batch, read back whole (no index, no listing)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: dict[str, str]) -> Path:
        return self.root / key["project_key"] / f"{key['session_id']}.jsonl"

    async def append(self, key: dict[str, str], entries: list[dict[str, Any]]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries).encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    async def load(self, key: dict[str, str]) -> list[dict[str, Any]] | None:
        path = self._path(key)
        if not path.exists():
            return None
        return [json.loads(line) for line in path.read_bytes().splitlines() if line]


async def timed(fn: Callable[[], Awaitable[Any]], n: int, per_call: int) -> dict[str, float]:
    lat = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        lat.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    return {
        "per_s": n / wall,
        "entries_per_s": n * per_call / wall,
        "p50_ms": pct(lat, 50) * 1e3,
        "p99_ms": pct(lat, 99) * 1e3,
    }


async def listing(store: Any, sessions: int, loads: int) -> dict[str, dict[str, float]]:
    """``list_sessions`` and ``list_session_summaries`` of a project of ``sessions`` sessions
    of one turn each (what the SDK's session listing asks of a store)."""
    if not hasattr(store, "list_session_summaries"):
        return {}
    for n in range(sessions):
        key = {"project_key": "-bench-many", "session_id": f"s{n}"}
        await store.append(key, turn(0))
        if hasattr(store, "release"):  # a lister holds none of them (the daemon's List costs
            await store.release(key)  # several times more per run while its lease is held)
    out = {}
    for op in ("list_sessions", "list_session_summaries"):
        method: Callable[[str], Awaitable[list[Any]]] = getattr(store, op)
        got = await method("-bench-many")
        assert len(got) == sessions, (op, len(got))

        def call(method: Callable[[str], Awaitable[list[Any]]] = method) -> Awaitable[Any]:
            return method("-bench-many")

        out[f"{op} ({sessions} sessions)"] = await timed(call, loads, sessions)
    return out


async def one_store(store: Any, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    turns, loads = args.turns, args.loads
    counter = iter(range(turns))
    out = {"append": await timed(lambda: store.append(KEY, turn(next(counter))), turns, 6)}
    got = await store.load(KEY)
    assert got is not None
    assert len(got) == 6 * turns, "the store lost entries"
    out[f"load ({turns} turns)"] = await timed(lambda: store.load(KEY), loads, 6 * turns)
    for n in range(SHORT_TURNS):
        await store.append(SHORT, turn(n))
    out[f"load ({SHORT_TURNS} turns)"] = await timed(
        lambda: store.load(SHORT), loads, 6 * SHORT_TURNS
    )
    return {**out, **await listing(store, args.sessions, loads)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--loads", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="60 turns, 5 loads, 50 sessions")
    ap.add_argument("--jetstream", action="store_true", help="also journald on JetStream")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.quick:
        args.turns, args.loads, args.sessions = 60, 5, 50
    from claude_agent_sdk import InMemorySessionStore
    from journald_client.claude_agent import JournaldSessionStore

    from tests.daemon import Daemon

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-claude-agent-") as d, ExitStack() as stack:
        tmp = Path(d)
        daemons = {"JournaldSessionStore": Daemon(tmp / "file", "file")}
        if args.jetstream:
            from tests.nats_server import NatsServer, create_stream

            nats = NatsServer(tmp / "nats")
            nats.start()
            stack.callback(nats.stop)
            asyncio.run(create_stream(nats.url, "BENCH", "bench"))
            jetstream = ("--nats-url", nats.url, "--stream", "BENCH")
            daemons["JournaldSessionStore (JetStream)"] = Daemon(
                tmp / "js", "jetstream", *jetstream
            )
        for daemon in daemons.values():
            daemon.tmp_path.mkdir()
            stack.enter_context(daemon)

        async def all_stores() -> None:
            for name, daemon in daemons.items():
                async with JournaldSessionStore(socket=str(daemon.socket)) as journald:
                    results[name] = await one_store(journald, args)
            results["InMemorySessionStore"] = await one_store(InMemorySessionStore(), args)
            results["JSONL file + fsync"] = await one_store(JsonlFileStore(tmp / "jsonl"), args)

        asyncio.run(all_stores())
    print(f"| store | operation | calls/s | entries/s | p50 ms | p99 ms |  (turns={args.turns})")
    print("|---|---|---:|---:|---:|---:|")
    for system, ops in results.items():
        for op, r in ops.items():
            print(
                f"| {system} | {op} | {r['per_s']:,.0f} | {r['entries_per_s']:,.0f} "
                f"| {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |"
            )
    jd = results["JournaldSessionStore"]
    for other in ("InMemorySessionStore", "JSONL file + fsync"):
        for op in [op for op in jd if op in results[other]]:
            ratio = jd[op]["p50_ms"] / results[other][op]["p50_ms"]
            print(f"journald / {other} p50, {op}: {ratio:.1f}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
