"""The generated schema predicates (``schema_codegen``, the append path's check) decide exactly
as the closure compiler (``schema_predicate``) and ``jsonschema`` do.

Two kinds of evidence: the published schema, on valid journals and records mutated at a random
spot and at every spot (the generator's inlining of ``$ref``, its tag dispatch and its
required-first object checks all meet real records there); and random small schemas built from
every supported keyword, against random values, where the closure compiler is the reference
(NaN and infinities included, which ``jsonschema`` is not asked about), and where a keyword the
compilers do not implement must be refused by both when compiling.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from journald.core.records import MAX_DOCUMENT_DEPTH
from journald.core.schema import schema_document
from journald.core.schema_codegen import compile_definitions, generate
from journald.core.schema_predicate import UnsupportedSchema, compile_definition
from tests.profiles import scaled
from tests.unit.core.test_schema_predicate import (
    NOT_TAGGED,
    TAGGED,
    TRICKY,
    _one_of_each_kind,
    _paths,
    _replace,
    mutated,
)
from tests.unit.strategies import journals, json_values

DOC = schema_document()
DEFS = DOC["$defs"]
GENERATED = compile_definitions(DOC)
CLOSURES = {name: compile_definition(DOC, name) for name in DEFS}
VALIDATORS = {
    name: Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": DEFS}) for name in DEFS
}

# Beyond the closure test's values: numbers JSON text cannot carry but a caller in process can
# hand over, where a comparison's form (``x < lo`` against ``not x >= lo``) would matter.
ODD_NUMBERS = [math.nan, math.inf, -math.inf, -0.0, 0.5, 1e300, -(2**63), 2**64]
TRICKIER = [*TRICKY, *ODD_NUMBERS]
trickier_values = st.one_of(json_values, st.sampled_from(TRICKIER))


def _outcome(pred: Any, instance: Any) -> object:
    try:
        return bool(pred(instance))
    except RecursionError:  # pragma: no cover - a failure to report, not a decision
        return "RecursionError"


def _agree(name: str, instance: Any, with_jsonschema: bool = True) -> None:
    expected = _outcome(CLOSURES[name], instance)
    assert _outcome(GENERATED[name], instance) == expected, (name, instance)
    if with_jsonschema:
        assert VALIDATORS[name].is_valid(instance) is expected, (name, instance)


def test_every_definition_of_the_published_schema_has_a_generated_predicate() -> None:
    assert set(GENERATED) == set(DEFS)


@pytest.mark.slow  # ~15 s: 600 whole journals, each record mutated twice, three evaluators
@settings(max_examples=scaled(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), journal=journals(max_steps=6, state=True))
def test_generated_predicates_agree_with_the_closures_and_jsonschema_on_valid_and_mutated_records(
    data: st.DataObject, journal: list[Any]
) -> None:
    for rec in journal:
        obj = rec.as_json()
        _agree("envelope", obj)
        _agree(rec.kind, rec.payload)
        assert GENERATED[rec.kind](rec.payload), "a valid record must take the fast path"
        for _ in range(2):
            _agree("envelope", data.draw(mutated(obj)))
            _agree(rec.kind, data.draw(mutated(rec.payload)))


@settings(max_examples=scaled(800), deadline=None)
@given(name=st.sampled_from(sorted(DEFS)), value=trickier_values)
def test_generated_predicates_agree_with_the_closures_on_arbitrary_values(
    name: str, value: Any
) -> None:
    _agree(name, value, with_jsonschema=False)


@pytest.mark.parametrize(("name", "valid"), _one_of_each_kind(), ids=lambda v: str(v)[:12])
def test_generated_predicates_agree_at_every_spot_of_every_kind(name: str, valid: Any) -> None:
    assert GENERATED[name](valid)
    for path in _paths(valid):
        for new in TRICKIER:
            _agree(name, _replace(valid, path, new), with_jsonschema=type(new) is not float)
        target: Any = valid
        for part in path:
            target = target[part]
        if isinstance(target, dict):
            for key in ("extra", "", "bad key!", "type", "remote"):
                _agree(name, _replace(valid, path, {**target, key: "x"}))
            for key in target:
                _agree(name, _replace(valid, path, {k: v for k, v in target.items() if k != key}))
        elif isinstance(target, list):
            for i in range(len(target)):
                _agree(name, _replace(valid, path, target[:i] + target[i + 1 :]))


def _nested_results(depth: int) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": "x"}
    for _ in range(depth):
        block = {"type": "tool_result", "tool_use_id": "t", "content": [block], "is_error": False}
    return {"tool_use_id": "t", "content": [block], "is_error": False}


def test_tool_results_nested_as_deep_as_a_document_may_be_are_decided_alike() -> None:
    # Two JSON levels per nested result: the deepest a parsed document can hold, and one
    # invalid at the bottom.
    deepest = _nested_results(MAX_DOCUMENT_DEPTH // 2)
    _agree("tool_result", deepest, with_jsonschema=False)
    assert GENERATED["tool_result"](deepest)
    bottom: Any = deepest
    while bottom["content"][0]["type"] == "tool_result":
        bottom = bottom["content"][0]
    bottom["content"] = [{"type": "text"}]
    _agree("tool_result", deepest, with_jsonschema=False)
    assert not GENERATED["tool_result"](deepest)


# --- random schemas of every supported keyword ----------------------------------------------

KEYS = ["a", "b", "type"]
CONSTS = st.sampled_from(["a", "x", "", 0, 1, 1.0, 2.5, True, False, None, [1], {"a": 1}, []])
TYPES = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null"])
BOUNDS = st.sampled_from([0, 1, 2, -1, 0.5, 2.0])
REQUIRED = st.lists(st.sampled_from(KEYS), max_size=2, unique=True)


def _schemas(inner: st.SearchStrategy[Any], with_ref: bool) -> st.SearchStrategy[Any]:
    tag = st.builds(
        lambda pairs: {
            "allOf": [
                {"if": {"properties": {"type": {"const": c}}}, "then": then} for c, then in pairs
            ]
        },
        st.lists(st.tuples(st.sampled_from(["a", "x", "y"]), inner), max_size=3),
    )
    optional: dict[str, st.SearchStrategy[Any]] = {
        "type": TYPES,
        "const": CONSTS,
        "enum": st.lists(CONSTS, min_size=1, max_size=3),
        "pattern": st.sampled_from(["^a", "a$", "^[0-9]+$", "x"]),
        "minLength": st.integers(0, 2),
        "maxLength": st.integers(0, 2),
        "minimum": BOUNDS,
        "maximum": BOUNDS,
        "minItems": st.integers(0, 2),
        "required": REQUIRED,
        "properties": st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
        "additionalProperties": inner,
        "propertyNames": inner,
        "items": inner,
        "allOf": st.lists(inner, max_size=3),
        # A condition of required keys alone is written as an expression, not a call.
        "if": st.one_of(inner, st.fixed_dictionaries({"required": REQUIRED})),
        "then": inner,
        "else": inner,
        "description": st.just("an annotation"),
    }
    if with_ref:
        optional["$ref"] = st.just("#/$defs/r")
    mapping = st.fixed_dictionaries({}, optional=optional)
    return st.one_of(st.booleans(), mapping, tag)


def _schema_strategy(with_ref: bool) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.one_of(st.booleans(), st.fixed_dictionaries({"type": TYPES})),
        lambda inner: _schemas(inner, with_ref),
        max_leaves=8,
    )


instances = st.recursive(
    st.one_of(
        st.sampled_from([*TRICKIER, "a", "x", "1", "ab", "type", ["a"], ["a", "b"]]), json_values
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)
    ),
    max_leaves=8,
)


@pytest.mark.slow  # ~13 s: 1,600 random documents, up to 8 values each
@settings(max_examples=scaled(1600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    main=_schema_strategy(with_ref=True),
    ref=_schema_strategy(with_ref=False),
    values=st.lists(instances, min_size=1, max_size=8),
)
def test_generated_predicates_agree_with_the_closures_on_random_schemas(
    main: Any, ref: Any, values: list[Any]
) -> None:
    doc = {"$defs": {"main": main, "r": ref}}
    generated = compile_definitions(doc)
    closure = compile_definition(doc, "main")
    for value in values:
        assert _outcome(generated["main"], value) == _outcome(closure, value), (doc, value)


@settings(max_examples=scaled(400), deadline=None)
@given(
    main=_schema_strategy(with_ref=True),
    stray=st.sampled_from(["format", "oneOf", "anyOf", "not", "prefixItems", "exclusiveMinimum"]),
    path=st.lists(st.sampled_from(["properties", "items", "allOf", "if", "then"]), max_size=2),
)
def test_a_keyword_neither_compiler_implements_is_refused_by_both_when_compiling(
    main: Any, stray: str, path: list[str]
) -> None:
    node: dict[str, Any] = {stray: {}}
    for keyword in path:
        wrap: dict[str, Any] = {
            "properties": {"a": node},
            "items": node,
            "allOf": [node],
            "if": node,
        }
        node = wrap.get(keyword, {"if": True, "then": node})
    doc = {"$defs": {"main": {"allOf": [main, node]}, "r": True}}
    with pytest.raises(UnsupportedSchema):
        compile_definition(doc, "main")
    with pytest.raises(UnsupportedSchema):
        compile_definitions(doc)


@pytest.mark.parametrize("schema", [TAGGED, NOT_TAGGED], ids=["one-tag", "mixed"])
@pytest.mark.parametrize(
    "value", [{"k": "a", "x": 1}, {"k": "b"}, {"k": 1}, {"k": 1, "z": 0}, {}, {"x": 1, "y": 2}, "a"]
)
def test_generated_tagged_unions_decide_as_the_if_then_chain(schema: Any, value: Any) -> None:
    doc = {"$defs": {"u": schema}}
    expected = Draft202012Validator({"$ref": "#/$defs/u", **doc}).is_valid(value)
    assert compile_definitions(doc)["u"](value) is expected


def test_a_bound_is_missed_by_nan_as_in_the_closures() -> None:
    doc = {"$defs": {"n": {"type": "number", "minimum": 0}, "m": {"maximum": 0}}}
    generated = compile_definitions(doc)
    for name in ("n", "m"):
        assert generated[name](math.nan) is compile_definition(doc, name)(math.nan) is False


def test_the_generated_source_names_no_constant_but_through_its_namespace() -> None:
    # Patterns, key sets and non-string constants are bound as names, so no schema text other
    # than a string's or an integer's repr becomes code.
    source, _ = generate(DOC)
    assert "re.compile" not in source
    assert "frozenset" not in source
    compile(source, "<check>", "exec")


CONDITIONS = [
    {"if": {"required": ["a", "b"]}, "then": False},
    {"if": {"required": ["a"]}, "then": {"required": ["b"]}, "else": {"required": ["type"]}},
    {"type": "object", "if": {"required": ["a", "b"]}, "then": False, "else": {"required": ["a"]}},
    {"items": {"if": {"required": ["a"]}, "then": {"properties": {"a": {"type": "string"}}}}},
]


@pytest.mark.parametrize("schema", CONDITIONS, ids=range(len(CONDITIONS)))
@pytest.mark.parametrize(
    "value",
    [{}, {"a": 1}, {"a": "x", "b": 1}, {"b": 1}, {"type": 1}, "ab", ["a", "b"], 1, [{"a": 1}]],
)
def test_a_condition_of_required_keys_holds_for_what_is_not_an_object(
    schema: Any, value: Any
) -> None:
    doc = {"$defs": {"c": schema}}
    expected = Draft202012Validator({"$ref": "#/$defs/c", **doc}).is_valid(value)
    assert compile_definition(doc, "c")(value) is expected
    assert compile_definitions(doc)["c"](value) is expected
