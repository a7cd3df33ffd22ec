"""The record schema's predicates as generated Python source (the append fast path).

``schema_predicate`` compiles the schema into nested closures: one call, and a tuple walk, per
keyword of every value of a record, ~20 µs of a ~60 µs record's work on the daemon (issue 27).
Here the same compiler's decisions are written out as the source of one function per
definition, with the keywords' checks inlined as ``if <fails>: return False`` statements, and
``compile``d once: a record's check is then a handful of calls (one per content block and per
definition that recurses) instead of one per keyword.

The meaning is ``schema_predicate``'s, keyword by keyword, and so is the rest of its contract:
the same keywords are supported and any other one is refused when compiling (the same nodes
are visited), a refused record is re-checked by ``jsonschema`` for its message, and a property
test compares the two compilers and ``jsonschema`` on generated valid and mutated records.
Where a statement's form differs from the closure's it is because the form is cheaper, never
because the meaning is: comparisons are written ``not x >= lo`` (a NaN fails, as in the
closure), and an object's required keys are tested before its properties are read.

Pure: no I/O imports. Constants (patterns, key sets, non-string constants) reach the generated
code through its namespace, never as source text, except ``repr`` of strings and integers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from journald.core.schema_predicate import (
    _ANNOTATIONS,
    _SUPPORTED,
    Predicate,
    UnsupportedSchema,
    _json_equal,
    _tag_condition,
)

# The JSON type a value is known to have at a point of the generated code (its "type" keyword
# was checked above): type-specific keywords of other types are then left out, and those of
# this type are written without their guard.
_KNOWN = {
    "object": "dict",
    "array": "list",
    "string": "str",
    "integer": "num",
    "number": "num",
    "boolean": "bool",
    "null": "null",
}
_TYPE_TEST = {
    "object": "type({v}) is dict",
    "array": "type({v}) is list",
    "string": "type({v}) is str",
    "boolean": "type({v}) is bool",
    "integer": "(type({v}) is int or (type({v}) is float and {v}.is_integer()))",
    "number": "(type({v}) is int or type({v}) is float)",
    "null": "{v} is None",
}
_GUARD = {
    "dict": "type({v}) is dict",
    "list": "type({v}) is list",
    "str": "type({v}) is str",
    "num": "(type({v}) is int or type({v}) is float)",
}

Lines = list[str]


def _indent(lines: Lines) -> Lines:
    return ["    " + line for line in lines]


def _literal(value: object) -> str | None:
    """Source text for a constant that ``repr`` writes exactly (str, int but not bool)."""
    return repr(value) if type(value) is str or type(value) is int else None


def _in_enum(x: object, options: tuple[object, ...]) -> bool:
    return any(_json_equal(x, o) for o in options)


class _Generator:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.defs: Mapping[str, Any] = root.get("$defs", {})
        self.ns: dict[str, Any] = {"_json_equal": _json_equal, "_in_enum": _in_enum}
        self.source: Lines = []
        self.functions: dict[str, str] = {}  # definition -> its function's name
        # id(schema) of a tagged union's branch (and the type known there) -> its function
        self.branches: dict[tuple[int, str | None], str] = {}
        self.tables: list[tuple[str, dict[str, str]]] = []  # dispatch tables: tag -> function
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def constant(self, value: object, prefix: str = "_c") -> str:
        name = self.fresh(prefix)
        self.ns[name] = value
        return name

    def function(
        self, name: str, schema: object, stack: tuple[str, ...], known: str | None
    ) -> None:
        body = self.node(schema, "x", known, stack)
        self.source += [f"def {name}(x):", *_indent(body), "    return True", ""]

    def definition(self, ref: str) -> str:
        """The function deciding ``ref``; generated on first use (the name is taken first, so
        recursion through the definition resolves to a call)."""
        prefix = "#/$defs/"
        if not ref.startswith(prefix) or ref[len(prefix) :] not in self.defs:
            raise UnsupportedSchema(f"$ref {ref!r}")
        name = ref[len(prefix) :]
        if name not in self.functions:
            self.functions[name] = fn = self.fresh("_d")
            self.function(fn, self.defs[name], (name,), None)
        return self.functions[name]

    def node(self, s: object, v: str, known: str | None, stack: tuple[str, ...]) -> Lines:
        """Statements that ``return False`` unless ``v`` is valid against ``s``."""
        if s is True:
            return []
        if s is False:
            return ["return False"]
        if not isinstance(s, Mapping):
            raise UnsupportedSchema(f"schema {s!r}")
        unknown = set(s) - _SUPPORTED - _ANNOTATIONS
        if unknown:
            raise UnsupportedSchema(f"keyword(s) {sorted(unknown)}")
        out: Lines = []
        if "type" in s:
            name = s["type"]
            if not isinstance(name, str) or name not in _TYPE_TEST:
                raise UnsupportedSchema(f"type {name!r}")
            out.append(f"if not {_TYPE_TEST[name].format(v=v)}: return False")
            known = _KNOWN[name]
        if "const" in s:
            out.append(f"if not ({self._const(s['const'], v, known)}): return False")
        if "enum" in s:
            out.append(f"if not ({self._enum(list(s['enum']), v, known)}): return False")
        out += self._all_of(s.get("allOf", []), v, known, stack)
        if "$ref" in s:
            out += self._ref(s["$ref"], v, known, stack)
        if "if" in s:
            out += self._if(s, v, known, stack)
        out += self._guarded("str", self._strings(s, v), v, known)
        out += self._guarded("dict", self._objects(s, v, stack), v, known)
        out += self._guarded("list", self._arrays(s, v, stack), v, known)
        out += self._guarded("num", self._numbers(s, v), v, known)
        return out

    def _guarded(self, kind: str, body: Lines, v: str, known: str | None) -> Lines:
        if not body or (known is not None and known != kind):
            return []  # nothing to check, or keywords of a type the value does not have
        if known == kind:
            return body
        return [f"if {_GUARD[kind].format(v=v)}:", *_indent(body)]

    def _const(self, const: object, v: str, known: str | None) -> str:
        if type(const) is str:
            text = repr(const)
            return f"{v} == {text}" if known == "str" else f"type({v}) is str and {v} == {text}"
        if const is True or const is False:
            return f"{v} is {const!r}"
        if type(const) is int and (lit := _literal(const)) is not None:
            if known == "num":
                return f"{v} == {lit}"
            return f"(type({v}) is int or type({v}) is float) and {v} == {lit}"
        return f"_json_equal({v}, {self.constant(const)})"

    def _enum(self, options: list[object], v: str, known: str | None) -> str:
        if options and all(type(o) is str for o in options):
            texts = self.constant(frozenset(options), "_k")
            return f"{v} in {texts}" if known == "str" else f"type({v}) is str and {v} in {texts}"
        return f"_in_enum({v}, {self.constant(tuple(options))})"

    def _ref(self, ref: str, v: str, known: str | None, stack: tuple[str, ...]) -> Lines:
        fn = self.definition(ref)  # checks the reference and compiles the definition
        name = ref[len("#/$defs/") :]
        if name in stack:
            return [f"if not {fn}({v}): return False"]
        # Inlined where it is used, down to the first definition already being expanded.
        return self.node(self.defs[name], v, known, (*stack, name))

    def _all_of(self, subs: list[Any], v: str, known: str | None, stack: tuple[str, ...]) -> Lines:
        """A tagged union (``schema_predicate._Compiler._all_of``) becomes one dict lookup of
        the tag's branch; anything else is inlined branch by branch."""
        tags: dict[str, Any] = {}
        props: set[str] = set()
        for sub in subs:
            tag = _tag_condition(sub)
            if tag is None or tag[1] in tags:
                break
            props.add(tag[0])
            tags[tag[1]] = sub["then"]
        else:
            if len(props) == 1:
                return self._dispatch(props.pop(), tags, v, known)
        out: Lines = []
        for sub in subs:
            out += self.node(sub, v, known, stack)
        return out

    def _branch(self, schema: object, known: str | None) -> str:
        key = (id(schema), known)
        if key not in self.branches:
            self.branches[key] = fn = self.fresh("_b")
            self.function(fn, schema, (), known)
        return self.branches[key]

    def _dispatch(self, prop: str, tags: dict[str, Any], v: str, known: str | None) -> Lines:
        table = {tag: self._branch(then, known) for tag, then in tags.items()}
        name = self.fresh("_t")
        self.tables.append((name, table))  # bound to the functions once they exist
        key, tag, then = repr(prop), self.fresh("t"), self.fresh("f")
        is_object = f"{key} in {v}" if known == "dict" else f"type({v}) is dict and {key} in {v}"
        # As the if/then chain: only the branch whose constant equals the tag applies (none for
        # a non-string tag); without the property (or an object) every branch applies.
        every = [f"if not {fn}({v}): return False" for fn in table.values()]
        return [
            f"if {is_object}:",
            f"    {tag} = {v}[{key}]",
            f"    if type({tag}) is str:",
            f"        {then} = {name}.get({tag})",
            f"        if {then} is not None and not {then}({v}): return False",
            "else:",
            *_indent(every or ["pass"]),
        ]

    def _if(self, s: Mapping[str, Any], v: str, known: str | None, stack: tuple[str, ...]) -> Lines:
        cond = self._present(s["if"], v, known)
        if cond is None:
            name = self.fresh("_i")
            self.function(name, s["if"], (), known)
            cond = f"{name}({v})"
        then = self.node(s.get("then", True), v, known, stack)
        other = self.node(s.get("else", True), v, known, stack)
        if not then and not other:
            return []
        if not other:
            return [f"if {cond}:", *_indent(then)]
        return [f"if {cond}:", *_indent(then or ["pass"]), "else:", *_indent(other)]

    def _present(self, cond: object, v: str, known: str | None) -> str | None:
        """An ``if`` of ``required`` alone (``state``'s branches) as an expression, not a call."""
        if not isinstance(cond, Mapping) or set(cond) != {"required"} or not cond["required"]:
            return None
        test = " and ".join(f"{self._key(k)} in {v}" for k in cond["required"])
        return f"({test})" if known == "dict" else f"(type({v}) is not dict or ({test}))"

    def _key(self, key: object) -> str:
        return repr(key) if type(key) is str else self.constant(key)

    def _bound(self, value: object) -> str:
        lit = _literal(value)
        return lit if lit is not None and type(value) is int else self.constant(value)

    def _strings(self, s: Mapping[str, Any], v: str) -> Lines:
        out: Lines = []
        if "pattern" in s:
            search = self.constant(re.compile(s["pattern"]).search, "_r")
            out.append(f"if {search}({v}) is None: return False")
        if "minLength" in s:
            out.append(f"if not len({v}) >= {self._bound(s['minLength'])}: return False")
        if "maxLength" in s:
            out.append(f"if not len({v}) <= {self._bound(s['maxLength'])}: return False")
        return out

    def _numbers(self, s: Mapping[str, Any], v: str) -> Lines:
        out: Lines = []
        if "minimum" in s:
            out.append(f"if not {v} >= {self._bound(s['minimum'])}: return False")
        if "maximum" in s:
            out.append(f"if not {v} <= {self._bound(s['maximum'])}: return False")
        return out

    def _objects(self, s: Mapping[str, Any], v: str, stack: tuple[str, ...]) -> Lines:
        out: Lines = []
        required = list(s.get("required", ()))
        if required:
            missing = " or ".join(f"{self._key(k)} not in {v}" for k in required)
            out.append(f"if {missing}: return False")
        props: dict[str, Any] = dict(s.get("properties", {}))
        for key, sub in props.items():
            w = self.fresh("v")
            body = self.node(sub, w, None, stack)
            if not body:
                continue
            k = self._key(key)
            if body == ["return False"]:
                out.append(f"if {k} in {v}: return False")
            elif key in required:  # present: tested above
                out += [f"{w} = {v}[{k}]", *body]
            else:
                out += [f"if {k} in {v}:", f"    {w} = {v}[{k}]", *_indent(body)]
        if "additionalProperties" in s:
            w = self.fresh("v")
            extra = self.node(s["additionalProperties"], w, None, stack)
            names = self.constant(frozenset(props), "_k")
            if s["additionalProperties"] is False:
                out.append(f"if not {names}.issuperset({v}): return False")
            elif extra:
                k = self.fresh("k")
                out += [f"for {k}, {w} in {v}.items():", f"    if {k} not in {names}:"]
                out += _indent(_indent(extra))
        if "propertyNames" in s:
            w = self.fresh("v")
            names_ok = self.node(s["propertyNames"], w, None, stack)
            if names_ok:
                out += [f"for {w} in {v}:", *_indent(names_ok)]
        return out

    def _arrays(self, s: Mapping[str, Any], v: str, stack: tuple[str, ...]) -> Lines:
        out: Lines = []
        if "items" in s:
            w = self.fresh("v")
            item = self.node(s["items"], w, None, stack)
            if item:
                out += [f"for {w} in {v}:", *_indent(item)]
        if "minItems" in s:
            out.append(f"if not len({v}) >= {self._bound(s['minItems'])}: return False")
        return out


def generate(document: Mapping[str, Any]) -> tuple[str, dict[str, Predicate]]:
    """The generated source (for reading and tests) and a predicate per ``$defs`` entry of
    ``document``, each true iff the instance is valid. Raises ``UnsupportedSchema`` as
    ``schema_predicate.compile_definition`` does."""
    gen = _Generator(document)
    for name in document.get("$defs", {}):
        gen.definition(f"#/$defs/{name}")
    source = "\n".join(gen.source)
    namespace = dict(gen.ns)
    exec(compile(source, "<journald record schema>", "exec"), namespace)
    for name, table in gen.tables:
        namespace[name] = {tag: namespace[fn] for tag, fn in table.items()}
    predicates: dict[str, Predicate] = {d: namespace[fn] for d, fn in gen.functions.items()}
    return source, predicates


def compile_definitions(document: Mapping[str, Any]) -> dict[str, Predicate]:
    """A predicate per definition of ``document`` (all compiled at once, so an unsupported
    keyword fails at startup, not mid-append)."""
    return generate(document)[1]
