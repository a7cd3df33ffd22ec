"""The Python client's checkpoint API against a real daemon (file backend): checkpoints,
restore, compaction by the lease holder, fork, export/import, history paging, attachments,
and the typed errors of each."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP

NO_SUCH_SHA = "0" * 64


pytestmark = pytest.mark.shared_daemon("file")


@pytest.fixture
def client(daemon: Daemon) -> Iterator[jc.Client]:
    with jc.connect(str(daemon.socket), name="cp-test") as c:
        yield c


def turns(run: jc.Run, n: int, tools: bool = False) -> None:
    """``n`` finished turns after the prompt (user/assistant, with a tool call if asked)."""
    for i in range(n):
        if tools:
            call: dict[str, Any] = {
                "type": "tool_use",
                "id": f"{run.run_id}-t{i}",
                "name": "read",
                "input": {},
            }
            run.assistant([call], stop_reason="tool_use")
            run.tool_result(call["id"], f"result {i}")
        run.assistant(f"answer {i}", stop_reason="end_turn")
        run.user(f"question {i + 1}")


def finished_run(client: jc.Client, run_id: str, n: int = 3, tools: bool = False) -> None:
    with client.start(run_id, FP, "question 0") as run:
        turns(run, n, tools)


def test_checkpoint_lists_oldest_first_and_delete_is_idempotent(client: jc.Client) -> None:
    finished_run(client, "cp-list")
    first = client.checkpoint("cp-list", label="one")
    assert (first.run_id, first.trigger, first.label) == ("cp-list", "manual", "one")
    assert first.seq == client.fold("cp-list").last_seq
    assert first.message_count == 7
    assert first.model == FP.model
    assert len(first.hash) == 64
    second = client.checkpoint("cp-list")
    assert client.checkpoints("cp-list") == [first, second]
    assert client.delete_checkpoint("cp-list", first.checkpoint_id) is True
    assert client.delete_checkpoint("cp-list", first.checkpoint_id) is False
    assert [m.checkpoint_id for m in client.checkpoints("cp-list")] == [second.checkpoint_id]


def test_the_holder_compacts_restores_and_keeps_appending_without_seq_conflict(
    client: jc.Client,
) -> None:
    with client.start("cp-holder", FP, "question 0") as run:
        turns(run, 4)
        before = run.last_seq
        result = run.compact("The story so far: four questions answered.", keep_last=2)
        assert result.compacted, result
        assert result.ack is not None
        assert result.ack.seq == before + 1
        assert result.removed_range == (1, before)
        assert run.last_seq == result.ack.seq
        assert run.state.messages[0]["content"] == [
            {"type": "text", "text": "The story so far: four questions answered."}
        ]
        assert len(run.state.messages) < 9

        run.assistant("answer after compaction", stop_reason="end_turn")  # no seq_conflict
        run.user("one more")
        assert run.last_seq == result.ack.seq + 2

        pre = next(m for m in client.checkpoints("cp-holder") if m.trigger == "pre_compaction")
        assert pre.checkpoint_id == result.checkpoint_id
        restored = run.restore(pre.checkpoint_id)
        assert restored.to_messages == pre.message_count
        assert restored.pre_restore_checkpoint_id
        assert run.last_seq == restored.ack.seq
        assert len(run.state.messages) == pre.message_count
        run.assistant("answer after restore", stop_reason="end_turn")

        taken = run.checkpoint("by the holder")
        assert taken.seq == run.last_seq
        rejected = run.compact("nothing", keep_last=1000)
        assert (rejected.status, rejected.reason, rejected.ack) == (
            "rejected",
            "nothing_to_compact",
            None,
        )
        run.user("still appending")
    assert client.verify("cp-holder").last_seq == run.last_seq


def test_a_held_run_refuses_compaction_by_anyone_but_its_holder(
    daemon: Daemon, client: jc.Client
) -> None:
    with client.start("cp-held", FP, "question 0", name="holder-bot") as run:
        turns(run, 2)
        with jc.connect(str(daemon.socket)) as other, pytest.raises(jc.Locked) as info:
            other.compact("cp-held", "summary")
        assert info.value.holder_name == "holder-bot"


def test_export_import_and_restore_through_the_client_reproduce_the_checkpoint(
    client: jc.Client,
) -> None:
    finished_run(client, "cp-src", n=3, tools=True)
    cp = client.checkpoint("cp-src", label="to ship")
    data = client.export_checkpoint("cp-src", cp.checkpoint_id)
    assert data

    finished_run(client, "cp-dst", n=1)
    imported = client.import_checkpoint("cp-dst", data)
    assert imported.run_id == "cp-dst"
    assert imported.trigger == "import"
    assert imported.checkpoint_id != cp.checkpoint_id
    assert (imported.hash, imported.message_count) == (cp.hash, cp.message_count)

    result = client.restore("cp-dst", imported.checkpoint_id, checkpoint=False)
    assert result.pre_restore_checkpoint_id == ""
    assert result.to_messages == cp.message_count
    assert client.fold("cp-dst").messages == client.fold("cp-src").messages
    again = client.export_checkpoint("cp-dst", imported.checkpoint_id)
    assert client.import_checkpoint("cp-src", again).hash == cp.hash


def test_fork_starts_a_labelled_run_from_a_checkpoint_and_leaves_the_source_alone(
    client: jc.Client,
) -> None:
    finished_run(client, "cp-fork-src", n=2)
    cp = client.checkpoint("cp-fork-src")
    new_id, state = client.fork(
        "cp-fork-src", checkpoint_id=cp.checkpoint_id, new_run_id="cp-fork", labels={"k": "v"}
    )
    assert new_id == "cp-fork" == state.run_id
    assert state.labels == {"k": "v"}
    assert state.lineage is not None
    assert state.lineage["forked_from_run_id"] == "cp-fork-src"
    assert state.lineage["forked_from_checkpoint_id"] == cp.checkpoint_id
    assert state.messages == client.fold("cp-fork-src").messages
    head_id, head = client.fork("cp-fork-src")
    assert head_id.startswith("fork-")
    assert head.messages == state.messages
    with client.resume("cp-fork", FP) as run:
        run.assistant("the fork goes on", stop_reason="end_turn")


def test_history_pages_through_a_long_run_visiting_every_message_once(
    client: jc.Client,
) -> None:
    finished_run(client, "cp-history", n=12, tools=True)
    everything = client.governed_messages("cp-history").messages
    assert len(everything) > 40

    assert client.history("cp-history", limit=0).total == len(everything)
    seen = []
    offset = 0
    while True:
        page = client.history("cp-history", offset, 7)
        assert page.total == len(everything)
        assert page.offset == offset  # each page starts where the last ended
        seen.extend(page.messages)
        if page.next_offset >= page.total:
            break
        assert page.next_offset > offset
        offset = page.next_offset
    assert seen == everything
    assert list(client.iter_history("cp-history", page=5)) == everything


def test_attachments_are_stored_once_and_read_back_by_sha256(client: jc.Client) -> None:
    finished_run(client, "cp-att", n=1)
    data = bytes(range(256)) * 40
    ref = client.put_attachment("cp-att", data, "application/octet-stream", name="blob.bin")
    assert ref.sha256 == hashlib.sha256(data).hexdigest()
    assert (ref.size, ref.existed) == (len(data), False)
    assert ref.block["type"] == "attachment"
    assert ref.block["sha256"] == ref.sha256
    assert ref.block["name"] == "blob.bin"
    assert client.put_attachment("cp-att", data, "application/octet-stream").existed
    assert client.get_attachment("cp-att", ref.sha256) == data


def test_each_failure_is_its_typed_error(client: jc.Client) -> None:
    finished_run(client, "cp-err-a", n=1)
    finished_run(client, "cp-err-b", n=1)
    gone = client.checkpoint("cp-err-a")
    client.delete_checkpoint("cp-err-a", gone.checkpoint_id)
    with pytest.raises(jc.CheckpointNotFound):
        client.restore("cp-err-a", gone.checkpoint_id)
    with pytest.raises(jc.CheckpointNotFound):
        client.export_checkpoint("cp-err-a", gone.checkpoint_id)

    theirs = client.checkpoint("cp-err-a")
    with pytest.raises(jc.SessionMismatch) as mismatch:
        client.restore("cp-err-b", theirs.checkpoint_id)
    assert mismatch.value.metadata["owner"] == "cp-err-a"

    with pytest.raises(jc.CheckpointImportInvalid):
        client.import_checkpoint("cp-err-b", b"not an export")
    with pytest.raises(jc.AttachmentNotFound):
        client.get_attachment("cp-err-b", NO_SUCH_SHA)
    with pytest.raises(jc.SessionNotFound):
        client.checkpoints("cp-no-such-run")

    with client.start("cp-busy", FP, "go") as run:
        call = {"type": "tool_use", "id": "busy-1", "name": "read", "input": {}}
        run.assistant([call], stop_reason="tool_use")
        with pytest.raises(jc.TurnRunning):
            run.checkpoint()
        with pytest.raises(jc.TurnRunning):
            client.fork("cp-busy")
        result = run.compact("summary")
        assert (result.status, result.reason) == ("rejected", "turn_running")
        run.tool_result("busy-1", "done")  # the writer's seq is untouched by the refusal


def test_after_a_reconnect_the_writers_state_is_the_new_leases(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as daemon, jc.connect(str(daemon.socket)) as client:
        run = client.start("cp-reconnect", FP, "hi")
        run.user("before the restart")
        assert run.state.last_seq == 1
        daemon.restart()
        run.user("after the restart")
        assert run.reconnects == 1
        assert run.state.last_seq == 2  # the state the re-open granted, not the first one
        assert run.state.messages[-1]["content"][-1]["text"] == "before the restart"
        run.close()


async def test_the_async_holder_compacts_and_pages_history_like_the_sync_one(
    daemon: Daemon, client: jc.Client
) -> None:
    finished_run(client, "cp-aio", n=4)
    async with await jc.connect_async(str(daemon.socket)) as aio:
        run = await aio.resume("cp-aio", FP)
        async with run:
            result = await run.compact(
                [{"role": "user", "content": "summary of four turns"}], keep_last=2
            )
            assert result.compacted
            assert result.ack is not None
            assert run.last_seq == result.ack.seq
            await run.assistant("next", stop_reason="end_turn")
            restored = await run.restore(result.checkpoint_id, checkpoint=False)
            assert run.last_seq == restored.ack.seq
            await run.user("after restore")
            cp = await run.checkpoint("async")
        assert [m.checkpoint_id for m in await aio.checkpoints("cp-aio")][-1] == cp.checkpoint_id
        paged = [m async for m in aio.iter_history("cp-aio", page=3)]
        assert paged == (await aio.governed_messages("cp-aio")).messages
        data = await aio.export_checkpoint("cp-aio", cp.checkpoint_id)
        imported = await aio.import_checkpoint("cp-aio", data)
        assert imported.hash == cp.hash
        assert await aio.delete_checkpoint("cp-aio", imported.checkpoint_id)
        new_id, _ = await aio.fork("cp-aio", checkpoint_id=cp.checkpoint_id)
        assert (await aio.history(new_id, limit=0)).total == cp.message_count
        with pytest.raises(jc.AttachmentNotFound):
            await aio.get_attachment("cp-aio", NO_SUCH_SHA)
        ref = await aio.put_attachment("cp-aio", b"png?", "image/png")
        assert await aio.get_attachment("cp-aio", ref.sha256) == b"png?"
        again = await aio.restore("cp-aio", cp.checkpoint_id)
        assert again.pre_restore_checkpoint_id
        compacted = await aio.compact("cp-aio", "short", keep_last=0, label="lbl")
        assert compacted.compacted, compacted
        pre = (await aio.checkpoints("cp-aio"))[-1]
        assert (pre.checkpoint_id, pre.trigger, pre.label) == (
            compacted.checkpoint_id,
            "pre_compaction",
            "lbl",
        )
        assert (await aio.fold("cp-aio")).messages[0]["content"][0]["text"] == "short"
