"""A conversation's page references sealed into chunks (``journald.core.ref_chunks``,
docs/design.md#message-pages): a chunk is checked against its reference, a two-level
``MessageLog`` reads exactly as the flat list once the chunks and pages a read names are
loaded, and a version 4 fold snapshot decodes to the state it was written from and folds on
like it (issue 31: a dormant read and a lease end cost what they touch, not the run)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core import ref_chunks
from journald.core.errors import StoreCorrupted
from journald.core.fold import RunState, fold
from journald.core.message_log import MessageLog, PagesNotLoaded, RefChunksNotLoaded
from journald.core.pages import PageRef, cut, cut_open, decode_page
from journald.core.records import canonical_json, sha256_hex
from journald.core.ref_chunks import (
    PAGEREFS_FORMAT,
    REFS_PER_CHUNK,
    decode_ref_chunk,
    encode_ref_chunk,
    full_chunks,
)
from journald.core.snapshot import (
    ANSWERED_SNAPSHOT_VERSION,
    CHUNKED_SNAPSHOT_VERSION,
    PAGED_SNAPSHOT_VERSION,
    SNAPSHOT_VERSION,
    SnapshotUnreadable,
    decode_state,
    new_chunks,
    paged_state,
    snapshot_chunks,
    snapshot_pages,
)
from tests.builders import text
from tests.profiles import scaled
from tests.unit.strategies import journals

Message = dict[str, Any]


@contextmanager
def chunk_size(n: int) -> Iterator[None]:
    """Chunks of ``n`` page references (tiny, so a short journal fills several)."""
    with mock.patch.object(ref_chunks, "REFS_PER_CHUNK", n):
        yield


def _ref(i: int, count: int = 3) -> PageRef:
    return PageRef(sha256_hex(str(i).encode()), count, 100 + i)


def _messages(n: int) -> list[Message]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [text(f"m{i} " * (i % 7))]}
        for i in range(n)
    ]


class Stores:
    """Pages and chunks as a run's content-addressed store holds them (decoded)."""

    def __init__(self) -> None:
        self.pages: dict[str, list[Message]] = {}
        self.chunks: dict[str, tuple[PageRef, ...]] = {}

    def keep_pages(self, data: dict[str, bytes], refs: tuple[PageRef, ...]) -> None:
        for r in refs:
            self.pages[r.sha256] = decode_page(r, data[r.sha256])

    def keep_chunks(self, chunks: list[ref_chunks.RefChunk]) -> None:
        for c in chunks:
            self.chunks[c.ref.sha256] = decode_ref_chunk(c.ref, c.raw).refs

    def page(self, ref: PageRef) -> list[Message]:
        return list(self.pages[ref.sha256])

    def chunk(self, ref: PageRef) -> tuple[PageRef, ...]:
        return self.chunks[ref.sha256]


# --- the chunk format ----------------------------------------------------------------------------


def test_a_chunk_is_canonical_json_of_its_format_and_page_refs_counting_their_messages() -> None:
    refs = [_ref(i, count=i + 1) for i in range(REFS_PER_CHUNK)]
    chunk = encode_ref_chunk(refs)
    assert chunk.raw == canonical_json(
        {"format": PAGEREFS_FORMAT, "refs": [r.as_json() for r in refs]}
    )
    assert chunk.ref == PageRef(sha256_hex(chunk.raw), sum(r.count for r in refs), len(chunk.raw))
    assert decode_ref_chunk(chunk.ref, chunk.raw).refs == tuple(refs)
    # only full chunks are cut, at multiples of REFS_PER_CHUNK: the same refs, the same chunks
    more = refs + [_ref(1000 + i) for i in range(REFS_PER_CHUNK + 5)]
    assert [c.ref for c in full_chunks(more)] == [
        chunk.ref,
        encode_ref_chunk(more[REFS_PER_CHUNK : 2 * REFS_PER_CHUNK]).ref,
    ]
    assert full_chunks(refs[:-1]) == []


def _damaged(chunk: ref_chunks.RefChunk) -> list[tuple[PageRef, bytes]]:
    obj = json.loads(chunk.raw)
    short = canonical_json({**obj, "refs": obj["refs"][:-1]})
    other = canonical_json({**obj, "format": "journald-pagerefs/0"})
    return [
        (chunk.ref, chunk.raw[:-2] + b" }"),  # one byte changed
        (chunk.ref, chunk.raw[:-1]),  # cut short
        (PageRef(sha256_hex(short), chunk.ref.count, len(short)), short),  # a ref left out
        (PageRef(sha256_hex(other), chunk.ref.count, len(other)), other),  # another format
        (PageRef(chunk.ref.sha256, chunk.ref.count + 1, chunk.ref.size), chunk.raw),  # count
    ]


