"""The page index of the cleaned-up and governed History views (docs/design.md#view-pages).

Both views are ``sanitize`` of the fold's messages (the governed one with the open turn
committed after them), and ``sanitize`` reads a list once, front to back, carrying only a
small state between messages (``journald.core.governance.Sanitizer``). So the sealed pages
of a conversation are sanitized page by page, once: the outputs that can no longer change
are cut into *view pages* (the same ``journal-page/1`` pages at clean boundaries of the
view, stored in the same content-addressed store; a page of a conversation that needed no
repair is byte for byte the fold's page, so it is stored once), and the index is:

* ``pages``/``digest``: how many of the fold's pages it covers and the SHA-256 of their
  addresses joined (the index serves a conversation whose pages start with those);
* ``view_pages``: the view pages, each with its message count (a History page bisects
  them and reads only the ones it returns);
* ``carry``: the sanitizer after the covered pages (with the outputs not yet cut).

A History page of either view is then the view pages, then what the carry gives for the
fold's unsealed tail (and, for the governed view, the open turn), derived at call time:
``view_log``. The index depends on nothing but the pages' bytes and the rules of
``sanitize`` (``VIEW_INDEX_FORMAT`` names them): no daemon setting changes either view.

Pure core: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from journald.core.errors import StoreCorrupted
from journald.core.fold import Pending, pending_blocks
from journald.core.governance import Sanitizer
from journald.core.message_log import MessageLog
from journald.core.pages import PAGE_TARGET_BYTES, Paged, PageRef, cut, ref_from_json
from journald.core.records import sha256_hex

VIEW_INDEX_FORMAT = "journald-view-index/1"
"""The index document's format, and the version of the rules its view pages were derived
by: a change to ``sanitize`` changes it, and an index of another format is rebuilt."""

Message = dict[str, Any]


def covered_digest(refs: Sequence[PageRef]) -> str:
    """The SHA-256 of the pages' addresses joined: which conversation prefix an index covers."""
    return sha256_hex("".join(r.sha256 for r in refs).encode())


@dataclass(frozen=True, slots=True)
class ViewIndex:
    pages: int
    digest: str
    view_pages: tuple[PageRef, ...]
    carry: Sanitizer

    @classmethod
    def empty(cls) -> ViewIndex:
        return cls(0, covered_digest(()), (), Sanitizer())

    def serves(self, refs: Sequence[PageRef]) -> bool:
        """Whether ``refs`` (a conversation's pages) start with the pages this index covers."""
        return len(refs) >= self.pages and covered_digest(refs[: self.pages]) == self.digest

    def covers(self, refs: Sequence[PageRef]) -> bool:
        return len(refs) == self.pages and self.serves(refs)

    @property
    def view_messages(self) -> int:
        return sum(r.count for r in self.view_pages)

    def as_json(self) -> dict[str, Any]:
        return {
            "format": VIEW_INDEX_FORMAT,
            "pages": self.pages,
            "digest": self.digest,
            "view_pages": [r.as_json() for r in self.view_pages],
            "carry": self.carry.to_json(),
        }

    @classmethod
    def from_json(cls, obj: Any) -> ViewIndex | None:
        """The index ``as_json`` wrote; None for anything else (a cache: it is rebuilt)."""
        try:
            if not isinstance(obj, dict) or obj.get("format") != VIEW_INDEX_FORMAT:
                return None
            pages, digest, raw = obj.get("pages"), obj.get("digest"), obj.get("view_pages")
            if type(pages) is not int or pages < 0 or not isinstance(digest, str):
                return None
            if not isinstance(raw, list):
                return None
            refs = tuple(ref_from_json(r) for r in raw)
            return cls(pages, digest, refs, Sanitizer.from_json(obj.get("carry")))
        except (StoreCorrupted, ValueError, TypeError, KeyError, AttributeError):
            # any damage: not an index
            return None


class ViewBuilder:
    """Extends an index over more of the fold's pages, one page at a time: ``add`` each
    page's messages in order, store the view pages it returns, then ``index``."""

    def __init__(self, start: ViewIndex, target_bytes: int = PAGE_TARGET_BYTES) -> None:
        self.carry = start.carry.copy()
        self.view_pages = list(start.view_pages)
        self.target_bytes = target_bytes

    def add(self, messages: Sequence[Message], seal: bool = True) -> Paged | None:
        """Sanitize one more fold page; with ``seal``, the view pages to store now (their
        messages leave the carry), None when none is due."""
        for m in messages:
            self.carry.feed(m)
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
        return Paged(refs, [], {r.sha256: paged.data[r.sha256] for r in refs}, done[:count])

    def index(self, refs: Sequence[PageRef]) -> ViewIndex:
        """The index after ``refs`` (every fold page added so far, from the first)."""
        return ViewIndex(len(refs), covered_digest(refs), tuple(self.view_pages), self.carry.copy())


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
    return MessageLog(s.finish(), index.view_pages)
