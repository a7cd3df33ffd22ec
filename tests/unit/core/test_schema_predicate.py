"""The compiled schema predicate (the append fast path) accepts exactly what jsonschema does.

If the two ever disagree, either a valid record would take the slow path (only slower) or,
worse, an invalid one would be written; so the property compares them on valid journals and on
records mutated at a random spot (value replaced, key dropped, key added), including booleans
where integers belong, integral floats, strings with a trailing newline against anchored
patterns and integers past the safe range.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from journald.core.records import KINDS
from journald.core.schema import schema_document
from journald.core.schema_predicate import UnsupportedSchema, compile_definition
from tests.profiles import scaled
from tests.unit.strategies import journals, json_values

DEFS = schema_document()["$defs"]
DEFINITIONS = sorted(DEFS)
PREDICATES = {name: compile_definition(schema_document(), name) for name in DEFINITIONS}
VALIDATORS = {
    name: Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": DEFS}) for name in DEFINITIONS
}

TRICKY = [
    True,
    False,
    0,
    -1,
    1.0,
    1.5,
    2**53,
    2**53 - 1,
    "",
    "a" * 129,
    "0" * 64,
    "0" * 64 + "\n",
    "2026-11-30T00:00:00Z\n",
    "journald.v1.record.user",
    "text",
    "tool_use",
    "attachment",
    "QQ==",
    "QQ=",
    "AAEC\n",
    [],
    {},
    {"type": "text"},
    {"type": "tool_result", "tool_use_id": "t", "content": [], "is_error": False},
]
tricky_values = st.one_of(json_values, st.sampled_from(TRICKY))


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*here, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*here, i))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replace(v, rest, new) if k == head else v) for k, v in value.items()}
    return [(_replace(v, rest, new) if i == head else v) for i, v in enumerate(value)]


@st.composite
def mutated(draw: st.DrawFn, value: Any) -> Any:
    path = draw(st.sampled_from(_paths(value)))
    target: Any = value
    for part in path:
        target = target[part]
    action = draw(st.sampled_from(["replace", "drop", "add", "keep"]))
    if action == "replace":
        return _replace(value, path, draw(tricky_values))
    if action == "drop" and isinstance(target, dict) and target:
        key = draw(st.sampled_from(sorted(target)))
        return _replace(value, path, {k: v for k, v in target.items() if k != key})
    if action == "drop" and isinstance(target, list) and target:
        return _replace(value, path, target[1:])
    if action == "add" and isinstance(target, dict):
        key = draw(st.one_of(st.sampled_from(["type", "id", "extra", "usage", "!"]), st.text()))
        return _replace(value, path, {**target, key: draw(tricky_values)})
    if action == "add" and isinstance(target, list):
        return _replace(value, path, [*target, draw(tricky_values)])
    return value


def _agree(name: str, instance: Any) -> None:
    expected = VALIDATORS[name].is_valid(instance)
    assert PREDICATES[name](instance) is expected, (name, instance)


@pytest.mark.slow  # ~20 s: 300 whole journals, each record mutated and validated twice
@settings(max_examples=scaled(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), journal=journals(max_steps=6, state=True))
def test_compiled_predicate_agrees_with_jsonschema_on_valid_and_mutated_records(
    data: st.DataObject, journal: list[Any]
) -> None:
    for rec in journal:
        obj = rec.as_json()
        _agree("envelope", obj)
        _agree(rec.kind, rec.payload)
        assert PREDICATES[rec.kind](rec.payload), "a valid record must take the fast path"
        _agree("envelope", data.draw(mutated(obj)))
        _agree(rec.kind, data.draw(mutated(rec.payload)))


@settings(max_examples=scaled(200), deadline=None)
@given(name=st.sampled_from(DEFINITIONS), value=tricky_values)
def test_compiled_predicate_agrees_with_jsonschema_on_arbitrary_values(
    name: str, value: Any
) -> None:
    _agree(name, value)


def _one_of_each_kind() -> list[tuple[str, Any]]:
    from tests.builders import (
        assistant_payload,
        meta_payload,
        result_payload,
        terminal_payload,
        text,
        tool_use,
        user_payload,
    )

    rebase = {
        "reason": "compaction",
        "messages": [{"role": "user", "content": [text("s")]}],
        "covered": {"from_seq": 1, "to_seq": 3},
    }
    nested = result_payload("t1")
    nested["content"] = [
        {"type": "tool_result", "tool_use_id": "t0", "content": [text("x")], "is_error": False},
        {"type": "attachment", "sha256": "0" * 64, "media_type": "text/plain", "size": 1},
        {"type": "redacted_thinking", "data": "abc"},
        {"type": "provider", "provider": "p", "data": "{}"},
    ]
    meta = meta_payload("run-1")
    meta["labels"] = {"team": "a"}
    meta["lineage"] = {"forked_from_run_id": "r0", "forked_at_seq": 2}
    envelope = {
        "v": 1,
        "seq": 2,
        "type": "journald.v1.record.user",
        "ts": "2026-11-30T00:00:00.123Z",
        "prev": "0" * 64,
        "trace": {"trace_id": "0" * 32, "span_id": "0" * 16},
        "user": user_payload("hi"),
    }
    state_value = {"namespace": "lg", "key": "k", "type": "msgpack", "data": "AAEC"}
    state_attachment = {
        "namespace": "lg",
        "key": "k",
        "type": "json",
        "sha256": "0" * 64,
        "size": 3,
    }
    return [
        ("state", state_value),
        ("state", state_attachment),
        ("state", {"namespace": "lg", "key": "k", "deleted": True}),
        ("state", {"namespace": "lg", "deleted": True}),
        ("meta", meta),
        ("assistant", assistant_payload([text("x"), tool_use("t1")])),
        ("tool_result", nested),
        ("user", user_payload("hi")),
        ("rebase", rebase),
        ("terminal", terminal_payload("completed")),
        ("envelope", envelope),
    ]


@pytest.mark.parametrize(("name", "valid"), _one_of_each_kind(), ids=lambda v: str(v)[:12])
def test_compiled_predicate_agrees_with_jsonschema_at_every_spot_of_every_kind(
    name: str, valid: Any
) -> None:
    """Deterministic sweep: every node of a valid record replaced by every tricky value, and
    every key or item dropped in turn."""
    _agree(name, valid)
    assert PREDICATES[name](valid)
    for path in _paths(valid):
        for new in TRICKY:
            _agree(name, _replace(valid, path, new))
        target: Any = valid
        for part in path:
            target = target[part]
        if isinstance(target, dict):
            for key in ("extra", "", "bad key!", "type"):
                _agree(name, _replace(valid, path, {**target, key: "x"}))
            for key in target:
                _agree(name, _replace(valid, path, {k: v for k, v in target.items() if k != key}))
        elif isinstance(target, list):
            for i in range(len(target)):
                _agree(name, _replace(valid, path, target[:i] + target[i + 1 :]))


def test_every_record_kind_and_the_envelope_have_a_predicate() -> None:
    assert set(KINDS) | {"envelope"} <= set(PREDICATES)


@pytest.mark.parametrize(
    "value", [{"a": 1}, {"a": 1.0}, {"a": True}, {"a": 1, "b": 2}, {}, [1], [True], [1, 2], 1]
)
def test_const_and_enum_compare_containers_as_json_does(value: Any) -> None:
    doc = {"$defs": {"c": {"const": {"a": 1}}, "e": {"enum": [[1], {"a": 1}]}}}
    for name in ("c", "e"):
        expected = Draft202012Validator({"$ref": f"#/$defs/{name}", **doc}).is_valid(value)
        assert compile_definition(doc, name)(value) is expected


TAGGED = {
    "allOf": [
        {"if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["x"]}},
        {"if": {"properties": {"k": {"const": "b"}}}, "then": {"required": ["y"]}},
    ]
}
NOT_TAGGED = {
    "allOf": [
        {"if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["x"]}},
        {"if": {"properties": {"j": {"const": "b"}}}, "then": {"required": ["y"]}},
        {"if": {"properties": {"k": {"const": 1}}}, "then": {"required": ["z"]}},
    ]
}


@pytest.mark.parametrize("schema", [TAGGED, NOT_TAGGED], ids=["one-tag", "mixed"])
@pytest.mark.parametrize(
    "value",
    [
        {"k": "a", "x": 1},
        {"k": "a", "y": 1},
        {"k": "b", "y": 1},
        {"k": "c"},
        {"k": 1},
        {"k": 1, "z": 0},
        {"j": "b"},
        {"x": 1, "y": 2},
        {"x": 1, "y": 2, "z": 3},
        {},
        "a",
        [],
    ],
)
def test_tagged_unions_take_one_branch_exactly_as_if_then_would(schema: Any, value: Any) -> None:
    doc = {"$defs": {"u": schema}}
    expected = Draft202012Validator({"$ref": "#/$defs/u", **doc}).is_valid(value)
    assert compile_definition(doc, "u")(value) is expected


def test_a_schema_keyword_the_compiler_does_not_implement_is_refused_when_compiling() -> None:
    doc = {"$defs": {"x": {"type": "string", "format": "date-time"}}}
    with pytest.raises(UnsupportedSchema, match="format"):
        compile_definition(doc, "x")
