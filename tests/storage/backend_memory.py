"""Contract-suite factory for the in-memory backend: the options the registry opens it with."""

from __future__ import annotations

from pathlib import Path

from journald.storage.registry import BackendOptions


async def options(tmp_path: Path) -> BackendOptions:
    return BackendOptions(gap_wait_s=0.2)
