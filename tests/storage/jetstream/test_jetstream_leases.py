"""The cross-host lease bucket on a real nats-server, two ``JetStreamLeases`` standing for two
daemons (docs/design.md#leases-across-hosts).

* Two daemons racing for a free run: exactly one wins, the other is ``locked`` naming it.
* A daemon whose renewals fail (cut off from NATS) refuses its own writes before the other
  daemon can take its run, and is told its leases are lost.
* A released run is free at once; an entry whose daemon key expired is taken over on its
  revision, and the old holder's next write is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from journald.core.errors import BackendUnavailable, LeaseLost, Locked
from journald.storage.jetstream.lease_bucket import lease_bucket_name
from journald.storage.jetstream.leases import JetStreamLeases
from journald.storage.jetstream.store import JetStreamStore
from tests.storage.backend_jetstream import fresh_stream
from tests.waiting import NotYet, eventually_async

TTL_S = 1


@pytest.fixture
async def daemons() -> AsyncIterator[tuple[JetStreamLeases, JetStreamLeases]]:
    url, stream, _ = await fresh_stream()
    stores = [await JetStreamStore.connect(url, stream) for _ in range(2)]
    leases = []
    for store, name in zip(stores, ("host-a", "host-b"), strict=True):
        store.writer = name
        one = JetStreamLeases(store, lease_bucket_name(stream), ttl_s=TTL_S)
        await one.start()
        leases.append(one)
    try:
        yield leases[0], leases[1]
    finally:
        for one in leases:
            await one.close()
        for store in stores:
            await store.close()


async def test_of_two_daemons_racing_for_a_free_run_exactly_one_wins(
    daemons: tuple[JetStreamLeases, JetStreamLeases],
) -> None:
    a, b = daemons
    for n in range(5):
        run = f"raced-{n}"
        results = await asyncio.gather(
            a.acquire(run, {"name": "agent-a"}),
            b.acquire(run, {"name": "agent-b"}),
            return_exceptions=True,
        )
        won = [r for r in results if isinstance(r, int)]
        lost = [r for r in results if isinstance(r, Locked)]
        assert len(won) == 1, results
        assert len(lost) == 1, results
        winner = a if isinstance(results[0], int) else b
        assert lost[0].metadata["holder_writer"] == winner.writer
        assert a.holds(run) != b.holds(run)


async def test_a_released_run_is_free_for_another_daemon_at_once(
    daemons: tuple[JetStreamLeases, JetStreamLeases],
) -> None:
    a, b = daemons
    await a.acquire("passed", {"name": "agent-a", "pid": 7, "host": "h", "since": "then"})
    with pytest.raises(Locked) as refused:
        await b.acquire("passed", {"name": "agent-b"})
    assert refused.value.metadata["holder_name"] == "agent-a"
    assert refused.value.metadata["holder_pid"] == "7"
    await a.release("passed")
    await b.acquire("passed", {"name": "agent-b"})
    await b.confirm("passed", "a write")
    with pytest.raises(LeaseLost):
        await a.confirm("passed", "a write")


async def test_a_daemon_cut_off_from_nats_stops_writing_before_another_can_take_its_run(
    daemons: tuple[JetStreamLeases, JetStreamLeases], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = daemons
    lost: list[str] = []
    a.on_lost = lost.extend
    await a.acquire("cut-off", {"name": "agent-a"})
    renew = a._beat

    async def unreachable() -> None:
        raise BackendUnavailable("NATS does not answer")

    monkeypatch.setattr(a, "_beat", unreachable)  # its renewals fail from now on
    fenced_at = taken_at = 0.0
    deadline = time.monotonic() + 30
    while not taken_at and time.monotonic() < deadline:
        if not fenced_at:
            try:
                await a.confirm("cut-off", "a write")
            except BackendUnavailable:
                fenced_at = time.monotonic()
        try:
            await b.acquire("cut-off", {"name": "agent-b"})
            taken_at = time.monotonic()
        except Locked:
            await asyncio.sleep(0.02)
    assert fenced_at, "the cut-off daemon never stopped writing"
    assert taken_at, "the other daemon never took the run"
    assert fenced_at <= taken_at  # never two daemons that may write the run

    async def told() -> None:
        if not lost:
            raise NotYet

    await eventually_async(told, what="the cut-off daemon to be told its lease is lost")
    assert lost == ["cut-off"]
    monkeypatch.setattr(a, "_beat", renew)
    await renew()  # reachable again: the entry names the new holder, not it
    with pytest.raises(Locked) as refused:
        await a.confirm("cut-off", "a write after the takeover")
    assert refused.value.metadata["holder_writer"] == "host-b"


async def _entry_reads(url: str, bucket: str) -> tuple[Any, list[str]]:
    """A second connection counting the message-get requests for the bucket's entries (what
    a write's read-back of its lease entry sends to the server)."""
    import nats

    seen: list[str] = []
    nc = await nats.connect(url)

    async def count(msg: object) -> None:
        seen.append(str(getattr(msg, "subject", "")))

    await nc.subscribe(f"$JS.API.STREAM.MSG.GET.KV_{bucket}", cb=count)
    await nc.subscribe(f"$JS.API.DIRECT.GET.KV_{bucket}.>", cb=count)
    await nc.flush()
    return nc, seen


