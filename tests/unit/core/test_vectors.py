"""The daemon passes the cross-language vectors in tests/vectors/ (the same files the Go and
TypeScript clients pass). The files are checked in and never rewritten here."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from journald.core import fingerprint, records, schema
from journald.core.fold import fold

VECTORS = Path(__file__).resolve().parents[2] / "vectors"


def _load(name: str) -> dict[str, Any]:
    raw = (VECTORS / name).read_bytes()
    raw.decode("ascii")  # the files themselves are pure ASCII, readable by any parser
    doc: dict[str, Any] = json.loads(raw)
    return doc


CANONICAL = _load("canonical.json")["cases"]
FINGERPRINT = _load("fingerprint.json")["cases"]
RECORDS = _load("records.json")


def _no_floats(value: Any) -> bool:
    if isinstance(value, float):
        return False
    if isinstance(value, dict):
        return all(_no_floats(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_floats(v) for v in value)
    return True


def _names(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


@pytest.mark.parametrize("case", CANONICAL, ids=_names(CANONICAL))
def test_canonical_json_vector(case: dict[str, Any]) -> None:
    assert _no_floats(case["value"])
    got = records.canonical_json(case["value"])
    assert got.decode("utf-8") == case["canonical"]
    assert hashlib.sha256(got).hexdigest() == case["sha256"] == records.sha256_hex(got)
    assert json.loads(case["canonical"]) == case["value"]


def test_canonical_vectors_cover_the_promised_cases() -> None:
    texts = "".join(c["canonical"] for c in CANONICAL)
    for needle in ["\\n", "\\t", "\\u0000", "\\u001f", '\\"', "</script>", "&", "<", ">"]:
        assert needle in texts, needle
    for char in ["\u2028", "\u2029", "中", "😀", "\u0301", "\u007f"]:
        assert char in texts, repr(char)
    assert "\\u2028" not in texts
    assert "\\u003c" not in texts
    assert "\\/" not in texts
    values = json.dumps([c["value"] for c in CANONICAL])
    assert "9007199254740991" in values
    assert "-9007199254740991" in values
    assert {"{}", "[]", "true", "null"} <= {c["canonical"] for c in CANONICAL}
    assert len(set(_names(CANONICAL))) == len(CANONICAL)


@pytest.mark.parametrize("case", FINGERPRINT, ids=_names(FINGERPRINT))
def test_fingerprint_vector(case: dict[str, Any]) -> None:
    assert _no_floats(case["tools"])
    assert fingerprint.hash_system_prompt(case["system_prompt"]) == case["system_prompt_sha256"]
    assert fingerprint.hash_tools(case["tools"]) == case["tools_sha256"]
    fp = fingerprint.compute(
        provider="p", model="m", system_prompt=case["system_prompt"], tools=case["tools"]
    )
    assert fp.system_prompt_sha256 == case["system_prompt_sha256"]
    assert fp.tools_sha256 == case["tools_sha256"]


def test_fingerprint_vectors_pin_that_tool_order_matters() -> None:
    by_name = {c["name"]: c for c in FINGERPRINT}
    a, b = (
        by_name["two_tools_in_declared_order"],
        by_name["two_tools_other_order_hashes_differently"],
    )
    assert sorted(map(json.dumps, a["tools"])) == sorted(map(json.dumps, b["tools"]))
    assert a["tools_sha256"] != b["tools_sha256"]
    assert len({c["system_prompt_sha256"] for c in FINGERPRINT}) >= 4


@pytest.mark.parametrize("case", RECORDS["cases"], ids=_names(RECORDS["cases"]))
def test_record_vector(case: dict[str, Any]) -> None:
    assert _no_floats(case["record"])
    rec = records.from_json(case["record"])
    assert rec.raw.decode("utf-8") == case["canonical"]
    assert rec.hash == case["sha256"]
    again = records.decode(case["canonical"].encode("utf-8"))
    assert again.raw == rec.raw
    assert again.as_json() == case["record"]
    schema.validate_record(rec)


def test_record_vectors_cover_every_kind() -> None:
    kinds = {records.KIND_OF[c["record"]["type"]] for c in RECORDS["cases"]}
    assert kinds == set(records.KINDS)
    assert any("trace" in c["record"] for c in RECORDS["cases"])


def test_record_vector_chain_links_each_record_to_the_previous_hash() -> None:
    chain = [records.from_json(obj) for obj in RECORDS["chain"]]
    assert [r.seq for r in chain] == list(range(1, len(chain) + 1))
    assert chain[0].prev == records.GENESIS
    for before, rec in itertools.pairwise(chain):
        assert rec.prev == before.hash == hashlib.sha256(before.raw).hexdigest()
    assert {r.kind for r in chain} == set(records.KINDS)
    state = fold(chain)
    assert state.last_hash == chain[-1].hash
    assert state.completed
