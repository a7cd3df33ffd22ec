"""Records: the canonical JSON form, the hash chain and the append rules
(docs/protocol.md#records, docs/protocol.md#canonical-json, docs/protocol.md#seq-rules).

A record is one JSON object::

    {"v": 1, "seq": 7, "type": "journald.v1.record.tool_result", "ts": "2026-...Z",
     "prev": "<sha256 hex of record 6's bytes>", "trace": {"trace_id", "span_id"}?,
     "tool_result": {...}}

Canonical bytes: UTF-8, keys sorted by code point, separators ``,`` and ``:``, no
insignificant whitespace, non-ASCII characters written as themselves. Records hold no
floating-point numbers anywhere (raw model JSON such as tool inputs and provider blocks is
carried as *text*), so every language produces the same bytes with its ordinary JSON
encoder. ``prev`` of seq 1 is ``GENESIS`` (64 zeros).

Pure core: no I/O imports (a test enforces it).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from journald.core.errors import (
    InvalidId,
    InvalidRecord,
    SeqConflict,
    SeqGap,
    VersionUnsupported,
    clip,
)

FORMAT_VERSION = 1
GENESIS = "0" * 64
TYPE_PREFIX = "journald.v1.record."
KINDS = ("meta", "assistant", "tool_result", "user", "rebase", "terminal", "state")
TYPE_OF = {kind: TYPE_PREFIX + kind for kind in KINDS}
KIND_OF = {t: k for k, t in TYPE_OF.items()}
ENVELOPE_KEYS = frozenset({"v", "seq", "type", "ts", "prev", "trace"})
MAX_ID_BYTES = 128
MAX_SAFE_INT = 2**53 - 1
MAX_JSON_DEPTH = 128
"""Deepest nesting of arrays and objects a JSON value from a client may have (a content
array of blocks is 2 levels; tool results nest blocks 2 levels at a time)."""
MAX_DOCUMENT_DEPTH = MAX_JSON_DEPTH + 4
"""The same for a whole record or export: a message's content sits 4 levels down in either
(record, payload, messages, message; export, body, messages, message)."""
_ID_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ID_REST = _ID_FIRST | {"_", "-"}

JSON = dict[str, Any]


def validate_id(run_id: object, what: str = "run id") -> str:
    """Return ``run_id`` if it is one safe path component and one NATS subject token."""
    if not isinstance(run_id, str) or not run_id:
        raise InvalidId(f"{what} is empty; use letters, digits, '_' and '-' (max 128 bytes)")
    if len(run_id.encode()) > MAX_ID_BYTES:
        raise InvalidId(
            f"{what} is {len(run_id.encode())} bytes; the limit is {MAX_ID_BYTES}",
            metadata={"id": run_id[:64]},
        )
    if run_id[0] not in _ID_FIRST or any(c not in _ID_REST for c in run_id):
        raise InvalidId(
            f"{what} {run_id!r} is not a safe id: it must match ^[A-Za-z0-9][A-Za-z0-9_-]*$ "
            "(one path component and one NATS subject token)",
            metadata={"id": run_id[:64]},
        )
    return run_id


# The reference encoder, and the definition of the canonical bytes. One encoder for every
# call: ``json.dumps`` with non-default options builds a new encoder each time.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
# orjson with sorted keys writes the reference's bytes for plain JSON without floats (str keys
# sorted by code point, which UTF-8 byte order equals; the same escapes; non-ASCII as itself;
# integers in decimal) in a tenth of its time. Floats are written differently (``1e-7``
# against ``1e-07``) and other types (dataclasses, UUIDs, subclasses) are encoded where the
# reference refuses them, so only values ``plain_json`` vouches for take it; a non-str key
# or an integer beyond 64 bits is a TypeError here and goes to the reference too.
# tests/unit/core/test_canonical_fast_path.py holds the two to the same bytes.
_SORTED = orjson.OPT_SORT_KEYS
_PLAIN_LEAVES = frozenset({str, int, bool, type(None)})
_PLAIN_CONTAINERS = 1 << 16
"""More arrays and objects than any record under the size limit holds in practice (1 MiB of
``[]`` is 2^19 of them, and takes the reference encoder, correctly, only more slowly)."""


def plain_json(obj: object) -> bool:
    """Whether ``obj`` holds only dicts, lists, strings, integers within ±(2^53-1), booleans
    and None: the values the fast encoder writes as the reference does, and the only numbers
    a record may hold (``journald.core.schema`` refuses floats and larger integers)."""
    stack = [obj]
    pop, extend, leaves = stack.pop, stack.extend, _PLAIN_LEAVES
    containers = 0  # a value that contains itself would be walked forever: the reference
    while stack:  # encoder names it (``Circular reference detected``) once the budget is out
        v = pop()
        t = type(v)
        if t is dict or t is list:
            containers += 1
            if containers > _PLAIN_CONTAINERS:
                return False
            extend(v.values() if t is dict else v)  # type: ignore[attr-defined,arg-type]
        elif t not in leaves or (t is int and not -MAX_SAFE_INT <= v <= MAX_SAFE_INT):  # type: ignore[operator]
            return False
    return True


def canonical_json(obj: object, plain: bool | None = None) -> bytes:
    """The canonical bytes of a JSON value (sorted keys, compact, UTF-8). ``plain``: what
    ``plain_json(obj)`` answered, when the caller has already asked it."""
    if plain is None:
        plain = plain_json(obj)
    if plain:
        try:
            # copied: orjson's bytes keep the buffer they were written in (8 KiB for a short
            # record, ~8x a megabyte one), and records stay in memory (the recent window)
            return bytes(memoryview(orjson.dumps(obj, option=_SORTED)))
        except TypeError:
            pass  # a non-str key: the reference decides (it writes some, refuses others)
    try:
        return _CANONICAL.encode(obj).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise InvalidRecord(f"value cannot be encoded as canonical JSON: {exc}") from exc


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with its canonical bytes and their hash."""

    seq: int
    kind: str
    ts: str
    prev: str
    payload: Mapping[str, Any]
    trace: Mapping[str, str] | None
    raw: bytes
    hash: str

    @property
    def type(self) -> str:
        return TYPE_OF[self.kind]

    def as_json(self) -> JSON:
        return envelope(self.seq, self.kind, self.payload, self.prev, self.ts, self.trace)


