"""The page index of the cleaned-up and governed History views (docs/design.md#view-pages).

Both views are ``sanitize`` of the fold's messages (the governed one with the open turn
committed after them), and ``sanitize`` reads a list once, front to back, carrying only a
small state between messages (``journald.core.governance.Sanitizer``). So the sealed pages
of a conversation are sanitized page by page, once: the outputs that can no longer change
are cut into *view pages* (the same ``journald-page/1`` pages at clean boundaries of the
view, stored in the same content-addressed store; a page of a conversation that needed no
repair is byte for byte the fold's page, so it is stored once), and the index is:

* ``pages``/``digest``/``messages``: how many of the fold's pages (and messages) it covers
  and the digest of that prefix (``FoldPages.digest``: the addresses of the fold's
  page-reference chunks it covers whole, ``journald.core.ref_chunks``, then of the pages
  after them; it serves a conversation whose pages start with those). Checking it needs no
  reference before the covered boundary's chunk: a read of a long run reads at most the
  chunk holding the boundary, never every fold reference;
* ``view_chunks``/``view_pages``: the view pages, each with its message count (a History
  page bisects them and reads only the ones it returns), their references sealed into
  chunks of 128 the same way as the fold's (a view page that is a fold page is that page,
  and a view chunk of such pages is the fold's chunk: stored once), then the loose ones;
* ``carry``: the sanitizer after the covered pages (with the outputs not yet cut); a
  carried message equal to one of the last covered fold messages is saved as
  ``{"fold": index}`` (``named_fold_messages`` says which to read back).

A History page of either view is then the view pages, then what the carry gives for the
fold's unsealed tail (and, for the governed view, the open turn), derived at call time:
``view_log``. The index depends on nothing but the pages' bytes and the rules of
``sanitize`` (``VIEW_INDEX_FORMAT`` names them): no daemon setting changes either view.

Pure core: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from journald.core import ref_chunks
from journald.core.errors import StoreCorrupted
from journald.core.fold import Pending, pending_blocks
from journald.core.governance import Sanitizer
from journald.core.message_log import MessageLog
from journald.core.pages import PAGE_TARGET_BYTES, Paged, PageRef, cut, ref_from_json
from journald.core.records import sha256_hex
from journald.core.ref_chunks import RefChunk, chunks_from_json, full_chunks

VIEW_INDEX_FORMAT = "journald-view-index/2"
"""The index document's format, and the version of the rules its view pages were derived
by: a change to ``sanitize`` changes it, and an index of another format is rebuilt (``/1``
listed every view page and digested every fold page reference)."""
VIEW_INDEX_FORMAT_1 = "journald-view-index/1"
"""The format before: read once, with every fold reference (``index_from_json``'s
``fold_refs``), and saved again as ``VIEW_INDEX_FORMAT`` (``ViewIndex.sealed``)."""

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class FoldPages:
    """A conversation's fold pages as an index needs them: its page-reference chunks, the
    loose references after them, and the references of the chunks read so far (those from
    an index's covered boundary on are enough; ``need`` names them)."""

    chunks: tuple[PageRef, ...]
    loose: tuple[PageRef, ...]
    read: Mapping[str, Sequence[PageRef]]

    @classmethod
    def of(cls, pages: FoldPages | MessageLog | Sequence[PageRef]) -> FoldPages:
        """The pages of a log (its loaded chunks read) or of a list of every reference,
        with loose references that fill a chunk sealed into one (as the writer would)."""
        if isinstance(pages, FoldPages):
            return pages
        if isinstance(pages, MessageLog):
            chunks, loose = pages.chunks, pages.loose
            read = dict(pages.loaded_chunks(0, pages.chunked))
        else:
            chunks, loose, read = (), tuple(pages), {}
        more = full_chunks(loose)
        if more:
            chunks = (*chunks, *(c.ref for c in more))
            loose = loose[sum(len(c.refs) for c in more) :]
            read |= {c.ref.sha256: c.refs for c in more}
        return cls(chunks, loose, read)

    def with_read(self, read: Mapping[str, Sequence[PageRef]]) -> FoldPages:
        return FoldPages(self.chunks, self.loose, {**self.read, **read})

    @property
    def count(self) -> int:
        return ref_chunks.REFS_PER_CHUNK * len(self.chunks) + len(self.loose)

    def need(self, start: int) -> list[PageRef]:
        """The chunks holding pages ``[start, count)`` that are not read."""
        first = start // ref_chunks.REFS_PER_CHUNK
        return [c for c in self.chunks[first:] if c.sha256 not in self.read]

    def refs(self, start: int, end: int) -> list[PageRef] | None:
        """Page references ``[start, end)`` (None: a chunk holding them is not read)."""
        n = ref_chunks.REFS_PER_CHUNK
        out: list[PageRef] = []
        for k in range(start // n, min(len(self.chunks), -(-end // n))):
            got = self.read.get(self.chunks[k].sha256)
            if got is None:
                return None
            out.extend(got[max(0, start - k * n) : end - k * n])
        base = n * len(self.chunks)
        out.extend(self.loose[max(0, start - base) : max(0, end - base)])
        return out

    def _prefix(self, pages: int) -> tuple[tuple[PageRef, ...], list[PageRef]] | None:
        full = min(pages // ref_chunks.REFS_PER_CHUNK, len(self.chunks))
        rest = self.refs(full * ref_chunks.REFS_PER_CHUNK, pages)
        return None if rest is None else (self.chunks[:full], rest)

    def digest(self, pages: int) -> str | None:
        """Which prefix of ``pages`` pages this is: the SHA-256 of the addresses of the
        chunks it holds whole, then of the pages after them (None: the chunk holding its
        boundary is not read)."""
        got = self._prefix(pages) if 0 <= pages <= self.count else None
        if got is None:
            return None
        whole, rest = got
        joined = "".join(c.sha256 for c in whole) + "/" + "".join(r.sha256 for r in rest)
        return sha256_hex(joined.encode())

    def messages(self, pages: int) -> int | None:
        """The messages the first ``pages`` pages hold (None: as ``digest``)."""
        got = self._prefix(pages) if 0 <= pages <= self.count else None
        if got is None:
            return None
        return sum(c.count for c in got[0]) + sum(r.count for r in got[1])


FoldLike = FoldPages | MessageLog | Sequence[PageRef]


RECENT_PAGES = 2
"""Fold pages whose messages an index keeps after the covered ones: the carry names the ones
it holds unchanged by their fold index instead of copying them into the saved document."""


@dataclass(frozen=True, slots=True)
class ViewIndex:
    pages: int  # fold pages covered: the conversation's first ``pages`` pages
    digest: str  # ``FoldPages.digest`` of them
    messages: int  # the fold messages they hold
    view_chunks: tuple[PageRef, ...]  # chunks of the first view pages' references
    view_pages: tuple[PageRef, ...]  # the view pages after them
    carry: Sanitizer  # after the covered pages
    recent_base: int = 0  # fold index of ``recent[0]``
    recent: tuple[Message, ...] = ()  # the last covered fold messages (not saved)

    @classmethod
    def empty(cls) -> ViewIndex:
        digest = FoldPages((), (), {}).digest(0)
        assert digest is not None
        return cls(0, digest, 0, (), (), Sanitizer())

    def serves(self, fold: FoldLike) -> bool:
        """Whether ``fold`` (a conversation's pages) starts with the pages this index covers
        (False too when the chunk holding the covered boundary is not read)."""
        fp = FoldPages.of(fold)
        return fp.count >= self.pages and fp.digest(self.pages) == self.digest

    def covers(self, fold: FoldLike, pages: int | None = None) -> bool:
        """Whether it serves ``fold`` and covers its pages (its first ``pages``)."""
        fp = FoldPages.of(fold)
        return (fp.count if pages is None else pages) == self.pages and self.serves(fp)

    def sealed(self) -> tuple[ViewIndex, list[RefChunk]]:
        """This index with its loose view page references that fill a chunk sealed into
        chunks (an index read from ``VIEW_INDEX_FORMAT_1``), and the chunks to store."""
        chunks = full_chunks(self.view_pages)
        if not chunks:
            return self, []
        rest = self.view_pages[sum(len(c.refs) for c in chunks) :]
        more = (*self.view_chunks, *(c.ref for c in chunks))
        return replace(self, view_chunks=more, view_pages=rest), chunks

    def as_json(self) -> dict[str, Any]:
        """The document a lease end saves. Short where it can be: a carried message equal to
        a fold message among the last covered ones is ``{"fold": its index}``."""
        names: dict[int, int] = {}
        at = self.recent_base + len(self.recent) - 1
        for m in reversed(self.carry.messages()):  # in order, from the end
            if at >= self.recent_base and m == self.recent[at - self.recent_base]:
                names[id(m)] = at
                at -= 1

        def name(m: Message) -> Any:
            return {"fold": names[id(m)]} if id(m) in names else m

        return {
            "format": VIEW_INDEX_FORMAT,
            "pages": self.pages,
            "digest": self.digest,
            "messages": self.messages,
            "view_chunks": [r.as_json() for r in self.view_chunks],
            "view_pages": [r.as_json() for r in self.view_pages],
            "carry": self.carry.to_json(name),
        }


def named_fold_messages(obj: Any) -> list[int]:
    """The fold indexes a saved index's carry names (read them before ``index_from_json``)."""
    carry = obj.get("carry") if isinstance(obj, dict) else None
    if not isinstance(carry, dict):
        return []
    items = [carry.get("held"), *_list(carry.get("out")), *_list(carry.get("done"))]
    return sorted({m["fold"] for m in items if isinstance(m, dict) and type(m.get("fold")) is int})


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def index_from_json(
    obj: Any,
    fold: FoldLike,
    fold_messages: Mapping[int, Message],
    fold_refs: Sequence[PageRef] | None = None,
) -> ViewIndex | None:
    """The index ``as_json`` wrote, for a conversation of pages ``fold`` (the chunk holding
    the covered boundary read) whose messages ``named_fold_messages`` names are in
    ``fold_messages``; None for anything else (a cache: it is rebuilt), an index that does
    not serve these pages included. With ``fold_refs`` (every fold page reference), a
    ``VIEW_INDEX_FORMAT_1`` index too (its view pages all loose: ``ViewIndex.sealed``)."""
    try:
        if not isinstance(obj, dict):
            return None
        fp = FoldPages.of(fold)
        pages, digest, count = obj.get("pages"), obj.get("digest"), obj.get("messages")
        raw = obj.get("view_pages")
        if type(pages) is not int or pages < 0 or type(count) is not int:
            return None
        if not isinstance(digest, str) or not isinstance(raw, list):
            return None
        if obj.get("format") == VIEW_INDEX_FORMAT_1 and fold_refs is not None:
            covered = fold_refs[:pages]
            if (
                len(covered) != pages
                or sha256_hex("".join(r.sha256 for r in covered).encode()) != digest
            ):
                return None
            if not all(type(r) is not int or 0 <= r < pages for r in raw):
                return None
            chunks: tuple[PageRef, ...] = ()
            views = tuple(covered[r] if type(r) is int else ref_from_json(r) for r in raw)
            digest = fp.digest(pages)
            if digest is None:
                return None
        elif obj.get("format") == VIEW_INDEX_FORMAT:
            if fp.digest(pages) != digest:
                return None
            chunks = tuple(chunks_from_json(obj.get("view_chunks")))
            views = tuple(ref_from_json(r) for r in raw)
        else:
            return None
        if fp.count < pages or fp.messages(pages) != count:
            return None

        def resolve(m: Any) -> Any:
            if isinstance(m, dict) and set(m) == {"fold"}:
                return fold_messages[m["fold"]]  # KeyError: not read, not an index
            return m

        carry = Sanitizer.from_json(obj.get("carry"), resolve)
        named = sorted(fold_messages)
        base = named[0] if named else count
        recent = tuple(fold_messages[i] for i in range(base, count) if i in fold_messages)
        if len(recent) != count - base:
            recent = ()
            base = count
        return ViewIndex(pages, digest, count, chunks, views, carry, base, recent)
    except (StoreCorrupted, ValueError, TypeError, KeyError, AttributeError):
        return None  # any damage: not an index


class ViewBuilder:
    """Extends an index over more of the fold's pages, one page at a time: ``add`` each
    page's messages in order, store the view pages it returns, then ``index``."""

    def __init__(self, start: ViewIndex, target_bytes: int = PAGE_TARGET_BYTES) -> None:
        self.carry = start.carry.copy()
        self.view_chunks = list(start.view_chunks)
        self.view_pages = list(start.view_pages)
        self.new_chunks: list[RefChunk] = []
        """View chunks sealed by ``add``: the caller stores them (after their pages) before
        it saves the index."""
        self.target_bytes = target_bytes
        self.messages = start.messages
        self._recent: list[list[Message]] = [list(start.recent)] if start.recent else []

    def add(self, messages: Sequence[Message], seal: bool = True) -> Paged | None:
        """Sanitize one more fold page; with ``seal``, the view pages to store now (their
        messages leave the carry), None when none is due."""
        for m in messages:
            self.carry.feed(m)
        self.messages += len(messages)
        self._recent = [*self._recent, list(messages)][-RECENT_PAGES:]
        if not seal:
            return None
        done = self.carry.done
        if not done:
            return None
        paged = cut(done, self.target_bytes)
        # a page ending where ``done`` ends is kept back: the output after it (not final
        # yet) may carry tool results, and a view page must end at a clean boundary
        refs = paged.refs if paged.tail else paged.refs[:-1]
        if not refs:
            return None
        count = sum(r.count for r in refs)
        self.carry.done = done[count:]
        self.view_pages.extend(refs)
        sealed = full_chunks(self.view_pages)
        if sealed:
            self.view_chunks.extend(c.ref for c in sealed)
            del self.view_pages[: sum(len(c.refs) for c in sealed)]
            self.new_chunks.extend(sealed)
        return Paged(refs, [], {r.sha256: paged.data[r.sha256] for r in refs}, done[:count])

    def index(self, fold: FoldLike, pages: int | None = None) -> ViewIndex:
        """The index after the first ``pages`` (all) pages of ``fold``: every fold page
        added so far, from the first."""
        fp = FoldPages.of(fold)
        pages = fp.count if pages is None else pages
        digest = fp.digest(pages)
        if digest is None:
            raise ValueError("the chunk holding the covered boundary was not read")
        recent = tuple(m for page in self._recent for m in page)
        return ViewIndex(
            pages,
            digest,
            self.messages,
            tuple(self.view_chunks),
            tuple(self.view_pages),
            self.carry.copy(),
            self.messages - len(recent),
            recent,
        )


def open_turn(pending: Pending) -> list[Message]:
    """The messages ``governance.governed_messages`` commits an open turn as."""
    return [
        {"role": "assistant", "content": pending.message["content"]},
        {"role": "user", "content": pending_blocks(pending)},
    ]


def view_log(index: ViewIndex, tail: Sequence[Message], pending: Pending | None) -> MessageLog:
    """The view of a conversation whose pages ``index`` covers and whose unsealed messages
    are ``tail`` (``pending``: the governed view's open turn): the view pages, sealed, then
    the rest derived now. Equal to ``sanitize`` of the whole list (see the module doc)."""
    s = index.carry.copy()
    for m in tail:
        s.feed(m)
    for m in open_turn(pending) if pending is not None else ():
        s.feed(m)
    return MessageLog(s.finish(), index.view_pages, chunks=index.view_chunks)
