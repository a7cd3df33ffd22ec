"""The cleaned-up and governed views derived page by page (docs/design.md#view-pages): for
any conversation sealed at any points, with the index saved and extended in any steps, the
view pages and the derived tail equal today's whole-list derivation, and every History page
of them equals the page of that list, read from only the view pages it overlaps."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core import governance
from journald.core.fold import (
    Message,
    Pending,
    abandoned_result,
    append_message,
    fold,
    pending_blocks,
)
from journald.core.governance import Sanitizer, _is_clean_start, _tool_use_ids
from journald.core.message_log import MessageLog
from journald.core.pages import PageRef, cut, decode_page, encode_page
from journald.core.paging import page
from journald.core.records import canonical_json, sha256_hex
from journald.core.view_index import (
    ViewBuilder,
    ViewIndex,
    index_from_json,
    named_fold_messages,
    view_log,
)
from journald.server.history import span_end
from tests.profiles import SLOW_DATA, scaled
from tests.unit.strategies import journals, message_lists


def sanitize_before(messages: Sequence[Message]) -> list[Message]:
    """``governance.sanitize`` as it was before it ran message by message (the oracle)."""
    merged: list[Message] = []
    for m in messages:
        append_message(merged, m["role"], m["content"])
    start = next((i for i, m in enumerate(merged) if _is_clean_start(m)), len(merged))
    merged = merged[start:]
    out: list[Message] = []
    open_ids: list[str] = []
    for m in merged:
        if m["role"] == "assistant":
            merge = not open_ids and bool(out) and out[-1]["role"] == "assistant"
            base = out[-1] if merge else m
            combined = [*base["content"], *m["content"]] if merge else m["content"]
            content, seen = [], set()
            for b in combined:
                if b.get("type") == "tool_result":
                    continue
                if b.get("type") == "tool_use":
                    if b.get("id") in seen:
                        continue
                    seen.add(b.get("id"))
                content.append(b)
            if not content:
                continue
            if open_ids:
                out.append({"role": "user", "content": [abandoned_result(i) for i in open_ids]})
            if merge:
                out.pop()
            out.append({**base, "content": content})
            open_ids = _tool_use_ids(out[-1])
            continue
        kept, answered = [], set()
        for b in m["content"]:
            if b.get("type") == "tool_use":
                continue
            if b.get("type") == "tool_result":
                tid = b.get("tool_use_id")
                if tid not in open_ids or tid in answered:
                    continue
                answered.add(tid)
            kept.append(b)
        missing = [i for i in open_ids if i not in answered]
        content = [abandoned_result(i) for i in missing] + kept
        content.sort(key=lambda b: b.get("type") != "tool_result")
        open_ids = []
        if not content:
            continue
        if out and out[-1]["role"] == "user":
            out[-1] = {**out[-1], "content": [*out[-1]["content"], *content]}
        else:
            out.append({**m, "content": content})
    if open_ids:
        out.append({"role": "user", "content": [abandoned_result(i) for i in open_ids]})
    return out


def fold_pages(msgs: list[Message], cuts: list[int]) -> tuple[list[PageRef], dict[str, bytes]]:
    refs, data, at = [], {}, 0
    for end in cuts:
        raw = encode_page(msgs[at:end])
        refs.append(PageRef(sha256_hex(raw), end - at, len(raw)))
        data[refs[-1].sha256] = raw
        at = end
    return refs, data


def roundtrip(index: ViewIndex, refs: list[PageRef], msgs: list[Message]) -> ViewIndex:
    """The index as a lease end saves it and a read loads it (with the fold messages from
    the first its carry names to the last it covers, as ``ViewPages.saved`` reads them)."""
    doc = json.loads(canonical_json(index.as_json()))
    named = named_fold_messages(doc)
    lo = named[0] if named else index.messages
    got = index_from_json(doc, refs, {i: msgs[i] for i in range(lo, index.messages)})
    assert got is not None
    return got


def tool_turns(n: int, salt: int) -> list[Message]:
    out: list[Message] = [{"role": "user", "content": [{"type": "text", "text": f"task {salt}"}]}]
    for i in range(n):
        tid = f"call{salt}_{i}"
        call = {"type": "tool_use", "id": tid, "name": "read", "input": "{}"}
        res = {"type": "tool_result", "tool_use_id": tid, "content": [], "is_error": False}
        out += [{"role": "assistant", "content": [call]}, {"role": "user", "content": [res]}]
    return out


@st.composite
def conversations(draw: st.DrawFn) -> tuple[list[Message], Pending | None]:
    """A folded run's messages mixed with badly paired lists (as rebases bring), and the
    open turn of a folded journal (or none)."""
    parts: list[list[Message]] = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["journal", "messy", "tool turns"]))
        if kind == "journal":
            parts.append(list(fold(draw(journals(max_steps=10))).messages))
        elif kind == "messy":
            parts.append(draw(message_lists(max_size=10)))
        else:  # the shape of a coding agent: calls answered by the next message
            parts.append(tool_turns(draw(st.integers(1, 6)), draw(st.integers(0, 99))))
    pending = fold(draw(journals(max_steps=8))).pending if draw(st.booleans()) else None
    return [m for p in parts for m in p], pending


@settings(max_examples=scaled(300), suppress_health_check=SLOW_DATA, deadline=None)
@given(conversations(), st.data())
def test_the_views_from_view_pages_equal_their_whole_list_derivation_at_any_offset(
    conv: tuple[list[Message], Pending | None], data: st.DataObject
) -> None:
    msgs, pending = conv
    sealed = data.draw(st.integers(0, len(msgs)))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, sealed)), max_size=6))))
    cuts = [c for c in cuts if c <= sealed]
    refs, fold_data = fold_pages(msgs, cuts)
    tail = msgs[cuts[-1] if cuts else 0 :]
    target = data.draw(st.sampled_from([1, 200, 600, 5000]))
    # the index built in steps: each a lease end (view pages stored) or a read (in memory)
    index, stored, done = ViewIndex.empty(), dict(fold_data), 0
    while done < len(refs):
        step = data.draw(st.integers(1, len(refs) - done))
        seal = data.draw(st.booleans())
        b = ViewBuilder(index, target)
        for ref in refs[done : done + step]:
            paged = b.add(decode_page(ref, fold_data[ref.sha256]), seal)
            if paged is not None:
                stored.update(paged.data)
        done += step
        index = b.index(refs[:done])
        if seal:
            index = roundtrip(index, refs, msgs)
    assert index.covers(refs)

    whole_state = {"clean": sanitize_before(msgs)}
    if pending is not None:
        committed = list(msgs)
        append_message(committed, "assistant", pending.message["content"])
        append_message(committed, "user", pending_blocks(pending))
        whole_state["governed"] = sanitize_before(committed)
    for name, want in whole_state.items():
        vlog = view_log(index, tail, pending if name == "governed" else None)
        everything = vlog.span(
            0, len(vlog), {r.sha256: decode_page(r, stored[r.sha256]) for r in vlog.refs}
        )
        assert list(everything) == want, name
        limit = data.draw(st.integers(0, len(want) + 1))
        for offset in range(len(want) + 2):
            # what History reads: the view pages holding [offset, span_end) only
            end = span_end(offset, limit)
            need = vlog.span_refs(offset, end)
            got = {r.sha256: decode_page(r, stored[r.sha256]) for r in need}
            part = vlog.span(offset, end, got)
            assert page(part, offset, limit) == page(want, offset, limit), (name, offset, limit)


@settings(max_examples=scaled(200), deadline=None)
@given(message_lists(max_size=24))
def test_sanitizing_message_by_message_equals_the_whole_list_sanitize(msgs: list[Message]) -> None:
    assert governance.sanitize(msgs)[0] == sanitize_before(msgs)
    s = Sanitizer()
    for m in msgs:  # a carry saved and read back between every two messages
        s.feed(m)
        s = Sanitizer.from_json(json.loads(canonical_json(s.to_json())))
    assert s.finish() == sanitize_before(msgs)


def test_a_view_index_that_is_damaged_of_another_format_or_for_other_pages_is_not_one() -> None:
    msgs = [
        {"role": ("user", "assistant")[i % 2], "content": [{"type": "text", "text": f"m{i}"}]}
        for i in range(4)
    ]
    refs, _ = fold_pages(msgs, [2, 4])
    b = ViewBuilder(ViewIndex.empty())
    b.add(msgs[:2])
    b.add(msgs[2:])
    good = json.loads(canonical_json(b.index(refs).as_json()))
    named = {i: msgs[i] for i in range(4)}
    assert index_from_json(good, refs, named) is not None
    assert good["carry"]["held"] == {"fold": 3}  # carried messages are named, not copied
    bad: Any
    for bad in (
        None,
        [],
        {**good, "format": "journald-view-index/0"},
        {**good, "pages": -1},
        {**good, "messages": 3},
        {**good, "view_pages": [{"sha256": "x"}]},
        {**good, "view_pages": [7]},
        {**good, "carry": {"held": 3}},
        {**good, "carry": {**good["carry"], "out": [{"role": "user"}]}},
    ):
        assert index_from_json(bad, refs, named) is None, bad
    assert index_from_json(good, refs[:1], named) is None  # not these pages
    assert index_from_json(good, list(reversed(refs)), named) is None
    assert index_from_json(good, refs, {}) is None  # the named messages not read


def test_the_view_pages_of_a_conversation_that_needs_no_repair_are_its_own_pages() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": f"q{i}"}]}
        if i % 2 == 0
        else {"role": "assistant", "content": [{"type": "text", "text": f"a{i}"}]}
        for i in range(40)
    ]
    paged = cut(msgs, 300)
    assert len(paged.refs) >= 4
    b = ViewBuilder(ViewIndex.empty(), 300)
    for ref in paged.refs:
        b.add(decode_page(ref, paged.data[ref.sha256]))
    vlog = view_log(b.index(paged.refs), paged.tail, None)
    assert isinstance(vlog, MessageLog)
    # every view page but the last one or two is byte for byte a fold page: stored once
    assert len(vlog.refs) >= len(paged.refs) - 2
    assert set(vlog.refs) <= set(paged.refs)
    # saved as the fold pages' references and fold indexes: no message copied into it
    doc = b.index(paged.refs).as_json()
    assert {PageRef(**v) for v in doc["view_pages"]} <= set(paged.refs)
    carried = [doc["carry"]["held"], *doc["carry"]["out"], *doc["carry"]["done"]]
    assert all(set(m) == {"fold"} for m in carried if m is not None)
    pages = {r.sha256: decode_page(r, paged.data[r.sha256]) for r in vlog.refs}
    assert list(vlog.span(0, len(vlog), pages)) == sanitize_before(msgs) == msgs


def test_a_page_whose_end_lands_on_a_result_closing_a_page_reads_the_next_pages_first() -> None:
    """Pages of tool turns whose results close them (large results: a turn per page): a
    History page ending on a result looks at the message after it, the next page's first,
    so the page reads that page too (``history.span_end``)."""
    msgs: list[Message] = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
    for i in range(6):
        call = {"type": "tool_use", "id": f"t{i}", "name": "read", "input": "{}"}
        result = {
            "type": "tool_result",
            "tool_use_id": f"t{i}",
            "content": [{"type": "text", "text": "x" * 100}],
            "is_error": False,
        }
        msgs += [{"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
    msgs.append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    fold_paged = cut(msgs, 50)
    b = ViewBuilder(ViewIndex.empty(), 50)
    stored = dict(fold_paged.data)
    for ref in fold_paged.refs:
        paged = b.add(decode_page(ref, fold_paged.data[ref.sha256]))
        if paged is not None:
            stored.update(paged.data)
    fold_log = MessageLog(fold_paged.tail, fold_paged.refs)
    for log in (view_log(b.index(fold_paged.refs), fold_paged.tail, None), fold_log):
        assert len(log.refs) >= 5
        for offset in range(len(msgs) + 1):
            for limit in range(4):
                end = span_end(offset, limit)
                need = log.span_refs(offset, end)
                got = {r.sha256: decode_page(r, stored[r.sha256]) for r in need}
                assert page(log.span(offset, end, got), offset, limit) == page(msgs, offset, limit)


def test_a_long_runs_index_is_checked_and_saved_with_only_the_chunk_at_its_boundary_read() -> None:
    """The fold's page references in chunks (``journald.core.ref_chunks``, here 4 a chunk):
    the index digests its covered prefix by chunk addresses, so a read checks it with none
    of the chunks before its boundary read, and the view pages of a conversation that needs
    no repair are sealed into the fold's own chunks (stored once)."""
    from unittest import mock

    from journald.core import ref_chunks
    from journald.core.view_index import FoldPages

    msgs: list[dict[str, Any]] = [
        {"role": ("user", "assistant")[i % 2], "content": [{"type": "text", "text": f"m{i}"}]}
        for i in range(60)
    ]
    with mock.patch.object(ref_chunks, "REFS_PER_CHUNK", 4):
        paged = cut(msgs, 30)
        assert len(paged.refs) >= 20
        b = ViewBuilder(ViewIndex.empty(), 30)
        for ref in paged.refs:
            b.add(decode_page(ref, paged.data[ref.sha256]))
        index = b.index(paged.refs)
        every = FoldPages.of(list(paged.refs))
        assert set(index.view_chunks) <= set(every.chunks)  # the fold's own chunks
        doc = json.loads(canonical_json(index.as_json()))
        assert len(doc["view_chunks"]) == len(index.view_chunks) >= 3
        # a dormant read: chunk references only, the loose references, nothing read
        cold = FoldPages(every.chunks, every.loose, {})
        assert cold.need(index.pages) == []
        named = {i: msgs[i] for i in range(index.recent_base, index.messages)}
        back = index_from_json(doc, cold, named)
        assert back is not None
        assert back.covers(cold)
        # a boundary inside a chunk needs that chunk alone
        inside = index.pages - len(every.loose) - 1
        assert cold.need(inside) == [every.chunks[-1]]
        assert cold.digest(inside) is None
        last = every.chunks[-1].sha256
        warm = cold.with_read({last: every.read[last]})
        assert warm.digest(inside) == every.digest(inside)
        assert index.serves(warm)
