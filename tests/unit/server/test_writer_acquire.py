"""A client's ``Open`` and the daemon's own lease take a run in the one acquire order of
``journald.writer`` (docs/design.md#the-run-writer), observed through the memory backend: the
store and checkpoint-store calls each makes, in order."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.core.records import GENESIS, Record, make_record
from journald.server import edge
from journald.server.convert import fingerprint_to_pb
from journald.server.service import JournalService
from journald.storage.checkpoint_base import MARKS
from journald.storage.memory import MemoryCheckpointStore, MemoryJournal, MemoryStore
from journald.writer.gate import Incoming
from tests.builders import FP, TS, assistant_payload, meta_payload, text
from tests.waiting import wait_until_async

RUN = "acquired"


class RecordingStore(MemoryStore):
    """The memory backend, noting the calls an acquire makes of it."""

    def __init__(self, steps: list[str]) -> None:
        super().__init__()
        self.steps = steps

    async def exists(self, run_id: str) -> bool:
        self.steps.append("exists")
        return await super().exists(run_id)

    async def iter_records(self, run_id: str, from_seq: int = 1) -> AsyncIterator[Record]:
        self.steps.append("read")
        async for rec in super().iter_records(run_id, from_seq):
            yield rec

    async def open(self, run_id: str) -> MemoryJournal:
        self.steps.append("open journal")
        return await super().open(run_id)

    async def create(self, meta: Record) -> MemoryJournal:
        self.steps.append("create journal")
        return await super().create(meta)


class RecordingCheckpoints(MemoryCheckpointStore):
    def __init__(self, steps: list[str]) -> None:
        super().__init__()
        self.steps = steps

    async def load_mark(self, run_id: str, part: str = MARKS) -> dict[str, Any] | None:
        self.steps.append(f"load {part}")
        return await super().load_mark(run_id, part)


class InProcess:
    def __init__(self, service: JournalService, stub: Any, steps: list[str]) -> None:
        self.service, self.stub, self.steps = service, stub, steps

    def taken(self) -> list[str]:
        """The steps noted since the last call."""
        out = list(self.steps)
        self.steps.clear()
        return out

    async def client_open(self, mode: pb.OpenMode.ValueType, provider: str = FP.provider) -> Any:
        fp = fingerprint_to_pb(FP)
        fp.provider = provider
        stream = self.stub.Open(
            pb.OpenRequest(
                run_id=RUN,
                mode=mode,
                fingerprint=fp,
                prompt_json=b'[{"type":"text","text":"hello"}]',
                created=TS,
                client=pb.ClientInfo(name="agent", pid=4242, host="testhost"),
            )
        )
        await stream.read()
        return stream

    async def client_release(self, stream: Any) -> None:
        """End the lease by ending its stream, as a client does; wait until it is closed."""
        stream.cancel()
        leases = self.service.runs.leases
        # the stream's end reaches the daemon asynchronously
        await wait_until_async(
            lambda: leases.held(RUN) is None, what="the daemon to see the lease's stream end"
        )
        await leases.wait_closed(RUN)


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[InProcess]:
    steps: list[str] = []
    service = JournalService(RecordingStore(steps), checkpoints=RecordingCheckpoints(steps))
    server = grpc.aio.server()
    edge.add_service(server, service.parts(), 4 * 1024 * 1024)
    sock = tmp_path / "journald.sock"
    server.add_insecure_port(f"unix://{sock}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"unix://{sock}")
    try:
        yield InProcess(service, pbg.JournalServiceStub(channel), steps)
    finally:
        await channel.close(None)
        await service.shutdown()
        await server.stop(None)


async def test_a_client_open_and_the_daemon_lease_resume_a_run_in_the_same_steps(
    daemon: InProcess,
) -> None:
    stream = await daemon.client_open(pb.OPEN_MODE_CREATE)
    created_by_client = daemon.taken()
    await daemon.client_release(stream)
    daemon.taken()

    stream = await daemon.client_open(pb.OPEN_MODE_RESUME)
    resumed_by_client = daemon.taken()
    await daemon.client_release(stream)
    daemon.taken()

    async with daemon.service.runs.daemon_lease(RUN):
        resumed_by_daemon = daemon.taken()
    await daemon.service.runs.leases.wait_closed(RUN)
    daemon.taken()

    # the scrubber's finding, the index, read once and fold (from the snapshot the last lease
    # saved), then the journal
    assert resumed_by_client == [
        "exists",
        "load scrub",
        "load marks",
        "load snapshot",
        "read",
        "open journal",
    ]
    assert resumed_by_daemon == resumed_by_client

    meta = make_record(1, "meta", meta_payload("forked"), GENESIS, TS)
    async with daemon.service.runs.daemon_lease("forked", create=meta):
        created_by_daemon = daemon.taken()
    assert created_by_client == ["exists", "create journal"]
    assert created_by_daemon == created_by_client


async def test_an_acquire_on_a_leases_stream_takes_a_run_in_the_steps_of_an_open(
    daemon: InProcess,
) -> None:
    stream = await daemon.client_open(pb.OPEN_MODE_CREATE)
    await daemon.client_release(stream)
    daemon.taken()
    stream = await daemon.client_open(pb.OPEN_MODE_RESUME)
    resumed_by_open = daemon.taken()
    await daemon.client_release(stream)
    daemon.taken()

    requests: asyncio.Queue[pb.LeasesRequest | None] = asyncio.Queue()

    async def sent() -> AsyncIterator[pb.LeasesRequest]:
        while (req := await requests.get()) is not None:
            yield req

    call = daemon.stub.Leases(sent())
    acquire = pb.OpenRequest(
        run_id=RUN, mode=pb.OPEN_MODE_RESUME, fingerprint=fingerprint_to_pb(FP)
    )
    requests.put_nowait(pb.LeasesRequest(request_id=1, acquire=acquire))
    granted = await call.read()
    assert granted.lease.run_id == RUN
    assert daemon.taken() == resumed_by_open
    held = daemon.service.runs.leases.held(RUN)
    assert held is not None  # the one lease table holds it, with the id the stream answered
    assert held.lease_id == granted.lease.lease_id
    requests.put_nowait(None)  # half-closed: released before the stream finishes
    assert await call.read() is grpc.aio.EOF  # type: ignore[attr-defined]
    assert daemon.service.runs.leases.held(RUN) is None


async def test_a_client_open_refused_by_a_resume_gate_never_opens_the_journal(
    daemon: InProcess,
) -> None:
    stream = await daemon.client_open(pb.OPEN_MODE_CREATE)
    await daemon.client_release(stream)
    daemon.taken()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await daemon.client_open(pb.OPEN_MODE_RESUME, provider="another-provider")
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert daemon.taken() == ["exists", "load scrub", "load marks", "load snapshot", "read"]
    assert daemon.service.runs.leases.held(RUN) is None


async def test_records_an_abandoned_append_made_durable_still_reach_the_tails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = asyncio.Event()
    real = MemoryJournal._write

    async def held_write(journal: MemoryJournal, new: list[Record]) -> None:
        if new[0].seq > 1:
            await release.wait()  # the write is in flight while its caller gives up
        await real(journal, new)

    monkeypatch.setattr(MemoryJournal, "_write", held_write)
    service = JournalService(MemoryStore())
    runs = service.runs
    meta = make_record(1, "meta", meta_payload(RUN), GENESIS, TS)
    async with runs.daemon_lease(RUN, create=meta) as lease:
        tail = runs.hub.subscribe(RUN)
        rec = make_record(2, "assistant", assistant_payload([text("hi")], 1), meta.hash, TS)
        ticket = await lease.writer.queue([Incoming.of(rec)], None, contextvars.copy_context())
        waiting = asyncio.create_task(ticket.durable())
        await asyncio.sleep(0)
        waiting.cancel()  # the caller gives up (a deadline, a broken stream)
        release.set()
        await lease.writer.settled()
        batch = await asyncio.wait_for(tail.get(), 5)
        assert [seq for seq, _ in batch] == [2]  # type: ignore[union-attr]
        assert lease.journal.last_seq == 2
