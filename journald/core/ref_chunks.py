"""A conversation's message-page references, sealed into content-addressed chunks
(docs/design.md#message-pages, docs/protocol.md#page-reference-chunks).

A long run's conversation is thousands of message pages (``journald.core.pages``), and the
list of their references (~100 bytes each, ~7,000 at 1M records) grew with the run: a fold
snapshot that carried it whole cost every dormant read its decoding and every lease end its
rewriting. So the references are grouped, as the answered ids are (``journald.core.answered``):

* **Chunk.** ``canonical_json({"format": "journald-pagerefs/1", "refs": [ref, ...]})``,
  stored once in the run's content-addressed store beside the pages, named by the SHA-256 of
  exactly those bytes.
* **Reference.** A ``PageRef`` ``{"sha256", "count", "size"}`` whose ``count`` is the number
  of *messages* the chunk's pages hold (so a log bisects chunks by message index without
  reading one) and ``size`` the chunk's length in bytes.
* **Deterministic cut.** Chunk ``i`` holds the conversation's page references
  ``[REFS_PER_CHUNK * i, REFS_PER_CHUNK * (i + 1))``: only full chunks exist, the references
  after the last one stay *loose* (inline in a snapshot). The same conversation always gives
  the same chunks, so a chunk is stored once (a lease end stores only the chunks that became
  full since the last one) and a digest of a page prefix can be taken over chunk references.
* **Checked.** ``decode_ref_chunk`` checks the bytes against the reference (address, size,
  format, message count, ``REFS_PER_CHUNK`` references); a missing or damaged chunk is
  ``store_corrupted`` naming it.

Pure core: no I/O imports; ``journald.storage.pages.PageStore`` reads and stores chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from journald.core.errors import StoreCorrupted
from journald.core.pages import PageRef, addressed_json, ref_from_json
from journald.core.records import canonical_json, sha256_hex

PAGEREFS_FORMAT = "journald-pagerefs/1"
REFS_PER_CHUNK = 128
"""Page references per chunk (~13 KiB of chunk, ~16 MiB of conversation at 128 KiB pages):
a tail read reads one chunk, and a snapshot carries fewer than this many loose references."""

ChunkResolver = Callable[[PageRef], Sequence[PageRef]]
"""The page references of one referenced chunk; raises ``StoreCorrupted`` naming it."""


@dataclass(frozen=True, slots=True)
class RefChunk:
    """One chunk: its reference, its bytes and the page references it holds."""

    ref: PageRef
    raw: bytes
    refs: tuple[PageRef, ...]


def encode_ref_chunk(refs: Sequence[PageRef]) -> RefChunk:
    raw = canonical_json({"format": PAGEREFS_FORMAT, "refs": [r.as_json() for r in refs]})
    count = sum(r.count for r in refs)
    return RefChunk(PageRef(sha256_hex(raw), count, len(raw)), raw, tuple(refs))


def full_chunks(refs: Sequence[PageRef]) -> list[RefChunk]:
    """The chunks of ``refs`` (page references starting at a chunk boundary): one per full
    ``REFS_PER_CHUNK`` of them, in order; the rest stay loose."""
    n = REFS_PER_CHUNK
    return [encode_ref_chunk(refs[i : i + n]) for i in range(0, len(refs) - n + 1, n)]


def _chunk_error(ref: PageRef, what: str) -> StoreCorrupted:
    return StoreCorrupted(
        f"message-page reference chunk {ref.sha256} {what}; the conversation (or fold "
        "snapshot) that names it cannot be read: restore the run's attachments from a backup "
        "(a snapshot is a cache: Recover drops it and the next lease end writes a new one)",
        metadata={"chunk": ref.sha256},
    )


def ref_chunk_missing(ref: PageRef) -> StoreCorrupted:
    return _chunk_error(ref, "is referenced but missing from the run's store")


def decode_ref_chunk(ref: PageRef, raw: bytes) -> RefChunk:
    """The chunk ``raw``, checked against ``ref`` (address, size, format, count)."""
    obj = addressed_json(ref, raw, _chunk_error)
    refs: list[PageRef] = []
    ok = (
        isinstance(obj, dict)
        and obj.get("format") == PAGEREFS_FORMAT
        and set(obj) == {"format", "refs"}
        and isinstance(obj["refs"], list)
        and len(obj["refs"]) == REFS_PER_CHUNK
    )
    if ok:
        try:
            refs = [ref_from_json(r) for r in obj["refs"]]
        except StoreCorrupted:
            ok = False
    if not ok or sum(r.count for r in refs) != ref.count:
        raise _chunk_error(
            ref,
            f"is not a {PAGEREFS_FORMAT} chunk of {REFS_PER_CHUNK} page references holding "
            f"{ref.count} messages",
        )
    return RefChunk(ref, raw, tuple(refs))


def chunks_from_json(value: object) -> list[PageRef]:
    """A snapshot's ``page_chunks`` list (``ValueError``, ``StoreCorrupted`` when malformed)."""
    if not isinstance(value, list):
        raise ValueError("page_chunks is not a list")
    return [ref_from_json(r) for r in value]
