"""State that does not hold the run, reads at the cost of the page (issue 31 items 3-4;
docs/design.md#message-pages): a held run keeps a bounded tail of its conversation in memory,
a lease end's snapshot stores only the pages created since the last one, and windowed Open,
History and ``Fold(omit_messages)`` of a dormant run read only the pages they return.

The daemon runs in process over the memory backend, so page reads are counted at the
attachment store (where pages live) rather than guessed from timings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.core.fold import fold
from journald.core.pages import PAGE_TARGET_BYTES
from journald.core.records import Record, canonical_json
from journald.core.snapshot import snapshot_pages
from journald.server import edge
from journald.server.convert import fingerprint_to_pb, message_from_pb
from journald.server.service import JournalService
from journald.storage.checkpoint_base import SNAPSHOT
from journald.storage.memory import MemoryAttachmentStore, MemoryCheckpointStore, MemoryStore
from tests.builders import (
    FP,
    JournalBuilder,
    assistant_payload,
    result_payload,
    text,
    tool_use,
    user_payload,
)

RUN = "long"
MESSAGES = 5000
BODY = 1000  # characters of text per message: 5k messages are ~40 pages


class CountingAttachments(MemoryAttachmentStore):
    """The memory attachment store, noting every read and every new byte stored."""

    def __init__(self) -> None:
        super().__init__()
        self.gets: list[str] = []
        self.puts = 0  # asked to store (a put of a page the store holds still costs a call)
        self.new_bytes = 0

    async def get(self, run_id: str, digest: str) -> bytes:
        self.gets.append(digest)
        return await super().get(run_id, digest)

    async def put(self, run_id: str, data: bytes) -> tuple[str, bool]:
        digest, existed = await super().put(run_id, data)
        self.puts += 1
        self.new_bytes += 0 if existed else len(data)
        return digest, existed


class InProcess:
    def __init__(self, service: JournalService, stub: Any, attachments: CountingAttachments):
        self.service, self.stub, self.attachments = service, stub, attachments
        self.checkpoints: MemoryCheckpointStore = service.runs.checkpoints.inner  # type: ignore[attr-defined]

    async def snapshot_doc(self) -> dict[str, Any]:
        doc = await self.checkpoints.load_mark(RUN, SNAPSHOT)
        assert doc is not None
        return doc

    def reads(self) -> list[str]:
        out = list(self.attachments.gets)
        self.attachments.gets.clear()
        return out


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[InProcess]:
    attachments = CountingAttachments()
    service = JournalService(
        MemoryStore(), checkpoints=MemoryCheckpointStore(), attachments=attachments
    )
    server = grpc.aio.server()
    edge.add_service(server, service.parts(), 64 * 1024 * 1024)
    sock = tmp_path / "journald.sock"
    server.add_insecure_port(f"unix://{sock}")
    await server.start()
    channel = grpc.aio.insecure_channel(
        f"unix://{sock}", options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    )
    try:
        yield InProcess(service, pbg.JournalServiceStub(channel), attachments)
    finally:
        await channel.close(None)
        await service.shutdown()
        await server.stop(None)


def long_run(messages: int = MESSAGES) -> JournalBuilder:
    b = JournalBuilder(RUN)
    for i in range(messages // 2):
        b.add("assistant", assistant_payload([text(f"answer {i} " + "a" * BODY)], i + 1))
        b.add("user", user_payload(f"question {i} " + "q" * BODY))
    return b


def more(b: JournalBuilder, n: int) -> list[Record]:
    """``n`` more records (one message each) chained after ``b``'s, added to ``b``."""
    start = len(b.records)
    for i in range(n):
        kind = "assistant" if (start + i) % 2 == 0 else "user"
        payload = (
            assistant_payload([text(f"late {i} " + "l" * BODY)], start + i)
            if kind == "assistant"
            else user_payload(f"late {i} " + "l" * BODY)
        )
        b.add(kind, payload)
    return b.records[start:]


async def stored_and_snapshotted(d: InProcess, b: JournalBuilder) -> None:
    """The run written by the store itself, then held once by the daemon (whose lease end
    saves the snapshot)."""
    journal = await d.service.store.create(b.records[0])
    await journal.append(b.records[1:])
    await journal.close()
    async with d.service.runs.daemon_lease(RUN):
        pass
    await d.service.runs.leases.wait_closed(RUN)


def pages_of_window(doc: dict[str, Any], start: int) -> int:
    """How many of the snapshot's pages hold a message at or after index ``start``."""
    at, n = 0, 0
    for ref in snapshot_pages(doc["snapshot"]):
        if at + ref.count > start:
            n += 1
        at += ref.count
    return n


def as_messages(msgs: Any) -> list[dict[str, Any]]:
    return [message_from_pb(m, "m") for m in msgs]


