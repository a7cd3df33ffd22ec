"""The answered tool_use ids sealed in chunks (``journald.core.answered``,
docs/design.md#answered-ids): a snapshot names them by the head of a chain of chunks plus a
tail, and a fold continued from it labels every late, duplicate and unknown result exactly as
the fold of the whole journal does, reading the chunks only when it is asked about one."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core.answered import (
    AnsweredIds,
    AnsweredNotLoaded,
    answered_from_json,
    decode_chunk,
    encode_chunk,
)
from journald.core.errors import StoreCorrupted
from journald.core.fold import RunState, fold, fold_into
from journald.core.message_log import MessageLog
from journald.core.pages import cut
from journald.core.records import Record, canonical_json
from journald.core.snapshot import (
    ANSWERED_SNAPSHOT_VERSION,
    SnapshotUnreadable,
    decode_state,
    encode_state,
    paged_state,
    snapshot_answered_head,
)
from journald.storage.memory import MemoryAttachmentStore, MemoryStore
from journald.storage.pages import PageStore
from journald.writer.folding import fold_stored
from tests.builders import JournalBuilder, assistant_payload, result_payload, tool_use
from tests.profiles import scaled
from tests.unit.strategies import journals

RUN = "answers"


def stored(doc: dict[str, Any]) -> Any:
    """The document as a store hands it back: canonical JSON bytes parsed again."""
    return json.loads(canonical_json(doc))


async def snapshot_then_continue(
    recs: list[Record], split: int, seals: set[int], target: int
) -> tuple[RunState, RunState]:
    """Fold ``recs[:split]`` sealing the answered ids (``target`` bytes a chunk) after each
    record of ``seals``, save it as a snapshot document, then continue it with the daemon's
    fold of a stored run (``fold_stored``) over the rest; (that state, its snapshot)."""
    run_id = recs[0].payload["run_id"]
    store, attachments = MemoryStore(), MemoryAttachmentStore()
    pages = PageStore(attachments)
    journal = await store.create(recs[0])
    if recs[1:]:
        await journal.append(recs[1:])
    await journal.close()
    st_ = RunState()
    for i, rec in enumerate(recs[:split]):
        try:
            fold_into(st_, (rec,))
        except AnsweredNotLoaded:  # a duplicate or unknown result after a seal
            await pages.load_answered(run_id, st_.answered_ever)
            fold_into(st_, (rec,))
        if i in seals:
            chunks = st_.answered_ever.sealable(target)
            for c in chunks:
                await attachments.put(run_id, c.raw)
            st_.answered_ever.seal(chunks)
    paged = cut(st_.messages.tail)
    await pages.put(run_id, paged)
    doc = stored(paged_state(st_, paged))
    snapshot = decode_state(doc, paged.resolver(), lazy=True)
    assert (doc["v"] == ANSWERED_SNAPSHOT_VERSION) == (st_.answered_ever.head is not None)
    assert not snapshot.answered_ever.loaded or snapshot.answered_ever.head is None
    resumed = await fold_stored(store, run_id, None, snapshot, pages)
    if resumed.answered_ever.head is not None and not resumed.answered_ever.loaded:
        await pages.load_answered(run_id, resumed.answered_ever)  # to compare every id
    resumed.messages = MessageLog(await pages.whole(run_id, resumed.messages))
    return resumed, decode_state(doc, paged.resolver())


@settings(max_examples=scaled(60), deadline=None)
@given(journals(max_steps=30), st.data())
def test_a_snapshot_with_sealed_answered_ids_continues_exactly_like_the_whole_fold(
    recs: list[Record], data: st.DataObject
) -> None:
    whole = fold(recs)
    split = data.draw(st.integers(1, len(recs)), label="split")
    seals = data.draw(st.sets(st.integers(0, split - 1)), label="seals")
    target = data.draw(st.integers(1, 40), label="chunk bytes")
    resumed, _ = asyncio.run(snapshot_then_continue(recs, split, seals, target))
    assert resumed.anomalies == whole.anomalies  # every label, in order
    assert resumed.answered_ever == whole.answered_ever
    assert resumed == whole


def dup_journal(calls: int) -> list[Record]:
    """``calls`` answered tool calls, then a late copy of the first answer and a result for
    an id no call had."""
    b = JournalBuilder(RUN)
    for i in range(calls):
        b.add("assistant", assistant_payload([tool_use(f"toolu_{i:05d}")], i + 1, "tool_use"))
        b.add("tool_result", result_payload(f"toolu_{i:05d}"))
    b.add("tool_result", result_payload("toolu_00000"))
    b.add("tool_result", result_payload("toolu_never"))
    return b.records


def test_the_snapshot_of_thousands_of_answered_calls_carries_one_chunk_reference_and_a_tail() -> (
    None
):
    recs = dup_journal(3000)
    split = len(recs) - 2
    resumed, snap = asyncio.run(snapshot_then_continue(recs, split, {split - 1}, 16 * 1024))
    assert [a.kind for a in resumed.anomalies] == ["duplicate_result", "unknown_tool_use_id"]
    assert resumed == fold(recs)
    assert snap.answered_ever.head is not None
    assert snap.answered_ever.sealed_count == 3000
    head = snap.answered_ever.as_json()
    assert len(canonical_json(head)) < 300  # one reference, whatever the run's length


def test_membership_without_the_chunks_loaded_is_asked_for_not_guessed() -> None:
    first = encode_chunk(["a", "b"], None)
    ids = AnsweredIds(["c"], first.ref, 2)
    assert "c" in ids
    with pytest.raises(AnsweredNotLoaded):
        _ = "a" in ids
    with pytest.raises(AnsweredNotLoaded):
        encode_state(RunState(answered_ever=ids))  # a whole snapshot needs every id
    ids.load(decode_chunk(first.ref, first.raw).ids)
    assert "a" in ids
    assert "z" not in ids
    assert ids == {"a", "b", "c"}


def test_a_chunk_names_the_one_before_it_and_is_checked_against_its_reference() -> None:
    first = encode_chunk(["b", "a", "a"], None)
    second = encode_chunk(["c"], first.ref)
    assert decode_chunk(second.ref, second.raw).prev == first.ref
    assert decode_chunk(first.ref, first.raw).ids == ["a", "b"]
    with pytest.raises(StoreCorrupted, match=first.ref.sha256):
        decode_chunk(first.ref, first.raw.replace(b'"a"', b'"x"'))


@pytest.mark.parametrize(
    "damage",
    [
        {"answered": None},
        {"answered": {"head": None, "count": 0, "ids": []}},
        {"answered": {"head": None, "count": 3, "ids": ["a"]}},
        {"answered": {"ids": ["a"]}},
    ],
)
def test_a_version_3_snapshot_with_a_damaged_answered_part_is_refused_as_unreadable(
    damage: dict[str, Any],
) -> None:
    recs = dup_journal(40)
    st_ = fold(recs)
    chunks = st_.answered_ever.sealable(64)
    st_.answered_ever.seal(chunks)
    doc = stored(paged_state(st_, cut(st_.messages.tail)))
    assert snapshot_answered_head(doc) == chunks[-1].ref
    with pytest.raises(SnapshotUnreadable):
        decode_state({**doc, **damage})


def test_an_old_snapshot_with_the_whole_list_still_decodes() -> None:
    recs = dup_journal(5)
    doc = stored(encode_state(fold(recs[:-2])))
    assert doc["v"] == 1
    assert len(doc["answered_ever"]) == 5
    assert fold(recs[-2:], start=decode_state(doc)) == fold(recs)
    assert answered_from_json({"head": None, "count": 0, "ids": ["x"]}) == {"x"}


def test_a_chunk_that_cannot_be_read_when_asked_for_makes_the_fold_start_from_seq_1() -> None:
    async def scenario() -> tuple[RunState, RunState]:
        recs = dup_journal(200)
        store, attachments = MemoryStore(), MemoryAttachmentStore()
        journal = await store.create(recs[0])
        await journal.append(recs[1:])
        await journal.close()
        st_ = fold(recs[:-2])
        chunks = st_.answered_ever.sealable(256)
        st_.answered_ever.seal(chunks)  # never stored: the chain's chunks are all missing
        doc = stored(paged_state(st_, cut(st_.messages.tail)))
        resumed = await fold_stored(store, RUN, None, decode_state(doc), PageStore(attachments))
        return resumed, fold(recs)

    resumed, whole = asyncio.run(scenario())
    assert resumed.answered_ever.head is None  # folded from seq 1: every id in its tail
    assert resumed == whole


def test_sealing_takes_the_ids_out_of_memory_and_keeps_the_tail_under_one_chunk() -> None:
    ids = AnsweredIds()
    chunks = []
    for i in range(3000):
        ids.add(f"toolu_{i:024d}")
        sealed = ids.sealable()
        ids.seal(sealed)  # what the writer does after each append
        chunks += sealed
    assert ids.tail_bytes() < 16 * 1024
    assert not ids.loaded  # asking about a sealed id would read the chunks
    assert ids.sealed_count + len(ids.tail) == 3000
    assert ids.head == chunks[-1].ref
    ids.load(t for c in chunks for t in c.ids)
    assert ids == {f"toolu_{i:024d}" for i in range(3000)}
