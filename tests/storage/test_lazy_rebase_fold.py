"""The fold of a paged rebase keeps its pages sealed (docs/design.md#lazy-rebases, issue 31
item 3): a restore, fork or import of a conversation of many pages folds to a log that names
them, so the daemon neither reads nor holds them until a reader asks for some, and reading the
whole log back through the run's store gives the conversation the rebase names.

Each message is its own page (a 1-byte page target), so hundreds of pages are a few KB; the
store is the memory backend's, counted where pages and chunks live."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from journald.core.fold import fold
from journald.core.pages import PageRef, cut
from journald.core.rebase_chunks import RebaseResolver, rebase_conversation, rebase_payload
from journald.core.records import GENESIS, Record, make_record
from journald.core.ref_chunks import REFS_PER_CHUNK
from journald.storage.memory import MemoryAttachmentStore
from journald.storage.pages import PageStore
from tests.builders import TS, meta_payload

RUN = "lazy"
BASE = {"reason": "restore", "checkpoint_id": "cp-1", "covered": {"from_seq": 1, "to_seq": 1}}


class CountingAttachments(MemoryAttachmentStore):
    def __init__(self) -> None:
        super().__init__()
        self.gets: list[str] = []

    async def get(self, run_id: str, digest: str) -> bytes:
        self.gets.append(digest)
        return await super().get(run_id, digest)


def talk(n: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": [{"type": "text", "text": f"message {i}"}],
        }
        for i in range(n)
    ]


def refusing(ref: PageRef) -> list[dict[str, Any]]:
    raise AssertionError(f"the fold read page {ref.sha256[:12]}")


def refusing_chunks(ref: PageRef) -> list[PageRef]:
    raise AssertionError(f"the fold read chunk {ref.sha256[:12]}")


def stored_rebase(pages: int, tail: int) -> tuple[list[Record], list[dict[str, Any]], Any]:
    """A run whose second record is a rebase of ``pages`` one-message pages then ``tail``
    inline messages, its pages and chunks in a counting memory store."""
    msgs = talk(pages + tail)
    paged = cut(msgs[:pages], 1)
    assert len(paged.refs) == pages
    payload, rebase = rebase_payload(BASE, paged)
    payload["messages"] = [*payload["messages"], *msgs[pages:]]
    meta = make_record(1, "meta", meta_payload(RUN), GENESIS, TS)
    records = [meta, make_record(2, "rebase", payload, meta.hash, TS)]
    store = CountingAttachments()
    for raw in [*paged.data.values(), *(c.raw for c in rebase.chunks)]:
        asyncio.run(store.put(RUN, raw))
    store.gets.clear()
    return records, msgs, store


@pytest.mark.parametrize("pages", [50, 3 * REFS_PER_CHUNK + 7])
def test_folding_a_rebase_of_many_pages_reads_no_page_and_reads_back_the_same_conversation(
    pages: int,
) -> None:
    records, msgs, store = stored_rebase(pages, tail=2)
    st = fold(records, pages=RebaseResolver(refusing, refusing_chunks))
    assert len(st.messages) == len(msgs)  # counted from the page references
    assert st.messages.sealed == pages
    assert st.messages.tail == msgs[pages:]
    # the daemon's resolver for the fold reads nothing either
    resolve = asyncio.run(PageStore(store).for_records(RUN, records))
    assert store.gets == []
    folded = fold(records, pages=resolve).messages
    eager = rebase_conversation(
        records[1].payload, asyncio.run(PageStore(store).resolver(RUN, [records[1].payload]))
    )
    assert asyncio.run(PageStore(store).whole(RUN, folded)) == eager == msgs


@pytest.mark.parametrize("pages", [50, 3 * REFS_PER_CHUNK])
def test_a_rebase_with_a_short_inline_tail_reads_only_its_last_pages_and_its_last_chunk(
    pages: int,
) -> None:
    """A rebase whose pages end where its conversation does (a tool result of a page or
    more ends on a page boundary): the fold takes the last two messages back into the open
    tail, so it can merge into the last one, reading those two pages (and, when the loose
    references are none, the last chunk) and no other."""
    records, msgs, store = stored_rebase(pages, tail=0)
    resolve = asyncio.run(PageStore(store).for_records(RUN, records))
    expected_reads = 2 + (1 if pages % REFS_PER_CHUNK == 0 else 0)
    assert len(store.gets) == expected_reads
    st = fold(records, pages=resolve)
    assert len(st.messages) == len(msgs)
    assert st.messages.tail == msgs[-2:]
    assert asyncio.run(PageStore(store).whole(RUN, st.messages)) == msgs


@pytest.mark.parametrize(("pages", "role"), [(51, "assistant"), (50, "user")])
def test_a_rebase_ending_in_one_inline_assistant_message_takes_no_page_back(
    pages: int, role: str
) -> None:
    """The usual end of a conversation: a large tool result closes a page, then the
    assistant's answer is the inline tail. Nothing merged into an assistant message answers
    the sealed message before it, so the fold reads no page and the result stays sealed (the
    lease end's snapshot no longer inlines it: bench/bench_pages.py 802 KiB -> 2.1 KiB at
    10 x 800 KB). A lone user message still takes its page back: a tool result merged into
    it would answer the sealed message before it."""
    records, msgs, store = stored_rebase(pages, tail=1)
    assert msgs[-1]["role"] == role
    resolve = asyncio.run(PageStore(store).for_records(RUN, records))
    st = fold(records, pages=resolve)
    assert len(st.messages) == len(msgs)
    if role == "assistant":
        assert store.gets == []
        assert st.messages.tail == msgs[-1:]
        assert st.messages.sealed == pages
    else:
        assert len(store.gets) == 1
        assert st.messages.tail == msgs[-2:]
    assert asyncio.run(PageStore(store).whole(RUN, st.messages)) == msgs
