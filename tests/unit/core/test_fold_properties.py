"""Property tests of the fold, pairing governance and the record encodings (issue 2)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from journald.core import governance, records, schema
from journald.core.fold import RunState, fold
from journald.core.records import GENESIS, Record, make_record
from journald.server import convert
from tests.profiles import scaled
from tests.unit.invariants import as_json, model_ready_problems
from tests.unit.strategies import (
    FollowUp,
    LiveScenario,
    ModelTurn,
    journals,
    live_scenarios,
    message_lists,
    meta_payloads,
    provider_blocks,
    thinking_blocks,
)

# --- (a) incremental folding -------------------------------------------------------------


@settings(max_examples=scaled(40))
@given(journals(state=True))
def test_folding_incrementally_equals_folding_at_once(recs: list[Record]) -> None:
    whole = fold(recs)
    for k in range(len(recs) + 1):
        head = fold(recs[:k])
        snapshot = copy.deepcopy(head)
        assert fold(recs[k:], start=head) == whole, f"split at {k}"
        assert head == snapshot, f"continuing from the state at {k} modified it"


@settings(max_examples=scaled(40))
@given(journals(state=True))
def test_folding_record_by_record_equals_folding_at_once_and_leaves_each_state_alone(
    recs: list[Record],
) -> None:
    state: RunState | None = None
    states: list[tuple[RunState, RunState]] = []
    for rec in recs:
        state = fold([rec], start=state)
        states.append((state, copy.deepcopy(state)))
    assert state == fold(recs)
    for i, (kept, snapshot) in enumerate(states):
        assert kept == snapshot, f"state after record {i + 1} changed by later folds"


@settings(max_examples=scaled(30))
@given(journals(state=True))
def test_folding_never_modifies_the_records(recs: list[Record]) -> None:
    before = [copy.deepcopy(dict(r.payload)) for r in recs]
    st_ = fold(recs)
    governance.governed_messages(st_)
    assert [dict(r.payload) for r in recs] == before
    assert all(records.canonical_json(r.as_json()) == r.raw for r in recs)


# --- (b) pairing governance ---------------------------------------------------------------


@settings(max_examples=scaled(80))
@given(journals())
def test_governed_messages_of_any_journal_are_model_ready(recs: list[Record]) -> None:
    msgs, report = governance.governed_messages(fold(recs))
    assert model_ready_problems(msgs) == []
    if not report.changed:
        state = fold(recs)
        assert state.pending is None or not state.pending.unanswered


@settings(max_examples=scaled(40))
@given(journals())
def test_folded_messages_are_model_ready_without_governance_when_no_rebase_intervenes(
    recs: list[Record],
) -> None:
    # docs/design.md#fold: messages is always a history a model API accepts (rebases
    # carry whatever the client sent, and the generator also writes empty assistant turns,
    # as a model may).
    assume(recs[0].payload["prompt"] and all(r.kind != "rebase" for r in recs))
    problems = model_ready_problems(fold(recs).messages)
    assert [p for p in problems if "is empty" not in p] == []


@settings(max_examples=scaled(150))
@given(message_lists())
# found by Hypothesis: an assistant message holding only a misplaced tool result was kept empty
@example(
    [
        {"role": "user", "content": [{"type": "text", "text": ""}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": [], "is_error": False}
            ],
        },
    ]
)
def test_sanitize_makes_any_message_list_model_ready(msgs: list[dict[str, Any]]) -> None:
    snapshot = copy.deepcopy(msgs)
    out, report = governance.sanitize(msgs)
    assert model_ready_problems(out) == []
    assert msgs == snapshot, "sanitize modified its input"
    if model_ready_problems(msgs) == []:
        assert as_json(out) == as_json(msgs), "a model-ready list must pass unchanged"
        assert not report.changed


@settings(max_examples=scaled(60))
@given(message_lists())
def test_sanitize_is_idempotent(msgs: list[dict[str, Any]]) -> None:
    once, _ = governance.sanitize(msgs)
    twice, report = governance.sanitize(once)
    assert as_json(twice) == as_json(once)
    assert not report.changed


def test_the_model_ready_check_itself_catches_each_violation() -> None:
    use = {"type": "tool_use", "id": "a", "name": "n", "input": "{}"}
    res = {"type": "tool_result", "tool_use_id": "a", "content": [], "is_error": False}
    txt = {"type": "text", "text": "x"}
    bad: dict[str, list[dict[str, Any]]] = {
        "starts with assistant": [{"role": "assistant", "content": [txt]}],
        "same roles": [{"role": "user", "content": [txt]}, {"role": "user", "content": [txt]}],
        "unanswered": [{"role": "user", "content": [txt]}, {"role": "assistant", "content": [use]}],
        "orphan": [{"role": "user", "content": [res, txt]}],
        "twice": [
            {"role": "user", "content": [txt]},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [res, res]},
        ],
        "not leading": [
            {"role": "user", "content": [txt]},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [txt, res]},
        ],
        "empty": [{"role": "user", "content": []}],
    }
    for name, msgs in bad.items():
        assert model_ready_problems(msgs), name
    good: list[dict[str, Any]] = [
        {"role": "user", "content": [txt]},
        {"role": "assistant", "content": [txt, use]},
        {"role": "user", "content": [res, txt]},
    ]
    assert model_ready_problems(good) == []


# --- (c) encodings --------------------------------------------------------------------------


@settings(max_examples=scaled(40))
@given(journals(state=True))
def test_every_generated_record_reencodes_byte_identically(recs: list[Record]) -> None:
    for rec in recs:
        again = records.decode(rec.raw)
        assert again.raw == rec.raw
        assert again.hash == rec.hash == records.sha256_hex(rec.raw)
        assert records.decode(again.raw).raw == rec.raw
        assert again.as_json() == rec.as_json()


@settings(max_examples=scaled(40))
@given(journals(state=True))
def test_every_generated_record_survives_protobuf_losslessly(recs: list[Record]) -> None:
    for rec in recs:
        msg = convert.record_to_pb(rec)
        wire = msg.SerializeToString()
        back = convert.record_from_pb(type(msg).FromString(wire))
        assert back.raw == rec.raw, rec.kind
        assert back.hash == rec.hash
        assert msg.canonical == rec.raw


@settings(max_examples=scaled(30))
@given(journals(state=True))
def test_every_generated_record_is_valid_against_the_published_schema(
    recs: list[Record],
) -> None:
    for rec in recs:
        schema.validate_record(rec)


@settings(max_examples=scaled(80))
@given(
    st.lists(st.one_of(provider_blocks(), thinking_blocks()), min_size=1, max_size=4),
    meta_payloads(),
)
def test_opaque_provider_and_signed_thinking_blocks_round_trip_byte_for_byte(
    blocks: list[dict[str, Any]], meta: dict[str, Any]
) -> None:
    recs = [make_record(1, "meta", meta, GENESIS, "2026-11-30T12:00:00Z")]
    recs.append(
        make_record(
            2,
            "assistant",
            {
                "message": {"role": "assistant", "content": blocks},
                "iteration": 1,
                "stop_reason": "end_turn",
                "usage": {
                    "input_tokens": 1,
                    "output_tokens": 2,
                    "cache_read_tokens": 3,
                    "cache_creation_tokens": 4,
                },
            },
            recs[0].hash,
            "2026-11-30T12:00:01Z",
        )
    )
    for rec in recs:
        back = convert.record_from_pb(convert.record_to_pb(rec))
        assert back.raw == rec.raw
    got = convert.record_from_pb(convert.record_to_pb(recs[1])).payload["message"]["content"]
    for sent, came in zip(blocks, got, strict=True):
        for key in ("data", "signature"):
            if key in sent:
                assert came[key] == sent[key]
                assert type(came[key]) is str


# --- (d) the live agent and the fold agree ------------------------------------------------


def _append(live: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """How the live loop adds content: continue the last message if it has the same role."""
    if live and live[-1]["role"] == role:
        live[-1]["content"].extend(copy.deepcopy(blocks))
    else:
        live.append({"role": role, "content": copy.deepcopy(blocks)})


def _run_live(scenario: LiveScenario) -> None:
    fp = {
        "provider": "anthropic",
        "model": "m",
        "system_prompt_sha256": "0" * 64,
        "tools_sha256": "1" * 64,
        "thinking": "off",
        "max_tokens": 1,
        "max_iterations": 0,
    }
    journal: list[Record] = []

    def write(kind: str, payload: dict[str, Any]) -> None:
        prev = journal[-1].hash if journal else GENESIS
        journal.append(make_record(len(journal) + 1, kind, payload, prev, "2026-11-30T12:00:00Z"))

    live: list[dict[str, Any]] = []
    meta = {"run_id": "live", "created": "2026-11-30T12:00:00Z", "fingerprint": fp}
    write("meta", {**meta, "prompt": scenario.prompt, "interactive": True})
    if scenario.prompt:
        live.append({"role": "user", "content": copy.deepcopy(scenario.prompt)})
    state = fold(journal)
    for i, step in enumerate(scenario.steps):
        if isinstance(step, FollowUp):
            # Typed text: merges into a user message in progress, else starts one; the
            # journal records only the new blocks.
            _append(live, "user", step.content)
            write("user", {"content": step.content})
        else:
            assert isinstance(step, ModelTurn)
            _append(live, "assistant", step.content)
            write(
                "assistant",
                {
                    "message": {"role": "assistant", "content": step.content},
                    "iteration": i + 1,
                    "stop_reason": step.stop_reason,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
            )
            calls = [b for b in step.content if b["type"] == "tool_use"]
            gathered: list[dict[str, Any] | None] = [None] * len(calls)
            for idx in step.completion_order:  # tools finish in any order ...
                block = {
                    "type": "tool_result",
                    "tool_use_id": calls[idx]["id"],
                    "content": step.results[idx],
                    "is_error": step.errors[idx],
                }
                gathered[idx] = block
                write(
                    "tool_result",
                    {
                        "tool_use_id": calls[idx]["id"],
                        "content": step.results[idx],
                        "is_error": step.errors[idx],
                        "remote": False,
                    },
                )
            if calls:  # ... and are sent back together, in call order, as one user message
                assert all(b is not None for b in gathered)
                live.append({"role": "user", "content": copy.deepcopy(gathered)})
        state = fold(journal[state.last_seq :], start=state)
        assert state.pending is None
        assert as_json(state.messages) == as_json(live), f"diverged after step {i}"
        assert as_json(fold(journal).messages) == as_json(live)


@settings(max_examples=scaled(80))
@given(live_scenarios())
def test_live_agent_messages_and_folded_journal_are_structurally_identical(
    scenario: LiveScenario,
) -> None:
    _run_live(scenario)


def test_live_agent_example_follow_up_after_tool_results_and_two_follow_ups_in_a_row() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "read", "input": "{}"}
    scenario = LiveScenario(
        prompt=[{"type": "text", "text": "hi"}],
        steps=[
            ModelTurn([use], "tool_use", [0], [[{"type": "text", "text": "r"}]], [False]),
            FollowUp([{"type": "text", "text": "also this"}]),
            ModelTurn([{"type": "text", "text": "done"}], "end_turn", [], [], []),
            FollowUp([{"type": "text", "text": "one"}]),
            FollowUp([{"type": "text", "text": "two"}]),
        ],
    )
    _run_live(scenario)
