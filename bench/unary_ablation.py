"""Where a unary Append's daemon CPU goes, by ablation (issue 27, items 1 and 5): the daemon
started once per variant with one piece switched off (a patch applied in the daemon process
before it starts; never shipped), every variant measured in turn, several rounds interleaved,
beside the no-op echo (bench/echo_server.py) in the same run:

    .venv/bin/python bench/unary_ablation.py                       # 3 rounds of 4 s a variant
    .venv/bin/python bench/unary_ablation.py --variants full,no-write --rounds 5
    .venv/bin/python bench/unary_ablation.py --strace 2000         # syscalls per call too
    .venv/bin/python bench/unary_ablation.py --in-process 1000     # the servicer's Python alone

The client (this process) drives ``--runs`` runs at once over one channel, one ~1 KB record per
``Append``, through a raw method (the request serialized, the response left as bytes), so its
side is the same against every variant and against the echo, which is sent the same bytes.
CPU is utime + stime per thread of the server from ``/proc`` over the window, divided by the
calls acknowledged in it; wake-ups are the threads' voluntary context switches (a thread that
blocks and is woken again), the figure that CPU per call follows. ``--strace N`` attaches
``strace -c -f`` to each server for N calls after the CPU rounds (CPU under strace means
nothing; the counts do).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import record_pb

APPEND = "/journald.v1.JournalService/Append"


# --- the daemon side: one patch per variant -----------------------------------------------


def _replace(owner: Any, name: str, value: Any) -> None:
    """``owner.name = value``, refused when ``owner`` has no ``name``: a patch whose target
    was renamed or moved must stop the variant's daemon, not measure the shipped code."""
    if not hasattr(owner, name):
        raise SystemExit(f"ablation patch: {owner!r} has no {name!r} any more")
    setattr(owner, name, value)


def _null_cm(*args: Any, **kwargs: Any) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def _echo_in_daemon() -> None:
    """Append is answered by a raw-bytes echo registered in the daemon's own server: what the
    daemon's process, server options and services cost beside the echo server's."""
    import grpc

    from journald.server import edge

    handler = edge.Edge.handler

    def patched(self: Any, method: Any) -> Any:
        if method.name != "Append":
            return handler(self, method)

        async def echo(request: bytes, context: Any) -> bytes:
            return request

        return grpc.unary_unary_rpc_method_handler(echo)

    _replace(edge.Edge, "handler", patched)


def _noop() -> None:
    """Append decoded, answered an empty AppendResponse through the edge (protobuf both ways,
    the error edge, the budgets): what any servicer of journald's messages pays."""
    from journald_proto import journal_pb2 as pb

    from journald.server import service

    async def append_noop(self: Any, request: Any, context: Any = None) -> Any:
        return pb.AppendResponse()

    _replace(service.JournalService, "_append", append_noop)


def _no_budget() -> None:
    from journald.server import edge, service

    _replace(edge, "call_budget", _null_cm)
    _replace(service.JournalService, "_in_flight", _null_cm)


def _no_admit_fold() -> None:
    from journald.writer import run_writer

    _replace(run_writer, "admit", lambda state, records: None)
    _replace(run_writer.RunWriter, "_fold", lambda self, new, pages: None)


def _no_schema() -> None:
    from journald.writer import gate

    _replace(gate, "validate_record", lambda rec, plain=False: None)


def _no_seal() -> None:
    from journald.writer import run_writer

    async def seal(self: Any) -> None:
        return None

    _replace(run_writer.RunWriter, "seal", seal)


def _no_fdatasync() -> None:
    from journald.storage import seam

    _replace(seam.Disk, "fdatasync", lambda self, fd: 0.0)


def _no_fstat() -> None:
    """The write path's check that the journal is still linked answered without ``fstat``:
    one system call, and one hand-back of the interpreter lock, less per write."""
    from journald.storage import seam

    stat = seam.Disk.fstat
    cached: dict[int, os.stat_result] = {}

    def fstat(self: Any, fd: int) -> os.stat_result:
        if fd not in cached:
            cached[fd] = stat(self, fd)
        return cached[fd]

    _replace(seam.Disk, "fstat", fstat)


