"""Checkpoints: read-only copies of a run's conversation, their storage and their export form.

A checkpoint is the *governed* (model-ready, fully paired) conversation of a run at a seq,
plus its meta: id (ULID, time ordered, monotonic within the daemon), run, trigger, label, seq,
message count, created, model, the writer's working directory and ``hash``. The hash is the
SHA-256 of the canonical JSON of the message list, so a rebase record carrying a checkpoint's
conversation carries a hash anyone can recompute from the record alone, and an imported
checkpoint keeps the hash of the conversation it holds.

Storage (``CheckpointStore``, four methods plus two for lifecycle):

* ``FileCheckpointStore`` (file backend): one file per checkpoint, ``<dir>/<ULID>.json``,
  written durably (temp file 0600, fsync, rename, directory fsync). ``<dir>`` is the run's
  ``<data_dir>/sessions/<run>/checkpoints/`` by default (deleted with the run), or
  ``<checkpoint_dir>/<run>/`` when the daemon is given a separate directory.
* ``MemoryCheckpointStore`` (memory backend, and the JetStream backend in this build).

Export (``journald-checkpoint/1``): canonical JSON bytes ``{"body":…,"format":…,"sha256":…}``
where ``sha256`` hashes the canonical body and the body hashes each part (meta, messages,
each attachment). ``verify_export`` checks everything before anything is written, and it
requires the exact canonical bytes, so changing any byte of an export is detected.

Crash-test failpoints of this module and the checkpoint RPCs are armed with
``JOURNALD_CHECKPOINT_FAILPOINTS="name=kill[,name=raise]"`` (see ``POINTS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from ulid import ULID

from journald.core.errors import (
    AttachmentNotFound,
    CheckpointImportInvalid,
    CheckpointNotFound,
    InvalidCheckpointId,
    InvalidDigest,
    JournaldError,
    SessionNotFound,
    StoreCorrupted,
)
from journald.core.governance import sanitize
from journald.core.records import (
    MAX_DOCUMENT_DEPTH,
    MAX_JSON_DEPTH,
    canonical_json,
    json_too_deep,
    sha256_hex,
    validate_id,
)
from journald.storage.segments import storage_error

TRIGGERS = ("manual", "pre_compaction", "pre_restore", "pre_prune", "import")
FILE_FORMAT = "journald-checkpoint-file/1"
EXPORT_FORMAT = "journald-checkpoint/1"
MAX_EXPORT_BYTES = 256 * 1024 * 1024
MAX_ATTACHMENT_BYTES = 8 * 1024 * 1024
"""Largest attachment PutAttachment stores: half the daemon's default message size, so an
upload and a download always fit one message with room to spare."""
DIR_MODE = 0o700
FILE_MODE = 0o600
SUFFIX = ".json"
MARK_FILE = "fold-mark.json"  # History's tail index (see ``CheckpointStore.save_mark``)

Message = dict[str, Any]
T = TypeVar("T")

# --- failpoints (crash tests) ------------------------------------------------------------

FAILPOINT_ENV = "JOURNALD_CHECKPOINT_FAILPOINTS"
POINTS = (
    "cp_before_write",  # nothing of the checkpoint written yet
    "cp_after_temp_write",  # temp file written and fsynced, not renamed
    "cp_after_rename",  # renamed in, directory not yet fsynced
    "op_after_checkpoint",  # compaction/restore: pre-op checkpoint durable, no rebase yet
    "op_after_rebase",  # compaction/restore: rebase durable, response not yet sent
)


def _parse_failpoints(spec: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in spec.replace(";", ",").split(","):
        name, _, action = item.strip().partition("=")
        if not name:
            continue
        if name not in POINTS or action not in ("kill", "raise"):
            raise ValueError(
                f"{FAILPOINT_ENV}: bad item {item!r}; use name=kill|raise with name one of "
                + ", ".join(POINTS)
            )
        out[name] = action
    return out


_FAILPOINTS = _parse_failpoints(os.environ.get(FAILPOINT_ENV, ""))


def failpoint(name: str) -> None:
    """Die (SIGKILL) or fail (EIO) at ``name`` if armed; free when unarmed."""
    action = _FAILPOINTS.get(name)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)  # pragma: no cover
    elif action == "raise":
        raise OSError(errno.EIO, f"failpoint {name}")


# --- the model ----------------------------------------------------------------------------


_ulid_lock = threading.Lock()
_last_ulid = 0


def new_id() -> str:
    """A ULID, strictly increasing within this process (listing order = creation order)."""
    global _last_ulid
    with _ulid_lock:
        value = int(ULID())
        if value <= _last_ulid:
            value = _last_ulid + 1
        _last_ulid = value
        return str(ULID.from_int(value))


def valid_checkpoint_id(checkpoint_id: str) -> str:
    try:
        return str(ULID.from_str(checkpoint_id))
    except (ValueError, TypeError):
        raise InvalidCheckpointId(
            f"checkpoint id {checkpoint_id[:64]!r} is not a ULID (26 Crockford base32 "
            "characters); list a run's checkpoints with `journald checkpoints <run>`",
            metadata={"checkpoint_id": checkpoint_id[:64]},
        ) from None


def content_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    return sha256_hex(canonical_json(list(messages)))


@dataclass(frozen=True, slots=True)
class CheckpointMeta:
    checkpoint_id: str
    run_id: str
    trigger: str
    label: str
    seq: int
    message_count: int
    created: str
    model: str
    hash: str
    cwd: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "run_id": self.run_id,
            "trigger": self.trigger,
            "label": self.label,
            "seq": self.seq,
            "message_count": self.message_count,
            "created": self.created,
            "model": self.model,
            "hash": self.hash,
            "cwd": self.cwd,
        }

    @staticmethod
    def from_json(obj: object) -> CheckpointMeta:
        """Strict: exactly the fields above with their types (raises ``ValueError``)."""
        if not isinstance(obj, dict):
            raise ValueError("checkpoint meta is not an object")
        want = {
            "checkpoint_id": str,
            "run_id": str,
            "trigger": str,
            "label": str,
            "seq": int,
            "message_count": int,
            "created": str,
            "model": str,
            "hash": str,
            "cwd": str,
        }
        if set(obj) != set(want):
            raise ValueError(f"checkpoint meta fields {sorted(obj)} are not {sorted(want)}")
        for k, t in want.items():
            if type(obj[k]) is not t:
                raise ValueError(f"checkpoint meta field {k} is not a {t.__name__}")
        if obj["trigger"] not in TRIGGERS:
            raise ValueError(f"unknown trigger {obj['trigger']!r}")
        if obj["seq"] < 0 or obj["message_count"] < 0:
            raise ValueError("seq and message_count must be >= 0")
        return CheckpointMeta(**obj)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    meta: CheckpointMeta
    messages: list[Message]
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def checkpoint_id(self) -> str:
        return self.meta.checkpoint_id


def governed(messages: Sequence[Message]) -> list[Message]:
    """The model-ready (paired) form every checkpoint holds."""
    return sanitize(list(messages))[0]


def make_checkpoint(
    *,
    run_id: str,
    trigger: str,
    label: str,
    seq: int,
    messages: Sequence[Message],
    created: str,
    model: str,
    cwd: str,
) -> Checkpoint:
    msgs = governed(messages)
    meta = CheckpointMeta(
        new_id(), run_id, trigger, label, seq, len(msgs), created, model, content_hash(msgs), cwd
    )
    return Checkpoint(meta, msgs)


def encode_file(cp: Checkpoint) -> bytes:
    obj: dict[str, Any] = {
        "format": FILE_FORMAT,
        "meta": cp.meta.as_json(),
        "messages": cp.messages,
    }
    if cp.provenance:
        obj["provenance"] = cp.provenance
    return canonical_json(obj)


def decode_file(data: bytes, where: str) -> Checkpoint:
    """Read a stored checkpoint file; any damage is ``store_corrupted`` naming the file."""
    try:
        obj = json.loads(data)
        if not isinstance(obj, dict) or obj.get("format") != FILE_FORMAT:
            raise ValueError(f"not a {FILE_FORMAT} document")
        meta = CheckpointMeta.from_json(obj.get("meta"))
        msgs = obj.get("messages")
        if not isinstance(msgs, list):
            raise ValueError("messages is not a list")
        if content_hash(msgs) != meta.hash or len(msgs) != meta.message_count:
            raise ValueError("its messages do not match its hash or count")
        prov = obj.get("provenance", {})
        return Checkpoint(meta, msgs, prov if isinstance(prov, dict) else {})
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise StoreCorrupted(
            f"checkpoint file {where} is damaged ({exc}); delete it with "
            "`journald checkpoint <run> --delete <id>` or restore it from a backup",
            metadata={"file": where},
        ) from exc


# --- storage ------------------------------------------------------------------------------


class CheckpointStore(Protocol):
    """Where checkpoints live. Every method may raise ``SessionNotFound`` for a missing run
    directory (file) and ``StoreCorrupted`` for a damaged checkpoint."""

    async def put(self, cp: Checkpoint) -> None: ...

    async def get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        """``CheckpointNotFound`` if the run has no such checkpoint."""
        ...

    async def list(self, run_id: str) -> list[CheckpointMeta]:
        """Ordered by id (oldest first)."""
        ...

    async def delete(self, run_id: str, checkpoint_id: str) -> bool: ...

    async def owner(self, checkpoint_id: str) -> str | None:
        """The run holding ``checkpoint_id``, if any (for ``session_mismatch``)."""
        ...

    async def drop_run(self, run_id: str) -> None:
        """Forget every checkpoint of a deleted run (no-op when co-located with it)."""
        ...

    async def save_mark(self, run_id: str, mark: dict[str, Any]) -> None:
        """Keep the run's latest fold mark (``journald.core.paging.FoldMark`` + the record hash at
        its seq), which lets History serve pages from the run's tail. A cache, never truth."""
        ...

    async def load_mark(self, run_id: str) -> dict[str, Any] | None: ...


