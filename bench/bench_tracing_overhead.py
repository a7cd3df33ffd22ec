"""What OpenTelemetry costs on the append path: tracing off (no OTEL_* variables, the
default) versus on (SDK tracer and meter providers, batch span processor, every span and
metric recorded, exported to a sink that drops them, so no network is measured).

    .venv/bin/python bench/bench_tracing_overhead.py            # ~1-2 minutes
    .venv/bin/python bench/bench_tracing_overhead.py --quick    # ~20 s smoke

Prints two tables:
1. the hooks alone, per append, in nanoseconds (the telemetry calls one Append makes:
   RPC wrapper, trace-stamp check, store-append and fold spans; the fsync hook minus the
   syscall), off and on;
2. end to end: append p50/p90/p99 through a daemon subprocess over the unix socket, one
   writer appending sequentially (1 KB user/assistant records), memory backend (CPU cost
   only) and file backend (durable, fdatasync per append), off and on, interleaved rounds.

The daemon is started by this script itself (``--serve``) so both modes run the same code
with the same process set-up; the client has no OpenTelemetry configured, so the records
are byte-identical in both modes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEXT = "x" * 1000


def pct(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))] if s else float("nan")


# --- tracing "on" without a network -------------------------------------------------------


def install_sink_providers() -> None:
    """SDK providers recording everything, exporting to sinks that drop it."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from journald import telemetry

    class DropSpans(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    class DropMetrics(MetricExporter):
        def export(self, metrics_data: Any, timeout_millis: float = 0, **kw: Any) -> Any:
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 0) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 0, **kw: Any) -> None:
            return None

    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(DropSpans()))
    mp = MeterProvider(metric_readers=[PeriodicExportingMetricReader(DropMetrics(), 1000)])
    telemetry.install(tp, mp)


# --- 1. the hooks alone -----------------------------------------------------------------------


def hooks_ns(traced: bool, number: int) -> tuple[float, float]:
    """CPU ns per append spent in the telemetry hooks: (RPC wrapper + stamp check + store
    append and fold spans, minus the servicer they wrap; the fsync hook minus the syscall).
    CPU time (``process_time``, every thread of the process) rather than wall time, so a
    busy machine does not count other processes' time."""
    from journald_client.pb import journal_pb2 as pb

    from journald import telemetry
    from journald.core.records import make_record
    from journald.storage.seam import OS
    from tests.builders import TS, user_payload

    telemetry.reset()
    if traced:
        install_sink_providers()
    rec = make_record(2, "user", user_payload(TEXT), "0" * 64, TS)
    pbrec = pb.Record(seq=2, trace=pb.TraceContext(trace_id="a" * 32, span_id="b" * 16))
    request, new = pb.AppendRequest(run_id="bench", records=[pbrec]), [rec]

    class Ctx:  # what grpc hands the servicer: the call metadata
        def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
            return (("user-agent", "grpc-python"),)

    ctx = Ctx()

    async def servicer() -> int:
        return 1

    async def hooked(n: int) -> float:
        t0 = time.process_time()
        for _ in range(n):
            await telemetry.traced_unary("Append", request, ctx, servicer())
            telemetry.unstamped_parent(request.records, ctx)
            with telemetry.store_append("bench") as span:
                span.records(new)
                pass
            with telemetry.fold_span("bench", 1):
                pass
        return time.process_time() - t0

    async def bare(n: int) -> float:
        t0 = time.process_time()
        for _ in range(n):
            await servicer()
        return time.process_time() - t0

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(hooked(min(number, 1000)))
        took = min(loop.run_until_complete(hooked(number)) for _ in range(5))
        base = min(loop.run_until_complete(bare(number)) for _ in range(5))
    finally:
        loop.close()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fd, path = tempfile.mkstemp(prefix="jd-bench-", dir=shm)
    try:
        hook = min(
            timeit.repeat(
                lambda: telemetry.fsync_took(OS.fdatasync(fd), "bench", 2, 1024),
                number=number,
                repeat=5,
                timer=time.process_time,
            )
        )
        sync = min(
            timeit.repeat(
                lambda: os.fdatasync(fd), number=number, repeat=5, timer=time.process_time
            )
        )
    finally:
        os.close(fd)
        os.unlink(path)
    telemetry.reset()
    return (took - base) / number * 1e9, (hook - sync) / number * 1e9


