"""Where message pages live: the run's content-addressed attachment store
(docs/design.md#message-pages).

A page's address is the SHA-256 of its bytes, which is exactly how the attachment store
addresses what it keeps, so every backend stores pages without code of its own (file: the
run's ``attachments/``; JetStream: ``<STREAM>_ATTACHMENTS``; memory: memory), once per run,
and they go with the run (``Delete``) like attachments do.

``PageStore`` writes a conversation's pages (before the record or checkpoint that references
them: a crash in between leaves pages no one references, never a reference without its page)
and reads them back checked. ``PagedCheckpoints`` wraps a backend's checkpoint store so that
every checkpoint is stored as page references plus a tail and read back whole, for every
caller (the daemon, ``migrate``, the prune hook).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from journald.core.checkpoints import Checkpoint, CheckpointMeta, Message, resolved
from journald.core.errors import AttachmentNotFound, StoreCorrupted
from journald.core.pages import (
    Paged,
    PageRef,
    PageResolver,
    bytes_resolver,
    cut,
    decode_page,
    page_missing,
    referenced_pages,
)
from journald.core.records import Record
from journald.storage.base import Store
from journald.storage.checkpoint_base import MARKS, AttachmentStore, CheckpointStore


@dataclass(slots=True)
class PageWrites:
    """What one ``PageStore.write`` stored: pages new to the run and their bytes."""

    pages: int = 0
    new_pages: int = 0
    new_bytes: int = 0


class PageStore:
    def __init__(self, attachments: AttachmentStore) -> None:
        self.attachments = attachments
        self.written = PageWrites()
        """Running totals (the benchmark reads them)."""

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

    async def read(self, run_id: str, refs: Iterable[PageRef]) -> dict[str, bytes]:
        """The bytes of each page, checked; a missing or damaged one is ``store_corrupted``
        naming it."""
        out: dict[str, bytes] = {}
        for ref in refs:
            if ref.sha256 in out:
                continue
            try:
                raw = await self.attachments.get(run_id, ref.sha256)
            except AttachmentNotFound:
                raise named_page_error(page_missing(ref), run_id) from None
            except StoreCorrupted as exc:
                raise named_page_error(exc, run_id, ref) from None
            try:
                decode_page(ref, raw)
            except StoreCorrupted as exc:
                raise named_page_error(exc, run_id) from None
            out[ref.sha256] = raw
        return out

    async def resolver(self, run_id: str, payloads: Sequence[Mapping[str, Any]]) -> PageResolver:
        """A resolver for every page the payloads reference (read now, checked)."""
        return bytes_resolver(await self.read(run_id, referenced_pages(payloads)))

    async def for_records(self, run_id: str, records: Sequence[Record]) -> PageResolver:
        return await self.resolver(run_id, [r.payload for r in records if r.kind == "rebase"])

    async def messages(self, run_id: str, refs: Sequence[PageRef]) -> list[Message]:
        resolve = bytes_resolver(await self.read(run_id, refs))
        out: list[Message] = []
        for ref in refs:
            out.extend(resolve(ref))
        return out

    async def check(self, run_id: str, records: Sequence[Record]) -> int:
        """Every page the records reference exists and hashes right (``store_corrupted``
        naming the first that does not); how many were checked."""
        refs = referenced_pages([r.payload for r in records if r.kind == "rebase"])
        await self.read(run_id, refs)
        return len(refs)

    async def check_run(self, store: Store, run_id: str) -> int:
        """``check`` for every rebase of a stored run (``Verify``)."""
        rebases = [r async for r in store.iter_records(run_id) if r.kind == "rebase"]
        return await self.check(run_id, rebases)


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


class PagedCheckpoints:
    """A checkpoint store whose checkpoints hold page references (``CheckpointStore``)."""

    def __init__(self, inner: CheckpointStore, attachments: AttachmentStore) -> None:
        self.inner = inner
        self.pages = PageStore(attachments)

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
        head = await self.pages.messages(run_id, cp.pages)
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
