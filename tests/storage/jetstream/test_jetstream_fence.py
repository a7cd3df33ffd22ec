"""JetStream fencing: one writer per run across stores (hosts); bodies are the canonical bytes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import pytest

from journald.core.errors import Locked, SeqConflict, SeqGap, SessionExists, SessionNotFound
from journald.core.records import GENESIS
from journald.storage.base import JETSTREAM_ACK
from journald.storage.jetstream.store import JetStreamStore, NatsOptions
from tests.builders import JournalBuilder, result_payload, unlinked, user_payload
from tests.storage.backend_jetstream import fresh_stream


@pytest.fixture
async def two_hosts() -> AsyncIterator[tuple[JetStreamStore, JetStreamStore, str, str]]:
    url, name, prefix = await fresh_stream()
    a = await JetStreamStore.connect(
        url, name, gap_wait_s=0.2, options=NatsOptions(writer="host-a pid 1")
    )
    b = await JetStreamStore.connect(
        url, name, gap_wait_s=0.2, options=NatsOptions(writer="host-b pid 2")
    )
    try:
        yield a, b, url, prefix
    finally:
        await a.close()
        await b.close()


def run_records(run_id: str = "run-x", turns: int = 2) -> JournalBuilder:
    b = JournalBuilder(run_id)
    for i in range(turns):
        b.turn([f"t{i}a", f"t{i}b"])
    return b


async def test_a_stale_writer_on_another_host_is_locked_and_never_interleaves(
    two_hosts: tuple[JetStreamStore, JetStreamStore, str, str],
) -> None:
    a, b, _, _ = two_hosts
    src = run_records()
    ja = await a.create(src.records[0])
    await ja.append(src.records[1:4])
    jb = await b.open("run-x")
    assert (jb.last_seq, jb.last_hash) == (4, src.records[3].hash)
    await jb.append(src.records[4:6])
    with pytest.raises(Locked, match="stale") as err:
        await ja.append([src.records[4]])
    assert "host-b pid 2 wrote seq 5" in err.value.message
    with pytest.raises(Locked):
        await ja.append([unlinked(5, "user", user_payload("from the stale host"))])
    assert ja.last_seq == 4
    await jb.append(src.records[6:])
    loaded = await a.load("run-x")
    assert [r.raw for r in loaded] == [r.raw for r in src.records]
    report = await b.verify("run-x")
    assert (report.records, report.last_seq) == (len(src.records), len(src.records))


async def test_a_second_open_in_one_store_is_locked_until_the_first_closes(
    two_hosts: tuple[JetStreamStore, JetStreamStore, str, str],
) -> None:
    a, _, _, _ = two_hosts
    src = run_records()
    j = await a.create(src.records[0])
    with pytest.raises(Locked):
        await a.open("run-x")
    with pytest.raises(Locked):
        await a.delete("run-x")
    await j.close()
    j2 = await a.open("run-x")
    assert j2.last_seq == 1
    await j2.close()


async def test_creating_a_run_that_another_host_created_is_session_exists(
    two_hosts: tuple[JetStreamStore, JetStreamStore, str, str],
) -> None:
    a, b, _, _ = two_hosts
    await a.create(JournalBuilder("dup-run").records[0])
    with pytest.raises(SessionExists):
        await b.create(JournalBuilder("dup-run", prompt="other").records[0])
    with pytest.raises(SessionExists):
        await b.create(JournalBuilder("dup-run").records[0])


async def test_record_bodies_are_the_canonical_bytes_on_one_subject_each_with_fence_headers(
    two_hosts: tuple[JetStreamStore, JetStreamStore, str, str],
) -> None:
    a, _, url, prefix = two_hosts
    src = run_records("raw-run", turns=1)
    j = await a.create(src.records[0])
    results = await j.append(src.records[1:])
    assert all(r.durability == JETSTREAM_ACK for r in results)
    nc = await nats.connect(url)
    try:
        jsm = nc.jsm()
        for rec in src.records:
            msg = await jsm.get_msg(a.stream, subject=f"{prefix}.raw-run.{rec.seq}")
            assert msg.data == rec.raw
            assert msg.headers is not None
            assert msg.headers["Nats-Msg-Id"] == j.msg_id(rec.seq)
            assert msg.headers["Nats-Expected-Last-Subject-Sequence-Subject"] == (
                f"{prefix}.raw-run.*"
            )
    finally:
        await nc.close()


async def test_two_runs_appends_in_flight_at_once_are_each_fenced_on_their_own_run(
    two_hosts: tuple[JetStreamStore, JetStreamStore, str, str],
) -> None:
    a, b, url, prefix = two_hosts
    one, two = run_records("run-one"), run_records("run-two")
    j1, j2 = await a.create(one.records[0]), await a.create(two.records[0])
    for k in range(1, 4):  # both runs' publishes out before either's ack is awaited
        await asyncio.gather(j1.append([one.records[k]]), j2.append([two.records[k]]))
    assert (j1.last_seq, j2.last_seq) == (4, 4)
    # another host moves run-two on: a's next write there is refused, run-one's still lands
    jb = await b.open("run-two")
    await jb.append([two.records[4]])
    got = await asyncio.gather(
        j1.append([one.records[4]]), j2.append([two.records[4]]), return_exceptions=True
    )
    landed, refused = got
    assert not isinstance(landed, BaseException)
    assert [r.seq for r in landed] == [5]
    assert isinstance(refused, Locked)
    assert "host-b pid 2 wrote seq 5" in refused.message
    assert (j1.last_seq, j2.last_seq) == (5, 4)
    nc = await nats.connect(url)
    try:
        jsm = nc.jsm()
        for run_id, src in (("run-one", one), ("run-two", two)):
            for rec in src.records[:5]:
                msg = await jsm.get_msg(a.stream, subject=f"{prefix}.{run_id}.{rec.seq}")
                assert msg.data == rec.raw  # run-two's seq 5: host b's copy, the same bytes
                assert msg.headers is not None
                assert msg.headers["Nats-Expected-Last-Subject-Sequence-Subject"] == (
                    f"{prefix}.{run_id}.*"
                )
    finally:
        await nc.close()


async def test_append_rules_hold_gap_duplicate_and_conflict(
    two_hosts: tuple[JetStreamStore, JetStreamStore, str, str],
) -> None:
    a, _, _, _ = two_hosts
    src = run_records("rules-run", turns=1)
    j = await a.create(src.records[0])
    with pytest.raises(SeqGap):
        await j.append([src.records[2]])
    await j.append(src.records[1:3])
    again = await j.append(src.records[1:3])
    assert [(r.seq, r.duplicate) for r in again] == [(2, True), (3, True)]
    with pytest.raises(SeqConflict):
        await j.append([unlinked(2, "tool_result", result_payload("t0a", "different"))])
    assert j.last_seq == 3


async def test_a_deleted_run_is_gone_idempotently_and_its_id_can_start_over(
    two_hosts: tuple[JetStreamStore, JetStreamStore, str, str],
) -> None:
    a, b, _, _ = two_hosts
    src = run_records("gone-run", turns=1)
    j = await a.create(src.records[0])
    await j.append(src.records[1:])
    await j.close()
    assert await b.delete("gone-run") is True
    assert await b.delete("gone-run") is False
    with pytest.raises(SessionNotFound):
        await a.load("gone-run")
    j2 = await a.create(src.records[0])
    assert (j2.last_seq, src.records[0].prev) == (1, GENESIS)


async def test_listing_uses_the_meta_subjects_and_reports_sizes(
    two_hosts: tuple[JetStreamStore, JetStreamStore, str, str],
) -> None:
    a, b, _, _ = two_hosts
    for rid in ("list-a", "list-b"):
        src = run_records(rid, turns=1)
        j = await a.create(src.records[0])
        await j.append(src.records[1:])
    rows = {i.run_id: i for i in await b.list()}
    assert set(rows) == {"list-a", "list-b"}
    src = run_records("list-a", turns=1)
    assert rows["list-a"].record_count == len(src.records)
    assert rows["list-a"].bytes == sum(len(r.raw) + 1 for r in src.records)
    assert rows["list-a"].last_seq == len(src.records)


async def test_a_batch_is_one_atomic_publish_when_the_stream_allows_atomic_batches() -> None:
    url, name, prefix = await fresh_stream(allow_atomic=True)
    store = await JetStreamStore.connect(url, name)
    other = await JetStreamStore.connect(url, name)
    try:
        assert store.atomic_batches
        src = run_records("atomic-run", turns=2)
        j = await store.create(src.records[0])
        results = await j.append(src.records[1:4])
        assert [r.seq for r in results] == [2, 3, 4]
        stale = await other.open("atomic-run")
        await stale.close()
        jb = await other.open("atomic-run")
        await jb.append(src.records[4:6])
        with pytest.raises(Locked):
            await j.append(src.records[4:7])  # a fenced batch from the stale writer
        await jb.append(src.records[6:])
        nc = await nats.connect(url)
        try:
            msg = await nc.jsm().get_msg(name, subject=f"{prefix}.atomic-run.3")
            assert msg.headers is not None
            assert msg.headers["Nats-Batch-Id"].startswith(j.msg_id(2))
        finally:
            await nc.close()
        loaded = await other.load("atomic-run")
        assert [r.raw for r in loaded] == [r.raw for r in src.records]
        assert (await other.verify("atomic-run")).records == len(src.records)
    finally:
        await store.close()
        await other.close()


async def test_listing_many_runs_reads_them_concurrently_and_misses_none(
    two_hosts: tuple[JetStreamStore, JetStreamStore, str, str],
) -> None:
    a, b, _, _ = two_hosts
    ids = [f"many-{i:02d}" for i in range(25)]
    for rid in ids:
        j = await a.create(JournalBuilder(rid).records[0])
        await j.close()
    assert sorted(i.run_id for i in await b.list()) == ids
