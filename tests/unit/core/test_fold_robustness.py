"""Damaged input never crashes the core: the fold folds or raises store_corrupted naming the
seq, and schema validation passes or raises invalid_record naming a field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core import errors, governance, schema
from journald.core.fold import fold
from journald.core.records import KINDS, Record, make_record
from tests.builders import JournalBuilder
from tests.profiles import scaled
from tests.unit.strategies import journals, json_values


@st.composite
def damaged_journals(draw: st.DrawFn) -> tuple[list[Record], int]:
    """A generated journal with one record's payload damaged at one place."""
    recs = draw(journals(max_steps=6))
    i = draw(st.integers(0, len(recs) - 1))
    payload: Any = copy.deepcopy(dict(recs[i].payload))
    # Walk down to a random dict or list inside the payload and damage it there.
    target = payload
    for _ in range(draw(st.integers(0, 4))):
        children = (
            list(target.values())
            if isinstance(target, dict)
            else target
            if isinstance(target, list)
            else []
        )
        children = [c for c in children if isinstance(c, dict | list)]
        if not children:
            break
        target = draw(st.sampled_from(children))
    if isinstance(target, dict) and target and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(target)))
        if draw(st.booleans()):
            del target[key]
        else:
            target[key] = draw(json_values)
    elif isinstance(target, list) and target:
        target[draw(st.integers(0, len(target) - 1))] = draw(json_values)
    elif isinstance(target, dict):
        target[draw(st.sampled_from(["id", "type", "role", "content", "x"]))] = draw(json_values)
    rec = recs[i]
    damaged = make_record(rec.seq, rec.kind, payload, rec.prev, rec.ts, rec.trace)
    return [*recs[:i], damaged, *recs[i + 1 :]], rec.seq


@settings(max_examples=scaled(80))
@given(damaged_journals())
def test_a_damaged_payload_folds_or_is_store_corrupted_naming_its_seq(
    case: tuple[list[Record], int],
) -> None:
    recs, seq = case
    refused: errors.StoreCorrupted | None = None
    try:
        state = fold(recs)
    except errors.StoreCorrupted as exc:
        refused = exc
    if refused is not None:
        assert refused.metadata["seq"] == str(seq)
    else:
        governance.governed_messages(state)  # and the governed view can always be built


def _refusal(check: Callable[[], None]) -> errors.InvalidRecord | None:
    try:
        check()
    except errors.InvalidRecord as exc:
        return exc
    return None


@settings(max_examples=scaled(100))
@given(st.sampled_from(KINDS), st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_validating_any_payload_passes_or_names_a_field(kind: str, payload: dict[str, Any]) -> None:
    refused = _refusal(lambda: schema.validate_payload(kind, payload))
    if refused is not None:
        assert refused.metadata["field"].startswith(kind)
        assert f"field {refused.metadata['field']}" in refused.message


@settings(max_examples=scaled(40))
@given(damaged_journals())
def test_validating_a_damaged_record_passes_or_names_a_field(
    case: tuple[list[Record], int],
) -> None:
    recs, seq = case
    rec = recs[seq - 1]
    refused = _refusal(lambda: schema.validate_record(rec))
    if refused is not None:
        assert refused.metadata["field"].startswith(rec.kind)


def test_a_quarantine_rebase_whose_covered_range_is_damaged_still_folds() -> None:
    # found by the property above under the CI profile: ``covered: true`` crashed the note
    b = JournalBuilder("damaged-cover")
    b.add("rebase", {"reason": "quarantine", "messages": [], "covered": True})
    state = fold(b.records)
    assert state.last_seq == 2
    governance.governed_messages(state)
