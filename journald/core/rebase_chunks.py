"""A paged rebase that names its page references through chunks (docs/design.md#message-pages,
docs/protocol.md#page-reference-chunks).

A rebase record lists a conversation's page references (~100 bytes each): at ~8,000 pages
(~1 GB of conversation) the list alone is ~800 KB, above a JetStream ``max_payload`` of 1 MB
and growing with the run. So a rebase of ``REFS_PER_CHUNK`` pages or more stores the full
chunks of page references exactly as a fold snapshot does (``journald.core.ref_chunks``:
chunk ``i`` holds page references ``[128 i, 128 i + 128)``) and names them in
``page_chunks``; ``pages`` keeps only the loose references after the last full chunk, then
``messages`` the tail. The record stays a few KB at any size (one ~100-byte reference per
16 MiB of conversation). A rebase of fewer pages, and every rebase written before, has no
``page_chunks`` and is unchanged byte for byte.

The conversation of a rebase is: every chunk's pages in order, then ``pages``, then
``messages``. The fold reads it through a ``RebaseResolver``: a ``PageResolver`` that also
knows each named chunk's page references (read and checked by the caller, as pages are).

Pure core: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from journald.core.errors import StoreCorrupted
from journald.core.message_log import MessageLog
from journald.core.pages import (
    OPEN_TAIL_MESSAGES,
    Message,
    Paged,
    PageRef,
    PageResolver,
    conversation,
    page_missing,
    page_refs,
    paged_payload,
    ref_from_json,
)
from journald.core.ref_chunks import (
    REFS_PER_CHUNK,
    ChunkResolver,
    RefChunk,
    full_chunks,
    ref_chunk_missing,
)

FIELD = "page_chunks"


@dataclass(frozen=True, slots=True)
class PagedRebase:
    """What a rebase record names, to store before it: its pages (``paged``) and the
    page-reference chunks over them (none below ``REFS_PER_CHUNK`` pages)."""

    paged: Paged
    chunks: tuple[RefChunk, ...]

    def resolver(self) -> PageResolver:
        """The conversation as cut (no decoding), its chunks included."""
        pages = self.paged.resolver()
        return with_chunks(pages, self.chunks) if self.chunks else pages


def rebase_payload(base: Mapping[str, Any], paged: Paged) -> tuple[dict[str, Any], PagedRebase]:
    """``base`` (a rebase payload without messages) holding ``paged``, and what to store
    before the record: below ``REFS_PER_CHUNK`` pages exactly ``paged_payload`` (no chunk);
    from there the full chunks in ``page_chunks``, the loose references in ``pages``."""
    if len(paged.refs) < REFS_PER_CHUNK:
        return paged_payload(base, paged), PagedRebase(paged, ())
    chunks = full_chunks(paged.refs)
    loose = paged.refs[REFS_PER_CHUNK * len(chunks) :]
    out = dict(base)
    out[FIELD] = [c.ref.as_json() for c in chunks]
    if loose:
        out["pages"] = [r.as_json() for r in loose]
    out["messages"] = paged.tail
    return out, PagedRebase(paged, tuple(chunks))


def chunk_refs(payload: Mapping[str, Any]) -> list[PageRef]:
    """The page-reference chunks a rebase payload names, in order (``StoreCorrupted`` when
    malformed, as a malformed page reference is)."""
    raw = payload.get(FIELD)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise StoreCorrupted(
            "a rebase's page_chunks is not a list; the journal cannot be folded: run "
            "`journald verify` and restore from a checkpoint or backup",
            metadata={"field": FIELD},
        )
    return [ref_from_json(r) for r in raw]


def referenced_chunks(payloads: Sequence[Mapping[str, Any]]) -> list[PageRef]:
    """Every chunk the payloads name, each once, in first-seen order."""
    seen: dict[str, PageRef] = {}
    for p in payloads:
        for ref in chunk_refs(p):
            seen.setdefault(ref.sha256, ref)
    return list(seen.values())


def all_page_refs(payload: Mapping[str, Any], chunks: ChunkResolver | None) -> list[PageRef]:
    """Every page a rebase payload's conversation is made of, in order: its chunks' pages
    (through ``chunks``), then its loose ``pages``. Chunks without a resolver are
    ``store_corrupted`` naming the first."""
    named = chunk_refs(payload)
    out: list[PageRef] = []
    if named and chunks is None:
        raise ref_chunk_missing(named[0])
    for ref in named:
        assert chunks is not None
        out.extend(chunks(ref))
    out.extend(page_refs(payload))
    return out


def referenced_pages(
    payloads: Sequence[Mapping[str, Any]], chunks: ChunkResolver | None = None
) -> list[PageRef]:
    """Every page the payloads reference (through their chunks), each once, in order."""
    seen: dict[str, PageRef] = {}
    for p in payloads:
        for ref in all_page_refs(p, chunks):
            seen.setdefault(ref.sha256, ref)
    return list(seen.values())


def chunk_map_resolver(known: Mapping[str, Sequence[PageRef]]) -> ChunkResolver:
    """Resolve chunks already read (and checked) by the caller; another is missing."""

    def resolve(ref: PageRef) -> Sequence[PageRef]:
        got = known.get(ref.sha256)
        if got is None:
            raise ref_chunk_missing(ref)
        return got

    return resolve


class RebaseResolver:
    """A ``PageResolver`` that also resolves the page-reference chunks a rebase names."""

    __slots__ = ("chunks", "pages")

    def __init__(self, pages: PageResolver, chunks: ChunkResolver) -> None:
        self.pages = pages
        self.chunks = chunks

    def __call__(self, ref: PageRef) -> list[Message]:
        return self.pages(ref)


def with_chunks(
    pages: PageResolver, chunks: Sequence[RefChunk] | Mapping[str, Sequence[PageRef]]
) -> RebaseResolver:
    """``pages`` resolving the given chunks too (those read or just written)."""
    known = chunks if isinstance(chunks, Mapping) else {c.ref.sha256: c.refs for c in chunks}
    return RebaseResolver(pages, chunk_map_resolver(known))


def rebase_conversation(
    payload: Mapping[str, Any], resolve: PageResolver | None
) -> list[Message] | None:
    """The whole conversation of a rebase payload (chunks' pages, pages, then ``messages``);
    None when its ``messages`` is not a list. A chunk the resolver cannot give (or a resolver
    that knows no chunk) is ``store_corrupted`` naming it (metadata ``chunk``)."""
    named = chunk_refs(payload)
    if not named:
        return conversation(payload, resolve)
    tail = payload.get("messages")
    if not isinstance(tail, list):
        return None
    chunks: Callable[[PageRef], Sequence[PageRef]] | None = (
        resolve.chunks if isinstance(resolve, RebaseResolver) else None
    )
    refs = all_page_refs(payload, chunks)
    assert resolve is not None  # a chunk resolver came with it
    out: list[Message] = []
    for ref in refs:
        out.extend(resolve(ref))
    out.extend(tail)
    return out


def page_count(payload: Mapping[str, Any]) -> int:
    """How many pages a rebase payload's conversation is made of, without reading a chunk."""
    return REFS_PER_CHUNK * len(chunk_refs(payload)) + len(page_refs(payload))


def sealed_count(payload: Mapping[str, Any]) -> int:
    """How many messages a rebase payload's chunks and pages hold (before its tail)."""
    return sum(r.count for r in chunk_refs(payload)) + sum(r.count for r in page_refs(payload))


def last_page(payload: Mapping[str, Any], chunks: ChunkResolver | None) -> list[PageRef]:
    """The rebase's last page reference (``[]`` when it has none): the last loose one, else
    the last of its last chunk (read through ``chunks``)."""
    loose = page_refs(payload)
    if loose:
        return loose[-1:]
    named = chunk_refs(payload)
    if not named:
        return []
    if chunks is None:
        raise ref_chunk_missing(named[-1])
    return list(chunks(named[-1])[-1:])


# --- the fold of a paged rebase: its pages stay sealed (docs/design.md#lazy-rebases) ---------


def open_chunk(payload: Mapping[str, Any]) -> PageRef | None:
    """The chunk ``open_refs`` needs read: the last one, when the loose references and the
    inline tail together hold fewer than ``OPEN_TAIL_MESSAGES`` messages (else None)."""
    named = chunk_refs(payload)
    tail = payload.get("messages")
    if _open_enough(tail):
        return None
    held = (len(tail) if isinstance(tail, list) else 0) + sum(r.count for r in page_refs(payload))
    return named[-1] if named and held < OPEN_TAIL_MESSAGES else None


def _open_enough(tail: Any) -> bool:
    """Whether a rebase's inline tail needs no page taken back: it holds
    ``OPEN_TAIL_MESSAGES`` messages, or one assistant message. ``cut_open`` keeps two open
    because a tool result merged into a lone user message would make it answer the sealed
    message before it; nothing merged into an assistant message answers anything, and the
    page boundary before it is clean by the cut. So a conversation that ends with an
    assistant's answer after a large tool result (the usual shape) keeps that result sealed
    in its page instead of inline in the held tail and in every fold snapshot."""
    if not isinstance(tail, list):
        return False
    if len(tail) >= OPEN_TAIL_MESSAGES:
        return True
    return len(tail) == 1 and isinstance(tail[0], dict) and tail[0].get("role") == "assistant"


def _opened(
    payload: Mapping[str, Any], chunks: ChunkResolver | None
) -> tuple[list[PageRef], list[PageRef], list[PageRef]]:
    """(chunks kept, loose references kept, the references taken back into the tail)."""
    named, loose = chunk_refs(payload), page_refs(payload)
    tail = payload.get("messages")
    keep = len(tail) if isinstance(tail, list) else 0
    if _open_enough(tail):
        keep = OPEN_TAIL_MESSAGES
    opened: list[PageRef] = []
    while keep < OPEN_TAIL_MESSAGES and (loose or named):
        if not loose:
            if chunks is None:
                raise ref_chunk_missing(named[-1])
            loose = list(chunks(named[-1]))
            named = named[:-1]
        ref = loose.pop()
        opened.insert(0, ref)
        keep += ref.count
    return named, loose, opened


def open_refs(payload: Mapping[str, Any], chunks: ChunkResolver | None) -> list[PageRef]:
    """The pages the fold of a rebase reads: the last ones, taken back into the open tail
    until it holds ``OPEN_TAIL_MESSAGES`` messages (as ``cut_open`` leaves a snapshot's), so
    the fold can merge into the last message and the boundary before the tail stays clean
    whatever the next record merges (none when the inline tail holds two messages, or one
    assistant message: ``_open_enough``)."""
    return _opened(payload, chunks)[2]


def rebase_log(payload: Mapping[str, Any], resolve: PageResolver | None) -> MessageLog | None:
    """The conversation of a rebase payload as the fold holds it, reading no page but
    ``open_refs``: its chunks and page references sealed (chunk ``i`` holds references
    ``[128 i, 128 i + 128)``, fewer than 128 loose: the fixed cut a held run's log and a fold
    snapshot keep), the opened pages' messages then its ``messages`` the tail. None when
    ``messages`` is not a list. A page or chunk the resolver cannot give is ``store_corrupted``
    naming it."""
    tail = payload.get("messages")
    if not isinstance(tail, list):
        return None
    chunks = resolve.chunks if isinstance(resolve, RebaseResolver) else None
    named, loose, opened = _opened(payload, chunks)
    head: list[Message] = []
    for ref in opened:
        if resolve is None:
            raise page_missing(ref)
        head.extend(resolve(ref))
    return MessageLog([*(dict(m) for m in head), *(dict(m) for m in tail)], loose, None, named)


def log_messages(log: MessageLog, resolve: PageResolver | None) -> list[Message]:
    """Every message of ``log`` through ``resolve`` (what a caller that read every page of
    the rebases it folded hands over: ``rebuilt_after_quarantine``)."""
    if not log.has_pages:
        return list(log)
    chunks = resolve.chunks if isinstance(resolve, RebaseResolver) else None
    refs: list[PageRef] = []
    for ref in log.chunks:
        if chunks is None:
            raise ref_chunk_missing(ref)
        refs.extend(chunks(ref))
    refs.extend(log.loose)
    out: list[Message] = []
    for ref in refs:
        if resolve is None:
            raise page_missing(ref)
        out.extend(resolve(ref))
    out.extend(log.tail)
    return out
