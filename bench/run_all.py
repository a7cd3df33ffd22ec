"""Every journald benchmark side by side in one run, beside the physical limits and the tools
users would pick instead; writes docs/benchmarks.md and its PNG plots.

    .venv/bin/python bench/run_all.py            # full run, < 10 minutes on 2 cores
    .venv/bin/python bench/run_all.py --quick    # CI smoke, < 2 minutes
    .venv/bin/python bench/run_all.py --quick --out /tmp/report

Workloads (~1 KB records, durable before acknowledgement everywhere), in this order, on one
disk (a temp dir under --dir, default the system temp dir):

* limits: raw ``write + fdatasync`` on 1 file and on N files from N threads; a no-op gRPC unary
  echo (our own servicer, bench/echo_server.py, grpc.aio + uvloop like the daemon) on a unix
  socket at 1 / N calls in flight;
* journald: in-process FileStore; the daemon (file backend) with unary Append, 16-record
  Append and AppendStream at 1 / 16 / 64 runs; the daemon on JetStream (nats-server
  ``sync_interval: always``) beside direct nats-py publishes to the same stream;
* alternatives: SQLite WAL + synchronous=FULL, LangGraph SqliteSaver, OpenAI Agents
  SQLiteSession (skipped, and said so in the report, when their packages are missing:
  ``.venv/bin/pip install -r bench/requirements.txt``);
* resume: Open of 1k / 10k / 100k-record runs; History tail page at 1k / 100k / 1M messages;
  the daemon with 10,000 open leases, an Open stream each and then over one Leases stream per
  connection (bench/many_leases.py: threads, RSS, fds, and a 16-run
  append benchmark beside them; minutes on its own, outside the 10-minute bound of the rest);
* a py-spy profile of the daemon under unary appends from 16 runs.

Every process started here (daemons, nats-server, echo server, agent processes, py-spy) is
stopped by its own pid, also on failure. Every workload is bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from common import ROOT, RunWriter, summarize

BENCH = Path(__file__).resolve().parent
PY = sys.executable
OPEN_WINDOW = 1000  # messages a windowed Open asks for (what the journald clients send)


@dataclass
class Config:
    quick: bool
    seconds: float
    concurrency: list[int]
    alt_concurrency: list[int]
    procs: int
    open_sizes: list[int]
    history_sizes: list[int]
    leases: int
    profile_s: float
    reps: int
    budget_s: float
    skip: set[str] = field(default_factory=set)

    @classmethod
    def make(cls, quick: bool, seconds: float | None, skip: set[str]) -> Config:
        if quick:
            return cls(
                True,
                seconds or 0.4,
                [1, 4],
                [4],
                4,
                [1_000, 10_000],
                [1_000, 10_000],
                100,
                1.5,
                2,
                100.0,
                skip,
            )
        return cls(
            False,
            seconds or 3.0,
            [1, 16, 64],
            [1, 16, 64],
            16,
            [1_000, 10_000, 100_000],
            [1_000, 10_000, 100_000, 1_000_000],
            10_000,
            6.0,
            3,
            560.0,
            skip,
        )


@dataclass
class Ctx:
    cfg: Config
    work: Path
    started: float = field(default_factory=time.monotonic)
    res: dict[str, Any] = field(default_factory=dict)
    log: Callable[[str], None] = print

    def elapsed(self) -> float:
        return time.monotonic() - self.started


# --- processes --------------------------------------------------------------------------------


def stop_pid(proc: subprocess.Popen[Any], group: bool = False) -> None:
    """SIGTERM by pid (or the process group this harness created for it), then SIGKILL."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        proc.wait()


