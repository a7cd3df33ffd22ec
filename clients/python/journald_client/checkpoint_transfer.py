"""Export and import of checkpoints in chunks (docs/protocol.md#checkpoints), for ``Client``
and ``AsyncClient``.

ExportCheckpoint and ImportCheckpoint carry the whole ``journald-checkpoint/1`` export in one
message, so a checkpoint whose export is above the max message size (16 MiB) could not be
moved. ExportCheckpointChunks and ImportCheckpointChunks carry the same bytes in chunks of
``CHUNK_BYTES``: ``export_checkpoint`` / ``import_checkpoint`` use them (same signatures,
same bytes), and ``export_checkpoint_to`` / ``import_checkpoint_from`` stream between a file
and the daemon without holding the export whole.

A daemon older than the chunked RPCs answers ``unimplemented``: then the one-message RPCs
are used (for an import from a file, when the file can be read again from its start).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, BinaryIO

import grpc
from journald_proto import journal_pb2 as pb

from journald_client import codec, errors
from journald_client.state import CheckpointMeta

CHUNK_BYTES = 1024 * 1024 - 4096
"""Bytes per import request: a request (these bytes, the run id, the framing) stays within a
daemon's max message size down to 1 MiB (``--max-message-bytes``)."""

ToError = Callable[[grpc.RpcError], errors.JournaldError]


def _unimplemented(err: errors.JournaldError) -> bool:
    return err.code == "unimplemented"


def _import_requests(
    run_id: str, pieces: Iterator[bytes]
) -> Iterator[pb.ImportCheckpointChunksRequest]:
    first = True
    for data in pieces:
        yield pb.ImportCheckpointChunksRequest(run_id=run_id if first else "", data=data)
        first = False
    if first:  # an empty export still names its run (the daemon refuses the bytes)
        yield pb.ImportCheckpointChunksRequest(run_id=run_id)


def _read_once(err: errors.JournaldError) -> errors.Unsupported:
    """An older daemon's ``unimplemented`` to an import from a source read only once."""
    return errors.Unsupported(
        "this daemon is older than ImportCheckpointChunks: it takes an import only in one "
        "message, and the source (a pipe?) cannot be read again from its start to send it "
        "so; import from a seekable file, or pass the bytes to import_checkpoint",
        status=err.status,
    )


