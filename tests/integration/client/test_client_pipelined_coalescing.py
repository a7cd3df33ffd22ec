"""A pipelined writer sends whatever is queued as one AppendStream message, and the daemon
makes that message one durable write (docs/protocol.md#coalesced-stream-messages).

The daemon's own service runs in-process on a real gRPC server bound to a temp unix socket,
over a real ``FileStore``, so the test reads the journal's count of durable writes
(``FileJournal.commits``: one ``write`` + ``fdatasync`` each); the client is the real one,
whose stub is wrapped to count the messages it puts on the stream. Counts, never times.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import journald_client as jc
import pytest
from journald_client.codec import Entry

from journald.server import edge
from journald.server.service import JournalService
from journald.storage.file.journal import FileJournal
from journald.storage.file.store import FileStore
from tests.integration.clientbin.common import FP

CALLS = 10


def turn(step: int) -> list[Entry]:
    """An assistant turn of ``CALLS`` tool calls and their results."""
    calls = [
        {"type": "tool_use", "id": f"t{step}_{i}", "name": "read", "input": {"i": i}}
        for i in range(CALLS)
    ]
    results = [Entry.tool_result(f"t{step}_{i}", f"r{step}.{i}") for i in range(CALLS)]
    return [Entry.assistant(calls, stop_reason="tool_use"), *results]


class CountingStub:
    """The client's stub, counting the appends of each AppendStream message it sends; with
    ``gate`` set, the first message is only pulled once the gate opens (so the test decides
    what is queued behind the message being sent)."""

    def __init__(self, stub: Any, gate: threading.Event | None = None) -> None:
        self._stub = stub
        self._gate = gate
        self.messages: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)

    def _count(self, req: Any) -> None:
        self.messages.append(len(req.appends) or 1)

    def AppendStream(self, requests: Any, **kw: Any) -> Any:
        if hasattr(requests, "__aiter__"):

            async def counted_async() -> AsyncIterator[Any]:
                async for req in requests:
                    self._count(req)
                    yield req

            return self._stub.AppendStream(counted_async(), **kw)

        def counted() -> Iterator[Any]:
            if self._gate is not None:
                self._gate.wait(30)
            for req in requests:
                self._count(req)
                yield req

        return self._stub.AppendStream(counted(), **kw)


@pytest.fixture
async def daemon() -> AsyncIterator[tuple[JournalService, str]]:
    """An in-process daemon on a short socket path (unix paths are limited to ~107 bytes)."""
    where = Path(tempfile.mkdtemp(prefix="jd-coal-", dir="/tmp"))
    service = JournalService(FileStore(where / "data"))
    server = grpc.aio.server()
    edge.add_service(server, service.parts(), 16 * 1024 * 1024)
    server.add_insecure_port(f"unix://{where / 'journald.sock'}")
    await server.start()
    try:
        yield service, str(where / "journald.sock")
    finally:
        await service.shutdown()
        await server.stop(None)
        shutil.rmtree(where, ignore_errors=True)


def journal_of(service: JournalService, run_id: str) -> FileJournal:
    lease = service.leases.held(run_id)
    assert lease is not None
    assert isinstance(lease.journal, FileJournal)
    return lease.journal


async def test_an_async_pipelined_writer_sends_what_is_queued_as_one_message_and_one_write(
    daemon: tuple[JournalService, str],
) -> None:
    service, socket = daemon
    burst = turn(0) + turn(1)
    async with await jc.connect_async(socket) as client:
        stub = CountingStub(client._stub)
        client._stub = cast(Any, stub)
        async with await client.start("coalesced-aio", FP, "hi") as run:
            journal = journal_of(service, "coalesced-aio")
            before = journal.commits
            async with run.pipelined(window=len(burst)) as w:
                # submitted back to back: all queued before gRPC pulls the first message
                pending = [await w.append(e) for e in burst]
                acks = [await p for p in pending]
                assert stub.messages == [len(burst)]
                assert journal.commits - before == 1
                # one record appended and waited for goes alone, at once
                alone = await (await w.append(Entry.assistant("done", stop_reason="end_turn")))
            assert stub.messages == [len(burst), 1]
            assert journal.commits - before == 2
        assert [a.seq for a in acks] == list(range(2, len(burst) + 2))
        assert alone.seq == len(burst) + 2
        stored = [r async for r in client.load("coalesced-aio")]
        assert [r.hash for r in stored[1:]] == [a.hash for a in acks] + [alone.hash]
        state = await client.fold("coalesced-aio")
        assert state.last_seq == alone.seq
        assert state.pending is None


async def test_a_sync_pipelined_writer_coalesces_the_appends_queued_behind_its_first_message(
    daemon: tuple[JournalService, str],
) -> None:
    service, socket = daemon
    burst = turn(0)
    gate = threading.Event()

    def write() -> tuple[list[int], int, list[jc.Ack]]:
        with jc.connect(socket) as client:
            stub = CountingStub(client._stub, gate)
            client._stub = cast(Any, stub)
            with client.start("coalesced-sync", FP, "hi") as run:
                journal = journal_of(service, "coalesced-sync")
                before = journal.commits
                with run.pipelined(window=len(burst)) as w:
                    first = w.append(burst[0])  # starts the stream; its message waits
                    rest = [w.append(e) for e in burst[1:]]
                    gate.set()
                    acks = [first.ack(30), *(p.ack(30) for p in rest)]
                return list(stub.messages), journal.commits - before, acks

    messages, writes, acks = await asyncio.to_thread(write)
    assert messages == [len(burst)]
    assert writes == 1
    assert [a.seq for a in acks] == list(range(2, len(burst) + 2))
