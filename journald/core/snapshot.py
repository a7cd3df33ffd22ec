"""A folded run state as a JSON document and back (docs/design.md#fold-snapshots).

``encode_state(fold(records[:k]))`` holds everything the fold carries from one record to the
next, so ``fold(records[k:], start=decode_state(doc))`` equals ``fold(records)``: the daemon
keeps such a document beside a run and an Open folds only the records after it.

The document is a cache the daemon wrote itself, never the truth about a run: the caller
trusts it only while the stored record at ``last_seq`` still has ``last_hash`` (the hash chain
then vouches for every record before it). ``decode_state`` refuses anything that is not a
document of this version with ``SnapshotUnreadable``; the caller then folds the run in full.

A **paged** snapshot (version 2, ``paged_snapshot``) holds its committed messages as message
pages plus a tail (``journald.core.pages``), like a paged rebase: ``message_pages`` then
``messages``. Writing one costs the pages the run's store does not hold yet, not the whole
conversation; ``decode_state`` reads it through the resolver it is given, or (``lazy``, what
the daemon does) keeps its pages sealed in the state's ``MessageLog``
(``journald.core.message_log``) for the reads that need them. ``paged_state`` writes one from
a state whose log is sealed already: only the tail is cut. A release that knows only
version 1 ignores a version 2 document (and folds the run in full).

Version 3 is version 2 whose ``answered_ever`` (the tool_use ids the run ever answered,
``journald.core.answered``) is sealed in part: ``answered`` holds the head of its chain of
chunks, how many ids they hold and the tail, instead of the whole list, so the document costs
the same at any length of the run (``message_pages`` may then be empty). A state whose ids are
all in its tail is still written as version 1 or 2; an older release ignores version 3 (its
``answered_ever`` would be incomplete) and folds the run in full. A version 3 document decodes
with its chunks unread: the fold asks for them only on a duplicate or unknown result.

Version 4 is version 3 whose message page references are sealed too
(``journald.core.ref_chunks``): ``page_chunks`` names the full chunks of 128 page references
(each ``{"sha256", "count": messages, "size"}``), ``message_pages`` only the references after
the last chunk (fewer than 128), and ``answered`` is as in version 3 (its head may be null).
So the document holds at most 127 page references and one chunk reference per 128 pages
(~52 at 1M records) whatever the run's length, and a lease end writes the chunks that became
full since the last one (``new_chunks``, stored before the document). A lazy decode reads no
chunk (the last chunk and its last page only when the tail and the loose references are
empty); a non-lazy one resolves every chunk through the ``chunks`` resolver. An older
release ignores version 4 and folds the run in full; versions 1 to 3 decode as before.

Pure core: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from journald.core.answered import AnsweredIds, answered_from_json
from journald.core.errors import InvalidRecord, StoreCorrupted
from journald.core.fingerprint import Fingerprint
from journald.core.fold import (
    Anomaly,
    Counters,
    Message,
    Pending,
    PendingResult,
    RunState,
    StateValue,
    ToolCall,
)
from journald.core.message_log import MessageLog
from journald.core.pages import Paged, PageRef, PageResolver, conversation, page_refs
from journald.core.ref_chunks import (
    ChunkResolver,
    RefChunk,
    chunks_from_json,
    full_chunks,
)

SNAPSHOT_VERSION = 1
PAGED_SNAPSHOT_VERSION = 2
ANSWERED_SNAPSHOT_VERSION = 3
CHUNKED_SNAPSHOT_VERSION = 4
PAGED_VERSIONS = (PAGED_SNAPSHOT_VERSION, ANSWERED_SNAPSHOT_VERSION, CHUNKED_SNAPSHOT_VERSION)
_COUNTERS = tuple(f.name for f in fields(Counters))


class SnapshotUnreadable(ValueError):
    """A document that is not a snapshot this code wrote (another version, damaged, edited)."""


def encode_state(st: RunState) -> dict[str, Any]:
    """The state as a JSON value (version 1: every message inline, each page of a sealed
    ``MessageLog`` read, so its pages must be loaded, and every answered id, so sealed
    chunks of them must be loaded). Lists and dicts are new; message dicts are shared with
    ``st`` (the fold never mutates one in place)."""
    return _encode(st, list(st.messages))


def paged_state(st: RunState, tail: Paged) -> dict[str, Any]:
    """The snapshot of a state whose messages are its log's sealed pages, then ``tail`` (the
    cut of the log's tail, ``cut_open(st.messages.tail)``): what it costs to write is the tail's
    new pages, never the sealed ones (they are stored already). Version 1 when there are no
    pages at all; version 3 when answered ids are sealed (their chunks are stored already,
    and the document names them by the head of their chain); version 4 when the page
    references fill a chunk (``new_chunks`` are the ones the caller stores first)."""
    log = st.messages
    refs = [*log.loose, *tail.refs]
    new = full_chunks(refs)
    if log.chunks or new:
        out = _encode(st, list(tail.tail), answered=False)
        out["v"] = CHUNKED_SNAPSHOT_VERSION
        out["page_chunks"] = [r.as_json() for r in (*log.chunks, *(c.ref for c in new))]
        out["message_pages"] = [r.as_json() for r in refs[sum(len(c.refs) for c in new) :]]
        out["answered"] = st.answered_ever.as_json()
        return out
    if st.answered_ever.head is not None:
        out = _encode(st, list(tail.tail), answered=False)
        out["v"] = ANSWERED_SNAPSHOT_VERSION
        out["message_pages"] = [r.as_json() for r in refs]
        out["answered"] = st.answered_ever.as_json()
        return out
    if not refs:
        return _encode(st, list(st.messages.tail))
    out = _encode(st, list(tail.tail))
    out["v"] = PAGED_SNAPSHOT_VERSION
    out["message_pages"] = [r.as_json() for r in refs]
    return out


def new_chunks(st: RunState, tail: Paged) -> list[RefChunk]:
    """The page-reference chunks ``paged_state(st, tail)`` names that ``st``'s log does not
    (the loose references and the tail's pages that fill one): stored before the document."""
    return full_chunks([*st.messages.loose, *tail.refs])


def _encode(st: RunState, messages: list[Message], answered: bool = True) -> dict[str, Any]:
    pending = st.pending
    out = {
        "v": SNAPSHOT_VERSION,
        "run_id": st.run_id,
        "fingerprint": st.fingerprint.as_json() if st.fingerprint is not None else None,
        "interactive": st.interactive,
        "created": st.created,
        "prompt": list(st.prompt),
        "labels": dict(st.labels),
        "lineage": st.lineage,
        "messages": messages,
        "pending": None
        if pending is None
        else {
            "message": pending.message,
            "iteration": pending.iteration,
            "stop_reason": pending.stop_reason,
            "seq": pending.seq,
            "calls": [[c.id, c.name, c.input] for c in pending.calls],
            "results": [[r.tool_use_id, r.content, r.is_error, r.seq] for r in pending.results],
        },
        "counters": {name: getattr(st.counters, name) for name in _COUNTERS},
        "next_iteration": st.next_iteration,
        "last_stop_reason": st.last_stop_reason,
        "terminal": st.terminal,
        "terminal_is_last": st.terminal_is_last,
        "last_seq": st.last_seq,
        "last_hash": st.last_hash,
        "last_ts": st.last_ts,
        "anomalies": [[a.seq, a.kind, a.detail] for a in st.anomalies],
        "answered_ever": sorted(st.answered_ever.all()) if answered else None,
        # namespaces and keys in the order the fold holds them (the order of their writes)
        "state": [
            [ns, [[k, v.seq, v.type, v.data, v.sha256, v.size] for k, v in values.items()]]
            for ns, values in st.state.items()
        ],
    }
    if not answered:
        del out["answered_ever"]
    return out


def paged_snapshot(doc: Mapping[str, Any], paged: Paged) -> dict[str, Any]:
    """``doc`` (``encode_state``) with its messages as ``paged`` (cut from them): version 2
    (version 1, unchanged, when the messages are shorter than one page)."""
    if not paged.refs:
        return dict(doc)
    out = {**doc, "v": PAGED_SNAPSHOT_VERSION, "messages": paged.tail}
    out["message_pages"] = paged.refs_json
    return out


def snapshot_pages(doc: object) -> list[PageRef]:
    """The pages a snapshot document references (none for version 1 or damage)."""
    if not isinstance(doc, Mapping) or doc.get("v") not in PAGED_VERSIONS:
        return []
    try:
        return page_refs({"pages": doc.get("message_pages")})
    except StoreCorrupted:
        return []


def snapshot_chunks(doc: object) -> list[PageRef]:
    """The page-reference chunks a snapshot document names (version 4; none for others or
    damage): what scrub, Verify and Recover check beside its pages."""
    if not isinstance(doc, Mapping) or doc.get("v") != CHUNKED_SNAPSHOT_VERSION:
        return []
    try:
        return chunks_from_json(doc.get("page_chunks"))
    except (ValueError, StoreCorrupted):
        return []


def snapshot_answered_head(doc: object) -> PageRef | None:
    """The head of the answered-id chunks a snapshot document references (None: none, or
    damage)."""
    if not isinstance(doc, Mapping) or doc.get("v") not in (
        ANSWERED_SNAPSHOT_VERSION,
        CHUNKED_SNAPSHOT_VERSION,
    ):
        return None
    try:
        return answered_from_json(doc.get("answered")).head
    except (ValueError, StoreCorrupted):
        return None


def decode_state(
    doc: object,
    pages: PageResolver | None = None,
    lazy: bool = False,
    chunks: ChunkResolver | None = None,
) -> RunState:
    """The state ``encode_state`` (or ``paged_snapshot``/``paged_state``, read through
    ``pages``) wrote; ``SnapshotUnreadable`` for anything else, a page that cannot be read
    included. Every list and dict of the result is new (the caller folds into it).

    ``lazy``: a paged snapshot's pages stay sealed in the result's ``MessageLog`` (read
    later, by the windows that need them); only the last page is read, and only when the
    tail is empty (the fold may merge into the last message).

    A version 3 document's answered-id chunks are never read here: the result's
    ``answered_ever`` names them (``journald.core.answered``). A version 4 document's
    page-reference chunks are read through ``chunks`` (lazy: none, or the last one only when
    it holds the last page to read)."""
    try:
        if isinstance(doc, Mapping) and doc.get("v") == CHUNKED_SNAPSHOT_VERSION:
            return _decode_chunked(doc, pages, lazy, chunks)
        answered = None
        if isinstance(doc, Mapping) and doc.get("v") == ANSWERED_SNAPSHOT_VERSION:
            answered = answered_from_json(doc.get("answered"))
            _need(answered.head is not None, "a version 3 snapshot without answered chunks")
            doc = {k: v for k, v in doc.items() if k != "answered"} | {
                "v": PAGED_SNAPSHOT_VERSION,
                "answered_ever": [],
            }
            if not doc.get("message_pages"):
                doc = {k: v for k, v in doc.items() if k != "message_pages"}
                doc["v"] = SNAPSHOT_VERSION
        st = _decode_any(doc, pages, lazy)
        if answered is not None:
            st.answered_ever = answered
        return st
    except (
        KeyError,
        IndexError,
        TypeError,
        ValueError,
        AttributeError,
        InvalidRecord,
        StoreCorrupted,
    ) as exc:
        if isinstance(exc, SnapshotUnreadable):
            raise
        raise SnapshotUnreadable(f"malformed snapshot: {type(exc).__name__}: {exc}") from None


def _decode_any(doc: object, pages: PageResolver | None, lazy: bool) -> RunState:
    if lazy and isinstance(doc, Mapping) and doc.get("v") == PAGED_SNAPSHOT_VERSION:
        return _decode_lazy(doc, pages)
    if isinstance(doc, Mapping) and doc.get("v") == PAGED_SNAPSHOT_VERSION:
        refs = doc.get("message_pages")
        _need(isinstance(refs, list) and bool(refs), "a paged snapshot without pages")
        msgs = conversation(
            {"messages": doc.get("messages"), "pages": doc.get("message_pages")}, pages
        )
        _need(msgs is not None, "messages is not a list")
        doc = {k: v for k, v in doc.items() if k != "message_pages"} | {
            "v": SNAPSHOT_VERSION,
            "messages": msgs,
        }
    return _decode(doc)


def _decode_lazy(doc: Mapping[str, Any], pages: PageResolver | None) -> RunState:
    refs = page_refs({"pages": doc.get("message_pages")})
    _need(bool(refs), "a paged snapshot without pages")
    st = _decode({k: v for k, v in doc.items() if k != "message_pages"} | {"v": SNAPSHOT_VERSION})
    if st.messages.tail:
        st.messages = MessageLog(st.messages.tail, refs)
    else:  # the last page becomes the tail: the fold may merge into its last message
        _need(pages is not None, "its last page was not read")
        assert pages is not None
        st.messages = MessageLog(_messages(pages(refs[-1]), "the last page"), refs[:-1])
    return st


def _decode_chunked(
    doc: Mapping[str, Any], pages: PageResolver | None, lazy: bool, chunks: ChunkResolver | None
) -> RunState:
    answered = answered_from_json(doc.get("answered"))
    chunk_refs = chunks_from_json(doc.get("page_chunks"))
    _need(bool(chunk_refs), "a version 4 snapshot without page chunks")
    loose = page_refs({"pages": doc.get("message_pages")})
    drop = ("answered", "page_chunks", "message_pages")
    st = _decode(
        {k: v for k, v in doc.items() if k not in drop}
        | {"v": SNAPSHOT_VERSION, "answered_ever": []}
    )
    st.answered_ever = answered
    if not lazy:
        _need(pages is not None and chunks is not None, "its chunks and pages were not read")
        assert pages is not None
        assert chunks is not None
        msgs: list[Message] = []
        for c in chunk_refs:
            for ref in chunks(c):
                msgs.extend(_messages(pages(ref), "a page"))
        for ref in loose:
            msgs.extend(_messages(pages(ref), "a page"))
        st.messages = MessageLog([*msgs, *st.messages.tail])
        return st
    log = MessageLog(st.messages.tail, loose, chunks=chunk_refs)
    if not log.tail:  # the last page becomes the tail: the fold may merge into its last message
        _need(pages is not None, "its last page was not read")
        assert pages is not None
        if not loose:
            _need(chunks is not None, "its last chunk was not read")
            assert chunks is not None
            log.provide_chunk(chunk_refs[-1], chunks(chunk_refs[-1]))
        ref = log.span_refs(log.sealed - 1, log.sealed)[0]
        log.provide(ref, _messages(pages(ref), "the last page"))
        log[-1] = log[-1]  # takes the last page back into the tail
    st.messages = log
    return st


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise SnapshotUnreadable(f"malformed snapshot: {what}")


def _typed(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    # bool is an int subclass: a count or seq that is a bool is damage, not a number
    _need(isinstance(value, kind) and not (kind is int and isinstance(value, bool)), what)
    return value


def _int(value: Any, what: str) -> int:
    _need(type(value) is int, f"{what} is not an integer")
    return int(value)


def _messages(value: Any, what: str) -> list[Message]:
    _typed(value, list, f"{what} is not a list")
    for m in value:
        _need(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), list),
            f"{what} holds something that is not a message",
        )
    return list(value)


