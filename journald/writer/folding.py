"""The one fold of a stored run (docs/design.md#fold-snapshots): from the run's snapshot on
when the record it ends on is still stored with its hash, else from seq 1. A writer's acquire
(``journald.writer.run_writer``) and a dormant read (``journald.server.runs``) both fold here.

A snapshot's answered tool_use ids may be sealed in chunks (``journald.core.answered``): the
fold asks for them only on a result that answers no open call (a duplicate or an unknown id,
which the daemon's own appends never write), and then they are read here, once, and the
record folded again. A chunk that cannot be read makes the snapshot unusable: the run is
folded from seq 1 (the snapshot is a cache; the scrubber and ``Verify`` report the chunk)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from journald import telemetry
from journald.core.answered import AnsweredNotLoaded
from journald.core.errors import SessionNotFound, StoreCorrupted
from journald.core.fold import QUARANTINE, RunState, fold_into
from journald.core.pages import is_paged
from journald.core.records import Record
from journald.storage.base import Store
from journald.storage.pages import PageStore
from journald.writer.marks import mark_due, mark_of

_FOLD_REFUSALS: OrderedDict[tuple[str, str], None] = OrderedDict()  # logged at ERROR once
log = logging.getLogger(__name__)


def naming_run(exc: StoreCorrupted, run_id: str) -> StoreCorrupted:
    """A fold's refusal of stored records (``journald.core.fold`` is pure: it knows no run) with
    the run named, logged at ERROR the first time it is seen and at DEBUG after."""
    if exc.metadata.get("run_id") != run_id:
        exc.metadata["run_id"] = run_id
        exc.message = f"run {run_id}: {exc.message}"
    key = (run_id, exc.metadata.get("seq", ""))
    first = key not in _FOLD_REFUSALS
    _FOLD_REFUSALS[key] = None
    while len(_FOLD_REFUSALS) > 1024:
        _FOLD_REFUSALS.popitem(last=False)
    log.log(
        logging.ERROR if first else logging.DEBUG,
        "store_corrupted: run %s, seq %s: %s (the fold refuses the stored records; reads of "
        "the run fail until it is restored or recovered)",
        run_id,
        key[1],
        exc.message,
    )
    return exc


async def _fold(state: RunState, rec: Record, run_id: str, pages: PageStore | None) -> None:
    """One record folded, the message pages of a paged rebase read first
    (docs/design.md#message-pages)."""
    try:
        resolve = None
        if pages is not None and rec.kind == "rebase" and is_paged(rec.payload):
            resolve = await pages.for_records(run_id, [rec])
        fold_into(state, (rec,), resolve)
    except StoreCorrupted as exc:
        raise naming_run(exc, run_id) from None


def _hides_earlier_records(rec: Record, seq: int) -> bool:
    """A recovery's rebase saying records at or before ``seq`` were moved out: a snapshot
    there folded records the run no longer holds."""
    covered = rec.payload.get("covered") if rec.kind == "rebase" else None
    return (
        rec.payload.get("reason") == QUARANTINE
        and isinstance(covered, Mapping)
        and not (type(covered.get("from_seq")) is int and covered["from_seq"] > seq)
    )


async def fold_from_snapshot(
    store: Store, run_id: str, snapshot: RunState, pages: PageStore | None = None
) -> RunState | None:
    """``snapshot`` (consumed) continued with the records after its seq, or None when it no
    longer matches the stored run (``fold_stored`` would fold it in full): for a read that
    has a cheaper way than a full fold."""
    if snapshot.last_seq <= 0:
        return None
    return await _fold_after(store, run_id, snapshot, None, pages)


async def _fold_after(
    store: Store,
    run_id: str,
    start: RunState,
    marks: list[dict[str, Any]] | None,
    pages: PageStore | None,
) -> RunState | None:
    """``start`` (folded in place) continued with the records after its seq; None when the
    stored run no longer holds the record ``start`` ends on (pruned, recovered, restored
    from a backup, deleted and created again) or a recovery moved earlier records out."""
    seq = start.last_seq
    first = True
    try:
        async for rec in store.iter_records(run_id, seq):
            if first:
                if rec.seq != seq or rec.hash != start.last_hash:
                    return None
                first = False
                continue
            if _hides_earlier_records(rec, seq):
                return None
            try:
                await _fold(start, rec, run_id, pages)
            except AnsweredNotLoaded:  # nothing of ``rec`` was folded: load, then fold it
                if not await _load_answered(start, run_id, pages):
                    return None
                await _fold(start, rec, run_id, pages)
            if marks is not None and mark_due(marks, start, seq):
                marks.append(mark_of(start))
    except SessionNotFound:
        return None  # the full fold says so for the run as a whole
    return None if first else start


async def _load_answered(state: RunState, run_id: str, pages: PageStore | None) -> bool:
    """Read the snapshot's answered-id chunks into ``state``; False when they cannot be."""
    if pages is None:
        return False
    try:
        await pages.load_answered(run_id, state.answered_ever)
    except StoreCorrupted as exc:
        log.warning("run %s: its fold snapshot is unusable (%s); folding it in full", run_id, exc)
        return False
    return True


async def fold_stored(
    store: Store,
    run_id: str,
    marks: list[dict[str, Any]] | None = None,
    snapshot: RunState | None = None,
    pages: PageStore | None = None,
) -> RunState:
    """The one fold of a run's stored records: from ``snapshot`` on (consumed) when the run
    still holds the record it ends on (docs/design.md#fold-snapshots), else from seq 1. With
    ``marks``, collect a fold mark every ``MARK_EVERY`` records (where no turn is open)."""
    with telemetry.fold_span(run_id) as span:
        state = None
        if snapshot is not None and snapshot.last_seq > 0:
            state = await _fold_after(store, run_id, snapshot, marks, pages)
            if state is None:
                log.debug(
                    "run %s: the fold snapshot at seq %d no longer matches the stored run; "
                    "folding it in full",
                    run_id,
                    snapshot.last_seq,
                )
                if marks is not None:
                    marks.clear()
        if state is None:
            state = RunState()
            async for rec in store.iter_records(run_id):
                await _fold(state, rec, run_id, pages)
                if marks is not None and mark_due(marks, state):
                    marks.append(mark_of(state))
        span.set("journald.seq.last", state.last_seq)
    if state.last_seq == 0:
        raise SessionNotFound(f"run {run_id} has no records", metadata={"run_id": run_id})
    return state
