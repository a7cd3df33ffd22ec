"""Message pages (journald.core.pages): cutting, hashing, resolving, and the fold over
rebases that reference pages (docs/design.md#message-pages)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core import schema
from journald.core.checkpoints import governed
from journald.core.errors import StoreCorrupted
from journald.core.fold import fold
from journald.core.pages import (
    PAGE_FORMAT,
    PageRef,
    PageResolver,
    bytes_resolver,
    cut,
    decode_page,
    encode_page,
    ref_from_json,
)
from journald.core.paging import is_clean
from journald.core.rebase_chunks import (
    log_messages,
    rebase_conversation,
    rebase_payload,
    with_chunks,
)
from journald.core.records import GENESIS, Record, canonical_json, make_record, sha256_hex
from journald.core.ref_chunks import REFS_PER_CHUNK
from journald.core.snapshot import (
    SnapshotUnreadable,
    decode_state,
    encode_state,
    paged_snapshot,
    snapshot_pages,
)
from tests.profiles import scaled
from tests.unit.strategies import journals, message_lists

TARGETS = st.sampled_from([1, 40, 200, 10**9])


def _relinked(records: list[Record]) -> list[Record]:
    out: list[Record] = []
    prev = GENESIS
    for r in records:
        out.append(make_record(r.seq, r.kind, r.payload, prev, r.ts, r.trace))
        prev = out[-1].hash
    return out


def _paged_rebase(rec: Record, target: int, store: dict[str, bytes]) -> Record:
    """``rec`` (an inline rebase) holding its messages as pages, the pages added to ``store``
    (and from 128 pages the chunks of their references, journald.core.rebase_chunks)."""
    paged = cut(rec.payload["messages"], target)
    store.update(paged.data)
    base = {k: v for k, v in rec.payload.items() if k != "messages"}
    payload, rebase = rebase_payload(base, paged)
    store.update({c.ref.sha256: c.raw for c in rebase.chunks})
    return make_record(rec.seq, "rebase", payload, rec.prev, rec.ts, rec.trace)


FILLER = [
    {"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": f"f{i}"}]}
    for i in range(2 * REFS_PER_CHUNK + 5)
]
"""A long conversation before a rebase's own: one page per message at a 1-byte target, so
the rebase names two chunks of page references and a few loose ones."""


def _long(rec: Record) -> Record:
    """``rec`` (an inline rebase) with ``FILLER`` before its messages."""
    payload = dict(rec.payload)
    payload["messages"] = [*FILLER, *payload["messages"]]
    return make_record(rec.seq, "rebase", payload, rec.prev, rec.ts, rec.trace)


def _store_resolver(store: dict[str, bytes]) -> PageResolver:
    """Pages and page-reference chunks read from ``store`` (what a run's store holds)."""
    chunks: dict[str, tuple[PageRef, ...]] = {}
    for raw in store.values():
        if raw.startswith(b'{"format":"journald-pagerefs/1"'):
            ref = PageRef(sha256_hex(raw), 0, len(raw))
            refs = tuple(ref_from_json(r) for r in json.loads(raw)["refs"])
            chunks[ref.sha256] = refs
    return with_chunks(bytes_resolver(store), chunks)


@settings(max_examples=scaled(60))
@given(message_lists(max_size=12), TARGETS)
def test_pages_then_tail_are_the_conversation_cut_only_at_clean_boundaries(
    msgs: list[dict[str, Any]], target: int
) -> None:
    paged = cut(msgs, target)
    joined: list[dict[str, Any]] = []
    at = 0
    for ref in paged.refs:
        page = decode_page(ref, paged.data[ref.sha256])
        assert ref.sha256 == sha256_hex(encode_page(page))
        joined.extend(page)
        at += ref.count
        assert is_clean(msgs, at), f"a page ends at {at}, between a tool call and its result"
    assert [*joined, *paged.tail] == msgs
    assert not paged.tail or len(canonical_json(paged.tail)) <= target


@settings(max_examples=scaled(40))
@given(message_lists(max_size=10), message_lists(max_size=6), TARGETS)
def test_a_conversation_that_grew_keeps_every_page_it_had_before_its_tail(
    head: list[dict[str, Any]], more: list[dict[str, Any]], target: int
) -> None:
    before = cut(head, target)
    after = cut([*head, *more], target)
    # the pages of the shorter conversation are the first pages of the longer one, unless
    # the new messages answer calls of the old tail's last turn (then the boundary moves)
    if is_clean([*head, *more], len(head)):
        assert after.refs[: len(before.refs)] == before.refs


def test_a_page_is_canonical_json_of_its_format_and_messages_addressed_by_sha256() -> None:
    msgs = [{"role": "user", "content": [{"type": "text", "text": "x" * 300}]}]
    paged = cut(msgs, 100)
    (ref,) = paged.refs
    raw = paged.data[ref.sha256]
    assert raw == canonical_json({"format": PAGE_FORMAT, "messages": msgs})
    assert ref.sha256 == sha256_hex(raw)
    assert ref.size == len(raw)
    assert ref.count == 1
    assert paged.tail == []


def test_a_page_changed_by_one_byte_or_missing_is_store_corrupted_naming_it() -> None:
    msgs = [{"role": "user", "content": [{"type": "text", "text": "y" * 300}]}]
    paged = cut(msgs, 100)
    (ref,) = paged.refs
    raw = paged.data[ref.sha256]
    bad = raw.replace(b"yyy", b"yyz", 1)
    with pytest.raises(StoreCorrupted) as damaged:
        bytes_resolver({ref.sha256: bad})(ref)
    with pytest.raises(StoreCorrupted) as missing:
        bytes_resolver({})(ref)
    for err in (damaged.value, missing.value):
        assert err.metadata["page"] == ref.sha256
        assert ref.sha256 in err.message


def test_a_paged_rebase_folds_to_its_pages_then_its_tail_and_without_its_page_refuses() -> None:
    meta = make_record(
        1,
        "meta",
        {
            "run_id": "r",
            "created": "2026-01-01T00:00:00Z",
            "fingerprint": {
                "provider": "p",
                "model": "m",
                "system_prompt_sha256": "0" * 64,
                "tools_sha256": "0" * 64,
                "thinking": "off",
                "max_tokens": 1,
                "max_iterations": 1,
            },
            "prompt": [],
            "interactive": False,
        },
        GENESIS,
        "2026-01-01T00:00:00Z",
    )
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": f"m{i}" * 80}]}
        if i % 2 == 0
        else {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
        for i in range(9)
    ]
    inline = make_record(2, "rebase", {"reason": "restore", "messages": msgs}, meta.hash, meta.ts)
    store: dict[str, bytes] = {}
    paged = _paged_rebase(inline, 200, store)
    assert paged.payload["pages"]
    assert len(paged.raw) < len(inline.raw)
    schema.validate_record(paged)  # the published schema accepts a paged rebase
    folded = fold([meta, paged], pages=bytes_resolver(store)).messages
    assert folded.has_pages  # the fold keeps the rebase's pages sealed
    assert log_messages(folded, bytes_resolver(store)) == msgs
    with pytest.raises(StoreCorrupted) as err:  # its open pages at the fold, the others read
        log_messages(fold([meta, paged], pages=bytes_resolver({})).messages, bytes_resolver({}))
    assert err.value.metadata["page"] in {r["sha256"] for r in paged.payload["pages"]}
    with pytest.raises(StoreCorrupted):
        fold([meta, paged])  # a paged rebase cannot be folded without pages to read


@settings(max_examples=scaled(60))
@given(journals(state=True), st.data())
def test_restore_then_fold_equals_the_checkpoint_conversation_with_paged_and_inline_rebases(
    recs: list[Record], data: st.DataObject
) -> None:
    """For any run and any checkpoint of it (any seq), a restore appended to the run folds
    to exactly the checkpoint's conversation, whichever of the run's rebases (and the
    restore's) hold pages and whichever hold their messages inline."""
    store: dict[str, bytes] = {}
    target = data.draw(TARGETS, "page target")
    if data.draw(st.booleans(), "long rebases"):  # some rebases name chunks of page refs
        recs = _relinked([_long(r) if r.kind == "rebase" else r for r in recs])
        target = data.draw(st.sampled_from([1, 10**9]), "page target of long rebases")
    mixed = [
        _paged_rebase(r, target, store) if r.kind == "rebase" and data.draw(st.booleans()) else r
        for r in recs
    ]
    mixed = _relinked(mixed)
    resolve = _store_resolver(store)
    whole = fold(recs)
    # paging is transparent
    assert log_messages(fold(mixed, pages=resolve).messages, resolve) == whole.messages
    k = data.draw(st.integers(1, len(recs)), "checkpoint seq")
    cp_messages = governed(log_messages(fold(mixed[:k], pages=resolve).messages, resolve))
    last = mixed[-1]
    restore = make_record(
        last.seq + 1,
        "rebase",
        {
            "reason": "restore",
            "messages": cp_messages,
            "covered": {"from_seq": 1, "to_seq": last.seq},
        },
        last.hash,
        last.ts,
    )
    if data.draw(st.booleans(), "restore of a long checkpoint"):
        restore = _long(restore)
        cp_messages = [*FILLER, *cp_messages]
    if data.draw(st.booleans(), "restore paged"):
        restore = _paged_rebase(restore, target, store)
    resolve = _store_resolver(store)
    after = fold([*mixed, restore], pages=resolve)
    assert len(after.messages) == len(cp_messages)  # counted from the page references
    assert log_messages(after.messages, resolve) == cp_messages
    assert rebase_conversation(restore.payload, resolve) == cp_messages
    assert after.state == whole.state  # a rebase leaves framework state alone


@settings(max_examples=scaled(40))
@given(journals(state=True), TARGETS, st.data())
def test_a_paged_fold_snapshot_decodes_to_the_state_it_was_cut_from(
    recs: list[Record], target: int, data: st.DataObject
) -> None:
    """A snapshot whose messages are pages (version 2) is the same state as the inline one,
    folds on like it, and without a page to read is unreadable (the daemon folds in full).
    A release that knows only version 1 refuses it by its version."""
    k = data.draw(st.integers(1, len(recs)), "snapshot seq")
    head = fold(recs[:k])
    paged = cut(head.messages, target)
    doc = paged_snapshot(encode_state(head), paged)
    assert [r.sha256 for r in snapshot_pages(doc)] == [r.sha256 for r in paged.refs]
    back = decode_state(doc, bytes_resolver(paged.data))
    assert back == head
    assert fold(recs[k:], start=back) == fold(recs)
    if paged.refs:
        with pytest.raises(SnapshotUnreadable):
            decode_state(doc, bytes_resolver({}))
