"""Agent processes for bench/run_all.py: N agents of one system, each writing ~1 KB records
that are durable before acknowledgement, in P forked processes that start together.

    .venv/bin/python bench/agent_procs.py SPEC.json

SPEC: {"system", "agents", "procs", "seconds", "dir", "target", "tag", "out", "stream_prefix"}.
The host process imports a system's library once (so 16 agents do not each pay a 2 s import),
forks the processes, waits until every agent is set up (lease open, connection made), releases
them at once, and writes {"lat": [...], "records": n, "wall": s, "errors": [...]} to ``out``.
It prints ``ready`` when the agents are set up and ``go`` when they start. Every child is
waited for, and killed by its pid if it overruns.

Systems (one call = one record unless stated):
* ``echo``: the no-op gRPC echo (bench/echo_server.py), 1 KB request;
* ``unary`` / ``batch``: journald Append with 1 record, Append with 16 records (each agent
  its own run and lease);
* ``stream``: the client's pipelined writer, 1 record a message, up to 16 in flight on one
  AppendStream (each agent its own run and lease);
* ``sqlite``: SQLite WAL, synchronous=FULL, one INSERT + COMMIT per record, one connection
  per agent, one shared database file;
* ``sqlitesaver``: LangGraph ``SqliteSaver.put`` of a checkpoint holding the message;
* ``sqlitesession``: OpenAI Agents SDK ``SQLiteSession.add_items`` of the message;
* ``nats``: direct nats-py ``js.publish`` of the record bytes to the journald stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BATCH, RECORD_BYTES, TS, record_payload, record_pb

SQLITE_FAMILY = {"sqlite", "sqlitesaver", "sqlitesession"}
ASYNC_SYSTEMS = {"echo", "unary", "batch", "stream", "nats", "sqlitesession"}
SETUP_TIMEOUT_S = 90.0


def message(seq: int) -> dict[str, Any]:
    """The same assistant message every system stores (~1 KB)."""
    _, payload = record_payload(seq if seq % 2 == 0 else seq + 1)
    return dict(payload["message"])


# --- one agent per system ---------------------------------------------------------------------


class Agent:
    """``setup`` once, then ``step`` (returns records written) until the deadline."""

    async def setup(self) -> None:
        pass

    async def step(self) -> int:
        raise NotImplementedError

    async def close(self) -> None:
        pass


class SqliteFull(Agent):
    def __init__(self, spec: dict[str, Any], agent_id: str) -> None:
        import sqlite3

        self.id = agent_id
        self.conn = sqlite3.connect(os.path.join(spec["dir"], "sqlite-full.db"), timeout=60)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.body = json.dumps(message(2)).encode()
        self.seq = 0

    async def step(self) -> int:
        self.seq += 1
        self.conn.execute(
            "INSERT INTO records(run, seq, body) VALUES (?, ?, ?)", (self.id, self.seq, self.body)
        )
        self.conn.commit()
        return 1

    async def close(self) -> None:
        self.conn.close()

    @staticmethod
    def prepare(spec: dict[str, Any]) -> None:
        import sqlite3

        conn = sqlite3.connect(os.path.join(spec["dir"], "sqlite-full.db"))
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS records(run TEXT, seq INTEGER, body BLOB, "
            "PRIMARY KEY (run, seq))"
        )
        conn.commit()
        conn.close()


class Saver(Agent):
    def __init__(self, spec: dict[str, Any], agent_id: str) -> None:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        self.conn = sqlite3.connect(
            os.path.join(spec["dir"], "langgraph.db"), check_same_thread=False, timeout=60
        )
        self.saver = SqliteSaver(self.conn)
        self.config: Any = {"configurable": {"thread_id": agent_id, "checkpoint_ns": ""}}
        self.seq = 0

    async def step(self) -> int:
        from langgraph.checkpoint.base import empty_checkpoint

        self.seq += 1
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": [message(2)]}
        cp["channel_versions"] = {"messages": self.seq}
        self.config = self.saver.put(
            self.config, cp, {"source": "loop", "step": self.seq}, {"messages": self.seq}
        )
        return 1

    async def close(self) -> None:
        self.conn.close()

    @staticmethod
    def prepare(spec: dict[str, Any]) -> None:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(os.path.join(spec["dir"], "langgraph.db"), check_same_thread=False)
        SqliteSaver(conn).setup()
        conn.close()


class Session(Agent):
    def __init__(self, spec: dict[str, Any], agent_id: str) -> None:
        from agents.memory import SQLiteSession

        self.session = SQLiteSession(agent_id, os.path.join(spec["dir"], "agents.db"))
        text = json.dumps(message(2)["content"])
        self.item: Any = {"role": "assistant", "content": text}

    async def step(self) -> int:
        await self.session.add_items([self.item])
        return 1

    async def close(self) -> None:
        self.session.close()

    @staticmethod
    def prepare(spec: dict[str, Any]) -> None:
        from agents.memory import SQLiteSession

        SQLiteSession("prepare", os.path.join(spec["dir"], "agents.db")).close()


class Channel:
    """One gRPC channel per process, shared by its agents (as one agent process would)."""

    channel: Any = None

    @classmethod
    def get(cls, target: str) -> Any:
        import grpc

        if cls.channel is None:
            cls.channel = grpc.aio.insecure_channel(target)
        return cls.channel


class Echo(Agent):
    def __init__(self, spec: dict[str, Any], agent_id: str) -> None:
        from echo_server import METHOD

        self.call = Channel.get(spec["target"]).unary_unary(METHOD)
        self.body = b"e" * RECORD_BYTES

    async def setup(self) -> None:
        await self.call(b"")

    async def step(self) -> int:
        await self.call(self.body)
        return 1


class Journald(Agent):
    def __init__(self, spec: dict[str, Any], agent_id: str, form: str) -> None:
        from journald_client.pb import journal_pb2 as pb
        from journald_client.pb import journal_pb2_grpc as pbg

        self.pb = pb
        self.form = form
        self.run_id = agent_id
        self.stub = pbg.JournalServiceStub(Channel.get(spec["target"]))
        self.lease_call: Any = None
        self.stream: Any = None
        self.lease_id = ""
        self.seq = 0

    def record(self, seq: int) -> Any:
        return record_pb(self.pb, seq)

    async def setup(self) -> None:
        from journald.server.convert import fingerprint_to_pb
        from tests.builders import FP

        pb = self.pb
        self.lease_call = self.stub.Open(
            pb.OpenRequest(
                run_id=self.run_id,
                mode=pb.OPEN_MODE_CREATE,
                fingerprint=fingerprint_to_pb(FP),
                prompt_json=b"[]",
                client=pb.ClientInfo(name="bench", pid=os.getpid(), host="localhost"),
            )
        )
        lease = (await self.lease_call.read()).lease
        self.lease_id, self.seq = lease.lease_id, lease.last_seq
        if self.form == "stream":
            self.stream = self.stub.AppendStream()

    async def step(self) -> int:
        pb = self.pb
        n = BATCH if self.form == "batch" else 1
        records = [self.record(self.seq + 1 + i) for i in range(n)]
        self.seq += n
        req = pb.AppendRequest(run_id=self.run_id, lease_id=self.lease_id, records=records)
        if self.stream is not None:
            await self.stream.write(pb.AppendStreamRequest(append=req))
            await self.stream.read()
        else:
            await self.stub.Append(req)
        return n

    async def close(self) -> None:
        if self.stream is not None:
            await self.stream.done_writing()
        if self.lease_call is not None:
            self.lease_call.cancel()


class Pipelined(Journald):
    """``stream``: the client's pipelined writer (``AsyncRun.pipelined``), window 16: each
    step submits one record (waiting only while 16 are in flight) and counts the records
    acknowledged since the last step; ``latencies`` are submit-to-ack times."""

    WINDOW = 16
    client: Any = None

    def __init__(self, spec: dict[str, Any], agent_id: str) -> None:
        super().__init__(spec, agent_id, "stream")
        self.target = spec["target"]
        self.run: Any = None
        self.writer: Any = None
        self.in_flight: list[tuple[float, Any]] = []
        self.latencies: list[float] = []

    async def setup(self) -> None:
        import journald_client as jc

        from tests.integration.clientbin.common import FP

        if Pipelined.client is None:
            Pipelined.client = jc.AsyncClient(self.target, name="bench")
        self.run = await Pipelined.client.start(self.run_id, FP, [])
        self.seq = self.run.last_seq
        self.writer = self.run.pipelined(window=self.WINDOW)

    async def step(self) -> int:
        from journald_client.codec import Entry

        self.seq += 1
        handle = await self.writer.append(Entry(self.record(self.seq)))
        self.in_flight.append((time.perf_counter(), handle))
        done = 0
        while self.in_flight and self.in_flight[0][1].done():
            t0, first = self.in_flight.pop(0)
            await first  # raises a failed append's error
            self.latencies.append(time.perf_counter() - t0)
            done += 1
        return done

    async def close(self) -> None:
        if self.writer is not None:
            await self.writer.close()
        if self.run is not None:
            await self.run.close()
        if Pipelined.client is not None:
            client, Pipelined.client = Pipelined.client, None
            await client.close()


class NatsDirect(Agent):
    conn: Any = None

    def __init__(self, spec: dict[str, Any], agent_id: str) -> None:
        from journald.core.records import GENESIS, make_record

        kind, payload = record_payload(2)
        self.body = make_record(2, kind, payload, GENESIS, TS).raw
        self.url = spec["target"]
        self.prefix = f"{spec['stream_prefix']}.{agent_id}"
        self.seq = 0
        self.js: Any = None

    async def setup(self) -> None:
        import nats

        if NatsDirect.conn is None:
            NatsDirect.conn = await nats.connect(self.url)
        self.js = NatsDirect.conn.jetstream(timeout=30)

    async def step(self) -> int:
        self.seq += 1
        await self.js.publish(f"{self.prefix}.{self.seq}", self.body)
        return 1

    async def close(self) -> None:
        if NatsDirect.conn is not None:
            conn, NatsDirect.conn = NatsDirect.conn, None
            await conn.close()


def make_agent(spec: dict[str, Any], agent_id: str) -> Agent:
    system = spec["system"]
    if system == "sqlite":
        return SqliteFull(spec, agent_id)
    if system == "sqlitesaver":
        return Saver(spec, agent_id)
    if system == "sqlitesession":
        return Session(spec, agent_id)
    if system == "echo":
        return Echo(spec, agent_id)
    if system == "stream":
        return Pipelined(spec, agent_id)
    if system in ("unary", "batch"):
        return Journald(spec, agent_id, system)
    if system == "nats":
        return NatsDirect(spec, agent_id)
    raise ValueError(f"unknown system {system!r}")


PREPARE = {
    "sqlite": SqliteFull.prepare,
    "sqlitesaver": Saver.prepare,
    "sqlitesession": Session.prepare,
}


# --- the child: set up, wait for go, run, report --------------------------------------------


async def child_run(
    spec: dict[str, Any], ids: list[str], ready_fd: int, go_fd: int
) -> dict[str, Any]:
    agents = [make_agent(spec, i) for i in ids]
    await asyncio.gather(*(a.setup() for a in agents))
    os.write(ready_fd, b"r")
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, os.read, go_fd, 1)
    seconds = float(spec["seconds"])
    lat: list[float] = []
    count = 0
    start = time.perf_counter()
    deadline = start + seconds

    async def drive(agent: Agent) -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            n = await agent.step()
            if isinstance(agent, Pipelined):  # a step only submits: time the acks
                lat.extend(agent.latencies)
                agent.latencies.clear()
            else:
                lat.append(time.perf_counter() - t0)
            count += n

    await asyncio.gather(*(drive(a) for a in agents))
    wall = time.perf_counter() - start
    for a in agents:
        await a.close()
    if Channel.channel is not None:
        await Channel.channel.close()
    return {"lat": lat, "records": count, "wall": wall}


def child(spec: dict[str, Any], ids: list[str], ready_fd: int, go_fd: int, out: str) -> None:
    try:
        result: dict[str, Any] = asyncio.run(child_run(spec, ids, ready_fd, go_fd))
    except BaseException:
        result = {"error": traceback.format_exc(limit=6)}
        with contextlib.suppress(OSError):
            os.write(ready_fd, b"x")
    with open(out, "w") as f:
        json.dump(result, f)


def host(spec: dict[str, Any]) -> dict[str, Any]:
    system = spec["system"]
    n, procs = int(spec["agents"]), max(1, min(int(spec["procs"]), int(spec["agents"])))
    if system in SQLITE_FAMILY:
        procs = n  # one connection per agent, one agent per process
        PREPARE[system](spec)
    if system == "sqlitesession":
        import agents  # noqa: F401 - imported once here, shared by the forked agents
    elif system == "sqlitesaver":
        import langgraph.checkpoint.sqlite  # noqa: F401
    names = [f"{spec['tag']}-{i}" for i in range(n)]
    chunks = [names[i::procs] for i in range(procs)]
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    out = Path(spec["out"])
    pids: list[int] = []
    sys.stdout.flush()
    try:
        for i, chunk in enumerate(chunks):
            pid = os.fork()
            if pid == 0:  # child
                code = 0
                try:
                    os.close(ready_r)
                    os.close(go_w)
                    child(spec, chunk, ready_w, go_r, f"{out}.{i}")
                except BaseException:
                    code = 1
                finally:
                    os._exit(code)
            pids.append(pid)
        os.close(ready_w)
        os.close(go_r)
        got = b""
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        import select

        while len(got) < procs and time.monotonic() < deadline:
            r, _, _ = select.select([ready_r], [], [], 1.0)
            if r:
                chunk_b = os.read(ready_r, 64)
                if not chunk_b:
                    break
                got += chunk_b
        if len(got) < procs:
            raise RuntimeError(f"{procs - len(got)} agent processes did not get ready")
        print("ready", flush=True)
        os.write(go_w, b"g" * procs)
        print("go", flush=True)
        limit = time.monotonic() + float(spec["seconds"]) + 60
        pending = set(pids)
        while pending and time.monotonic() < limit:
            for pid in list(pending):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    pending.discard(pid)
            time.sleep(0.02)
    finally:
        for pid in pids:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    lat: list[float] = []
    records = 0
    wall = 0.0
    errors: list[str] = []
    for i in range(procs):
        path = Path(f"{out}.{i}")
        if not path.exists():
            errors.append(f"process {i} wrote no result")
            continue
        data = json.loads(path.read_text())
        path.unlink()
        if "error" in data:
            errors.append(data["error"])
            continue
        lat.extend(data["lat"])
        records += data["records"]
        wall = max(wall, data["wall"])
    return {
        "lat": lat,
        "records": records,
        "wall": wall,
        "errors": errors,
        "procs": procs,
        "synchronous": sqlite_synchronous(spec) if system in SQLITE_FAMILY else None,
    }


def sqlite_synchronous(spec: dict[str, Any]) -> str:
    """``PRAGMA synchronous`` of a connection as the system configures it (WAL on; FULL set
    explicitly only by the plain SQLite workload; the libraries keep SQLite's default)."""
    import sqlite3

    conn = sqlite3.connect(os.path.join(spec["dir"], "probe.db"))
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        if spec["system"] == "sqlite":
            conn.execute("PRAGMA synchronous=FULL")
        value = conn.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        conn.close()
    return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(value, str(value))


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    result = host(spec)
    Path(spec["out"]).write_text(json.dumps(result))
    return 0 if not result["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