def _pending(value: Any) -> Pending | None:
    if value is None:
        return None
    _typed(value, dict, "pending is not an object")
    message = _messages([value["message"]], "pending.message")[0]
    calls = [ToolCall(str(c[0]), str(c[1]), str(c[2])) for c in _typed(value["calls"], list, "")]
    results = [
        PendingResult(str(r[0]), list(_typed(r[1], list, "result content")), bool(r[2]), r[3])
        for r in _typed(value["results"], list, "pending.results is not a list")
    ]
    for r in results:
        _int(r.seq, "a pending result's seq")
    return Pending(
        message,
        _int(value["iteration"], "pending.iteration"),
        str(value["stop_reason"]),
        _int(value["seq"], "pending.seq"),
        calls,
        results,
    )


def _state(value: Any) -> dict[str, dict[str, StateValue]]:
    out: dict[str, dict[str, StateValue]] = {}
    for ns, entries in _typed(value, list, "state is not a list"):
        values = out.setdefault(str(ns), {})
        for key, seq, vtype, data, sha, size in entries:
            values[str(key)] = StateValue(
                _int(seq, "a state value's seq"), str(vtype), str(data), str(sha), _int(size, "")
            )
    return out


def _decode(doc: object) -> RunState:
    _typed(doc, Mapping, "not an object")
    assert isinstance(doc, Mapping)
    _need(doc.get("v") == SNAPSHOT_VERSION, f"version {doc.get('v')!r}, not {SNAPSHOT_VERSION}")
    fp = doc["fingerprint"]
    counters = _typed(doc["counters"], dict, "counters is not an object")
    terminal = doc["terminal"]
    lineage = doc["lineage"]
    _need(terminal is None or isinstance(terminal, dict), "terminal is not an object")
    _need(lineage is None or isinstance(lineage, dict), "lineage is not an object")
    return RunState(
        run_id=str(doc["run_id"]),
        fingerprint=None if fp is None else Fingerprint.from_json(_typed(fp, dict, "")),
        interactive=bool(doc["interactive"]),
        created=str(doc["created"]),
        prompt=list(_typed(doc["prompt"], list, "prompt is not a list")),
        labels={str(k): str(v) for k, v in _typed(doc["labels"], dict, "").items()},
        lineage=dict(lineage) if lineage is not None else None,
        messages=MessageLog(_messages(doc["messages"], "messages")),
        pending=_pending(doc["pending"]),
        counters=Counters(**{n: _int(counters.get(n, 0), n) for n in _COUNTERS}),
        next_iteration=_int(doc["next_iteration"], "next_iteration"),
        last_stop_reason=str(doc["last_stop_reason"]),
        terminal=dict(terminal) if terminal is not None else None,
        terminal_is_last=bool(doc["terminal_is_last"]),
        last_seq=_int(doc["last_seq"], "last_seq"),
        last_hash=str(_typed(doc["last_hash"], str, "last_hash is not a string")),
        last_ts=str(doc["last_ts"]),
        anomalies=[
            Anomaly(_int(a[0], "an anomaly's seq"), str(a[1]), str(a[2]))
            for a in _typed(doc["anomalies"], list, "anomalies is not a list")
        ],
        answered_ever=AnsweredIds(str(t) for t in _typed(doc["answered_ever"], list, "")),
        state=_state(doc["state"]),
    )
