"""The fast canonical encoder (orjson, for plain JSON) writes exactly the reference encoder's
bytes (docs/protocol.md#canonical-json): the shared vectors pin a few cases, these properties
pin arbitrary content, and a record built the gate's way (``plain`` asked once) has the bytes
and hash of one built the plain way."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core import records
from journald.core.errors import InvalidRecord
from journald.core.records import GENESIS, MAX_SAFE_INT, canonical_json, make_record, plain_json
from journald.core.schema import validate_record
from tests.unit.strategies import traces

REFERENCE = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)

# Every code point but the surrogates (not Unicode text), control characters, quotes and
# backslashes (escaped), U+2028/2029 and non-BMP characters included.
any_text = st.text(st.characters(codec="utf-8"), max_size=24)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT),
    any_text,
)
plain_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(any_text, inner, max_size=5)
    ),
    max_leaves=40,
)
# What a record may not hold but canonical_json still meets (floats, huge integers, lone
# surrogates, non-str keys): the reference decides what those give.
odd_scalars = st.one_of(
    scalars,
    st.floats(),
    st.integers(),
    st.text(max_size=4),  # surrogates allowed
)
odd_values = st.recursive(
    odd_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(any_text, st.integers(), st.booleans(), st.none()), inner, max_size=4
        ),
    ),
    max_leaves=20,
)


def _reference(value: object) -> bytes | str:
    try:
        return REFERENCE.encode(value).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError):
        return "refused"


def _ours(value: object) -> bytes | str:
    try:
        return canonical_json(value)
    except InvalidRecord:
        return "refused"


def _plain_reference(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_plain_reference(v) for v in value.values())
    if isinstance(value, list):
        return all(_plain_reference(v) for v in value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    return isinstance(value, int) and -MAX_SAFE_INT <= value <= MAX_SAFE_INT


@settings(max_examples=400)
@given(plain_values)
def test_plain_json_is_encoded_to_the_reference_bytes(value: object) -> None:
    assert plain_json(value)
    assert canonical_json(value) == REFERENCE.encode(value).encode("utf-8")


@settings(max_examples=400)
@given(odd_values)
def test_any_value_gets_the_reference_bytes_or_the_reference_refusal(value: object) -> None:
    assert _ours(value) == _reference(value)
    assert plain_json(value) == _plain_reference(value)


@pytest.mark.parametrize(
    "value",
    [1.0, 1e-07, [2**53], {"a": [0.5]}, {1: "a"}, (1, 2), "\ud800", float("nan")],
    ids=["float", "small float", "2^53", "nested float", "int key", "tuple", "surrogate", "nan"],
)
def test_values_the_fast_encoder_would_write_differently_go_to_the_reference(value: object) -> None:
    assert _ours(value) == _reference(value)


def test_a_plain_value_is_encoded_without_the_reference_encoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Refusing(json.JSONEncoder):
        def encode(self, o: object) -> str:
            raise AssertionError("the reference encoder ran for a plain value")

    monkeypatch.setattr(records, "_CANONICAL", Refusing())
    assert canonical_json({"b": [1, "é\n"], "a": None}) == b'{"a":null,"b":[1,"\xc3\xa9\\n"]}'


@settings(max_examples=200)
@given(
    st.dictionaries(any_text, plain_values, max_size=4),
    st.integers(min_value=1, max_value=MAX_SAFE_INT),
    traces(),
)
def test_a_record_built_with_plain_asked_once_has_the_same_bytes_and_hash(
    content: dict[str, Any], seq: int, trace: dict[str, str] | None
) -> None:
    payload = {"content": [{"type": "text", "text": "x"}], "extra": content}
    ts = "2026-12-02T03:00:00.000000Z"
    slow = make_record(seq, "user", payload, GENESIS, ts, trace)
    fast = make_record(seq, "user", payload, GENESIS, ts, trace, plain_json(payload))
    assert (fast.raw, fast.hash) == (slow.raw, slow.hash)
    assert fast.raw == REFERENCE.encode(slow.as_json()).encode("utf-8")


def test_a_float_in_content_is_still_refused_by_the_gates_schema_check() -> None:
    payload = {"content": [{"type": "text", "text": "x", "score": 0.5}]}
    plain = plain_json(payload)
    rec = make_record(2, "user", payload, GENESIS, "2026-12-02T03:00:00.000000Z", None, plain)
    with pytest.raises(InvalidRecord, match="floating-point"):
        validate_record(rec, plain)


def test_a_value_that_contains_itself_is_refused_as_the_reference_refuses_it() -> None:
    loop: list[object] = []
    loop.append(loop)
    looped: dict[str, object] = {"a": [1]}
    looped["b"] = looped
    for value in (loop, looped):
        assert not plain_json(value)
        with pytest.raises(InvalidRecord, match="Circular reference"):
            canonical_json(value)
