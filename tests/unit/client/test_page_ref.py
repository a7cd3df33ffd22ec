"""The Python client decodes a message page it read with ``get_attachment`` only when the
bytes are the ones its reference names (docs/protocol.md#message-pages)."""

from __future__ import annotations

import journald_client as jc
import pytest

from journald.core.pages import cut
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
