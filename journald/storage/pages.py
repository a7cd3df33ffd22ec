"""Where message pages live: the run's content-addressed attachment store
(docs/design.md#message-pages).

A page's address is the SHA-256 of its bytes, which is exactly how the attachment store
addresses what it keeps, so every backend stores pages without code of its own (file: the
run's ``attachments/``; JetStream: ``<STREAM>_ATTACHMENTS``; memory: memory), once per run,
and they go with the run (``Delete``) like attachments do. The chunks of a run's answered
tool_use ids (``journald.core.answered``) and of its page references
(``journald.core.ref_chunks``) live there too, the same way.

A sealed conversation (``MessageLog``) is read two levels down: a read of ``[start, end)``
loads the reference chunks holding that range (one for a tail read), then the pages; only
the whole-conversation paths (``whole``, ``all_refs``) read every chunk.

``PageStore`` writes a conversation's pages (before the record or checkpoint that references
them: a crash in between leaves pages no one references, never a reference without its page)
and reads them back checked. ``PagedCheckpoints`` wraps a backend's checkpoint store so that
every checkpoint is stored as page references plus a tail and read back whole, for every
caller (the daemon, ``migrate``, the prune hook).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from journald.core.answered import AnsweredIds, Chunk, chunk_missing, decode_chunk
from journald.core.checkpoints import Checkpoint, CheckpointMeta, Message, resolved
from journald.core.errors import AttachmentNotFound, StoreCorrupted
from journald.core.fold import RunState
from journald.core.message_log import ChunkPages, MessageLog, Span
from journald.core.pages import (
    Paged,
    PageRef,
    PageResolver,
    cut,
    decode_page,
    is_paged,
    page_missing,
)
from journald.core.rebase_chunks import (
    PagedRebase,
    chunk_map_resolver,
    open_chunk,
    open_refs,
    referenced_chunks,
    referenced_pages,
    with_chunks,
)
from journald.core.records import Record
from journald.core.ref_chunks import RefChunk, decode_ref_chunk, ref_chunk_missing
from journald.core.snapshot import snapshot_answered_head, snapshot_chunks
from journald.storage.base import Store
from journald.storage.checkpoint_base import MARKS, SNAPSHOT, AttachmentStore, CheckpointStore

DECODED_PAGES_BYTES = 4 * 1024 * 1024
"""Bound on the decoded pages a ``PageStore`` keeps, counted in the pages' stored bytes
(``PageRef.size``): 32 full pages, so the tail page of every run a client is paging stays
decoded across calls (a dormant History tail reads, hashes and decodes no page), while the
decoded form (Python dicts and strings, a few times the JSON bytes for small messages)
stays a small part of the daemon's RSS budget (a held 1M run <= idle + 64 MiB)."""


def decoded_resolver(pages: Mapping[str, list[Message]]) -> PageResolver:
    """Resolve from pages read and decoded already (``PageStore.decoded``)."""

    def resolve(ref: PageRef) -> list[Message]:
        msgs = pages.get(ref.sha256)
        if msgs is None:
            raise page_missing(ref)
        return msgs

    return resolve


@dataclass(slots=True)
class PageWrites:
    """What one ``PageStore.write`` stored: pages new to the run and their bytes."""

    pages: int = 0
    new_pages: int = 0
    new_bytes: int = 0


