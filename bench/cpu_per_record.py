"""Daemon CPU per record, beside a no-op gRPC echo's CPU per call (issue 27, item 6).

    .venv/bin/python bench/cpu_per_record.py            # full: 8 s per mode
    .venv/bin/python bench/cpu_per_record.py --quick    # 3 s per mode, under 60 s in all
    .venv/bin/python bench/cpu_per_record.py --profile unary,pipelined

CPU is read from ``/proc/<pid>/stat`` (utime + stime) of the server process (the daemon, or
bench/echo_server.py) at the start and the end of each measured window, and divided by the
records acknowledged inside it (calls, for the echo): on a shared machine CPU time is
disturbed far less than wall time. One client process per mode drives ``--runs`` runs (or
echo loops) at once over one channel, ~1 KB records, file backend (fdatasync per group):

* ``fdatasync``: no server: ``write`` of 1 KB + ``fdatasync`` in a loop in this process, the
  CPU the kernel spends on one durable write (the daemon pays it once per group commit);
* ``echo``: a unary call of 1 KB to the no-op echo servicer (the framework's floor);
  ``echo-task`` and ``echo-thread``: the same, answered once another task ran, or a thread
  ran a no-op (the two hand-offs an Append's handler waits through); ``echo-batch``: 16 KB
  (a 16-record Append's bytes) in, an empty answer out (what gRPC charges for the batch's bytes);
* ``unary``: ``Append`` of one record;
* ``batch``: ``Append`` of 16 records (one call);
* ``stream``: raw ``AppendStream``, one record per message, 16 messages in flight per run
  (what a pipelined writer sent before it coalesced);
* ``pipelined``: the Python client's pipelined writer (``AsyncRun.pipelined(window=16)``),
  one ``append`` per record; it coalesces what is queued into one stream message;
* ``client-unary``: the Python client's ``AsyncRun.append_many`` of one record (the daemon's side
  equals ``unary``; the client's own CPU per append is the figure beside a bare stub call).

``--profile MODES`` runs py-spy (bench/requirements.txt) against the daemon during those modes
and writes the top frames of its event-loop thread (self and cumulative shares) to
``bench/profiles/<mode>.txt``. ``--perf MODES`` runs ``perf record`` against the server's
event-loop thread during those modes (echo modes too: the echo server's) and writes its
cycles by library and symbol to ``bench/profiles/<mode>-perf.txt`` (bench/perf_profile.py: py-spy
charges a thread preempted inside a system call to that call; perf counts only cycles run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BATCH, RECORD_BYTES, ROOT, record_pb

MODES = (
    "fdatasync",
    "echo",
    "echo-task",
    "echo-thread",
    "echo-batch",
    "unary",
    "batch",
    "stream",
    "pipelined",
    "client-unary",
)
WINDOW = 16
WARMUP_S = 0.5
PROFILES = ROOT / "bench" / "profiles"


def cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds per thread name of ``pid`` (threads of one name summed); the event-loop
    thread (the main one) is named ``loop``."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = "loop" if task.name == str(pid) else stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        name = name.rstrip("0123456789-_")  # one row for a pool's numbered threads
        out[name] = out.get(name, 0.0) + cpu
    return out


def self_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


# --- the client (one process per mode) -------------------------------------------------------


class Window:
    """The measured window: records counted only between ``open`` and ``close``, and both
    processes' CPU read at its edges."""

    def __init__(self, server_pid: int, seconds: float) -> None:
        self.server_pid = server_pid
        self.seconds = seconds
        self.counting = False
        self.records = 0
        self.calls = 0
        self.out: dict[str, float] = {}
        self.threads: dict[str, float] = {}

    def count(self, records: int, calls: int = 1) -> None:
        if self.counting:
            self.records += records
            self.calls += calls

    async def run(self) -> None:
        await asyncio.sleep(WARMUP_S)
        s0, c0, t0 = cpu_s(self.server_pid), self_cpu_s(), time.perf_counter()
        th0 = threads_cpu_s(self.server_pid)
        self.counting = True
        await asyncio.sleep(self.seconds)
        self.counting = False
        s1, c1, t1 = cpu_s(self.server_pid), self_cpu_s(), time.perf_counter()
        th1 = threads_cpu_s(self.server_pid)
        threads = {k: v - th0.get(k, 0.0) for k, v in th1.items()}
        self.out = {"server_cpu_s": s1 - s0, "client_cpu_s": c1 - c0, "wall_s": t1 - t0}
        self.threads = threads

    @property
    def over(self) -> bool:
        return bool(self.out)


