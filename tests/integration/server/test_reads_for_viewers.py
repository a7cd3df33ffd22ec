"""The read fields a viewer needs without folding a whole run, against a real daemon: List
names the lease holder and the labels, History carries the pending turn and the seq it
reflects, Fold can leave the messages out."""

from __future__ import annotations

import os

import journald_client as jc

from tests.daemon import Daemon
from tests.integration.view_runs import FP


def _calls(*ids: str) -> list[dict[str, str]]:
    return [{"type": "tool_use", "id": i, "name": "read", "input": '{"p":1}'} for i in ids]


def test_list_names_the_holder_and_pending_calls_while_held_and_the_labels_of_every_run(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("held", FP, "hi", labels={"team": "blue"}, name="bot-7") as run:
            run.assistant("working", stop_reason="end_turn")
            row = next(r for r in jd.list() if r.run_id == "held")
            assert row.status == "held"
            assert row.holder is not None
            assert (row.holder.name, row.holder.pid) == ("bot-7", os.getpid())
            assert row.holder.since
            assert row.labels == {"team": "blue"}
            assert row.pending_calls == 0
            run.assistant(_calls("t1", "t2"), stop_reason="tool_use")
            run.tool_result("t2", "two")
            assert next(r for r in jd.list() if r.run_id == "held").pending_calls == 1
        row = next(r for r in jd.list() if r.run_id == "held")
        assert row.holder is None
        assert row.pending_calls is None  # not held: History (limit 0) tells
        assert row.labels == {"team": "blue"}


def test_history_carries_the_pending_turn_and_the_seq_it_reflects(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("pend", FP, "read two files") as run:
            run.assistant(_calls("t1", "t2"), stop_reason="tool_use")
            run.tool_result("t1", "one")
            live = jd.history("pend", 0, 50)
            assert live.last_seq == 3
            assert live.pending is not None
            assert [c.id for c in live.pending.unanswered] == ["t2"]
            assert [r.tool_use_id for r in live.pending.results] == ["t1"]
            assert live.total == 1  # only the prompt: the open turn is not a message yet
        dormant = jd.history("pend", 0, 0)  # folded from the stored records now
        assert dormant.last_seq == 3
        assert dormant.pending is not None
        assert [c.id for c in dormant.pending.unanswered] == ["t2"]
        with jd.resume("pend", FP) as run:
            run.tool_result("t2", "two")
        done = jd.history("pend", 0, 50)
        assert done.pending is None
        assert done.last_seq == 4
        assert done.total == 3


def test_fold_can_leave_the_messages_out_and_keeps_every_other_fact(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("facts", FP, "go") as run:
            run.assistant("a", stop_reason="end_turn", usage={"input_tokens": 7})
            run.assistant(_calls("t9"), stop_reason="tool_use")
        full = jd.fold("facts")
        slim = jd.fold("facts", messages=False)
        assert full.messages
        assert slim.messages == []
        assert slim.counters == full.counters
        assert slim.counters.input_tokens == 7
        assert slim.pending is not None
        assert slim.pending.unanswered[0].id == "t9"
        assert slim.fingerprint == full.fingerprint
        assert slim.last_seq == full.last_seq


def test_history_of_a_dormant_run_folded_from_a_mark_still_carries_the_pending_turn(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("marked", FP, "go") as run:
            run.assistant(_calls("t0"), stop_reason="tool_use")
            run.tool_result("t0", "zero")
        # the lease closed on an idle run: a fold mark (seq 3, 3 messages) serves later pages
        with jd.resume("marked", FP) as run:
            run.assistant(_calls("t5"), stop_reason="tool_use")
            run.tool_result("t5", "five")
            run.assistant(_calls("t1", "t2", "t3"), stop_reason="tool_use")
            run.tool_result("t2", "two")
        for offset, limit in ((4, 10), (0, 0)):
            page = jd.history("marked", offset, limit)
            assert page.last_seq == 7
            assert page.total == 5
            assert page.pending is not None
            assert [c.id for c in page.pending.unanswered] == ["t1", "t3"]
        assert [m["role"] for m in jd.history("marked", 4, 10).messages] == ["assistant", "user"]