class PageStore:
    """Reads and writes a run's pages. Reads for a caller (``decoded`` and what uses it) go
    through a bounded cache of checked, decoded pages keyed by (run, reference): a page is
    immutable (its address is its content), so a hit is the same messages; the run is in the
    key so that one run's page never answers for another's (a run missing its copy is still
    ``store_corrupted``). Only small reads use it (``span``: a History page; ``load``; the
    snapshot's last page); a resume's window and a whole conversation (``whole``, a fold of
    rebases, a checkpoint) are read from the store. So a page deleted or damaged on disk
    after it was cached is still served to small reads until it is evicted (the store has no
    cheap existence check on every backend); ``read``, what Verify and the scrubber use,
    always reads the bytes, and a scrub finding makes every read refuse the run
    (docs/design.md, "What a read parses and stats")."""

    def __init__(
        self, attachments: AttachmentStore, cache_bytes: int = DECODED_PAGES_BYTES
    ) -> None:
        self.attachments = attachments
        self.written = PageWrites()
        """Running totals (the benchmark reads them)."""
        self.cache_bytes = cache_bytes
        self.cached_bytes = 0
        """Stored bytes of the pages cached now (at most ``cache_bytes``)."""
        self._decoded: OrderedDict[tuple[str, PageRef], list[Message]] = OrderedDict()

    async def put(self, run_id: str, paged: Paged) -> None:
        """Store every page of ``paged`` in ``run_id`` (those it holds already are kept)."""
        for ref in paged.refs:
            _, existed = await self.attachments.put(run_id, paged.data[ref.sha256])
            self.written.pages += 1
            if not existed:
                self.written.new_pages += 1
                self.written.new_bytes += ref.size

    async def write(self, run_id: str, messages: Sequence[Message]) -> Paged:
        """Cut ``messages`` into pages and store them; the paged form to reference."""
        paged = cut(messages)
        await self.put(run_id, paged)
        return paged

    async def _fetch(self, run_id: str, ref: PageRef) -> tuple[bytes, list[Message]]:
        """One page's bytes read from the store and its messages (checked once); a missing or
        damaged one is ``store_corrupted`` naming it."""
        try:
            raw = await self.attachments.get(run_id, ref.sha256)
        except AttachmentNotFound:
            raise named_page_error(page_missing(ref), run_id) from None
        except StoreCorrupted as exc:
            raise named_page_error(exc, run_id, ref) from None
        try:
            return raw, decode_page(ref, raw)
        except StoreCorrupted as exc:
            raise named_page_error(exc, run_id) from None

    async def read(self, run_id: str, refs: Iterable[PageRef]) -> dict[str, bytes]:
        """The bytes of each page, read from the store (never the cache: Verify and the
        scrubber see what is on disk now) and checked; a missing or damaged one is
        ``store_corrupted`` naming it."""
        out: dict[str, bytes] = {}
        for ref in refs:
            if ref.sha256 not in out:
                out[ref.sha256] = (await self._fetch(run_id, ref))[0]
        return out

    async def decoded(
        self, run_id: str, refs: Iterable[PageRef], cached: bool = True
    ) -> dict[str, list[Message]]:
        """The messages of each page, checked (decoded once, then kept in the bounded cache;
        ``cached`` False: a read of a whole conversation, which reads every page from the
        store, so that it finds a page gone from disk, and does not push the pages small reads
        come back for out of the cache); a missing or damaged one is ``store_corrupted``
        naming it. The lists and message dicts
        are shared with later reads: callers never change them in place (a message changes
        by replacement: ``journald.core.message_log``)."""
        out: dict[str, list[Message]] = {}
        for ref in refs:
            if ref.sha256 in out:
                continue
            key = (run_id, ref)
            msgs = self._decoded.get(key) if cached else None
            if msgs is None:
                msgs = (await self._fetch(run_id, ref))[1]
                if cached:
                    self._keep(key, msgs)
            else:
                self._decoded.move_to_end(key)
            out[ref.sha256] = msgs
        return out

    def _keep(self, key: tuple[str, PageRef], msgs: list[Message]) -> None:
        size = key[1].size
        if size > self.cache_bytes or key in self._decoded:
            return
        self._decoded[key] = msgs
        self.cached_bytes += size
        while self.cached_bytes > self.cache_bytes:
            (_, old), _ = self._decoded.popitem(last=False)
            self.cached_bytes -= old.size

    def forget(self, run_id: str) -> None:
        """Drop the run's cached pages (``Delete``, a discarded fork, ``Recover``: its pages
        may be gone or replaced)."""
        for key in [k for k in self._decoded if k[0] == run_id]:
            del self._decoded[key]
            self.cached_bytes -= key[1].size

    async def rebase_chunks(
        self, run_id: str, payloads: Sequence[Mapping[str, Any]]
    ) -> dict[str, Sequence[PageRef]]:
        """The page references of every chunk the rebase payloads name
        (``journald.core.rebase_chunks``), each read and checked; a missing or damaged one is
        ``store_corrupted`` naming it (metadata ``chunk``)."""
        got = await self.read_chunks(run_id, referenced_chunks(payloads))
        return {sha: c.refs for sha, c in got.items()}

    async def resolver(self, run_id: str, payloads: Sequence[Mapping[str, Any]]) -> PageResolver:
        """A resolver for every page the payloads reference, through the chunks they name
        (read now, checked)."""
        chunks = await self.rebase_chunks(run_id, payloads)
        refs = referenced_pages(payloads, chunk_map_resolver(chunks))
        # a fold of rebases reads a whole conversation: from the store
        pages = decoded_resolver(await self.decoded(run_id, refs, cached=False))
        return with_chunks(pages, chunks) if chunks else pages

    async def put_rebase(self, run_id: str, rebase: PagedRebase) -> None:
        """A rebase's pages, then the page-reference chunks naming them, before the record."""
        await self.put(run_id, rebase.paged)
        await self.put_chunks(run_id, rebase.chunks)

    async def for_records(self, run_id: str, records: Sequence[Record]) -> PageResolver:
        """What the fold of ``records`` reads: of each paged rebase only the pages its open
        tail takes back (``rebase_chunks.open_refs``: none when its inline tail holds two
        messages) and, when they reach into its last chunk, that chunk; every other page
        stays sealed in the folded log (docs/design.md#lazy-rebases)."""
        payloads = [r.payload for r in records if r.kind == "rebase" and is_paged(r.payload)]
        last = [c for c in map(open_chunk, payloads) if c is not None]
        chunks = {sha: c.refs for sha, c in (await self.read_chunks(run_id, last)).items()}
        seen: dict[str, PageRef] = {}
        for p in payloads:
            for ref in open_refs(p, chunk_map_resolver(chunks)):
                seen.setdefault(ref.sha256, ref)
        # a fold reads from the store, not the cache (it finds a page gone from disk)
        pages = decoded_resolver(await self.decoded(run_id, seen.values(), cached=False))
        return with_chunks(pages, chunks) if chunks else pages

    async def messages(
        self, run_id: str, refs: Sequence[PageRef], cached: bool = True
    ) -> list[Message]:
        resolve = decoded_resolver(await self.decoded(run_id, refs, cached))
        out: list[Message] = []
        for ref in refs:
            out.extend(resolve(ref))
        return out

    # --- page-reference chunks (``journald.core.ref_chunks``) -----------------------------

    async def put_chunks(self, run_id: str, chunks: Iterable[RefChunk]) -> None:
        """Store the chunks (before anything names them; those the run holds are kept)."""
        for chunk in chunks:
            _, existed = await self.attachments.put(run_id, chunk.raw)
            self.written.pages += 1
            if not existed:
                self.written.new_pages += 1
                self.written.new_bytes += chunk.ref.size

    async def read_chunks(self, run_id: str, refs: Iterable[PageRef]) -> dict[str, RefChunk]:
        """Each chunk, checked; a missing or damaged one is ``store_corrupted`` naming it."""
        out: dict[str, RefChunk] = {}
        for ref in refs:
            if ref.sha256 in out:
                continue
            try:
                raw = await self.attachments.get(run_id, ref.sha256)
            except AttachmentNotFound:
                raise named_page_error(ref_chunk_missing(ref), run_id) from None
            except StoreCorrupted as exc:
                raise named_ref_chunk_error(exc, run_id, ref) from None
            try:
                out[ref.sha256] = decode_ref_chunk(ref, raw)
            except StoreCorrupted as exc:
                raise named_page_error(exc, run_id) from None
        return out

    async def load_chunks(
        self, run_id: str, log: MessageLog, start: int = 0, end: int | None = None
    ) -> ChunkPages:
        """Read the chunks holding ``[start, end)`` that ``log`` has not loaded, and hand them
        over (its cache is shared with its copies); every chunk of the range, for the same
        call's reads (a wide or concurrent read may push them out of the small cache)."""
        held = log.loaded_chunks(start, end)
        got = await self.read_chunks(run_id, log.missing_chunks(start, end))
        for chunk in got.values():
            log.provide_chunk(chunk.ref, chunk.refs)
        return held | {sha: c.refs for sha, c in got.items()}

    async def all_refs(self, run_id: str, log: MessageLog) -> tuple[PageRef, ...]:
        """Every page reference of ``log`` (every chunk read that it has not loaded; none
        kept): the whole-conversation paths."""
        got = await self.read_chunks(run_id, log.missing_chunks(0, log.chunked))
        return log.all_refs({sha: c.refs for sha, c in got.items()})

    # --- a sealed conversation (``journald.core.message_log``): read what a caller needs ----

    async def load(self, run_id: str, log: MessageLog, start: int = 0, end: int = -1) -> None:
        """Load (into the log's small caches) the chunks, then the pages, holding
        ``[start, end)`` (``end`` -1: the end), so the fold and small reads of them work."""
        end = len(log) if end < 0 else end
        chunks = await self.load_chunks(run_id, log, start, end)
        refs = log.missing(start, end, chunks)
        got = await self.decoded(run_id, refs)
        for ref in refs:
            log.provide(ref, got[ref.sha256])

    async def span(
        self, run_id: str, log: MessageLog, start: int, end: int, cached: bool = True
    ) -> Span:
        """Messages ``[start, end)`` widened to whole pages, reading only the chunks and
        pages holding them: what a window or a History page reads (page boundaries are
        clean, so alignment stays inside them). Reads a copy taken first: a held run's writer
        may seal more of its tail while the pages are read. ``cached``: as ``decoded``."""
        log = log.copy()
        chunks = await self.load_chunks(run_id, log, start, end)
        refs = log.missing(start, end, chunks)
        return log.span(start, end, await self.decoded(run_id, refs, cached), chunks)

    async def window(self, run_id: str, log: MessageLog, window: int) -> Sequence[Message]:
        """What a message window of ``window`` trailing messages (0: all) reads: from the
        store (a resume, once per lease, reads up to a whole conversation; it finds a page
        gone from disk)."""
        if not log.has_pages:
            return log
        if window <= 0:
            return await self.whole(run_id, log)
        return await self.span(run_id, log, len(log) - window, len(log), cached=False)

    async def whole(self, run_id: str, log: MessageLog) -> list[Message]:
        """Every message (governance of a whole conversation, a whole Fold, a checkpoint):
        every chunk and page read, none kept in the log's cache (a copy taken first, as
        ``span``)."""
        if not log.has_pages:
            return list(log)
        log = log.copy()
        out = await self.messages(run_id, list(await self.all_refs(run_id, log)), cached=False)
        out.extend(log.tail)
        return out

    async def whole_state(self, run_id: str, st: RunState) -> RunState:
        """``st`` with every message in memory (``st`` itself when none is sealed): for
        code that walks a whole conversation. A copy: folding into it changes nothing."""
        if not st.messages.has_pages:
            return st
        out = st.copy()
        out.messages = MessageLog(await self.whole(run_id, st.messages))
        return out

    async def seal(self, run_id: str, log: MessageLog) -> int:
        """Seal the front of a held run's tail into pages once it exceeds two pages, and the
        loose page references into a chunk once they fill one (each stored first, then
        referenced): how many pages were sealed."""
        paged = log.sealable()
        if paged is None:
            return 0
        await self.put(run_id, paged)
        log.seal(paged.refs)
        chunks = log.chunkable()
        if chunks:
            await self.put_chunks(run_id, chunks)
            log.seal_chunks(chunks)
        return len(paged.refs)

    # --- answered tool_use ids (``journald.core.answered``): a chain of chunks -----------------

    async def seal_answered(self, run_id: str, answered: AnsweredIds) -> int:
        """Seal a held run's answered-id tail into chunks once it holds a chunk's worth (the
        chunks stored first, then named): how many chunks were sealed."""
        chunks = answered.sealable()
        for chunk in chunks:
            _, existed = await self.attachments.put(run_id, chunk.raw)
            self.written.pages += 1
            if not existed:
                self.written.new_pages += 1
                self.written.new_bytes += chunk.ref.size
        answered.seal(chunks)
        return len(chunks)

    async def chain(self, run_id: str, head: PageRef | None) -> list[Chunk]:
        """Every chunk of the chain ``head`` names, newest first, each checked; a missing or
        damaged one is ``store_corrupted`` naming it."""
        out: list[Chunk] = []
        seen: set[str] = set()
        ref = head
        while ref is not None and ref.sha256 not in seen:  # content-addressed: no cycle
            seen.add(ref.sha256)
            try:
                raw = await self.attachments.get(run_id, ref.sha256)
            except AttachmentNotFound:
                raise named_page_error(chunk_missing(ref), run_id) from None
            except StoreCorrupted as exc:
                raise named_chunk_error(exc, run_id, ref) from None
            try:
                out.append(decode_chunk(ref, raw))
            except StoreCorrupted as exc:
                raise named_page_error(exc, run_id) from None
            ref = out[-1].prev
        return out

    async def load_answered(self, run_id: str, answered: AnsweredIds) -> None:
        """Read every chunk of ``answered`` so the fold can ask it about any id (the rare
        path: a duplicate or unknown result folded after a snapshot)."""
        chunks = await self.chain(run_id, answered.head)
        answered.load(t for c in chunks for t in c.ids)

    async def check_snapshot(self, run_id: str, doc: Mapping[str, Any] | None) -> int:
        """Every page-reference chunk and answered-id chunk the run's fold snapshot document
        (the index part, as ``load_mark(run_id, SNAPSHOT)`` returns it) names exists and
        hashes right
        (``store_corrupted`` naming the first that does not); how many were checked."""
        snap = doc.get("snapshot") if doc else None
        chunks = await self.read_chunks(run_id, snapshot_chunks(snap))
        return len(chunks) + len(await self.chain(run_id, snapshot_answered_head(snap)))

    async def drop_unreadable_snapshot(self, run_id: str, checkpoints: CheckpointStore) -> bool:
        """Drop the run's fold snapshot when a chunk (page references, answered ids) it names
        cannot be read
        (``Recover``: the snapshot is a cache, and the next fold starts from seq 1 and the
        next lease end writes a new one); whether it was dropped."""
        try:
            await self.check_snapshot(run_id, await checkpoints.load_mark(run_id, SNAPSHOT))
        except StoreCorrupted:
            await checkpoints.save_mark(run_id, {"snapshot": None}, SNAPSHOT)
            return True
        return False

    async def check(self, run_id: str, records: Sequence[Record]) -> int:
        """Every page-reference chunk and page the records reference exists and hashes right
        (``store_corrupted`` naming the first that does not); how many were checked."""
        payloads = [r.payload for r in records if r.kind == "rebase"]
        chunks = await self.rebase_chunks(run_id, payloads)
        refs = referenced_pages(payloads, chunk_map_resolver(chunks))
        await self.read(run_id, refs)
        return len(refs) + len(chunks)

    async def check_run(
        self, store: Store, run_id: str, checkpoints: CheckpointStore | None = None
    ) -> int:
        """``check`` for every rebase of a stored run (``Verify``), and with ``checkpoints``
        (where its fold snapshot is kept) every chunk (page references, answered ids) the
        snapshot names."""
        rebases = [r async for r in store.iter_records(run_id) if r.kind == "rebase"]
        n = await self.check(run_id, rebases)
        if checkpoints is not None:
            n += await self.check_snapshot(run_id, await checkpoints.load_mark(run_id, SNAPSHOT))
        return n


