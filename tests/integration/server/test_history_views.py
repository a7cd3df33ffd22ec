"""History pages one list per view, whichever path serves the page.

An idle run's stored view (``HISTORY_VIEW_STATE``) may be served from the fold marks of its
last segments, the default (cleaned-up) view from one fold of the whole run: a reader paging
either view must see one total and pages that are slices of one list, never a mix of the two.
"""

from __future__ import annotations

import json
from typing import Any

from journald_client.pb import journal_pb2 as pb

from tests.builders import TS, text
from tests.daemon import Daemon
from tests.integration.rpc import Lease, assistant_pb, blocks, stub


def _pages(s: Any, run_id: str, view: Any, size: int) -> tuple[list[int], list[str]]:
    totals, texts, offset = [], [], 0
    while True:
        p = s.History(pb.HistoryRequest(run_id=run_id, offset=offset, limit=size, view=view))
        totals.append(p.total)
        texts += [m.role + ":" + m.content_json.decode() for m in p.messages]
        if p.next_offset >= p.total or p.next_offset <= offset:
            return totals, texts
        offset = p.next_offset


def test_each_view_pages_one_list_with_one_total_whichever_path_serves_it(daemon: Daemon) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "views")
    payloads: list[dict[str, Any]] = [
        {"assistant": assistant_pb([], "end_turn")},  # empty: the cleaned-up view drops it
        {"user": pb.UserPayload(content_json=blocks(text("go on")))},
        {"assistant": assistant_pb([text("done")], "end_turn")},
        {"user": pb.UserPayload(content_json=blocks(text("and?")))},
        {"assistant": assistant_pb([text("that is all")], "end_turn")},
    ]
    for payload in payloads:
        lease.append(pb.Record(seq=lease.seq + 1, ts=TS, **payload))
    lease.close()  # the writer's fold marks are saved when its lease ends

    fold = s.Fold(pb.FoldRequest(run_id="views"))
    stored = [m.role + ":" + m.content_json.decode() for m in fold.state.messages]
    for size in (1, 2, 10):
        totals, got = _pages(s, "views", pb.HISTORY_VIEW_STATE, size)
        assert set(totals) == {len(stored)}, f"page size {size}: totals {totals}"
        assert got == stored, f"page size {size}"
        totals, got = _pages(s, "views", pb.HISTORY_VIEW_UNSPECIFIED, size)
        whole = s.History(pb.HistoryRequest(run_id="views", offset=0, limit=100))
        assert set(totals) == {whole.total}, f"page size {size}: totals {totals}"
        assert got == [m.role + ":" + m.content_json.decode() for m in whole.messages]
        assert not any(json.loads(t.split(":", 1)[1]) == [] for t in got), "an empty message"
