"""What JournaldSession hands the model and mirrors into the conversation (pure parts)."""

from __future__ import annotations

from typing import Any

import pytest
from journald_client.codec import stamp
from journald_client.openai_agents import ABANDONED, conversation, mirror_entries, sendable

from journald.core.admission import admit
from journald.core.fold import fold
from journald.core.records import Record
from journald.server import convert
from tests.builders import JournalBuilder
from tests.unit.invariants import model_ready_problems

USER: dict[str, Any] = {"role": "user", "content": "hello"}
CALL_A: dict[str, Any] = {
    "type": "function_call",
    "call_id": "a",
    "name": "f",
    "arguments": "{}",
    "id": "fc_a",
}
CALL_B: dict[str, Any] = {
    "type": "function_call",
    "call_id": "b",
    "name": "g",
    "arguments": '{"x":1.5}',
}
OUT_A: dict[str, Any] = {"type": "function_call_output", "call_id": "a", "output": "1"}
OUT_B: dict[str, Any] = {"type": "function_call_output", "call_id": "b", "output": "2"}
SAID: dict[str, Any] = {
    "type": "message",
    "role": "assistant",
    "id": "m1",
    "status": "completed",
    "content": [{"type": "output_text", "text": "done", "annotations": [], "logprobs": []}],
}


def _pairs_ok(items: list[dict[str, Any]]) -> bool:
    calls: set[str] = set()
    outputs = set()
    for i in items:
        if i.get("type") == "function_call":
            calls.add(i["call_id"])
        if i.get("type") == "function_call_output":
            if i["call_id"] not in calls:
                return False
            outputs.add(i["call_id"])
    return calls == outputs


def test_a_well_formed_history_is_returned_exactly() -> None:
    items = [USER, CALL_A, CALL_B, OUT_A, OUT_B, SAID]
    assert sendable(items, None) == items
    assert sendable(items, -1) == items
    assert sendable(items, 99) == items
    assert sendable(items, 0) == []


def test_a_limit_never_cuts_an_output_from_its_call_nor_returns_fewer_items() -> None:
    items = [USER, CALL_A, OUT_A, SAID]
    assert sendable(items, 2) == [CALL_A, OUT_A, SAID]  # starts at the call, not after it
    assert sendable(items, 1) == [SAID]
    assert sendable(items, 3) == [CALL_A, OUT_A, SAID]
    long = [USER, CALL_A, CALL_B, OUT_A, OUT_B, SAID]
    assert sendable(long, 3) == [CALL_A, CALL_B, OUT_A, OUT_B, SAID]
    for n in range(8):
        got = sendable(long, n)
        assert _pairs_ok(got)
        assert len(got) >= min(n, len(long))


def test_a_call_without_an_output_is_left_as_stored_without_an_invented_outcome() -> None:
    again = {"role": "user", "content": "again"}
    items = [USER, CALL_A, CALL_B, OUT_B, again]
    assert sendable(items, None) == items  # as SQLiteSession returns it
    waiting = [USER, CALL_A]  # a needs_approval call waiting for its approval
    assert sendable(waiting, None) == waiting
    assert all(i.get("output") != ABANDONED for i in sendable(items, None))


class Run:
    def __init__(self) -> None:
        self.records: list[Record] = JournalBuilder("s", prompt="").records
        self.records = [self.records[0]]
        self.open: list[str] = []

    def add(self, items: list[dict[str, Any]]) -> list[str]:
        st = fold(self.records)
        recs = stamp(mirror_entries(items, self.open), st.last_seq + 1, st.next_iteration)
        prev, built = self.records[-1].hash, []
        for r in recs:
            built.append(convert.record_from_pb(r, prev=prev))
            prev = built[-1].hash
        admit(st, built)
        self.records += built
        return [r.kind for r in built]


@pytest.mark.parametrize("split", [False, True])
def test_items_mirror_into_records_the_journal_admits(split: bool) -> None:
    run = Run()
    batches = (
        [[USER], [CALL_A, CALL_B, OUT_A, OUT_B], [SAID]]
        if split
        else [[USER, CALL_A, CALL_B, OUT_A, OUT_B, SAID]]
    )
    kinds = [k for b in batches for k in run.add(b)]
    assert kinds == ["user", "assistant", "tool_result", "tool_result", "assistant"]
    st = fold(run.records)
    assert model_ready_problems(st.messages) == []
    assert [b["id"] for b in st.messages[1]["content"]] == ["a", "b"]
    assert st.messages[1]["content"][1]["input"] == '{"x":1.5}'  # raw text, no float in records
    assert st.messages == conversation([USER, CALL_A, CALL_B, OUT_A, OUT_B, SAID])


def test_a_new_message_closes_a_call_left_open_by_a_crash() -> None:
    run = Run()
    run.add([USER, CALL_A])
    assert run.add([{"role": "user", "content": "still there?"}]) == ["tool_result", "user"]
    st = fold(run.records)
    assert st.pending is None
    assert st.messages[2]["content"][0]["is_error"] is True
    assert run.add([OUT_A]) == []  # a late output of a closed call stays out of the conversation
