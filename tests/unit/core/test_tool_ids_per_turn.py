"""Tool-use ids are unique per turn, not per run (issue 26, item 4): providers and scripted
models reuse ``call_1`` in every turn, so the fold, admission, paging and governance answer a
reused id in a later turn (also after a rebase) exactly as a fresh one."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core import governance
from journald.core.admission import admit
from journald.core.fold import fold
from journald.core.paging import MessageCounter
from journald.core.records import GENESIS, Record, make_record
from tests.profiles import scaled
from tests.unit.invariants import model_ready_problems

POOL = ["call_1", "call_2", "call_3"]
FP = {
    "provider": "p",
    "model": "m",
    "system_prompt_sha256": "0" * 64,
    "tools_sha256": "1" * 64,
    "thinking": "off",
    "max_tokens": 1,
    "max_iterations": 0,
}


def _text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


@st.composite
def reused_id_journals(draw: st.DrawFn) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """(kind, payload) steps: turns whose ids come from a pool of three, each answered in
    any order, with follow-ups and rebases in between; and the number of calls made."""
    steps: list[tuple[str, dict[str, Any]]] = []
    calls = 0
    for turn in range(draw(st.integers(1, 6))):
        ids = draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=3, unique=True))
        content = [_text(f"turn {turn}")]
        content += [{"type": "tool_use", "id": i, "name": "t", "input": "{}"} for i in ids]
        payload = {
            "message": {"role": "assistant", "content": content},
            "iteration": turn + 1,
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
        steps.append(("assistant", payload))
        for i in draw(st.permutations(ids)):
            result = {"tool_use_id": i, "content": [_text(f"{i}@{turn}")], "is_error": False}
            steps.append(("tool_result", {**result, "remote": False}))
        calls += len(ids)
        between = draw(st.sampled_from(["none", "user", "rebase"]))
        if between == "user":
            steps.append(("user", {"content": [_text("and then?")]}))
        elif between == "rebase":
            msgs = [{"role": "user", "content": [_text("from the top")]}]
            steps.append(("rebase", {"messages": msgs, "reason": "edit"}))
    return steps, calls


@settings(max_examples=scaled(60))
@given(reused_id_journals())
def test_an_id_reused_by_a_later_turn_is_admitted_answered_and_paired(
    journal: tuple[list[tuple[str, dict[str, Any]]], int],
) -> None:
    steps, calls = journal
    meta = {"run_id": "r", "created": "2026-12-01T00:00:00Z", "fingerprint": FP}
    recs: list[Record] = [
        make_record(1, "meta", {**meta, "prompt": [_text("go")]}, GENESIS, "2026-12-01T00:00:00Z")
    ]
    state = fold(recs)
    counter = MessageCounter()
    counter.add("meta", 1, recs[0].payload)
    for kind, payload in steps:
        rec = make_record(len(recs) + 1, kind, payload, recs[-1].hash, "2026-12-01T00:00:01Z")
        admit(state, [rec])  # the live path accepts every record
        recs.append(rec)
        state = fold([rec], start=state)
        counter.add(kind, rec.seq, payload)
    assert state.anomalies == []
    assert state.pending is None  # every call, reused id or not, was answered
    assert state.counters.tool_calls == calls
    assert counter.count == len(state.messages)  # paging counts what the fold holds
    governed, report = governance.governed_messages(state)
    assert not report.changed  # nothing to repair: every result pairs with its turn's call
    assert model_ready_problems(governed) == []