# --- 2. end to end ----------------------------------------------------------------------------


def serve_main(socket_path: str, data_dir: str, backend: str, traced: bool) -> int:
    """The daemon for one mode (run as a subprocess of this script)."""
    import uvloop

    from journald.server.daemon import ServeConfig, serve

    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[key]
    if traced:
        install_sink_providers()
    cfg = ServeConfig(socket_path=Path(socket_path), data_dir=Path(data_dir), backend=backend)
    return uvloop.run(serve(cfg))


def append_latencies(socket_path: str, n: int, warmup: int) -> list[float]:
    from journald_client import Client, Fingerprint

    fp = Fingerprint("anthropic", "bench", "0" * 64, "1" * 64)
    lat: list[float] = []
    with Client(socket_path) as jd:
        jd.wait_ready(60)
        with jd.start(f"bench-{os.getpid()}-{time.monotonic_ns()}", fp, "bench") as run:
            for i in range(n + warmup):
                t0 = time.perf_counter()
                if i % 2:
                    run.assistant(TEXT, stop_reason="end_turn")
                else:
                    run.user(TEXT)
                if i >= warmup:
                    lat.append(time.perf_counter() - t0)
    return lat


def one_round(backend: str, traced: bool, n: int, warmup: int) -> list[float]:
    work = Path(tempfile.mkdtemp(prefix="jd-bench-"))
    sock = work / "j.sock"
    cmd = [sys.executable, __file__, "--serve", str(sock), str(work / "data"), backend]
    proc = subprocess.Popen(
        [*cmd, "on" if traced else "off"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"bench daemon did not start: {err}")
            time.sleep(0.05)
        return append_latencies(str(sock), n, warmup)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="fewer appends and rounds")
    ap.add_argument("--serve", nargs=4, metavar=("SOCKET", "DATA", "BACKEND", "MODE"))
    ap.add_argument("--appends", type=int, default=0, help="appends per round")
    ap.add_argument("--rounds", type=int, default=0, help="interleaved off/on rounds")
    ap.add_argument("--backends", default="memory,file")
    args = ap.parse_args(argv)
    if args.serve:
        sock, data, backend, mode = args.serve
        return serve_main(sock, data, backend, mode == "on")
    n = args.appends or (300 if args.quick else 2000)
    rounds = args.rounds or (1 if args.quick else 3)
    number = 2_000 if args.quick else 5_000

    print("1. telemetry hooks per append, CPU ns (minus the work they wrap)")
    print(f"   {'mode':<4} {'rpc+stamp+append+fold':>22} {'fsync hook':>11}")
    for traced in (False, True):
        rpc, fs = hooks_ns(traced, number)
        print(f"   {'on' if traced else 'off':<4} {rpc:22.0f} {fs:11.0f}")
    print()
    print(f"2. append latency through the daemon ({n} sequential 1 KB appends x {rounds} rounds)")
    print(f"   {'backend':<8} {'mode':<4} {'p50 µs':>9} {'p90 µs':>9} {'p99 µs':>9}")
    for backend in args.backends.split(","):
        lat: dict[bool, list[float]] = {False: [], True: []}
        p50s: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(rounds):
            for traced in (False, True):
                xs = one_round(backend, traced, n, warmup=max(50, n // 10))
                lat[traced].extend(xs)
                p50s[traced].append(pct(xs, 50))
        for traced in (False, True):
            xs = lat[traced]
            print(
                f"   {backend:<8} {'on' if traced else 'off':<4} {pct(xs, 50) * 1e6:9.0f} "
                f"{pct(xs, 90) * 1e6:9.0f} {pct(xs, 99) * 1e6:9.0f}"
            )
        d = statistics.median(p50s[True]) - statistics.median(p50s[False])
        print(f"   {backend:<8} on - off, median of per-round p50s: {d * 1e6:+.0f} µs")
    print(f"\n(load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
