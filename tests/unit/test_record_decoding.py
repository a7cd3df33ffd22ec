"""Decoding stored or received bytes never crashes: it returns a record or raises a typed
journald error (the storage layer turns those into store_corrupted naming the line)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journald import errors, records
from tests.unit.strategies import journals, json_values

ENVELOPE_KEYS = ["v", "seq", "type", "ts", "prev", "trace", "user", "meta", "assistant"]


@settings(max_examples=150)
@given(st.binary(max_size=200))
def test_decoding_arbitrary_bytes_raises_only_typed_errors(raw: bytes) -> None:
    with contextlib.suppress(errors.JournaldError):
        records.decode(raw)


@settings(max_examples=150)
@given(st.dictionaries(st.sampled_from(ENVELOPE_KEYS), json_values, max_size=8))
def test_decoding_any_json_object_raises_only_typed_errors(obj: dict[str, Any]) -> None:
    raw = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    try:
        rec = records.decode(raw)
    except errors.JournaldError:
        return
    assert rec.raw == raw


@settings(max_examples=60)
@given(journals(max_steps=4), st.data())
def test_decoding_a_record_with_one_envelope_field_replaced_raises_only_typed_errors(
    recs: list[records.Record], data: st.DataObject
) -> None:
    obj = data.draw(st.sampled_from(recs)).as_json()
    key = data.draw(st.sampled_from(["v", "seq", "type", "ts", "prev", "trace"]))
    obj[key] = data.draw(json_values)
    with contextlib.suppress(errors.JournaldError):
        records.decode(records.canonical_json(obj))


ENV = {
    "v": 1,
    "seq": 1,
    "type": "journald.v1.record.user",
    "ts": "2026-11-30T12:00:00Z",
    "prev": records.GENESIS,
    "user": {"content": []},
}


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"v": True}, errors.VersionUnsupported),
        ({"v": 1.0}, errors.VersionUnsupported),
        ({"v": "1"}, errors.VersionUnsupported),
        ({"v": 2}, errors.VersionUnsupported),
        ({"type": []}, errors.InvalidRecord),
        ({"type": {}}, errors.InvalidRecord),
        ({"type": "journald.v1.record.nope"}, errors.InvalidRecord),
        ({"seq": True}, errors.InvalidRecord),
        ({"seq": 0}, errors.InvalidRecord),
        ({"seq": 2**53}, errors.InvalidRecord),
        ({"ts": 5}, errors.InvalidRecord),
        ({"trace": "abc"}, errors.InvalidRecord),
        ({"user": None}, errors.InvalidRecord),
        ({"meta": {}}, errors.InvalidRecord),
    ],
)
def test_from_json_refuses_a_malformed_envelope_with_a_typed_error(
    change: dict[str, Any], error: type[errors.JournaldError]
) -> None:
    with pytest.raises(error):
        records.from_json({**ENV, **change})
    records.from_json(ENV)  # the unchanged envelope is fine
