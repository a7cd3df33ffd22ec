"""Checkpoints, attachments and fold marks as files (the file backend's, and any backend's
when the daemon is given ``--checkpoint-dir``; see docs/design.md#checkpoints).

* checkpoints: ``<dir>/<ULID>.json`` per checkpoint (``journald-checkpoint-file/1``);
* the fold mark: ``<dir>/fold-mark.json`` (History's tail index, a cache);
* attachments: ``<dir>/<sha256>`` per attachment.

Each is written whole with ``segments.atomic_write`` (temp file 0600, fsync, rename, directory
fsync), so a crash leaves the old file or the new one, never part of one. ``<dir>`` is inside
the run directory (``colocated_with``: deleted with the run, and a write never creates a run
directory) or under a separate root (``separate``: dropped with ``drop_run``). An OS error of a
call is ``storage_full``, ``backend_unavailable`` or ``store_corrupted``
(``file.errors.disk_error``, the file backend's one translation).
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import os
from collections.abc import Callable
from typing import Any, Self, TypeVar

from journald.core.checkpoints import (
    Checkpoint,
    CheckpointMeta,
    attachment_missing,
    checkpoint_missing,
    decode_file,
    encode_file,
    valid_checkpoint_id,
    valid_sha256,
)
from journald.core.errors import (
    CheckpointNotFound,
    InvalidCheckpointId,
    SessionNotFound,
    StoreCorrupted,
)
from journald.core.records import canonical_json, sha256_hex, validate_id
from journald.storage.checkpoint_base import MARKS, OWNER, SCRUB, SNAPSHOT, VIEWS
from journald.storage.file.errors import data_dir_gone, disk_error, vanished
from journald.storage.file.segments import DIR_MODE
from journald.storage.seam import Disk, default_disk

SUFFIX = ".json"
MARK_FILE = "fold-mark.json"  # History's tail index (see ``CheckpointStore.save_mark``)
SNAPSHOT_FILE = "fold-snapshot.json"  # the fold snapshot Open continues from
SCRUB_FILE = "scrub-finding.json"  # the damage the background scrubber found
OWNER_FILE = "run-owner.json"  # the uid that created the run on a shared daemon
VIEWS_FILE = "view-index.json"  # the cleaned-up and governed views' page index
_PART_FILES = {SNAPSHOT: SNAPSHOT_FILE, SCRUB: SCRUB_FILE, OWNER: OWNER_FILE, VIEWS: VIEWS_FILE}


def mark_file(part: str) -> str:
    """The file (or object) name of one part of a run's index."""
    return _PART_FILES.get(part, MARK_FILE)


T = TypeVar("T")


def _run_missing(run_id: str) -> SessionNotFound:
    return SessionNotFound(
        f"run {run_id} does not exist; list the runs with `journald ls`",
        metadata={"run_id": run_id},
    )


def _make_dir(seam: Disk, d: str, run_id: str, *, inside_run: bool) -> None:
    """Create a store directory, durably named in its parent. Inside a run directory only
    ``d`` itself is made, so a run deleted meanwhile is ``SessionNotFound`` and never comes
    back as a directory without a journal."""
    if os.path.isdir(d):
        return
    try:
        if inside_run:
            with contextlib.suppress(FileExistsError):
                seam.mkdir(d, DIR_MODE)
        else:
            os.makedirs(d, DIR_MODE, exist_ok=True)
    except FileNotFoundError:
        raise _run_missing(run_id) from None
    seam.fsync_dir(os.path.dirname(d))


def _remove_dir(seam: Disk, d: str) -> None:
    """Remove a separate store's directory of a deleted run and every file in it (the run
    went first, so what is left is only ever unreachable). A directory that is a symbolic
    link is removed as a link: a delete never reaches outside the store's root."""
    if os.path.islink(d):
        seam.unlink(d)
        return
    for n in os.listdir(d) if os.path.isdir(d) else ():
        with contextlib.suppress(OSError):
            seam.unlink(os.path.join(d, n))
    with contextlib.suppress(OSError):
        seam.rmdir(d)


async def _on_disk(
    root: str, where: str, run_id: str, retry: str, fn: Callable[..., T], *args: Any
) -> T:
    """``fn(*args)`` on a worker thread; an OS error becomes the file backend's journald
    error naming ``where`` (``file.errors.disk_error``), as for the journal's own calls."""
    try:
        return await asyncio.to_thread(fn, *args)
    except OSError as exc:
        raise disk_error(
            exc, root=root, run_id=run_id, path=where, action=f"using {where}", retry=retry
        ) from exc