def envelope(
    seq: int,
    kind: str,
    payload: Mapping[str, Any],
    prev: str,
    ts: str,
    trace: Mapping[str, str] | None = None,
) -> JSON:
    obj: JSON = {
        "v": FORMAT_VERSION,
        "seq": seq,
        "type": TYPE_OF[kind],
        "ts": ts,
        "prev": prev,
        kind: payload,
    }
    if trace:
        obj["trace"] = dict(trace)
    return obj


def make_record(
    seq: int,
    kind: str,
    payload: Mapping[str, Any],
    prev: str,
    ts: str,
    trace: Mapping[str, str] | None = None,
    plain: bool | None = None,
) -> Record:
    """Build a record and its canonical bytes. Shape checks are in ``check_shape``.
    ``plain``: what ``plain_json(payload)`` answered, when the caller (the gate) has asked
    it once for both the encoder and the schema's number check."""
    if kind not in TYPE_OF:
        raise InvalidRecord(f"unknown record kind {kind!r}; expected one of {', '.join(KINDS)}")
    obj = envelope(seq, kind, payload, prev, ts, trace)
    if plain is not None:  # the rest of the envelope, without walking the payload again
        plain = (
            plain
            and type(seq) is int
            and 0 <= seq <= MAX_SAFE_INT
            and type(ts) is str
            and type(prev) is str
            and (not trace or plain_json(obj["trace"]))
        )
    raw = canonical_json(obj, plain)
    return _with_bytes(seq, kind, payload, prev, ts, trace, raw)


def _with_bytes(
    seq: int,
    kind: str,
    payload: Mapping[str, Any],
    prev: str,
    ts: str,
    trace: Mapping[str, str] | None,
    raw: bytes,
) -> Record:
    return Record(
        seq, kind, ts, prev, payload, dict(trace) if trace else None, raw, sha256_hex(raw)
    )


def decode(raw: bytes) -> Record:
    """Parse stored or received bytes into a record, refusing other format versions and
    non-canonical bytes (a record whose bytes are not canonical cannot be hash-verified
    across languages). Anything from outside the store (imports, clients) goes through here."""
    rec = from_json(_parse(raw))
    if rec.raw != raw:
        raise InvalidRecord(
            f"record seq {rec.seq} is not in canonical form (sorted keys, compact, UTF-8)",
            metadata={"seq": rec.seq},
        )
    return rec


