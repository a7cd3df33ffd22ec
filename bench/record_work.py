"""The record's own work on the daemon, in process (issue 27 item 3): CPU per record of the
append path's Python steps without gRPC, the event loop or the disk, so it can be compared
between two trees on a loaded machine (process CPU, the least of several rounds).

    .venv/bin/python bench/record_work.py               # this tree, batches of 16
    (cd /tmp/record-before && /work/wt/record/.venv/bin/python bench/record_work.py)

Per batch: the proto parsed (``FromString``), decoded into normal form
(``convert.incoming_from_pb``: the JSON fields parsed once), the batch's seq order, the gate's
plan (link, encode and hash once, schema and size), admission, the fold and the stored lines
(``segments.frame``). ``--stages`` also times each step alone over the same records.
``--append`` also times the servicer's whole ``JournalService._append`` of the same batches in
process, on the file backend in a temp dir (the record's work plus the lease check, the
pipeline, the acks, the held log's upkeep and the group write with its AIO ``fdatasync``
submitted; no gRPC): what a batch costs the daemon beyond the framework's share of the call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path.cwd()
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from common import TS, record_pb  # noqa: E402
from journald_proto import journal_pb2 as pb  # noqa: E402

from journald.core.admission import admit  # noqa: E402
from journald.core.fold import RunState, fold_into  # noqa: E402
from journald.core.records import GENESIS, make_record  # noqa: E402
from journald.core.schema import validate_record  # noqa: E402
from journald.server.convert import incoming_from_pb  # noqa: E402
from journald.storage.file.segments import frame  # noqa: E402
from journald.writer.gate import Gate  # noqa: E402
from tests.builders import meta_payload  # noqa: E402


def one_pass(blobs: list[list[bytes]]) -> None:
    meta = make_record(1, "meta", meta_payload("r"), GENESIS, TS)
    state = fold_into(RunState(), (meta,))
    gate = Gate(1 << 20)
    prev, at = meta.hash, 1
    for batch in blobs:
        msgs = [pb.Record.FromString(b) for b in batch]
        items = [incoming_from_pb(m, index=i, ts=m.ts) for i, m in enumerate(msgs)]
        gate.batch("r", items)
        _, new = gate.plan("r", at, prev, {}, items, None)
        admit(state, new)
        fold_into(state, new, None)
        b"".join(frame(r) for r in new)
        prev, at = new[-1].hash, new[-1].seq


def _validate_all(recs: list[Any]) -> None:
    for r in recs:
        validate_record(r)


def least(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


async def append_us(blobs: list[list[bytes]], repeat: int) -> float:
    """CPU per record of ``JournalService._append`` of ``blobs`` (one request a batch) in this
    process, file backend in a temp dir, the least of ``repeat`` rounds (each on a run of its
    own, so every round appends to a run of the same length)."""
    import tempfile

    from journald.server.convert import fingerprint_to_pb
    from journald.server.service import JournalService
    from journald.storage.registry import BackendOptions, open_backend
    from tests.builders import FP

    class Context:
        def peer(self) -> str:
            return "unix:"

        def invocation_metadata(self) -> tuple[Any, ...]:
            return ()

    with tempfile.TemporaryDirectory(prefix="journald-record-work-") as tmp:
        opened = await open_backend("file", BackendOptions(data_dir=Path(tmp)))
        svc = JournalService(
            opened.records, checkpoints=opened.checkpoints, attachments=opened.attachments
        )
        best = float("inf")
        n = sum(len(b) for b in blobs)
        for r in range(repeat + 1):  # the first round warms
            run_id = f"work-{r}"
            req = pb.OpenRequest(run_id=run_id, mode=pb.OPEN_MODE_CREATE)
            req.fingerprint.CopyFrom(fingerprint_to_pb(FP))
            lease = svc._open(req, Context())  # type: ignore[arg-type]
            lease_id = (await lease.__anext__()).lease.lease_id
            calls = [
                pb.AppendRequest(
                    run_id=run_id, lease_id=lease_id, records=[pb.Record.FromString(b) for b in bs]
                ).SerializeToString()
                for bs in blobs
            ]
            t0 = time.process_time()
            for call in calls:
                await svc._append(pb.AppendRequest.FromString(call), None)
            if r:
                best = min(best, time.process_time() - t0)
            await lease.aclose()  # type: ignore[attr-defined]
        await opened.records.close()
    return best / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--records", type=int, default=4800)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--append", action="store_true", help="also the servicer's whole _append")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    n = args.records - args.records % args.batch
    seqs = list(range(2, 2 + n))
    blobs = [
        [record_pb(pb, s).SerializeToString() for s in seqs[i : i + args.batch]]
        for i in range(0, n, args.batch)
    ]
    one_pass(blobs)  # warm: schema compiled, caches filled
    us = least(lambda: one_pass(blobs), args.repeat) / n * 1e6
    print(
        f"record's own work: {us:.1f} µs per record (batches of {args.batch}, least of "
        f"{args.repeat} rounds of {n} records)"
    )
    figures = {"record_work_us": us, "batch": args.batch}
    if args.append:
        import uvloop

        whole = uvloop.run(append_us(blobs, args.repeat))
        figures["append_us"] = whole
        print(f"the servicer's whole _append in process (file backend): {whole:.1f} µs per record")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))
    if args.stages:
        msgs = [pb.Record.FromString(b) for batch in blobs for b in batch]
        items = [incoming_from_pb(m, ts=m.ts) for m in msgs]
        recs = [make_record(i.seq, i.kind, i.payload, GENESIS, i.ts) for i in items]
        stages: list[tuple[str, Callable[[], Any]]] = [
            ("proto FromString", lambda: [pb.Record.FromString(b) for bs in blobs for b in bs]),
            ("incoming_from_pb", lambda: [incoming_from_pb(m, ts=m.ts) for m in msgs]),
            (
                "make_record",
                lambda: [make_record(i.seq, i.kind, i.payload, GENESIS, i.ts) for i in items],
            ),
            ("validate_record", lambda: _validate_all(recs)),
            ("frame", lambda: [frame(r) for r in recs]),
        ]
        for name, fn in stages:
            print(f"  {name:20s} {least(fn, args.repeat) / n * 1e6:6.1f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