async def open_run(stub: Any, pb: Any, run_id: str) -> tuple[Any, str, int]:
    from journald.server.convert import fingerprint_to_pb
    from tests.builders import FP

    call = stub.Open(
        pb.OpenRequest(
            run_id=run_id,
            mode=pb.OPEN_MODE_CREATE,
            fingerprint=fingerprint_to_pb(FP),
            prompt_json=b"[]",
            client=pb.ClientInfo(name="bench", pid=os.getpid(), host="localhost"),
        )
    )
    lease = (await call.read()).lease
    return call, lease.lease_id, lease.last_seq


async def drive_raw(mode: str, target: str, w: Window, runs: int, tag: str) -> None:
    import grpc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    channel: Any = grpc.aio.insecure_channel(target)  # grpc-stubs types the sync API
    if mode.startswith("echo"):
        from echo_server import ABSORB, AFTER_TASK, AFTER_THREAD, METHOD

        methods = {"echo": METHOD, "echo-task": AFTER_TASK, "echo-thread": AFTER_THREAD}
        call = channel.unary_unary(methods.get(mode, ABSORB))
        body = b"e" * RECORD_BYTES * (BATCH if mode == "echo-batch" else 1)

        async def echo_loop() -> None:
            while not w.over:
                await call(body)
                w.count(1)

        await asyncio.gather(w.run(), *(echo_loop() for _ in range(runs)))
        await channel.close()
        return
    stub: Any = pbg.JournalServiceStub(channel)
    opened = [await open_run(stub, pb, f"{tag}-{mode}-{i}") for i in range(runs)]

    async def unary_loop(run_id: str, lease_id: str, seq: int) -> None:
        n = BATCH if mode == "batch" else 1
        while not w.over:
            records = [record_pb(pb, seq + 1 + i) for i in range(n)]
            seq += n
            await stub.Append(pb.AppendRequest(run_id=run_id, lease_id=lease_id, records=records))
            w.count(n)

    async def stream_loop(run_id: str, lease_id: str, seq: int) -> None:
        stream = stub.AppendStream()
        room = asyncio.Semaphore(WINDOW)
        writing = True

        async def reader() -> None:
            while writing or room._value < WINDOW:
                if await stream.read() is grpc.aio.EOF:  # type: ignore[attr-defined]
                    return
                room.release()
                w.count(1)

        reading = asyncio.create_task(reader())
        while not w.over:
            await room.acquire()
            seq += 1
            req = pb.AppendRequest(run_id=run_id, lease_id=lease_id, records=[record_pb(pb, seq)])
            await stream.write(pb.AppendStreamRequest(append=req))
        writing = False
        await reading
        await stream.done_writing()

    loop = stream_loop if mode == "stream" else unary_loop
    await asyncio.gather(
        w.run(), *(loop(f"{tag}-{mode}-{i}", lid, s) for i, (_, lid, s) in enumerate(opened))
    )
    for call, _, _ in opened:
        call.cancel()
    await channel.close()


async def drive_client(mode: str, target: str, w: Window, runs: int, tag: str) -> None:
    import journald_client as jc
    from journald_client.codec import Entry
    from journald_client.pb import journal_pb2 as pb

    from tests.integration.clientbin.common import FP

    client = jc.AsyncClient(target, name="bench")
    started = [await client.start(f"{tag}-{mode}-{i}", FP, []) for i in range(runs)]

    async def pipelined_loop(run: Any) -> None:
        seq = run.last_seq
        writer = run.pipelined(window=WINDOW)
        waiting: list[Any] = []
        while not w.over:
            seq += 1
            waiting.append(await writer.append(Entry(record_pb(pb, seq))))
            while waiting and waiting[0].done():
                await waiting.pop(0)
                w.count(1)
            if len(waiting) >= WINDOW:
                await waiting.pop(0)
                w.count(1)
        await writer.close()

    async def append_loop(run: Any) -> None:
        seq = run.last_seq
        while not w.over:
            seq += 1
            (ack,) = await run.append_many([Entry(record_pb(pb, seq))])
            del ack
            w.count(1)

    loop = pipelined_loop if mode == "pipelined" else append_loop
    await asyncio.gather(w.run(), *(loop(r) for r in started))
    for run in started:
        await run.close()
    await client.close()


