"""History by seq or by time (``HistoryRequest.at_seq``, ``at_time``; docs/protocol.md#history):
which message of the stored view a record folded into, found at the cost of one page.

A time is first turned into a seq by bisecting the run's records by seq (each probe reads one
record, which on the file backend starts inside the segment that holds it), so it costs about
log2(records) short reads, not a walk. A seq is turned into a message index by counting the
fold's messages (``MessageCounter``, content-free) from the newest fold mark at or before it;
the records read from that mark to the end also serve the page (``fold_window``), so the whole
answer reads what a page folded from that mark reads. A rebase after the seq (a compaction or
restore) replaced the messages the record was part of: that seq is refused with the rebase's
seq, so a reader looks it up in the run's records instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from journald.core.errors import InvalidRequest
from journald.core.paging import FoldMark, MessageCounter, Page, fold_window, page_window
from journald.core.records import Record
from journald.server.runs import Runs


@dataclass(frozen=True, slots=True)
class Seek:
    """Where a seq lands: the message ``index`` (``total`` for the open turn), the ``seq``
    asked or found for a time, and the page there when the fold marks could serve it."""

    index: int
    seq: int
    page: Page | None = None
    last_seq: int = 0
    pending: Any = None


def parse_time(text: str) -> datetime:
    """An RFC 3339 time (``Z`` or an offset; a time without a zone is refused: it is
    ambiguous between the reader's and the daemon's zones)."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise InvalidRequest(
            f"at_time {text!r} is not an RFC 3339 time with a zone; "
            "send e.g. 2026-11-30T12:03:00Z or 2026-11-30T13:03:00+01:00",
            metadata={"field": "at_time"},
        )
    return when


def _record_time(rec: Record) -> datetime | None:
    try:
        return datetime.fromisoformat(rec.ts.replace("Z", "+00:00"))
    except ValueError:
        return None


async def _first(it: AsyncIterator[Record]) -> Record | None:
    try:
        async for rec in it:
            return rec
        return None
    finally:
        close = getattr(it, "aclose", None)
        if close is not None:
            await close()


async def seq_at_time(runs: Runs, run_id: str, when: datetime, last_seq: int) -> int:
    """The first seq whose record's ``ts`` is at or after ``when`` (``last_seq`` when none
    is); times are taken as non-decreasing with seq (a clock step back lands near it)."""
    lo, hi = 1, max(1, last_seq)
    while lo < hi:
        mid = (lo + hi) // 2
        rec = await _first(runs.store.iter_records(run_id, mid))
        if rec is None:  # nothing from mid on (the run shrank meanwhile)
            hi = max(lo, mid - 1)
            continue
        at = _record_time(rec)
        if at is not None and at >= when:
            hi = mid
        else:
            lo = rec.seq + 1
    rec = await _first(runs.store.iter_records(run_id, min(lo, max(1, last_seq))))
    return rec.seq if rec is not None else max(1, last_seq)


def _index_of(counter: MessageCounter) -> int:
    """The message the last record counted folded into: the last message, or for a record
    of the open turn the assistant message it becomes when the turn is answered."""
    if counter.pending_seq:
        return counter.count if counter.last_role != "assistant" else counter.count - 1
    return max(0, counter.count - 1)


def _usable(marks: Sequence[dict[str, Any]], seq: int) -> list[dict[str, Any]]:
    return [m for m in marks if m["seq"] <= seq]


async def seek(runs: Runs, run_id: str, seq: int, limit: int, *, held: bool) -> Seek:
    """The message index of the record at ``seq`` (and, for a run no lease holds, the page
    of ``limit`` messages there when a fold mark serves it)."""
    marks = [] if held else _usable(await runs.marks.load(run_id), seq)
    for m in [*reversed(marks[-2:]), None]:
        counter = MessageCounter()
        start = 1
        if m is not None:
            counter.seq, counter.count, counter.last_role = m["seq"], m["messages"], m["last_role"]
            start = m["seq"]
        # from a mark the records are kept for the page; from seq 1 (no mark) only counted
        records: list[Record] = []
        index, first = -1, True
        if m is not None and m["seq"] == seq:  # the mark is the state after that record
            index = _index_of(counter)
        async for rec in runs.store.iter_records(run_id, start):
            if m is not None:
                if first and (rec.seq != start or rec.hash != m["hash"]):
                    break  # the run changed under the mark (pruned, re-created)
                records.append(rec)
                if first:
                    first = False
                    if rec.seq == seq and rec.kind == "rebase":
                        index = 0
                    continue
            first = False
            if index >= 0:
                if rec.kind == "rebase":
                    raise InvalidRequest(
                        f"seq {seq} of run {run_id} is before the rebase at seq {rec.seq} "
                        "(a compaction or restore replaced that conversation); read that "
                        "record with Load (the viewer's records screen) instead",
                        metadata={"run_id": run_id, "at_seq": seq, "rebase_seq": rec.seq},
                    )
                continue
            counter.add(rec.kind, rec.seq, rec.payload)
            if rec.seq >= seq:  # a rebase starts a new conversation: its first message
                index = 0 if rec.kind == "rebase" else _index_of(counter)
        if m is not None and not records:
            continue  # that mark no longer matches: try an older one, then seq 1
        if index < 0:
            raise InvalidRequest(
                f"run {run_id} has no seq {seq} (its last is {counter.seq})",
                metadata={"run_id": run_id, "at_seq": seq, "last_seq": counter.seq},
            )
        if m is None:
            return Seek(index, seq)
        mark = FoldMark(m["seq"], m["messages"], m["last_role"], 0)
        w = fold_window(mark, records[1:])
        return Seek(index, seq, page_window(w, index, limit), w.last_seq, w.pending)
    raise AssertionError("unreachable: the last try folds from seq 1")  # pragma: no cover
