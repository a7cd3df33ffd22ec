"""The daemon's CPU time per dormant read of the runs ``bench/bench_long_runs.py`` wrote: a
History tail page (the last 50 messages) in each view and ``Fold(omit_messages)``.

    .venv/bin/python bench/dormant_read_cpu.py --data /tmp/jd-long --records 1000,1000000
    .venv/bin/python bench/dormant_read_cpu.py --data /tmp/jd-long --daemon-code /tmp/old

Run ``bench_long_runs.py`` on ``--data`` first (it writes the runs and their first fold). One
daemon serves every run; each call is made 5 times, then ``--calls`` times, and the daemon's
CPU time over those calls (utime + stime of the process, every thread) is divided by their
number. On a shared, loaded machine this moves far less than the wall time, which also
counts the time the daemon waited for a core. Figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.daemon import Daemon  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from bench_long_runs import tail_pages  # noqa: E402

OPTS = [("grpc.max_receive_message_length", 1 << 30)]
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """The process's user + system CPU time, every thread."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


async def measure(d: Daemon, n: int, calls: int) -> dict[str, tuple[float, float]]:
    import grpc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    run_id = f"long{n}"
    out: dict[str, tuple[float, float]] = {}
    async with grpc.aio.insecure_channel(d.target, options=OPTS) as ch:
        stub = pbg.JournalServiceStub(ch)
        total = (await stub.History(pb.HistoryRequest(run_id=run_id, limit=1))).total
        reads: dict[str, Callable[[], Awaitable[Any]]] = {}
        for name, req in tail_pages(pb, run_id, total).items():
            reads[f"hist {name}"] = lambda req=req: stub.History(req)  # type: ignore[misc]
        fold = pb.FoldRequest(run_id=run_id, omit_messages=True)
        reads["fold -m"] = lambda: stub.Fold(fold)
        for name, call in reads.items():
            for _ in range(5):
                await call()
            walls = []
            before = cpu_s(d.pid)
            for _ in range(calls):
                t = time.perf_counter()
                await call()
                walls.append(time.perf_counter() - t)
            spent = cpu_s(d.pid) - before
            walls.sort()
            out[name] = (1e3 * spent / calls, 1e3 * walls[len(walls) // 2])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="bench_long_runs.py's data dir")
    ap.add_argument("--records", default="1000,1000000")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--daemon-code", type=Path, help="run the daemon from this checkout")
    args = ap.parse_args()
    data = args.data.resolve()
    code = args.daemon_code.resolve() if args.daemon_code else None
    sizes = [int(x) for x in args.records.split(",") if x]
    flags = ("--max-message-bytes", "1GiB", "--scrub-interval-s", "0")
    rows = {}
    with Daemon(data.parent, "file", *flags, data_dir=data, cwd=code) as d:
        for n in sizes:
            rows[n] = asyncio.run(measure(d, n, args.calls))
    names = list(rows[sizes[0]])
    print(f"daemon CPU ms per call / wall median ms, {args.calls} calls each")
    print(f"{'records':>9} " + " ".join(f"{k:>15}" for k in names))
    for n, row in rows.items():
        print(f"{n:>9,} " + " ".join(f"{row[k][0]:>7.2f}/{row[k][1]:<7.2f}" for k in names))
    if len(sizes) > 1:
        lo, hi = rows[sizes[0]], rows[sizes[-1]]
        ratios = " ".join(f"{hi[k][0] / lo[k][0]:>15.2f}" for k in names)
        print(f"{'ratio':>9} {ratios}   (CPU, {sizes[-1]:,} / {sizes[0]:,})")


if __name__ == "__main__":
    main()
