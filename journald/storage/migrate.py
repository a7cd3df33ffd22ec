"""Copy runs between stores (file <-> JetStream), byte for byte, verified on both sides.

``journald migrate --from file:DIR --to jetstream:URL/STREAM [RUN_ID ...]`` (and the reverse,
or stream to stream; the NATS flags are ``journald serve``'s: ``--nats-creds``, ``--nats-user``,
``--nats-tls-*``, secrets from the environment). A location is ``NAME:REST`` of any backend
of ``journald.storage.registry``; ``--to memory:`` copies into memory, so it verifies every
run on both sides and writes nothing.

A JetStream source is opened read-only: its configuration is not checked for writing (each
problem is printed as a note), and a stream whose retention is not ``limits`` is read with
message gets, never a consumer. That is the way out of a stream journald refuses to bind
because its retention cannot be edited: copy the runs to a directory, recreate the stream,
copy them back (the refusal prints those four commands).

Each run is verified on the source (hash chain and schemas), copied record by record with the
source's canonical bytes (both backends store exactly ``Record.raw``), and verified on the
destination; the destination's last hash must equal the source's, which pins every byte of
the chain. A run that already exists at the destination is refused before anything is
written (nothing is ever overwritten); a copy that fails half-way is deleted from the
destination so the migration can simply be run again. Writers should be stopped while their
runs migrate: the copy is of what the source holds when it is read.

A run moves with its side data (``SideStores``): every checkpoint (same id, same
``encode_file`` bytes: read back from the destination and compared, and its content hash
recomputed) and every attachment its records or checkpoints reference (read back and its
SHA-256 checked). The file side is the run's own ``checkpoints/`` and ``attachments/``; the
JetStream side is the stream's buckets (``journald.storage.jetstream.buckets``; a source stream
without buckets has no side data). Checkpoints and attachments are write-once with the same
bytes accepted again, so a migration interrupted after some of them is simply run again once
the half copy has been deleted (which the failure does itself).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any, Protocol

from journald.core.checkpoints import content_hash, encode_file
from journald.core.errors import AttachmentNotFound, SessionExists, StoreCorrupted
from journald.core.rebase_chunks import chunk_map_resolver, referenced_pages
from journald.core.records import GENESIS, Record, sha256_hex, validate_id
from journald.storage.base import Store
from journald.storage.checkpoint_base import OWNER, AttachmentStore, CheckpointStore
from journald.storage.jetstream.options import NatsOptions
from journald.storage.pages import PageStore
from journald.storage.registry import OpenedBackend, open_backend, parse_location

BATCH = 64


class Progress(Protocol):
    """What the copy reports its progress to: one task per run in flight and one for the
    runs overall (a ``rich.progress.Progress`` is one; ``journald.cli.migrate`` shows it)."""

    def add_task(self, description: str, *, total: float | None) -> Any: ...

    def advance(self, task_id: Any, advance: float = 1) -> None: ...

    def remove_task(self, task_id: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class MigratedRun:
    run_id: str
    records: int
    bytes: int
    last_hash: str
    checkpoints: int = 0
    attachments: int = 0


@dataclass(frozen=True, slots=True)
class SideStores:
    """Where one location keeps its runs' checkpoints and attachments (None: it has none)."""

    checkpoints: CheckpointStore | None = None
    attachments: AttachmentStore | None = None

    @classmethod
    def of(cls, opened: OpenedBackend) -> SideStores:
        return cls(opened.checkpoints, opened.attachments)