def client_main(mode: str, target: str, server_pid: int, seconds: float, runs: int) -> None:
    w = Window(server_pid, seconds)
    tag = f"c{os.getpid()}"
    drive = drive_client if mode in ("pipelined", "client-unary") else drive_raw
    asyncio.run(drive(mode, target, w, runs, tag))
    print(json.dumps({**w.out, "records": w.records, "calls": w.calls, "threads": w.threads}))


# --- the host: servers, one client process per mode, the table -------------------------------


def run_mode(
    mode: str, target: str, pid: int, seconds: float, runs: int, client_tree: Path | None = None
) -> dict[str, Any]:
    """One client process driving ``mode``; ``client_tree``: an older tree whose Python client
    (its ``clients/python``, with its ``journald_proto`` beside it) the process imports instead
    of this tree's."""
    argv = [sys.executable, __file__, "--client", mode, target, str(pid), str(seconds), str(runs)]
    env = None
    if client_tree is not None:
        tree = client_tree.resolve()
        env = {**os.environ, "PYTHONPATH": f"{tree / 'clients' / 'python'}:{tree}"}
    out = subprocess.run(
        argv, capture_output=True, cwd=ROOT, timeout=seconds + 120, check=False, env=env
    )
    if out.returncode != 0:
        raise RuntimeError(f"{mode} client failed:\n{out.stderr.decode()[-3000:]}")
    row: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    row["mode"] = mode
    return row


def profile_summary(raw: Path, title: str, top: int = 25) -> str:
    """Top frames of the event-loop thread's samples: self (leaf) and cumulative (anywhere on
    the stack) shares, from py-spy's collapsed stacks."""
    selfc: Counter[str] = Counter()
    cumc: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, n_s = line.rpartition(" ")
        if not stack or not n_s.isdigit():
            continue
        frames = [f for f in stack.split(";") if f]
        thread = frames[1] if len(frames) > 1 and frames[0].startswith("process") else frames[0]
        if "MainThread" not in thread:
            continue
        n = int(n_s)
        body = [_short(f) for f in frames[2:] if "(" in f]
        total += n
        selfc[body[-1] if body else "(no Python frame)"] += n
        for f in set(body):
            cumc[f] += n
    lines = [title, f"event-loop thread samples: {total}", "", "self (leaf) share:"]
    lines += [f"  {v / total:6.1%}  {k}" for k, v in selfc.most_common(top)] if total else []
    lines += ["", "cumulative share (frame anywhere on the stack):"]
    lines += [f"  {v / total:6.1%}  {k}" for k, v in cumc.most_common(top)] if total else []
    return "\n".join(lines) + "\n"


