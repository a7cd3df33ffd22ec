"""nats-server killed with SIGKILL mid-run: every acknowledged record survives.

Single node (``sync_interval: always``): kill -9, restart on the same port and store dir, the
same store reconnects and the run continues. Three-node cluster with an R3 stream: kill -9 the
stream leader during a run of appends; the run continues on the survivors.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from journald.errors import BackendUnavailable
from journald.records import Record
from journald.storage.base import Journal
from journald.storage.jetstream import JetStreamStore
from tests.builders import JournalBuilder
from tests.nats_server import NatsCluster, NatsServer, create_stream

pytestmark = pytest.mark.slow

TURNS = 20  # 1 meta + 20 * (assistant + 2 results) = 61 records


def build(run_id: str) -> JournalBuilder:
    b = JournalBuilder(run_id)
    for i in range(TURNS):
        b.turn([f"c{i}a", f"c{i}b"])
    return b


async def append_all(journal: Journal, records: list[Record], acked: list[int]) -> int:
    """Append one record at a time; a BackendUnavailable is retried at the same seq
    (bounded). Returns how many appends had to be retried."""
    retried = 0
    for rec in records:
        for attempt in range(40):
            try:
                res = await journal.append([rec])
            except BackendUnavailable:
                retried += 1
                if attempt == 39:
                    raise
                await asyncio.sleep(0.25)
                continue
            acked.append(res[0].seq)
            break
    return retried


async def wait_for(cond: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


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
            task = asyncio.ensure_future(append_all(journal, src.records[1:], acked))
            await wait_for(lambda: len(acked) >= 15 or task.done())
            server.kill()  # SIGKILL mid-run, appends in flight
            killed_after = len(acked)
            await asyncio.sleep(0.3)
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
    deadline = time.monotonic() + 30
    while True:
        try:
            await create_stream(cluster.urls, "R3", "r3", num_replicas=3)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


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
            task = asyncio.ensure_future(append_all(journal, src.records[1:], acked))
            await wait_for(lambda: len(acked) >= 15 or task.done())
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
