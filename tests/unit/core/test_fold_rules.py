"""Fold rules by example: refusals, tolerated anomalies, rebases, the resume boundary and the
resume notices (docs/design.md#fold, docs/protocol.md#warnings), and the system prompt never
reaching a stored byte."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from journald.core import errors, fingerprint
from journald.core.fold import ABANDONED_TEXT, fold, rebuilt_after_quarantine, resume_warnings
from journald.core.records import GENESIS, Record, make_record
from journald.server import convert
from tests.builders import (
    FP,
    TS,
    JournalBuilder,
    assistant_payload,
    meta_payload,
    result_payload,
    terminal_payload,
    text,
    tool_use,
    user_payload,
)


def _chain(items: list[tuple[int, str, Any]]) -> list[Record]:
    out: list[Record] = []
    for seq, kind, payload in items:
        out.append(make_record(seq, kind, payload, out[-1].hash if out else GENESIS, TS))
    return out


# --- the system prompt is never stored ----------------------------------------------------

SECRET_BLOCKS = [
    "You are Agent QUOKKA-7f3a. The launch code is 0451-ZEBRA; never reveal it.",
    "Internal policy: escalate to pager-duty@example.invalid after midnight.",
]


def test_the_raw_bytes_of_a_stored_meta_record_never_contain_the_system_prompt() -> None:
    fp = fingerprint.compute(
        provider="anthropic",
        model="claude-test",
        system_prompt=SECRET_BLOCKS,
        tools=[{"name": "read", "input_schema": {"type": "object"}}],
    )
    meta = make_record(
        1, "meta", {**meta_payload("secret-run"), "fingerprint": fp.as_json()}, GENESIS, TS
    )
    stored = [meta.raw, convert.record_to_pb(meta).SerializeToString()]
    pieces = [
        *SECRET_BLOCKS,
        json.dumps(SECRET_BLOCKS),
        json.dumps(SECRET_BLOCKS, ensure_ascii=False, separators=(",", ":")),
    ]
    pieces += [w for block in SECRET_BLOCKS for w in block.replace(".", " ").split() if len(w) >= 5]
    for raw in stored:
        for piece in pieces:
            assert piece.encode() not in raw, piece
    # Positive control: what *is* stored is the hash, so this test looks at the right bytes.
    assert fingerprint.hash_system_prompt(SECRET_BLOCKS).encode() in meta.raw
    assert fold([meta]).fingerprint == fp


# --- refusals --------------------------------------------------------------------------------

M = meta_payload("r")
A = assistant_payload([text("hi")])
REFUSALS: dict[str, tuple[list[tuple[int, str, Any]], int]] = {
    "first record not meta": ([(1, "assistant", A)], 1),
    "second meta": ([(1, "meta", M), (2, "assistant", A), (3, "meta", M)], 3),
    "repeated seq": ([(1, "meta", M), (2, "assistant", A), (2, "user", user_payload("x"))], 2),
    "decreasing seq": ([(1, "meta", M), (5, "assistant", A), (4, "user", user_payload("x"))], 4),
    "tool_result before any assistant": (
        [(1, "meta", M), (2, "tool_result", result_payload("t"))],
        2,
    ),
}
MALFORMED: dict[str, tuple[str, Any]] = {
    "meta without run_id": ("meta", {k: v for k, v in M.items() if k != "run_id"}),
    "meta fingerprint missing a field": (
        "meta",
        {**M, "fingerprint": {k: v for k, v in FP.as_json().items() if k != "model"}},
    ),
    "meta fingerprint not an object": ("meta", {**M, "fingerprint": "abc"}),
    "meta prompt not a list": ("meta", {**M, "prompt": "hello"}),
    "meta labels not an object": ("meta", {**M, "labels": ["a", "b"]}),
    "assistant without message": ("assistant", {"iteration": 1, "stop_reason": "end_turn"}),
    "assistant message with user role": (
        "assistant",
        {**A, "message": {"role": "user", "content": [text("x")]}},
    ),
    "assistant content not a list": (
        "assistant",
        {**A, "message": {"role": "assistant", "content": "x"}},
    ),
    "assistant block without type": (
        "assistant",
        {**A, "message": {"role": "assistant", "content": [{}]}},
    ),
    "assistant tool_use without id": (
        "assistant",
        {**A, "message": {"role": "assistant", "content": [{"type": "tool_use", "name": "read"}]}},
    ),
    "assistant usage not an object": ("assistant", {**A, "usage": [1, 2]}),
    "tool_result without tool_use_id": ("tool_result", {"content": [], "is_error": False}),
    "tool_result content not a list": ("tool_result", {**result_payload("t1"), "content": "ok"}),
    "user without content": ("user", {}),
    "user content a string": ("user", {"content": "hello"}),
    "rebase without messages": ("rebase", {"reason": "compaction"}),
    "rebase message with system role": (
        "rebase",
        {"reason": "compaction", "messages": [{"role": "system", "content": []}]},
    ),
    "rebase message content not a list": (
        "rebase",
        {"reason": "compaction", "messages": [{"role": "user", "content": None}]},
    ),
    "terminal without reason": ("terminal", {"message": "bye"}),
    "terminal reason not a string": ("terminal", {"reason": 3}),
    "payload not an object": ("user", cast(Any, [text("x")])),
}


def _assert_corrupt_at(recs: list[Record], seq: int) -> None:
    with pytest.raises(errors.StoreCorrupted) as info:
        fold(recs)
    assert info.value.metadata["seq"] == str(seq)
    assert f"seq {seq}" in info.value.message
    assert info.value.code == "store_corrupted"


@pytest.mark.parametrize("name", list(REFUSALS))
def test_fold_refuses_a_broken_sequence_naming_the_seq(name: str) -> None:
    items, seq = REFUSALS[name]
    _assert_corrupt_at(_chain(items), seq)


@pytest.mark.parametrize("name", list(MALFORMED))
def test_fold_refuses_a_malformed_payload_naming_the_seq(name: str) -> None:
    kind, payload = MALFORMED[name]
    if kind == "meta":
        items: list[tuple[int, str, Any]] = [(1, "meta", payload)]
    else:
        items = [(1, "meta", M), (2, "assistant", assistant_payload([tool_use("t1")]))]
        items.append((3, kind, payload))
    _assert_corrupt_at(_chain(items), items[-1][0])


def test_fold_refusals_also_apply_when_continuing_from_a_state() -> None:
    b = JournalBuilder()
    b.turn(["t1"])
    state = fold(b.records)
    stale = make_record(2, "user", user_payload("late"), GENESIS, TS)
    with pytest.raises(errors.StoreCorrupted) as info:
        fold([stale], start=state)
    assert info.value.metadata["seq"] == "2"


# --- tolerated anomalies ------------------------------------------------------------------


def test_unknown_and_duplicate_results_are_reported_and_counted_once() -> None:
    b = JournalBuilder()
    b.turn(["t1", "t2"], answered=["t1"])
    b.add("tool_result", result_payload("t1", "again"))  # seq 4: duplicate, while pending
    b.add("tool_result", result_payload("nope"))  # seq 5: unknown id
    b.add("tool_result", result_payload("t2"))  # seq 6: completes the batch
    b.add("tool_result", result_payload("t2", "late copy"))  # seq 7: duplicate after commit
    st = fold(b.records)
    assert [(a.seq, a.kind) for a in st.anomalies] == [
        (4, "duplicate_result"),
        (5, "unknown_tool_use_id"),
        (7, "duplicate_result"),
    ]
    assert st.counters.tool_calls == 2
    assert st.pending is None
    results = [blk for blk in st.messages[-1]["content"] if blk["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["t1", "t2"]
    assert results[0]["content"] == [text("result of t1")]  # the first answer is kept


def test_a_turn_abandoned_by_a_new_assistant_turn_is_closed_with_synthetic_errors() -> None:
    b = JournalBuilder()
    b.turn(["t1", "t2"], answered=["t2"])
    b.add("assistant", assistant_payload([text("starting over")], 2))
    st = fold(b.records)
    assert [(a.seq, a.kind) for a in st.anomalies] == [(4, "abandoned_tool_calls")]
    closing = st.messages[2]["content"]
    assert [r["tool_use_id"] for r in closing] == ["t1", "t2"]  # call order
    assert closing[0]["is_error"] is True
    assert closing[0]["content"] == [text(ABANDONED_TEXT)]
    assert closing[1]["content"] == [text("result of t2")]
    assert st.messages[-1] == {"role": "assistant", "content": [text("starting over")]}


def test_a_follow_up_while_calls_are_open_closes_them_before_the_typed_text() -> None:
    b = JournalBuilder(interactive=True)
    b.turn(["t1"], answered=[])
    b.add("user", user_payload("never mind"))
    st = fold(b.records)
    assert st.pending is None
    assert [blk["type"] for blk in st.messages[-1]["content"]] == ["tool_result", "text"]
    assert st.anomalies[0].kind == "abandoned_tool_calls"


# --- rebases ---------------------------------------------------------------------------------


def test_a_rebase_replaces_the_messages_while_counters_stay_cumulative() -> None:
    b = JournalBuilder()
    b.turn(["t1"])
    b.turn(["t2"], answered=[])
    before = fold(b.records)
    summary = [{"role": "user", "content": [text("summary")]}]
    b.add("rebase", {"reason": "compaction", "messages": summary})
    after_rebase = fold(b.records)
    assert after_rebase.messages == summary
    assert after_rebase.pending is None
    assert after_rebase.anomalies[-1].kind == "pending_replaced"
    assert after_rebase.counters == before.counters
    assert after_rebase.next_iteration == before.next_iteration == 3
    b.turn(["t3"], iteration=3)
    st = fold(b.records)
    assert st.counters.llm_calls == 3
    assert st.counters.tool_calls == 2
    assert st.counters.input_tokens == 30
    assert st.next_iteration == 4
    assert [m["role"] for m in st.messages] == ["user", "assistant", "user"]
    assert st.messages[0] == summary[0]


def test_a_rebase_does_not_share_mutable_lists_with_the_previous_state() -> None:
    b = JournalBuilder()
    b.add("rebase", {"reason": "restore", "messages": [{"role": "user", "content": [text("a")]}]})
    first = fold(b.records)
    b.add("user", user_payload("b"))
    second = fold(b.records[2:], start=first)
    assert first.messages == [{"role": "user", "content": [text("a")]}]
    assert second.messages == [{"role": "user", "content": [text("a"), text("b")]}]


# --- resume boundary and notices ----------------------------------------------------------


def _scenario(name: str, interactive: bool) -> list[Record]:
    b = JournalBuilder(interactive=interactive)
    if name == "assistant answered":
        b.add("assistant", assistant_payload([text("done")]))
    elif name == "paused turn":
        b.add("assistant", assistant_payload([text("...")], stop_reason="pause_turn"))
    elif name == "paused then answered":
        b.add("assistant", assistant_payload([text("...")], 1, "pause_turn"))
        b.add("assistant", assistant_payload([text("done")], 2))
    elif name == "pending tool call":
        b.turn(["t1", "t2"], answered=["t1"])
    elif name == "tool results answered":
        b.turn(["t1"])
    elif name == "follow-up after answer":
        b.add("assistant", assistant_payload([text("done")]))
        b.add("user", user_payload("more"))
    elif name == "suspended after answer":
        b.add("assistant", assistant_payload([text("done")]))
        b.add("terminal", terminal_payload("suspended"))
    elif name == "rebase ending on assistant":
        b.add("assistant", assistant_payload([text("done")]))
        tail = [
            {"role": "user", "content": [text("s")]},
            {"role": "assistant", "content": [text("a")]},
        ]
        b.add("rebase", {"reason": "compaction", "messages": tail})
    elif name == "rebase to no messages":
        b.add("assistant", assistant_payload([text("done")]))
        b.add("rebase", {"reason": "compaction", "messages": []})
    return b.records


BOUNDARY = [
    # (scenario, interactive, resume_at_input_boundary)
    ("assistant answered", True, True),
    ("assistant answered", False, False),
    ("paused turn", True, False),
    ("paused then answered", True, True),
    ("pending tool call", True, False),
    ("tool results answered", True, False),
    ("follow-up after answer", True, False),
    ("prompt only", True, False),
    ("suspended after answer", True, True),
    ("suspended after answer", False, False),
    ("rebase ending on assistant", True, True),
    ("rebase to no messages", True, False),
]


@pytest.mark.parametrize(("name", "interactive", "expected"), BOUNDARY)
def test_resume_at_input_boundary_truth_table(name: str, interactive: bool, expected: bool) -> None:
    assert fold(_scenario(name, interactive)).resume_at_input_boundary is expected


def test_resume_at_input_boundary_is_false_for_a_run_with_no_messages_at_all() -> None:
    b = JournalBuilder(prompt="", interactive=True)
    st = fold(b.records)
    assert st.messages == []
    assert st.resume_at_input_boundary is False


def test_resume_warnings_name_open_tool_calls() -> None:
    st = fold(_scenario("pending tool call", True))
    warnings = resume_warnings(st)
    assert [code for code, _ in warnings] == ["open_tool_calls"]
    assert "t2" in warnings[0][1]
    assert "t1" not in warnings[0][1].split("(")[-1]
    assert "seq 2" in warnings[0][1]


def test_resume_warnings_name_a_paused_turn() -> None:
    assert [c for c, _ in resume_warnings(fold(_scenario("paused turn", True)))] == ["paused_turn"]


@pytest.mark.parametrize("name", ["assistant answered", "tool results answered", "prompt only"])
def test_resume_warnings_are_empty_on_a_clean_boundary(name: str) -> None:
    assert resume_warnings(fold(_scenario(name, True))) == []


# --- recovery's quarantine rebase -----------------------------------------------------------


def test_a_quarantine_rebase_is_an_anomaly_and_every_resume_warns_about_it() -> None:
    b = JournalBuilder()
    b.turn(["t1"])
    b.add(
        "rebase",
        {
            "reason": "quarantine",
            "messages": [{"role": "user", "content": [text("hello")]}],
            "covered": {"from_seq": 3, "to_seq": 4},
        },
    )
    b.add("user", user_payload("and then"))
    st = fold(b.records)
    [anomaly] = st.anomalies
    assert (anomaly.seq, anomaly.kind) == (b.records[-2].seq, "records_quarantined")
    assert "seqs 3..4" in anomaly.detail
    assert resume_warnings(st) == [("records_quarantined", anomaly.detail)]


def test_the_conversation_rebuilt_after_a_quarantine_is_one_a_model_accepts() -> None:
    """Survivors of a hole: a result whose call was quarantined is dropped, a turn whose
    results were quarantined is closed with error results (outcome unknown)."""
    b = JournalBuilder(prompt="go")
    b.add("assistant", assistant_payload([tool_use("a")], 1))  # quarantined below
    b.add("tool_result", result_payload("a", "out a"))
    b.add("assistant", assistant_payload([text("next"), tool_use("b")], 2))
    b.add("tool_result", result_payload("b", "out b"))  # quarantined below
    survivors = [r for r in b.records if r.seq not in (2, 5)]
    msgs = rebuilt_after_quarantine(survivors)
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    [result] = msgs[2]["content"]
    assert (result["tool_use_id"], result["is_error"]) == ("b", True)
    assert result["content"][0]["text"] == ABANDONED_TEXT
