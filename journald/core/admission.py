"""Admission: what a lease holder may append next, given the folded state (pure).

The fold tolerates odd journals (imports, hand edits); the live path is stricter so that a
journal written through the daemon always folds without anomalies:

* meta is written only by ``Open`` (seq 1);
* a tool_result must answer an open call of the pending turn, once;
* an assistant or user record cannot start while tool calls are unanswered: the writer closes
  them first (run them, or append an ``is_error`` result), which is what keeps a resumed
  history free of orphan tool calls;
* a rebase cannot replace history under a running turn (``turn_running``);
* a terminal is always allowed (a crash-suspended run ends with calls open);
* a state record (framework state) is always allowed: it is not conversation, so a framework
  may save its checkpoint or pending writes while its own tool calls are still open.

Pure core: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Sequence

from journald.core.errors import InvalidRecord, TurnRunning
from journald.core.fold import RunState, tool_calls_of
from journald.core.records import Record


def admit(state: RunState, records: Sequence[Record]) -> None:
    """Raise if any of ``records`` (new seqs, in order) may not follow ``state``."""
    open_ids = [c.id for c in state.pending.unanswered] if state.pending else []
    seen_assistant = state.counters.llm_calls > 0
    for rec in records:
        where = {"seq": rec.seq, "run_id": state.run_id, "field": "type"}
        if rec.kind == "meta":
            raise InvalidRecord(
                f"seq {rec.seq}: a meta record is written only when Open creates the run",
                metadata=where,
            )
        if rec.kind == "tool_result":
            tid = rec.payload.get("tool_use_id")
            if not seen_assistant:
                raise InvalidRecord(
                    f"seq {rec.seq}: tool_result {tid} before any assistant record", metadata=where
                )
            if tid not in open_ids:
                raise InvalidRecord(
                    f"seq {rec.seq}: tool_use_id {tid!r} is not an open tool call "
                    f"(open: {open_ids or 'none'}); answer only calls of the pending turn, once",
                    metadata={**where, "field": "tool_result.tool_use_id"},
                )
            open_ids.remove(tid)
        elif rec.kind in ("assistant", "user"):
            if open_ids:
                raise InvalidRecord(
                    f"seq {rec.seq}: cannot append {rec.kind} while tool calls {open_ids} are "
                    "unanswered; append a tool_result for each (is_error if abandoned) first",
                    metadata=where,
                )
            if rec.kind == "assistant":
                seen_assistant = True
                open_ids = [c.id for c in tool_calls_of(rec.payload.get("message", {}))]
        elif rec.kind == "rebase" and open_ids:
            raise TurnRunning(
                f"seq {rec.seq}: cannot replace the history while tool calls {open_ids} are "
                "unanswered; finish the turn first",
                metadata=where,
            )
