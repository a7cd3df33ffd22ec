"""A JetStream ack that never arrives: the retry at the same seq adopts the stored record.

A loopback TCP proxy sits between the store and a real nats-server. It forwards the record
publish, drops the server's reply and cuts the connection, so the record is stored but the
writer never hears about it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest
from nats.js.errors import NotFoundError

from journald.core.errors import BackendUnavailable
from journald.storage.jetstream.store import JetStreamStore
from tests.builders import JournalBuilder
from tests.nats_server import AckDropProxy
from tests.storage.backend_jetstream import fresh_stream, session_server


def run_records(run_id: str) -> JournalBuilder:
    b = JournalBuilder(run_id)
    b.turn(["a1", "a2"])
    b.turn(["b1"])
    return b


@pytest.fixture
async def proxied() -> AsyncIterator[tuple[AckDropProxy, str, str]]:
    _, name, prefix = await fresh_stream()
    proxy = AckDropProxy(session_server().port, prefix)
    await proxy.start()
    try:
        yield proxy, name, prefix
    finally:
        await proxy.close()


async def connect(proxy: AckDropProxy, name: str, retry_window_s: float) -> JetStreamStore:
    return await JetStreamStore.connect(
        proxy.url,
        name,
        ack_timeout_s=0.5,
        retry_window_s=retry_window_s,
        reconnect_time_wait_s=0.1,
    )


async def stored_seqs(stream: str, subject_prefix: str, upto: int) -> list[int]:
    """Which record subjects the server holds, read directly (not through the store)."""
    nc = await nats.connect(session_server().url)
    out = []
    try:
        for seq in range(1, upto + 1):
            try:
                await nc.jsm().get_msg(stream, subject=f"{subject_prefix}.{seq}")
                out.append(seq)
            except NotFoundError:
                pass
    finally:
        await nc.close()
    return out


async def assert_exactly(store: JetStreamStore, src: JournalBuilder) -> None:
    loaded = await store.load(src.run_id)
    assert [r.seq for r in loaded] == list(range(1, len(src.records) + 1))
    assert [r.raw for r in loaded] == [r.raw for r in src.records]
    report = await store.verify(src.run_id)
    assert report.records == len(src.records)


async def test_the_callers_retry_at_the_same_seq_adopts_a_record_whose_ack_was_lost(
    proxied: tuple[AckDropProxy, str, str],
) -> None:
    proxy, name, prefix = proxied
    store = await connect(proxy, name, retry_window_s=0.2)
    try:
        src = run_records("lost-1")
        journal = await store.create(src.records[0])
        await journal.append(src.records[1:3])
        proxy.arm(1)
        with pytest.raises(BackendUnavailable, match="retry the append at the same seq"):
            await journal.append([src.records[3]])
        assert proxy.cuts == 1
        assert journal.last_seq == 3  # not advanced: the writer does not know it is stored
        assert await stored_seqs(name, f"{prefix}.lost-1", 5) == [1, 2, 3, 4]  # but it is
        results = None
        for _ in range(50):  # the client reconnects through the proxy; bounded retries
            try:
                results = await journal.append([src.records[3]])
                break
            except BackendUnavailable:
                continue
        assert results is not None
        assert [(r.seq, r.hash) for r in results] == [(4, src.records[3].hash)]
        await journal.append(src.records[4:])
        await assert_exactly(store, src)
    finally:
        await store.close()


async def test_an_append_whose_ack_is_lost_succeeds_by_adoption_within_the_retry_window(
    proxied: tuple[AckDropProxy, str, str],
) -> None:
    proxy, name, _ = proxied
    store = await connect(proxy, name, retry_window_s=10.0)
    try:
        src = run_records("lost-2")
        journal = await store.create(src.records[0])
        proxy.arm(1)
        results = await journal.append(src.records[1:3])
        assert proxy.cuts == 1
        assert [r.seq for r in results] == [2, 3]
        await journal.append(src.records[3:])
        await assert_exactly(store, src)
    finally:
        await store.close()


async def test_a_batch_cut_in_the_middle_leaves_the_journal_unchanged_and_retries_cleanly(
    proxied: tuple[AckDropProxy, str, str],
) -> None:
    proxy, name, prefix = proxied
    store = await connect(proxy, name, retry_window_s=0.2)
    try:
        src = run_records("lost-3")
        journal = await store.create(src.records[0])
        before = (journal.last_seq, journal.last_hash, journal.fence)
        proxy.arm(2)  # the 2nd record of the batch is stored, its ack lost, the 3rd never sent
        with pytest.raises(BackendUnavailable):
            await journal.append(src.records[1:4])
        assert (journal.last_seq, journal.last_hash, journal.fence) == before
        assert await stored_seqs(name, f"{prefix}.lost-3", 5) == [1, 2, 3]
        results = None
        for _ in range(50):
            try:
                results = await journal.append(src.records[1:4])
                break
            except BackendUnavailable:
                continue
        assert results is not None
        assert [r.seq for r in results] == [2, 3, 4]
        await journal.append(src.records[4:])
        await assert_exactly(store, src)
    finally:
        await store.close()


async def test_a_create_whose_ack_is_lost_is_adopted_not_session_exists(
    proxied: tuple[AckDropProxy, str, str],
) -> None:
    proxy, name, _ = proxied
    store = await connect(proxy, name, retry_window_s=10.0)
    try:
        src = run_records("lost-4")
        proxy.arm(1)
        journal = await store.create(src.records[0])
        assert proxy.cuts == 1
        await journal.append(src.records[1:])
        await assert_exactly(store, src)
    finally:
        await store.close()


async def test_an_atomic_batch_cut_anywhere_lands_whole_or_not_at_all_then_completes() -> None:
    _, name, prefix = await fresh_stream(allow_atomic=True)
    proxy = AckDropProxy(session_server().port, prefix)
    await proxy.start()
    store = await connect(proxy, name, retry_window_s=10.0)
    try:
        assert store.atomic_batches
        src = run_records("lost-5")
        journal = await store.create(src.records[0])
        proxy.arm(1)  # cut after the first chunk carrying a record of the batch
        results = await journal.append(src.records[1:5])
        assert proxy.cuts == 1
        assert [r.seq for r in results] == [2, 3, 4, 5]
        await journal.append(src.records[5:])
        await assert_exactly(store, src)
    finally:
        await store.close()
        await proxy.close()