def _dsync_write() -> None:
    """The group's write and its data sync as one system call (``pwritev`` with
    ``RWF_DSYNC``): the durability of write + fdatasync, with two hand-backs of the
    interpreter lock fewer per write (not shipped: the fault seams name the two steps)."""
    from journald.storage import seam

    def append_durably(self: Any, fd: int, data: bytes, offset: int) -> tuple[int, float]:
        n = os.pwritev(fd, [data], offset, os.RWF_DSYNC)
        assert n == len(data)
        return offset + n, 0.0

    _replace(seam.Disk, "append_durably", append_durably)


def _inline_write() -> None:
    """The write + fdatasync run on the event loop itself: no thread hop (the loop blocks
    meanwhile, which costs wall time, not CPU)."""
    from journald.storage import io_pool

    async def run(self: Any, fn: Any, *args: Any) -> Any:
        return fn(*args)

    _replace(io_pool.IOLane, "run", run)


def _no_write() -> None:
    """The group is acknowledged as if written: no thread, no write (the flusher task stays)."""
    from journald.storage.file import journal

    async def write_unstored(self: Any, new: Any) -> None:
        return None

    _replace(journal.FileJournal, "_write_group", write_unstored)


def _answer_first() -> None:
    """The ack is sent once the append is queued, before its write (never shipped: it breaks
    the durability contract); the write still happens. The handler never waits on the flusher."""
    from journald.storage.base import AppendResult
    from journald.writer import run_writer

    async def durable(self: Any) -> list[Any]:
        return [AppendResult(r.seq, r.hash, self.durability) for r in self.new]

    _replace(run_writer.Ticket, "durable", durable)


def _switch_5ms() -> None:
    from journald.server import daemon

    _replace(daemon, "SWITCH_INTERVAL_S", 0.005)  # CPython's default; the daemon sets 1 ms


def _switch(seconds: float) -> Callable[[], None]:
    def patch() -> None:
        from journald.server import daemon

        _replace(daemon, "SWITCH_INTERVAL_S", seconds)

    return patch


def _gc_default() -> None:
    from journald.server import daemon

    _replace(daemon, "tune_gc", lambda: None)


def _no_options() -> None:
    """None of the connection-bounding gRPC options (fair shares): the echo server's options."""
    from journald.server import daemon

    _replace(daemon, "server_options", lambda shares: [])


def _servicer_off() -> None:
    """Every piece of the servicer's own path that can go: budgets, admission and fold,
    schema, sealing, the write. What is left: decode, gate, plan, queue, flusher, ack."""
    for p in (_no_budget, _no_admit_fold, _no_schema, _no_seal, _no_write):
        p()


VARIANTS: dict[str, tuple[str, Callable[[], None] | None]] = {
    "full": ("the daemon as shipped", None),
    "echo-in-daemon": ("Append answered by a raw echo inside the daemon", _echo_in_daemon),
    "noop": ("Append decoded, answered empty through the edge", _noop),
    "no-budget": ("no per-peer budgets (calls, bytes in flight)", _no_budget),
    "no-admit-fold": ("no admission, no fold", _no_admit_fold),
    "no-schema": ("no schema check", _no_schema),
    "no-seal": ("no message-page seal check", _no_seal),
    "no-fdatasync": ("write without fdatasync", _no_fdatasync),
    "no-fstat": ("the write's link check without fstat", _no_fstat),
    "dsync-write": ("write + data sync as one pwritev(RWF_DSYNC)", _dsync_write),
    "inline-write": ("write + fdatasync on the loop (no thread hop)", _inline_write),
    "no-write": ("no write at all (acked as written)", _no_write),
    "answer-first": ("acked when queued, before the write", _answer_first),
    "switch-5ms": ("interpreter switch interval 5 ms (daemon: 1 ms)", _switch_5ms),
    "switch-200us": ("interpreter switch interval 0.2 ms", _switch(0.0002)),
    "switch-50us": ("interpreter switch interval 0.05 ms", _switch(0.00005)),
    "gc-default": ("CPython's default GC thresholds", _gc_default),
    "no-options": ("no fair-share gRPC server options", _no_options),
    "servicer-off": ("budget, admit, fold, schema, seal and write all off", _servicer_off),
    "memory": ("memory backend", None),
    "io-threads-1": ("one writer thread (--io-threads 1)", None),
    "aio-off": ("fdatasync on a writer thread (--aio-sync off: the path before AIO)", None),
}
_THREADS = ["--aio-sync", "off"]
ARGS = {
    "memory": ["--backend", "memory"],
    "io-threads-1": ["--io-threads", "1", *_THREADS],
    "aio-off": _THREADS,
    # the patches of the writer threads' path measure that path
    "no-fdatasync": _THREADS,
    "no-fstat": _THREADS,
    "dsync-write": _THREADS,
    "inline-write": _THREADS,
}
"""Daemon flags of the variants that are a flag, not a patch (or that a patch needs)."""
DEFAULT_VARIANTS = ",".join(VARIANTS)