class RunDirs:
    """Where a store keeps each run's files: beside the run (``colocated_with``:
    ``<sessions>/<run>/<KIND>/``, deleted with the run; ``run_dir_of`` says where the run
    lives, and a write never creates it) or under a root of its own (``separate``:
    ``<root>/<run>/``, removed by ``drop_run``)."""

    KIND = ""

    def __init__(
        self,
        dir_of: Callable[[str], str],
        *,
        run_dir_of: Callable[[str], str] | None = None,
        pattern: str = "",
        root: str = "",
        seam: Disk | None = None,
    ) -> None:
        self.seam = seam if seam is not None else default_disk()
        """The disk I/O seam (``journald.storage.seam``) of the store's writes."""
        self._dir_of = dir_of
        self._run_dir_of = run_dir_of
        self._pattern = pattern  # glob of every run's directory of this store
        self._root = root  # whose absence means the data directory is gone

    @property
    def _colocated(self) -> bool:
        return self._run_dir_of is not None

    @classmethod
    def colocated_with(cls, sessions_dir: str, seam: Disk | None = None) -> Self:
        return cls(
            lambda run: os.path.join(sessions_dir, validate_id(run), cls.KIND),
            seam=seam,
            run_dir_of=lambda run: os.path.join(sessions_dir, validate_id(run)),
            pattern=os.path.join(glob.escape(sessions_dir), "*", cls.KIND),
            root=sessions_dir,
        )

    @classmethod
    def separate(cls, root: str, seam: Disk | None = None) -> Self:
        return cls(
            lambda run: os.path.join(root, validate_id(run)),
            seam=seam,
            pattern=os.path.join(glob.escape(root), "*"),
            root=root,
        )

    def _ready_dir(self, run_id: str) -> str:
        """The run's directory of this store, made if needed (``SessionNotFound`` when the
        run is gone)."""
        if self._run_dir_of is not None and not os.path.isdir(self._run_dir_of(run_id)):
            if data_dir_gone(self._root):
                raise vanished(self._root, run_id)
            raise _run_missing(run_id)
        d = self._dir_of(run_id)
        _make_dir(self.seam, d, run_id, inside_run=self._colocated)
        return d

    def _drop_run(self, run_id: str) -> None:
        if not self._colocated:
            _remove_dir(self.seam, self._dir_of(run_id))

    async def _disk(self, run_id: str, retry: str, fn: Callable[..., T], *args: Any) -> T:
        where = self._dir_of(run_id) if run_id else self._root
        return await _on_disk(self._root, where, run_id, retry, fn, *args)

    async def drop_run(self, run_id: str) -> None:
        await self._disk(run_id, "the delete", self._drop_run, run_id)