def named_page_error(
    exc: StoreCorrupted, run_id: str, ref: PageRef | None = None
) -> StoreCorrupted:
    """``exc`` (a page's ``store_corrupted``) naming the run, and the page when ``ref``."""
    exc.metadata.setdefault("run_id", run_id)
    if ref is not None:
        exc.metadata.setdefault("page", ref.sha256)
        exc.message = f"message page {ref.sha256} of run {run_id}: {exc.message}"
    elif run_id not in exc.message:
        exc.message = f"run {run_id}: {exc.message}"
    return exc


def named_chunk_error(exc: StoreCorrupted, run_id: str, ref: PageRef) -> StoreCorrupted:
    """``exc`` (reading an answered-id chunk) naming the run and the chunk."""
    exc.metadata.setdefault("run_id", run_id)
    exc.metadata.setdefault("chunk", ref.sha256)
    exc.message = f"answered-id chunk {ref.sha256} of run {run_id}: {exc.message}"
    return exc


def named_ref_chunk_error(exc: StoreCorrupted, run_id: str, ref: PageRef) -> StoreCorrupted:
    """``exc`` (reading a page-reference chunk) naming the run and the chunk."""
    exc.metadata.setdefault("run_id", run_id)
    exc.metadata.setdefault("chunk", ref.sha256)
    exc.message = f"message-page reference chunk {ref.sha256} of run {run_id}: {exc.message}"
    return exc


