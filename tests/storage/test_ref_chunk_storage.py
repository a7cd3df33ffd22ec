"""A long conversation's page references in chunks, where the daemon stores them
(``journald.storage.pages``, ``journald.writer.marks``; docs/design.md#fold-snapshots): a
lease end writes what was appended plus a small document whatever the number of pages, a
tail read of a dormant run reads one chunk, and a missing chunk is ``store_corrupted``
naming it for Verify, Recover and the read that needs it (issue 31).

The run's conversation is cut into tiny pages (one message each), so 2,000 pages are a few
hundred KB; the stores are the memory backend's, counted where pages and chunks live."""

from __future__ import annotations

from typing import Any

import pytest

from journald.core.errors import StoreCorrupted
from journald.core.fold import RunState, fold
from journald.core.records import Record, canonical_json
from journald.core.ref_chunks import REFS_PER_CHUNK
from journald.core.snapshot import CHUNKED_SNAPSHOT_VERSION, snapshot_chunks, snapshot_pages
from journald.storage.checkpoint_base import SNAPSHOT
from journald.storage.memory import MemoryAttachmentStore, MemoryCheckpointStore, MemoryStore
from journald.storage.pages import PageStore
from journald.writer.marks import FoldMarks
from tests.builders import JournalBuilder, assistant_payload, text, user_payload

RUN = "chunked"
BODY = 200  # characters a message: a page of TARGET bytes holds one
TARGET = 200


class CountingAttachments(MemoryAttachmentStore):
    def __init__(self) -> None:
        super().__init__()
        self.gets: list[str] = []
        self.new_bytes = 0

    async def get(self, run_id: str, digest: str) -> bytes:
        self.gets.append(digest)
        return await super().get(run_id, digest)

    async def put(self, run_id: str, data: bytes) -> tuple[str, bool]:
        digest, existed = await super().put(run_id, data)
        self.new_bytes += 0 if existed else len(data)
        return digest, existed

    def drop(self, run_id: str, digest: str) -> None:
        del self._runs[run_id][digest]


class Stores:
    def __init__(self) -> None:
        self.attachments = CountingAttachments()
        self.checkpoints = MemoryCheckpointStore()
        self.pages = PageStore(self.attachments)
        self.marks = FoldMarks(self.checkpoints, self.pages)

    async def doc(self) -> dict[str, Any]:
        got = await self.checkpoints.load_mark(RUN, SNAPSHOT)
        assert got is not None
        return got


def chat(b: JournalBuilder, n: int) -> list[Record]:
    """``n`` more messages (one record each) added to ``b``."""
    start = len(b.records)
    for i in range(start, start + n):
        if i % 2:
            b.add("assistant", assistant_payload([text(f"a{i} " + "a" * BODY)], i))
        else:
            b.add("user", user_payload(f"q{i} " + "q" * BODY))
    return b.records[start:]


async def held_state(s: Stores, pages: int) -> tuple[RunState, JournalBuilder]:
    """A run of about ``pages`` one-message pages, sealed as a held run's writer seals it
    (pages stored first, then a chunk once 128 references are loose), then a lease end."""
    b = JournalBuilder(RUN)
    chat(b, pages)
    st = fold(b.records)
    paged = st.messages.sealable(TARGET)
    assert paged is not None
    await s.pages.put(RUN, paged)
    st.messages.seal(paged.refs)
    chunks = st.messages.chunkable()
    await s.pages.put_chunks(RUN, chunks)
    st.messages.seal_chunks(chunks)
    assert len(st.messages.loose) < REFS_PER_CHUNK
    await s.marks.save_on_close(RUN, st)
    return st, b


async def lease_end_bytes(pages: int) -> tuple[int, int, dict[str, Any]]:
    """(bytes a lease end writes after 20 appended records, bytes appended, the document)."""
    s = Stores()
    st, b = await held_state(s, pages)
    late = chat(b, 20)
    st = fold(late, start=st)
    s.attachments.new_bytes = 0
    await s.marks.save_on_close(RUN, st)
    doc = await s.doc()
    return s.attachments.new_bytes + len(canonical_json(doc)), sum(len(r.raw) for r in late), doc


async def test_a_lease_end_writes_about_the_same_bytes_at_200_and_at_2000_pages() -> None:
    small, appended, small_doc = await lease_end_bytes(200)
    large, appended_large, large_doc = await lease_end_bytes(2000)
    assert abs(appended - appended_large) < 200  # the same records (longer seqs)
    for written, doc in ((small, small_doc), (large, large_doc)):
        assert doc["snapshot"]["v"] == CHUNKED_SNAPSHOT_VERSION
        assert len(snapshot_pages(doc["snapshot"])) < REFS_PER_CHUNK  # the loose ones only
        assert written <= 2 * appended + 64 * 1024, (written, appended)
    assert len(snapshot_chunks(large_doc["snapshot"])) == 2000 // REFS_PER_CHUNK
    # what grows with the run is one chunk reference per 128 pages (~110 bytes each), and
    # at most the loose references the two runs differ by: never the list of every page
    assert large - small < 16 * 1024, (large, small)


