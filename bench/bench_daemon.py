"""Append latency and throughput through the daemon, beside its physical limits, in one run.

    .venv/bin/python bench/bench_daemon.py            # ~1 minute
    .venv/bin/python bench/bench_daemon.py --quick    # ~15 s smoke

Prints, for 1 KB records, durable before acknowledgement:
* raw ``write + fdatasync`` of one file (the disk's limit for one writer);
* a no-op unary gRPC call over the same kind of unix socket (health Check: the framework's floor);
* the in-process file backend (FileStore.append, no RPC);
* the daemon with unary Append, batch Append (16 records a call) and AppendStream, at 1, 16
  and 64 concurrent runs (each run its own lease; clients spread over worker processes).
Ratios compare each figure with the limits measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import RECORD_BYTES, write_fdatasync_loop  # noqa: E402 - after the path set-up

BATCH = 16


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def summary(name: str, lat_s: list[float], records: int, wall_s: float) -> dict[str, Any]:
    return {
        "name": name,
        "p50_ms": pct(lat_s, 50) * 1e3,
        "p99_ms": pct(lat_s, 99) * 1e3,
        "rate": records / wall_s if wall_s else 0.0,
        "n": len(lat_s),
    }


def raw_fdatasync(directory: Path, seconds: float) -> dict[str, Any]:
    start = time.perf_counter()
    lat = write_fdatasync_loop(
        directory / "raw.bin",
        lambda n: time.perf_counter() - start < seconds and n < 200_000,
    )
    return summary("raw write+fdatasync (1 file)", lat, len(lat), time.perf_counter() - start)


def payload_text() -> str:
    return "y" * (RECORD_BYTES - 330)  # envelope + block overhead brings a line to ~1 KB


async def in_process_file(directory: Path, seconds: float) -> dict[str, Any]:
    from journald.clock import utc_ts
    from journald.core.records import GENESIS, make_record
    from journald.storage.file.store import FileStore
    from tests.builders import meta_payload

    store = FileStore(directory / "inproc")
    journal = await store.create(make_record(1, "meta", meta_payload("bench"), GENESIS, utc_ts()))
    body = payload_text()
    lat: list[float] = []
    seq = 1
    start = time.perf_counter()
    while time.perf_counter() - start < seconds and seq < 200_000:
        seq += 1
        rec = make_record(
            seq, "terminal", {"reason": "suspended", "message": body}, journal.last_hash, utc_ts()
        )
        t0 = time.perf_counter()
        await journal.append([rec])
        lat.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    print(f"    in-process record size: {len(rec.raw) + 1} bytes", file=sys.stderr)
    await journal.close()
    await store.close()
    return summary("in-process FileStore.append", lat, len(lat), wall)


# --- worker processes (clients) --------------------------------------------------------


async def worker(target: str, runs: list[str], form: str, seconds: float) -> dict[str, Any]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    from journald.clock import utc_ts
    from journald.server.convert import fingerprint_to_pb
    from tests.builders import FP

    channel = grpc.aio.insecure_channel(target)
    stub = pbg.JournalServiceStub(channel)
    body = payload_text()
    lat: list[float] = []
    count = 0
    deadline = time.perf_counter() + seconds + 0.5  # leases are opened in the first 0.5 s
    began: list[float] = []

    def rec(seq: int) -> pb.Record:
        return pb.Record(
            seq=seq, ts=utc_ts(), terminal=pb.TerminalPayload(reason="suspended", message=body)
        )

    if form == "echo":
        health = health_pb2_grpc.HealthStub(channel)

        async def echo_loop() -> None:
            nonlocal count
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                await health.Check(health_pb2.HealthCheckRequest())
                lat.append(time.perf_counter() - t0)
                count += 1

        began.append(time.perf_counter())
        await asyncio.gather(*(echo_loop() for _ in runs))
        wall = time.perf_counter() - began[0]
        await channel.close(None)  # grpc-stubs lacks the default grace
        return {"lat": lat, "records": count, "wall": wall}

    async def run_loop(run_id: str) -> None:
        nonlocal count
        call = stub.Open(
            pb.OpenRequest(
                run_id=run_id,
                mode=pb.OPEN_MODE_CREATE,
                fingerprint=fingerprint_to_pb(FP),
                prompt_json=b"[]",
            )
        )
        first = await call.read()
        assert isinstance(first, pb.OpenResponse)
        lease = first.lease
        seq = lease.last_seq
        await asyncio.sleep(max(0.0, deadline - seconds - time.perf_counter()))
        began.append(time.perf_counter())
        if form == "stream":
            stream = stub.AppendStream()  # type: ignore[call-arg]  # aio: written below
            while time.perf_counter() < deadline:
                seq += 1
                t0 = time.perf_counter()
                await stream.write(
                    pb.AppendStreamRequest(
                        append=pb.AppendRequest(
                            run_id=run_id, lease_id=lease.lease_id, records=[rec(seq)]
                        )
                    )
                )
                await stream.read()
                lat.append(time.perf_counter() - t0)
                count += 1
            await stream.done_writing()
        else:
            n = BATCH if form == "batch" else 1
            while time.perf_counter() < deadline:
                records = [rec(seq + 1 + i) for i in range(n)]
                seq += n
                t0 = time.perf_counter()
                await stub.Append(
                    pb.AppendRequest(run_id=run_id, lease_id=lease.lease_id, records=records)
                )
                lat.append(time.perf_counter() - t0)
                count += n
        call.cancel()

    await asyncio.gather(*(run_loop(r) for r in runs))
    wall = time.perf_counter() - min(began)
    await channel.close(None)  # grpc-stubs lacks the default grace
    return {"lat": lat, "records": count, "wall": wall}


def spawn_workers(
    target: str, form: str, runs: int, seconds: float, tag: str, procs: int
) -> dict[str, Any]:
    procs = max(1, min(procs, runs))
    names = [f"{tag}-{form}-{runs}-{i}" for i in range(runs)]
    chunks = [names[i::procs] for i in range(procs)]
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", target, form, str(seconds), *chunk],
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        for chunk in chunks
    ]
    lat: list[float] = []
    records = 0
    wall = 0.0
    for child in children:
        out, _ = child.communicate(timeout=seconds + 60)
        data = json.loads(out)
        lat.extend(data["lat"])
        records += data["records"]
        wall = max(wall, data["wall"])
    return summary(f"{form} x{runs} runs", lat, records, wall)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", type=Path, default=None, help="where to write (same disk for all)")
    ap.add_argument("--worker", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        target, form, seconds, *runs = args.worker
        print(json.dumps(asyncio.run(worker(target, runs, form, float(seconds)))))
        return 0

    from tests.daemon import Daemon

    seconds = 1.0 if args.quick else 3.0
    concurrency = [1, 16] if args.quick else [1, 16, 64]
    base = Path(tempfile.mkdtemp(prefix="journald-bench-", dir=args.dir))
    rows: list[dict[str, Any]] = []
    print(
        f"journald daemon benchmark: 1 KB records, {seconds}s per workload, dir {base}",
        file=sys.stderr,
    )
    rows.append(raw_fdatasync(base, seconds))
    rows.append(asyncio.run(in_process_file(base, seconds)))
    with Daemon(base, "file") as d:
        rows.append(spawn_workers(d.target, "echo", 1, seconds, "e", 1))
        for form in ("unary", "batch", "stream"):
            for n in concurrency:
                print(f"  running {form} at {n} runs...", file=sys.stderr)
                rows.append(spawn_workers(d.target, form, n, seconds, "b", 2))
    raw, echo = rows[0], rows[2]
    floor_ms = raw["p50_ms"] + echo["p50_ms"]
    print(f"\n{'workload':34} {'p50 ms':>8} {'p99 ms':>8} {'rec/s':>9} {'p50/floor':>9}")
    for r in rows:
        print(
            f"{r['name']:34} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['rate']:9.0f} "
            f"{r['p50_ms'] / floor_ms:9.2f}"
        )
    print(
        f"\nfloor = raw fdatasync p50 + gRPC no-op p50 = {floor_ms:.3f} ms; "
        f"raw fdatasync rate = {raw['rate']:.0f}/s"
    )
    for r in rows:
        if r["name"].startswith("unary x1 "):
            print(
                f"unary x1 p50 / floor = {r['p50_ms'] / floor_ms:.2f} (goal <= 1.25); "
                f"p99/p50 = {r['p99_ms'] / r['p50_ms']:.2f} (goal <= 3)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