def decode_stored(raw: bytes) -> Record:
    """``decode`` for bytes a store reads back from its own files, whose hash chain it checks.

    The envelope is checked as in ``decode``, but the bytes are not re-encoded to prove they
    are canonical (re-encoding costs more than parsing): the store wrote canonical bytes, and
    any later change to them changes ``hash`` (computed here from the bytes as read), which
    the next record's ``prev`` or the segment's manifest entry then refuses. So the caller
    must check the chain and vouch for the last record another way (``decode`` it)."""
    return _with_bytes(*envelope_fields(_parse(raw, check_depth=False)), raw)


def _parse(raw: bytes, check_depth: bool = True) -> object:
    """A whole record's JSON. ``check_depth=False`` is ``decode_stored``'s fast path: bytes
    the store wrote and chain-checks, parsed without the repeated-key and constant checks
    (any edit of canonical bytes, a repeated key included, changes the record's hash, which
    the next ``prev`` or the manifest then refuses as damage)."""
    if not check_depth:
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise InvalidRecord(
                f"record is not valid JSON: {exc}", metadata={"field": "record"}
            ) from exc
    if json_too_deep(raw, MAX_DOCUMENT_DEPTH):
        raise _too_deep("record", MAX_DOCUMENT_DEPTH)
    return strict_json(raw, "record")


# --- strict JSON: what json.loads accepts but a record may not hold ------------------------


class _Refused(ValueError):
    """Raised inside the parser's hooks; ``strict_json`` turns it into ``invalid_record``."""


def _object_without_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(
                    f"the key {clip(repr(key), 64)} appears twice in one object (a reader "
                    "would silently keep only one of its values); send each key once"
                )
            seen.add(key)
    return obj


def _no_constant(name: str) -> Any:
    raise _Refused(
        f"{name} is not a JSON number (and records hold no floats): send an integer, or the "
        "value as a string"
    )


_STRICT = json.JSONDecoder(object_pairs_hook=_object_without_repeats, parse_constant=_no_constant)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _lone_surrogate(value: object) -> bool:
    """Whether a parsed value holds a string (or key) that is not Unicode text: a UTF-16
    surrogate escape (``\\ud800``) without its pair, which no UTF-8 encoder can write."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def strict_json(data: bytes, where: str) -> Any:
    """Parse UTF-8 JSON a record is built from; ``invalid_record`` naming ``where`` for what
    is not valid JSON, not UTF-8, a key repeated in one object, ``NaN``/``Infinity``, or a
    lone surrogate: each a value no canonical encoder (ours or a client's) writes.

    Canonical bytes (what every client sends, and every stored record) take a fast path:
    orjson parses them, and its value is kept only if orjson writes it back, keys sorted, to
    exactly ``data``. Those bytes are orjson's own output for that value, so they hold each
    key of an object once (a repeated key would be collapsed and written once, shorter), no
    whitespace, no ``NaN`` (written as ``null``), valid UTF-8 and no lone surrogate (orjson
    refuses both); and the reference parser reads its output back to the same value, types
    included (integers in decimal, floats in their shortest round-trip form). Anything else:
    an orjson error, bytes that differ (spaces, other escapes, unsorted keys, ``-0``, deeper
    than orjson writes), goes to ``_strict_json_reference``, which decides and names what is
    refused exactly as before. Nesting limits are the callers' (``parse_json``, ``_parse``),
    checked before this. tests/unit/core/test_strict_json_fast_path.py holds the two to the
    same values and the same refusals."""
    try:
        value = orjson.loads(data)
        if orjson.dumps(value, option=_SORTED) == data:
            return value
    except (ValueError, TypeError):  # JSONDecodeError, JSONEncodeError (nesting, surrogates)
        pass
    return _strict_json_reference(data, where)


def _strict_json_reference(data: bytes, where: str) -> Any:
    """``strict_json`` without the fast path: the definition of what is accepted, and of
    every refusal's message."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(
            f"field {where}: not UTF-8 (byte {exc.start} starts an invalid sequence: a cut "
            "character, a raw surrogate or another encoding); send UTF-8 text",
            metadata={"field": where},
        ) from None
    try:
        value = _STRICT.decode(text)
    except _Refused as exc:
        raise InvalidRecord(f"field {where}: {exc}", metadata={"field": where}) from None
    except (ValueError, RecursionError) as exc:
        raise InvalidRecord(
            f"field {where}: not valid JSON ({clip(str(exc), 120)})", metadata={"field": where}
        ) from None
    if _SURROGATE_ESCAPE.search(data) and _lone_surrogate(value):
        raise InvalidRecord(
            f"field {where}: a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff "
            "without its pair), which is not Unicode text; send the character itself or a "
            "complete surrogate pair",
            metadata={"field": where},
        )
    return value