async def test_a_tail_read_of_a_2000_page_run_reads_at_most_one_chunk() -> None:
    s = Stores()
    await held_state(s, 2000)
    doc = (await s.doc())["snapshot"]
    chunks = {r.sha256 for r in snapshot_chunks(doc)}
    s.attachments.gets.clear()
    cold = FoldMarks(s.checkpoints, s.pages)  # another daemon: nothing in memory
    st = await cold.load_snapshot(RUN)
    assert st is not None
    assert s.attachments.gets == []  # the document alone: no chunk, no page
    log = st.messages
    # a History page of 10 messages just before the loose pages: in the last chunk
    span = await s.pages.span(RUN, log, log.chunked - 10, log.chunked)
    read = list(s.attachments.gets)
    assert len([d for d in read if d in chunks]) == 1
    assert len(read) == 1 + 10
    b = JournalBuilder(RUN)
    chat(b, 2000)
    whole = list(fold(b.records).messages)
    assert span[log.chunked - 10 : log.chunked] == whole[log.chunked - 10 : log.chunked]
    # the same page again: the chunk stays loaded (the log's copies share its chunk cache)
    s.attachments.gets.clear()
    await s.pages.span(RUN, log, log.chunked - 10, log.chunked)
    assert not [d for d in s.attachments.gets if d in chunks]
    # a read across a chunk boundary reads the two chunks, the whole conversation all
    other = await FoldMarks(s.checkpoints, s.pages).load_snapshot(RUN)
    assert other is not None
    s.attachments.gets.clear()
    edge = other.messages.chunks[0].count
    await s.pages.span(RUN, other.messages, edge - 1, edge + 1)
    assert len([d for d in s.attachments.gets if d in chunks]) == 2
    assert (await s.pages.whole(RUN, other.messages)) == whole


async def test_a_missing_chunk_is_store_corrupted_naming_it_for_verify_a_read_and_recover() -> None:
    s = Stores()
    store = MemoryStore()
    await held_state(s, 300)
    doc = (await s.doc())["snapshot"]
    gone = snapshot_chunks(doc)[0]
    s.attachments.drop(RUN, gone.sha256)
    b = JournalBuilder(RUN)
    chat(b, 300)
    journal = await store.create(b.records[0])
    await journal.append(b.records[1:])
    await journal.close()
    with pytest.raises(StoreCorrupted) as verify:
        await s.pages.check_run(store, RUN, s.checkpoints)
    assert gone.sha256 in verify.value.message
    assert "message-page reference chunk" in verify.value.message
    assert verify.value.metadata["chunk"] == gone.sha256
    st = await FoldMarks(s.checkpoints, s.pages).load_snapshot(RUN)
    assert st is not None  # the document decodes without reading a chunk
    with pytest.raises(StoreCorrupted) as read:
        await s.pages.span(RUN, st.messages, 0, 5)
    assert gone.sha256 in read.value.message
    assert read.value.metadata["run_id"] == RUN
    # Recover drops the snapshot (a cache): the run is folded from its records again
    assert await s.pages.drop_unreadable_snapshot(RUN, s.checkpoints)
    assert (await s.doc())["snapshot"] is None
    assert await s.pages.check_run(store, RUN, s.checkpoints) == 0


async def test_a_history_page_of_the_cleaned_view_of_a_2000_page_run_reads_no_fold_chunk() -> None:
    """The view index digests the fold's pages by chunk addresses: checking it against a
    dormant run's conversation reads none of the fold's 15 chunks (its boundary is past the
    last), and the page of the view reads the view pages under it."""
    from journald.core.view_index import view_log
    from journald.storage.view_pages import ViewPages

    s = Stores()
    s.marks.views = ViewPages(s.checkpoints, s.pages)
    await held_state(s, 2000)  # the lease end saves the index (reading every page once)
    doc = (await s.doc())["snapshot"]
    fold_chunks = {r.sha256 for r in snapshot_chunks(doc)}
    st = await FoldMarks(s.checkpoints, s.pages).load_snapshot(RUN)
    assert st is not None
    cold = ViewPages(s.checkpoints, s.pages)  # another daemon: nothing in memory
    s.attachments.gets.clear()
    index = await cold.serving(RUN, st.messages)
    assert index is not None
    assert not [d for d in s.attachments.gets if d in fold_chunks]
    assert len(s.attachments.gets) <= 2  # the fold page (or two) its carry names
    assert cold.extended_pages == 0
    vlog = view_log(index, st.messages.tail, None)
    s.attachments.gets.clear()
    page = await s.pages.span(RUN, vlog, len(vlog) - 50, len(vlog))
    # view pages are cut at 128 KiB (here a few for the whole view): the one or two under it
    assert len(s.attachments.gets) <= 2
    b = JournalBuilder(RUN)
    chat(b, 2000)
    whole = list(fold(b.records).messages)
    assert page[len(vlog) - 50 : len(vlog)] == whole[len(whole) - 50 :]  # no repair needed


