"""The daemon with many open leases: its threads, RSS and open fds, and whether a 16-run append
benchmark beside them runs as fast as without them.

    .venv/bin/python bench/many_leases.py [--leases 10000] [--seconds 3] [--quick] [--json OUT]
        [--mode per-run|multiplexed|both]

One daemon (file backend, temp data dir; it raises its soft RLIMIT_NOFILE to the hard limit,
and each lease holds two descriptors: where the hard limit is too low for ``--leases``, the
leases are capped to what fits and the output says so; the shipped systemd unit sets
``LimitNOFILE=65536``) does, in order:
1. idle: threads, RSS, fds;
2. the 16-run append benchmark (bench/agent_procs.py, unary Append, 16 runs), alone;
3. ``--leases`` new runs opened with a lease each, from ``--holders`` client processes (one
   asyncio loop each, several channels); threads, RSS, fds with them all held. ``--mode
   per-run``: one ``Open`` stream per lease; ``multiplexed``: the same leases over one
   ``Leases`` stream per holder connection (docs/protocol.md#many-leases-on-one-stream);
   ``both`` (the default): the whole sequence once per mode, each on a new daemon, one after
   the other in this one run;
4. the daemon's CPU (/proc utime + stime) over ``--seconds`` while the leases are merely
   held; the same 16-run benchmark beside them;
5. the leases ended (once the daemon has closed their journals); the benchmark alone again;
   threads, RSS, fds.
The ratio compares step 4 with the mean of steps 2 and 5 (the disk's weather drifts).
Goals (issue 14): threads <= 64, RSS <= 300 MB, ratio within 1.2x. ``--quick``: 200 leases,
short benchmarks (the bench smoke test). Every process is stopped by its own pid.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT

BENCH = Path(__file__).resolve().parent
FDS_PER_LEASE = 2  # the run's lock file and its journal
FDS_SPARE = 400  # the daemon's own, the benchmark's runs and connections
CHANNELS = 16  # per holder process: streams spread over several connections
OPENS_IN_FLIGHT = 64  # per holder process
HOLD_TIMEOUT_S = 900.0
CLOSE_TIMEOUT_S = 300.0


def proc_figures(pid: int) -> dict[str, float]:
    """Threads, RSS (MiB) and open fds of a process, from /proc."""
    out: dict[str, float] = {"fds": len(list(Path(f"/proc/{pid}/fd").iterdir()))}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            out["rss_mb"] = int(line.split()[1]) / 1024
        elif line.startswith("Threads:"):
            out["threads"] = int(line.split()[1])
    return out


# --- a holder process: opens its share of the leases and keeps them until stdin closes ------


def open_request(pb: Any, i: int) -> Any:
    from journald.server.convert import fingerprint_to_pb
    from tests.builders import FP

    return pb.OpenRequest(
        run_id=f"lease-{i}",
        mode=pb.OPEN_MODE_CREATE,
        fingerprint=fingerprint_to_pb(FP),
        prompt_json=b"[]",
    )


async def hold_multiplexed(target: str, first: int, count: int) -> None:
    """The leases of ``hold``, over one ``Leases`` stream per channel (acquires pipelined)."""
    import grpc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    channels = [grpc.aio.insecure_channel(target) for _ in range(CHANNELS)]
    done = asyncio.Event()
    calls: list[Any] = []

    async def stream(channel: Any, ids: list[int]) -> None:
        async def requests() -> Any:
            for i in ids:
                yield pb.LeasesRequest(request_id=i + 1, acquire=open_request(pb, i))
            await done.wait()  # the request side stays open: the leases live with the stream

        call = pbg.JournalServiceStub(channel).Leases(requests())
        calls.append(call)
        for _ in ids:
            answer = await call.read()
            if not answer.HasField("lease"):
                raise RuntimeError(f"acquire refused: {answer}")

    share = [list(range(first + k, first + count, CHANNELS)) for k in range(CHANNELS)]
    try:
        await asyncio.gather(*(stream(ch, ids) for ch, ids in zip(channels, share, strict=True)))
        print(f"held {count}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        done.set()
        for c in calls:
            c.cancel()
        for ch in channels:
            await ch.close(None)


async def hold(target: str, first: int, count: int) -> None:
    import grpc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    channels = [grpc.aio.insecure_channel(target) for _ in range(CHANNELS)]
    calls: list[Any] = []
    gate = asyncio.Semaphore(OPENS_IN_FLIGHT)

    async def one(i: int) -> None:
        stub = pbg.JournalServiceStub(channels[i % CHANNELS])
        req = open_request(pb, i)
        async with gate:
            call = stub.Open(req)
            calls.append(call)
            await call.read()

    try:
        await asyncio.gather(*(one(i) for i in range(first, first + count)))
        print(f"held {count}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        for c in calls:
            c.cancel()
        for ch in channels:
            await ch.close(None)


class Holders:
    """``n`` holder processes sharing ``leases`` between them."""

    def __init__(self, target: str, leases: int, n: int, mode: str = "per-run") -> None:
        share = [leases // n + (1 if i < leases % n else 0) for i in range(n)]
        firsts = [sum(share[:i]) for i in range(n)]
        self.procs = [
            subprocess.Popen(
                [PY, str(Path(__file__).resolve()), "--hold", target, str(f), str(c), mode],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=ROOT,
            )
            for f, c in zip(firsts, share, strict=True)
            if c
        ]

    def wait_held(self) -> None:
        for p in self.procs:
            assert p.stdout is not None
            line = p.stdout.readline().decode().strip()
            if not line.startswith("held"):
                raise RuntimeError(f"a lease holder (pid {p.pid}) failed: exit {p.wait(30)}")

    def release(self) -> None:
        for p in self.procs:
            if p.stdin is not None:
                with contextlib.suppress(OSError):
                    p.stdin.close()
        for p in self.procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


PY = sys.executable
MODES = {"per-run": hold, "multiplexed": hold_multiplexed}
"""How a holder process holds its leases: an Open stream each, or a Leases stream per
connection."""


def measure(
    leases: int,
    seconds: float,
    holders: int,
    work: Path,
    procs: int = 4,
    mode: str = "per-run",
    tree: Path | None = None,
) -> dict[str, Any]:
    """The whole sequence of the module docstring, on a new daemon under ``work``; ``mode``:
    ``per-run`` (an Open stream per lease) or ``multiplexed`` (a Leases stream per holder
    connection); ``tree``: an older tree whose daemon to start (``--before``)."""
    from run_all import Config, Ctx, run_agents

    from tests.daemon import Daemon

    cfg = Config.make(quick=True, seconds=seconds, skip=set())
    cfg.procs = procs
    ctx = Ctx(cfg, work)
    out: dict[str, Any] = {"leases": leases, "holders": holders, "seconds": seconds, "mode": mode}
    (work / "daemon").mkdir()
    with Daemon(work / "daemon", "file", cwd=tree) as d:
        out["nofile_soft"] = _soft_nofile(d.pid)
        fits = (out["nofile_soft"] - FDS_SPARE) // FDS_PER_LEASE
        if leases > fits:
            out["capped_from"], leases = leases, fits
            out["leases"] = leases
        out["idle"] = proc_figures(d.pid)
        out["alone_before"] = run_agents(ctx, "unary", 16, d.target, tag="alone-before")
        group = Holders(d.target, leases, holders, mode)
        try:
            t0 = time.perf_counter()
            group.wait_held()
            out["open_s"] = time.perf_counter() - t0
            out["held"] = proc_figures(d.pid)
            out["held_cpu_s"] = daemon_cpu_over(d.pid, seconds)
            out["beside"] = run_agents(ctx, "unary", 16, d.target, tag="beside")
            out["held_after_bench"] = proc_figures(d.pid)
        finally:
            group.release()
        # the daemon closes ended leases in the background (marks, snapshot, journal): the
        # benchmark "after" runs once they are closed, so it measures the daemon alone again
        t0 = time.perf_counter()
        out["closed"] = wait_closed(d.pid, CLOSE_TIMEOUT_S)
        out["close_s"] = time.perf_counter() - t0
        out["alone_after"] = run_agents(ctx, "unary", 16, d.target, tag="alone-after")
        out["after"] = proc_figures(d.pid)
    alone = (out["alone_before"]["rate"] + out["alone_after"]["rate"]) / 2
    out["alone_rate"] = alone
    out["ratio"] = alone / out["beside"]["rate"] if out["beside"]["rate"] else float("nan")
    return out


def daemon_cpu_over(pid: int, seconds: float) -> float:
    """The CPU seconds (user + system, /proc) the daemon spends in ``seconds`` while its
    leases are merely held: what an idle lease costs on the loop, whatever the load."""

    def cpu_s() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    before = cpu_s()
    time.sleep(seconds)  # the window measured: nothing is sent to the daemon meanwhile
    return cpu_s() - before


def wait_closed(pid: int, timeout_s: float) -> bool:
    """Whether the daemon's descriptors fell back below ``FDS_SPARE`` (its leases' journals
    closed) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while proc_figures(pid)["fds"] >= FDS_SPARE:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)  # poll interval of this bounded wait
    return True


