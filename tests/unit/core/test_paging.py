"""History paging (journald.core.paging): every message once, every page self-paired."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core.fold import fold
from journald.core.governance import sanitize
from journald.core.paging import MessageCounter, Page, fold_window, page, page_window, tail_start
from journald.core.records import Record
from tests.builders import JournalBuilder, text
from tests.profiles import scaled
from tests.unit.strategies import journals, message_lists, tool_result_block

Message = Mapping[str, Any]


def self_paired(msgs: Sequence[Message]) -> bool:
    """No tool_use without its result in the next message, no result without its call."""
    for i, m in enumerate(msgs):
        blocks = m["content"]
        if m["role"] == "assistant":
            calls = {b["id"] for b in blocks if b.get("type") == "tool_use"}
            if calls:
                if i + 1 >= len(msgs) or msgs[i + 1]["role"] != "user":
                    return False
                got = {
                    b["tool_use_id"]
                    for b in msgs[i + 1]["content"]
                    if b.get("type") == "tool_result"
                }
                if not calls <= got:
                    return False
        else:
            answers = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
            if answers:
                if i == 0 or msgs[i - 1]["role"] != "assistant":
                    return False
                calls = {b.get("id") for b in msgs[i - 1]["content"] if b.get("type") == "tool_use"}
                if not answers <= calls:
                    return False
    return True


def walk(msgs: Sequence[Message], limits: Sequence[int]) -> list[Page]:
    pages, offset, i = [], 0, 0
    while offset < len(msgs):
        p = page(msgs, offset, limits[i % len(limits)])
        pages.append(p)
        assert p.offset == offset
        assert p.next_offset > offset
        offset = p.next_offset
        i += 1
    return pages


def conversation(records: list[Record]) -> list[Message]:
    return list(sanitize(fold(records).messages)[0])


@settings(max_examples=scaled(60))
@given(journals(max_steps=16), st.lists(st.integers(1, 6), min_size=1, max_size=4))
def test_following_next_offset_visits_every_message_once_in_self_paired_pages(
    records: list[Record], limits: list[int]
) -> None:
    msgs = conversation(records)
    pages = walk(msgs, limits)
    assert [m for p in pages for m in p.messages] == msgs
    for p in pages:
        assert p.total == len(msgs)
        assert self_paired(p.messages)
    assert not pages or pages[-1].next_offset == len(msgs)


@settings(max_examples=scaled(100))
@given(message_lists(max_size=12), st.integers(0, 15), st.integers(0, 8))
def test_any_offset_aligns_back_and_any_end_aligns_forward(
    raw: list[dict[str, Any]], offset: int, limit: int
) -> None:
    msgs = sanitize(raw)[0]
    p = page(msgs, offset, limit)
    assert p.offset <= min(offset, len(msgs))
    assert p.messages == msgs[p.offset : p.next_offset]
    assert self_paired(p.messages)
    if limit == 0:
        assert p.messages == []
    elif offset + limit >= len(msgs):
        assert p.next_offset == len(msgs)
    else:
        assert len(p.messages) >= min(limit, len(msgs) - p.offset)


def test_an_offset_inside_a_tool_round_moves_back_to_its_call() -> None:
    b = JournalBuilder("paging")
    b.turn(["a", "b"])
    b.turn(["c"])
    msgs = conversation(b.records)  # user, assistant(a, b), user(results), assistant(c), user
    assert len(msgs) == 5
    p = page(msgs, 2, 1)
    assert (p.offset, p.next_offset) == (1, 3)
    assert page(msgs, 0, 2).next_offset == 3  # the end moves forward past the results
    assert page(msgs, 4, 0) == Page([], 5, 3, 3)
    assert tail_start(msgs, 1) == 3
    assert page(msgs, 4, 1) == Page(msgs[3:], 5, 3, 5)  # total - n, n: the tail page
    assert tail_start(msgs, 0) == 5
    assert page(msgs, 99, 5) == Page([], 5, 5, 5)


@settings(max_examples=scaled(60))
@given(journals(max_steps=16), st.data())
def test_a_fold_mark_and_the_records_after_it_page_like_the_whole_run(
    records: list[Record], data: st.DataObject
) -> None:
    full = fold(records).messages
    counter = MessageCounter()
    marks = []
    for i, rec in enumerate(records):
        counter.add(rec.kind, rec.seq, rec.payload)
        prefix = fold(records[: i + 1]).messages
        mark = counter.mark()
        assert mark.messages == len(prefix)
        assert mark.last_role == (prefix[-1]["role"] if prefix else "")
        if mark.pending_seq == 0:
            marks.append((i + 1, mark))
    for cut, mark in marks:
        w = fold_window(mark, records[cut:])
        assert w.total == len(full)
        skip = 1 if w.partial_first else 0
        assert w.messages[skip:] == full[w.base + skip :]
        offset = data.draw(st.integers(0, len(full) + 1))
        limit = data.draw(st.integers(0, 5))
        got = page_window(w, offset, limit)
        if got is not None:
            assert got == page(full, offset, limit)
        elif limit > 0:
            assert offset <= w.base + skip  # only pages reaching before the window are refused


def test_a_window_whose_first_message_carries_tool_results_still_pages_from_index_0() -> None:
    # Hypothesis found it: a rebase may start the conversation with a message holding tool
    # results. Index 0 is a clean boundary all the same, so a window folded from a mark
    # before the rebase holds everything the page needs and must serve it.
    b = JournalBuilder("paging")
    answer = {"role": "user", "content": [tool_result_block("a", [text("ok")])]}
    b.add("rebase", {"reason": "compaction", "messages": [answer, answer]})
    full: list[Message] = list(fold(b.records).messages)
    mark = MessageCounter()
    mark.add(b.records[0].kind, b.records[0].seq, b.records[0].payload)
    w = fold_window(mark.mark(), b.records[1:])
    for offset in (0, 1):
        assert page_window(w, offset, 1) == page(full, offset, 1) == Page(full, 2, 0, 2)
