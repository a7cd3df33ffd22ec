"""Checkpoints, fold marks and attachments of JetStream runs, kept in the stream's buckets.

With these stores a run on JetStream moves between hosts whole: host B lists and restores the
checkpoints host A made and serves the attachments A's writer uploaded
(docs/design.md#run-buckets-checkpoints-marks-and-attachments). Layout (buckets:
``journald.storage.jetstream_buckets``):

* ``<STREAM>_CHECKPOINTS``: ``<run>/<ULID>`` holds a checkpoint in the file store's document
  format (``encode_file``: canonical, so a checkpoint copied between backends is the same
  bytes), write-once; ``<run>/fold-mark.json`` holds the run's fold mark, replaced on save.
* ``<STREAM>_ATTACHMENTS``: ``<run>/<sha256>`` holds an attachment, write-once, so an upload
  of bytes the run already holds stores nothing (deduplicated per run).

Every read checks what it read (the object digest, then the checkpoint's content hash or the
attachment's SHA-256) and reports damage as ``store_corrupted`` naming the object.
``drop_run`` (the run's Delete) purges every object of the run; objects have no TTL, like the
stream's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from journald import failpoints
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
from journald.core.errors import CheckpointNotFound, InvalidCheckpointId, StoreCorrupted
from journald.core.records import canonical_json, sha256_hex, validate_id
from journald.storage.checkpoint_base import MARKS
from journald.storage.checkpoints_file import MARK_FILE, mark_file
from journald.storage.jetstream_buckets import ATTACHMENTS, CHECKPOINTS, bind_buckets
from journald.storage.jetstream_config import Cli
from journald.storage.jetstream_objects import NameTaken, ObjectBucket

if TYPE_CHECKING:
    from journald.storage.jetstream import JetStreamStore

LIST_CONCURRENCY = 8
"""Checkpoints ``list`` reads at once (each is a meta request plus its chunks)."""


def _damaged(bucket: ObjectBucket, name: str, exc: Exception) -> StoreCorrupted:
    return StoreCorrupted(
        f"object {name} of bucket {bucket.bucket} is damaged ({exc}); remove it with "
        f"`nats object rm {bucket.bucket} {name}` or restore the bucket from a backup",
        metadata={"bucket": bucket.bucket, "object": name},
    )


async def _read(bucket: ObjectBucket, name: str) -> bytes | None:
    try:
        return await bucket.read(name)
    except ValueError as exc:
        raise _damaged(bucket, name, exc) from exc


class JetStreamCheckpointStore:
    """A ``CheckpointStore`` on the ``<STREAM>_CHECKPOINTS`` bucket."""

    def __init__(self, bucket: ObjectBucket) -> None:
        self.bucket = bucket

    def _name(self, run_id: str, checkpoint_id: str) -> str:
        return f"{validate_id(run_id)}/{valid_checkpoint_id(checkpoint_id)}"

    async def put(self, cp: Checkpoint) -> None:
        if failpoints.ARMED:
            failpoints.hit("cp_before_write")
        name = self._name(cp.meta.run_id, cp.checkpoint_id)
        try:
            await self.bucket.write(name, encode_file(cp), once=True)
        except NameTaken as exc:
            raise StoreCorrupted(
                f"checkpoint {cp.checkpoint_id} of run {cp.meta.run_id} already exists in "
                f"bucket {self.bucket.bucket} with other content ({exc.digest}); a checkpoint "
                "never changes: make a new one, or delete that one first "
                f"(`journald checkpoint {cp.meta.run_id} --delete {cp.checkpoint_id}`)",
                metadata={"run_id": cp.meta.run_id, "checkpoint_id": cp.checkpoint_id},
            ) from None

    async def get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        name = self._name(run_id, checkpoint_id)
        data = await _read(self.bucket, name)
        if data is None:
            raise checkpoint_missing(run_id, checkpoint_id)
        cp = decode_file(data, f"{self.bucket.bucket}/{name}")
        if cp.meta.run_id != run_id or cp.checkpoint_id != checkpoint_id:
            raise _damaged(self.bucket, name, ValueError("its meta names another checkpoint"))
        return cp

    async def list(self, run_id: str) -> list[CheckpointMeta]:
        prefix = validate_id(run_id) + "/"
        ids = [
            n[len(prefix) :]
            for n in await self.bucket.names(prefix)
            if len(n) == len(prefix) + 26 and not n.endswith(MARK_FILE)
        ]
        limit = asyncio.Semaphore(LIST_CONCURRENCY)

        async def one(cid: str) -> CheckpointMeta | None:
            async with limit:
                try:
                    return (await self.get(run_id, cid)).meta
                except CheckpointNotFound:
                    return None  # deleted while listing

        found = await asyncio.gather(*(one(c) for c in sorted(ids)))
        return [m for m in found if m is not None]

    async def delete(self, run_id: str, checkpoint_id: str) -> bool:
        return await self.bucket.remove(self._name(run_id, checkpoint_id))

    async def owner(self, checkpoint_id: str) -> str | None:
        leaf = "/" + valid_checkpoint_id(checkpoint_id)
        for name in await self.bucket.names():
            if name.endswith(leaf):
                return name[: -len(leaf)]
        return None

    async def newest_id(self) -> str | None:
        ids = []
        for name in await self.bucket.names():
            leaf = name.rpartition("/")[2]
            if len(leaf) == 26:
                with contextlib.suppress(InvalidCheckpointId):
                    ids.append(valid_checkpoint_id(leaf))
        return max(ids, default=None)

    async def drop_run(self, run_id: str) -> None:
        for name in await self.bucket.names(validate_id(run_id) + "/"):
            await self.bucket.remove(name)

    async def save_mark(self, run_id: str, mark: dict[str, Any], part: str = MARKS) -> None:
        name = f"{validate_id(run_id)}/{mark_file(part)}"
        await self.bucket.write(name, canonical_json(mark), once=False)

    async def load_mark(self, run_id: str, part: str = MARKS) -> dict[str, Any] | None:
        try:
            data = await self.bucket.read(f"{validate_id(run_id)}/{mark_file(part)}")
            obj = json.loads(data) if data is not None else None
        except (ValueError, RecursionError):
            return None  # a cache: a damaged mark is rebuilt, never trusted
        return obj if isinstance(obj, dict) else None


class JetStreamAttachmentStore:
    """An ``AttachmentStore`` on the ``<STREAM>_ATTACHMENTS`` bucket."""

    def __init__(self, bucket: ObjectBucket) -> None:
        self.bucket = bucket

    async def put(self, run_id: str, data: bytes) -> tuple[str, bool]:
        digest = sha256_hex(data)
        name = f"{validate_id(run_id)}/{digest}"
        try:
            created = await self.bucket.write(name, bytes(data), once=True)
        except NameTaken as exc:
            raise _damaged(self.bucket, name, ValueError(f"it holds {exc.digest}")) from None
        return digest, not created

    async def get(self, run_id: str, digest: str) -> bytes:
        name = f"{validate_id(run_id)}/{valid_sha256(digest)}"
        data = await _read(self.bucket, name)
        if data is None:
            raise attachment_missing(run_id, digest)
        if sha256_hex(data) != digest:
            raise _damaged(self.bucket, name, ValueError("its bytes do not match its SHA-256"))
        return data

    async def drop_run(self, run_id: str) -> None:
        for name in await self.bucket.names(validate_id(run_id) + "/"):
            await self.bucket.remove(name)


async def bind_run_stores(
    store: JetStreamStore, cli: Cli, *, required: bool = True
) -> tuple[JetStreamCheckpointStore | None, JetStreamAttachmentStore | None]:
    """The checkpoint and attachment stores of ``store``'s stream, on its connection.

    ``required`` (the daemon, a migration destination): a missing or unsafe bucket raises
    ``BucketConfigError`` with the ``nats object`` commands that fix it. Otherwise (a
    migration source) a missing bucket is None: that stream's runs have no side data."""
    found = await bind_buckets(
        store.connection,
        store.stream,
        cli.url,
        cli,
        ack_timeout_s=store.ack_timeout_s,
        retry_window_s=store.retry_window_s,
        required=required,
    )
    cps, blobs = found[CHECKPOINTS], found[ATTACHMENTS]
    return (
        JetStreamCheckpointStore(cps) if cps is not None else None,
        JetStreamAttachmentStore(blobs) if blobs is not None else None,
    )
