"""Checkpoints, fold marks and attachments of JetStream runs, kept in the stream's buckets.

With these stores a run on JetStream moves between hosts whole: host B lists and restores the
checkpoints host A made and serves the attachments A's writer uploaded
(docs/design.md#run-buckets-checkpoints-marks-and-attachments). Layout (buckets:
``journald.storage.jetstream.buckets``):

* ``<STREAM>_CHECKPOINTS``: ``<run>/<ULID>`` holds a checkpoint in the file store's document
  format (``encode_file``: canonical, so a checkpoint copied between backends is the same
  bytes), write-once; ``<run>/fold-mark.json`` holds the run's fold mark, replaced on save;
  ``<run>/checkpoints.json`` lists the run's checkpoint ids (replaced compare-and-set on its
  revision), so listing reads it rather than every object name of the bucket.
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
from collections.abc import Callable
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
from journald.core.errors import (
    BackendUnavailable,
    CheckpointNotFound,
    InvalidCheckpointId,
    JournaldError,
    StoreCorrupted,
)
from journald.core.records import canonical_json, sha256_hex, validate_id
from journald.storage.checkpoint_base import MARKS
from journald.storage.file.checkpoint_store import MARK_FILE, mark_file
from journald.storage.jetstream.buckets import ATTACHMENTS, CHECKPOINTS, bind_buckets
from journald.storage.jetstream.config import Cli
from journald.storage.jetstream.objects import NameTaken, ObjectBucket, RevisionMoved

if TYPE_CHECKING:
    from journald.storage.jetstream.store import JetStreamStore

LIST_CONCURRENCY = 8
"""Checkpoints ``list`` reads at once (each is a meta request plus its chunks)."""
INDEX = "checkpoints.json"
"""``<run>/checkpoints.json``: the ids of the run's checkpoints, so listing reads one object
instead of the name of every object in the bucket."""
INDEX_ATTEMPTS = 16
"""Revision-checked updates of one run's index retried before giving up (contention)."""


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

    async def _index(self, run_id: str) -> tuple[list[str] | None, int]:
        """The run's indexed checkpoint ids (None: no index, a run from before it existed)
        and the index's revision."""
        name = f"{run_id}/{INDEX}"
        info, revision = await self.bucket.info_at(name)
        if info is None:
            return None, revision
        try:
            doc = json.loads(await _read(self.bucket, name) or b"{}")
        except ValueError:
            doc = {}
        ids = doc.get("ids") if isinstance(doc, dict) else None
        if not isinstance(ids, list):
            raise _damaged(self.bucket, name, ValueError("it holds no list of ids"))
        return [str(i) for i in ids], revision

    async def _update_index(self, run_id: str, add: str = "", drop: str = "") -> None:
        """Add or drop one id, compare-and-set on the index's revision (two hosts checkpointing
        one run never lose each other's id). A run without an index gets one from its names."""
        name = f"{run_id}/{INDEX}"
        for _ in range(INDEX_ATTEMPTS):
            ids, revision = await self._index(run_id)
            if ids is None:
                ids = await self._scanned_ids(run_id)
            new = sorted((set(ids) | ({add} if add else set())) - {drop})
            if new == ids:
                return
            try:
                await self.bucket.write(
                    name, canonical_json({"ids": new}), once=False, expect=revision
                )
                return
            except RevisionMoved:
                continue
        raise BackendUnavailable(
            f"run {run_id}: the checkpoint index in bucket {self.bucket.bucket} kept changing "
            f"under {INDEX_ATTEMPTS} updates; retry",
            metadata={"run_id": run_id, "bucket": self.bucket.bucket},
        )

    async def _scanned_ids(self, run_id: str) -> list[str]:
        prefix = run_id + "/"
        return [
            n[len(prefix) :]
            for n in await self.bucket.names(prefix)
            if len(n) == len(prefix) + 26 and not n.endswith(MARK_FILE)
        ]

    async def put(self, cp: Checkpoint) -> None:
        if failpoints.ARMED:
            failpoints.hit("cp_before_write")
        name = self._name(cp.meta.run_id, cp.checkpoint_id)
        # indexed first: a crash before the object leaves an id that lists as nothing (and
        # is dropped with the next delete), never a checkpoint the listing cannot see
        await self._update_index(cp.meta.run_id, add=cp.checkpoint_id)
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
        validate_id(run_id)
        ids, _ = await self._index(run_id)
        if ids is None:  # a run checkpointed before the index existed (a read never writes)
            ids = await self._scanned_ids(run_id)
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
        removed = await self.bucket.remove(self._name(run_id, checkpoint_id))
        await self._update_index(run_id, drop=checkpoint_id)
        return removed

    async def follow(self, run_id: str, deliver: Callable[[CheckpointMeta], None]) -> Any:
        """Hand ``deliver`` the meta of every checkpoint of the run stored from now on, by any
        host (an ordered consumer on the bucket's meta subjects; deletions purge, so they are
        not seen). Returns the subscription (``unsubscribe()`` ends it)."""
        prefix = validate_id(run_id) + "/"

        async def created(name: str) -> None:
            cid = name[len(prefix) :]
            try:
                deliver((await self.get(run_id, cid)).meta)
            except JournaldError:  # deleted or damaged since: nothing to report
                return

        return await self.bucket.follow_names(
            lambda name: name.startswith(prefix) and len(name) == len(prefix) + 26, created
        )

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
        leader_wait_s=store.leader_wait_s,
    )
    cps, blobs = found[CHECKPOINTS], found[ATTACHMENTS]
    return (
        JetStreamCheckpointStore(cps) if cps is not None else None,
        JetStreamAttachmentStore(blobs) if blobs is not None else None,
    )


async def sweep_orphan_chunks(
    stores: tuple[JetStreamCheckpointStore | None, JetStreamAttachmentStore | None],
) -> int:
    """Purge, in the run buckets, the chunks of writes that crashed before their meta (an
    hour old or more, ``ORPHAN_AGE_S``): nothing else reclaims them. The daemon runs it in
    the background at start-up; how many writes' chunks were purged."""
    swept = 0
    for found in stores:
        if found is not None:
            swept += await found.bucket.sweep_orphans()
    return swept
