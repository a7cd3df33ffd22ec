"""A stored-view History tail page of a dormant file-backed run costs the page, not the run
(issue 31 item 4, docs/design.md#history-paging): with a fold snapshot that matches, the page
reads the snapshot, the records after it and the pages under the page, so the bytes the daemon
reads for it are about the same at 1k and at 20k records (before: a fold from the newest fold
mark before the page, up to ``MARK_EVERY`` records back, read from the segment holding it).

A real daemon on the file backend; the bytes are the daemon's ``rchar`` (load-free)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.core.fold import fold
from journald.core.records import Record
from journald.server.convert import fingerprint_to_pb, message_from_pb
from journald.storage.file.store import FileStore
from tests.builders import FP, JournalBuilder, assistant_payload, text, user_payload
from tests.daemon import Daemon

SIZES = (1000, 20_000)
BODY = 1000  # characters per message: ~1.1 KB records, one message each
PAGE = 50
SLACK_BYTES = 64 * 1024


def run_of(run_id: str, n: int) -> list[Record]:
    b = JournalBuilder(run_id, prompt="the prompt")
    for i in range(1, n):
        if i % 2:
            b.add("assistant", assistant_payload([text(f"answer {i} " + "a" * BODY)], i))
        else:
            b.add("user", user_payload(f"question {i} " + "q" * BODY))
    return b.records


async def write(data: Path, runs: dict[str, list[Record]]) -> None:
    store = FileStore(data)
    try:
        for recs in runs.values():
            journal = await store.create(recs[0])
            for i in range(1, len(recs), 500):  # segments of 5,000 records seal on the way
                await journal.append(recs[i : i + 500])
            await journal.close()
    finally:
        await store.close()


def rchar(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar")


def tail_request(run_id: str, messages: int) -> pb.HistoryRequest:
    return pb.HistoryRequest(
        run_id=run_id, offset=messages - PAGE, limit=PAGE, view=pb.HISTORY_VIEW_STATE
    )


def stub(d: Daemon) -> Any:
    channel = grpc.insecure_channel(
        d.target, options=[("grpc.max_receive_message_length", 1 << 28)]
    )
    return pbg.JournalServiceStub(channel)


def test_a_stored_view_tail_page_reads_about_the_same_at_1k_and_at_20k_records(
    tmp_path: Path,
) -> None:
    runs = {f"r{n}": run_of(f"r{n}", n) for n in SIZES}
    data = tmp_path / "data"
    asyncio.run(write(data, runs))
    with Daemon(tmp_path, "file", data_dir=data) as d:
        s = stub(d)
        for run_id in runs:  # one lease end each: it saves the snapshot and the fold marks
            call = s.Open(
                pb.OpenRequest(
                    run_id=run_id,
                    mode=pb.OPEN_MODE_RESUME,
                    fingerprint=fingerprint_to_pb(FP),
                    message_window=100,
                )
            )
            lease = next(iter(call)).lease
            s.Release(pb.ReleaseRequest(run_id=run_id, lease_id=lease.lease_id))
            call.cancel()
    read: dict[str, int] = {}
    for run_id, recs in runs.items():
        want = list(fold(recs).messages)
        other = next(r for r in runs if r != run_id)
        with Daemon(tmp_path, "file", data_dir=data) as d:  # nothing of the run kept yet
            s = stub(d)
            s.History(tail_request(other, len(runs[other]) - 1))  # the daemon's own first reads
            before = rchar(d.pid)
            page = s.History(tail_request(run_id, len(want)))
            read[run_id] = rchar(d.pid) - before
        got = [message_from_pb(m, "m") for m in page.messages]
        assert got == want[page.offset : page.next_offset]  # what the whole fold gives
        assert (page.offset, page.next_offset, page.total) == (
            len(want) - PAGE,
            len(want),
            len(want),
        )
    small, large = read["r1000"], read["r20000"]
    assert large <= 1.5 * small + SLACK_BYTES, read
