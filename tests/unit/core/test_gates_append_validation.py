"""Resume gates and fingerprint diff (docs/protocol.md#resume-gates), append rules
(docs/protocol.md#seq-rules), schema enforcement (docs/protocol.md#stored-record-form)
and the error table (§10)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from journald.core import errors, fingerprint, records, schema
from journald.core.fingerprint import Fingerprint
from journald.core.records import GENESIS, make_record
from tests.builders import (
    FP,
    TS,
    assistant_payload,
    meta_payload,
    result_payload,
    terminal_payload,
    text,
    tool_use,
    user_payload,
)

# --- fingerprint gates ---------------------------------------------------------------------


def _gates(
    current: Fingerprint,
    *,
    completed: bool = False,
    stored_interactive: bool = False,
    current_interactive: bool = False,
    force: bool = False,
) -> None:
    fingerprint.check_gates(
        run_id="run-1",
        stored=FP,
        stored_interactive=stored_interactive,
        completed=completed,
        current=current,
        current_interactive=current_interactive,
        force=force,
    )


EVERYTHING_DIFFERENT = dataclasses.replace(
    FP,
    provider="openai",
    model="gpt-x",
    system_prompt_sha256="1" * 64,
    tools_sha256="2" * 64,
    thinking="on",
    max_tokens=2048,
    max_iterations=30,
)


def test_gates_pass_on_an_identical_configuration() -> None:
    _gates(dataclasses.replace(FP))
    _gates(FP, stored_interactive=True, current_interactive=True)


def test_completed_is_the_first_gate() -> None:
    with pytest.raises(errors.Completed) as info:
        _gates(EVERYTHING_DIFFERENT, completed=True, current_interactive=True, force=True)
    assert info.value.code == "completed"
    assert "run-1" in info.value.message


@pytest.mark.parametrize(("stored", "current"), [(True, False), (False, True)])
def test_interactivity_mismatch_is_refused_in_both_directions_before_provider(
    stored: bool, current: bool
) -> None:
    with pytest.raises(errors.InteractivityMismatch) as info:
        _gates(
            EVERYTHING_DIFFERENT,
            stored_interactive=stored,
            current_interactive=current,
            force=True,
        )
    assert info.value.code == "interactivity_mismatch"


def test_provider_change_is_refused_before_drift_and_force_does_not_apply() -> None:
    for force in (False, True):
        with pytest.raises(errors.ProviderChanged) as info:
            _gates(EVERYTHING_DIFFERENT, force=force)
        assert info.value.code == "provider_changed"
        assert "openai" in info.value.message


def test_drift_is_refused_with_a_per_field_diff_and_force_waives_only_drift() -> None:
    drift = dataclasses.replace(EVERYTHING_DIFFERENT, provider=FP.provider)
    with pytest.raises(errors.FingerprintDrift) as info:
        _gates(drift)
    expected = [
        "model: claude-test -> gpt-x",
        "system prompt: changed",
        "tools: changed",
        "thinking: off -> on",
        "max_tokens: 1024 -> 2048",
        "max_iterations: 20 -> 30",
    ]
    assert info.value.diff == expected
    assert info.value.code == "fingerprint_drift"
    for line in expected:
        assert line in info.value.message
    _gates(drift, force=True)  # waived


@pytest.mark.parametrize(
    ("field", "value", "line"),
    [
        ("model", "other", "model: claude-test -> other"),
        ("system_prompt_sha256", "3" * 64, "system prompt: changed"),
        ("tools_sha256", "4" * 64, "tools: changed"),
        ("thinking", "adaptive", "thinking: off -> adaptive"),
        ("max_tokens", 1, "max_tokens: 1024 -> 1"),
        ("max_iterations", 0, "max_iterations: 20 -> 0"),
    ],
)
def test_each_drifted_field_has_its_own_diff_line(field: str, value: Any, line: str) -> None:
    changed = dataclasses.replace(FP, **{field: value})
    assert fingerprint.diff(FP, changed) == [line]
    assert not fingerprint.equal(FP, changed)


def test_provider_is_excluded_from_equal_and_diff() -> None:
    other = dataclasses.replace(FP, provider="openai")
    assert fingerprint.diff(FP, other) == []
    assert fingerprint.equal(FP, other)


def test_the_gate_errors_are_distinct_classes_with_distinct_codes() -> None:
    classes = [
        errors.Completed,
        errors.InteractivityMismatch,
        errors.ProviderChanged,
        errors.FingerprintDrift,
    ]
    assert len(set(classes)) == 4
    assert len({c.code for c in classes}) == 4
    for a in classes:
        assert issubclass(a, errors.GateError)
        assert not any(issubclass(a, b) for b in classes if b is not a)


def test_fingerprint_hashes_follow_the_system_prompt_and_tools() -> None:
    one = fingerprint.compute(provider="p", model="m", system_prompt=["a"], tools=[])
    two = fingerprint.compute(provider="p", model="m", system_prompt=["a", ""], tools=[])
    assert one.system_prompt_sha256 != two.system_prompt_sha256
    assert fingerprint.hash_system_prompt("a") == fingerprint.hash_system_prompt(["a"])
    t1 = fingerprint.hash_tools([{"name": "x", "b": 1, "a": 2}])
    assert t1 == fingerprint.hash_tools([{"a": 2, "name": "x", "b": 1}])  # key order irrelevant
    assert Fingerprint.from_json(FP.as_json()) == FP
    with pytest.raises(errors.InvalidRecord):
        Fingerprint.from_json({"provider": "p"})


# --- append rules ---------------------------------------------------------------------------


def test_check_append_accepts_the_next_seq() -> None:
    assert records.check_append(0, 1, None, "h") == records.APPEND
    assert records.check_append(7, 8, None, "h") == records.APPEND


def test_check_append_answers_an_identical_retry_as_a_duplicate() -> None:
    assert records.check_append(7, 7, "h", "h") == records.DUPLICATE
    assert records.check_append(7, 3, "h3", "h3") == records.DUPLICATE


def test_check_append_refuses_a_gap_naming_the_expected_seq() -> None:
    with pytest.raises(errors.SeqGap) as info:
        records.check_append(7, 9, None, "h", run_id="r")
    assert info.value.metadata == {"run_id": "r", "seq": "9", "last_seq": "7"}
    assert "seq 8" in info.value.message


@pytest.mark.parametrize("stored", ["other", None])
def test_check_append_refuses_different_content_at_a_stored_seq(stored: str | None) -> None:
    with pytest.raises(errors.SeqConflict) as info:
        records.check_append(7, 7, stored, "h", run_id="r")
    assert info.value.code == "seq_conflict"
    assert info.value.metadata["seq"] == "7"


# --- schema enforcement ---------------------------------------------------------------------


def _rec(kind: str, payload: dict[str, Any], **env: Any) -> records.Record:
    return make_record(
        env.get("seq", 2),
        kind,
        payload,
        env.get("prev", GENESIS),
        env.get("ts", TS),
        env.get("trace"),
    )


GOOD = {
    "meta": meta_payload("run-1"),
    "assistant": assistant_payload([text("x"), tool_use("t1")]),
    "tool_result": result_payload("t1"),
    "user": user_payload("hi"),
    "rebase": {"reason": "compaction", "messages": [{"role": "user", "content": [text("s")]}]},
    "terminal": terminal_payload("completed"),
}


@pytest.mark.parametrize("kind", list(GOOD))
def test_validation_accepts_well_formed_records(kind: str) -> None:
    schema.validate_record(_rec(kind, GOOD[kind]))


BAD: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    # (name, expected field, payload, envelope overrides)
    ("unsafe run id", "meta.run_id", {**GOOD["meta"], "run_id": "../etc"}, {}),
    (
        "fingerprint hash not hex",
        "meta.fingerprint.system_prompt_sha256",
        {**GOOD["meta"], "fingerprint": {**FP.as_json(), "system_prompt_sha256": "xyz"}},
        {},
    ),
    (
        "a system prompt smuggled into the fingerprint",
        "meta.fingerprint",
        {**GOOD["meta"], "fingerprint": {**FP.as_json(), "system_prompt": "secret"}},
        {},
    ),
    ("negative iteration", "assistant.iteration", {**GOOD["assistant"], "iteration": -1}, {}),
    ("float iteration", "assistant.iteration", {**GOOD["assistant"], "iteration": 1.5}, {}),
    (
        "float that looks integral",
        "assistant.usage.input_tokens",
        {**GOOD["assistant"], "usage": {**GOOD["assistant"]["usage"], "input_tokens": 10.0}},
        {},
    ),
    (
        "assistant message with user role",
        "assistant.message.role",
        {**GOOD["assistant"], "message": {"role": "user", "content": []}},
        {},
    ),
    (
        "tool_use without name",
        "assistant.message.content[0]",
        {
            **GOOD["assistant"],
            "message": {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "input": ""}],
            },
        },
        {},
    ),
    ("unknown block type", "user.content[0].type", {"content": [{"type": "image"}]}, {}),
    ("empty follow-up", "user.content", {"content": []}, {}),
    (
        "float hidden in an extra block key",
        "user.content[0].x",
        {"content": [{"type": "text", "text": "a", "x": 0.5}]},
        {},
    ),
    ("tool_result without id", "tool_result", {"content": [], "is_error": False}, {}),
    ("unknown terminal reason", "terminal.reason", {"reason": "done"}, {}),
    ("unknown rebase reason", "rebase.reason", {"reason": "tidy", "messages": []}, {}),
    ("timestamp not RFC 3339 UTC", "ts", GOOD["user"], {"ts": "yesterday"}),
    ("prev not a hash", "prev", GOOD["user"], {"prev": "abc"}),
    (
        "trace id wrong length",
        "trace.trace_id",
        GOOD["user"],
        {"trace": {"trace_id": "ab", "span_id": "0" * 16}},
    ),
]


@pytest.mark.parametrize(("name", "field", "payload", "env"), BAD, ids=[b[0] for b in BAD])
def test_validation_refuses_a_bad_record_naming_the_field(
    name: str, field: str, payload: dict[str, Any], env: dict[str, Any]
) -> None:
    kind = field.split(".")[0].split("[")[0]
    kind = kind if kind in records.KINDS else "user"
    with pytest.raises(errors.InvalidRecord) as info:
        schema.validate_record(_rec(kind, payload, **env))
    assert info.value.metadata["field"] == field
    assert f"field {field}" in info.value.message
    assert info.value.code == "invalid_record"


def test_decoding_refuses_other_format_versions_and_non_canonical_bytes() -> None:
    rec = _rec("user", GOOD["user"])
    for version in (0, 2, "1", None):
        obj = rec.as_json()
        obj["v"] = version
        with pytest.raises(errors.VersionUnsupported):
            records.decode(records.canonical_json(obj))
    spaced = rec.raw.replace(b'"seq":2', b'"seq": 2')
    with pytest.raises(errors.InvalidRecord):
        records.decode(spaced)
    with pytest.raises(errors.InvalidRecord):
        records.decode(rec.raw[:-1])


# --- the error table ------------------------------------------------------------------------

SPEC_CODES = {
    "session_not_found": "NOT_FOUND",
    "session_exists": "ALREADY_EXISTS",
    "invalid_id": "INVALID_ARGUMENT",
    "invalid_record": "INVALID_ARGUMENT",
    "seq_gap": "FAILED_PRECONDITION",
    "seq_conflict": "ABORTED",
    "locked": "ABORTED",
    "lease_lost": "FAILED_PRECONDITION",
    "completed": "FAILED_PRECONDITION",
    "interactivity_mismatch": "FAILED_PRECONDITION",
    "provider_changed": "FAILED_PRECONDITION",
    "fingerprint_drift": "FAILED_PRECONDITION",
    "version_unsupported": "INVALID_ARGUMENT",
    "store_corrupted": "DATA_LOSS",
    "turn_running": "FAILED_PRECONDITION",
    "checkpoint_not_found": "NOT_FOUND",
    "session_mismatch": "INVALID_ARGUMENT",
    "checkpoint_import_invalid": "INVALID_ARGUMENT",
    "invalid_request": "INVALID_ARGUMENT",
    "invalid_checkpoint_id": "INVALID_ARGUMENT",
    "invalid_digest": "INVALID_ARGUMENT",
    "response_too_large": "RESOURCE_EXHAUSTED",
    "backend_unavailable": "UNAVAILABLE",
    "storage_full": "RESOURCE_EXHAUSTED",
    "unsupported": "UNIMPLEMENTED",
}


@pytest.mark.parametrize("code", sorted(SPEC_CODES))
def test_every_spec_error_code_has_a_typed_error(code: str) -> None:
    cls = errors.ERRORS_BY_CODE[code]
    assert cls.code == code
    assert cls.grpc_status == SPEC_CODES[code]
    err = errors.from_code(code, "what happened; what to do", {"seq": "3"}, ["model: a -> b"])
    assert type(err) is cls
    assert str(err) == f"{code}: what happened; what to do"
    assert err.metadata == {"seq": "3"}
    assert err.diff == ["model: a -> b"]


def test_an_unknown_code_becomes_the_base_error_keeping_its_code() -> None:
    err = errors.from_code("brand_new", "m")
    assert type(err) is errors.JournaldError
    assert err.code == "brand_new"
    assert set(SPEC_CODES) <= set(errors.ERRORS_BY_CODE)