def not_found(run_id: str, checkpoint_id: str) -> CheckpointNotFound:
    return CheckpointNotFound(
        f"run {run_id} has no checkpoint {checkpoint_id}; list them with "
        f"`journald checkpoints {run_id}`",
        metadata={"run_id": run_id, "checkpoint_id": checkpoint_id},
    )


class MemoryCheckpointStore:
    def __init__(self) -> None:
        self._runs: dict[str, dict[str, Checkpoint]] = {}
        self._marks: dict[str, dict[str, Any]] = {}

    async def put(self, cp: Checkpoint) -> None:
        failpoint("cp_before_write")
        self._runs.setdefault(cp.meta.run_id, {})[cp.checkpoint_id] = cp

    async def get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        cp = self._runs.get(run_id, {}).get(checkpoint_id)
        if cp is None:
            raise not_found(run_id, checkpoint_id)
        return cp

    async def list(self, run_id: str) -> list[CheckpointMeta]:
        cps = self._runs.get(run_id, {})
        return [cps[k].meta for k in sorted(cps)]

    async def delete(self, run_id: str, checkpoint_id: str) -> bool:
        return self._runs.get(run_id, {}).pop(checkpoint_id, None) is not None

    async def owner(self, checkpoint_id: str) -> str | None:
        return next((r for r, cps in self._runs.items() if checkpoint_id in cps), None)

    async def drop_run(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
        self._marks.pop(run_id, None)

    async def save_mark(self, run_id: str, mark: dict[str, Any]) -> None:
        self._marks[run_id] = dict(mark)

    async def load_mark(self, run_id: str) -> dict[str, Any] | None:
        return self._marks.get(run_id)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_write(path: str, data: bytes, points: bool = True) -> None:
    """Temp file (0600) in the same directory, fsync, rename over ``path``, fsync the dir
    (``points``: the checkpoint failpoints apply)."""
    directory = os.path.dirname(path)
    if points:
        failpoint("cp_before_write")
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:12]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if points:
            failpoint("cp_after_temp_write")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if points:
        failpoint("cp_after_rename")
    _fsync_dir(directory)


