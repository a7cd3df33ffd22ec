"""The client computes the fingerprint locally, exactly as the shared vectors pin it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from journald_client import fingerprint as cfp

from journald.core import fingerprint as dfp
from journald.core.records import canonical_json as daemon_canonical
from tests.profiles import scaled

VECTORS = Path(__file__).resolve().parents[2] / "vectors"


def _cases(name: str) -> list[dict[str, Any]]:
    path = VECTORS / name
    assert path.exists(), f"shared test vectors {path} are missing"
    cases = json.loads(path.read_text(encoding="utf-8"))["cases"]
    assert cases, f"{path} holds no cases"
    return list(cases)


def test_every_fingerprint_vector_hashes_to_its_pinned_values() -> None:
    for case in _cases("fingerprint.json"):
        assert cfp.hash_system_prompt(case["system_prompt"]) == case["system_prompt_sha256"], case[
            "name"
        ]
        assert cfp.hash_tools(case["tools"]) == case["tools_sha256"], case["name"]


def test_every_canonical_vector_serializes_to_its_pinned_bytes() -> None:
    for case in _cases("canonical.json"):
        raw = cfp.canonical_json(case["value"])
        assert raw == case["canonical"].encode("utf-8"), case["name"]
        assert cfp.sha256_hex(raw) == case["sha256"], case["name"]


def test_compute_fills_every_field_and_round_trips_through_protobuf() -> None:
    fp = cfp.compute(
        provider="anthropic",
        model="claude-x",
        system_prompt=["You are careful.", "Be brief."],
        tools=[{"name": "read", "input_schema": {"type": "object"}}],
        thinking="enabled",
        max_tokens=2048,
        max_iterations=12,
    )
    assert fp.system_prompt_sha256 == cfp.sha256_hex(b'["You are careful.","Be brief."]')
    assert fp.tools_sha256 == cfp.sha256_hex(b'[{"input_schema":{"type":"object"},"name":"read"}]')
    assert cfp.Fingerprint.from_pb(fp.to_pb()) == fp


def test_a_bare_string_system_prompt_is_one_block() -> None:
    assert cfp.hash_system_prompt("hi") == cfp.hash_system_prompt(["hi"])


def test_tool_order_is_significant_but_key_order_is_not() -> None:
    a, b = {"name": "a", "x": 1}, {"x": 2, "name": "b"}
    assert cfp.hash_tools([a, b]) != cfp.hash_tools([b, a])
    assert cfp.hash_tools([{"x": 1, "name": "a"}]) == cfp.hash_tools([a])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=scaled(60))
@given(
    prompt=st.lists(st.text(), max_size=4),
    tools=st.lists(st.dictionaries(st.text(), json_values, max_size=4), max_size=4),
)
def test_the_client_and_the_daemon_hash_any_configuration_identically(
    prompt: list[str], tools: list[dict[str, Any]]
) -> None:
    mine = cfp.compute(provider="p", model="m", system_prompt=prompt, tools=tools)
    theirs = dfp.compute(provider="p", model="m", system_prompt=prompt, tools=tools)
    assert mine.as_json() == theirs.as_json()


@settings(max_examples=scaled(100))
@given(value=json_values)
def test_the_client_and_the_daemon_canonicalize_any_value_identically(value: Any) -> None:
    assert cfp.canonical_json(value) == daemon_canonical(value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_numbers_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="Out of range"):
        cfp.canonical_json([bad])
