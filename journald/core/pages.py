"""Message pages: a conversation cut into content-addressed pieces (docs/design.md#message-pages,
docs/protocol.md#message-pages).

A rebase record, a checkpoint and (later) a fold snapshot name a conversation as a list of
page references plus an inline tail instead of holding every message, so what they cost to
write does not grow with the run and a conversation of any size fits any record limit.

* **Cut.** ``cut(messages)`` walks the conversation from its start in *units*: the messages
  between two clean boundaries (``journald.core.paging.is_clean``: no tool result is ever
  separated from its call). Units are added to the current page; once the page holds at
  least ``PAGE_TARGET_BYTES`` of encoded messages it is closed at that boundary. What is
  left at the end (less than the target) is the inline *tail*. The cut is prefix-stable: a
  conversation that only grew since it was last cut has the same pages up to the old tail,
  so a restore, a fork or a checkpoint of a grown run stores only its new pages.
* **Page bytes.** ``canonical_json({"format": "journald-page/1", "messages": [...]})``; a
  page's address is the SHA-256 hex of exactly those bytes, which is also its attachment
  address: pages live in the run's content-addressed attachment store, stored once.
* **Reference.** ``{"sha256", "count", "size"}``: the address, how many messages the page
  holds and its length in bytes. A rebase payload with a ``pages`` list means the
  conversation is the pages' messages in order, then ``messages``.
* **Resolve.** The fold is given a ``PageResolver`` (reference -> messages); ``decode_page``
  checks a page's bytes against its reference, and a page that is missing or does not match
  is ``store_corrupted`` naming it.

Pure core: no I/O imports; the stores that keep page bytes are in ``journald.storage``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from journald.core.errors import StoreCorrupted
from journald.core.paging import is_clean
from journald.core.records import canonical_json, sha256_hex

PAGE_FORMAT = "journald-page/1"
PAGE_TARGET_BYTES = 128 * 1024
"""A page closes at the first clean boundary at or past this many encoded bytes: one
JetStream object chunk, and the bound on a rebase record's inline tail."""

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PageRef:
    sha256: str
    count: int
    size: int

    def as_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "count": self.count, "size": self.size}


PageResolver = Callable[[PageRef], list[Message]]
"""Messages of one referenced page; raises ``StoreCorrupted`` naming a missing or bad page."""


@dataclass(frozen=True, slots=True)
class Paged:
    """A conversation in paged form: ``refs`` (with each page's bytes in ``data``) then
    ``tail``; ``messages`` is the whole conversation it came from."""

    refs: tuple[PageRef, ...]
    tail: list[Message]
    data: dict[str, bytes]
    messages: list[Message]

    @property
    def refs_json(self) -> list[dict[str, Any]]:
        return [r.as_json() for r in self.refs]

    def resolver(self) -> PageResolver:
        """The pages' messages as cut (no decoding: they were encoded from these)."""
        at: dict[str, list[Message]] = {}
        start = 0
        for ref in self.refs:
            at.setdefault(ref.sha256, self.messages[start : start + ref.count])
            start += ref.count

        def resolve(ref: PageRef) -> list[Message]:
            msgs = at.get(ref.sha256)
            if msgs is None or len(msgs) != ref.count:
                raise page_missing(ref)
            return list(msgs)

        return resolve


def encode_page(messages: Sequence[Mapping[str, Any]]) -> bytes:
    return canonical_json({"format": PAGE_FORMAT, "messages": list(messages)})


_PAGE_HEAD = b'{"format":"' + PAGE_FORMAT.encode() + b'","messages":['


def _page_of(encoded: Sequence[bytes]) -> bytes:
    """``encode_page`` from each message's canonical bytes (canonical JSON sorts ``format``
    before ``messages`` and joins with bare commas, so the page is these bytes joined)."""
    return _PAGE_HEAD + b",".join(encoded) + b"]}"


def _unit_ends(messages: Sequence[Message]) -> list[int]:
    """The clean boundaries after index 0, in order (each closes one unit)."""
    return [i for i in range(1, len(messages) + 1) if is_clean(messages, i)]


def cut(messages: Sequence[Message], target_bytes: int = PAGE_TARGET_BYTES) -> Paged:
    """Pages of ``messages`` at clean boundaries, and the tail shorter than one page."""
    msgs = list(messages)
    refs: list[PageRef] = []
    data: dict[str, bytes] = {}
    encoded: list[bytes] = []  # each message's canonical bytes, encoded once
    start, size = 0, 0
    prev = 0
    for end in _unit_ends(msgs):
        # a unit's share of the page: its messages' encoded bytes plus separators
        for m in msgs[prev:end]:
            encoded.append(canonical_json(m))
            size += len(encoded[-1]) + 1
        prev = end
        if size >= target_bytes:
            raw = _page_of(encoded[start:end])
            ref = PageRef(sha256_hex(raw), end - start, len(raw))
            refs.append(ref)
            data[ref.sha256] = raw
            start, size = end, 0
    return Paged(tuple(refs), msgs[start:], data, msgs)


OPEN_TAIL_MESSAGES = 2


