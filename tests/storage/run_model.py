"""The model a state machine checks a journal against: what was acknowledged, and the state a
lease would cache (every acknowledged batch folded into the previous state); and the records
that continue a run (valid for the schema, the fold and the daemon's admission)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from journald.core.checkpoints import Checkpoint
from journald.core.fold import RunState, fold
from journald.core.records import GENESIS, Record, make_record
from journald.storage.base import Journal
from tests.builders import (
    TS,
    assistant_payload,
    meta_payload,
    result_payload,
    terminal_payload,
    text,
    tool_use,
    user_payload,
)

CHOICES = ("text", "calls", "user", "terminal")
"""What an appended record is when no tool call is waiting (then it is always its result)."""


@dataclass
class RunModel:
    records: list[Record]
    state: RunState
    journal: Journal | None = None
    torn: bool = False
    checkpoints: list[Checkpoint] = field(default_factory=list)

    @property
    def last_seq(self) -> int:
        return self.records[-1].seq

    @property
    def last_hash(self) -> str:
        return self.records[-1].hash

    def acknowledge(self, records: list[Record]) -> None:
        self.records.extend(records)
        self.state = fold(records, start=self.state)


def next_records(model: RunModel, choices: list[str]) -> list[Record]:
    """Records continuing ``model`` (one per choice), chained onto its last record: a waiting
    tool call is answered first, otherwise the choice says what comes."""
    state, prev, seq = model.state, model.last_hash, model.last_seq
    out: list[Record] = []
    for choice in choices:
        seq += 1
        if state.pending is not None:
            call = state.pending.unanswered[0]
            kind, payload = "tool_result", result_payload(call.id, f"output of {call.id}")
        elif choice == "calls":
            calls = [tool_use(f"c{seq}a"), tool_use(f"c{seq}b")]
            kind = "assistant"
            payload = assistant_payload([text("two tools"), *calls], state.next_iteration)
        elif choice == "text":
            kind = "assistant"
            payload = assistant_payload([text(f"answer {seq}")], state.next_iteration)
        elif choice == "user":
            kind, payload = "user", user_payload(f"follow-up {seq}")
        else:
            kind, payload = "terminal", terminal_payload("completed", "done")
        rec = make_record(seq, kind, payload, prev, TS)
        out.append(rec)
        prev, state = rec.hash, fold([rec], start=state)
    return out


def meta_record(run_id: str, lineage: dict[str, Any] | None = None) -> Record:
    payload = meta_payload(run_id, prompt=f"task of {run_id}")
    if lineage is not None:
        payload["lineage"] = lineage
    return make_record(1, "meta", payload, GENESIS, TS)
