"""Where ``JournaldSessionStore`` puts a session (pure parts): run ids that keep projects and
store prefixes apart and are always valid journald run ids, namespaces any subpath can have,
and the JSON-lines encoding that gives back every entry exactly, key order included."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from journald_client import errors
from journald_client.claude_agent import (
    NS_MAIN,
    decode_entries,
    encode_entries,
    namespace_for,
    run_id_for,
)

from tests.profiles import scaled

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
any_text = st.text(st.characters(exclude_categories=[]))  # lone surrogates too
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | any_text,  # a lone surrogate: UTF-8 cannot carry it, a JSON escape can
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=8,
)
entries = st.lists(
    st.dictionaries(any_text, json_values, max_size=5).map(lambda d: {"type": "x", **d}),
    max_size=5,
)


@settings(max_examples=scaled(100))
@given(entries)
def test_entries_come_back_exactly_with_their_key_order(batch: list[dict[str, Any]]) -> None:
    back = decode_entries(encode_entries(batch))  # type: ignore[arg-type]
    assert [json.dumps(e) for e in back] == [json.dumps(e) for e in batch]


def test_a_session_uuid_is_kept_readable_and_projects_and_prefixes_stay_apart() -> None:
    sid = "3f1c2a9e-5b7d-4c1e-9a8f-0123456789ab"
    run = run_id_for("", "-home-dev-app", sid)
    assert run.startswith("ca-")
    assert run.endswith(f"-{sid}")
    assert run != run_id_for("", "-home-dev-other", sid)
    assert run != run_id_for("tenant-2", "-home-dev-app", sid)
    assert run == run_id_for("", "-home-dev-app", sid)


@given(any_text, any_text, any_text.filter(bool))
def test_every_session_key_makes_a_valid_run_id(prefix: str, project: str, sid: str) -> None:
    run = run_id_for(prefix, project, sid)
    assert RUN_ID.match(run)
    assert len(run.encode()) <= 128


def test_a_key_without_a_session_id_is_refused_naming_the_field() -> None:
    with pytest.raises(errors.InvalidRequest, match="session_id") as refused:
        run_id_for("", "proj", "")
    assert refused.value.metadata["field"] == "session_id"


@given(any_text.filter(bool))
def test_every_subpath_has_a_namespace_of_its_own_within_the_limit(subpath: str) -> None:
    ns = namespace_for(subpath)
    assert ns != NS_MAIN
    assert len(ns) <= 256
    assert namespace_for(subpath + "/") != ns
