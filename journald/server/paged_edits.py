"""A writer's own rebase (reason ``edit``) stored with message pages, like the daemon's
(docs/design.md#message-pages).

A writer sends an ``edit`` rebase with its whole conversation inline (a framework session
rewriting its items); the daemon cuts it into pages, stores them before the record, and
appends the rebase holding page references and a short tail. The cut is deterministic, so a
retry of the same rebase builds the same record and is answered as a duplicate, and a
conversation of any size fits the record limit (the request itself is bounded by
``--max-message-bytes``). The acknowledged hash is that of the stored (paged) record.

Page references are the daemon's: a sent rebase that carries ``pages`` (a paged rebase read
back with Load and appended again) is refused, since the daemon could not tell a reference
to a page the run holds from one it never stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from journald.core.errors import InvalidRecord
from journald.core.pages import PageResolver, bytes_resolver, cut
from journald.core.rebase_chunks import FIELD, rebase_payload, with_chunks
from journald.core.ref_chunks import RefChunk
from journald.storage.pages import PageStore
from journald.writer.gate import Incoming, at_index


async def page_rebases(
    pages: PageStore, run_id: str, items: Sequence[Incoming]
) -> tuple[list[Incoming], PageResolver | None]:
    """``items`` with every rebase longer than one page in paged form, its pages stored, and
    a resolver for them (None when no rebase was paged)."""
    out: list[Incoming] = []
    data: dict[str, bytes] = {}
    chunks: list[RefChunk] = []
    for item in items:
        for name in ("pages", FIELD):
            if item.kind == "rebase" and name in item.payload:
                raise _sent_pages(item, name)
        msgs = item.payload.get("messages") if item.kind == "rebase" else None
        paged = cut(msgs) if isinstance(msgs, list) else None
        if paged is None or not paged.refs:
            out.append(item)  # short enough to stay inline as the tail alone
            continue
        base = {k: v for k, v in item.payload.items() if k != "messages"}
        payload, rebase = rebase_payload(base, paged)
        await pages.put_rebase(run_id, rebase)  # pages, then chunks, before the record
        data.update(paged.data)
        chunks.extend(rebase.chunks)
        out.append(replace(item, payload=payload))
    if not data:
        return out, None
    return out, (with_chunks(bytes_resolver(data), chunks) if chunks else bytes_resolver(data))


def _sent_pages(item: Incoming, name: str) -> InvalidRecord:
    field = f"records[{item.index}].rebase.{name}"
    what = "message page references" if name == "pages" else "page-reference chunks"
    err = InvalidRecord(
        f"field rebase.{name}: {what} are written by the daemon; send the "
        "whole conversation in rebase.messages (the daemon stores a long one as pages)",
        metadata={"field": field},
    )
    at_index(err, item.index, item.seq)  # "records[i] (seq N): ...", the seq in metadata
    return err
