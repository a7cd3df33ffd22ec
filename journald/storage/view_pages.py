"""Where the cleaned-up and governed views' page index lives (docs/design.md#view-pages).

The index (``journald.core.view_index``) is one more part of the run's index (``VIEWS``,
saved through the checkpoint store's ``save_mark`` like the fold marks and the snapshot);
its view pages live in the run's attachment store beside the fold's pages (a view page equal
to a fold page is that page: it is not even offered to the store again).

* A writer's lease end (``save``, called after the snapshot is saved) extends the saved
  index over the pages the snapshot names that it does not cover yet: it reads those fold
  pages (the ones sealed while the lease lived; the snapshot's newly cut ones are handed
  over in memory), stores the view pages they complete and saves the index. An index that
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
from collections.abc import Mapping, Sequence

from journald.core.errors import StoreCorrupted
from journald.core.message_log import MessageLog
from journald.core.pages import Paged, PageRef, decode_page
from journald.core.view_index import (
    Message,
    ViewBuilder,
    ViewIndex,
    covered_digest,
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

    async def saved(
        self, run_id: str, conversation: MessageLog, refs: Sequence[PageRef] | None = None
    ) -> ViewIndex | None:
        """The run's saved index when it serves ``conversation`` (None: none, unreadable, or
        for other pages). Reads the fold pages holding the messages its carry names (the
        last page or two it covers)."""
        try:
            doc = await self.checkpoints.load_mark(run_id, VIEWS)
            obj = doc.get("index") if doc else None
            if refs is None:
                refs = await self.pages.all_refs(run_id, conversation)
            if not isinstance(obj, dict) or type(obj.get("pages")) is not int:
                return None
            covered = refs[: obj["pages"]]
            if obj["pages"] > len(refs) or covered_digest(covered) != obj.get("digest"):
                return None  # for other pages: nothing to read
            named = named_fold_messages(obj)
            got: dict[int, Message] = {}
            count = obj.get("messages")
            if named and type(count) is int and 0 <= named[0] < count <= conversation.sealed:
                span = await self.pages.span(run_id, conversation, named[0], count)
                got = {i: span[i] for i in range(named[0], count)}
            return index_from_json(obj, refs, got)
        except (OSError, StoreCorrupted) as exc:
            log.debug("run %s: its view index is unreadable (%s)", run_id, exc)
            return None

    async def _start(
        self, run_id: str, conversation: MessageLog, refs: Sequence[PageRef]
    ) -> ViewIndex | None:
        """The longest index at hand (kept, then saved) that serves ``refs``."""
        kept = self._kept.get(run_id)
        if kept is not None and kept.serves(refs):
            return kept
        return await self.saved(run_id, conversation, refs)

    async def _extend(
        self,
        run_id: str,
        start: ViewIndex,
        refs: Sequence[PageRef],
        seal: bool,
        known: Mapping[str, bytes] | None = None,
    ) -> ViewIndex:
        """``start`` extended over ``refs[start.pages:]``; ``seal``: view pages are stored
        (a lease end), else the outputs stay in the carry (a read: writes nothing)."""
        if start.covers(refs):
            return start
        b = ViewBuilder(start)
        fold_pages = {r.sha256 for r in refs}
        known = known or {}
        todo = list(refs[start.pages :])
        for at in range(0, len(todo), PAGES_PER_READ):
            batch = todo[at : at + PAGES_PER_READ]
            raw = await self.pages.read(run_id, [r for r in batch if r.sha256 not in known])
            for ref in batch:
                data = known.get(ref.sha256) or raw[ref.sha256]
                paged = b.add(decode_page(ref, data), seal)
                self.extended_pages += 1
                if paged is None:
                    continue
                # a view page equal to a fold page is that page: stored already
                new = tuple(r for r in paged.refs if r.sha256 not in fold_pages)
                if new:
                    await self.pages.put(run_id, Paged(new, [], paged.data, []))
        return b.index(refs)

    async def serving(self, run_id: str, conversation: MessageLog) -> ViewIndex | None:
        """An index covering every page of ``conversation`` (see the module doc), or None."""
        if not conversation.has_pages:
            return ViewIndex.empty()
        refs = await self.pages.all_refs(run_id, conversation)
        start = await self._start(run_id, conversation, refs)
        if start is None:
            return None
        index = await self._extend(run_id, start, refs, seal=False)
        self._keep(run_id, index)
        return index

    async def save(
        self,
        run_id: str,
        refs: Sequence[PageRef],
        known: Mapping[str, bytes] | None = None,
    ) -> None:
        """Lease end: the saved index extended (or rebuilt) to cover ``refs`` (the pages
        the snapshot just saved names; ``known``: the bytes of those it cut). A cache: a
        failure is logged and the next lease end tries again."""
        if not refs or self._stored.get(run_id) == (len(refs), covered_digest(refs)):
            return  # saved already (an unchanged run's lease end reads nothing)
        try:
            # from the saved index (one kept in memory by a read may hold uncut outputs)
            # None when it serves other pages: a rebase replaced the conversation, so the
            # index is rebuilt from its first page (as it is when a read found it damaged)
            start = None
            if run_id not in self._damaged:
                start = await self.saved(run_id, MessageLog((), refs))
            self._damaged.discard(run_id)
            if start is not None and start.covers(refs):
                self._note_stored(run_id, start)
                return
            index = await self._extend(run_id, start or ViewIndex.empty(), refs, True, known)
            await self.checkpoints.save_mark(run_id, {"index": index.as_json(refs)}, VIEWS)
            self._note_stored(run_id, index)
            self._keep(run_id, index)
        except (OSError, StoreCorrupted) as exc:
            log.warning("run %s: its view index was not saved (%s)", run_id, exc)