# --- JSON from clients: nesting depth (json.loads recurses once per level) ------------------

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_AS_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_too_deep(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether parsing ``data`` would nest deeper than ``limit`` levels, found without
    recursion: strings removed, brackets kept, then one innermost level removed per pass
    (each pass is a C-speed ``bytes.replace``). Unbalanced brackets count as deep as the
    parser would go before failing."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False  # fast path: not enough brackets to nest that deep
    rest = _JSON_STRING.sub(b"", data).translate(_AS_BRACKETS, _NOT_BRACKETS)
    depth = 0
    while rest and depth <= limit:
        shorter = rest.replace(b"[]", b"")
        if len(shorter) == len(rest):  # unbalanced: the parser descends once per opener
            return depth + rest.count(b"[") > limit
        rest, depth = shorter, depth + 1
    return depth > limit


def _too_deep(where: str, limit: int = MAX_JSON_DEPTH) -> InvalidRecord:
    return InvalidRecord(
        f"field {where}: JSON nested deeper than {limit} levels (arrays and objects within "
        f"each other); the limit is {limit}: flatten the value or carry it as a string",
        metadata={"field": where, "limit": limit},
    )


def parse_json(data: bytes, where: str) -> Any:
    """Parse JSON a client sent in field ``where``; ``invalid_record`` naming the field if it
    is refused by ``strict_json`` or nests deeper than ``MAX_JSON_DEPTH``."""
    if json_too_deep(data):
        raise _too_deep(where)
    return strict_json(data, where)


# --- timestamps -------------------------------------------------------------------------------

_OFFSET_TS = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?)([+-][0-9]{2}:[0-9]{2})"
)


def utc_ts_of(ts: str, where: str) -> str:
    """The stored (``Z``) form of a client's RFC 3339 UTC timestamp: ``+00:00`` becomes ``Z``;
    ``-00:00`` (RFC 3339: offset unknown) and every other offset are refused. Anything else is
    returned as it is, for the schema to judge."""
    m = _OFFSET_TS.fullmatch(ts)
    if m is None:
        return ts
    if m.group(2) == "+00:00":
        return m.group(1) + "Z"
    if m.group(2) == "-00:00":
        raise InvalidRecord(
            f"field {where}: {ts!r} ends with -00:00, which RFC 3339 reserves for an unknown "
            "local offset; journald stores UTC only, end with Z (or +00:00)",
            metadata={"field": where},
        )
    raise InvalidRecord(
        f"field {where}: {clip(ts, 64)!r} has the offset {m.group(2)}: UTC only, end with Z "
        "(convert the time to UTC first, e.g. 2026-11-30T12:00:00.000000Z)",
        metadata={"field": where},
    )


def from_json(obj: object) -> Record:
    """Build a record from a decoded JSON object, checking the envelope."""
    return make_record(*envelope_fields(obj))


Fields = tuple[int, str, dict[str, Any], str, str, dict[str, Any] | None]


def envelope_fields(obj: object) -> Fields:
    """(seq, kind, payload, prev, ts, trace) of a decoded JSON record, or the typed error
    naming what is wrong with its envelope (version, seq, type, payload, field types)."""
    if not isinstance(obj, dict):
        raise InvalidRecord("record must be a JSON object")
    version = obj.get("v")
    if type(version) is not int or version != FORMAT_VERSION:  # not true, not 1.0
        raise VersionUnsupported(
            f"record format version {version!r} is not supported (this build reads and writes "
            f"version {FORMAT_VERSION}); upgrade journald or export with a matching version",
            metadata={"version": version, "supported": FORMAT_VERSION},
        )
    seq = obj.get("seq")
    if type(seq) is not int or not 1 <= seq <= MAX_SAFE_INT:
        raise InvalidRecord(f"field seq: must be an integer >= 1, got {seq!r}")
    rtype = obj.get("type")
    kind = KIND_OF.get(rtype) if isinstance(rtype, str) else None
    if kind is None:
        raise InvalidRecord(
            f"field type: unknown record type {obj.get('type')!r}", metadata={"seq": seq}
        )
    extra = set(obj) - ENVELOPE_KEYS - {kind}
    if extra:
        raise InvalidRecord(
            f"record seq {seq}: unexpected field(s) {sorted(extra)}; a record carries exactly "
            f"one payload and it must match its type ({kind})",
            metadata={"seq": seq},
        )
    payload = obj.get(kind)
    if not isinstance(payload, dict):
        raise InvalidRecord(
            f"field {kind}: payload missing or not an object for type {TYPE_OF[kind]}",
            metadata={"seq": seq},
        )
    ts, prev, trace = obj.get("ts"), obj.get("prev"), obj.get("trace")
    if not isinstance(ts, str) or not isinstance(prev, str):
        raise InvalidRecord("fields ts and prev must be strings", metadata={"seq": seq})
    if trace is not None and not isinstance(trace, dict):
        raise InvalidRecord("field trace must be an object", metadata={"seq": seq})
    return seq, kind, payload, prev, ts, trace