async def _writing(where: str, run_id: str, retry: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a worker thread; an OS error is ``storage_full`` (ENOSPC, EDQUOT) or
    ``backend_unavailable`` naming ``where``, as for the journal's own writes."""
    try:
        return await asyncio.to_thread(fn, *args)
    except OSError as exc:
        raise storage_error(exc, run_id, where, 0, retry) from exc


class FileCheckpointStore:
    """``<dir>/<ULID>.json`` per checkpoint; ``dir_of(run_id)`` says where a run's live.

    ``colocated``: ``dir_of`` is inside the run directory (``run_dir_of(run_id)`` must exist:
    a checkpoint never creates a run directory), and deleting the run deletes them.
    """

    def __init__(
        self,
        dir_of: Callable[[str], str],
        *,
        colocated: bool,
        run_dir_of: Callable[[str], str] | None = None,
        pattern: str = "",
    ) -> None:
        self._dir_of = dir_of
        self._colocated = colocated
        self._run_dir_of = run_dir_of
        self._pattern = pattern  # glob of every checkpoint dir, for ``owner``

    @staticmethod
    def colocated_with(sessions_dir: str) -> FileCheckpointStore:
        return FileCheckpointStore(
            lambda run: os.path.join(sessions_dir, validate_id(run), "checkpoints"),
            colocated=True,
            run_dir_of=lambda run: os.path.join(sessions_dir, validate_id(run)),
            pattern=os.path.join(glob.escape(sessions_dir), "*", "checkpoints"),
        )

    @staticmethod
    def separate(root: str) -> FileCheckpointStore:
        return FileCheckpointStore(
            lambda run: os.path.join(root, validate_id(run)),
            colocated=False,
            pattern=os.path.join(glob.escape(root), "*"),
        )

    def _path(self, run_id: str, checkpoint_id: str) -> str:
        return os.path.join(self._dir_of(run_id), valid_checkpoint_id(checkpoint_id) + SUFFIX)

    def _put(self, cp: Checkpoint) -> None:
        run_id = cp.meta.run_id
        if self._run_dir_of is not None and not os.path.isdir(self._run_dir_of(run_id)):
            raise SessionNotFound(f"run {run_id} does not exist", metadata={"run_id": run_id})
        d = self._dir_of(run_id)
        if not os.path.isdir(d):
            os.makedirs(d, DIR_MODE, exist_ok=True)
            _fsync_dir(os.path.dirname(d))
        durable_write(self._path(run_id, cp.checkpoint_id), encode_file(cp))

    async def put(self, cp: Checkpoint) -> None:
        run_id = cp.meta.run_id
        await _writing(self._dir_of(run_id), run_id, "the checkpoint", self._put, cp)

    def _get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        path = self._path(run_id, checkpoint_id)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise not_found(run_id, checkpoint_id) from None
        return decode_file(data, path)

    async def get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        return await asyncio.to_thread(self._get, run_id, checkpoint_id)

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
        return await asyncio.to_thread(self._list, run_id)

    def _delete(self, run_id: str, checkpoint_id: str) -> bool:
        path = self._path(run_id, checkpoint_id)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        _fsync_dir(os.path.dirname(path))
        return True

    async def delete(self, run_id: str, checkpoint_id: str) -> bool:
        where = self._dir_of(run_id)
        return await _writing(where, run_id, "the delete", self._delete, run_id, checkpoint_id)

    def _owner(self, checkpoint_id: str) -> str | None:
        name = valid_checkpoint_id(checkpoint_id) + SUFFIX
        for d in sorted(glob.glob(self._pattern)):
            if os.path.exists(os.path.join(d, name)):
                run_dir = os.path.dirname(d) if self._colocated else d
                return os.path.basename(run_dir)
        return None

    async def owner(self, checkpoint_id: str) -> str | None:
        return await asyncio.to_thread(self._owner, checkpoint_id)

    def _drop_run(self, run_id: str) -> None:
        if self._colocated:
            return
        d = self._dir_of(run_id)
        for cid in self._ids(run_id):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(d, cid + SUFFIX))
        for n in os.listdir(d) if os.path.isdir(d) else ():
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(d, n))
        with contextlib.suppress(OSError):
            os.rmdir(d)

    async def drop_run(self, run_id: str) -> None:
        await asyncio.to_thread(self._drop_run, run_id)

    def _save_mark(self, run_id: str, mark: dict[str, Any]) -> None:
        if self._run_dir_of is not None and not os.path.isdir(self._run_dir_of(run_id)):
            return
        d = self._dir_of(run_id)
        os.makedirs(d, DIR_MODE, exist_ok=True)
        durable_write(os.path.join(d, MARK_FILE), canonical_json(mark), points=False)

    async def save_mark(self, run_id: str, mark: dict[str, Any]) -> None:
        where = os.path.join(self._dir_of(run_id), MARK_FILE)
        await _writing(where, run_id, "the call", self._save_mark, run_id, mark)

    def _load_mark(self, run_id: str) -> dict[str, Any] | None:
        try:
            with open(os.path.join(self._dir_of(run_id), MARK_FILE), "rb") as f:
                obj = json.loads(f.read())
        except (OSError, ValueError, RecursionError):
            return None
        return obj if isinstance(obj, dict) else None

    async def load_mark(self, run_id: str) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._load_mark, run_id)


