"""Contract-suite factory for the in-memory backend (opened through the backend registry)."""

from __future__ import annotations

from pathlib import Path

from journald.storage.base import Store
from journald.storage.registry import BackendOptions, open_backend


def options(tmp_path: Path) -> BackendOptions:
    return BackendOptions(gap_wait_s=0.2)


async def make_store(tmp_path: Path) -> Store:
    return (await open_backend("memory", options(tmp_path))).records


async def reopen_store(store: Store, tmp_path: Path) -> Store:
    # Memory has no persistence; the same object stands for "after restart".
    return store