def test_a_damaged_chunk_is_refused_as_store_corrupted_naming_it() -> None:
    chunk = encode_ref_chunk([_ref(i) for i in range(REFS_PER_CHUNK)])
    for ref, raw in _damaged(chunk):
        with pytest.raises(StoreCorrupted) as err:
            decode_ref_chunk(ref, raw)
        assert err.value.metadata["chunk"] == ref.sha256
        assert f"message-page reference chunk {ref.sha256}" in err.value.message
        assert "restore the run's attachments" in err.value.message
    missing = ref_chunks.ref_chunk_missing(chunk.ref)
    assert "missing" in missing.message
    assert missing.metadata["chunk"] == chunk.ref.sha256


# --- a two-level log reads as the flat list -------------------------------------------------------


@settings(max_examples=scaled(80), deadline=None)
@given(
    st.integers(1, 60),
    st.sampled_from([1, 30, 120]),
    st.integers(1, 5),
    st.integers(0, 3),
    st.lists(st.tuples(st.integers(0, 70), st.integers(0, 30)), max_size=8),
)
def test_a_log_of_chunks_then_loose_pages_reads_the_same_messages_as_the_flat_list(
    n: int, target: int, per_chunk: int, tail_keep: int, reads: list[tuple[int, int]]
) -> None:
    want = _messages(n)
    with chunk_size(per_chunk):
        paged = cut(want, target)
        keep = Stores()
        keep.keep_pages(paged.data, paged.refs)
        chunks = full_chunks(paged.refs)
        keep.keep_chunks(chunks)
        loose = paged.refs[sum(len(c.refs) for c in chunks) :]
        log = MessageLog(paged.tail, loose, chunks=[c.ref for c in chunks])
        assert len(log) == n  # no chunk or page read
        assert log.sealed == n - len(paged.tail)
        assert log.chunked == sum(c.ref.count for c in chunks)
        for offset, limit in reads:
            start, end = offset, offset + limit
            named = log.missing_chunks(start, end)
            if named:  # a read of chunked messages needs its chunks: it says which
                with pytest.raises(RefChunksNotLoaded) as err:
                    log.span_refs(start, end)
                assert err.value.chunks[0] in named
            # as PageStore.load_chunks hands them over: into the (small) cache and to this read
            read = {**log.loaded_chunks(start, end), **{r.sha256: keep.chunk(r) for r in named}}
            for ref in named:
                log.provide_chunk(ref, keep.chunk(ref))
            pages = {r.sha256: keep.page(r) for r in log.missing(start, end, read)}
            span = log.span(start, end, pages, read)
            lo, hi = max(0, min(start, n)), max(0, min(end, n))
            assert span[lo:hi] == want[lo:hi]
            for i in range(lo, hi):  # one index at a time, through the caches
                for ref in log.missing_chunks(i, i + 1):
                    log.provide_chunk(ref, keep.chunk(ref))
                for ref in log.missing(i, i + 1):
                    log.provide(ref, keep.page(ref))
                assert log[i] == want[i]
        every = {sha: refs for sha, refs in keep.chunks.items()}
        assert log.all_refs(every) == paged.refs
        assert log.span(0, n, keep.pages, every)[0:n] == want


def test_sealing_fills_a_chunk_once_enough_pages_are_loose_and_keeps_reading() -> None:
    log = MessageLog(_messages(1))
    keep = Stores()
    with chunk_size(3):
        for i in range(1, 80):
            log.append(_messages(i + 1)[-1])
            paged = log.sealable(60)
            if paged is not None:
                keep.keep_pages(paged.data, paged.refs)
                log.seal(paged.refs)
                chunks = log.chunkable()
                keep.keep_chunks(chunks)
                log.seal_chunks(chunks)
            assert len(log.loose) < 3  # the writer seals a chunk once one is full
        assert len(log.chunks) >= 3
        assert log.span(0, len(log), keep.pages, keep.chunks)[0 : len(log)] == _messages(80)
        # a log decoded with no chunk loaded names the one a read of its oldest message needs
        cold = MessageLog(log.tail, log.loose, chunks=log.chunks)
        assert cold.missing_chunks(0, 1) == [log.chunks[0]]
        with pytest.raises(PagesNotLoaded):
            cold[0]


