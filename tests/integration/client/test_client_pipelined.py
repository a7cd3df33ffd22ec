"""The pipelined writer (sync and asyncio) against a real daemon: appends kept in flight on one
AppendStream are acknowledged in order and fold like unary appends, the agent pattern reads
naturally, and a refused append voids only itself and what was in flight behind it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import journald_client as jc
import pytest
from journald_client.codec import Entry, tool_entry

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP

pytestmark = pytest.mark.shared_daemon("file")


def uses(step: int, n: int) -> list[dict[str, Any]]:
    return [
        {"type": "tool_use", "id": f"t{step}_{i}", "name": "read", "input": {"i": i}}
        for i in range(n)
    ]


def conversation(turns: int = 3, calls: int = 7) -> list[Entry]:
    """Assistant turns (numbered by the writer) each followed by its tool results, then the
    end: more records than a window of 16."""
    out: list[Entry] = []
    for step in range(turns):
        out.append(Entry.assistant(uses(step, calls), stop_reason="tool_use"))
        out += [Entry.tool_result(f"t{step}_{i}", f"r{step}.{i}") for i in range(calls)]
    out.append(Entry.assistant("all done", stop_reason="end_turn"))
    out.append(Entry.terminal("completed"))
    return out


def assert_acked_in_order(acks: list[jc.Ack], records: list[jc.JournalRecord]) -> None:
    assert [a.seq for a in acks] == list(range(2, len(acks) + 2))
    assert all(a.durability == "fsync_local" and not a.duplicate for a in acks)
    assert [r.seq for r in records] == list(range(1, len(acks) + 2))
    assert [r.hash for r in records[1:]] == [a.hash for a in acks]


def assert_same_fold(a: jc.RunState, b: jc.RunState) -> None:
    assert a.messages == b.messages
    assert a.counters == b.counters
    assert (a.next_iteration, a.terminal, a.pending, a.last_seq) == (
        b.next_iteration,
        b.terminal,
        b.pending,
        b.last_seq,
    )


def test_a_pipelined_writer_with_16_in_flight_acks_every_record_in_order_and_folds_like_unary(
    daemon: Daemon,
) -> None:
    entries = conversation()
    with jc.connect(str(daemon.socket)) as client:
        with client.start("pipe-sync", FP, "hi") as run:
            with run.pipelined(window=16) as w:
                pending = [w.append(e) for e in entries]
            acks = [p.ack() for p in pending]
            assert run.last_seq == acks[-1].seq
        with client.start("unary-sync", FP, "hi") as unary:
            for e in entries:
                unary.append_many([e])
        assert_acked_in_order(acks, list(client.load("pipe-sync")))
        assert_same_fold(client.fold("pipe-sync"), client.fold("unary-sync"))


async def test_an_async_pipelined_writer_acks_every_record_in_order_and_folds_like_unary(
    daemon: Daemon,
) -> None:
    entries = conversation()
    async with await jc.connect_async(str(daemon.socket)) as client:
        async with await client.start("pipe-aio", FP, "hi") as run:
            async with run.pipelined(window=16) as w:
                pending = [await w.append(e) for e in entries]
            acks = [await p for p in pending]
            assert run.last_seq == acks[-1].seq
        async with await client.start("unary-aio", FP, "hi") as unary:
            for e in entries:
                await unary.append_many([e])
        assert_acked_in_order(acks, [r async for r in client.load("pipe-aio")])
        assert_same_fold(await client.fold("pipe-aio"), await client.fold("unary-aio"))


def test_the_agent_waits_for_the_assistant_ack_then_streams_tool_results_behind_it(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as client, client.start("agent-sync", FP, "go") as run:
        with run.pipelined(window=16) as w:
            turn = w.append(Entry.assistant(uses(0, 5), stop_reason="tool_use")).ack()
            # the call is durable before any tool runs, and the writer knows what is open
            assert run.last_seq == turn.seq == 2
            calls = run.open_calls
            assert [c.id for c in calls] == [f"t0_{i}" for i in range(5)]
            results = [w.append(tool_entry(c, f"ran {c.id}")) for c in calls]
            final = w.append(Entry.assistant("done", stop_reason="end_turn"))
        assert [p.ack().seq for p in results] == [3, 4, 5, 6, 7]
        assert final.ack().seq == 8
        assert run.open_calls == []
        state = client.fold("agent-sync")
        assert state.pending is None
        assert state.counters.tool_calls == 5
        assert state.messages[-1] == {
            "role": "assistant",
            "content": [{"type": "text", "text": "done"}],
        }


def refused_in_the_middle() -> tuple[Entry, list[Entry], Entry, list[Entry]]:
    """An assistant turn, two good results, a result answering no open call (refused by
    admission), then two more good results submitted behind it."""
    turn = Entry.assistant(uses(0, 4), stop_reason="tool_use")
    good = [Entry.tool_result(f"t0_{i}", f"r{i}") for i in range(2)]
    bad = Entry.tool_result("no_such_call", "orphan")
    behind = [Entry.tool_result(f"t0_{i}", f"r{i}") for i in range(2, 4)]
    return turn, good, bad, behind


def test_a_refused_append_fails_itself_and_its_followers_and_the_writer_resyncs(
    daemon: Daemon,
) -> None:
    turn, good, bad, behind = refused_in_the_middle()
    with jc.connect(str(daemon.socket)) as client, client.start("refused-sync", FP, "x") as run:
        with run.pipelined(window=16) as w:
            w.append(turn).ack()
            ok = [w.append(e) for e in good]
            refused = w.append(bad)
            followers = submit_behind(w.append, behind)
            assert [p.ack().seq for p in ok] == [3, 4]
            with pytest.raises(jc.InvalidRecord, match="no_such_call"):
                refused.ack()
            for p in followers:
                with pytest.raises(jc.InvalidRecord, match="no_such_call"):
                    p.ack()  # in flight behind the refused append: void
            if len(followers) == len(behind):  # not told at submission: told now, once
                with pytest.raises(jc.InvalidRecord):
                    w.flush()
            w.flush()
            assert run.last_seq == 4  # the void seqs are free again
            again = [w.append(e) for e in behind]
        assert [p.ack().seq for p in again] == [5, 6]
        records = list(client.load("refused-sync"))
        assert [r.seq for r in records] == [1, 2, 3, 4, 5, 6]
        assert [r.payload.get("tool_use_id") for r in records[2:]] == [f"t0_{i}" for i in range(4)]
        assert client.fold("refused-sync").pending is None


def submit_behind(append: Callable[[Entry], Any], entries: list[Entry]) -> list[Any]:
    """Submit ``entries`` behind a refused append: each is in flight when the refusal comes
    back (its handle fails), or the submission itself reports the refusal, after which the
    writer has resynced and the rest are not submitted."""
    out = []
    for e in entries:
        try:
            out.append(append(e))
        except jc.InvalidRecord:
            break
    return out


async def test_an_async_refused_append_fails_itself_and_its_followers_and_the_writer_resyncs(
    daemon: Daemon,
) -> None:
    turn, good, bad, behind = refused_in_the_middle()
    async with await jc.connect_async(str(daemon.socket)) as client:
        run = await client.start("refused-aio", FP, "x")
        async with run, run.pipelined(window=16) as w:
            await (await w.append(turn))
            ok = [await w.append(e) for e in good]
            refused = await w.append(bad)
            followers: list[jc.AsyncPending[jc.Ack]] = []
            for e in behind:
                try:
                    followers.append(await w.append(e))
                except jc.InvalidRecord:
                    break
            assert [(await p).seq for p in ok] == [3, 4]
            with pytest.raises(jc.InvalidRecord, match="no_such_call"):
                await refused
            for p in followers:
                with pytest.raises(jc.InvalidRecord, match="no_such_call"):
                    await p
            if len(followers) == len(behind):
                with pytest.raises(jc.InvalidRecord):
                    await w.flush()
            await w.flush()
            assert run.last_seq == 4
            again = [await w.append(e) for e in behind]
            assert [(await p).seq for p in again] == [5, 6]
        records = [r async for r in client.load("refused-aio")]
        assert [r.seq for r in records] == [1, 2, 3, 4, 5, 6]


def test_while_a_pipelined_writer_is_open_unary_appends_are_refused_with_a_reason(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as client, client.start("busy-sync", FP, "x") as run:
        with run.pipelined(window=4) as w:
            with pytest.raises(jc.InvalidRequest, match="pipelined writer is open"):
                run.user("hello")
            w.append(Entry.user("through the writer")).ack()
        assert run.user("after the block").seq == 3
        with pytest.raises(jc.LeaseLost, match="closed"):
            w.append(Entry.user("too late"))
        with (
            run.pipelined(window=4),
            pytest.raises(jc.InvalidRequest, match="pipelined writer is open"),
        ):
            run.compact("a summary")  # its rebase would take a seq the writer numbers


def test_a_pipelined_writer_that_cannot_reopen_its_run_says_why_on_every_call(
    tmp_path: Path,
) -> None:
    daemon = Daemon(tmp_path, "file").start()  # its own daemon: this test restarts it
    try:
        with jc.connect(str(daemon.socket)) as client, client.start("done-sync", FP, "x") as run:
            with run.pipelined(window=4) as w:
                w.append(Entry.terminal("completed")).ack()
                daemon.kill9()
                daemon.start()
                # the lease died with the daemon, and a completed run cannot be re-opened
                with pytest.raises(jc.Completed):
                    w.append(Entry.user("after the end")).ack()
                for _ in range(2):
                    with pytest.raises(jc.Completed):
                        w.append(Entry.user("again"))  # the writer cannot go on, and says why
                assert run.last_seq == 2
            assert [r.seq for r in client.load("done-sync")] == [1, 2]
    finally:
        daemon.stop()
