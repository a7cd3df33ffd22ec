"""A run's index: fold marks every ``MARK_EVERY`` records and a snapshot of its folded state
(docs/design.md#history-paging, docs/design.md#fold-snapshots).

A mark names a seq, the hash of the record there, how many messages the fold held and the role
of the last one; History folds a tail page from the newest usable mark instead of from seq 1.
The snapshot (``journald.core.snapshot``) is the whole folded state at a seq; the one fold of a
stored run (``journald.writer.folding.fold_stored``) continues from it. They are two parts of the
run's index, saved through the checkpoint store's ``save_mark`` (so every backend keeps them
with no code of its own), apart so that a History page never reads the snapshot (its tail
and page references, about 1/1300 of the conversation)::

    part "marks":    {"marks": [fold marks, oldest first]}
    part "snapshot": {"snapshot": paged_state(...)}  # or encode_state(...) without pages

Marks are taken by whoever folds the run as its writer (an Open, the daemon's own lease) and by
every commit, kept in memory while the lease lives, and saved with a snapshot of the state the
lease ends on, only when the run changed since the snapshot it was opened from: a read never
writes the document.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from journald import failpoints
from journald.core.errors import StoreCorrupted
from journald.core.fold import RunState
from journald.core.pages import Paged, PageRef, PageResolver, cut_open
from journald.core.ref_chunks import ChunkResolver
from journald.core.snapshot import (
    SnapshotUnreadable,
    decode_state,
    encode_state,
    new_chunks,
    paged_state,
    snapshot_chunks,
    snapshot_pages,
)
from journald.core.view_index import FoldPages
from journald.storage.checkpoint_base import SNAPSHOT, CheckpointStore
from journald.storage.pages import PageStore, decoded_resolver
from journald.storage.view_pages import ViewPages

log = logging.getLogger(__name__)
MARK_EVERY = 1000  # records between the fold marks History pages from
MARKS_KEPT = 256  # per run (the newest); older pages fold from the oldest kept or in full
MARKS_CACHED_RUNS = 64  # runs whose saved marks stay in memory


def mark_of(st: RunState) -> dict[str, Any]:
    """A fold mark (``journald.core.paging.FoldMark``) of a state without an open turn, plus
    the hash of its last record (a mark is used only while that record is still at its seq)."""
    return {
        "seq": st.last_seq,
        "hash": st.last_hash,
        "messages": len(st.messages),
        "last_role": st.messages[-1]["role"] if st.messages else "",
    }


def mark_due(marks: list[dict[str, Any]], state: RunState, since: int | None = None) -> bool:
    """Whether a fold at ``state`` should take a mark (no turn open, ``MARK_EVERY`` apart;
    ``since``: the seq a fold started from, when it took no mark yet)."""
    if state.pending is not None:
        return False
    last = marks[-1]["seq"] if marks else since
    return last is None or state.last_seq - last >= MARK_EVERY


def valid_marks(doc: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The well-formed fold marks of an index document, oldest first."""
    marks = doc.get("marks") if doc else None
    ok = []
    for m in marks if isinstance(marks, list) else []:
        if (
            isinstance(m, dict)
            and type(m.get("seq")) is int
            and type(m.get("messages")) is int
            and isinstance(m.get("hash"), str)
            and isinstance(m.get("last_role"), str)
        ):
            ok.append(m)
    return sorted(ok, key=lambda m: m["seq"])


def snapshot_in(
    doc: Mapping[str, Any] | None,
    run_id: str,
    pages: PageResolver | None = None,
    lazy: bool = False,
    chunks: ChunkResolver | None = None,
) -> RunState | None:
    """The snapshot of an index document, None when there is none or it is unreadable
    (a paged one whose pages ``pages`` or chunks ``chunks`` cannot read included); ``lazy``:
    its pages and chunks stay sealed (``journald.core.snapshot.decode_state``)."""
    if not doc or doc.get("snapshot") is None:
        return None
    try:
        return decode_state(doc["snapshot"], pages, lazy, chunks)
    except SnapshotUnreadable as exc:
        log.debug("run %s: ignoring its fold snapshot (%s); folding it in full", run_id, exc)
        return None


