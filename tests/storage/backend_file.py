"""Contract-suite factory for the file backend (opened through the backend registry)."""

from __future__ import annotations

from pathlib import Path

from journald.storage.base import Store
from journald.storage.registry import BackendOptions, open_backend


def options(tmp_path: Path) -> BackendOptions:
    return BackendOptions(data_dir=tmp_path / "data", gap_wait_s=0.2, segment_max_records=4)


async def make_store(tmp_path: Path) -> Store:
    return (await open_backend("file", options(tmp_path))).records


async def reopen_store(store: Store, tmp_path: Path) -> Store:
    await store.close()
    return await make_store(tmp_path)
