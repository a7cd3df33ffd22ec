"""History of a dormant run whose conversation a paged rebase replaced (a restore of a
conversation over one page, docs/design.md#message-pages): the tail page is folded from a fold
mark before the rebase, so the window must read the rebase's pages; a seek past a rebase with
no inline tail must know the role of the last paged message (a following user message merges
into a user message)."""

from __future__ import annotations

from pathlib import Path

import journald_client as jc

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP

BIG = "z" * (200 * 1024)  # one tool call and its result fill a page on their own


def test_a_tail_page_and_the_first_page_read_through_a_restore_after_a_fold_mark(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d:
        c = jc.Client(d.target)
        with c.start("long", FP, "hello") as run:
            for i in range(1100):  # past the first fold mark (MARK_EVERY records)
                run.assistant(f"step {i}", stop_reason="end_turn")
                run.user("more " + "y" * 300)
        cp = c.checkpoint("long")
        with c.resume("long", FP) as run:
            run.user("after")
        c.restore("long", cp.checkpoint_id)
        assert list(c.load("long"))[-1].payload.get("pages")
        with c.resume("long", FP) as run:
            run.assistant("after the restore", stop_reason="end_turn")
        want = c.fold("long").messages
        assert c.history("long", len(want) - 10, 10, stored=True).messages == want[-10:]
        assert c.history("long", 0, 10, stored=True).messages == want[:10]


def test_a_seek_past_a_rebase_without_an_inline_tail_lands_on_the_merged_message(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d:
        c = jc.Client(d.target)
        with c.start("reads", FP, "read two files") as run:
            for i in range(2):
                call = {"type": "tool_use", "id": f"r{i}", "name": "read", "input": "{}"}
                run.assistant([call], stop_reason="tool_use")
                run.tool_result(f"r{i}", BIG)
        cp = c.checkpoint("reads")
        c.restore("reads", cp.checkpoint_id)
        rebase = list(c.load("reads"))[-1]
        assert rebase.payload.get("pages")
        assert not rebase.payload["messages"]
        with c.resume("reads", FP) as run:
            run.user("and now summarise")  # merges into the last (user) message
        records = list(c.load("reads"))
        want = c.fold("reads").messages
        page = c.history("reads", limit=5, stored=True, at_seq=records[-1].seq)
        assert page.at_index == len(want) - 1
        assert page.messages[-1] == want[-1]
