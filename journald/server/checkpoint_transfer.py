"""ExportCheckpointChunks and ImportCheckpointChunks: export and import of a checkpoint of
any size, in chunks (docs/protocol.md#checkpoints, docs/design.md#checkpoints).

ExportCheckpoint answers one message, so a checkpoint whose export is above the daemon's max
message size (16 MiB) could be taken, restored and forked but not moved. The chunked RPCs
carry the same ``journald-checkpoint/1`` bytes:

* **Export** writes the document as it is sent (``journald.core.export_pieces``): one
  attachment or one message encoded at a time, cut into chunks of ``CHUNK_BYTES``. The
  daemon holds the checkpoint's conversation (as every reader of it does), the piece being
  encoded and one chunk; never the whole export, never a message above the max.
* **Import** must verify everything before writing anything, and verification needs the
  whole document (its canonical form is compared byte for byte), so the chunks are
  buffered, bounded twice: by the import limit (``MAX_EXPORT_BYTES``, refused with
  ``checkpoint_import_invalid`` as soon as the bytes pass it, before the rest is received)
  and by the peer's ``max_inflight_bytes_per_peer`` (``resource_exhausted``), which the
  buffered bytes are held against like appends not yet acknowledged, so one peer's
  concurrent imports cannot take the daemon's memory. A refused or cancelled stream writes
  nothing and drops its buffer (its budget given back on the way out). The verification runs
  on a read thread of the background class (``verified``), not on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
from journald_proto import journal_pb2 as pb

from journald.core.checkpoints import (
    MAX_EXPORT_BYTES,
    Exported,
    attachment_refs,
    export_too_large,
    verify_export,
)
from journald.core.errors import InvalidRequest
from journald.core.export_pieces import Chunks, ExportPieces
from journald.core.records import validate_id
from journald.core.schema import validate_payload
from journald.server.checkpoint_service import CheckpointRpcs, meta_to_pb
from journald.server.edge import streaming, unary
from journald.server.fairness import PeerBudget, peer_key
from journald.storage.io_pool import background

Ctx = grpc.aio.ServicerContext[Any, Any]
CHUNK_BYTES = 1024 * 1024
"""Bytes per export chunk: a 256 MiB export is 256 messages. A daemon whose max message size
is below 2 MiB sends chunks of half of it (room for the message around the bytes)."""


class CheckpointTransferRpcs:
    def __init__(self, checkpoints: CheckpointRpcs, budget: PeerBudget) -> None:
        self.checkpoints = checkpoints
        self.runs = checkpoints.runs
        self.budget = budget

    @streaming
    async def ExportCheckpointChunks(
        self, request: pb.ExportCheckpointChunksRequest, context: Ctx
    ) -> AsyncIterator[pb.ExportCheckpointChunksResponse]:
        run_id = request.run_id
        cp = await self.checkpoints.exported(run_id, request.checkpoint_id)
        size = max(1, min(CHUNK_BYTES, self.runs.limits.max_message_bytes // 2))
        pieces, chunks = ExportPieces(cp), Chunks(size)
        for chunk in chunks.add(pieces.start()):
            yield pb.ExportCheckpointChunksResponse(data=chunk)
        for digest in sorted(attachment_refs(cp.messages)):  # read one at a time
            blob = await self.runs.attachments.get(run_id, digest)
            piece = pieces.attachment(digest, blob)
            del blob
            for chunk in chunks.add(piece):
                yield pb.ExportCheckpointChunksResponse(data=chunk)
            del piece
        for piece in pieces.messages():
            for chunk in chunks.add(piece):
                yield pb.ExportCheckpointChunksResponse(data=chunk)
        for chunk in chunks.add(pieces.end()):
            yield pb.ExportCheckpointChunksResponse(data=chunk)
        for chunk in chunks.rest():
            yield pb.ExportCheckpointChunksResponse(data=chunk)

    @unary
    async def ImportCheckpointChunks(
        self, requests: AsyncIterator[pb.ImportCheckpointChunksRequest], context: Ctx
    ) -> pb.ImportCheckpointChunksResponse:
        peer = peer_key(context)
        run_id = ""
        buf = bytearray()
        with contextlib.ExitStack() as held:
            try:
                async for request in requests:
                    if not run_id:
                        run_id = validate_id(request.run_id)
                        # before any bytes are buffered: an upload to no run is refused first
                        await self.runs.require_run(run_id)
                    elif request.run_id and request.run_id != run_id:
                        raise _other_run(run_id, request.run_id)
                    size = len(request.data)
                    if len(buf) + size > MAX_EXPORT_BYTES:
                        raise export_too_large(len(buf) + size)
                    held.enter_context(self._held(peer, run_id, size))
                    buf += request.data
                    del request
                if not run_id:
                    raise _no_chunk()
            except BaseException:
                buf.clear()  # released now, not when the refusal's traceback goes
                raise
            # the budget is kept until the import is stored: the bytes are still held
            ex = await verified(_frozen(buf))
            meta = await self.checkpoints.store_verified(run_id, ex)
        return pb.ImportCheckpointChunksResponse(checkpoint=meta_to_pb(meta))

    def _held(self, peer: str, run_id: str, size: int) -> contextlib.AbstractContextManager[None]:
        return self.budget.take(
            peer,
            "max_inflight_bytes_per_peer",
            size,
            lambda: f"an import of {size} more bytes into run {run_id}",
            "import one checkpoint at a time, or wait for the appends already sent",
        )


async def verified(data: bytes) -> Exported:
    """``verify_export`` on a read thread of the background class: up to 256 MiB of parsing,
    hashing and schema checks would otherwise hold the event loop (every append, every Open)
    for seconds; there it takes turns with the loop (the daemon's 1 ms switch interval)."""
    with background():
        return await asyncio.to_thread(verify_export, data, validate_payload)


def _frozen(buf: bytearray) -> bytes:
    """The buffered export as ``bytes`` (``verify_export`` compares and hashes bytes); the
    buffer is emptied as soon as the copy exists, so the two are held together only here."""
    data = bytes(buf)
    buf.clear()
    return data


def _other_run(run_id: str, other: str) -> InvalidRequest:
    return InvalidRequest(
        f"an ImportCheckpointChunks stream imports into run {run_id}, a later request names "
        f"run {other[:128]!r}; nothing was written. Name the run in the first request and "
        "leave run_id empty (or the same) in the others",
        metadata={"run_id": run_id, "other_run_id": other[:128]},
    )


def _no_chunk() -> InvalidRequest:
    return InvalidRequest(
        "the ImportCheckpointChunks stream ended without a request; nothing was written. "
        "Send the target run_id and the export's bytes in one or more requests",
        metadata={"method": "ImportCheckpointChunks"},
    )
