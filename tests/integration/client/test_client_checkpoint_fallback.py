"""The Python clients against a daemon older than ExportCheckpointChunks and
ImportCheckpointChunks (journald_client.checkpoint_transfer): the chunked RPC answers
``unimplemented``, and then the one-message ExportCheckpoint / ImportCheckpoint move the very
same bytes (an import from a file only when the file can be read again from its start).

The older daemon is a proxy in this process: a JournalService whose servicer forwards only the
one-message checkpoint RPCs (and ListCheckpoints) to a real daemon and leaves the chunked ones
to the generated base class, which answers UNIMPLEMENTED as a daemon built before them does.
It counts every call it receives, by method name."""

from __future__ import annotations

import collections
import contextlib
import io
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

import grpc
import journald_client as jc
import pytest
from journald_client.checkpoint_transfer import CHUNK_BYTES
from journald_client.client import CHANNEL_OPTIONS
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from tests.daemon import Daemon
from tests.integration.checkpoints.test_checkpoints_export import rich_run
from tests.integration.rpc import Lease, stub, until_unlocked
from tests.long_reads import start_with_page_reads

SERVICE = "/journald.v1.JournalService/"
READ_BYTES = 800 * 1024
"""Tool results of the large source run: three of them make an export of several chunks."""
Metadata = tuple[tuple[str, str | bytes], ...]
JOIN_S = 30.0
"""A bound on a helper thread's end (it ends as soon as its pipe is read or closed)."""


# --- the older daemon -------------------------------------------------------------------------


