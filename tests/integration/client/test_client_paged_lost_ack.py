"""A writer's ``edit`` rebase long enough to be stored paged (docs/protocol.md#message-pages),
sent with the ``completed`` terminal, whose acknowledgement is lost: the daemon dies after
the batch is durable, so re-opening the run is refused as ``completed`` and the writer must
tell from what ``Load`` returns whether the stored records are the ones it sent. The stored
rebase holds page references and a tail where the sent one held the whole conversation
inline; it is still this writer's own write (docs/protocol.md#retries)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import journald_client as jc
import pytest
from journald_client import codec

from tests.daemon import Daemon
from tests.integration.client.test_client_open import Background
from tests.integration.clientbin.common import FP

RESULT_BYTES = 200 * 1024
# the first journal write is the run's meta at start, the second the edit and its terminal
KILL_AT_THE_EDIT = {"JOURNALD_FAILPOINTS": "after_fsync_before_advance=kill@2"}


def edited_conversation(tools: int, word: str = "r") -> list[dict[str, Any]]:
    """The prompt, then ``tools`` tool calls each answered with a 200 KB result, then a reply:
    several pages' worth."""
    out: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for i in range(tools):
        call = {"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"i": i}}
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": word * RESULT_BYTES}
        out.append({"role": "assistant", "content": [call]})
        out.append({"role": "user", "content": [result]})
    out.append({"role": "assistant", "content": "done"})
    return out


def edit_and_complete(word: str = "r") -> list[jc.Entry]:
    return [jc.Entry.rebase(edited_conversation(4, word)), jc.Entry.terminal("completed")]


def crashed_and_restarted(daemon: Daemon) -> None:
    assert daemon.proc is not None
    daemon.proc.wait(60)  # the failpoint killed it once the batch was durable
    daemon.env = None
    daemon.start()


def test_a_completed_paged_edit_whose_ack_was_lost_is_adopted_as_this_writers_own(
    tmp_path: Path,
) -> None:
    daemon = Daemon(tmp_path, "file", env=KILL_AT_THE_EDIT).start()
    client = jc.Client(str(daemon.socket), reconnect_timeout=60)
    try:
        run = client.start("paged-lost-ack", FP, "hi")
        ending = Background(lambda: run.append_many(edit_and_complete()))
        crashed_and_restarted(daemon)
        acks = cast(list[jc.Ack], ending.join())
        stored = list(client.load("paged-lost-ack", from_seq=2))
        assert [r.kind for r in stored] == ["rebase", "terminal"]
        assert len(stored[0].pages) >= 2  # stored paged, unlike what was sent
        assert [(a.seq, a.hash) for a in acks] == [(r.seq, r.hash) for r in stored]
        assert client.fold("paged-lost-ack").completed
        # another writer's conversation at those seqs is still not taken for ours
        other = codec.stamp(edit_and_complete("x"), 2)
        with pytest.raises(jc.Completed):
            run._send(other)
    finally:
        client.close()
        daemon.kill9()


def test_a_pipelined_writer_adopts_its_completed_paged_edit_whose_ack_was_lost(
    tmp_path: Path,
) -> None:
    daemon = Daemon(tmp_path, "file", env=KILL_AT_THE_EDIT).start()
    client = jc.Client(str(daemon.socket), reconnect_timeout=60)
    try:
        run = client.start("paged-lost-ack-piped", FP, "hi")
        writer = run.pipelined()
        pending = writer.append_many(edit_and_complete())
        crashed_and_restarted(daemon)
        acks = pending.ack(60)
        stored = list(client.load("paged-lost-ack-piped", from_seq=2))
        assert len(stored[0].pages) >= 2
        assert [(a.seq, a.hash) for a in acks] == [(r.seq, r.hash) for r in stored]
        writer.close()
    finally:
        client.close()
        daemon.kill9()


async def test_an_async_writer_adopts_its_completed_paged_edit_whose_ack_was_lost(
    tmp_path: Path,
) -> None:
    daemon = Daemon(tmp_path, "file", env=KILL_AT_THE_EDIT).start()
    client = await jc.connect_async(str(daemon.socket), reconnect_timeout=60)
    try:
        run = await client.start("paged-lost-ack-aio", FP, "hi")
        ending = asyncio.ensure_future(run.append_many(edit_and_complete()))
        await asyncio.to_thread(crashed_and_restarted, daemon)
        acks = await asyncio.wait_for(ending, 60)
        stored = [r async for r in client.load("paged-lost-ack-aio", from_seq=2)]
        assert len(stored[0].pages) >= 2
        assert [(a.seq, a.hash) for a in acks] == [(r.seq, r.hash) for r in stored]
    finally:
        await client.close()
        daemon.kill9()