def _soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    return -1


def show(m: dict[str, Any]) -> str:
    def fig(name: str, f: dict[str, float]) -> str:
        return (
            f"  {name:<34} threads {f['threads']:>4.0f}  RSS {f['rss_mb']:7.1f} MB  "
            f"fds {f['fds']:>6.0f}"
        )

    def bench(name: str, r: dict[str, Any]) -> str:
        return (
            f"  {name:<34} {r['rate']:8.0f} rec/s  p50 {r['p50_ms']:6.2f} ms  "
            f"p99 {r['p99_ms']:6.2f} ms"
        )

    capped = ""
    if "capped_from" in m:
        capped = (
            f" (capped from {m['capped_from']:,}: the daemon's open-files limit is "
            f"{m['nofile_soft']:,} and each lease holds {FDS_PER_LEASE})"
        )
    return "\n".join(
        [
            f"daemon with {m['leases']:,} open leases{capped}, {m.get('mode', 'per-run')} "
            f"({m['holders']} holder processes, "
            f"opened in {m['open_s']:.1f} s; RLIMIT_NOFILE soft {m['nofile_soft']})",
            fig("idle", m["idle"]),
            fig(f"{m['leases']:,} leases held", m["held"]),
            f"  daemon CPU while they are held, no calls: {m['held_cpu_s']:.2f} s in "
            f"{m['seconds']:.0f} s",
            fig("leases held, after the benchmark", m["held_after_bench"]),
            fig(f"leases ended, closed in {m['close_s']:.1f} s", m["after"]),
            "16-run unary Append benchmark (bench/agent_procs.py):",
            bench("alone, before the leases", m["alone_before"]),
            bench(f"beside {m['leases']:,} leases", m["beside"]),
            bench("alone, after the leases ended", m["alone_after"]),
            f"  alone / beside: x{m['ratio']:.2f} (goal <= 1.2)",
            f"goals: threads {m['held_after_bench']['threads']:.0f} <= 64, "
            f"RSS {m['held_after_bench']['rss_mb']:.0f} MB <= 300, ratio {m['ratio']:.2f} <= 1.2",
        ]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leases", type=int, default=10_000)
    ap.add_argument("--holders", type=int, default=4, help="client processes holding leases")
    ap.add_argument("--seconds", type=float, default=3.0, help="per append benchmark")
    ap.add_argument("--quick", action="store_true", help="200 leases, 0.5 s benchmarks")
    ap.add_argument("--dir", type=Path, default=None, help="parent of the work dir (the disk)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--mode", choices=[*MODES, "both"], default="both", help="how leases are held")
    ap.add_argument(
        "--before",
        type=Path,
        default=None,
        help="an older tree (git archive, its journald_proto beside it): its daemon runs the "
        "per-run sequence first, in this one run (it may predate the Leases RPC)",
    )
    ap.add_argument(
        "--hold", nargs=4, metavar=("TARGET", "FIRST", "COUNT", "MODE"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.hold:
        target, first, count, mode = args.hold
        holding = MODES[mode](target, int(first), int(count))
        asyncio.run(asyncio.wait_for(holding, HOLD_TIMEOUT_S))
        return 0
    leases, seconds = (200, 0.5) if args.quick else (args.leases, args.seconds)
    modes = list(MODES) if args.mode == "both" else [args.mode]
    figures = {}
    if args.before is not None:
        with tempfile.TemporaryDirectory(prefix="journald-leases-", dir=args.dir) as tmp:
            figures["per-run (before)"] = measure(
                leases, seconds, args.holders, Path(tmp), tree=args.before.resolve()
            )
        print("before:", show(figures["per-run (before)"]), flush=True)
    for mode in modes:  # one after the other, each on a new daemon, in this one run
        with tempfile.TemporaryDirectory(prefix="journald-leases-", dir=args.dir) as tmp:
            figures[mode] = measure(leases, seconds, args.holders, Path(tmp), mode=mode)
        print(show(figures[mode]), flush=True)
    if "per-run" in figures and "multiplexed" in figures:
        print(compare(figures["per-run"], figures["multiplexed"]))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def compare(per_run: dict[str, Any], mux: dict[str, Any]) -> str:
    """The two modes side by side (held, after the benchmark beside them)."""
    a, b = per_run["held_after_bench"], mux["held_after_bench"]
    rows = [
        "per-run Open streams vs one Leases stream per holder connection:",
        f"  {'':<24} {'per-run':>10} {'multiplexed':>12}",
        f"  {'RSS (MB)':<24} {a['rss_mb']:>10.1f} {b['rss_mb']:>12.1f}",
        f"  {'threads':<24} {a['threads']:>10.0f} {b['threads']:>12.0f}",
        f"  {'open fds':<24} {a['fds']:>10.0f} {b['fds']:>12.0f}",
        f"  {'alone / beside':<24} {per_run['ratio']:>10.2f} {mux['ratio']:>12.2f}",
        f"  {'opened in (s)':<24} {per_run['open_s']:>10.1f} {mux['open_s']:>12.1f}",
        f"  {'held CPU (s)':<24} {per_run['held_cpu_s']:>10.2f} {mux['held_cpu_s']:>12.2f}",
    ]
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