def _short(frame: str) -> str:
    fn, _, rest = frame.partition(" (")
    path = rest.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/journald/", "/journald_client/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{fn} ({path})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 s per mode (under 60 s in all)")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--runs", type=int, default=4, help="runs (echo loops) driven at once")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--backend", default="file", help="the daemon's backend (file: fdatasync)")
    ap.add_argument(
        "--whatif", default="", help="start the daemon through bench/whatif_daemon.py MODE"
    )
    ap.add_argument(
        "--before",
        type=Path,
        default=None,
        help="a tree of older code (git archive): its daemon runs every journald mode too, "
        "interleaved with this tree's, for before/after figures from one run",
    )
    ap.add_argument("--profile", default="", help="modes to profile with py-spy, comma separated")
    ap.add_argument("--native", action="store_true", help="profile C frames too (py-spy --native)")
    ap.add_argument("--tag", default="", help="profile file names: bench/profiles/<tag><mode>.txt")
    ap.add_argument(
        "--perf",
        default="",
        help="modes to profile with perf record (the loop thread), comma separated",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--client", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        mode, target, pid, seconds, runs = args.client
        client_main(mode, target, int(pid), float(seconds), int(runs))
        return 0

    from tests.daemon import Daemon

    seconds = args.seconds or (3.0 if args.quick else 8.0)
    modes = [m for m in args.modes.split(",") if m]
    profiled = {m for m in args.profile.split(",") if m}
    perfed = {m for m in args.perf.split(",") if m}
    rate = 50 if args.native else 200  # a native sample pauses the daemon
    work = Path(tempfile.mkdtemp(prefix="journald-cpu-"))
    rows: list[dict[str, Any]] = []
    print(
        f"daemon CPU per record: {seconds:.0f} s per mode, {args.runs} runs, {work}",
        file=sys.stderr,
    )
    daemon = Daemon(work, args.backend)
    if args.whatif:
        from latency_anatomy import WhatIfDaemon

        daemon = WhatIfDaemon(args.whatif, work)
    before: contextlib.AbstractContextManager[Daemon | None] = contextlib.nullcontext(None)
    if args.before is not None:
        (work / "before").mkdir()
        before = Daemon(work / "before", args.backend, cwd=args.before.resolve())
    with echo_server(work) as (echo_pid, echo_target), daemon as d, before as old:
        for mode in modes:
            print(f"  {mode}...", file=sys.stderr)
            if mode == "fdatasync":
                rows.append(fdatasync_cpu(work, seconds))
                continue
            if mode.startswith("echo"):
                with perf_of(mode in perfed, echo_pid, seconds, work, f"{args.tag}{mode}"):
                    rows.append(run_mode(mode, echo_target, echo_pid, seconds, args.runs))
                continue
            if old is not None:
                # the before client too where the mode measures the client
                own = args.before if mode == "client-unary" else None
                rows.append(run_mode(mode, old.target, old.pid, seconds, args.runs, own))
                rows[-1]["mode"] = f"{mode} (before)"
            spy = None
            if mode in profiled:
                from profile_append import start

                spy_raw = work / f"{mode}.raw"
                spy = start(d.pid, seconds, spy_raw, rate=rate, native=args.native)
            with perf_of(mode in perfed, d.pid, seconds, work, f"{args.tag}{mode}"):
                rows.append(run_mode(mode, d.target, d.pid, seconds, args.runs))
            if spy is not None:
                spy.wait(timeout=60)
                PROFILES.mkdir(exist_ok=True)
                how = "--native" if args.native else "--nonblocking"
                title = (
                    f"py-spy record --threads {how} --rate {rate} of the daemon for "
                    f"{seconds:.0f} s under mode {mode!r} ({args.runs} runs, "
                    f"bench/cpu_per_record.py; rates under the sampler are not the bench's)"
                )
                out = PROFILES / f"{args.tag}{mode}.txt"
                out.write_text(profile_summary(spy_raw, title))
                print(f"    profile: {out.relative_to(ROOT)}", file=sys.stderr)
    print_table(rows, seconds, args.runs)
    if args.json is not None:
        args.json.write_text(json.dumps(figures(rows, seconds, args.runs), indent=1))
    return 0


def figures(rows: list[dict[str, Any]], seconds: float, runs: int) -> dict[str, Any]:
    """The table as data: per mode the server's CPU per record (µs) and its ratio to the
    echo's CPU per call, the client's CPU per call (µs); and the client goal's ratio, before
    and after (``client-unary`` ÷ ``unary`` of the same daemon)."""
    echo = next((r for r in rows if r["mode"] == "echo"), None)
    echo_us = echo["server_cpu_s"] / echo["calls"] * 1e6 if echo and echo["calls"] else 0.0
    modes: dict[str, dict[str, float]] = {}
    for r in rows:
        if not r["records"]:
            continue
        per = r["server_cpu_s"] / r["records"] * 1e6
        modes[r["mode"]] = {
            "server_cpu_per_record_us": per,
            "vs_echo_cpu_per_call": per / echo_us if echo_us else float("nan"),
            "client_cpu_per_call_us": r["client_cpu_s"] / r["calls"] * 1e6,
            "records_per_s": r["records"] / r["wall_s"],
        }
    client: dict[str, float] = {}
    for suffix, when in (("", "after"), (" (before)", "before")):
        own, stub = modes.get(f"client-unary{suffix}"), modes.get(f"unary{suffix}")
        if own and stub:
            client[when] = own["client_cpu_per_call_us"] / stub["client_cpu_per_call_us"]
    return {
        "seconds": seconds,
        "runs": runs,
        "echo_cpu_per_call_us": echo_us,
        "modes": modes,
        "client_vs_stub": client,
    }


@contextlib.contextmanager
def perf_of(wanted: bool, pid: int, seconds: float, work: Path, name: str) -> Iterator[None]:
    """``perf record`` of ``pid``'s main (event-loop) thread while the body runs, its summary
    written to ``bench/profiles/<name>-perf.txt``; nothing when not ``wanted``."""
    if not wanted:
        yield
        return
    from perf_profile import start, summarize

    data = work / f"{name}.perf.data"
    rec = start(pid, seconds, data)
    try:
        yield
    finally:
        rec.wait(timeout=120)
    PROFILES.mkdir(exist_ok=True)
    out = PROFILES / f"{name}-perf.txt"
    title = (
        f"perf record -g -t {pid} (the event-loop thread) for {seconds:.0f} s under mode "
        f"{name!r} (bench/cpu_per_record.py): on-CPU cycles only"
    )
    out.write_text(summarize(data, title))
    print(f"    perf: {out.relative_to(ROOT)}", file=sys.stderr)


def fdatasync_cpu(work: Path, seconds: float) -> dict[str, Any]:
    """The disk's share: CPU of ``pwrite`` of 1 KB + ``fdatasync`` back to back in this
    process (the kernel's work for one durable write, which the daemon pays per group)."""
    fd = os.open(work / "fdatasync.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    data, n = b"f" * RECORD_BYTES, 0
    c0, t0 = self_cpu_s(), time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            os.write(fd, data)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
    cpu, wall = self_cpu_s() - c0, time.perf_counter() - t0
    return {
        "mode": "fdatasync",
        "server_cpu_s": cpu,
        "client_cpu_s": 0.0,
        "wall_s": wall,
        "records": n,
        "calls": n,
        "threads": {"bench": cpu},
    }


@contextlib.contextmanager
def echo_server(work: Path) -> Iterator[tuple[int, str]]:
    """bench/echo_server.py on a socket in ``work``, stopped by its pid."""
    sock = work / "echo.sock"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "echo_server.py"), str(sock)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        if b"ready" not in proc.stdout.readline():
            raise RuntimeError("the echo server did not start")
        yield proc.pid, f"unix://{sock}"
    finally:
        proc.terminate()
        proc.wait(10)


def print_table(rows: list[dict[str, Any]], seconds: float, runs: int) -> None:
    echo = next((r for r in rows if r["mode"] == "echo"), None)
    echo_us = echo["server_cpu_s"] / echo["calls"] * 1e6 if echo and echo["calls"] else 0.0
    print(f"\n{seconds:.0f} s per mode, {runs} runs at once, ~1 KB records, file backend")
    print(
        f"{'mode':22} {'records':>8} {'rec/s':>8} {'server CPU/rec µs':>18} "
        f"{'÷ echo CPU/call':>15} {'client CPU/call µs':>19}"
    )
    for r in rows:
        per = r["server_cpu_s"] / r["records"] * 1e6 if r["records"] else float("nan")
        ratio = per / echo_us if echo_us else float("nan")
        client = r["client_cpu_s"] / r["calls"] * 1e6 if r["calls"] else float("nan")
        print(
            f"{r['mode']:22} {r['records']:8d} {r['records'] / r['wall_s']:8.0f} "
            f"{per:18.0f} {ratio:15.2f} {client:19.0f}"
        )
    print("\nserver CPU per record by thread (µs; threads of one name summed):")
    for r in rows:
        if r["records"]:
            parts = sorted(r["threads"].items(), key=lambda kv: -kv[1])
            shown = ", ".join(f"{k} {v / r['records'] * 1e6:.0f}" for k, v in parts if v > 0)
            print(f"  {r['mode']:22} {shown}")
    for when, ratio in figures(rows, seconds, runs)["client_vs_stub"].items():
        print(f"Python client CPU per unary append ÷ bare stub call ({when}): {ratio:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
