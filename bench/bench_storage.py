"""File-backend append benchmark beside a raw write+fdatasync loop on the same disk.

    .venv/bin/python bench/bench_storage.py [--quick] [--dir DIR] [--io-threads 16,4]

Prints, per size of the store's I/O pool, the in-process ``Journal.append`` latency (p50/p99)
and throughput for 1 KB records on 1 run and on 16 concurrent runs, 16 parallel appends on
one run (group commit), and the same figures for a bare ``os.write`` + ``os.fdatasync`` loop
(1 and 16 threads) in the same directory, with the store/raw ratios. Every scenario is time-bounded:
the default run takes < 60 s, ``--quick`` < 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_fdatasync_loop

from journald.core.records import GENESIS, Record, make_record, sha256_hex
from journald.storage.file.store import FileStore

TS = "2026-11-30T12:00:00.000000Z"
BODY = "x" * 860  # with the envelope: ~1 KB per line


def meta(run_id: str) -> Record:
    payload = {
        "run_id": run_id,
        "created": TS,
        "fingerprint": {
            "provider": "anthropic",
            "model": "bench",
            "system_prompt_sha256": "0" * 64,
            "tools_sha256": "0" * 64,
            "thinking": "off",
            "max_tokens": 1024,
            "max_iterations": 10,
        },
        "prompt": [],
        "interactive": False,
    }
    return make_record(1, "meta", payload, GENESIS, TS)


def user(seq: int, prev: str) -> Record:
    raw = (
        f'{{"prev":"{prev}","seq":{seq},"ts":"{TS}","type":"journald.v1.record.user",'
        f'"user":{{"content":[{{"text":"{BODY}","type":"text"}}]}},"v":1}}'
    ).encode()
    payload = {"content": [{"type": "text", "text": BODY}]}
    return Record(seq, "user", TS, prev, payload, None, raw, sha256_hex(raw))


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def line(name: str, lat: list[float], n: int, elapsed: float) -> dict[str, float]:
    p50, p99 = pct(lat, 0.50) * 1e3, pct(lat, 0.99) * 1e3
    mean = statistics.fmean(lat) * 1e3 if lat else float("nan")
    rate = n / elapsed if elapsed else 0.0
    print(
        f"  {name:<40} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms  mean {mean:7.3f} ms"
        f"  {rate:8.0f} rec/s  (n={n})"
    )
    return {"p50": p50, "p99": p99, "mean": mean, "rate": rate}


async def sequential_runs(root: Path, io: int, runs: int, seconds: float) -> dict[str, float]:
    store = FileStore(root / f"store-{io}-{runs}", io_threads=io)
    lat: list[float] = []
    count = 0

    async def one(i: int) -> None:
        nonlocal count
        run_id = f"bench-{i}"
        journal = await store.create(meta(run_id))
        prev, seq = journal.last_hash, 2
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            rec = user(seq, prev)
            t0 = time.perf_counter()
            await journal.append([rec])
            lat.append(time.perf_counter() - t0)
            prev, seq = rec.hash, seq + 1
            count += 1
        await journal.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(runs)))
    elapsed = time.perf_counter() - t0
    await store.close()
    return line(f"store[{io}] {runs} run(s), sequential", lat, count, elapsed)


async def parallel_on_one_run(root: Path, io: int, width: int, seconds: float) -> dict[str, float]:
    store = FileStore(root / f"store-{io}-par", io_threads=io)
    journal = await store.create(meta("bench-par"))
    prev, seq = journal.last_hash, 2
    lat: list[float] = []
    count = 0
    commits0 = journal.commits
    end = time.perf_counter() + seconds
    t_start = time.perf_counter()
    while time.perf_counter() < end:
        batch = []
        for _ in range(width):
            rec = user(seq, prev)
            batch.append(rec)
            prev, seq = rec.hash, seq + 1

        async def timed(rec: Record) -> None:
            t0 = time.perf_counter()
            await journal.append([rec])
            lat.append(time.perf_counter() - t0)

        await asyncio.gather(*(timed(r) for r in batch))
        count += width
    elapsed = time.perf_counter() - t_start
    commits = journal.commits - commits0
    await journal.close()
    await store.close()
    out = line(f"store[{io}] {width} parallel appends, 1 run", lat, count, elapsed)
    print(f"  {'':<38} {count / max(commits, 1):.1f} records per write+fdatasync")
    return out


def raw_loop(root: Path, threads: int, seconds: float) -> dict[str, float]:
    lat: list[float] = []
    counts = [0] * threads
    data = (user(2, GENESIS).raw + b"\n")[:1024]
    lock = threading.Lock()

    def worker(i: int) -> None:
        end = time.perf_counter() + seconds
        mine = write_fdatasync_loop(
            root / f"raw-{threads}-{i}-{time.monotonic_ns()}.bin",
            lambda n: time.perf_counter() < end,
            data,
        )
        counts[i] = len(mine)
        with lock:
            lat.extend(mine)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    return line(f"raw write+fdatasync, {threads} thread(s)", lat, sum(counts), elapsed)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a < 10 s run")
    ap.add_argument("--dir", help="directory on the disk to measure (default: a temp dir)")
    ap.add_argument(
        "--io-threads", default="16", help="sizes of the store's I/O pool to measure, e.g. 16,4"
    )
    args = ap.parse_args()
    seconds = 0.6 if args.quick else 3.5
    root = Path(tempfile.mkdtemp(prefix="journald-bench-", dir=args.dir))
    modes = [int(n) for n in args.io_threads.split(",")]
    print(
        f"journald storage bench in {root} ({'quick' if args.quick else 'full'}, "
        f"{seconds}s per scenario, 1 KB records)"
    )
    try:
        for io in modes:
            # raw and store alternate so both see the same disk weather
            print(f"io_threads={io}:")
            raw1 = raw_loop(root, 1, seconds)
            one = await sequential_runs(root, io, 1, seconds)
            raw16 = raw_loop(root, 16, seconds)
            many = await sequential_runs(root, io, 16, seconds)
            par = await parallel_on_one_run(root, io, 16, seconds)
            print(
                f"  ratio store/raw [{io}]: 1 run: p50 x{one['p50'] / raw1['p50']:.2f}, mean "
                f"x{one['mean'] / raw1['mean']:.2f}, throughput x{one['rate'] / raw1['rate']:.2f};"
                f" 16 runs: throughput x{many['rate'] / raw16['rate']:.2f} of 16 raw threads;"
                f" 16 parallel appends on 1 run: throughput x{par['rate'] / raw1['rate']:.2f} "
                "of 1 raw thread"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