@contextlib.contextmanager
def echo_server(work: Path) -> Iterator[str]:
    sock = Path(tempfile.mkdtemp(prefix="jd-echo-", dir="/tmp")) / "echo.sock"
    proc = subprocess.Popen(
        [PY, str(BENCH / "echo_server.py"), str(sock)], stdout=subprocess.PIPE, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if b"ready" not in line:
            raise RuntimeError("echo server did not start")
        yield f"unix://{sock}"
    finally:
        stop_pid(proc)
        with contextlib.suppress(OSError):
            sock.unlink()
            sock.parent.rmdir()


def run_agents(
    ctx: Ctx,
    system: str,
    n: int,
    target: str = "",
    tag: str = "",
    on_go: Callable[[], None] | None = None,
    seconds: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    d = ctx.work / f"agents-{system}-{n}-{tag or 'x'}"
    d.mkdir(parents=True, exist_ok=True)
    seconds = seconds if seconds is not None else ctx.cfg.seconds
    spec = {
        "system": system,
        "agents": n,
        "procs": ctx.cfg.procs,
        "seconds": seconds,
        "dir": str(d),
        "target": target,
        "tag": f"{system}-{n}{tag}",
        "out": str(d / "result.json"),
        "stream_prefix": extra.get("stream_prefix", ""),
    }
    spec_path = d / "spec.json"
    spec_path.write_text(json.dumps(spec))
    proc = subprocess.Popen(
        [PY, str(BENCH / "agent_procs.py"), str(spec_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        start_new_session=True,  # its forked agents share its process group: stop them too
    )
    err_lines: list[bytes] = []
    drain = threading.Thread(
        target=lambda: err_lines.extend(proc.stderr.readlines()) if proc.stderr else None,
        daemon=True,
    )
    drain.start()
    # a hung agent host (or agent) is stopped by this watchdog, so reading its output ends
    watchdog = threading.Timer(seconds + 150, stop_pid, args=(proc,), kwargs={"group": True})
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == b"go" and on_go is not None:
                on_go()
        proc.wait(30)
    finally:
        watchdog.cancel()
        stop_pid(proc, group=True)
        drain.join(5)
    out = Path(spec["out"])
    if not out.exists():
        tail = b"".join(err_lines[-15:]).decode(errors="replace")
        raise RuntimeError(f"{system} x{n}: agent host failed (exit {proc.returncode}): {tail}")
    data = json.loads(out.read_text())
    if data["errors"]:
        raise RuntimeError(f"{system} x{n}: {data['errors'][0][-1500:]}")
    extra_fields = {"procs": data["procs"]}
    if data.get("synchronous"):
        extra_fields["synchronous"] = data["synchronous"]
    return summarize(system, data["lat"], data["records"], data["wall"], **extra_fields)


# --- in-process workloads ------------------------------------------------------------------


def raw_fdatasync(directory: Path, threads: int, seconds: float) -> dict[str, Any]:
    """``write + fdatasync`` of 1 KB at the end of a file, one file per thread."""
    data = b"x" * (common.RECORD_BYTES - 1) + b"\n"
    lats: list[list[float]] = [[] for _ in range(threads)]
    start_evt = threading.Event()
    deadline = [0.0]

    def worker(i: int) -> None:
        start_evt.wait()
        lats[i] = common.write_fdatasync_loop(
            directory / f"raw-{threads}-{i}.bin",
            lambda n: time.perf_counter() < deadline[0],
            data,
        )

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    t0 = time.perf_counter()
    deadline[0] = t0 + seconds
    start_evt.set()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    lat = [x for xs in lats for x in xs]
    return summarize("raw", lat, len(lat), wall)


def in_process(directory: Path, runs: int, seconds: float) -> dict[str, Any]:
    """``FileJournal.append`` of one ~1 KB record per call, ``runs`` runs concurrently."""
    from journald.core.records import GENESIS, make_record
    from journald.storage.file.store import FileStore
    from tests.builders import meta_payload

    writer = RunWriter()

    async def go() -> dict[str, Any]:
        store = FileStore(directory / f"inproc-{runs}")
        journals = [
            await store.create(
                make_record(1, "meta", meta_payload(f"inproc-{i}"), GENESIS, common.TS)
            )
            for i in range(runs)
        ]
        lat: list[float] = []
        count = 0
        start = time.perf_counter()
        deadline = start + seconds

        async def one(j: Any) -> None:
            nonlocal count
            seq, prev = 1, j.last_hash
            while time.perf_counter() < deadline:
                seq += 1
                rec = writer.record(seq, prev)
                t0 = time.perf_counter()
                await j.append([rec])
                lat.append(time.perf_counter() - t0)
                prev = rec.hash
                count += 1

        await asyncio.gather(*(one(j) for j in journals))
        wall = time.perf_counter() - start
        for j in journals:
            await j.close()
        await store.close()
        return summarize("inproc", lat, count, wall)

    return asyncio.run(go())


# --- steps ----------------------------------------------------------------------------------


def step_limits(ctx: Ctx, progress: Callable[[str], None]) -> None:
    d = ctx.work / "raw"
    d.mkdir()
    for n in ctx.cfg.concurrency:
        progress(f"limits: raw write+fdatasync, {n} file(s)")
        ctx.res["rows"][f"raw@{n}"] = raw_fdatasync(d, n, ctx.cfg.seconds)
    with echo_server(ctx.work) as target:
        for n in ctx.cfg.concurrency:
            progress(f"limits: gRPC no-op echo, {n} in flight")
            ctx.res["rows"][f"echo@{n}"] = run_agents(ctx, "echo", n, target)
    ctx.res["limit_notes"] += [
        "disk: `os.pwrite` of 1 KB at the end of a file + `os.fdatasync`, in a loop; N files "
        "from N threads in the benchmark process (the syscalls release the GIL)",
        "framework: our own no-op echo servicer (bench/echo_server.py: grpc.aio on uvloop like "
        "the daemon, same server options, raw-bytes handler without protobuf, 1 KB request "
        "echoed back) in its own process on a unix socket; the client is the same grpc.aio "
        "client and the same process layout as the daemon's unary workload",
    ]


def step_inproc(ctx: Ctx, progress: Callable[[str], None]) -> None:
    for n in [c for c in ctx.cfg.concurrency if c <= 16]:
        progress(f"journald in-process FileStore, {n} run(s)")
        ctx.res["rows"][f"inproc@{n}"] = in_process(ctx.work, n, ctx.cfg.seconds)


def step_daemon(ctx: Ctx, progress: Callable[[str], None]) -> None:
    from tests.daemon import Daemon

    base = ctx.work / "daemon-file"
    base.mkdir()
    with Daemon(base, "file") as d:
        for form in ("unary", "batch", "stream"):
            for n in ctx.cfg.concurrency:
                progress(f"journald daemon (file): {form} Append, {n} run(s)")
                ctx.res["rows"][f"{form}@{n}"] = run_agents(ctx, form, n, d.target)


class _Skip(Exception):
    """A part of a step left out in --quick runs."""


def _profile_pass(
    ctx: Ctx, n: int, native: bool, rate: int, tag: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One daemon, ``n`` runs of unary appends, py-spy attached for ``profile_s`` seconds:
    (the agents' row, the profile summary with the daemon's CPU use from /proc)."""
    import profile_append

    from tests.daemon import Daemon

    base = ctx.work / f"daemon-profile-{tag}"
    base.mkdir()
    out = ctx.work / f"profile-{tag}.txt"
    spy: list[subprocess.Popen[bytes]] = []
    cpu: dict[str, float] = {}
    with Daemon(base, "file") as d:

        def on_go() -> None:
            cpu["t0"], cpu["loop0"] = time.monotonic(), profile_append.cpu_seconds(d.pid, d.pid)
            cpu["all0"] = profile_append.cpu_seconds(d.pid)
            spy.append(profile_append.start(d.pid, ctx.cfg.profile_s, out, rate, native))

        try:
            row = run_agents(
                ctx, "unary", n, d.target, tag=tag, on_go=on_go, seconds=ctx.cfg.profile_s + 1.0
            )
            wall = time.monotonic() - cpu["t0"]
            loop_busy = (profile_append.cpu_seconds(d.pid, d.pid) - cpu["loop0"]) / wall
            all_busy = (profile_append.cpu_seconds(d.pid) - cpu["all0"]) / wall
            if spy:
                _, err = spy[0].communicate(timeout=ctx.cfg.profile_s + 30)
                if spy[0].returncode != 0 or not out.exists():
                    raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-500:]}")
        finally:
            for p in spy:
                stop_pid(p)
    summary = profile_append.summarize(out)
    summary["loop_busy"], summary["daemon_cpu"] = loop_busy, all_busy
    return row, summary


def step_profile(ctx: Ctx, progress: Callable[[str], None]) -> None:
    import profile_append

    n = 16 if 16 in ctx.cfg.concurrency else max(ctx.cfg.concurrency)
    if profile_append.pyspy() is None:
        ctx.res["skipped"].append("profile: py-spy is not installed (bench/requirements.txt)")
        return
    progress(f"profile: py-spy on the daemon, unary Append from {n} runs")
    row, summary = _profile_pass(ctx, n, native=False, rate=250, tag="py")
    summary["runs"] = n
    summary["intro"] = (
        f"`py-spy record --threads --nonblocking --rate 250` (on-CPU samples only) attached "
        f"to the daemon for {ctx.cfg.profile_s:.0f} s while {n} runs appended with unary "
        f"Append (a separate pass, not the measured one: {row['rate']:,.0f} rec/s, p50 "
        f"{row['p50_ms']:.2f} ms under the sampler). During it the daemon's event-loop (main) "
        f"thread used {summary['loop_busy'] * 100:.0f}% of a core and the whole daemon "
        f"{summary['daemon_cpu'] * 100:.0f}% (from /proc, of {os.cpu_count()} cores shared "
        "with the clients). Shares below are of the event-loop thread's on-CPU samples; time "
        "in C code with no Python frame above it (uvloop's loop, the gRPC core, syscalls) is "
        "attributed to the last Python frame, `Runner.run`: the second pass below splits it. "
        "The file writer threads (the store's shared I/O pool, doing write + fdatasync) are "
        "listed apart."
    )
    progress("profile: second pass with native (C) frames")
    try:
        if ctx.cfg.quick:
            raise _Skip
        nrow, native = _profile_pass(ctx, n, native=True, rate=50, tag="native")
        summary["native"] = {
            "categories": native["categories"],
            "intro": (
                "Second pass, `py-spy record --threads --native --rate 50`: C frames included, "
                "each sample attributed by its innermost frame (a syscall or libc call counts "
                "as such). py-spy pauses the daemon for every native sample, which slows it "
                f"({nrow['rate']:,.0f} rec/s, p50 {nrow['p50_ms']:.2f} ms under this sampler), "
                "so read the shares, not the rate."
            ),
        }
    except _Skip:
        ctx.res["skipped"].append("profile: the native-frames pass (full runs only)")
    except Exception as exc:
        ctx.res["errors"].append(f"profile (native pass): {str(exc)[-300:]}")
    progress("profile: per-record cost of each append step (in-process)")
    summary["stages"] = profile_append.stage_costs(300 if ctx.cfg.quick else 2000)
    ctx.res["profile"] = summary


def step_whatif(ctx: Ctx, progress: Callable[[str], None]) -> None:
    """The daemon with the previous validator (jsonschema) and with none, same workloads."""
    from latency_anatomy import WhatIfDaemon

    n = 16 if 16 in ctx.cfg.concurrency else max(ctx.cfg.concurrency)
    rows: list[dict[str, Any]] = []
    for mode in ("jsonschema", "off"):
        base = ctx.work / f"whatif-{mode}"
        base.mkdir()
        with WhatIfDaemon(mode, base) as d:
            for form in ("batch",) if ctx.cfg.quick else ("unary", "batch"):
                progress(f"what-if: validation {mode}, {form} Append, {n} runs")
                r = run_agents(ctx, form, n, d.target, tag=f"w{mode}")
                r.pop("cdf", None)
                rows.append({"mode": mode, "form": form, "runs": n, **r})
    ctx.res["whatif"] = rows


def step_anatomy(ctx: Ctx, progress: Callable[[str], None]) -> None:
    """One run, sequential calls: the daemon with its store, then its servicer, swapped out."""
    from latency_anatomy import anatomy

    ctx.res["anatomy"] = anatomy(ctx.work, 200 if ctx.cfg.quick else 1000, progress)


def step_alternatives(ctx: Ctx, progress: Callable[[str], None]) -> None:
    import importlib.util

    need = {
        "sqlitesaver": ("langgraph.checkpoint.sqlite", "langgraph-checkpoint-sqlite"),
        "sqlitesession": ("agents.memory", "openai-agents"),
    }
    for system in ("sqlite", "sqlitesaver", "sqlitesession"):
        if system in need:
            mod, dist = need[system]
            try:
                found = importlib.util.find_spec(mod.split(".")[0]) is not None
                if found:
                    found = importlib.util.find_spec(mod) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                ctx.res["skipped"].append(
                    f"{system}: package `{dist}` is not installed "
                    "(`.venv/bin/pip install -r bench/requirements.txt`)"
                )
                continue
        for n in ctx.cfg.alt_concurrency:
            progress(f"alternatives: {system}, {n} agent process(es)")
            try:
                ctx.res["rows"][f"{system}@{n}"] = run_agents(ctx, system, n)
            except Exception as exc:
                ctx.res["rows"][f"{system}@{n}"] = {"error": str(exc)}
                ctx.res["errors"].append(f"{system} x{n}: {str(exc)[-300:]}")


def step_jetstream(ctx: Ctx, progress: Callable[[str], None]) -> None:
    from tests.daemon import Daemon
    from tests.nats_server import NatsServer, create_stream

    progress("JetStream: starting nats-server (sync_interval: always)")
    base = ctx.work / "jetstream"
    base.mkdir()
    server = NatsServer(base / "nats", name="bench")
    server.start()
    try:
        asyncio.run(create_stream(server.url, "BENCH", "bench"))
        conc = [n for n in ctx.cfg.concurrency if n <= 16]
        with Daemon(base, "jetstream", "--nats-url", server.url, "--stream", "BENCH") as d:
            for n in conc:
                progress(f"JetStream: daemon unary Append, {n} run(s)")
                row = run_agents(ctx, "unary", n, d.target, tag="js")
                row["name"] = "js-unary"
                ctx.res["rows"][f"js-unary@{n}"] = row
        for n in conc:
            progress(f"JetStream: direct nats-py publish, {n} in flight")
            ctx.res["rows"][f"nats@{n}"] = run_agents(
                ctx, "nats", n, server.url, stream_prefix="bench.direct"
            )
    finally:
        server.stop()


def step_resume(ctx: Ctx, progress: Callable[[str], None]) -> None:
    import resume_mem

    from tests.daemon import Daemon

    cfg = ctx.cfg
    base = ctx.work / "resume"
    data = base / "data"
    data.mkdir(parents=True)
    sizes = sorted(set(cfg.open_sizes) | {s for s in cfg.history_sizes if s <= 100_000})
    progress(f"resume: writing runs of {', '.join(f'{s:,}' for s in sizes)} records")
    built = resume_mem.build_runs(data, {f"r{s}": s for s in sizes})
    rs: dict[str, Any] = {"open": [], "history": [], "notes": [], "page": resume_mem.PAGE}
    rs["build_s"] = built
    ctx.res["resume"] = rs
    big = max(cfg.history_sizes)
    largest = f"r{max(cfg.open_sizes)}"
    # The first Open response carries the whole conversation: the daemon's default
    # --max-message-bytes (64 MiB) cannot send it for a 100k-record run. Measure with room,
    # and record what a default daemon answers.
    roomy = ("--max-message-bytes", "1GiB")
    with Daemon(base, "file", *roomy, data_dir=data) as d:
        progress("resume: Open (resume) of each run")
        rs["open"] = resume_mem.open_times(
            d.target, d.pid, data, {f"r{s}": s for s in cfg.open_sizes}, cfg.reps
        )
        progress(f"resume: Open (resume) of each run with a {OPEN_WINDOW}-message window")
        rs["open_window"] = resume_mem.open_times(
            d.target, d.pid, data, {f"r{s}": s for s in cfg.open_sizes}, cfg.reps, OPEN_WINDOW
        )
    small_hist = sorted(x for x in cfg.history_sizes if x <= 100_000)
    rs["history"] = history_runs(ctx, progress, base, data, roomy, small_hist)
    with Daemon(base, "file", data_dir=data) as d:
        progress(f"resume: Open of {largest} on a daemon with default limits")
        rs["default_limits_open"] = {
            "run": largest,
            "result": resume_mem.open_probe(d.target, largest),
        }
    mid = 10_000 if 10_000 in cfg.open_sizes else max(cfg.open_sizes)
    progress(f"resume: where an Open of {mid:,} records spends its time (in-process)")
    rs["open_breakdown"] = {"records": mid, **resume_mem.open_breakdown(data, f"r{mid}")}
    if big > 100_000:
        # estimate from the largest measured run: building, the first History call (a full
        # fold) and the first writer's Open (another) scale ~linearly
        measured = max(rs["history"], key=lambda h: h["messages"])
        per_msg_s = (measured["first_ms"] + measured["index_ms"]) / 1e3 / measured["messages"]
        build_per = built[f"r{max(sizes)}"] / max(sizes)
        estimate = big * (per_msg_s * 1.3 + build_per) + 15
        # keep room for the report; the many-leases step is outside the bound
        left = cfg.budget_s - ctx.elapsed() + ctx.res["step_s"].get("memory", 0.0) - 20
        if estimate > left:
            rs["notes"].append(
                f"The {big:,}-message History run was **not built**: from the "
                f"{measured['messages']:,}-message measurement it would take ~{estimate:.0f} s "
                "(write, the first History call and the first writer's Open) and "
                f"{left:.0f} s were left of the time bound. "
                "The History goal below compares the largest size measured instead."
            )
            return
        progress(f"resume: writing a {big:,}-record run (file backend writer)")
        built.update(resume_mem.build_runs(data, {f"r{big}": big}))
        rs["history"] += history_runs(ctx, progress, base, data, roomy, [big], reps=1)
        with contextlib.suppress(OSError):
            import shutil

            shutil.rmtree(data / "sessions" / f"r{big}")


def history_runs(
    ctx: Ctx,
    progress: Callable[[str], None],
    base: Path,
    data: Path,
    flags: tuple[str, ...],
    sizes: list[int],
    reps: int | None = None,
) -> list[dict[str, Any]]:
    """History tail pages of runs ``r<size>`` (``size - 1`` messages), after the run's first
    fold (the goal's terms). These runs are written outside the daemon, so a fresh daemon's
    first History folds each in full (``first_ms``); reads never write, so that read leaves
    nothing behind and every restarted daemon would pay it again. The run is indexed by its
    first writer: one Open (resume, a window) and its release, whose lease end saves the fold
    snapshot and marks, as every run written through the daemon has (``index_ms``). Then a
    restarted daemon (nothing of the run in its memory, its index on disk) serves the measured
    tail page, and repeats it."""
    import grpc
    import resume_mem
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    from tests.daemon import Daemon

    async def index(target: str, run_id: str) -> float:
        t0 = time.perf_counter()
        opts = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]
        async with grpc.aio.insecure_channel(target, options=opts) as ch:
            stub = pbg.JournalServiceStub(ch)
            await resume_mem._open_once(stub, pb, run_id, OPEN_WINDOW)
            await resume_mem._wait_released(stub, pb, run_id)
        # the lease end saves the view index last, after the run is listed free (at 1M
        # messages it sanitizes every page, ~20 s here): a daemon stopped before then loses it
        saved = data / "sessions" / run_id / "checkpoints" / "view-index.json"
        for _ in range(3000):  # <= 300 s
            if saved.exists():
                break
            await asyncio.sleep(0.1)
        return (time.perf_counter() - t0) * 1e3

    first: dict[int, float] = {}
    indexed: dict[int, float] = {}
    with Daemon(base, "file", *flags, data_dir=data) as d:
        for s in sizes:
            progress(f"resume: first History of the {s:,}-message run (a full fold)")
            first[s] = resume_mem.history_tail(d.target, f"r{s}", s - 1, 1)["page_ms"]
            progress(f"resume: the {s:,}-message run's first writer indexes it (Open, release)")
            indexed[s] = asyncio.run(index(d.target, f"r{s}"))
    out = []
    with Daemon(base, "file", *flags, data_dir=data) as d:
        for s in sizes:
            progress(f"resume: History tail page, {s:,} messages, restarted daemon")
            h = resume_mem.history_tail(d.target, f"r{s}", s - 1, reps or ctx.cfg.reps)
            h["first_ms"] = first[s]
            h["index_ms"] = indexed[s]
            out.append(h)
    return out


def step_memory(ctx: Ctx, progress: Callable[[str], None]) -> None:
    import many_leases

    base = ctx.work / "memory"
    base.mkdir()
    progress(f"memory: daemon with {ctx.cfg.leases:,} open leases, 16 runs appending beside")
    ctx.res["memory"] = many_leases.measure(
        ctx.cfg.leases, ctx.cfg.seconds, holders=4, work=base, procs=ctx.cfg.procs
    )
    progress(f"memory: the same {ctx.cfg.leases:,} leases over one Leases stream per connection")
    (base / "multiplexed").mkdir()
    ctx.res["memory_multiplexed"] = many_leases.measure(
        ctx.cfg.leases,
        ctx.cfg.seconds,
        holders=4,
        work=base / "multiplexed",
        procs=ctx.cfg.procs,
        mode="multiplexed",
    )


STEPS: list[tuple[str, Callable[[Ctx, Callable[[str], None]], None], int]] = [
    ("limits", step_limits, 2),
    ("inproc", step_inproc, 1),
    ("daemon", step_daemon, 3),
    ("alternatives", step_alternatives, 3),
    ("jetstream", step_jetstream, 2),
    ("memory", step_memory, 1),
    ("profile", step_profile, 1),
    ("whatif", step_whatif, 1),
    ("anatomy", step_anatomy, 1),
    ("resume", step_resume, 3),
]


def run(ctx: Ctx) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    steps = [s for s in STEPS if s[0] not in ctx.cfg.skip]
    for name, _, _ in STEPS:
        if name in ctx.cfg.skip:
            ctx.res["skipped"].append(f"{name}: skipped on the command line (--skip)")
    total = sum(w for _, _, w in steps)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("starting", total=total)
        for name, fn, weight in steps:

            def progress(msg: str) -> None:
                bar.update(task, description=msg)

            t0 = time.monotonic()
            try:
                fn(ctx, progress)
            except Exception as exc:
                console.print(f"[red]{name} failed:[/red] {exc}")
                ctx.res["errors"].append(f"{name}: {type(exc).__name__}: {str(exc)[-400:]}")
                (ctx.work / f"{name}.traceback").write_text(traceback.format_exc())
            ctx.res["step_s"][name] = time.monotonic() - t0
            bar.advance(task, weight)
        bar.update(task, description=f"done in {ctx.elapsed():.0f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CI smoke: < 2 minutes")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="report dir (default docs/)")
    ap.add_argument("--dir", type=Path, default=None, help="parent of the work dir (the disk)")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per workload")
    ap.add_argument(
        "--skip",
        default="",
        help="comma-separated steps to leave out: " + ",".join(s[0] for s in STEPS),
    )
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    ap.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="only regenerate the report from a results.json of an earlier run",
    )
    args = ap.parse_args(argv)
    import report

    if args.from_json is not None:
        res = json.loads(args.from_json.read_text())
        print(report.write(res, args.out))
        return 0
    cfg = Config.make(args.quick, args.seconds, {s for s in args.skip.split(",") if s})
    work = Path(tempfile.mkdtemp(prefix="journald-bench-", dir=args.dir))
    cmd = ".venv/bin/python bench/run_all.py" + (" --quick" if args.quick else "")
    if args.seconds is not None:
        cmd += f" --seconds {args.seconds}"
    if args.skip:
        cmd += f" --skip {shlex.quote(args.skip)}"
    if args.out.resolve() != (ROOT / "docs").resolve():
        cmd += f" --out {shlex.quote(str(args.out))}"
    ctx = Ctx(cfg, work)
    ctx.res = {
        "command": cmd + "    # or: make bench",
        "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "load_before": common.loadavg(),
        "busy_before": common.busy_processes(),
        "facts": common.machine_facts(work),
        "config": {
            "quick": cfg.quick,
            "seconds": cfg.seconds,
            "concurrency": cfg.concurrency,
            "alt_concurrency": cfg.alt_concurrency,
            "procs": cfg.procs,
            "reps": cfg.reps,
        },
        "rows": {},
        "skipped": [],
        "errors": [],
        "limit_notes": [],
        "step_s": {},
    }
    try:
        run(ctx)
    finally:
        ctx.res["duration_s"] = ctx.elapsed()
        ctx.res["load_after"] = common.loadavg()
        ctx.res["busy_after"] = common.busy_processes()
        path = report.write(ctx.res, args.out)
        # the raw results (for --from-json): beside the report, except in docs/ (temp dir)
        docs = args.out.resolve() == (ROOT / "docs").resolve()
        keep = (
            Path(tempfile.gettempdir()) / f"{work.name}-results.json"
            if docs
            else args.out / "results.json"
        )
        keep.write_text(common.dump(ctx.res))
        print(f"report: {path}\nresults: {keep}")
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
