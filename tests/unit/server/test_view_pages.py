"""History's cleaned-up (default) and governed views at the cost of the page (issue 31 item 4,
docs/design.md#view-pages): once a writer's lease end saved the run's view index, a History
page of either view reads the view pages it returns, not every page of the conversation.

Page reads are counted at the attachment store (``test_paged_state``'s in-process daemon)."""

from __future__ import annotations

from typing import Any

import pytest
from journald_client.pb import journal_pb2 as pb

from journald.core import governance
from journald.core.checkpoints import governed
from journald.core.fold import fold
from journald.core.records import Record, canonical_json
from journald.core.snapshot import snapshot_pages
from journald.core.view_index import view_log
from journald.storage.checkpoint_base import VIEWS as VIEWS_PART
from tests.builders import JournalBuilder, assistant_payload, result_payload, text, tool_use
from tests.builders import user_payload as user
from tests.unit.server.test_paged_state import (
    RUN,
    InProcess,
    as_messages,
    daemon,  # noqa: F401  (the in-process daemon fixture)
    long_run,
    more,
    stored_and_snapshotted,
)

BODY = 1000
VIEWS = {
    "cleaned-up": pb.HISTORY_VIEW_UNSPECIFIED,
    "governed": pb.HISTORY_VIEW_GOVERNED,
}


def repaired_run(turns: int = 1200, open_end: bool = True) -> JournalBuilder:
    """A long run whose views differ from its fold: no prompt and an opening assistant
    message (cut from both views), tool turns, some abandoned (their calls get synthetic
    results), and an open turn at the end (committed in the governed view alone)."""
    b = JournalBuilder(RUN, prompt="")
    b.add("assistant", assistant_payload([text("before any user turn")], 1))
    for i in range(turns):
        b.add("user", user(f"question {i} " + "q" * BODY))
        calls = [f"t{i}a", f"t{i}b"]
        b.add("assistant", assistant_payload([text(f"on it {i}"), *map(tool_use, calls)], i + 2))
        answered = calls if i % 7 else calls[:1]  # every 7th turn leaves a call unanswered
        for c in answered:
            b.add("tool_result", result_payload(c, f"result of {c} " + "r" * BODY))
        if i % 7:
            b.add("assistant", assistant_payload([text(f"answer {i} " + "a" * BODY)], i + 2))
    if open_end:
        open_turn(b)
    return b


def open_turn(b: JournalBuilder) -> list[Record]:
    b.add("user", user("one more thing"))
    b.add("assistant", assistant_payload([text("checking"), tool_use("open1")], 9999))
    return b.records[-2:]


def views_of(records: list[Record]) -> dict[str, list[dict[str, Any]]]:
    """Today's whole-list derivation of both views."""
    st = fold(records)
    return {
        "cleaned-up": governed(list(st.messages)),
        "governed": governance.governed_messages(st)[0],
    }


async def history(d: InProcess, view: Any, offset: int, limit: int) -> pb.HistoryResponse:
    got: pb.HistoryResponse = await d.stub.History(
        pb.HistoryRequest(run_id=RUN, view=view, offset=offset, limit=limit)
    )
    return got