def cut_open(messages: Sequence[Message], target_bytes: int = PAGE_TARGET_BYTES) -> Paged:
    """``cut`` of a conversation that keeps growing (a held run's log, a fold snapshot): the
    pages leave at least its last two messages in the tail. The fold merges a record into the
    last message when the roles match, and a merged tool result makes that message answer the
    one before it: were it the tail's first, the boundary before it would stop being clean, and
    a History page there would need a message of the sealed page before (a Hypothesis property
    found it: user, seal, a user record carrying a tool result)."""
    paged = cut(messages, target_bytes)
    refs = list(paged.refs)
    keep = len(paged.tail)
    while refs and keep < OPEN_TAIL_MESSAGES:
        keep += refs.pop().count
    if len(refs) == len(paged.refs):
        return paged
    start = len(paged.messages) - keep
    data = {r.sha256: paged.data[r.sha256] for r in refs}
    return Paged(tuple(refs), paged.messages[start:], data, paged.messages)


def _page_error(ref: PageRef | Mapping[str, Any], what: str) -> StoreCorrupted:
    sha = ref.sha256 if isinstance(ref, PageRef) else str(ref.get("sha256", ""))[:64]
    return StoreCorrupted(
        f"message page {sha} {what}; the conversation that references it cannot be read: "
        "restore the run's attachments from a backup (or the run from a checkpoint export)",
        metadata={"page": sha},
    )


def page_missing(ref: PageRef) -> StoreCorrupted:
    return _page_error(ref, "is referenced but missing from the run's store")


def addressed_json(
    ref: PageRef, raw: bytes, error: Callable[[PageRef, str], StoreCorrupted]
) -> Any:
    """The JSON value of content-addressed bytes (a page, a reference chunk, an answered-id
    chunk), once they match ``ref``'s address and size; ``error(ref, what)`` otherwise."""
    if sha256_hex(raw) != ref.sha256 or len(raw) != ref.size:
        raise error(ref, "does not match its SHA-256 or size (damaged)")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise error(ref, "is not JSON") from None


def decode_page(ref: PageRef, raw: bytes) -> list[Message]:
    """The messages of page ``raw``, checked against ``ref`` (address, size, format, count)."""
    obj = addressed_json(ref, raw, _page_error)
    msgs = obj.get("messages") if isinstance(obj, dict) else None
    if (
        not isinstance(obj, dict)
        or obj.get("format") != PAGE_FORMAT
        or set(obj) != {"format", "messages"}
        or not isinstance(msgs, list)
        or len(msgs) != ref.count
        or not all(isinstance(m, dict) for m in msgs)
    ):
        raise _page_error(ref, f"is not a {PAGE_FORMAT} page of {ref.count} messages")
    return msgs


def bytes_resolver(pages: Mapping[str, bytes]) -> PageResolver:
    """Resolve from page bytes already read (``decode_page`` checks each)."""

    def resolve(ref: PageRef) -> list[Message]:
        raw = pages.get(ref.sha256)
        if raw is None:
            raise page_missing(ref)
        return decode_page(ref, raw)

    return resolve


def ref_from_json(obj: object) -> PageRef:
    """A page reference (raises ``StoreCorrupted`` when malformed)."""
    if (
        not isinstance(obj, dict)
        or set(obj) != {"sha256", "count", "size"}
        or not isinstance(obj["sha256"], str)
        or len(obj["sha256"]) != 64
        or type(obj["count"]) is not int
        or type(obj["size"]) is not int
        or obj["count"] < 1
        or obj["size"] < 1
    ):
        raise _page_error(obj if isinstance(obj, Mapping) else {}, "has a malformed reference")
    return PageRef(obj["sha256"], obj["count"], obj["size"])


def page_refs(payload: Mapping[str, Any]) -> list[PageRef]:
    """The pages a rebase payload (or a stored checkpoint) references, in order."""
    raw = payload.get("pages")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _page_error({}, "list of a conversation is not a list")
    return [ref_from_json(r) for r in raw]


def is_paged(payload: Mapping[str, Any]) -> bool:
    """Whether a rebase payload names pages (or chunks of them: ``journald.core.rebase_chunks``)."""
    return bool(payload.get("pages") or payload.get("page_chunks"))


def conversation(payload: Mapping[str, Any], resolve: PageResolver | None) -> list[Message] | None:
    """The whole conversation of a rebase payload (pages, then ``messages``); None when its
    ``messages`` is not a list. Pages without a resolver are ``store_corrupted``."""
    tail = payload.get("messages")
    if not isinstance(tail, list):
        return None
    refs = page_refs(payload)
    if not refs:
        return tail
    if resolve is None:
        raise _page_error(refs[0], "cannot be read here: no page store was given to the fold")
    out: list[Message] = []
    for ref in refs:
        out.extend(resolve(ref))
    out.extend(tail)
    return out


def paged_payload(base: Mapping[str, Any], paged: Paged) -> dict[str, Any]:
    """``base`` (a rebase payload without messages) holding ``paged``: pages then tail."""
    out = dict(base)
    out["messages"] = paged.tail
    if paged.refs:
        out["pages"] = paged.refs_json
    return out


def referenced_pages(payloads: Sequence[Mapping[str, Any]]) -> list[PageRef]:
    """Every page the payloads reference, each once, in first-seen order."""
    seen: dict[str, PageRef] = {}
    for p in payloads:
        for ref in page_refs(p):
            seen.setdefault(ref.sha256, ref)
    return list(seen.values())