def bytes_pieces(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for at in range(0, len(view), CHUNK_BYTES):
        yield bytes(view[at : at + CHUNK_BYTES])


def file_pieces(source: BinaryIO) -> Iterator[bytes]:
    while piece := source.read(CHUNK_BYTES):
        yield piece


def _start_of(source: BinaryIO) -> int | None:
    """Where ``source`` can be read again from (None: a pipe, read once)."""
    try:
        return source.tell() if source.seekable() else None
    except OSError:
        return None


# --- synchronous ----------------------------------------------------------------------------


def export_to(
    stub: Any, to_error: ToError, run_id: str, checkpoint_id: str, write: Callable[[bytes], Any]
) -> int:
    """Stream the export into ``write``, chunk by chunk; its size. An error mid-stream raises
    after some chunks were written: what was written is not an export (discard it)."""
    req = pb.ExportCheckpointChunksRequest(run_id=run_id, checkpoint_id=checkpoint_id)
    call = stub.ExportCheckpointChunks(req, metadata=codec.metadata())
    size = 0
    try:
        for chunk in call:
            write(chunk.data)
            size += len(chunk.data)
    except grpc.RpcError as exc:
        err = to_error(exc)
        if not (size == 0 and _unimplemented(err)):
            raise err from None
        one = pb.ExportCheckpointRequest(run_id=run_id, checkpoint_id=checkpoint_id)
        try:
            data = stub.ExportCheckpoint(one, metadata=codec.metadata()).data
        except grpc.RpcError as exc2:
            raise to_error(exc2) from None
        write(data)
        return len(data)
    finally:
        call.cancel()
    return size


def export_bytes(stub: Any, to_error: ToError, run_id: str, checkpoint_id: str) -> bytes:
    out = bytearray()
    export_to(stub, to_error, run_id, checkpoint_id, out.extend)
    return bytes(out)


def import_pieces(
    stub: Any,
    to_error: ToError,
    run_id: str,
    pieces: Iterator[bytes],
    again: Callable[[], bytes] | None,
) -> CheckpointMeta:
    """Send ``pieces`` as one import; ``again``: the whole export, for a daemon without the
    chunked RPC (None: none to fall back on)."""
    try:
        resp = stub.ImportCheckpointChunks(
            _import_requests(run_id, pieces), metadata=codec.metadata()
        )
    except grpc.RpcError as exc:
        err = to_error(exc)
        if not _unimplemented(err):
            raise err from None
        if again is None:
            raise _read_once(err) from None
        one = pb.ImportCheckpointRequest(run_id=run_id, data=again())
        try:
            resp = stub.ImportCheckpoint(one, metadata=codec.metadata())
        except grpc.RpcError as exc2:
            raise to_error(exc2) from None
    return codec.checkpoint_meta_from_pb(resp.checkpoint)


class _Stoppable:
    """Pieces that gRPC's sending thread reads, stopped under a lock before the fallback
    reads the file again: the sending thread may still be inside ``next`` when the call has
    already failed, and the two must not move one file position at once."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces = pieces
        self._lock = threading.Lock()
        self._stopped = False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        with self._lock:
            if self._stopped:
                raise StopIteration
            return next(self._pieces)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True


def import_file(stub: Any, to_error: ToError, run_id: str, source: BinaryIO) -> CheckpointMeta:
    start = _start_of(source)
    pieces = _Stoppable(file_pieces(source))

    def again() -> bytes:
        assert start is not None
        pieces.stop()
        source.seek(start)
        return source.read()

    return import_pieces(stub, to_error, run_id, pieces, again if start is not None else None)


# --- asynchronous ---------------------------------------------------------------------------


async def export_to_async(
    stub: Any, to_error: ToError, run_id: str, checkpoint_id: str, write: Callable[[bytes], Any]
) -> int:
    req = pb.ExportCheckpointChunksRequest(run_id=run_id, checkpoint_id=checkpoint_id)
    call = stub.ExportCheckpointChunks(req, metadata=codec.metadata())
    size = 0
    try:
        async for chunk in call:
            write(chunk.data)
            size += len(chunk.data)
    except grpc.RpcError as exc:
        err = to_error(exc)
        if not (size == 0 and _unimplemented(err)):
            raise err from None
        one = pb.ExportCheckpointRequest(run_id=run_id, checkpoint_id=checkpoint_id)
        try:
            data = (await stub.ExportCheckpoint(one, metadata=codec.metadata())).data
        except grpc.RpcError as exc2:
            raise to_error(exc2) from None
        write(data)
        return len(data)
    finally:
        call.cancel()
    return size


async def export_bytes_async(
    stub: Any, to_error: ToError, run_id: str, checkpoint_id: str
) -> bytes:
    out = bytearray()
    await export_to_async(stub, to_error, run_id, checkpoint_id, out.extend)
    return bytes(out)


async def _async_requests(
    run_id: str, pieces: Iterator[bytes]
) -> AsyncIterator[pb.ImportCheckpointChunksRequest]:
    for request in _import_requests(run_id, pieces):
        yield request


async def _lacks_chunks(stub: Any, to_error: ToError) -> bool:
    """Whether the daemon answers ``unimplemented`` to ExportCheckpointChunks (added with
    ImportCheckpointChunks). grpc.aio reports a client stream that the server ended while a
    chunk was being sent (an older daemon's UNIMPLEMENTED, answered at once) as a bare
    INTERNAL "Internal error from Core" now and then; a call that sends nothing after its
    request gets the daemon's own status."""
    probe = stub.ExportCheckpointChunks(
        pb.ExportCheckpointChunksRequest(), metadata=codec.metadata()
    )
    try:
        async for _ in probe:
            return False
    except grpc.RpcError as exc:
        return _unimplemented(to_error(exc))
    finally:
        probe.cancel()
    return False


async def import_pieces_async(
    stub: Any,
    to_error: ToError,
    run_id: str,
    pieces: Iterator[bytes],
    again: Callable[[], bytes] | None,
) -> CheckpointMeta:
    try:
        resp = await stub.ImportCheckpointChunks(
            _async_requests(run_id, pieces), metadata=codec.metadata()
        )
    except grpc.RpcError as exc:
        err = to_error(exc)
        # a bare INTERNAL may be an older daemon's UNIMPLEMENTED (see _lacks_chunks)
        maybe_older = err.status in errors.TRANSPORT_FAILURES and isinstance(
            err, errors.DaemonUnavailable
        )
        if not (_unimplemented(err) or (maybe_older and await _lacks_chunks(stub, to_error))):
            raise err from None
        if again is None:
            raise _read_once(err) from None
        one = pb.ImportCheckpointRequest(run_id=run_id, data=again())
        try:
            resp = await stub.ImportCheckpoint(one, metadata=codec.metadata())
        except grpc.RpcError as exc2:
            raise to_error(exc2) from None
    return codec.checkpoint_meta_from_pb(resp.checkpoint)


async def import_file_async(
    stub: Any, to_error: ToError, run_id: str, source: BinaryIO
) -> CheckpointMeta:
    start = _start_of(source)

    def again() -> bytes:
        assert start is not None
        source.seek(start)
        return source.read()

    return await import_pieces_async(
        stub, to_error, run_id, file_pieces(source), again if start is not None else None
    )


__all__ = [
    "CHUNK_BYTES",
    "bytes_pieces",
    "export_bytes",
    "export_bytes_async",
    "export_to",
    "export_to_async",
    "file_pieces",
    "import_file",
    "import_file_async",
    "import_pieces",
    "import_pieces_async",
]
