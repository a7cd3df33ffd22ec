"""Bytes read (``rchar``) and CPU of the file store's two reads a dormant read of a run makes
before its fold (issue 31): ``load`` from a fold snapshot's seq near the end of the active
segment, and ``info`` (the dormant cache key), on runs whose active segment holds N ~1 KB
records (the daemon seals at 5,000). Run it with PYTHONPATH set to another tree to compare.

    .venv/bin/python bench/active_tail_reads.py 1000 5000
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, user_payload

REPEATS = 5
AFTER_SNAPSHOT = 9  # records appended after the snapshot the read continues from


def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise SystemExit("no rchar in /proc/self/io")


def cpu() -> float:
    t = os.times()
    return t.user + t.system


async def measure(n: int) -> None:
    b = JournalBuilder("r", prompt="p")
    for i in range(2, n + 1):
        b.add("user", user_payload(f"u{i} " + "x" * 1000))
    data = Path(tempfile.mkdtemp(prefix="active-tail-"))
    try:
        store = FileStore(data, segment_max_records=10**9, segment_max_bytes=1 << 40)
        journal = await store.create(b.records[0])
        for i in range(1, n, 500):
            await journal.append(b.records[i : i + 500])
        await journal.close()
        size = (data / "sessions" / "r" / "journal.jsonl").stat().st_size
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            (f"load(from {n - AFTER_SNAPSHOT})", lambda: store.load("r", n - AFTER_SNAPSHOT)),
            ("info", lambda: store.info("r")),
        ]
        for what, call in calls:
            r0, c0 = rchar(), cpu()
            for _ in range(REPEATS):
                await call()
            per_read = (rchar() - r0) // REPEATS
            ms = (cpu() - c0) * 1000 / REPEATS
            print(f"N={n} active={size} B {what}: read {per_read} B/call, cpu {ms:.1f} ms/call")
        await store.close()
    finally:
        shutil.rmtree(data)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        asyncio.run(measure(int(arg)))
