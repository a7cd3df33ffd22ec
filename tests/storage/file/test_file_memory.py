"""What a file journal keeps in memory: its recent records bounded in bytes, and nothing at
all once it is closed, without waiting for the cycle collector (docs/design.md#fair-shares)."""

from __future__ import annotations

import gc
import tracemalloc
import weakref
from pathlib import Path

from journald.core.records import make_record
from journald.storage.file.journal import RECENT_BYTES
from journald.storage.file.store import FileStore
from tests.builders import TS, JournalBuilder, user_payload

MiB = 1024 * 1024


async def test_a_closed_journal_is_freed_at_once_without_the_cycle_collector(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    b = JournalBuilder("freed")
    for i in range(3):
        b.add("user", user_payload(f"message {i}"))
    journal = await store.create(b.records[0])
    await journal.append(b.records[1:])
    gc.disable()
    try:
        await journal.close()
        ref = weakref.ref(journal)
        del journal
        assert ref() is None, "a closed journal waits for a garbage collection to be freed"
    finally:
        gc.enable()
        await store.close()


async def test_a_journal_of_large_records_keeps_a_bounded_number_of_their_bytes(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path, segment_max_bytes=1 << 40)
    meta = JournalBuilder("large").records[0]
    journal = await store.create(meta)
    written, prev = 0, meta.hash
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for seq in range(2, 42):  # 40 MB through one journal; the test keeps none of it
            rec = make_record(seq, "user", user_payload("x" * 1_000_000), prev, TS)
            await journal.append([rec])
            written, prev = written + len(rec.raw), rec.hash
            del rec
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        await journal.close()
        await store.close()
    assert held < RECENT_BYTES + 4 * MiB, (
        f"the journal keeps {held / MiB:.0f} MiB after {written / MiB:.0f} MiB were appended"
    )
