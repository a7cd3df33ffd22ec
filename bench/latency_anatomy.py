"""Where one Append's time goes: the same sequential single-run workload against the daemon
with parts of the append path swapped out (``bench/whatif_daemon.py``), in one run.

    .venv/bin/python bench/latency_anatomy.py [--calls 1000]

Rows (p50 of ``--calls`` sequential calls on one run, after a warm-up, unary Append and
AppendStream with one ~1 KB record a call):

* ``noop``: Append answers at once: gRPC, journald's protobuf messages and the client;
* ``nostore``: plus the servicer's own work (decode, validate, admit, fold, ack);
* ``shipped``: plus the store: group commit, the hand-off to a writer thread of the pool, the
  write + fdatasync, and the way back to the event loop (whose legs the ``timed`` daemon
  measures from inside, as medians);
* beside them, a raw ``write + fdatasync`` loop on the same disk, back to back and paced
  2 ms apart (the pace of one sequential client): an idle gap makes each flush slower.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from tests.daemon import Daemon

BENCH = Path(__file__).resolve().parent
WARMUP_CALLS = 50
PACED_GAP_S = 0.002


class WhatIfDaemon(Daemon):
    """The real daemon started through ``whatif_daemon.py MODE``."""

    def __init__(self, mode: str, tmp: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(tmp, "file", env=env)
        self.mode = mode

    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index("serve")
        return [sys.executable, str(BENCH / "whatif_daemon.py"), self.mode, *cmd[i:]]


async def _sequential(target: str, calls: int) -> dict[str, float]:
    import agent_procs

    out: dict[str, float] = {}
    try:
        for form in ("unary", "stream"):
            agent = agent_procs.Journald({"target": target}, f"anatomy-{form}", form)
            await agent.setup()
            for _ in range(WARMUP_CALLS):
                await agent.step()
            lat: list[float] = []
            for _ in range(calls):
                t0 = time.perf_counter()
                await agent.step()
                lat.append(time.perf_counter() - t0)
            await agent.close()
            lat.sort()
            out[f"{form}_p50_ms"] = lat[len(lat) // 2] * 1e3
    finally:
        channel = agent_procs.Channel.channel
        agent_procs.Channel.channel = None
        if channel is not None:
            await channel.close()
    return out


def raw_fdatasync_p50_ms(directory: Path, calls: int, gap_s: float = 0.0) -> float:
    """p50 of ``pwrite + fdatasync`` of 1 KB at the end of a file, ``gap_s`` apart."""
    lat = common.write_fdatasync_loop(
        directory / "anatomy-raw.bin", lambda n: n < calls, gap_s=gap_s
    )
    lat.sort()
    return lat[len(lat) // 2] * 1e3


def anatomy(work: Path, calls: int, progress: Callable[[str], None] = print) -> dict[str, Any]:
    rows: dict[str, dict[str, float]] = {}
    legs: dict[str, float] = {}
    for mode in ("noop", "nostore", "timed"):
        base = work / f"anatomy-{mode}"
        base.mkdir(parents=True)
        timings = base / "timings.json"
        progress(f"anatomy: {calls} sequential calls, daemon mode {mode}")
        with WhatIfDaemon(mode, base, env={"JOURNALD_BENCH_TIMINGS": str(timings)}) as d:
            rows["shipped" if mode == "timed" else mode] = asyncio.run(_sequential(d.target, calls))
        if timings.exists():
            legs = json.loads(timings.read_text())
    return {
        "calls": calls,
        "rows": rows,
        "writer_legs": legs,
        "raw_fdatasync_p50_ms": raw_fdatasync_p50_ms(work, calls),
        # paced like a sequential client of the daemon: one write every ~2 ms
        "raw_fdatasync_paced_p50_ms": raw_fdatasync_p50_ms(work, calls, PACED_GAP_S),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="jd-anatomy-") as tmp:
        res = anatomy(Path(tmp), args.calls)
    print(f"\n{'daemon':10s} {'unary p50 ms':>13s} {'stream p50 ms':>14s}")
    for name, r in res["rows"].items():
        print(f"{name:10s} {r['unary_p50_ms']:13.3f} {r['stream_p50_ms']:14.3f}")
    print(
        f"raw write+fdatasync p50 {res['raw_fdatasync_p50_ms']:.3f} ms back to back, "
        f"{res['raw_fdatasync_paced_p50_ms']:.3f} ms paced {PACED_GAP_S * 1e3:.0f} ms apart"
    )
    print("inside the shipped daemon, per durable write (medians, ms):", res["writer_legs"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
