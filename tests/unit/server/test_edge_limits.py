"""The pure limits of the RPC edge: JSON nesting found without recursion, timestamps with a
UTC offset, integers beyond 2^53, and refusals whose trailers fit their budget whatever the
error carries."""

from __future__ import annotations

import json
import random
from typing import Any

import grpc
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from journald.core.errors import InvalidRecord, JournaldError, Locked, clip
from journald.core.records import (
    MAX_DOCUMENT_DEPTH,
    MAX_JSON_DEPTH,
    MAX_SAFE_INT,
    json_too_deep,
    parse_json,
    utc_ts_of,
)
from journald.core.schema import validate_payload
from journald.server.edge import TRAILER_BUDGET_BYTES, refusal

TRICKY = ["", "[", "]]", "{", '"', "\\", '\\"[', "é", ":,", "a\nb"]  # what a naive count trips on


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


@st.composite
def deep_values(draw: st.DrawFn) -> Any:
    """A JSON value nested about as deep as the limit, with siblings and tricky strings."""
    rnd = random.Random(draw(st.integers(0, 2**32)))  # one draw: the shape needs hundreds
    leaf = lambda: rnd.choice([None, True, 3, -2, *TRICKY])  # noqa: E731
    value: Any = leaf()
    for _ in range(rnd.randint(MAX_JSON_DEPTH - 6, MAX_JSON_DEPTH + 6)):
        siblings = [leaf() for _ in range(rnd.randint(0, 2))]
        if rnd.random() < 0.5:
            value = {rnd.choice(TRICKY): value, **{f"k{i}": s for i, s in enumerate(siblings)}}
        else:
            value = rnd.choice([[*siblings, value], [value, *siblings]])
    return value


@given(deep_values(), st.booleans())
def test_the_depth_check_agrees_with_the_real_nesting(value: Any, spaced: bool) -> None:
    data = json.dumps(value, ensure_ascii=False, indent=1 if spaced else None).encode()
    assert json_too_deep(data) == (depth(value) > MAX_JSON_DEPTH)
    assert json_too_deep(data, MAX_DOCUMENT_DEPTH) == (depth(value) > MAX_DOCUMENT_DEPTH)


@pytest.mark.parametrize(
    ("data", "deep"),
    [
        (b"[" * 100_000, True),
        (b"{" * (MAX_JSON_DEPTH + 1), True),
        (b"[" * MAX_JSON_DEPTH, False),  # not JSON, but the parser fails before any harm
        (b"]" * 100_000, False),
        (b'["' + b"[" * 100_000 + b'"]', False),  # brackets inside a string do not nest
        (b'["\\"' + b"[" * 1000 + b'"]', False),  # nor after an escaped quote
    ],
)
def test_the_depth_check_handles_unbalanced_and_quoted_brackets(data: bytes, deep: bool) -> None:
    assert json_too_deep(data) is deep


def test_parse_json_names_the_field_and_the_limit() -> None:
    with pytest.raises(InvalidRecord) as info:
        parse_json(b"[" * 100_000, "user.content_json")
    assert "user.content_json" in info.value.message
    assert str(MAX_JSON_DEPTH) in info.value.message
    assert parse_json(b'[{"a":[1]}]', "f") == [{"a": [1]}]


@pytest.mark.parametrize(
    ("ts", "stored"),
    [
        ("2026-11-30T12:00:00.000000+00:00", "2026-11-30T12:00:00.000000Z"),
        ("2026-11-30T12:00:00+00:00", "2026-11-30T12:00:00Z"),
        ("2026-11-30T12:00:00.000000Z", "2026-11-30T12:00:00.000000Z"),
        ("not a time", "not a time"),  # the schema refuses it, naming the pattern
    ],
)
def test_a_utc_timestamp_is_stored_with_z(ts: str, stored: str) -> None:
    assert utc_ts_of(ts, "ts") == stored


@pytest.mark.parametrize(
    ("ts", "says"),
    [
        ("2026-11-30T12:00:00.000000-00:00", "unknown local offset"),
        ("2026-11-30T13:00:00.000000+01:00", "UTC only, end with Z"),
        ("2026-11-30T07:00:00-05:00", "UTC only, end with Z"),
    ],
)
def test_other_offsets_are_refused_saying_utc_only(ts: str, says: str) -> None:
    with pytest.raises(InvalidRecord, match=says):
        utc_ts_of(ts, "ts")


@pytest.mark.parametrize("value", [MAX_SAFE_INT + 1, -(MAX_SAFE_INT + 1), 10**40])
def test_integers_beyond_2_53_are_refused_naming_their_path(value: int) -> None:
    block = {"type": "text", "text": "x", "extra": [0, {"n": value}]}
    with pytest.raises(InvalidRecord) as info:
        validate_payload("user", {"content": [block]})
    assert "user.content[0].extra[1].n" in info.value.message
    assert "2^53" in info.value.message
    validate_payload("user", {"content": [{**block, "extra": [MAX_SAFE_INT, -MAX_SAFE_INT]}]})


big_text = st.text(max_size=10_000)


@given(
    message=big_text,
    metadata=st.dictionaries(st.text(max_size=40), big_text, max_size=20),
    diff=st.lists(big_text, max_size=30),
)
def test_a_refusal_fits_its_budget_whatever_the_error_carries(
    message: str, metadata: dict[str, str], diff: list[str]
) -> None:
    err = JournaldError(message + " retry later", metadata=metadata, diff=diff)
    out = refusal(err)
    assert out.size_bytes <= TRAILER_BUDGET_BYTES
    assert out.details.endswith("retry later")  # the advice at the end survives a cut
    assert out.status == grpc.StatusCode.INTERNAL


def test_a_locked_refusal_keeps_every_holder_field_when_they_are_short() -> None:
    err = Locked("run r is held by bot; wait", metadata={"holder_name": "bot", "holder_pid": 7})
    out = refusal(err)
    assert out.status == grpc.StatusCode.ABORTED
    assert out.details == "locked: run r is held by bot; wait"
    assert b"holder_name" in out.trailers[0][1]


@given(st.text(max_size=3000), st.integers(32, 2000), st.booleans())
def test_clip_fits_keeping_the_head_and_the_tail(text: str, limit: int, keep_tail: bool) -> None:
    assume("…" not in text)
    out = clip(text, limit, keep_tail)
    if len(text.encode()) <= limit:
        assert out == text
        return
    assert len(out.encode()) <= limit
    assert text.startswith(out[: out.index("…")])
    assert text.endswith(out[out.rindex("…") + 1 :])