def serve_variant(variant: str) -> int:
    patch = VARIANTS[variant][1]
    if patch is not None:
        patch()
    from journald.program import main as journald_main

    sys.argv[0] = "journald"
    return int(journald_main() or 0)


# --- the host ------------------------------------------------------------------------------


def thread_stats(pid: int) -> dict[str, list[float]]:
    """Per thread name (a pool's numbered threads summed; the main thread is ``loop``):
    [CPU seconds, voluntary context switches, involuntary ones]."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, list[float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            status = (task / "status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = "loop" if task.name == str(pid) else stat[stat.index("(") + 1 : stat.rindex(")")]
        name = name.rstrip("0123456789-_")
        fields = stat.rsplit(")", 1)[1].split()
        ctx = dict(line.split(":\t") for line in status.splitlines() if "ctxt_switches" in line)
        row = out.setdefault(name, [0.0, 0.0, 0.0])
        row[0] += (int(fields[11]) + int(fields[12])) / tick
        row[1] += int(ctx["voluntary_ctxt_switches"])
        row[2] += int(ctx["nonvoluntary_ctxt_switches"])
    return out


def delta(a: dict[str, list[float]], b: dict[str, list[float]]) -> dict[str, list[float]]:
    return {k: [x - y for x, y in zip(v, a.get(k, [0.0] * 3), strict=True)] for k, v in b.items()}


class Server:
    def __init__(self, name: str, pid: int, target: str) -> None:
        self.name, self.pid, self.target = name, pid, target
        self.rounds: list[tuple[int, dict[str, list[float]]]] = []  # (calls, thread deltas)
        self.strace: dict[str, float] = {}  # syscall -> calls per RPC (``--strace``)


async def drive(server: Server, seconds: float, runs: int, tag: str, strace: int = 0) -> None:
    """One window of unary calls against ``server`` (``strace``: count syscalls for that
    many calls instead of measuring CPU)."""
    import grpc
    from cpu_per_record import open_run
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    channel: Any = grpc.aio.insecure_channel(server.target)
    echo = server.name == "echo"
    opened: list[tuple[Any, str, int]] = []
    if echo:
        from echo_server import METHOD

        call = channel.unary_unary(METHOD)
        opened = [(None, "lease", 1) for _ in range(runs)]
    else:
        stub: Any = pbg.JournalServiceStub(channel)
        opened = [await open_run(stub, pb, f"{tag}-{i}") for i in range(runs)]
        call = channel.unary_unary(APPEND, request_serializer=pb.AppendRequest.SerializeToString)
    state = {"counting": False, "calls": 0, "stop": False, "target": 0}
    reached = asyncio.Event()  # ``strace`` calls counted

    async def loop(i: int, lease_id: str, seq: int) -> None:
        run_id = f"{tag}-{i}"
        while not state["stop"]:
            seq += 1
            req = pb.AppendRequest(run_id=run_id, lease_id=lease_id, records=[record_pb(pb, seq)])
            await call(req.SerializeToString() if echo else req)
            if state["counting"]:
                state["calls"] += 1
                if state["target"] and state["calls"] >= state["target"]:
                    state["stop"] = True
                    reached.set()

    async def window() -> None:
        await asyncio.sleep(0.5)  # warm-up
        if strace:
            spy = await asyncio.create_subprocess_exec(
                *["strace", "-c", "-f", "-q", "-p", str(server.pid)],
                stderr=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
            )
            await asyncio.sleep(1.0)  # attached (strace has no readiness signal: counts only)
            state["target"], state["counting"] = strace, True
            await reached.wait()
            spy.send_signal(signal.SIGINT)
            _, err = await asyncio.wait_for(spy.communicate(), 30)
            server.rounds.append((int(state["calls"]), {"strace": [0.0, 0.0, 0.0]}))
            server.strace = parse_strace(err.decode(), int(state["calls"]))
            return
        t0 = thread_stats(server.pid)
        state["counting"] = True
        await asyncio.sleep(seconds)
        state["counting"] = False
        t1 = thread_stats(server.pid)
        state["stop"] = True
        server.rounds.append((int(state["calls"]), delta(t0, t1)))

    await asyncio.gather(window(), *(loop(i, lid, s) for i, (_, lid, s) in enumerate(opened)))
    for c, _, _ in opened:
        if c is not None:
            c.cancel()
    await channel.close()


def parse_strace(text: str, calls: int) -> dict[str, float]:
    """syscall -> calls per RPC, from ``strace -c``'s table."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and not line.startswith("100.00"):
            name = parts[-1]
            count = int(parts[3])
            out[name] = count / max(1, calls)
    return out