async def test_a_view_index_of_the_format_before_is_saved_again_without_reading_a_fold_page() -> (
    None
):
    """An index a daemon before chunks saved (``journald-view-index/1``: every view page
    listed, fold pages by number, the digest of every fold reference) is read once with
    every chunk and saved in the chunked format: the upgrade reads no fold page again."""
    from journald.core.records import sha256_hex
    from journald.core.view_index import VIEW_INDEX_FORMAT, VIEW_INDEX_FORMAT_1
    from journald.storage.checkpoint_base import VIEWS
    from journald.storage.view_pages import ViewPages

    s = Stores()
    s.marks.views = ViewPages(s.checkpoints, s.pages)
    held, _ = await held_state(s, 2000)
    new = await s.checkpoints.load_mark(RUN, VIEWS)
    assert new is not None
    index = new["index"]
    assert index["format"] == VIEW_INDEX_FORMAT
    fold_refs = list(await s.pages.all_refs(RUN, held.messages))
    number = {r.sha256: k for k, r in enumerate(fold_refs)}
    views = [*index["view_pages"]]
    assert not index["view_chunks"]  # (view pages of 128 KiB: a few, all loose here)
    covered = fold_refs[: index["pages"]]
    old = {
        **index,
        "format": VIEW_INDEX_FORMAT_1,
        "digest": sha256_hex("".join(r.sha256 for r in covered).encode()),
        "view_pages": [number.get(v["sha256"], v) for v in views],
    }
    del old["view_chunks"]
    await s.checkpoints.save_mark(RUN, {"index": old}, VIEWS)
    st = await FoldMarks(s.checkpoints, s.pages).load_snapshot(RUN)
    assert st is not None
    cold = ViewPages(s.checkpoints, s.pages)
    assert await cold.serving(RUN, st.messages) is not None  # a read takes it as it is
    await cold.save(RUN, st.messages)
    assert cold.extended_pages == 0  # no fold page read again
    again = await s.checkpoints.load_mark(RUN, VIEWS)
    assert again is not None
    assert again["index"] == index  # the document the chunked format would have written


async def test_a_snapshot_with_no_tail_and_no_loose_page_reads_its_last_chunk_and_page() -> None:
    """A version 4 document whose cut ended on a chunk boundary (no loose reference, no
    tail): decoding takes the last page back into the tail (the fold may merge into it),
    reading the last chunk and that page, nothing else."""
    s = Stores()
    await held_state(s, 300)
    doc = (await s.doc())["snapshot"]
    chunks = snapshot_chunks(doc)
    last = (await s.pages.read_chunks(RUN, chunks[-1:]))[chunks[-1].sha256]
    total = sum(c.count for c in chunks)
    edge = {**doc, "message_pages": [], "messages": []}  # what the chunks hold, nothing more
    await s.checkpoints.save_mark(RUN, {"snapshot": edge}, SNAPSHOT)
    s.attachments.gets.clear()
    st = await FoldMarks(s.checkpoints, s.pages).load_snapshot(RUN)
    assert st is not None
    assert s.attachments.gets == [chunks[-1].sha256, last.refs[-1].sha256]
    assert len(st.messages) == total
    assert st.messages.tail == (await s.pages.messages(RUN, last.refs[-1:]))
    assert len(st.messages.chunks) == len(chunks) - 1  # the last one's references loose again


async def test_every_backend_keeps_a_runs_chunks_and_reads_a_tail_through_one(
    opened_backend: Any,
) -> None:
    """The chunks live in each backend's attachment store (file: the run's ``attachments/``;
    JetStream: the attachments bucket; memory) with no code of its own: a lease end's
    version 4 snapshot reads back, a tail read names one chunk, Verify checks them."""
    from journald.storage.pages import paged_checkpoints

    b = JournalBuilder(RUN)
    chat(b, 300)
    journal = await opened_backend.records.create(b.records[0])
    await journal.append(b.records[1:])
    await journal.close()
    checkpoints = paged_checkpoints(opened_backend.checkpoints, opened_backend.attachments)
    pages = PageStore(opened_backend.attachments)
    marks = FoldMarks(checkpoints, pages)
    st = fold(b.records)
    paged = st.messages.sealable(TARGET)
    assert paged is not None
    await pages.put(RUN, paged)
    st.messages.seal(paged.refs)
    chunks = st.messages.chunkable()
    await pages.put_chunks(RUN, chunks)
    st.messages.seal_chunks(chunks)
    await marks.save_on_close(RUN, st)
    doc = await checkpoints.load_mark(RUN, SNAPSHOT)
    assert doc is not None
    assert doc["snapshot"]["v"] == CHUNKED_SNAPSHOT_VERSION
    back = await FoldMarks(checkpoints, pages).load_snapshot(RUN)
    assert back is not None
    log = back.messages
    assert log.missing_chunks(log.chunked - 5, log.chunked) == [log.chunks[-1]]
    span = await pages.span(RUN, log, log.chunked - 5, log.chunked)
    whole = list(fold(b.records).messages)
    assert span[log.chunked - 5 : log.chunked] == whole[log.chunked - 5 : log.chunked]
    assert await pages.check_run(opened_backend.records, RUN, checkpoints) >= len(chunks)
