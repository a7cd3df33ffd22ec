"""JSON Schema enforcement on the live path (docs/protocol.md#stored-record-form).

The published schema is ``journald/schemas/records.v1.json`` (one document, ``$defs`` per
payload kind). Every record written through the daemon is validated here first: an invalid
record is refused with ``invalid_record`` naming the field, and nothing is written.

Two evaluators of the one schema: the predicates generated from it as Python source
(``journald.core.schema_codegen``, checked against the closure compiler
``journald.core.schema_predicate`` and ``jsonschema``) decide, in a few µs per record;
``jsonschema`` runs only on a refused record, to name the field. Floats are refused
separately (the schema cannot say "integer-valued but not 1.0" the way records need), and so
are integers beyond ±(2^53-1) anywhere in a payload (the schema bounds the fields it names;
content blocks may carry more).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from journald.core.errors import InvalidRecord, clip
from journald.core.records import KINDS, MAX_SAFE_INT, Record
from journald.core.schema_codegen import compile_definitions
from journald.core.schema_predicate import Predicate

SCHEMA_FILE = "records.v1.json"


@cache
def schema_document() -> dict[str, Any]:
    text = resources.files("journald.schemas").joinpath(SCHEMA_FILE).read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


@cache
def _validator(name: str) -> Draft202012Validator:
    doc = schema_document()
    return Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": doc["$defs"]})


@cache
def _predicates() -> dict[str, Predicate]:
    return compile_definitions(schema_document())


def _is_valid(name: str) -> Predicate:
    # The generated predicate accepts exactly what jsonschema accepts (property-tested); it
    # only answers yes or no, so a refused instance is re-run through jsonschema for the error.
    return _predicates()[name]


def _path(err: ValidationError) -> str:
    out = ""
    for part in err.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(record)"


def _best(errors: list[ValidationError]) -> ValidationError:
    # The deepest error names the most specific field.
    return max(errors, key=lambda e: len(list(e.absolute_path)))


def _unsafe(value: object) -> bool:
    # a float, or an integer JavaScript cannot hold exactly (bool is an int, and safe)
    return isinstance(value, float) or (
        isinstance(value, int) and not -MAX_SAFE_INT <= value <= MAX_SAFE_INT
    )


def _has_unsafe_number(value: object) -> bool:
    if isinstance(value, dict):
        return any(_has_unsafe_number(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_unsafe_number(v) for v in value)
    return _unsafe(value)


def _only_safe_numbers(value: object, where: str) -> None:
    # Paths are only built once a bad number is known to be there (they cost more than the walk).
    if not _has_unsafe_number(value):
        return
    if isinstance(value, float):
        raise InvalidRecord(
            f"field {where}: {value!r} is a floating-point number; records hold integers only "
            "(carry raw model JSON as text, e.g. a tool_use input string)",
            metadata={"field": where},
        )
    if isinstance(value, int):
        raise InvalidRecord(
            f"field {where}: {clip(str(value), 48)} is beyond ±(2^53-1) = ±{MAX_SAFE_INT}, "
            "which JavaScript and other JSON readers cannot hold exactly; carry it as a string",
            metadata={"field": where},
        )
    if isinstance(value, dict):
        for k, v in value.items():
            _only_safe_numbers(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _only_safe_numbers(v, f"{where}[{i}]")


def validate_payload(kind: str, payload: object, plain: bool = False) -> None:
    """``plain``: ``journald.core.records.plain_json(payload)`` answered yes, so it holds no
    float and no integer beyond ±(2^53-1) and the number walk is not done again."""
    if kind not in KINDS:
        raise InvalidRecord(f"field type: unknown record kind {kind!r}")
    try:
        if _is_valid(kind)(payload):
            if not plain:
                _only_safe_numbers(payload, kind)
            return
        errors = list(_validator(kind).iter_errors(payload))
    except RecursionError:  # within MAX_JSON_DEPTH, but nested blocks cost many frames each
        raise InvalidRecord(
            f"field {kind}: its blocks nest too deep to check (tool results within tool "
            "results); flatten them",
            metadata={"field": kind},
        ) from None
    if errors:
        err = _best(errors)
        field = f"{kind}.{_path(err)}" if err.absolute_path else kind
        raise InvalidRecord(f"field {field}: {err.message}", metadata={"field": field})
    _only_safe_numbers(payload, kind)


def validate_record(rec: Record, plain: bool = False) -> None:
    """Validate envelope and payload of a built record; raise ``InvalidRecord`` naming the
    field. ``plain``: as for ``validate_payload``."""
    obj = rec.as_json()
    errors = [] if _is_valid("envelope")(obj) else list(_validator("envelope").iter_errors(obj))
    if errors:
        err = _best(errors)
        field = _path(err)
        raise InvalidRecord(
            f"field {field}: {err.message}", metadata={"field": field, "seq": rec.seq}
        )
    validate_payload(rec.kind, rec.payload, plain)
