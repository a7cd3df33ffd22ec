"""A Fork of any size answers (issue 31 item 5, "refused means nothing written").

Before, Fork answered with the new run's whole folded state, and a conversation over the
daemon's max message size was refused at the edge with ``response_too_large`` after the new
run was written: an error, and a run anyway. Now the answer holds the messages asked for
(``ForkRequest.message_window``), or the largest clean tail of them that fits, with
``messages_offset``; the clients page the rest through History.

A daemon with a 1 MiB max message size and a conversation of ~1.6 MB (24 tool rounds of
64 KiB results) stands in for the 16 MiB default and a 64 MiB conversation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import journald_client as jc
import pytest
from journald_client.pb import journal_pb2 as pb

from journald.core.paging import answers_previous, tail_start
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.rpc import decoded, history_pages, stub

CAP_BYTES = 1024 * 1024
RESULT_BYTES = 64 * 1024
ROUNDS = 24
CHECKPOINT: list[str] = []  # the id of the run's checkpoint, once the fixture took it


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("fork"), "file", "--max-message-bytes", str(CAP_BYTES))
    d.start()
    try:
        with jc.connect(str(d.socket)) as client:
            with client.start("reads", FP, "read every file") as run:
                for i in range(ROUNDS):
                    tid = f"read_{i}"
                    call = {"type": "tool_use", "id": tid, "name": "read_file", "input": "{}"}
                    run.assistant([call], stop_reason="tool_use")
                    run.tool_result(tid, f"file {i} " + "y" * RESULT_BYTES)
                run.assistant("I read them all.", stop_reason="end_turn")
            CHECKPOINT.append(client.checkpoint("reads", label="after the reads").checkpoint_id)
        yield d
    finally:
        d.stop()


def whole(d: Daemon, run_id: str) -> list[dict[str, object]]:
    return history_pages(stub(d.target), run_id, pb.HISTORY_VIEW_STATE, page=4)


def test_a_fork_over_the_max_message_size_answers_its_newest_messages_that_fit(
    daemon: Daemon,
) -> None:
    want = whole(daemon, "reads")
    assert sum(len(str(m)) for m in want) > CAP_BYTES  # the whole answer could not be sent
    resp = stub(daemon.target).Fork(pb.ForkRequest(run_id="reads", new_run_id="raw"))
    st = resp.state
    assert resp.ByteSize() <= CAP_BYTES
    assert st.messages_total == len(want)
    assert 0 < st.messages_offset < len(want)
    assert not answers_previous(want[st.messages_offset])  # a clean tool-call boundary
    assert decoded(st.messages) == want[st.messages_offset :]
    assert whole(daemon, "raw") == want  # and the fork is the whole conversation


def test_the_client_assembles_the_whole_conversation_of_a_fork_over_the_limit(
    daemon: Daemon,
) -> None:
    # the client's window (1000) holds every message of this run: the daemon cuts it to fit
    with jc.connect(str(daemon.socket)) as client:
        cp = CHECKPOINT[-1]
        run_id, state = client.fork("reads", checkpoint_id=cp, new_run_id="sync")
        assert run_id == "sync"
        assert state.messages == whole(daemon, "reads")
        assert state.messages == client.fold("sync").messages
        assert state.lineage is not None
        assert state.lineage["forked_from_checkpoint_id"] == cp

    async def fork_async() -> list[dict[str, object]]:
        client = await jc.connect_async(str(daemon.socket), reconnect_timeout=0)
        try:
            _, st = await client.fork("reads", new_run_id="async")
            return st.messages
        finally:
            await client.close()

    assert asyncio.run(fork_async()) == whole(daemon, "reads")


def test_a_windowed_fork_answers_the_newest_messages_from_a_clean_boundary(
    daemon: Daemon,
) -> None:
    want = whole(daemon, "reads")
    req = pb.ForkRequest(run_id="reads", new_run_id="window", message_window=10)
    st = stub(daemon.target).Fork(req).state
    assert st.messages_offset == tail_start(want, 10)
    assert decoded(st.messages) == want[st.messages_offset :]
    assert 10 <= len(st.messages) <= 11  # a tool round is never split
    with jc.connect(str(daemon.socket)) as client:
        _, state = client.fork("reads", new_run_id="window2", message_window=10)
        assert state.messages == want[tail_start(want, 10) :]
        assert client.fold("window2").messages == want  # the fork itself is whole


def test_a_fork_whose_answer_cannot_fit_even_without_messages_leaves_no_run_behind(
    daemon: Daemon,
) -> None:
    # framework state travels with a fork of the head and is always sent whole: three inline
    # values of 400 KiB are over the 1 MiB answer on their own, whatever the message window
    with jc.connect(str(daemon.socket)) as client:
        with client.start("heavy", FP, "remember a lot") as run:
            for i in range(3):  # one request each: a request has the same limit
                run.append_many([jc.Entry.state("agent", f"k{i}", "bytes", b"s" * 400 * 1024)])
            run.assistant("noted", stop_reason="end_turn")
        with pytest.raises(jc.ResponseTooLarge) as err:
            client.fork("heavy", new_run_id="heavy-fork", message_window=10)
        assert "--max-message-bytes" in str(err.value)  # the advice that helps here
        with pytest.raises(jc.SessionNotFound):
            client.fold("heavy-fork", messages=False)
        assert "heavy-fork" not in {r.run_id for r in client.list()}
