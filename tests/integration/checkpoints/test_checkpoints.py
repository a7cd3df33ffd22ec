"""Checkpoints, restore, compaction, fork and history through a real daemon (file backend)."""

from __future__ import annotations

import hashlib
import json
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.server.convert import fingerprint_to_pb
from tests.builders import FP, TS, text
from tests.daemon import Daemon
from tests.integration.rpc import Lease, blocks, error_of, stub, until_unlocked
from tests.waiting import wait_until

Conversation = list[tuple[str, Any]]


pytestmark = pytest.mark.shared_daemon("file")


@pytest.fixture
def s(daemon: Daemon) -> pbg.JournalServiceStub:
    return stub(daemon.target)


def conv(messages: Any) -> Conversation:
    return [(m.role, json.loads(m.content_json)) for m in messages]


def build(s: pbg.JournalServiceStub, run_id: str, turns: int = 3, **kw: Any) -> Lease:
    """A run: prompt, ``turns`` answered tool turns, a closing assistant message."""
    lease = Lease(s, run_id, **kw)
    for i in range(turns):
        lease.append(lease.assistant(f"{run_id}-t{i}"))
        lease.append(lease.result(f"{run_id}-t{i}", out=f"out {i}"))
    lease.append(lease.assistant())
    return lease


def fold(s: pbg.JournalServiceStub, run_id: str) -> pb.RunState:
    return s.Fold(pb.FoldRequest(run_id=run_id)).state


def load(s: pbg.JournalServiceStub, run_id: str) -> list[pb.Record]:
    return [r.record for r in s.Load(pb.LoadRequest(run_id=run_id))]


def code_of(call: Callable[[], object]) -> str:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return error_of(info.value).code


def user(t: str) -> pb.Message:
    return pb.Message(role="user", content_json=blocks(text(t)))


def _open(
    s: pbg.JournalServiceStub, run_id: str, cwd: str, prompt: bytes | None = None
) -> tuple[Any, pb.Lease]:
    call = s.Open(
        pb.OpenRequest(
            run_id=run_id,
            fingerprint=fingerprint_to_pb(FP),
            prompt_json=blocks(text("hello")) if prompt is None else prompt,
            created=TS,
            client=pb.ClientInfo(name="cwd-bot", pid=1, host="h", cwd=cwd),
        )
    )
    return call, next(iter(call)).lease