class FileCheckpointStore(RunDirs):
    """``<dir>/<ULID>.json`` per checkpoint and ``<dir>/fold-mark.json``."""

    KIND = "checkpoints"

    def _path(self, run_id: str, checkpoint_id: str) -> str:
        return os.path.join(self._dir_of(run_id), valid_checkpoint_id(checkpoint_id) + SUFFIX)

    def _put(self, cp: Checkpoint) -> None:
        run_id = cp.meta.run_id
        self.seam.step("cp_before_write")
        self._ready_dir(run_id)
        self.seam.atomic_write(
            self._path(run_id, cp.checkpoint_id),
            encode_file(cp),
            failpoint="cp_after_temp_write",
            renamed_failpoint="cp_after_rename",
        )

    async def put(self, cp: Checkpoint) -> None:
        await self._disk(cp.meta.run_id, "the checkpoint", self._put, cp)

    def _get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        path = self._path(run_id, checkpoint_id)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise checkpoint_missing(run_id, checkpoint_id) from None
        return decode_file(data, path)

    async def get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        return await self._disk(run_id, "the call", self._get, run_id, checkpoint_id)

    def _ids(self, run_id: str) -> list[str]:
        try:
            names = os.listdir(self._dir_of(run_id))
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            if n.endswith(SUFFIX) and len(n) == 26 + len(SUFFIX):
                with contextlib.suppress(InvalidCheckpointId):
                    out.append(valid_checkpoint_id(n[:26]))
        return sorted(out)

    def _list(self, run_id: str) -> list[CheckpointMeta]:
        out = []
        for cid in self._ids(run_id):
            try:
                out.append(self._get(run_id, cid).meta)
            except CheckpointNotFound:
                continue  # deleted while listing
        return out

    async def list(self, run_id: str) -> list[CheckpointMeta]:
        return await self._disk(run_id, "the call", self._list, run_id)

    def _delete(self, run_id: str, checkpoint_id: str) -> bool:
        path = self._path(run_id, checkpoint_id)
        try:
            self.seam.unlink(path)
        except FileNotFoundError:
            return False
        self.seam.fsync_dir(os.path.dirname(path))
        return True

    async def delete(self, run_id: str, checkpoint_id: str) -> bool:
        return await self._disk(run_id, "the delete", self._delete, run_id, checkpoint_id)

    def _owner(self, checkpoint_id: str) -> str | None:
        name = valid_checkpoint_id(checkpoint_id) + SUFFIX
        for d in sorted(glob.glob(self._pattern)):
            if os.path.exists(os.path.join(d, name)):
                run_dir = os.path.dirname(d) if self._colocated else d
                return os.path.basename(run_dir)
        return None

    async def owner(self, checkpoint_id: str) -> str | None:
        return await self._disk("", "the call", self._owner, checkpoint_id)

    def _newest_id(self) -> str | None:
        ids = []
        for path in glob.glob(os.path.join(self._pattern, "*" + SUFFIX)):
            name = os.path.basename(path)
            if len(name) == 26 + len(SUFFIX):
                with contextlib.suppress(InvalidCheckpointId):
                    ids.append(valid_checkpoint_id(name[:26]))
        return max(ids, default=None)

    async def newest_id(self) -> str | None:
        return await self._disk("", "the call", self._newest_id)

    def _save_mark(self, run_id: str, mark: dict[str, Any], part: str) -> None:
        try:
            d = self._ready_dir(run_id)
        except SessionNotFound:
            return  # the run is gone, and its index with it
        path, data = os.path.join(d, mark_file(part)), canonical_json(mark)
        if part != SNAPSHOT:
            self.seam.atomic_write(path, data)
            return
        # a lease end's snapshot: its new message pages are stored by now (the kill -9 tests
        # stop here, and once it is durable, to show no snapshot names a page that is missing)
        self.seam.step("snapshot_before_write")
        self.seam.atomic_write(path, data, renamed_failpoint="snapshot_after_write")

    async def save_mark(self, run_id: str, mark: dict[str, Any], part: str = MARKS) -> None:
        await self._disk(run_id, "the call", self._save_mark, run_id, mark, part)

    def _load_mark(self, run_id: str, part: str) -> dict[str, Any] | None:
        try:
            with open(os.path.join(self._dir_of(run_id), mark_file(part)), "rb") as f:
                obj = json.loads(f.read())
        except (OSError, ValueError, RecursionError):
            return None
        return obj if isinstance(obj, dict) else None

    async def load_mark(self, run_id: str, part: str = MARKS) -> dict[str, Any] | None:
        return await self._disk(run_id, "the call", self._load_mark, run_id, part)


class FileAttachmentStore(RunDirs):
    """``<dir>/<sha256>`` per attachment."""

    KIND = "attachments"

    def _put(self, run_id: str, data: bytes) -> tuple[str, bool]:
        digest = sha256_hex(data)
        d = self._ready_dir(run_id)
        path = os.path.join(d, digest)
        if os.path.exists(path):
            return digest, True
        self.seam.atomic_write(path, data)
        return digest, False

    async def put(self, run_id: str, data: bytes) -> tuple[str, bool]:
        return await self._disk(run_id, "the upload", self._put, run_id, data)

    def _get(self, run_id: str, digest: str) -> bytes:
        path = os.path.join(self._dir_of(run_id), valid_sha256(digest))
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise attachment_missing(run_id, digest) from None
        if sha256_hex(data) != digest:
            raise StoreCorrupted(
                f"attachment {path} does not match its SHA-256 (damaged on disk); restore it "
                "from a backup or upload the original bytes again",
                metadata={"run_id": run_id, "file": path},
            )
        return data

    async def get(self, run_id: str, digest: str) -> bytes:
        return await self._disk(run_id, "the call", self._get, run_id, digest)