async def test_a_dormant_runs_cleaned_up_and_governed_pages_read_only_the_view_pages_they_return(
    daemon: InProcess,  # noqa: F811
) -> None:
    b = repaired_run()
    await stored_and_snapshotted(daemon, b)
    doc = await daemon.snapshot_doc()
    assert len(snapshot_pages(doc["snapshot"])) >= 30  # the conversation lives in pages
    want = views_of(b.records)
    assert want["cleaned-up"] != list(fold(b.records).messages)  # the views repair it
    assert want["governed"] != want["cleaned-up"]
    daemon.reads()
    for name, view in VIEWS.items():
        total = len(want[name])
        tail = await history(daemon, view, total - 20, 20)
        assert tail.total == total
        assert tail.next_offset == total
        assert as_messages(tail.messages) == want[name][tail.offset : tail.next_offset]
        assert len(daemon.reads()) <= 2, name  # the last view page or two, never all 30
        first = await history(daemon, view, 0, 20)
        assert as_messages(first.messages) == want[name][first.offset : first.next_offset]
        assert len(daemon.reads()) <= 2, name
        middle = await history(daemon, view, total // 2, 30)
        assert as_messages(middle.messages) == want[name][middle.offset : middle.next_offset]
        assert len(daemon.reads()) <= 2, name


async def test_a_held_run_pages_its_views_from_the_saved_index_and_the_pages_sealed_since(
    daemon: InProcess,  # noqa: F811
) -> None:
    b = repaired_run(300, open_end=False)
    await stored_and_snapshotted(daemon, b)
    daemon.reads()
    async with daemon.service.runs.daemon_lease(RUN) as lease:
        covered = len(lease.writer.state.messages.refs)  # the saved index covers these
        for _ in range(10):  # ~2,000 messages of ~1 KB: pages sealed while held
            await lease.writer.commit(more(b, 200))
        await lease.writer.commit(open_turn(b))
        sealed = len(lease.writer.state.messages.refs)
        daemon.reads()
        want = views_of(b.records)
        for name, view in VIEWS.items():
            total = len(want[name])
            first = await history(daemon, view, 0, 20)
            assert first.total == total
            assert as_messages(first.messages) == want[name][first.offset : first.next_offset]
            tail = await history(daemon, view, total - 20, 20)
            assert as_messages(tail.messages) == want[name][tail.offset : tail.next_offset]
        # the pages sealed since the lease began, once (the index is kept), and the pages
        # the four History pages return, never the pages the saved index covers
        assert sealed - covered >= 10
        assert len(daemon.reads()) <= sealed - covered + 4 * 2
    await daemon.service.runs.leases.wait_closed(RUN)
    daemon.reads()
    want = views_of(b.records)
    for name, view in VIEWS.items():  # the lease end extended the saved index
        total = len(want[name])
        tail = await history(daemon, view, total - 20, 20)
        assert as_messages(tail.messages) == want[name][tail.offset : tail.next_offset]
        assert len(daemon.reads()) <= 2, name


async def test_a_run_snapshotted_before_view_indexes_gets_one_at_its_next_lease_end(
    daemon: InProcess,  # noqa: F811
) -> None:
    b = repaired_run(600)
    await stored_and_snapshotted(daemon, b)
    # as a daemon before this index left it: a snapshot and no view index
    await daemon.checkpoints.save_mark(RUN, {}, VIEWS_PART)
    daemon.service.runs.views.forget(RUN)
    want = views_of(b.records)["cleaned-up"]
    daemon.reads()
    await history(daemon, pb.HISTORY_VIEW_UNSPECIFIED, len(want) - 20, 20)
    assert len(daemon.reads()) > 10  # no index serves it: derived from every page
    async with daemon.service.runs.daemon_lease(RUN):
        pass  # a lease that changes nothing
    await daemon.service.runs.leases.wait_closed(RUN)
    views = daemon.service.runs.views
    views.forget(RUN)  # as a restarted daemon
    st = (await daemon.service.runs.dormant_state(RUN))[1]
    saved = await views.saved(RUN, st.messages)
    assert saved is not None
    assert saved.covers(st.messages.refs)
    daemon.reads()
    index = await views.serving(RUN, st.messages)
    assert index is not None
    # the saved index serves it: only the fold page (or two) holding what its carry names
    assert len(daemon.reads()) <= 2
    vlog = view_log(index, st.messages.tail, None)
    assert len(vlog) == len(want)
    tail = await daemon.service.runs.pages.span(RUN, vlog, len(want) - 20, len(want))
    assert list(tail[len(want) - 20 :]) == want[-20:]
    assert len(daemon.reads()) <= 2


async def test_a_lease_end_writes_a_small_view_index_and_no_view_page_of_a_clean_run(
    daemon: InProcess,  # noqa: F811
) -> None:
    b = long_run()
    await stored_and_snapshotted(daemon, b)
    async with daemon.service.runs.daemon_lease(RUN) as lease:
        daemon.attachments.new_bytes = 0
        late = more(b, 200)
        await lease.writer.commit(late)
    await daemon.service.runs.leases.wait_closed(RUN)
    doc = await daemon.checkpoints.load_mark(RUN, VIEWS_PART)
    assert doc
    conversation = sum(len(canonical_json(m)) for m in fold(b.records).messages)
    # page numbers and fold indexes (measured: 2 KB for 5 MB), no message copied
    assert len(canonical_json(doc)) < 8 * 1024 < conversation / 500
    appended = sum(len(r.raw) for r in late)
    assert daemon.attachments.new_bytes <= 2 * appended  # the fold's new pages, none of the view


async def test_a_missing_view_page_makes_history_derive_the_view_from_every_page(
    daemon: InProcess,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    b = repaired_run(600)
    await stored_and_snapshotted(daemon, b)
    st = (await daemon.service.runs.dormant_state(RUN))[1]
    index = await daemon.service.runs.views.serving(RUN, st.messages)
    assert index is not None
    fold_pages = {r.sha256 for r in st.messages.refs}
    own = [r for r in index.view_pages if r.sha256 not in fold_pages]
    assert own  # the repairs made view pages of their own
    del daemon.attachments._runs[RUN][own[-1].sha256]  # lost (a cache, never truth)
    want = views_of(b.records)["cleaned-up"]
    for offset in range(0, len(want), 97):  # a page in every view page
        got = await history(daemon, pb.HISTORY_VIEW_UNSPECIFIED, offset, 20)
        assert as_messages(got.messages) == want[got.offset : got.next_offset]
        assert got.total == len(want)
    assert "a view page is unreadable" in caplog.text
    async with daemon.service.runs.daemon_lease(RUN):
        pass  # the next lease end rebuilds it, though the run did not change
    await daemon.service.runs.leases.wait_closed(RUN)
    assert own[-1].sha256 in daemon.attachments._runs[RUN]


async def test_a_stored_view_page_far_from_the_end_reads_its_pages_not_the_records_after_it(
    daemon: InProcess,  # noqa: F811
) -> None:
    b = long_run(20_000)  # fold marks every 1,000 records
    await stored_and_snapshotted(daemon, b)
    want = list(fold(b.records).messages)
    store = daemon.service.runs.store
    read: list[int] = []
    iter_records = store.iter_records

    def counting(run_id: str, from_seq: int = 1) -> Any:
        async def gen() -> Any:
            async for r in iter_records(run_id, from_seq):
                read.append(r.seq)
                yield r

        return gen()

    store.iter_records = counting  # type: ignore[method-assign]
    daemon.reads()
    middle = await daemon.stub.History(
        pb.HistoryRequest(run_id=RUN, view=pb.HISTORY_VIEW_STATE, offset=len(want) // 2, limit=20)
    )
    assert as_messages(middle.messages) == want[middle.offset : middle.next_offset]
    # the pages under the page, not a fold of the 10,000 records from a mark to the end
    assert len(read) < 100
    assert len(daemon.reads()) <= 2