def test_a_checkpoint_records_its_meta_and_its_content_hash(
    s: pbg.JournalServiceStub, daemon: Daemon
) -> None:
    lease = build(s, "cp-meta")
    cp = s.Checkpoint(pb.CheckpointRequest(run_id="cp-meta", label="first")).checkpoint
    state = fold(s, "cp-meta")
    assert cp.run_id == "cp-meta"
    assert cp.label == "first"
    assert cp.trigger == pb.CHECKPOINT_TRIGGER_MANUAL
    assert cp.seq == state.last_seq
    assert cp.message_count == len(state.messages) == 8
    assert cp.model == FP.model
    assert cp.cwd == "/work"  # the lease holder's declared working directory
    assert len(cp.checkpoint_id) == 26
    assert cp.created
    canonical = json.dumps(
        [{"role": r, "content": c} for r, c in conv(state.messages)],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    assert cp.hash == hashlib.sha256(canonical).hexdigest()
    path = daemon.data_dir / "sessions" / "cp-meta" / "checkpoints" / f"{cp.checkpoint_id}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lease.close()


def test_listing_is_ordered_by_id_and_delete_is_idempotent(s: pbg.JournalServiceStub) -> None:
    build(s, "cp-list").close()
    ids = [
        s.Checkpoint(pb.CheckpointRequest(run_id="cp-list", label=str(i))).checkpoint.checkpoint_id
        for i in range(4)
    ]
    listed = s.ListCheckpoints(pb.ListCheckpointsRequest(run_id="cp-list")).checkpoints
    assert [c.checkpoint_id for c in listed] == sorted(ids) == ids
    assert [c.label for c in listed] == ["0", "1", "2", "3"]
    req = pb.DeleteCheckpointRequest(run_id="cp-list", checkpoint_id=ids[1])
    assert s.DeleteCheckpoint(req).deleted is True
    assert s.DeleteCheckpoint(req).deleted is False
    listed = s.ListCheckpoints(pb.ListCheckpointsRequest(run_id="cp-list")).checkpoints
    assert [c.checkpoint_id for c in listed] == [ids[0], ids[2], ids[3]]
    assert code_of(lambda: s.ListCheckpoints(pb.ListCheckpointsRequest(run_id="nope"))) == (
        "session_not_found"
    )


def test_restore_appends_a_rebase_after_a_pre_restore_checkpoint_and_deletes_nothing(
    s: pbg.JournalServiceStub,
) -> None:
    lease = build(s, "cp-restore", turns=1)
    mark = s.Checkpoint(pb.CheckpointRequest(run_id="cp-restore")).checkpoint
    marked = conv(fold(s, "cp-restore").messages)
    for i in range(2):
        lease.append(lease.assistant(f"late-{i}"))
        lease.append(lease.result(f"late-{i}"))
    lease.append(lease.assistant())
    before = load(s, "cp-restore")
    resp = s.Restore(
        pb.RestoreRequest(
            run_id="cp-restore",
            checkpoint_id=mark.checkpoint_id,
            lease_id=lease.lease.lease_id,
        )
    )
    assert (resp.from_messages, resp.to_messages) == (8, 4)  # assistants merge
    assert resp.ack.seq == before[-1].seq + 1
    assert not resp.warnings
    after = load(s, "cp-restore")
    assert [r.canonical for r in after[:-1]] == [r.canonical for r in before]
    rebase = after[-1].rebase
    assert rebase.reason == "restore"
    assert rebase.checkpoint_id == mark.checkpoint_id
    assert rebase.checkpoint_hash == mark.hash
    assert conv(fold(s, "cp-restore").messages) == marked
    pre = s.ListCheckpoints(pb.ListCheckpointsRequest(run_id="cp-restore")).checkpoints[-1]
    assert pre.checkpoint_id == resp.pre_restore_checkpoint_id
    assert pre.trigger == pb.CHECKPOINT_TRIGGER_PRE_RESTORE
    assert pre.message_count == 8
    # the holder continues after the rebase
    lease.seq = resp.ack.seq
    lease.append(lease.assistant())
    assert fold(s, "cp-restore").last_seq == resp.ack.seq + 1
    lease.close()


def test_restore_of_a_dormant_run_is_held_by_the_daemon_and_then_released(
    s: pbg.JournalServiceStub,
) -> None:
    build(s, "cp-dormant", turns=2).close()
    mark = until_unlocked(
        lambda: s.Checkpoint(pb.CheckpointRequest(run_id="cp-dormant"))
    ).checkpoint
    resp = until_unlocked(
        lambda: s.Restore(
            pb.RestoreRequest(
                run_id="cp-dormant", checkpoint_id=mark.checkpoint_id, skip_checkpoint=True
            )
        )
    )
    assert resp.pre_restore_checkpoint_id == ""
    assert len(s.ListCheckpoints(pb.ListCheckpointsRequest(run_id="cp-dormant")).checkpoints) == 1
    again = until_unlocked(lambda: Lease(s, "cp-dormant", mode=pb.OPEN_MODE_RESUME))
    assert again.lease.last_seq == resp.ack.seq
    again.close()


def test_a_checkpoint_of_another_run_is_refused_with_session_mismatch(
    s: pbg.JournalServiceStub,
) -> None:
    build(s, "cp-own-a").close()
    build(s, "cp-own-b").close()
    a = until_unlocked(lambda: s.Checkpoint(pb.CheckpointRequest(run_id="cp-own-a"))).checkpoint
    req = pb.RestoreRequest(run_id="cp-own-b", checkpoint_id=a.checkpoint_id)
    assert code_of(lambda: s.Restore(req)) == "session_mismatch"
    missing = pb.RestoreRequest(run_id="cp-own-b", checkpoint_id="01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert code_of(lambda: s.Restore(missing)) == "checkpoint_not_found"


def test_writes_to_a_run_held_by_another_writer_are_locked_naming_the_holder(
    s: pbg.JournalServiceStub,
) -> None:
    lease = build(s, "cp-held", name="owner-bot", pid=31337)
    mark = s.Checkpoint(pb.CheckpointRequest(run_id="cp-held")).checkpoint
    with pytest.raises(grpc.RpcError) as info:
        s.Restore(pb.RestoreRequest(run_id="cp-held", checkpoint_id=mark.checkpoint_id))
    detail = error_of(info.value)
    assert detail.code == "locked"
    assert detail.metadata["holder_pid"] == "31337"
    req = pb.CompactRequest(run_id="cp-held", summary=[user("s")], keep_last=2)
    assert code_of(lambda: s.Compact(req)) == "locked"
    lease.close()


def test_checkpoint_compact_restore_and_fork_of_the_head_wait_for_a_finished_turn(
    s: pbg.JournalServiceStub,
) -> None:
    lease = build(s, "cp-busy", turns=1)
    mark = s.Checkpoint(pb.CheckpointRequest(run_id="cp-busy")).checkpoint
    lease.append(lease.assistant("busy-1", "busy-2"))
    lease.append(lease.result("busy-1"))
    cps_before = s.ListCheckpoints(pb.ListCheckpointsRequest(run_id="cp-busy")).checkpoints
    records_before = load(s, "cp-busy")
    lid = lease.lease.lease_id
    assert code_of(lambda: s.Checkpoint(pb.CheckpointRequest(run_id="cp-busy"))) == ("turn_running")
    restore = pb.RestoreRequest(run_id="cp-busy", checkpoint_id=mark.checkpoint_id, lease_id=lid)
    assert code_of(lambda: s.Restore(restore)) == "turn_running"
    assert code_of(lambda: s.Fork(pb.ForkRequest(run_id="cp-busy", new_run_id="x1"))) == (
        "turn_running"
    )
    resp = s.Compact(
        pb.CompactRequest(run_id="cp-busy", summary=[user("s")], keep_last=1, lease_id=lid)
    )
    assert (resp.status, resp.reason) == (pb.COMPACT_STATUS_REJECTED, "turn_running")
    assert s.ListCheckpoints(pb.ListCheckpointsRequest(run_id="cp-busy")).checkpoints == (
        cps_before
    )
    assert load(s, "cp-busy") == records_before
    # a fork of a checkpoint does not touch the busy head
    fork = s.Fork(
        pb.ForkRequest(run_id="cp-busy", checkpoint_id=mark.checkpoint_id, new_run_id="busy-f")
    )
    assert conv(fork.state.messages) == conv(s.Fold(pb.FoldRequest(run_id="busy-f")).state.messages)
    lease.close()


def test_compaction_keeps_an_aligned_tail_after_the_summary(s: pbg.JournalServiceStub) -> None:
    lease = build(s, "cp-compact", turns=3)  # prompt, 3 x (assistant, results), assistant
    full = conv(fold(s, "cp-compact").messages)
    records = load(s, "cp-compact")
    lid = lease.lease.lease_id
    summary = [user("summary: the agent read three files")]
    # keep_last=2 would cut between a tool_use and its results: the tail grows to 3
    resp = s.Compact(
        pb.CompactRequest(
            run_id="cp-compact", summary=summary, keep_last=2, lease_id=lid, checkpoint_label="pc"
        )
    )
    assert resp.status == pb.COMPACT_STATUS_COMPACTED, resp.reason
    assert resp.removed_range.to_seq == records[-1].seq
    assert conv(fold(s, "cp-compact").messages) == [
        ("user", [text("summary: the agent read three files")]),
        *full[-3:],
    ]
    cps = s.ListCheckpoints(pb.ListCheckpointsRequest(run_id="cp-compact")).checkpoints
    assert cps[-1].checkpoint_id == resp.checkpoint_id
    assert cps[-1].trigger == pb.CHECKPOINT_TRIGGER_PRE_COMPACTION
    assert cps[-1].label == "pc"
    after = load(s, "cp-compact")
    assert [r.canonical for r in after[: len(records)]] == [r.canonical for r in records]
    assert after[-1].rebase.reason == "compaction"
    # nothing left to fold into a summary
    again = s.Compact(
        pb.CompactRequest(run_id="cp-compact", summary=summary, keep_last=50, lease_id=lid)
    )
    assert (again.status, again.reason) == (pb.COMPACT_STATUS_REJECTED, "nothing_to_compact")
    bad = pb.CompactRequest(
        run_id="cp-compact",
        summary=[pb.Message(role="assistant", content_json=blocks(text("x")))],
        lease_id=lid,
    )
    assert code_of(lambda: s.Compact(bad)) == "invalid_record"
    lease.close()


def test_compaction_of_an_empty_history_is_rejected(s: pbg.JournalServiceStub) -> None:
    call, lease = _open(s, "cp-empty", "/w", prompt=b"")
    resp = s.Compact(
        pb.CompactRequest(run_id="cp-empty", summary=[user("s")], lease_id=lease.lease_id)
    )
    assert (resp.status, resp.reason) == (pb.COMPACT_STATUS_REJECTED, "empty_history")
    call.cancel()


def test_fork_starts_a_new_run_with_lineage_and_leaves_the_source_untouched(
    s: pbg.JournalServiceStub,
) -> None:
    lease = build(s, "cp-src", turns=2)
    mark = s.Checkpoint(pb.CheckpointRequest(run_id="cp-src")).checkpoint
    lease.append(lease.assistant("more"))
    lease.append(lease.result("more"))
    lease.append(lease.assistant())
    source = load(s, "cp-src")
    fork = s.Fork(
        pb.ForkRequest(
            run_id="cp-src",
            checkpoint_id=mark.checkpoint_id,
            new_run_id="cp-fork",
            labels={"branch": "b"},
        )
    )
    assert fork.run_id == "cp-fork"
    recs = load(s, "cp-fork")
    assert [r.seq for r in recs] == [1, 2]
    lin = recs[0].meta.lineage
    assert (lin.forked_from_run_id, lin.forked_from_checkpoint_id, lin.forked_at_seq) == (
        "cp-src",
        mark.checkpoint_id,
        mark.seq,
    )
    assert dict(recs[0].meta.labels) == {"branch": "b"}
    assert recs[1].rebase.reason == "fork"
    assert recs[1].rebase.checkpoint_hash == mark.hash
    cp_msgs = conv(s.Fold(pb.FoldRequest(run_id="cp-fork")).state.messages)
    assert len(cp_msgs) == mark.message_count
    assert load(s, "cp-src") == source
    # fork of the head, with a generated id; the fork can be opened and written
    head = s.Fork(pb.ForkRequest(run_id="cp-src"))
    assert conv(head.state.messages) == conv(fold(s, "cp-src").messages)
    w = until_unlocked(lambda: Lease(s, head.run_id, mode=pb.OPEN_MODE_RESUME))
    w.append(w.assistant())
    w.close()
    assert code_of(lambda: s.Fork(pb.ForkRequest(run_id="cp-src", new_run_id="cp-fork"))) == (
        "session_exists"
    )
    lease.close()


def test_restore_into_a_writer_in_another_directory_warns_cwd_mismatch(
    s: pbg.JournalServiceStub,
) -> None:
    call, lease = _open(s, "cp-cwd", "/home/a")
    mark = s.Checkpoint(pb.CheckpointRequest(run_id="cp-cwd")).checkpoint
    assert mark.cwd == "/home/a"
    call.cancel()
    call, lease = until_unlocked(lambda: _open(s, "cp-cwd", "/home/b"))
    resp = s.Restore(
        pb.RestoreRequest(
            run_id="cp-cwd", checkpoint_id=mark.checkpoint_id, lease_id=lease.lease_id
        )
    )
    assert [w.code for w in resp.warnings] == ["cwd_mismatch"]
    assert "/home/a" in resp.warnings[0].message
    call.cancel()


def test_watch_shows_checkpoint_events_and_the_rebase_in_order(
    s: pbg.JournalServiceStub,
) -> None:
    lease = build(s, "cp-watch", turns=1)
    last = lease.seq
    events: list[pb.WatchResponse] = []
    # from the last stored record: once it arrives the replay is over and the Watch is live
    # (an event that happens during the replay comes after the replayed records, see
    # docs/protocol.md Watch; a loaded run took the checkpoint before the replay ended)
    watch = s.Watch(pb.WatchRequest(run_id="cp-watch", from_seq=last))

    def reader() -> None:
        try:
            for ev in watch:
                events.append(ev)
        except grpc.RpcError:
            pass

    t = threading.Thread(target=reader)
    t.start()
    wait_until(lambda: len(events) >= 1, what="the replayed last record")
    assert events[0].record.seq == last
    del events[0]
    mark = s.Checkpoint(pb.CheckpointRequest(run_id="cp-watch")).checkpoint
    lease.append(lease.assistant())
    s.Restore(
        pb.RestoreRequest(
            run_id="cp-watch", checkpoint_id=mark.checkpoint_id, lease_id=lease.lease.lease_id
        )
    )
    s.DeleteCheckpoint(
        pb.DeleteCheckpointRequest(run_id="cp-watch", checkpoint_id=mark.checkpoint_id)
    )
    end = pb.TerminalPayload(reason="suspended")
    lease.append(pb.Record(seq=lease.seq + 2, ts=TS, terminal=end))
    wait_until(lambda: len(events) >= 6, what="six watch events")
    watch.cancel()
    t.join()
    kinds = [
        f"cp:{e.checkpoint.kind}:{e.checkpoint.checkpoint.trigger}"
        if e.HasField("checkpoint")
        else f"rec:{e.record.WhichOneof('payload')}"
        for e in events
    ]
    assert kinds == [
        f"cp:created:{pb.CHECKPOINT_TRIGGER_MANUAL}",
        "rec:assistant",
        f"cp:created:{pb.CHECKPOINT_TRIGGER_PRE_RESTORE}",
        "rec:rebase",
        f"cp:deleted:{pb.CHECKPOINT_TRIGGER_MANUAL}",
        "rec:terminal",
    ]
    lease.close()


def test_history_pages_are_self_paired_and_cover_the_conversation(
    s: pbg.JournalServiceStub,
) -> None:
    build(s, "cp-history", turns=6).close()
    total = s.History(pb.HistoryRequest(run_id="cp-history", limit=0))
    assert total.total == 14
    assert not total.messages
    seen: Conversation = []
    offset = 0
    while offset < total.total:
        p = s.History(pb.HistoryRequest(run_id="cp-history", offset=offset, limit=3))
        assert p.offset == offset
        assert p.next_offset > offset
        page = conv(p.messages)
        assert not any(b["type"] == "tool_result" for b in page[0][1])
        seen.extend(page)
        offset = p.next_offset
    assert seen == conv(fold(s, "cp-history").messages)
    # an offset inside a tool round aligns back to the tool_use
    inside = s.History(pb.HistoryRequest(run_id="cp-history", offset=2, limit=1))
    assert (inside.offset, inside.next_offset) == (1, 3)
    # a dormant run's pages are cached until the run changes
    more = until_unlocked(lambda: Lease(s, "cp-history", mode=pb.OPEN_MODE_RESUME))
    more.append(
        pb.Record(
            seq=more.next_seq(), ts=TS, user=pb.UserPayload(content_json=blocks(text("and?")))
        )
    )
    more.close()
    tail = s.History(pb.HistoryRequest(run_id="cp-history", offset=13, limit=5))
    assert (tail.total, tail.offset, tail.next_offset) == (15, 13, 15)
    assert conv(tail.messages)[-1] == ("user", [text("and?")])


def test_deleting_a_run_deletes_its_colocated_checkpoints(
    s: pbg.JournalServiceStub, daemon: Daemon
) -> None:
    build(s, "cp-gone").close()
    until_unlocked(lambda: s.Checkpoint(pb.CheckpointRequest(run_id="cp-gone")))
    cp_dir = daemon.data_dir / "sessions" / "cp-gone" / "checkpoints"
    assert len([p for p in cp_dir.iterdir() if not p.name.startswith("fold-")]) == 1
    assert until_unlocked(lambda: s.Delete(pb.DeleteRequest(run_id="cp-gone"))).deleted
    assert not cp_dir.exists()


def test_retention_evicts_the_oldest_and_a_separate_directory_outlives_nothing(
    tmp_path: Path,
) -> None:
    cp_root = tmp_path / "cps"
    with Daemon(tmp_path, "file", "--checkpoint-max", "2", "--checkpoint-dir", str(cp_root)) as d:
        s2 = stub(d.target)
        lease = build(s2, "cp-keep")
        ids = [
            s2.Checkpoint(pb.CheckpointRequest(run_id="cp-keep", label=str(i))).checkpoint
            for i in range(4)
        ]
        listed = s2.ListCheckpoints(pb.ListCheckpointsRequest(run_id="cp-keep")).checkpoints
        assert [c.checkpoint_id for c in listed] == [c.checkpoint_id for c in ids[-2:]]
        assert sorted(p.name for p in (cp_root / "cp-keep").iterdir()) == [
            f"{c.checkpoint_id}.json" for c in ids[-2:]
        ]
        assert not (d.data_dir / "sessions" / "cp-keep" / "checkpoints").exists()
        lease.close()
        assert until_unlocked(lambda: s2.Delete(pb.DeleteRequest(run_id="cp-keep"))).deleted
        assert not (cp_root / "cp-keep").exists()


def test_an_open_during_a_daemon_held_restore_is_locked_naming_the_daemon(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with Daemon(tmp_path, "file", data_dir=data) as d:
        s2 = stub(d.target)
        build(s2, "cp-daemon-held").close()
        mark = until_unlocked(
            lambda: s2.Checkpoint(pb.CheckpointRequest(run_id="cp-daemon-held"))
        ).checkpoint
    # the rebase is this daemon's first journal write: it waits there until the test has
    # tried its Open (a gate, not a stall of some time, which a loaded machine can outlast)
    gate = tmp_path / "rebase-gate"
    held = {"JOURNALD_FAILPOINTS": f"before_write=wait:{gate}@1"}
    with Daemon(tmp_path, "file", data_dir=data, env=held) as d:
        s2 = stub(d.target)
        future = s2.Restore.future(
            pb.RestoreRequest(run_id="cp-daemon-held", checkpoint_id=mark.checkpoint_id)
        )
        # the Restore holds the run once this daemon has flocked its journal (the lock file
        # then names its pid), and its rebase write waits at the gate
        lock = data / "sessions" / "cp-daemon-held" / "journal.lock"
        wait_until(
            lambda: (
                Path(f"{gate}.reached").exists() and lock.read_text().startswith(f"pid={d.pid} ")
            ),
            what="the Restore to take the run and reach its rebase write",
        )
        try:
            with pytest.raises(grpc.RpcError) as info:
                Lease(s2, "cp-daemon-held", mode=pb.OPEN_MODE_RESUME)
        finally:
            gate.touch()
        detail = error_of(info.value)
        assert detail.code == "locked"
        assert detail.metadata["holder_name"] == "journald daemon"
        assert detail.metadata["holder_pid"] == str(d.pid)
        assert future.result(timeout=60).to_messages == mark.message_count