@dataclass
class _Writing:
    """What a writer's lease on a run will save when it ends."""

    stored_marks: list[dict[str, Any]]
    snapshot_seq: int  # of the stored snapshot (0: none): unchanged runs are not saved again
    new_marks: list[dict[str, Any]] = field(default_factory=list)


class FoldMarks:
    """The index of the runs held now (in memory) and the saved ones (in the checkpoint
    store)."""

    def __init__(
        self,
        checkpoints: CheckpointStore,
        pages: PageStore | None = None,
        views: ViewPages | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.pages = pages
        self.views = views
        """The views' page index, saved after the snapshot (docs/design.md#view-pages)."""
        """Where a snapshot's message pages go (docs/design.md#message-pages); None: inline."""
        self._writing: dict[str, _Writing] = {}
        # Only this daemon's lease ends write a run's marks (a prune keeps them), and each is
        # checked against the stored record at its seq when used: a copy in memory spares
        # History parsing the snapshot beside them on every page.
        self._saved: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    async def load_snapshot(self, run_id: str) -> RunState | None:
        """The run's saved fold snapshot (None: none, or unreadable). Its message pages and
        page-reference chunks stay sealed (``journald.core.message_log``): a read loads the
        chunks and pages it returns, so this costs the counters, the tail, the loose page
        references and the chunk references (fewer than 128 plus one per 128 pages), and at
        most the last page (and its chunk), not the conversation."""
        doc = await self.checkpoints.load_mark(run_id, SNAPSHOT)
        snap = doc.get("snapshot") if doc else None
        # with a tail, decoding reads no page; without one, the last page (it becomes the
        # tail: the fold may merge into its last message), through the last chunk when no
        # page reference is loose
        tail = isinstance(snap, Mapping) and bool(snap.get("messages"))
        resolve: PageResolver | None = None
        chunks: ChunkResolver | None = None
        if not tail and self.pages is not None:
            try:
                refs: list[PageRef] = snapshot_pages(snap)[-1:]
                last = snapshot_chunks(snap)[-1:]
                if not refs and last:
                    chunk = (await self.pages.read_chunks(run_id, last))[last[0].sha256]
                    refs = list(chunk.refs[-1:])

                    def chunks(ref: PageRef) -> tuple[PageRef, ...]:
                        return chunk.refs  # the one chunk decoding asks for, read now

                if refs:
                    resolve = decoded_resolver(await self.pages.decoded(run_id, refs))
            except StoreCorrupted as exc:  # a cache: fold the run in full instead
                log.debug("run %s: its fold snapshot's pages (%s); folding it in full", run_id, exc)
                return None
        return snapshot_in(doc, run_id, resolve, lazy=True, chunks=chunks)

    async def load_index(self, run_id: str) -> dict[str, Any] | None:
        """The run's saved fold marks document (None: none)."""
        doc = await self.checkpoints.load_mark(run_id)
        self._remember(run_id, valid_marks(doc))
        return doc

    def _remember(self, run_id: str, marks: list[dict[str, Any]]) -> None:
        self._saved[run_id] = marks
        self._saved.move_to_end(run_id)
        while len(self._saved) > MARKS_CACHED_RUNS:
            self._saved.popitem(last=False)

    async def load(self, run_id: str) -> list[dict[str, Any]]:
        """The saved marks of a run, oldest first (malformed entries are skipped)."""
        if run_id not in self._saved:
            await self.load_index(run_id)
        self._saved.move_to_end(run_id)
        return list(self._saved[run_id])

    def opened(
        self, run_id: str, doc: Mapping[str, Any] | None, snapshot_seq: int, new: list[Any]
    ) -> None:
        """A writer folded the run as it opened it (from the snapshot at ``snapshot_seq``, 0:
        in full) and took the marks ``new``: saved with its commits' ones when the lease ends."""
        self._writing[run_id] = _Writing(valid_marks(doc), snapshot_seq, list(new))

    def created(self, run_id: str) -> None:
        """A run just created: its lease saves an index from scratch."""
        self._writing[run_id] = _Writing([], 0)

    def note(self, run_id: str, mark: dict[str, Any] | None) -> None:
        """Once a commit is durable: remember its mark (``mark_of`` the state it left; None
        while a turn is open) when one is due (in memory until the lease ends)."""
        if mark is None:
            return
        w = self._writing.setdefault(run_id, _Writing([], 0))
        if not w.new_marks or mark["seq"] - w.new_marks[-1]["seq"] >= MARK_EVERY:
            w.new_marks.append(mark)

    async def save_on_close(self, run_id: str, state: RunState) -> None:
        """Lease-close hook: the marks taken while the lease lived, the saved ones before them,
        and a snapshot of the state the lease ends on. Nothing when the run did not change
        since the snapshot it was opened from."""
        w = self._writing.pop(run_id, None) or _Writing(await self.load(run_id), 0)
        if not state.last_seq or (w.snapshot_seq == state.last_seq and not w.new_marks):
            if state.last_seq and self.views is not None and self.pages is not None:
                # unchanged since its snapshot, whose view index may be missing (saved by a
                # daemon before there was one): the state holds the snapshot's pages
                if failpoints.ARMED:
                    await failpoints.reach("lease_end_before_view_index")
                await self._save_views(run_id, state, None)
            return
        new = w.new_marks
        if state.pending is None and (not new or new[-1]["seq"] != state.last_seq):
            new.append(mark_of(state))
        first_new = new[0]["seq"] if new else 1 << 62
        saved = ([m for m in w.stored_marks if m["seq"] < first_new] + new)[-MARKS_KEPT:]
        self._saved.pop(run_id, None)  # a failed save leaves the stored ones to be read again
        # the snapshot first: marks naming a seq past an older snapshot are harmless
        if self.pages is not None:
            # the pages first, and only the tail's: the sealed ones are stored already, so
            # the save costs what was appended since the last one (docs/design.md#fold-snapshots)
            # then the reference chunks they fill (what a save adds: about one chunk per 128
            # pages appended, never the conversation's list of page references)
            paged = cut_open(state.messages.tail)
            await self.pages.put(run_id, paged)
            await self.pages.put_chunks(run_id, new_chunks(state, paged))
            # a copy: the held state (if any) keeps its own tail; the chunks are stored first
            state = replace(state, answered_ever=state.answered_ever.copy())
            await self.pages.seal_answered(run_id, state.answered_ever)
            doc = paged_state(state, paged)
        else:
            doc = encode_state(state)  # no page store: nothing is sealed
        await self.checkpoints.save_mark(run_id, {"snapshot": doc}, SNAPSHOT)
        await self.checkpoints.save_mark(run_id, {"marks": saved})
        self._remember(run_id, saved)
        if self.pages is not None and self.views is not None:
            if failpoints.ARMED:
                await failpoints.reach("lease_end_before_view_index")
            await self._save_views(run_id, state, paged)

    async def _save_views(self, run_id: str, state: RunState, paged: Paged | None) -> None:
        """The views' page index over the pages the snapshot names (``paged``: the ones it
        cut now), less the last when its tail is empty (a read of the snapshot takes that
        page back into the tail). Reads no chunk but those from the saved index's boundary
        on (docs/design.md#view-pages)."""
        assert self.views is not None
        conversation = state.messages.copy()  # the held state keeps its own tail
        pages = None
        if paged is not None and paged.refs:  # ``cut_open`` leaves two messages open
            conversation.seal(paged.refs)
        elif paged is not None and not paged.tail and conversation.has_pages:
            pages = FoldPages.of(conversation).count - 1
        await self.views.save(run_id, conversation, paged.data if paged else None, pages)