@contextlib.contextmanager
def servers(work: Path, variants: list[str], before: Path | None) -> Iterator[list[Server]]:
    from cpu_per_record import echo_server

    from tests.daemon import Daemon

    class VariantDaemon(Daemon):
        def __init__(self, variant: str) -> None:
            super().__init__(work / variant, "file", "--scrub-interval-s", "0")
            self.extra += ARGS.get(variant, [])
            self.variant = variant

        def command(self) -> list[str]:
            cmd = super().command()
            i = cmd.index("serve")
            return [sys.executable, __file__, "--serve", self.variant, *cmd[i:]]

    with contextlib.ExitStack() as stack:
        echo_pid, echo_target = stack.enter_context(echo_server(work))
        out = [Server("echo", echo_pid, echo_target)]
        if before is not None:  # the older tree's daemon as it was, started from its tree
            (work / "before").mkdir()
            old = Daemon(work / "before", "file", "--scrub-interval-s", "0", cwd=before)
            stack.enter_context(old)
            out.append(Server("before", old.pid, old.target))
        for v in variants:
            (work / v).mkdir()
            d = stack.enter_context(VariantDaemon(v))
            out.append(Server(v, d.pid, d.target))
        yield out


def report(all_servers: list[Server], seconds: float, runs: int) -> None:
    echo = all_servers[0]
    full = next((s for s in all_servers if s.name == "full"), None)

    def per_call(s: Server) -> tuple[float, dict[str, list[float]]]:
        calls = sum(c for c, t in s.rounds if "strace" not in t)
        threads: dict[str, list[float]] = {}
        for _, t in s.rounds:
            if "strace" in t:
                continue
            for k, v in t.items():
                row = threads.setdefault(k, [0.0, 0.0, 0.0])
                for j in range(3):
                    row[j] += v[j]
        if not calls:
            return 0.0, {}
        per = {k: [v[0] / calls * 1e6, v[1] / calls, v[2] / calls] for k, v in threads.items()}
        return sum(v[0] for v in per.values()), per

    echo_us, _ = per_call(echo)
    full_us, _ = per_call(full) if full else (0.0, {})
    print(f"\n{seconds:.0f} s a variant a round, {runs} runs at once, ~1 KB records, one client")
    head = f"{'variant':16} {'calls':>7} {'CPU/call µs':>11} {'÷ echo':>7} {'vs full µs':>10}"
    print(head + f" {'loop µs':>8} {'io µs':>6} {'grpc µs':>7} {'loop wake':>9} {'all wake':>8}")
    for s in all_servers:
        total, per = per_call(s)
        calls = sum(c for c, t in s.rounds if "strace" not in t)
        loop = per.get("loop", [0.0, 0.0, 0.0])
        io = sum(v[0] for k, v in per.items() if k.startswith("journald-io"))
        other = total - loop[0] - io
        wakes = sum(v[1] for v in per.values())
        vs = f"{total - full_us:+10.0f}" if full_us and s is not full else f"{'':>10}"
        print(
            f"{s.name:16} {calls:7d} {total:11.0f} {total / echo_us if echo_us else 0:7.2f} "
            f"{vs} {loop[0]:8.0f} {io:6.0f} {other:7.0f} {loop[1]:9.2f} {wakes:8.2f}"
        )
        rounds = [c and sum(v[0] for v in t.values()) / c * 1e6 for c, t in s.rounds]
        print(f"{'':16} rounds: " + ", ".join(f"{r:.0f}" for r in rounds if r))
    print("\nthreads (µs per call, voluntary switches per call):")
    for s in all_servers:
        _, per = per_call(s)
        parts = sorted(per.items(), key=lambda kv: -kv[1][0])
        print(f"  {s.name:16} " + ", ".join(f"{k} {v[0]:.0f}/{v[1]:.2f}" for k, v in parts))
    traced = [s for s in all_servers if s.strace]
    if traced:
        names = sorted(
            {k for s in traced for k in s.strace}, key=lambda k: -traced[0].strace.get(k, 0)
        )
        print("\nsyscalls per call (strace -c -f):")
        print(f"  {'syscall':18}" + "".join(f" {s.name:>14}" for s in traced))
        for n in names:
            row = [s.strace.get(n, 0.0) for s in traced]
            if max(row) >= 0.05:
                print(f"  {n:18}" + "".join(f" {x:14.2f}" for x in row))
        sums = [sum(s.strace.values()) for s in traced]
        print(f"  {'total':18}" + "".join(f" {x:14.2f}" for x in sums))


