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
    args = ap.parse_args()
    data = args.data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    ensure_runs(data, args.runs)
    fp = fingerprint_to_pb(FP)

    with Daemon(data.parent, "file", *ROOMY, data_dir=data) as d:
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


if __name__ == "__main__":
    main()
