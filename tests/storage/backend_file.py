"""Contract-suite factory for the file backend."""

from __future__ import annotations

from pathlib import Path

from journald.storage.file import FileStore


async def make_store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "data", gap_wait_s=0.2, segment_max_records=4)


async def reopen_store(store: FileStore, tmp_path: Path) -> FileStore:
    await store.close()
    return FileStore(tmp_path / "data", gap_wait_s=0.2, segment_max_records=4)
