"""Decoding stored or received bytes never crashes: it returns a record or raises a typed
journald error (the storage layer turns those into store_corrupted naming the line)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core import errors, records
from tests.profiles import scaled
from tests.unit.strategies import journals, json_values

ENVELOPE_KEYS = ["v", "seq", "type", "ts", "prev", "trace", "user", "meta", "assistant"]


@settings(max_examples=scaled(150))
@given(st.binary(max_size=200))
def test_decoding_arbitrary_bytes_raises_only_typed_errors(raw: bytes) -> None:
    with contextlib.suppress(errors.JournaldError):
        records.decode(raw)


@settings(max_examples=scaled(150))
@given(st.dictionaries(st.sampled_from(ENVELOPE_KEYS), json_values, max_size=8))
def test_decoding_any_json_object_raises_only_typed_errors(obj: dict[str, Any]) -> None:
    raw = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    try:
        rec = records.decode(raw)
    except errors.JournaldError:
        return
    assert rec.raw == raw


@settings(max_examples=scaled(60))
@given(journals(max_steps=4), st.data())
def test_decoding_a_record_with_one_envelope_field_replaced_raises_only_typed_errors(
    recs: list[records.Record], data: st.DataObject
) -> None:
    obj = data.draw(st.sampled_from(recs)).as_json()
    key = data.draw(st.sampled_from(["v", "seq", "type", "ts", "prev", "trace"]))
    obj[key] = data.draw(json_values)
    with contextlib.suppress(errors.JournaldError):
        records.decode(records.canonical_json(obj))


ENV: dict[str, Any] = {
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
def test_from_json_and_the_stored_decode_refuse_a_malformed_envelope_with_a_typed_error(
    change: dict[str, Any], error: type[errors.JournaldError]
) -> None:
    with pytest.raises(error):
        records.from_json({**ENV, **change})
    with pytest.raises(error):
        records.decode_stored(records.canonical_json({**ENV, **change}))
    records.from_json(ENV)  # the unchanged envelope is fine
    records.decode_stored(records.canonical_json(ENV))


@settings(max_examples=scaled(60))
@given(journals(max_steps=6))
def test_the_stored_decode_of_canonical_bytes_is_the_full_decode(
    recs: list[records.Record],
) -> None:
    for rec in recs:
        assert records.decode_stored(rec.raw) == records.decode(rec.raw) == rec


def test_the_stored_decode_keeps_altered_bytes_as_read_so_their_hash_no_longer_links() -> None:
    """It does not re-encode: bytes changed on disk (here whitespace, still valid JSON) keep
    their own hash, which is what the next record's ``prev`` is checked against."""
    rec = records.make_record(1, "user", {"content": []}, records.GENESIS, ENV["ts"])
    altered = rec.raw.replace(b'"seq":1', b'"seq": 1')
    with pytest.raises(errors.InvalidRecord, match="canonical"):
        records.decode(altered)
    stored = records.decode_stored(altered)
    assert (stored.raw, stored.hash) == (altered, records.sha256_hex(altered))
    assert stored.hash != rec.hash


@settings(max_examples=scaled(150))
@given(st.binary(max_size=200))
def test_the_stored_decode_of_arbitrary_bytes_raises_only_typed_errors(raw: bytes) -> None:
    with contextlib.suppress(errors.JournaldError):
        records.decode_stored(raw)
