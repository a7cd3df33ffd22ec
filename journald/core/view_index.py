"""The page index of the cleaned-up and governed History views (docs/design.md#view-pages).

Both views are ``sanitize`` of the fold's messages (the governed one with the open turn
committed after them), and ``sanitize`` reads a list once, front to back, carrying only a
small state between messages (``journald.core.governance.Sanitizer``). So the sealed pages
of a conversation are sanitized page by page, once: the outputs that can no longer change
are cut into *view pages* (the same ``journald-page/1`` pages at clean boundaries of the
view, stored in the same content-addressed store; a page of a conversation that needed no
repair is byte for byte the fold's page, so it is stored once), and the index is:

* ``pages``/``digest``/``messages``: how many of the fold's pages (and messages) it covers
  and the SHA-256 of their addresses joined (it serves a conversation whose pages start
  with those);
* ``view_pages``: the view pages, each with its message count (a History page bisects
  them and reads only the ones it returns); saved as the fold page's number when it is one;
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


RECENT_PAGES = 2
"""Fold pages whose messages an index keeps after the covered ones: the carry names the ones
it holds unchanged by their fold index instead of copying them into the saved document."""


@dataclass(frozen=True, slots=True)
class ViewIndex:
    pages: int  # fold pages covered: the conversation's first ``pages`` pages
    digest: str  # ``covered_digest`` of them
    messages: int  # the fold messages they hold
    view_pages: tuple[PageRef, ...]
    carry: Sanitizer  # after the covered pages
    recent_base: int = 0  # fold index of ``recent[0]``
    recent: tuple[Message, ...] = ()  # the last covered fold messages (not saved)

    @classmethod
    def empty(cls) -> ViewIndex:
        return cls(0, covered_digest(()), 0, (), Sanitizer())

    def serves(self, refs: Sequence[PageRef]) -> bool:
        """Whether ``refs`` (a conversation's pages) start with the pages this index covers."""
        return len(refs) >= self.pages and covered_digest(refs[: self.pages]) == self.digest

    def covers(self, refs: Sequence[PageRef]) -> bool:
        return len(refs) == self.pages and self.serves(refs)

    def as_json(self, fold_refs: Sequence[PageRef]) -> dict[str, Any]:
        """The document a lease end saves (``fold_refs``: the conversation's pages, the
        first ``pages`` of them covered). Short where it can be: a view page that is a fold
        page is that page's number, and a carried message equal to a fold message among
        the last covered ones is ``{"fold": its index}``."""
        number = {r.sha256: k for k, r in enumerate(fold_refs[: self.pages])}
        views = [number.get(r.sha256, r.as_json()) for r in self.view_pages]
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
            "view_pages": views,
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
    obj: Any, fold_refs: Sequence[PageRef], fold_messages: Mapping[int, Message]
) -> ViewIndex | None:
    """The index ``as_json`` wrote, for a conversation of pages ``fold_refs`` whose messages
    ``named_fold_messages`` names are in ``fold_messages``; None for anything else (a
    cache: it is rebuilt), an index that does not serve these pages included."""
    try:
        if not isinstance(obj, dict) or obj.get("format") != VIEW_INDEX_FORMAT:
            return None
        pages, digest, count = obj.get("pages"), obj.get("digest"), obj.get("messages")
        raw = obj.get("view_pages")
        if type(pages) is not int or pages < 0 or type(count) is not int:
            return None
        if not isinstance(digest, str) or not isinstance(raw, list):
            return None
        if len(fold_refs) < pages or covered_digest(fold_refs[:pages]) != digest:
            return None
        if sum(r.count for r in fold_refs[:pages]) != count:
            return None
        views: list[PageRef] = []
        for r in raw:
            if type(r) is int:
                if not 0 <= r < pages:
                    return None
                views.append(fold_refs[r])
            else:
                views.append(ref_from_json(r))

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
        return ViewIndex(pages, digest, count, tuple(views), carry, base, recent)
    except (StoreCorrupted, ValueError, TypeError, KeyError, AttributeError):
        return None  # any damage: not an index


class ViewBuilder:
    """Extends an index over more of the fold's pages, one page at a time: ``add`` each
    page's messages in order, store the view pages it returns, then ``index``."""

    def __init__(self, start: ViewIndex, target_bytes: int = PAGE_TARGET_BYTES) -> None:
        self.carry = start.carry.copy()
        self.view_pages = list(start.view_pages)
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
        return Paged(refs, [], {r.sha256: paged.data[r.sha256] for r in refs}, done[:count])

    def index(self, refs: Sequence[PageRef]) -> ViewIndex:
        """The index after ``refs`` (every fold page added so far, from the first)."""
        recent = tuple(m for page in self._recent for m in page)
        return ViewIndex(
            len(refs),
            covered_digest(refs),
            self.messages,
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
    return MessageLog(s.finish(), index.view_pages)
