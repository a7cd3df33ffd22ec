"""A paged rebase read through Load and Watch names its message pages (issue 31): the typed
``RebasePayload.pages`` and the Python client's ``JournalRecord.pages`` are the stored
record's references, and their counts with the inline tail make the whole conversation;
an inline rebase (the golden compaction) has none, and a writer cannot send references
(docs/protocol.md#message-pages)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import journald_client as jc
import pytest
from journald_client.pb import journal_pb2 as pb

from journald.cli.commands import record_summary
from journald.core.records import decode
from journald.server.convert import record_to_pb
from tests.daemon import Daemon
from tests.integration.cli.test_cli import load_into_daemon
from tests.integration.clientbin.common import FP
from tests.integration.rpc import Lease, error_of, stub

pytestmark = pytest.mark.shared_daemon("file")

READ = 200 * 1024  # each tool turn closes a page of its own
READS = 3
GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "rebase_compaction.jsonl"


def restored_from_pages(client: jc.Client, run_id: str) -> list[dict[str, Any]]:
    """A run of three large reads, checkpointed, grown, then restored; the checkpoint's
    conversation (what the restore's rebase holds)."""
    with client.start(run_id, FP, "read") as run:
        for i in range(READS):
            call = {"type": "tool_use", "id": f"r{i}", "name": "read", "input": "{}"}
            run.assistant([call], stop_reason="tool_use")
            run.tool_result(f"r{i}", f"{run_id} {i} " + "z" * READ)
        run.assistant("read", stop_reason="end_turn")
    cp = client.checkpoint(run_id, label="reads")
    want = client.fold(run_id).messages
    with client.resume(run_id, FP) as run:
        run.user("more")
    client.restore(run_id, cp.checkpoint_id)
    return want


def refs(rows: Any) -> list[tuple[str, int, int]]:
    out = []
    for r in rows:
        if isinstance(r, dict):
            out.append((r["sha256"], r["count"], r["size"]))
        else:
            out.append((r.sha256, r.count, r.size))
    return out


def test_load_and_watch_of_a_run_restored_from_a_paged_checkpoint_name_its_pages(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as client:
        want = restored_from_pages(client, "paged-refs")
        loaded = [m.record for m in stub(daemon.target).Load(pb.LoadRequest(run_id="paged-refs"))]
        rec = loaded[-1]
        stored = json.loads(rec.canonical)["rebase"]
        assert stored["reason"] == "restore"
        assert len(stored["pages"]) >= 2
        # the typed payload of Load: the stored references, then the tail
        assert refs(rec.rebase.pages) == refs(stored["pages"])
        assert len(rec.rebase.messages) == len(stored["messages"])
        assert sum(p.count for p in rec.rebase.pages) + len(rec.rebase.messages) == len(want)
        # the Python client, on Load and on Watch (whose payload is in the canonical bytes)
        via_load = list(client.load("paged-refs"))[-1]
        with client.watch("paged-refs") as tailing:
            via_watch = [r for _, r in zip(range(len(loaded)), tailing, strict=False)][-1]
        assert via_load.seq == via_watch.seq == rec.seq
        assert refs(via_load.pages) == refs(via_watch.pages) == refs(stored["pages"])
        assert via_load.paged_messages + len(via_load.payload["messages"]) == len(want)
        # each page read back (GetAttachment), then the tail, is the checkpoint's conversation
        conversation = [
            m
            for ref in via_load.pages
            for m in ref.messages(client.get_attachment("paged-refs", ref.sha256))
        ]
        assert conversation + via_load.payload["messages"] == want
        # `journald tail` counts the pages' messages, not only the tail's
        line = record_summary(via_load, 200)
        assert f"restore: {len(want)} messages ({len(stored['pages'])} pages" in line


def test_an_inline_rebase_read_through_load_and_watch_names_no_pages(daemon: Daemon) -> None:
    recs = [decode(line) for line in GOLDEN.read_bytes().split(b"\n")[:-1]]
    load_into_daemon(daemon.target, recs)
    run_id = recs[0].payload["run_id"]
    rebase = next(r for r in recs if r.kind == "rebase")
    loaded = [m.record for m in stub(daemon.target).Load(pb.LoadRequest(run_id=run_id))]
    typed = next(r for r in loaded if r.WhichOneof("payload") == "rebase")
    assert typed.canonical == rebase.raw  # the golden bytes, unchanged
    assert list(typed.rebase.pages) == []
    assert len(typed.rebase.messages) == len(rebase.payload["messages"])
    with jc.connect(str(daemon.socket)) as client:
        with client.watch(run_id) as tailing:
            watched = [r for _, r in zip(range(len(recs)), tailing, strict=False)]
        got = next(r for r in watched if r.kind == "rebase")
        assert got.pages == ()
        assert got.paged_messages == 0
        assert "pages" not in record_summary(got, 200)


def test_an_append_of_a_rebase_that_sends_page_references_is_refused(daemon: Daemon) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "sent-refs")
    ref = pb.PageRef(sha256="a" * 64, count=2, size=300)
    rebase = record_to_pb(decode(GOLDEN.read_bytes().split(b"\n")[7]))
    assert rebase.WhichOneof("payload") == "rebase"
    rebase.seq = 2
    rebase.rebase.reason = "edit"
    rebase.rebase.ClearField("covered")
    rebase.rebase.pages.append(ref)
    with pytest.raises(grpc.RpcError) as refused:
        lease.append(rebase)
    err = error_of(refused.value)
    assert err.code == "invalid_record"
    assert err.metadata["field"] == "records[0].rebase.pages"
    assert err.metadata["seq"] == "2"
    rebase.rebase.ClearField("pages")  # the same rebase, its conversation inline: accepted
    assert [a.seq for a in lease.append(rebase).acks] == [2]
    lease.close()


def test_an_append_of_a_rebase_that_sends_page_reference_chunks_is_refused(
    daemon: Daemon,
) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "sent-chunks")
    ref = pb.PageRef(sha256="b" * 64, count=256, size=13_000)
    rebase = record_to_pb(decode(GOLDEN.read_bytes().split(b"\n")[7]))
    rebase.seq = 2
    rebase.rebase.reason = "edit"
    rebase.rebase.ClearField("covered")
    rebase.rebase.page_chunks.append(ref)
    with pytest.raises(grpc.RpcError) as refused:
        lease.append(rebase)
    err = error_of(refused.value)
    assert err.code == "invalid_record"
    assert err.metadata["field"] == "records[0].rebase.page_chunks"
    assert "written by the daemon" in err.message
    rebase.rebase.ClearField("page_chunks")  # the same rebase, its conversation inline
    assert [a.seq for a in lease.append(rebase).acks] == [2]
    lease.close()
