"""The background scrubber's cost: how long one pass over a data directory takes, and what it
does to a bystander's appends (docs/design.md#scrubbing), printed as a table.

    .venv/bin/python bench/scrub.py                                 # 100 MB, ~4 minutes
    .venv/bin/python bench/scrub.py --mb 20 --rounds 2 --no-pass    # quick look

Steps, all on one disk (a temp dir under --dir):

1. a data directory of about ``--mb`` MB: runs of 1,000 ~1 KB records, sealed in segments of
   250 (``bench/common.RunWriter``);
2. one scrub pass over it as the daemon runs it (the child process
   ``journald.storage.file.scrub``) at the default budget, and once unpaced (what the walk
   costs on its own: the budget is what bounds the pass); a 1 GB pass is extrapolated from
   the paced one (the pass is linear in bytes);
3. a bystander: one run appending ~1 KB records by unary ``Append``, one at a time, on a daemon
   over that directory with the scrubber off and with it in the middle of a pass at the default
   budget. ``--rounds`` rounds of two ``--phase-s`` phases, one of each mode, the order
   alternating (off/on, on/off, ...) so that neither mode always runs first or last; one
   daemon per phase. The machine's load drifts over minutes, so the figure is the median of
   the per-round ratios (each compares two phases seconds apart), beside the pooled p50/p99
   of each mode; and the CPU seconds the scrub child used in the measured part of its phases.

Every daemon and child is stopped by its own pid; each loop is bounded by its phase time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from common import RunWriter, pct
from journald_client.pb import journal_pb2 as pb

from journald.server.scrub import DEFAULT_SCRUB_BYTES_PER_S
from journald.storage.file.store import FileStore
from tests.builders import TS
from tests.daemon import Daemon
from tests.integration.rpc import Lease, stub

RECORDS_PER_RUN = 1000
SEGMENT_RECORDS = 250
MiB = 1 << 20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def build(data: Path, mb: int) -> tuple[int, int]:
    """Runs of ``RECORDS_PER_RUN`` records until the directory holds ``mb`` MB; (runs, bytes)."""
    writer = RunWriter()
    writer.check()
    run_bytes = RECORDS_PER_RUN * (common.RECORD_BYTES + 120)
    runs = max(1, mb * 1_000_000 // run_bytes)

    async def go() -> None:
        store = FileStore(data, segment_max_records=SEGMENT_RECORDS)
        try:
            for i in range(runs):
                await writer.write(store, f"bulk-{i:04d}", RECORDS_PER_RUN, batch=250)
        finally:
            await store.close()

    asyncio.run(go())
    total = sum(p.stat().st_size for p in (data / "sessions").rglob("*.jsonl"))
    return runs, total


def one_pass(data: Path, bytes_per_s: int) -> tuple[float, int, int]:
    """(seconds, runs verified, bytes read) of the scrub child over every run of ``data``."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "journald.storage.file.scrub", str(data), str(bytes_per_s)],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    took = time.perf_counter() - started
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    bad = [r for r in rows if not r.get("ok")]
    if bad:
        raise AssertionError(f"the bench data did not verify: {bad[:2]}")
    return took, len(rows), sum(int(r["bytes"]) for r in rows)


def children(pid: int) -> list[int]:
    """The child processes of ``pid``, whichever of its threads started them."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def cpu_s(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far (/proc/PID/stat); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class Phase:
    """One bystander phase: its append latencies (s) and the scrub child's CPU seconds."""

    def __init__(self, scrub: bool) -> None:
        self.scrub = scrub
        self.lat: list[float] = []
        self.scrub_cpu_s = 0.0
        self.wall_s = 0.0


def bystander(tmp: Path, data: Path, scrub: bool, phase_s: float, n: int, budget: int) -> Phase:
    """Append latencies of one run on a daemon over ``data`` for ``phase_s`` seconds."""
    flags = ["--scrub-interval-s", "0.1" if scrub else "0", "--scrub-bytes-per-s", str(budget)]
    home = tmp / f"phase-{n}"
    home.mkdir()
    phase = Phase(scrub)
    with Daemon(home, "file", *flags, data_dir=data) as d:
        s = stub(d.target)
        lease = Lease(s, f"bystander-{n}")
        text = "x" * (common.RECORD_BYTES - 120)
        content = json.dumps([{"type": "text", "text": text}]).encode()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # warm up, and the pass gets going
            user = common_user(content)
            lease.append(pb_record(lease.next_seq(), user))
        kids = children(d.pid)
        if scrub and not kids:
            raise AssertionError("the scrub child is not running during the scrub phase")
        cpu_before = {pid: cpu_s(pid) for pid in kids}
        started = time.monotonic()
        deadline = started + phase_s
        while time.monotonic() < deadline:
            rec = pb_record(lease.next_seq(), common_user(content))
            t0 = time.perf_counter()
            lease.append(rec)
            phase.lat.append(time.perf_counter() - t0)
        phase.wall_s = time.monotonic() - started
        if scrub and not set(children(d.pid)) & set(cpu_before):
            raise AssertionError("the scrub pass ended before the phase did: use more --mb")
        phase.scrub_cpu_s = sum(cpu_s(pid) - before for pid, before in cpu_before.items())
        lease.release()
    return phase


