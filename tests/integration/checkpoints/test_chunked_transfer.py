"""ExportCheckpointChunks and ImportCheckpointChunks at the RPC (docs/protocol.md
#checkpoints): the chunks join to the very bytes ExportCheckpoint answers, and every refused
or cancelled import writes nothing and gives back the bytes it held (the peer's
``max_inflight_bytes_per_peer``, which a buffered import is held against)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import journald_client as jc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.core.checkpoints import MAX_EXPORT_BYTES
from tests.daemon import Daemon
from tests.integration.checkpoints.test_checkpoints_export import rich_run
from tests.integration.checkpoints.test_refusals_write_nothing import tree
from tests.integration.clientbin.common import FP
from tests.integration.rpc import error_of, stub, until_unlocked
from tests.long_reads import start_with_page_reads
from tests.waiting import NotYet, eventually

MIB = 1024 * 1024
READ_BYTES = 800 * 1024


def chunked_export(s: pbg.JournalServiceStub, run_id: str, checkpoint_id: str) -> list[bytes]:
    req = pb.ExportCheckpointChunksRequest(run_id=run_id, checkpoint_id=checkpoint_id)
    return [c.data for c in s.ExportCheckpointChunks(req)]


def requests(run_id: str, data: bytes, size: int = MIB) -> list[pb.ImportCheckpointChunksRequest]:
    parts = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
    return [
        pb.ImportCheckpointChunksRequest(run_id=run_id if i == 0 else "", data=p)
        for i, p in enumerate(parts)
    ]


def refusal(call: grpc.Future[pb.ImportCheckpointChunksResponse]) -> pb.ErrorDetail:
    with pytest.raises(grpc.RpcError) as info:
        call.result(timeout=120)
    return error_of(info.value)


def test_the_chunks_of_a_small_export_join_to_the_bytes_export_checkpoint_answers(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d:
        s = stub(d.target)
        lease = rich_run(s, "small", turns=3)
        mark = s.Checkpoint(pb.CheckpointRequest(run_id="small")).checkpoint
        lease.close()
        unary = until_unlocked(
            lambda: s.ExportCheckpoint(
                pb.ExportCheckpointRequest(run_id="small", checkpoint_id=mark.checkpoint_id)
            )
        ).data
        assert b"".join(chunked_export(s, "small", mark.checkpoint_id)) == unary
        # and the unary import of chunked bytes, the chunked import of unary bytes agree
        imp = s.ImportCheckpointChunks(iter(requests("small", unary, size=100))).checkpoint
        assert imp.hash == mark.hash
        assert imp.trigger == pb.CHECKPOINT_TRIGGER_IMPORT


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, bytes]]:
    """A daemon whose peers may hold 4 MiB of imports at once, with a ~3.3 MB export of four
    800 KB reads (above one 1 MiB chunk, under the budget) and an empty run ``dst``."""
    tmp = tmp_path_factory.mktemp("tight")
    with (
        Daemon(tmp, "file", "--max-inflight-bytes-per-peer", str(4 * MIB)) as d,
        jc.connect(str(d.socket)) as client,
    ):
        start_with_page_reads(client, "src", 4, READ_BYTES)
        cp = client.checkpoint("src")
        data = b"".join(chunked_export(stub(d.target), "src", cp.checkpoint_id))
        assert 3 * MIB < len(data) < 4 * MIB
        with client.start("dst", FP, "elsewhere") as run:
            run.assistant("ready", stop_reason="end_turn")
        yield d, data


def test_chunks_of_an_edited_export_are_refused_and_write_nothing(
    tight: tuple[Daemon, bytes],
) -> None:
    d, data = tight
    s = stub(d.target)
    at = len(data) // 2
    edited = data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]
    before = tree(d.data_dir)
    err = refusal(s.ImportCheckpointChunks.future(iter(requests("dst", edited))))
    assert err.code == "checkpoint_import_invalid"
    assert tree(d.data_dir) == before
    assert s.ListCheckpoints(pb.ListCheckpointsRequest(run_id="dst")).checkpoints == []


def test_an_import_naming_another_run_midway_or_no_run_is_refused_and_writes_nothing(
    tight: tuple[Daemon, bytes],
) -> None:
    d, data = tight
    s = stub(d.target)
    before = tree(d.data_dir)
    mixed = requests("dst", data)
    mixed[2].run_id = "src"
    assert refusal(s.ImportCheckpointChunks.future(iter(mixed))).code == "invalid_request"
    nobody = requests("nobody", data)
    assert refusal(s.ImportCheckpointChunks.future(iter(nobody))).code == "session_not_found"
    assert refusal(s.ImportCheckpointChunks.future(iter([]))).code == "invalid_request"
    assert tree(d.data_dir) == before


def test_a_cancelled_import_writes_nothing_and_gives_back_the_bytes_it_held(
    tight: tuple[Daemon, bytes],
) -> None:
    d, data = tight
    s = stub(d.target)
    before = tree(d.data_dir)
    stall = threading.Event()
    stalled: list[grpc.Future[pb.ImportCheckpointChunksResponse]] = []

    def three_chunks_then_wait(sent: threading.Event) -> Iterator[pb.ImportCheckpointChunksRequest]:
        yield from requests("dst", data)[:3]
        sent.set()
        stall.wait(60)

    # an edited export as the probe: refused by the budget, or (not held yet) by its
    # verification; either way it writes nothing
    probe = data[:-2] + bytes([data[-2] ^ 1]) + data[-1:]

    def refused_for_the_budget() -> pb.ErrorDetail:
        # a probe that overtook the stalled import's chunks had them refused for the budget:
        # then stall a new one
        if not stalled or stalled[-1].done():
            sent = threading.Event()
            stalled.append(s.ImportCheckpointChunks.future(three_chunks_then_wait(sent)))
            sent.wait(30)
        call = s.ImportCheckpointChunks.future(iter(requests("dst", probe)))
        with pytest.raises(grpc.RpcError) as info:
            call.result(timeout=60)
        if error_of(info.value).code != "resource_exhausted":
            raise NotYet("the stalled import's chunks are not held yet")
        return error_of(info.value)

    try:
        # while 3 MiB are held, a whole import (~3.3 MB more) is over the 4 MiB budget
        err = eventually(refused_for_the_budget, what="the stalled import to hold its chunks")
        assert "max_inflight_bytes_per_peer" in err.message
        assert not stalled[-1].done()
        stalled[-1].cancel()
    finally:
        stall.set()
    for call in stalled:
        assert call.cancelled() or call.exception() is not None
    assert tree(d.data_dir) == before

    # once the cancel reached the daemon, its 3 MiB are given back: the whole import fits
    def imported() -> pb.ImportCheckpointChunksResponse:
        try:
            return s.ImportCheckpointChunks(iter(requests("dst", data)))
        except grpc.RpcError as exc:
            if error_of(exc).code == "resource_exhausted":
                raise NotYet("the cancelled import still holds its bytes") from exc
            raise

    meta = eventually(imported, what="the cancelled import's bytes to be given back")
    assert meta.checkpoint.message_count > 0
    assert s.DeleteCheckpoint(
        pb.DeleteCheckpointRequest(run_id="dst", checkpoint_id=meta.checkpoint.checkpoint_id)
    ).deleted


def test_an_import_past_the_256_mib_limit_is_refused_before_the_rest_is_sent(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d, jc.connect(str(d.socket)) as client:
        with client.start("dst", FP, "elsewhere") as run:
            run.assistant("ready", stop_reason="end_turn")
        s = stub(d.target)
        before = tree(d.data_dir)
        sent = 0
        chunk = b"x" * MIB

        def endless() -> Iterator[pb.ImportCheckpointChunksRequest]:
            nonlocal sent
            while sent < 2 * MAX_EXPORT_BYTES:  # a daemon that waited for the end: fails
                yield pb.ImportCheckpointChunksRequest(
                    run_id="dst" if sent == 0 else "", data=chunk
                )
                sent += len(chunk)

        err = refusal(s.ImportCheckpointChunks.future(endless()))
        assert err.code == "checkpoint_import_invalid"
        assert str(MAX_EXPORT_BYTES) in err.message
        assert sent < MAX_EXPORT_BYTES + 64 * MIB  # refused at the limit, not at the end
        assert tree(d.data_dir) == before
        # the 256 MiB were given back before the refusal was sent: the next import fits
        cp = client.checkpoint("dst")
        small = b"".join(chunked_export(s, "dst", cp.checkpoint_id))
        assert s.ImportCheckpointChunks(iter(requests("dst", small))).checkpoint.hash == cp.hash


async def test_the_async_client_moves_an_export_in_chunks_like_the_sync_one(
    tight: tuple[Daemon, bytes], tmp_path: Path
) -> None:
    d, data = tight
    with jc.connect(str(d.socket)) as client:
        cp = client.checkpoints("src")[0]
        assert client.export_checkpoint("src", cp.checkpoint_id) == data
        out = tmp_path / "sync.json"
        with out.open("wb") as f:
            assert client.export_checkpoint_to("src", cp.checkpoint_id, f) == len(data)
        with out.open("rb") as f:
            assert client.import_checkpoint_from("dst", f).hash == cp.hash
    async with await jc.connect_async(str(d.socket)) as aio:
        assert await aio.export_checkpoint("src", cp.checkpoint_id) == data
        out = tmp_path / "async.json"
        with out.open("wb") as f:
            assert await aio.export_checkpoint_to("src", cp.checkpoint_id, f) == len(data)
        assert out.read_bytes() == data
        with out.open("rb") as f:
            assert (await aio.import_checkpoint_from("dst", f)).hash == cp.hash
        assert (await aio.import_checkpoint("dst", data)).hash == cp.hash
        for imported in [m for m in await aio.checkpoints("dst") if m.trigger == "import"]:
            assert await aio.delete_checkpoint("dst", imported.checkpoint_id)