# --- attachments --------------------------------------------------------------------------

SHA256_HEX = frozenset("0123456789abcdef")


def valid_sha256(digest: str) -> str:
    if len(digest) != 64 or not set(digest) <= SHA256_HEX:
        raise InvalidDigest(
            f"attachment address {digest[:70]!r} is not a lowercase SHA-256 hex digest; use "
            "the sha256 PutAttachment returned",
            metadata={"sha256": digest[:70]},
        )
    return digest


def attachment_block(digest: str, size: int, media_type: str, name: str = "") -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "attachment",
        "sha256": digest,
        "media_type": media_type,
        "size": size,
    }
    if name:
        block["name"] = name
    return block


class AttachmentStore(Protocol):
    """Binary tool outputs, stored once per run, addressed by the SHA-256 of their bytes.
    Attachments are never deleted on their own: they go with their run, so every checkpoint
    of the run keeps what it references."""

    async def put(self, run_id: str, data: bytes) -> tuple[str, bool]:
        """Store ``data``; (its sha256, whether the run already held it)."""
        ...

    async def get(self, run_id: str, digest: str) -> bytes:
        """The bytes (verified); ``AttachmentNotFound`` if the run does not hold them."""
        ...

    async def drop_run(self, run_id: str) -> None: ...


def _attachment_missing(run_id: str, digest: str) -> AttachmentNotFound:
    return AttachmentNotFound(
        f"run {run_id} holds no attachment {digest}; upload it with PutAttachment",
        metadata={"run_id": run_id, "sha256": digest},
    )


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
            raise _attachment_missing(run_id, digest)
        return data

    async def drop_run(self, run_id: str) -> None:
        self._runs.pop(run_id, None)


