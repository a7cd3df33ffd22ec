"""Compile the published record schema into plain Python predicates (the append fast path).

``jsonschema`` evaluates a schema by walking it per instance and building an error object for
every failed branch; the ``block`` definition is an if/then chain over seven block types, so a
~1 KB record cost about 0.9 ms of the daemon's CPU, most of its per-record budget. Here the same
document is compiled once into nested closures that answer only "valid or not". A record they
accept is valid; one they refuse is handed to ``jsonschema`` to name the failing field, so the
error a user sees is unchanged and only the refused path pays for the full evaluation.

The compiler implements exactly the keywords the schema uses, with draft 2020-12 meaning
(type-specific keywords ignore other types; ``integer`` admits integral floats; ``const`` and
``enum`` tell booleans from numbers), and refuses any other keyword when it compiles, so a
schema edit cannot silently weaken the fast path. A property test checks it agrees with
``jsonschema`` on generated valid and mutated records.

The append path runs ``schema_codegen``'s predicates, the same decisions written out as
source with the checks inlined (fewer calls per value); these closures stay the plainer
statement of the meaning that the generated code is tested against, and share their keyword
set and helpers with it.

Pure: no I/O imports.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Any], bool]

# Annotations: no effect on validity.
_ANNOTATIONS = frozenset({"description", "title", "$id", "$schema", "$comment"})
_SUPPORTED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "propertyNames",
        "const",
        "enum",
        "pattern",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "items",
        "minItems",
        "allOf",
        "$ref",
        "if",
        "then",
        "else",
        "$defs",
    }
)


class UnsupportedSchema(ValueError):
    """The schema uses a keyword this compiler does not implement."""


def _is_number(x: object) -> bool:
    return (type(x) is int or type(x) is float) and x is not True and x is not False


def _type_check(name: str) -> Predicate:
    if name == "object":
        return lambda x: type(x) is dict
    if name == "array":
        return lambda x: type(x) is list
    if name == "string":
        return lambda x: type(x) is str
    if name == "boolean":
        return lambda x: type(x) is bool
    if name == "integer":
        return lambda x: type(x) is int or (type(x) is float and x.is_integer())
    if name == "number":
        return _is_number
    if name == "null":
        return lambda x: x is None
    raise UnsupportedSchema(f"type {name!r}")


def _json_equal(a: object, b: object) -> bool:
    """JSON equality: booleans are not numbers, 1 equals 1.0, containers compare deeply."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    if type(a) is dict and type(b) is dict:
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if type(a) is list and type(b) is list:
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _const_check(const: object) -> Predicate:
    # A string constant (a block's or a record's type tag: several per record) equals only a
    # string of the same text under JSON equality, so the general comparison is not needed.
    if type(const) is str:
        return lambda x: type(x) is str and x == const
    return lambda x: _json_equal(x, const)


def _enum_check(options: list[object]) -> Predicate:
    if options and all(type(o) is str for o in options):
        texts = frozenset(options)
        return lambda x: type(x) is str and x in texts
    return lambda x: any(_json_equal(x, o) for o in options)


