"""The tool_use ids a run ever answered, sealed in content-addressed chunks plus an open tail
(docs/design.md#answered-ids, docs/protocol.md#answered-id-chunks).

The fold keeps every id a tool_result answered (``RunState.answered_ever``) for one purpose:
a late copy of an answer to an earlier turn is a ``duplicate_result`` anomaly rather than an
``unknown_tool_use_id``. The set grows with the run (one id per call) and is asked about only
on that anomalous path, so it must not be what a fold snapshot costs to write, nor what a held
run keeps in memory.

* **Chunks.** The older ids are sealed into chunks, each stored once in the run's
  content-addressed store (beside the message pages), named by its SHA-256. A chunk is
  ``canonical_json({"format": "journald-answered/1", "ids": [sorted ids], "prev": ref})``,
  where ``prev`` is the reference of the chunk sealed before it (null for the first): the
  chunks form a chain, so a snapshot names the whole set with one reference (its head) plus
  the tail, whatever the run's length, and the head's hash vouches for every chunk before it.
* **Reference.** ``{"sha256", "count", "size"}`` (``journald.core.pages.PageRef``): the
  address, how many ids the chunk holds and its length in bytes.
* **Tail.** Ids answered since the last seal, in memory and inline in a snapshot; the writer
  seals it once it holds ``ANSWERED_CHUNK_BYTES`` (so a snapshot's inline tail is bounded).
* **Membership.** An id in the tail is answered; with no chunks, an id not in the tail is not.
  Otherwise the chunks must be loaded (``load``) by the caller, which does the I/O: the
  pure core raises ``AnsweredNotLoaded``. The fold asks before it changes anything for the
  record, so a caller loads the chunks and folds the same record again
  (``journald.writer.folding``). The daemon's live appends never ask: admission refuses a
  result that does not answer an open call of the pending turn.

Pure core: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from journald.core.errors import StoreCorrupted
from journald.core.pages import PageRef, addressed_json, ref_from_json
from journald.core.records import canonical_json, sha256_hex

ANSWERED_FORMAT = "journald-answered/1"
ANSWERED_CHUNK_BYTES = 16 * 1024
"""The tail is sealed into a chunk once its ids take this many encoded bytes: the bound on
what a snapshot carries inline (a chain of chunks of this size is ~1 read per 1,000 ids)."""


class AnsweredNotLoaded(LookupError):
    """A membership question the tail cannot answer while the chunks are not loaded (the
    caller loads them, ``AnsweredIds.load``, and asks again)."""

    def __init__(self, head: PageRef, tool_use_id: str) -> None:
        super().__init__(
            f"answered-id chunks (head {head.sha256[:12]}) are sealed and not loaded: read them "
            f"(journald.storage.pages.PageStore.load_answered) to know whether {tool_use_id!r} "
            "was answered"
        )
        self.head = head
        self.tool_use_id = tool_use_id


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk's bytes and what they hold (``prev``: the chunk sealed before, or None)."""

    ref: PageRef
    raw: bytes
    ids: list[str]
    prev: PageRef | None


def encode_chunk(ids: Iterable[str], prev: PageRef | None) -> Chunk:
    sorted_ids = sorted(set(ids))
    raw = canonical_json(
        {
            "format": ANSWERED_FORMAT,
            "ids": sorted_ids,
            "prev": prev.as_json() if prev is not None else None,
        }
    )
    return Chunk(PageRef(sha256_hex(raw), len(sorted_ids), len(raw)), raw, sorted_ids, prev)


def _chunk_error(ref: PageRef, what: str) -> StoreCorrupted:
    return StoreCorrupted(
        f"answered-id chunk {ref.sha256} {what}; the fold snapshot that references it cannot "
        "be used: restore the run's attachments from a backup (the next lease end of the run "
        "writes a new snapshot)",
        metadata={"chunk": ref.sha256},
    )


def chunk_missing(ref: PageRef) -> StoreCorrupted:
    return _chunk_error(ref, "is referenced but missing from the run's store")


def decode_chunk(ref: PageRef, raw: bytes) -> Chunk:
    """The chunk ``raw``, checked against ``ref`` (address, size, format, count)."""
    obj = addressed_json(ref, raw, _chunk_error)
    ids = obj.get("ids") if isinstance(obj, dict) else None
    try:
        ok = (
            isinstance(obj, dict)
            and obj.get("format") == ANSWERED_FORMAT
            and set(obj) == {"format", "ids", "prev"}
            and isinstance(ids, list)
            and len(ids) == ref.count
            and all(isinstance(t, str) for t in ids)
        )
        prev = ref_from_json(obj["prev"]) if ok and obj["prev"] is not None else None
    except StoreCorrupted:
        ok = False
    if not ok:
        raise _chunk_error(ref, f"is not a {ANSWERED_FORMAT} chunk of {ref.count} ids")
    assert isinstance(ids, list)
    return Chunk(ref, raw, ids, prev)


