"""The records the client builds are already in the daemon's normal form, so a retry of
the same entry is byte-identical to what the daemon stored."""

from __future__ import annotations

import re
from typing import Any

import journald_client as jc
from journald_client import codec
from journald_client.pb import journal_pb2 as pb

from journald.server import convert
from tests.integration.clientbin.common import FP

TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def _entries() -> list[jc.Entry]:
    return [
        jc.Entry.assistant(
            [
                {"type": "text", "text": "Let me look. ✓"},
                {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a", "n": 1}},
                {"type": "tool_use", "id": "t2", "name": "read", "input": '{"path":"b"}'},
            ],
            stop_reason="tool_use",
            iteration=3,
            usage={"input_tokens": 10, "output_tokens": 4},
        ),
        jc.Entry.tool_result("t1", "contents", remote=True),
        jc.Entry.tool_result("t2", [{"type": "text", "text": "boom"}], is_error=True),
        jc.Entry.user("and then?"),
        jc.Entry.terminal("completed", "done"),
    ]


def test_entries_are_stamped_with_rfc3339_utc_microsecond_timestamps() -> None:
    for entry in _entries():
        assert TS_RE.match(entry.record.ts), entry.record.ts
    assert TS_RE.match(codec.now_ts())


def test_a_stamped_record_survives_the_daemons_normal_form_unchanged() -> None:
    records = codec.stamp(_entries(), 7)
    assert [r.seq for r in records] == [7, 8, 9, 10, 11]
    for rec in records:
        stored = convert.record_from_pb(rec, prev="0" * 64)
        back = convert.record_to_pb(stored)
        assert codec.same_record(rec, back), rec
        again = convert.record_from_pb(back, prev="0" * 64)
        assert again.raw == stored.raw


def test_restamping_the_same_entry_gives_the_same_bytes() -> None:
    entries = _entries()
    first = [r.SerializeToString(deterministic=True) for r in codec.stamp(entries, 2)]
    second = [r.SerializeToString(deterministic=True) for r in codec.stamp(entries, 2)]
    assert first == second


def test_tool_use_inputs_given_as_objects_become_raw_json_text() -> None:
    rec = _entries()[0].record
    msg = codec.message_from_pb(rec.assistant.message)
    assert msg["content"][1]["input"] == '{"n":1,"path":"a"}'
    assert msg["content"][2]["input"] == '{"path":"b"}'


def test_a_different_record_is_not_taken_for_the_stored_one() -> None:
    a, b = codec.stamp([jc.Entry.user("x")], 2)[0], codec.stamp([jc.Entry.user("y")], 2)[0]
    assert not codec.same_record(a, b)


def test_an_unknown_terminal_reason_is_refused_before_sending() -> None:
    import pytest

    with pytest.raises(jc.InvalidRecord):
        jc.Entry.terminal("finished")


def test_tool_outcomes_map_to_results() -> None:
    call = jc.ToolCall("t1", "read", "{}")
    err = codec.tool_entry(call, ValueError("nope")).record.tool_result
    assert err.is_error
    assert b"ValueError: nope" in err.content_json
    flagged = codec.tool_entry(call, jc.ToolOutput("bad input", is_error=True)).record
    assert flagged.tool_result.is_error
    obj = codec.tool_entry(call, {"lines": 3}).record.tool_result
    assert not obj.is_error
    assert b'{\\"lines\\":3}' in obj.content_json


def test_folded_state_decodes_into_plain_dataclasses() -> None:
    st = pb.RunState(
        run_id="r",
        last_seq=4,
        next_iteration=2,
        pending=pb.PendingTurn(
            message=pb.Message(
                role="assistant",
                content_json=b'[{"id":"a","input":"{}","name":"x","type":"tool_use"}]',
            ),
            unanswered=[pb.ToolCall(id="a", name="x", input_json="{}")],
            seq=2,
        ),
    )
    state = codec.state_from_pb(st, [pb.Warning(code="open_tool_calls", message="m")])
    assert state.pending is not None
    assert state.pending.unanswered == [jc.ToolCall("a", "x", "{}")]
    assert state.pending.calls == [jc.ToolCall("a", "x", "{}")]
    assert state.warnings[0].code == "open_tool_calls"
    assert state.terminal is None
    assert not state.completed


def test_stamp_numbers_assistant_entries_built_without_an_iteration() -> None:
    from journald_client import Entry

    entries = [
        Entry.assistant("a", stop_reason="pause_turn"),
        Entry.user("more"),
        Entry.assistant("b", stop_reason="end_turn"),
        Entry.assistant("c", stop_reason="end_turn", iteration=9),
        Entry.assistant("d", stop_reason="end_turn"),
    ]
    recs = codec.stamp(entries, 5, next_iteration=3)
    assert [r.seq for r in recs] == [5, 6, 7, 8, 9]
    assert [r.assistant.iteration for r in recs if r.HasField("assistant")] == [3, 4, 9, 10]
    assert codec.stamp(entries, 5, next_iteration=3) == recs  # a retry sends the same records


def test_a_lost_create_is_recognised_only_by_the_meta_it_would_have_written() -> None:
    params = codec.OpenParams("r", FP, False, False, "t")
    req = codec.open_request(params, create=True, prompt="hi", labels={"k": "v"})
    meta = {
        "run_id": "r",
        "created": req.created,
        "fingerprint": FP.as_json(),
        "prompt": [{"type": "text", "text": "hi"}],
        "interactive": False,
        "labels": {"k": "v"},
    }
    assert codec.created_by(req, meta)
    changes: list[dict[str, Any]] = [
        {"created": "2020-01-01T00:00:00.000000Z"},
        {"prompt": []},
        {"labels": {}},
    ]
    for change in changes:
        assert not codec.created_by(req, {**meta, **change})
    assert codec.resume_of(req).mode == pb.OPEN_MODE_RESUME
    assert codec.open_request(params, create=None).mode == pb.OPEN_MODE_CREATE_OR_RESUME
