"""Issue 27's throughput goals at 16 agent processes, in one run: the no-op echo, unary Append
and the Python pipelined writer (window 16) against this tree's daemon and, with ``--before``,
an older tree's, beside SQLite WAL synchronous=FULL (bench/agent_procs.py runs each system).

    .venv/bin/python bench/agents_at_16.py --before /tmp/old-tree   # git archive of a commit

Prints records/s per system and the goal ratios: stream / SQLite FULL (goal >= 2) and unary /
echo (goal >= 0.8).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_per_record import cpu_s, echo_server, threads_cpu_s

AGENTS = 16


def busy_s() -> tuple[float, float]:
    """The machine's busy and total CPU seconds so far (/proc/stat, all CPUs)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / tick, sum(fields) / tick


class Sampler:
    """CPU shares inside the agents' window (from 0.5 s after ``go`` to 0.5 s before its end):
    the daemon's process and its event-loop thread, in CPUs (1.0: one CPU all the time), and
    the machine's busy share of all its CPUs."""

    def __init__(self, pid: int | None, seconds: float) -> None:
        self.pid, self.seconds = pid, seconds
        self.out: dict[str, float] = {}
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _read(self) -> tuple[float, float, float, float, float]:
        daemon = loop = 0.0
        if self.pid is not None:
            daemon = cpu_s(self.pid)
            loop = threads_cpu_s(self.pid).get("loop", 0.0)
        busy, total = busy_s()
        return time.perf_counter(), daemon, loop, busy, total

    def _sample(self) -> None:
        time.sleep(0.5)
        t0, d0, l0, b0, a0 = self._read()
        time.sleep(max(self.seconds - 1.0, 0.5))
        t1, d1, l1, b1, a1 = self._read()
        wall = t1 - t0
        self.out = {"daemon_cpus": (d1 - d0) / wall, "loop_cpus": (l1 - l0) / wall}
        self.out["machine_busy"] = (b1 - b0) / (a1 - a0) if a1 > a0 else float("nan")

    def result(self) -> dict[str, float]:
        if self.thread is not None:
            self.thread.join(self.seconds + 5)
        return self.out


def agents(
    ctx: Any, system: str, target: str, tag: str, seconds: float, pid: int | None = None
) -> dict[str, Any]:
    """Records/s of ``AGENTS`` agent processes of ``system``, and the CPU shares inside their
    window (``pid``: the daemon's)."""
    from run_all import run_agents

    sampler = Sampler(pid, seconds)
    row = run_agents(ctx, system, AGENTS, target, tag=tag, on_go=sampler.start, seconds=seconds)
    return {"rate": float(row["rate"]), **sampler.result()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, default=None, help="an older tree's code")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    from tests.daemon import Daemon

    work = Path(tempfile.mkdtemp(prefix="jd-a16-"))
    (work / "after").mkdir()
    old: contextlib.AbstractContextManager[Daemon | None] = contextlib.nullcontext(None)
    if args.before is not None:
        (work / "before").mkdir()
        old = Daemon(work / "before", "file", cwd=args.before.resolve())
    from run_all import Config, Ctx

    cfg = Config.make(quick=True, seconds=args.seconds, skip=set())
    cfg.procs = AGENTS
    ctx = Ctx(cfg, work)
    rows: dict[str, dict[str, Any]] = {}
    with (
        echo_server(work) as (echo_pid, echo),
        old as before,
        Daemon(work / "after", "file") as after,
    ):
        rows["echo"] = agents(ctx, "echo", echo, "echo", args.seconds, echo_pid)
        for when, d in (("before", before), ("after", after)):
            if d is None:
                continue
            for system in ("unary", "stream"):
                name = f"{system} ({when})"
                rows[name] = agents(ctx, system, d.target, f"{system}-{when}", args.seconds, d.pid)
        rows["sqlite FULL"] = agents(ctx, "sqlite", "", "sqlite", args.seconds)
    rates = {name: row["rate"] for name, row in rows.items()}
    print(f"\n{AGENTS} agent processes, {args.seconds:.0f} s each, file backend, ~1 KB records")
    print("  (server: the echo's or the daemon's CPUs in use, its loop thread's; machine busy)")
    for name, row in rows.items():
        server = (
            f"server {row['daemon_cpus']:.2f} CPUs, loop {row['loop_cpus']:.2f}; "
            if "daemon_cpus" in row and name != "sqlite FULL"
            else ""
        )
        busy = f"machine busy {row.get('machine_busy', float('nan')):.0%}"
        print(f"  {name:16} {row['rate']:8.0f} rec/s   {server}{busy}")
    goals: dict[str, dict[str, float]] = {}
    for when in ("before", "after"):
        if f"stream ({when})" in rates:
            stream = rates[f"stream ({when})"] / rates["sqlite FULL"]
            unary = rates[f"unary ({when})"] / rates["echo"]
            goals[when] = {"stream_vs_sqlite_full": stream, "unary_vs_echo": unary}
            print(
                f"{when}: stream / SQLite FULL {stream:.2f} (goal >= 2); "
                f"unary / echo {unary:.2f} (goal >= 0.8)"
            )
    if args.json is not None:
        figures = {"records_per_s": rates, "goals": goals, "cpu": rows}
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
