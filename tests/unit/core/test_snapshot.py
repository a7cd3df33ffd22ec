"""Fold snapshots (``journald.core.snapshot``): a stored state continues exactly like the fold."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core.fold import RunState, fold
from journald.core.records import Record, canonical_json
from journald.core.snapshot import SnapshotUnreadable, decode_state, encode_state
from tests.profiles import scaled
from tests.unit.strategies import journals


def stored(state: RunState) -> Any:
    """The document as a store hands it back: canonical JSON bytes parsed again."""
    return json.loads(canonical_json(encode_state(state)))


@settings(max_examples=scaled(40))
@given(journals(state=True))
def test_a_decoded_snapshot_folded_with_the_rest_equals_the_whole_fold_at_every_split(
    recs: list[Record],
) -> None:
    whole = fold(recs)
    for k in range(len(recs) + 1):
        resumed = decode_state(stored(fold(recs[:k])))
        assert fold(recs[k:], start=resumed) == whole, f"split at {k}"


@settings(max_examples=scaled(20))
@given(journals(state=True))
def test_folding_into_a_decoded_snapshot_leaves_the_document_unchanged(
    recs: list[Record],
) -> None:
    doc = encode_state(fold(recs[:1]))
    before = json.loads(canonical_json(doc))
    fold(recs[1:], start=decode_state(doc))
    fold(recs[1:], start=decode_state(doc))
    assert json.loads(canonical_json(doc)) == before


@settings(max_examples=scaled(30))
@given(journals(state=True), st.data())
def test_a_snapshot_missing_any_field_is_refused_as_unreadable(
    recs: list[Record], data: st.DataObject
) -> None:
    doc = stored(fold(recs))
    del doc[data.draw(st.sampled_from(sorted(doc)))]
    with pytest.raises(SnapshotUnreadable):
        decode_state(doc)


@pytest.mark.parametrize(
    "damage",
    [
        {"v": 2},
        {"last_seq": "7"},
        {"last_seq": True},
        {"messages": [{"role": "user"}]},
        {"messages": "not a list"},
        {"pending": {"message": {"role": "assistant", "content": []}}},
        {"state": [["ns", [["k", 1, "t"]]]]},
        {"counters": {"llm_calls": -0.5}},
    ],
)
def test_a_damaged_or_foreign_snapshot_is_refused_as_unreadable(damage: dict[str, Any]) -> None:
    doc = {**stored(fold([])), **damage}
    with pytest.raises(SnapshotUnreadable):
        decode_state(doc)


@pytest.mark.parametrize("doc", [None, [], "snapshot", 3, {}])
def test_a_value_that_is_no_snapshot_document_is_refused_as_unreadable(doc: object) -> None:
    with pytest.raises(SnapshotUnreadable):
        decode_state(doc)
