"""Checkpoints, attachments and fold marks held in the process (the memory backend's): they
last as long as the daemon, like its runs."""

from __future__ import annotations

from typing import Any

from journald import failpoints
from journald.core.checkpoints import (
    Checkpoint,
    CheckpointMeta,
    attachment_missing,
    checkpoint_missing,
    valid_sha256,
)
from journald.core.records import sha256_hex
from journald.storage.checkpoint_base import MARK_PARTS, MARKS


class MemoryCheckpointStore:
    def __init__(self) -> None:
        self._runs: dict[str, dict[str, Checkpoint]] = {}
        self._marks: dict[tuple[str, str], dict[str, Any]] = {}

    async def put(self, cp: Checkpoint) -> None:
        if failpoints.ARMED:
            failpoints.hit("cp_before_write")
        self._runs.setdefault(cp.meta.run_id, {})[cp.checkpoint_id] = cp

    async def get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        cp = self._runs.get(run_id, {}).get(checkpoint_id)
        if cp is None:
            raise checkpoint_missing(run_id, checkpoint_id)
        return cp

    async def list(self, run_id: str) -> list[CheckpointMeta]:
        cps = self._runs.get(run_id, {})
        return [cps[k].meta for k in sorted(cps)]

    async def delete(self, run_id: str, checkpoint_id: str) -> bool:
        return self._runs.get(run_id, {}).pop(checkpoint_id, None) is not None

    async def owner(self, checkpoint_id: str) -> str | None:
        return next((r for r, cps in self._runs.items() if checkpoint_id in cps), None)

    async def newest_id(self) -> str | None:
        return max((cid for cps in self._runs.values() for cid in cps), default=None)

    async def drop_run(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
        for part in MARK_PARTS:
            self._marks.pop((run_id, part), None)

    async def save_mark(self, run_id: str, mark: dict[str, Any], part: str = MARKS) -> None:
        self._marks[(run_id, part)] = dict(mark)

    async def load_mark(self, run_id: str, part: str = MARKS) -> dict[str, Any] | None:
        return self._marks.get((run_id, part))


class MemoryAttachmentStore:
    def __init__(self) -> None:
        self._runs: dict[str, dict[str, bytes]] = {}

    async def put(self, run_id: str, data: bytes) -> tuple[str, bool]:
        digest = sha256_hex(data)
        blobs = self._runs.setdefault(run_id, {})
        existed = digest in blobs
        blobs[digest] = bytes(data)
        return digest, existed

    async def get(self, run_id: str, digest: str) -> bytes:
        data = self._runs.get(run_id, {}).get(valid_sha256(digest))
        if data is None:
            raise attachment_missing(run_id, digest)
        return data

    async def drop_run(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
