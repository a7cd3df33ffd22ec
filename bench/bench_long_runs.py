"""What a dormant run costs to resume and read as it grows: the "1k vs 1M" figures of issue 31
("Conversations of any size"), printed as a table.

    .venv/bin/python bench/bench_long_runs.py --data /tmp/jd-long --records 1000,100000
    .venv/bin/python bench/bench_long_runs.py --data /tmp/jd-long --records 1000,1000000
    .venv/bin/python bench/bench_long_runs.py --data /tmp/jd-long --daemon-code /tmp/old

Runs ``long<N>`` (N records of ~1 KB, alternating a tool call and its result, one message
each) are written once into ``--data`` with the file backend's own writer (``common.RunWriter``,
the bytes the daemon writes, in batches) and reused. Such a run has no fold snapshot, so a
first daemon opens and releases each run once: its lease end saves the snapshot and fold
marks a run written through the daemon has ("after the run's first fold, whatever wrote it").
A second, restarted daemon then measures, per run (median of ``--reps`` after one first call):

* ``open``: a windowed ``Open`` (resume, ``message_window`` 1000), to its first response;
* ``hist <view>``: a ``History`` tail page (the last 50 messages) in each view;
* ``fold -m``: ``Fold(omit_messages)``;
* ``snap KiB``: what a lease end writes to the run's index (the fold snapshot and its new
  message pages) after one ~1 KB record was appended, beside the bytes appended;
* ``rss +MiB``: the daemon's RSS while it holds the run's lease, over its RSS before.

``--daemon-code`` runs both daemons from another checkout (a ``git archive`` of an older
commit), to put before and after side by side in one machine state. Figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from resume_mem import _open_once, _wait_released, build_runs  # noqa: E402

from tests.daemon import Daemon  # noqa: E402

WINDOW = 1000
PAGE = 50
ROOMY = ("--max-message-bytes", "1GiB")
OPTS = [("grpc.max_receive_message_length", 1 << 30)]


def sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def index_bytes(run_dir: Path) -> dict[str, tuple[int, int]]:
    """(inode, size) of every file of the run's index and attachments (pages)."""
    out = {}
    for sub in ("checkpoints", "attachments"):
        for p in (run_dir / sub).glob("*"):
            if p.is_file():
                st = p.stat()
                out[str(p)] = (st.st_ino, st.st_size)
    return out