def referenced_digests(value: object) -> set[str]:
    """The SHA-256 of every attachment block anywhere in a record payload or message list."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("type") == "attachment" and isinstance(item.get("sha256"), str):
                found.add(item["sha256"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


async def _copy_side(
    run_id: str, records: Sequence[Record], src: SideStores, dst: SideStores
) -> tuple[int, int]:
    """Copy the run's checkpoints and referenced attachments; each is read back from the
    destination and compared. Returns (checkpoints, attachments) copied."""
    digests: set[str] = set()
    for rec in records:
        digests |= referenced_digests(rec.payload)
    if src.attachments is not None:
        # message pages go with the records that reference them, as do the attachments
        # their messages name (docs/design.md#message-pages)
        rebases = [r.payload for r in records if r.kind == "rebase"]
        store = PageStore(src.attachments)
        chunks = await store.rebase_chunks(run_id, rebases)  # named by rebases of 128+ pages
        digests |= set(chunks)
        refs = referenced_pages(rebases, chunk_map_resolver(chunks))
        pages = await store.read(run_id, refs)
        for digest, raw in pages.items():
            digests.add(digest)
            digests |= referenced_digests(json.loads(raw))
    copied_cps = 0
    if src.checkpoints is not None and dst.checkpoints is not None:
        for meta in await src.checkpoints.list(run_id):
            cp = await src.checkpoints.get(run_id, meta.checkpoint_id)
            await dst.checkpoints.put(cp)
            back = await dst.checkpoints.get(run_id, meta.checkpoint_id)
            if encode_file(back) != encode_file(cp) or content_hash(back.messages) != meta.hash:
                raise StoreCorrupted(
                    f"run {run_id}: checkpoint {meta.checkpoint_id} reads back from the "
                    "destination different from the source",
                    metadata={"run_id": run_id, "checkpoint_id": meta.checkpoint_id},
                )
            digests |= referenced_digests(cp.messages)
            copied_cps += 1
        # the uid the run belongs to on a shared daemon (docs/design.md#who-may-talk-to-whom)
        owner = await src.checkpoints.load_mark(run_id, OWNER)
        if owner is not None:
            await dst.checkpoints.save_mark(run_id, owner, OWNER)
    copied_atts = 0
    if src.attachments is not None and dst.attachments is not None:
        for digest in sorted(digests):
            try:
                data = await src.attachments.get(run_id, digest)
            except AttachmentNotFound:
                continue  # referenced but never uploaded: nothing to carry
            await dst.attachments.put(run_id, data)
            if sha256_hex(await dst.attachments.get(run_id, digest)) != digest:
                raise StoreCorrupted(
                    f"run {run_id}: attachment {digest} reads back from the destination "
                    "with other bytes",
                    metadata={"run_id": run_id, "sha256": digest},
                )
            copied_atts += 1
    return copied_cps, copied_atts


def _check_whole(run_id: str, records: Sequence[Record]) -> None:
    """A run migrates whole: seqs 1..n, one unbroken chain from the genesis hash."""
    prev = GENESIS
    for i, rec in enumerate(records, start=1):
        if rec.seq != i or rec.prev != prev:
            raise StoreCorrupted(
                f"run {run_id} cannot be migrated: its records are not one unbroken chain "
                f"from seq 1 (at seq {rec.seq}); a pruned or repaired run keeps its history "
                "only in its source backend",
                metadata={"run_id": run_id, "seq": rec.seq},
            )
        prev = rec.hash


async def _copy_run(
    src: Store,
    dst: Store,
    run_id: str,
    progress: Progress | None,
    overall: Any,
    sides: tuple[SideStores, SideStores],
) -> MigratedRun:
    before = await src.verify(run_id)
    records = await src.load(run_id)
    records = [r for r in records if r.seq <= before.last_seq]
    _check_whole(run_id, records)
    task = progress.add_task(f"{run_id}", total=len(records)) if progress is not None else None
    journal = await dst.create(records[0])
    try:
        if progress is not None and task is not None:
            progress.advance(task)
        for i in range(1, len(records), BATCH):
            batch = records[i : i + BATCH]
            results = await journal.append(batch)
            for rec, res in zip(batch, results, strict=True):
                if res.hash != rec.hash:
                    raise StoreCorrupted(
                        f"run {run_id}: the destination stored seq {rec.seq} with hash "
                        f"{res.hash}, not the source's {rec.hash}",
                        metadata={"run_id": run_id, "seq": rec.seq},
                    )
            if progress is not None and task is not None:
                progress.advance(task, len(batch))
        await journal.close()
        side_counts = await _copy_side(run_id, records, *sides)
    except BaseException:
        await journal.close()
        with suppress(Exception):
            await dst.delete(run_id)  # leave nothing half-copied behind
        for side in (sides[1].checkpoints, sides[1].attachments):
            if side is not None:
                with suppress(Exception):
                    await side.drop_run(run_id)
        raise
    after = await dst.verify(run_id)
    if (after.last_seq, after.last_hash) != (before.last_seq, before.last_hash):
        raise StoreCorrupted(
            f"run {run_id}: the copy ends at seq {after.last_seq} hash {after.last_hash}, the "
            f"source at seq {before.last_seq} hash {before.last_hash}; the destination copy "
            "was kept for inspection",
            metadata={"run_id": run_id},
        )
    if progress is not None and overall is not None:
        progress.advance(overall)
    if progress is not None and task is not None:
        progress.remove_task(task)  # one bar per run in flight, not one line per run done
    size = sum(len(r.raw) for r in records)
    return MigratedRun(run_id, len(records), size, after.last_hash, *side_counts)


async def migrate(
    src: Store,
    dst: Store,
    run_ids: list[str] | None = None,
    progress: Progress | None = None,
    sides: tuple[SideStores, SideStores] = (SideStores(), SideStores()),
) -> list[MigratedRun]:
    """Copy ``run_ids`` (default: every run of ``src``) to ``dst``, with their checkpoints and
    attachments from ``sides[0]`` to ``sides[1]`` (``SideStores.of`` an opened location).

    Refuses with ``SessionExists`` (naming every clash) before writing anything if any run
    already exists in ``dst``; raises ``StoreCorrupted`` if a chain does not verify on either
    side. ``progress`` (e.g. ``journald.cli.migrate.new_progress()``) shows one bar per run.
    """
    if run_ids is None:
        ids = [info.run_id for info in await src.list()]
        ids.reverse()  # oldest first
    else:
        ids = [validate_id(r) for r in run_ids]
    clashes = [r for r in ids if await dst.exists(r)]
    if clashes:
        raise SessionExists(
            f"{len(clashes)} run(s) already exist at the destination: {', '.join(clashes)}; "
            "migrate never overwrites: delete them there first or leave them out",
            metadata={"run_ids": ",".join(clashes)},
        )
    for r in ids:
        if not await src.exists(r):
            await src.load(r)  # raises SessionNotFound naming the run
    overall = progress.add_task("runs", total=len(ids)) if progress is not None else None
    out: list[MigratedRun] = []
    for run_id in ids:
        out.append(await _copy_run(src, dst, run_id, progress, overall, sides))
    return out


async def open_location(
    text: str, options: NatsOptions | None = None, *, source: bool = False
) -> OpenedBackend:
    """Open a store location (``NAME:REST`` of a registered backend); a JetStream source is
    bound read-only, so runs can be copied out of a stream journald would refuse to write
    (its refusal prints that route)."""
    name, opts = parse_location(text)
    return await open_backend(name, replace(opts, nats=options, read_only=source))