class AnsweredIds:
    """Sealed chunks (named by ``head``) then the open ``tail``; see the module doc."""

    __slots__ = ("_loaded", "_tail_bytes", "head", "sealed_count", "tail")

    def __init__(
        self,
        tail: Iterable[str] = (),
        head: PageRef | None = None,
        sealed_count: int = 0,
        loaded: frozenset[str] | None = None,
    ) -> None:
        self.head = head
        self.sealed_count = sealed_count  # ids the chain holds (one per chunk it was sealed in)
        self.tail: set[str] = set(tail)
        self._tail_bytes = sum(_size(t) for t in self.tail)
        self._loaded = loaded if head is not None else frozenset()

    @property
    def loaded(self) -> bool:
        """Whether membership can be answered without reading a chunk."""
        return self._loaded is not None

    def add(self, tool_use_id: str) -> None:
        if tool_use_id not in self.tail:
            self.tail.add(tool_use_id)
            self._tail_bytes += _size(tool_use_id)

    def __contains__(self, tool_use_id: object) -> bool:
        if tool_use_id in self.tail:
            return True
        if self._loaded is None:
            assert self.head is not None
            raise AnsweredNotLoaded(self.head, str(tool_use_id))
        return tool_use_id in self._loaded

    def all(self) -> set[str]:
        """Every answered id (``AnsweredNotLoaded`` while chunks are sealed and not loaded)."""
        if self._loaded is None:
            assert self.head is not None
            raise AnsweredNotLoaded(self.head, "")
        return set(self._loaded) | self.tail

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.all()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AnsweredIds):
            if self.head == other.head and self.tail == other.tail:
                return True
            return self.all() == other.all()
        if isinstance(other, (set, frozenset)):
            return self.all() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a set

    def __repr__(self) -> str:
        head = self.head.sha256[:12] if self.head else None
        return f"AnsweredIds(head={head}, sealed={self.sealed_count}, tail={sorted(self.tail)})"

    def copy(self) -> AnsweredIds:
        out = AnsweredIds((), self.head, self.sealed_count, self._loaded)
        out.tail = set(self.tail)
        out._tail_bytes = self._tail_bytes
        return out

    def load(self, sealed: Iterable[str]) -> None:
        """Every id the chunks hold (read and checked by the caller, ``chain_ids``)."""
        self._loaded = frozenset(sealed)

    # --- sealing: the writer keeps the tail bounded --------------------------------------------

    def tail_bytes(self) -> int:
        return self._tail_bytes

    def sealable(self, target_bytes: int = ANSWERED_CHUNK_BYTES) -> list[Chunk]:
        """The chunks to seal the tail into once it holds ``target_bytes`` (none before):
        the tail's ids in sorted order, ``target_bytes`` per chunk, chained after ``head``."""
        if self._tail_bytes < target_bytes:
            return []
        out: list[Chunk] = []
        prev, part, size = self.head, [], 0
        for t in sorted(self.tail):
            part.append(t)
            size += _size(t)
            if size >= target_bytes:
                out.append(encode_chunk(part, prev))
                prev, part, size = out[-1].ref, [], 0
        if part:
            out.append(encode_chunk(part, prev))
        return out

    def seal(self, chunks: Iterable[Chunk]) -> None:
        """Move the chunks' ids out of the tail (the chunks stored by the caller, chained
        after ``head``: ``sealable``'s). The sealed ids leave memory: a held run's appends
        never ask about them (admission), and a fold that does loads them again."""
        for chunk in chunks:
            if chunk.prev != self.head:
                raise ValueError("a chunk must be chained after the current head")
            self.head = chunk.ref
            self.sealed_count += chunk.ref.count
            self._loaded = None
            for t in chunk.ids:
                if t in self.tail:
                    self.tail.discard(t)
                    self._tail_bytes -= _size(t)

    # --- in a snapshot -------------------------------------------------------------------------

    def as_json(self) -> dict[str, Any]:
        """``{"head": ref | null, "count": n, "ids": [tail, sorted]}`` (a snapshot's)."""
        return {
            "head": self.head.as_json() if self.head is not None else None,
            "count": self.sealed_count,
            "ids": sorted(self.tail),
        }


def answered_from_json(value: object) -> AnsweredIds:
    """``AnsweredIds.as_json``'s value back (``ValueError`` when malformed)."""
    if not isinstance(value, Mapping) or set(value) != {"head", "count", "ids"}:
        raise ValueError("answered is not an object of head, count and ids")
    ids, count, head = value["ids"], value["count"], value["head"]
    if not isinstance(ids, list) or not all(isinstance(t, str) for t in ids):
        raise ValueError("answered.ids is not a list of strings")
    if type(count) is not int or count < 0 or (head is None) != (count == 0):
        raise ValueError("answered.count does not match its head")
    return AnsweredIds(ids, ref_from_json(head) if head is not None else None, count)


def _size(tool_use_id: str) -> int:
    return len(tool_use_id.encode()) + 3  # quotes and a comma, as a chunk encodes it