class PagedCheckpoints:
    """A checkpoint store whose checkpoints hold page references (``CheckpointStore``)."""

    def __init__(
        self, inner: CheckpointStore, attachments: AttachmentStore, pages: PageStore | None = None
    ) -> None:
        self.inner = inner
        self.pages = pages if pages is not None else PageStore(attachments)

    def __getattr__(self, name: str) -> Any:  # a backend's extras (follow, sweep, bucket)
        return getattr(self.inner, name)

    async def put(self, cp: Checkpoint) -> None:
        """The pages first, then the checkpoint naming them."""
        if cp.pages:  # already in stored form (a copy of a stored checkpoint)
            await self.inner.put(cp)
            return
        paged = await self.pages.write(cp.meta.run_id, cp.messages)
        await self.inner.put(Checkpoint(cp.meta, paged.tail, cp.provenance, paged.refs))

    async def get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        cp = await self.inner.get(run_id, checkpoint_id)
        if not cp.pages:
            return cp
        head = await self.pages.messages(run_id, cp.pages, cached=False)
        return resolved(cp, [*head, *cp.messages], f"{run_id}/{checkpoint_id}")

    async def list(self, run_id: str) -> list[CheckpointMeta]:
        return await self.inner.list(run_id)

    async def delete(self, run_id: str, checkpoint_id: str) -> bool:
        return await self.inner.delete(run_id, checkpoint_id)

    async def owner(self, checkpoint_id: str) -> str | None:
        return await self.inner.owner(checkpoint_id)

    async def drop_run(self, run_id: str) -> None:
        await self.inner.drop_run(run_id)

    async def save_mark(self, run_id: str, mark: dict[str, Any], part: str = MARKS) -> None:
        await self.inner.save_mark(run_id, mark, part)

    async def load_mark(self, run_id: str, part: str = MARKS) -> dict[str, Any] | None:
        return await self.inner.load_mark(run_id, part)

    async def newest_id(self) -> str | None:
        return await self.inner.newest_id()


def paged_checkpoints(
    checkpoints: CheckpointStore, attachments: AttachmentStore
) -> CheckpointStore:
    if isinstance(checkpoints, PagedCheckpoints):
        return checkpoints
    return PagedCheckpoints(checkpoints, attachments)
