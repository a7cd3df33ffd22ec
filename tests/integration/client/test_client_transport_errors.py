"""A bare INTERNAL (gRPC's own status, no ``journald-error-bin`` trailer) is the transport
failing, not the daemon refusing: every Python writer (sync and asyncio, unary and
pipelined) reconnects and resends, and no record is lost or stored twice.

A relay (tests/integration/relay.py) in front of a real daemon lets the daemon store an
append, drops its answer and ends the call with a trailer-less status, as a connection reset
mid-call does ("Internal error from Core")."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import grpc
import journald_client as jc
import pytest
from journald_client.codec import Entry

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.relay import Relay

pytestmark = pytest.mark.shared_daemon("file")

BARE = [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN]


@pytest.fixture
def relay(daemon: Daemon) -> Iterator[Relay]:
    with Relay(daemon.socket) as r:
        yield r


def steps(n: int) -> list[Entry]:
    return [Entry.state("agent", "step", "text/plain", bytes([ord("a") + i])) for i in range(n)]


def assert_stored_once(daemon: Daemon, run_id: str, n: int) -> None:
    with jc.connect(str(daemon.socket)) as direct:
        stored = list(direct.load(run_id))
    assert [r.seq for r in stored] == list(range(1, n + 2))
    data = [base64.b64decode(r.payload["data"]) for r in stored[1:]]
    assert data == [bytes([ord("a") + i]) for i in range(n)]


def assert_acks(acks: list[jc.Ack], n: int, cut_batch: range) -> None:
    assert [a.seq for a in acks] == list(range(2, n + 2))
    # the answer the relay dropped was for a stored batch: its resend is a duplicate
    assert [a.duplicate for a in acks] == [i in cut_batch for i in range(n)]


@pytest.mark.parametrize("code", BARE, ids=lambda c: c.name)
def test_a_sync_writer_resends_an_append_cut_by_a_bare_status_and_stores_it_once(
    daemon: Daemon, relay: Relay, code: grpc.StatusCode
) -> None:
    run_id = f"bare-sync-{code.name}"
    with jc.connect(str(relay.socket)) as client, client.start(run_id, FP, "hi") as run:
        acks = run.append_many(steps(2))
        relay.cut(code)
        acks += run.append_many(steps(4)[2:])
    assert relay.cuts == 1
    assert_acks(acks, 4, cut_batch=range(2, 4))
    assert_stored_once(daemon, run_id, 4)


def test_a_pipelined_writer_resends_what_a_bare_internal_cut_off_and_stores_it_once(
    daemon: Daemon, relay: Relay
) -> None:
    with jc.connect(str(relay.socket)) as client, client.start("bare-piped", FP, "hi") as run:
        relay.cut(grpc.StatusCode.INTERNAL, after_answers=3)
        with run.pipelined(window=8) as w:
            pending = [w.append(e) for e in steps(8)]
        acks = [p.ack() for p in pending]
    assert relay.cuts == 1
    assert relay.append_streams >= 2
    assert [a.seq for a in acks] == list(range(2, 10))
    assert acks[2].duplicate  # seq 4's answer was the one dropped
    assert_stored_once(daemon, "bare-piped", 8)


async def test_an_async_writer_resends_an_append_cut_by_a_bare_internal(
    daemon: Daemon, relay: Relay
) -> None:
    client = await jc.connect_async(str(relay.socket))
    async with client, await client.start("bare-aio", FP, "hi") as run:
        acks = await run.append_many(steps(2))
        relay.cut(grpc.StatusCode.INTERNAL)
        acks += await run.append_many(steps(4)[2:])
    assert relay.cuts == 1
    assert_acks(acks, 4, cut_batch=range(2, 4))
    assert_stored_once(daemon, "bare-aio", 4)


async def test_an_async_pipelined_writer_resends_what_a_bare_internal_cut_off(
    daemon: Daemon, relay: Relay
) -> None:
    client = await jc.connect_async(str(relay.socket))
    async with client, await client.start("bare-aio-piped", FP, "hi") as run:
        relay.cut(grpc.StatusCode.INTERNAL, after_answers=3)
        async with run.pipelined(window=8) as w:
            pending = [await w.append(e) for e in steps(8)]
        acks = [await p for p in pending]
    assert relay.cuts == 1
    assert relay.append_streams >= 2
    assert [a.seq for a in acks] == list(range(2, 10))
    assert acks[2].duplicate
    assert_stored_once(daemon, "bare-aio-piped", 8)


def test_a_relay_passes_the_daemons_own_refusals_back_with_their_trailer(
    daemon: Daemon, relay: Relay, tmp_path: Path
) -> None:
    """The relay itself is transparent: a journald refusal still arrives typed."""
    with jc.connect(str(relay.socket)) as client, pytest.raises(jc.SessionNotFound):
        client.fold("no-such-run")
