"""One JetStream Object Store bucket, read and written in the Object Store's own wire format.

The buckets that keep a run's checkpoints, fold marks and attachments beside its records
(``journald.storage.jetstream.checkpoint_store``) are ordinary Object Store buckets, so
``nats object ls/get`` read them, but journald writes them itself rather than through
nats-py's ``ObjectStore`` for three promises nats-py's writer does not make:

* **Write-once.** The meta message of a write-once object is published with
  ``Nats-Expected-Last-Subject-Sequence: 0``: the server refuses it when the name already
  exists, so two hosts cannot both store a checkpoint id (the same fence rule as records).
* **Whole or absent.** Chunks go first, on a fresh nuid subject; the object appears only when
  its meta message lands. A failed write purges its chunks; a crash in between leaves
  chunks no meta names (invisible to every reader, space only), never a half object.
* **Retried, not duplicated.** Every chunk and the meta carry a ``Nats-Msg-Id`` derived from the
  write's nuid, so a publish retried after a lost ack (a node killed mid-write) is dropped by
  the server's duplicate window instead of stored twice; a meta whose ack was lost is
  recognised by its nuid on the retry.

Names are ``<run>/<leaf>``; listing a run reads the subjects of the bucket's meta messages
(one stream-info request) instead of creating a consumer. A deleted object is purged (meta
first, then its chunks), so a name can be written again after a delete.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.js.api import DeliverPolicy

from journald import failpoints
from journald.core.errors import BackendUnavailable, JournaldError, StorageFull
from journald.storage.jetstream.errors import Scope

T = TypeVar("T")

CHUNK_BYTES = 128 * 1024
"""Object Store chunk size (nats-py's and the Go client's default)."""
DIGEST_PREFIX = "SHA-256="
WRONG_LAST_SEQUENCE = 10071
HDR_MSG_ID = "Nats-Msg-Id"
HDR_ROLLUP = "Nats-Rollup"
HDR_EXPECT_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
MAX_SUBJECT_PAGES = 10_000
"""Bound on the pages of one listing (a billion objects)."""


class NameTaken(Exception):
    """A write-once name already holds other bytes (``digest``: what it holds)."""

    def __init__(self, name: str, digest: str) -> None:
        super().__init__(name)
        self.name = name
        self.digest = digest


class RevisionMoved(Exception):
    """A revision-checked replace found the object changed since it was read."""


ORPHAN_AGE_S = 3600.0
"""Chunks no meta names are swept once this old: no write takes an hour between its chunks
and its meta, so a younger one may be a write in progress."""


def stream_of(bucket: str) -> str:
    return f"OBJ_{bucket}"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii")


class ObjectBucket:
    """Objects of one bucket on a connected nats-py client (``nc``)."""

    def __init__(
        self, nc: Any, bucket: str, *, ack_timeout_s: float = 5.0, retry_window_s: float = 15.0
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream(timeout=ack_timeout_s)
        self._jsm = nc.jsm(timeout=ack_timeout_s)
        self.bucket = bucket
        self.scope = Scope.bucket(bucket)
        self.stream = stream_of(bucket)
        self.retry_window_s = retry_window_s
        self.ack_timeout_s = ack_timeout_s

    def meta_subject(self, name: str) -> str:
        return f"$O.{self.bucket}.M.{_b64(name.encode())}"

    def chunk_subject(self, nuid: str) -> str:
        return f"$O.{self.bucket}.C.{nuid}"

    async def _retrying(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        """An idempotent operation, retried on transient failures for a bounded time (a node
        of a cluster killed mid-call costs one leader election); a refusal the server
        answered propagates, for the caller to read or ``self.scope`` to translate."""
        return await self.scope.retrying(
            what, op, self.retry_window_s, lambda: bool(self._nc.is_closed), translate=False
        )

    async def info(self, name: str) -> dict[str, Any] | None:
        """The object's meta (nats Object Store JSON), or None when there is no such name."""
        return (await self.info_at(name))[0]

    async def info_at(self, name: str) -> tuple[dict[str, Any] | None, int]:
        """The object's meta and its revision (the meta message's stream sequence; 0 when
        the name was never written or was purged), for a ``write(..., expect=revision)``."""
        subject = self.meta_subject(name)

        async def op() -> tuple[dict[str, Any] | None, int]:
            try:
                msg = await self._jsm.get_last_msg(self.stream, subject)
            except nats.js.errors.NotFoundError:
                return None, 0
            obj = json.loads(msg.data or b"{}")
            live = isinstance(obj, dict) and not obj.get("deleted")
            return (obj if live else None), int(msg.seq)

        with self.scope.translated(f"reading {name}", failures=()):
            return await self._retrying(f"reading {name}", op)

    async def read(self, name: str) -> bytes | None:
        """The object's bytes, checked against its digest; None when absent."""
        info = await self.info(name)
        if info is None:
            return None
        subject = self.chunk_subject(str(info.get("nuid", "")))
        parts: list[bytes] = []
        seq = 0
        for _ in range(int(info.get("chunks") or 0)):

            async def op(after: int = seq) -> Any:
                return await self._jsm.get_msg(
                    self.stream, seq=after + 1, subject=subject, next=True
                )

            with self.scope.translated(f"reading {name}", failures=()):
                try:
                    msg = await self._retrying(f"reading {name}", op)
                except nats.js.errors.NotFoundError:
                    break  # purged under us (the run was dropped): reported as damage below
            parts.append(bytes(msg.data or b""))
            seq = int(msg.seq)
        data = b"".join(parts)
        if DIGEST_PREFIX + _b64(hashlib.sha256(data).digest()) != info.get("digest"):
            raise ValueError(
                f"object {name} of bucket {self.bucket} does not match its digest "
                f"({len(data)} of {info.get('size')} bytes read)"
            )
        return data

    async def write(self, name: str, data: bytes, *, once: bool, expect: int | None = None) -> bool:
        """Store ``data`` under ``name``; True when this call created it.

        ``once``: the name is write-once; the same bytes already there are success (False),
        other bytes raise ``NameTaken``. Otherwise the object is replaced (its old chunks are
        purged once the new meta is in); with ``expect`` only if its revision (``info_at``)
        is still that one, else ``RevisionMoved`` and nothing changes.
        """
        nuid = secrets.token_hex(11)
        chunks = self.chunk_subject(nuid)
        digest = DIGEST_PREFIX + _b64(hashlib.sha256(data).digest())
        old = None if once else await self.info(name)
        count = 0
        try:
            with self.scope.translated(f"writing {name}", failures=()):
                for count, start in enumerate(range(0, len(data), CHUNK_BYTES), start=1):
                    piece = data[start : start + CHUNK_BYTES]
                    await self._publish(name, chunks, piece, {HDR_MSG_ID: f"{nuid}.{count}"})
                if failpoints.ARMED:
                    failpoints.hit("js_object_before_meta")
                meta = {
                    "name": name,
                    "bucket": self.bucket,
                    "nuid": nuid,
                    "size": len(data),
                    "chunks": count,
                    "digest": digest,
                    "mtime": datetime.now(UTC).isoformat(),
                    "options": {"max_chunk_size": CHUNK_BYTES},
                }
                headers = {HDR_MSG_ID: f"{nuid}.meta", HDR_ROLLUP: "sub"}
                if once:
                    headers[HDR_EXPECT_LAST_SUBJECT_SEQ] = "0"
                elif expect is not None:
                    headers[HDR_EXPECT_LAST_SUBJECT_SEQ] = str(expect)
                try:
                    await self._publish(
                        name, self.meta_subject(name), json.dumps(meta).encode(), headers
                    )
                except nats.js.errors.APIError as exc:
                    if getattr(exc, "err_code", None) != WRONG_LAST_SEQUENCE or not (
                        once or expect is not None
                    ):
                        raise
                    there = await self.info(name)
                    if there is not None and there.get("nuid") == nuid:
                        return True  # our own meta; its first ack was lost
                    await self._purge(chunks)
                    if not once:
                        raise RevisionMoved(name) from None
                    if there is not None and there.get("digest") == digest:
                        return False
                    raise NameTaken(name, str((there or {}).get("digest", ""))) from None
        except (BackendUnavailable, StorageFull):  # a failed write leaves no chunks behind
            await self._purge_quietly(chunks)
            raise
        if old is not None and old.get("nuid"):
            await self._purge_quietly(self.chunk_subject(str(old["nuid"])))
        return True

    async def _publish(
        self, name: str, subject: str, payload: bytes, headers: dict[str, str]
    ) -> None:
        async def op() -> Any:
            return await self._js.publish(subject, payload, stream=self.stream, headers=headers)

        await self._retrying(f"writing {name}", op)

    async def _purge(self, subject: str) -> None:
        async def op() -> Any:
            return await self._jsm.purge_stream(self.stream, subject=subject)

        with self.scope.translated(f"purging {subject}", failures=()):
            await self._retrying(f"purging {subject}", op)

    async def _purge_quietly(self, subject: str) -> None:
        # chunks no meta names are invisible to every reader; they only cost space
        with contextlib.suppress(JournaldError):
            await self._purge(subject)

    async def remove(self, name: str) -> bool:
        """Purge the object (meta first: it vanishes at once; then its chunks)."""
        info = await self.info(name)
        if info is None:
            return False
        await self._purge(self.meta_subject(name))
        await self._purge(self.chunk_subject(str(info.get("nuid", ""))))
        return True

    async def _meta_subjects(self, meta_prefix: str) -> list[str]:
        """Every subject of the bucket under ``meta_prefix``: stream info with a subject
        filter, page by page (the server returns at most 100,000 subjects per answer)."""
        out: list[str] = []
        for _ in range(MAX_SUBJECT_PAGES):
            request = {"subjects_filter": meta_prefix + ">", "offset": len(out)}

            async def op(req: bytes = json.dumps(request).encode()) -> Any:
                subject = f"$JS.API.STREAM.INFO.{self.stream}"
                return await self._nc.request(subject, req, timeout=self.ack_timeout_s)

            with self.scope.translated("listing objects", refusals=(nats.errors.Error,)):
                msg = await self._retrying("listing objects", op)
            answer = json.loads(msg.data)
            if "error" in answer:
                raise self.scope.api_error("listing objects", ValueError(answer["error"]))
            page = list((answer.get("state") or {}).get("subjects") or {})
            out += page
            if not page or len(out) >= int(answer.get("total") or 0):
                break
        return out

    async def follow_names(
        self, wanted: Callable[[str], bool], on_new: Callable[[str], Awaitable[None]]
    ) -> Any:
        """Call ``on_new(name)`` for each object ``wanted`` that is stored (its meta lands)
        from now on; the subscription is returned (``unsubscribe()`` ends it)."""
        meta_prefix = f"$O.{self.bucket}.M."

        async def on_msg(msg: Any) -> None:
            try:
                name = base64.urlsafe_b64decode(str(msg.subject)[len(meta_prefix) :]).decode()
                meta = json.loads(msg.data or b"{}")
            except (ValueError, UnicodeDecodeError):
                return
            if isinstance(meta, dict) and not meta.get("deleted") and wanted(name):
                await on_new(name)

        async def make() -> Any:
            return await self._js.subscribe(
                meta_prefix + ">",
                stream=self.stream,
                cb=on_msg,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
                inactive_threshold=30.0,
            )

        return await self._retrying("following new objects", make)

    async def names(self, prefix: str = "") -> list[str]:
        """Every object name starting with ``prefix``, sorted."""
        meta_prefix = f"$O.{self.bucket}.M."
        out = []
        for subject in await self._meta_subjects(meta_prefix):
            try:
                name = base64.urlsafe_b64decode(subject[len(meta_prefix) :]).decode()
            except (ValueError, UnicodeDecodeError):
                continue  # not written by an Object Store client
            if name.startswith(prefix):
                out.append(name)
        return sorted(out)

    async def sweep_orphans(self, min_age_s: float = ORPHAN_AGE_S) -> int:
        """Purge chunks that no object's meta names (a writer crashed between its chunks and
        its meta) once their newest chunk is ``min_age_s`` old; how many writes were swept."""
        meta_prefix = f"$O.{self.bucket}.M."
        chunk_prefix = f"$O.{self.bucket}.C."
        named: set[str] = set()
        for subject in await self._meta_subjects(meta_prefix):

            async def meta(at: str = subject) -> Any:
                try:
                    return await self._jsm.get_last_msg(self.stream, at)
                except nats.js.errors.NotFoundError:
                    return None

            msg = await self._retrying("reading object metas", meta)
            try:
                obj = json.loads(msg.data or b"{}") if msg is not None else {}
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("nuid"):
                named.add(str(obj["nuid"]))
        swept = 0
        now = datetime.now(UTC)
        for subject in await self._meta_subjects(chunk_prefix):
            if subject[len(chunk_prefix) :] in named:
                continue

            async def newest(at: str = subject) -> Any:
                try:
                    return await self._jsm.get_last_msg(self.stream, at)
                except nats.js.errors.NotFoundError:
                    return None

            msg = await self._retrying("reading chunks", newest)
            written = getattr(msg, "time", None) if msg is not None else None
            if written is None or (now - written).total_seconds() < min_age_s:
                continue
            await self._purge(subject)
            swept += 1
        return swept
