"""A conversation that does not hold the run: sealed message pages plus an open tail
(docs/design.md#message-pages, docs/design.md#fold-snapshots).

``MessageLog`` is the fold's message list (``RunState.messages``). It reads like a list of
messages, but its older messages are *sealed*: named by page references
(``journald.core.pages.PageRef``) whose messages are kept only while a reader has loaded them
into a small cache of decoded pages. Newer messages are the *tail*, a plain list in memory.

* ``len()`` and the counters never read a page: each reference carries its message count.
* The fold only ever changes the tail: it appends, and merges into the last message (a user
  follow-up after tool results, a ``pause_turn`` continuation). Sealing never takes the last
  message (``sealable``), so the message a merge changes is always in the tail; a log whose
  tail is empty (decoded from a snapshot whose cut ended on a page boundary) takes its last
  page back into the tail on a merge, which needs that page loaded (the loaders in
  ``journald.storage.pages`` always load it).
* A rebase replaces the whole log (``RunState.messages = MessageLog(...)``).
* Page boundaries are clean boundaries (``journald.core.paging.is_clean``), so a window or a
  History page aligned to clean boundaries never reaches past the pages around its ends:
  ``span_refs`` names exactly the pages a window of ``[start, end)`` needs, and ``Span`` is a
  read of just those indices.

The core does no I/O: reading a page that is not loaded raises ``PagesNotLoaded`` (a caller
that forgot to load it, never damage); the daemon reads pages through
``journald.storage.pages.PageStore`` and hands them over with ``provide`` or a ``Span``.

Pure core: no I/O imports.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from journald.core.pages import PAGE_TARGET_BYTES, Paged, PageRef, cut_open
from journald.core.records import canonical_json

Message = dict[str, Any]
CACHED_PAGES = 4
"""Decoded pages a log keeps after a read (the newest used): a client paging back through a
run reads each page once, and a held run's memory stays bounded by a few pages."""


class PagesNotLoaded(LookupError):
    """A read of sealed messages whose page the caller did not load first (a bug in the
    caller: load the pages ``span_refs`` or ``missing`` names before reading)."""

    def __init__(self, refs: Sequence[PageRef]) -> None:
        super().__init__(
            f"message pages {[r.sha256[:12] for r in refs]} are sealed and not loaded: read "
            "them (journald.storage.pages.PageStore) before reading these messages"
        )
        self.refs = list(refs)


