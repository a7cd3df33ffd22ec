"""The checkpoint model and its two byte forms (pure: no I/O, no clock, no id minting).

A checkpoint is the *governed* (model-ready, fully paired) conversation of a run at a seq,
plus its meta: id (a ULID, minted by ``journald.storage.checkpoint_base.new_id``), run,
trigger, label, seq, message count, created, model, the writer's working directory and
``hash``. The hash is the SHA-256 of the canonical JSON of the message list, so a rebase
record carrying a checkpoint's conversation carries a hash anyone can recompute from the
record alone, and an imported checkpoint keeps the hash of the conversation it holds.

Stored form: canonical JSON ``{"format", "meta", "messages" [, "pages"] [, "provenance"]}``,
what every checkpoint store keeps per checkpoint (``encode_file`` / ``decode_file``).
``journald-checkpoint-file/1`` holds every message inline; ``journald-checkpoint-file/2``
holds page references (``journald.core.pages``) and the inline tail after them, and its
messages are read from the run's page store (``journald.storage.pages``) before the hash is
checked. A ``Checkpoint`` whose ``pages`` is not empty is in that stored form: ``messages``
is only its tail.

Export (``journald-checkpoint/1``): canonical JSON bytes ``{"body":…,"format":…,"sha256":…}``
where ``sha256`` hashes the canonical body and the body hashes each part (meta, messages,
each attachment). ``verify_export`` checks everything before anything is written, and it
requires the exact canonical bytes, so changing any byte of an export is detected.

Attachments are addressed by the SHA-256 of their bytes (``valid_sha256``); a message refers
to one with an attachment block (``attachment_block``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ulid import ULID

from journald.core.errors import (
    AttachmentNotFound,
    CheckpointImportInvalid,
    CheckpointNotFound,
    InvalidCheckpointId,
    InvalidDigest,
    InvalidRecord,
    JournaldError,
    StoreCorrupted,
)
from journald.core.governance import sanitize
from journald.core.pages import PageRef, ref_from_json
from journald.core.records import (
    MAX_DOCUMENT_DEPTH,
    MAX_JSON_DEPTH,
    canonical_json,
    json_too_deep,
    sha256_hex,
    strict_json,
    validate_id,
)

TRIGGERS = ("manual", "pre_compaction", "pre_restore", "pre_prune", "import")
FILE_FORMAT = "journald-checkpoint-file/1"
PAGED_FILE_FORMAT = "journald-checkpoint-file/2"
EXPORT_FORMAT = "journald-checkpoint/1"
MAX_EXPORT_BYTES = 256 * 1024 * 1024
MAX_ATTACHMENT_BYTES = 8 * 1024 * 1024
"""Largest attachment PutAttachment stores: half the daemon's default message size, so an
upload and a download always fit one message with room to spare."""

Message = dict[str, Any]
PayloadCheck = Callable[[str, object], None]
"""A record-schema check of a payload by kind (``journald.core.schema.validate_payload``),
passed in because the schema is read from a file."""


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
    pages: tuple[PageRef, ...] = ()
    """Stored form only: the pages before ``messages`` (then only the tail)."""

    @property
    def checkpoint_id(self) -> str:
        return self.meta.checkpoint_id


def governed(messages: Sequence[Message]) -> list[Message]:
    """The model-ready (paired) form every checkpoint holds."""
    return sanitize(list(messages))[0]


def encode_file(cp: Checkpoint) -> bytes:
    obj: dict[str, Any] = {
        "format": PAGED_FILE_FORMAT if cp.pages else FILE_FORMAT,
        "meta": cp.meta.as_json(),
        "messages": cp.messages,
    }
    if cp.pages:
        obj["pages"] = [r.as_json() for r in cp.pages]
    if cp.provenance:
        obj["provenance"] = cp.provenance
    return canonical_json(obj)


def decode_file(data: bytes, where: str) -> Checkpoint:
    """Read a stored checkpoint file; any damage is ``store_corrupted`` naming the file. A
    paged one (``journald-checkpoint-file/2``) comes back in stored form: its hash is checked
    once its pages are read (``resolved``)."""
    try:
        obj = json.loads(data)
        fmt = obj.get("format") if isinstance(obj, dict) else None
        if fmt not in (FILE_FORMAT, PAGED_FILE_FORMAT):
            raise ValueError(f"not a {FILE_FORMAT} or {PAGED_FILE_FORMAT} document")
        meta = CheckpointMeta.from_json(obj.get("meta"))
        msgs = obj.get("messages")
        if not isinstance(msgs, list):
            raise ValueError("messages is not a list")
        pages: tuple[PageRef, ...] = ()
        if fmt == PAGED_FILE_FORMAT:
            raw = obj.get("pages")
            if not isinstance(raw, list) or not raw:
                raise ValueError("its pages are not a list of page references")
            try:
                pages = tuple(ref_from_json(r) for r in raw)
            except StoreCorrupted as exc:
                raise ValueError(exc.message) from None
        elif content_hash(msgs) != meta.hash or len(msgs) != meta.message_count:
            raise ValueError("its messages do not match its hash or count")
        prov = obj.get("provenance", {})
        return Checkpoint(meta, msgs, prov if isinstance(prov, dict) else {}, pages)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise StoreCorrupted(
            f"checkpoint file {where} is damaged ({exc}); delete it with "
            "`journald checkpoint <run> --delete <id>` or restore it from a backup",
            metadata={"file": where},
        ) from exc


def resolved(cp: Checkpoint, messages: list[Message], where: str) -> Checkpoint:
    """A stored-form checkpoint with its whole conversation (its pages' messages, then its
    tail), checked against its hash and count."""
    if content_hash(messages) != cp.meta.hash or len(messages) != cp.meta.message_count:
        raise StoreCorrupted(
            f"checkpoint {where}: its pages and tail do not match its hash or count (a page "
            "was replaced); delete it with `journald checkpoint <run> --delete <id>` or "
            "restore the run's attachments from a backup",
            metadata={"file": where},
        )
    return Checkpoint(cp.meta, messages, cp.provenance)


def checkpoint_missing(run_id: str, checkpoint_id: str) -> CheckpointNotFound:
    return CheckpointNotFound(
        f"run {run_id} has no checkpoint {checkpoint_id}; list them with "
        f"`journald checkpoints {run_id}`",
        metadata={"run_id": run_id, "checkpoint_id": checkpoint_id},
    )


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


def attachment_missing(run_id: str, digest: str) -> AttachmentNotFound:
    return AttachmentNotFound(
        f"run {run_id} holds no attachment {digest}; upload it with PutAttachment",
        metadata={"run_id": run_id, "sha256": digest},
    )


def export_bytes(cp: Checkpoint, attachments: Mapping[str, bytes] | None = None) -> bytes:
    """Self-contained ``journald-checkpoint/1`` bytes (canonical JSON, every part hashed)."""
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


def export_too_large(size: int) -> CheckpointImportInvalid:
    """An import of ``size`` bytes is over the limit: refused before it is parsed (a chunked
    import: as soon as its bytes pass the limit, before the rest is received)."""
    return _invalid(f"it is {size} bytes, above the {MAX_EXPORT_BYTES} byte limit")


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


def verify_export(data: bytes, check_payload: PayloadCheck) -> Exported:
    """Check format, canonical form, every hash, counts, schema (``check_payload``) and
    message shapes; raises ``CheckpointImportInvalid`` saying what is wrong."""
    if len(data) > MAX_EXPORT_BYTES:
        raise export_too_large(len(data))
    if json_too_deep(data, MAX_DOCUMENT_DEPTH):
        raise _invalid(
            f"its JSON nests deeper than {MAX_DOCUMENT_DEPTH} levels (message content: "
            f"{MAX_JSON_DEPTH})"
        )
    try:
        obj = strict_json(data, "export")  # a repeated key, NaN, a lone surrogate: named
    except InvalidRecord as exc:
        raise _invalid(exc.message.removeprefix("field export: ")) from None
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
        check_payload("rebase", {"reason": "import", "messages": msgs})
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
