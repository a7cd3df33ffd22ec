"""JetStream backend append latency and throughput beside direct nats-py publishes, in one run.

    .venv/bin/python bench/bench_jetstream.py            # < 60 s
    .venv/bin/python bench/bench_jetstream.py --quick    # < 10 s smoke

Starts its own nats-server (JetStream, ``sync_interval: always``, loopback, temp store dir),
creates a journald stream and prints, for ~1 KB records, acknowledged by JetStream:
* direct ``js.publish`` to the same stream, one message per subject, sequential (the floor);
* direct ``js.publish`` with journald's fence and msg-id headers (what the fence costs);
* ``JetStreamJournal.append`` of one record per call on one run (the store's overhead);
* ``append`` of 16-record batches on one run (published in order, one fenced publish each);
* the same on a stream with ``allow_atomic`` (one atomic batch per call, one round trip);
* ``append`` of one record per call on 16 runs concurrently (aggregate throughput);
* direct ``js.publish`` from 16 concurrent publishers (the concurrent floor);
* the single-record and 16-run rows again with the daemon's cross-host leases on (every write
  group first reads the run's lease entry back: what the fencing token costs).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import nats  # noqa: E402

from journald.core.records import GENESIS, Record, make_record  # noqa: E402
from journald.storage.jetstream.lease_bucket import lease_bucket_name  # noqa: E402
from journald.storage.jetstream.leases import JetStreamLeases  # noqa: E402
from journald.storage.jetstream.store import JetStreamStore  # noqa: E402
from tests.nats_server import NatsServer, create_stream  # noqa: E402

RECORD_BYTES = 1024
BATCH = 16
CONCURRENCY = 16
TS = "2026-11-30T12:00:00.000000Z"


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def record(seq: int, prev: str = GENESIS) -> Record:
    """A ~1 KB record (a tool_result whose text pads it to RECORD_BYTES)."""
    payload: dict[str, Any] = {
        "tool_use_id": "toolu_bench",
        "content": [{"type": "text", "text": ""}],
        "is_error": False,
        "remote": False,
    }
    base = len(make_record(seq, "tool_result", payload, prev, TS).raw)
    payload["content"][0]["text"] = "x" * max(0, RECORD_BYTES - base)
    return make_record(seq, "tool_result", payload, prev, TS)


def meta(run_id: str) -> Record:
    fp = {
        "provider": "bench",
        "model": "bench",
        "system_prompt_sha256": "0" * 64,
        "tools_sha256": "0" * 64,
        "thinking": "off",
        "max_tokens": 1,
        "max_iterations": 1,
    }
    payload = {
        "run_id": run_id,
        "created": TS,
        "fingerprint": fp,
        "prompt": [],
        "interactive": False,
    }
    return make_record(1, "meta", payload, GENESIS, TS)


async def timed(
    seconds: float, cap: int, step: Callable[[int], Awaitable[int]]
) -> tuple[list[float], int, float]:
    """Call ``step(i)`` until ``seconds`` or ``cap`` calls; each returns records written."""
    lat: list[float] = []
    n = 0
    start = time.perf_counter()
    i = 0
    while time.perf_counter() - start < seconds and i < cap:
        t0 = time.perf_counter()
        n += await step(i)
        lat.append(time.perf_counter() - t0)
        i += 1
    return lat, n, time.perf_counter() - start


def row(name: str, lat: list[float], n: int, wall: float, per: str = "call") -> dict[str, Any]:
    return {
        "name": name,
        "p50_ms": pct(lat, 50) * 1e3,
        "p99_ms": pct(lat, 99) * 1e3,
        "rate": n / wall if wall else 0.0,
        "calls": len(lat),
        "per": per,
    }


async def bench(url: str, stream: str, prefix: str, seconds: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    body = record(2).raw
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    try:

        async def direct(i: int) -> int:
            await js.publish(f"{prefix}.direct.{i}", body)
            return 1

        rows.append(row("direct js.publish", *await timed(seconds, 1_000_000, direct)))

        last = 0

        async def fenced(i: int) -> int:
            nonlocal last
            ack = await js.publish(
                f"{prefix}.fenced.{i + 1}",
                body,
                headers={
                    "Nats-Msg-Id": f"bench.{i + 1}",
                    "Nats-Expected-Last-Subject-Sequence": str(last),
                    "Nats-Expected-Last-Subject-Sequence-Subject": f"{prefix}.fenced.*",
                },
            )
            last = ack.seq
            return 1

        rows.append(
            row("direct js.publish + fence headers", *await timed(seconds, 1_000_000, fenced))
        )

        async def concurrent_direct() -> tuple[list[float], int, float]:
            lat: list[float] = []
            start = time.perf_counter()

            async def worker(w: int) -> int:
                k = 0
                while time.perf_counter() - start < seconds:
                    t0 = time.perf_counter()
                    await js.publish(f"{prefix}.cdirect{w}.{k}", body)
                    lat.append(time.perf_counter() - t0)
                    k += 1
                return k

            counts = await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
            return lat, sum(counts), time.perf_counter() - start

        rows.append(row(f"direct js.publish x{CONCURRENCY} publishers", *await concurrent_direct()))
    finally:
        await nc.close()

    store = await JetStreamStore.connect(url, stream, ack_timeout_s=10)
    try:
        j1 = await store.create(meta("bench-single"))

        async def single(i: int) -> int:
            await j1.append([record(i + 2)])
            return 1

        rows.append(row("store append (1 record/call)", *await timed(seconds, 1_000_000, single)))

        jb = await store.create(meta("bench-batch"))

        async def batch(i: int) -> int:
            first = 2 + i * BATCH
            await jb.append([record(first + k) for k in range(BATCH)])
            return BATCH

        rows.append(
            row(f"store append ({BATCH} records/call)", *await timed(seconds, 100_000, batch))
        )

        journals = [await store.create(meta(f"bench-c{w}")) for w in range(CONCURRENCY)]
        lat: list[float] = []
        start = time.perf_counter()

        async def runner(w: int) -> int:
            k = 0
            while time.perf_counter() - start < seconds:
                t0 = time.perf_counter()
                await journals[w].append([record(k + 2)])
                lat.append(time.perf_counter() - t0)
                k += 1
            return k

        counts = await asyncio.gather(*(runner(w) for w in range(CONCURRENCY)))
        rows.append(
            row(
                f"store append x{CONCURRENCY} runs",
                lat,
                sum(counts),
                time.perf_counter() - start,
            )
        )
    finally:
        await store.close()

    leased = await JetStreamStore.connect(url, stream, ack_timeout_s=10)
    leases = JetStreamLeases(leased, lease_bucket_name(stream))
    await leases.start()
    try:
        await leases.acquire("bench-leased", {"name": "bench"})
        jl = await leased.create(meta("bench-leased"))

        async def leased_single(i: int) -> int:
            await jl.append([record(i + 2)])
            return 1

        rows.append(
            row(
                "store append (1 record/call), leases on",
                *await timed(seconds, 1_000_000, leased_single),
            )
        )
        runs = [f"bench-lc{w}" for w in range(CONCURRENCY)]
        for r in runs:
            await leases.acquire(r, {"name": "bench"})
        ljournals = [await leased.create(meta(r)) for r in runs]
        llat: list[float] = []
        lstart = time.perf_counter()

        async def lrunner(w: int) -> int:
            k = 0
            while time.perf_counter() - lstart < seconds:
                t0 = time.perf_counter()
                await ljournals[w].append([record(k + 2)])
                llat.append(time.perf_counter() - t0)
                k += 1
            return k

        lcounts = await asyncio.gather(*(lrunner(w) for w in range(CONCURRENCY)))
        rows.append(
            row(
                f"store append x{CONCURRENCY} runs, leases on",
                llat,
                sum(lcounts),
                time.perf_counter() - lstart,
            )
        )
    finally:
        await leases.close()
        await leased.close()

    atomic = await JetStreamStore.connect(url, f"{stream}A", ack_timeout_s=10)
    try:
        ja = await atomic.create(meta("bench-atomic"))

        async def atomic_batch(i: int) -> int:
            first = 2 + i * BATCH
            await ja.append([record(first + k) for k in range(BATCH)])
            return BATCH

        rows.append(
            row(
                f"store append ({BATCH}/call, atomic batch)",
                *await timed(seconds, 100_000, atomic_batch),
            )
        )
    finally:
        await atomic.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="<1 s per measurement (< 10 s total)")
    p.add_argument("--seconds", type=float, default=None, help="seconds per measurement")
    args = p.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (0.7 if args.quick else 5.5)
    with tempfile.TemporaryDirectory(prefix="journald-bench-") as tmp:
        server = NatsServer(Path(tmp), name="bench")
        server.start()
        try:
            asyncio.run(create_stream(server.url, "BENCH", "bench"))
            asyncio.run(create_stream(server.url, "BENCHA", "bencha", allow_atomic=True))
            rows = asyncio.run(bench(server.url, "BENCH", "bench", seconds))
        finally:
            server.stop()
    floor = rows[0]["rate"]
    print(f"JetStream, {RECORD_BYTES} B records, nats-server sync_interval: always, loopback")
    print(f"{'measurement':<40} {'p50 ms':>8} {'p99 ms':>8} {'records/s':>10} {'vs direct':>9}")
    for r in rows:
        ratio = r["rate"] / floor if floor else float("nan")
        print(
            f"{r['name']:<40} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['rate']:>10.0f} "
            f"{ratio:>8.2f}x"
        )
    print("(latency is per call; a batch call carries", BATCH, "records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
