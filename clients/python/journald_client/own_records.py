"""Whether a stored record is the one this writer sent: how a writer whose acknowledgement
was lost recognises its own write in what ``Load`` returns (docs/protocol.md#retries).

The daemon fills some fields of a record (``prev``, ``type``, ``format_version``,
``canonical``, ``hash``) and, for an ``edit`` rebase longer than one page, stores a different
form of it: page references and a short inline tail where the writer sent the whole
conversation inline (docs/protocol.md#message-pages). A paged rebase is recognised by its
page addresses, with no read: each reference names its page by the SHA-256 of the page's
bytes, which are the canonical JSON of ``{"format": "journald-page/1", "messages": [...]}``,
and its ``count`` says which of the sent messages it holds. So the sent messages are encoded
page by page at the boundaries the references give (not by cutting them again, which is the
daemon's rule to keep) and their addresses compared. Free of I/O, like ``retry``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from journald_proto import journal_pb2 as pb

from journald_client.fingerprint import canonical_json
from journald_client.state import PAGE_FORMAT


def same_record(sent: pb.Record, stored: pb.Record) -> bool:
    """Whether a stored record is the one we sent (ignoring the fields the daemon fills; a
    paged rebase is compared with the sent inline one through its page addresses)."""
    if sent.HasField("rebase") and stored.HasField("rebase") and stored.rebase.pages:
        unpaged = as_sent(sent.rebase.messages, stored)
        if unpaged is None:
            return False
        stored = unpaged
    return _normal(sent) == _normal(stored)


def as_sent(sent_messages: Sequence[pb.Message], stored: pb.Record) -> pb.Record | None:
    """The paged rebase ``stored`` held inline again, its pages replaced by the sent messages
    they hold, when every page's address and size are those of these messages; None when a
    page is not made of them (another conversation, or not as many messages)."""
    refs = stored.rebase.pages
    paged = sum(ref.count for ref in refs)
    if paged + len(stored.rebase.messages) != len(sent_messages):
        return None
    at = 0
    for ref in refs:
        try:
            data = page_bytes(sent_messages[at : at + ref.count])
        except ValueError:  # content that is not JSON: the daemon stored none of it
            return None
        if len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.sha256:
            return None
        at += ref.count
    out = pb.Record()
    out.CopyFrom(stored)
    out.rebase.ClearField("pages")
    tail = list(out.rebase.messages)
    del out.rebase.messages[:]
    out.rebase.messages.extend(list(sent_messages[:paged]) + tail)
    return out


def page_bytes(messages: Sequence[pb.Message]) -> bytes:
    """The bytes of a message page holding ``messages`` (docs/protocol.md#message-pages)."""
    items = [{"role": m.role, "content": _content(m.content_json)} for m in messages]
    return canonical_json({"format": PAGE_FORMAT, "messages": items})


def _content(data: bytes) -> object:
    return json.loads(data) if data else []


def _normal(r: pb.Record) -> bytes:
    c = pb.Record()
    c.CopyFrom(r)
    for name in ("prev", "type", "format_version", "canonical", "hash"):
        c.ClearField(name)
    return c.SerializeToString(deterministic=True)
