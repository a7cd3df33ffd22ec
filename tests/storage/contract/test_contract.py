"""The one storage contract (docs/design.md#storage-protocol, base.py) every backend passes.

Runs once per backend registered in ``tests/storage/conftest.py``. Only the ``Store`` /
``Journal`` protocol is used here, never a backend's internals; a restart goes through the
backend factory's ``reopen_store``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from journald.core.errors import (
    InvalidId,
    Locked,
    SeqConflict,
    SeqGap,
    SessionExists,
    SessionNotFound,
    StoreCorrupted,
    Unsupported,
)
from journald.core.fold import fold
from journald.core.records import GENESIS, Record, make_record, sha256_hex
from journald.storage.base import FSYNC_LOCAL, JETSTREAM_ACK, MEMORY, Journal, Store
from tests.builders import (
    TS,
    JournalBuilder,
    assistant_payload,
    meta_payload,
    result_payload,
    terminal_payload,
    text,
    tool_use,
    unlinked,
    user_payload,
)
from tests.storage.conftest import factory

BAD_IDS = ["../x", "a/b", "", "a" * 129, "-x"]


def scenario(run_id: str = "run-1") -> list[Record]:
    """A run with parallel tools, a follow-up, a compaction rebase and a terminal record."""
    b = JournalBuilder(run_id, prompt="list the files")
    b.turn(["t1", "t2"])
    b.add("assistant", assistant_payload([text("done")], 2))
    b.add("user", user_payload("and now the tests"))
    b.turn(["t3"], iteration=3)
    b.add(
        "rebase",
        {
            "reason": "compaction",
            "messages": [
                {"role": "user", "content": [text("summary of the work so far")]},
                {"role": "assistant", "content": [text("noted")]},
            ],
            "covered": {"from_seq": 1, "to_seq": 9},
        },
    )
    b.add("user", user_payload("continue"))
    b.add("assistant", assistant_payload([text("all green")], 4))
    b.add("terminal", terminal_payload("completed", "finished"))
    return b.records


async def create_with(store: Store, records: list[Record]) -> Journal:
    journal = await store.create(records[0])
    if len(records) > 1:
        await journal.append(records[1:])
    return journal


def run_records(run_id: str, ts: str, n_turns: int = 1) -> list[Record]:
    out: list[Record] = []
    prev = GENESIS

    def add(kind: str, payload: dict[str, Any]) -> None:
        nonlocal prev
        rec = make_record(len(out) + 1, kind, payload, prev, ts)
        out.append(rec)
        prev = rec.hash

    add("meta", meta_payload(run_id, prompt=f"prompt of {run_id}"))
    for i in range(n_turns):
        add("assistant", assistant_payload([text("x"), tool_use(f"c{i}")], i + 1))
        add("tool_result", result_payload(f"c{i}"))
    return out


async def test_creates_a_run_and_loads_exactly_the_records_appended(store: Store) -> None:
    records = scenario()
    journal = await create_with(store, records)
    assert journal.last_seq == len(records)
    assert journal.last_hash == records[-1].hash
    loaded = await store.load("run-1")
    assert [r.seq for r in loaded] == list(range(1, len(records) + 1))
    assert [r.hash for r in loaded] == [r.hash for r in records]


async def test_stores_record_bodies_byte_identical_to_the_canonical_bytes(store: Store) -> None:
    records = scenario()
    await create_with(store, records)
    assert [r.raw for r in await store.load("run-1")] == [r.raw for r in records]


async def test_folds_loaded_records_identically_to_the_built_ones(store: Store) -> None:
    records = scenario()
    await create_with(store, records)
    state = fold(await store.load("run-1"))
    assert state == fold(records)
    assert state.last_seq == len(records)
    assert state.messages[0]["content"] == [text("summary of the work so far")]


def framework_state_records(run_id: str = "thread-1") -> list[Record]:
    """A LangGraph-style thread: state values (inline bytes of every base64 tail, an
    attachment reference, a non-ASCII key), a state write while a tool call is open, a
    deleted key and a deleted namespace."""
    b = JournalBuilder(run_id, prompt="hi")
    for n, raw in enumerate(["", "AA==", "AAE=", "AAEC", "/+8="]):
        b.add("state", {"namespace": "lg.blob", "key": f"|ch|{n}", "type": "msgpack", "data": raw})
    b.add(
        "state",
        {
            "namespace": "lg.blob",
            "key": "|big|1",
            "type": "json",
            "sha256": "7e" * 32,
            "size": 1 << 40,
        },
    )
    b.add("assistant", assistant_payload([tool_use("t1")], 1))
    b.add("state", {"namespace": "lg.writes", "key": "é|task|0", "type": "json", "data": "MQ=="})
    b.add("tool_result", result_payload("t1"))
    b.add("state", {"namespace": "lg.blob", "key": "|ch|0", "deleted": True})
    b.add("state", {"namespace": "scratch", "key": "x", "type": "null", "data": ""})
    b.add("state", {"namespace": "scratch", "deleted": True})
    return b.records


async def test_stores_framework_state_byte_identical_and_folds_it_after_a_restart(
    store: Store, backend_name: str, tmp_path: Path
) -> None:
    records = framework_state_records()
    journal = await create_with(store, records[:8])
    await journal.append(records[8:])
    assert [r.raw for r in await store.load("thread-1")] == [r.raw for r in records]
    await journal.close()
    restarted: Store = await factory(backend_name).reopen_store(store, tmp_path)
    try:
        loaded = await restarted.load("thread-1")
        assert [r.raw for r in loaded] == [r.raw for r in records]
        state = fold(loaded)
        assert state == fold(records)
        assert sorted(state.state) == ["lg.blob", "lg.writes"]
        assert [k for k in state.state["lg.blob"]] == ["|ch|1", "|ch|2", "|ch|3", "|ch|4", "|big|1"]
        assert state.state["lg.blob"]["|big|1"].sha256 == "7e" * 32
        assert state.messages == fold([r for r in records if r.kind != "state"]).messages
    finally:
        if restarted is not store:
            await restarted.close()


async def test_appends_a_batch_in_one_call_with_one_result_per_record(store: Store) -> None:
    records = scenario()
    journal = await store.create(records[0])
    results = await journal.append(records[1:6])
    assert [r.seq for r in results] == [2, 3, 4, 5, 6]
    assert [r.hash for r in results] == [r.hash for r in records[1:6]]
    assert not any(r.duplicate for r in results)
    assert journal.last_seq == 6


async def test_iter_records_from_a_seq_yields_that_seq_onward_in_order(store: Store) -> None:
    records = scenario()
    await create_with(store, records)
    got = [r.seq async for r in store.iter_records("run-1", from_seq=5)]
    assert got == list(range(5, len(records) + 1))
    assert [r.seq for r in await store.load("run-1", from_seq=len(records))] == [len(records)]


async def test_links_each_record_onto_the_stored_chain_whatever_prev_it_carried(
    store: Store,
) -> None:
    b = JournalBuilder("run-1")
    journal = await store.create(b.records[0])
    sent = unlinked(2, "assistant", assistant_payload([text("hi")]))
    [res] = await journal.append([sent])
    [stored] = await store.load("run-1", from_seq=2)
    assert stored.prev == b.records[0].hash
    assert res.hash == stored.hash != sent.hash


async def test_answers_a_retry_after_a_lost_ack_as_duplicate_with_the_stored_hash(
    store: Store,
) -> None:
    records = scenario()
    journal = await create_with(store, records[:4])
    again = make_record(3, records[2].kind, records[2].payload, GENESIS, records[2].ts)
    [res] = await journal.append([again])
    assert res.duplicate
    assert res.seq == 3
    assert res.hash == records[2].hash
    assert journal.last_seq == 4
    assert len(await store.load("run-1")) == 4


async def test_accepts_a_batch_that_overlaps_the_stored_tail(store: Store) -> None:
    records = scenario()
    journal = await create_with(store, records[:4])
    results = await journal.append(records[2:6])
    assert [(r.seq, r.duplicate) for r in results] == [
        (3, True),
        (4, True),
        (5, False),
        (6, False),
    ]
    assert [r.hash for r in await store.load("run-1")] == [r.hash for r in records[:6]]


async def test_refuses_a_different_record_at_a_stored_seq_with_seq_conflict(
    store: Store,
) -> None:
    records = scenario()
    journal = await create_with(store, records[:4])
    other = unlinked(3, "user", user_payload("something else"))
    with pytest.raises(SeqConflict):
        await journal.append([other])
    assert [r.hash for r in await store.load("run-1")] == [r.hash for r in records[:4]]
    assert journal.last_seq == 4


async def test_refuses_a_seq_beyond_the_next_with_seq_gap_and_stays_appendable(
    store: Store,
) -> None:
    records = scenario()
    journal = await create_with(store, records[:2])
    with pytest.raises(SeqGap):
        await journal.append([records[3]])
    assert journal.last_seq == 2
    await journal.append([records[2]])
    assert journal.last_seq == 3
    assert len(await store.load("run-1")) == 3


async def test_out_of_order_concurrent_appends_all_land_through_the_gap_wait(
    store: Store,
) -> None:
    records = scenario()
    journal = await store.create(records[0])
    # Parallel tools finishing together: later seqs arrive first.
    tasks = [asyncio.create_task(journal.append([r])) for r in reversed(records[1:8])]
    results = await asyncio.gather(*tasks)
    assert sorted(res[0].seq for res in results) == list(range(2, 9))
    assert journal.last_seq == 8
    assert [r.hash for r in await store.load("run-1")] == [r.hash for r in records[:8]]


async def test_many_concurrent_appends_on_one_journal_keep_the_chain(store: Store) -> None:
    b = JournalBuilder("run-1")
    for i in range(12):
        b.turn([f"p{i}"])
    journal = await store.create(b.records[0])
    results = await asyncio.gather(*(journal.append([r]) for r in b.records[1:]))
    assert [res[0].hash for res in results] == [r.hash for r in b.records[1:]]
    assert fold(await store.load("run-1")) == fold(b.records)
    report = await store.verify("run-1")
    assert report.last_seq == len(b.records)


async def test_a_gap_that_never_fills_fails_with_seq_gap_after_the_wait(store: Store) -> None:
    records = scenario()
    journal = await store.create(records[0])
    waiting = asyncio.create_task(journal.append([records[2]]))
    with pytest.raises(SeqGap):
        await waiting
    assert journal.last_seq == 1
    await journal.append(records[1:3])
    assert journal.last_seq == 3


async def test_refuses_a_second_open_of_an_open_run_with_locked(store: Store) -> None:
    records = scenario()
    journal = await create_with(store, records[:3])
    with pytest.raises(Locked):
        await store.open("run-1")
    await journal.close()
    again = await store.open("run-1")
    with pytest.raises(Locked):
        await store.open("run-1")
    await again.close()


async def test_reopens_a_closed_run_and_continues_at_the_next_seq(store: Store) -> None:
    records = scenario()
    journal = await create_with(store, records[:5])
    await journal.close()
    journal = await store.open("run-1")
    assert journal.last_seq == 5
    assert journal.last_hash == records[4].hash
    assert journal.repair is None
    await journal.append(records[5:])
    assert [r.raw for r in await store.load("run-1")] == [r.raw for r in records]


async def test_a_closed_journal_refuses_appends(store: Store) -> None:
    records = scenario()
    journal = await create_with(store, records[:2])
    await journal.close()
    with pytest.raises(Locked):
        await journal.append([records[2]])


async def test_lists_runs_newest_first_with_their_info(store: Store) -> None:
    old = run_records("older", "2026-11-30T10:00:00.000000Z", 1)
    new = run_records("newer", "2026-11-30T11:00:00.000000Z", 2)
    await create_with(store, old)
    journal = await create_with(store, new)
    await journal.append(
        [
            make_record(
                6,
                "terminal",
                terminal_payload("completed"),
                new[-1].hash,
                "2026-11-30T11:30:00.000000Z",
            )
        ]
    )
    infos = await store.list()
    assert [i.run_id for i in infos] == ["newer", "older"]
    newer, older = infos
    assert newer.record_count == 6
    assert newer.last_seq == 6
    assert newer.status == "completed"
    assert newer.updated == "2026-11-30T11:30:00.000000Z"
    assert newer.created == TS
    assert newer.model == "claude-test"
    assert newer.prompt_preview == "prompt of newer"
    assert older.status == "open"
    assert older.record_count == 3
    assert older.bytes >= sum(len(r.raw) for r in old)
    single = await store.info("older")
    assert (single.run_id, single.last_seq, single.record_count) == ("older", 3, 3)


async def test_exists_is_true_only_for_created_runs(store: Store) -> None:
    assert not await store.exists("run-1")
    await store.create(scenario()[0])
    assert await store.exists("run-1")
    assert not await store.exists("run-2")


async def test_deletes_a_run_idempotently(store: Store) -> None:
    journal = await create_with(store, scenario()[:3])
    await journal.close()
    assert await store.delete("run-1") is True
    assert await store.delete("run-1") is False
    assert not await store.exists("run-1")
    with pytest.raises(SessionNotFound):
        await store.load("run-1")
    assert [i.run_id for i in await store.list()] == []
    fresh = await store.create(scenario()[0])
    assert fresh.last_seq == 1


async def test_refuses_to_delete_a_run_that_is_open_for_append(store: Store) -> None:
    await create_with(store, scenario()[:3])
    with pytest.raises(Locked):
        await store.delete("run-1")
    assert len(await store.load("run-1")) == 3


async def test_recovery_of_a_healthy_run_moves_nothing_or_is_refused_as_unsupported(
    store: Store, backend_name: str
) -> None:
    recs = scenario()[:5]
    journal = await create_with(store, recs)
    await journal.close()
    if backend_name == "file":
        report = await store.recover("run-1")
        assert (report.quarantined, report.rebase) == (0, None)
    else:  # a backend without recovery says so, typed, changing nothing
        name = "JetStream" if backend_name == "jetstream" else backend_name
        with pytest.raises(Unsupported, match=f"the {name} backend") as info:
            await store.recover("run-1")
        assert info.value.grpc_status == "UNIMPLEMENTED"
    assert [r.raw for r in await store.load("run-1")] == [r.raw for r in recs]


async def test_verify_walks_the_whole_chain(store: Store) -> None:
    records = scenario()
    await create_with(store, records)
    report = await store.verify("run-1")
    assert report.records == len(records)
    assert report.last_seq == len(records)
    assert report.last_hash == records[-1].hash
    assert report.segments >= 1


async def test_verify_refuses_a_stored_record_that_breaks_its_schema(store: Store) -> None:
    records = scenario()
    # a writer bug: the store keeps what it is given, verify must not vouch for it
    bad = make_record(len(records) + 1, "user", {"content": 5}, records[-1].hash, TS)
    journal = await create_with(store, [*records, bad])
    await journal.close()
    with pytest.raises(StoreCorrupted) as refused:
        await store.verify("run-1")
    assert refused.value.metadata["seq"] == str(bad.seq)
    assert "not a valid record" in refused.value.message


async def test_verify_reports_a_stored_record_with_a_repeated_key_as_damage_naming_it(
    store: Store,
) -> None:
    records = scenario()
    good = make_record(len(records) + 1, "user", {"content": []}, records[-1].hash, TS)
    # a writer that is not canonical: the same key twice, its hash over the bytes as written
    raw = good.raw.replace(b'"user":{"content":[]}', b'"user":{"content":[],"content":[]}')
    assert raw != good.raw
    bad = Record(good.seq, "user", TS, good.prev, {"content": []}, None, raw, sha256_hex(raw))
    journal = await create_with(store, [*records, bad])
    await journal.close()
    with pytest.raises(StoreCorrupted) as refused:
        await store.verify("run-1")
    assert refused.value.metadata["seq"] == str(bad.seq)
    assert "the key 'content' appears twice" in refused.value.message


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_refuses_an_unsafe_run_id_with_invalid_id(store: Store, bad: str) -> None:
    with pytest.raises(InvalidId):
        await store.open(bad)
    with pytest.raises(InvalidId):
        await store.exists(bad)
    with pytest.raises(InvalidId):
        await store.load(bad)
    with pytest.raises(InvalidId):
        await store.info(bad)
    with pytest.raises(InvalidId):
        await store.delete(bad)
    with pytest.raises(InvalidId):
        await store.verify(bad)
    with pytest.raises(InvalidId):
        await store.create(make_record(1, "meta", meta_payload(bad), GENESIS, TS))
    assert await store.list() == []


async def test_a_missing_run_raises_session_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.open("nope")
    with pytest.raises(SessionNotFound):
        await store.load("nope")
    with pytest.raises(SessionNotFound):
        await store.info("nope")
    with pytest.raises(SessionNotFound):
        await store.verify("nope")


async def test_creating_an_existing_run_raises_session_exists(store: Store) -> None:
    journal = await store.create(scenario()[0])
    with pytest.raises(SessionExists):
        await store.create(scenario()[0])
    await journal.close()
    with pytest.raises(SessionExists):
        await store.create(scenario()[0])


async def test_every_acknowledgement_states_the_store_durability(store: Store) -> None:
    assert store.durability in (MEMORY, FSYNC_LOCAL, JETSTREAM_ACK)
    records = scenario()
    journal = await store.create(records[0])
    assert journal.durability == store.durability
    results = await journal.append(records[1:3])
    results += await journal.append(records[1:2])
    assert {r.durability for r in results} == {store.durability}


async def test_records_survive_a_store_restart(
    store: Store, backend_name: str, tmp_path: Path
) -> None:
    records = scenario()
    journal = await create_with(store, records[:7])
    await journal.close()
    restarted: Store = await factory(backend_name).reopen_store(store, tmp_path)
    try:
        assert [r.raw for r in await restarted.load("run-1")] == [r.raw for r in records[:7]]
        journal = await restarted.open("run-1")
        assert journal.last_seq == 7
        await journal.append(records[7:])
        assert fold(await restarted.load("run-1")) == fold(records)
        assert (await restarted.verify("run-1")).last_hash == records[-1].hash
        await journal.close()
    finally:
        if restarted is not store:
            await restarted.close()