class MessageLog(Sequence[Message]):
    """Sealed pages (``refs``) then the open ``tail``; see the module doc."""

    __slots__ = ("_cache", "_ends", "_refs", "_sizes", "tail")

    def __init__(
        self,
        messages: Iterable[Message] = (),
        refs: Sequence[PageRef] = (),
        cache: Mapping[str, list[Message]] | None = None,
    ) -> None:
        self._refs: tuple[PageRef, ...] = tuple(refs)
        self._ends: list[int] = []  # index after each page's last message
        total = 0
        for ref in self._refs:
            total += ref.count
            self._ends.append(total)
        self.tail: list[Message] = list(messages)
        self._cache: OrderedDict[str, list[Message]] = OrderedDict(cache or {})
        self._sizes: list[int] = []  # encoded size of tail[i] for i < len(_sizes)

    # --- what it holds, without reading a page ------------------------------------------------

    @property
    def refs(self) -> tuple[PageRef, ...]:
        return self._refs

    @property
    def sealed(self) -> int:
        """How many messages the pages hold (the index the tail starts at)."""
        return self._ends[-1] if self._ends else 0

    def __len__(self) -> int:
        return self.sealed + len(self.tail)

    def __repr__(self) -> str:
        return f"MessageLog(pages={len(self._refs)}, sealed={self.sealed}, tail={self.tail!r})"

    # --- reads ---------------------------------------------------------------------------------

    def _page_at(self, i: int) -> tuple[int, int]:
        """(page number, the index its first message has) of sealed index ``i``."""
        n = bisect.bisect_right(self._ends, i)
        return n, (self._ends[n - 1] if n else 0)

    def _page(self, n: int) -> list[Message]:
        ref = self._refs[n]
        msgs = self._cache.get(ref.sha256)
        if msgs is None:
            raise PagesNotLoaded([ref])
        self._cache.move_to_end(ref.sha256)
        return msgs

    def _one(self, i: int) -> Message:
        sealed = self.sealed
        if i >= sealed:
            return self.tail[i - sealed]
        n, first = self._page_at(i)
        return self._page(n)[i - first]

    @overload
    def __getitem__(self, i: int) -> Message: ...

    @overload
    def __getitem__(self, i: slice) -> list[Message]: ...

    def __getitem__(self, i: int | slice) -> Message | list[Message]:
        total = len(self)
        if isinstance(i, slice):
            start, stop, step = i.indices(total)
            if step != 1:
                return [self._one(k) for k in range(start, stop, step)]
            return self._range(start, stop)
        if i < 0:
            i += total
        if not 0 <= i < total:
            raise IndexError("message index out of range")
        return self._one(i)

    def _range(self, start: int, stop: int) -> list[Message]:
        out: list[Message] = []
        sealed = self.sealed
        k = start
        while k < min(stop, sealed):
            n, first = self._page_at(k)
            page = self._page(n)
            end = min(stop, first + len(page))
            out.extend(page[k - first : end - first])
            k = end
        if stop > sealed:
            out.extend(self.tail[max(0, start - sealed) : stop - sealed])
        return out

    def __iter__(self) -> Iterator[Message]:
        for n in range(len(self._refs)):
            yield from self._page(n)
        yield from self.tail

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        if len(other) != len(self):
            return False
        if isinstance(other, MessageLog) and other._refs == self._refs:
            return other.tail == self.tail
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    # --- pages a reader needs, and handing them over -------------------------------------------

    def span_refs(self, start: int, end: int) -> list[PageRef]:
        """The pages holding any message of ``[start, end)`` (clamped), in order."""
        start, end = max(0, start), min(end, self.sealed)
        if start >= end:
            return []
        first = self._page_at(start)[0]
        last = self._page_at(end - 1)[0]
        return list(self._refs[first : last + 1])

    def missing(self, start: int = 0, end: int | None = None) -> list[PageRef]:
        """``span_refs`` less the pages already loaded."""
        refs = self.span_refs(start, len(self) if end is None else end)
        return [r for r in refs if r.sha256 not in self._cache]

    def provide(self, ref: PageRef, messages: list[Message]) -> None:
        """A page's messages, read and checked by the caller (kept while among the newest)."""
        self._cache[ref.sha256] = messages
        self._cache.move_to_end(ref.sha256)
        while len(self._cache) > CACHED_PAGES:
            self._cache.popitem(last=False)

    def span(self, start: int, end: int, pages: Mapping[str, list[Message]]) -> Span:
        """A read of ``[start, end)`` widened to whole pages (and the whole tail when it
        reaches the tail), from ``pages`` (the messages of every page ``span_refs`` names,
        those not loaded already) and the loaded ones."""
        total, sealed = len(self), self.sealed
        start, end = max(0, min(start, total)), max(0, min(end, total))
        lo = self._page_at(start)[1] if start < sealed else sealed
        items: list[Message] = []
        for ref in self.span_refs(start, end):
            msgs = pages.get(ref.sha256)
            if msgs is None:
                msgs = self._cache.get(ref.sha256)
            if msgs is None:
                raise PagesNotLoaded([ref])
            items.extend(msgs)
        if end >= sealed or start >= sealed:  # in memory already
            items.extend(self.tail)
        return Span(lo, items, total)

    # --- the fold's changes: the tail only -----------------------------------------------------

    def append(self, message: Message) -> None:
        self.tail.append(message)

    def __setitem__(self, i: int, message: Message) -> None:
        total = len(self)
        if i < 0:
            i += total
        if not 0 <= i < total:
            raise IndexError("message index out of range")
        if i < self.sealed:
            if i != total - 1:
                raise ValueError("a sealed message cannot change: only the tail does")
            self._unseal_last()
        k = i - self.sealed
        self.tail[k] = message
        del self._sizes[k:]

    def _unseal_last(self) -> None:
        """The last page back into the (empty) tail, so its last message can merge."""
        page = list(self._page(len(self._refs) - 1))
        self._refs = self._refs[:-1]
        self._ends.pop()
        self.tail = page + self.tail
        self._sizes = []

    def copy(self) -> MessageLog:
        """Same pages, a new tail list (message dicts are never mutated in place)."""
        out = MessageLog(self.tail, self._refs, self._cache)
        out._sizes = list(self._sizes)
        return out

    # --- sealing: the writer keeps the tail bounded --------------------------------------------

    def tail_bytes(self) -> int:
        """Encoded bytes of the tail (each message encoded once while it stays unchanged)."""
        sizes = self._sizes
        for m in self.tail[len(sizes) :]:
            sizes.append(len(canonical_json(m)) + 1)
        return sum(sizes)

    def sealable(self, target_bytes: int = PAGE_TARGET_BYTES) -> Paged | None:
        """The pages to seal from the front of the tail once it holds more than two pages'
        worth (None before): the cut of the tail (prefix-stable, so the pages are those a
        snapshot or rebase of the whole conversation would name), less the pages that would
        leave fewer than two messages open (``cut_open``)."""
        if self.tail_bytes() < 2 * target_bytes:
            return None
        paged = cut_open(self.tail, target_bytes)
        refs = paged.refs
        if not refs:
            return None
        count = sum(r.count for r in refs)
        return Paged(refs, self.tail[count:], {r.sha256: paged.data[r.sha256] for r in refs}, [])

    def seal(self, refs: Sequence[PageRef]) -> None:
        """Replace the front of the tail with ``refs`` (stored by the caller, their messages
        the tail's first ones: ``sealable``'s)."""
        count = sum(r.count for r in refs)
        if not refs or count >= len(self.tail):
            raise ValueError("a seal must leave the last message in the tail")
        total = self.sealed
        for ref in refs:
            total += ref.count
            self._ends.append(total)
        self._refs = (*self._refs, *refs)
        del self.tail[:count]
        del self._sizes[:count]


class Span(Sequence[Message]):
    """Messages ``[base, base + len(items))`` of a conversation of ``total`` messages, indexed
    as in the whole conversation (an index outside them is ``PagesNotLoaded``)."""

    __slots__ = ("base", "items", "total")

    def __init__(self, base: int, items: list[Message], total: int) -> None:
        self.base, self.items, self.total = base, items, total

    def __len__(self) -> int:
        return self.total

    @overload
    def __getitem__(self, i: int) -> Message: ...

    @overload
    def __getitem__(self, i: slice) -> list[Message]: ...

    def __getitem__(self, i: int | slice) -> Message | list[Message]:
        if isinstance(i, slice):
            start, stop, step = i.indices(self.total)
            return [self[k] for k in range(start, stop, step)]
        if i < 0:
            i += self.total
        if not 0 <= i < self.total:
            raise IndexError("message index out of range")
        k = i - self.base
        if not 0 <= k < len(self.items):
            raise PagesNotLoaded([])
        return self.items[k]
