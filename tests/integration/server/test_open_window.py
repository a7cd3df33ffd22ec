"""Open and Fold answer with a bounded window of messages; History pages the rest.

A real daemon, raw stubs. The run is a few thousand messages: tool rounds (an assistant
tool_use and the user message holding its result, which must never be split), plain
assistant answers and user follow-ups, and an open turn at the end (a pending tool call),
so the window has boundaries to align to and a pending turn that must stay complete.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.core.paging import answers_previous, tail_start
from tests.builders import TS, text, tool_use
from tests.daemon import Daemon
from tests.integration.rpc import (
    Lease,
    blocks,
    decoded,
    error_of,
    history_pages,
    stub,
    until_unlocked,
    write_long_run,
)

ROUNDS = 1500  # ~3,000 messages


def open_first(s: pbg.JournalServiceStub, run_id: str, window: int) -> tuple[Any, pb.Lease]:
    """Open in resume mode with a window; the call (cancel it) and its lease."""
    fold = s.Fold(pb.FoldRequest(run_id=run_id, message_window=1))
    call = s.Open(
        pb.OpenRequest(
            run_id=run_id,
            mode=pb.OPEN_MODE_RESUME,
            fingerprint=fold.state.fingerprint,
            client=pb.ClientInfo(name="window-test", pid=1, host="h", cwd="/"),
            message_window=window,
        )
    )
    return call, next(iter(call)).lease


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, str]]:
    d = Daemon(tmp_path_factory.mktemp("window"), "file").start()
    try:
        write_long_run(stub(d.target), "long", ROUNDS)
        yield d, "long"
    finally:
        d.stop()


def test_open_with_a_window_returns_the_aligned_tail_with_its_offset_and_the_total(
    long_run: tuple[Daemon, str],
) -> None:
    d, run_id = long_run
    s = stub(d.target)
    full = s.Fold(pb.FoldRequest(run_id=run_id)).state
    everything = decoded(full.messages)
    assert len(everything) > 2_900
    assert (full.messages_offset, full.messages_total) == (0, len(everything))
    call, lease = until_unlocked(lambda: open_first(s, run_id, 1000))
    try:
        st = lease.state
        start = tail_start(everything, 1000)
        assert not answers_previous(everything[start])  # a clean boundary
        assert (st.messages_offset, st.messages_total) == (start, len(everything))
        assert len(everything) - start >= 1000
        assert decoded(st.messages) == everything[start:]
        # only the messages are windowed: the pending turn and the counters are complete
        assert st.pending == full.pending
        assert st.pending.unanswered[0].id == "open"
        assert st.counters == full.counters
        assert st.last_seq == full.last_seq
        # History (the fold's own list) gives exactly the messages before the window
        assert history_pages(s, run_id, pb.HISTORY_VIEW_STATE, 700)[:start] == everything[:start]
    finally:
        call.cancel()


def test_fold_windows_the_state_and_the_governed_view_and_history_pages_both_exactly(
    long_run: tuple[Daemon, str],
) -> None:
    d, run_id = long_run
    s = stub(d.target)
    full = until_unlocked(lambda: s.Fold(pb.FoldRequest(run_id=run_id, governed=True)))
    gov = decoded(full.governed_messages)
    # the governed view closes the open call with a synthetic result
    assert full.governance.synthesized_results == 1
    assert (full.governed_offset, full.governed_total) == (0, len(gov))
    part = s.Fold(pb.FoldRequest(run_id=run_id, governed=True, message_window=500))
    everything = decoded(full.state.messages)
    start = part.state.messages_offset
    assert start == tail_start(everything, 500)
    assert decoded(part.state.messages) == everything[start:]
    g_start = part.governed_offset
    assert g_start == tail_start(gov, 500)
    assert (part.governed_total, decoded(part.governed_messages)) == (len(gov), gov[g_start:])
    assert part.governance == full.governance
    assert part.state.pending == full.state.pending
    # dormant run: both views page to exactly what Fold returns whole
    assert history_pages(s, run_id, pb.HISTORY_VIEW_STATE, 700) == everything
    assert history_pages(s, run_id, pb.HISTORY_VIEW_GOVERNED, 700) == gov
    # and so while a writer holds the run
    call, _ = open_first(s, run_id, 1)
    try:
        assert history_pages(s, run_id, pb.HISTORY_VIEW_STATE, 1000) == everything
        assert history_pages(s, run_id, pb.HISTORY_VIEW_GOVERNED, 1000) == gov
    finally:
        call.cancel()


def test_every_message_past_a_small_max_message_size_is_refused_with_a_typed_error(
    tmp_path: Path,
) -> None:
    # 1 MiB cap; ~1.4 MB of folded state
    with Daemon(tmp_path, "file", "--max-message-bytes", "1MiB") as d:
        s = stub(d.target)
        write_long_run(s, "big", 1200, pad=1000)
        with pytest.raises(grpc.RpcError) as info:
            until_unlocked(lambda: open_first(s, "big", 0))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        detail = error_of(info.value)
        assert detail.code == "response_too_large"
        assert "max message size of 1048576 bytes" in detail.message
        assert "message window" in detail.message
        assert detail.metadata["run_id"] == "big"
        with pytest.raises(grpc.RpcError) as fold_info:
            s.Fold(pb.FoldRequest(run_id="big"))
        assert error_of(fold_info.value).code == "response_too_large"
        with pytest.raises(grpc.RpcError) as page_info:
            s.History(pb.HistoryRequest(run_id="big", limit=5000, view=pb.HISTORY_VIEW_STATE))
        assert error_of(page_info.value).code == "response_too_large"
        assert "smaller limit" in error_of(page_info.value).message
        # the daemon is healthy, the refused Open left no lease behind, and a window that
        # asks for every message is cut to what fits, at a clean boundary
        health = health_pb2_grpc.HealthStub(grpc.insecure_channel(d.target))
        assert health.Check(health_pb2.HealthCheckRequest()).status == 1
        everything = history_pages(s, "big", pb.HISTORY_VIEW_STATE)
        call, lease = until_unlocked(lambda: open_first(s, "big", 10_000))
        try:
            st = lease.state
            assert 0 < st.messages_offset < len(everything) - 100
            assert not answers_previous(everything[st.messages_offset])
            assert decoded(st.messages) == everything[st.messages_offset :]
            assert pb.OpenResponse(lease=lease).ByteSize() <= 1024 * 1024
        finally:
            call.cancel()
        assert health.Check(health_pb2.HealthCheckRequest()).status == 1
        assert d.proc is not None
        assert d.proc.poll() is None


def test_a_pending_turn_over_the_max_message_size_asks_for_a_larger_cap_not_a_window(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file", "--max-message-bytes", "1MiB") as d:
        s = stub(d.target)
        lease = Lease(s, "heavy")
        big = "y" * 700_000
        turn = pb.AssistantPayload(
            message=pb.Message(
                role="assistant", content_json=blocks(text(big), tool_use("a"), tool_use("b"))
            ),
            iteration=1,
            stop_reason="tool_use",
        )
        lease.append(pb.Record(seq=lease.next_seq(), ts=TS, assistant=turn))
        lease.append(lease.result("a", out=big))  # the turn stays open: "b" is unanswered
        lease.close()
        with pytest.raises(grpc.RpcError) as info:
            until_unlocked(lambda: open_first(s, "heavy", 1000))
        detail = error_of(info.value)
        assert detail.code == "response_too_large"
        assert "larger --max-message-bytes" in detail.message
