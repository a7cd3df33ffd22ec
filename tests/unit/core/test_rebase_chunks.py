"""A rebase of 128 pages or more names its page references through chunks
(journald.core.rebase_chunks, docs/protocol.md#page-reference-chunks): a record whose size
does not grow with the page count, folding to the same conversation as every page listed,
and a missing chunk is store_corrupted naming it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from journald.core import schema
from journald.core.errors import StoreCorrupted
from journald.core.fold import fold
from journald.core.pages import bytes_resolver, cut, paged_payload
from journald.core.rebase_chunks import log_messages, rebase_payload, with_chunks
from journald.core.records import GENESIS, Record, canonical_json, make_record
from journald.core.ref_chunks import REFS_PER_CHUNK
from journald.storage.memory import MemoryAttachmentStore
from journald.storage.pages import PageStore
from tests.builders import TS, meta_payload

BASE = {"reason": "restore", "checkpoint_id": "cp-1", "covered": {"from_seq": 1, "to_seq": 1}}


def talk(n: int) -> list[dict[str, Any]]:
    """``n`` alternating text messages: with a 1-byte page target, one page each."""
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": [{"type": "text", "text": f"m{i}"}],
        }
        for i in range(n)
    ]


def records(payload: dict[str, Any]) -> list[Record]:
    meta = make_record(1, "meta", meta_payload("r"), GENESIS, TS)
    return [meta, make_record(2, "rebase", payload, meta.hash, TS)]


def test_a_rebase_of_fewer_than_128_pages_is_the_paged_payload_byte_for_byte() -> None:
    paged = cut(talk(REFS_PER_CHUNK - 1), 1)
    payload, rebase = rebase_payload(BASE, paged)
    assert payload == paged_payload(BASE, paged)
    assert "page_chunks" not in payload
    assert rebase.chunks == ()


@pytest.mark.parametrize("pages", [300, 3000])
def test_a_rebase_of_many_pages_stays_under_16_kib_and_folds_to_the_same_messages(
    pages: int,
) -> None:
    msgs = talk(pages)
    paged = cut(msgs, 1)
    assert len(paged.refs) == pages
    payload, rebase = rebase_payload(BASE, paged)
    rec = records(payload)[1]
    schema.validate_record(rec)  # the canonical record the daemon writes is valid
    listed = records(paged_payload(BASE, paged))[1]
    assert len(canonical_json(rec.as_json())) < 16 * 1024  # every page listed: ~100 bytes each
    assert len(canonical_json(listed.as_json())) > 90 * pages
    assert len(payload["page_chunks"]) == pages // REFS_PER_CHUNK
    assert len(payload["pages"]) == pages % REFS_PER_CHUNK
    chunked = log_messages(
        fold(records(payload), pages=rebase.resolver()).messages, rebase.resolver()
    )
    listed_log = fold(records(paged_payload(BASE, paged)), pages=paged.resolver()).messages
    assert chunked == log_messages(listed_log, paged.resolver())
    assert chunked == msgs
    # read back from bytes, each chunk and page checked
    stored = dict(paged.data) | {c.ref.sha256: c.raw for c in rebase.chunks}
    store = MemoryAttachmentStore()
    for raw in stored.values():
        asyncio.run(store.put("r", raw))
    resolve = asyncio.run(PageStore(store).for_records("r", records(payload)))
    folded = fold(records(payload), pages=resolve).messages
    assert asyncio.run(PageStore(store).whole("r", folded)) == msgs


def test_a_rebase_whose_chunk_is_missing_is_store_corrupted_naming_the_chunk() -> None:
    paged = cut(talk(2 * REFS_PER_CHUNK + 3), 1)
    payload, rebase = rebase_payload(BASE, paged)
    missing = rebase.chunks[1].ref.sha256
    known = with_chunks(bytes_resolver(paged.data), rebase.chunks[:1])
    # the fold reads no chunk (its open tail takes the last loose pages): reading the whole
    # conversation names the missing one
    with pytest.raises(StoreCorrupted) as err:
        log_messages(fold(records(payload), pages=known).messages, known)
    assert err.value.metadata["chunk"] == missing
    unchunked = bytes_resolver(paged.data)
    with pytest.raises(StoreCorrupted) as err:  # a reader that knows no chunk at all
        log_messages(fold(records(payload), pages=unchunked).messages, unchunked)
    assert err.value.metadata["chunk"] == rebase.chunks[0].ref.sha256

    store = MemoryAttachmentStore()  # a read through the run's store: pages, one chunk
    for raw in [*paged.data.values(), rebase.chunks[0].raw]:
        asyncio.run(store.put("r", raw))
    resolve = asyncio.run(PageStore(store).for_records("r", records(payload)))
    folded = fold(records(payload), pages=resolve).messages
    with pytest.raises(StoreCorrupted) as err:
        asyncio.run(PageStore(store).whole("r", folded))
    assert err.value.metadata["chunk"] == missing
    assert missing in err.value.message
    with pytest.raises(StoreCorrupted) as err:
        asyncio.run(PageStore(store).check("r", records(payload)))
    assert err.value.metadata["chunk"] == missing
