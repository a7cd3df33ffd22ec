"""The transcript's "go to" prompt reaches a seq or a time of a long run with one History
page (issue 28 Build: "go to message N / seq N / time T"; the daemon finds the message with
History ``at_seq``/``at_time``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import journald_client as jc
import pytest
from journald_client.pb import journal_pb2 as pb

from journald.view import goto
from journald.view.app import ViewerApp
from journald.view.data import Source
from tests.builders import text, tool_use
from tests.daemon import Daemon
from tests.integration.rpc import Lease, blocks, stub
from tests.integration.view.test_view_app import shows, transcript, turns
from tests.integration.view_runs import FP, ts, until

TURNS = 1500  # 3,001 records: fold marks at about 1,000 and 2,000 (saved when the lease ends)


def write_timed_run(target: str, run_id: str) -> None:
    """Turn ``i``: its call (seq 2 + 2i, message 1 + 2i) and its result (seq 3 + 2i), both
    stamped 12:00:00 + i seconds on 2026-11-30."""
    lease = Lease(stub(target), run_id, prompt="the very first")
    for first in range(0, TURNS, 500):
        batch = []
        for i in range(first, min(TURNS, first + 500)):
            seq = 2 + 2 * i
            batch.append(
                pb.Record(
                    seq=seq,
                    ts=ts(i),
                    assistant=pb.AssistantPayload(
                        message=pb.Message(
                            role="assistant", content_json=blocks(tool_use(f"c{i}", "step", "{}"))
                        ),
                        iteration=i + 1,
                        stop_reason="tool_use",
                    ),
                )
            )
            batch.append(
                pb.Record(
                    seq=seq + 1,
                    ts=ts(i),
                    tool_result=pb.ToolResultPayload(
                        tool_use_id=f"c{i}", content_json=blocks(text(f"output of step {i}"))
                    ),
                )
            )
        lease.append(*batch)
    lease.close()


def cursor_text(app: ViewerApp) -> str:
    v = transcript(app).view
    return v.entries[v.cursor].haystack()


@pytest.mark.slow  # 3,001 records written and folded: about 25 s on a loaded machine
async def test_go_to_a_seq_or_a_time_lands_on_its_message_with_one_page(daemon: Daemon) -> None:
    write_timed_run(daemon.target, "timed")
    source = Source(str(daemon.socket), page=100)
    app = ViewerApp(source, "timed")
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: shows(app, f"output of step {TURNS - 1}"), "the last page")
        screen = transcript(app)
        for typed, step in (
            ("s 1201", 599),  # seq 1201 = 3 + 2*599: the result of step 599 (before a mark)
            ("seq 2402", 1200),  # the call of step 1200 (after the marks)
            ("t 2026-11-30T12:05:00Z", 300),  # second 300: step 300's call is the first
            ("t 2026-11-30T13:05:00+01:00", 300),  # the same instant in another zone
            ("s 2", 0),
        ):
            calls = source.stats.history_calls
            await pilot.press("colon", *typed, "enter")
            await until(
                pilot,
                lambda s=step: cursor_text(app).endswith(f"\nc{s}\noutput of step {s}"),  # type: ignore[misc]
                f"step {step} under the cursor after {typed!r}",
            )
            # its page (and at most the neighbouring one the window reads when the cursor
            # lands near its edge), not the pages before it; that read runs in a worker that
            # may finish after the cursor landed: counted here, not in the next go-to
            await until(
                pilot,
                lambda: not (screen.loading_earlier or screen.loading_later),
                "the neighbouring page's read to end",
            )
            assert source.stats.history_calls - calls <= 2, typed
            assert screen.slice is not None
            assert len(screen.slice.messages) < 3 * source.page

        await pilot.press("colon", *"s 999999", "enter")
        await until(
            pilot,
            lambda: any("no seq 999999" in str(n.message) for n in app._notifications),
            "the refusal of a seq past the end",
        )


def test_a_seq_whose_messages_a_compaction_replaced_is_refused(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("squashed", FP, "compact me") as run:
            run.append_many(turns(6))
        assert jd.compact("squashed", "SUMMARY: six steps ran", keep_last=2).compacted
        last = jd.history("squashed", 0, 0, stored=True).last_seq
        # the compaction's rebase is the last record: seq 3 (step 0's result) was folded away
        with pytest.raises(jc.InvalidRequest, match="seq 3 of run squashed is no longer in"):
            jd.history("squashed", limit=10, at_seq=3)
        after = jd.history("squashed", limit=10, at_seq=last)
        assert after.at_seq == last
        assert "SUMMARY: six steps ran" in str(after.messages[after.at_index - after.offset])


def test_the_prompt_reads_messages_seqs_clock_times_and_ages() -> None:
    now = datetime(2026, 11, 30, 14, 10, tzinfo=UTC)
    assert goto.parse("1,200") == goto.Target("message", 1200)
    assert goto.parse("s 4711").number == 4711
    assert goto.parse("seq 4711").kind == "seq"
    assert goto.parse("t 3m ago", now).when == "2026-11-30T14:07:00Z"
    assert goto.parse("t 14:03", now).when == "2026-11-30T14:03:00Z"
    assert goto.parse("t 14:30", now).when == "2026-11-29T14:30:00Z"  # still to come: yesterday
    assert goto.parse("t 2026-11-30T12:03:00Z", now).when == "2026-11-30T12:03:00Z"
    later = goto.parse("t 2h ago", now).when
    assert later == (now - timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    for bad in ("s x", "t yesterday-ish", "0", "t 25:00"):
        with pytest.raises(goto.NotATarget):
            goto.parse(bad, now)
