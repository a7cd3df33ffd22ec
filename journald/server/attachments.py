"""Attachment RPCs: content-addressed bytes a run's messages reference by sha256
(docs/design.md#records). An attachment belongs to one run; a fork or an import copies the
ones its conversation references into the new run."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import grpc
from journald_proto import journal_pb2 as pb

from journald.core.checkpoints import (
    MAX_ATTACHMENT_BYTES,
    attachment_block,
    attachment_refs,
    valid_sha256,
)
from journald.core.errors import InvalidRecord, InvalidRequest
from journald.core.fold import Message
from journald.core.records import canonical_json, sha256_hex, validate_id
from journald.core.schema import validate_payload
from journald.server.edge import unary
from journald.server.runs import Runs
from journald.storage.checkpoint_base import AttachmentStore

Ctx = grpc.aio.ServicerContext[Any, Any]


async def copy_attachments(
    store: AttachmentStore, source: str, target: str, digests: Iterable[str]
) -> None:
    """Copy the attachments named by ``digests`` from run ``source`` into run ``target``
    (content-addressed: a copy already there is kept)."""
    for digest in sorted(set(digests)):
        await store.put(target, await store.get(source, digest))


async def copy_referenced(
    store: AttachmentStore, source: str, target: str, msgs: Sequence[Message]
) -> None:
    """Copy every attachment ``msgs`` reference."""
    await copy_attachments(store, source, target, attachment_refs(msgs))


class AttachmentRpcs:
    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    @unary
    async def PutAttachment(
        self, request: pb.PutAttachmentRequest, context: Ctx
    ) -> pb.PutAttachmentResponse:
        run_id = validate_id(request.run_id)
        if len(request.data) > MAX_ATTACHMENT_BYTES:
            raise InvalidRequest(
                f"field data: the attachment is {len(request.data)} bytes; the limit is 8 MiB "
                f"({MAX_ATTACHMENT_BYTES} bytes): keep larger files outside the journal and "
                "journal a reference (a path or URL) instead",
                metadata={
                    "field": "data",
                    "bytes": len(request.data),
                    "limit_bytes": MAX_ATTACHMENT_BYTES,
                },
            )
        await self.runs.require_run(run_id)
        if not request.media_type:
            raise InvalidRecord(
                "field media_type: an attachment needs a media type, e.g. image/png",
                metadata={"field": "media_type"},
            )
        block = attachment_block(
            sha256_hex(request.data), len(request.data), request.media_type, request.name
        )
        validate_payload("user", {"content": [block]})
        digest, existed = await self.runs.attachments.put(run_id, request.data)
        return pb.PutAttachmentResponse(
            sha256=digest,
            size=len(request.data),
            block_json=canonical_json(block),
            existed=existed,
        )

    @unary
    async def GetAttachment(
        self, request: pb.GetAttachmentRequest, context: Ctx
    ) -> pb.GetAttachmentResponse:
        run_id = validate_id(request.run_id)
        await self.runs.require_run(run_id)
        data = await self.runs.attachments.get(run_id, valid_sha256(request.sha256))
        return pb.GetAttachmentResponse(data=data, sha256=request.sha256, size=len(data))