class FileAttachmentStore:
    """``<dir>/<sha256>`` per attachment (0600, durable); ``dir_of`` as for checkpoints."""

    def __init__(
        self,
        dir_of: Callable[[str], str],
        *,
        colocated: bool,
        run_dir_of: Callable[[str], str] | None = None,
    ) -> None:
        self._dir_of = dir_of
        self._colocated = colocated
        self._run_dir_of = run_dir_of

    @staticmethod
    def colocated_with(sessions_dir: str) -> FileAttachmentStore:
        return FileAttachmentStore(
            lambda run: os.path.join(sessions_dir, validate_id(run), "attachments"),
            colocated=True,
            run_dir_of=lambda run: os.path.join(sessions_dir, validate_id(run)),
        )

    @staticmethod
    def separate(root: str) -> FileAttachmentStore:
        return FileAttachmentStore(
            lambda run: os.path.join(root, validate_id(run)), colocated=False
        )

    def _put(self, run_id: str, data: bytes) -> tuple[str, bool]:
        if self._run_dir_of is not None and not os.path.isdir(self._run_dir_of(run_id)):
            raise SessionNotFound(f"run {run_id} does not exist", metadata={"run_id": run_id})
        digest = sha256_hex(data)
        d = self._dir_of(run_id)
        path = os.path.join(d, digest)
        if os.path.exists(path):
            return digest, True
        if not os.path.isdir(d):
            os.makedirs(d, DIR_MODE, exist_ok=True)
            _fsync_dir(os.path.dirname(d))
        durable_write(path, data, points=False)
        return digest, False

    async def put(self, run_id: str, data: bytes) -> tuple[str, bool]:
        where = self._dir_of(run_id)
        return await _writing(where, run_id, "the upload", self._put, run_id, data)

    def _get(self, run_id: str, digest: str) -> bytes:
        path = os.path.join(self._dir_of(run_id), valid_sha256(digest))
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise _attachment_missing(run_id, digest) from None
        if sha256_hex(data) != digest:
            raise StoreCorrupted(
                f"attachment {path} does not match its SHA-256 (damaged on disk); restore it "
                "from a backup or upload the original bytes again",
                metadata={"run_id": run_id, "file": path},
            )
        return data

    async def get(self, run_id: str, digest: str) -> bytes:
        return await asyncio.to_thread(self._get, run_id, digest)

    def _drop_run(self, run_id: str) -> None:
        if self._colocated:
            return
        d = self._dir_of(run_id)
        for n in os.listdir(d) if os.path.isdir(d) else ():
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(d, n))
        with contextlib.suppress(OSError):
            os.rmdir(d)

    async def drop_run(self, run_id: str) -> None:
        await asyncio.to_thread(self._drop_run, run_id)


