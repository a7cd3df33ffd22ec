"""Contract-suite factory for the file backend: the options the registry opens it with."""

from __future__ import annotations

from pathlib import Path

from journald.storage.registry import BackendOptions


async def options(tmp_path: Path) -> BackendOptions:
    return BackendOptions(data_dir=tmp_path / "data", gap_wait_s=0.2, segment_max_records=4)