def chain(prev_hash: str, records: list[Record]) -> list[Record]:
    """Re-link records onto ``prev_hash`` (used when the writer did not know the chain)."""
    out: list[Record] = []
    for rec in records:
        linked = make_record(rec.seq, rec.kind, rec.payload, prev_hash, rec.ts, rec.trace)
        out.append(linked)
        prev_hash = linked.hash
    return out


# --- Append rules (docs/protocol.md#seq-rules) -----------------------------------------

APPEND = "append"
DUPLICATE = "duplicate"


def check_append(
    last_seq: int, seq: int, stored_hash_at_seq: str | None, new_hash: str, run_id: str = ""
) -> str:
    """Decide an append: ``APPEND`` (seq == last+1), ``DUPLICATE`` (an identical record is
    already stored at that seq: an idempotent retry after a lost ack), or raise.

    The caller advances its last seq only after the record is durable; this function never
    advances anything, so a failed write is retried at the same seq.
    """
    if seq == last_seq + 1:
        return APPEND
    if seq > last_seq + 1:
        raise SeqGap(
            f"run {run_id}: append at seq {seq} but the last stored seq is {last_seq}; "
            f"the next append must be seq {last_seq + 1} (reload the run to resync)",
            metadata={"run_id": run_id, "seq": seq, "last_seq": last_seq},
        )
    if stored_hash_at_seq is not None and stored_hash_at_seq == new_hash:
        return DUPLICATE
    raise SeqConflict(
        f"run {run_id}: seq {seq} is already stored with different content (last seq "
        f"{last_seq}); another writer or a stale state wrote it: reload and continue at "
        f"seq {last_seq + 1}",
        metadata={"run_id": run_id, "seq": seq, "last_seq": last_seq},
    )


def check_batch(run_id: str, seqs: Sequence[int]) -> None:
    """A batch's seqs follow one another (docs/protocol.md#batches-and-the-gap-wait)."""
    for a, b in itertools.pairwise(seqs):
        if b != a + 1:
            raise InvalidRecord(
                f"run {run_id}: a batch needs consecutive seqs; seq {b} follows "
                f"{a} (send seq {a + 1} next, or split the batch)",
                metadata={"seq": b, "run_id": run_id, "field": "records"},
            )


Build = Callable[[int, str, "Record | None"], "Record"]
"""Builds the ``i``-th record of a batch linked onto ``prev``; the stored record at its seq
when it is a retry (whose trace a record without one takes), else None."""


def plan_batch(
    run_id: str,
    at: int,
    prev: str,
    seqs: Sequence[int],
    stored: Mapping[int, Record],
    build: Build,
) -> tuple[list[Record], list[Record]]:
    """The one seq and new-vs-retry decision of a batch (docs/protocol.md#seq-rules), after
    the last queued record (``at``, hash ``prev``): (the stored records its retries match,
    its new records linked in order). A seq at or below ``at`` is built onto the stored
    record's ``prev`` and must have its hash (else ``SeqConflict``); the next is appended;
    one further on is ``SeqGap``. Builds nothing it does not need."""
    dups: list[Record] = []
    new: list[Record] = []
    for i, seq in enumerate(seqs):
        if seq <= at:
            have = stored[seq]
            again = build(i, have.prev, have)
            check_append(at, seq, have.hash, again.hash, run_id)
            dups.append(have)
            continue
        if check_append(at + len(new), seq, None, "", run_id) == APPEND:
            rec = build(i, prev, None)
            new.append(rec)
            prev = rec.hash
    return dups, new