# --- export / import ----------------------------------------------------------------------


def export_bytes(cp: Checkpoint, attachments: Mapping[str, bytes] | None = None) -> bytes:
    """Self-contained ``journald-checkpoint/1`` bytes (canonical JSON, every part hashed)."""
    import base64

    meta = cp.meta.as_json()
    atts = [
        {
            "sha256": digest,
            "size": len(data),
            "data_base64": base64.b64encode(data).decode("ascii"),
        }
        for digest, data in sorted((attachments or {}).items())
    ]
    body = {
        "meta": meta,
        "meta_sha256": sha256_hex(canonical_json(meta)),
        "messages": cp.messages,
        "message_count": len(cp.messages),
        "messages_sha256": content_hash(cp.messages),
        "attachments": atts,
    }
    return canonical_json(
        {"format": EXPORT_FORMAT, "body": body, "sha256": sha256_hex(canonical_json(body))}
    )


@dataclass(frozen=True, slots=True)
class Exported:
    """A verified export: the source meta, its conversation, the attachment bytes."""

    meta: CheckpointMeta
    messages: list[Message]
    attachments: dict[str, bytes]


def _invalid(what: str) -> CheckpointImportInvalid:
    return CheckpointImportInvalid(
        f"the bytes are not a valid {EXPORT_FORMAT} export: {what}; nothing was written. "
        "Export the checkpoint again from its source (`journald export`) and retry",
        metadata={"reason": what[:200]},
    )