class CallCounter(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Counts every call the proxy receives, by RPC name (``Export...``, ``grpc...Check``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: collections.Counter[str] = collections.Counter()

    def intercept_service(
        self, continuation: Callable[[Any], Any], handler_call_details: Any
    ) -> Any:
        method = str(handler_call_details.method)
        with self._lock:
            self._calls[method.removeprefix(SERVICE)] += 1
        return continuation(handler_call_details)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._calls)


def forwarded(context: grpc.ServicerContext) -> Metadata:
    """The caller's own metadata (a traceparent), without what gRPC adds to every call."""
    return tuple(
        (key, value)
        for key, value in context.invocation_metadata()
        if not key.startswith((":", "grpc-")) and key != "user-agent"
    )


class OldJournal(pbg.JournalServiceServicer):
    """A daemon from before the chunked checkpoint RPCs, serving through ``daemon``."""

    def __init__(self, daemon: pbg.JournalServiceStub) -> None:
        self._daemon = daemon

    def _forward(self, name: str, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return getattr(self._daemon, name)(request, metadata=forwarded(context))
        except grpc.RpcError as exc:  # the daemon's refusal, its error trailer included
            context.set_trailing_metadata(cast("Metadata", exc.trailing_metadata() or ()))
            context.abort(exc.code(), exc.details() or "")

    def ExportCheckpoint(
        self, request: pb.ExportCheckpointRequest, context: grpc.ServicerContext
    ) -> pb.ExportCheckpointResponse:
        return self._forward("ExportCheckpoint", request, context)  # type: ignore[no-any-return]

    def ImportCheckpoint(
        self, request: pb.ImportCheckpointRequest, context: grpc.ServicerContext
    ) -> pb.ImportCheckpointResponse:
        return self._forward("ImportCheckpoint", request, context)  # type: ignore[no-any-return]

    def ListCheckpoints(
        self, request: pb.ListCheckpointsRequest, context: grpc.ServicerContext
    ) -> pb.ListCheckpointsResponse:
        return self._forward("ListCheckpoints", request, context)  # type: ignore[no-any-return]


class CutJournal(OldJournal):
    """A daemon WITH the chunked RPCs whose chunked import is cut the way a broken
    connection is (a bare INTERNAL, no journald error trailer)."""

    def ExportCheckpointChunks(
        self, request: pb.ExportCheckpointChunksRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.ExportCheckpointChunksResponse]:
        try:
            yield from self._daemon.ExportCheckpointChunks(request, metadata=forwarded(context))
        except grpc.RpcError as exc:
            context.set_trailing_metadata(cast("Metadata", exc.trailing_metadata() or ()))
            context.abort(exc.code(), exc.details() or "")

    def ImportCheckpointChunks(
        self,
        request_iterator: Iterator[pb.ImportCheckpointChunksRequest],
        context: grpc.ServicerContext,
    ) -> pb.ImportCheckpointChunksResponse:
        context.abort(grpc.StatusCode.INTERNAL, "connection cut")


@dataclass
class Proxy:
    socket: Path
    counter: CallCounter

    def calls(self, name: str) -> int:
        return self.counter.counts().get(name, 0)


@contextlib.contextmanager
def old_daemon(daemon: Daemon, servicer: type[OldJournal] = OldJournal) -> Iterator[Proxy]:
    """The proxy on a unix socket in a fresh 0700 directory of ours (a client refuses a
    socket whose directory others may write); stopped and removed when the block ends."""
    directory = tempfile.mkdtemp(prefix="jd-old-", dir="/tmp")  # short: a unix path <108 B
    os.chmod(directory, 0o700)
    socket = Path(directory) / "journald.sock"
    counter = CallCounter()
    channel = grpc.insecure_channel(daemon.target, options=CHANNEL_OPTIONS)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        interceptors=[counter],
        options=CHANNEL_OPTIONS,
    )
    try:
        # only the RPCs the tests call are served: the servicer stays abstract
        old = servicer(pbg.JournalServiceStub(channel))
        pbg.add_JournalServiceServicer_to_server(old, server)
        assert server.add_insecure_port(f"unix:{socket}") != 0
        server.start()
        yield Proxy(socket, counter)
    finally:
        server.stop(grace=None).wait(JOIN_S)
        channel.close()
        shutil.rmtree(directory, ignore_errors=True)


# --- the runs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    run_id: str
    mark: pb.CheckpointMeta
    export: bytes
    """What the real daemon's ExportCheckpoint answers for ``mark``."""


@dataclass(frozen=True)
class Sources:
    daemon: Daemon
    small: Source
    large: Source
    """An export of several chunks (``CHUNK_BYTES``)."""


def exported(s: pbg.JournalServiceStub, run_id: str) -> Source:
    mark = until_unlocked(lambda: s.Checkpoint(pb.CheckpointRequest(run_id=run_id))).checkpoint
    req = pb.ExportCheckpointRequest(run_id=run_id, checkpoint_id=mark.checkpoint_id)
    return Source(run_id, mark, s.ExportCheckpoint(req).data)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sources]:
    with Daemon(tmp_path_factory.mktemp("fallback"), "file") as d:
        s = stub(d.target)
        rich_run(s, "src").release()
        with jc.connect(str(d.socket)) as client:
            start_with_page_reads(client, "big", 3, READ_BYTES)
        large = exported(s, "big")
        assert len(large.export) > 2 * CHUNK_BYTES
        yield Sources(d, exported(s, "src"), large)


@pytest.fixture
def proxy(sources: Sources) -> Iterator[Proxy]:
    with old_daemon(sources.daemon) as p:
        yield p


def new_run(sources: Sources, run_id: str) -> str:
    """An empty run to import into (its lease released)."""
    Lease(stub(sources.daemon.target), run_id, prompt="elsewhere").release()
    return run_id


def assert_imported(meta: jc.CheckpointMeta, run_id: str, source: Source) -> None:
    assert meta.run_id == run_id
    assert meta.hash == source.mark.hash
    assert meta.trigger == "import"
    assert meta.message_count == source.mark.message_count


def real_checkpoints(sources: Sources, run_id: str) -> list[pb.CheckpointMeta]:
    s = stub(sources.daemon.target)
    return list(s.ListCheckpoints(pb.ListCheckpointsRequest(run_id=run_id)).checkpoints)


class Pipe:
    """A non-seekable source: the read end of an OS pipe, fed by a thread."""

    def __init__(self, data: bytes) -> None:
        read_fd, write_fd = os.pipe()
        self.reader: BinaryIO = open(read_fd, "rb")  # noqa: SIM115 - closed by close()
        self._writer = open(write_fd, "wb")  # noqa: SIM115 - closed by its thread
        self._thread = threading.Thread(target=self._feed, args=(data,), daemon=True)
        self._thread.start()

    def _feed(self, data: bytes) -> None:
        with self._writer, contextlib.suppress(BrokenPipeError):
            self._writer.write(data)

    def close(self) -> None:
        self.reader.close()  # a writer still blocked gets EPIPE and ends
        self._thread.join(JOIN_S)
        assert not self._thread.is_alive()