class _Compiler:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.defs: Mapping[str, Any] = root.get("$defs", {})
        self.compiled: dict[str, Predicate] = {}

    def ref(self, ref: str) -> Predicate:
        prefix = "#/$defs/"
        if not ref.startswith(prefix) or ref[len(prefix) :] not in self.defs:
            raise UnsupportedSchema(f"$ref {ref!r}")
        name = ref[len(prefix) :]
        if name not in self.compiled:
            # Recursion (block -> tool_result_block -> block) resolves lazily through the
            # table: the slot exists before the body is compiled.
            self.compiled[name] = lambda x: self.compiled[name](x)
            self.compiled[name] = self.schema(self.defs[name])
        return self.compiled[name]

    def schema(self, s: object) -> Predicate:
        if s is True:
            return lambda x: True
        if s is False:
            return lambda x: False
        if not isinstance(s, Mapping):
            raise UnsupportedSchema(f"schema {s!r}")
        unknown = set(s) - _SUPPORTED - _ANNOTATIONS
        if unknown:
            raise UnsupportedSchema(f"keyword(s) {sorted(unknown)}")
        # Keywords that apply to any instance, then those that apply to one JSON type only
        # (2020-12: "minLength" says nothing about a number); the type is looked up once.
        common: list[Predicate] = []
        if "type" in s:
            common.append(_type_check(s["type"]))
        if "const" in s:
            common.append(_const_check(s["const"]))
        if "enum" in s:
            common.append(_enum_check(list(s["enum"])))
        common += self._all_of(s.get("allOf", []))
        if "$ref" in s:
            common.append(self.ref(s["$ref"]))
        if "if" in s:
            cond = self.schema(s["if"])
            then = self.schema(s.get("then", True))
            other = self.schema(s.get("else", True))
            common.append(lambda x: then(x) if cond(x) else other(x))
        by_type: dict[type, tuple[Predicate, ...]] = {
            str: tuple(self._strings(s)),
            dict: tuple(self._objects(s)),
            list: tuple(self._arrays(s)),
        }
        numeric = tuple(self._numbers(s))
        by_type[int] = by_type[float] = numeric
        by_type = {t: checks for t, checks in by_type.items() if checks}
        always = tuple(common)

        # Explicit loops below, not all(<generator>): this runs per node of every appended
        # record, and the generator form costs about twice as much.
        def check(x: object) -> bool:
            for c in always:
                if not c(x):
                    return False
            for c in by_type.get(type(x), ()):  # noqa: SIM110
                if not c(x):
                    return False
            return True

        if not by_type and len(always) == 1:
            return always[0]
        return check

    def _all_of(self, subs: list[Any]) -> list[Predicate]:
        """``allOf`` of branches ``{"if": {"properties": {P: {"const": "<str>"}}}, "then": T}``
        (a tagged union such as ``block``) becomes one table lookup on ``x[P]``: evaluating
        every branch was most of the validator's time. Anything else compiles branch by branch.
        """
        tags: dict[str, Predicate] = {}
        props: set[str] = set()
        for sub in subs:
            tag = _tag_condition(sub)
            if tag is None or tag[1] in tags:
                break
            props.add(tag[0])
            tags[tag[1]] = self.schema(sub["then"])
        else:
            if len(props) == 1:
                return [_tag_dispatch(props.pop(), tags)]
        return [self.schema(sub) for sub in subs]

    def _strings(self, s: Mapping[str, Any]) -> list[Predicate]:
        out: list[Predicate] = []
        if "pattern" in s:
            search = re.compile(s["pattern"]).search  # jsonschema matches anywhere, as here
            out.append(lambda x: search(x) is not None)
        if "minLength" in s:
            lo = s["minLength"]
            out.append(lambda x: len(x) >= lo)
        if "maxLength" in s:
            hi = s["maxLength"]
            out.append(lambda x: len(x) <= hi)
        return out

    def _numbers(self, s: Mapping[str, Any]) -> list[Predicate]:
        out: list[Predicate] = []
        if "minimum" in s:
            lo = s["minimum"]
            out.append(lambda x: x >= lo)
        if "maximum" in s:
            hi = s["maximum"]
            out.append(lambda x: x <= hi)
        return out

    def _objects(self, s: Mapping[str, Any]) -> list[Predicate]:
        out: list[Predicate] = []
        props = {k: self.schema(v) for k, v in s.get("properties", {}).items()}
        if props:
            pairs = tuple(props.items())

            def check_properties(x: Any) -> bool:
                for key, check in pairs:  # noqa: SIM110
                    if key in x and not check(x[key]):
                        return False
                return True

            out.append(check_properties)
        required = tuple(s.get("required", ()))
        if required:

            def check_required(x: Any) -> bool:
                for key in required:  # noqa: SIM110
                    if key not in x:
                        return False
                return True

            out.append(check_required)
        if "additionalProperties" in s:
            extra = self.schema(s["additionalProperties"])
            known = frozenset(props)
            if s["additionalProperties"] is False:
                out.append(lambda x: known.issuperset(x))
            else:
                out.append(lambda x: all(extra(v) for k, v in x.items() if k not in known))
        if "propertyNames" in s:
            name_ok = self.schema(s["propertyNames"])
            out.append(lambda x: all(name_ok(k) for k in x))
        return out

    def _arrays(self, s: Mapping[str, Any]) -> list[Predicate]:
        out: list[Predicate] = []
        if "items" in s:
            item = self.schema(s["items"])

            def check_items(x: Any) -> bool:
                for v in x:  # noqa: SIM110
                    if not item(v):
                        return False
                return True

            out.append(check_items)
        if "minItems" in s:
            lo = s["minItems"]
            out.append(lambda x: len(x) >= lo)
        return out


def _tag_condition(sub: object) -> tuple[str, str] | None:
    """``(P, C)`` when ``sub`` is exactly ``{"if": {"properties": {P: {"const": C}}}, "then": …}``
    with ``C`` a string."""
    if not isinstance(sub, Mapping) or set(sub) != {"if", "then"}:
        return None
    cond = sub["if"]
    if not isinstance(cond, Mapping) or set(cond) != {"properties"}:
        return None
    props = cond["properties"]
    if not isinstance(props, Mapping) or len(props) != 1:
        return None
    ((prop, const_schema),) = props.items()
    if not isinstance(const_schema, Mapping) or set(const_schema) != {"const"}:
        return None
    const = const_schema["const"]
    return (prop, const) if type(const) is str else None


def _tag_dispatch(prop: str, tags: dict[str, Predicate]) -> Predicate:
    branches = tuple(tags.values())

    def dispatch(x: Any) -> bool:
        if type(x) is dict and prop in x:
            tag = x[prop]
            # Only the branch whose constant equals the tag holds its "if"; a non-string tag
            # equals none of them, so no "then" applies.
            then = tags.get(tag) if type(tag) is str else None
            return True if then is None else then(x)
        # No such property (or not an object): every "if" holds vacuously, so every "then"
        # applies.
        for then in branches:  # noqa: SIM110
            if not then(x):
                return False
        return True

    return dispatch


def compile_definition(document: Mapping[str, Any], name: str) -> Predicate:
    """A predicate for ``#/$defs/<name>`` of ``document`` that is true iff the instance is
    valid. Raises ``UnsupportedSchema`` when the document uses a keyword not implemented here."""
    compiler = _Compiler(document)
    pred = compiler.ref(f"#/$defs/{name}")
    # Compile every definition now, so an unsupported keyword fails at startup, not mid-append.
    for other in document.get("$defs", {}):
        compiler.ref(f"#/$defs/{other}")
    return pred
