"""Crash-test writer: appends the workload with FileStore and prints every acknowledged seq.

    python -m tests.faults.file_writer DATA_DIR RUN_ID COUNT [--segment-records N]
        [--prune-at SEQ]

Output lines: ``open <last_seq> <repaired bytes>``, ``ack <seq> <hash>`` (only after the
append returned, i.e. after fdatasync), ``pruned <rebase_seq>``, ``done``. Failpoints come
from ``JOURNALD_FAILPOINTS``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from journald.storage.file.journal import FileJournal
from journald.storage.file.store import FileStore
from tests.faults.file_workload import expected


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("run_id")
    ap.add_argument("count", type=int)
    ap.add_argument("--segment-records", type=int, default=5)
    ap.add_argument("--prune-at", type=int, default=0)
    args = ap.parse_args()
    records = expected(args.run_id, args.count)
    store = FileStore(args.data_dir, segment_max_records=args.segment_records, gap_wait_s=2.0)
    journal: FileJournal
    if await store.exists(args.run_id):
        journal = await store.open(args.run_id)
        rep = journal.repair
        say(f"open {journal.last_seq} {rep.dropped_bytes if rep else 0}")
    else:
        journal = await store.create(records[0])
        say(f"ack 1 {journal.last_hash}")
    seq = journal.last_seq + 1
    step = 0
    while seq <= args.count:
        step += 1
        if step % 3 == 0 and seq + 2 <= args.count:
            # three parallel appends, later seqs first: the group-commit path
            batch = records[seq - 1 : seq + 2]
            results = await asyncio.gather(*(journal.append([r]) for r in reversed(batch)))
            acks = sorted((res[0].seq, res[0].hash) for res in results)
        else:
            n = 2 if step % 3 == 1 else 1
            batch = records[seq - 1 : min(seq - 1 + n, args.count)]
            acks = [(r.seq, r.hash) for r in await journal.append(batch)]
        for s, h in acks:
            say(f"ack {s} {h}")
        seq = journal.last_seq + 1
        if args.prune_at and seq > args.prune_at:
            args.prune_at = 0
            await journal.close()
            report = await store.prune(args.run_id)
            say(f"pruned {report.rebase_seq}")
            journal = await store.open(args.run_id)
    await journal.close()
    say("done")


if __name__ == "__main__":
    asyncio.run(main())
