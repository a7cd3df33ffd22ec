"""nats-server killed with SIGKILL mid-run: every acknowledged record survives.

Single node (``sync_interval: always``): kill -9, restart on the same port and store dir, the
same store reconnects and the run continues. Three-node cluster with an R3 stream: kill -9 the
stream leader during a run of appends; the run continues on the survivors.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest

from journald.core.errors import BackendUnavailable
from journald.core.records import Record
from journald.storage.base import Journal
from journald.storage.jetstream.store import JetStreamStore
from tests.builders import JournalBuilder
from tests.nats_server import NatsCluster, NatsServer, create_stream
from tests.waiting import eventually_async, wait_until_async

pytestmark = pytest.mark.slow

TURNS = 20  # 1 meta + 20 * (assistant + 2 results) = 61 records


def build(run_id: str) -> JournalBuilder:
    b = JournalBuilder(run_id)
    for i in range(TURNS):
        b.turn([f"c{i}a", f"c{i}b"])
    return b


async def append_all(
    journal: Journal,
    records: list[Record],
    acked: list[int],
    timeout_s: float = 60.0,
    reached: tuple[int, asyncio.Event] | None = None,
) -> None:
    """Append one record at a time; a BackendUnavailable (the store's own retry window ran
    out while the server was away) is retried at the same seq until ``timeout_s``.
    ``reached`` (n, event): the event is set once n records are acknowledged, before the next
    append is sent, so a waiter runs while that append is in flight (polling for a count
    could miss the whole run: once writes got faster, all 61 were acknowledged between two
    polls)."""
    for rec in records:
        if reached is not None and len(acked) >= reached[0]:
            reached[1].set()
        res = await eventually_async(
            functools.partial(journal.append, [rec]),
            what=f"seq {rec.seq} to be acknowledged",
            timeout_s=timeout_s,
            retry_on=(BackendUnavailable,),
        )
        acked.append(res[0].seq)


async def test_a_killed_and_restarted_server_keeps_every_acknowledged_record(
    tmp_path: Path,
) -> None:
    server = NatsServer(tmp_path, name="solo")
    server.start()
    try:
        await create_stream(server.url, "CRASH", "crash")
        store = await JetStreamStore.connect(
            server.url, "CRASH", ack_timeout_s=1.0, retry_window_s=3.0, reconnect_time_wait_s=0.1
        )
        try:
            src = build("crash-run")
            journal = await store.create(src.records[0])
            acked: list[int] = [1]
            fifteen = asyncio.Event()
            task = asyncio.ensure_future(
                append_all(journal, src.records[1:], acked, reached=(15, fifteen))
            )
            await asyncio.wait_for(fifteen.wait(), 60)
            server.kill()  # SIGKILL mid-run, the 16th append in flight
            killed_after = len(acked)
            # the server stays down until the client has noticed it is gone
            await wait_until_async(lambda: not store._nc.is_connected, what="the disconnect")
            await asyncio.to_thread(server.restart)  # same port, same store dir
            await asyncio.wait_for(task, 60)
            assert killed_after < len(src.records)
            assert acked == list(range(1, len(src.records) + 1))
        finally:
            await store.close()
        fresh = await JetStreamStore.connect(server.url, "CRASH")
        try:
            loaded = await fresh.load("crash-run")
            assert [r.raw for r in loaded] == [r.raw for r in src.records]
            assert (await fresh.verify("crash-run")).records == len(src.records)
        finally:
            await fresh.close()
    finally:
        server.stop()


async def create_replicated_stream(cluster: NatsCluster) -> None:
    """Once the new cluster has elected its meta leader, the stream can be created."""
    await eventually_async(
        lambda: create_stream(cluster.urls, "R3", "r3", num_replicas=3),
        what="the cluster to accept a stream",
        timeout_s=90,
        retry_on=(Exception,),
    )


async def stream_leader(store: JetStreamStore) -> str:
    info = await store._jsm.stream_info(store.stream)
    return str(info.cluster.leader)


async def test_a_run_continues_when_one_node_of_a_three_node_cluster_is_killed(
    tmp_path: Path,
) -> None:
    cluster = NatsCluster(tmp_path)
    cluster.start()
    try:
        await create_replicated_stream(cluster)
        store = await JetStreamStore.connect(
            cluster.urls, "R3", ack_timeout_s=2.0, retry_window_s=20.0, reconnect_time_wait_s=0.1
        )
        try:
            src = build("r3-run")
            journal = await store.create(src.records[0])
            acked: list[int] = [1]
            leader = await stream_leader(store)
            victim = next(n for n in cluster.nodes if n.name == leader)
            fifteen = asyncio.Event()
            task = asyncio.ensure_future(
                append_all(journal, src.records[1:], acked, reached=(15, fifteen))
            )
            await asyncio.wait_for(fifteen.wait(), 90)
            victim.kill()  # SIGKILL the stream leader during the run
            killed_after = len(acked)
            await asyncio.wait_for(task, 90)
            assert killed_after < len(src.records)
            assert acked == list(range(1, len(src.records) + 1))
        finally:
            await store.close()
        survivors = [n.url for n in cluster.nodes if n is not victim]
        fresh = await JetStreamStore.connect(survivors, "R3", retry_window_s=20.0)
        try:
            loaded = await fresh.load("r3-run")
            assert [r.raw for r in loaded] == [r.raw for r in src.records]
            assert (await fresh.verify("r3-run")).records == len(src.records)
            assert await stream_leader(fresh) != leader
        finally:
            await fresh.close()
    finally:
        cluster.stop()
