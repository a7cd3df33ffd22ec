"""The History RPC: pages of a run's conversation in one of three views
(docs/protocol.md#history).

* ``UNSPECIFIED`` (the cleaned-up view): the governed, paired messages; a page reads the run's
  view index and the view pages it returns (``journald.core.view_index``), or, while no index
  serves the run, is derived from every page once per state and kept while a client pages;
* ``STATE``: the fold's own messages; on a run no lease holds, a page reads the pages holding
  it from the dormant state when that costs no fold from seq 1 (kept, or folded from a fold
  snapshot that matches), else it is folded from the newest saved fold mark before it, so a
  tail page reads only the last segments;
* ``GOVERNED``: what governance would send a model (the same view pages, then the tail and
  the open turn).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from journald_proto import journal_pb2 as pb

from journald.core import governance
from journald.core.checkpoints import governed
from journald.core.errors import InvalidRequest, StoreCorrupted
from journald.core.fold import Message, Pending, RunState
from journald.core.message_log import MessageLog
from journald.core.pages import is_paged
from journald.core.paging import FoldMark, Page, Window, fold_window, page, page_window
from journald.core.records import validate_id
from journald.core.view_index import view_log
from journald.server.convert import messages_to_pb, pending_to_pb
from journald.server.edge import unary
from journald.server.history_seek import parse_time, seek, seq_at_time, still_there
from journald.server.message_window import ASK_FOR_SMALLER_PAGE, check_fits
from journald.server.runs import RunCache, Runs, stored_bytes

Ctx = grpc.aio.ServicerContext[Any, Any]
log = logging.getLogger(__name__)
VIEW_CACHE_RUNS = 8  # (run, view) pairs whose derived message list is kept between pages
TAIL_MARKS_TRIED = 4  # the newest usable marks a tail page tries before folding in full
SEEK_TAIL_RECORDS = 5000  # a page by seq this near the end is folded from a mark


def span_end(offset: int, limit: int) -> int:
    """The end of the messages a page at ``offset`` reads (``core.paging.page``): its end
    aligns forward from ``offset + limit``, looking at the message after it when that one
    carries tool results; that next message may start the next page (a page ends at a
    clean boundary), so it is read too. No messages: the start alone."""
    return offset + 1 if limit <= 0 else offset + limit + 2


@dataclass(frozen=True, slots=True)
class Conversation:
    """What History pages: the messages of a view, the seq they reflect, the open turn."""

    messages: Sequence[Message]
    last_seq: int
    pending: Pending | None


class HistoryRpcs:
    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self._views = RunCache(VIEW_CACHE_RUNS)

    async def conversation(
        self,
        run_id: str,
        view: int = pb.HISTORY_VIEW_UNSPECIFIED,
        span: tuple[int, int] = (0, -1),
        dormant: tuple[Any, RunState] | None = None,
    ) -> Conversation:
        """The message list History pages (``view``) with the seq it reflects and the open
        turn: from the lease's cached state when held, else from the dormant fold. The stored
        view reads only the pages holding messages ``span`` (``[start, end)``, -1: the end;
        indexes outside it are not loaded), the others only the view pages holding them
        while the run's view index serves it (else they derive from every page).
        ``dormant``: the dormant state, when the caller has it already."""
        lease = self.runs.leases.held(run_id)
        if lease is not None:
            st = lease.state
            key: Any = (lease.lease_id, st.last_seq, st.last_hash)
        else:
            key, st = dormant if dormant is not None else await self.runs.dormant_state(run_id)
        pending = st.pending.copy() if st.pending is not None else None
        if view == pb.HISTORY_VIEW_STATE:
            start, end = span
            msgs = await self.runs.pages.span(
                run_id, st.messages, start, len(st.messages) if end < 0 else end
            )
            return Conversation(msgs, st.last_seq, pending)
        return await self._view_of(run_id, view, key, st, pending, span)

    async def _view_of(
        self,
        run_id: str,
        view: int,
        key: Any,
        st: RunState,
        pending: Pending | None,
        span: tuple[int, int],
    ) -> Conversation:
        # a client pages a view in many calls: its index and derived tail are kept per state
        hit = self._views.get((run_id, view), key) if key is not None else None
        if hit is None:
            hit = await self._derive(run_id, view, st)
            if key is not None:  # no key: the store cannot say when the run changes
                self._views.put((run_id, view), key, hit, stored_bytes(key))
        if isinstance(hit, MessageLog):  # view pages: read only those the page returns
            start, end = span
            try:
                msgs: Sequence[Message] = await self.runs.pages.span(
                    run_id, hit, start, len(hit) if end < 0 else end
                )
            except StoreCorrupted as exc:  # the index is a cache: derive from every page
                log.warning("run %s: a view page is unreadable (%s); deriving in full", run_id, exc)
                self.runs.views.damaged(run_id)
                msgs = await self._whole_view(run_id, view, st)
                if key is not None:
                    self._views.put((run_id, view), key, msgs, stored_bytes(key))
            return Conversation(msgs, st.last_seq, pending)
        return Conversation(hit, st.last_seq, pending)

    async def _derive(self, run_id: str, view: int, st: RunState) -> Sequence[Message]:
        """The view as view pages and a derived tail (``journald.core.view_index``) when the
        run's view index serves its conversation, else the whole list."""
        conversation = st.messages.copy()  # a held run's writer may seal more meanwhile
        turn = st.pending.copy() if view == pb.HISTORY_VIEW_GOVERNED and st.pending else None
        index = await self.runs.views.serving(run_id, conversation)
        if index is None:
            return await self._whole_view(run_id, view, st)
        return view_log(index, conversation.tail, turn)

    async def _whole_view(self, run_id: str, view: int, st: RunState) -> list[Message]:
        # no index serves the conversation (none saved yet, or a rebase replaced it): the
        # view is derived from every page (docs/design.md#view-pages)
        whole = await self.runs.pages.whole_state(run_id, st)
        if view == pb.HISTORY_VIEW_GOVERNED:
            return governance.governed_messages(whole)[0]
        return governed(whole.messages)

    async def _stored_tail(
        self, run_id: str, offset: int, limit: int
    ) -> tuple[tuple[Any, RunState] | None, tuple[Page, Window] | None]:
        """What a stored-view page of a dormant run starts from: the dormant state when it
        costs no fold from seq 1 (kept, or folded from a matching snapshot: the page then
        reads the snapshot, the records after it and the pages under the page, whatever the
        run's length), else a page folded from a fold mark (``_tail_page``: the records from
        the mark to the end, up to ``MARK_EVERY`` of them and the segment they are in), else
        neither (the caller folds the run)."""
        dormant = await self.runs.snapshot_state(run_id)
        if dormant is not None:
            return dormant, None
        return None, await self._tail_page(run_id, offset, limit)

    async def _tail_page(self, run_id: str, offset: int, limit: int) -> tuple[Page, Window] | None:
        """A page folded from the newest usable fold mark before it: reads only the segments
        from that mark's seq to the end. None when no mark serves (the caller reads the
        dormant state's pages instead), a mark more than ``SEEK_TAIL_RECORDS`` records before
        the newest included: folding to the end from there costs more than the state (from
        its snapshot) and the pages under the page."""
        marks = await self.runs.marks.load(run_id)
        # the newest mark is where the last lease ended (no I/O: a stat of the run may read
        # its first record)
        newest = marks[-1]["seq"] if marks else 0
        if limit > 0:
            marks = [m for m in marks if m["messages"] < offset]
        marks = [m for m in marks if newest - m["seq"] <= SEEK_TAIL_RECORDS]
        for m in reversed(marks[-TAIL_MARKS_TRIED:]):
            mark = FoldMark(m["seq"], m["messages"], m["last_role"], 0)
            records = [r async for r in self.runs.store.iter_records(run_id, mark.seq)]
            if not records or records[0].seq != mark.seq or records[0].hash != m["hash"]:
                continue  # the run changed under the mark (pruned, re-created)
            if any(r.kind == "rebase" and is_paged(r.payload) for r in records[1:]):
                # its fold keeps the rebase's pages sealed (docs/design.md#lazy-rebases): the
                # dormant state's pages serve the page instead
                continue
            # an inline rebase after the mark: the window folds through it
            resolve = await self.runs.pages.for_records(run_id, records[1:])
            w = fold_window(mark, records[1:], resolve)
            p = page_window(w, offset, limit)
            if p is None and limit <= 0:
                at = min(offset, w.total)
                p = Page([], w.total, at, at)
            if p is not None:
                return p, w
        return None

    @unary
    async def History(self, request: pb.HistoryRequest, context: Ctx) -> pb.HistoryResponse:
        run_id = validate_id(request.run_id)
        view = request.view
        if request.at_seq or request.at_time:
            return await self._at(request, context)
        tail = dormant = None
        # fold marks count the fold's own messages: they serve the stored view alone (the
        # cleaned-up and governed views can drop and merge messages, so their indexes differ)
        if view == pb.HISTORY_VIEW_STATE and self.runs.leases.held(run_id) is None:
            dormant, tail = await self._stored_tail(run_id, request.offset, request.limit)
        if tail is not None:
            p, last_seq, pending = tail[0], tail[1].last_seq, tail[1].pending
        else:
            end = span_end(request.offset, request.limit)
            conv = await self.conversation(run_id, view, (request.offset, end), dormant)
            p = page(conv.messages, request.offset, request.limit)
            last_seq, pending = conv.last_seq, conv.pending
        return self._answer(run_id, p, last_seq, pending)

    async def _at(self, request: pb.HistoryRequest, context: Ctx) -> pb.HistoryResponse:
        """The page holding the record at ``at_seq`` or ``at_time`` (``history_seek``)."""
        run_id = validate_id(request.run_id)
        if request.view != pb.HISTORY_VIEW_STATE:
            raise InvalidRequest(
                "at_seq and at_time page the stored view: send view = HISTORY_VIEW_STATE",
                metadata={"field": "view"},
            )
        held = self.runs.leases.held(run_id) is not None
        await self.runs.require_run(run_id)
        seq = request.at_seq
        if request.at_time:
            when = parse_time(request.at_time)
            last = (await self.runs.store.info(run_id)).last_seq
            seq = await seq_at_time(self.runs, run_id, when, last)
        found = await seek(self.runs, run_id, seq, held=held)
        # a page folded from a mark reads every record from it to the end: near the end that
        # beats the run's whole state, far from it the state (from its snapshot, kept while
        # the run is idle) is the cheaper read
        last = (await self.runs.store.info(run_id)).last_seq
        near_end = last - found.record.seq <= SEEK_TAIL_RECORDS
        tail = dormant = None
        if near_end and not held:
            dormant, tail = await self._stored_tail(run_id, found.index, request.limit)
        if tail is not None:
            p, last_seq, pending = tail[0], tail[1].last_seq, tail[1].pending
        else:
            end = span_end(found.index, request.limit)
            span = (found.index, end)
            conv = await self.conversation(run_id, pb.HISTORY_VIEW_STATE, span, dormant)
            p = page(conv.messages, found.index, request.limit)
            last_seq, pending = conv.last_seq, conv.pending
        in_page = p.messages if p.offset <= found.index < p.next_offset else []
        if found.index < p.total and not still_there(found.record, in_page, found.index - p.offset):
            raise InvalidRequest(
                f"seq {found.record.seq} of run {run_id} is no longer in its conversation (a "
                "compaction or restore after it replaced those messages); read that record "
                "with Load (the viewer's records screen) instead",
                metadata={"run_id": run_id, "at_seq": found.record.seq},
            )
        out = self._answer(run_id, p, last_seq, pending)
        out.at_index, out.at_seq = min(found.index, p.total), found.record.seq
        return out

    def _answer(
        self, run_id: str, p: Page, last_seq: int, pending: Pending | None
    ) -> pb.HistoryResponse:
        out = pb.HistoryResponse(
            messages=messages_to_pb(p.messages),
            total=p.total,
            offset=p.offset,
            next_offset=p.next_offset,
            last_seq=last_seq,
        )
        if pending is not None:
            out.pending.CopyFrom(pending_to_pb(pending))
        check_fits(
            out,
            self.runs.limits.max_message_bytes,
            "the History page",
            ASK_FOR_SMALLER_PAGE,
            run_id,
        )
        return out
