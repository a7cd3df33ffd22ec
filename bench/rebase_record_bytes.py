"""Bytes of the rebase record a restore writes for a conversation of N message pages: every
page reference listed (before page-reference chunks) against full chunks in ``page_chunks``
and the loose references in ``pages`` (docs/benchmarks.md, "Restore, fork and import of
large conversations"). Pure: cuts the conversation and builds both records, no daemon.

    .venv/bin/python bench/rebase_record_bytes.py                  # 1,000 pages of 128 KiB
    .venv/bin/python bench/rebase_record_bytes.py --pages 1000 8000 50000 --small

``--small`` cuts tiny messages at a 1-byte page target (one page each) to reach large page
counts quickly; a reference is then a few bytes shorter (its ``size`` has fewer digits).
"""

from __future__ import annotations

import argparse
from typing import Any

from journald.core.pages import PAGE_TARGET_BYTES, cut, paged_payload
from journald.core.rebase_chunks import rebase_payload
from journald.core.records import GENESIS, canonical_json, make_record

TS = "2026-12-02T00:00:00.000000Z"
BASE = {"reason": "restore", "checkpoint_id": "01M8VVJ3XQDNFHBQH810102X7C"}


def conversation(pages: int, small: bool) -> tuple[list[dict[str, Any]], int]:
    body = "x" if small else "y" * PAGE_TARGET_BYTES  # one message closes a page
    msgs = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": [{"type": "text", "text": f"{i} {body}"}],
        }
        for i in range(pages)
    ]
    return msgs, 1 if small else PAGE_TARGET_BYTES


def record_bytes(payload: dict[str, Any]) -> int:
    rec = make_record(2, "rebase", payload, GENESIS, TS)
    return len(canonical_json(rec.as_json()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pages", type=int, nargs="+", default=[1000])
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    print("pages | conversation MiB | listed (before) bytes | chunked (after) bytes | chunks")
    for n in args.pages:
        msgs, target = conversation(n, args.small)
        paged = cut(msgs, target)
        before = record_bytes(paged_payload(BASE, paged))
        payload, rebase = rebase_payload(BASE, paged)
        after = record_bytes(payload)
        mib = sum(r.size for r in paged.refs) / 2**20
        print(f"{len(paged.refs)} | {mib:.1f} | {before} | {after} | {len(rebase.chunks)}")


if __name__ == "__main__":
    main()