async def test_a_dormant_runs_windowed_open_history_tail_and_fold_read_only_their_pages(
    daemon: InProcess,
) -> None:
    b = long_run()
    await stored_and_snapshotted(daemon, b)
    want = list(fold(b.records).messages)
    doc = await daemon.snapshot_doc()
    total_pages = len(snapshot_pages(doc["snapshot"]))
    assert total_pages >= 30  # the conversation lives in pages, not in the snapshot
    daemon.reads()

    fold_omit = await daemon.stub.Fold(pb.FoldRequest(run_id=RUN, omit_messages=True))
    assert fold_omit.state.messages_total == len(want)
    assert daemon.reads() == []  # the facts alone: no page read

    window = 400
    stream = daemon.stub.Open(
        pb.OpenRequest(
            run_id=RUN,
            mode=pb.OPEN_MODE_RESUME,
            fingerprint=fingerprint_to_pb(FP),
            message_window=window,
        )
    )
    opened = (await stream.read()).lease
    off = opened.state.messages_offset
    assert as_messages(opened.state.messages) == want[off:]
    assert off <= len(want) - window
    open_reads = daemon.reads()
    assert 0 < len(open_reads) <= pages_of_window(doc, len(want) - window)
    stream.cancel()
    await daemon.service.runs.leases.wait_closed(RUN)

    page = await daemon.stub.History(
        pb.HistoryRequest(
            run_id=RUN, view=pb.HISTORY_VIEW_STATE, offset=len(want) - window, limit=window
        )
    )
    assert as_messages(page.messages) == want[page.offset : page.next_offset]
    assert page.next_offset == len(want)
    assert len(daemon.reads()) <= pages_of_window(doc, len(want) - window)

    far = await daemon.stub.History(
        pb.HistoryRequest(run_id=RUN, view=pb.HISTORY_VIEW_STATE, offset=10, limit=20)
    )
    assert as_messages(far.messages) == want[far.offset : far.next_offset]
    assert len(daemon.reads()) <= 2  # the page (or two) around messages 10..30


async def test_a_held_runs_tail_stays_bounded_while_it_appends_many_messages(
    daemon: InProcess,
) -> None:
    b = long_run(200)
    await stored_and_snapshotted(daemon, b)
    async with daemon.service.runs.daemon_lease(RUN) as lease:
        most = 0
        for _ in range(40):  # 4,000 messages of ~1 KB: ~30 pages appended while held
            await lease.writer.commit(more(b, 100))
            log = lease.writer.state.messages
            most = max(most, log.tail_bytes())
        assert len(log) == len(fold(b.records).messages)
        assert log.sealed > len(log) - 400  # all but the last couple of pages are sealed
        assert most < 3 * PAGE_TARGET_BYTES
        # reads of the held run load the sealed pages they return (a Fold would wait for
        # the daemon's own lease, which holds the writer's lock while the operation lasts)
        want = list(fold(b.records).messages)
        far = await daemon.stub.History(
            pb.HistoryRequest(run_id=RUN, view=pb.HISTORY_VIEW_STATE, offset=10, limit=20)
        )
        assert as_messages(far.messages) == want[far.offset : far.next_offset]
        cleaned = await daemon.stub.History(pb.HistoryRequest(run_id=RUN, offset=0, limit=5))
        assert cleaned.total == len(want)  # the view index and the pages sealed since


async def test_the_lease_end_snapshot_writes_only_the_pages_created_since_the_last_one(
    daemon: InProcess,
) -> None:
    b = long_run()
    await stored_and_snapshotted(daemon, b)
    daemon.attachments.new_bytes = daemon.attachments.puts = 0
    pages_before = len(snapshot_pages((await daemon.snapshot_doc())["snapshot"]))
    async with daemon.service.runs.daemon_lease(RUN) as lease:
        late = more(b, 200)
        await lease.writer.commit(late)
    await daemon.service.runs.leases.wait_closed(RUN)
    doc = await daemon.snapshot_doc()
    appended = sum(len(r.raw) for r in late)
    written = daemon.attachments.new_bytes + len(canonical_json(doc))
    conversation = sum(len(canonical_json(m)) for m in fold(b.records).messages)
    assert written <= 2 * appended + 64 * 1024
    # the pages the run held already are not even offered to the store again
    new_pages = len(snapshot_pages(doc["snapshot"])) - pages_before
    assert daemon.attachments.puts <= new_pages + 1
    assert written < conversation / 10
    st = await daemon.service.runs.marks.load_snapshot(RUN)
    assert st is not None
    assert st.last_seq == b.records[-1].seq


def tool_id(i: int) -> str:
    return f"toolu_{i:024d}"  # the length of a provider's ids (toolu_ and 24 characters)


def tool_calls(b: JournalBuilder, first: int, n: int) -> list[Record]:
    """``n`` answered tool calls (an assistant turn and its result each) added to ``b``."""
    start = len(b.records)
    for i in range(first, first + n):
        b.add("assistant", assistant_payload([tool_use(tool_id(i))], i + 1, "tool_use"))
        b.add("tool_result", result_payload(tool_id(i), f"read {i}"))
    return b.records[start:]


async def test_a_lease_end_of_a_run_of_thousands_of_answered_calls_costs_what_was_appended(
    daemon: InProcess,
) -> None:
    b = JournalBuilder(RUN)
    tool_calls(b, 0, 8000)
    await stored_and_snapshotted(daemon, b)
    daemon.attachments.new_bytes = 0
    async with daemon.service.runs.daemon_lease(RUN) as lease:
        late = tool_calls(b, 8000, 20)
        await lease.writer.commit(late)
    await daemon.service.runs.leases.wait_closed(RUN)
    doc = await daemon.snapshot_doc()
    appended = sum(len(r.raw) for r in late)
    snapshot = len(canonical_json(doc))
    written = daemon.attachments.new_bytes + snapshot
    assert written <= 2 * appended + 64 * 1024, (written, snapshot, appended)
    # a late copy of an old answer and an unknown id, written around the daemon after the
    # snapshot: the fold from the snapshot reads the answered chunks and labels them as the
    # fold of the whole journal does
    b.add("tool_result", result_payload(tool_id(3), "again"))
    b.add("tool_result", result_payload("toolu_never_called", "?"))
    journal = await daemon.service.store.open(RUN)
    await journal.append(b.records[-2:])
    await journal.close()
    folded = await daemon.stub.Fold(pb.FoldRequest(run_id=RUN, omit_messages=True))
    want = fold(b.records).anomalies
    assert [a.kind for a in want] == ["duplicate_result", "unknown_tool_use_id"]
    assert [(a.seq, a.kind, a.detail) for a in folded.state.anomalies] == [
        (a.seq, a.kind, a.detail) for a in want
    ]