async def in_process_us(calls: int, rounds: int = 5) -> list[float]:
    """CPU per ``JournalService._append`` of this bench's records (request bytes parsed, one
    record a call) in this process on the memory backend, nothing else running: the
    servicer's Python alone, for the daemon's figures to be read against."""
    from journald_client.pb import journal_pb2 as pb

    from journald.server.convert import fingerprint_to_pb
    from journald.server.service import JournalService
    from journald.storage.memory import MemoryStore
    from tests.builders import FP

    class Context:
        def peer(self) -> str:
            return "unix:"

        def invocation_metadata(self) -> tuple[Any, ...]:
            return ()

    svc = JournalService(MemoryStore())
    opening = pb.OpenRequest(
        run_id="inproc", mode=pb.OPEN_MODE_CREATE, fingerprint=fingerprint_to_pb(FP)
    )
    opened = svc._open(opening, Context())  # type: ignore[arg-type]
    lease_id = (await opened.__anext__()).lease.lease_id
    seq, out = 1, []
    for _ in range(rounds):
        blobs = []
        for _ in range(calls):
            seq += 1
            req = pb.AppendRequest(run_id="inproc", lease_id=lease_id, records=[record_pb(pb, seq)])
            blobs.append(req.SerializeToString())
        t0 = time.process_time()
        for blob in blobs:
            await svc._append(pb.AppendRequest.FromString(blob), None)
        out.append((time.process_time() - t0) / calls * 1e6)
    await opened.aclose()  # type: ignore[attr-defined]
    return out


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        variant = sys.argv[2]
        del sys.argv[1:3]
        return serve_variant(variant)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--strace", type=int, default=0, help="also count syscalls for N calls")
    ap.add_argument(
        "--before",
        type=Path,
        default=None,
        help="a tree of older code (git archive): its "
        "daemon, unpatched, is measured beside the variants as `before`",
    )
    ap.add_argument(
        "--in-process",
        type=int,
        default=0,
        metavar="N",
        help="instead: CPU per _append in this process, rounds of N calls (memory backend)",
    )
    args = ap.parse_args()
    if args.in_process:
        import uvloop

        rounds = uvloop.run(in_process_us(args.in_process))
        print("in process, µs per _append: " + ", ".join(f"{r:.0f}" for r in rounds))
        return 0
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}: {', '.join(VARIANTS)}")
    work = Path(tempfile.mkdtemp(prefix="journald-ablation-"))
    print(f"ablation in {work}; load {os.getloadavg()}", file=sys.stderr)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with servers(work, variants, args.before and args.before.resolve()) as all_servers:
        for r in range(args.rounds):
            for s in all_servers:
                print(f"  round {r + 1}: {s.name}", file=sys.stderr)
                asyncio.run(drive(s, args.seconds, args.runs, f"r{r}"))
        if args.strace:
            for s in all_servers:
                print(f"  strace: {s.name}", file=sys.stderr)
                asyncio.run(drive(s, args.seconds, args.runs, "st", strace=args.strace))
    print(f"started {started}, load average at the end {os.getloadavg()}")
    report(all_servers, args.seconds, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
