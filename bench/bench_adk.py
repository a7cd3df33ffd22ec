"""Google ADK session services: ``JournaldSessionService`` beside ADK's own
``DatabaseSessionService`` on a SQLite file, in one run:

* ``get_session`` of one long session (``--events``, default 10,000: user text, a model's
  function call, its response, a reply, repeated), whole and with
  ``GetSessionConfig(num_recent_events=20)``, by a service that has not written it (what a
  new process or another web worker does);
* ``list_sessions`` of an app with ``--sessions`` sessions (default 10,000, each with one
  state key);
* ``append_event`` and ``create_session`` as the sessions are made (one durable write each).

    .venv/bin/python bench/bench_adk.py                 # the full size (a few minutes)
    .venv/bin/python bench/bench_adk.py --quick         # 1,000 events, 300 sessions (<60 s)

The long session is written to both in batches (journald: the service's own records, 200
events per append; SQLite: one transaction), so the set-up does not dominate; the timed calls
go through each service's public methods. File backend (fdatasync per append) and SQLite's
defaults, both in one temporary directory; sequential calls from one thread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

APP_LONG, APP_MANY, USER = "bench-long", "bench-many", "u"


def events(n: int) -> list[Any]:
    from google.adk.events.event import Event
    from google.genai import types

    out = []
    t0 = time.time() - n
    for i in range(n):
        kind = i % 4
        cid = f"call-{i // 4}"
        if kind == 0:
            content = types.Content(role="user", parts=[types.Part(text=f"question {i} " * 8)])
            author = "user"
        elif kind == 1:
            call = types.FunctionCall(id=cid, name="lookup", args={"q": i})
            content = types.Content(role="model", parts=[types.Part(function_call=call)])
            author = "helper"
        elif kind == 2:
            resp = types.FunctionResponse(id=cid, name="lookup", response={"r": "x" * 64})
            content = types.Content(role="user", parts=[types.Part(function_response=resp)])
            author = "helper"
        else:
            content = types.Content(role="model", parts=[types.Part(text=f"answer {i} " * 8)])
            author = "helper"
        out.append(
            Event(
                id=f"e{i}",
                invocation_id=f"inv{i // 4}",
                author=author,
                content=content,
                timestamp=t0 + i,
            )
        )
    return out


def load_journald(service: Any, session: Any, evs: list[Any], batch: int = 200) -> None:
    """The events as ``append_event`` stores them, ``batch`` events per durable append."""
    from journald_client.adk import records as rec
    from journald_client.adk.service import _info_entry

    run_id = rec.session_run_id(session.app_name, session.user_id, session.id)
    with service._lock(run_id):
        w = service._writer(run_id, None)
        for start in range(0, len(evs), batch):
            entries = []
            for ev in evs[start : start + batch]:
                doc = ev.model_dump(exclude_none=True, mode="json")
                more, w.next_n = w.mirror.entries(doc, rec.provider_block(w.next_n, doc), w.next_n)
                entries += more
            last = evs[min(start + batch, len(evs)) - 1]
            entries.append(_info_entry(w.next_n, last.timestamp))
            w.run.append_many(entries)
        service._drop_writer(run_id)


async def load_sqlite(service: Any, session: Any, evs: list[Any]) -> None:
    schema = service._get_schema_classes()
    async with service._rollback_on_exception_session() as sql:
        sql.add_all([schema.StorageEvent.from_event(session, e) for e in evs])
        await sql.commit()


async def timed(fn: Callable[[], Awaitable[Any]], n: int) -> dict[str, float]:
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        lat.append(time.perf_counter() - t0)
    return {"p50_ms": statistics.median(lat) * 1e3, "max_ms": max(lat) * 1e3, "calls": n}


async def side(
    socket: str, name: str, make: Callable[..., Any], n_events: int, n_sessions: int, repeats: int
) -> dict[str, dict[str, float]]:
    """One service's figures: the long session is read before the many sessions are made, so
    those reads do not share the machine with the daemon ending 10,000 leases."""
    from google.adk.sessions.base_session_service import GetSessionConfig

    writer = make()
    out: dict[str, dict[str, float]] = {}
    long = await writer.create_session(app_name=APP_LONG, user_id=USER, session_id="long")
    evs = events(n_events)
    t0 = time.perf_counter()
    if name == "journald":
        await asyncio.to_thread(load_journald, writer, long, evs)
    else:
        await load_sqlite(writer, long, evs)
    print(f"  {name}: {n_events} events loaded in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    probe = await writer.create_session(app_name=APP_LONG, user_id=USER, session_id="probe")
    extra = iter(events(4 * repeats))
    out["append_event"] = await timed(lambda: writer.append_event(probe, next(extra)), 4 * repeats)
    await closed(writer)
    await settled(name, socket)
    reader = make()  # another process's view: it holds nothing of what it reads

    async def get(config: Any) -> None:
        got = await reader.get_session(
            app_name=APP_LONG, user_id=USER, session_id="long", config=config
        )
        want = n_events if config is None else 20
        if got is None or len(got.events) != want:
            raise SystemExit(f"{name}: get_session returned {got and len(got.events)} events")

    out["get_session (whole)"] = await timed(lambda: get(None), 3)
    recent = GetSessionConfig(num_recent_events=20)
    out["get_session (num_recent_events=20)"] = await timed(lambda: get(recent), repeats)

    writer = make()
    made = iter(range(n_sessions))
    t0 = time.perf_counter()
    out["create_session"] = await timed(
        lambda: writer.create_session(
            app_name=APP_MANY, user_id=f"user{next(made) % 50}", state={"n": 1}
        ),
        n_sessions,
    )
    print(
        f"  {name}: {n_sessions} sessions made in {time.perf_counter() - t0:.1f}s", file=sys.stderr
    )
    await closed(writer)
    await settled(name, socket)

    async def listed(service: Any) -> None:
        got = await service.list_sessions(app_name=APP_MANY)
        if len(got.sessions) != n_sessions:
            raise SystemExit(f"{name}: list_sessions returned {len(got.sessions)} sessions")

    out["list_sessions"] = await timed(lambda: listed(reader), 2)
    await closed(reader)
    if name == "journald":
        bare = make(list_state=False)
        out["list_sessions (list_state=False)"] = await timed(lambda: listed(bare), 2)
        await closed(bare)
    return out


async def closed(service: Any) -> None:
    done = service.close()
    if asyncio.iscoroutine(done):
        await done


async def settled(name: str, socket: str) -> None:
    """Wait until the daemon has ended every lease the writer gave back (their closes run in
    the background and would share the machine with the timed reads)."""
    if name == "journald":
        await asyncio.to_thread(_no_lease_held, socket)


def _no_lease_held(socket: str) -> None:
    from journald_client import connect

    with connect(socket) as client:
        while any(r.status == "held" for r in client.list()):
            time.sleep(0.2)
    time.sleep(2.0)


SIDES = {"sqlite": "DatabaseSessionService (SQLite)", "journald": "JournaldSessionService"}


def one_side(args: argparse.Namespace) -> int:
    """``--side``: one service's figures as JSON on stdout, measured in a process of its own
    (a process that has just run the other service's set-up is slower at everything)."""
    from google.adk.sessions.database_session_service import DatabaseSessionService
    from journald_client.adk import JournaldSessionService

    def make(**options: Any) -> Any:
        if args.side == "sqlite":
            return DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{args.dir / 'adk.db'}")
        return JournaldSessionService(socket=args.socket, **options)

    figures = asyncio.run(
        side(args.socket, args.side, make, args.events, args.sessions, args.repeats)
    )
    print("FIGURES " + json.dumps(figures), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="1,000 events, 300 sessions")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--side", choices=sorted(SIDES), help=argparse.SUPPRESS)
    ap.add_argument("--socket", help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.events, args.sessions, args.repeats = 1_000, 300, 8
    if args.side:
        return one_side(args)
    from tests.daemon import Daemon

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-adk-") as d:
        tmp = Path(d)
        daemon = Daemon(tmp, "file").start()
        try:
            for kind, name in SIDES.items():
                cmd = [sys.executable, __file__, "--side", kind, "--socket", str(daemon.socket)]
                cmd += ["--dir", str(tmp), "--events", str(args.events)]
                cmd += ["--sessions", str(args.sessions), "--repeats", str(args.repeats)]
                done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
                line = next(x for x in done.stdout.splitlines() if x.startswith("FIGURES "))
                results[name] = json.loads(line.removeprefix("FIGURES "))
        finally:
            daemon.stop()
    print(
        f"| service | operation | p50 ms | max ms | calls |  (events={args.events}, "
        f"sessions={args.sessions})"
    )
    print("|---|---|---:|---:|---:|")
    for name, ops in results.items():
        for op, r in ops.items():
            print(f"| {name} | {op} | {r['p50_ms']:.2f} | {r['max_ms']:.2f} | {r['calls']} |")
    jd, db = results["JournaldSessionService"], results["DatabaseSessionService (SQLite)"]
    ratio = {op: jd[op]["p50_ms"] / db[op]["p50_ms"] for op in db}
    ratio["list_sessions (list_state=False)"] = (
        jd["list_sessions (list_state=False)"]["p50_ms"] / db["list_sessions"]["p50_ms"]
    )
    for op, x in ratio.items():
        print(f"journald / SQLite p50, {op}: {x:.2f}x")
    results["ratio_p50"] = ratio
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
