"""A rebase's message page references cross the API typed (``RebasePayload.pages``) and come
back to the same stored bytes; an inline rebase carries none (docs/protocol.md#payloads)."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from journald.core.pages import cut, paged_payload
from journald.core.records import GENESIS, make_record
from journald.server import convert
from tests.builders import TS, text


def conversation(sizes: list[int]) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [text(f"{i} " + "p" * n)]}
        for i, n in enumerate(sizes)
    ]


@settings(max_examples=25, deadline=None)
@example([90_000] * 8)  # several pages and a tail
@example([10])  # inline
@given(st.lists(st.integers(min_value=0, max_value=90_000), min_size=1, max_size=12))
def test_a_rebase_round_trips_with_its_page_references_typed(sizes: list[int]) -> None:
    msgs = conversation(sizes)
    paged = cut(msgs)
    payload = paged_payload({"reason": "restore", "checkpoint_id": "cp-1"}, paged)
    rec = make_record(2, "rebase", payload, GENESIS, TS)
    msg = convert.record_to_pb(rec)
    typed = [(p.sha256, p.count, p.size) for p in msg.rebase.pages]
    assert typed == [(r.sha256, r.count, r.size) for r in paged.refs]
    assert sum(p.count for p in msg.rebase.pages) + len(msg.rebase.messages) == len(msgs)
    back = convert.record_from_pb(type(msg).FromString(msg.SerializeToString()), prev=GENESIS)
    assert back.raw == rec.raw
    assert ("pages" in back.payload) == bool(paged.refs)  # an inline rebase has no key
