"""What the shared socket's peer gate costs (journald/server/peers.py): the same writers
against a daemon on a private socket (gRPC on the socket itself, the default) and on a shared
one (``--socket-group``: the daemon accepts, reads SO_PEERCRED, and relays every byte to the
peer's own gRPC server), memory backend so only CPU is measured.

    .venv/bin/python bench/bench_peer_relay.py            # ~40 s
    .venv/bin/python bench/bench_peer_relay.py --quick    # ~10 s smoke

Prints, per mode: sequential 1 KB appends (p50/p99 latency), pipelined AppendStream
throughput (records/s, 64 in flight) and bulk 4 MiB Load throughput (MiB/s), plus the daemon's
CPU seconds per MiB moved, from /proc/<pid>/stat, and the shared/private ratios. Rounds are
interleaved so both modes see the same machine load.
"""

from __future__ import annotations

import argparse
import grp
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import journald_client as jc  # noqa: E402

from tests.daemon import Daemon  # noqa: E402

TEXT = "x" * 1000
FP = jc.compute(provider="anthropic", model="bench", system_prompt="s")


def pct(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(d: Daemon, n: int, tag: str) -> dict[str, float]:
    out: dict[str, float] = {}
    with jc.connect(str(d.socket)) as client:
        with client.start(f"seq-{tag}", FP, "p") as run:
            lat = []
            for _ in range(n):
                t = time.perf_counter()
                run.user(TEXT)
                lat.append(time.perf_counter() - t)
        out["p50_us"], out["p99_us"] = pct(lat, 50) * 1e6, pct(lat, 99) * 1e6
        with client.start(f"pipe-{tag}", FP, "p") as run, run.pipelined(64) as w:
            t = time.perf_counter()
            for _ in range(n * 4):
                w.append(jc.Entry.user(TEXT))
            w.flush()
            out["stream_rps"] = n * 4 / (time.perf_counter() - t)
        before = cpu_s(d.pid)
        t = time.perf_counter()
        moved = 0
        for _ in range(4):
            moved += sum(len(r.canonical) for r in client.load(f"pipe-{tag}"))
        wall = time.perf_counter() - t
        out["load_mib_s"] = moved / 2**20 / wall
        out["cpu_s_per_mib"] = (cpu_s(d.pid) - before) / (moved / 2**20)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, rounds = (300, 2) if args.quick else (1000, 3)
    group = grp.getgrgid(os.getegid()).gr_name
    results: dict[str, list[dict[str, float]]] = {"private": [], "shared": []}
    with tempfile.TemporaryDirectory() as tmp:
        daemons = {
            "private": Daemon(Path(tmp) / "p", "memory"),
            "shared": Daemon(Path(tmp) / "s", "memory", "--socket-group", group),
        }
        for d in daemons.values():
            d.tmp_path.mkdir()
            d.start()
        try:
            for r in range(rounds):
                for mode, d in daemons.items():
                    results[mode].append(one_round(d, n, f"{r}"))
        finally:
            for d in daemons.values():
                d.stop()
    keys = ("p50_us", "p99_us", "stream_rps", "load_mib_s", "cpu_s_per_mib")
    med = {m: {k: statistics.median(x[k] for x in rs) for k in keys} for m, rs in results.items()}
    print(f"{n} sequential appends, {4 * n} pipelined, 4 Loads of the latter; {rounds} rounds")
    print(f"{'mode':8} " + " ".join(f"{k:>14}" for k in keys))
    for mode in ("private", "shared"):
        print(f"{mode:8} " + " ".join(f"{med[mode][k]:14.3f}" for k in keys))
    ratio = {k: med["shared"][k] / med["private"][k] for k in keys}
    print(f"{'ratio':8} " + " ".join(f"{ratio[k]:14.2f}" for k in keys) + "   (shared / private)")


if __name__ == "__main__":
    main()