# --- sync Client --------------------------------------------------------------------------------


def test_export_checkpoint_from_an_older_daemon_returns_the_bytes_its_export_checkpoint_answers(
    sources: Sources, proxy: Proxy
) -> None:
    src = sources.small
    with jc.connect(str(proxy.socket)) as client:
        data = client.export_checkpoint(src.run_id, src.mark.checkpoint_id)
    assert data == src.export
    assert proxy.calls("ExportCheckpointChunks") == 1
    assert proxy.calls("ExportCheckpoint") == 1


def test_import_checkpoint_into_an_older_daemon_makes_the_source_marks_checkpoint(
    sources: Sources, proxy: Proxy
) -> None:
    src, dst = sources.small, new_run(sources, "dst-sync")
    with jc.connect(str(proxy.socket)) as client:
        meta = client.import_checkpoint(dst, src.export)
        assert_imported(meta, dst, src)
        assert [c.checkpoint_id for c in client.checkpoints(dst)] == [meta.checkpoint_id]
    assert proxy.calls("ImportCheckpointChunks") == 1
    assert proxy.calls("ImportCheckpoint") == 1
    assert [c.hash for c in real_checkpoints(sources, dst)] == [src.mark.hash]


def test_an_export_to_a_file_and_an_import_from_it_go_through_an_older_daemon(
    sources: Sources, proxy: Proxy, tmp_path: Path
) -> None:
    src, dst = sources.large, new_run(sources, "dst-sync-file")
    path = tmp_path / "big.checkpoint"
    with jc.connect(str(proxy.socket)) as client:
        with path.open("wb") as out:
            size = client.export_checkpoint_to(src.run_id, src.mark.checkpoint_id, out)
        assert size == len(src.export)
        assert path.read_bytes() == src.export
        assert proxy.calls("ExportCheckpointChunks") == proxy.calls("ExportCheckpoint") == 1
        with path.open("rb") as source:
            meta = client.import_checkpoint_from(dst, source)
    assert_imported(meta, dst, src)
    assert proxy.calls("ImportCheckpointChunks") == proxy.calls("ImportCheckpoint") == 1


def test_an_import_from_a_seekable_file_sends_the_export_from_where_the_file_stood(
    sources: Sources, proxy: Proxy
) -> None:
    # the fallback reads the file again from where it was handed over, not from byte 0
    src, dst = sources.large, new_run(sources, "dst-sync-offset")
    source = io.BytesIO(b"a header before the export" + src.export)
    source.seek(len(b"a header before the export"))
    with jc.connect(str(proxy.socket)) as client:
        assert_imported(client.import_checkpoint_from(dst, source), dst, src)


def test_an_import_from_a_pipe_into_an_older_daemon_raises_unsupported_and_writes_nothing(
    sources: Sources, proxy: Proxy
) -> None:
    src, dst = sources.small, new_run(sources, "dst-sync-pipe")
    pipe = Pipe(src.export)
    try:
        with jc.connect(str(proxy.socket)) as client, pytest.raises(jc.Unsupported) as info:
            client.import_checkpoint_from(dst, pipe.reader)
    finally:
        pipe.close()
    assert info.value.status == grpc.StatusCode.UNIMPLEMENTED
    assert "cannot be read again" in info.value.message
    assert proxy.calls("ImportCheckpointChunks") == 1
    assert proxy.calls("ImportCheckpoint") == 0  # a pipe cannot be read again
    assert real_checkpoints(sources, dst) == []


# --- AsyncClient --------------------------------------------------------------------------------


async def test_an_async_export_checkpoint_from_an_older_daemon_returns_the_same_bytes(
    sources: Sources, proxy: Proxy
) -> None:
    src = sources.small
    async with await jc.connect_async(str(proxy.socket)) as client:
        data = await client.export_checkpoint(src.run_id, src.mark.checkpoint_id)
    assert data == src.export
    assert proxy.calls("ExportCheckpointChunks") == 1
    assert proxy.calls("ExportCheckpoint") == 1


