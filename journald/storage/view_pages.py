"""Where the cleaned-up and governed views' page index lives (docs/design.md#view-pages).

The index (``journald.core.view_index``) is one more part of the run's index (``VIEWS``,
saved through the checkpoint store's ``save_mark`` like the fold marks and the snapshot);
its view pages live in the run's attachment store beside the fold's pages (a view page equal
to a fold page is that page: it is not even offered to the store again).

* A writer's lease end (``save``, called after the snapshot is saved) extends the saved
  index over the pages the snapshot names that it does not cover yet: it reads those fold
  pages (the ones sealed while the lease lived; the snapshot's newly cut ones are handed
  over in memory), stores the view pages and view chunks they complete and saves the index.
  Neither it nor a read needs every fold page reference: only the reference chunks from the
  index's covered boundary on (``FoldPages``; one chunk at most for an index that covers
  all but the last few pages). An index that
  does not serve the conversation (a rebase replaced it, a format change) is rebuilt from
  the first page, once, by that lease end.
* A read (``serving``) writes nothing: it takes the index saved (or kept in memory) for
  the run and, when the conversation has pages it does not cover (a held run sealed more),
  sanitizes those in memory. None when no index serves the conversation: the caller
  derives the view from every page, as before the index existed.

A cache, never truth: an index or view page that is missing or damaged is ignored.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping

from journald.core.errors import StoreCorrupted
from journald.core.message_log import MessageLog
from journald.core.pages import Paged, decode_page
from journald.core.view_index import (
    VIEW_INDEX_FORMAT,
    VIEW_INDEX_FORMAT_1,
    FoldPages,
    Message,
    ViewBuilder,
    ViewIndex,
    index_from_json,
    named_fold_messages,
)
from journald.storage.checkpoint_base import VIEWS, CheckpointStore
from journald.storage.pages import PageStore

log = logging.getLogger(__name__)
VIEW_INDEX_RUNS = 16  # runs whose index a daemon keeps in memory
PAGES_PER_READ = 8  # fold pages read at a time while an index is extended


class ViewPages:
    def __init__(self, checkpoints: CheckpointStore, pages: PageStore) -> None:
        self.checkpoints = checkpoints
        self.pages = pages
        self._kept: OrderedDict[str, ViewIndex] = OrderedDict()
        self._stored: OrderedDict[str, tuple[int, str]] = OrderedDict()
        """What the saved index of a run covers, as this daemon last saved or read it."""
        self._damaged: set[str] = set()
        self.extended_pages = 0
        """Fold pages sanitized so far by this daemon (the tests and benchmark read it)."""

    def _keep(self, run_id: str, index: ViewIndex) -> None:
        self._kept[run_id] = index
        self._kept.move_to_end(run_id)
        while len(self._kept) > VIEW_INDEX_RUNS:
            self._kept.popitem(last=False)

    def forget(self, run_id: str) -> None:
        self._kept.pop(run_id, None)
        self._stored.pop(run_id, None)

    def damaged(self, run_id: str) -> None:
        """A view page of the run's index is missing or damaged: forget the index, and let
        the next lease end rebuild it from the first page."""
        self.forget(run_id)
        self._damaged.add(run_id)

    def _note_stored(self, run_id: str, index: ViewIndex) -> None:
        self._stored[run_id] = (index.pages, index.digest)
        self._stored.move_to_end(run_id)
        while len(self._stored) > 4 * VIEW_INDEX_RUNS:
            self._stored.popitem(last=False)

    async def _fold(self, run_id: str, conversation: MessageLog, start: int) -> FoldPages:
        """The conversation's fold pages with the chunks holding pages ``start`` on read (the
        covered boundary and after it: one chunk, or none, for an index that covers all but
        the last few pages); handed to the log too (its chunk cache, shared by its copies)."""
        fold = FoldPages.of(conversation)
        got = await self.pages.read_chunks(run_id, fold.need(start))
        for chunk in got.values():
            conversation.provide_chunk(chunk.ref, chunk.refs)
        return fold.with_read({sha: c.refs for sha, c in got.items()})

    async def saved(self, run_id: str, conversation: MessageLog) -> ViewIndex | None:
        """The run's saved index when it serves ``conversation`` (None: none, unreadable, or
        for other pages). Reads the chunk holding its covered boundary (when it is not past
        every chunk) and the fold pages holding the messages its carry names (the last page
        or two it covers)."""
        got = await self._saved(run_id, conversation)
        return got[0] if got is not None else None

    async def _saved(
        self, run_id: str, conversation: MessageLog
    ) -> tuple[ViewIndex, FoldPages, bool] | None:
        """The saved index, its fold pages, and whether it was of the format before (read
        with every fold reference: the upgrade's one read of every chunk)."""
        try:
            doc = await self.checkpoints.load_mark(run_id, VIEWS)
            obj = doc.get("index") if doc else None
            if not isinstance(obj, dict) or type(obj.get("pages")) is not int:
                return None
            old = obj.get("format") == VIEW_INDEX_FORMAT_1
            if not old and obj.get("format") != VIEW_INDEX_FORMAT:
                return None  # another format: rebuilt by the next lease end
            fold = await self._fold(run_id, conversation, obj["pages"])
            refs = await self.pages.all_refs(run_id, conversation) if old else None
            if not old and (
                obj["pages"] > fold.count or fold.digest(obj["pages"]) != obj.get("digest")
            ):
                return None  # for other pages: nothing to read
            named = named_fold_messages(obj)
            got: dict[int, Message] = {}
            count = obj.get("messages")
            if named and type(count) is int and 0 <= named[0] < count <= conversation.sealed:
                span = await self.pages.span(run_id, conversation, named[0], count)
                got = {i: span[i] for i in range(named[0], count)}
            index = index_from_json(obj, fold, got, refs)
            return (index, fold, old) if index is not None else None
        except (OSError, StoreCorrupted) as exc:
            log.debug("run %s: its view index is unreadable (%s)", run_id, exc)
            return None

    async def _start(
        self, run_id: str, conversation: MessageLog
    ) -> tuple[ViewIndex, FoldPages] | None:
        """The longest index at hand (kept, then saved) that serves the conversation, and
        its fold pages from that index's boundary on."""
        kept = self._kept.get(run_id)
        if kept is not None:
            fold = await self._fold(run_id, conversation, kept.pages)
            if kept.serves(fold):
                return kept, fold
        got = await self._saved(run_id, conversation)
        return got[:2] if got is not None else None

    async def _extend(
        self,
        run_id: str,
        start: ViewIndex,
        fold: FoldPages,
        seal: bool,
        known: Mapping[str, bytes] | None = None,
        end: int | None = None,
    ) -> ViewIndex:
        """``start`` extended over ``fold``'s pages ``[start.pages, end)`` (``end``: all);
        ``seal``: view pages and view chunks are stored (a lease end), else the outputs stay
        in the carry (a read: writes nothing)."""
        end = fold.count if end is None else end
        if start.covers(fold, end):
            return start
        todo = fold.refs(start.pages, end)
        if todo is None:  # the caller read the chunks from ``start.pages`` on (``_fold``)
            raise StoreCorrupted(f"run {run_id}: a fold reference chunk was not read")
        b = ViewBuilder(start)
        fold_pages = {r.sha256 for r in todo}
        known = known or {}
        for at in range(0, len(todo), PAGES_PER_READ):
            batch = todo[at : at + PAGES_PER_READ]
            # every page once, decoded once, from the store: a build walks the whole conversation
            got = await self.pages.decoded(
                run_id, [r for r in batch if r.sha256 not in known], cached=False
            )
            for ref in batch:
                data = known.get(ref.sha256)
                msgs = decode_page(ref, data) if data is not None else got[ref.sha256]
                paged = b.add(msgs, seal)
                self.extended_pages += 1
                if paged is None:
                    continue
                # a view page equal to a fold page is that page: stored already
                new = tuple(r for r in paged.refs if r.sha256 not in fold_pages)
                if new:
                    await self.pages.put(run_id, Paged(new, [], paged.data, []))
        if seal:  # after their pages (a view chunk equal to a fold chunk is stored already)
            await self.pages.put_chunks(run_id, b.new_chunks)
        return b.index(fold, end)

    async def serving(self, run_id: str, conversation: MessageLog) -> ViewIndex | None:
        """An index covering every page of ``conversation`` (see the module doc), or None."""
        if not conversation.has_pages:
            return ViewIndex.empty()
        got = await self._start(run_id, conversation)
        if got is None:
            return None
        index = await self._extend(run_id, got[0], got[1], seal=False)
        self._keep(run_id, index)
        return index

    async def save(
        self,
        run_id: str,
        conversation: MessageLog,
        known: Mapping[str, bytes] | None = None,
        pages: int | None = None,
    ) -> None:
        """Lease end: the saved index extended (or rebuilt) to cover the first ``pages``
        (all) pages of ``conversation`` (the pages the snapshot just saved names; ``known``:
        the bytes of those it cut). Reads the chunks from the saved index's boundary on, not
        every fold reference. A cache: a failure is logged and the next lease end tries
        again."""
        try:
            fold = FoldPages.of(conversation)
            end = fold.count if pages is None else pages
            if not end:
                return
            digest = fold.digest(end)
            if digest is not None and self._stored.get(run_id) == (end, digest):
                return  # saved already (an unchanged run's lease end reads nothing)
            # from the saved index (one kept in memory by a read may hold uncut outputs)
            # None when it serves other pages: a rebase replaced the conversation, so the
            # index is rebuilt from its first page (as it is when a read found it damaged)
            got = None
            if run_id not in self._damaged:
                got = await self._saved(run_id, conversation)
            self._damaged.discard(run_id)
            start = got[0] if got is not None else ViewIndex.empty()
            fold = got[1] if got is not None else await self._fold(run_id, conversation, 0)
            if got is not None and got[2]:  # the format before: saved again, chunked
                start, chunks = start.sealed()
                await self.pages.put_chunks(run_id, chunks)
            elif got is not None and start.covers(fold, end):
                self._note_stored(run_id, start)
                return
            index = await self._extend(run_id, start, fold, True, known, end)
            await self.checkpoints.save_mark(run_id, {"index": index.as_json()}, VIEWS)
            self._note_stored(run_id, index)
            self._keep(run_id, index)
        except (OSError, StoreCorrupted, ValueError) as exc:
            log.warning("run %s: its view index was not saved (%s)", run_id, exc)
