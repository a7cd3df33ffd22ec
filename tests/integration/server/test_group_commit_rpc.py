"""Group commit through the RPC: concurrent appends to one run share durable writes.

The daemon's own service runs in-process on a real gRPC server bound to a temp unix socket,
over a real ``FileStore``, so the test can read the journal's count of durable writes
(``FileJournal.commits``: one ``write`` + ``fdatasync`` each). The counts are counted, never
timed. To make "concurrent" deterministic on a loaded machine, the first write of the burst is
held (before it touches the file: in the writer thread, or on the loop when its fdatasync goes
through AIO) until every append of the burst is queued behind it, or a bound passes; the write
itself is the real one. Each test runs on both write paths (``aio``: ``off`` and ``auto``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald import failpoints
from journald.server import edge
from journald.server.convert import fingerprint_to_pb, state_to_pb
from journald.server.runs import Limits, fold_stored
from journald.server.service import JournalService
from journald.storage.aio_sync import AioSync
from journald.storage.file.journal import FileJournal
from journald.storage.file.store import FileStore
from tests.builders import FP, TS, text, tool_use
from tests.integration.rpc import blocks
from tests.waiting import NotYet, eventually, wait_until_async

RUN = "group-commit-run"
HOLD_BOUND_S = 10.0


@dataclass
class InProcessDaemon:
    service: JournalService
    stub: Any
    """A ``grpc.aio`` stub (the generated stub types are those of the sync API)."""

    def journal(self) -> FileJournal:
        lease = self.service.leases.held(RUN)
        assert lease is not None
        assert isinstance(lease.journal, FileJournal)
        return lease.journal


@pytest.fixture(params=["off", "auto"], ids=["writer-threads", "aio"])
async def daemon(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[InProcessDaemon]:
    gap_wait_s = 3 * HOLD_BOUND_S  # a seq ahead of the held write waits for it, not fails
    service = JournalService(
        FileStore(tmp_path / "data", gap_wait_s=gap_wait_s, aio=request.param),
        Limits(gap_wait_s=gap_wait_s),
    )
    server = grpc.aio.server()
    edge.add_service(server, service.parts(), 4 * 1024 * 1024)
    server.add_insecure_port(f"unix://{tmp_path / 'journald.sock'}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"unix://{tmp_path / 'journald.sock'}")
    try:
        yield InProcessDaemon(service, pbg.JournalServiceStub(channel))
    finally:
        await channel.close(None)
        await service.shutdown()
        await server.stop(None)


def hold_first_write_until(
    monkeypatch: pytest.MonkeyPatch, queued: Callable[[], bool]
) -> threading.Event:
    """Hold the next durable write until ``queued()`` holds (bounded: after the bound the
    write goes ahead, and the count shows what the code does without the burst queued)."""
    held = threading.Event()
    real = FileJournal._write_durable
    real_aio = FileJournal._write_durable_aio

    async def write_aio(journal: FileJournal, aio: AioSync, data: bytes, seq: int) -> None:
        if not held.is_set():
            held.set()
            with contextlib.suppress(AssertionError):  # the loop is the writer: it keeps running
                await wait_until_async(
                    queued, what="the burst to be queued", timeout_s=HOLD_BOUND_S
                )
        await real_aio(journal, aio, data, seq)

    def write(journal: FileJournal, data: bytes, seq: int) -> None:
        if not held.is_set():
            held.set()

            def ready() -> bool:
                if not queued():
                    raise NotYet
                return True

            with contextlib.suppress(AssertionError):
                eventually(ready, what="the burst to be queued", timeout_s=HOLD_BOUND_S)
        real(journal, data, seq)

    monkeypatch.setattr(FileJournal, "_write_durable", write)
    monkeypatch.setattr(FileJournal, "_write_durable_aio", write_aio)
    return held


async def open_run(d: InProcessDaemon, calls: int) -> tuple[Any, str]:
    """Open a new run and append the assistant record that opens ``calls`` tool calls (seq 2)."""
    stream = d.stub.Open(
        pb.OpenRequest(
            run_id=RUN,
            fingerprint=fingerprint_to_pb(FP),
            prompt_json=blocks(text("hello")),
            created=TS,
            client=pb.ClientInfo(name="tester", pid=4242, host="testhost", cwd="/work"),
        )
    )
    first = await stream.read()
    lease_id: str = first.lease.lease_id
    content = [text("running tools")] + [tool_use(f"t{i}") for i in range(calls)]
    assistant = pb.Record(
        seq=2,
        ts=TS,
        assistant=pb.AssistantPayload(
            message=pb.Message(role="assistant", content_json=blocks(*content)),
            iteration=1,
            stop_reason="tool_use",
        ),
    )
    await d.stub.Append(pb.AppendRequest(run_id=RUN, lease_id=lease_id, records=[assistant]))
    return stream, lease_id


async def release(d: InProcessDaemon, stream: Any, lease_id: str) -> None:
    """End the lease and wait until its journal is closed, then drop the Open stream."""
    await d.stub.Release(pb.ReleaseRequest(run_id=RUN, lease_id=lease_id))
    stream.cancel()


def tool_result(seq: int, tid: str) -> pb.Record:
    return pb.Record(
        seq=seq,
        ts=TS,
        tool_result=pb.ToolResultPayload(tool_use_id=tid, content_json=blocks(text("ok"))),
    )


async def test_eight_concurrent_unary_appends_to_one_run_cost_one_or_two_durable_writes(
    daemon: InProcessDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream, lease_id = await open_run(daemon, calls=8)
    journal = daemon.journal()
    before = journal.commits
    held = hold_first_write_until(monkeypatch, lambda: journal.pipeline.queued_seq >= 10)
    calls = [
        daemon.stub.Append(
            pb.AppendRequest(run_id=RUN, lease_id=lease_id, records=[tool_result(seq, f"t{i}")])
        )
        for i, seq in enumerate(range(3, 11))
    ]
    responses = await asyncio.gather(*calls)
    assert held.is_set()
    assert sorted(r.acks[0].seq for r in responses) == list(range(3, 11))
    assert all(not r.acks[0].duplicate for r in responses)
    assert 1 <= journal.commits - before <= 2
    stored = await daemon.service.store.load(RUN)
    assert [r.seq for r in stored] == list(range(1, 11))
    assert daemon.service.leases.held(RUN) is not None
    await release(daemon, stream, lease_id)


async def test_a_pipelined_append_stream_shares_durable_writes_across_its_messages(
    daemon: InProcessDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 16
    stream, lease_id = await open_run(daemon, calls=n)
    journal = daemon.journal()
    before = journal.commits
    held = hold_first_write_until(monkeypatch, lambda: journal.pipeline.queued_seq >= n + 2)

    async def requests() -> AsyncIterator[pb.AppendStreamRequest]:
        for i in range(n):
            yield pb.AppendStreamRequest(
                append=pb.AppendRequest(
                    run_id=RUN, lease_id=lease_id, records=[tool_result(3 + i, f"t{i}")]
                )
            )

    acks = [r.response.acks[0].seq async for r in daemon.stub.AppendStream(requests())]
    assert held.is_set()
    assert acks == list(range(3, 3 + n))  # one response per message, in order
    assert journal.commits - before < n
    stored = await daemon.service.store.load(RUN)
    assert [r.seq for r in stored] == list(range(1, 3 + n))
    await release(daemon, stream, lease_id)


async def test_a_failed_group_write_voids_the_appends_queued_behind_it_and_the_lease_state(
    daemon: InProcessDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream, lease_id = await open_run(daemon, calls=2)
    journal = daemon.journal()
    hold_first_write_until(monkeypatch, lambda: journal.pipeline.queued_seq >= 4)
    failpoints.arm("before_write=raise:EIO@1")
    try:
        calls = [
            daemon.stub.Append(
                pb.AppendRequest(
                    run_id=RUN, lease_id=lease_id, records=[tool_result(3 + i, f"t{i}")]
                )
            )
            for i in range(2)
        ]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
    finally:
        failpoints.disarm()
    # the write of seq 3 failed; seq 4, queued behind it, is void with it
    assert all(isinstance(o, grpc.aio.AioRpcError) for o in outcomes), outcomes
    assert journal.last_seq == 2
    # both tool calls are open again: the next append at the failed seq is admitted
    again = await daemon.stub.Append(
        pb.AppendRequest(run_id=RUN, lease_id=lease_id, records=[tool_result(3, "t1")])
    )
    assert [(a.seq, a.duplicate) for a in again.acks] == [(3, False)]
    folded = await daemon.stub.Fold(pb.FoldRequest(run_id=RUN))
    fresh = await fold_stored(daemon.service.store, RUN)
    expected = state_to_pb(fresh)
    expected.messages_offset = folded.state.messages_offset  # the window: all of them
    assert folded.state == expected
    assert fresh.last_seq == 3
    assert [c.id for c in fresh.pending.unanswered] == ["t0"] if fresh.pending else False
    await release(daemon, stream, lease_id)


async def test_a_pipelined_stream_sends_the_acks_before_a_refused_message_then_fails_with_it(
    daemon: InProcessDaemon,
) -> None:
    stream, lease_id = await open_run(daemon, calls=4)
    records = [tool_result(3, "t0"), tool_result(4, "t1"), tool_result(5, "nope")]
    records += [tool_result(6, "t2"), tool_result(7, "t3")]

    async def requests() -> AsyncIterator[pb.AppendStreamRequest]:
        for rec in records:
            yield pb.AppendStreamRequest(
                append=pb.AppendRequest(run_id=RUN, lease_id=lease_id, records=[rec])
            )

    call = daemon.stub.AppendStream(requests())
    acks: list[int] = []

    async def read_all() -> None:
        async for r in call:
            acks.append(r.response.acks[0].seq)

    with pytest.raises(grpc.aio.AioRpcError) as info:
        await read_all()
    assert acks == [3, 4]
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "nope" in (info.value.details() or "")
    # nothing sent after the refused message was written
    stored = await daemon.service.store.load(RUN)
    assert [r.seq for r in stored] == [1, 2, 3, 4]
    await release(daemon, stream, lease_id)
