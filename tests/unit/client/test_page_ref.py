"""The Python client decodes a message page it read with ``get_attachment`` only when the
bytes are the ones its reference names (docs/protocol.md#message-pages)."""

from __future__ import annotations

import journald_client as jc
import pytest

from journald.cli.commands import record_summary
from journald.core.pages import cut
from journald.core.rebase_chunks import rebase_payload
from tests.builders import text


def test_a_page_decodes_to_its_messages_and_damaged_or_miscounted_bytes_are_refused() -> None:
    msgs = [{"role": "user", "content": [text(f"{i} " + "q" * 70_000)]} for i in range(4)]
    paged = cut(msgs)
    ref = paged.refs[0]
    raw = paged.data[ref.sha256]
    page = jc.PageRef(ref.sha256, ref.count, ref.size)
    assert page.messages(raw) == msgs[: ref.count]
    with pytest.raises(ValueError, match=ref.sha256):
        page.messages(raw.replace(b"qqq", b"qqr", 1))
    with pytest.raises(ValueError, match="does not hold"):
        jc.PageRef(ref.sha256, ref.count + 1, ref.size).messages(raw)


def test_a_chunked_rebase_record_resolves_chunk_first_and_refuses_a_damaged_chunk() -> None:
    msgs = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [text(f"m{i}")]}
        for i in range(2 * 128 + 7)
    ]
    paged = cut(msgs, 1)  # one page per message: two chunks and a few loose pages
    payload, rebase = rebase_payload({"reason": "restore"}, paged)
    blobs = dict(paged.data) | {c.ref.sha256: c.raw for c in rebase.chunks}
    rec = jc.JournalRecord(2, "rebase", "", "", "", b"", None, payload)
    assert [c.sha256 for c in rec.page_chunks] == [c.ref.sha256 for c in rebase.chunks]
    assert rec.paged_messages + len(payload["messages"]) == len(msgs)
    assert rec.conversation(blobs.__getitem__) == msgs
    assert "263 pages" in record_summary(rec, 200)
    first = rebase.chunks[0].ref.sha256
    damaged = blobs | {first: blobs[first].replace(b'"count":1', b'"count":2', 1)}
    with pytest.raises(ValueError, match=first):
        rec.conversation(damaged.__getitem__)