async def test_an_async_import_checkpoint_into_an_older_daemon_makes_the_source_marks_checkpoint(
    sources: Sources, proxy: Proxy
) -> None:
    src, dst = sources.small, new_run(sources, "dst-async")
    async with await jc.connect_async(str(proxy.socket)) as client:
        meta = await client.import_checkpoint(dst, src.export)
        assert_imported(meta, dst, src)
        assert [c.checkpoint_id for c in await client.checkpoints(dst)] == [meta.checkpoint_id]
    assert proxy.calls("ImportCheckpointChunks") == 1
    assert proxy.calls("ImportCheckpoint") == 1


async def test_an_async_export_to_a_file_and_import_from_it_go_through_an_older_daemon(
    sources: Sources, proxy: Proxy, tmp_path: Path
) -> None:
    src, dst = sources.large, new_run(sources, "dst-async-file")
    path = tmp_path / "big.checkpoint"
    async with await jc.connect_async(str(proxy.socket)) as client:
        with path.open("wb") as out:
            size = await client.export_checkpoint_to(src.run_id, src.mark.checkpoint_id, out)
        assert size == len(src.export)
        assert path.read_bytes() == src.export
        assert proxy.calls("ExportCheckpointChunks") == proxy.calls("ExportCheckpoint") == 1
        with path.open("rb") as source:
            meta = await client.import_checkpoint_from(dst, source)
    assert_imported(meta, dst, src)
    assert proxy.calls("ImportCheckpointChunks") == proxy.calls("ImportCheckpoint") == 1


async def test_an_async_import_from_a_pipe_into_an_older_daemon_raises_unsupported(
    sources: Sources, proxy: Proxy
) -> None:
    src, dst = sources.small, new_run(sources, "dst-async-pipe")
    pipe = Pipe(src.export)
    try:
        async with await jc.connect_async(str(proxy.socket)) as client:
            with pytest.raises(jc.Unsupported) as info:
                await client.import_checkpoint_from(dst, pipe.reader)
    finally:
        pipe.close()
    assert "cannot be read again" in info.value.message
    assert proxy.calls("ImportCheckpointChunks") == 1
    assert proxy.calls("ImportCheckpoint") == 0
    assert real_checkpoints(sources, dst) == []


async def test_async_imports_of_an_export_of_several_chunks_into_an_older_daemon_all_fall_back(
    sources: Sources, proxy: Proxy
) -> None:
    # grpc.aio now and then reports the older daemon's UNIMPLEMENTED as a bare INTERNAL when
    # it arrives while a chunk is being sent; the client must still fall back each time
    src, dst = sources.large, new_run(sources, "dst-async-many")
    tries = 40
    async with await jc.connect_async(str(proxy.socket)) as client:
        for _ in range(tries):
            assert_imported(await client.import_checkpoint(dst, src.export), dst, src)
    assert proxy.calls("ImportCheckpointChunks") == proxy.calls("ImportCheckpoint") == tries
    assert len(real_checkpoints(sources, dst)) == tries


async def test_an_async_import_cut_by_the_connection_on_a_current_daemon_is_not_sent_again(
    sources: Sources,
) -> None:
    # a bare INTERNAL from a daemon that has the chunked RPCs is the transport's failure:
    # the import may have been stored, so it is not sent again through ImportCheckpoint
    src, dst = sources.small, new_run(sources, "dst-async-cut")
    with old_daemon(sources.daemon, CutJournal) as cut:  # type: ignore[type-abstract]
        async with await jc.connect_async(str(cut.socket)) as client:
            with pytest.raises(jc.DaemonUnavailable) as info:
                await client.import_checkpoint(dst, src.export)
        assert info.value.status == grpc.StatusCode.INTERNAL
        assert cut.calls("ImportCheckpointChunks") == 1
        assert cut.calls("ExportCheckpointChunks") == 1  # asked whether it has them
        assert cut.calls("ImportCheckpoint") == 0
    assert real_checkpoints(sources, dst) == []
