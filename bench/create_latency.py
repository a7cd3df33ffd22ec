"""What a new run costs in the file backend: ``FileStore.create`` (directory, lock, format
manifest, the meta record's write and fdatasync, directory fsyncs) and the first append.

    .venv/bin/python bench/create_latency.py [--runs 200] [--dir DIR]

Prints p50/p99 of create and of the append after it, in ms, for ``--runs`` runs made one
after another in a temp directory (or DIR, on the disk to measure). Takes < 20 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

if os.environ.get("JOURNALD_BENCH_TREE") is None:  # measure another tree with its PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from journald.core.records import GENESIS, make_record
from journald.storage.file.store import FileStore

TS = "2026-11-30T12:00:00.000000Z"


def meta_payload(run_id: str) -> dict[str, object]:
    return {
        "run_id": run_id,
        "created": TS,
        "fingerprint": {
            "provider": "anthropic",
            "model": "m",
            "system_prompt_sha256": "0" * 64,
            "tools_sha256": "0" * 64,
            "thinking": "off",
            "max_tokens": 0,
            "max_iterations": 0,
        },
        "interactive": False,
        "prompt": [{"type": "text", "text": "hello"}],
    }


def ms(values: list[float]) -> str:
    q = statistics.quantiles(values, n=100)
    return f"p50 {q[49] * 1000:.2f} ms, p99 {q[98] * 1000:.2f} ms"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--dir", help="directory on the disk to measure (default: a temp dir)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="jd-create-", dir=args.dir)
    try:
        store = FileStore(root)
        creates: list[float] = []
        appends: list[float] = []
        for i in range(args.runs):
            run_id = f"run-{i}"
            meta = make_record(1, "meta", meta_payload(run_id), GENESIS, TS)
            user = make_record(
                2, "user", {"content": [{"type": "text", "text": "hi"}]}, meta.hash, TS
            )
            t0 = time.perf_counter()
            journal = await store.create(meta)
            t1 = time.perf_counter()
            await journal.append([user])
            t2 = time.perf_counter()
            await journal.close()
            creates.append(t1 - t0)
            appends.append(t2 - t1)
        await store.close()
        print(f"create ({args.runs} runs): {ms(creates)}")
        print(f"first append after it: {ms(appends)}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