def written_since(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> int:
    """Bytes of every index file created or replaced (atomic writes: a new inode)."""
    return sum(size for p, (ino, size) in after.items() if before.get(p, (None, 0))[0] != ino)


def tail_pages(pb: Any, run_id: str, total: int) -> dict[str, Any]:
    """The History requests of the last ``PAGE`` messages, by view (what the goal measures)."""
    views = {
        "default": pb.HISTORY_VIEW_UNSPECIFIED,
        "state": pb.HISTORY_VIEW_STATE,
        "governed": pb.HISTORY_VIEW_GOVERNED,
    }
    offset = max(0, total - PAGE)
    return {
        name: pb.HistoryRequest(run_id=run_id, offset=offset, limit=PAGE, view=view)
        for name, view in views.items()
    }


async def median_ms(call: Callable[[], Awaitable[Any]], reps: int) -> tuple[float, float]:
    """(first call ms, median of ``reps`` more)."""
    times = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        await call()
        times.append((time.perf_counter() - t0) * 1e3)
    return times[0], statistics.median(times[1:])


def prepare(data: Path, runs: list[int], code: Path | None) -> None:
    """Write the missing runs; give each a snapshot as a daemon's lease end saves one."""
    missing = {f"long{n}": n for n in runs if not (data / "sessions" / f"long{n}").is_dir()}
    if missing:
        print(f"writing runs {', '.join(missing)} ...", flush=True)
        for run_id, s in build_runs(data, missing).items():
            print(f"  {run_id}: {s:.1f} s", flush=True)
    snap = "checkpoints/fold-snapshot.json"
    todo = [n for n in runs if not (data / "sessions" / f"long{n}" / snap).exists()]
    if not todo:
        return
    import grpc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    async def go(target: str) -> None:
        async with grpc.aio.insecure_channel(target, options=OPTS) as ch:
            stub = pbg.JournalServiceStub(ch)
            for n in todo:
                t0 = time.perf_counter()
                await _open_once(stub, pb, f"long{n}", WINDOW)
                await _wait_released(stub, pb, f"long{n}")
                print(f"  first fold of long{n}: {time.perf_counter() - t0:.1f} s", flush=True)

    with Daemon(data.parent, "file", *ROOMY, data_dir=data, cwd=code) as d:
        asyncio.run(go(d.target))
        for n in todo:  # the lease end's hook runs after the release
            path = data / "sessions" / f"long{n}" / snap
            for _ in range(6000):
                if path.exists():
                    break
                time.sleep(0.05)  # bench only: tests wait on conditions (tests/waiting.py)


def appended_record(n: int) -> tuple[str, dict[str, Any]]:
    """One ~1 KB record that continues run ``n`` (its last record is a call when n is even)."""
    from common import record_payload

    return record_payload(n + 1)


async def measure(d: Daemon, data: Path, n: int, reps: int) -> dict[str, Any]:
    import grpc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    from journald.server.convert import fingerprint_to_pb
    from tests.builders import FP

    run_id = f"long{n}"
    row: dict[str, Any] = {"records": n}
    async with grpc.aio.insecure_channel(d.target, options=OPTS) as ch:
        stub = pbg.JournalServiceStub(ch)

        async def open_release() -> None:
            await _open_once(stub, pb, run_id, WINDOW)
            await _wait_released(stub, pb, run_id)

        row["open"] = await median_ms(open_release, reps)
        total = (await stub.History(pb.HistoryRequest(run_id=run_id, limit=1))).total
        for name, req in tail_pages(pb, run_id, total).items():
            row[f"hist {name}"] = await median_ms(functools.partial(stub.History, req), reps)
        fold_req = pb.FoldRequest(run_id=run_id, omit_messages=True)
        row["fold -m"] = await median_ms(lambda: stub.Fold(fold_req), reps)

        # hold the run: RSS over the idle daemon's, then one append, then the lease end
        idle = d.vm_rss_bytes()
        call = stub.Open(
            pb.OpenRequest(
                run_id=run_id,
                mode=pb.OPEN_MODE_RESUME,
                fingerprint=fingerprint_to_pb(FP),
                message_window=WINDOW,
            )
        )
        first: Any = await call.read()
        row["rss"] = (d.vm_rss_bytes() - idle) / 2**20
        before = index_bytes(data / "sessions" / run_id)
        from common import record_pb

        rec = record_pb(pb, first.lease.last_seq + 1)
        ack = await stub.Append(
            pb.AppendRequest(run_id=run_id, lease_id=first.lease.lease_id, records=[rec])
        )
        row["appended"] = rec.ByteSize()
        call.cancel()
        await _wait_released(stub, pb, run_id)
        snap = data / "sessions" / run_id / "checkpoints" / "fold-snapshot.json"
        for _ in range(6000):  # the hook runs after the release
            if snap.stat().st_ino != before.get(str(snap), (None, 0))[0]:
                break
            await asyncio.sleep(0.05)
        row["snap"] = written_since(before, index_bytes(data / "sessions" / run_id)) / 1024
        assert ack.acks, ack
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="data dir (runs are reused)")
    ap.add_argument("--records", type=sizes, default=[1000, 100000])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--daemon-code",
        type=Path,
        help="run the daemons from this checkout (e.g. `git archive` of an older commit)",
    )
    args = ap.parse_args()
    data = args.data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    code = args.daemon_code.resolve() if args.daemon_code else None
    prepare(data, args.records, code)
    rows = []
    with Daemon(data.parent, "file", *ROOMY, data_dir=data, cwd=code) as d:
        for n in args.records:
            rows.append(asyncio.run(measure(d, data, n, args.reps)))
            print(f"  measured long{n}", flush=True)
    timed = ["open", "hist default", "hist state", "hist governed", "fold -m"]
    print("\nms: first call / median of the next", args.reps)
    print(
        f"{'records':>9} " + " ".join(f"{k:>15}" for k in timed) + "   snap KiB (app. B)  rss +MiB"
    )
    for r in rows:
        cells = " ".join(f"{r[k][0]:>7.1f}/{r[k][1]:<7.1f}" for k in timed)
        print(
            f"{r['records']:>9,} {cells}   {r['snap']:>8.1f} ({r['appended']:>5})  {r['rss']:>8.1f}"
        )
    if len(rows) > 1:
        lo, hi = rows[0], rows[-1]
        ratios = " ".join(f"{hi[k][1] / lo[k][1]:>15.2f}" for k in timed)
        print(f"{'ratio':>9} {ratios}   (median, {hi['records']:,} / {lo['records']:,})")


if __name__ == "__main__":
    main()
