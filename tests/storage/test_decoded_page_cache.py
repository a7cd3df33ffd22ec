"""The decoded-page cache of ``PageStore`` (``journald.storage.pages``; docs/design.md, "What a
read parses and stats"): a dormant run's tail read reads, hashes and decodes its sealed page
once however often it is asked for, each page is decoded once per read, the cache holds no
more than its byte bound, one run's cached page never answers for another run's missing one,
and Verify (``PageStore.check``) still reads the bytes on disk (issue 31, item 4).

The stores are the memory backend's, the attachment store counted."""

from __future__ import annotations

from typing import Any

import pytest

import journald.storage.pages as pages_module
from journald.core.errors import StoreCorrupted
from journald.core.message_log import MessageLog
from journald.core.pages import Paged, decode_page, paged_payload
from journald.storage.pages import PageStore
from tests.builders import JournalBuilder
from tests.storage.test_ref_chunk_storage import CountingAttachments

RUN = "cached"
OTHER = "twin"


def conversation(n: int, tag: str = "m") -> list[dict[str, Any]]:
    """``n`` messages of about 1 KB each (a 128 KiB page holds about 120 of them)."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag}{i} " + "x" * 1000}
        for i in range(n)
    ]


def dormant_log(paged: Paged) -> MessageLog:
    """The conversation as a dormant read gets it from the fold snapshot: page references
    and a tail, no page loaded (a new log each call, as each call decodes the snapshot)."""
    return MessageLog(paged.tail, paged.refs)


async def test_repeated_tail_reads_of_a_sealed_page_read_its_bytes_from_the_store_once() -> None:
    att = CountingAttachments()
    pages = PageStore(att)
    msgs = conversation(300)
    paged = await pages.write(RUN, msgs)
    assert len(paged.refs) >= 2
    last = paged.refs[-1]
    for _ in range(20):
        log = dormant_log(paged)
        span = await pages.span(RUN, log, len(log) - len(paged.tail) - 5, len(log))
        assert span[len(msgs) - 1] == msgs[-1]
        assert span[len(msgs) - len(paged.tail) - 5] == msgs[len(msgs) - len(paged.tail) - 5]
    assert att.gets.count(last.sha256) == 1


async def test_a_read_decodes_each_page_it_reads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[str] = []

    def counting(ref: Any, raw: bytes) -> list[dict[str, Any]]:
        decoded.append(ref.sha256)
        return decode_page(ref, raw)

    monkeypatch.setattr(pages_module, "decode_page", counting)
    pages = PageStore(CountingAttachments())
    paged = await pages.write(RUN, conversation(300))
    log = dormant_log(paged)
    await pages.span(RUN, log, 0, len(log))
    assert sorted(decoded) == sorted(r.sha256 for r in paged.refs)


async def test_a_run_missing_a_page_is_store_corrupted_while_another_runs_copy_is_cached() -> None:
    att = CountingAttachments()
    pages = PageStore(att)
    msgs = conversation(300)
    mine = await pages.write(RUN, msgs)
    twin = await pages.write(OTHER, msgs)  # the same content: the same page addresses
    assert mine.refs == twin.refs
    log = dormant_log(mine)
    await pages.span(RUN, log, 0, len(log))  # every page of RUN cached now
    gone = twin.refs[-1]
    att.drop(OTHER, gone.sha256)
    twin_log = dormant_log(twin)
    with pytest.raises(StoreCorrupted) as err:
        await pages.span(OTHER, twin_log, len(twin_log) - len(twin.tail) - 1, len(twin_log))
    assert err.value.metadata["page"] == gone.sha256
    assert err.value.metadata["run_id"] == OTHER
    # RUN's own copy is still there and still served
    again = await pages.span(RUN, dormant_log(mine), len(msgs) - 1, len(msgs))
    assert again[len(msgs) - 1] == msgs[-1]


async def test_the_cache_holds_no_more_than_its_byte_bound_and_rereads_what_it_evicted() -> None:
    att = CountingAttachments()
    msgs = conversation(1200)
    paged = await PageStore(att).write(RUN, msgs)
    assert len(paged.refs) >= 8
    bound = 3 * max(r.size for r in paged.refs)
    pages = PageStore(att, cache_bytes=bound)
    for _ in range(2):  # every page, twice: each read stays right, the cache stays bounded
        first = 0
        for ref in paged.refs:
            span = await pages.span(RUN, dormant_log(paged), first, first + 1)
            assert span[first] == msgs[first]
            first += ref.count
            assert 0 < pages.cached_bytes <= bound
    # the first page was pushed out by the later ones: read from the store again
    assert att.gets.count(paged.refs[0].sha256) == 2
    assert att.gets.count(paged.refs[-1].sha256) == 2


async def test_verify_sees_a_page_damaged_after_it_was_cached() -> None:
    att = CountingAttachments()
    pages = PageStore(att)
    paged = await pages.write(RUN, conversation(300))
    b = JournalBuilder(RUN)
    rebase = b.add("rebase", paged_payload({"reason": "restore"}, paged))
    log = dormant_log(paged)
    await pages.span(RUN, log, 0, len(log))  # every page cached
    assert await pages.check(RUN, [rebase]) == len(paged.refs)
    damaged = paged.refs[0]
    att._runs[RUN][damaged.sha256] = b'{"format":"journald-page/1","messages":[]}'
    with pytest.raises(StoreCorrupted) as err:
        await pages.check(RUN, [rebase])
    assert err.value.metadata["page"] == damaged.sha256
    assert "damaged" in err.value.message


async def test_a_forgotten_run_reads_its_pages_from_the_store_again() -> None:
    """What Delete, a discarded fork and Recover do: the run's pages may be gone."""
    att = CountingAttachments()
    pages = PageStore(att)
    paged = await pages.write(RUN, conversation(300))
    log = dormant_log(paged)
    await pages.span(RUN, log, 0, len(log))
    assert pages.cached_bytes > 0
    pages.forget(RUN)
    assert pages.cached_bytes == 0
    att.drop(RUN, paged.refs[0].sha256)
    with pytest.raises(StoreCorrupted) as err:
        await pages.span(RUN, dormant_log(paged), 0, 1)
    assert err.value.metadata["page"] == paged.refs[0].sha256
