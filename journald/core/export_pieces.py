"""The ``journald-checkpoint/1`` export written piece by piece (pure: no I/O).

``journald.core.checkpoints.export_bytes`` builds the whole document at once; a checkpoint
whose export is larger than one gRPC message (ExportCheckpointChunks) is sent as it is
written instead, and never held whole. The bytes are the same: canonical JSON sorts keys,
so the document reads

    {"body":{"attachments":[…],"message_count":N,"messages":[…],"messages_sha256":"…",
     "meta":{…},"meta_sha256":"…"},"format":"journald-checkpoint/1","sha256":"…"}

and every hash comes after what it hashes (the attachments and the messages before
``messages_sha256``, the whole body before ``sha256``): each part is written once, hashed as
it goes by, and dropped. The canonical JSON of a list is its items' canonical JSON joined by
commas inside brackets, so each message and each attachment is encoded on its own.

A caller writes ``start()``, then ``attachment()`` for each attachment in digest order (the
order ``export_bytes`` sorts them in), then ``message()`` for each message, then ``end()``;
the concatenation of what they return is ``export_bytes(cp, attachments)``.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator

from journald.core.checkpoints import EXPORT_FORMAT, Checkpoint, Message
from journald.core.records import canonical_json, sha256_hex


class ExportPieces:
    """Writes one checkpoint's export in order; each method returns the next bytes."""

    def __init__(self, cp: Checkpoint) -> None:
        self._cp = cp
        self._body = hashlib.sha256()
        self._messages = hashlib.sha256(b"[")
        self._last_digest = ""
        self._attachments = 0
        self._written = 0
        self._state = "new"

    def _step(self, want: str, then: str) -> None:
        # a misuse would write bytes that no longer verify: refused at once instead
        if self._state != want:
            raise RuntimeError(f"export pieces out of order: {then} after {self._state}")
        self._state = then

    def _body_bytes(self, data: bytes) -> bytes:
        self._body.update(data)
        return data

    def start(self) -> bytes:
        self._step("new", "attachments")
        return b'{"body":' + self._body_bytes(b'{"attachments":[')

    def attachment(self, digest: str, data: bytes) -> bytes:
        """The next attachment (digests ascending, each once)."""
        self._step("attachments", "attachments")
        if digest <= self._last_digest:
            raise RuntimeError(f"attachment {digest} is not after {self._last_digest}")
        self._last_digest = digest
        item = canonical_json(
            {
                "data_base64": base64.b64encode(data).decode("ascii"),
                "sha256": digest,
                "size": len(data),
            }
        )
        sep = b"," if self._attachments else b""
        self._attachments += 1
        return self._body_bytes(sep + item)

    def messages(self) -> Iterator[bytes]:
        """The count and every message of the checkpoint, one message at a time."""
        self._step("attachments", "messages")
        msgs = self._cp.messages
        yield self._body_bytes(b'],"message_count":%d,"messages":[' % len(msgs))
        for i, m in enumerate(msgs):
            yield self._message(m, first=i == 0)
        self._step("messages", "messages done")

    def _message(self, m: Message, first: bool) -> bytes:
        item = canonical_json(m) if first else b"," + canonical_json(m)
        self._messages.update(item)
        return self._body_bytes(item)

    def end(self) -> bytes:
        self._step("messages done", "ended")
        self._messages.update(b"]")
        meta = self._cp.meta.as_json()
        meta_bytes = canonical_json(meta)
        tail = b'],"messages_sha256":"%s","meta":%s,"meta_sha256":"%s"}' % (
            self._messages.hexdigest().encode("ascii"),
            meta_bytes,
            sha256_hex(meta_bytes).encode("ascii"),
        )
        self._body_bytes(tail)
        return tail + b',"format":%s,"sha256":"%s"}' % (
            canonical_json(EXPORT_FORMAT),
            self._body.hexdigest().encode("ascii"),
        )


class Chunks:
    """Pieces of any size in, chunks of exactly ``size`` bytes out (the last one shorter):
    what an export stream sends, whatever the size of a message or an attachment."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._buf = bytearray()

    def add(self, piece: bytes) -> Iterator[bytes]:
        self._buf += piece
        while len(self._buf) >= self.size:
            yield bytes(self._buf[: self.size])
            del self._buf[: self.size]  # from the front: CPython moves a start, not the bytes

    def rest(self) -> Iterator[bytes]:
        if self._buf:
            yield bytes(self._buf)
            self._buf.clear()
