"""A sealed message log (journald/core/message_log.py) reads and changes as the plain list the
fold kept before, under the fold's own operations, while its sealed messages live only in
pages (docs/design.md#message-pages)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from journald.core import ref_chunks
from journald.core.fold import append_message, fold
from journald.core.message_log import MessageLog, PagesNotLoaded
from journald.core.pages import decode_page
from journald.core.paging import page
from tests.builders import JournalBuilder, text, user_payload

Message = dict[str, Any]
TARGET = 96  # bytes: tiny pages, so a few messages seal


def _block(kind: str, n: int) -> dict[str, Any]:
    if kind == "result":
        return {"type": "tool_result", "tool_use_id": f"t{n}", "content": [], "is_error": False}
    return text(f"m{n}" * (n % 5 + 1))


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"),
            st.sampled_from(["user", "assistant"]),
            st.sampled_from(["text", "result"]),
        ),
        st.tuples(st.just("seal"), st.just(""), st.just("")),
        st.tuples(st.just("copy"), st.just(""), st.just("")),
        st.tuples(st.just("read"), st.integers(0, 40), st.integers(0, 12)),
    ),
    max_size=60,
)


CHUNKS: dict[str, Any] = {}
"""Page-reference chunks the tests' logs sealed (content-addressed: shared is harmless)."""


def _sealed(log: MessageLog, store: dict[str, list[Message]]) -> None:
    paged = log.sealable(TARGET)
    if paged is None:
        return
    for ref in paged.refs:  # "stored" before the log names them, as the writer does
        store[ref.sha256] = decode_page(ref, paged.data[ref.sha256])
    log.seal(paged.refs)
    chunks = log.chunkable()  # and the references into chunks once they fill one
    for chunk in chunks:
        CHUNKS[chunk.ref.sha256] = chunk.refs
    log.seal_chunks(chunks)


@settings(max_examples=200, deadline=None)
@given(ops)
# a user record carrying a tool result merges into the tail's first message after a seal:
# the boundary before it must still be clean (``cut_open`` leaves two messages open)
@example(
    [
        ("append", "user", "text"),
        ("append", "assistant", "text"),
        ("append", "user", "text"),
        ("seal", "", ""),
        ("append", "user", "result"),
        ("read", 2, 0),
    ]
)
# a long conversation sealed often: its page references fill chunks (two pages a chunk here)
@example(
    [
        step
        for i in range(40)
        for step in (
            [("seal", "", ""), ("read", i // 2, 4), ("copy", "", "")] if i % 5 == 0 else []
        )
        + [("append", ("assistant", "user")[i % 2], "text")]
    ]
)
def test_a_sealed_message_log_behaves_as_the_list_under_the_folds_operations(
    steps: list[tuple[str, Any, Any]],
) -> None:
    with mock.patch.object(ref_chunks, "REFS_PER_CHUNK", 2):  # a chunk every two pages
        _run_ops(steps)


def _run_ops(steps: list[tuple[str, Any, Any]]) -> None:
    want: list[Message] = [{"role": "user", "content": [text("hello")]}]
    log = MessageLog(want)
    store: dict[str, list[Message]] = {}
    for i, (op, a, b) in enumerate(steps):
        if op == "append":
            append_message(want, a, [_block(b, i)])
            append_message(log, a, [_block(b, i)])
        elif op == "seal":
            _sealed(log, store)
        elif op == "copy":  # a continuation's copy changes, the original stays
            before = list(want)
            other = log.copy()
            append_message(other, "user", [text("only in the copy")])
            assert len(log) == len(before)
            assert log.span(0, len(log), store, CHUNKS)[0 : len(log)] == before
        elif op == "read":
            offset, limit = a, b
            # a History page through a span of only the pages it needs
            span = log.span(offset, offset + limit + 1, store, CHUNKS)
            assert page(span, offset, limit) == page(want, offset, limit)
        assert len(log) == len(want)  # never reads a page
        assert log[-1] == want[-1]  # the last message is always in memory
        assert not log.tail or log.tail[-1] is log[-1]
    assert log.span(0, len(log), store, CHUNKS)[0 : len(log)] == want


def test_a_sealed_message_is_not_read_without_its_page() -> None:
    log = MessageLog([{"role": "user", "content": [text("x" * 200)]} for _ in range(1)])
    for i in range(6):
        append_message(log, "assistant" if i % 2 == 0 else "user", [text("y" * 200)])
    paged = log.sealable(TARGET)
    assert paged is not None
    log.seal(paged.refs)
    assert log.sealed > 0
    assert log.tail
    with pytest.raises(PagesNotLoaded):
        log[0]
    log.provide(paged.refs[0], decode_page(paged.refs[0], paged.data[paged.refs[0].sha256]))
    assert log[0]["content"][0]["text"] == "x" * 200


def test_folding_into_a_sealed_state_equals_folding_the_whole_journal() -> None:
    b = JournalBuilder("sealed")
    for i in range(40):
        b.turn([f"c{i}"])
        b.add("user", user_payload(f"follow-up {i} " * 10))
    head = fold(b.records[:100])
    store: dict[str, list[Message]] = {}
    _sealed(head.messages, store)
    assert head.messages.refs
    rest = fold(b.records[100:], start=head)
    whole = fold(b.records)
    assert len(rest.messages) == len(whole.messages)
    assert rest.messages.span(0, len(whole.messages), store)[0:] == list(whole.messages)
    assert rest.counters == whole.counters
    assert rest.last_hash == whole.last_hash


def test_a_long_run_of_merged_same_role_records_is_not_cut_again_on_every_append(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # consecutive user records merge into one last message, which no page may take: a seal
    # attempt after each append must not re-cut (re-encode) the whole tail while only the
    # last message grew
    import journald.core.message_log as ml

    cuts = 0
    real = ml.cut_open  # type: ignore[attr-defined]  # imported there, patched here

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal cuts
        cuts += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(ml, "cut_open", counting)
    log = MessageLog([{"role": "assistant", "content": [text("a")]}])
    for i in range(400):
        append_message(log, "user", [text(f"line {i} " + "x" * 40)])
        assert log.sealable(TARGET) is None  # the merged message stays open
    assert len(log) == 2
    assert cuts == 0
