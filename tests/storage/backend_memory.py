"""Contract-suite factory for the in-memory backend."""

from __future__ import annotations

from pathlib import Path

from journald.storage.memory import MemoryStore


async def make_store(tmp_path: Path) -> MemoryStore:
    return MemoryStore(gap_wait_s=0.2)


async def reopen_store(store: MemoryStore, tmp_path: Path) -> MemoryStore:
    # Memory has no persistence; the same object stands for "after restart".
    return store
