"""Open with a message window vs Open of every message (window 0), printed as a table.

    .venv/bin/python bench/open_window.py --data /tmp/jd-resume-speed --runs 1000,10000,100000

Runs ``r<N>`` (N ~1 KB records, one message each: resume_speed's runs) are written once into
``--data`` and reused. One real daemon (file backend, ``--max-message-bytes 1GiB`` so window
0 can answer the 100k run); for each run, median of ``--reps``:

* ``Open``: time to the first response of a raw ``Open`` (resume) and its size, with
  ``message_window`` 1000 and 0 (the lease is released before the next one);
* ``Fold``: the same for a raw ``Fold`` (the daemon holds no lease; its fold of a dormant run
  is cached, warm here: this is the cost of building and sending the answer);
* ``client``: the sync Python client resuming the run and reading ``state.messages`` (window
  plus History pages, vs one answer with ``message_window=0``); the last columns are then the
  messages read, not bytes.

With ``--dormant`` (issue 31 items 3-4, docs/design.md#the-state-does-not-hold-the-run): for
each run, after one lease end has saved its snapshot, on a freshly started daemon, the first
call and the median of ``--reps`` repeats of a windowed ``Open`` (1000), a ``History`` tail
page (50 messages) in each view and ``Fold(omit_messages)``; then the daemon's RSS while it
holds the largest run (beside its idle RSS) and the bytes a lease end writes (snapshot
document and new pages) after 100 appended ~1 KB records, beside the bytes appended.

``--daemon-code DIR`` starts every daemon from ``DIR`` (a ``git archive`` of another commit:
``python -m`` imports from its working directory first), to measure that tree's daemon with
this script; use another ``--data`` for it (a lease end of one tree changes the runs).

Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import run_bytes
from resume_mem import rchar
from resume_speed import ROOMY, ensure_runs, sizes

from tests.daemon import Daemon

WINDOW = 1000
GRPC_OPTS = [("grpc.max_receive_message_length", 1 << 30)]


def median_ms(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, out


def main() -> None:
    import grpc
    import journald_client as jc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    from journald.server.convert import fingerprint_to_pb
    from tests.builders import FP

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="data dir (runs are reused)")
    ap.add_argument("--runs", type=sizes, default=[1000, 10000, 100000])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dormant", action="store_true", help="the dormant-read figures instead")
    ap.add_argument("--daemon-code", type=Path, help="start the daemons from this tree")
    args = ap.parse_args()
    code = args.daemon_code.resolve() if args.daemon_code else None
    data = args.data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    ensure_runs(data, args.runs)
    fp = fingerprint_to_pb(FP)
    if args.dormant:
        dormant(data, args.runs, args.reps, code)
        return

    with Daemon(data.parent, "file", *ROOMY, data_dir=data, cwd=code) as d:
        s = pbg.JournalServiceStub(grpc.insecure_channel(d.target, options=GRPC_OPTS))

        def open_once(run_id: str, window: int) -> int:
            req = pb.OpenRequest(
                run_id=run_id, mode=pb.OPEN_MODE_RESUME, fingerprint=fp, message_window=window
            )
            call = s.Open(req)
            lease = next(iter(call)).lease
            size = pb.OpenResponse(lease=lease).ByteSize()
            s.Release(pb.ReleaseRequest(run_id=run_id, lease_id=lease.lease_id))
            call.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs leaves cancel unannotated
            return size

        def fold_once(run_id: str, window: int) -> int:
            resp = s.Fold(pb.FoldRequest(run_id=run_id, message_window=window))
            return int(resp.ByteSize())

        def client_once(run_id: str, window: int) -> int:
            with (
                jc.connect(str(d.socket), message_window=window, max_message_bytes=1 << 30) as c,
                c.resume(run_id, jc.Fingerprint.from_pb(fp)) as run,
            ):
                return len(run.state.messages)

        print(f"window {WINDOW} vs 0 (every message), median of {args.reps}")
        head = f"{'records':>9} {'call':>7} {'ms w=' + str(WINDOW):>10} {'ms w=0':>9}"
        print(f"{head} {'ratio':>6} {'bytes w=' + str(WINDOW):>13} {'bytes w=0':>12}")
        for n in args.runs:
            run_id = f"r{n}"
            open_once(run_id, 0)  # warm the page cache and the daemon
            fold_once(run_id, 1)  # and its cached fold of the dormant run
            for name, fn in (("Open", open_once), ("Fold", fold_once), ("client", client_once)):
                w_ms, w_out = median_ms(functools.partial(fn, run_id, WINDOW), args.reps)
                a_ms, a_out = median_ms(functools.partial(fn, run_id, 0), args.reps)
                print(
                    f"{n:>9,} {name:>7} {w_ms:>10.1f} {a_ms:>9.1f} {a_ms / w_ms:>6.2f} "
                    f"{w_out:>13,} {a_out:>12,}",
                    flush=True,
                )


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def dormant(data: Path, runs: list[int], reps: int, code: Path | None = None) -> None:
    import grpc
    import journald_client as jc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    from journald.server.convert import fingerprint_to_pb
    from tests.builders import FP

    fp = fingerprint_to_pb(FP)

    def stub(d: Daemon) -> Any:
        return pbg.JournalServiceStub(grpc.insecure_channel(d.target, options=GRPC_OPTS))

    def open_req(run_id: str) -> Any:
        return pb.OpenRequest(
            run_id=run_id, mode=pb.OPEN_MODE_RESUME, fingerprint=fp, message_window=WINDOW
        )

    def open_release(s: Any, run_id: str) -> int:
        call = s.Open(open_req(run_id))
        lease = next(iter(call)).lease
        s.Release(pb.ReleaseRequest(run_id=run_id, lease_id=lease.lease_id))
        call.cancel()
        return len(lease.state.messages)

    with Daemon(data.parent, "file", *ROOMY, data_dir=data, cwd=code) as d:
        for n in runs:  # one lease end each: the snapshot every later read starts from
            open_release(stub(d), f"r{n}")
    views = {
        "stored": pb.HISTORY_VIEW_STATE,
        "cleaned": pb.HISTORY_VIEW_UNSPECIFIED,
        "governed": pb.HISTORY_VIEW_GOVERNED,
    }
    print(f"dormant reads, fresh daemon per run: first call / median of {reps} repeats (ms)")
    print("(read: bytes the daemon read for the first call, rchar of /proc/PID/io: load-free)")
    print(f"{'records':>9} {'call':>16} {'first':>8} {'median':>8} {'read KiB':>9}")
    for n in runs:
        run_id = f"r{n}"
        with Daemon(data.parent, "file", *ROOMY, data_dir=data, cwd=code) as d:
            s = stub(d)
            # the daemon's first call reads ~2 MiB of its own (lazy imports): spend it on
            # another run, so the bytes below are this run's
            other = f"r{min(runs)}" if n != min(runs) else f"r{max(runs)}"
            s.Fold(pb.FoldRequest(run_id=other, omit_messages=True))
            calls: dict[str, Callable[[], Any]] = {
                "Fold(omit)": functools.partial(
                    s.Fold, pb.FoldRequest(run_id=run_id, omit_messages=True)
                ),
                f"Open(w={WINDOW})": functools.partial(open_release, s, run_id),
            }
            for name, view in views.items():
                calls[f"History {name}"] = functools.partial(
                    s.History,
                    pb.HistoryRequest(run_id=run_id, offset=max(0, n - 50), limit=50, view=view),
                )
            for name, fn in calls.items():
                read0 = rchar(d.pid)
                first, _ = median_ms(fn, 1)
                read = rchar(d.pid) - read0
                med, _ = median_ms(fn, reps)
                print(f"{n:>9,} {name:>16} {first:>8.1f} {med:>8.1f} {read / 1024:>9.0f}")
    big = f"r{max(runs)}"
    run_dir = data / "sessions" / big
    with Daemon(data.parent, "file", *ROOMY, data_dir=data, cwd=code) as d:
        idle = rss_kib(d.pid)
        s = stub(d)
        call = s.Open(open_req(big))
        lease = next(iter(call)).lease
        held = rss_kib(d.pid)
        s.Release(pb.ReleaseRequest(run_id=big, lease_id=lease.lease_id))
        call.cancel()
        print(
            f"\nRSS holding {big}: {held / 1024:.1f} MiB "
            f"(idle {idle / 1024:.1f} MiB, +{(held - idle) / 1024:.1f} MiB)"
        )
        snap = run_dir / "checkpoints" / "fold-snapshot.json"
        before = (run_bytes(run_dir), dir_bytes(run_dir / "attachments"))
        with (
            jc.connect(str(d.socket), message_window=WINDOW, max_message_bytes=1 << 30) as c,
            c.resume(big, jc.Fingerprint.from_pb(fp)) as run,
        ):
            pending = run.state.pending  # the run may end on a turn whose call is unanswered
            for call in pending.unanswered if pending is not None else []:
                run.tool_result(call.id, "ok")
            for i in range(50):
                run.assistant(f"late answer {i} " + "a" * 1000, stop_reason="end_turn")
                run.user(f"late question {i} " + "q" * 1000)
        appended = run_bytes(run_dir) - before[0]
        pages = dir_bytes(run_dir / "attachments") - before[1]
        snapshot = snap.stat().st_size
        print(
            f"lease end after {appended:,} bytes appended: snapshot {snapshot:,} bytes + new "
            f"pages {pages:,} bytes = {(snapshot + pages) / appended:.2f}x appended "
            f"(goal <= 2x + 64 KiB: {(2 * appended + 65536):,})"
        )


if __name__ == "__main__":
    main()
