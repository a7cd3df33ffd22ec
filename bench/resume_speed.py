"""Open (resume) and History tail-page timings on the file backend, printed as a table.

A quicker companion of the resume step of bench/run_all.py (same runs, same daemon calls,
without the report), for measuring a change before and after::

    .venv/bin/python bench/resume_speed.py --data /tmp/jd-resume-speed \
        --open 1000,10000,100000 --history 1000,100000,1000000

Runs ``r<N>`` (N ~1 KB records) are written once into ``--data`` and reused by later
invocations. Figures:

* ``Open``: time to the first Open response of a real daemon (median of ``--reps``), beside
  reading + JSON-parsing the run's files in a loop, and the in-process breakdown of the same
  steps (``resume_mem.open_breakdown``);
* ``History``: the tail page (offset = total - 50, limit 50) of a run on a restarted daemon
  that holds no lease on it; a first daemon indexes each run once (fold marks), as in
  ``run_all.history_runs``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import resume_mem

from tests.daemon import Daemon

ROOMY = ("--max-message-bytes", "1GiB")


def sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def ensure_runs(data: Path, wanted: list[int]) -> None:
    missing = {f"r{n}": n for n in wanted if not (data / "sessions" / f"r{n}").is_dir()}
    if missing:
        print(f"writing runs {', '.join(missing)} ...", flush=True)
        took = resume_mem.build_runs(data, missing)
        for run_id, s in took.items():
            print(f"  {run_id}: {s:.1f} s", flush=True)


def measure_open(data: Path, runs: list[int], reps: int) -> None:
    print("\nOpen (resume), real daemon, median of", reps)
    print("(first ms: the first Open of the run on this daemon; a lease end saves a snapshot")
    print(" of the folded run that later Opens start from)")
    head = f"{'records':>9} {'open ms':>9} {'first ms':>9} {'parse ms':>9} {'ratio':>6}"
    print(f"{head}  daemon read")
    with Daemon(data.parent, "file", *ROOMY, data_dir=data) as d:
        rows = resume_mem.open_times(d.target, d.pid, data, {f"r{n}": n for n in runs}, reps)
    for r in rows:
        print(
            f"{r['records']:>9,} {r['open_ms']:>9.1f} {r['open_all_ms'][0]:>9.1f} "
            f"{r['parse_ms']:>9.1f} {r['open_ms'] / r['parse_ms']:>6.2f}  "
            f"{r['bytes_read'] / 2**20:.1f} MiB (run {r['run_bytes'] / 2**20:.1f} MiB)"
        )
    print("\nOpen breakdown, in-process (ms, median of", reps, ")")
    for n in runs:
        parts: dict[str, list[float]] = {}
        for _ in range(reps):
            for k, v in resume_mem.open_breakdown(data, f"r{n}").items():
                parts.setdefault(k, []).append(v)
        print(f"  r{n}: " + "; ".join(f"{k} {statistics.median(v):.1f}" for k, v in parts.items()))


def measure_history(data: Path, runs: list[int], reps: int) -> None:
    print("\nHistory tail page (50 messages), restarted daemon, no lease")
    with Daemon(data.parent, "file", *ROOMY, data_dir=data) as d:
        for n in runs:
            t0 = time.perf_counter()
            resume_mem.history_tail(d.target, f"r{n}", n - 1, 1)
            print(f"  indexed r{n} in {time.perf_counter() - t0:.1f} s", flush=True)
    print(f"{'messages':>10} {'first ms':>9} {'repeats ms':>11}")
    with Daemon(data.parent, "file", *ROOMY, data_dir=data) as d:
        for n in runs:
            h = resume_mem.history_tail(d.target, f"r{n}", n - 1, reps + 1)
            print(f"{h['messages']:>10,} {h['page_ms']:>9.1f} {h['warm_ms']:>11.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="data dir (runs are reused)")
    ap.add_argument("--open", type=sizes, default=[1000, 10000, 100000])
    ap.add_argument("--history", type=sizes, default=[1000, 100000])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    data = args.data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    ensure_runs(data, sorted(set(args.open) | set(args.history)))
    if args.open:
        measure_open(data, args.open, args.reps)
    if args.history:
        measure_history(data, args.history, args.reps)


if __name__ == "__main__":
    main()