def test_the_last_page_of_a_chunk_comes_back_into_an_empty_tail_to_merge() -> None:
    msgs = _messages(12)
    with chunk_size(2):
        paged = cut(msgs, 1)
        chunks = full_chunks(paged.refs)
        assert len(chunks) * 2 == len(paged.refs)  # every page in a chunk, nothing loose
        keep = Stores()
        keep.keep_pages(paged.data, paged.refs)
        log = MessageLog((), (), chunks=[c.ref for c in chunks])
        with pytest.raises(RefChunksNotLoaded):
            log[-1] = {"role": "assistant", "content": []}
        log.provide_chunk(chunks[-1].ref, chunks[-1].refs)
        log.provide(paged.refs[-1], keep.page(paged.refs[-1]))
        log[-1] = {"role": "assistant", "content": [text("merged")]}
        assert len(log) == 12
        assert log.tail[-1]["content"] == [text("merged")]
        assert log.chunks == tuple(c.ref for c in chunks[:-1])
        assert log.loose == chunks[-1].refs[:-1]
        copy = log.copy()  # a copy reads through the same chunk cache
        assert copy.missing_chunks(0, 12) == log.missing_chunks(0, 12)


# --- snapshot version 4 ---------------------------------------------------------------------------


def _sealed_state(recs: list[Any], k: int, target: int, keep: Stores) -> RunState:
    """``fold(recs[:k])`` whose log was sealed as a held run's writer seals it."""
    head = fold(recs[:k])
    paged = cut_open(head.messages.tail, target)
    if paged.refs:
        keep.keep_pages(paged.data, paged.refs)
        head.messages.seal(paged.refs)
        chunks = head.messages.chunkable()
        keep.keep_chunks(chunks)
        head.messages.seal_chunks(chunks)
    return head


@settings(max_examples=scaled(60), deadline=None)
@given(journals(state=True, max_steps=40), st.sampled_from([1, 1, 1, 40, 200]), st.data())
def test_a_version_4_snapshot_decodes_to_the_state_it_was_written_from_and_folds_on_like_it(
    recs: list[Any], target: int, data: st.DataObject
) -> None:
    # late snapshots mostly: the longer the conversation, the more chunks it fills
    k = data.draw(st.integers(1, len(recs)).map(lambda i: len(recs) + 1 - i), "snapshot seq")
    per_chunk = data.draw(st.integers(1, 3), "refs per chunk")
    whole = fold(recs)
    with chunk_size(per_chunk):
        keep = Stores()
        head = _sealed_state(recs, k, target, keep)
        tail = cut_open(head.messages.tail, target)
        keep.keep_pages(tail.data, tail.refs)
        keep.keep_chunks(new_chunks(head, tail))  # stored before the document
        doc = json.loads(canonical_json(paged_state(head, tail)))
        refs = [*head.messages.all_refs(keep.chunks), *tail.refs]
        if len(refs) >= per_chunk:
            assert doc["v"] == CHUNKED_SNAPSHOT_VERSION
            assert len(doc["message_pages"]) < per_chunk  # only the loose ones inline
            assert len(snapshot_chunks(doc)) == len(refs) // per_chunk
        else:  # no chunk: the versions before, unchanged
            assert doc["v"] in (SNAPSHOT_VERSION, PAGED_SNAPSHOT_VERSION, ANSWERED_SNAPSHOT_VERSION)
            assert snapshot_chunks(doc) == []
        assert snapshot_pages(doc) == refs[len(snapshot_chunks(doc)) * per_chunk :]
        back = decode_state(doc, keep.page, chunks=keep.chunk)  # every chunk and page read
        assert back == fold(recs[:k])
        lazy = decode_state(doc, keep.page, lazy=True, chunks=keep.chunk)
        assert len(lazy.messages) == len(back.messages)
        rest = fold(recs[k:], start=lazy)
        n = len(whole.messages)
        assert rest.messages.span(0, n, keep.pages, keep.chunks)[0:n] == list(whole.messages)
        assert rest.counters == whole.counters
        assert rest.state == whole.state
        assert rest.last_hash == whole.last_hash
        if doc["v"] == CHUNKED_SNAPSHOT_VERSION:
            with pytest.raises(SnapshotUnreadable):  # a chunk it cannot read: unreadable
                decode_state(doc, keep.page, chunks=lambda r: keep.chunk(_ref(0)))


def test_a_lazy_version_4_decode_reads_no_chunk_while_it_has_a_tail() -> None:
    msgs = _messages(40)
    with chunk_size(2):
        paged = cut_open(msgs, 1)
        log = MessageLog(msgs)
        log.seal(paged.refs)
        chunks = log.chunkable()
        log.seal_chunks(chunks)
        st_ = RunState(run_id="r", messages=log)
        doc = json.loads(canonical_json(paged_state(st_, cut_open(log.tail, 1))))
        assert doc["v"] == CHUNKED_SNAPSHOT_VERSION

        def no_read(ref: PageRef) -> Any:
            raise AssertionError(f"read {ref.sha256[:8]}")

        back = decode_state(doc, no_read, lazy=True, chunks=no_read)
        assert len(back.messages) == 40
        assert back.messages.chunks == log.chunks
        with pytest.raises(SnapshotUnreadable):  # a malformed chunk list
            decode_state({**doc, "page_chunks": [{"sha256": "x"}]}, no_read, lazy=True)
