"""The Python clients (sync and asyncio) return every message of a run longer than their
message window: the daemon sends the newest ``MESSAGE_WINDOW`` messages, the client pages the
rest through History (lazily in the sync client, on first read of ``messages``).

Real daemons with a 1 MiB max message size and runs whose folded state is larger, so
an Open or Fold of every message at once (what the clients did before windows) cannot be
answered. The expected lists are paged raw through History in small steps.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import journald_client as jc
import pytest
from journald_client import window
from journald_client.pb import journal_pb2 as pb

from tests.daemon import Daemon
from tests.integration.rpc import decoded, error_of, history_pages, stub, write_long_run

CAP = ("--max-message-bytes", "1MiB")


class Expected:
    """Every message of a run (state and governed view) and its fingerprint, read raw."""

    def __init__(self, target: str, run_id: str) -> None:
        self.messages = history_pages(stub(target), run_id, pb.HISTORY_VIEW_STATE)
        self.governed = history_pages(stub(target), run_id, pb.HISTORY_VIEW_GOVERNED)
        head = stub(target).Fold(pb.FoldRequest(run_id=run_id, message_window=1))
        self.fingerprint = jc.Fingerprint.from_pb(head.state.fingerprint)
        self.whole_bytes = sum(len(json.dumps(m)) for m in self.messages)


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon holding run "long" (~3,000 messages, ~1.4 MB); tests may append to it."""
    d = Daemon(tmp_path_factory.mktemp("client-window"), "file", *CAP).start()
    try:
        write_long_run(stub(d.target), "long", 1500, pad=800)
        yield d
    finally:
        d.stop()


def test_the_sync_client_reads_every_message_of_a_run_longer_than_its_window(
    long_run: Daemon,
) -> None:
    d = long_run
    want = Expected(d.target, "long")
    assert len(want.messages) > 2 * jc.MESSAGE_WINDOW
    assert want.whole_bytes > 1024 * 1024
    with jc.connect(str(d.socket)) as client:
        late = client.fold("long")
    assert late.messages == want.messages  # first read after the client was closed
    with jc.connect(str(d.socket)) as client:
        assert client.fold("long").messages == want.messages
        view = client.governed_messages("long")
        assert view.messages == want.governed
        assert view.state.messages == want.messages
        with client.resume("long", want.fingerprint) as run:
            snapshot = run.state
            assert snapshot.pending is not None  # complete without reading the messages
            assert [c.id for c in snapshot.pending.unanswered] == ["open"]
            # the writer goes on; the earlier messages read later are still the snapshot's
            run.tool_result("open", "done")
            run.user("and now?")
            assert snapshot.messages == want.messages
            assert run.fold().messages[: len(want.messages)] == want.messages
        assert client.fold("long") == client.fold("long")  # equal before and after reading


def test_the_async_client_reads_every_message_of_a_run_longer_than_its_window(
    long_run: Daemon,
) -> None:
    d = long_run
    want = Expected(d.target, "long")
    assert len(want.messages) > 2 * jc.MESSAGE_WINDOW

    async def main() -> None:
        async with await jc.connect_async(str(d.socket)) as client:
            assert (await client.fold("long")).messages == want.messages
            view = await client.governed_messages("long")
            assert view.messages == want.governed
            async with await client.resume("long", want.fingerprint) as run:
                assert run.state.messages == (await run.fold()).messages

    asyncio.run(main())


def test_a_state_read_before_a_compaction_refuses_to_mix_in_the_new_conversation(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file", *CAP) as d:
        write_long_run(stub(d.target), "short", 150)
        want = Expected(d.target, "short")
        with (
            jc.connect(str(d.socket), message_window=40) as client,
            client.resume("short", want.fingerprint) as run,
        ):
            run.tool_result("open", "done")
            before = run.fold()  # its earlier messages are not read yet
            assert run.compact("the story so far", keep_last=10).compacted
            with pytest.raises(jc.ConversationChanged) as info:
                _ = before.messages
            assert "fold()" in str(info.value)
            after = stub(d.target).Fold(pb.FoldRequest(run_id="short")).state
            assert run.fold().messages == run.state.messages == decoded(after.messages)


def test_pages_over_the_max_message_size_are_halved_and_window_zero_is_refused(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file", *CAP) as d:
        write_long_run(stub(d.target), "big", 600, pad=2500)  # ~1,200 messages, ~1.6 MB
        want = Expected(d.target, "big")
        # a page of the clients' size (about PAGE_BYTES) is over the cap
        over_cap = window.PAGE_BYTES // 2500
        with pytest.raises(grpc.RpcError) as over:
            stub(d.target).History(
                pb.HistoryRequest(run_id="big", limit=over_cap, view=pb.HISTORY_VIEW_STATE)
            )
        assert error_of(over.value).code == "response_too_large"
        with jc.connect(str(d.socket)) as client:
            assert client.fold("big").messages == want.messages
            with client.resume("big", want.fingerprint) as run:
                assert run.state.messages == want.messages
        with (
            jc.connect(str(d.socket), message_window=0) as everything,
            pytest.raises(jc.ResponseTooLarge) as info,
        ):
            everything.fold("big")
        assert "message window" in info.value.message
