"""A writer's own rebase (reason ``edit``) stored with message pages, like the daemon's
(docs/design.md#message-pages).

A writer sends an ``edit`` rebase with its whole conversation inline (a framework session
rewriting its items); the daemon cuts it into pages, stores them before the record, and
appends the rebase holding page references and a short tail. The cut is deterministic, so a
retry of the same rebase builds the same record and is answered as a duplicate, and a
conversation of any size fits the record limit (the request itself is bounded by
``--max-message-bytes``). The acknowledged hash is that of the stored (paged) record.
"""

from __future__ import annotations

from collections.abc import Sequence

from journald_proto import journal_pb2 as pb

from journald.core.errors import JournaldError
from journald.core.pages import Paged, PageResolver, bytes_resolver, cut, paged_payload
from journald.core.records import Record, make_record
from journald.server.convert import payload_from_pb
from journald.storage.pages import PageStore


async def page_rebases(
    pages: PageStore, run_id: str, records: Sequence[pb.Record]
) -> tuple[dict[int, Paged], PageResolver | None]:
    """The paged form of every rebase in ``records`` (by index), its pages stored, and a
    resolver for them; a record that does not decode is left to the append to refuse."""
    out: dict[int, Paged] = {}
    data: dict[str, bytes] = {}
    for i, r in enumerate(records):
        if r.WhichOneof("payload") != "rebase":
            continue
        try:
            _, payload = payload_from_pb(r)
        except JournaldError:
            continue
        paged = cut(payload["messages"])
        if not paged.refs:
            continue  # short enough to stay inline as the tail alone
        await pages.put(run_id, paged)
        out[i] = paged
        data.update(paged.data)
    return out, (bytes_resolver(data) if data else None)


def paged_record(rec: Record, paged: Paged) -> Record:
    """``rec`` (a rebase with inline messages) holding ``paged`` instead."""
    base = {k: v for k, v in rec.payload.items() if k != "messages"}
    return make_record(rec.seq, rec.kind, paged_payload(base, paged), rec.prev, rec.ts, rec.trace)
