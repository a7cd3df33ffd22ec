"""A conversation that does not hold the run: sealed message pages plus an open tail
(docs/design.md#message-pages, docs/design.md#fold-snapshots).

``MessageLog`` is the fold's message list (``RunState.messages``). It reads like a list of
messages, but its older messages are *sealed*: named by page references
(``journald.core.pages.PageRef``) whose messages are kept only while a reader has loaded them
into a small cache of decoded pages. Newer messages are the *tail*, a plain list in memory.

* **Two levels.** The sealed pages are named by *chunks* of page references
  (``journald.core.ref_chunks``: chunk ``i`` holds the conversation's page references
  ``[128 i, 128 i + 128)``), then by the *loose* references after the last full chunk. A
  chunk's reference carries the messages its pages hold, so ``len()``, ``sealed`` and the
  counters never read a chunk or a page; a read bisects the chunks by message index, then
  the loaded chunk's page references. A read that needs a chunk that is not loaded raises
  ``RefChunksNotLoaded`` (``missing_chunks`` names them; ``provide_chunk`` or the
  ``chunks`` argument of ``span_refs``/``missing``/``span`` hands them over).
* The fold only ever changes the tail: it appends, and merges into the last message (a user
  follow-up after tool results, a ``pause_turn`` continuation). Sealing never takes the last
  message (``sealable``), so the message a merge changes is always in the tail; a log whose
  tail is empty (decoded from a snapshot whose cut ended on a page boundary) takes its last
  page back into the tail on a merge, which needs that page (and, when it is in a chunk,
  that chunk) loaded (the loaders in ``journald.storage.pages`` always load them).
* A rebase replaces the whole log (``RunState.messages = MessageLog(...)``).
* Page boundaries are clean boundaries (``journald.core.paging.is_clean``), so a window or a
  History page aligned to clean boundaries never reaches past the pages around its ends:
  ``span_refs`` names exactly the pages a window of ``[start, end)`` needs, and ``Span`` is a
  read of just those indices.

The core does no I/O: reading a page that is not loaded raises ``PagesNotLoaded`` (a caller
that forgot to load it, never damage); the daemon reads pages and chunks through
``journald.storage.pages.PageStore`` and hands them over with ``provide``/``provide_chunk``
or a ``Span``.

Pure core: no I/O imports.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from journald.core import ref_chunks
from journald.core.pages import OPEN_TAIL_MESSAGES, PAGE_TARGET_BYTES, Paged, PageRef, cut_open
from journald.core.records import canonical_json
from journald.core.ref_chunks import RefChunk

Message = dict[str, Any]
CACHED_PAGES = 4
"""Decoded pages a log keeps after a read (the newest used): a client paging back through a
run reads each page once, and a held run's memory stays bounded by a few pages."""
CACHED_CHUNKS = 8
"""Decoded reference chunks kept (shared by a log and its copies, the newest used): a tail
read needs one, a read across a chunk boundary two."""


class PagesNotLoaded(LookupError):
    """A read of sealed messages whose page the caller did not load first (a bug in the
    caller: load the pages ``span_refs`` or ``missing`` names before reading)."""

    def __init__(self, refs: Sequence[PageRef]) -> None:
        super().__init__(
            f"message pages {[r.sha256[:12] for r in refs]} are sealed and not loaded: read "
            "them (journald.storage.pages.PageStore) before reading these messages"
        )
        self.refs = list(refs)


class RefChunksNotLoaded(PagesNotLoaded):
    """A read of sealed messages whose page-reference chunk the caller did not load first
    (load the chunks ``missing_chunks`` names)."""

    def __init__(self, chunks: Sequence[PageRef]) -> None:
        LookupError.__init__(
            self,
            f"message-page reference chunks {[r.sha256[:12] for r in chunks]} are sealed and "
            "not loaded: read them (journald.storage.pages.PageStore.load_chunks) before "
            "reading these messages",
        )
        self.refs = []
        self.chunks = list(chunks)


