"""Sync client reads against a real daemon: load, watch, list, delete, governed view,
lease end on shutdown, and reconnect across a graceful restart."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.waiting import wait_until


def test_load_returns_the_exact_stored_bytes_and_their_hashes(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client:
        with client.start("bytes", FP, "héllo ✓") as run:
            acks = run.append_many(
                [
                    jc.Entry.assistant(
                        [{"type": "tool_use", "id": "a", "name": "read", "input": {}}],
                        stop_reason="tool_use",
                        iteration=1,
                    ),
                    jc.Entry.tool_result("a", "ok"),
                ]
            )
        assert [a.seq for a in acks] == [2, 3]
        records = list(client.load("bytes"))
        assert [r.seq for r in records] == [1, 2, 3]
        for rec in records:
            assert hashlib.sha256(rec.canonical).hexdigest() == rec.hash
        assert records[1].prev == records[0].hash
        assert records[2].hash == acks[1].hash
        assert records[0].payload["prompt"] == [{"type": "text", "text": "héllo ✓"}]
        assert [r.seq for r in client.load("bytes", from_seq=3)] == [3]


def test_watch_tails_records_as_they_are_appended(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client, client.start("tailed", FP, "hi") as run:
        seen: list[int] = []
        watch = client.watch("tailed", from_seq=1)
        first = threading.Event()

        def consume() -> None:
            for rec in watch:
                seen.append(rec.seq)
                first.set()
                if rec.kind == "terminal":
                    return

        reader = threading.Thread(target=consume)
        reader.start()
        try:
            wait_until(first.is_set, what="the watch to send the meta record")
            run.user("one")
            run.user("two")
            run.terminal("completed")
            wait_until(lambda: not reader.is_alive(), what="the watch to reach the terminal")
        finally:
            watch.cancel()
            reader.join(10)
        assert seen == [1, 2, 3, 4]


def test_watch_events_carry_checkpoint_changes_between_the_records_in_order(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as client:
        with client.start("marked", FP, "hi") as run:
            run.user("one")
        watch = client.watch("marked", from_seq=1)
        events: list[jc.JournalRecord | jc.CheckpointChange] = []
        got = threading.Condition()

        def consume() -> None:
            for event in watch.events():
                with got:
                    events.append(event)
                    got.notify_all()

        def count() -> int:
            with got:
                return len(events)

        reader = threading.Thread(target=consume)
        reader.start()
        try:
            wait_until(lambda: count() == 2, what="the stored records")
            cp = client.checkpoint("marked", "between")
            wait_until(lambda: count() == 3, what="the created event")
            with client.resume("marked", FP) as run:
                run.user("two")
            assert client.delete_checkpoint("marked", cp.checkpoint_id)
            wait_until(lambda: count() == 5, what="the record and the deleted event")
        finally:
            watch.cancel()
            reader.join(10)
        said = [
            (e.kind, e.checkpoint.checkpoint_id)
            if isinstance(e, jc.CheckpointChange)
            else ("record", e.seq)
            for e in events
        ]
        assert said == [
            ("record", 1),
            ("record", 2),
            ("created", cp.checkpoint_id),
            ("record", 3),
            ("deleted", cp.checkpoint_id),
        ]


def test_the_governed_view_synthesizes_results_for_open_calls(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client, client.start("gov", FP, "hi") as run:
        run.assistant(
            [
                {"type": "tool_use", "id": "a", "name": "read", "input": {}},
                {"type": "tool_use", "id": "b", "name": "read", "input": {}},
            ],
            stop_reason="tool_use",
        )
        run.tool_result("a", "ok")
        view = run.governed_messages()
        assert view.synthesized_results == 1
        assert [m["role"] for m in view.messages] == ["user", "assistant", "user"]
        assert [b["is_error"] for b in view.messages[2]["content"]] == [False, True]
        assert view.state.pending is not None


def test_list_and_delete(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client:
        for rid in ("l1", "l2"):
            with client.start(rid, FP, f"prompt {rid}") as run:
                run.terminal("completed")
        runs = client.list()
        assert sorted(r.run_id for r in runs) == ["l1", "l2"]
        assert {r.status for r in runs} == {"completed"}
        assert {r.model for r in runs} == {"claude-test"}
        assert client.delete("l1") is True
        assert client.delete("l1") is False
        assert [r.run_id for r in client.list()] == ["l2"]


def test_deleting_a_held_run_is_refused_naming_the_holder(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client:
        with client.start("held-del", FP, "hi", name="keeper"):
            with pytest.raises(jc.Locked) as info:
                client.delete("held-del")
            assert info.value.holder_name == "keeper"
        assert client.delete("held-del") is True


def test_a_writer_survives_a_graceful_daemon_restart(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, "file")
    try:
        daemon.start()
        with jc.connect(str(daemon.socket)) as client, client.start("graceful", FP, "hi") as run:
            run.user("one")
            assert daemon.stop() == 0
            wait_until(run._lease.done.is_set, what="the lease stream to end on shutdown")
            assert run.lease_ended == "shutdown"
            daemon.start()
            assert run.user("two").seq == 3
            assert run.reconnects == 1
            run.terminal("completed")
        with jc.connect(str(daemon.socket)) as client:
            assert client.fold("graceful").completed
    finally:
        daemon.kill9()


def test_a_record_written_inside_a_span_stores_its_trace_context(daemon: Daemon) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("journald-client-test")
    with jc.connect(str(daemon.socket)) as client, client.start("traced", FP, "hi") as run:
        with tracer.start_as_current_span("tool") as span:
            run.user("traced")
            ctx = span.get_span_context()
        run.user("untraced")
        records = list(client.load("traced"))
    expected = {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}
    assert records[1].trace == expected
    assert records[2].trace is None


def test_a_completed_record_whose_ack_was_lost_is_adopted_after_a_daemon_restart(
    tmp_path: Path,
) -> None:
    from journald_client import codec

    daemon = Daemon(tmp_path, "file")
    try:
        daemon.start()
        with jc.connect(str(daemon.socket)) as client, client.start("lost-ack", FP, "hi") as run:
            records = codec.stamp([jc.Entry.terminal("completed", "done")], 2)
            first = run._send(records)
            # the daemon dies; the writer never saw that ack and sends the same record again:
            # the run is now completed, so re-opening is refused, but the stored record is ours
            daemon.kill9()
            daemon.start()
            again = run._send(records)
            assert [(a.seq, a.hash, a.duplicate) for a in again] == [(2, first[0].hash, True)]
            other = codec.stamp([jc.Entry.terminal("completed", "someone else")], 2)
            with pytest.raises(jc.Completed):
                run._send(other)
    finally:
        daemon.kill9()