def attachment_blocks(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every attachment block, at any depth (tool results nest blocks)."""
    out: list[dict[str, Any]] = []

    def walk(blocks: object) -> None:
        if not isinstance(blocks, list):
            return
        for b in blocks:
            if isinstance(b, dict):
                if b.get("type") == "attachment" and isinstance(b.get("sha256"), str):
                    out.append(b)
                walk(b.get("content"))

    for m in messages:
        walk(m.get("content"))
    return out


def attachment_refs(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    """SHA-256 digests of every attachment the messages reference."""
    return {b["sha256"] for b in attachment_blocks(messages)}


def verify_export(data: bytes) -> Exported:
    """Check format, canonical form, every hash, counts, schema and message shapes.

    Pure (no I/O); raises ``CheckpointImportInvalid`` saying what is wrong.
    """
    import base64
    import binascii

    from journald.validation import validate_payload

    if len(data) > MAX_EXPORT_BYTES:
        raise _invalid(f"it is {len(data)} bytes, above the {MAX_EXPORT_BYTES} byte limit")
    if json_too_deep(data, MAX_DOCUMENT_DEPTH):
        raise _invalid(
            f"its JSON nests deeper than {MAX_DOCUMENT_DEPTH} levels (message content: "
            f"{MAX_JSON_DEPTH})"
        )
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _invalid(f"not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise _invalid("the document is not a JSON object")
    if obj.get("format") != EXPORT_FORMAT:
        raise _invalid(f"format is {str(obj.get('format'))[:64]!r}, expected {EXPORT_FORMAT!r}")
    if set(obj) != {"format", "body", "sha256"}:
        raise _invalid(f"top-level fields {sorted(obj)} are not body, format, sha256")
    try:
        canon = canonical_json(obj)
    except JournaldError:
        raise _invalid("it holds values that are not canonical JSON") from None
    if canon != data:
        raise _invalid("the bytes are not in canonical form (they were edited)")
    body = obj["body"]
    if not isinstance(body, dict) or sha256_hex(canonical_json(body)) != obj["sha256"]:
        raise _invalid("the body does not match its sha256")
    want = {"meta", "meta_sha256", "messages", "message_count", "messages_sha256", "attachments"}
    if set(body) != want:
        raise _invalid(f"body fields {sorted(body)} are not {sorted(want)}")
    if sha256_hex(canonical_json(body["meta"])) != body["meta_sha256"]:
        raise _invalid("the meta does not match meta_sha256")
    try:
        meta = CheckpointMeta.from_json(body["meta"])
        validate_id(meta.run_id)
        valid_checkpoint_id(meta.checkpoint_id)
    except (ValueError, JournaldError) as exc:
        raise _invalid(f"bad meta ({exc})") from None
    msgs = body["messages"]
    if not isinstance(msgs, list):
        raise _invalid("messages is not a list")
    if type(body["message_count"]) is not int or not (
        body["message_count"] == len(msgs) == meta.message_count
    ):
        raise _invalid(
            f"counts disagree: {len(msgs)} messages, message_count {body['message_count']!r}, "
            f"meta {meta.message_count}"
        )
    digest = content_hash(msgs)
    if digest != body["messages_sha256"] or digest != meta.hash:
        raise _invalid("the messages do not match their sha256 / the checkpoint hash")
    try:
        validate_payload("rebase", {"reason": "import", "messages": msgs})
    except JournaldError as exc:
        raise _invalid(f"a message does not match the record schema ({exc.message})") from None
    if sanitize(msgs)[0] != msgs:
        raise _invalid(
            "the conversation is not model-ready (roles must alternate, every tool_use "
            "answered by a tool_result in the next message, no orphan results)"
        )
    atts: dict[str, bytes] = {}
    if not isinstance(body["attachments"], list):
        raise _invalid("attachments is not a list")
    for i, a in enumerate(body["attachments"]):
        if not isinstance(a, dict) or set(a) != {"sha256", "size", "data_base64"}:
            raise _invalid(f"attachments[{i}] is not {{sha256, size, data_base64}}")
        try:
            raw = base64.b64decode(str(a["data_base64"]), validate=True)
        except (binascii.Error, ValueError):
            raise _invalid(f"attachments[{i}] is not base64") from None
        if sha256_hex(raw) != a["sha256"] or len(raw) != a["size"]:
            raise _invalid(f"attachments[{i}] does not match its sha256 or size")
        if a["sha256"] in atts:
            raise _invalid(f"attachments[{i}] repeats {a['sha256']}")
        atts[a["sha256"]] = raw
    for blk in attachment_blocks(msgs):
        if blk["sha256"] in atts and blk.get("size") != len(atts[blk["sha256"]]):
            raise _invalid(
                f"an attachment block gives size {blk.get('size')!r} for "
                f"{blk['sha256']}, which holds {len(atts[blk['sha256']])} bytes"
            )
    refs = attachment_refs(msgs)
    if refs != set(atts):
        missing, extra = sorted(refs - set(atts)), sorted(set(atts) - refs)
        raise _invalid(
            f"attachments do not match the references of the messages (missing {missing}, "
            f"unreferenced {extra})"
        )
    return Exported(meta, msgs, atts)


def imported(ex: Exported, *, run_id: str, seq: int, created: str) -> Checkpoint:
    """A new checkpoint owned by ``run_id`` holding a verified export's conversation."""
    meta = replace(
        ex.meta,
        checkpoint_id=new_id(),
        run_id=run_id,
        trigger="import",
        seq=seq,
        created=created,
    )
    return Checkpoint(
        meta,
        ex.messages,
        {"run_id": ex.meta.run_id, "checkpoint_id": ex.meta.checkpoint_id, "seq": ex.meta.seq},
    )


# --- prune ---------------------------------------------------------------------------------


def pre_prune_hook(
    store: CheckpointStore, created: Callable[[], str]
) -> Callable[[str, Sequence[Any]], Any]:
    """The ``before`` callback of ``FileStore.prune``: a ``pre_prune`` checkpoint of what the
    prune drops, i.e. the conversation as it stood just before the run's latest rebase (its
    failure aborts the prune)."""
    from journald.core.fold import fold

    async def before(run_id: str, records: Sequence[Any]) -> None:
        cut = max(i for i, r in enumerate(records) if r.kind == "rebase")
        st = fold(records[:cut])
        cp = make_checkpoint(
            run_id=run_id,
            trigger="pre_prune",
            label=f"before pruning seqs up to {st.last_seq}",
            seq=st.last_seq,
            messages=st.messages,
            created=created(),
            model=st.fingerprint.model if st.fingerprint else "",
            cwd="",
        )
        await store.put(cp)

    return before