class _Loaded:
    """A decoded chunk: its page references and the message index (from the chunk's first)
    after each page."""

    __slots__ = ("ends", "refs")

    def __init__(self, refs: Sequence[PageRef]) -> None:
        self.refs = tuple(refs)
        self.ends: list[int] = []
        total = 0
        for r in self.refs:
            total += r.count
            self.ends.append(total)


ChunkCache = OrderedDict[str, _Loaded]
ChunkPages = Mapping[str, Sequence[PageRef]]
"""Chunks read by a caller: chunk address -> its page references."""


class MessageLog(Sequence[Message]):
    """Chunks, then loose pages (``loose``), then the open ``tail``; see the module doc."""

    __slots__ = (
        "_cache",
        "_chunk_cache",
        "_chunk_ends",
        "_chunks",
        "_ends",
        "_refs",
        "_sizes",
        "tail",
    )

    def __init__(
        self,
        messages: Iterable[Message] = (),
        refs: Sequence[PageRef] = (),
        cache: Mapping[str, list[Message]] | None = None,
        chunks: Sequence[PageRef] = (),
        chunk_cache: ChunkCache | None = None,
    ) -> None:
        self._chunks: tuple[PageRef, ...] = tuple(chunks)
        self._chunk_ends: list[int] = []  # index after each chunk's last message
        total = 0
        for ref in self._chunks:
            total += ref.count
            self._chunk_ends.append(total)
        self._refs: tuple[PageRef, ...] = tuple(refs)
        self._ends: list[int] = []  # index after each loose page's last message
        for ref in self._refs:
            total += ref.count
            self._ends.append(total)
        self.tail: list[Message] = list(messages)
        self._cache: OrderedDict[str, list[Message]] = OrderedDict(cache or {})
        # shared with copies: a read through a copy (what the storage readers take) warms it
        self._chunk_cache: ChunkCache = chunk_cache if chunk_cache is not None else OrderedDict()
        self._sizes: list[int] = []  # encoded size of tail[i] for i < len(_sizes)

    # --- what it holds, without reading a page ------------------------------------------------

    @property
    def chunks(self) -> tuple[PageRef, ...]:
        """The page-reference chunks (``journald.core.ref_chunks``), oldest first."""
        return self._chunks

    @property
    def loose(self) -> tuple[PageRef, ...]:
        """The page references after the last chunk."""
        return self._refs

    @property
    def has_pages(self) -> bool:
        """Whether any message is sealed (in a page)."""
        return bool(self._chunks or self._refs)

    @property
    def refs(self) -> tuple[PageRef, ...]:
        """Every page reference, in order (``RefChunksNotLoaded`` while a chunk is not
        loaded: the whole-conversation paths read them, ``all_refs``)."""
        return self.all_refs()

    def all_refs(self, chunks: ChunkPages | None = None) -> tuple[PageRef, ...]:
        """Every page reference, from the loaded chunks and ``chunks`` (read by the caller)."""
        out: list[PageRef] = []
        for k in range(len(self._chunks)):
            out.extend(self._chunk(k, chunks).refs)
        return (*out, *self._refs)

    @property
    def chunked(self) -> int:
        """How many messages the chunks hold (the index the loose pages start at)."""
        return self._chunk_ends[-1] if self._chunk_ends else 0

    @property
    def sealed(self) -> int:
        """How many messages the pages hold (the index the tail starts at)."""
        return self._ends[-1] if self._ends else self.chunked

    def __len__(self) -> int:
        return self.sealed + len(self.tail)

    def __repr__(self) -> str:
        return (
            f"MessageLog(chunks={len(self._chunks)}, pages={len(self._refs)}, "
            f"sealed={self.sealed}, tail={self.tail!r})"
        )

    # --- reads ---------------------------------------------------------------------------------

    def _chunk(self, k: int, extra: ChunkPages | None = None) -> _Loaded:
        ref = self._chunks[k]
        got = self._chunk_cache.get(ref.sha256)
        if got is not None:
            self._chunk_cache.move_to_end(ref.sha256)
            return got
        refs = extra.get(ref.sha256) if extra is not None else None
        if refs is None:
            raise RefChunksNotLoaded([ref])
        return _Loaded(refs)

    def _locate(self, i: int, extra: ChunkPages | None = None) -> tuple[PageRef, int]:
        """(the page, the index its first message has) of sealed index ``i``."""
        chunked = self.chunked
        if i < chunked:
            k = bisect.bisect_right(self._chunk_ends, i)
            base = self._chunk_ends[k - 1] if k else 0
            loaded = self._chunk(k, extra)
            j = bisect.bisect_right(loaded.ends, i - base)
            return loaded.refs[j], base + (loaded.ends[j - 1] if j else 0)
        n = bisect.bisect_right(self._ends, i)
        return self._refs[n], (self._ends[n - 1] if n else chunked)

    def _page(self, ref: PageRef) -> list[Message]:
        msgs = self._cache.get(ref.sha256)
        if msgs is None:
            raise PagesNotLoaded([ref])
        self._cache.move_to_end(ref.sha256)
        return msgs

    def _one(self, i: int) -> Message:
        sealed = self.sealed
        if i >= sealed:
            return self.tail[i - sealed]
        ref, first = self._locate(i)
        return self._page(ref)[i - first]

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
            ref, first = self._locate(k)
            page = self._page(ref)
            end = min(stop, first + len(page))
            out.extend(page[k - first : end - first])
            k = end
        if stop > sealed:
            out.extend(self.tail[max(0, start - sealed) : stop - sealed])
        return out

    def __iter__(self) -> Iterator[Message]:
        for ref in self.refs:
            yield from self._page(ref)
        yield from self.tail

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        if len(other) != len(self):
            return False
        if (
            isinstance(other, MessageLog)
            and other._chunks == self._chunks
            and other._refs == self._refs
        ):
            return other.tail == self.tail
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    # --- chunks and pages a reader needs, and handing them over --------------------------------

    def _chunks_of(self, start: int, end: int | None) -> tuple[PageRef, ...]:
        start, end = max(0, start), min(len(self) if end is None else end, self.chunked)
        if start >= end:
            return ()
        first = bisect.bisect_right(self._chunk_ends, start)
        last = bisect.bisect_right(self._chunk_ends, end - 1)
        return self._chunks[first : last + 1]

    def missing_chunks(self, start: int = 0, end: int | None = None) -> list[PageRef]:
        """The chunks holding any message of ``[start, end)`` (clamped) that are not loaded."""
        return [r for r in self._chunks_of(start, end) if r.sha256 not in self._chunk_cache]

    def loaded_chunks(self, start: int = 0, end: int | None = None) -> dict[str, Sequence[PageRef]]:
        """The chunks holding any message of ``[start, end)`` that are loaded, for a read that
        hands them back as its ``chunks`` (a wide read may push them out of the cache)."""
        out: dict[str, Sequence[PageRef]] = {}
        for r in self._chunks_of(start, end):
            got = self._chunk_cache.get(r.sha256)
            if got is not None:
                out[r.sha256] = got.refs
        return out

    def provide_chunk(self, ref: PageRef, refs: Sequence[PageRef]) -> None:
        """A chunk's page references, read and checked by the caller (kept, shared with
        this log's copies, while among the newest)."""
        self._chunk_cache[ref.sha256] = _Loaded(refs)
        self._chunk_cache.move_to_end(ref.sha256)
        while len(self._chunk_cache) > CACHED_CHUNKS:
            self._chunk_cache.popitem(last=False)

    def span_refs(self, start: int, end: int, chunks: ChunkPages | None = None) -> list[PageRef]:
        """The pages holding any message of ``[start, end)`` (clamped), in order (the chunks
        holding them loaded, or in ``chunks``)."""
        start, end = max(0, start), min(end, self.sealed)
        out: list[PageRef] = []
        k = start
        while k < end:
            ref, first = self._locate(k, chunks)
            out.append(ref)
            k = first + ref.count
        return out

    def missing(
        self, start: int = 0, end: int | None = None, chunks: ChunkPages | None = None
    ) -> list[PageRef]:
        """``span_refs`` less the pages already loaded."""
        refs = self.span_refs(start, len(self) if end is None else end, chunks)
        return [r for r in refs if r.sha256 not in self._cache]

    def provide(self, ref: PageRef, messages: list[Message]) -> None:
        """A page's messages, read and checked by the caller (kept while among the newest)."""
        self._cache[ref.sha256] = messages
        self._cache.move_to_end(ref.sha256)
        while len(self._cache) > CACHED_PAGES:
            self._cache.popitem(last=False)

    def span(
        self,
        start: int,
        end: int,
        pages: Mapping[str, list[Message]],
        chunks: ChunkPages | None = None,
    ) -> Span:
        """A read of ``[start, end)`` widened to whole pages (and the whole tail when it
        reaches the tail), from ``pages`` (the messages of every page ``span_refs`` names,
        those not loaded already) and the loaded ones; ``chunks``: as ``span_refs``."""
        total, sealed = len(self), self.sealed
        start, end = max(0, min(start, total)), max(0, min(end, total))
        if start >= sealed:
            lo = sealed
        elif start >= end:  # nothing to read: no page (nor chunk) needed
            lo = start
        else:
            lo = self._locate(start, chunks)[1]
        items: list[Message] = []
        for ref in self.span_refs(start, end, chunks):
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
        """The last page back into the (empty) tail, so its last message can merge (the last
        chunk's references loose first when no loose page is left)."""
        if not self._refs:
            loaded = self._chunk(len(self._chunks) - 1)
            self._chunks = self._chunks[:-1]
            self._chunk_ends.pop()
            self._refs = loaded.refs
            self._ends = [self.chunked + e for e in loaded.ends]
        page = list(self._page(self._refs[-1]))
        self._refs = self._refs[:-1]
        self._ends.pop()
        self.tail = page + self.tail
        self._sizes = []

    def copy(self) -> MessageLog:
        """Same chunks and pages (the chunk cache shared), a new tail list (message dicts are
        never mutated in place)."""
        out = MessageLog(self.tail, self._refs, self._cache, self._chunks, self._chunk_cache)
        out._sizes = list(self._sizes)
        return out

    # --- sealing: the writer keeps the tail (and the loose references) bounded -----------------

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
        # first what needs no encoding of the last message: a page is cut only from messages
        # before the last two, so while they hold less than a page nothing can seal, however
        # large the last one grew (a long run of same-role records merges into it, and cutting
        # on every append re-encoded the whole tail: quadratic, bench/append_cpu.py)
        n = len(self.tail)
        if n <= OPEN_TAIL_MESSAGES:
            return None
        sizes = self._sizes
        for m in self.tail[len(sizes) : n - 1]:  # all but the last, which the fold may change
            sizes.append(len(canonical_json(m)) + 1)
        if sum(sizes[: n - OPEN_TAIL_MESSAGES]) < target_bytes:
            return None
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

    def chunkable(self) -> list[RefChunk]:
        """The chunks the loose references fill (``ref_chunks.full_chunks``; none while
        fewer than ``REFS_PER_CHUNK`` are loose): the caller stores them, then ``seal_chunks``."""
        return ref_chunks.full_chunks(self._refs)

    def seal_chunks(self, chunks: Sequence[RefChunk]) -> None:
        """Name the front of the loose references by ``chunks`` (stored by the caller:
        ``chunkable``'s, in order); they stay loaded."""
        for chunk in chunks:
            n = len(chunk.refs)
            if n != ref_chunks.REFS_PER_CHUNK or self._refs[:n] != chunk.refs:
                raise ValueError("a chunk must hold the next full run of loose references")
            self._chunks = (*self._chunks, chunk.ref)
            self._chunk_ends.append(self._ends[n - 1])
            self._refs = self._refs[n:]
            self._ends = self._ends[n:]
            self.provide_chunk(chunk.ref, chunk.refs)


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