def median(xs: list[float]) -> float:
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def row(label: str, lat: list[float], extra: str = "") -> str:
    return f"{label:>16} {len(lat):>8} {pct(lat, 50) * 1e3:>8.2f} {pct(lat, 99) * 1e3:>8.2f}{extra}"


def bystanders(tmp: Path, data: Path, rounds: int, phase_s: float, budget: int) -> None:
    """The alternating rounds, a line per phase, then the medians and the pooled figures."""
    print(f"\nbystander: unary Append of ~1 KB, one run, {rounds} rounds of 2 x {phase_s:g} s")
    print(f"{'round, scrubber':>16} {'appends':>8} {'p50 ms':>8} {'p99 ms':>8}   scrub CPU s")
    pooled: dict[bool, list[float]] = {False: [], True: []}
    ratios50: list[float] = []
    ratios99: list[float] = []
    cpu = wall = 0.0
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        got: dict[bool, Phase] = {}
        for i, scrub in enumerate(order):
            phase = bystander(tmp, data, scrub, phase_s, 2 * r + i, budget)
            got[scrub] = phase
            pooled[scrub] += phase.lat
            extra = f"   {phase.scrub_cpu_s:.2f}" if scrub else ""
            print(row(f"{r + 1} {'running' if scrub else 'off'}", phase.lat, extra))
            if scrub:
                cpu += phase.scrub_cpu_s
                wall += phase.wall_s
        on, off = got[True].lat, got[False].lat
        ratios50.append(pct(on, 50) / pct(off, 50))
        ratios99.append(pct(on, 99) / pct(off, 99))
        print(f"{'':>16} {'':>8} {ratios50[-1]:>7.2f}x {ratios99[-1]:>7.2f}x   round {r + 1}")
    print(row("off, pooled", pooled[False]))
    print(row("running, pooled", pooled[True]))
    p50 = pct(pooled[True], 50) / pct(pooled[False], 50)
    p99 = pct(pooled[True], 99) / pct(pooled[False], 99)
    print(f"{'pooled ratio':>16} {'':>8} {p50:>7.2f}x {p99:>7.2f}x")
    print(
        f"{'median ratio':>16} {'':>8} {median(ratios50):>7.2f}x {median(ratios99):>7.2f}x"
        f"   (goal <= 1.2x; rounds' p99 ratios {min(ratios99):.2f}x to {max(ratios99):.2f}x)"
    )
    print(
        f"scrub child CPU: {cpu:.2f} s over {wall:.0f} s of scrub phases"
        f" ({cpu / wall * 100:.1f}% of one core)"
    )


def common_user(content: bytes) -> pb.UserPayload:
    return pb.UserPayload(content_json=content)


def pb_record(seq: int, user: pb.UserPayload) -> pb.Record:
    return pb.Record(seq=seq, ts=TS, user=user)


def passes(data: Path, budget: int) -> None:
    free_s, _, _ = one_pass(data, 0)
    paced_s, n, read = one_pass(data, budget)
    print(f"\nscrub pass over {n} runs, {read / 1e6:.1f} MB read")
    print(f"  unpaced (the walk alone):       {free_s:7.1f} s  {read / free_s / 1e6:6.1f} MB/s")
    print(
        f"  budget {budget / MiB:.0f} MiB/s:                {paced_s:7.1f} s  "
        f"{read / paced_s / 1e6:6.1f} MB/s"
    )
    per_gb = paced_s * 1e9 / read
    print(f"  1 GB data dir (extrapolated):   {per_gb:7.0f} s  ({per_gb / 60:.1f} min)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=100, help="size of the data directory")
    ap.add_argument("--phase-s", type=float, default=5.0, help="seconds per bystander phase")
    ap.add_argument("--rounds", type=int, default=8, help="rounds of one phase per mode")
    ap.add_argument(
        "--budget", type=int, default=DEFAULT_SCRUB_BYTES_PER_S, help="scrub bytes per second"
    )
    ap.add_argument("--no-pass", action="store_true", help="only the bystander phases")
    ap.add_argument("--dir", default=None, help="where the temp data directory goes")
    args = ap.parse_args()
    budget = args.budget
    with tempfile.TemporaryDirectory(prefix="jd-scrub-bench-", dir=args.dir) as tmp_s:
        tmp = Path(tmp_s)
        data = tmp / "data"
        t0 = time.perf_counter()
        runs, total = build(data, args.mb)
        print(f"data dir: {runs} runs, {total / 1e6:.1f} MB ({time.perf_counter() - t0:.1f} s)")
        if not args.no_pass:
            passes(data, budget)
        bystanders(tmp, data, args.rounds, args.phase_s, budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
