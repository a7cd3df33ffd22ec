"""Closing a writer releases its lease synchronously (``Release`` before the stream is
cancelled), so the same process can re-open the run at once, with no retry."""

from __future__ import annotations

import grpc
import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.waiting import eventually

ROUNDS = 20


def test_a_closed_run_reopens_at_once_twenty_times_in_a_row_without_locked(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as client:
        client.start("again", FP, "hi").close()
        for i in range(ROUNDS):
            run = client.resume("again", FP)  # jc.Locked here would fail the test
            run.user(f"round {i}")
            run.close()
            assert run.lease_ended == "released"  # the daemon ended it on Release
        assert client.fold("again").last_seq == 1 + ROUNDS


async def test_an_async_closed_run_reopens_at_once_twenty_times_in_a_row_without_locked(
    daemon: Daemon,
) -> None:
    async with await jc.connect_async(str(daemon.socket)) as client:
        await (await client.start("again", FP, "hi")).close()
        for i in range(ROUNDS):
            run = await client.resume("again", FP)
            await run.user(f"round {i}")
            await run.close()
            assert run.lease_ended == "released"
        assert (await client.fold("again")).last_seq == 1 + ROUNDS


def test_a_second_client_takes_over_a_closed_run_at_once(daemon: Daemon) -> None:
    socket = str(daemon.socket)
    # Both clients live in this one process, so a client would take the other's lease for an
    # abandoned one of its own and wait reconnect_timeout for it: 0 makes every refusal (and a
    # takeover that is not at once) show at once.
    with (
        jc.connect(socket, name="first", reconnect_timeout=0) as first,
        jc.connect(socket, name="second", reconnect_timeout=0) as second,
    ):
        first.start("handover", FP, "hi").close()
        written: list[str] = []
        for i in range(5):
            for name, client, other in (("second", second, first), ("first", first, second)):
                run = client.resume("handover", FP)  # jc.Locked here would fail the test
                with pytest.raises(jc.Locked) as held:  # the handover is real: it holds the run
                    other.resume("handover", FP)
                assert held.value.holder_name == name
                run.user(f"{name} {i}")
                written.append(f"{name} {i}")
                run.close()
                assert run.lease_ended == "released"
        state = first.fold("handover")
    assert state.last_seq == 1 + len(written)
    typed = [b["text"] for m in state.messages if m["role"] == "user" for b in m["content"]]
    assert typed == ["hi", *written]


def test_closing_a_writer_after_the_daemon_is_gone_does_not_raise(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client:
        run = client.start("orphan", FP, "hi")
        daemon.kill9()
        run.close()


def test_the_lease_of_a_run_larger_than_the_message_cap_is_refused_and_fits_by_default(
    daemon: Daemon,
) -> None:
    big = "x" * (700 * 1024)
    with jc.connect(str(daemon.socket)) as client:
        with client.start("big", FP, "hi") as run:
            for _ in range(3):
                run.user(big)  # ~2 MiB of folded state
        small = jc.connect(str(daemon.socket), max_message_bytes=1024 * 1024)
        with small, pytest.raises(jc.JournaldError) as info:
            small.resume("big", FP)
        assert info.value.status == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert info.value.code == "resource_exhausted"
        assert "larger than max" in info.value.message
        # the refused Open was granted a lease the client never saw (so cannot Release): the
        # daemon ends it when it notices the failed stream, a moment later
        again = eventually(
            lambda: client.resume("big", FP),
            what="the refused Open's lease to end",
            retry_on=(jc.Locked,),
        )
        with again:
            assert len(again.state.messages[-1]["content"]) == 4
