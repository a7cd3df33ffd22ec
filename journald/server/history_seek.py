"""History by seq or by time (``HistoryRequest.at_seq``, ``at_time``; docs/protocol.md#history):
which message of the stored view a record folded into, found at the cost of one page.

A time is first turned into a seq by bisecting the run's records by seq (each probe reads one
record, which on the file backend starts inside the segment that holds it), so it costs about
log2(records) short reads, not a walk. A seq is turned into a message index by counting the
fold's messages (``MessageCounter``, content-free) from the newest fold mark at or before it
to that seq; the page there is then served as any History page at that index. A compaction or
restore after the seq may have replaced the messages the record was part of: when the message
at that index no longer holds the record's content (its call ids, result id or text), the seq
is refused, so a reader looks the record up with Load instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from journald.core.errors import InvalidRequest
from journald.core.pages import is_paged
from journald.core.paging import MessageCounter
from journald.core.rebase_chunks import chunk_map_resolver, last_page, sealed_count
from journald.core.records import Record
from journald.server.runs import Runs


@dataclass(frozen=True, slots=True)
class Seek:
    """Where a seq lands: the message ``index`` (``total`` for the open turn) and the
    record at that seq."""

    index: int
    record: Record


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


async def seek(runs: Runs, run_id: str, seq: int, *, held: bool) -> Seek:
    """The message index of the record at ``seq``, counted from the newest usable fold mark
    at or before it (from seq 1 when there is none): reads the records from that mark to
    ``seq`` only."""
    marks = [] if held else _usable(await runs.marks.load(run_id), seq)
    for m in [*reversed(marks[-2:]), None]:
        counter = MessageCounter()
        start = 1
        if m is not None:
            counter.seq, counter.count, counter.last_role = m["seq"], m["messages"], m["last_role"]
            start = m["seq"]
        first, stale = True, False
        it = runs.store.iter_records(run_id, start)
        try:
            async for rec in it:
                if m is not None and first:
                    first = False
                    if rec.seq != start or rec.hash != m["hash"]:
                        stale = True  # the run changed under the mark (pruned, re-created)
                        break
                    if rec.seq == seq:  # the mark is the state after that record
                        return Seek(0 if rec.kind == "rebase" else _index_of(counter), rec)
                    continue
                counter.add(rec.kind, rec.seq, rec.payload)
                if rec.kind == "rebase":  # a paged rebase: its pages' messages come first
                    counter.count += sealed_count(rec.payload)
                    if is_paged(rec.payload) and not rec.payload.get("messages"):
                        # no inline tail: the last message (whose role decides whether the
                        # next one merges into it) is the last page's (in its last chunk
                        # when no page is loose)
                        got = await runs.pages.rebase_chunks(run_id, [rec.payload])
                        refs = last_page(rec.payload, chunk_map_resolver(got))
                        last = await runs.pages.messages(run_id, refs)
                        counter.last_role = str(last[-1]["role"]) if last else ""
                if rec.seq >= seq:  # a rebase starts a new conversation: its first message
                    return Seek(0 if rec.kind == "rebase" else _index_of(counter), rec)
        finally:
            close = getattr(it, "aclose", None)
            if close is not None:
                await close()
        if not stale and not (m is not None and first):
            break  # read to the end without reaching it: the run has no such seq
    raise InvalidRequest(
        f"run {run_id} has no seq {seq}; ask for one from 1 to its last seq",
        metadata={"run_id": run_id, "at_seq": seq},
    )


def _keys(blocks: Any) -> set[str]:
    """What identifies content blocks: tool call and result ids, texts."""
    out: set[str] = set()
    for b in blocks if isinstance(blocks, list) else []:
        if not isinstance(b, Mapping):
            continue
        for field in ("id", "tool_use_id", "text"):
            v = b.get(field)
            if isinstance(v, str) and v:
                out.add(f"{field}:{v}")
    return out


def record_keys(rec: Record) -> set[str]:
    """The keys of what a conversation record put into its message (empty for a record
    that adds no content of its own)."""
    p = rec.payload
    if rec.kind == "assistant":
        return _keys((p.get("message") or {}).get("content"))
    if rec.kind == "tool_result":
        tid = p.get("tool_use_id")
        return {f"tool_use_id:{tid}"} if isinstance(tid, str) and tid else set()
    if rec.kind == "user":
        return _keys(p.get("content"))
    return set()


def still_there(rec: Record, messages: Sequence[Mapping[str, Any]], at: int) -> bool:
    """Whether message ``at`` of the conversation as it is now holds the record's content:
    a compaction or restore after the record replaced the messages it was part of."""
    want = record_keys(rec)
    if not want:
        return True
    if not 0 <= at < len(messages):
        return False
    return bool(want & _keys(messages[at].get("content")))
