"""A writer recognises its own ``edit`` rebase in the form the daemon stores it: paged when it
is longer than one page (docs/protocol.md#message-pages), so a lost acknowledgement of it is
adopted, and any other conversation at that seq is not (docs/protocol.md#retries)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import journald_client as jc
from hypothesis import given, settings
from hypothesis import strategies as st
from journald_client import codec, own_records
from journald_client.pb import journal_pb2 as pb

from journald.core.pages import Paged
from journald.core.rebase_chunks import PagedRebase
from journald.server import convert
from journald.server.paged_edits import page_rebases
from journald.storage.pages import PageStore


class Discarded:
    """A page store that keeps nothing: only the stored record is looked at here."""

    async def put(self, run_id: str, paged: Paged) -> None:
        return None

    async def put_rebase(self, run_id: str, rebase: PagedRebase) -> None:
        return None


def stored_form(sent: pb.Record) -> pb.Record:
    """``sent`` as the daemon stores it and ``Load`` returns it (paged when it is long)."""
    item = convert.incoming_from_pb(sent)
    items, _ = asyncio.run(page_rebases(cast(PageStore, Discarded()), "run", [item]))
    return convert.record_to_pb(items[0].link("0" * 64, None))


def edit(messages: list[dict[str, Any]]) -> pb.Record:
    return codec.stamp([jc.Entry.rebase(messages)], 3)[0]


TEXT = st.tuples(st.sampled_from('aé✓"\\\n'), st.integers(1, 90_000))
CONVERSATIONS = st.lists(TEXT, min_size=1, max_size=12).map(
    lambda texts: [
        {"role": "user" if i % 2 == 0 else "assistant", "content": ch * n}
        for i, (ch, n) in enumerate(texts)
    ]
)


@settings(max_examples=40, deadline=None)
@given(CONVERSATIONS)
def test_an_edit_rebase_is_recognised_in_the_form_the_daemon_stores_it(
    messages: list[dict[str, Any]],
) -> None:
    sent = edit(messages)
    assert codec.same_record(sent, stored_form(sent))


def test_a_long_edit_rebase_is_stored_paged_and_still_recognised() -> None:
    messages = [{"role": "user", "content": "x" * 100_000} for _ in range(5)]
    sent = edit(messages)
    stored = stored_form(sent)
    assert len(stored.rebase.pages) >= 2
    assert codec.same_record(sent, stored)


@settings(max_examples=40, deadline=None)
@given(CONVERSATIONS, st.data())
def test_a_stored_paged_rebase_of_another_conversation_is_not_taken_for_ours(
    messages: list[dict[str, Any]], data: st.DataObject
) -> None:
    stored = stored_form(edit(messages))
    changed = list(messages)
    at = data.draw(st.integers(0, len(messages) - 1))
    changed[at] = {**changed[at], "content": str(changed[at]["content"]) + "!"}
    assert not codec.same_record(edit(changed), stored)
    assert not codec.same_record(edit([*messages, {"role": "user", "content": "more"}]), stored)
    assert not codec.same_record(edit(messages[:-1] or [messages[0]] * 2), stored)


def test_a_paged_rebase_is_not_taken_for_a_record_of_another_kind_sent_at_its_seq() -> None:
    stored = stored_form(edit([{"role": "user", "content": "x" * 100_000} for _ in range(3)]))
    assert stored.rebase.pages
    assert not codec.same_record(codec.stamp([jc.Entry.user("hi")], 3)[0], stored)


def test_a_page_holds_the_bytes_the_protocol_names() -> None:
    msgs = edit([{"role": "user", "content": "é"}]).rebase.messages
    assert (
        own_records.page_bytes(msgs)
        == (
            '{"format":"journald-page/1","messages":[{"content":[{"text":"é","type":"text"}],'
            '"role":"user"}]}'
        ).encode()
    )
