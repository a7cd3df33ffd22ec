"""The background scrubber's cost: how long one pass over a data directory takes, and what it
does to a bystander's appends (docs/design.md#scrubbing), printed as a table.

    .venv/bin/python bench/scrub.py                      # 100 MB data dir, ~3 minutes
    .venv/bin/python bench/scrub.py --mb 20 --phase-s 5  # quick look

Steps, all on one disk (a temp dir under --dir):

1. a data directory of about ``--mb`` MB: runs of 1,000 ~1 KB records, sealed in segments of
   250 (``bench/common.RunWriter``);
2. one scrub pass over it as the daemon runs it (the child process
   ``journald.storage.file.scrub``) at the default budget, and once unpaced (what the walk
   costs on its own: the budget is what bounds the pass); a 1 GB pass is extrapolated from
   the paced one (the pass is linear in bytes);
3. a bystander: one run appending ~1 KB records by unary ``Append``, one at a time, on a daemon
   over that directory with the scrubber off and with it in the middle of a pass at the default
   budget, in alternating phases of ``--phase-s`` seconds (off, on, off, on, ... ``--rounds``
   of each), one daemon per phase; p50/p99 of each mode and their ratio.

Every daemon and child is stopped by its own pid; each loop is bounded by its phase time.
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


def bystander(
    tmp: Path, data: Path, scrub: bool, phase_s: float, n: int, budget: int
) -> list[float]:
    """Append latencies (s) of one run on a daemon over ``data`` for ``phase_s`` seconds."""
    flags = ["--scrub-interval-s", "0.1" if scrub else "0", "--scrub-bytes-per-s", str(budget)]
    home = tmp / f"phase-{n}"
    home.mkdir()
    lat: list[float] = []
    with Daemon(home, "file", *flags, data_dir=data) as d:
        s = stub(d.target)
        lease = Lease(s, f"bystander-{n}")
        text = "x" * (common.RECORD_BYTES - 120)
        content = json.dumps([{"type": "text", "text": text}]).encode()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # warm up, and the pass gets going
            user = common_user(content)
            lease.append(pb_record(lease.next_seq(), user))
        if scrub and not children(d.pid):
            raise AssertionError("the scrub child is not running during the scrub phase")
        deadline = time.monotonic() + phase_s
        while time.monotonic() < deadline:
            rec = pb_record(lease.next_seq(), common_user(content))
            t0 = time.perf_counter()
            lease.append(rec)
            lat.append(time.perf_counter() - t0)
        if scrub and not children(d.pid):
            raise AssertionError("the scrub pass ended before the phase did: use more --mb")
        lease.release()
    return lat


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
    ap.add_argument("--phase-s", type=float, default=10.0, help="seconds per bystander phase")
    ap.add_argument("--rounds", type=int, default=3, help="bystander phases per mode")
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
        modes: dict[bool, list[float]] = {False: [], True: []}
        print(f"\nbystander: unary Append of ~1 KB, one run, {args.phase_s:.0f} s phases")
        print(f"{'scrubber':>10} {'appends':>8} {'p50 ms':>8} {'p99 ms':>8}")
        for n_phase in range(2 * args.rounds):
            scrub = n_phase % 2 == 1
            lat = bystander(tmp, data, scrub, args.phase_s, n_phase, budget)
            modes[scrub] += lat
            print(
                f"{'running' if scrub else 'off':>10} {len(lat):>8} "
                f"{pct(lat, 50) * 1e3:>8.2f} {pct(lat, 99) * 1e3:>8.2f}   phase {n_phase + 1}"
            )
        for scrub in (False, True):
            lat = modes[scrub]
            print(
                f"{'running' if scrub else 'off':>10} {len(lat):>8} "
                f"{pct(lat, 50) * 1e3:>8.2f} {pct(lat, 99) * 1e3:>8.2f}"
            )
        p50 = pct(modes[True], 50) / pct(modes[False], 50)
        p99 = pct(modes[True], 99) / pct(modes[False], 99)
        print(f"{'ratio':>10} {'':>8} {p50:>7.2f}x {p99:>7.2f}x   (goal <= 1.2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