async def _watch_has_caught_up(leases: JetStreamLeases) -> None:
    async def current() -> None:
        if not leases._watch_current():
            raise NotYet

    await eventually_async(current, what="the lease watch to deliver the daemon's renewal")


async def _taken_behind_its_back(a: JetStreamLeases, b: JetStreamLeases, run: str) -> None:
    """An operator deletes a's entry of the run (`nats kv del`) and daemon b takes it."""
    await a._js.publish(a._run_key(run), b"", stream=a.stream, headers={"KV-Operation": "DEL"})
    await b.acquire(run, {"name": "agent-b"})


async def test_writes_of_a_held_run_do_not_read_its_lease_entry_back_while_the_watch_is_current(
    daemons: tuple[JetStreamLeases, JetStreamLeases],
) -> None:
    a, _ = daemons
    url = a._store.connection.connected_url.geturl()
    counter, reads = await _entry_reads(url, a.bucket)
    try:
        await a.acquire("watched", {"name": "agent-a"})
        await _watch_has_caught_up(a)
        await counter.flush()
        before = len(reads)
        for n in range(20):
            await a.confirm("watched", f"append {n}")
        await counter.flush()
        assert len(reads) == before, reads[before:]  # no round trip per write
        assert a.read_backs == 0
    finally:
        await counter.close()


async def test_an_entry_changed_behind_the_daemon_refuses_its_next_write_once_watched(
    daemons: tuple[JetStreamLeases, JetStreamLeases],
) -> None:
    a, b = daemons
    await a.acquire("changed", {"name": "agent-a"})
    await _watch_has_caught_up(a)
    await a.confirm("changed", "a write")
    await _taken_behind_its_back(a, b, "changed")

    refusals: list[Locked] = []

    async def refused() -> None:
        try:
            await a.confirm("changed", "a write after the takeover")
        except Locked as exc:
            refusals.append(exc)
            return
        raise NotYet

    await eventually_async(refused, what="the stale daemon's write to be refused")
    assert refusals[0].metadata["holder_writer"] == "host-b"


async def test_a_daemon_whose_watch_stopped_reads_the_entry_back_from_its_next_renewal_on(
    daemons: tuple[JetStreamLeases, JetStreamLeases],
) -> None:
    a, b = daemons
    await a.acquire("unwatched", {"name": "agent-a"})
    await _watch_has_caught_up(a)
    await a._watch.unsubscribe()  # the watch dies without the daemon noticing
    await a._beat()  # the next renewal: the watch never delivers it
    await _taken_behind_its_back(a, b, "unwatched")
    with pytest.raises(Locked) as refused:  # at once: read back, not trusted to the watch
        await a.confirm("unwatched", "a write")
    assert refused.value.metadata["holder_writer"] == "host-b"
