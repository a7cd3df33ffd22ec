"""Framework state records: indexed by the fold per (namespace, key), never conversation."""

from __future__ import annotations

import pytest

from journald.core.admission import admit
from journald.core.errors import InvalidRecord, StoreCorrupted
from journald.core.fold import StateValue, fold
from journald.core.records import make_record
from journald.core.schema import validate_record
from journald.server import convert
from tests.builders import (
    TS,
    JournalBuilder,
    assistant_payload,
    result_payload,
    text,
    tool_use,
    user_payload,
)


def value(ns: str, key: str, data: str = "AAEC", vtype: str = "msgpack") -> dict[str, object]:
    return {"namespace": ns, "key": key, "type": vtype, "data": data}


def test_the_fold_keeps_the_latest_value_of_each_key_and_leaves_the_conversation_alone() -> None:
    b = JournalBuilder("lg", prompt="hi")
    b.add("state", value("cp", "a", "QQ=="))
    b.add("assistant", assistant_payload([text("hello")], 1))
    b.add("state", value("cp", "b", "Qg=="))
    b.add("state", value("cp", "a", "QUE="))
    without = fold([r for r in b.records if r.kind != "state"])
    st = fold(b.records)
    assert st.messages == without.messages
    assert st.counters == without.counters
    assert st.state == {
        "cp": {"b": StateValue(4, "msgpack", "Qg=="), "a": StateValue(5, "msgpack", "QUE=")}
    }
    assert [(ns, k, v.seq) for ns, k, v in st.state_entries()] == [("cp", "b", 4), ("cp", "a", 5)]


def test_a_deletion_drops_one_key_or_a_whole_namespace() -> None:
    b = JournalBuilder("lg")
    b.add("state", value("cp", "a"))
    b.add("state", value("cp", "b"))
    b.add("state", value("items", "0"))
    b.add("state", {"namespace": "cp", "key": "a", "deleted": True})
    assert fold(b.records).state == {
        "cp": {"b": StateValue(3, "msgpack", "AAEC")},
        "items": {"0": StateValue(4, "msgpack", "AAEC")},
    }
    b.add("state", {"namespace": "cp", "deleted": True})
    b.add("state", {"namespace": "never-written", "key": "x", "deleted": True})
    assert fold(b.records).state == {"items": {"0": StateValue(4, "msgpack", "AAEC")}}


def test_an_attachment_value_keeps_its_digest_and_size() -> None:
    b = JournalBuilder("lg")
    b.add("state", {"namespace": "cp", "key": "a", "type": "json", "sha256": "ab" * 32, "size": 9})
    assert fold(b.records).state["cp"]["a"] == StateValue(2, "json", "", "ab" * 32, 9)


def test_a_rebase_replaces_the_conversation_but_not_the_state() -> None:
    b = JournalBuilder("lg", prompt="hi")
    b.add("state", value("cp", "a"))
    b.add("rebase", {"reason": "edit", "messages": []})
    st = fold(b.records)
    assert st.messages == []
    assert st.state == {"cp": {"a": StateValue(2, "msgpack", "AAEC")}}


def test_state_may_be_appended_while_tool_calls_are_open() -> None:
    b = JournalBuilder("lg", prompt="hi")
    b.add("assistant", assistant_payload([tool_use("t1"), tool_use("t2")], 1))
    b.add("tool_result", result_payload("t1"))
    before = fold(b.records)
    assert before.pending is not None
    rec = make_record(4, "state", value("writes", "t1"), before.last_hash, TS)
    admit(before, [rec])  # no refusal
    after = fold([rec], start=before)
    assert after.pending == before.pending
    assert after.messages == before.messages
    follow_up = make_record(5, "user", user_payload("x"), rec.hash, TS)
    with pytest.raises(InvalidRecord, match="unanswered"):
        admit(after, [follow_up])  # the conversation rules still hold around it


@pytest.mark.parametrize(
    "payload",
    [
        {"key": "a", "type": "t", "data": ""},
        {"namespace": "", "key": "a", "type": "t", "data": ""},
        {"namespace": "cp", "type": "t", "data": ""},
        {"namespace": "cp", "key": "a", "data": ""},
        {"namespace": "cp", "key": "a", "type": "t", "data": 3},
    ],
)
def test_a_stored_state_record_without_namespace_key_or_type_is_refused_as_corrupt(
    payload: dict[str, object],
) -> None:
    b = JournalBuilder("lg")
    bad = make_record(2, "state", payload, b.records[-1].hash, TS)
    with pytest.raises(StoreCorrupted, match="seq 2"):
        fold([*b.records, bad])


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"namespace": "cp", "key": "a", "type": "t"}, "data"),
        ({"namespace": "cp", "key": "a", "type": "t", "data": "A"}, "state.data"),
        ({"namespace": "cp", "key": "a", "type": "t", "sha256": "ab" * 32}, "size"),
        ({"namespace": "cp", "key": "a", "type": "t", "data": "", "size": 1}, "state"),
        ({"namespace": "cp", "deleted": True, "type": "t"}, "state"),
        ({"namespace": "cp", "key": "", "type": "t", "data": ""}, "state.key"),
        ({"namespace": "cp", "key": "a", "type": "t", "data": "", "x": 1}, "state"),
    ],
)
def test_the_schema_refuses_malformed_state_naming_the_field(
    payload: dict[str, object], field: str
) -> None:
    rec = make_record(2, "state", payload, "0" * 64, TS)
    with pytest.raises(InvalidRecord, match=field):
        validate_record(rec)


def test_state_records_cross_the_api_byte_for_byte_in_their_normal_form() -> None:
    b = JournalBuilder("lg")
    b.add("state", value("cp", "a", ""))
    b.add("state", value("cp", "b", "/+8="))
    b.add("state", {"namespace": "cp", "key": "c", "type": "j", "sha256": "cd" * 32, "size": 0})
    b.add("state", {"namespace": "cp", "key": "a", "deleted": True})
    b.add("state", {"namespace": "cp", "deleted": True})
    for rec in b.records[1:]:
        validate_record(rec)
        assert convert.record_from_pb(convert.record_to_pb(rec)).raw == rec.raw
    pb_state = convert.state_to_pb(fold(b.records[:4]))
    assert [(e.key, bytes(e.data), e.sha256, e.seq) for e in pb_state.state] == [
        ("a", b"", "", 2),
        ("b", b"\xff\xef", "", 3),
        ("c", b"", "cd" * 32, 4),
    ]


def test_a_state_value_is_either_inline_or_an_attachment_on_the_wire() -> None:
    from journald_client.pb import journal_pb2 as pb

    rec = pb.Record(
        seq=2,
        ts=TS,
        state=pb.StatePayload(namespace="cp", key="a", type="t", data=b"x", sha256="ab" * 32),
    )
    with pytest.raises(InvalidRecord, match="not both"):
        convert.record_from_pb(rec, prev="0" * 64)
