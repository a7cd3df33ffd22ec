"""``strict_json``'s fast path (orjson, kept only when it writes the bytes back exactly) gives
what the reference strict parser gives: the same value with the same types and key order, or
the same refusal with the same message, for canonical text, text in other spellings
(spaces, unsorted keys, escapes), repeated keys, NaN/Infinity, big integers, floats, lone
surrogates, deep nesting and random bytes; and canonical text, what every client sends,
never reaches the reference parser."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from journald_client.codec import blocks_json

from journald.core import records
from journald.core.errors import InvalidRecord
from journald.core.records import (
    MAX_JSON_DEPTH,
    _strict_json_reference,
    canonical_json,
    parse_json,
    strict_json,
)

VECTORS = Path(__file__).resolve().parents[2] / "vectors"

# Keys and strings: every code point, surrogates included (they reach the text through
# ensure_ascii escapes or surrogatepass bytes, and must be refused the same way).
any_text = st.text(max_size=8)
utf8_text = st.text(st.characters(codec="utf-8"), max_size=8)
numbers = st.one_of(
    st.integers(),  # beyond 2^53 and 2^64 as well
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([2**53, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1]),
    st.floats(),  # NaN, ±Infinity, -0.0, subnormals
)
scalars = st.one_of(st.none(), st.booleans(), numbers, any_text)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(any_text, inner, max_size=4)
    ),
    max_leaves=24,
)
# An object written from a list of pairs, so a key can appear twice.
pairs_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda v: ("list", v)),
        st.lists(st.tuples(st.sampled_from(["a", "b", "é", "a"]), inner), max_size=4).map(
            lambda v: ("pairs", v)
        ),
    ),
    max_leaves=16,
)


def _write_pairs(v: Any, sep: str) -> str:
    if isinstance(v, tuple) and v[0] == "list":
        return "[" + sep.join(_write_pairs(x, sep) for x in v[1]) + "]"
    if isinstance(v, tuple):
        return "{" + sep.join(f"{json.dumps(k)}:{_write_pairs(x, sep)}" for k, x in v[1]) + "}"
    return json.dumps(v)


def _render(value: object, how: str) -> bytes:
    """``value`` as JSON text in one of several spellings (``NaN`` and surrogates kept)."""
    if how == "orjson":
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    if how == "ascii":  # non-ASCII and surrogates as \\uXXXX escapes
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    options: dict[str, dict[str, Any]] = {
        "canonical": {"sort_keys": True, "separators": (",", ":")},
        "spaces": {"sort_keys": True},
        "indent": {"indent": 1},
        "unsorted": {"separators": (",", ":")},
    }
    return json.dumps(value, ensure_ascii=False, **options[how]).encode("utf-8", "surrogatepass")


def _typed(v: Any) -> object:
    """A value with its types spelled out: ``1``, ``1.0`` and ``True`` compare equal in
    Python, ``-0.0`` equals ``0.0`` and NaN equals nothing; dict key order is kept."""
    if isinstance(v, dict):
        return ("dict", [(k, _typed(x)) for k, x in v.items()])
    if isinstance(v, list):
        return ("list", [_typed(x) for x in v])
    if isinstance(v, float):
        return ("float", repr(v), math.copysign(1.0, v))
    return (type(v).__name__, v)


def _outcome(parse: Any, data: bytes) -> object:
    try:
        return ("value", _typed(parse(data, "f")))
    except InvalidRecord as exc:
        return ("refused", exc.code, exc.message, exc.metadata)


def _same(data: bytes) -> None:
    assert _outcome(strict_json, data) == _outcome(_strict_json_reference, data)


spellings = st.sampled_from(["canonical", "orjson", "spaces", "indent", "unsorted", "ascii"])


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(values, spellings)
def test_any_value_in_any_spelling_parses_as_the_reference_parses_it(
    value: object, how: str
) -> None:
    try:
        data = _render(value, how)
    except (TypeError, ValueError, UnicodeEncodeError):  # orjson: >64-bit int, surrogate
        data = _render(value, "canonical")
    _same(data)


@settings(max_examples=300)
@given(pairs_values, st.sampled_from([",", ", "]))
def test_repeated_keys_are_refused_as_the_reference_refuses_them(v: Any, sep: str) -> None:
    _same(_write_pairs(v, sep).encode("utf-8", "surrogatepass"))


@settings(max_examples=300)
@given(st.binary(max_size=24))
def test_random_bytes_parse_or_are_refused_as_the_reference_does(data: bytes) -> None:
    _same(data)


@settings(max_examples=300)
@given(
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), utf8_text),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(utf8_text, inner, max_size=4)
        ),
        max_leaves=16,
    ),
    st.data(),
)
def test_canonical_bytes_with_one_byte_changed_parse_as_the_reference_parses_them(
    value: object, data: st.DataObject
) -> None:
    raw = bytearray(canonical_json(value))
    at = data.draw(st.integers(0, len(raw)))
    edit = data.draw(st.sampled_from(["insert", "delete", "replace"]))
    byte = data.draw(st.sampled_from(b' ,:"\\{}[]0-.eu\x00\xff\xc3a'))
    if edit == "insert":
        raw[at:at] = bytes([byte])
    elif raw and edit == "delete":
        del raw[min(at, len(raw) - 1)]
    elif raw:
        raw[min(at, len(raw) - 1)] = byte
    _same(bytes(raw))


@settings(max_examples=300)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_as_orjson_writes_it_reads_back_as_the_same_float(f: float) -> None:
    # the fast path's argument for floats: the reference parser reads orjson's text back
    data = orjson.dumps(f)
    assert _typed(strict_json(data, "f")) == _typed(_strict_json_reference(data, "f"))
    assert _typed(strict_json(data, "f")) == _typed(f)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b" ",
        b"1",
        b'"x"',
        b"null",
        b"-0",
        b"-0.0",
        b"0.0",
        b"1e400",
        b"1E5",
        b"1e5",
        b"1e+16",
        b"NaN",
        b"[Infinity]",
        b"[-Infinity]",
        b"9007199254740992",
        b"18446744073709551615",
        b"18446744073709551616",
        b"-9223372036854775809",
        b"1" * 5000,  # beyond Python's int-from-string digit limit
        b'{"a":1,"a":1}',
        b'{"b":1,"a":2}',
        b'"\\ud800"',
        b'["\\udfff"]',
        b'{"\\ud800":1}',
        b'"\\ud83d\\ude00"',
        b'"\xed\xa0\x80"',  # a surrogate written as UTF-8 (not UTF-8)
        b'"\xff"',
        b"\xef\xbb\xbf[]",  # a byte order mark
        b'"\\u00e9"',
        b'"\\/"',
        b'"\x01"',  # a raw control character
        b'"\x7f\xe2\x80\xa8"',
        b"[1,]",
        b"[1] ",
        b"[1]\n",
        b"[" * 254 + b"]" * 254,
        b"[" * 255 + b"]" * 255,  # deeper than orjson writes
        b"[" * 300 + b"]" * 300,
    ],
)
def test_edge_cases_parse_or_are_refused_as_the_reference_does(data: bytes) -> None:
    _same(data)


def test_canonical_bytes_never_reach_the_reference_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refusing(data: bytes, where: str) -> Any:
        raise AssertionError(f"the reference parser ran for canonical bytes: {data[:40]!r}")

    monkeypatch.setattr(records, "_strict_json_reference", refusing)
    content = [
        {"type": "text", "text": "é \n \u2028 <&> \x7f"},
        {"type": "tool_use", "id": "t1", "name": "read", "input": '{"path": "a.py"}'},
    ]
    # what the Python client sends, and the shared vectors' canonical texts
    assert strict_json(blocks_json(content), "f") == content
    cases = json.loads((VECTORS / "canonical.json").read_text())["cases"]
    for case in cases:
        assert strict_json(case["canonical"].encode(), "f") == case["value"]


def test_text_in_another_spelling_still_reaches_the_reference_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bytes] = []

    def counting(data: bytes, where: str) -> Any:
        seen.append(data)
        return _strict_json_reference(data, where)

    monkeypatch.setattr(records, "_strict_json_reference", counting)
    for data in (b'[{"a": 1}]', b'{"b":1,"a":2}', b'["\\u00e9"]', b"-0"):
        strict_json(data, "f")
    with pytest.raises(InvalidRecord, match="appears twice"):
        strict_json(b'{"a":1,"a":1}', "f")  # orjson keeps one: written back, it is shorter
    assert len(seen) == 5


def test_the_nesting_limit_still_holds_for_canonical_bytes() -> None:
    ok = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert parse_json(ok, "f") == strict_json(ok, "f")
    deep = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    assert canonical_json(orjson.loads(deep)) == deep  # the fast path would take it
    with pytest.raises(InvalidRecord, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        parse_json(deep, "f")
